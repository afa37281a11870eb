//! MM and WR for every write command (set, add, replace, append, prepend, cas, incr, decr,
//! touch, delete): the value stored, the item linked in place of the old version.

use super::*;
use counter::parse_counter;
use hkv_types::{flag_order, memcached_item_size};
use meta::shown_on_created;

/// Whether a write that cannot store its new value keeps the key's old one: memcached unlinks
/// it for SET (and every `ms`), so no stale value outlives a failed overwrite, and keeps it
/// for append, prepend, replace and cas.
fn keeps_old_on_failure(req: &Request<'_>) -> bool {
    req.op != Op::Set && !req.meta.unlink_on_failure
}

impl Partition {
    pub(super) fn write(
        &mut self,
        req: &Request<'_>,
        h: &KeyHash,
        now: u32,
        data: &mut Vec<u8>,
    ) -> Response {
        let storage = matches!(
            req.op,
            Op::Set | Op::Add | Op::Replace | Op::Append | Op::Prepend | Op::Cas
        );
        if storage {
            // memcached counts every storage command whose value it could allocate, stored
            // or not.
            self.stats.cmd_set += 1;
        }
        let r = self.write_op(req, h, now, data);
        if storage && matches!(r, Response::OutOfMemory | Response::TooLarge) {
            self.stats.cmd_set -= 1;
        }
        r
    }

