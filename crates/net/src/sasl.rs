//! SASL over the binary protocol (PLAIN), and the one authentication gate every protocol and
//! transport passes: with `-S`, nothing but VERSION and the SASL commands runs before a
//! connection has authenticated, as memcached 1.6 answers it (docs/protocol.md, "SASL").

use hkv_proto::binary::{op, sasl_plain, status, BinRequest};

use hkv_proto::step::{BinStep, Step};

/// The users `-S` accepts: memcached's `MEMCACHED_SASL_PWDB` file, one `user:password` per
/// line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SaslUsers {
    users: Vec<(Vec<u8>, Vec<u8>)>,
}

impl SaslUsers {
    /// Parses a password file: `user:password` lines; blank lines and `#` comments skipped;
    /// the password is everything after the first colon.
    pub fn parse(text: &str) -> Result<SaslUsers, String> {
        let mut users = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((u, p)) = line.split_once(':') else {
                return Err(format!("line {}: not user:password", i + 1));
            };
            if u.is_empty() {
                return Err(format!("line {}: empty user name", i + 1));
            }
            users.push((u.as_bytes().to_vec(), p.as_bytes().to_vec()));
        }
        if users.is_empty() {
            return Err("no users".into());
        }
        Ok(SaslUsers { users })
    }

    /// Whether `user` has password `pass`. Every entry is compared in full, so the time
    /// taken does not tell which user names exist or how much of a password matched.
    pub fn verify(&self, user: &[u8], pass: &[u8]) -> bool {
        let mut ok = false;
        for (u, p) in &self.users {
            ok |= ct_eq(u, user) & ct_eq(p, pass);
        }
        ok
    }
}

/// memcached's `-Y` file: its users, read again on SIGHUP as memcached does (new
/// authentications use the new list; connections already authenticated stay so).
#[derive(Debug)]
pub struct AuthFile {
    path: std::path::PathBuf,
    users: std::sync::RwLock<std::sync::Arc<SaslUsers>>,
}

impl AuthFile {
    pub fn load(path: &std::path::Path) -> Result<AuthFile, String> {
        Ok(AuthFile {
            path: path.to_path_buf(),
            users: std::sync::RwLock::new(std::sync::Arc::new(Self::read(path)?)),
        })
    }

    fn read(path: &std::path::Path) -> Result<SaslUsers, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        SaslUsers::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Reads the file again; on an error the old users stay.
    pub fn reload(&self) -> Result<(), String> {
        let users = std::sync::Arc::new(Self::read(&self.path)?);
        *self.users.write().unwrap_or_else(|e| e.into_inner()) = users;
        Ok(())
    }

    pub fn current(&self) -> std::sync::Arc<SaslUsers> {
        std::sync::Arc::clone(&self.users.read().unwrap_or_else(|e| e.into_inner()))
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

/// A connection's side of the gate while its input is planned.
pub(crate) struct Gate<'a> {
    /// Some when `-S` is on.
    pub users: Option<&'a SaslUsers>,
    /// Some when `-Y` is on (text protocol authentication, planned in plan/authfile.rs).
    pub authfile: Option<&'a SaslUsers>,
    pub authed: bool,
    /// SASL commands seen and failed authentications, for `auth_cmds` / `auth_errors`.
    pub cmds: u64,
    pub errors: u64,
}

impl Gate<'_> {
    pub fn open(&self) -> bool {
        (self.users.is_none() && self.authfile.is_none()) || self.authed
    }

    /// With `-S`, a request the parser refused (an unknown opcode, a known one of the wrong
    /// shape) on a connection that has not authenticated gets `Auth failure.` and a
    /// hang-up, as any other command there does in memcached; SASL's own and VERSION keep
    /// their parser errors.
    pub fn refuses_malformed(&self, opcode: u8) -> bool {
        self.users.is_some()
            && !self.authed
            && !matches!(
                opcode,
                op::SASL_LIST_MECHS | op::SASL_AUTH | op::SASL_STEP | op::VERSION
            )
    }
}

