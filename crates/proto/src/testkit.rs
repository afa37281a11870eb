//! For this crate's tests: a plain model of the engine (a map, no memory limit, no expiry)
//! that answers a planned batch, so each protocol can be checked parse -> plan -> compose.

use std::collections::HashMap;

use hkv_types::{After, Op, Request, Response, Responses};

#[derive(Default)]
pub(crate) struct Model {
    /// Value, flags, CAS, and whether the key was stored in base64 (`ms b`).
    items: HashMap<Vec<u8>, (Vec<u8>, u32, u64, bool)>,
    next_cas: u64,
}

impl Model {
    pub(crate) fn run(&mut self, batch: &[Request<'_>]) -> Responses {
        let mut res = Responses::default();
        for r in batch {
            let (resp, after) = self.one(r, &mut res.data);
            res.results.push(resp);
            res.after.push(after);
        }
        res
    }

    fn one(&mut self, r: &Request<'_>, data: &mut Vec<u8>) -> (Response, After) {
        let key = r.key.to_vec();
        let found = self.items.get(&key).cloned();
        let store = |m: &mut Model, value: Vec<u8>, flags: u32, binary: bool| {
            m.next_cas += 1;
            let after = After {
                cas: m.next_cas,
                len: value.len() as u32,
                ..After::default()
            };
            m.items
                .insert(key.clone(), (value, flags, m.next_cas, binary));
            after
        };
        let none = After::default();
        match (r.op, found) {
            (Op::Touch, Some(_)) => (Response::Touched, none),
            (Op::Get | Op::Gets | Op::Gat | Op::Gats, Some((v, flags, cas, binary))) => {
                let offset = data.len();
                data.extend_from_slice(&v);
                let hit = Response::Value {
                    flags,
                    cas,
                    offset,
                    len: v.len() as u32,
                    expiry: 0,
                    atime: 0,
                    bits: if binary {
                        hkv_types::hit::BINARY_KEY
                    } else {
                        0
                    },
                };
                (hit, none)
            }
            (Op::Get | Op::Gets | Op::Gat | Op::Gats, None) => (Response::Miss, none),
            (Op::Touch, None) => (Response::NotFound, none),
            (Op::Add, Some(_)) | (Op::Replace | Op::Append | Op::Prepend, None) => {
                (Response::NotStored, none)
            }
            (Op::Cas, None) => (Response::NotFound, none),
            (Op::Cas, Some((_, _, cas, _))) if cas != r.cas => (Response::Exists, none),
            (Op::Set | Op::Add | Op::Replace | Op::Cas, _) => {
                let binary = r.meta.binary_key;
                (
                    Response::Stored,
                    store(self, r.value.to_vec(), r.flags, binary),
                )
            }
            (Op::Append | Op::Prepend, Some((mut v, flags, _, _))) => {
                if r.op == Op::Append {
                    v.extend_from_slice(r.value);
                } else {
                    v.splice(0..0, r.value.iter().copied());
                }
                (Response::Stored, store(self, v, flags, false))
            }
            (Op::Delete, Some(_)) => {
                self.items.remove(&key);
                (Response::Deleted, none)
            }
            (Op::Delete, None) | (Op::Incr | Op::Decr, None) => (Response::NotFound, none),
            (Op::Incr | Op::Decr, Some((v, flags, _, binary))) => {
                let Some(n) = std::str::from_utf8(&v)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                else {
                    return (Response::NonNumeric, none);
                };
                let n = if r.op == Op::Incr {
                    n.wrapping_add(r.delta)
                } else {
                    n.saturating_sub(r.delta)
                };
                let after = store(self, n.to_string().into_bytes(), flags, binary);
                (Response::Number(n), after)
            }
            (Op::Vector, _) => (Response::NotFound, none),
        }
    }
}

/// Everything `input` asks of a text or meta connection, answered in one batch by `model`:
/// the reply bytes, as a server composes them (control steps answered `CONTROL`).
pub(crate) fn serve_text(model: &mut Model, input: &[u8]) -> Vec<u8> {
    use crate::step::Step;
    use crate::text::{parse, plan_command, Limits, Parsed};
    let keys = bumpalo::Bump::new();
    let (mut batch, mut steps, mut pos, mut close) = (Vec::new(), Vec::new(), 0, false);
    while pos < input.len() && !close {
        match parse(&input[pos..], &Limits::default()) {
            Parsed::Incomplete | Parsed::Body { .. } => break,
            Parsed::Error { error, len, .. } => {
                steps.push(Step::Text(error));
                pos += len;
            }
            Parsed::Command { cmd, len } => {
                plan_command(&cmd, input, &keys, &mut batch, &mut steps, &mut close);
                pos += len;
            }
        }
    }
    let res = model.run(&batch);
    let mut out = crate::output::Output::default();
    for step in &steps {
        let done = match step {
            Step::Meta(m) => {
                crate::meta::compose(m, input, &res, 1_000, 48, |_, _| 1, &mut out);
                true
            }
            _ => crate::text::compose(step, input, &res, &mut out),
        };
        if !done {
            out.extend_from_slice(b"CONTROL\r\n");
        }
    }
    out.into_bytes()
}

/// One binary request packet (opaque 7, no CAS).
pub(crate) fn bin_request(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut b = vec![crate::binary::REQUEST_MAGIC, opcode];
    b.extend_from_slice(&(key.len() as u16).to_be_bytes());
    b.push(extras.len() as u8);
    b.push(0);
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    b.extend_from_slice(&7u32.to_be_bytes());
    b.extend_from_slice(&0u64.to_be_bytes());
    b.extend_from_slice(extras);
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    b
}

/// A response packet: opcode, status, key, body after extras.
pub(crate) type Packet = (u8, u16, Vec<u8>, Vec<u8>);

/// The binary requests in `input` answered in one batch by `model`: each response packet's
/// (opcode, status, key, body after extras), and the last request's planning flow.
pub(crate) fn serve_binary(model: &mut Model, input: &[u8]) -> (Vec<Packet>, crate::binary::Flow) {
    use crate::binary::{compose, parse, plan, BinParsed, Flow};
    let (mut batch, mut steps, mut pos, mut flow) = (Vec::new(), Vec::new(), 0, Flow::Continue);
    loop {
        match parse(&input[pos..], 1 << 20) {
            BinParsed::Request { req, len } => {
                flow = plan(req, input, &mut batch, &mut steps);
                pos += len;
            }
            BinParsed::Error {
                opcode,
                status,
                opaque,
                len,
                ..
            } => {
                let s = crate::step::BinStep::Status {
                    opcode,
                    status,
                    opaque,
                };
                steps.push(crate::step::Step::Bin(s));
                pos += len;
            }
            BinParsed::Incomplete | BinParsed::Close | BinParsed::Body { .. } => break,
        }
    }
    let res = model.run(&batch);
    let mut out = crate::output::Output::default();
    for step in &steps {
        match step {
            crate::step::Step::Bin(b) => compose(b, input, &res, &mut out),
            other => panic!("a control step: {other:?}"),
        }
    }
    let out = out.into_bytes();
    let mut packets = Vec::new();
    let mut at = 0;
    while at < out.len() {
        let h = &out[at..at + 24];
        assert_eq!(h[0], crate::binary::RESPONSE_MAGIC);
        let key_len = u16::from_be_bytes([h[2], h[3]]) as usize;
        let extras = h[4] as usize;
        let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let b = &out[at + 24..at + 24 + body];
        packets.push((
            h[1],
            u16::from_be_bytes([h[6], h[7]]),
            b[extras..extras + key_len].to_vec(),
            b[extras + key_len..].to_vec(),
        ));
        at += 24 + body;
    }
    (packets, flow)
}
