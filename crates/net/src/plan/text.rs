//! PP for the text and meta protocols: one request, the keys of a multi-key line, and the
//! engine requests and reply steps of every other command.

use bumpalo::Bump;
use hkv_engine::Request;
use hkv_proto::text::{self, get_key_request, get_key_step, plan_command, Command, Parsed};

use super::{Client, GetCont, InputEnd, PassBudget, ReadMark};
use hkv_proto::step::Step;

/// Plans one text or meta request. Returns true if parsing must stop after it.
pub(super) fn plan_text<'a>(
    buf: &'a [u8],
    keys: &'a Bump,
    limits: &text::Limits,
    newline_free: usize,
    end: &mut InputEnd,
    batch: &mut Vec<Request<'a>>,
    steps: &mut Vec<Step>,
) -> bool {
    let at = end.pos;
    match text::parse_after(&buf[at..], limits, newline_free) {
        Parsed::Incomplete => {
            // Remember how far the line is known to have no newline (only the new bytes
            // are searched here), unless what is missing is a data block.
            let from = (at + newline_free).min(buf.len());
            if !buf[from..].contains(&b'\n') {
                end.scanned = buf.len() - at;
            }
            true
        }
        Parsed::Body { header, vlen } => {
            end.body = Some((header, vlen));
            true
        }
        Parsed::Error {
            error,
            len,
            swallow,
            noreply,
            close,
            unlink,
        } => {
            end.pos += len;
            end.swallow = swallow;
            end.too_large += u64::from(error == hkv_proto::errors::TOO_LARGE);
            // memcached drops the old value of a key whose new one it refused: the decoded
            // key of an `ms ... b` (a review found the base64 token's own key dropped).
            let key = unlink.and_then(|u| match u.base64 {
                false => Some(u.key),
                true => {
                    let mut raw = [0u8; hkv_proto::MAX_KEY_LEN];
                    let n = text::decode_key(u.key, &mut raw)?;
                    Some(&*keys.alloc_slice_copy(&raw[..n]))
                }
            });
            if let Some(key) = key {
                batch.push(Request::unlink_refused(key));
            }
            if !noreply {
                steps.push(Step::Text(error));
            }
            end.close |= close;
            close
        }
        // By reference: moving the command out of the result was a memcpy a request.
        Parsed::Command { ref cmd, len } => {
            end.pos += len;
            let line_end = at + len;
            let off = |k: &[u8]| k.as_ptr() as usize - buf.as_ptr() as usize;
            let (keys, cas, exptime) = match cmd {
                Command::Get { keys, cas } => (keys, *cas, None),
                Command::Gat { exptime, keys, cas } => (keys, *cas, Some(*exptime)),
                _ => {
                    let barrier = plan_command(cmd, buf, keys, batch, steps, &mut end.close);
                    if barrier && !end.close {
                        end.more = true;
                    }
                    return barrier || end.close;
                }
            };
            // Only `gat <exptime>` comes without keys (the parser refuses a keyless get):
            // memcached answers it with an empty END.
            let (Some(first), Some(last)) = (keys.first(), keys.last()) else {
                steps.push(Step::Text("END"));
                return false;
            };
            end.pos = off(first);
            end.cont = Some(GetCont {
                cas,
                exptime,
                keys_end: off(last) + last.len(),
                line_end,
            });
            false
        }
    }
}

/// Plans the keys of a multi-key line from `*pos` until the line ends (returns true, `*pos`
/// past the line) or this pass's limits stop it (returns false, `*pos` at the next key).
#[allow(clippy::too_many_arguments)]
pub(super) fn plan_get_keys<'a>(
    buf: &'a [u8],
    pos: &mut usize,
    cont: GetCont,
    client: &mut Client,
    pass: &mut PassBudget,
    batch: &mut Vec<Request<'a>>,
    steps: &mut Vec<Step>,
    marks: &mut Vec<ReadMark>,
) -> bool {
    let mut p = *pos;
    loop {
        while p < cont.keys_end && buf[p] == b' ' {
            p += 1;
        }
        if p >= cont.keys_end {
            steps.push(Step::Text("END"));
            *pos = cont.line_end;
            return true;
        }
        if batch.len() - client.keys_before >= pass.keys_per_conn {
            *pos = p;
            return false;
        }
        let q = buf[p..cont.keys_end]
            .iter()
            .position(|&b| b == b' ')
            .map_or(cont.keys_end, |n| p + n);
        let key = &buf[p..q];
        fault::panic_on_key(key);
        if cont.exptime.is_some() {
            // gat changes the item, so it is answered in this pass whatever its size.
            let first = client.planned_nothing(batch.len(), steps.len());
            if !client.charge(pass, client.open_reads + 1, first) {
                *pos = p;
                return false;
            }
            client.open_reads = 0;
            client.open_from = batch.len() + 1;
        } else {
            marks.push(ReadMark {
                req: batch.len() as u32,
                step: steps.len(),
                resume: p,
                cont: Some(cont),
            });
            client.open_reads += 1;
        }
        batch.push(get_key_request(key, cont.cas, cont.exptime));
        steps.push(get_key_step(batch.len() - 1, key, buf, cont.cas));
        p = q;
    }
}

/// Test knob, as `HKV_OPENCL_FAIL_AFTER` is for the device: `HKV_FAULT_PANIC_KEY=k` makes the
/// worker that plans a `get k` panic, so tests can prove one worker's panic stays its own.
mod fault {
    use std::sync::OnceLock;

    static KEY: OnceLock<Option<Vec<u8>>> = OnceLock::new();

    pub(super) fn panic_on_key(key: &[u8]) {
        let k = KEY.get_or_init(|| {
            std::env::var_os("HKV_FAULT_PANIC_KEY").map(|v| v.into_encoded_bytes())
        });
        if k.as_deref() == Some(key) {
            panic!("injected panic (HKV_FAULT_PANIC_KEY)");
        }
    }
}
