//! Parsed requests. Keys and data borrow from the caller's read buffer; the operations are
//! the engine's own ([`Op`]), so planning maps nothing by hand.

use hkv_types::Op;

/// The keys of a get line: a few inline, more on the heap (most gets name one key, and a
/// heap allocation per line was a tenth of a text GET).
pub type Keys<'a> = smallvec::SmallVec<[&'a [u8]; 4]>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// `get` / `gets` (`cas`) with one or more keys.
    Get {
        keys: Keys<'a>,
        cas: bool,
    },
    /// `gat` / `gats`: get and touch.
    Gat {
        exptime: i64,
        keys: Keys<'a>,
        cas: bool,
    },
    /// set, add, replace, append, prepend, cas: the data block is complete in `data`.
    Store {
        /// Set, Add, Replace, Append, Prepend or Cas.
        op: Op,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        cas: u64,
        data: &'a [u8],
        noreply: bool,
        /// `getset`: answer the value the key held before (hkv's extension).
        previous: bool,
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
        /// `getdel`: answer the value deleted (hkv's extension).
        previous: bool,
    },
    Arith {
        /// Incr or Decr.
        op: Op,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    /// `delay` None: not a number.
    FlushAll {
        delay: Option<i64>,
        noreply: bool,
    },
    Version,
    /// `verbosity <level>`: the level, capped at 2 as memcached caps it.
    Verbosity {
        level: u8,
        noreply: bool,
    },
    Quit,
    /// `shutdown [graceful]`: `graceful` stops as SIGUSR1 does (saving a warm-restart
    /// memory file, memcached's `-e`).
    Shutdown {
        graceful: bool,
        /// The argument was neither absent nor `graceful` (refused only when shutdown is
        /// enabled, as memcached does).
        invalid: bool,
    },
    /// `refresh_certs`: reload the TLS certificate and key (memcached's, with `-Z`).
    RefreshCerts,
    Stats {
        args: Vec<&'a [u8]>,
    },
    /// `watch [fetchers|mutations|evictions|connevents|deletions]...`: the connection becomes
    /// a log stream ([`hkv_types::watch`] bits).
    Watch {
        streams: u8,
    },
    /// `cache_memlimit <megabytes> [noreply]`: a new memory limit.
    CacheMemlimit {
        megabytes: u64,
        noreply: bool,
    },
    /// `slabs reassign <src> <dst>` (1-based classes, as sent).
    SlabsReassign {
        from: i64,
        to: i64,
    },
    /// `slabs automove <0|1|2>`; `None`: `slabs automove ratio <r>`, taken and ignored.
    SlabsAutomove {
        mode: Option<u8>,
        noreply: bool,
    },
    /// `lru_crawler metadump <all|class ids>`.
    MetaDump {
        classes: crate::step::ClassList,
    },
    /// The other `lru_crawler` commands.
    Crawler(crate::step::CrawlerOp),
    Meta(MetaCmd<'a>),
    /// `vupdate`, `vupdatev`, `vreduce`, `vfilter` (hkv's extension): `operand` is the data
    /// block of `vupdatev`.
    Vector {
        key: &'a [u8],
        vector: hkv_types::Vector,
        operand: &'a [u8],
        noreply: bool,
    },
}

/// A meta command: `mg`, `ms`, `md`, `ma`, `mn`, `me`. Its flags are parsed once, into
/// [`MetaFlags`](super::MetaFlags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaCmd<'a> {
    Get {
        key: &'a [u8],
        flags: super::MetaFlags<'a>,
    },
    Set {
        key: &'a [u8],
        data: &'a [u8],
        flags: super::MetaFlags<'a>,
    },
    Delete {
        key: &'a [u8],
        flags: super::MetaFlags<'a>,
    },
    Arith {
        key: &'a [u8],
        flags: super::MetaFlags<'a>,
    },
    Noop,
    Debug {
        key: &'a [u8],
        base64: bool,
    },
}

impl<'a> MetaCmd<'a> {
    /// The flags of mg, ms, md and ma.
    pub fn flags(&self) -> Option<&super::MetaFlags<'a>> {
        match self {
            MetaCmd::Get { flags, .. }
            | MetaCmd::Set { flags, .. }
            | MetaCmd::Delete { flags, .. }
            | MetaCmd::Arith { flags, .. } => Some(flags),
            MetaCmd::Noop | MetaCmd::Debug { .. } => None,
        }
    }
}
