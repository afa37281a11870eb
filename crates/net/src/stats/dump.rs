//! `lru_crawler metadump`: every live key with its metadata, in memcached's format,
//! streamed as the client reads it (memcached's crawler writes the dump to its client as
//! the socket takes it, so a dump of any size ends with every item).

use hkv_engine::{ItemSummary, ItemsCursor};
use hkv_proto::errors::admin;
use hkv_proto::step::ClassList;

use crate::shared::Shared;

/// The longest line a dump writes: a key of the longest length, every byte url-encoded,
/// and each field at its widest (`exp=4294967295 la=... cas=<20 digits> ...`, under 100
/// bytes). A walk is asked for no more items than its room holds of these, so a dump of
/// long keys overshoots its room by one line at most.
const LONGEST_LINE: usize = 4 + 3 * hkv_proto::MAX_KEY_LEN + 100;

/// Most chunks one call of [`metadump_more`] examines: a stretch of free or expired chunks
/// (a flushed cache) is walked a bounded step per pass as well.
const CHUNKS_PER_CALL: u32 = 64 * 1024;

/// A metadump under way: the classes asked for and where the walk is.
#[derive(Debug)]
pub(crate) struct MetaDump {
    classes: Option<Vec<usize>>,
    at: ItemsCursor,
}

/// `lru_crawler metadump <all|ids>` starts, or the line refusing it.
pub(crate) fn metadump_start(
    classes: &ClassList,
    shared: &Shared,
) -> Result<MetaDump, &'static str> {
    if shared.config.disable_dumping {
        return Err(admin::METADUMP_DISABLED);
    }
    // Only the classes asked for are walked (memcached's ids are 1-based). Each class once,
    // in order: memcached's crawler takes a list of ids as a set.
    let ids = match classes {
        ClassList::All => None,
        ClassList::Ids(ids) => Some(ids),
        // Refused before the dump starts (`metadump_refused`).
        ClassList::Bad => return Err(admin::BAD_CLASS_ID),
    };
    let classes = ids.map(|ids| {
        let mut v: Vec<usize> = ids
            .iter()
            .filter_map(|&c| (c as usize).checked_sub(1))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    });
    Ok(MetaDump {
        classes,
        at: ItemsCursor::default(),
    })
}

/// Appends the dump's next lines to `out`, about `room` bytes (past it by one line at
/// most, and fewer once [`CHUNKS_PER_CALL`] chunks are walked), and END once every item is
/// listed. Returns true when the dump is through.
pub(crate) fn metadump_more(
    d: &mut MetaDump,
    shared: &Shared,
    now: u32,
    room: usize,
    out: &mut Vec<u8>,
) -> bool {
    let engine = &shared.engine;
    let start = out.len();
    let mut items = Vec::new();
    let mut chunks = CHUNKS_PER_CALL;
    while out.len() - start < room && !engine.items_through(&d.at) && chunks > 0 {
        let want = ((room - (out.len() - start)) / LONGEST_LINE).max(1);
        items.clear();
        let classes = d.classes.as_deref();
        engine.items_from(&mut d.at, classes, now, want, &mut chunks, &mut items);
        for it in &items {
            line(it, out);
        }
    }
    let through = engine.items_through(&d.at);
    if through {
        out.extend_from_slice(b"END\r\n");
    }
    through
}

/// One item as memcached prints it.
fn line(it: &ItemSummary, out: &mut Vec<u8>) {
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
