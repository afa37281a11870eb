//! One worker's io_uring (docs/network.md): the ring, the provided buffers that multishot
//! receives fill, and the send buffers the kernel is reading. Everything the kernel may still
//! write or read is owned here, so no other code can free or move it early.

use std::alloc::Layout;
use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use hkv_proto::output::Output;
use io_uring::types::{BufRingEntry, CancelBuilder, SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// Bytes of one provided receive buffer.
pub(crate) const BUF_SIZE: usize = 16 * 1024;
/// Provided buffers per worker: a fixed 2 MiB per worker, reported as `ring_buffer_bytes`.
/// It also bounds what a connection can bring in past its limits before its receive is
/// cancelled. When all are filled, receives end (ENOBUFS) and are armed again by the next
/// pass: the bytes wait in the kernel.
pub(crate) const BUF_COUNT: u16 = 128;
const BGID: u16 = 0;
const ENTRIES: u32 = 1024;
/// Longest a ring being dropped waits for the kernel to finish with its buffers.
const DROP_WAIT: Duration = Duration::from_secs(1);

/// What a completion belongs to: the low three bits of its `user_data`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Op {
    Recv = 0,
    Send = 1,
    /// Readiness of the worker's epoll (waker, UDP, TLS connections).
    Poll = 2,
    Cancel = 3,
}

/// `user_data` of an operation on connection `token` in its incarnation `gen` (slab tokens
/// are reused; a late completion for a closed connection must not reach the next one).
pub(crate) fn user_data(op: Op, token: usize, gen: u32) -> u64 {
    (u64::from(gen) << 32) | (((token as u64) & TOKEN_MASK) << 3) | op as u64
}

/// Connection tokens are slab keys, far below this.
const TOKEN_MASK: u64 = 0x1fff_ffff;

pub(crate) fn decode(ud: u64) -> (Op, usize, u32) {
    let op = match ud & 7 {
        0 => Op::Recv,
        1 => Op::Send,
        2 => Op::Poll,
        _ => Op::Cancel,
    };
    (op, ((ud >> 3) & TOKEN_MASK) as usize, (ud >> 32) as u32)
}

/// A completion, copied out of the completion queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Completion {
    pub op: Op,
    pub token: usize,
    pub gen: u32,
    pub result: i32,
    /// The provided buffer a receive filled.
    pub buffer: Option<u16>,
    /// A multishot receive goes on after this completion.
    pub more: bool,
    pub user_data: u64,
}

/// Most pieces one vectored send hands the kernel (a reply and its values; IOV_MAX is
/// 1024, and what does not fit goes with the next send).
const MAX_SEND_SLICES: usize = 64;

/// A send the kernel holds: the replies, and what a `sendmsg` reads beside them.
struct Sending {
    out: Output,
    _iov: Vec<libc::iovec>,
    _msg: Option<Box<libc::msghdr>>,
}

// SAFETY: the raw pointers in `_iov` and `_msg` point into `out` (its heap buffer, and
// pinned item memory that may be read from any thread) and into `_iov`; only the kernel
// reads through them, and all of it moves with the struct between threads.
unsafe impl Send for Sending {}

pub(crate) struct Ring {
    ring: IoUring,
    bufs: BufRing,
    /// Replies the kernel is sending.
    sending: HashMap<u64, Sending>,
    /// Requests the kernel holds; a multishot receive counts until its last completion.
    outstanding: usize,
    /// Entries that did not fit in the submission queue yet.
    backlog: Vec<squeue::Entry>,
    /// A readiness poll on the worker's epoll is armed.
    pub poll_armed: bool,
}

