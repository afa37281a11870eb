//! memcached's `-s <path>` (a Unix domain socket instead of the network) and `-a <mask>`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

fn start(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

fn stop(mut child: Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    assert!(child.wait().unwrap().success());
}

fn call(path: &Path, req: &[u8], end: &[u8]) -> Vec<u8> {
    let mut s = UnixStream::connect(path).unwrap();
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed");
        out.extend_from_slice(&buf[..n]);
    }
    out
}

#[test]
fn serves_on_a_unix_socket_with_its_mask_and_replaces_a_stale_one() {
    let dir = std::env::temp_dir().join(format!("hkv-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hkv.sock");
    // A socket file left behind by a crashed run does not stop a restart.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let (child, line) = start(&["-s", path.to_str().unwrap(), "-a", "0750"]);
    assert_eq!(
        line.trim(),
        format!("hkv listening on unix:{}", path.display())
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o750);
    assert_eq!(
        call(&path, b"set k 0 0 2\r\nux\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    assert_eq!(
        call(&path, b"get k\r\n", b"END\r\n"),
        b"VALUE k 0 2\r\nux\r\nEND\r\n"
    );
    let stats = call(&path, b"stats settings\r\n", b"END\r\n");
    assert!(String::from_utf8_lossy(&stats).contains("STAT maxconns"));
    stop(child);
    assert!(!path.exists(), "the socket file is removed on a clean exit");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn unix_socket_flags_are_checked() {
    for args in [
        &["-s", "/tmp/x.sock", "-U", "11211"][..],
        &["-a", "0700"],
        &["-s", "/tmp/x.sock", "-a", "999"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_hkv"))
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
    }
}
