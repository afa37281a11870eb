//! What the engine is asked and what it answers. Keys and values are borrowed from the
//! caller's buffers; values read from the store are copied once, into [`Responses::data`].

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Get,
    Gets,
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
    Delete,
    Incr,
    Decr,
    Touch,
    /// Get and touch (`gat`); `Gats` also returns the CAS.
    Gat,
    Gats,
}

impl Op {
    pub fn is_read(self) -> bool {
        matches!(self, Op::Get | Op::Gets)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub op: Op,
    pub key: &'a [u8],
    /// Data for the SET family.
    pub value: &'a [u8],
    pub flags: u32,
    /// memcached exptime: 0 never, <= 30 days relative, else absolute; negative = expired.
    pub exptime: i64,
    /// Compare value for CAS (and, when non-zero, for DELETE).
    pub cas: u64,
    /// Amount for INCR / DECR.
    pub delta: u64,
    /// INCR / DECR on a missing key create it with this value (binary protocol, meta `ma N`).
    pub initial: Option<u64>,
    /// A GET / GETS the engine may answer with [`Response::Deferred`] instead of copying its
    /// value once the batch's value bytes pass [`Responses::value_budget`]. The caller sets
    /// it only where nothing later from the same client has run in this batch, so the read
    /// can be asked again in the next batch without reordering that client's requests.
    pub deferrable: bool,
    /// Which client of the batch sent it (an index into [`Responses::group_bytes`]), for the
    /// per-client part of the value budget.
    pub group: u32,
}

impl<'a> Request<'a> {
    pub fn new(op: Op, key: &'a [u8]) -> Request<'a> {
        Request {
            op,
            key,
            value: &[],
            flags: 0,
            exptime: 0,
            cas: 0,
            delta: 0,
            initial: None,
            deferrable: false,
            group: 0,
        }
    }

    pub fn get(key: &'a [u8]) -> Self {
        Self::new(Op::Get, key)
    }

    pub fn gets(key: &'a [u8]) -> Self {
        Self::new(Op::Gets, key)
    }

    /// SET, ADD, REPLACE, APPEND or PREPEND.
    pub fn store(op: Op, key: &'a [u8], value: &'a [u8], flags: u32, exptime: i64) -> Self {
        Request {
            value,
            flags,
            exptime,
            ..Self::new(op, key)
        }
    }

    pub fn set(key: &'a [u8], value: &'a [u8]) -> Self {
        Self::store(Op::Set, key, value, 0, 0)
    }

    pub fn cas(key: &'a [u8], value: &'a [u8], flags: u32, exptime: i64, cas: u64) -> Self {
        Request {
            cas,
            ..Self::store(Op::Cas, key, value, flags, exptime)
        }
    }

    pub fn delete(key: &'a [u8]) -> Self {
        Self::new(Op::Delete, key)
    }

    pub fn incr(key: &'a [u8], delta: u64) -> Self {
        Request {
            delta,
            ..Self::new(Op::Incr, key)
        }
    }

    pub fn decr(key: &'a [u8], delta: u64) -> Self {
        Request {
            delta,
            ..Self::new(Op::Decr, key)
        }
    }

    pub fn gat(key: &'a [u8], exptime: i64) -> Self {
        Request {
            exptime,
            ..Self::new(Op::Gat, key)
        }
    }

    pub fn touch(key: &'a [u8], exptime: i64) -> Self {
        Request {
            exptime,
            ..Self::new(Op::Touch, key)
        }
    }
}

/// One answer, in memcached's vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Response {
    /// A hit; the value is `Responses::data[offset..offset + len]`.
    Value {
        flags: u32,
        cas: u64,
        /// 64-bit: a batch may hold more than 4 GiB of values, and a wrapped offset would
        /// hand a client another key's bytes.
        offset: usize,
        len: u32,
        /// Raw expiry: 0 never, else the Unix time it expires.
        expiry: u32,
    },
    Miss,
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    /// New value after INCR / DECR.
    Number(u64),
    /// INCR / DECR on a value that is not a decimal number.
    NonNumeric,
    /// Larger than the largest slab chunk (`SERVER_ERROR object too large for cache`).
    TooLarge,
    /// No memory could be found for the item (`SERVER_ERROR out of memory storing object`).
    OutOfMemory,
    /// Longer than 250 bytes; the protocol layer normally rejects these first.
    KeyTooLong,
    /// Not run: a deferrable read whose value did not fit in the batch's value budget. Ask
    /// again in a later batch (nothing was read or changed).
    Deferred,
}

/// The answers to one batch, in request order, and the bytes of the values they return.
#[derive(Debug)]
pub struct Responses {
    pub results: Vec<Response>,
    /// For writes: the CAS of the item they left (0 if none). Reads carry theirs in `Value`.
    pub cas: Vec<u64>,
    pub data: Vec<u8>,
    /// Bytes of values a batch copies for deferrable reads before it answers them
    /// [`Response::Deferred`]; the first value of a batch is always read, so every batch makes
    /// progress. Non-deferrable reads are always answered.
    pub value_budget: usize,
    /// The same budget per client (`Request::group`): a client's deferrable reads stop once
    /// it has this many value bytes in the batch (its first value is always read).
    pub group_budget: usize,
    /// Value bytes each group has been given in this batch; grown as needed, reset by
    /// [`Responses::clear`].
    pub group_bytes: Vec<usize>,
}

impl Default for Responses {
    fn default() -> Self {
        Responses {
            results: Vec::new(),
            cas: Vec::new(),
            data: Vec::new(),
            value_budget: usize::MAX,
            group_budget: usize::MAX,
            group_bytes: Vec::new(),
        }
    }
}

impl Responses {
    pub fn clear(&mut self) {
        self.results.clear();
        self.cas.clear();
        self.data.clear();
        self.group_bytes.clear();
    }

    /// The value bytes of a `Response::Value` (empty for any other response).
    pub fn value(&self, r: &Response) -> &[u8] {
        match *r {
            Response::Value { offset, len, .. } => &self.data[offset..offset + len as usize],
            _ => &[],
        }
    }
}