impl Ring {
    /// A ring with its provided buffers registered, or why this kernel cannot give one.
    pub fn new() -> io::Result<Ring> {
        // Completions are processed only when the worker asks for them (it does so on every
        // wait), not by interrupting it; needs 6.1, older kernels get a plain ring.
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_cqsize(ENTRIES * 4)
            .build(ENTRIES)
            .or_else(|_| IoUring::builder().setup_cqsize(ENTRIES * 4).build(ENTRIES))?;
        if !ring.params().is_feature_ext_arg() {
            return Err(io::Error::other("no IORING_FEAT_EXT_ARG (kernel 5.11)"));
        }
        let mut bufs = BufRing::new(BUF_COUNT)?;
        // SAFETY: the ring entries and buffers are owned by `bufs`, which lives in the same
        // `Ring` as the io_uring and is freed only after the ring is gone (see Drop).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(bufs.ring_addr(), BUF_COUNT, BGID, 0)?;
        }
        for bid in 0..BUF_COUNT {
            bufs.push(bid);
        }
        bufs.publish();
        Ok(Ring {
            ring,
            bufs,
            sending: HashMap::new(),
            outstanding: 0,
            backlog: Vec::new(),
            poll_armed: false,
        })
    }

    /// Memory a ring holds for receiving, whatever clients do.
    pub fn fixed_bytes() -> usize {
        BUF_COUNT as usize * (BUF_SIZE + std::mem::size_of::<BufRingEntry>())
    }

    fn push(&mut self, e: squeue::Entry) {
        self.outstanding += 1;
        // SAFETY: every entry built here points only at memory this Ring owns and keeps
        // until the entry's last completion: the provided buffers, or a send buffer held in
        // `sending`. Cancels and polls point at no memory.
        if unsafe { self.ring.submission().push(&e) }.is_err() {
            self.backlog.push(e);
        }
    }

    /// A multishot receive into the provided buffers.
    pub fn arm_recv(&mut self, fd: RawFd, ud: u64) {
        let e = opcode::RecvMulti::new(types::Fd(fd), BGID)
            .build()
            .user_data(ud);
        self.push(e);
    }

    /// One receive of at most one provided buffer: for a connection allowed only a little
    /// more input (connection buffers over their limit), where a multishot receive would
    /// bring in everything the socket holds.
    pub fn recv_once(&mut self, fd: RawFd, ud: u64) {
        let e = opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), BUF_SIZE as u32)
            .buf_group(BGID)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
            .user_data(ud);
        self.push(e);
    }

    /// Sends what `out` has not sent; it comes back with the completion
    /// ([`Ring::take_send`]), to be advanced by the bytes the kernel took. Replies with
    /// values spliced from item memory go as one `sendmsg` over every piece (at most
    /// [`MAX_SEND_SLICES`]), the others as a plain send of their bytes.
    pub fn send(&mut self, fd: RawFd, out: Output, ud: u64) {
        let e = if out.has_splices() {
            let mut slices = Vec::new();
            out.slices(&mut slices, MAX_SEND_SLICES);
            let iov: Vec<libc::iovec> = slices
                .iter()
                .map(|s| libc::iovec {
                    iov_base: s.as_ptr() as *mut libc::c_void,
                    iov_len: s.len(),
                })
                .collect();
            drop(slices);
            // SAFETY: a zeroed msghdr is a valid empty one (null pointers, zero lengths).
            let mut msg: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
            msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = iov.len() as _;
            let e = opcode::SendMsg::new(types::Fd(fd), &*msg)
                .flags(libc_msg_nosignal() as u32)
                .build()
                .user_data(ud);
            // The iovecs point into `out`'s heap buffer and at pinned item memory, and the
            // msghdr is boxed: none of it moves when these move into the map.
            self.sending.insert(
                ud,
                Sending {
                    out,
                    _iov: iov,
                    _msg: Some(msg),
                },
            );
            e
        } else {
            let first = out.first_slice();
            let len = u32::try_from(first.len()).unwrap_or(u32::MAX);
            // The heap block does not move when the Output moves into the map.
            let ptr = first.as_ptr();
            self.sending.insert(
                ud,
                Sending {
                    out,
                    _iov: Vec::new(),
                    _msg: None,
                },
            );
            opcode::Send::new(types::Fd(fd), ptr, len)
                .flags(libc_msg_nosignal())
                .build()
                .user_data(ud)
        };
        self.push(e);
    }

    pub fn take_send(&mut self, ud: u64) -> Option<Output> {
        self.sending.remove(&ud).map(|s| s.out)
    }

    /// Asks the kernel to end the operation `ud` (its completion still comes).
    pub fn cancel(&mut self, ud: u64) {
        let e = opcode::AsyncCancel2::new(CancelBuilder::user_data(ud))
            .build()
            .user_data(user_data(Op::Cancel, 0, 0));
        self.push(e);
    }

    /// One readiness completion when `fd` (the worker's epoll) has events.
    pub fn arm_poll(&mut self, fd: RawFd) {
        let e = opcode::PollAdd::new(types::Fd(fd), 0x001 /* POLLIN */)
            .build()
            .user_data(user_data(Op::Poll, 0, 0));
        self.push(e);
        self.poll_armed = true;
    }

    /// The bytes a receive put in provided buffer `bid`.
    pub fn buffer(&self, bid: u16, len: usize) -> &[u8] {
        self.bufs.get(bid, len)
    }

    /// Gives buffer `bid` back to the kernel (published at the next wait).
    pub fn recycle(&mut self, bid: u16) {
        self.bufs.push(bid);
    }

    /// Submits everything queued and waits for a completion, at most `timeout` (None: no
    /// limit). One system call.
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.bufs.publish();
        self.flush_backlog();
        let r = match timeout {
            None => self.ring.submit_and_wait(1),
            Some(t) => {
                let ts = Timespec::from(t);
                let args = SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match r {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(62 /* ETIME */) => Ok(()),
            // EBUSY: the completion queue is full; reaping makes room.
            Err(e) if e.raw_os_error() == Some(16) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Submits every request queued, without waiting: false while some are still queued.
    pub fn submit_queued(&mut self) -> bool {
        self.bufs.publish();
        self.flush_backlog();
        self.backlog.is_empty() && self.ring.submit().is_ok() && self.ring.submission().is_empty()
    }

    fn flush_backlog(&mut self) {
        while !self.backlog.is_empty() {
            let mut sq = self.ring.submission();
            let mut moved = 0;
            for e in &self.backlog {
                // SAFETY: as in `push`.
                if unsafe { sq.push(e) }.is_err() {
                    break;
                }
                moved += 1;
            }
            drop(sq);
            self.backlog.drain(..moved);
            if self.backlog.is_empty() || self.ring.submit().is_err() {
                break;
            }
        }
    }

    /// Moves every completion waiting into `out`.
    pub fn reap(&mut self, out: &mut Vec<Completion>) {
        for cqe in self.ring.completion() {
            let (op, token, gen) = decode(cqe.user_data());
            let more = cqueue::more(cqe.flags());
            if !more {
                self.outstanding = self.outstanding.saturating_sub(1);
            }
            out.push(Completion {
                op,
                token,
                gen,
                result: cqe.result(),
                buffer: cqueue::buffer_select(cqe.flags()),
                more,
                user_data: cqe.user_data(),
            });
        }
    }
}

/// MSG_NOSIGNAL: a peer gone mid-send is an error for this connection, never a SIGPIPE.
fn libc_msg_nosignal() -> i32 {
    0x4000
}

impl Drop for Ring {
    /// The kernel may still write into the provided buffers or read send buffers: cancel
    /// everything and wait for the completions. If they do not all come in time, the
    /// memory is leaked rather than freed under the kernel (this happens at exit only).
    fn drop(&mut self) {
        if self.outstanding > 0 {
            let e = opcode::AsyncCancel2::new(CancelBuilder::any())
                .build()
                .user_data(user_data(Op::Cancel, 0, 0));
            self.push(e);
            let deadline = Instant::now() + DROP_WAIT;
            let mut sink = Vec::new();
            while self.outstanding > 0 && Instant::now() < deadline {
                if self.wait(Some(Duration::from_millis(10))).is_err() {
                    break;
                }
                sink.clear();
                self.reap(&mut sink);
            }
        }
        if self.outstanding > 0 {
            tracing::warn!(
                outstanding = self.outstanding,
                "io_uring requests outlived the ring; their buffers are leaked"
            );
            std::mem::forget(std::mem::take(&mut self.sending));
            self.bufs.leak();
        }
    }
}

/// The provided-buffer ring: `count` entries the kernel takes buffers from, and the buffers.
struct BufRing {
    entries: NonNull<BufRingEntry>,
    entries_layout: Layout,
    data: NonNull<u8>,
    data_layout: Layout,
    count: u16,
    /// Our tail; the kernel sees it when published.
    tail: u16,
    leaked: bool,
}

// SAFETY: the allocations are owned by this struct alone and moved with it; nothing else
// holds their pointers except the kernel, which does not care which thread owns them.
unsafe impl Send for BufRing {}

impl BufRing {
    fn new(count: u16) -> io::Result<BufRing> {
        assert!(count.is_power_of_two());
        let oom = || io::Error::from(io::ErrorKind::OutOfMemory);
        let entries_layout =
            Layout::from_size_align(count as usize * std::mem::size_of::<BufRingEntry>(), 4096)
                .map_err(|_| oom())?;
        let data_layout =
            Layout::from_size_align(count as usize * BUF_SIZE, 4096).map_err(|_| oom())?;
        // SAFETY: both layouts have a non-zero size.
        let (entries, data) = unsafe {
            (
                std::alloc::alloc_zeroed(entries_layout),
                std::alloc::alloc_zeroed(data_layout),
            )
        };
        let (Some(entries), Some(data)) = (
            NonNull::new(entries.cast::<BufRingEntry>()),
            NonNull::new(data),
        ) else {
            return Err(oom());
        };
        Ok(BufRing {
            entries,
            entries_layout,
            data,
            data_layout,
            count,
            tail: 0,
            leaked: false,
        })
    }

    fn ring_addr(&self) -> u64 {
        self.entries.as_ptr() as u64
    }

    /// Queues buffer `bid` for the kernel.
    fn push(&mut self, bid: u16) {
        let slot = usize::from(self.tail & (self.count - 1));
        // SAFETY: `slot` < count, inside the entries allocation. The kernel reads only
        // entries between its head and the published tail; this slot is past the tail.
        let e = unsafe { &mut *self.entries.as_ptr().add(slot) };
        // SAFETY: bid < count, so the buffer lies inside the data allocation.
        let addr = unsafe { self.data.as_ptr().add(usize::from(bid) * BUF_SIZE) };
        e.set_addr(addr as u64);
        e.set_len(BUF_SIZE as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes the pushed buffers visible to the kernel.
    fn publish(&self) {
        // SAFETY: the tail field lies in the first entry of the ring, which this struct
        // owns; the kernel only reads it, and reads it atomically.
        unsafe {
            let tail = BufRingEntry::tail(self.entries.as_ptr()) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    fn get(&self, bid: u16, len: usize) -> &[u8] {
        let len = len.min(BUF_SIZE);
        let bid = usize::from(bid) & (usize::from(self.count) - 1);
        // SAFETY: the buffer is inside the data allocation; the kernel finished writing it
        // (its completion was reaped) and gets it back only through `push` after the caller
        // is done with the slice (the borrow of `self` ends first).
        unsafe { std::slice::from_raw_parts(self.data.as_ptr().add(bid * BUF_SIZE), len) }
    }

    fn leak(&mut self) {
        self.leaked = true;
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if self.leaked {
            return;
        }
        // SAFETY: allocated in `new` with these layouts. `Ring` declares its io_uring before
        // its buffers, so the ring is closed first, and its Drop saw every request finish
        // (otherwise `leaked` is set).
        unsafe {
            std::alloc::dealloc(self.entries.as_ptr().cast(), self.entries_layout);
            std::alloc::dealloc(self.data.as_ptr(), self.data_layout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn user_data_round_trips() {
        for (op, token, gen) in [
            (Op::Recv, 0, 0),
            (Op::Send, 12345, 7),
            (Op::Poll, 0x1fff_ffff, u32::MAX),
            (Op::Cancel, 1, 1),
        ] {
            assert_eq!(decode(user_data(op, token, gen)), (op, token, gen));
        }
    }

    /// Exercises every unsafe block: registration, buffer recycling, multishot receives into
    /// provided buffers, a send from an owned buffer, cancel, and a drop with requests out.
    #[test]
    fn receives_and_sends_through_the_ring() {
        let Ok(mut ring) = Ring::new() else {
            eprintln!("io_uring is not available here; skipped");
            return;
        };
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        let fd = server.as_raw_fd();
        let rud = user_data(Op::Recv, 3, 9);
        ring.arm_recv(fd, rud);
        // More than one buffer's worth, so buffers are recycled and reused.
        let sent: Vec<u8> = (0..BUF_SIZE * 5).map(|i| (i * 7 % 251) as u8).collect();
        client.write_all(&sent).unwrap();
        let mut got = Vec::new();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < sent.len() && Instant::now() < deadline {
            ring.wait(Some(Duration::from_millis(50))).unwrap();
            out.clear();
            ring.reap(&mut out);
            for c in &out {
                assert_eq!((c.op, c.token, c.gen), (Op::Recv, 3, 9));
                assert!(c.result > 0, "recv failed: {}", c.result);
                let bid = c.buffer.expect("a provided buffer");
                got.extend_from_slice(ring.buffer(bid, c.result as usize));
                ring.recycle(bid);
                if !c.more {
                    ring.arm_recv(fd, rud);
                }
            }
        }
        assert_eq!(got, sent);
        let sud = user_data(Op::Send, 3, 9);
        let mut reply = Output::default();
        reply.extend_from_slice(b"xxhello");
        reply.advance(2);
        ring.send(fd, reply, sud);
        let mut done = false;
        while !done && Instant::now() < deadline {
            ring.wait(Some(Duration::from_millis(50))).unwrap();
            out.clear();
            ring.reap(&mut out);
            for c in &out {
                if c.op == Op::Send {
                    assert_eq!(c.result, 5);
                    let mut reply = ring.take_send(c.user_data).unwrap();
                    assert_eq!(reply.first_slice(), b"hello");
                    reply.advance(5);
                    assert!(reply.is_sent());
                    done = true;
                }
            }
        }
        let mut five = [0u8; 5];
        client.read_exact(&mut five).unwrap();
        assert_eq!(&five, b"hello");
        // A reply with a value spliced in goes as one sendmsg over its pieces.
        struct Static;
        impl hkv_engine::PinRelease for Static {
            fn release(&self, _: u64) {}
        }
        static VALUE: [u8; 3000] = [b'v'; 3000];
        let mut reply = Output::default();
        reply.extend_from_slice(b"VALUE k 0 3000\r\n");
        // SAFETY: a static is never written or unmapped.
        reply.splice(unsafe {
            hkv_engine::Pinned::new(VALUE.as_ptr(), VALUE.len(), 1, std::sync::Arc::new(Static))
        });
        reply.extend_from_slice(b"\r\nEND\r\n");
        let expect: Vec<u8> = [&b"VALUE k 0 3000\r\n"[..], &VALUE, b"\r\nEND\r\n"].concat();
        ring.send(fd, reply, sud);
        let mut left = expect.len();
        while left > 0 && Instant::now() < deadline {
            ring.wait(Some(Duration::from_millis(50))).unwrap();
            out.clear();
            ring.reap(&mut out);
            for c in &out {
                if c.op == Op::Send {
                    assert!(c.result > 0, "sendmsg failed: {}", c.result);
                    let mut reply = ring.take_send(c.user_data).unwrap();
                    reply.advance(c.result as usize);
                    left = reply.pending();
                    if left > 0 {
                        ring.send(fd, reply, sud);
                    }
                }
            }
        }
        let mut got = vec![0u8; expect.len()];
        client.read_exact(&mut got).unwrap();
        assert_eq!(got, expect);
        // The receive is still armed: dropping the ring must cancel it before freeing.
        ring.cancel(rud);
        drop(ring);
    }
}
