//! KC + RD of a hit, and what the meta protocol adds to reads and deletes: access state
//! (`h`, `l`, `u`), recache tokens (`N`, `R`, `W`, `Z`) and stale items (`I`, `X`, `x`).
//! memcached keeps the same state in each item's flags (ITEM_FETCHED, ITEM_STALE,
//! ITEM_TOKEN_SENT) and its access time.

use hkv_index::{KeyHash, Location};
use hkv_store::{
    expiry_from_exptime, ChunkAt, ClassOp, HitHeader, BINARY_KEY, FETCHED, STALE, WIN_SENT,
};

use super::{Partition, Parts};
use hkv_types::{flag_order, hit, ReadStats, Request, Response};

impl Partition {
    /// RD of a live item at `loc`: copies its value out and reports its meta state as this
    /// request found it, then bumps it (unless `u`) and hands out the recache token if the
    /// item is stale or near expiry (`R`) and nobody holds it yet.
    pub(super) fn rd_answer_hit(
        &mut self,
        req: &Request<'_>,
        loc: Location,
        now: u32,
        data: &mut Vec<u8>,
    ) -> Response {
        self.rd_answer_hit_from(req, loc, now, data, None)
    }

    /// [`Partition::rd_answer_hit`], with the value the device's RD copied, if it did.
    pub(super) fn rd_answer_hit_from(
        &mut self,
        req: &Request<'_>,
        loc: Location,
        now: u32,
        data: &mut Vec<u8>,
        copied: Option<&[u8]>,
    ) -> Response {
        let bump = !req.meta.no_bump;
        let pinned = match copied {
            None if self.pin_min(data.len()) != usize::MAX => self.rd_pin(loc, data.len()),
            _ => None,
        };
        let offset = pinned.unwrap_or(data.len());
        let item = match copied {
            None if pinned.is_some() => self.store.record_hit(loc, now, bump),
            None => self.store.read_hit(loc, now, bump, data),
            Some(value) => {
                let h = self.store.record_hit(loc, now, bump);
                if h.is_some_and(|h| h.value_len as usize == value.len()) {
                    data.extend_from_slice(value);
                } else if let Some(item) = self.store.get(loc) {
                    // Not what KC saw (cannot happen while this thread alone writes the
                    // partition's items): the item's own bytes, never a stale copy.
                    self.store.copy_value(&item, data);
                }
                h
            }
        };
        match item {
            Some(header) => self.hit_response(req, loc, &header, offset, now),
            None => Response::Miss,
        }
    }

    /// RD of a live item KC found at `at` on the CPU: [`Partition::rd_answer_hit_from`]
    /// without a second slot lookup. None: its value goes by the general path (a pin).
    #[inline(always)]
    pub(super) fn rd_answer_hit_at(
        &mut self,
        req: &Request<'_>,
        loc: Location,
        at: ChunkAt,
        header: &HitHeader,
        now: u32,
        data: &mut Vec<u8>,
    ) -> Option<Response> {
        if header.value_len as usize >= self.pin_min(data.len()) {
            return None;
        }
        let offset = data.len();
        self.store.read_at(at, header, now, !req.meta.no_bump, data);
        Some(self.hit_response(req, loc, header, offset, now))
    }

    /// A hit's answer from its header as the read found it (before the read bumped it):
    /// the meta state bits, and the recache token (`W`) handed to the first reader of a
    /// stale item or one near expiry (`R`).
    #[inline(always)]
    fn hit_response(
        &mut self,
        req: &Request<'_>,
        loc: Location,
        item: &HitHeader,
        offset: usize,
        now: u32,
    ) -> Response {
        let state = item.bits;
        let expiry = item.expiry;
        let mut bits = 0;
        if state & FETCHED != 0 {
            bits |= hit::FETCHED;
        }
        if state & STALE != 0 {
            bits |= hit::STALE;
        }
        if state & BINARY_KEY != 0 {
            bits |= hit::BINARY_KEY;
        }
        let near_expiry = req
            .meta
            .recache
            .is_some_and(|r| recache_due(r, expiry, now));
        if state & WIN_SENT != 0 {
            bits |= hit::WON_ELSEWHERE;
        } else if !req.meta.recache_token {
        } else if state & STALE != 0 || near_expiry {
            bits |= hit::WIN;
            self.store.update_bits(loc, WIN_SENT, 0);
        }
        Response::Value {
            flags: item.flags,
            cas: item.cas,
            offset,
            len: item.value_len,
            expiry,
            atime: item.atime,
            bits,
        }
    }

