//! PP of the classic text commands other than multi-key reads (whose keys the server plans
//! one by one, within its pass budgets): engine requests and reply steps.

use bumpalo::Bump;
use hkv_types::{Op, Request};

use super::Command;
use crate::step::Step;

/// Turns one command other than a multi-key read into engine requests and response steps.
/// Returns true if parsing of this connection must pause after it until the batch has run
/// (flush_all must see every earlier request executed, and none after it).
pub fn plan_command<'a>(
    cmd: &Command<'a>,
    buf: &'a [u8],
    keys: &'a Bump,
    batch: &mut Vec<Request<'a>>,
    steps: &mut Vec<Step>,
    close: &mut bool,
) -> bool {
    let mut engine = |req: Request<'a>| {
        batch.push(req);
        (batch.len() - 1) as u32
    };
    // Borrowed: a meta command is ~200 bytes, and moving it here and on was a memcpy each.
    match *cmd {
        // Every key at once: the server plans these lines itself, a slice of keys per pass
        // within its memory budgets; this is the plain form (tools, tests).
        Command::Get { keys: ref ks, cas } => plan_keys(ks, cas, None, buf, batch, steps),
        Command::Gat {
            exptime,
            keys: ref ks,
            cas,
        } => plan_keys(ks, cas, Some(exptime), buf, batch, steps),
        Command::Store {
            op,
            key,
            flags,
            exptime,
            cas,
            data,
            noreply,
            previous,
        } => {
            let mut req = Request {
                cas,
                ..Request::store(op, key, data, flags, exptime)
            };
            req.meta.previous = previous;
            let idx = engine(req);
            steps.push(reply_step(idx, key, buf, noreply, previous));
        }
        Command::Delete {
            key,
            noreply,
            previous,
        } => {
            let mut req = Request::delete(key);
            req.meta.previous = previous;
            let idx = engine(req);
            steps.push(reply_step(idx, key, buf, noreply, previous));
        }
        Command::Arith {
            op,
            key,
            delta,
            noreply,
        } => {
            let req = Request {
                delta,
                ..Request::new(op, key)
            };
            let idx = engine(req);
            steps.push(Step::Reply {
                idx,
                noreply,
                arith: true,
            });
        }
        Command::Touch {
            key,
            exptime,
            noreply,
        } => {
            let idx = engine(Request::touch(key, exptime));
            steps.push(Step::Reply {
                idx,
                noreply,
                arith: false,
            });
        }
        Command::FlushAll { delay, noreply } => {
            steps.push(Step::Flush { delay, noreply });
            return true;
        }
        Command::Version => steps.push(Step::Version),
        Command::Verbosity { level, noreply } => steps.push(Step::Verbosity { level, noreply }),
        Command::Quit => {
            *close = true;
        }
        Command::Shutdown { graceful, invalid } => {
            steps.push(Step::Shutdown { graceful, invalid });
            return true;
        }
        Command::RefreshCerts => steps.push(Step::RefreshCerts),
        Command::Stats { ref args } => {
            // `stats detail on|off` changes what the requests after it count: they wait for
            // the next pass, which runs once this one has answered it.
            let detail = args.first() == Some(&&b"detail"[..]);
            steps.push(Step::Stats(args.iter().map(|a| a.to_vec()).collect()));
            if detail {
                return true;
            }
        }
        Command::Watch { streams } => {
            // Nothing after it is a request: the connection only streams logs from here.
            steps.push(Step::Watch(streams));
            return true;
        }
        Command::CacheMemlimit { megabytes, noreply } => {
            steps.push(Step::MemLimit { megabytes, noreply });
        }
        Command::MetaDump { ref classes } => {
            // The dump streams from the next pass on; what follows waits for its END.
            steps.push(Step::MetaDump(classes.clone()));
            return true;
        }
        Command::Crawler(ref op) => steps.push(Step::Crawler(op.clone())),
        Command::SlabsReassign { from, to } => steps.push(Step::Reassign { from, to }),
        Command::SlabsAutomove { mode, noreply } => steps.push(Step::Automove { mode, noreply }),
        Command::Meta(ref m) => return crate::meta::plan_meta(m, buf, keys, batch, steps),
        Command::Vector {
            key,
            vector,
            operand,
            noreply,
        } => {
            let idx = engine(Request::vector(key, vector, operand));
            let key_off = key.as_ptr() as usize - buf.as_ptr() as usize;
            steps.push(Step::Vector {
                idx,
                key_off: key_off as u32,
                key_len: key.len() as u32,
                noreply,
            });
        }
    }
    false
}

/// The reply of a write: its status line, or for `getset`/`getdel` the previous value.
fn reply_step(idx: u32, key: &[u8], buf: &[u8], noreply: bool, previous: bool) -> Step {
    if !previous {
        return Step::Reply {
            idx,
            noreply,
            arith: false,
        };
    }
    Step::Previous {
        idx,
        key_off: (key.as_ptr() as usize - buf.as_ptr() as usize) as u32,
        key_len: key.len() as u32,
        noreply,
    }
}

/// The request of one key of a `get`/`gets` (no `exptime`) or `gat`/`gats` line.
pub fn get_key_request(key: &[u8], cas: bool, exptime: Option<i64>) -> Request<'_> {
    match exptime {
        Some(exptime) => Request {
            exptime,
            ..Request::new(if cas { Op::Gats } else { Op::Gat }, key)
        },
        None => Request::new(if cas { Op::Gets } else { Op::Get }, key),
    }
}

