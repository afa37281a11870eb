//! Just enough HTTP/1.1 for the admin endpoint: a request head read under a size cap and a
//! deadline and parsed by `httparse`, and a whole reply with `Connection: close`.

use std::io::Read;
use std::net::TcpStream;
use std::time::Instant;

/// Headers a request may carry (a browser sends about 15).
const MAX_HEADERS: usize = 32;

/// The parts of a request the endpoint routes on.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) method: String,
    pub(crate) path: String,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeadError {
    /// Past the size cap or the header count (answered 431).
    TooLarge,
    /// Not an HTTP request (answered 400).
    Malformed,
    /// Closed, failed or past the deadline before the head was whole (not answered).
    Io,
}

/// Reads one request head from `stream`: at most `max` bytes (and a read's worth more, at
/// most 1 KiB), whole by `deadline` however slowly it arrives. Bytes after the head (a
/// body) are left unread: every reply closes the connection.
pub(crate) fn read_head(
    stream: &mut TcpStream,
    max: usize,
    deadline: Instant,
) -> Result<Head, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::Io);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| HeadError::Io)?;
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Err(HeadError::Io),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(HeadError::Io),
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => {
                return Ok(Head {
                    method: req.method.unwrap_or_default().to_string(),
                    path: req.path.unwrap_or_default().to_string(),
                })
            }
            Ok(httparse::Status::Partial) if buf.len() > max => return Err(HeadError::TooLarge),
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
            Err(_) => return Err(HeadError::Malformed),
        }
    }
}

/// A whole reply.
pub(crate) struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Reply {
    pub(crate) fn new(status: u16, content_type: &'static str, body: Vec<u8>) -> Reply {
        Reply {
            status,
            content_type,
            body,
        }
    }

    pub(crate) fn text(status: u16, body: &str) -> Reply {
        Reply::new(
            status,
            "text/plain; charset=utf-8",
            body.as_bytes().to_vec(),
        )
    }

    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            431 => "Request Header Fields Too Large",
            503 => "Service Unavailable",
            _ => "",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::time::Duration;

    /// A connected pair: what the client writes, the server side reads.
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn a_head_in_pieces_is_read_whole() {
        let (mut c, mut s) = pair();
        let t = std::thread::spawn(move || {
            for part in ["GET /met", "rics?x=1 HTTP/1.1\r\nHost: a\r\n", "\r\n"] {
                c.write_all(part.as_bytes()).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
            c
        });
        let head = read_head(&mut s, 8192, soon()).unwrap();
        assert_eq!(
            head,
            Head {
                method: "GET".into(),
                path: "/metrics?x=1".into()
            }
        );
        drop(t.join());
    }

    #[test]
    fn a_head_past_the_cap_or_with_too_many_headers_is_too_large() {
        let (mut c, mut s) = pair();
        let t = std::thread::spawn(move || {
            let _ = c.write_all(b"GET / HTTP/1.1\r\n");
            let line = format!("X-Pad: {}\r\n", "a".repeat(100));
            for _ in 0..1000 {
                if c.write_all(line.as_bytes()).is_err() {
                    break;
                }
            }
        });
        assert_eq!(read_head(&mut s, 8192, soon()), Err(HeadError::TooLarge));
        drop(s);
        let _ = t.join();

        let (mut c, mut s) = pair();
        let mut req = String::from("GET / HTTP/1.1\r\n");
        for i in 0..40 {
            req += &format!("X-{i}: 1\r\n");
        }
        req += "\r\n";
        c.write_all(req.as_bytes()).unwrap();
        assert_eq!(read_head(&mut s, 8192, soon()), Err(HeadError::TooLarge));
    }

    #[test]
    fn garbage_is_malformed_and_silence_runs_out_at_the_deadline() {
        let (mut c, mut s) = pair();
        c.write_all(b"\x16\x03\x01 hello\r\n\r\n").unwrap();
        assert_eq!(read_head(&mut s, 8192, soon()), Err(HeadError::Malformed));

        let (mut c, mut s) = pair();
        c.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        let t = Instant::now();
        let deadline = t + Duration::from_millis(300);
        assert_eq!(read_head(&mut s, 8192, deadline), Err(HeadError::Io));
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_reply_says_its_length_and_closes() {
        let r = Reply::text(404, "not found\n").to_bytes();
        assert_eq!(
            String::from_utf8(r).unwrap(),
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: 10\r\nConnection: close\r\n\r\nnot found\n"
        );
    }
}
