//! `lru_crawler metadump`: every live key with its metadata, in memcached's format.

use crate::shared::Shared;

/// Most bytes one metadump reply may hold: the dump is built before it is sent, so it is
/// cut here (docs/protocol.md) rather than let one command grow the server without bound.
const METADUMP_MAX_BYTES: usize = 16 << 20;

/// `lru_crawler metadump <all|ids>`: one line per live item, as memcached prints them.
pub(crate) fn metadump(classes: Option<&[u32]>, shared: &Shared, now: u32, out: &mut Vec<u8>) {
    if shared.config.disable_dumping {
        hkv_proto::reply::line(out, hkv_proto::errors::admin::METADUMP_DISABLED);
        return;
    }
    let start = out.len();
    // Only the classes asked for are walked, so others' items count against no limit
    // (memcached's ids are 1-based). Each class once, in order: memcached's crawler takes
    // a list of ids as a set.
    let ids: Option<Vec<usize>> = classes.map(|ids| {
        let mut v: Vec<usize> = ids
            .iter()
            .filter_map(|&c| (c as usize).checked_sub(1))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    });
    // A line is at least ~64 bytes, so no more items than this can fit.
    let items = shared
        .engine
        .items(ids.as_deref(), METADUMP_MAX_BYTES / 64, now);
    for it in items {
        if out.len() - start > METADUMP_MAX_BYTES {
            break;
        }
        out.extend_from_slice(b"key=");
        url_encode(&it.key, out);
        let exp = if it.expiry == 0 {
            -1
        } else {
            i64::from(it.expiry)
        };
        let size = hkv_engine::ITEM_HEADER_BYTES + it.key.len() + it.len as usize;
        out.extend_from_slice(
            format!(
                " exp={exp} la={} cas={} fetch={} cls={} size={size}\n",
                it.atime,
                it.cas,
                if it.fetched { "yes" } else { "no" },
                it.class + 1
            )
            .as_bytes(),
        );
    }
    out.extend_from_slice(b"END\r\n");
}

/// memcached url-encodes keys in metadump lines.
fn url_encode(key: &[u8], out: &mut Vec<u8>) {
    for &b in key {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
}