    /// A meta get that may create its item (`N`): a miss stores an empty item with the
    /// given TTL, and this request wins its recache.
    pub(super) fn meta_get(
        &mut self,
        req: &Request<'_>,
        h: &KeyHash,
        now: u32,
        cur: Option<Location>,
        data: &mut Vec<u8>,
    ) -> Response {
        if let Some(loc) = cur {
            self.count_get(req, true);
            return self.rd_answer_hit(req, loc, now, data);
        }
        let created = self.vivify(req, h, now);
        // memcached counts an item mg creates (only mg has `N`) as a hit.
        self.count_get(req, created.is_some());
        match created {
            Some(loc) => {
                let r = self.answer_created(req, loc, now, data);
                let vivified = expiry_from_exptime(req.meta.vivify.unwrap_or(0), now).to_raw();
                self.store.set_expiry(loc, vivified);
                let shown = shown_on_created(req.meta.flag_order, vivified, vivified, None);
                with_expiry(r, shown)
            }
            None => Response::Miss,
        }
    }

    /// gat, gats and mg with `T`: a hit gets the new TTL; a miss with `N` creates the item.
    /// mg's flags act in the order they were sent, as memcached's do ([`flag_order`]).
    pub(super) fn get_and_touch(
        &mut self,
        req: &Request<'_>,
        h: &KeyHash,
        now: u32,
        cur: Option<Location>,
        data: &mut Vec<u8>,
    ) -> Response {
        let order = req.meta.flag_order;
        let raw = expiry_from_exptime(req.exptime, now).to_raw();
        let meta_get = req.meta.read_stats == ReadStats::MetaGet;
        let Some(loc) = cur else {
            let Some(loc) = self.vivify(req, h, now) else {
                // memcached: mg's miss is a get's, even with T; gat's is a touch's.
                if meta_get {
                    self.count_get(req, false);
                } else {
                    self.count_touch(false);
                }
                return Response::Miss;
            };
            // An item mg creates is a hit, and its TTL set: a touch's.
            self.count_touch(true);
            let r = self.answer_created(req, loc, now, data);
            let vivified = expiry_from_exptime(req.meta.vivify.unwrap_or(0), now).to_raw();
            // The last of N and T sets the TTL.
            let last = if order & flag_order::T_AFTER_N != 0 {
                raw
            } else {
                vivified
            };
            self.store.set_expiry(loc, last);
            let shown = shown_on_created(order, last, vivified, Some(raw));
            return with_expiry(r, shown);
        };
        let old = self.store.get(loc).map_or(0, |i| i.expiry());
        self.count_touch(true);
        self.store.note(loc, ClassOp::Touch);
        let r = if order & flag_order::RECACHE_BEFORE_T != 0 {
            // R compares the TTL the item had before T.
            let r = self.rd_answer_hit(req, loc, now, data);
            self.store.set_expiry(loc, raw);
            r
        } else {
            self.store.set_expiry(loc, raw);
            self.rd_answer_hit(req, loc, now, data)
        };
        let shown = if order & flag_order::SHOWN_BEFORE_T != 0 {
            old
        } else {
            raw
        };
        with_expiry(r, shown)
    }

    /// The reply to the request that created an item by `N`: it holds the recache token.
    pub(super) fn answer_created(
        &mut self,
        req: &Request<'_>,
        loc: Location,
        now: u32,
        data: &mut Vec<u8>,
    ) -> Response {
        let mut r = self.rd_answer_hit(req, loc, now, data);
        if !req.meta.recache_token {
            return r;
        }
        if let Response::Value { ref mut bits, .. } = r {
            *bits |= hit::WIN;
        }
        self.store.update_bits(loc, WIN_SENT, 0);
        r
    }

    /// `N<ttl>` on a miss: stores an empty item without a TTL, returns where it lives. The
    /// caller answers from it, then sets its TTL, as memcached does: so even a TTL already
    /// past answers the item once.
    pub(super) fn vivify(&mut self, req: &Request<'_>, h: &KeyHash, now: u32) -> Option<Location> {
        req.meta.vivify?;
        match self.store_new(req.key, h, Parts::One(&[]), 0, 0, now) {
            Response::Stored => self.find_live(req.key, h, now),
            _ => None,
        }
    }

    /// `ms I` stored an item with an older CAS: it is stale from the start, and keeps the
    /// replaced item's TTL and whether its recache was already won (memcached: the value is
    /// replaced, not the item's state). `old` is (raw expiry, meta bits) of the replaced item.
    pub(super) fn mark_stale_new(&mut self, r: &Response, old: (u32, u8)) {
        if *r == Response::Stored {
            self.store
                .update_bits(self.last_loc, STALE | (old.1 & WIN_SENT), 0);
            self.store.set_expiry(self.last_loc, old.0);
        }
    }

