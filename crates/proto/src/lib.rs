//! memcached's protocols (text, meta, binary), as pure functions over byte buffers: no I/O,
//! no store. Per protocol, parse -> plan (engine requests and reply [`step`]s) -> compose
//! (reply bytes from engine results). [`text::parse`] tells "need more bytes" apart from
//! "bad request", and every bad request gets memcached's own error string.

pub mod binary;
pub mod errors;
pub mod meta;
pub mod output;
pub mod reply;
pub mod step;
#[cfg(test)]
mod testkit;
pub mod text;
pub mod udp;

/// memcached's key length limit.
pub const MAX_KEY_LEN: usize = 250;
/// A line longer than this without a newline closes the connection (unless it is a get).
pub const MAX_LINE_WITHOUT_NEWLINE: usize = 2048;
/// memcached's read buffer (16 KiB): a longer line is never whole in it, so memcached closes
/// the connection on any such line but a get's, however it arrives.
pub const MAX_LINE: usize = 16 * 1024;

/// Whether a key token is a valid memcached key: 1..=250 bytes. Tokens are split at
/// spaces; memcached takes every other byte in a key, control characters and DEL included,
/// in meta commands as in the classic ones (meta refused them: a key stored with `set`
/// could not be read with `mg`).
pub fn valid_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN
}
