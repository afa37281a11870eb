//! `-Z` (memcached's TLS): every protocol over TLS, no service for plaintext on a TLS port,
//! certificate reload by `refresh_certs` and SIGHUP, client certificates, `notls:`
//! listeners, and start-up refusals. Certificates are made per test with rcgen.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Hkv;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    Ca {
        cert: p.self_signed(&key).unwrap(),
        key,
    }
}

/// A leaf signed by `ca`: (certificate PEM, key PEM).
fn leaf(ca: &Ca, name: &str, purpose: ExtendedKeyUsagePurpose) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".into()]).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.extended_key_usages = vec![purpose];
    let cert = p.signed_by(&key, &ca.cert, &ca.key).unwrap();
    (cert.pem(), key.serialize_pem())
}

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("hkv-tls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn client_config(ca: &Ca, client: Option<&(String, String)>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert.der().clone()).unwrap();
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    Arc::new(match client {
        None => b.with_no_client_auth(),
        Some((cert, key)) => b
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
    })
}

/// Connects, completes the handshake and makes one `version` round trip (an error if the
/// server refuses the connection).
fn connect(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> std::io::Result<Tls> {
    let mut s = handshake(addr, config)?;
    // TLS 1.3 reports a refused client certificate only after the handshake: a round trip
    // shows it.
    s.write_all(b"version\r\n")?;
    read_until(&mut s, b"\r\n")?;
    Ok(s)
}

fn handshake(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> std::io::Result<Tls> {
    let sock = TcpStream::connect(addr)?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let conn = rustls::ClientConnection::new(config, ServerName::try_from("localhost").unwrap())
        .map_err(std::io::Error::other)?;
    let mut s = rustls::StreamOwned::new(conn, sock);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

fn read_until(s: &mut Tls, end: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    while !got.ends_with(end) {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&chunk[..n]);
    }
    Ok(got)
}

fn call(s: &mut Tls, req: &[u8], end: &str) -> String {
    s.write_all(req).unwrap();
    String::from_utf8_lossy(&read_until(s, end.as_bytes()).unwrap()).into_owned()
}

fn peer_cn(s: &Tls) -> Vec<u8> {
    s.conn.peer_certificates().unwrap()[0].to_vec()
}

/// The server's certificate and key, signed by `ca`, written to `dir`: their paths.
fn server_files(dir: &Dir, ca: &Ca) -> (String, String) {
    let (cert, key) = leaf(ca, "hkv server", ExtendedKeyUsagePurpose::ServerAuth);
    (dir.write("cert.pem", &cert), dir.write("key.pem", &key))
}

fn start_tls(dir: &Dir, ca: &Ca, more: &[&str]) -> (Hkv, String, String) {
    let (cert, key) = server_files(dir, ca);
    let opt = format!("ssl_chain_cert={cert},ssl_key={key}");
    let mut args = vec!["-Z", "-o", &opt];
    args.extend_from_slice(more);
    (Hkv::start(&args), cert, key)
}

#[test]
fn tls_serves_every_protocol_and_large_pipelined_values() {
    let dir = Dir::new("serve");
    let ca = ca("test CA");
    let (h, _, _) = start_tls(&dir, &ca, &[]);
    let mut c = connect(h.addr, client_config(&ca, None)).unwrap();
    assert_eq!(
        call(&mut c, b"set k 5 0 2\r\nhi\r\nget k\r\n", "END\r\n"),
        "STORED\r\nVALUE k 5 2\r\nhi\r\nEND\r\n"
    );
    assert_eq!(
        call(&mut c, b"mg k v f\r\n", "\r\nhi\r\n"),
        "VA 2 f5\r\nhi\r\n"
    );
    // Far more than one TLS record and more than the socket takes at once: the reply is
    // sent across many writable events.
    let big = vec![b'x'; 700_000];
    let mut req = format!("set big 0 0 {}\r\n", big.len()).into_bytes();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    assert_eq!(call(&mut c, &req, "STORED\r\n"), "STORED\r\n");
    let r = call(&mut c, b"get big big big\r\n", "END\r\n");
    assert_eq!(
        r.len(),
        3 * (big.len() + "VALUE big 0 700000\r\n\r\n".len()) + 5
    );
    // Values under the largest chunk are sent from item memory (--zero-copy-min's 16 KiB
    // default): through rustls, byte for byte, between replies that are copied.
    let mid: Vec<u8> = (0..100_000).map(|i| b'a' + (i % 26) as u8).collect();
    let mut req = format!("set mid 3 0 {}\r\n", mid.len()).into_bytes();
    req.extend_from_slice(&mid);
    req.extend_from_slice(b"\r\n");
    assert_eq!(call(&mut c, &req, "STORED\r\n"), "STORED\r\n");
    let r = call(&mut c, b"get k mid k mid\r\n", "END\r\n");
    let m = String::from_utf8(mid).unwrap();
    assert_eq!(
        r,
        format!("VALUE k 5 2\r\nhi\r\nVALUE mid 3 100000\r\n{m}\r\nVALUE k 5 2\r\nhi\r\nVALUE mid 3 100000\r\n{m}\r\nEND\r\n")
    );
    let st = call(&mut c, b"stats hkv\r\n", "END\r\n");
    let zero_copy: u64 = st
        .lines()
        .find_map(|l| l.strip_prefix("STAT zero_copy_values "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(zero_copy >= 2, "{st}");
    // Binary protocol (a NOOP) on its own TLS connection.
    let mut b = handshake(h.addr, client_config(&ca, None)).unwrap();
    let mut noop = vec![0x80, 0x0a];
    noop.resize(24, 0);
    b.write_all(&noop).unwrap();
    let mut hdr = [0u8; 24];
    b.read_exact(&mut hdr).unwrap();
    assert_eq!((hdr[0], hdr[1], hdr[7]), (0x81, 0x0a, 0));
    let s = call(&mut c, b"stats settings\r\n", "END\r\n");
    assert!(s.contains("STAT ssl_enabled yes\r\n"), "{s}");
    assert!(s.contains("STAT ssl_verify_mode 0\r\n"), "{s}");
}

#[test]
fn plaintext_client_on_a_tls_port_gets_no_service() {
    let dir = Dir::new("plain");
    let ca = ca("test CA");
    let (h, _, _) = start_tls(&dir, &ca, &[]);
    let mut p = TcpStream::connect(h.addr).unwrap();
    p.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    p.write_all(b"set k 0 0 1\r\nv\r\nget k\r\nstats\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = p.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(
        !text.contains("STORED") && !text.contains("END") && !text.contains("STAT"),
        "plaintext was served: {text:?}"
    );
    let mut c = connect(h.addr, client_config(&ca, None)).unwrap();
    assert_eq!(call(&mut c, b"get k\r\n", "END\r\n"), "END\r\n");
    let s = call(&mut c, b"stats\r\n", "END\r\n");
    assert!(!s.contains("STAT ssl_handshake_errors 0\r\n"), "{s}");
}

#[test]
fn refresh_certs_and_sighup_reload_the_certificate() {
    let dir = Dir::new("refresh");
    let ca = ca("test CA");
    let (h, cert, key) = start_tls(&dir, &ca, &[]);
    let cfg = client_config(&ca, None);
    let mut first = connect(h.addr, Arc::clone(&cfg)).unwrap();
    let a = peer_cn(&first);

    let (cert_b, key_b) = leaf(&ca, "second", ExtendedKeyUsagePurpose::ServerAuth);
    std::fs::write(&cert, &cert_b).unwrap();
    std::fs::write(&key, &key_b).unwrap();
    assert_eq!(call(&mut first, b"refresh_certs\r\n", "\r\n"), "OK\r\n");
    let second = connect(h.addr, Arc::clone(&cfg)).unwrap();
    let b = peer_cn(&second);
    assert_ne!(a, b, "refresh_certs did not load the new certificate");

    // A broken file: memcached's error, and the loaded certificate stays in use.
    std::fs::write(&cert, "not a certificate\n").unwrap();
    let r = call(&mut first, b"refresh_certs\r\n", "\r\n");
    assert!(
        r.starts_with(&format!("Error loading the certificate chain: {cert} : ")),
        "{r}"
    );
    assert_eq!(peer_cn(&connect(h.addr, Arc::clone(&cfg)).unwrap()), b);
    // Open connections keep working through it all.
    assert_eq!(call(&mut first, b"get nothing\r\n", "END\r\n"), "END\r\n");

    // SIGHUP does what refresh_certs does.
    let (cert_c, key_c) = leaf(&ca, "third", ExtendedKeyUsagePurpose::ServerAuth);
    std::fs::write(&cert, &cert_c).unwrap();
    std::fs::write(&key, &key_c).unwrap();
    let want = CertificateDer::from_pem_slice(cert_c.as_bytes())
        .unwrap()
        .to_vec();
    std::process::Command::new("kill")
        .args(["-HUP", &h.pid().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = peer_cn(&connect(h.addr, Arc::clone(&cfg)).unwrap());
        if now == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the certificate"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn client_certificates_are_checked_as_ssl_verify_mode_asks() {
    let dir = Dir::new("verify");
    let server_ca = ca("server CA");
    let client_ca = ca("client CA");
    let other_ca = ca("other CA");
    let ca_file = dir.write("clients.pem", &client_ca.cert.pem());
    let good = leaf(
        &client_ca,
        "good client",
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let bad = leaf(&other_ca, "bad client", ExtendedKeyUsagePurpose::ClientAuth);

    let required = format!("ssl_ca_cert={ca_file},ssl_verify_mode=2");
    let (h, _, _) = start_tls(&dir, &server_ca, &["-o", &required]);
    assert!(connect(h.addr, client_config(&server_ca, None)).is_err());
    assert!(connect(h.addr, client_config(&server_ca, Some(&bad))).is_err());
    let mut c = connect(h.addr, client_config(&server_ca, Some(&good))).unwrap();
    assert_eq!(call(&mut c, b"set k 0 0 1\r\nv\r\n", "\r\n"), "STORED\r\n");
    drop(h);

    let dir1 = Dir::new("verify1");
    let requested = format!("ssl_ca_cert={ca_file},ssl_verify_mode=1");
    let (h, _, _) = start_tls(&dir1, &server_ca, &["-o", &requested]);
    connect(h.addr, client_config(&server_ca, None)).unwrap();
    connect(h.addr, client_config(&server_ca, Some(&good))).unwrap();
    assert!(connect(h.addr, client_config(&server_ca, Some(&bad))).is_err());
}

#[test]
fn notls_listener_stays_plain_and_refresh_certs_needs_tls() {
    let dir = Dir::new("notls");
    let ca = ca("test CA");
    let (cert, key) = server_files(&dir, &ca);
    let opt = format!("ssl_chain_cert={cert},ssl_key={key}");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args([
            "-p",
            "0",
            "-l",
            "127.0.0.1,notls:127.0.0.2",
            "-Z",
            "-o",
            &opt,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut addrs = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        addrs.push(
            line.trim()
                .rsplit(' ')
                .next()
                .unwrap()
                .parse::<SocketAddr>()
                .unwrap(),
        );
    }
    let mut t = connect(addrs[0], client_config(&ca, None)).unwrap();
    assert_eq!(call(&mut t, b"set k 0 0 1\r\nv\r\n", "\r\n"), "STORED\r\n");
    let mut plain = common::Client::connect(addrs[1]);
    plain.expect("get k\r\n", "VALUE k 0 1\r\nv\r\nEND\r\n");
    let _ = child.kill();
    let _ = child.wait();

    let h = Hkv::start(&[]);
    h.connect()
        .expect("refresh_certs\r\n", "Error TLS not enabled\r\n");
}

/// A hostile probe: `-l 127.0.0.1 -l notls:127.0.0.1:PORT` left the TLS listener plain too
/// (the exemption was matched by IP alone), while `stats settings` said `ssl_enabled yes`.
/// memcached keeps the first TLS-only.
#[test]
fn regression_a_notls_listener_leaves_tls_on_for_another_port_of_its_address() {
    let dir = Dir::new("notls-port");
    let ca = ca("test CA");
    let (cert, key) = server_files(&dir, &ca);
    let opt = format!("ssl_chain_cert={cert},ssl_key={key}");
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let plain_port = free.local_addr().unwrap().port();
    drop(free);
    let notls = format!("notls:127.0.0.1:{plain_port}");
    // Killed however the test ends: a server left running holds the test's output open.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Killed(
        std::process::Command::new(env!("CARGO_BIN_EXE_hkv"))
            .args(["-p", "0", "-l", "127.0.0.1", "-l", &notls, "-Z", "-o", &opt])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let mut addrs = Vec::new();
    for _ in 0..2 {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        let a = line.trim().rsplit(' ').next().unwrap();
        addrs.push(a.parse::<SocketAddr>().unwrap());
    }
    let (tls_addr, plain_addr) = match addrs[1].port() == plain_port {
        true => (addrs[0], addrs[1]),
        false => (addrs[1], addrs[0]),
    };
    assert_eq!(plain_addr.port(), plain_port);
    let mut p = TcpStream::connect(tls_addr).unwrap();
    p.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    p.write_all(b"version\r\n").unwrap();
    let mut got = Vec::new();
    let _ = p.read_to_end(&mut got);
    assert!(
        !String::from_utf8_lossy(&got).contains("VERSION"),
        "the TLS port served plaintext"
    );
    let mut t = connect(tls_addr, client_config(&ca, None)).unwrap();
    assert_eq!(call(&mut t, b"set k 0 0 1\r\nv\r\n", "\r\n"), "STORED\r\n");
    let mut plain = common::Client::connect(plain_addr);
    plain.expect("get k\r\n", "VALUE k 0 1\r\nv\r\nEND\r\n");
}

fn start_fails(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hkv"))
        .args(["-p", "0"])
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success(), "started with {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn tls_settings_that_cannot_work_stop_the_start() {
    let dir = Dir::new("refuse");
    let ca = ca("test CA");
    let (cert, key) = leaf(&ca, "s", ExtendedKeyUsagePurpose::ServerAuth);
    let cert = dir.write("cert.pem", &cert);
    let key = dir.write("key.pem", &key);
    let junk = dir.write("junk.pem", "junk\n");
    assert!(start_fails(&["-Z"]).contains("ssl_chain_cert"));
    let e = start_fails(&["-Z", "-o", &format!("ssl_chain_cert={junk},ssl_key={key}")]);
    assert!(e.contains("Error loading the certificate chain"), "{e}");
    let e = start_fails(&["-Z", "-o", &format!("ssl_chain_cert={cert},ssl_key={junk}")]);
    assert!(e.contains("Error loading the key"), "{e}");
    let e = start_fails(&[
        "-Z",
        "-o",
        &format!("ssl_chain_cert={cert},ssl_key={key},ssl_verify_mode=2"),
    ]);
    assert!(e.contains("ssl_ca_cert"), "{e}");
    // The key may sit in the chain file, as one PEM.
    let both = dir.write(
        "both.pem",
        &format!(
            "{}{}",
            std::fs::read_to_string(&cert).unwrap(),
            std::fs::read_to_string(&key).unwrap()
        ),
    );
    let h = Hkv::start(&["-Z", "-o", &format!("ssl_chain_cert={both}")]);
    connect(h.addr, client_config(&ca, None)).unwrap();
    let _ = Path::new(&both);
}

#[test]
fn a_tls_client_that_never_reads_cannot_grow_the_server() {
    let dir = Dir::new("noread");
    let ca = ca("test CA");
    let (h, _, _) = start_tls(&dir, &ca, &["-m", "16"]);
    let mut c = connect(h.addr, client_config(&ca, None)).unwrap();
    let big = vec![b'x'; 500_000];
    let mut req = format!("set big 0 0 {}\r\n", big.len()).into_bytes();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    assert_eq!(call(&mut c, &req, "STORED\r\n"), "STORED\r\n");
    let base = h.rss();
    // 5000 replies of 500 KB asked for, none read: 2.5 GB if the server buffered them.
    let mut hog = handshake(h.addr, client_config(&ca, None)).unwrap();
    hog.sock.set_nonblocking(true).unwrap();
    let gets = b"get big\r\n".repeat(5000);
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while sent < gets.len() && Instant::now() < deadline {
        match hog.write(&gets[sent..]) {
            Ok(n) => sent += n,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
        let _ = hog.conn.complete_io(&mut hog.sock);
    }
    std::thread::sleep(Duration::from_millis(500));
    let grew = h.rss().saturating_sub(base);
    assert!(
        grew < 64 << 20,
        "RSS grew by {grew} bytes for a client that does not read"
    );
    // Everyone else is still served.
    assert_eq!(call(&mut c, b"get nothing\r\n", "END\r\n"), "END\r\n");
}
