//! PP: parses one input (a connection's buffer or a UDP datagram) into engine requests and
//! reply steps, within the pass's budgets.
//!
//! Values read are copied into the pass's output, so how much one pass plans decides how
//! much memory it can take. Three rules keep that bounded whatever a client sends:
//! - a multi-key `get`/`gat` line is planned a slice of keys at a time ([`GetCont`]); the rest
//!   waits in the buffer for later passes, as memcached answers a huge multiget in parts;
//! - a GET with nothing after it from the same client in this pass is *deferrable*: the
//!   engine may answer it `Deferred` when the pass's value budget is spent, and the client
//!   resumes from that key next pass ([`ReadMark`]);
//! - reads followed by a write of the same client must be answered in this pass (the write
//!   has run), so their worst-case size is charged to a per-pass and per-client budget, and a
//!   write that would overdraw it waits for the next pass.

mod authfile;
#[cfg(test)]
mod tests;
mod text;

use bumpalo::Bump;
use hkv_engine::{Op, Request, Staged};
use hkv_proto::binary::BinParsed;
use hkv_proto::text::Limits;

use crate::sasl::{Gate, Verdict};
use hkv_proto::binary::Flow;
use hkv_proto::step::Step;
use text::{plan_get_keys, plan_text};

/// Most requests taken from one connection in one pass, so one pipelining client cannot
/// make a batch (and everyone's latency) arbitrarily large.
pub const MAX_REQUESTS_PER_CONN_PASS: usize = 1024;
/// Most engine requests (keys) for one connection in one pass; a longer multi-key line goes
/// on in the next pass. Bytes are bounded by the value budgets, not by this.
pub(crate) const MAX_KEYS_PER_CONN_PASS: usize = 256;

/// A `get`/`gets`/`gat`/`gats` line being answered over several passes. Positions are
/// absolute within the buffer being parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GetCont {
    pub cas: bool,
    /// `Some` for gat/gats.
    pub exptime: Option<i64>,
    /// End of the last key on the line.
    pub keys_end: usize,
    /// Just past the line's newline.
    pub line_end: usize,
}

impl GetCont {
    /// The same continuation with positions relative to `base` (to survive buffer moves).
    pub fn relative_to(self, base: usize) -> GetCont {
        GetCont {
            keys_end: self.keys_end - base,
            line_end: self.line_end - base,
            ..self
        }
    }

    pub fn absolute_from(self, base: usize) -> GetCont {
        GetCont {
            keys_end: self.keys_end + base,
            line_end: self.line_end + base,
            ..self
        }
    }
}

/// Where a deferrable read came from, so a pass can stop its client at that read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadMark {
    /// The engine request.
    pub req: u32,
    /// Steps before this index are the replies to what came earlier.
    pub step: usize,
    /// Input position to resume from, and the multi-key line it is part of.
    pub resume: usize,
    pub cont: Option<GetCont>,
}

/// What a pass may still spend on reads that cannot be deferred.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PassBudget {
    /// Bytes left for non-deferrable reads in this pass, all clients together.
    pub nd_left: usize,
    /// Bytes of non-deferrable reads one client may have in a pass (beyond its first).
    pub per_client: usize,
    /// Upper bound on a stored value's length when the pass began.
    pub value_bound: usize,
    /// Bytes the writes planned so far in this pass may add to any value.
    pub written: usize,
    pub max_item: usize,
    /// Requests one connection may have planned in a pass (`-R`).
    pub reqs_per_conn: usize,
    /// Engine requests (keys) one connection may have planned in a pass: a longer
    /// multi-key line goes on in the next pass ([`MAX_KEYS_PER_CONN_PASS`]). A UDP datagram
    /// has no next pass for a line cut in two, so it takes all of its keys at once (a
    /// datagram holds at most 64 KiB of them).
    pub keys_per_conn: usize,
    /// Reply bytes besides values ([`reply_estimate`]) the pass may still plan, all clients
    /// together: what is left under `--conn-buffer-mb`.
    pub out_left: usize,
    /// The same for the connection being planned: what is left under its output
    /// high-water. Each client's first command goes regardless (every client progresses).
    pub conn_out_left: usize,
    /// What a `stats conns` reply is reckoned to take: its lines for every open connection
    /// ([`conns_reply_estimate`]).
    pub conns_reply: usize,
    /// Connection buffers together are over `--conn-buffer-mb`: a value a write answers is
    /// copied (only a read's is sent from item memory), so such a write is charged against
    /// the client's share even as its first command, and waits if it does not fit
    /// ([`InputEnd::blocked`]).
    pub over_limit: bool,
}

