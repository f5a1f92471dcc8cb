//! The targets and toolchains that several jobs build with: target triples, the pinned
//! nightly of the threaded wasm build and its flags.

use std::process::Command;

use crate::process::quiet;
use crate::Result;

pub(crate) const AARCH64: &str = "aarch64-unknown-linux-gnu";
pub(crate) const AARCH64_MUSL: &str = "aarch64-unknown-linux-musl";
pub(crate) const WASM32: &str = "wasm32-unknown-unknown";
/// The toolchain of the page's threaded wasm build: wasm threads need `-Z build-std`
/// (std rebuilt with `+atomics`), so nightly with rust-src and the wasm32 target. Pinned:
/// an unpinned `nightly` brought new clippy lints (and could bring breakage) to CI unasked.
pub(crate) const NIGHTLY: &str = "nightly-2026-10-30";
/// The threaded build's flags: shared memory imported by every Web Worker's instance, up
/// to 4 GiB (the wasm32 limit; Chromium reserves the address space, not memory), and
/// wasm-bindgen's per-thread TLS symbols.
pub(crate) const THREADS_RUSTFLAGS: &str = "-C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128,+relaxed-simd \
    -C link-arg=--shared-memory -C link-arg=--max-memory=4294967296 -C link-arg=--import-memory \
    -C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size -C link-arg=--export=__tls_align \
    -C link-arg=--export=__tls_base";
/// A target with no OS at all: the engine (lutra-core with `alloc` only) must build for it.
pub(crate) const BARE_METAL: &str = "aarch64-unknown-none";

/// The nightly toolchain the threaded build needs is installed (`install` adds it).
pub(crate) fn nightly_ready() -> Result {
    let components = quiet(Command::new("rustup").args(["component", "list", "--installed", "--toolchain", NIGHTLY]));
    let targets = quiet(Command::new("rustup").args(["target", "list", "--installed", "--toolchain", NIGHTLY]));
    match (components, targets) {
        (Some(c), Some(t))
            if ["rust-src", "clippy"].iter().all(|want| c.lines().any(|l| l.starts_with(want))) && t.lines().any(|l| l == WASM32) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "the threaded wasm build needs {NIGHTLY} with rust-src, clippy and {WASM32}: `cargo xtask test install`, or \
             `rustup toolchain install {NIGHTLY} --profile minimal --component rust-src,clippy --target {WASM32}`"
        )),
    }
}
