//! What the engine is asked and what it answers: the protocol layer plans these, the engine
//! runs them, and neither depends on the other. Keys and values are borrowed from the
//! caller's buffers; values read from the store are copied once, into [`Responses::data`].

pub mod item_size;
pub mod pinned;
pub mod vector;
pub mod watch;

pub use item_size::memcached_item_size;
pub use pinned::{PinRelease, Pinned};
pub use vector::{Cmp, Elem, ReduceOp, Reduced, UpdateOp, Vector, VectorCall, VectorError};

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
    /// A vector operation (`vupdate`, `vupdatev`, `vreduce`, `vfilter`):
    /// [`Request::vector`] says which.
    Vector,
}

impl Op {
    pub fn is_read(self) -> bool {
        matches!(self, Op::Get | Op::Gets)
    }
}

/// What the meta protocol adds to a request (all off for the classic commands and binary).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// `u`: read without bumping (no CLOCK reference, fetched bit or access time).
    pub no_bump: bool,
    /// `N<ttl>`: on a GET miss create an empty item with this exptime and win its recache; on
    /// append/prepend create the item from the data on a miss; on INCR/DECR the exptime of
    /// the counter created on a miss (with [`Request::initial`]).
    pub vivify: Option<i64>,
    /// `R<secs>`: a hit whose remaining TTL is below this wins the recache (`W`), once.
    pub recache: Option<i64>,
    /// `I`: DELETE marks the item stale (and bumps its CAS) instead of removing it; a CAS
    /// store with a CAS older than the item's is stored, marked stale.
    pub invalidate: bool,
    /// `E<cas>`: the CAS an item gets if this request creates or changes it.
    pub new_cas: Option<u64>,
    /// `md x`: DELETE leaves the item with an empty value instead of removing it.
    pub strip_value: bool,
    /// `T<ttl>` on `md I` and `ma`: the new exptime of the item the request changes.
    pub ttl: Option<i64>,
    /// `ms b`: the key was sent in base64, and `k` should return it that way.
    pub binary_key: bool,
    /// Where mg's `t`, `T`, `N` and `R` stood among its flags ([`flag_order`] bits):
    /// memcached applies them left to right, so `t` reports the TTL as of its place and the
    /// last of `T` and `N` sets a created item's TTL. 0 is `T N R t` (`t` sees the result).
    pub flag_order: u8,
    /// `md C0`: a DELETE compares its CAS even when it is 0 (so an existing item, whose CAS
    /// is never 0, is not deleted: `EX`, as memcached answers); elsewhere a CAS of 0 means none.
    pub cas_given: bool,
    /// `getset`, `getdel`, meta `G` (KVCG's previous value): a storage command or DELETE
    /// also answers the value its key held before it ran ([`After::previous`]).
    pub previous: bool,
    /// mg: a stale item, or one whose TTL left is below `R`, hands this read the recache
    /// token (`W`) if nobody holds it yet. Off for every other read: text and binary GETs
    /// never take the token, as in memcached (a `get` of a stale item leaves the `W` to the
    /// next mg); and off for an mg whose reply will be an error (an opaque past memcached's
    /// limit), as memcached's reply fails before it sends `W`.
    pub recache_token: bool,
    /// How memcached's `get_*` and `touch_*` counters take this read: they differ by command.
    pub read_stats: ReadStats,
    /// `ms`, in every mode: a store that cannot get memory for its value unlinks the key's
    /// old value, as memcached's mset does. Elsewhere only SET unlinks it; append, prepend,
    /// replace, cas and incr keep it, as memcached does.
    pub unlink_on_failure: bool,
    /// A DELETE that drops the old value of a key whose new one was refused (too large):
    /// memcached unlinks it without counting a delete anywhere.
    pub refused_store: bool,
}

/// How a read counts in memcached's statistics (`cmd_get`, `get_hits`, `get_misses`,
/// `cmd_touch`, `touch_hits`, `touch_misses`), which memcached 1.6 counts differently for each
/// command that reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadStats {
    /// get, gets and the binary GETs count a get's hit or miss; gat, gats and the binary
    /// GAT and TOUCH a touch's only.
    #[default]
    Plain,
    /// mg: a hit with `T` is a touch's hit; a miss is a get's miss, `T` or not; an item `N`
    /// creates is a hit (a touch's with `T`).
    MetaGet,
    /// me: counts nothing.
    Debug,
}

impl Meta {
    /// A GET with these options may create an item, so it runs with the writes.
    pub fn writes(&self) -> bool {
        self.vivify.is_some() || self.new_cas.is_some()
    }
}

