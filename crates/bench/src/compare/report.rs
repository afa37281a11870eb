//! The markdown table, plots and JSON of one comparison.

use std::collections::BTreeMap;
use std::path::Path;

use super::args::{Args, PIPE, UNPIPE};
use super::marked::relative;
use crate::net::{Protocol, RunResult};
use crate::plot;
use crate::workload::Dist;

/// The DIDO tasks hkv times per event-loop pass, as they appear in `stats hkv`.
const TASKS: [(&str, &str); 5] = [
    ("task_rv_ns", "RV (receive)"),
    ("task_pp_ns", "PP (parse)"),
    ("task_engine_ns", "MM+IN+KC+RD (engine)"),
    ("task_wr_ns", "WR (write replies)"),
    ("task_sd_ns", "SD (send)"),
];

/// One row of the table: a server spoken to in one protocol.
#[derive(serde::Serialize)]
pub(super) struct Row {
    pub(super) server: &'static str,
    pub(super) protocol: Protocol,
    pub(super) pipelined: RunResult,
    pub(super) unpipelined: RunResult,
}

#[derive(serde::Serialize)]
pub(super) struct Curve {
    pub(super) server: &'static str,
    pub(super) protocol: Protocol,
    pub(super) points: Vec<RunResult>,
}

/// ns per answered key spent in each DIDO task over one run (from `stats hkv` deltas).
pub(super) fn task_breakdown(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<(String, f64)> {
    let num = |m: &BTreeMap<String, String>, k: &str| {
        m.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
    };
    let ops = num(after, "batched_requests") - num(before, "batched_requests");
    TASKS
        .iter()
        .map(|(k, label)| {
            let d = num(after, k) - num(before, k);
            (label.to_string(), d / ops.max(1.0))
        })
        .collect()
}

pub(super) struct Report<'a> {
    pub(super) args: &'a Args,
    pub(super) keys: u64,
    pub(super) runs: usize,
    pub(super) duration: f64,
    pub(super) mem: usize,
    pub(super) rows: &'a [Row],
    pub(super) curves: &'a [Curve],
    pub(super) tasks: Option<&'a [(String, f64)]>,
    pub(super) peak: f64,
    pub(super) out: &'a Path,
}

