//! Parsed requests. Keys and data borrow from the caller's read buffer.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOp {
    Incr,
    Decr,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// `get` / `gets` (`cas`) with one or more keys.
    Get {
        keys: Vec<&'a [u8]>,
        cas: bool,
    },
    /// `gat` / `gats`: get and touch.
    Gat {
        exptime: i64,
        keys: Vec<&'a [u8]>,
        cas: bool,
    },
    /// set, add, replace, append, prepend, cas: the data block is complete in `data`.
    Store {
        op: StoreOp,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        cas: u64,
        data: &'a [u8],
        noreply: bool,
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    Arith {
        op: ArithOp,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    FlushAll {
        delay: i64,
        noreply: bool,
    },
    Version,
    Verbosity {
        noreply: bool,
    },
    Quit,
    Shutdown,
    Stats {
        args: Vec<&'a [u8]>,
    },
    Meta(MetaCmd<'a>),
}

/// One meta flag: a letter and its (possibly empty) token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaFlag<'a> {
    pub letter: u8,
    pub value: &'a [u8],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaArith {
    Incr,
    Decr,
}

/// A meta command: `mg`, `ms`, `md`, `ma`, `mn`, `me`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaCmd<'a> {
    Get {
        key: &'a [u8],
        flags: Vec<MetaFlag<'a>>,
    },
    Set {
        key: &'a [u8],
        data: &'a [u8],
        flags: Vec<MetaFlag<'a>>,
    },
    Delete {
        key: &'a [u8],
        flags: Vec<MetaFlag<'a>>,
    },
    Arith {
        key: &'a [u8],
        flags: Vec<MetaFlag<'a>>,
    },
    Noop,
    Debug {
        key: &'a [u8],
    },
}

impl<'a> MetaCmd<'a> {
    pub fn flags(&self) -> &[MetaFlag<'a>] {
        match self {
            MetaCmd::Get { flags, .. }
            | MetaCmd::Set { flags, .. }
            | MetaCmd::Delete { flags, .. }
            | MetaCmd::Arith { flags, .. } => flags,
            MetaCmd::Noop | MetaCmd::Debug { .. } => &[],
        }
    }

    pub fn flag(&self, letter: u8) -> Option<&'a [u8]> {
        self.flags()
            .iter()
            .find(|f| f.letter == letter)
            .map(|f| f.value)
    }

    pub fn has(&self, letter: u8) -> bool {
        self.flags().iter().any(|f| f.letter == letter)
    }
}
