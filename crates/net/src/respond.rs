//! WR: server state for control commands (run here, in one place, in request order), and
//! engine results composed by the protocol crate.

use std::sync::atomic::Ordering;

use hkv_engine::Responses;
use hkv_proto::output::Output;
use hkv_proto::reply::line;
use hkv_proto::step::Step;

use crate::control;
use crate::shared::Shared;

/// What a connection streams after its request's reply (`None` over UDP, where nothing can
/// stream): the logs of `watch`, or an `lru_crawler metadump`.
pub(crate) struct Streams<'a> {
    pub watch: &'a mut Option<u64>,
    pub dump: &'a mut Option<Box<crate::stats::MetaDump>>,
}

/// Appends the bytes of `step` to `out`. Returns true if the server must stop.
pub(crate) fn wr_compose(
    step: &Step,
    rbuf: &[u8],
    res: &Responses,
    shared: &Shared,
    now: u32,
    out: &mut Output,
    conn: Option<Streams<'_>>,
) -> bool {
    match *step {
        Step::Watch(_) if out.pending() > 0 => {
            // memcached refuses a watch queued behind replies not yet sent (`version\r\n
            // watch\r\n` in one write), as it refuses such a metadump.
            line(out, hkv_proto::errors::admin::WATCH_PIPELINED);
        }
        Step::Watch(streams) => match conn {
            Some(Streams { watch: slot, .. }) if slot.is_none() => {
                match shared.engine.watch().add(streams) {
                    Ok(id) => {
                        *slot = Some(id);
                        line(out, "OK");
                    }
                    Err(e) => line(out, &e.to_string()),
                }
            }
            _ => line(out, hkv_proto::errors::ERROR),
        },
        Step::Flush { delay, noreply } => {
            let reply = match delay {
                Some(delay) if control::flush_all(shared, delay, now, true) => "OK",
                Some(_) => hkv_proto::errors::admin::FLUSH_DISABLED,
                None => control::flush_refused_delay(shared),
            };
            if !noreply {
                line(out, reply);
            }
        }
        Step::BinFlush {
            delay,
            opaque,
            quiet,
        } => match control::flush_all(shared, delay, now, false) {
            true => hkv_proto::binary::flushed(out, opaque, quiet),
            // memcached's answer with -F, sent even for FLUSHQ.
            false => hkv_proto::binary::write_simple(
                out,
                if quiet {
                    hkv_proto::binary::op::FLUSHQ
                } else {
                    hkv_proto::binary::op::FLUSH
                },
                hkv_proto::binary::status::AUTH_ERROR,
                opaque,
                0,
                b"",
            ),
        },
        Step::Shutdown { graceful, invalid } => {
            if !shared.config.enable_shutdown {
                line(out, hkv_proto::errors::admin::SHUTDOWN_DISABLED);
            } else if invalid {
                line(out, hkv_proto::errors::admin::SHUTDOWN_BAD_MODE);
            } else {
                shared.graceful.fetch_or(graceful, Ordering::SeqCst);
                return true;
            }
        }
        Step::Verbosity { level, noreply } => {
            shared.set_verbosity(level);
            if !noreply {
                line(out, "OK");
            }
        }
        Step::RefreshCerts => match control::refresh_certs(shared) {
            Ok(()) => line(out, "OK"),
            Err(e) => line(out, &e),
        },
        Step::Stats(ref args) if is_dump(args) => {
            match stats_dump_refused(shared, out, conn.is_none(), args) {
                Some(why) => line(out, why),
                None => crate::stats::write_stats(args, shared, now, out),
            }
        }
        Step::Stats(ref args) => crate::stats::write_stats(args, shared, now, out),
        Step::BinStats { opaque, ref group } => {
            let args: Vec<Vec<u8>> = group
                .split(|&b| b == b' ')
                .filter(|a| !a.is_empty())
                .map(<[u8]>::to_vec)
                .collect();
            if is_dump(&args) && stats_dump_refused(shared, out, conn.is_none(), &args).is_some() {
                hkv_proto::binary::stats(out, opaque, None);
                return false;
            }
            let pairs = match crate::stats::stats_reply(&args, shared, now) {
                Ok(crate::stats::StatsReply::Pairs(p)) => Some(p),
                // memcached answers a binary reset with the terminating packet alone.
                Ok(crate::stats::StatsReply::Reset) => Some(Vec::new()),
                // `detail on|off` answer the terminating packet alone, `detail dump` one
                // packet keyed "detailed" with the dump's text, as memcached's binary stats.
                Ok(crate::stats::StatsReply::Raw(text)) if args[0] == b"detail" => {
                    Some(match args.get(1).map(Vec::as_slice) {
                        Some(b"dump") => vec![(
                            "detailed".to_string(),
                            String::from_utf8_lossy(&text).into_owned(),
                        )],
                        _ => Vec::new(),
                    })
                }
                Ok(crate::stats::StatsReply::Raw(_)) | Err(_) => None,
            };
            hkv_proto::binary::stats(out, opaque, pairs.as_deref());
        }
        Step::MemLimit { megabytes, noreply } => match control::set_memory_limit(shared, megabytes)
        {
            // memcached's noreply silences its refusals too.
            _ if noreply => {}
            Ok(()) => line(out, "OK"),
            Err(e) => line(out, e),
        },
        Step::Reassign { from, to } => match control::reassign(shared, from, to, now) {
            Ok(()) => line(out, "OK"),
            Err(e) => line(out, &e),
        },
        Step::Automove { mode, noreply } => {
            if let Some(mode) = mode {
                shared.engine.set_automove(mode != 0);
            }
            if !noreply {
                line(out, "OK");
            }
        }
        Step::Crawler(ref op) => line(out, control::crawler(shared, op, now)),
        Step::MetaDump(ref classes) => match metadump_refused(shared, out, classes) {
            Some(why) => line(out, why),
            // The metadump ends its pass (a barrier): the worker streams it from the next.
            None => match conn {
                Some(Streams { dump, .. }) => match crate::stats::metadump_start(classes, shared) {
                    Ok(d) => *dump = Some(Box::new(d)),
                    Err(why) => line(out, why),
                },
                // UDP cannot stream, and a dump built whole for a datagram cost memory
                // past -m (up to 16 MiB a request, 64 requests a pass) and answered 34 bytes
                // with 13 MB. memcached sends nothing; clients that look for all keys take
                // this answer as "use stats cachedump" (it is the one for -X).
                None => line(out, hkv_proto::errors::admin::METADUMP_DISABLED),
            },
        },
        Step::Meta(ref m) => {
            // `me` reports the slab class the item lives in (a chained one's header's).
            let class_of =
                |key_len: usize, value_len: usize| shared.engine.item_class(key_len, value_len);
            // memcached's `cmd_meta` counts `me` alone.
            if matches!(m, hkv_proto::step::MetaStep::Debug { .. }) {
                shared.stats.cmd_meta.fetch_add(1, Ordering::Relaxed);
            }
            hkv_proto::meta::compose(
                m,
                rbuf,
                res,
                now,
                hkv_engine::ITEM_HEADER_BYTES,
                class_of,
                out,
            );
        }
        Step::Bin(ref b) => hkv_proto::binary::compose(b, rbuf, res, out),
        Step::Text(_)
        | Step::Value { .. }
        | Step::Reply { .. }
        | Step::Version
        | Step::Previous { .. }
        | Step::Vector { .. } => {
            hkv_proto::text::compose(step, rbuf, res, out);
        }
    }
    false
}

