//! The classic text protocol and the meta commands' line format: parse, then plan and
//! compose for the classic commands (the meta ones in `crate::meta`).

mod command;
mod compose;
mod line;
mod meta;
mod parse;
mod parsed;
mod plan;
pub mod previous;
mod tokens;
pub mod vector;

pub use command::{Command, Keys, MetaCmd};
pub use compose::compose;
pub use hkv_types::Op;
pub use meta::{decode_key, MetaFlags, META_FLAG_LETTERS};
pub use parse::{parse, parse_after, Limits, Parsed};
pub use parsed::Unlink;
pub use plan::{get_key_request, get_key_step, plan_command};

/// An unsigned number as memcached's `safe_strtoull` reads it (for arguments parsed outside
/// this crate, such as `stats cachedump`'s).
pub fn parse_unsigned(t: &[u8]) -> Option<u64> {
    tokens::parse_u64(t)
}