/// Bytes of `stats conns` per open connection: four lines of ~30 bytes (`STAT 13:addr
/// tcp:127.0.0.1:57858`), with room for IPv6 addresses and longer descriptors.
const CONNS_REPLY_PER_CONN: usize = 192;

/// What a `stats conns` reply is reckoned to take with `open` connections (and listeners).
pub(crate) fn conns_reply_estimate(open: usize) -> usize {
    CONNS_REPLY_PER_CONN
        .saturating_mul(open.saturating_add(16))
        .max(STATS_REPLY_ESTIMATE)
}

/// What a `stats detail dump` reply is reckoned to take: near a megabyte with its 10,000
/// prefixes, so a connection gets one a pass.
const DETAIL_DUMP_ESTIMATE: usize = 1 << 20;

/// What one `stats` reply is reckoned to take before it is made: `stats slabs` with every
/// class in use is ~13 KB.
const STATS_REPLY_ESTIMATE: usize = 16 << 10;
/// An engine request's reply bytes besides its key and value: a binary header, or most of
/// a text `VALUE <key> <flags> <bytes> <cas>` line.
const REQUEST_REPLY_OVERHEAD: usize = 24;
/// A step's own: a status line (`MN`, `HD`, `STORED`, `END`), or a binary extras field.
const STEP_REPLY_OVERHEAD: usize = 4;

