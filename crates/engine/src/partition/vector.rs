//! KV-Direct's vector operations on one item, run where the item lives: the whole operation
//! happens under the partition's ownership of the key, so concurrent updates never lose one
//! another, and an update rewrites the value in place (same length: one write, no new
//! version, no index work).

use std::time::Instant;

use hkv_index::Location;
use hkv_types::{After, Request, Response, VectorCall, VectorError};

use super::placement::VectorPlacement;
use super::Partition;
use crate::policy::Proc;
use crate::vector::{self, Operand};

impl Partition {
    /// Where vector updates run (`--vector-placement`): builds the device's vector kernels
    /// and, for `auto`, times them against the CPU.
    /// `calibrated`: another partition's `auto` timing on the same device, reused.
    pub(crate) fn set_vector_placement(
        &mut self,
        p: VectorPlacement,
        calibrated: Option<Option<crate::cost::ProcPair>>,
    ) {
        use VectorPlacement as P;
        self.vector_placement = p;
        if p != P::Cpu && self.vector_device.is_none() {
            if let Some(d) = self.index.device() {
                match d.vector_unit() {
                    Ok(v) => self.vector_device = Some(v),
                    Err(e) => tracing::warn!(error = %e, "no vector kernels on the device"),
                }
            }
        }
        self.vector_model = match (p, self.vector_device.as_mut()) {
            (P::Auto, Some(dev)) => calibrated.unwrap_or_else(|| super::placement::calibrate(dev)),
            _ => None,
        };
        if p == P::Auto && self.vector_model.is_none() {
            self.vector_device = None;
        }
    }

    /// Where vector updates run, and from which value size on the device (None: never; for
    /// `auto`, where the model's lines cross now).
    pub fn vector_placement(&self) -> (VectorPlacement, Option<usize>) {
        let from = match (self.vector_placement, &self.vector_device) {
            (_, None) | (VectorPlacement::Cpu, _) => None,
            (VectorPlacement::Device, Some(_)) => Some(0),
            (VectorPlacement::Auto, Some(_)) => self.vector_model.and_then(|m| m.device_from()),
        };
        (self.vector_placement, from)
    }

    /// The start-up timing of `auto` vector placement, for the next partition to reuse.
    pub(crate) fn vector_calibration(&self) -> Option<crate::cost::ProcPair> {
        self.vector_model
    }

    /// Where an update of a `len`-byte value runs: the forced placement, or under `auto`
    /// the cost model's choice at that size.
    fn vector_proc(&mut self, len: usize) -> Proc {
        if self.vector_device.is_none() {
            return Proc::Cpu;
        }
        match (self.vector_placement, self.vector_model.as_mut()) {
            (VectorPlacement::Device, _) => Proc::Device,
            (VectorPlacement::Auto, Some(m)) => m.choose_auto(len),
            _ => Proc::Cpu,
        }
    }

    /// Runs a vector update as an OpenCL kernel; false if it did not (the CPU then runs
    /// it). The kernel works on a copy, so a device failure leaves the value as it was for
    /// the CPU to update.
    fn device_update(
        &mut self,
        elem: hkv_types::Elem,
        op: hkv_types::UpdateOp,
        loc: Location,
        operand: &[u8],
        scalar: Option<u64>,
    ) -> bool {
        let (e, o) = super::placement::kernel_codes(elem, op);
        let Some(dev) = self.vector_device.as_mut() else {
            return false;
        };
        if !dev.supports(e) {
            return false;
        }
        let mut work = std::mem::take(&mut self.value_buf);
        work.clear();
        if let Some(item) = self.store.get(loc) {
            self.store.copy_value(&item, &mut work);
        }
        let operand = scalar.is_none().then_some(operand);
        let done = match dev.update(e, o, &mut work, operand, scalar.unwrap_or(0)) {
            Ok(()) => {
                self.store.write_value(loc, &work);
                self.stats.vector_device_ops += 1;
                true
            }
            Err(err) => {
                tracing::warn!(error = %err, "vector kernel failed; the CPU runs it");
                self.stats.vector_device_errors += 1;
                false
            }
        };
        self.value_buf = work;
        done
    }

