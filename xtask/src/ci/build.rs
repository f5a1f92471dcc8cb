//! Step `build`: release builds of lutra-embedded (aarch64 gnu and static musl, each run
//! under qemu-aarch64), lutra-core without an OS, lutra-wasm and its JS bindings.

use std::fs;
use std::process::Command;

use super::Ci;
use crate::process::{cargo, expect_contains, run, run_capture};
use crate::toolchain::{AARCH64, AARCH64_MUSL, BARE_METAL, WASM32};
use crate::Result;

pub(super) fn cross_builds(ci: &mut Ci) -> Result {
    let dir = ci.target_dir.clone();
    for target in [AARCH64, AARCH64_MUSL] {
        run(cargo(&ci.root).args(["build", "-p", "lutra-embedded", "--release", "--target", target]))?;
    }
    // the glibc binary, then the static one (plain qemu, no sysroot): both self-check
    let gnu = dir.join(AARCH64).join("release/lutra-embedded");
    let musl = dir.join(AARCH64_MUSL).join("release/lutra-embedded");
    let out = run_capture(Command::new("qemu-aarch64").args(["-L", "/usr/aarch64-linux-gnu"]).arg(&gnu))?;
    expect_contains(&out, "isa=neon", "lutra-embedded (aarch64 gnu)")?;
    expect_contains(&out, " OK", "lutra-embedded (aarch64 gnu)")?;
    let file = run_capture(Command::new("file").arg(&musl))?;
    expect_contains(&file, "ARM aarch64", "file lutra-embedded (musl)")?;
    expect_contains(&file, "statically linked", "file lutra-embedded (musl)")?;
    let out = run_capture(Command::new("qemu-aarch64").arg(&musl))?;
    expect_contains(&out, "isa=neon", "lutra-embedded (aarch64 musl)")?;
    expect_contains(&out, " OK", "lutra-embedded (aarch64 musl)")?;

    // the engine without an OS: no_std + alloc, nothing else
    run(cargo(&ci.root).args(["build", "-p", "lutra-core", "--no-default-features", "--features", "alloc", "--target", BARE_METAL]))?;

    run(cargo(&ci.root).args(["build", "-p", "lutra-wasm", "--release", "--target", WASM32]))?;
    // bindings generate: proves the CLI and the crate's wasm-bindgen versions match
    let wasm = dir.join(WASM32).join("release/lutra_wasm.wasm");
    let out_dir = dir.join("wasm-bindgen");
    run(Command::new("wasm-bindgen").args(["--target", "web", "--out-dir"]).arg(&out_dir).arg(&wasm))?;
    let js = fs::read_to_string(out_dir.join("lutra_wasm.js")).map_err(|e| format!("wasm-bindgen output: {e}"))?;
    expect_contains(&js, "best_isa", "wasm-bindgen JS bindings")
}
