//! `watch` on the server side: the lines only the server can write (fetches and mutations,
//! from a batch's requests and results; connection events), and watcher connections fed
//! from the engine's hub within their output budget.

use std::fmt::Write as _;

use hkv_engine::watch::{stream, uri_encode, Watch};
use hkv_engine::{Op, Request, Response, Responses};

use super::Worker;

/// How often a worker with watchers looks for new lines while nothing else wakes it.
pub(super) const WATCH_TICK: std::time::Duration = std::time::Duration::from_millis(20);

/// Lines a watcher's output may hold unsent, beside the hub's 256 KiB: a watcher that does
/// not read holds at most this much of the process (it held the 1 MiB output high-water
/// mark, 1.5 MB a watcher).
const WATCH_OUTPUT: usize = 64 << 10;

impl Worker {
    /// Watcher connections of this pass: their input is dropped (memcached reads nothing
    /// more from a watcher) and waiting lines move to their output, up to the high-water
    /// mark (the pass's SD sends them).
    pub(super) fn feed_watchers(&mut self, ready: &[usize]) {
        if self.watchers == 0 {
            return;
        }
        let high_water = self.shared.config.output_high_water;
        let watch = self.shared.engine.watch();
        for &t in ready {
            let Some(c) = self.conns.get_mut(t) else {
                continue;
            };
            let Some(id) = c.watch else { continue };
            c.rstart = c.rend;
            c.want_parse = false;
            c.cont = None;
            c.swallow = 0;
            let room = high_water
                .min(WATCH_OUTPUT)
                .saturating_sub(c.pending_output());
            if room > 0 {
                watch.take(id, &mut c.wbuf, room);
            }
        }
    }

    /// Tokens of the watchers with lines to send, for the next pass.
    pub(super) fn watchers_with_lines(&self, ready: &mut Vec<usize>) {
        if self.watchers == 0 {
            return;
        }
        let watch = self.shared.engine.watch();
        for (t, c) in self.conns.iter() {
            // A watcher whose output is full waits for its send to finish (which brings it
            // back): made ready while it could take nothing, an idle worker spun at 100%
            // for as long as a watcher did not read (a hostile probe). Half of the budget
            // free, so that the next line (far shorter) always fits.
            let room = c.pending_output() < WATCH_OUTPUT / 2;
            if room && c.watch.is_some_and(|id| watch.has_lines(id)) {
                ready.push(t);
            }
        }
    }
}

/// `type=conn_new` / `type=conn_close`, as memcached writes them for `watch connevents`.
pub(super) fn conn_event(watch: &Watch, fd: i32, peer: &str, close: Option<&str>) {
    watch.emit(stream::CONNEVENTS, |l| {
        l.push_str(if close.is_some() {
            "type=conn_close "
        } else {
            "type=conn_new "
        });
        match peer
            .strip_prefix("tcp:")
            .or_else(|| peer.strip_prefix("tcp6:"))
        {
            Some(addr) => {
                let (ip, port) = addr.rsplit_once(':').unwrap_or((addr, "0"));
                let ip = ip.trim_start_matches('[').trim_end_matches(']');
                let _ = write!(l, "rip={ip} rport={port} transport=tcp");
            }
            // memcached names a Unix socket's peer "unix", port 0.
            None => l.push_str("rip=unix rport=0 transport=local"),
        }
        if let Some(reason) = close {
            let _ = write!(l, " reason={reason}");
        }
        let _ = write!(l, " cfd={fd}");
    });
}

/// `type=item_get` for each read and `type=item_store` for each storage command of a batch
/// that ran (deferred reads are written when they run). `cfd` gives a request's connection,
/// `class` a size's slab class (1-based, 0 for none).
pub(super) fn batch_events(
    watch: &Watch,
    batch: &[Request<'_>],
    res: &Responses,
    now: u32,
    cfd: impl Fn(u32) -> i32,
    class: impl Fn(usize, usize) -> usize,
) {
    let fetchers = watch.wants(stream::FETCHERS);
    let mutations = watch.wants(stream::MUTATIONS);
    if !fetchers && !mutations {
        return;
    }
    for (i, (r, out)) in batch.iter().zip(res.results.iter()).enumerate() {
        let fd = cfd(r.group);
        match (r.op, out) {
            (_, Response::Deferred) => {}
            (Op::Get | Op::Gets | Op::Gat | Op::Gats | Op::Touch | Op::Incr | Op::Decr, _)
                if fetchers =>
            {
                let found = !matches!(out, Response::Miss | Response::NotFound);
                watch.emit(stream::FETCHERS, |l| {
                    l.push_str("type=item_get key=");
                    uri_encode(l, r.key);
                    let len = match out {
                        Response::Value { len, .. } => *len as usize,
                        // incr/decr and touch: the item they changed.
                        _ => res.after.get(i).map_or(0, |a| a.len as usize),
                    };
                    let (status, clsid) = if found {
                        ("found", class(r.key.len(), len))
                    } else {
                        ("not_found", 0)
                    };
                    let _ = write!(l, " status={status} clsid={clsid} cfd={fd} size={len}");
                });
            }
            (Op::Set | Op::Add | Op::Replace | Op::Append | Op::Prepend | Op::Cas, _)
                if mutations =>
            {
                let after = res.after.get(i).copied().unwrap_or_default();
                let status = match out {
                    Response::Stored => "stored",
                    Response::NotStored => "not_stored",
                    Response::Exists => "exists",
                    Response::NotFound => "not_found",
                    Response::TooLarge => "too_large",
                    Response::OutOfMemory => "no_memory",
                    _ => "error",
                };
                let size = if after.len > 0 || matches!(out, Response::Stored) {
                    after.len as usize
                } else {
                    r.value.len()
                };
                let ttl = if after.expiry > now {
                    i64::from(after.expiry - now)
                } else {
                    r.exptime.max(0)
                };
                watch.emit(stream::MUTATIONS, |l| {
                    l.push_str("type=item_store key=");
                    uri_encode(l, r.key);
                    let _ = write!(
                        l,
                        " status={status} cmd={} ttl={ttl} clsid={} cfd={fd} size={size}",
                        store_cmd(r.op),
                        class(r.key.len(), size),
                    );
                });
            }
            _ => {}
        }
    }
}

fn store_cmd(op: Op) -> &'static str {
    match op {
        Op::Add => "add",
        Op::Replace => "replace",
        Op::Append => "append",
        Op::Prepend => "prepend",
        Op::Cas => "cas",
        _ => "set",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_events_name_the_peer_as_memcached() {
        let w = Watch::default();
        let id = w.add(stream::CONNEVENTS).unwrap();
        conn_event(&w, 25, "tcp:127.0.0.1:39444", None);
        conn_event(&w, 25, "tcp:127.0.0.1:39444", Some("normal"));
        conn_event(&w, 26, "unix:/tmp/s", None);
        let mut out = Vec::new();
        w.take(id, &mut out, usize::MAX);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text
            .lines()
            .map(|l| l.split_once(" type=").unwrap().1)
            .collect();
        assert_eq!(
            lines,
            [
                "conn_new rip=127.0.0.1 rport=39444 transport=tcp cfd=25",
                "conn_close rip=127.0.0.1 rport=39444 transport=tcp reason=normal cfd=25",
                "conn_new rip=unix rport=0 transport=local cfd=26",
            ]
        );
    }
}
