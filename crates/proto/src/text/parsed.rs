//! What parsing one request yields, shared by the classic and the meta parsers.

use super::command::Command;
use crate::errors::BAD_FORMAT;

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `-I`: the largest value a storage command may carry.
    pub max_item_size: usize,
    /// The longest get line accepted (gets may exceed the 2048-byte rule, as in memcached).
    pub max_get_line: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_item_size: 1 << 20,
            max_get_line: 1 << 20,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// The buffer holds no complete request yet.
    Incomplete,
    /// A request occupying the first `len` bytes.
    Command { cmd: Command<'a>, len: usize },
    /// A bad request occupying the first `len` bytes. Reply `error` (unless `noreply`), then
    /// drop `swallow` more bytes as they arrive (a refused data block), and close the
    /// connection if `close`. `unlink`: memcached removes the key whose new value it refused.
    Error {
        error: &'static str,
        len: usize,
        swallow: usize,
        noreply: bool,
        close: bool,
        unlink: Option<&'a [u8]>,
    },
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
