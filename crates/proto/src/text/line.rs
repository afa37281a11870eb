//! Framing: where a request line ends, and whether memcached would read a line that long.

use super::parsed::{Limits, Parsed};
use crate::MAX_LINE_WITHOUT_NEWLINE;

/// What the front of a buffer holds.
pub(super) enum Line<'a> {
    /// A line, ending with the newline at this index.
    Ends(usize),
    /// No line to parse: `Incomplete` while it may still come, or an error that closes the
    /// connection for a line memcached would not read.
    Not(Parsed<'a>),
}

/// The line at the front of `buf` (the first `newline_free` bytes were searched before).
pub(super) fn find<'a>(buf: &[u8], limits: &Limits, newline_free: usize) -> Line<'a> {
    let from = newline_free.min(buf.len());
    let Some(nl) = memchr::memchr(b'\n', &buf[from..]).map(|i| i + from) else {
        if buf.len() > MAX_LINE_WITHOUT_NEWLINE {
            // memcached: this has to be a huge multiget; anything else closes the connection.
            if !long_get(buf) {
                return Line::Not(hang_up(buf.len()));
            }
            if buf.len() > limits.max_get_line {
                // memcached grows its buffer without a bound; hkv keeps one, and says so
                // in the words memcached uses when that growth fails, before closing.
                return Line::Not(Parsed::Error {
                    error: crate::errors::READ_OUT_OF_MEMORY,
                    len: buf.len(),
                    swallow: 0,
                    noreply: false,
                    close: true,
                    unlink: None,
                });
            }
        }
        return Line::Not(Parsed::Incomplete);
    };
    if nl + 1 > limits.max_line && !long_get(buf) {
        // Whole, but longer than memcached ever holds whole (a 1 MiB `mg` line was read).
        return Line::Not(hang_up(nl + 1));
    }
    Line::Ends(nl)
}

/// Whether a line past memcached's limits may still be a (huge multi-key) get.
fn long_get(buf: &[u8]) -> bool {
    let start = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[start..];
    start <= 100 && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
}

/// Closes the connection with no reply, as memcached does on a line it cannot read.
fn hang_up<'a>(len: usize) -> Parsed<'a> {
    Parsed::Error {
        error: "",
        len,
        swallow: 0,
        noreply: true,
        close: true,
        unlink: None,
    }
}