/// The reply bytes a command's steps and engine requests may take, values aside (the value
/// budgets bound those). Pipelined `stats slabs` from clients that read nothing held 14 MB
/// a connection (1,024 a pass, each answered before the output mark was looked at again),
/// and binary GETKQ runs 0.7 MB (a hostile probe); `stats conns`, whose reply grows with
/// the connections open, 810 MB in all with 1,000 connections open (another).
fn reply_estimate(steps: &[Step], reqs: &[Request<'_>], conns_reply: usize) -> usize {
    let stats: usize = steps
        .iter()
        .map(|s| match s {
            Step::Stats(args) => match args.first().map(Vec::as_slice) {
                Some(b"conns") => conns_reply,
                Some(b"detail") if args.get(1).map(Vec::as_slice) == Some(b"dump") => {
                    DETAIL_DUMP_ESTIMATE
                }
                _ => STATS_REPLY_ESTIMATE,
            },
            Step::BinStats { group, .. } if group.as_slice() == b"conns" => conns_reply,
            Step::BinStats { .. } => STATS_REPLY_ESTIMATE,
            _ => 0,
        })
        .sum();
    let keys: usize = reqs.iter().map(|r| r.key.len()).sum();
    stats + keys + REQUEST_REPLY_OVERHEAD * reqs.len() + STEP_REPLY_OVERHEAD * steps.len()
}

impl PassBudget {
    /// The most one read can return in this pass.
    fn per_read(&self) -> usize {
        self.value_bound
            .saturating_add(self.written)
            .min(self.max_item)
            .max(1)
    }
}

/// Where parsing one input ended, and what the connection must do next.
pub(crate) struct InputEnd {
    pub pos: usize,
    pub swallow: usize,
    pub close: bool,
    pub more: bool,
    pub binary: Option<bool>,
    pub cont: Option<GetCont>,
    /// Bytes from `pos` known to hold no newline (an incomplete text line).
    pub scanned: usize,
    /// At `pos`: a storage command whose line is this long and whose data block of this
    /// many bytes has not all arrived (net/src/stage.rs).
    pub body: Option<(usize, usize)>,
    /// The pass left requests unread after `-R` of them (memcached's `conn_yields`).
    pub yielded: bool,
    /// Writes refused as too large while parsing (`store_too_large`).
    pub too_large: u64,
    /// Nothing was planned: the first command answers a copied value and the pass may not
    /// copy it ([`PassBudget::over_limit`], or the pass's copies are spent). The connection
    /// waits for the throttle timer, not the next pass (which would spin the worker).
    pub blocked: bool,
}

/// Where one command's planning began, to take it back whole (it waits for a later pass, or
/// for the ordinary pass after the hot path).
#[derive(Clone, Copy)]
struct Undo {
    batch: usize,
    steps: usize,
    marks: usize,
    pos: usize,
    swallow: usize,
    /// The client's open reads then: a `gat` key planned and taken back had moved them
    /// past the batch's end (the hot path's refusal of a `gat` line killed the worker).
    open_from: usize,
    open_reads: usize,
}

impl Undo {
    fn undo(
        self,
        client: &mut Client,
        batch: &mut Vec<Request<'_>>,
        steps: &mut Vec<Step>,
        marks: &mut Vec<ReadMark>,
        end: &mut InputEnd,
    ) {
        batch.truncate(self.batch);
        client.open_from = self.open_from;
        client.open_reads = self.open_reads;
        steps.truncate(self.steps);
        marks.truncate(self.marks);
        end.pos = self.pos;
        end.swallow = self.swallow;
        end.close = false;
        end.cont = None;
        end.more = true;
    }
}

/// Per-connection state of one planning run.
struct Client {
    keys_before: usize,
    steps_before: usize,
    /// Batch index after the last write: reads from here on may still be deferrable.
    open_from: usize,
    /// Reads in `open_from..` (their size is charged once a write follows them).
    open_reads: usize,
    nd_left: usize,
}

impl Client {
    fn planned_nothing(&self, batch_len: usize, steps_len: usize) -> bool {
        batch_len == self.keys_before && steps_len == self.steps_before
    }

    /// Charges `reads` non-deferrable reads; false if the budgets do not allow it (unless the
    /// client has planned nothing yet this pass: every client makes progress).
    fn charge(&mut self, pass: &mut PassBudget, reads: usize, first: bool) -> bool {
        let cost = reads.saturating_mul(pass.per_read());
        if !first && (cost > pass.nd_left || cost > self.nd_left) {
            return false;
        }
        pass.nd_left = pass.nd_left.saturating_sub(cost);
        self.nd_left = self.nd_left.saturating_sub(cost);
        true
    }
}

/// PP for one input (a TCP connection's buffer or one UDP datagram): parses requests from
/// `start`, appending engine requests to `batch`, reply steps to `steps`, and the origin of
/// every deferrable read to `marks`. `group` tags this client's requests for the engine's
/// per-client value budget. With `only`, planning stops before the first request whose
/// engine requests are not all accepted by it (the hot path takes a prefix of reads). With
/// `staged`, the first request's data block is in item memory, not in `buf` (net/src/stage.rs).
#[allow(clippy::too_many_arguments)]
pub(crate) fn pp_plan_input<'a>(
    buf: &'a [u8],
    keys: &'a Bump,
    start: usize,
    swallow_in: usize,
    binary_in: Option<bool>,
    cont_in: Option<GetCont>,
    scanned_in: usize,
    limits: &Limits,
    gate: &mut Gate<'_>,
    group: u32,
    pass: &mut PassBudget,
    batch: &mut Vec<Request<'a>>,
    steps: &mut Vec<Step>,
    marks: &mut Vec<ReadMark>,
    only: Option<&dyn Fn(&Request<'_>) -> bool>,
    mut staged: Option<Staged>,
) -> InputEnd {
    let mut limits = *limits;
    limits.body_staged = staged.is_some();
    let mut end = InputEnd {
        pos: start,
        swallow: swallow_in,
        close: false,
        more: false,
        yielded: false,
        blocked: false,
        too_large: 0,
        binary: binary_in,
        cont: cont_in,
        scanned: 0,
        body: None,
    };
    let mut client = Client {
        keys_before: batch.len(),
        steps_before: steps.len(),
        open_from: batch.len(),
        open_reads: 0,
        nd_left: pass.per_client,
    };
    let marks_before = marks.len();
    let mut count = 0;
    // With `only`: where the get line being planned key by key began (batch, steps, marks,
    // input position, swallow), to undo it if any of its keys is refused.
    let mut line_start: Option<Undo> = None;
    // Where the multi-key line being planned began (batch, steps), to reckon its replies.
    let mut get_line: Option<(usize, usize)> = None;
    loop {
        if let Some(cont) = end.cont {
            let done = plan_get_keys(
                buf,
                &mut end.pos,
                cont,
                &mut client,
                pass,
                batch,
                steps,
                marks,
            );
            if let (Some(undo), Some(accept)) = (line_start.take(), only) {
                if !done || !batch[undo.batch..].iter().all(accept) {
                    undo.undo(&mut client, batch, steps, marks, &mut end);
                    break;
                }
            }
            match done {
                true => end.cont = None,
                false => {
                    end.more = true;
                    break;
                }
            }
            if let Some((b, s)) = get_line.take() {
                // The line's keys were bounded one by one (keys_per_conn); its replies count
                // against what is left, and once that is spent the next command waits.
                let out = reply_estimate(&steps[s..], &batch[b..], pass.conns_reply);
                let over = out > pass.conn_out_left || out > pass.out_left;
                pass.conn_out_left = pass.conn_out_left.saturating_sub(out);
                pass.out_left = pass.out_left.saturating_sub(out);
                if over && end.pos < buf.len() {
                    end.more = true;
                    break;
                }
            }
        }
        if end.swallow > 0 {
            let k = end.swallow.min(buf.len() - end.pos);
            end.pos += k;
            end.swallow -= k;
            if end.swallow > 0 {
                break;
            }
        }
        if end.pos == buf.len() {
            break;
        }
        if count == pass.reqs_per_conn || batch.len() - client.keys_before >= pass.keys_per_conn {
            end.more = true;
            end.yielded = true;
            break;
        }
        count += 1;
        let (b0, s0, m0, p0, w0) = (batch.len(), steps.len(), marks.len(), end.pos, end.swallow);
        let undo = Undo {
            batch: b0,
            steps: s0,
            marks: m0,
            pos: p0,
            swallow: w0,
            open_from: client.open_from,
            open_reads: client.open_reads,
        };
        let first = client.planned_nothing(b0, s0);
        // memcached decides the protocol from a connection's first byte.
        let binary = *end
            .binary
            .get_or_insert(buf[end.pos] == hkv_proto::binary::REQUEST_MAGIC);
        let stop = if binary {
            plan_binary(buf, &limits, &mut end, batch, steps, gate)
        } else if !gate.open() && gate.users.is_none() {
            // -Y: text commands are refused one by one until a `set` authenticates.
            let hint = if p0 == start { scanned_in } else { 0 };
            authfile::plan_unauthenticated(buf, &limits, hint, &mut end, steps, gate)
        } else if !gate.open() {
            // With -S the text and meta protocols are refused: memcached reads such a
            // connection as binary and hangs up on its first bytes.
            end.close = true;
            true
        } else {
            let hint = if p0 == start { scanned_in } else { 0 };
            plan_text(buf, keys, &limits, hint, &mut end, batch, steps)
        };
        // A refusal of a block that could not be buffered is for the first request only
        // (worker/stage.rs): requests after it are planned as ever.
        limits.refuse_unstaged = false;
        if let Some(st) = staged.take() {
            // Only the first request's data block was staged; the engine stores it with the
            // request (or gives it back if the request does not store it).
            limits.body_staged = false;
            for r in &mut batch[b0..] {
                if matches!(r.op, Op::Set | Op::Add | Op::Replace | Op::Cas) {
                    r.staged = Some(st);
                }
            }
        }
        if let Some(accept) = only {
            let new = &batch[b0..];
            let get_line = end.cont.is_some() && new.is_empty() && !end.close;
            let whole = end.cont.is_none() && !end.close && end.swallow == w0;
            if get_line {
                // Its keys are planned next, at the top of the loop, and checked there.
                line_start = Some(undo);
            } else if new.is_empty() || !whole || !new.iter().all(accept) {
                // Not for this run: left for the ordinary pass, parsed again there.
                undo.undo(&mut client, batch, steps, marks, &mut end);
                break;
            }
        }
        if end.cont.is_some() {
            // A multi-key line: its keys are planned (and charged) one by one.
            get_line = Some((b0, s0));
            continue;
        }
        let out = reply_estimate(&steps[s0..], &batch[b0..], pass.conns_reply);
        if !first && (out > pass.conn_out_left || out > pass.out_left) {
            // Its reply waits until the client has read what it was given.
            undo.undo(&mut client, batch, steps, marks, &mut end);
            break;
        }
        pass.conn_out_left = pass.conn_out_left.saturating_sub(out);
        pass.out_left = pass.out_left.saturating_sub(out);
        // Charge what the command added: a write makes every open read non-deferrable.
        let new = &batch[b0..];
        let writes = new.iter().any(|r| !r.is_read());
        if writes {
            let values = new.iter().filter(|r| returns_value(r)).count();
            // A client's first command goes whatever its cost (every client progresses),
            // unless it answers a copied value the pass cannot afford: 600 clients not
            // reading `vupdate ... old` of 900 KB values held 1 GB (a hostile probe).
            let copies = new.iter().any(copies_value);
            let exempt = first && !(copies && (pass.over_limit || pass.nd_left < pass.per_read()));
            if !client.charge(pass, client.open_reads + values, exempt) {
                // Not this pass: the command is parsed again next time.
                end.blocked = first;
                undo.undo(&mut client, batch, steps, marks, &mut end);
                break;
            }
            for r in new {
                let staged = r.staged.map_or(0, |s| s.value_len as usize);
                pass.written = pass.written.saturating_add(r.value.len() + staged + 24);
            }
            client.open_from = batch.len();
            client.open_reads = 0;
        } else {
            for i in b0..batch.len() {
                marks.push(ReadMark {
                    req: i as u32,
                    step: s0,
                    resume: p0,
                    cont: None,
                });
                client.open_reads += 1;
            }
        }
        if stop {
            break;
        }
    }
    // Reads after this client's last write may wait for a later pass, except the first of
    // them when the budget allows: partitions run in turn, so the engine may spend the
    // budget on this client's later keys first, and the earliest one must not wait forever.
    if let Some(i) = batch[client.open_from..].iter().position(|r| r.is_read()) {
        let at = client.open_from + i;
        if client.charge(pass, 1, at == client.keys_before) {
            for r in &mut batch[client.open_from..=at] {
                r.deferrable = false;
            }
            client.open_from = at + 1;
        }
    }
    for r in &mut batch[client.keys_before..] {
        r.group = group;
    }
    for r in &mut batch[client.open_from..] {
        r.deferrable = r.is_read();
    }
    let open_from = client.open_from as u32;
    let mut kept = marks_before;
    for i in marks_before..marks.len() {
        if marks[i].req >= open_from {
            marks[kept] = marks[i];
            kept += 1;
        }
    }
    marks.truncate(kept);
    end
}

/// A value the reply carries that cannot come from item memory: the value a write replaced
/// (getset, getdel, meta `G`) or a vector operation's result (`vfilter`, `vupdate ... old`).
fn copies_value(r: &Request<'_>) -> bool {
    r.meta.previous || r.op == Op::Vector
}

fn returns_value(r: &Request<'_>) -> bool {
    // Vector: `vfilter` and `vupdate ... old` answer a value; `previous`: getset, getdel,
    // meta `G`.
    r.meta.previous || matches!(r.op, Op::Get | Op::Gets | Op::Gat | Op::Gats | Op::Vector)
}

/// Plans one binary request. Returns true if parsing must stop after it.
fn plan_binary<'a>(
    buf: &'a [u8],
    limits: &Limits,
    end: &mut InputEnd,
    batch: &mut Vec<Request<'a>>,
    steps: &mut Vec<Step>,
    gate: &mut Gate<'_>,
) -> bool {
    use hkv_proto::step::BinStep;
    match hkv_proto::binary::parse_with(&buf[end.pos..], limits) {
        BinParsed::Incomplete => true,
        BinParsed::Body { header, vlen } => {
            end.body = Some((header, vlen));
            true
        }
        BinParsed::Close => {
            end.close = true;
            true
        }
        BinParsed::Error {
            opcode,
            status,
            opaque,
            len,
            swallow,
            close,
            unlink,
        } => {
            end.pos += len;
            end.swallow = swallow;
            if gate.refuses_malformed(opcode) {
                steps.push(Step::Bin(BinStep::Text {
                    opcode,
                    status: hkv_proto::binary::status::AUTH_ERROR,
                    opaque,
                    body: b"",
                }));
                end.close = true;
                return true;
            }
            if let Some(key) = unlink.filter(|_| gate.open()) {
                // memcached drops the old value of a key whose new one it refused (and a
                // client not yet authenticated under -S drops nothing).
                batch.push(Request::unlink_refused(key));
            }
            // memcached 1.6 counts no binary refusal in `store_too_large` (text ones only).
            steps.push(Step::Bin(BinStep::Status {
                opcode,
                status,
                opaque,
            }));
            end.close |= close;
            close
        }
        BinParsed::Request { req, len } => {
            end.pos += len;
            match crate::sasl::gate_binary(&req, gate, steps) {
                Verdict::Pass => {}
                Verdict::Answered => return false,
                Verdict::Close => {
                    end.close = true;
                    return true;
                }
            }
            match hkv_proto::binary::plan(req, buf, batch, steps) {
                Flow::Continue => false,
                Flow::Barrier => {
                    end.more = true;
                    true
                }
                Flow::Close => {
                    end.close = true;
                    true
                }
            }
        }
    }
}
