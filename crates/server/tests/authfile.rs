//! `-Y <authfile>` (memcached's text protocol authentication) through the one gate: text,
//! meta, binary and UDP all refused until a `set` of `<user> <password>` authenticates.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::Hkv;

fn authfile() -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("hkv-authfile-{}", std::process::id()));
    std::fs::write(&p, "alice:secret\n# a comment\nbob:hunter2\n").unwrap();
    p
}

#[test]
fn nothing_runs_before_authentication_and_everything_after() {
    let f = authfile();
    let h = Hkv::start(&["-Y", f.to_str().unwrap(), "--udp-listen", "127.0.0.1:0"]);
    let mut c = h.connect();
    // Every pipelined command gets its own refusal; nothing is stored or read.
    c.expect(
        "set k 0 0 1\r\nv\r\nget k\r\nmg k v\r\nvreduce k u8 sum\r\nstats\r\n",
        &format!(
            "CLIENT_ERROR bad authentication token format\r\n{}",
            "CLIENT_ERROR unauthenticated\r\n".repeat(4)
        ),
    );
    c.expect(
        "set x 0 0 12\r\nalice wrong!\r\n",
        "CLIENT_ERROR authentication failure\r\n",
    );
    // UDP has no connection to authenticate: nothing is answered.
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut dgram = vec![0, 1, 0, 0, 0, 1, 0, 0];
    dgram.extend_from_slice(b"get k\r\n");
    u.send_to(&dgram, h.udp.unwrap()).unwrap();
    assert!(
        u.recv(&mut [0u8; 1500]).is_err(),
        "UDP answered before authentication"
    );
    // Binary cannot authenticate with -Y: the connection is closed.
    let mut b = h.connect();
    b.send(&[
        0x80, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    assert!(b.is_closed());
    // The right pair authenticates this connection only; the key used stores nothing.
    c.expect("set whatever 0 0 11\r\nbob hunter2\r\n", "STORED\r\n");
    c.expect(
        "get whatever\r\nset k 0 0 1\r\nv\r\nget k\r\n",
        "END\r\nSTORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n",
    );
    let mut other = h.connect();
    other.expect("get k\r\n", "CLIENT_ERROR unauthenticated\r\n");
    let s = c.call("stats\r\n", "END\r\n");
    assert!(s.contains("STAT auth_cmds 3\r\n"), "{s}");
    assert!(s.contains("STAT auth_errors 2\r\n"), "{s}");
    let s = c.call("stats settings\r\n", "END\r\n");
    assert!(s.contains("STAT auth_enabled_ascii yes\r\n"), "{s}");
    let _ = std::fs::remove_file(f);
}

#[test]
fn a_bad_authfile_is_refused_at_start() {
    let p = std::env::temp_dir().join(format!("hkv-authfile-bad-{}", std::process::id()));
    std::fs::write(&p, "no colon here\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(["-p", "0", "-Y", p.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not user:password"));
    let _ = std::fs::remove_file(p);
}

#[test]
fn sighup_rereads_the_authfile_as_memcached_does() {
    let f = std::env::temp_dir().join(format!("hkv-authfile-hup-{}", std::process::id()));
    std::fs::write(&f, "alice:secret\n").unwrap();
    let h = Hkv::start(&["-Y", f.to_str().unwrap()]);
    let mut old = h.connect();
    old.expect("set a 0 0 12\r\nalice secret\r\n", "STORED\r\n");
    std::fs::write(&f, "carol:pw\n").unwrap();
    std::process::Command::new("kill")
        .args(["-HUP", &h.pid().to_string()])
        .status()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = h.connect();
        c.send(b"set a 0 0 8\r\ncarol pw\r\n");
        if c.read_until(b"\r\n") == "STORED\r\n" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP did not reload the file"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    h.connect().expect(
        "set a 0 0 12\r\nalice secret\r\n",
        "CLIENT_ERROR authentication failure\r\n",
    );
    // A connection authenticated before the reload stays so.
    old.expect("get nothing\r\n", "END\r\n");
    // A broken file keeps the users in force.
    std::fs::write(&f, "no colon here\n").unwrap();
    std::process::Command::new("kill")
        .args(["-HUP", &h.pid().to_string()])
        .status()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    h.connect()
        .expect("set a 0 0 8\r\ncarol pw\r\n", "STORED\r\n");
    let _ = std::fs::remove_file(&f);
}