/// What the gate decided about one binary request.
pub(crate) enum Verdict {
    /// Not a SASL command, and the connection may run it.
    Pass,
    /// Answered here; go on with the next request.
    Answered,
    /// Answered here; close the connection after the reply.
    Close,
}

/// Runs the gate for one binary request: SASL commands are answered here (PLAIN is checked
/// at once, so requests pipelined behind an AUTH see its outcome), and anything else on a
/// connection that has not authenticated gets `Auth failure.` and a hang-up.
#[inline]
pub(crate) fn gate_binary(
    r: &BinRequest<'_>,
    gate: &mut Gate<'_>,
    steps: &mut Vec<Step>,
) -> Verdict {
    // Without -S and -Y (nearly every server) nothing is gated: decided here, inlined into
    // the request loop, instead of a call per request (~25 instructions of ~1,600).
    if gate.users.is_none() && gate.authfile.is_none() {
        return Verdict::Pass;
    }
    gate_binary_authenticating(r, gate, steps)
}

fn gate_binary_authenticating(
    r: &BinRequest<'_>,
    gate: &mut Gate<'_>,
    steps: &mut Vec<Step>,
) -> Verdict {
    let is_sasl = matches!(
        r.opcode,
        op::SASL_LIST_MECHS | op::SASL_AUTH | op::SASL_STEP
    );
    let Some(users) = gate.users else {
        if gate.authfile.is_some() && !gate.authed {
            // -Y without -S: the binary protocol has no way to authenticate.
            return Verdict::Close;
        }
        // Without -S memcached does not know these commands.
        return Verdict::Pass;
    };
    let reply = |steps: &mut Vec<Step>, st: u16, body: &'static [u8]| {
        steps.push(Step::Bin(BinStep::Text {
            opcode: r.opcode,
            status: st,
            opaque: r.opaque,
            body,
        }))
    };
    if !is_sasl {
        if gate.authed || r.opcode == op::VERSION {
            return Verdict::Pass;
        }
        reply(steps, status::AUTH_ERROR, b"");
        return Verdict::Close;
    }
    gate.cmds += 1;
    match r.opcode {
        op::SASL_LIST_MECHS => reply(steps, status::SUCCESS, b"PLAIN"),
        // (An empty mechanism never gets here: the parser refuses it, as memcached does.)
        op::SASL_AUTH if r.key == b"PLAIN" => {
            match sasl_plain(r.value).filter(|(u, p)| users.verify(u, p)) {
                Some(_) => {
                    gate.authed = true;
                    reply(steps, status::SUCCESS, b"Authenticated");
                }
                None => {
                    // memcached logs the connection out on a failed AUTH or STEP, even one
                    // that was authenticated: a failed switch of user keeps no login.
                    gate.authed = false;
                    gate.errors += 1;
                    reply(steps, status::AUTH_ERROR, b"");
                }
            }
        }
        // Another mechanism, or a STEP (PLAIN has no second step).
        _ => {
            gate.authed = false;
            gate.errors += 1;
            reply(steps, status::AUTH_ERROR, b"");
        }
    }
    Verdict::Answered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_files_like_memcacheds_pwdb() {
        let u = SaslUsers::parse("# users\nalice:secret\n\nbob:with:colon\r\n").unwrap();
        assert!(u.verify(b"alice", b"secret"));
        assert!(u.verify(b"bob", b"with:colon"));
        assert!(!u.verify(b"alice", b"secre"));
        assert!(!u.verify(b"alice", b"secret2"));
        assert!(!u.verify(b"carol", b"secret"));
        assert!(!u.verify(b"", b""));
        assert!(SaslUsers::parse("nocolon\n").is_err());
        assert!(SaslUsers::parse(":pw\n").is_err());
        assert!(SaslUsers::parse("\n# none\n").is_err());
    }

    fn req(opcode: u8, key: &'static [u8], value: &'static [u8]) -> BinRequest<'static> {
        BinRequest {
            opcode,
            key,
            extras: &[],
            value,
            opaque: 7,
            cas: 0,
        }
    }

    fn fresh_gate(users: Option<&SaslUsers>) -> Gate<'_> {
        Gate {
            users,
            authfile: None,
            authed: false,
            cmds: 0,
            errors: 0,
        }
    }

    fn statuses(steps: &[Step]) -> Vec<u16> {
        steps
            .iter()
            .map(|s| match s {
                Step::Bin(BinStep::Text { status, .. }) => *status,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_gate_lets_nothing_but_version_and_sasl_through_before_auth() {
        let users = SaslUsers::parse("alice:secret").unwrap();
        let mut g = fresh_gate(Some(&users));
        let mut steps = Vec::new();
        assert!(matches!(
            gate_binary(&req(op::VERSION, b"", b""), &mut g, &mut steps),
            Verdict::Pass
        ));
        assert!(matches!(
            gate_binary(&req(op::GET, b"k", b""), &mut g, &mut steps),
            Verdict::Close
        ));
        assert!(matches!(
            gate_binary(&req(op::SASL_LIST_MECHS, b"", b""), &mut g, &mut steps),
            Verdict::Answered
        ));
        gate_binary(
            &req(op::SASL_AUTH, b"PLAIN", b"\0alice\0wrong"),
            &mut g,
            &mut steps,
        );
        assert!(!g.authed);
        gate_binary(&req(op::SASL_AUTH, b"CRAM-MD5", b"x"), &mut g, &mut steps);
        gate_binary(
            &req(op::SASL_AUTH, b"PLAIN", b"\0alice\0secret"),
            &mut g,
            &mut steps,
        );
        assert!(g.authed);
        assert!(matches!(
            gate_binary(&req(op::GET, b"k", b""), &mut g, &mut steps),
            Verdict::Pass
        ));
        assert_eq!(
            statuses(&steps),
            [
                status::AUTH_ERROR,
                status::SUCCESS,
                status::AUTH_ERROR,
                status::AUTH_ERROR,
                status::SUCCESS
            ]
        );
        assert_eq!((g.cmds, g.errors), (4, 2));
    }

    /// hkv kept the first login after a failed second AUTH (or a STEP after it): the
    /// connection went on as the earlier user. memcached 1.6.18 (SASL with a sasldb)
    /// answers the GET after either with an auth error.
    #[test]
    fn regression_a_failed_reauthentication_logs_the_connection_out() {
        let users = SaslUsers::parse("alice:secret\nbob:other").unwrap();
        for second in [
            req(op::SASL_AUTH, b"PLAIN", b"\0bob\0wrong"),
            req(op::SASL_STEP, b"PLAIN", b"\0alice\0secret"),
            req(op::SASL_AUTH, b"CRAM-MD5", b"x"),
        ] {
            let mut g = fresh_gate(Some(&users));
            let mut steps = Vec::new();
            let good = req(op::SASL_AUTH, b"PLAIN", b"\0alice\0secret");
            gate_binary(&good, &mut g, &mut steps);
            assert!(g.authed);
            gate_binary(&second, &mut g, &mut steps);
            assert!(!g.authed, "still logged in after {second:?}");
            assert!(matches!(
                gate_binary(&req(op::GET, b"k", b""), &mut g, &mut steps),
                Verdict::Close
            ));
            let all = [status::SUCCESS, status::AUTH_ERROR, status::AUTH_ERROR];
            assert_eq!(statuses(&steps), all);
        }
    }

    #[test]
    fn without_sasl_the_gate_is_open_and_sasl_commands_are_unknown() {
        let mut g = fresh_gate(None);
        let mut steps = Vec::new();
        assert!(g.open());
        assert!(matches!(
            gate_binary(&req(op::SASL_LIST_MECHS, b"", b""), &mut g, &mut steps),
            Verdict::Pass
        ));
        assert!(steps.is_empty());
    }
}
