//! IN: a table that fits the store. It grows while memory allows, and otherwise caps the
//! store so CLOCK, not the displacement bound, evicts (docs/foundation.md). Also the rebuild
//! after a warm restart.

use super::Partition;

impl Partition {
    /// After a warm restart: indexes every item its store took back; items the index cannot
    /// place are evicted and counted (`collision_evictions`). Returns the items indexed.
    pub fn restore_index(&mut self) -> u64 {
        self.dropped = self.index.restore(&self.store);
        self.free_dropped();
        self.store.stats().curr_items
    }

    /// IN: before `incoming` inserts, an index that they would load past its growth point
    /// doubles (again, if need be) while the budget has room, so items are lost to
    /// displacement only when memory is truly full (small items would otherwise outnumber
    /// the slots the budget's first guess gave them). The larger table is filled from the
    /// store's live items, newest versions still waiting in the same-key table included;
    /// applying those later finds them in place, and retired versions were never put back.
    pub(super) fn grow_for(&mut self, incoming: usize) {
        use crate::index::Growth;
        let page = self.store.page_size();
        let mut grew = false;
        loop {
            match self.index.growth(self.store.arena(), page, incoming) {
                Growth::NotNeeded => break,
                Growth::NoRoom => {
                    self.cap_items();
                    break;
                }
                Growth::Grow => {
                    let arena = std::sync::Arc::clone(self.store.arena());
                    match self.index.grow(&self.store, &arena, page) {
                        Some(dropped) => {
                            self.dropped.extend(dropped);
                            self.store.set_item_cap(None);
                            grew = true;
                        }
                        None => {
                            self.cap_items();
                            break;
                        }
                    }
                }
            }
        }
        if grew {
            self.write_locs_valid = false;
            tracing::info!(
                buckets = self.index.cpu().bucket_count(),
                "index table doubled"
            );
            self.free_dropped();
        }
    }

    /// Memory is nearly spent and the table stays: from near its failure point on, new items
    /// take CLOCK victims' chunks rather than more memory, so the store, not the index,
    /// chooses what is evicted.
    fn cap_items(&mut self) {
        let cap = (self.index.slots() as f64 * crate::index::CAP_LOAD) as u64;
        self.store.set_item_cap(Some(cap));
    }

    /// The index's size and load (`stats hkv`).
    pub fn index_report(&self) -> crate::index::IndexReport {
        crate::index::IndexReport {
            capped: u64::from(self.store.item_cap().is_some()),
            ..self.index.report()
        }
    }
}
