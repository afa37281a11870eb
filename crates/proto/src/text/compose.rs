//! WR of the classic text commands: engine results in memcached's words.

use hkv_types::{Response, Responses};

use crate::output::Output;

use crate::reply::{error_line, field, line, number, VERSION};
use crate::step::Step;

/// The reply of one step composed from engine results alone; false for a step that the
/// server's control answers (flush, stats, shutdown and the like: they read or change server
/// state) or that belongs to another protocol.
pub fn compose(step: &Step, rbuf: &[u8], res: &Responses, out: &mut Output) -> bool {
    match *step {
        Step::Text(t) => line(out, t),
        Step::Value {
            idx,
            key_off,
            key_len,
            cas,
        } => {
            let r = &res.results[idx as usize];
            if let Response::Value {
                flags, cas: c, len, ..
            } = *r
            {
                out.extend_from_slice(b"VALUE ");
                out.extend_from_slice(span(rbuf, key_off, key_len));
                field(out, 0, flags);
                field(out, 0, len);
                if cas {
                    field(out, 0, c);
                }
                out.extend_from_slice(b"\r\n");
                out.value(res, r);
                out.extend_from_slice(b"\r\n");
            }
        }
        Step::Reply {
            idx,
            noreply,
            arith,
        } => {
            if !noreply {
                reply(out, &res.results[idx as usize], arith);
            }
        }
        Step::Version => {
            out.extend_from_slice(b"VERSION ");
            line(out, VERSION);
        }
        Step::Previous {
            idx,
            key_off,
            key_len,
            noreply,
        } => {
            if !noreply {
                let r = &res.results[idx as usize];
                let prev = res.after.get(idx as usize).and_then(|a| a.previous);
                let value = prev.as_ref().map_or(&[][..], |p| res.previous(p));
                super::previous::compose(
                    out,
                    span(rbuf, key_off, key_len),
                    r,
                    prev.as_ref(),
                    value,
                );
            }
        }
        Step::Vector {
            idx,
            key_off,
            key_len,
            noreply,
        } => {
            if !noreply {
                let r = &res.results[idx as usize];
                super::vector::compose(out, span(rbuf, key_off, key_len), r, &res.value(r));
            }
        }
        _ => return false,
    }
    true
}

fn span(rbuf: &[u8], off: u32, len: u32) -> &[u8] {
    &rbuf[off as usize..(off + len) as usize]
}

/// memcached's words for each engine result of a storage, delete, arithmetic or touch.
fn reply(out: &mut Vec<u8>, r: &Response, arith: bool) {
    match *r {
        Response::Stored => line(out, "STORED"),
        Response::NotStored => line(out, "NOT_STORED"),
        Response::Exists => line(out, "EXISTS"),
        Response::NotFound | Response::Miss => line(out, "NOT_FOUND"),
        Response::Deleted => line(out, "DELETED"),
        Response::Touched => line(out, "TOUCHED"),
        Response::Number(n) => {
            number(out, n);
            out.extend_from_slice(b"\r\n");
        }
        Response::OutOfMemory if arith => line(out, crate::errors::ARITH_OUT_OF_MEMORY),
        ref other => line(out, error_line(other)),
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::{serve_text, Model};

    fn serve(input: &str) -> String {
        String::from_utf8(serve_text(&mut Model::default(), input.as_bytes())).unwrap()
    }

    #[test]
    fn storage_reads_and_counters_in_memcacheds_words() {
        let out = serve(
            "set k 5 0 3\r\nabc\r\nget k nope\r\ngets k\r\nadd k 0 0 1\r\nx\r\n\
             append k 0 0 2\r\nde\r\nget k\r\nincr k 1\r\nset n 0 0 2\r\n10\r\n\
             incr n 5\r\ndecr n 100\r\ndelete k\r\ndelete k\r\ntouch n 10\r\ncas n 0 0 1 99\r\n\
             z\r\nset q 0 0 1 noreply\r\nq\r\nget q\r\n",
        );
        assert_eq!(
            out,
            "STORED\r\nVALUE k 5 3\r\nabc\r\nEND\r\nVALUE k 5 3 1\r\nabc\r\nEND\r\n\
             NOT_STORED\r\nSTORED\r\nVALUE k 5 5\r\nabcde\r\nEND\r\n\
             CLIENT_ERROR cannot increment or decrement non-numeric value\r\nSTORED\r\n\
             15\r\n0\r\nDELETED\r\nNOT_FOUND\r\nTOUCHED\r\nEXISTS\r\n\
             VALUE q 0 1\r\nq\r\nEND\r\n"
        );
    }

    #[test]
    fn version_and_errors_are_composed_control_is_left_to_the_server() {
        let out = serve("version\r\nbogus\r\nflush_all\r\nstats\r\nverbosity 1\r\n");
        assert_eq!(
            out,
            format!(
                "VERSION {}\r\nERROR\r\nCONTROL\r\nCONTROL\r\nCONTROL\r\n",
                crate::reply::VERSION
            )
        );
    }

    #[test]
    fn out_of_memory_is_worded_as_memcached_words_it_for_stores_and_counters() {
        use crate::step::Step;
        let res = hkv_types::Responses {
            results: vec![hkv_types::Response::OutOfMemory],
            ..hkv_types::Responses::default()
        };
        for (arith, words) in [
            (false, "SERVER_ERROR out of memory storing object\r\n"),
            (true, "SERVER_ERROR out of memory\r\n"),
        ] {
            let step = Step::Reply {
                idx: 0,
                noreply: false,
                arith,
            };
            let mut out = crate::output::Output::default();
            assert!(super::compose(&step, b"", &res, &mut out));
            assert_eq!(String::from_utf8_lossy(&out), words);
        }
    }
}