/// `stats cachedump` and `stats detail dump`: replies of megabytes, built whole.
fn is_dump(args: &[Vec<u8>]) -> bool {
    match args.first().map(Vec::as_slice) {
        Some(b"cachedump") => true,
        Some(b"detail") => args.get(1).map(Vec::as_slice) == Some(b"dump"),
        _ => false,
    }
}

/// Whether a stats dump (`stats detail dump`, `stats cachedump`) must be refused, and in
/// what words. Over UDP always: a datagram's reply is built whole, and 4,000 datagrams of 27
/// bytes asking for a 7.6 MB `stats detail dump` took a worker to 1 GB, kept, and held TCP
/// clients for 25 s (a hostile probe; memcached builds each and fails to send it).
fn stats_dump_refused(
    shared: &Shared,
    out: &Output,
    udp: bool,
    args: &[Vec<u8>],
) -> Option<&'static str> {
    if shared.config.disable_dumping && args.first().map(Vec::as_slice) == Some(b"cachedump") {
        // `-X`: refused as not allowed, first, as memcached checks that before the rest.
        return None;
    }
    if udp {
        return Some(hkv_proto::errors::admin::STATS_OUT_OF_MEMORY);
    }
    dump_refused(shared, out, false)
}

/// Whether a dump (megabytes, built before it is sent) must be refused, and in what words.
/// Why a metadump is not started, in memcached's order: the crawler disabled, dumps
/// disabled (`-X`), replies still queued (or buffers over their limit), a crawl running
/// (memcached's crawler runs one job at a time), then a class that does not exist.
fn metadump_refused(
    shared: &Shared,
    out: &Output,
    classes: &hkv_proto::step::ClassList,
) -> Option<&'static str> {
    use hkv_proto::errors::admin;
    use hkv_proto::step::ClassList;
    if !shared.engine.crawler_enabled() {
        return Some(admin::CRAWLER_DISABLED);
    }
    if shared.config.disable_dumping {
        return Some(admin::METADUMP_DISABLED);
    }
    if let Some(why) = dump_refused(shared, out, true) {
        return Some(why);
    }
    if shared.engine.crawling() {
        return Some(admin::CRAWLER_BUSY);
    }
    match classes {
        ClassList::Bad => Some(admin::BAD_CLASS_ID),
        ClassList::Ids(ids) if ids.is_empty() => Some(admin::CRAWLER_NOT_STARTED),
        ClassList::All | ClassList::Ids(_) => None,
    }
}

/// Pipelined dumps nobody reads grew the server by 16 MiB per 26-byte `lru_crawler metadump
/// all` (a hostile probe: 1.6 GB from one connection). Like memcached's crawler, which runs
/// one dump at a time and refuses one queued behind other replies, a metadump waits for the
/// connection's earlier replies to be sent; and no dump is built while connection buffers
/// together are over `--conn-buffer-mb` (workers account each connection's replies as they
/// compose them, so one pass cannot start many).
fn dump_refused(shared: &Shared, out: &Output, metadump: bool) -> Option<&'static str> {
    if shared.config.disable_dumping {
        // `-X`: refused as disabled first, as memcached checks that before the rest.
        return None;
    }
    let pending = out.pending();
    if metadump && pending > 0 {
        return Some(hkv_proto::errors::admin::METADUMP_PIPELINED);
    }
    let held = shared.stats.conn_buffer_bytes.load(Ordering::Relaxed);
    if held > shared.config.conn_buffer_limit || pending >= shared.config.output_high_water {
        shared
            .stats
            .conn_buffer_throttled
            .fetch_add(1, Ordering::Relaxed);
        return Some(if metadump {
            hkv_proto::errors::admin::CRAWLER_BUSY
        } else {
            hkv_proto::errors::admin::STATS_OUT_OF_MEMORY
        });
    }
    None
}
