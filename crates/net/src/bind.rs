//! Binding the server's sockets: TCP listeners for the acceptor thread, or one listening
//! socket per worker on each address (`--accept workers`), the Unix socket, and the
//! workers' UDP sockets.

use std::net::SocketAddr;

use mio::net::TcpListener;

use crate::config::{AcceptMode, NetConfig};
use crate::stream::Listener;
use crate::NetError;

/// What was bound: listeners the acceptor thread serves, and per worker the listening
/// sockets it accepts from itself (empty lists when the acceptor takes everything).
pub(crate) struct Bound {
    pub acceptor: Vec<Listener>,
    pub per_worker: Vec<Vec<Listener>>,
    /// The TCP addresses, first the one `-p`/`-l` named first.
    pub addrs: Vec<SocketAddr>,
}

impl Bound {
    /// `stats conns`: one listening socket per address (a worker's sockets share it).
    pub fn describe(&self) -> Vec<(i32, String)> {
        let first = self.per_worker.first().map(|v| v.as_slice()).unwrap_or(&[]);
        self.acceptor
            .iter()
            .chain(first)
            .map(Listener::describe)
            .collect()
    }
}

pub(crate) fn listeners(config: &NetConfig) -> Result<Bound, NetError> {
    let threads = config.threads.max(1);
    let mut bound = Bound {
        acceptor: Vec::new(),
        per_worker: (0..threads).map(|_| Vec::new()).collect(),
        addrs: Vec::new(),
    };
    if let Some(path) = &config.unix_socket {
        // memcached's -s: a Unix socket and no network at all.
        let l = Listener::Unix(bind_unix(path, config.unix_mask)?);
        l.set_backlog(config.backlog)?;
        bound.acceptor.push(l);
        return Ok(bound);
    }
    let mut per_worker = config.accept != AcceptMode::Acceptor;
    let mut port = config.listen.port();
    for (k, &a) in std::iter::once(&config.listen)
        .chain(&config.extra_listen)
        .enumerate()
    {
        // Port 0 on the first address picked a port: the others take it too.
        let a = if k > 0 && a.port() == 0 {
            SocketAddr::new(a.ip(), port)
        } else {
            a
        };
        let tls = config.tls_for(k);
        if per_worker {
            match reuseport_group(a, threads, config.backlog) {
                Ok(group) => {
                    let local = group[0].local_addr()?;
                    port = local.port();
                    bound.addrs.push(local);
                    for (w, l) in group.into_iter().enumerate() {
                        bound.per_worker[w].push(Listener::Tcp(l, tls.clone()));
                    }
                    continue;
                }
                Err(e)
                    if config.accept == AcceptMode::Auto
                        && k == 0
                        && e.kind() != std::io::ErrorKind::AddrInUse =>
                {
                    tracing::info!(error = %e, "no listening socket per worker; accepting on one thread");
                    per_worker = false;
                }
                Err(e) => return Err(NetError::Bind(a, e)),
            }
        }
        let l = TcpListener::bind(a).map_err(|e| NetError::Bind(a, e))?;
        let local = l.local_addr()?;
        port = local.port();
        bound.addrs.push(local);
        let l = Listener::Tcp(l, tls);
        l.set_backlog(config.backlog)?;
        bound.acceptor.push(l);
    }
    tracing::info!(
        accept = if per_worker { "workers" } else { "acceptor" },
        "accepting connections"
    );
    Ok(bound)
}

/// `n` listening sockets on `addr`, one per worker, in one SO_REUSEPORT group: the kernel
/// spreads new connections over them, and each worker accepts its own without a hand-off.
fn reuseport_group(addr: SocketAddr, n: usize, backlog: i32) -> std::io::Result<Vec<TcpListener>> {
    // SO_REUSEPORT would also let this bind join a group that another process of the same
    // user listens with (a second server on the port, splitting its clients): a plain
    // bind must succeed first, as it does only when the port is free. It also picks the
    // port for port 0.
    let probe = std::net::TcpListener::bind(addr)?;
    let addr = probe.local_addr()?;
    drop(probe);
    (0..n).map(|_| reuseport_tcp(addr, backlog)).collect()
}

fn reuseport_tcp(addr: SocketAddr, backlog: i32) -> std::io::Result<TcpListener> {
    let fd = reuseport_socket(addr, rustix::net::SocketType::STREAM)?;
    rustix::net::listen(&fd, backlog)?;
    Ok(TcpListener::from_std(std::net::TcpListener::from(fd)))
}

