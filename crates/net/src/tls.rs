//! TLS for client connections (memcached's `-Z`): the certificate, key and client
//! verification memcached's `-o ssl_*` options name, loaded with rustls; reloaded on
//! `refresh_certs` or SIGHUP without dropping a connection; and the non-blocking stream that
//! the workers read and write like a plain socket.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};

/// memcached's `ssl_verify_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyMode {
    /// 0: no client certificate asked for.
    None,
    /// 1: asked for, and checked against `ssl_ca_cert` when the client sends one.
    Request,
    /// 2: required and checked.
    Require,
    /// 3: required on the first handshake (rustls never renegotiates, so as `Require`).
    Once,
}

impl VerifyMode {
    pub fn from_number(n: u8) -> Option<VerifyMode> {
        Some(match n {
            0 => VerifyMode::None,
            1 => VerifyMode::Request,
            2 => VerifyMode::Require,
            3 => VerifyMode::Once,
            _ => return None,
        })
    }

    pub fn number(self) -> u8 {
        match self {
            VerifyMode::None => 0,
            VerifyMode::Request => 1,
            VerifyMode::Require => 2,
            VerifyMode::Once => 3,
        }
    }
}

/// What `-Z -o ssl_...` asked for.
#[derive(Clone, Debug)]
pub struct TlsSettings {
    /// `ssl_chain_cert`: the server's certificate chain, PEM.
    pub chain_cert: PathBuf,
    /// `ssl_key`: its private key, PEM; None: the key is in the chain file.
    pub key: Option<PathBuf>,
    /// `ssl_ca_cert`: the CAs client certificates are checked against.
    pub ca_cert: Option<PathBuf>,
    pub verify_mode: VerifyMode,
    /// `ssl_min_version`: only TLS 1.3 when true; else TLS 1.2 and 1.3 (rustls offers
    /// nothing older, so memcached's 0 and 1 mean 1.2 here).
    pub tls13_only: bool,
    /// `ssl_wbuf_size` in bytes (memcached's default 16 KiB): the most plaintext a
    /// connection's TLS layer holds for sending, which bounds its memory beside the
    /// connection's own buffers.
    pub wbuf_bytes: usize,
}

/// A certificate or key file that could not be used, worded as memcached's `refresh_certs`
/// words it.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("Error loading the certificate chain: {0} : {1}")]
    Chain(String, String),
    #[error("Error loading the key: {0} : {1}")]
    Key(String, String),
    #[error("Error loading the CA certificates: {0} : {1}")]
    Ca(String, String),
    #[error("Error building the TLS configuration: {0}")]
    Config(String),
}

/// The live TLS configuration and its counters, shared by the acceptor and the workers.
#[derive(Debug)]
pub struct Tls {
    settings: TlsSettings,
    current: RwLock<Arc<ServerConfig>>,
    refreshed: Mutex<Instant>,
    /// Handshakes that failed (memcached's `ssl_handshake_errors`).
    pub handshake_errors: AtomicU64,
    /// Fatal TLS errors after the handshake (`ssl_proto_errors`).
    pub proto_errors: AtomicU64,
}

impl Tls {
    /// Loads the files; an error names the file and the reason, and the server does not start.
    pub fn load(settings: TlsSettings) -> Result<Tls, TlsError> {
        let config = build(&settings)?;
        Ok(Tls {
            settings,
            current: RwLock::new(Arc::new(config)),
            refreshed: Mutex::new(Instant::now()),
            handshake_errors: AtomicU64::new(0),
            proto_errors: AtomicU64::new(0),
        })
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// Reads the files again (`refresh_certs`, SIGHUP). New connections use the new
    /// certificate; open ones keep theirs. On an error the old configuration stays.
    pub fn refresh(&self) -> Result<(), TlsError> {
        let config = Arc::new(build(&self.settings)?);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = config;
        *self.refreshed.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        Ok(())
    }

    /// Seconds since the certificates were last loaded.
    pub fn since_refresh(&self) -> u64 {
        self.refreshed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
            .as_secs()
    }

    /// The server side of a new connection; the handshake happens as it is read.
    pub(crate) fn accept(self: &Arc<Self>, sock: TcpStream) -> Result<TlsStream, rustls::Error> {
        let config = Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()));
        let mut conn = ServerConnection::new(config)?;
        conn.set_buffer_limit(Some(self.settings.wbuf_bytes));
        Ok(TlsStream {
            sock,
            conn,
            tls: Arc::clone(self),
        })
    }
}

