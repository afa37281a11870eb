//! `/metrics`: the stats registry in Prometheus' text format, under memcached_exporter's
//! metric names, labels and sources, so dashboards built for that exporter work unchanged,
//! plus `hkv_*` for every figure of `stats hkv`. As the exporter does, a metric whose source
//! field is not reported is left out rather than made up.

use std::collections::HashMap;

use super::registry::HKV_DEFS;
use super::reply::{stats_reply, StatsReply};
use crate::shared::Shared;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Type {
    Counter,
    Gauge,
}

/// One metric family: its type, HELP text and samples (label set, value).
struct Family {
    t: Type,
    help: &'static str,
    samples: Vec<(String, f64)>,
}

/// Metric families in the order first seen, each with its samples (the text format wants a
/// family's samples together).
#[derive(Default)]
struct Families {
    order: Vec<String>,
    by_name: HashMap<String, Family>,
}

impl Families {
    fn add(&mut self, name: &str, t: Type, help: &'static str, labels: &[(&str, &str)], v: f64) {
        let labels = if labels.is_empty() {
            String::new()
        } else {
            let inner: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        };
        let f = self.by_name.entry(name.to_string()).or_insert_with(|| {
            self.order.push(name.to_string());
            Family {
                t,
                help,
                samples: Vec::new(),
            }
        });
        f.samples.push((labels, v));
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for name in &self.order {
            let Family { t, help, samples } = &self.by_name[name];
            out.push_str(&format!("# HELP {name} {help}\n"));
            let t = if *t == Type::Counter {
                "counter"
            } else {
                "gauge"
            };
            out.push_str(&format!("# TYPE {name} {t}\n"));
            for (labels, v) in samples {
                out.push_str(&format!("{name}{labels} {v}\n"));
            }
        }
        out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn pairs(shared: &Shared, now: u32, group: Option<&str>) -> HashMap<String, String> {
    let args: Vec<Vec<u8>> = group.map(|g| g.as_bytes().to_vec()).into_iter().collect();
    match stats_reply(&args, shared, now) {
        Ok(StatsReply::Pairs(p)) => p.into_iter().collect(),
        _ => HashMap::new(),
    }
}

/// `stats` fields and the exporter metrics they feed: (field, metric, type, HELP).
const GENERAL: &[(&str, &str, Type, &str)] = &[
    ("uptime", "memcached_uptime_seconds", Type::Counter, "Number of seconds since the server started."),
    ("time", "memcached_time_seconds", Type::Gauge, "current UNIX time according to the server."),
    ("rusage_user", "memcached_process_user_cpu_seconds_total", Type::Counter, "Accumulated user time for this process."),
    ("rusage_system", "memcached_process_system_cpu_seconds_total", Type::Counter, "Accumulated system time for this process."),
    ("bytes_read", "memcached_read_bytes_total", Type::Counter, "Total number of bytes read by this server from network."),
    ("bytes_written", "memcached_written_bytes_total", Type::Counter, "Total number of bytes sent by this server to network."),
    ("curr_connections", "memcached_current_connections", Type::Gauge, "Current number of open connections."),
    ("total_connections", "memcached_connections_total", Type::Counter, "Total number of connections opened since the server started running."),
    ("rejected_connections", "memcached_connections_rejected_total", Type::Counter, "Total number of connections rejected due to hitting the memcached's -c limit in maxconns_fast mode."),
    ("conn_yields", "memcached_connections_yielded_total", Type::Counter, "Total number of connections yielded running due to hitting the memcached's -R limit."),
    ("listen_disabled_num", "memcached_connections_listener_disabled_total", Type::Counter, "Number of times that memcached has hit its connections limit and disabled its listener."),
    ("accepting_conns", "memcached_accepting_connections", Type::Gauge, "The Memcached server is currently accepting new connections."),
    ("bytes", "memcached_current_bytes", Type::Gauge, "Current number of bytes used to store items."),
    ("limit_maxbytes", "memcached_limit_bytes", Type::Gauge, "Number of bytes this server is allowed to use for storage."),
    ("total_malloced", "memcached_malloced_bytes", Type::Gauge, "Number of bytes of memory allocated to slab pages."),
    ("curr_items", "memcached_current_items", Type::Gauge, "Current number of items stored by this instance."),
    ("total_items", "memcached_items_total", Type::Counter, "Total number of items stored during the life of this instance."),
    ("evictions", "memcached_items_evicted_total", Type::Counter, "Total number of valid items removed from cache to free memory for new items."),
    ("reclaimed", "memcached_items_reclaimed_total", Type::Counter, "Total number of times an entry was stored using memory from an expired entry."),
    ("store_too_large", "memcached_item_too_large_total", Type::Counter, "The number of times an item exceeded the max-item-size when being stored."),
    ("store_no_memory", "memcached_item_no_memory_total", Type::Counter, "The number of times an item could not be stored due to no more memory."),
    ("direct_reclaims", "memcached_direct_reclaims_total", Type::Counter, "Times worker threads had to directly reclaim or evict items."),
    ("lru_crawler_starts", "memcached_lru_crawler_starts_total", Type::Counter, "Times an LRU crawler was started."),
    ("crawler_reclaimed", "memcached_lru_crawler_reclaimed_total", Type::Counter, "Total items freed by LRU Crawler."),
    ("crawler_items_checked", "memcached_lru_crawler_items_checked_total", Type::Counter, "Total items examined by LRU Crawler."),
    ("moves_to_cold", "memcached_lru_crawler_moves_to_cold_total", Type::Counter, "Total number of items moved from HOT/WARM to COLD LRU's."),
    ("moves_to_warm", "memcached_lru_crawler_moves_to_warm_total", Type::Counter, "Total number of items moved from COLD to WARM LRU."),
    ("moves_within_lru", "memcached_lru_crawler_moves_within_lru_total", Type::Counter, "Total number of items reshuffled within HOT or WARM LRU's."),
];

/// memcached_commands_total{command,status} and their `stats` fields.
const COMMANDS: &[(&str, &str, &str)] = &[
    ("get", "hit", "get_hits"),
    ("get", "miss", "get_misses"),
    ("delete", "hit", "delete_hits"),
    ("delete", "miss", "delete_misses"),
    ("incr", "hit", "incr_hits"),
    ("incr", "miss", "incr_misses"),
    ("decr", "hit", "decr_hits"),
    ("decr", "miss", "decr_misses"),
    ("cas", "hit", "cas_hits"),
    ("cas", "miss", "cas_misses"),
    ("cas", "badval", "cas_badval"),
    ("touch", "hit", "touch_hits"),
    ("touch", "miss", "touch_misses"),
    ("flush", "hit", "cmd_flush"),
];

/// `stats items` fields per class (`items:N:<field>`).
const ITEMS: &[(&str, &str, Type, &str)] = &[
    ("number", "memcached_slab_current_items", Type::Gauge, "Number of items currently stored in this slab class."),
    ("age", "memcached_slab_items_age_seconds", Type::Gauge, "Number of seconds the oldest item has been in the slab class."),
    ("crawler_reclaimed", "memcached_slab_items_crawler_reclaimed_total", Type::Counter, "Number of items freed by the LRU Crawler."),
    ("evicted", "memcached_slab_items_evicted_total", Type::Counter, "Total number of times an item had to be evicted from the LRU before it expired."),
    ("evicted_nonzero", "memcached_slab_items_evicted_nonzero_total", Type::Counter, "Total number of times an item which had an explicit expire time set had to be evicted from the LRU before it expired."),
    ("evicted_time", "memcached_slab_items_evicted_time_seconds", Type::Counter, "Seconds since the last access for the most recent item evicted from this class."),
    ("evicted_unfetched", "memcached_slab_items_evicted_unfetched_total", Type::Counter, "Total nmber of items evicted and never fetched."),
    ("expired_unfetched", "memcached_slab_items_expired_unfetched_total", Type::Counter, "Total number of valid items evicted from the LRU which were never touched after being set."),
    ("outofmemory", "memcached_slab_items_outofmemory_total", Type::Counter, "Total number of items for this slab class that have triggered an out of memory error."),
    ("reclaimed", "memcached_slab_items_reclaimed_total", Type::Counter, "Total number of items reclaimed."),
    ("tailrepairs", "memcached_slab_items_tailrepairs_total", Type::Counter, "Total number of times the entries for a particular ID need repairing."),
    ("moves_to_cold", "memcached_slab_items_moves_to_cold", Type::Counter, "Number of items moved from HOT or WARM into COLD."),
    ("moves_to_warm", "memcached_slab_items_moves_to_warm", Type::Counter, "Number of items moves from COLD into WARM."),
    ("moves_within_lru", "memcached_slab_items_moves_within_lru", Type::Counter, "Number of times active items were bumped within HOT or WARM."),
    ("number_hot", "memcached_slab_hot_items", Type::Gauge, "Number of items presently stored in the HOT LRU."),
    ("number_warm", "memcached_slab_warm_items", Type::Gauge, "Number of items presently stored in the WARM LRU."),
    ("number_cold", "memcached_slab_cold_items", Type::Gauge, "Number of items presently stored in the COLD LRU."),
    ("number_temp", "memcached_slab_temporary_items", Type::Gauge, "Number of items presently stored in the TEMPORARY LRU."),
    ("age_hot", "memcached_slab_hot_age_seconds", Type::Gauge, "Age of the oldest item in HOT LRU."),
    ("age_warm", "memcached_slab_warm_age_seconds", Type::Gauge, "Age of the oldest item in WARM LRU."),
];

/// `stats slabs` fields per class (`N:<field>`).
const SLABS: &[(&str, &str, Type, &str)] = &[
    (
        "chunk_size",
        "memcached_slab_chunk_size_bytes",
        Type::Gauge,
        "Number of bytes allocated to each chunk within this slab class.",
    ),
    (
        "chunks_per_page",
        "memcached_slab_chunks_per_page",
        Type::Gauge,
        "Number of chunks within a single page for this slab class.",
    ),
    (
        "total_pages",
        "memcached_slab_current_pages",
        Type::Gauge,
        "Number of pages allocated to this slab class.",
    ),
    (
        "total_chunks",
        "memcached_slab_current_chunks",
        Type::Gauge,
        "Number of chunks allocated to this slab class.",
    ),
    (
        "used_chunks",
        "memcached_slab_chunks_used",
        Type::Gauge,
        "Number of chunks allocated to an item.",
    ),
    (
        "free_chunks",
        "memcached_slab_chunks_free",
        Type::Gauge,
        "Number of chunks not yet allocated items.",
    ),
    (
        "free_chunks_end",
        "memcached_slab_chunks_free_end",
        Type::Gauge,
        "Number of free chunks at the end of the last allocated page.",
    ),
    (
        "mem_requested",
        "memcached_slab_mem_requested_bytes",
        Type::Gauge,
        "Number of bytes of memory actual items take up within a slab.",
    ),
];

const SLAB_COMMANDS: &[(&str, &str, &str)] = &[
    ("get", "hit", "get_hits"),
    ("delete", "hit", "delete_hits"),
    ("incr", "hit", "incr_hits"),
    ("decr", "hit", "decr_hits"),
    ("cas", "hit", "cas_hits"),
    ("touch", "hit", "touch_hits"),
    ("cas", "badval", "cas_badval"),
];

fn num(p: &HashMap<String, String>, k: &str) -> Option<f64> {
    p.get(k).and_then(|v| v.parse().ok())
}

/// Splits `stats items` / `stats slabs` keys into (class, field).
fn per_class<'a>(p: &'a HashMap<String, String>, prefix: &str) -> Vec<(u32, &'a str, &'a str)> {
    let mut v: Vec<(u32, &str, &str)> = p
        .iter()
        .filter_map(|(k, val)| {
            let rest = k.strip_prefix(prefix)?;
            let (class, field) = rest.split_once(':')?;
            Some((class.parse().ok()?, field, val.as_str()))
        })
        .collect();
    v.sort();
    v
}

/// The whole `/metrics` page.
pub(crate) fn render(shared: &Shared, now: u32) -> String {
    let mut f = Families::default();
    let general = pairs(shared, now, None);
    let settings = pairs(shared, now, Some("settings"));
    f.add(
        "memcached_up",
        Type::Gauge,
        "Could the memcached server be reached.",
        &[],
        1.0,
    );
    let version = general.get("version").cloned().unwrap_or_default();
    f.add(
        "memcached_version",
        Type::Gauge,
        "The version of this memcached server.",
        &[("version", &version)],
        1.0,
    );
    for (field, name, t, help) in GENERAL {
        if let Some(v) = num(&general, field) {
            f.add(name, *t, help, &[], v);
        }
    }
    const CMD_HELP: &str =
        "Total number of all requests broken down by command (get, set, etc.) and status.";
    for (cmd, status, field) in COMMANDS {
        if let Some(v) = num(&general, field) {
            f.add(
                "memcached_commands_total",
                Type::Counter,
                CMD_HELP,
                &[("command", cmd), ("status", status)],
                v,
            );
        }
    }
    // memcached counts cas in cmd_set as well; the exporter takes it out again.
    if let (Some(set), Some(a), Some(b), Some(c)) = (
        num(&general, "cmd_set"),
        num(&general, "cas_misses"),
        num(&general, "cas_hits"),
        num(&general, "cas_badval"),
    ) {
        f.add(
            "memcached_commands_total",
            Type::Counter,
            CMD_HELP,
            &[("command", "set"), ("status", "hit")],
            set - a - b - c,
        );
    }
    if let Some(v) = num(&settings, "maxconns") {
        f.add(
            "memcached_max_connections",
            Type::Gauge,
            "Maximum number of clients allowed.",
            &[],
            v,
        );
    }
    let items = pairs(shared, now, Some("items"));
    for (class, field, val) in per_class(&items, "items:") {
        let Some((_, name, t, help)) = ITEMS.iter().find(|d| d.0 == field) else {
            continue;
        };
        if let Ok(v) = val.parse::<f64>() {
            f.add(name, *t, help, &[("slab", &class.to_string())], v);
        }
    }
    let slabs = pairs(shared, now, Some("slabs"));
    let by_class = per_class(&slabs, "");
    const SLAB_CMD_HELP: &str =
        "Total number of all requests broken down by command (get, set, etc.) and status per slab.";
    let mut classes: Vec<u32> = by_class.iter().map(|c| c.0).collect();
    classes.dedup();
    for class in classes {
        let fields: HashMap<String, String> = by_class
            .iter()
            .filter(|c| c.0 == class)
            .map(|c| (c.1.to_string(), c.2.to_string()))
            .collect();
        let slab = class.to_string();
        for (field, name, t, help) in SLABS {
            // Reported from `stats items` already (the exporter would send it twice).
            if *field == "mem_requested"
                && items.contains_key(&format!("items:{class}:mem_requested"))
            {
                continue;
            }
            if let Some(v) = num(&fields, field) {
                f.add(name, *t, help, &[("slab", &slab)], v);
            }
        }
        for (cmd, status, field) in SLAB_COMMANDS {
            if let Some(v) = num(&fields, field) {
                f.add(
                    "memcached_slab_commands_total",
                    Type::Counter,
                    SLAB_CMD_HELP,
                    &[("slab", &slab), ("command", cmd), ("status", status)],
                    v,
                );
            }
        }
        if let (Some(set), Some(h), Some(b)) = (
            num(&fields, "cmd_set"),
            num(&fields, "cas_hits"),
            num(&fields, "cas_badval"),
        ) {
            f.add(
                "memcached_slab_commands_total",
                Type::Counter,
                SLAB_CMD_HELP,
                &[("slab", &slab), ("command", "set"), ("status", "hit")],
                set - h - b,
            );
        }
    }
    // hkv's own figures: every numeric line of `stats hkv`.
    let hkv = pairs(shared, now, Some("hkv"));
    for d in HKV_DEFS {
        let Some(v) = num(&hkv, d.name) else { continue };
        let (name, t) = match d.kind {
            super::registry::Kind::Counter => (format!("hkv_{}_total", d.name), Type::Counter),
            _ => (format!("hkv_{}", d.name), Type::Gauge),
        };
        f.add(&name, t, d.help, &[], v);
    }
    let mut out = f.render();
    latency_histogram(shared, &mut out);
    out
}

/// `hkv_request_latency_seconds`, a Prometheus histogram (cumulative buckets).
fn latency_histogram(shared: &Shared, out: &mut String) {
    use std::sync::atomic::Ordering::Relaxed;
    let l = &shared.stats.latency;
    let name = "hkv_request_latency_seconds";
    out.push_str(&format!(
        "# HELP {name} Server-side request latency: from the wake-up that found a request to its reply handed to the kernel, batch interval included.\n# TYPE {name} histogram\n"
    ));
    let mut cumulative = 0;
    for (i, b) in l.buckets.iter().enumerate() {
        cumulative += b.load(Relaxed);
        let le = match crate::counters::LATENCY_BOUNDS_US.get(i) {
            Some(us) => format!("{}", *us as f64 / 1e6),
            None => "+Inf".to_string(),
        };
        out.push_str(&format!("{name}_bucket{{le=\"{le}\"}} {cumulative}\n"));
    }
    out.push_str(&format!(
        "{name}_sum {}\n",
        l.sum_ns.load(Relaxed) as f64 / 1e9
    ));
    out.push_str(&format!("{name}_count {cumulative}\n"));
}
