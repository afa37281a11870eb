//! Control commands that act on the whole server, run here whichever protocol asked:
//! flush_all, the memory limit, slab page moves. (Stats live in [`crate::stats`].)

use std::sync::atomic::Ordering;

use crate::shared::Shared;

/// `flush_all [delay]` (text), FLUSH (binary).
/// `flush_all`; false: refused (`-F`). memcached counts a refused text flush in
/// `cmd_flush` but not a refused binary one: `count_refused` says which.
pub(crate) fn flush_all(shared: &Shared, delay: i64, now: u32, count_refused: bool) -> bool {
    let allowed = !shared.config.disable_flush_all;
    if allowed || count_refused {
        shared.stats.cmd_flush.fetch_add(1, Ordering::Relaxed);
    }
    if allowed && predates_start(shared, delay, now) {
        shared.engine.cancel_flush();
    } else if allowed {
        shared.engine.flush_all(delay, now);
    }
    allowed
}

/// A text `flush_all` whose delay is not a number: memcached counts it in `cmd_flush` and
/// says `-F` before it reads the delay.
pub(crate) fn flush_refused_delay(shared: &Shared) -> &'static str {
    shared.stats.cmd_flush.fetch_add(1, Ordering::Relaxed);
    if shared.config.disable_flush_all {
        hkv_proto::errors::admin::FLUSH_DISABLED
    } else {
        hkv_proto::errors::BAD_EXPTIME
    }
}

/// Whether `delay` is an absolute time no later than memcached's `process_started` + 1: it
/// takes its start as `ITEM_UPDATE_INTERVAL` + 2 = 62 s before the real one, and such a
/// time flushes nothing (a client passing a stale timestamp keeps its items, as on
/// memcached).
fn predates_start(shared: &Shared, delay: i64, now: u32) -> bool {
    let up = i64::try_from(shared.started.elapsed().as_secs()).unwrap_or(i64::MAX);
    let process_started = i64::from(now).saturating_sub(up).saturating_sub(62);
    delay > hkv_engine::REALTIME_MAXDELTA && delay <= process_started + 1
}

/// `cache_memlimit <MB>`: the new limit, or memcached's refusal below 8 MB.
pub(crate) fn set_memory_limit(shared: &Shared, megabytes: u64) -> Result<(), &'static str> {
    if megabytes < 8 {
        return Err(hkv_proto::errors::admin::MEMLIMIT_TOO_SMALL);
    }
    if megabytes > 1_000_000_000 {
        return Err(hkv_proto::errors::admin::MEMLIMIT_NOT_BYTES);
    }
    let bytes = usize::try_from(megabytes.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    // It said OK and stayed at -m: the arena cannot grow past what it reserved at start,
    // which memcached answers so when its memory was preallocated.
    if bytes > shared.engine.arena().reserved() {
        return Err(hkv_proto::errors::admin::MEMLIMIT_ADJUST_FAILED);
    }
    shared.engine.arena().set_limit(bytes);
    Ok(())
}

/// `refresh_certs`: the TLS certificate and key read again; memcached's replies.
pub(crate) fn refresh_certs(shared: &Shared) -> Result<(), String> {
    match &shared.config.tls {
        None => Err(hkv_proto::errors::admin::TLS_NOT_ENABLED.to_string()),
        Some(tls) => tls.refresh().map_err(|e| {
            tracing::warn!(error = %e, "refresh_certs failed; the old certificate stays");
            e.to_string()
        }),
    }
}

/// `slabs reassign <src> <dst>` with memcached's 1-based class ids.
pub(crate) fn reassign(shared: &Shared, from: i64, to: i64, now: u32) -> Result<(), String> {
    use hkv_engine::ReassignError;
    // memcached's order: the same class twice is refused before the ids are checked.
    if from == to {
        return Err(ReassignError::Same.to_string());
    }
    // memcached's class 0 is its global pool of free pages. hkv's free pages belong to no
    // class and are taken by whichever class needs one, so as a source it has none to spare.
    let classes = shared.engine.class_reports().len() as i64;
    if from == 0 && (1..=classes).contains(&to) {
        return Err(ReassignError::NoSpare.to_string());
    }
    let class = |c: i64| usize::try_from(c - 1).unwrap_or(usize::MAX);
    // -1: memcached's "pick a source yourself".
    let source = (from != -1).then(|| class(from));
    shared
        .engine
        .reassign(source, class(to), now)
        .map_err(|e| e.to_string())
}

/// `lru_crawler crawl|sleep|tocrawl|enable|disable`: memcached's replies. Class ids arrive
/// 1-based (checked by the parser).
pub(crate) fn crawler(shared: &Shared, op: &hkv_proto::step::CrawlerOp, now: u32) -> &'static str {
    use hkv_engine::CrawlError;
    use hkv_proto::errors::admin;
    use hkv_proto::step::{ClassList, CrawlerOp};
    let engine = &shared.engine;
    match op {
        CrawlerOp::Crawl(list) => {
            let started = match list {
                ClassList::All => engine.crawl(None, now),
                ClassList::Ids(ids) => {
                    let classes: Vec<usize> = ids.iter().map(|&c| c as usize - 1).collect();
                    engine.crawl(Some(&classes), now)
                }
                ClassList::Bad => Err(engine.crawl_refusal().unwrap_or(CrawlError::BadClass)),
            };
            match started {
                Ok(()) => "OK",
                Err(CrawlError::Disabled) => admin::CRAWLER_DISABLED,
                Err(CrawlError::Busy) => admin::CRAWLER_BUSY,
                Err(CrawlError::BadClass) => admin::BAD_CLASS_ID,
                Err(CrawlError::NotStarted) => admin::CRAWLER_NOT_STARTED,
            }
        }
        CrawlerOp::Sleep(us) => {
            engine.set_crawler_sleep(*us);
            "OK"
        }
        CrawlerOp::ToCrawl(n) => {
            engine.set_crawler_tocrawl(*n);
            "OK"
        }
        CrawlerOp::Enable if engine.set_crawler(true) => "OK",
        CrawlerOp::Enable => admin::CRAWLER_START_FAILED,
        // memcached stops a stopped crawler without complaint.
        CrawlerOp::Disable => {
            engine.set_crawler(false);
            "OK"
        }
    }
}
