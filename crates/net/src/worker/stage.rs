//! Starting to receive a data block into item memory (net/src/stage.rs): the command line is
//! planned as if its value were stored already, and a command that stores a value of its
//! own (SET, ADD, REPLACE, CAS) gets that value's memory from the engine.

use hkv_engine::{Op, Request};
use hkv_proto::step::Step;

use crate::conn::BodyStream;
use crate::plan::{pp_plan_input, ReadMark};
use crate::sasl::Gate;
use crate::stage::rv_drain_body;

use std::sync::atomic::Ordering;

use super::Worker;

impl Worker {
    /// Connection `t`'s input starts with a storage command whose line is `header` bytes
    /// long and whose data block of `vlen` bytes has not all arrived; everything before it
    /// has run. Stages the block, or marks the command to be buffered as before.
    pub(super) fn stage_body(&mut self, t: usize, header: usize, vlen: usize, now: u32) {
        let sasl = self.shared.config.sasl.as_deref();
        let authfile_users = self.shared.config.authfile.as_ref().map(|a| a.current());
        let mut budget = self.pass_budget();
        let Some(c) = self.conns.get_mut(t) else {
            return;
        };
        if c.body.is_some() || c.close_after_write {
            return;
        }
        // Memory is taken by eviction only once half the block has come: clients that
        // send the line of a large value and little of it cannot make live items go for
        // memory their values never fill (docs/protocol.md).
        let arrived = c.rend.saturating_sub(c.rstart + header);
        let evict = arrived >= vlen / 2;
        if c.stage_waits && !evict {
            return;
        }
        let binary = c.binary == Some(true);
        // The line alone, followed by what would follow a staged block: the text data
        // block's terminator (binary has none).
        let mut line = c.rbuf[c.rstart..c.rstart + header].to_vec();
        if !binary {
            line.extend_from_slice(b"\r\n");
        }
        let mut gate = Gate {
            users: sasl,
            authfile: authfile_users.as_deref(),
            authed: c.authed,
            cmds: 0,
            errors: 0,
        };
        let mut batch: Vec<Request<'_>> = Vec::new();
        let (mut steps, mut marks): (Vec<Step>, Vec<ReadMark>) = (Vec::new(), Vec::new());
        let mut limits = self.shared.config.limits;
        limits.stage_min = usize::MAX;
        let placeholder = hkv_engine::Staged {
            partition: u32::MAX,
            loc: 0,
            token: 0,
            key_len: 0,
            value_len: vlen as u64,
        };
        let end = pp_plan_input(
            &line,
            &self.keys,
            0,
            0,
            c.binary,
            None,
            0,
            &limits,
            &mut gate,
            0,
            &mut budget,
            &mut batch,
            &mut steps,
            &mut marks,
            None,
            Some(placeholder),
        );
        let stores_its_value = match batch[..] {
            [r] => {
                matches!(r.op, Op::Set | Op::Add | Op::Replace | Op::Cas)
                    && r.staged.is_some()
                    && end.pos == line.len()
                    && !end.close
            }
            _ => false,
        };
        let admitted = stores_its_value && crate::stage::admit(&self.shared, vlen);
        let staged = match admitted {
            true => self
                .shared
                .engine
                .stage_value(batch[0].key, vlen, now, evict),
            false => None,
        };
        if admitted && staged.is_none() {
            self.shared
                .stats
                .staged_bytes
                .fetch_sub(vlen, std::sync::atomic::Ordering::Relaxed);
        }
        match staged {
            Some(staged) => {
                c.stage_waits = false;
                c.body = Some(BodyStream {
                    staged,
                    header,
                    filled: 0,
                });
                c.scanned = 0;
                rv_drain_body(c, &self.shared.engine);
                self.shared
                    .stats
                    .staged_values
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            // No free memory: buffered until half of it has come, then asked again.
            None if stores_its_value && !evict => c.stage_waits = true,
            None => {
                // Buffered whole, as any other command; its own pass answers it (or
                // refuses it, if it stalls while buffers are over their limit: worker.rs).
                c.stage_waits = false;
                c.stage_refused = true;
                c.want_parse = true;
            }
        }
    }

    /// The connection that held the slot past `--conn-buffer-mb` and sent nothing in it for
    /// EXEMPT_STALL (by its own last input), as another takes the slot: a data block it was
    /// buffering (one that staging could not take) is refused as memcached refuses a value
    /// it cannot allocate, and what it buffered is dropped with the rest as it arrives; a
    /// long line or binary body it holds more than the floor of gets memcached's answer when
    /// it cannot grow its read buffer, and the connection is closed. Kept, every stalled
    /// client came to buffer its whole request in turn (a hostile probe: 1,000 clients
    /// stopping part way through 1 MB values grew the process to 1 GB; through 900 KB get
    /// lines, to 500 MB in 10 s). Complete requests waiting to be planned are never
    /// refused. Its next pass (the throttle timer's) answers it.
    pub(super) fn refuse_stalled(&mut self, t: usize) {
        let Some(c) = self.conns.get_mut(t) else {
            return;
        };
        if c.body.is_some() || c.watch.is_some() || c.close_after_write {
            return;
        }
        if c.stage_refused || c.stage_waits {
            // One waiting to be staged is refused as one that could not be.
            (c.stage_refused, c.stage_waits) = (true, false);
            if c.refuse_body {
                return;
            }
            c.refuse_body = true;
            c.want_parse = true;
        } else if in_one_long_request(c, &self.shared.config.limits) {
            if c.binary != Some(true) {
                hkv_proto::reply::line(&mut c.wbuf, hkv_proto::errors::READ_OUT_OF_MEMORY);
            }
            c.rstart = c.rend;
            c.cont = None;
            c.want_parse = false;
            c.read_closed = true;
            c.close_after_write = true;
            self.hold(t);
        } else {
            return;
        }
        self.shared
            .stats
            .conn_buffer_refused
            .fetch_add(1, Ordering::Relaxed);
        self.throttled.push(t);
    }
}

/// The input holds the start of one request, at least the buffer floor of it, and not its
/// end (a line with no newline yet, a data block or binary body not all come): what a
/// client that stopped part way leaves. Complete requests waiting to be planned are not.
fn in_one_long_request(c: &crate::conn::Conn, limits: &hkv_proto::text::Limits) -> bool {
    c.unparsed() >= super::BUFFER_FLOOR && starts_unfinished(c, limits)
}

/// The most unparsed input RV lets connection `c` hold: `full` (`-I` and more) while what it
/// holds is one request that has not all come (a long line, a data block that is not
/// staged); otherwise the buffer floor, as requests that have all come only wait to be
/// planned. Read up to `full` whatever it held, a client pipelining small requests and
/// reading no replies kept a megabyte of them (memcached reads 16 KiB at a time).
pub(super) fn input_cap(
    c: &crate::conn::Conn,
    limits: &hkv_proto::text::Limits,
    full: usize,
) -> usize {
    if in_one_long_request(c, limits) {
        full
    } else {
        super::BUFFER_FLOOR
    }
}

/// The input's first request has not all come (its line has no newline yet, or its data
/// block or binary body is short), checked by parsing: `Conn::mid_request` says so too of
/// a connection whose complete requests arrived while it was not served.
pub(super) fn starts_unfinished(c: &crate::conn::Conn, limits: &hkv_proto::text::Limits) -> bool {
    use hkv_proto::binary::BinParsed;
    use hkv_proto::text::Parsed;
    let input = &c.rbuf[c.rstart..c.rend];
    let binary = c.binary.unwrap_or(input.first() == Some(&0x80));
    if binary {
        matches!(
            hkv_proto::binary::parse_with(input, limits),
            BinParsed::Incomplete | BinParsed::Body { .. }
        )
    } else {
        // Called for every throttled connection on every retry: parsing a whole multi-key
        // line each time (800 KB, 200k keys) kept a worker at 100% while 50 such clients
        // read nothing (a hostile probe). A line that has all come is finished unless it is
        // a storage command's, whose data block may not have.
        if c.cont.is_some() {
            return false;
        }
        let Some(newline) = memchr::memchr(b'\n', input) else {
            return true;
        };
        if is_retrieval(&input[..newline]) {
            return false;
        }
        matches!(
            hkv_proto::text::parse(input, limits),
            Parsed::Incomplete | Parsed::Body { .. }
        )
    }
}

/// A `get`, `gets`, `gat`, `gats` or `bget` line: no data block follows it.
fn is_retrieval(line: &[u8]) -> bool {
    let name = line.split(|&b| b == b' ').next().unwrap_or_default();
    matches!(name, b"get" | b"gets" | b"gat" | b"gats" | b"bget")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::Conn;

    fn conn_holding(input: &[u8]) -> Conn {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let s = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let mut c = Conn::new(crate::stream::Stream::Tcp(mio::net::TcpStream::from_std(s)));
        c.reserve_read(input.len());
        c.rbuf[..input.len()].copy_from_slice(input);
        c.rend = input.len();
        c
    }

    /// The shortcut for retrieval lines (a whole parse of an 800 KB line on every retry of
    /// a throttled connection kept a worker at 100%: scripts/hostile-throttled-long-gets.py)
    /// must give the parse's answers: finished once the line has all come, not before.
    #[test]
    fn lines_that_have_all_come_are_finished_and_others_are_not() {
        let limits = hkv_proto::text::Limits::default();
        let mut line = b"get".to_vec();
        for _ in 0..200_000 {
            line.extend_from_slice(b" big");
        }
        line.extend_from_slice(b"\r\n");
        assert!(!starts_unfinished(&conn_holding(&line), &limits));
        assert!(starts_unfinished(
            &conn_holding(&line[..line.len() - 2]),
            &limits
        ));
        assert!(!starts_unfinished(
            &conn_holding(b"gats 10 a b\r\n"),
            &limits
        ));
        // A storage line whose data block has not all come is unfinished.
        assert!(starts_unfinished(
            &conn_holding(b"set k 0 0 10\r\nabc"),
            &limits
        ));
        assert!(!starts_unfinished(
            &conn_holding(b"set k 0 0 3\r\nabc\r\n"),
            &limits
        ));
        // `getx` is not a retrieval: parsed as any other line.
        assert!(!starts_unfinished(&conn_holding(b"getx a\r\n"), &limits));
    }
}
