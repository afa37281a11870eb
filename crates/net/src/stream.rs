//! A client connection's socket: TCP, TLS over TCP (`-Z`), or a Unix domain socket
//! (memcached's `-s`). All are registered with the worker's poll and read and written the
//! same way.

use std::io::{self, Read, Write};

use mio::event::Source;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};

use std::sync::Arc;

use crate::tls::{Tls, TlsStream};

pub(crate) enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream>),
    Unix(UnixStream),
}

impl Stream {
    /// `stats conns`: the descriptor, the peer's address and the address it connected to,
    /// in memcached's words (`tcp:IP:PORT`, `tcp6:[IP]:PORT`, `unix:PATH`).
    pub fn describe(&self) -> (i32, String, String) {
        use std::os::fd::AsRawFd;
        let tcp = |s: &TcpStream| {
            (
                s.as_raw_fd(),
                s.peer_addr()
                    .map_or_else(|_| "tcp:?".into(), |a| tcp_name(&a)),
                s.local_addr()
                    .map_or_else(|_| "tcp:?".into(), |a| tcp_name(&a)),
            )
        };
        match self {
            Stream::Tcp(s) => tcp(s),
            Stream::Tls(s) => tcp(s.socket_ref()),
            Stream::Unix(s) => {
                let path = s
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                    .unwrap_or_default();
                (
                    s.as_raw_fd(),
                    format!("unix:{path}"),
                    format!("unix:{path}"),
                )
            }
        }
    }

    /// Its descriptor and whether the io_uring loop serves it: plain TCP and Unix sockets,
    /// not TLS (rustls reads and writes through the socket itself).
    pub fn completion_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        match self {
            Stream::Tcp(s) => Some(s.as_raw_fd()),
            Stream::Unix(s) => Some(s.as_raw_fd()),
            Stream::Tls(_) => None,
        }
    }

    /// Blocking mode, for the io_uring loop: the kernel then waits for data or room inside
    /// the request instead of failing it with EAGAIN. Nothing reads such a socket directly.
    pub fn set_blocking(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => rustix::io::ioctl_fionbio(s, false)?,
            Stream::Unix(s) => rustix::io::ioctl_fionbio(s, false)?,
            Stream::Tls(_) => {}
        }
        Ok(())
    }

    /// Output is held below the socket (TLS records not yet sent): wait for writability
    /// even when the connection's own buffer is empty.
    pub fn wants_write(&self) -> bool {
        match self {
            Stream::Tls(s) => s.wants_write(),
            _ => false,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            // rustls copies into records either way.
            Stream::Tls(s) => s.write_vectored(bufs),
            Stream::Unix(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Tls(s) => s.socket().register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
        }
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Tls(s) => s.socket().reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
        }
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Tls(s) => s.socket().deregister(r),
            Stream::Unix(s) => s.deregister(r),
        }
    }
}

fn tcp_name(a: &std::net::SocketAddr) -> String {
    match a {
        std::net::SocketAddr::V4(_) => format!("tcp:{a}"),
        std::net::SocketAddr::V6(_) => format!("tcp6:{a}"),
    }
}

/// A listening socket of either kind.
pub(crate) enum Listener {
    /// With the TLS configuration its connections use (`-Z`), or plain.
    Tcp(TcpListener, Option<Arc<Tls>>),
    Unix(UnixListener),
}

impl Listener {
    /// `-b`: listening again on a listening socket sets its backlog (mio listens with 1024).
    pub fn set_backlog(&self, backlog: i32) -> std::io::Result<()> {
        match self {
            Listener::Tcp(l, _) => rustix::net::listen(l, backlog)?,
            Listener::Unix(l) => rustix::net::listen(l, backlog)?,
        }
        Ok(())
    }

    /// `stats conns`: (descriptor, address) of a listening socket.
    pub fn describe(&self) -> (i32, String) {
        use std::os::fd::AsRawFd;
        match self {
            Listener::Tcp(l, _) => (
                l.as_raw_fd(),
                l.local_addr()
                    .map_or_else(|_| "tcp:?".into(), |a| tcp_name(&a)),
            ),
            Listener::Unix(l) => {
                let path = l
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                    .unwrap_or_default();
                (l.as_raw_fd(), format!("unix:{path}"))
            }
        }
    }

    /// Accepts one connection; TCP ones without Nagle (replies are written whole).
    pub fn accept(&self) -> io::Result<(Stream, String)> {
        match self {
            Listener::Tcp(l, tls) => {
                let (s, peer) = l.accept()?;
                Ok((Self::tcp_stream(s, tls)?, peer.to_string()))
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept()?;
                Ok((Stream::Unix(s), "unix".to_string()))
            }
        }
    }

    fn tcp_stream(s: TcpStream, tls: &Option<Arc<Tls>>) -> io::Result<Stream> {
        let _ = s.set_nodelay(true);
        Ok(match tls {
            Some(tls) => Stream::Tls(Box::new(tls.accept(s).map_err(io::Error::other)?)),
            None => Stream::Tcp(s),
        })
    }
}

impl Source for Listener {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l, _) => l.register(r, t, i),
            Listener::Unix(l) => l.register(r, t, i),
        }
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l, _) => l.reregister(r, t, i),
            Listener::Unix(l) => l.reregister(r, t, i),
        }
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Listener::Tcp(l, _) => l.deregister(r),
            Listener::Unix(l) => l.deregister(r),
        }
    }
}
