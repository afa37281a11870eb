//! Server-side counters (engine counters come from the engine), the registry that names
//! every stat once ([`registry`]), and its text and binary emitters.

pub(crate) mod conns;
pub(crate) mod detail;
mod dump;
pub(crate) mod prometheus;
mod registry;
mod reply;

pub(crate) use dump::{metadump_more, metadump_start, MetaDump};
pub(crate) use reply::{stats_reply, StatsError, StatsReply};

use crate::shared::Shared;
use hkv_proto::reply::line;

/// `stats [group]` as text: `STAT <name> <value>` lines and `END`, memcached's words for a
/// group it does not know.
pub(crate) fn write_stats(args: &[Vec<u8>], shared: &Shared, now: u32, out: &mut Vec<u8>) {
    match stats_reply(args, shared, now) {
        Ok(StatsReply::Pairs(pairs)) => {
            for (name, value) in pairs {
                out.extend_from_slice(b"STAT ");
                out.extend_from_slice(name.as_bytes());
                out.push(b' ');
                out.extend_from_slice(value.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            line(out, "END");
        }
        Ok(StatsReply::Reset) => line(out, "RESET"),
        Ok(StatsReply::Raw(text)) => out.extend_from_slice(&text),
        Err(StatsError::Unknown) => line(out, hkv_proto::errors::ERROR),
        Err(StatsError::BadFormat) => line(out, hkv_proto::errors::BAD_FORMAT),
        Err(StatsError::Line(l)) => line(out, l),
    }
}
