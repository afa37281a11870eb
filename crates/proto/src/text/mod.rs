//! The classic text protocol and the meta commands.

mod command;
mod meta;
mod parse;
mod parsed;
pub mod previous;
mod tokens;
pub mod vector;

pub use command::{Command, MetaCmd};
pub use hkv_types::Op;
pub use meta::{decode_key, MetaFlags, META_FLAG_LETTERS};
pub use parse::{parse, parse_after, Limits, Parsed};
