//! What several engine test files share.
#![allow(dead_code)]

use hkv_engine::{Backend, Elem};

/// The CPU backend, and the OpenCL one where a device exists (PoCL in CI; with
/// `HKV_REQUIRE_OPENCL=1` a missing device fails the test instead of skipping it).
pub fn backends() -> Vec<Backend> {
    if std::env::var_os("POCL_CACHE_DIR").is_none() {
        let dir = std::env::temp_dir().join("hkv-pocl-cache");
        let _ = std::fs::create_dir_all(&dir);
        std::env::set_var("POCL_CACHE_DIR", dir);
    }
    let mut b = vec![Backend::Cpu];
    if !hkv_index::opencl::devices().is_empty() {
        b.push(Backend::OpenCl(None));
    } else {
        assert_ne!(
            std::env::var("HKV_REQUIRE_OPENCL").as_deref(),
            Ok("1"),
            "HKV_REQUIRE_OPENCL=1 but no OpenCL device"
        );
    }
    b
}

/// IEEE leaves the payload of a NaN result open (`min` of two NaNs may return either), so
/// float results compare with every NaN made the same; everything else must be identical.
pub fn canonical_nans(elem: Elem, mut v: Vec<u8>) -> Vec<u8> {
    match elem {
        Elem::F32 => v.chunks_exact_mut(4).for_each(|c| {
            if f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_nan() {
                c.copy_from_slice(&f32::NAN.to_le_bytes());
            }
        }),
        Elem::F64 => v.chunks_exact_mut(8).for_each(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            if f64::from_le_bytes(a).is_nan() {
                c.copy_from_slice(&f64::NAN.to_le_bytes());
            }
        }),
        _ => {}
    }
    v
}
