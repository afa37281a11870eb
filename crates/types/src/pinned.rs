//! A value handed to the network without copying it: the bytes stay in item memory, whose
//! owner promises not to reuse or change them until every handle is gone.
//!
//! Large GETs pay for two copies otherwise (into the batch's buffer, then the connection's
//! output); with a pinned value the send reads the slab chunk itself (docs/network.md,
//! "Replies without copying values").

use std::sync::Arc;

/// Who keeps pinned bytes unchanged, and is told when they may change again.
pub trait PinRelease: Send + Sync {
    /// The last handle of the pin `token` is gone.
    fn release(&self, token: u64);
}

/// A shared handle on pinned bytes: one stretch, or several (a value stored in parts),
/// which are the value in order. Cloning it adds no pin (the pin ends with the last clone).
#[derive(Clone)]
pub struct Pinned(Arc<Inner>);

struct Inner {
    parts: Vec<(*const u8, usize)>,
    len: usize,
    token: u64,
    owner: Arc<dyn PinRelease>,
}

// SAFETY: the bytes behind `parts` are not written while the pin lasts (the contract of
// `Pinned::new`), so reading them from any thread is a read of immutable memory; `owner` is
// Send + Sync itself.
unsafe impl Send for Inner {}
// SAFETY: as above: shared access only ever reads.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        self.owner.release(self.token);
    }
}

impl Pinned {
    /// A handle on `len` bytes at `ptr`.
    ///
    /// # Safety
    /// Until `owner.release(token)` is called, the `len` bytes at `ptr` must stay mapped,
    /// initialised and unwritten by anyone.
    pub unsafe fn new(ptr: *const u8, len: usize, token: u64, owner: Arc<dyn PinRelease>) -> Self {
        // SAFETY: the caller's promise, for the one part.
        unsafe { Self::new_parts(vec![(ptr, len)], token, owner) }
    }

    /// A handle on a value made of `parts` (pointer and length each), in order.
    ///
    /// # Safety
    /// As [`Pinned::new`], for every part.
    pub unsafe fn new_parts(
        parts: Vec<(*const u8, usize)>,
        token: u64,
        owner: Arc<dyn PinRelease>,
    ) -> Self {
        let len = parts.iter().map(|p| p.1).sum();
        Pinned(Arc::new(Inner {
            parts,
            len,
            token,
            owner,
        }))
    }

    /// Part `i` of the value (empty past the last).
    pub fn part(&self, i: usize) -> &[u8] {
        match self.0.parts.get(i) {
            // SAFETY: `new`'s contract keeps these bytes mapped and unchanged while
            // `self.0` lives, and `self` borrows it for the slice's lifetime.
            Some(&(ptr, len)) => unsafe { std::slice::from_raw_parts(ptr, len) },
            None => &[],
        }
    }

    pub fn part_count(&self) -> usize {
        self.0.parts.len()
    }

    /// The parts, in order.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.part_count()).map(|i| self.part(i))
    }

    /// The value in one slice: borrowed when it is one part, else copied together.
    pub fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        if self.part_count() == 1 {
            return std::borrow::Cow::Borrowed(self.part(0));
        }
        std::borrow::Cow::Owned(self.parts().flatten().copied().collect())
    }

    pub fn len(&self) -> usize {
        self.0.len
    }

    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
}

impl std::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pinned")
            .field("len", &self.0.len)
            .field("token", &self.0.token)
            .finish()
    }
}

impl PartialEq for Pinned {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Bytes that are writable again once released: a stand-in for a slab chunk.
    struct Chunk {
        bytes: Box<[u8]>,
        released: Mutex<Vec<u64>>,
    }

    impl PinRelease for Chunk {
        fn release(&self, token: u64) {
            self.released.lock().unwrap().push(token);
        }
    }

    #[test]
    fn the_pin_ends_with_the_last_clone_and_reads_the_owners_bytes() {
        let chunk = Arc::new(Chunk {
            bytes: b"hello world".to_vec().into_boxed_slice(),
            released: Mutex::new(Vec::new()),
        });
        let owner: Arc<dyn PinRelease> = chunk.clone();
        // SAFETY: `chunk` outlives the handles (the test holds it) and nothing writes it.
        let p = unsafe { Pinned::new(chunk.bytes.as_ptr().wrapping_add(6), 5, 7, owner) };
        let q = p.clone();
        assert_eq!(&p.bytes()[..], b"world");
        drop(p);
        assert!(chunk.released.lock().unwrap().is_empty());
        let sent = std::thread::spawn(move || q.bytes().to_vec())
            .join()
            .unwrap();
        assert_eq!(sent, b"world");
        assert_eq!(*chunk.released.lock().unwrap(), vec![7]);
    }

    #[test]
    fn a_value_in_parts_reads_in_order() {
        let chunk = Arc::new(Chunk {
            bytes: b"hello world".to_vec().into_boxed_slice(),
            released: Mutex::new(Vec::new()),
        });
        let owner: Arc<dyn PinRelease> = chunk.clone();
        let b = chunk.bytes.as_ptr();
        // SAFETY: `chunk` outlives the handle and nothing writes it.
        let p = unsafe { Pinned::new_parts(vec![(b.wrapping_add(6), 5), (b, 5)], 9, owner) };
        assert_eq!((p.len(), p.part_count()), (10, 2));
        assert_eq!(p.part(1), b"hello");
        assert_eq!(&p.bytes()[..], b"worldhello");
        drop(p);
        assert_eq!(*chunk.released.lock().unwrap(), vec![9]);
    }
}