    /// Updates the value at `loc` where the placement says, timing it for the model.
    fn place_update(
        &mut self,
        elem: hkv_types::Elem,
        op: hkv_types::UpdateOp,
        loc: Location,
        operand: &[u8],
        scalar: Option<u64>,
    ) {
        let len = self.store.get(loc).map_or(0, |i| i.value_len());
        let proc = self.vector_proc(len);
        let t = self.vector_model.is_some().then(Instant::now);
        let ran = match proc {
            Proc::Device => self.device_update(elem, op, loc, operand, scalar),
            Proc::Cpu => false,
        };
        let ran = if ran {
            Proc::Device
        } else {
            let operand = match scalar {
                Some(s) => Operand::Scalar(s),
                None => Operand::Vector(operand),
            };
            if let Some(value) = self.store.value_mut(loc) {
                vector::update(elem, op, value, operand);
            } else if let Some(item) = self.store.get(loc) {
                // A chained value: updated in a copy, written back part by part.
                let mut work = std::mem::take(&mut self.value_buf);
                work.clear();
                self.store.copy_value(&item, &mut work);
                vector::update(elem, op, &mut work, operand);
                self.store.write_value(loc, &work);
                self.value_buf = work;
            }
            Proc::Cpu
        };
        // A device failure's time is not a CPU update's: only clean runs refit a line.
        if let (Some(t), Some(m)) = (t, self.vector_model.as_mut()) {
            if ran == proc {
                m.record(proc, len, t.elapsed().as_nanos() as f64);
            }
        }
    }

    /// `vupdate`, `vupdatev`, `vreduce` or `vfilter` on the live item `cur`.
    pub(super) fn vector_op(
        &mut self,
        req: &Request<'_>,
        cur: Option<Location>,
        data: &mut Vec<u8>,
    ) -> Response {
        let Some(v) = req.vector else {
            return Response::Vector(VectorError::Unsupported);
        };
        let Some(loc) = cur else {
            self.stats.vector_misses += 1;
            return Response::NotFound;
        };
        let Some(item) = self.store.get(loc) else {
            return Response::NotFound;
        };
        if let Err(e) = vector::check(v.elem, &v.call, item.value_len(), req.value.len()) {
            return Response::Vector(e);
        }
        self.stats.vector_hits += 1;
        let (flags, cas, expiry, atime) = (item.flags(), item.cas(), item.expiry(), item.atime());
        let value_at = |offset: usize, data: &Vec<u8>| Response::Value {
            flags,
            cas,
            offset,
            len: (data.len() - offset) as u32,
            expiry,
            atime,
            bits: 0,
        };
        // A chained value is read whole into a copy first (only those allocate).
        let mut whole = Vec::new();
        let value = match item.flat_value() {
            Some(v) => v,
            None => {
                self.store.copy_value(&item, &mut whole);
                &whole[..]
            }
        };
        let answer = match v.call {
            VectorCall::Reduce(op) => Response::Reduced(vector::reduce(v.elem, op, value)),
            VectorCall::Filter { cmp, scalar } => {
                let offset = data.len();
                vector::filter(v.elem, cmp, scalar, value, data);
                value_at(offset, data)
            }
            VectorCall::Update { op, scalar, old } => {
                let answer = if old {
                    // KV-Direct's fetch-and-add, on every element: the value as it was.
                    let offset = data.len();
                    data.extend_from_slice(value);
                    value_at(offset, data)
                } else {
                    Response::Updated
                };
                let len = item.value_len() as u32;
                self.place_update(v.elem, op, loc, req.value, scalar);
                // Flags and TTL stay; the item is a new version for CAS.
                let cas = self.store.set_cas(loc, self.cas_override).unwrap_or(0);
                self.last = After {
                    cas,
                    len,
                    expiry,
                    created: false,
                    previous: None,
                };
                answer
            }
        };
        self.store.touch_ref(loc);
        answer
    }
}
