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
        offset: u32,
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
}

/// The answers to one batch, in request order, and the bytes of the values they return.
#[derive(Debug, Default)]
pub struct Responses {
    pub results: Vec<Response>,
    /// For writes: the CAS of the item they left (0 if none). Reads carry theirs in `Value`.
    pub cas: Vec<u64>,
    pub data: Vec<u8>,
}

impl Responses {
    pub fn clear(&mut self) {
        self.results.clear();
        self.cas.clear();
        self.data.clear();
    }

    /// The value bytes of a `Response::Value` (empty for any other response).
    pub fn value(&self, r: &Response) -> &[u8] {
        match *r {
            Response::Value { offset, len, .. } => {
                &self.data[offset as usize..offset as usize + len as usize]
            }
            _ => &[],
        }
    }
}
