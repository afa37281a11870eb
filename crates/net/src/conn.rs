//! One client connection's buffers and state.

use hkv_proto::output::Output;

use crate::stream::Stream;

use crate::plan::GetCont;

pub(crate) struct Conn {
    pub stream: Stream,
    /// Input storage (initialised, possibly beyond `rend`); `rstart..rend` is unparsed.
    pub rbuf: Vec<u8>,
    pub rstart: usize,
    pub rend: usize,
    /// Bytes of a refused data block still to be dropped as they arrive.
    pub swallow: usize,
    /// Replies, and how far they are sent.
    pub wbuf: Output,
    /// The peer sent EOF: answer what is buffered, then close.
    pub read_closed: bool,
    /// Close once the output is sent (`quit`, a protocol error that closes).
    pub close_after_write: bool,
    /// Input may be waiting in the socket that we did not read (buffer full or output
    /// backed up): read again without waiting for an event.
    pub want_read: bool,
    /// Parsed input is still waiting (a pass stopped at a barrier or a limit).
    pub want_parse: bool,
    pub writable_registered: bool,
    /// Binary protocol (decided by the first byte, as memcached does); None until then.
    pub binary: Option<bool>,
    /// A multi-key line answered in parts: its remaining keys start at `rstart`; positions
    /// relative to `rstart`.
    pub cont: Option<GetCont>,
    /// Last time bytes moved either way (stalls over the buffer limit, keepalive probes).
    pub last_active: std::time::Instant,
    /// When its last command came, or it connected (unix seconds): memcached's
    /// `last_cmd_time`, which `idle_timeout` reads.
    pub last_cmd: u32,
    /// Bytes from `rstart` already known to hold no newline, so a long line arriving in
    /// pieces is scanned once, not once per piece.
    pub scanned: usize,
    /// This connection's share of `conn_buffer_bytes`, as last reported.
    pub accounted: usize,
    /// Passed SASL authentication (meaningful with `-S` only).
    pub authed: bool,
    /// Its entry in `stats conns`, and the Unix time of its last input there.
    pub registered: Option<(usize, std::sync::Arc<std::sync::atomic::AtomicU64>)>,
    /// Served by the worker's io_uring (completions) rather than its epoll (readiness).
    pub ring: Option<RingConn>,
    /// After `watch`: its id in the engine's watch hub; the connection only streams logs.
    pub watch: Option<u64>,
    /// An `lru_crawler metadump` being streamed: its next lines go out as the client reads
    /// the last ones, and no request after it is read until its END.
    pub dump: Option<Box<crate::stats::MetaDump>>,
    /// The peer as `stats conns` names it (`tcp:ip:port`, `unix:path`), for `watch connevents`.
    pub peer: String,
    /// Its socket's descriptor (memcached's `cfd` in log lines).
    pub fd: i32,
    /// Why it is being closed, when not the peer's doing or an error (`idle_timeout`).
    pub close_reason: Option<&'static str>,
    /// The data block being received into item memory (net/src/stage.rs).
    pub body: Option<BodyStream>,
    /// The command at `rstart` could not be staged: its data block is buffered.
    pub stage_refused: bool,
    /// The command at `rstart` found no free memory to stage into: its data block is
    /// buffered until half of it has come, and staged then, evicting (net/src/stage.rs).
    pub stage_waits: bool,
    /// The command at `rstart` could neither be staged nor buffered within
    /// `--conn-buffer-mb`: it is refused as out of memory and its data block dropped.
    pub refuse_body: bool,
    /// Keys this connection may plan in its next pass (worker/process.rs, `key_cap_after`).
    pub key_cap: usize,
}

/// Buffers grown past this are shrunk once they are (nearly) empty: half of the floor a
/// connection may hold while all of them are over `--conn-buffer-mb` (worker.rs).
const SHRINK_ABOVE: usize = 32 << 10;

/// A connection's state on the io_uring loop.
pub(crate) struct RingConn {
    /// Tells this connection's completions from those of an earlier one with its token.
    pub gen: u32,
    pub fd: std::os::fd::RawFd,
    /// A multishot receive is armed (until its last completion).
    pub recv_armed: bool,
    /// A cancel of that receive was asked for: input is not wanted for now.
    pub recv_cancelling: bool,
    /// Bytes the kernel is sending (the buffer is the ring's until the completion).
    pub sending: usize,
    pub sending_cap: usize,
    /// A sent buffer, kept for the next replies.
    pub spare: Option<Output>,
    /// The quiet the probe (worker/probe.rs) is watching began at this activity.
    pub quiet_since: std::time::Instant,
    /// Looks in this quiet, and when the next is due.
    pub probes: u32,
    pub next_probe: std::time::Instant,
}

impl Conn {
    pub fn new(stream: Stream) -> Conn {
        Conn {
            stream,
            rbuf: Vec::new(),
            rstart: 0,
            rend: 0,
            swallow: 0,
            wbuf: Output::with_capacity(4096),
            read_closed: false,
            close_after_write: false,
            want_read: false,
            want_parse: false,
            writable_registered: false,
            binary: None,
            cont: None,
            watch: None,
            dump: None,
            peer: String::new(),
            fd: -1,
            close_reason: None,
            body: None,
            stage_refused: false,
            stage_waits: false,
            refuse_body: false,
            key_cap: crate::plan::MAX_KEYS_PER_CONN_PASS,
            last_active: std::time::Instant::now(),
            last_cmd: crate::clock::unix_now(),
            scanned: 0,
            accounted: 0,
            authed: false,
            registered: None,
            ring: None,
        }
    }