    fn write_op(
        &mut self,
        req: &Request<'_>,
        h: &KeyHash,
        now: u32,
        data: &mut Vec<u8>,
    ) -> Response {
        let cur = self.find_live(req.key, h, now);
        if matches!(req.op, Op::Incr | Op::Decr | Op::Vector) {
            self.forward_atomic(req.key, h, cur);
        }
        if req.meta.previous {
            self.copy_previous(req, cur, data);
        }
        match req.op {
            // A meta get that may create or change its item (`N`, `E`).
            Op::Get | Op::Gets => self.meta_get(req, h, now, cur, data),
            Op::Gat | Op::Gats => self.get_and_touch(req, h, now, cur, data),
            Op::Set => self.store_request(req, h, now, cur),
            Op::Add => match cur {
                Some(loc) => {
                    // memcached bumps an item that an ADD found.
                    self.store.touch_ref(loc);
                    Response::NotStored
                }
                None => self.store_request(req, h, now, None),
            },
            Op::Replace => match cur {
                Some(_) => self.store_request(req, h, now, cur),
                None => Response::NotStored,
            },
            Op::Append | Op::Prepend => {
                let Some(loc) = cur else {
                    return match req.meta.vivify {
                        // meta `ms MA N<ttl>`: a miss creates the item from the data.
                        Some(ttl) => {
                            self.store_new(req.key, h, Parts::One(req.value), req.flags, ttl, now)
                        }
                        None => Response::NotStored,
                    };
                };
                // memcached's append makes a new item without `b` (one `N` creates keeps it).
                self.binary_key = false;
                // memcached compares an append's CAS only when CAS is on: with `-C` (no
                // CAS in items) meta `ms MA C<cas>` appends.
                if req.cas != 0
                    && self.store.cas_enabled()
                    && self.store.get(loc).map(|i| i.cas()) != Some(req.cas)
                {
                    return Response::Exists;
                }
                let item = self.store.get(loc).expect("found live above");
                let joined = item.value_len() + req.value.len();
                let cas_on = self.store.cas_enabled();
                let size = memcached_item_size(req.key.len(), item.flags(), joined, cas_on);
                if size > self.store.max_value() {
                    // memcached answers NOT_STORED and keeps the value (storing it would
                    // have unlinked it first, as a failed SET does).
                    return Response::NotStored;
                }
                let (flags, expiry) = (item.flags(), item.expiry());
                self.value_buf.clear();
                self.store.copy_value(&item, &mut self.value_buf);
                let parts = if req.op == Op::Append {
                    Parts::Two(0, req.value)
                } else {
                    Parts::Two(1, req.value)
                };
                let keep = keeps_old_on_failure(req);
                self.store_raw(req.key, h, parts, flags, expiry, now, cur, keep)
            }
            Op::Cas => {
                let Some(loc) = cur else {
                    self.stats.cas_misses += 1;
                    return Response::NotFound;
                };
                let item = self.store.get(loc).expect("found live above");
                // A CAS of 0 never matches (memcached: no CAS given), even with `-C`, where
                // every item's CAS is 0.
                if item.cas() != req.cas || req.cas == 0 {
                    // meta `ms I`: an older CAS still stores, as a stale item (not C0,
                    // which memcached never takes for a CAS: EX).
                    if req.meta.invalidate && req.cas != 0 && req.cas < item.cas() {
                        let old = (item.expiry(), item.bits());
                        self.stats.cas_hits += 1;
                        self.store.note(loc, ClassOp::CasHit);
                        let r = self.store_request(req, h, now, cur);
                        self.mark_stale_new(&r, old);
                        return r;
                    }
                    self.stats.cas_badval += 1;
                    self.store.note(loc, ClassOp::CasBadval);
                    return Response::Exists;
                }
                self.stats.cas_hits += 1;
                self.store.note(loc, ClassOp::CasHit);
                self.store_request(req, h, now, cur)
            }
            Op::Delete if req.meta.refused_store => match cur {
                Some(loc) => {
                    self.unlink(req.key, h, loc);
                    Response::Deleted
                }
                None => Response::NotFound,
            },
            Op::Delete => match cur {
                Some(loc)
                    if (req.cas != 0 || req.meta.cas_given)
                        && self.store.get(loc).map(|i| i.cas()) != Some(req.cas) =>
                {
                    // A delete that names a CAS (meta `md C`) only removes that version;
                    // memcached counts md's mismatch as a delete miss (binary's as nothing).
                    if req.meta.cas_given {
                        self.stats.delete_misses += 1;
                    }
                    Response::Exists
                }
                Some(loc) if req.meta.invalidate || req.meta.strip_value => {
                    self.delete_in_place(req, h, now, loc)
                }
                Some(loc) => {
                    self.store.note(loc, ClassOp::Delete);
                    self.unlink(req.key, h, loc);
                    self.stats.delete_hits += 1;
                    Response::Deleted
                }
                None => {
                    self.stats.delete_misses += 1;
                    Response::NotFound
                }
            },
            Op::Incr | Op::Decr => self.arith(req, h, now, cur),
            Op::Vector => {
                let updates = matches!(
                    req.vector.map(|v| v.call),
                    Some(hkv_types::VectorCall::Update { .. })
                );
                let cur = if updates {
                    self.unshare(req.key, h, now, cur)
                } else {
                    cur
                };
                self.vector_op(req, cur, data)
            }
            Op::Touch => {
                self.stats.cmd_touch += 1;
                match cur {
                    Some(loc) => {
                        let raw = expiry_from_exptime(req.exptime, now).to_raw();
                        self.store.set_expiry(loc, raw);
                        self.store.touch_ref(loc);
                        // memcached's touch is a bumping fetch: meta `h` and `l` see it.
                        self.store.mark_fetched(loc, now);
                        self.stats.touch_hits += 1;
                        if let Some(item) = self.store.get(loc) {
                            // What `watch fetchers` reports of the touched item.
                            self.last = After {
                                cas: item.cas(),
                                len: item.value_len() as u32,
                                expiry: raw,
                                ..After::default()
                            };
                        }
                        self.store.note(loc, ClassOp::Touch);
                        Response::Touched
                    }
                    None => {
                        self.stats.touch_misses += 1;
                        Response::NotFound
                    }
                }
            }
        }
    }

    /// Merging for hot keys: an in-place atomic leaves its key's location in the same-key
    /// table (a resident entry), so the operations after it on that key, in this batch and
    /// the next ones until the table is applied, are forwarded from there without searching
    /// the index. Only while index writes are delayed: otherwise the table stays empty and
    /// the CPU index is the one place to look.
    pub(super) fn forward_atomic(&mut self, key: &[u8], h: &KeyHash, cur: Option<Location>) {
        let Some(loc) = cur else { return };
        if !self.merge_atomics || !self.delay_writes {
            return;
        }
        if self.pending.get(key, h).is_some() {
            self.stats.merged_writes += 1;
        } else {
            self.pending.insert(key, Waiting::resident(*h, loc));
        }
    }

    /// KVCG's previous value: a storage command or DELETE that asked for it copies the value
    /// its key holds now, before it runs (answered whatever the command then does).
    pub(super) fn copy_previous(
        &mut self,
        req: &Request<'_>,
        cur: Option<Location>,
        data: &mut Vec<u8>,
    ) {
        let writes = matches!(
            req.op,
            Op::Set | Op::Add | Op::Replace | Op::Append | Op::Prepend | Op::Cas | Op::Delete
        );
        if let (true, Some(item)) = (writes, cur.and_then(|l| self.store.get(l))) {
            let offset = data.len();
            self.store.copy_value(&item, data);
            self.previous = Some(hkv_types::Previous {
                offset,
                len: item.value_len() as u32,
                flags: item.flags(),
            });
        }
    }