    /// `md I` (mark stale, new CAS, optional new TTL) and `md x` (empty the value), instead
    /// of removing the item.
    pub(super) fn delete_in_place(
        &mut self,
        req: &Request<'_>,
        h: &KeyHash,
        now: u32,
        mut loc: Location,
    ) -> Response {
        if req.meta.strip_value {
            // memcached: a new empty item with the request's flags (`F`, default 0) and TTL
            // (`T`, default none), which keeps the old item's CAS unless `E` names one.
            let Some(item) = self.store.get(loc) else {
                return Response::NotFound;
            };
            let old_cas = item.cas();
            let expiry = expiry_from_exptime(req.meta.ttl.unwrap_or(0), now).to_raw();
            let r = self.store_raw(
                req.key,
                h,
                Parts::One(&[]),
                req.flags,
                expiry,
                now,
                Some(loc),
                true,
            );
            if r != Response::Stored {
                return r;
            }
            loc = self.last_loc;
            if !req.meta.invalidate {
                self.store
                    .set_cas(loc, Some(self.cas_override.unwrap_or(old_cas)));
            }
        }
        if req.meta.invalidate {
            self.store.update_bits(loc, STALE, WIN_SENT);
            if !req.meta.strip_value || self.cas_override.is_some() {
                self.store.set_cas(loc, self.cas_override);
            }
            if let Some(t) = req.meta.ttl {
                self.store
                    .set_expiry(loc, expiry_from_exptime(t, now).to_raw());
            }
        }
        // memcached counts no delete for an item `md I` leaves in place (nor its class's:
        // its total is the classes' sum).
        Response::Deleted
    }

    /// A touch's hit or miss in memcached's counters: gat, gats, binary GAT and TOUCH, and
    /// mg with `T` on a hit, count no get.
    fn count_touch(&mut self, hit: bool) {
        self.stats.cmd_touch += 1;
        if hit {
            self.stats.touch_hits += 1;
        } else {
            self.stats.touch_misses += 1;
        }
    }
}

/// The raw expiry meta `t` reports on an item that `N` created: what the flags before `t`
/// had set (memcached creates it without a TTL, then applies `N` and `T` in order).
/// `last` is the item's final expiry, `vivified` N's and `ttl` T's (if given).
pub(super) fn shown_on_created(order: u8, last: u32, vivified: u32, ttl: Option<u32>) -> u32 {
    let n_before = order & flag_order::SHOWN_BEFORE_N == 0;
    let t_before = ttl.filter(|_| order & flag_order::SHOWN_BEFORE_T == 0);
    match (n_before, t_before) {
        (true, Some(_)) => last,
        (true, None) => vivified,
        (false, Some(t)) => t,
        (false, None) => 0,
    }
}

/// `r` with the raw expiry its `t` flag reports.
fn with_expiry(mut r: Response, shown: u32) -> Response {
    if let Response::Value { ref mut expiry, .. } = r {
        *expiry = shown;
    }
    r
}

/// Whether an item expiring at `expiry` (raw: 0 never) is within `R<r>` of its end: `r` is a
/// TTL as `T` takes it (memcached converts it with `realtime()`: over 30 days a Unix time,
/// and then the item wins if it expires before that time; 0 or less never).
fn recache_due(r: i64, expiry: u32, now: u32) -> bool {
    if expiry == 0 || r <= 0 {
        return false;
    }
    let before = if r > hkv_store::REALTIME_MAXDELTA {
        r
    } else {
        i64::from(now) + r
    };
    i64::from(expiry) < before
}

#[cfg(test)]
mod recache_tests {
    use super::recache_due;

    #[test]
    fn regression_an_r_over_30_days_is_a_unix_time_as_memcached_reads_it() {
        // Found by a differential probe: `mg k R2592001` on an item with 100 s left won the
        // recache (hkv read it as 30 days and a second; memcached as a time in 1970).
        let now = 1_800_000_000;
        let expiry = now + 100;
        assert!(!recache_due(2_592_001, expiry, now));
        assert!(!recache_due(i64::from(now) + 50, expiry, now));
        assert!(recache_due(i64::from(now) + 150, expiry, now));
        // Seconds, as before.
        assert!(recache_due(101, expiry, now));
        assert!(!recache_due(100, expiry, now));
        assert!(recache_due(2_592_000, expiry, now));
        // Never: no TTL, R0, a negative R.
        assert!(!recache_due(50, 0, now));
        assert!(!recache_due(0, expiry, now));
        assert!(!recache_due(-5, expiry, now));
    }
}
