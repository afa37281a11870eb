//! The `stats` replies: every group rendered from the registry's tables, `stats reset`,
//! and `stats cachedump`.

use std::collections::HashMap;

use hkv_engine::ClassReport;

use super::registry::{
    ClassDef, Def, Kind, Snap, Val, GENERAL, HKV_DEFS, ITEM_FIELDS, SETTINGS, SLAB_FIELDS,
};
use crate::counters::Baseline;
use crate::shared::Shared;

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StatsError {
    /// A group this server does not know: memcached answers `ERROR`.
    Unknown,
    BadFormat,
    /// A reply line of the command's own.
    Line(&'static str),
}

/// A reply to `stats ...`.
pub(crate) enum StatsReply {
    Pairs(Vec<(String, String)>),
    /// `stats reset`.
    Reset,
    /// Lines of their own (`stats cachedump`), `END` included.
    Raw(Vec<u8>),
}

/// A counter as reported: what it counted since the last `stats reset`.
fn adjust(base: &Baseline, name: &str, kind: Kind, v: Val) -> Val {
    match (kind, v, base.at.get(name)) {
        (Kind::Counter, Val::U(x), Some(&b)) => Val::U(x.saturating_sub(b)),
        (_, v, _) => v,
    }
}

fn snap(shared: &Shared, now: u32) -> Snap<'_> {
    Snap {
        shared,
        e: shared.engine.stats(),
        st: shared.engine.store_stats(),
        sc: shared.engine.schedule_stats(),
        pf: shared.engine.profile(),
        pl: shared.engine.placement_report(),
        ix: shared.engine.index_report(),
        now,
        cpu: super::registry::rusage(),
    }
}

fn pairs_of(defs: &[Def], s: &Snap, base: &Baseline) -> Vec<(String, String)> {
    defs.iter()
        .filter_map(|d| {
            let v = adjust(base, d.name, d.kind, (d.get)(s));
            (!matches!(v, Val::Absent)).then(|| (d.name.to_string(), v.render()))
        })
        .collect()
}

fn class_pairs(
    fields: &[ClassDef],
    prefix: &str,
    shared: &Shared,
    base: &Baseline,
    now: u32,
    include: fn(&ClassReport) -> bool,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, c) in shared.engine.class_reports().iter().enumerate() {
        if !include(c) {
            continue;
        }
        for f in fields {
            let name = format!("{prefix}{}:{}", i + 1, f.name);
            let v = adjust(base, &name, f.kind, Val::U((f.get)(c, now)));
            out.push((name, v.render()));
        }
    }
    out
}

/// Answers `stats <args>`.
pub(crate) fn stats_reply(
    args: &[Vec<u8>],
    shared: &Shared,
    now: u32,
) -> Result<StatsReply, StatsError> {
    let base = shared.stats_base.lock().unwrap_or_else(|p| p.into_inner());
    let group = args.first().map(|a| a.as_slice());
    Ok(StatsReply::Pairs(match group {
        None => pairs_of(GENERAL, &snap(shared, now), &base),
        Some(b"settings") => pairs_of(SETTINGS, &snap(shared, now), &base),
        Some(b"hkv") => pairs_of(HKV_DEFS, &snap(shared, now), &base),
        Some(b"slabs") => {
            let mut p = class_pairs(SLAB_FIELDS, "", shared, &base, now, |c| c.pages > 0);
            let classes = shared.engine.class_reports();
            let active = classes.iter().filter(|c| c.pages > 0).count();
            let pages: usize = classes.iter().map(|c| c.pages).sum();
            p.push(("active_slabs".into(), active.to_string()));
            p.push((
                "total_malloced".into(),
                (pages * shared.config.page_size).to_string(),
            ));
            p
        }
        Some(b"items") => class_pairs(ITEM_FIELDS, "items:", shared, &base, now, |c| c.items > 0),
        // memcached answers this way unless started with -o track_sizes.
        Some(b"sizes") => vec![("sizes_status".into(), "disabled".into())],
        // memcached's own answers, without END as in memcached: hkv keeps no size histogram,
        // so turning it on fails the way memcached's does when it cannot (`sizes_error`).
        Some(b"sizes_enable") => {
            return Ok(StatsReply::Raw(
                b"STAT sizes_status error\r\nSTAT sizes_error not_supported\r\n".to_vec(),
            ))
        }
        // memcached without an external store configured lists nothing; hkv has none.
        Some(b"extstore") => Vec::new(),
        Some(b"sizes_disable") => {
            return Ok(StatsReply::Raw(b"STAT sizes_status disabled\r\n".to_vec()))
        }
        Some(b"reset") => {
            drop(base);
            reset(shared, now);
            return Ok(StatsReply::Reset);
        }
        Some(b"cachedump") if shared.config.disable_dumping => {
            return Err(StatsError::Line(
                hkv_proto::errors::admin::CACHEDUMP_DISABLED,
            ))
        }
        Some(b"cachedump") => return cachedump(&args[1..], shared, now),
        Some(b"detail") => {
            return match args.get(1).map(|a| a.as_slice()) {
                Some(b"on") => {
                    shared.detail.set_enabled(true);
                    Ok(StatsReply::Raw(b"OK\r\n".to_vec()))
                }
                Some(b"off") => {
                    shared.detail.set_enabled(false);
                    Ok(StatsReply::Raw(b"OK\r\n".to_vec()))
                }
                Some(b"dump") => Ok(StatsReply::Raw(shared.detail.dump())),
                _ => Err(StatsError::Line(hkv_proto::errors::admin::DETAIL_USAGE)),
            };
        }
        Some(b"conns") => {
            let now = u64::from(now);
            let started = now.saturating_sub(shared.started.elapsed().as_secs());
            shared.conns.pairs(&shared.listeners, started, now)
        }
        Some(_) => return Err(StatsError::Unknown),
    }))
}