    pub(super) fn arith(
        &mut self,
        req: &Request<'_>,
        h: &KeyHash,
        now: u32,
        cur: Option<Location>,
    ) -> Response {
        let incr = req.op == Op::Incr;
        if let Some(item) = cur.and_then(|loc| self.store.get(loc)) {
            // memcached's order: an empty or chained value is non-numeric before the CAS is
            // compared, the number itself is read after.
            if item.value_len() == 0 || item.flat_value().is_none() {
                return Response::NonNumeric;
            }
            if req.cas != 0 && item.cas() != req.cas {
                return Response::Exists;
            }
        }
        if let (None, Some(initial)) = (cur, req.initial) {
            // Binary incr/decr (and meta `ma N`): a miss creates the counter at `initial`.
            let text = initial.to_string();
            self.value_buf.clear();
            self.value_buf.extend_from_slice(text.as_bytes());
            // meta `ma`: the last of N and T sets the TTL, as memcached applies them in turn.
            let order = req.meta.flag_order;
            let exptime = match req.meta.ttl {
                Some(t) if order & flag_order::T_AFTER_N != 0 => t,
                _ => req.exptime,
            };
            let expiry = expiry_from_exptime(exptime, now);
            let raw = expiry.to_raw();
            let ttl = req.meta.ttl.map(|t| expiry_from_exptime(t, now).to_raw());
            let vivified = expiry_from_exptime(req.exptime, now).to_raw();
            if expiry == Expiry::AlreadyExpired {
                // memcached stores the counter and it expires at once: nothing is kept
                // here, but the reply carries a CAS, and `t` a TTL of 0, as for mg.
                let cas = match self.cas_override {
                    Some(c) if self.store.cas_enabled() => c,
                    _ => self.store.take_cas(),
                };
                self.last = After {
                    cas,
                    len: text.len() as u32,
                    expiry: shown_on_created(order, raw, vivified, ttl),
                    created: true,
                    previous: None,
                };
                return Response::Number(initial);
            }
            return match self.store_raw(req.key, h, Parts::Buf, 0, raw, now, None, false) {
                Response::Stored => {
                    self.last.created = true;
                    self.last.expiry = shown_on_created(order, raw, vivified, ttl);
                    Response::Number(initial)
                }
                other => other,
            };
        }
        let Some(loc) = cur else {
            if incr {
                self.stats.incr_misses += 1;
            } else {
                self.stats.decr_misses += 1;
            }
            return Response::NotFound;
        };
        let item = self.store.get(loc).expect("found live above");
        // A chained value is far longer than any number.
        let Some(old) = item.flat_value().and_then(parse_counter) else {
            return Response::NonNumeric;
        };
        // memcached: incr wraps at 2^64, decr stops at 0.
        let new = if incr {
            old.wrapping_add(req.delta)
        } else {
            old.saturating_sub(req.delta)
        };
        let text = new.to_string();
        let (flags, old_len) = (item.flags(), item.value_len());
        let expiry = match req.meta.ttl {
            // meta `ma T`: a success also sets the TTL.
            Some(t) => expiry_from_exptime(t, now).to_raw(),
            None => item.expiry(),
        };
        // What meta `t` reports: before `T`, the TTL the counter had.
        let shown = if req.meta.flag_order & flag_order::SHOWN_BEFORE_T != 0 {
            item.expiry()
        } else {
            expiry
        };
        if incr {
            self.stats.incr_hits += 1;
            self.store.note(loc, ClassOp::Incr);
        } else {
            self.stats.decr_hits += 1;
            self.store.note(loc, ClassOp::Decr);
        }
        // In place unless a send still reads the value or the number grew: then it is stored
        // as a new version. A shorter number keeps the value's length, padded with spaces,
        // as memcached pads it (`decr` of "100" reads "99 ").
        if text.len() <= old_len && !self.store.is_pinned(loc) {
            let mut padded = text.into_bytes();
            padded.resize(old_len, b' ');
            self.store.overwrite_value(loc, &padded);
            self.store.set_expiry(loc, expiry);
            let cas = self.store.set_cas(loc, self.cas_override);
            self.store.touch_ref(loc);
            self.last = After {
                cas: cas.unwrap_or(0),
                len: old_len as u32,
                expiry: shown,
                created: false,
                previous: None,
            };
            return Response::Number(new);
        }
        self.value_buf.clear();
        self.value_buf.extend_from_slice(text.as_bytes());
        // A new version because a send reads the old one: padded all the same, so the
        // value does not depend on a send's timing (an ordering probe got `6` where `6`
        // and 20,000 spaces came without the send in flight).
        if text.len() < old_len {
            self.value_buf.resize(old_len, b' ');
        }
        match self.store_raw(req.key, h, Parts::Buf, flags, expiry, now, cur, true) {
            Response::Stored => {
                self.last.expiry = shown;
                Response::Number(new)
            }
            other => other,
        }
    }

