//! The server on the OpenCL engine (PoCL in CI), the device-failure fallback, and the
//! behaviour without any OpenCL platform.

mod common;

use std::process::{Command, Stdio};

use common::{assert_healthy, Hkv};

/// Whether hkv can start on the OpenCL engine here; with HKV_REQUIRE_OPENCL=1 (CI) it must.
fn have_opencl() -> bool {
    let up = starts_on_opencl();
    if !up && std::env::var("HKV_REQUIRE_OPENCL").as_deref() == Ok("1") {
        panic!("HKV_REQUIRE_OPENCL=1 but hkv cannot start on the OpenCL engine");
    }
    up
}

fn starts_on_opencl() -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(["-p", "0", "--engine", "opencl", "-t", "1", "-A"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = out else { return false };
    let mut line = String::new();
    use std::io::BufRead;
    let _ = std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
    let _ = child.kill();
    let _ = child.wait();
    line.contains("listening")
}

fn stat(h: &Hkv, group: &str, name: &str) -> String {
    h.connect()
        .stat(group, name)
        .unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn serves_clients_on_the_opencl_engine() {
    if !have_opencl() {
        eprintln!("no OpenCL device: the OpenCL engine test did not run");
        return;
    }
    let h = Hkv::start(&["--engine", "opencl", "-t", "2"]);
    assert!(stat(&h, "hkv", "engine").starts_with("opencl:"));
    let mut c = h.connect();
    for i in 0..300 {
        c.expect(
            &format!("set k{i} {i} 0 {}\r\n{i}\r\n", i.to_string().len()),
            "STORED\r\n",
        );
    }
    for i in (0..300).step_by(3) {
        c.expect(&format!("delete k{i}\r\n"), "DELETED\r\n");
    }
    for i in 0..300 {
        let want = if i % 3 == 0 {
            "END\r\n".to_string()
        } else {
            format!("VALUE k{i} {i} {}\r\n{i}\r\nEND\r\n", i.to_string().len())
        };
        c.expect(&format!("get k{i}\r\n"), &want);
    }
    c.expect("incr k1 5\r\n", "6\r\n");
    c.expect("flush_all\r\nget k1\r\n", "OK\r\nEND\r\n");
    assert_healthy(&h);
}

#[test]
fn a_failing_device_falls_back_to_the_cpu_and_loses_no_item() {
    if !have_opencl() {
        eprintln!("no OpenCL device: the fallback test did not run");
        return;
    }
    // The device fails after 40 kernel launches: in the middle of the writes below (every
    // index task placed on the device; `auto` would time both processors at start-up).
    let h = Hkv::start_with_env(
        &["--engine", "opencl", "-t", "2", "--placement", "device"],
        &[("HKV_OPENCL_FAIL_AFTER", "40")],
    );
    let mut c = h.connect();
    for i in 0..400 {
        c.expect(
            &format!("set f{i} 0 0 {}\r\n{i}\r\n", i.to_string().len()),
            "STORED\r\n",
        );
    }
    for i in 0..400 {
        c.expect(
            &format!("get f{i}\r\n"),
            &format!("VALUE f{i} 0 {}\r\n{i}\r\nEND\r\n", i.to_string().len()),
        );
    }
    assert_eq!(stat(&h, "hkv", "engine"), "cpu");
    assert!(stat(&h, "hkv", "engine_fallbacks").parse::<u64>().unwrap() >= 1);
    assert_eq!(stat(&h, "", "curr_items"), "400");
    assert_healthy(&h);
}

#[test]
fn without_an_opencl_platform_auto_uses_the_cpu_and_opencl_refuses_to_start() {
    let empty = std::env::temp_dir().join(format!("hkv-no-icd-server-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let vendors = empty.to_str().unwrap();
    let h = Hkv::start_with_env(&["--engine", "auto"], &[("OCL_ICD_VENDORS", vendors)]);
    assert_eq!(stat(&h, "hkv", "engine"), "cpu");
    assert_healthy(&h);
    let out = Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(["-p", "0", "--engine", "opencl"])
        .env("OCL_ICD_VENDORS", vendors)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("OpenCL"), "unclear error: {err}");
}

#[test]
fn placement_is_checked_at_start_reported_and_obeyed_per_task() {
    let out = Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(["-p", "0", "--placement", "KC=fpga"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("placement") && err.contains("fpga"),
        "unclear error: {err}"
    );
    // The documented example configuration parses, placement included, and a flag wins.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/hkv.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args([
            "--config",
            example,
            "--placement",
            "IN=device",
            "--print-config",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("placement = \"IN=device\""), "{printed}");
    if !have_opencl() {
        eprintln!("no OpenCL device: the placement test did not run");
        return;
    }
    let h = Hkv::start(&[
        "--engine",
        "opencl",
        "-t",
        "1",
        "--placement",
        "search=device,insert=cpu",
    ]);
    assert_eq!(
        stat(&h, "hkv", "placement"),
        "search=device,insert=cpu,delete=auto,KC=auto,RD=auto"
    );
    // PoCL shares host memory: the CPU's own table. A discrete GPU searches a mirror of it.
    let table = stat(&h, "hkv", "placement_table");
    assert!(table == "shared" || table == "mirror", "{table}");
    assert_eq!(
        stat(&h, "hkv", "placement_shared_table"),
        if table == "shared" { "1" } else { "0" }
    );
    let current = stat(&h, "hkv", "placement_current");
    assert!(
        current == "cpu" || current == "device" || current.starts_with("search="),
        "{current}"
    );
    let mut c = h.connect();
    let mut batch = String::new();
    let mut want = String::new();
    for i in 0..200 {
        batch += &format!("set p{i} 0 0 {}\r\n{i}\r\n", i.to_string().len());
        want += "STORED\r\n";
    }
    c.expect(&batch, &want);
    let keys: Vec<String> = (0..200).map(|i| format!("p{i}")).collect();
    let got = c.call(&format!("get {}\r\n", keys.join(" ")), "END\r\n");
    assert_eq!(got.matches("VALUE ").count(), 200, "{got}");
    let n = |name: &str| stat(&h, "hkv", name).parse::<u64>().unwrap();
    assert!(n("placement_search_device_batches") > 0);
    assert_eq!(n("placement_search_cpu_batches"), 0);
    assert_eq!(n("placement_insert_device_batches"), 0);
    if table == "shared" {
        // PoCL is a CPU device: its searches are shared with the partition's thread.
        assert_eq!(stat(&h, "hkv", "placement_steals"), "1");
        assert!(n("placement_chunks_host") + n("placement_chunks_device") >= 4);
    } else {
        assert!(n("placement_mirror_bytes") > 0);
    }
    assert_healthy(&h);
}

/// A device that cannot read host memory (a discrete GPU; PoCL with HKV_OPENCL_SHARE=0)
/// searches a copy of the CPU's table: every write stays on the CPU, each read is answered
/// as the CPU would, and when the device fails the server carries on with every item.
#[test]
fn a_mirrored_device_table_serves_every_read_and_its_failure_loses_nothing() {
    if !have_opencl() {
        eprintln!("no OpenCL device: the mirror test did not run");
        return;
    }
    for fail_after in [None, Some("60")] {
        let mut env = vec![("HKV_OPENCL_SHARE", "0")];
        env.extend(fail_after.map(|n| ("HKV_OPENCL_FAIL_AFTER", n)));
        let h = Hkv::start_with_env(
            &[
                "--engine",
                "opencl",
                "-t",
                "2",
                "--placement",
                "search=device",
            ],
            &env,
        );
        if fail_after.is_none() {
            assert_eq!(stat(&h, "hkv", "placement_table"), "mirror");
        }
        let mut c = h.connect();
        for round in 0..3 {
            let mut batch = String::new();
            let mut want = String::new();
            for i in 0..400 {
                let v = format!("{i}-{round}");
                batch += &format!("set m{i} {i} 0 {}\r\n{v}\r\n", v.len());
                want += "STORED\r\n";
            }
            c.expect(&batch, &want);
            c.expect(&format!("delete m{round}\r\n"), "DELETED\r\n");
            let keys: Vec<String> = (0..410).map(|i| format!("m{i}")).collect();
            let mut want = String::new();
            for i in (0..400).filter(|&i| i != round) {
                let v = format!("{i}-{round}");
                want += &format!("VALUE m{i} {i} {}\r\n{v}\r\n", v.len());
            }
            want += "END\r\n";
            c.expect(&format!("get {}\r\n", keys.join(" ")), &want);
            // Batches of one read each: enough device calls for the failure to land in
            // the middle of these rounds.
            for i in (10..400).step_by(13) {
                let v = format!("{i}-{round}");
                c.expect(
                    &format!("get m{i}\r\n"),
                    &format!("VALUE m{i} {i} {}\r\n{v}\r\nEND\r\n", v.len()),
                );
            }
        }
        let n = |name: &str| stat(&h, "hkv", name).parse::<u64>().unwrap();
        assert_eq!(stat(&h, "", "curr_items"), "399");
        if fail_after.is_some() {
            assert_eq!(stat(&h, "hkv", "engine"), "cpu");
            assert!(n("engine_fallbacks") >= 1);
        } else {
            assert!(n("placement_search_device_batches") > 0);
            assert_eq!(n("placement_insert_device_batches"), 0);
            assert_eq!(n("placement_delete_device_batches"), 0);
            assert!(n("placement_mirror_bytes") > 0);
        }
        assert_healthy(&h);
    }
}

/// KC and RD placed on the device (kernels over the shared arena) answer exactly what the
/// CPU would: small and large values (the largest past what device RD copies), misses,
/// expired items, a key set twice, with RD on either processor.
#[test]
fn kc_and_rd_on_the_device_answer_every_read_as_the_cpu_does() {
    if !have_opencl() {
        eprintln!("no OpenCL device: the KC/RD placement test did not run");
        return;
    }
    let probe = Hkv::start(&["--engine", "opencl", "-t", "1"]);
    if stat(&probe, "hkv", "placement_table") != "shared" {
        // KC and RD read items where they lie: only a device sharing host memory can.
        eprintln!("the device does not share host memory: no KC/RD kernels to place");
        return;
    }
    drop(probe);
    for placement in [
        "IN=cpu,KC=device,RD=device",
        "IN=cpu,KC=device,RD=cpu",
        "IN=cpu,KC=cpu,RD=device",
    ] {
        let h = Hkv::start(&["--engine", "opencl", "-t", "1", "--placement", placement]);
        let mut c = h.connect();
        let value = |i: usize| -> String {
            let len = [1, 100, 5000, 70_000, 300_000][i % 5];
            (0..len)
                .map(|b| (b'a' + ((b + i) % 26) as u8) as char)
                .collect()
        };
        for i in 0..60 {
            let v = value(i);
            c.expect(
                &format!("set kr{i} {i} 0 {}\r\n{v}\r\n", v.len()),
                "STORED\r\n",
            );
        }
        c.expect("set kr0 5 0 3\r\nnew\r\n", "STORED\r\n");
        c.expect("set gone 0 -1 1\r\nx\r\n", "STORED\r\n");
        let keys: Vec<String> = (0..60)
            .map(|i| format!("kr{i}"))
            .chain(["nothere".to_string(), "gone".to_string(), "kr0".to_string()])
            .collect();
        let mut want = String::new();
        for k in &keys {
            let i: Option<usize> = k.strip_prefix("kr").and_then(|n| n.parse().ok());
            match i {
                Some(0) => want += "VALUE kr0 5 3\r\nnew\r\n",
                Some(i) => {
                    let v = value(i);
                    want += &format!("VALUE kr{i} {i} {}\r\n{v}\r\n", v.len());
                }
                None => {}
            }
        }
        want += "END\r\n";
        for _ in 0..3 {
            c.expect(&format!("get {}\r\n", keys.join(" ")), &want);
        }
        let n = |name: &str| stat(&h, "hkv", name).parse::<u64>().unwrap();
        for (task, on) in ["kc", "rd"].into_iter().zip(placement.split(',').skip(1)) {
            let device = on.ends_with("device");
            let (ran, idle) = if device {
                ("device", "cpu")
            } else {
                ("cpu", "device")
            };
            assert!(
                n(&format!("placement_{task}_{ran}_batches")) > 0,
                "{placement}: {task}"
            );
            assert_eq!(
                n(&format!("placement_{task}_{idle}_batches")),
                0,
                "{placement}: {task}"
            );
        }
        assert_eq!(n("items_device_errors"), 0);
        assert_healthy(&h);
    }
}

/// Where device-placed searches cannot be shared by stealing (a GPU; here PoCL with
/// stealing off), they are split with the partition's thread at a measured ratio, and
/// every read is answered as before.
#[test]
fn device_searches_without_stealing_are_split_at_a_measured_ratio() {
    if !have_opencl() {
        eprintln!("no OpenCL device: the load-dispatch test did not run");
        return;
    }
    let h = Hkv::start_with_env(
        &[
            "--engine",
            "opencl",
            "-t",
            "1",
            "--placement",
            "search=device",
        ],
        &[("HKV_OPENCL_STEAL", "0")],
    );
    assert_eq!(stat(&h, "hkv", "placement_steals"), "0");
    let mut c = h.connect();
    let mut batch = String::new();
    let mut want = String::new();
    for i in 0..500 {
        batch += &format!("set d{i} {i} 0 {}\r\n{i}\r\n", i.to_string().len());
        want += "STORED\r\n";
    }
    c.expect(&batch, &want);
    let keys: Vec<String> = (0..520).map(|i| format!("d{i}")).collect();
    let mut want = String::new();
    for i in 0..500 {
        want += &format!("VALUE d{i} {i} {}\r\n{i}\r\nEND\r\n", i.to_string().len());
    }
    want += &"END\r\n".repeat(20);
    let gets: String = keys.iter().map(|k| format!("get {k}\r\n")).collect();
    for _ in 0..5 {
        c.expect(&gets, &want);
    }
    let splits: u64 = stat(&h, "hkv", "placement_splits").parse().unwrap();
    assert!(splits > 0, "no split search");
    let ratio: f64 = stat(&h, "hkv", "placement_dispatch_ratio").parse().unwrap();
    assert!(ratio > 0.0 && ratio <= 1.0, "{ratio}");
    assert_healthy(&h);
}