/// A non-blocking socket of `kind` bound to `addr` with SO_REUSEPORT (and SO_REUSEADDR
/// for a stream, as a plain listener has), one of a group the kernel spreads over.
fn reuseport_socket(
    addr: SocketAddr,
    kind: rustix::net::SocketType,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::net::{sockopt, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        family(addr),
        kind,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    if kind == SocketType::STREAM {
        sockopt::set_socket_reuseaddr(&fd, true)?;
    }
    sockopt::set_socket_reuseport(&fd, true)?;
    rustix::net::bind(&fd, &addr)?;
    Ok(fd)
}

fn family(addr: SocketAddr) -> rustix::net::AddressFamily {
    if addr.is_ipv4() {
        rustix::net::AddressFamily::INET
    } else {
        rustix::net::AddressFamily::INET6
    }
}

/// Binds memcached's `-s` socket: a stale socket file left by an earlier run is removed
/// (anything else at the path is an error), and the socket gets the `-a` permissions.
fn bind_unix(path: &std::path::Path, mask: u32) -> Result<mio::net::UnixListener, NetError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let err = |error| NetError::BindUnix {
        path: path.display().to_string(),
        error,
    };
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if md.file_type().is_socket() {
            std::fs::remove_file(path).map_err(err)?;
        }
    }
    let l = mio::net::UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mask)).map_err(err)?;
    Ok(l)
}

pub(crate) fn udp_sockets(config: &NetConfig) -> Result<Vec<mio::net::UdpSocket>, NetError> {
    let Some(addr) = config.udp_listen else {
        return Ok(Vec::new());
    };
    let bind_err = |e: std::io::Error| NetError::Bind(addr, e);
    let first = reuseport_udp(addr, config).map_err(bind_err)?;
    // Port 0 picked a port: the other workers' sockets take the same one.
    let addr = first.local_addr()?;
    let mut v = vec![first];
    for _ in 1..config.threads.max(1) {
        v.push(reuseport_udp(addr, config).map_err(bind_err)?);
    }
    Ok(v)
}

/// A UDP socket per worker on the same address (SO_REUSEPORT): the kernel spreads
/// datagrams over the workers by source address, so one client's requests all reach the
/// same worker and stay in order, and every worker takes UDP load.
fn reuseport_udp(addr: SocketAddr, config: &NetConfig) -> std::io::Result<mio::net::UdpSocket> {
    let fd = reuseport_socket(addr, rustix::net::SocketType::DGRAM)?;
    // A client that keeps many GETs in flight sends them in bursts; at the kernel's default
    // (~200 KiB, a few hundred small datagrams with their overhead) a burst overflows the
    // socket and its GETs are lost until the client times them out. The kernel caps the
    // request at net.core.rmem_max; failing to raise it is no reason not to serve.
    if let Err(e) = rustix::net::sockopt::set_socket_recv_buffer_size(&fd, UDP_RECV_BUFFER) {
        tracing::debug!(error = %e, "UDP receive buffer left at the kernel's default");
    }
    // UDP GRO (Linux 5.0): a run of datagrams from one client arrives as one buffer, cut
    // back into datagrams here, so the kernel's receive path runs once per run, not once
    // per datagram (a client's GSO send stays whole over loopback; a NIC's GRO coalesces
    // a client's back-to-back datagrams). Refused on older kernels: datagrams come one by
    // one as before. HKV_UDP_GRO=0 leaves it off, to compare.
    if std::env::var_os("HKV_UDP_GRO").is_none_or(|v| v != "0") {
        if let Err(e) =
            nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::UdpGroSegment, &true)
        {
            tracing::info!(error = %e, "UDP GRO refused; datagrams are received one by one");
        }
    }
    // Each datagram's receive time, so that a request its client gave up on while it
    // waited in the queue is dropped rather than answered (`--udp-max-wait-ms`).
    if !config.udp_max_wait.is_zero() {
        let on = nix::sys::socket::sockopt::ReceiveTimestampns;
        if let Err(e) = nix::sys::socket::setsockopt(&fd, on, &true) {
            tracing::info!(error = %e, "UDP receive times refused; no request is dropped as stale");
        }
    }
    Ok(mio::net::UdpSocket::from_std(std::net::UdpSocket::from(fd)))
}

/// The receive buffer each worker's UDP socket asks for: kernel memory outside `-m`, at
/// most this (twice it, as the kernel counts) per worker (docs/reliability.md).
pub(crate) const UDP_RECV_BUFFER: usize = 4 << 20;
