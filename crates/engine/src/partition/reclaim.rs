//! What the store reclaims (CLOCK evictions, expired items, page moves) leaves the index and
//! the same-key table, and the eviction log and `watch evictions` lines.

use super::*;

impl Partition {
    /// Runs `f` on the store with the reclaim callback every allocation and page move needs
    /// (evictions noted, reclaimed items dropped from the index), then settles the index:
    /// a device that failed inside the callback is replaced by a CPU table rebuilt from the
    /// store (what `f` stored included, the reclaimed and retired items not).
    pub(crate) fn with_reclaim<R>(
        &mut self,
        now: u32,
        f: impl FnOnce(
            &mut hkv_store::SlabStore,
            &mut dyn FnMut(&hkv_store::Item<'_>, Location, Reclaim),
        ) -> R,
    ) -> R {
        let Partition {
            index,
            store,
            pending,
            evicted,
            watch,
            ..
        } = self;
        let r = f(store, &mut |item, l, why| {
            if why == Reclaim::Evicted {
                note_eviction(evicted, watch, item, l, Some(now));
            }
            forget_reclaimed(index, pending, item.key(), l);
        });
        let settled = self.index.settle(&self.store);
        self.dropped.extend(settled);
        self.free_dropped();
        r
    }
}

/// The store took back the live item `l` of key `k` (CLOCK or expiry): drop it from the index,
/// or, if it is a newest version still waiting in the same-key table, from there (the key then
/// reads as missing, and the index entry of its older version goes with the next apply).
pub(super) fn forget_reclaimed(
    index: &mut Index,
    pending: &mut SameKeyTable,
    k: &[u8],
    l: Location,
) {
    let h = hash_key(k);
    if let Some(w) = pending.get_mut(k, &h) {
        if w.newest == Some(l) {
            w.newest = None;
            if !std::mem::take(&mut w.resident) {
                // Never indexed.
                return;
            }
        }
    }
    index.delete_in_reclaim(&h, l);
}

/// What an eviction leaves behind: its key in the eviction log when one is kept, its line
/// for `watch evictions` when someone watches. `now` when the caller has it.
pub(crate) fn note_eviction(
    log: &mut Option<Vec<Vec<u8>>>,
    watch: &Option<std::sync::Arc<crate::watch::Watch>>,
    item: &hkv_store::Item<'_>,
    loc: Location,
    now: Option<u32>,
) {
    if let Some(log) = log.as_mut() {
        log.push(item.key().to_vec());
    }
    let Some(w) = watch.as_deref() else { return };
    if !w.wants(crate::watch::stream::EVICTIONS) {
        return;
    }
    let now = now.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as u32)
    });
    let class = (loc >> (32 - hkv_store::LOCATION_CLASS_BITS)) as usize;
    w.eviction(
        item.key(),
        item.bits() & hkv_store::FETCHED != 0,
        item.expiry(),
        item.atime(),
        class,
        item.value_len(),
        now,
    );
}