/// The step that answers one key of a multi-key line: a VALUE block on a hit.
pub fn get_key_step(idx: usize, key: &[u8], buf: &[u8], cas: bool) -> Step {
    Step::Value {
        idx: idx as u32,
        key_off: (key.as_ptr() as usize - buf.as_ptr() as usize) as u32,
        key_len: key.len() as u32,
        cas,
    }
}

fn plan_keys<'a>(
    keys: &[&'a [u8]],
    cas: bool,
    exptime: Option<i64>,
    buf: &'a [u8],
    batch: &mut Vec<Request<'a>>,
    steps: &mut Vec<Step>,
) {
    for key in keys {
        batch.push(get_key_request(key, cas, exptime));
        steps.push(get_key_step(batch.len() - 1, key, buf, cas));
    }
    steps.push(Step::Text("END"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{parse, Limits, Parsed};

    /// Plans the one command in `input`: its engine requests, steps and (barrier, close).
    fn plan_one(input: &[u8]) -> (Vec<Request<'_>>, Vec<Step>, bool, bool) {
        let keys = Box::leak(Box::new(Bump::new()));
        let Parsed::Command { cmd, .. } = parse(input, &Limits::default()) else {
            panic!("not a command: {input:?}");
        };
        let (mut batch, mut steps, mut close) = (Vec::new(), Vec::new(), false);
        let barrier = plan_command(&cmd, input, keys, &mut batch, &mut steps, &mut close);
        (batch, steps, barrier, close)
    }

    #[test]
    fn a_multi_key_line_plans_one_request_and_value_per_key_then_end() {
        let (batch, steps, barrier, _) = plan_one(b"gats 30 a bb\r\n");
        assert!(!barrier);
        assert_eq!(batch.len(), 2);
        assert!(batch.iter().all(|r| r.op == Op::Gats && r.exptime == 30));
        assert_eq!(batch[1].key, b"bb");
        assert!(matches!(
            steps[1],
            Step::Value {
                idx: 1,
                key_off: 10,
                key_len: 2,
                cas: true
            }
        ));
        assert!(matches!(steps[2], Step::Text("END")));
    }

    #[test]
    fn flush_shutdown_stats_detail_and_metadump_are_barriers_and_quit_closes() {
        for line in [
            &b"flush_all\r\n"[..],
            b"shutdown\r\n",
            b"stats detail on\r\n",
            // Streamed from the next pass: nothing after it may be answered before its END.
            b"lru_crawler metadump all\r\n",
        ] {
            let (batch, steps, barrier, close) = plan_one(line);
            assert!(barrier && !close && batch.is_empty() && steps.len() == 1);
        }
        let (_, steps, barrier, close) = plan_one(b"stats\r\n");
        assert!(!barrier && !close && matches!(steps[0], Step::Stats(_)));
        let (_, steps, _, close) = plan_one(b"quit\r\n");
        assert!(close && steps.is_empty());
    }

    #[test]
    fn getset_answers_with_the_previous_value_and_noreply_is_kept() {
        let (batch, steps, ..) = plan_one(b"set k 0 0 1 noreply\r\nv\r\n");
        assert_eq!((batch[0].op, batch[0].value), (Op::Set, &b"v"[..]));
        assert!(matches!(
            steps[0],
            Step::Reply {
                idx: 0,
                noreply: true,
                arith: false
            }
        ));
        let (batch, steps, ..) = plan_one(b"getdel k\r\n");
        assert!(batch[0].meta.previous && batch[0].op == Op::Delete);
        assert!(matches!(steps[0], Step::Previous { key_len: 1, .. }));
    }

    #[test]
    fn lru_crawler_commands_become_control_steps_and_bad_ids_are_refused() {
        use crate::step::{ClassList, CrawlerOp};
        let (_, steps, ..) = plan_one(b"lru_crawler crawl 1,63\r\n");
        assert!(
            matches!(&steps[0], Step::Crawler(CrawlerOp::Crawl(ClassList::Ids(ids))) if ids == &[1, 63])
        );
        let (_, steps, ..) = plan_one(b"lru_crawler crawl all\r\n");
        assert!(matches!(
            &steps[0],
            Step::Crawler(CrawlerOp::Crawl(ClassList::All))
        ));
        let (_, steps, ..) = plan_one(b"lru_crawler tocrawl 7\r\n");
        assert!(matches!(&steps[0], Step::Crawler(CrawlerOp::ToCrawl(7))));
        // A class that cannot exist is refused once the crawler's state has been checked
        // (memcached answers a disabled crawler first).
        for line in [
            &b"lru_crawler crawl 64\r\n"[..],
            b"lru_crawler crawl 1,x\r\n",
        ] {
            let (_, steps, ..) = plan_one(line);
            assert!(matches!(
                &steps[0],
                Step::Crawler(CrawlerOp::Crawl(ClassList::Bad))
            ));
        }
        let (_, steps, ..) = plan_one(b"lru_crawler metadump 64\r\n");
        assert!(matches!(&steps[0], Step::MetaDump(ClassList::Bad)));
        for (line, error) in [
            (
                &b"lru_crawler sleep 1000001\r\n"[..],
                "CLIENT_ERROR sleep must be one second or less",
            ),
            (
                b"lru_crawler tocrawl -1\r\n",
                "CLIENT_ERROR bad command line format",
            ),
            (b"lru_crawler crawl all noreply\r\n", "ERROR"),
        ] {
            assert!(
                matches!(parse(line, &Limits::default()), Parsed::Error { error: e, .. } if e == error),
                "{line:?}"
            );
        }
    }
}
