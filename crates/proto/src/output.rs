//! What WR composes into and SD sends from: reply bytes, with large values spliced in as
//! pins on item memory instead of copies (docs/network.md, "Replies without copying
//! values").
//!
//! The bytes on the wire are `bytes[..s0.at]`, then splice `s0`'s value, then
//! `bytes[s0.at..s1.at]`, and so on. Writers append bytes through `Deref<Target = Vec<u8>>`
//! (every composer that knows nothing of splices keeps working) and splice values with
//! [`Output::value`].

use std::collections::VecDeque;
use std::io::IoSlice;
use std::ops::{Deref, DerefMut};

use hkv_types::{Pinned, Response, Responses};

/// The sent bytes an output keeps at its head before [`Output::compact`] moves the unsent
/// rest down: moving at half the buffer or more copies each byte at most once more.
const SENT_HEAD_KEPT: usize = 64 << 10;

/// Reply output: bytes and spliced values, with how far sending has got.
#[derive(Debug, Default)]
pub struct Output {
    bytes: Vec<u8>,
    splices: VecDeque<Splice>,
    /// Bytes of `bytes` sent.
    pos: usize,
    /// Bytes of the first splice sent (it is being sent when `pos` equals its `at`).
    head: usize,
    /// Value bytes of the splices not yet sent.
    spliced: usize,
}

/// One part of a pinned value (a value stored in parts is spliced part by part).
#[derive(Debug)]
struct Splice {
    at: usize,
    value: Pinned,
    part: usize,
}

impl Splice {
    fn bytes(&self) -> &[u8] {
        self.value.part(self.part)
    }

    fn len(&self) -> usize {
        self.bytes().len()
    }
}

impl Deref for Output {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.bytes
    }
}

impl DerefMut for Output {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }
}

impl Output {
    pub fn with_capacity(n: usize) -> Output {
        Output {
            bytes: Vec::with_capacity(n),
            ..Output::default()
        }
    }

    /// Appends the value of the hit `r`: spliced if the engine pinned it, else copied.
    pub fn value(&mut self, res: &Responses, r: &Response) {
        match res.pinned_value(r) {
            Some(p) => self.splice(p.clone()),
            None => self.bytes.extend_from_slice(&res.value(r)),
        }
    }

    /// Appends `value` without copying it.
    pub fn splice(&mut self, value: Pinned) {
        self.spliced += value.len();
        for part in 0..value.part_count() {
            self.splices.push_back(Splice {
                at: self.bytes.len(),
                value: value.clone(),
                part,
            });
        }
    }

    /// Bytes not yet sent, spliced values included.
    pub fn pending(&self) -> usize {
        self.bytes.len() - self.pos + self.spliced - self.head
    }

    /// Value bytes of the splices not yet sent: item memory this output holds from reuse.
    pub fn pinned_bytes(&self) -> usize {
        self.spliced - self.head
    }

    pub fn is_sent(&self) -> bool {
        self.pending() == 0
    }

    /// Whether anything is spliced (a send then needs a vectored write).
    pub fn has_splices(&self) -> bool {
        !self.splices.is_empty()
    }