impl Report<'_> {
    fn label(r: &Row) -> String {
        format!("{} {}", r.server, r.protocol.name())
    }

    pub(super) fn plots(&self) -> anyhow::Result<()> {
        let bars: Vec<(String, f64)> = self
            .rows
            .iter()
            .map(|r| (Self::label(r), r.pipelined.ops_per_sec))
            .collect();
        plot::bars(
            &self.out.join("compare-throughput.svg"),
            &format!(
                "YCSB-{:?} {:?} {:?}, closed loop {}x{}: throughput",
                self.args.workload, self.args.dataset, self.args.dist, PIPE.0, PIPE.1
            ),
            "ops/s",
            &bars,
        )?;
        let cpu: Vec<(String, f64)> = self
            .rows
            .iter()
            .map(|r| {
                (
                    Self::label(r),
                    r.pipelined.server_cpu_ns_per_op.unwrap_or(0.0),
                )
            })
            .collect();
        plot::bars(
            &self.out.join("compare-cpu.svg"),
            "server CPU time per operation (pipelined)",
            "ns/op",
            &cpu,
        )?;
        let cdfs: Vec<(String, Vec<(f64, f64)>)> = self
            .rows
            .iter()
            .map(|r| (Self::label(r), r.pipelined.cdf.clone()))
            .collect();
        plot::lines(
            &self.out.join("compare-cdf.svg"),
            &format!("latency CDF, closed loop {}x{}", PIPE.0, PIPE.1),
            "latency (us)",
            "fraction of requests",
            &cdfs,
            true,
        )?;
        let series: Vec<(String, Vec<(f64, f64)>)> = self
            .curves
            .iter()
            .map(|c| {
                (
                    format!("{} {}", c.server, c.protocol.name()),
                    c.points.iter().map(|p| (p.ops_per_sec, p.p99_us)).collect(),
                )
            })
            .collect();
        plot::lines(
            &self.out.join("compare-latency.svg"),
            "open loop: p99 latency against throughput",
            "ops/s achieved",
            "p99 latency (us)",
            &series,
            false,
        )?;
        Ok(())
    }

    pub(super) fn markdown(&self, md_path: &Path) -> String {
        let a = self.args;
        let mut s = String::new();
        let rel = |f: &str| {
            let plot = self.out.join(f);
            relative(&plot, md_path.parent().unwrap_or(Path::new(".")))
        };
        s.push_str(&format!(
            "YCSB-{:?}, {:?}, {:?}{}, {} keys preloaded, {} server thread(s) each, {} MiB each, \
             load generator with {} client thread(s) on the same 2-core machine; median of {} \
             run(s) of {} s.\n\n",
            a.workload,
            a.dataset,
            a.dist,
            if a.dist == Dist::Zipf { " 0.99" } else { "" },
            self.keys,
            a.server_threads,
            self.mem,
            a.client_threads,
            self.runs,
            self.duration
        ));
        s.push_str(&format!(
            "| server | protocol | pipelined ({}x{}) ops/s | server CPU ns/op | p99 us | unpipelined ({}x{}) ops/s | server CPU ns/op | p99 us |\n",
            PIPE.0, PIPE.1, UNPIPE.0, UNPIPE.1
        ));
        s.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        let cpu = |r: &RunResult| {
            r.server_cpu_ns_per_op
                .map(|c| format!("{c:.0}"))
                .unwrap_or_else(|| "-".into())
        };
        for r in self.rows {
            s.push_str(&format!(
                "| {} | {} | {:.0} | {} | {:.0} | {:.0} | {} | {:.0} |\n",
                r.server,
                r.protocol.name(),
                r.pipelined.ops_per_sec,
                cpu(&r.pipelined),
                r.pipelined.p99_us,
                r.unpipelined.ops_per_sec,
                cpu(&r.unpipelined),
                r.unpipelined.p99_us,
            ));
        }
        s.push('\n');
        s.push_str(&self.targets());
        s.push_str(&format!(
            "\nOpen loop (latency from each request's scheduled send time), each server in its \
             fastest protocol, at fractions of the best peer's pipelined peak ({:.0} ops/s):\n\n",
            self.peak
        ));
        s.push_str(
            "| server | protocol | asked req/s | achieved ops/s | p50 us | p99 us | p99.9 us |\n",
        );
        s.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
        for c in self.curves {
            for p in &c.points {
                s.push_str(&format!(
                    "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
                    c.server,
                    c.protocol.name(),
                    p.target_rate.unwrap_or(0.0),
                    p.ops_per_sec,
                    p.p50_us,
                    p.p99_us,
                    p.p999_us
                ));
            }
        }
        if let Some(t) = self.tasks {
            s.push_str(
                "\nhkv's time per DIDO task in the pipelined text run (from `stats hkv`, \
                 ns per request, wall time of the worker's event-loop phases):\n\n",
            );
            s.push_str("| task | ns/request |\n| --- | ---: |\n");
            for (k, v) in t {
                s.push_str(&format!("| {k} | {v:.0} |\n"));
            }
        }
        s.push_str(&format!(
            "\n![throughput]({})\n![server CPU per op]({})\n![latency CDF]({})\n![latency against throughput]({})\n",
            rel("compare-throughput.svg"),
            rel("compare-cpu.svg"),
            rel("compare-cdf.svg"),
            rel("compare-latency.svg")
        ));
        s
    }

    /// The targets as ratios against the best peer, met or not.
    fn targets(&self) -> String {
        let hkv: Vec<&Row> = self.rows.iter().filter(|r| r.server == "hkv").collect();
        let peers: Vec<&Row> = self.rows.iter().filter(|r| r.server != "hkv").collect();
        if hkv.is_empty() || peers.is_empty() {
            return String::new();
        }
        let best = |rows: &[&Row], f: &dyn Fn(&Row) -> f64| -> f64 {
            rows.iter().map(|r| f(r)).fold(0.0, f64::max)
        };
        let least = |rows: &[&Row], f: &dyn Fn(&Row) -> Option<f64>| -> Option<f64> {
            rows.iter()
                .filter_map(|r| f(r))
                .min_by(|a, b| a.total_cmp(b))
        };
        let verdict = |ok: bool| if ok { "met" } else { "missed" };
        let mut s = String::from(
            "| target | hkv | best peer | ratio | |\n| --- | ---: | ---: | ---: | --- |\n",
        );
        let (h, p) = (
            best(&hkv, &|r| r.pipelined.ops_per_sec),
            best(&peers, &|r| r.pipelined.ops_per_sec),
        );
        s.push_str(&format!(
            "| pipelined throughput >= 1.5x | {h:.0} | {p:.0} | {:.2} | {} |\n",
            h / p,
            verdict(h >= 1.5 * p)
        ));
        if let (Some(h), Some(p)) = (
            least(&hkv, &|r| r.pipelined.server_cpu_ns_per_op),
            least(&peers, &|r| r.pipelined.server_cpu_ns_per_op),
        ) {
            s.push_str(&format!(
                "| server CPU per op <= 0.5x | {h:.0} ns | {p:.0} ns | {:.2} | {} |\n",
                h / p,
                verdict(h <= 0.5 * p)
            ));
        }
        let (h, p) = (
            best(&hkv, &|r| r.unpipelined.ops_per_sec),
            best(&peers, &|r| r.unpipelined.ops_per_sec),
        );
        s.push_str(&format!(
            "| unpipelined throughput >= 1.2x | {h:.0} | {p:.0} | {:.2} | {} |\n",
            h / p,
            verdict(h >= 1.2 * p)
        ));
        // p99 at half of the best peer's peak: hkv against that peer.
        let peer = peers
            .iter()
            .max_by(|a, b| a.pipelined.ops_per_sec.total_cmp(&b.pipelined.ops_per_sec))
            .map(|r| r.server);
        let at_half = |server: &str| {
            self.curves
                .iter()
                .find(|c| c.server == server)
                .and_then(|c| {
                    c.points
                        .iter()
                        .min_by(|a, b| {
                            let d = |r: &RunResult| {
                                (r.target_rate.unwrap_or(0.0) - self.peak * 0.5).abs()
                            };
                            d(a).total_cmp(&d(b))
                        })
                        .map(|r| r.p99_us)
                })
        };
        if let (Some(h), Some(p)) = (at_half("hkv"), peer.and_then(at_half)) {
            s.push_str(&format!(
                "| p99 at half the best peer's peak <= peer's | {h:.0} us | {p:.0} us | {:.2} | {} |\n",
                h / p,
                verdict(h <= p)
            ));
        }
        s
    }
}
