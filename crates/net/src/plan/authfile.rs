//! memcached's `-Y <authfile>`: authentication for the text protocol. Until a connection
//! authenticates, every command is answered `CLIENT_ERROR unauthenticated` and runs
//! nothing; a `set` of any key whose data is `<user> <password>` authenticates (`STORED`,
//! sent even under `noreply`, as memcached sends it), a wrong pair answers
//! `CLIENT_ERROR authentication failure`, data without the pair's shape
//! `CLIENT_ERROR bad authentication token format`. Nothing is stored either way. The file
//! has memcached's format, `user:password` lines ([`SaslUsers`](crate::SaslUsers) parses
//! both it and `-S`'s).

use hkv_engine::Op;
use hkv_proto::text::{self, Command, Parsed};

use super::InputEnd;
use crate::sasl::Gate;
use hkv_proto::step::Step;

pub(crate) const UNAUTHENTICATED: &str = "CLIENT_ERROR unauthenticated";
pub(crate) const FAILURE: &str = "CLIENT_ERROR authentication failure";
pub(crate) const BAD_TOKEN: &str = "CLIENT_ERROR bad authentication token format";

/// The `<user> <password>` of an authenticating `set`: the first two space-separated words,
/// as memcached reads them (anything after the password is ignored, so a password with a
/// space in it never matches, in memcached either).
fn credentials(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let sp = data.iter().position(|&b| b == b' ')?;
    let (user, rest) = (&data[..sp], &data[sp + 1..]);
    let end = rest
        .iter()
        .position(|&b| matches!(b, b' ' | b'\r' | b'\n'))
        .unwrap_or(rest.len());
    let pass = &rest[..end];
    (!user.is_empty() && !pass.is_empty()).then_some((user, pass))
}

/// Plans one text request of a connection that has not authenticated. Returns true if
/// parsing must stop (more bytes needed).
pub(crate) fn plan_unauthenticated(
    buf: &[u8],
    limits: &text::Limits,
    newline_free: usize,
    end: &mut InputEnd,
    steps: &mut Vec<Step>,
    gate: &mut Gate<'_>,
) -> bool {
    let Some(users) = gate.authfile else {
        return true;
    };
    match text::parse_after(&buf[end.pos..], limits, newline_free) {
        // Staging waits for authentication: the body is buffered.
        Parsed::Incomplete | Parsed::Body { .. } => true,
        Parsed::Error {
            len,
            swallow,
            close,
            ..
        } => {
            end.pos += len;
            end.swallow = swallow;
            end.close |= close;
            if !close {
                steps.push(Step::Text(UNAUTHENTICATED));
            }
            close
        }
        Parsed::Command { cmd, len } => {
            end.pos += len;
            let reply = match cmd {
                Command::Store {
                    op: Op::Set,
                    data,
                    previous: false,
                    ..
                } => {
                    gate.cmds += 1;
                    match credentials(data) {
                        Some((u, p)) if users.verify(u, p) => {
                            gate.authed = true;
                            "STORED"
                        }
                        Some(_) => {
                            gate.errors += 1;
                            FAILURE
                        }
                        None => {
                            gate.errors += 1;
                            BAD_TOKEN
                        }
                    }
                }
                Command::Quit => {
                    end.close = true;
                    return true;
                }
                _ => UNAUTHENTICATED,
            };
            steps.push(Step::Text(reply));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_like_memcached() {
        assert_eq!(
            credentials(b"alice secret"),
            Some((&b"alice"[..], &b"secret"[..]))
        );
        assert_eq!(
            credentials(b"alice secret "),
            Some((&b"alice"[..], &b"secret"[..]))
        );
        assert_eq!(credentials(b"alice"), None);
        assert_eq!(credentials(b" secret"), None);
        assert_eq!(credentials(b"alice "), None);
        assert_eq!(
            credentials(b"bob pw with spaces"),
            Some((&b"bob"[..], &b"pw"[..]))
        );
    }
}
