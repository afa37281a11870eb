//! What planning leaves for WR: one step per reply piece, in request order. Pure data, so the
//! planners (meta, binary, text) and the composers share it without depending on each other.
//! Steps that read or change server state (flush, stats, shutdown, memory limit, slab moves,
//! certificates) are top-level variants, run by the server's control before composing; the
//! rest are composed from engine results alone, here in this crate.

/// One piece of a connection's reply, in request order.
#[derive(Debug)]
pub enum Step {
    /// A fixed line; `\r\n` is appended.
    Text(&'static str),
    /// One key of a get: a VALUE block on a hit, nothing on a miss.
    Value {
        idx: u32,
        key_off: u32,
        key_len: u32,
        cas: bool,
    },
    /// The reply of a storage, delete, incr/decr or touch command.
    Reply {
        idx: u32,
        noreply: bool,
        /// incr/decr: memcached words running out of memory differently.
        arith: bool,
    },
    /// `flush_all`; `delay` None: not a number (refused after `-F`, as memcached checks).
    Flush {
        delay: Option<i64>,
        noreply: bool,
    },
    Version,
    /// `verbosity`: the server's logging level changes to `level`.
    Verbosity {
        level: u8,
        noreply: bool,
    },
    Shutdown {
        graceful: bool,
        invalid: bool,
    },
    RefreshCerts,
    Stats(Vec<Vec<u8>>),
    /// `watch`: the connection becomes a watcher of these streams (or is refused).
    Watch(u8),
    MemLimit {
        megabytes: u64,
        noreply: bool,
    },
    /// `lru_crawler metadump`.
    MetaDump(ClassList),
    /// `lru_crawler crawl|sleep|tocrawl|enable|disable`.
    Crawler(CrawlerOp),
    Reassign {
        from: i64,
        to: i64,
    },
    Automove {
        mode: Option<u8>,
        noreply: bool,
    },
    /// The reply of `getset` / `getdel`: the previous value as `get` answers it.
    Previous {
        idx: u32,
        key_off: u32,
        key_len: u32,
        noreply: bool,
    },
    /// The reply of a vector command (`UPDATED`, `RESULT`, a value, an error).
    Vector {
        idx: u32,
        key_off: u32,
        key_len: u32,
        noreply: bool,
    },
    Meta(MetaStep),
    Bin(BinStep),
    /// Binary FLUSH: the server's control runs it, then its reply is composed.
    BinFlush {
        delay: i64,
        opaque: u32,
        quiet: bool,
    },
    /// Binary STAT with its group (empty: the general one), answered by the server's stats.
    BinStats {
        opaque: u32,
        group: Vec<u8>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKind {
    Get,
    Set,
    Delete,
    Arith,
}

/// What a meta reply needs from its request, with tokens kept as places in the read buffer.
#[derive(Debug, Clone, Copy)]
pub struct Echo {
    /// Return-flag letters in request order.
    pub ret: [u8; 17],
    pub ret_len: u8,
    /// The key token as sent (base64 when `b`), and the opaque token.
    pub key: (u32, u32),
    pub opaque: (u32, u32),
    pub base64: bool,
    pub quiet: bool,
    pub value: bool,
    /// The reply is `CLIENT_ERROR opaque token too long` unless the command failed on its
    /// own ([`crate::text::MetaFlags::opaque_too_long`]).
    pub opaque_too_long: bool,
}

#[derive(Debug)]
pub enum MetaStep {
    Noop,
    Reply {
        kind: MetaKind,
        idx: u32,
        echo: Echo,
        /// `mg C<cas>`: drop the value if the item's CAS matches.
        unless_cas: Option<u64>,
    },
    Debug {
        idx: u32,
        key: (u32, u32),
        base64: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinKind {
    Get { with_key: bool },
    Store,
    Delete,
    Arith,
    Touch,
}

#[derive(Debug)]
pub enum BinStep {
    /// A reply built from engine result `idx`.
    Engine {
        kind: BinKind,
        idx: u32,
        opcode: u8,
        opaque: u32,
        quiet: bool,
        key_off: u32,
        key_len: u32,
    },
    /// A fixed status (errors, NOOP, QUIT, FLUSH done).
    Status {
        opcode: u8,
        status: u16,
        opaque: u32,
    },
    Version {
        opaque: u32,
    },
    /// A status with a fixed body on success (SASL's `Authenticated`, `PLAIN`); a failure
    /// carries the status's own message.
    Text {
        opcode: u8,
        status: u16,
        opaque: u32,
        body: &'static [u8],
    },
}

/// The slab classes an `lru_crawler crawl|metadump` names, as memcached's crawler reads
/// its list: the checks of the crawler's state come before this list's refusals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassList {
    /// `all` (and `hash` for metadump): every class.
    All,
    /// The 1-based ids named, each 1 to 63; none when the list named none (`,`: memcached
    /// starts nothing, `NOTSTARTED`).
    Ids(Vec<u32>),
    /// An id that is not a number from 1 to 63 (`BADCLASS`).
    Bad,
}

/// What an `lru_crawler` command asks of memcached's LRU crawler (hkv's expiry sweep).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrawlerOp {
    /// `crawl <all|ids>`: reclaim expired items now.
    Crawl(ClassList),
    /// `sleep <microseconds>` between items (at most a second).
    Sleep(u32),
    /// `tocrawl <n>`: items checked per class per crawl, 0 for all.
    ToCrawl(u32),
    Enable,
    Disable,
}
