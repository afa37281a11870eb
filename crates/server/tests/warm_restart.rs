//! memcached's `-e` warm restart through the real binary: SIGUSR1 (or `shutdown graceful`)
//! saves, a start with the same flags serves every item as before (value, flags, CAS, TTL),
//! including every write a client had acknowledged while the stop came; SIGTERM, other
//! flags or a torn metadata file start empty.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Hkv;

fn memory_file(tag: &str) -> PathBuf {
    // tmpfs when there is one, as memcached's -e expects.
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let p = dir.join(format!("hkv-warm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    let _ = std::fs::remove_file(format!("{}.meta", p.display()));
    p
}

fn start(file: &std::path::Path, extra: &[&str]) -> Hkv {
    let mut args = vec!["-e", file.to_str().unwrap(), "-t", "2"];
    args.extend_from_slice(extra);
    if !extra.contains(&"-m") {
        args.extend_from_slice(&["-m", "32"]);
    }
    Hkv::start(&args)
}

const SCRIPT: &str = "set plain 1 0 5\r\nhello\r\nset ttl 2 3600 3\r\nttl\r\n\
    set n 0 0 2\r\n10\r\nincr n 5\r\nms meta 4 F7 T7200\r\nmeta\r\n";

fn load(h: &Hkv) {
    let mut c = h.connect();
    c.expect(SCRIPT, "STORED\r\nSTORED\r\nSTORED\r\n15\r\nHD\r\n");
    let big = "b".repeat(400_000);
    c.expect(
        &format!("set big 9 0 {}\r\n{big}\r\n", big.len()),
        "STORED\r\n",
    );
    let mut many = String::new();
    for i in 0..3000 {
        many.push_str(&format!(
            "set k{i} {i} 0 {}\r\n{}\r\n",
            i % 700 + 1,
            "v".repeat(i % 700 + 1)
        ));
    }
    c.send(many.as_bytes());
    let got = c.read_until(&"STORED\r\n".repeat(3000).into_bytes()[..]);
    assert_eq!(got.matches("STORED").count(), 3000);
}

/// Everything a client can see of the items, TTL to the minute.
fn view(h: &Hkv) -> String {
    let mut c = h.connect();
    let mut keys = vec![
        "plain".to_string(),
        "ttl".into(),
        "n".into(),
        "meta".into(),
        "big".into(),
    ];
    keys.extend((0..3000).map(|i| format!("k{i}")));
    let mut out = c.call(&format!("gets {}\r\n", keys.join(" ")), "END\r\n");
    for k in ["ttl", "meta", "plain"] {
        let line = c.call(&format!("mg {k} t f s\r\n"), "\r\n");
        // Remaining TTL in minutes, so a second passing between the views does not count.
        let t: Vec<String> = line
            .split_whitespace()
            .map(
                |w| match w.strip_prefix('t').and_then(|n| n.parse::<i64>().ok()) {
                    Some(n) if n > 0 => format!("t~{}", (n + 30) / 60),
                    _ => w.to_string(),
                },
            )
            .collect();
        out.push_str(&t.join(" "));
    }
    out
}

fn items(h: &Hkv) -> u64 {
    let s = h.connect().call("stats\r\n", "END\r\n");
    s.lines()
        .find_map(|l| l.strip_prefix("STAT curr_items "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

#[test]
fn sigusr1_then_the_same_flags_keep_every_item() {
    let file = memory_file("usr1");
    let mut h = start(&file, &[]);
    load(&h);
    let before = view(&h);
    assert!(before.contains("VALUE plain 1 5 "), "{before}");
    // A second server on the same file would hand out the same memory twice: refused.
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args([
            "-p",
            "0",
            "-l",
            "127.0.0.1",
            "-t",
            "2",
            "-m",
            "32",
            "-e",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("in use by another process"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let settings = h.connect().call("stats settings\r\n", "END\r\n");
    assert!(settings.contains(&format!("STAT memory_file {}\r\n", file.display())));

    // A client writing while the stop comes: every write it saw acknowledged must survive.
    let addr = h.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let stop = Arc::clone(&stop);
        let acks = Arc::clone(&acks);
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut acked = Vec::new();
            for i in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                // A bounded set of keys, so the run does not depend on how many writes fit
                // in the time before the stop: more than -m holds would evict the others.
                let k = i % 5000;
                if s.write_all(format!("set w{k} 0 0 3\r\nw{:02}\r\n", i % 100).as_bytes())
                    .is_err()
                {
                    break;
                }
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(n) if n > 0 && line == "STORED\r\n" => {
                        acked.push(k);
                        acks.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => break,
                }
            }
            acked
        })
    };
    // The stop comes while writes are going on: after the writer's first acknowledgements,
    // whenever its thread got going on a loaded machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while acks.load(Ordering::Relaxed) < 100 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(h.signal("USR1"), "SIGUSR1 did not stop hkv cleanly");
    stop.store(true, Ordering::Relaxed);
    let mut acked = writer.join().unwrap();
    assert!(!acked.is_empty());
    acked.sort_unstable();
    acked.dedup();

    let h = start(&file, &[]);
    assert_eq!(view(&h), before, "items changed across the warm restart");
    let mut c = h.connect();
    for chunk in acked.chunks(200) {
        let keys: Vec<String> = chunk.iter().map(|i| format!("w{i}")).collect();
        let got = c.call(&format!("get {}\r\n", keys.join(" ")), "END\r\n");
        assert_eq!(
            got.matches("VALUE ").count(),
            chunk.len(),
            "an acknowledged write was lost"
        );
    }
    // The cache goes on working: new writes, and the restored ones can change.
    c.expect(
        "set plain 0 0 3\r\nnew\r\nget plain\r\n",
        "STORED\r\nVALUE plain 0 3\r\nnew\r\nEND\r\n",
    );
    c.expect("incr n 1\r\n", "16\r\n");
    drop(h);
    let _ = std::fs::remove_file(&file);
}

#[test]
fn sigterm_other_flags_and_torn_metadata_start_empty() {
    let file = memory_file("cold");
    let mut h = start(&file, &[]);
    load(&h);
    assert!(h.terminate());
    let mut h = start(&file, &[]);
    assert_eq!(items(&h), 0, "SIGTERM is not a save");

    load(&h);
    assert!(h.signal("USR1"));
    let mut h = start(&file, &["-m", "48"]);
    assert_eq!(items(&h), 0, "another -m must start empty");

    load(&h);
    assert!(h.signal("USR1"));
    let meta = format!("{}.meta", file.display());
    let text = std::fs::read(&meta).unwrap();
    std::fs::write(&meta, &text[..text.len() - 10]).unwrap();
    // The refusal is said on stderr.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args([
            "-p",
            "0",
            "-l",
            "127.0.0.1",
            "-e",
            file.to_str().unwrap(),
            "-t",
            "2",
            "-m",
            "32",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("warm restart refused") && err.contains("torn"),
        "{err}"
    );
    drop(h);
    let _ = std::fs::remove_file(&file);
}

#[test]
fn shutdown_graceful_saves_like_sigusr1() {
    let file = memory_file("graceful");
    let mut h = start(&file, &["-A"]);
    load(&h);
    let before = view(&h);
    let mut c = h.connect();
    c.expect(
        "shutdown bogus\r\n",
        "CLIENT_ERROR invalid shutdown mode\r\n",
    );
    c.send(b"shutdown graceful\r\n");
    assert!(c.is_closed());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while h.child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "shutdown graceful did not stop hkv"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let h = start(&file, &["-A"]);
    assert_eq!(view(&h), before);
    drop(h);
    let _ = std::fs::remove_file(&file);
}
