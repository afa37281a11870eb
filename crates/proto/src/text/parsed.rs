//! What parsing one request yields, shared by the classic and the meta parsers.

use super::command::Command;
use crate::errors::BAD_FORMAT;

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `-I`: the largest item a storage command may make, counted as memcached counts it
    /// ([`Limits::fits`]).
    pub max_item_size: usize,
    /// CAS is on (not `-C`): memcached counts eight bytes of CAS in an item's size.
    pub cas: bool,
    /// The longest get line accepted (gets may exceed the 2048-byte rule, as in memcached).
    pub max_get_line: usize,
    /// The longest line of any other command, newline included ([`crate::MAX_LINE`]; UDP:
    /// no limit but the datagram's, as memcached reads a datagram whole).
    pub max_line: usize,
    /// A storage command (set, add, replace, cas, getset, ms; binary SET, ADD, REPLACE)
    /// whose data block of at least this many bytes is not all in the buffer yet is
    /// reported as [`Parsed::Body`], so that its bytes can be received into item memory
    /// instead of the buffer. `usize::MAX`: never (UDP, where a datagram is whole).
    pub stage_min: usize,
    /// A data block that would be reported as [`Parsed::Body`] is refused instead, as
    /// memcached refuses a value it cannot allocate (`SERVER_ERROR out of memory storing
    /// object`, binary `Out of memory`), and its bytes are dropped as they arrive: the server
    /// could neither stage it nor buffer it within its limits.
    pub refuse_unstaged: bool,
    /// The first request's data block is not in the buffer: it was received into item
    /// memory ([`Parsed::Body`]) and taken out, so its command line is followed directly
    /// by what came after the data (for text, the data block's `\r\n`). Its command is
    /// parsed with empty data.
    pub body_staged: bool,
    /// SASL is on (`-S`): without it memcached answers the SASL opcodes "Unknown command"
    /// and drops their bodies unread, whatever their size.
    pub sasl: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_item_size: 1 << 20,
            cas: true,
            max_get_line: 1 << 20,
            max_line: crate::MAX_LINE,
            stage_min: usize::MAX,
            refuse_unstaged: false,
            body_staged: false,
            sasl: false,
        }
    }
}

impl Limits {
    /// Whether an item of this key, flags and value fits in `-I` as memcached 1.6 counts it
    /// (header, key, flags, value and CAS): memcached refuses the rest as too large.
    pub fn fits(&self, key_len: usize, flags: u32, value_len: usize) -> bool {
        hkv_types::memcached_item_size(key_len, flags, value_len, self.cas) <= self.max_item_size
    }

    /// Where a storage command's data ends, given its line's length `line_len` and `vlen`:
    /// with the data staged, the line is followed by the data's terminator at once.
    pub(crate) fn data_end(&self, line_len: usize, vlen: usize) -> usize {
        if self.body_staged {
            line_len
        } else {
            line_len + vlen
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// The buffer holds no complete request yet.
    Incomplete,
    /// A request occupying the first `len` bytes.
    Command { cmd: Command<'a>, len: usize },
    /// A storage command whose line is the first `header` bytes and whose data block of
    /// `vlen` bytes has not all arrived (see [`Limits::stage_min`]).
    Body { header: usize, vlen: usize },
    /// A bad request occupying the first `len` bytes. Reply `error` (unless `noreply`), then
    /// drop `swallow` more bytes as they arrive (a refused data block), and close the
    /// connection if `close`. `unlink`: memcached removes the key whose new value it refused.
    Error {
        error: &'static str,
        len: usize,
        swallow: usize,
        noreply: bool,
        close: bool,
        unlink: Option<Unlink<'a>>,
    },
}

/// The key whose old value a refused store drops, as sent: in base64 after `ms ... b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unlink<'a> {
    pub key: &'a [u8],
    pub base64: bool,
}

impl<'a> Unlink<'a> {
    pub fn raw(key: &'a [u8]) -> Unlink<'a> {
        Unlink { key, base64: false }
    }
}

impl<'a> Parsed<'a> {
    pub(crate) fn error(error: &'static str, len: usize) -> Parsed<'a> {
        Parsed::Error {
            error,
            len,
            swallow: 0,
            noreply: false,
            close: false,
            unlink: None,
        }
    }
}

pub(crate) fn bad_format<'a>(len: usize) -> Parsed<'a> {
    Parsed::error(BAD_FORMAT, len)
}
