//! Step `wasm`: lutra-core and lutra-wasm on wasm32 simd128 under node, lutra-core again
//! with relaxed SIMD.

use super::Ci;
use crate::process::{cargo, run_capture};
use crate::toolchain::WASM32;
use crate::Result;

pub(super) fn wasm_tests(ci: &mut Ci) -> Result {
    let mut c = cargo(&ci.root);
    c.args(["test", "-p", "lutra-core", "-p", "lutra-wasm", "--target", WASM32]);
    let out = run_capture(&mut c)?;
    // Plain #[test] is silently skipped on wasm32: the runner says so and exits 0.
    if out.contains("no tests to run") {
        return Err("a wasm test binary ran no tests (plain #[test] instead of wasm_bindgen_test?)".into());
    }
    ci.count("wasm32 simd128 node (lutra-core + lutra-wasm)", &out, true)?;
    ci.ran("simd128", "node");
    // the relaxed-SIMD kernels (the page's second and threaded builds) against the scalar
    // reference too, not only end to end in Chromium; node 20 keeps them behind a flag
    let mut c = cargo(&ci.root);
    c.args(["test", "-p", "lutra-core", "--target", WASM32, "--target-dir"])
        .arg(ci.target_dir.join("wasm-relaxed-test"))
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS", "-C target-feature=+simd128,+relaxed-simd")
        .env("NODE_ARGS", "--experimental-wasm-relaxed-simd");
    let out = run_capture(&mut c)?;
    if out.contains("no tests to run") {
        return Err("a relaxed-SIMD wasm test binary ran no tests".into());
    }
    ci.count("wasm32 relaxed-simd node (lutra-core)", &out, true)?;
    ci.ran("relaxed-simd", "node");
    Ok(())
}