fn name(p: &Path) -> String {
    p.display().to_string()
}

/// A key whose PEM label names the wrong format (a PKCS#8 body under `RSA PRIVATE KEY`, as
/// some tools and test suites write; OpenSSL, and so memcached, loads it) is taken by the
/// format its bytes are in.
fn relabel_if_needed(key: PrivateKeyDer<'static>) -> PrivateKeyDer<'static> {
    use rustls::pki_types::{PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};
    let loads = |k: &PrivateKeyDer<'_>| rustls::crypto::ring::sign::any_supported_type(k).is_ok();
    if loads(&key) {
        return key;
    }
    let der = key.secret_der().to_vec();
    let alternatives: [PrivateKeyDer<'static>; 3] = [
        PrivatePkcs8KeyDer::from(der.clone()).into(),
        PrivatePkcs1KeyDer::from(der.clone()).into(),
        PrivateSec1KeyDer::from(der).into(),
    ];
    alternatives.into_iter().find(loads).unwrap_or(key)
}

fn build(s: &TlsSettings) -> Result<ServerConfig, TlsError> {
    let chain_err = |e: &dyn std::fmt::Display| TlsError::Chain(name(&s.chain_cert), e.to_string());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&s.chain_cert)
        .map_err(|e| chain_err(&e))?
        .collect::<Result<_, _>>()
        .map_err(|e| chain_err(&e))?;
    if chain.is_empty() {
        return Err(chain_err(&"no certificate in the file"));
    }
    let key_path = s.key.as_deref().unwrap_or(&s.chain_cert);
    let key = PrivateKeyDer::from_pem_file(key_path)
        .map_err(|e| TlsError::Key(name(key_path), e.to_string()))?;
    let key = relabel_if_needed(key);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if s.tls13_only {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS12, &rustls::version::TLS13]
    };
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match s.verify_mode {
        VerifyMode::None => builder.with_no_client_auth(),
        mode => {
            let ca = s.ca_cert.as_deref().ok_or_else(|| {
                TlsError::Config("ssl_verify_mode 1-3 needs ssl_ca_cert".to_string())
            })?;
            let ca_err = |e: &dyn std::fmt::Display| TlsError::Ca(name(ca), e.to_string());
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).map_err(|e| ca_err(&e))? {
                roots
                    .add(cert.map_err(|e| ca_err(&e))?)
                    .map_err(|e| ca_err(&e))?;
            }
            if roots.is_empty() {
                return Err(ca_err(&"no certificate in the file"));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if mode == VerifyMode::Request {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| TlsError::Config(e.to_string()))?,
            )
        }
    };
    builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Key(name(key_path), e.to_string()))
}

/// A TLS connection over a non-blocking socket. Reads and writes behave as the socket's
/// would (`WouldBlock` when nothing can move), so the worker treats it as any stream; records
/// rustls could not hand to the socket yet are reported by [`TlsStream::wants_write`], so
/// the worker keeps waiting for writability until they are out.
pub(crate) struct TlsStream {
    sock: TcpStream,
    conn: ServerConnection,
    tls: Arc<Tls>,
}

impl TlsStream {
    pub fn socket(&mut self) -> &mut TcpStream {
        &mut self.sock
    }

    pub fn socket_ref(&self) -> &TcpStream {
        &self.sock
    }

    /// Encrypted bytes wait for the socket.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Hands rustls's pending records to the socket until it takes no more.
    fn send_records(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: an end of input like any other.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            match self.conn.read_tls(&mut self.sock) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    let handshaking = self.conn.is_handshaking();
                    if let Err(e) = self.conn.process_new_packets() {
                        let counter = if handshaking {
                            &self.tls.handshake_errors
                        } else {
                            &self.tls.proto_errors
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(error = %e, handshaking, "TLS error; closing");
                        // The alert rustls queued tells the client why.
                        let _ = self.send_records();
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                    // Handshake replies go out as soon as they exist.
                    self.send_records()?;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send_records()?;
        if self.conn.wants_write() {
            // The socket is full: take no more plaintext until it drains.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.conn.writer().write(buf)?;
        self.send_records()?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_records()?;
        if self.conn.wants_write() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(())
    }
}

impl Drop for TlsStream {
    fn drop(&mut self) {
        // A clean TLS close, as far as the socket takes it without waiting.
        self.conn.send_close_notify();
        let _ = self.send_records();
    }
}