/// `stats reset`: counters start again from zero (gauges and settings are left alone).
fn reset(shared: &Shared, now: u32) {
    shared.detail.clear();
    let mut at = HashMap::new();
    {
        let s = snap(shared, now);
        for d in GENERAL.iter().chain(HKV_DEFS) {
            if let (Kind::Counter, Val::U(v)) = (d.kind, (d.get)(&s)) {
                at.insert(d.name.to_string(), v);
            }
        }
    }
    for (i, c) in shared.engine.class_reports().iter().enumerate() {
        for (prefix, fields) in [("", SLAB_FIELDS), ("items:", ITEM_FIELDS)] {
            for f in fields.iter().filter(|f| f.kind == Kind::Counter) {
                at.insert(format!("{prefix}{}:{}", i + 1, f.name), (f.get)(c, now));
            }
        }
    }
    *shared.stats_base.lock().unwrap_or_else(|p| p.into_inner()) = Baseline { at };
}

/// `stats cachedump <class> <limit>`: `ITEM <key> [<bytes> b; <expiry> s]` per item, as
/// memcached lists them (expiry: the Unix time, 0 for none).
fn cachedump(args: &[Vec<u8>], shared: &Shared, now: u32) -> Result<StatsReply, StatsError> {
    // safe_strtoul's reading, as memcached's: `stats cachedump 1 1\t` lists the class.
    let num = |a: Option<&Vec<u8>>| -> Option<usize> {
        usize::try_from(hkv_proto::text::parse_unsigned(a?)?).ok()
    };
    if args.len() < 2 {
        return Err(StatsError::Line(hkv_proto::errors::BAD_COMMAND_LINE));
    }
    let (Some(class), Some(limit)) = (num(args.first()), num(args.get(1))) else {
        return Err(StatsError::BadFormat);
    };
    // memcached refuses only ids past its 64 classes; 0 and classes without items list
    // nothing.
    if class >= 64 {
        return Err(StatsError::Line(hkv_proto::errors::ILLEGAL_SLAB));
    }
    if class == 0 || class > shared.engine.class_reports().len() {
        return Ok(StatsReply::Raw(b"END\r\n".to_vec()));
    }
    // memcached caps a dump at 2 MB of text; no more items than that can fill are listed
    // (the shortest line is 19 bytes).
    let cap = (2 << 20) / 19;
    let limit = if limit == 0 { cap } else { limit.min(cap) };
    let mut out = Vec::new();
    for it in shared.engine.newest_items(class - 1, limit, now) {
        if out.len() > 2 << 20 {
            break;
        }
        out.extend_from_slice(b"ITEM ");
        out.extend_from_slice(&it.key);
        let exp = it.expiry;
        out.extend_from_slice(format!(" [{} b; {} s]\r\n", it.len, exp).as_bytes());
    }
    out.extend_from_slice(b"END\r\n");
    Ok(StatsReply::Raw(out))
}