    /// Brings `total` (`conn_buffer_bytes`) up to date with this connection's buffers.
    pub fn account(&mut self, total: &std::sync::atomic::AtomicUsize) {
        use std::sync::atomic::Ordering;
        let now = self.buffer_bytes();
        if now > self.accounted {
            total.fetch_add(now - self.accounted, Ordering::Relaxed);
        } else {
            total.fetch_sub(self.accounted - now, Ordering::Relaxed);
        }
        self.accounted = now;
    }

    /// Memory its buffers hold, and item memory its unsent replies keep from reuse (values
    /// sent without a copy count as if they were copied).
    pub fn buffer_bytes(&self) -> usize {
        let ring = self.ring.as_ref().map_or(0, |r| {
            r.sending_cap + r.spare.as_ref().map_or(0, Output::capacity)
        });
        self.rbuf.capacity() + self.wbuf.capacity() + self.wbuf.pinned_bytes() + ring
    }

    /// Replies not yet delivered to the kernel's socket buffer: buffered here or being sent.
    pub fn pending_output(&self) -> usize {
        self.wbuf.pending() + self.ring.as_ref().map_or(0, |r| r.sending)
    }

    /// Output not yet handed to the kernel: the buffer's, or TLS records below it.
    pub fn output_waiting(&self) -> bool {
        self.pending_output() > 0 || self.stream.wants_write()
    }

    /// A metadump whose next lines may be written: the last ones are all with the kernel
    /// (its output buffer is then emptied, so a reader slower than the dump never grows it).
    pub fn dump_wants_lines(&self) -> bool {
        self.dump.is_some() && !self.output_waiting() && !self.close_after_write
    }

    /// Part way through a request: input is buffered and waits for more bytes.
    pub fn mid_request(&self) -> bool {
        self.unparsed() > 0 && !self.want_parse
    }

    pub fn unparsed(&self) -> usize {
        self.rend - self.rstart
    }

    /// Drops the bytes of a refused data block as soon as they are received. They used to
    /// wait in the input buffer for the next pass to drop them, so a thousand clients
    /// sending values hkv refused grew the process by hundreds of megabytes on io_uring,
    /// where a connection's receives may bring that much between two passes. A pass leaves
    /// `swallow` above zero only once it has dropped every byte it had, so the input from
    /// `rstart` is all still to be dropped.
    pub fn drop_swallowed(&mut self) {
        if self.swallow == 0 || self.body.is_some() {
            return;
        }
        let k = self.swallow.min(self.unparsed());
        if k == 0 {
            return;
        }
        self.swallow -= k;
        self.rstart += k;
        self.scanned = 0;
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
    }

    /// Makes room for at least `want` more bytes of input after `rend`.
    pub fn reserve_read(&mut self, want: usize) {
        if self.rbuf.len() - self.rend < want {
            self.rbuf.resize(self.rend + want, 0);
        }
    }

    /// Drops consumed input so the buffer does not grow without bound.
    pub fn compact(&mut self) {
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        } else if self.rstart > 0 && self.rstart >= self.rend / 2 {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
        }
        self.wbuf.compact();
        // Give back memory a burst left behind, down to well under the floor a throttled
        // connection may hold: an idle connection that kept a grown buffer counted against
        // --conn-buffer-mb for good, and enough of them kept every one of them throttled,
        // unread, for good (regression test in crates/server/tests/buffer_limits.rs).
        if self.rbuf.len() > SHRINK_ABOVE && self.rend < 16384 {
            // A new buffer, not the old one shrunk in place: shrunk, it kept the start of a
            // large block, the rest of which was too small for the next large buffer, and
            // the process grew by a large buffer each time one was given back (1,000
            // clients each made to drop a 1 MB value in turn: 34 MB/s on io_uring).
            let mut fresh = Vec::with_capacity(16384);
            fresh.extend_from_slice(&self.rbuf[..16384]);
            self.rbuf = fresh;
        } else if self.rbuf.capacity() > SHRINK_ABOVE
            && (self.rend - self.rstart) * 4 < self.rbuf.capacity()
        {
            // Input trickles out of a buffer its receives grew by doubling (a pass parses
            // -R requests of a connection): 1,000 clients pipelining `mn` without reading
            // their replies held 380 KB of buffer each for 90 KB of input on io_uring,
            // 400 MB past a 64 MB --conn-buffer-mb (a hostile probe; regression test in
            // crates/server/tests/buffer_limits.rs). Shrunk to twice what it holds, so a
            // copy of it is paid at most once per halving.
            let live = self.rend - self.rstart;
            let mut fresh = Vec::with_capacity((2 * live).max(16384));
            fresh.extend_from_slice(&self.rbuf[self.rstart..self.rend]);
            fresh.resize(fresh.capacity(), 0);
            self.rbuf = fresh;
            self.rstart = 0;
            self.rend = live;
        }
        if self.wbuf.capacity() > SHRINK_ABOVE && self.wbuf.len() < 4096 {
            self.wbuf.shrink_to(4096);
        }
    }
}

/// A data block being received into item memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyStream {
    pub staged: hkv_engine::Staged,
    /// The command line's length: the block's bytes arrive right after it in the buffer.
    pub header: usize,
    /// Bytes of the value received so far.
    pub filled: usize,
}

impl BodyStream {
    pub fn complete(&self) -> bool {
        self.filled as u64 == self.staged.value_len
    }
}