/// Bits of [`Meta::flag_order`].
pub mod flag_order {
    /// `T` came after `N`: an item `N` creates gets `T`'s TTL.
    pub const T_AFTER_N: u8 = 1;
    /// `t` came before `T`: it reports the TTL the item had before `T` changed it.
    pub const SHOWN_BEFORE_T: u8 = 2;
    /// `t` came before `N`: on an item `N` creates it reports no TTL (`-1`) unless `T` came
    /// before it.
    pub const SHOWN_BEFORE_N: u8 = 4;
    /// `R` came before `T`: it compares the TTL the item had before `T` changed it.
    pub const RECACHE_BEFORE_T: u8 = 8;
}

/// Bits of [`Response::Value::bits`]: the item's meta state as this request found it.
pub mod hit {
    /// Read before this request (meta `h1`).
    pub const FETCHED: u8 = 1;
    /// Marked stale (meta `X`).
    pub const STALE: u8 = 2;
    /// This request won the recache (meta `W`).
    pub const WIN: u8 = 4;
    /// Another request already won it (meta `Z`).
    pub const WON_ELSEWHERE: u8 = 8;
    /// The item was stored with a base64 key (meta `b`): `k` returns it encoded.
    pub const BINARY_KEY: u8 = 16;
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
    /// Which client of the batch sent it (an index into [`Responses::groups`]), for the
    /// per-client part of the value budget.
    pub group: u32,
    pub meta: Meta,
    /// For [`Op::Vector`]: the element type and operation (the operand vector of `vupdatev`
    /// is [`Request::value`]).
    pub vector: Option<Vector>,
    /// SET, ADD, REPLACE and CAS: the value was received into item memory already
    /// ([`Staged`]); [`Request::value`] is then empty.
    pub staged: Option<Staged>,
}