    /// The unsent bytes in order, at most `max` slices.
    pub fn slices<'a>(&'a self, out: &mut Vec<IoSlice<'a>>, max: usize) {
        let mut pos = self.pos;
        let mut head = self.head;
        for s in &self.splices {
            if out.len() >= max {
                return;
            }
            if pos < s.at {
                out.push(IoSlice::new(&self.bytes[pos..s.at]));
                pos = s.at;
                if out.len() >= max {
                    return;
                }
            }
            let v = &s.bytes()[head..];
            if !v.is_empty() {
                out.push(IoSlice::new(v));
            }
            head = 0;
        }
        if pos < self.bytes.len() && out.len() < max {
            out.push(IoSlice::new(&self.bytes[pos..]));
        }
    }

    /// The first unsent stretch (for a writer that takes one buffer at a time).
    pub fn first_slice(&self) -> &[u8] {
        match self.splices.front() {
            Some(s) if self.pos == s.at => &s.bytes()[self.head..],
            Some(s) => &self.bytes[self.pos..s.at],
            None => &self.bytes[self.pos..],
        }
    }

    /// Marks `n` more bytes sent; a splice sent whole lets go of its pin.
    pub fn advance(&mut self, mut n: usize) {
        loop {
            match self.splices.front() {
                Some(s) if self.pos == s.at => {
                    let len = s.len();
                    let take = n.min(len - self.head);
                    self.head += take;
                    n -= take;
                    if self.head == len {
                        self.spliced -= len;
                        self.head = 0;
                        self.splices.pop_front();
                        continue;
                    }
                    return;
                }
                Some(s) => {
                    let take = n.min(s.at - self.pos);
                    self.pos += take;
                    n -= take;
                    if n == 0 && self.pos < s.at {
                        return;
                    }
                }
                None => {
                    self.pos = (self.pos + n).min(self.bytes.len());
                    return;
                }
            }
        }
    }

    /// Drops whatever is unsent (a broken connection): spliced values are let go now.
    pub fn discard(&mut self) {
        self.clear();
    }

    /// Empties the output, keeping its allocation.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.splices.clear();
        self.pos = 0;
        self.head = 0;
        self.spliced = 0;
    }

    /// Clears it once everything is sent, and drops a sent head of half the buffer or more,
    /// so the buffer does not grow without bound. Clearing only once all was sent let a
    /// client that pipelines without pause and reads slowly (so its replies are never all
    /// sent) grow its buffer by every byte it read: 34 MiB for one such client within a
    /// second on the epoll loop (regression test in crates/server/tests/buffer_limits.rs).
    pub fn compact(&mut self) {
        if self.is_sent() {
            self.clear();
        } else if self.pos >= SENT_HEAD_KEPT && self.pos >= self.bytes.len() / 2 {
            // Each remaining splice comes at or after `pos`: one before it was sent whole
            // and popped.
            self.bytes.drain(..self.pos);
            for s in &mut self.splices {
                s.at -= self.pos;
            }
            self.pos = 0;
        }
    }

    /// Copies the spliced values in (for a datagram, or a writer that cannot take slices).
    pub fn flatten(&mut self) {
        if self.splices.is_empty() {
            return;
        }
        let mut flat = Vec::with_capacity(self.bytes.len() + self.spliced);
        let mut from = 0;
        for s in self.splices.drain(..) {
            flat.extend_from_slice(&self.bytes[from..s.at]);
            flat.extend_from_slice(s.bytes());
            from = s.at;
        }
        flat.extend_from_slice(&self.bytes[from..]);
        let sent = self.pos + self.head;
        self.bytes = flat;
        self.pos = sent;
        self.head = 0;
        self.spliced = 0;
    }

    /// The unsent bytes, spliced values copied in.
    pub fn into_bytes(mut self) -> Vec<u8> {
        self.flatten();
        self.bytes.split_off(self.pos)
    }

    /// The allocation of its byte buffer.
    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// Gives back memory a burst left behind.
    pub fn shrink_to(&mut self, n: usize) {
        self.bytes.shrink_to(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hkv_types::PinRelease;
    use std::sync::{Arc, Mutex};

    struct Owner(Mutex<Vec<u64>>);
    impl PinRelease for Owner {
        fn release(&self, token: u64) {
            self.0.lock().unwrap().push(token);
        }
    }

    fn pin(owner: &Arc<Owner>, bytes: &'static [u8], token: u64) -> Pinned {
        // SAFETY: static bytes are never written or unmapped.
        unsafe { Pinned::new(bytes.as_ptr(), bytes.len(), token, owner.clone()) }
    }

    /// A value stored in parts.
    fn pin_parts(owner: &Arc<Owner>, parts: &[&'static [u8]], token: u64) -> Pinned {
        let parts = parts.iter().map(|p| (p.as_ptr(), p.len())).collect();
        // SAFETY: static bytes are never written or unmapped.
        unsafe { Pinned::new_parts(parts, token, owner.clone()) }
    }

    fn wire(o: &Output) -> Vec<u8> {
        let mut s = Vec::new();
        o.slices(&mut s, usize::MAX);
        // Whole slices copied at once: byte by byte, Miri takes minutes over the 128 KiB
        // outputs below.
        let mut w = Vec::new();
        for x in &s {
            w.extend_from_slice(x);
        }
        w
    }

    fn sample(owner: &Arc<Owner>) -> Output {
        let mut o = Output::default();
        o.extend_from_slice(b"VALUE a 0 5\r\n");
        o.splice(pin_parts(owner, &[b"he", b"", b"llo"], 1));
        o.extend_from_slice(b"\r\nVALUE b 0 3\r\n");
        o.splice(pin(owner, b"abc", 2));
        o.splice(pin(owner, b"", 3));
        o.extend_from_slice(b"\r\nEND\r\n");
        o
    }

    const WIRE: &[u8] = b"VALUE a 0 5\r\nhello\r\nVALUE b 0 3\r\nabc\r\nEND\r\n";

    #[test]
    fn the_wire_order_is_bytes_and_splices_interleaved() {
        let owner = Arc::new(Owner(Mutex::new(Vec::new())));
        let o = sample(&owner);
        assert_eq!(wire(&o), WIRE);
        assert_eq!(o.pending(), WIRE.len());
    }

    #[test]
    fn any_split_of_the_sends_delivers_the_same_bytes_and_releases_each_pin_once() {
        for step in 1..=WIRE.len() {
            let owner = Arc::new(Owner(Mutex::new(Vec::new())));
            let mut o = sample(&owner);
            let mut got = Vec::new();
            while !o.is_sent() {
                let first = o.first_slice();
                let n = step.min(first.len()).max(usize::from(first.is_empty()));
                got.extend_from_slice(&first[..n.min(first.len())]);
                o.advance(n.min(first.len()));
                let rest = wire(&o);
                assert_eq!(&WIRE[got.len()..], &rest[..], "step {step}");
            }
            assert_eq!(got, WIRE, "step {step}");
            let mut released = owner.0.lock().unwrap().clone();
            released.sort();
            assert_eq!(released, vec![1, 2, 3], "step {step}");
        }
    }

    #[test]
    fn slices_stop_at_the_limit_and_flatten_keeps_what_was_sent() {
        let owner = Arc::new(Owner(Mutex::new(Vec::new())));
        let mut o = sample(&owner);
        let mut s = Vec::new();
        o.slices(&mut s, 2);
        assert_eq!(s.len(), 2);
        drop(s);
        o.advance(15);
        o.flatten();
        assert!(!o.has_splices());
        assert_eq!(wire(&o), &WIRE[15..]);
        assert_eq!(
            owner.0.lock().unwrap().len(),
            3,
            "flattening lets go of the pins"
        );
    }

    #[test]
    fn regression_a_sent_head_is_dropped_before_everything_is_sent() {
        // A slow reader's output is never all sent: compacting only then kept every byte
        // it had read. Each split of the sends leaves the same unsent wire after a compact.
        for sent in [
            SENT_HEAD_KEPT + 7,
            2 * SENT_HEAD_KEPT,
            2 * SENT_HEAD_KEPT + 2,
        ] {
            let owner = Arc::new(Owner(Mutex::new(Vec::new())));
            let mut o = Output::default();
            o.extend_from_slice(&vec![b'h'; 2 * SENT_HEAD_KEPT]);
            o.splice(pin(&owner, b"abc", 1));
            o.extend_from_slice(b"\r\nEND\r\n");
            let mut want = wire(&o);
            o.advance(sent);
            want.drain(..sent);
            o.compact();
            assert_eq!(wire(&o), want, "sent {sent}");
            let unsent_bytes = 2 * SENT_HEAD_KEPT + 7 - sent.min(2 * SENT_HEAD_KEPT);
            assert_eq!(o.len(), unsent_bytes, "the sent head is gone (sent {sent})");
            o.advance(want.len());
            assert!(o.is_sent());
            assert_eq!(*owner.0.lock().unwrap(), vec![1], "the pin let go once");
        }
    }
}
