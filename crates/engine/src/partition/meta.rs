//! KC + RD of a hit, and what the meta protocol adds to reads and deletes: access state
//! (`h`, `l`, `u`), recache tokens (`N`, `R`, `W`, `Z`) and stale items (`I`, `X`, `x`).
//! memcached keeps the same state in each item's flags (ITEM_FETCHED, ITEM_STALE,
//! ITEM_TOKEN_SENT) and its access time.

use hkv_index::{KeyHash, Location};
use hkv_store::{expiry_from_exptime, BINARY_KEY, FETCHED, STALE, WIN_SENT};

use super::{Partition, Parts};
use hkv_types::{hit, Request, Response};

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
            None if self.zero_copy_min != usize::MAX => self.rd_pin(loc),
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
        let Some(item) = item else {
            return Response::Miss;
        };
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
            .is_some_and(|r| expiry != 0 && i64::from(expiry.saturating_sub(now)) < r);
        if state & WIN_SENT != 0 {
            bits |= hit::WON_ELSEWHERE;
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
            self.stats.get_hits += 1;
            return self.rd_answer_hit(req, loc, now, data);
        }
        self.stats.get_misses += 1;
        match self.vivify(req, h, now) {
            Some(loc) => self.answer_created(req, loc, now, data),
            None => Response::Miss,
        }
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
        if let Response::Value { ref mut bits, .. } = r {
            *bits |= hit::WIN;
        }
        self.store.update_bits(loc, WIN_SENT, 0);
        r
    }

    /// `N<ttl>` on a miss: stores an empty item, returns where it lives.
    pub(super) fn vivify(&mut self, req: &Request<'_>, h: &KeyHash, now: u32) -> Option<Location> {
        let ttl = req.meta.vivify?;
        match self.store_new(req.key, h, Parts::One(&[]), 0, ttl, now, None) {
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
        self.stats.delete_hits += 1;
        self.store.note(loc, hkv_store::ClassOp::Delete);
        Response::Deleted
    }
}
