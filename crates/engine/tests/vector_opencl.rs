//! Differential test of the OpenCL vector-update kernels (`vector.cl`) against the CPU
//! engine, on PoCL in CI: the same updates on the same values, byte-identical results.

use hkv_engine::Scratch;
use hkv_engine::{
    Backend, Elem, Engine, EngineConfig, Request, Response, Responses, UpdateOp, Vector,
    VectorCall, VectorPlacement,
};
use proptest::prelude::*;

mod common;
use common::canonical_nans;

const NOW: u32 = 1_700_000_000;

fn have_device() -> bool {
    if std::env::var_os("POCL_CACHE_DIR").is_none() {
        let dir = std::env::temp_dir().join("hkv-pocl-cache");
        let _ = std::fs::create_dir_all(&dir);
        std::env::set_var("POCL_CACHE_DIR", dir);
    }
    let up = !hkv_index::opencl::devices().is_empty();
    if !up {
        assert_ne!(
            std::env::var("HKV_REQUIRE_OPENCL").as_deref(),
            Ok("1"),
            "HKV_REQUIRE_OPENCL=1 but no OpenCL device"
        );
    }
    up
}

fn engine(backend: Backend, placement: VectorPlacement) -> Engine {
    Engine::new(&EngineConfig {
        memory_bytes: 16 << 20,
        page_size: 1 << 20,
        backend,
        vector_placement: placement,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// Runs the updates on `value` and returns what the engine holds afterwards.
fn run(e: &Engine, value: &[u8], ups: &[(Vector, Vec<u8>)]) -> Vec<u8> {
    let mut out = Responses::default();
    e.execute(
        &[Request::set(b"v", value)],
        NOW,
        &mut out,
        &mut Scratch::default(),
    );
    assert_eq!(out.results[0], Response::Stored);
    let reqs: Vec<Request<'_>> = ups
        .iter()
        .map(|(v, operand)| Request::vector(b"v", *v, operand))
        .collect();
    let mut out = Responses::default();
    e.execute(&reqs, NOW, &mut out, &mut Scratch::default());
    assert!(
        out.results.iter().all(|r| *r == Response::Updated),
        "{:?}",
        out.results
    );
    let mut out = Responses::default();
    e.execute(
        &[Request::get(b"v")],
        NOW,
        &mut out,
        &mut Scratch::default(),
    );
    out.value(&out.results[0]).to_vec()
}

fn fit(elem: Elem, s: u64) -> u64 {
    match elem.size() {
        8 => s,
        n => s & ((1u64 << (8 * n)) - 1),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]
    #[test]
    fn kernels_match_the_cpu(
        elem in prop::sample::select(Elem::ALL.to_vec()),
        words in 1usize..600,
        seed in any::<u64>(),
        ops in prop::collection::vec((prop::sample::select(UpdateOp::ALL.to_vec()), any::<u64>(), any::<bool>()), 1..6),
    ) {
        if !have_device() {
            return Ok(());
        }
        let len = words * 8;
        let mut x = seed | 1;
        let value: Vec<u8> = (0..len).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u8 }).collect();
        let ups: Vec<(Vector, Vec<u8>)> = ops
            .iter()
            .filter(|(op, _, _)| !(op.is_bitwise() && elem.is_float()))
            .map(|&(op, s, vec)| {
                let operand: Vec<u8> = if vec { value.iter().rev().copied().collect() } else { Vec::new() };
                let scalar = (!vec).then(|| fit(elem, s));
                (Vector { elem, call: VectorCall::Update { op, scalar, old: false } }, operand)
            })
            .collect();
        let cpu = engine(Backend::Cpu, VectorPlacement::Cpu);
        let dev = engine(Backend::OpenCl(None), VectorPlacement::Device);
        let want = run(&cpu, &value, &ups);
        let got = run(&dev, &value, &ups);
        prop_assert_eq!(dev.stats().vector_device_ops, ups.len() as u64, "the kernels ran");
        prop_assert_eq!(canonical_nans(elem, got), canonical_nans(elem, want), "{:?}", elem);
    }
}

#[test]
fn auto_placement_sends_updates_where_the_model_is_cheaper() {
    if !have_device() {
        return;
    }
    let e = engine(Backend::OpenCl(None), VectorPlacement::Auto);
    let (p, from) = e.partition(0).vector_placement();
    assert_eq!(p, VectorPlacement::Auto);
    // Which sizes go to the device is a timing (in a release build on PoCL: none, the CPU
    // loop wins at every size); what must hold is that the model's crossing is obeyed. The
    // first calls are never explorations (the other processor is tried at most once in 32).
    let add = Vector {
        elem: Elem::U8,
        call: VectorCall::Update {
            op: UpdateOp::Add,
            scalar: Some(1),
            old: false,
        },
    };
    match from {
        Some(0) => {}
        Some(n) => {
            run(&e, &vec![0; (n / 2).min(512 << 10)], &[(add, Vec::new())]);
            assert_eq!(
                e.stats().vector_device_ops,
                0,
                "below the crossing: the CPU"
            );
        }
        None => {
            run(&e, &vec![0; 512 << 10], &[(add, Vec::new())]);
            assert_eq!(
                e.stats().vector_device_ops,
                0,
                "the device never pays: the CPU"
            );
        }
    }
    // The call above refitted the CPU's line from its own timing, which moves the crossing:
    // read again, and go well past it (a crossing past the largest item cannot be tried).
    let (_, from) = e.partition(0).vector_placement();
    if let Some(n) = from.filter(|&n| n <= 256 << 10) {
        let n = (2 * n).max(64);
        assert_eq!(run(&e, &vec![0; n], &[(add, Vec::new())]), vec![1; n]);
        assert_eq!(
            e.stats().vector_device_ops,
            1,
            "past the crossing: the device"
        );
    }
    let e = engine(Backend::Cpu, VectorPlacement::Device);
    assert_eq!(
        e.partition(0).vector_placement().1,
        None,
        "no device, no kernels"
    );
}