    /// Stores the request's own value, flags and exptime as the new version of its key.
    pub(super) fn store_request(
        &mut self,
        req: &Request<'_>,
        h: &KeyHash,
        now: u32,
        cur: Option<Location>,
    ) -> Response {
        let value = match &req.staged {
            Some(st) => Parts::Staged(stage_of(st)),
            None => Parts::One(req.value),
        };
        let e = expiry_from_exptime(req.exptime, now).to_raw();
        let keep = keeps_old_on_failure(req);
        self.store_raw(req.key, h, value, req.flags, e, now, cur, keep)
    }

    /// Stores a new item where `key` has none.
    pub(super) fn store_new(
        &mut self,
        key: &[u8],
        h: &KeyHash,
        value: Parts<'_>,
        flags: u32,
        exptime: i64,
        now: u32,
    ) -> Response {
        // An exptime already past is stored as memcached stores it: never seen again, the old
        // value gone, and a GET of it counted in get_expired.
        let e = expiry_from_exptime(exptime, now);
        self.store_raw(key, h, value, flags, e.to_raw(), now, None, false)
    }

    /// MM for a new version of `key` (its IN waits in the same-key table); `cur` is the live
    /// version it replaces, if any. When the new version cannot be stored, `cur` is unlinked
    /// (a SET's stale value must not stay), or kept as it was with `keep_old`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn store_raw(
        &mut self,
        key: &[u8],
        h: &KeyHash,
        value: Parts<'_>,
        flags: u32,
        raw_expiry: u32,
        now: u32,
        cur: Option<Location>,
        keep_old: bool,
    ) -> Response {
        if let Some(loc) = cur {
            if let Some(r) = self.wr_in_place(key, loc, &value, flags, raw_expiry, now) {
                return r;
            }
        }
        // Retire the version being replaced before anything else: from here on CLOCK cannot
        // reclaim it, an index rebuild (a device failing inside the reclaim callback) cannot
        // index it beside the new one, and its chunk is not reused until the index has let go
        // of it. memcached drops the old value when the new one cannot be stored, so retiring
        // it first changes nothing a client sees; a command that keeps it on failure puts it
        // back.
        let mut old = cur.filter(|&c| self.store.retire(c));
        if !self.pending.is_empty() {
            let len = match value {
                Parts::One(v) => v.len(),
                Parts::Buf => self.value_buf.len(),
                Parts::Two(_, v) => v.len() + self.value_buf.len(),
                Parts::Staged(_) => 0,
            };
            let staged = matches!(value, Parts::Staged(_));
            if !staged && !self.store.has_room(key.len(), len) {
                // Free the retired versions the table holds back before CLOCK would take a
                // live item for want of their chunks.
                self.apply_pending();
                old = self.still_retired(old);
            }
        }
        let mut stored = self.mm_store_item(key, &value, flags, raw_expiry, now);
        if matches!(stored, Err(StoreError::OutOfMemory)) && !self.pending.is_empty() {
            // Retired versions hold chunks back from reuse until the index lets go of them.
            self.apply_pending();
            old = self.still_retired(old);
            stored = self.mm_store_item(key, &value, flags, raw_expiry, now);
        }
        if matches!(stored, Err(StoreError::OutOfMemory)) && !keep_old {
            if let Some(o) = old.take() {
                // The version being replaced holds its chunks while retired (a chained value
                // near -I, many of them), and they may be the room needed: memcached's
                // allocation could evict it too. Drop it now and try once more; if that
                // fails as well it is gone, as memcached drops it.
                self.unlink_retired(key, h, o);
                if !self.pending.is_empty() {
                    self.apply_pending();
                }
                stored = self.mm_store_item(key, &value, flags, raw_expiry, now);
            }
        }
        let (loc, cas) = match stored {
            Ok(v) => v,
            Err(e) => {
                // memcached unlinks the old item when a SET cannot store the new one, so a
                // failed SET never leaves stale data behind; the other commands keep it.
                if let Some(o) = old {
                    if !keep_old || !self.store.unretire(o) {
                        self.unlink_retired(key, h, o);
                    }
                }
                return match e {
                    StoreError::TooLarge => {
                        self.stats.too_large += 1;
                        Response::TooLarge
                    }
                    StoreError::OutOfMemory => Response::OutOfMemory,
                    StoreError::KeyTooLong => Response::KeyTooLong,
                };
            }
        };
        self.link(key, h, loc, old);
        let len = self.store.get(loc).map_or(0, |i| i.value_len() as u32);
        self.stored_at(loc, cas, len, raw_expiry)
    }

    /// What every stored write does last, new chunk or in place: the request's meta state
    /// (`ms b`, `E`) on the item, and the item it left for the reply (`After`).
    fn stored_at(&mut self, loc: Location, cas: u64, len: u32, raw_expiry: u32) -> Response {
        self.last_loc = loc;
        if self.binary_key {
            self.store.update_bits(loc, hkv_store::BINARY_KEY, 0);
        }
        let cas = match self.cas_override {
            Some(c) => self.store.set_cas(loc, Some(c)).unwrap_or(cas),
            None => cas,
        };
        self.last = After {
            cas,
            len,
            expiry: raw_expiry,
            created: false,
            previous: None,
        };
        Response::Stored
    }

    /// WR over the live version `loc` when the new value fits its chunk's class (see
    /// `SlabStore::overwrite`): no MM and no IN, since the location stays what the index and
    /// the same-key table hold. None when it does not fit (or a send reads the chunk): the
    /// caller stores a new version.
    fn wr_in_place(
        &mut self,
        key: &[u8],
        loc: Location,
        value: &Parts<'_>,
        flags: u32,
        raw_expiry: u32,
        now: u32,
    ) -> Option<Response> {
        if fault::skip_forwarding() {
            // The checker's broken build must still send writes through the table it breaks.
            return None;
        }
        let t = self.sample_write.then(std::time::Instant::now);
        let buf = &self.value_buf;
        let (a, b): (&[u8], &[u8]) = match *value {
            Parts::One(v) => (v, &[]),
            // The old value was copied into the buffer before, so overwriting its chunk
            // loses nothing append and prepend still read.
            Parts::Two(0, v) => (buf, v),
            Parts::Two(_, v) => (v, buf),
            Parts::Buf => (buf, &[]),
            // Already in a chunk of its own: linking it is cheaper than copying it.
            Parts::Staged(_) => return None,
        };
        let cas = self
            .store
            .overwrite(loc, key, &[a, b], flags, raw_expiry, now)?;
        if let Some(t) = t {
            self.stats.task_mm_ns += t.elapsed().as_nanos() as u64 * WRITE_SAMPLE;
        }
        self.stats.in_place_writes += 1;
        Some(self.stored_at(loc, cas, (a.len() + b.len()) as u32, raw_expiry))
    }

    /// MM: the store call of [`Partition::store_raw`] (allocate, evicting by CLOCK or moving
    /// a page when memory is spent, and write the item).
    pub(super) fn mm_store_item(
        &mut self,
        key: &[u8],
        value: &Parts<'_>,
        flags: u32,
        raw_expiry: u32,
        now: u32,
    ) -> Result<(Location, u64), StoreError> {
        let t = self.sample_write.then(std::time::Instant::now);
        if let Parts::Staged(st) = *value {
            // Its memory was taken when it arrived: linking it allocates nothing.
            return self.store.commit_stage(&st, key, flags, raw_expiry, now);
        }
        // Out of `self` for the call, so the reclaim callback can borrow the partition.
        let buf = std::mem::take(&mut self.value_buf);
        let (a, b): (&[u8], &[u8]) = match *value {
            Parts::One(v) => (v, &[]),
            Parts::Two(0, v) => (&buf, v),
            Parts::Two(_, v) => (v, &buf),
            Parts::Buf | Parts::Staged(_) => (&buf, &[]),
        };
        let stored = self.with_reclaim(now, |store, reclaim| {
            store.store(key, &[a, b], flags, raw_expiry, now, reclaim)
        });
        self.value_buf = buf;
        if let Some(t) = t {
            self.stats.task_mm_ns += t.elapsed().as_nanos() as u64 * WRITE_SAMPLE;
        }
        stored
    }
}
