//! What several engine test files share.
#![allow(dead_code)]

use hkv_engine::Backend;

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