/// A value received straight into item memory, before its command runs: the partition
/// that holds it and its stage there (the engine's `stage_value`). The command stores it in
/// place of [`Request::value`]; a command that does not store it gives its memory back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Staged {
    pub partition: u32,
    pub loc: u32,
    pub token: u64,
    pub key_len: u32,
    pub value_len: u64,
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
            meta: Meta::default(),
            vector: None,
            staged: None,
        }
    }

    pub fn with_exptime(self, exptime: i64) -> Self {
        Request { exptime, ..self }
    }

    /// Whether the engine runs it as a read: grouped, prefetched, deferrable, changing
    /// nothing but reference bits and meta state.
    pub fn is_read(&self) -> bool {
        self.op.is_read() && !self.meta.writes()
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

    /// Drops the old value of `key`, whose new one was refused ([`Meta::refused_store`]).
    pub fn unlink_refused(key: &'a [u8]) -> Self {
        let mut req = Self::delete(key);
        req.meta.refused_store = true;
        req
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

    /// A vector operation; `operand` is the vector of `vupdatev` (empty otherwise).
    pub fn vector(key: &'a [u8], vector: Vector, operand: &'a [u8]) -> Self {
        Request {
            value: operand,
            vector: Some(vector),
            ..Self::new(Op::Vector, key)
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
    /// A hit; the value is `Responses::data[offset..offset + len]`, or the pinned value
    /// `Responses::pinned[offset - PINNED_VALUE]` (read either with [`Responses::value`]).
    Value {
        flags: u32,
        cas: u64,
        /// 64-bit: a batch may hold more than 4 GiB of values, and a wrapped offset would
        /// hand a client another key's bytes.
        offset: usize,
        len: u32,
        /// Raw expiry: 0 never, else the Unix time it expires.
        expiry: u32,
        /// Unix time of the item's last bumping access before this request.
        atime: u32,
        /// [`hit`] bits.
        bits: u8,
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
    /// A vector update ran (`UPDATED`).
    Updated,
    /// What `vreduce` folded the value into (`RESULT <n>`).
    Reduced(Reduced),
    /// A vector operation refused the value it found; nothing changed (`CLIENT_ERROR`).
    Vector(VectorError),
    /// Not run: a deferrable read whose value did not fit in the batch's value budget. Ask
    /// again in a later batch (nothing was read or changed).
    Deferred,
}

/// The item a write left behind, for replies that report it (binary CAS, meta `c`, `s`, `t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct After {
    pub cas: u64,
    /// Value length.
    pub len: u32,
    /// Raw expiry: 0 never, else a Unix time.
    pub expiry: u32,
    /// The write created the item on a miss (meta `N`).
    pub created: bool,
    /// With [`Meta::previous`]: the value the key held before the write, if it had one.
    pub previous: Option<Previous>,
}

/// A value a write replaced or deleted, copied into [`Responses::data`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Previous {
    pub offset: usize,
    pub len: u32,
    pub flags: u32,
}

impl Responses {
    /// The bytes of a [`Previous`].
    pub fn previous(&self, p: &Previous) -> &[u8] {
        &self.data[p.offset..p.offset + p.len as usize]
    }
}

/// `Response::Value::offset` of the first pinned value: offsets from here on index
/// [`Responses::pinned`] (no batch holds this many bytes of copies).
pub const PINNED_VALUE: usize = 1 << (usize::BITS - 1);

/// The answers to one batch, in request order, and the bytes of the values they return.
#[derive(Debug)]
pub struct Responses {
    pub results: Vec<Response>,
    /// For writes: the item they left (zeros if none). Reads carry theirs in `Value`.
    pub after: Vec<After>,
    pub data: Vec<u8>,
    /// Values answered from item memory without a copy (see [`Pinned`]).
    pub pinned: Vec<Pinned>,
    /// Bytes of values a batch copies for deferrable reads before it answers them
    /// [`Response::Deferred`]; the first value of a batch is always read, so every batch makes
    /// progress. Non-deferrable reads are always answered.
    pub value_budget: usize,
    /// The same budget per client (`Request::group`): a client's deferrable reads stop once
    /// it has this many value bytes in the batch (its first value is always read).
    pub group_budget: usize,
    /// Values at least this long are answered from item memory (pinned), whatever the
    /// engine's own zero-copy threshold: the network sets it while its connection buffers
    /// are over their limit, so unread replies of copied values cannot hold `-c` x `-I`.
    pub pin_from: usize,
    /// The same, once the batch's copied values have reached `value_budget`: the first
    /// value of every client is answered whole, and copied, a batch of many clients' first
    /// values was unbounded.
    pub pin_past_budget: usize,
    /// What each group has been given in this batch; grown as needed, reset by
    /// [`Responses::clear`].
    pub groups: Vec<GroupSpend>,
}

/// One client's share of a batch's value budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupSpend {
    /// Value bytes its deferrable reads were given.
    pub bytes: usize,
    /// Its deferrable reads from this index of the batch on are deferred: the one after its
    /// first deferred read (the client resumes at that read in its next pass, so what comes
    /// after it would be asked again), or [`GroupSpend::UNCUT`].
    pub cut_from: u32,
}

impl GroupSpend {
    pub const UNCUT: u32 = u32::MAX;

    /// Whether the read at `index` of the batch comes after the group's first deferred read.
    pub fn is_cut_at(&self, index: u32) -> bool {
        index >= self.cut_from
    }

    /// Records that the read at `index` was deferred.
    pub fn defer_at(&mut self, index: u32) {
        self.cut_from = self.cut_from.min(index.saturating_add(1));
    }
}

impl Default for GroupSpend {
    fn default() -> Self {
        GroupSpend {
            bytes: 0,
            cut_from: Self::UNCUT,
        }
    }
}

impl Default for Responses {
    fn default() -> Self {
        Responses {
            results: Vec::new(),
            after: Vec::new(),
            data: Vec::new(),
            pinned: Vec::new(),
            value_budget: usize::MAX,
            group_budget: usize::MAX,
            pin_from: usize::MAX,
            pin_past_budget: usize::MAX,
            groups: Vec::new(),
        }
    }
}

impl Responses {
    /// Before another batch's requests are appended: they all come after any read that an
    /// earlier batch deferred, so a client cut there is cut from the start of this one.
    pub fn begin_batch(&mut self) {
        for g in &mut self.groups {
            if g.cut_from != GroupSpend::UNCUT {
                g.cut_from = 0;
            }
        }
    }

    pub fn clear(&mut self) {
        self.results.clear();
        self.after.clear();
        self.data.clear();
        self.pinned.clear();
        self.groups.clear();
    }

    /// The value bytes of a `Response::Value` (empty for any other response).
    /// A pinned value stored in parts comes back copied together: replies splice its parts
    /// instead ([`Responses::pinned_value`]).
    pub fn value(&self, r: &Response) -> std::borrow::Cow<'_, [u8]> {
        match *r {
            Response::Value { offset, .. } if offset >= PINNED_VALUE => {
                match self.pinned.get(offset - PINNED_VALUE) {
                    Some(p) => p.bytes(),
                    None => std::borrow::Cow::Borrowed(&[]),
                }
            }
            Response::Value { offset, len, .. } => {
                std::borrow::Cow::Borrowed(&self.data[offset..offset + len as usize])
            }
            _ => std::borrow::Cow::Borrowed(&[]),
        }
    }

    /// The pinned value of a `Response::Value` answered without a copy.
    pub fn pinned_value(&self, r: &Response) -> Option<&Pinned> {
        match *r {
            Response::Value { offset, .. } if offset >= PINNED_VALUE => {
                self.pinned.get(offset - PINNED_VALUE)
            }
            _ => None,
        }
    }

    /// Bytes of values the batch holds, copied or pinned (what its value budget counts).
    pub fn value_bytes(&self) -> usize {
        self.data.len() + self.pinned.iter().map(Pinned::len).sum::<usize>()
    }
}
