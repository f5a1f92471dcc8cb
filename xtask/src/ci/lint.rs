//! Step `lint`: cargo fmt, clippy -D warnings on every target the code builds for
//! (host, fuzz/, aarch64 with and without +dotprod, bare metal, wasm32, threaded wasm),
//! and the library's documentation.

use std::process::Command;

use super::Ci;
use crate::process::{cargo, run};
use crate::toolchain::{nightly_ready, AARCH64, BARE_METAL, NIGHTLY, THREADS_RUSTFLAGS, WASM32};
use crate::Result;

pub(super) fn lint(ci: &mut Ci) -> Result {
    run(cargo(&ci.root).args(["fmt", "--all", "--check"]))?;
    // the fuzz targets: their own workspace (fuzz/), checked on stable like the rest
    let fuzz_manifest = ci.root.join("fuzz/Cargo.toml");
    run(cargo(&ci.root).args(["fmt", "--check", "--manifest-path"]).arg(&fuzz_manifest))?;
    run(cargo(&ci.root).args(["clippy", "--bins", "--manifest-path"]).arg(&fuzz_manifest).args(["--", "-D", "warnings"]))?;
    run(cargo(&ci.root).args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    // lutra-core as the embedded crate uses it: no allocator
    run(cargo(&ci.root).args(["clippy", "-p", "lutra-core", "--no-default-features", "--", "-D", "warnings"]))?;
    // the CLI too: it targets aarch64 Linux (Pi) and has x86-only code paths to keep gated
    let aarch64 = ["-p", "lutra-core", "-p", "lutra-embedded", "-p", "lutra", "-p", "lutra-cli", "-p", "lutra-bench", "--target", AARCH64];
    run(cargo(&ci.root).args(["clippy", "--all-targets"]).args(aarch64).args(["--", "-D", "warnings"]))?;
    // and lutra-core's `sdot` form (cores with the dot-product extension)
    run(cargo(&ci.root)
        .args(["clippy", "--all-targets", "-p", "lutra-core", "--target", AARCH64, "--target-dir"])
        .arg(ci.target_dir.join("aarch64-dotprod"))
        .args(["--", "-D", "warnings"])
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS", "-C target-feature=+dotprod"))?;
    // no OS: the no_std Pi library and the bare-metal image (no model embedded for lint)
    let metal = ["-p", "lutra-embedded", "--no-default-features", "-p", "lutra-metal", "--target", BARE_METAL];
    run(cargo(&ci.root).args(["clippy"]).args(metal).args(["--", "-D", "warnings"]).env_remove("LUTRA_METAL_MODEL"))?;
    run(cargo(&ci.root)
        .args(["clippy"])
        .args(metal)
        .args(["--features", "lutra-metal/defmt,lutra-metal/raspi4b", "--", "-D", "warnings"])
        .env_remove("LUTRA_METAL_MODEL"))?;
    let wasm = ["-p", "lutra-core", "-p", "lutra-wasm", "--target", WASM32];
    run(cargo(&ci.root).args(["clippy", "--all-targets"]).args(wasm).args(["--", "-D", "warnings"]))?;
    // the threaded wasm build's own code (wasm/src/threads.rs) exists only with +atomics
    nightly_ready()?;
    run(Command::new("rustup")
        .args(["run", NIGHTLY, "cargo", "clippy", "-p", "lutra-wasm", "--release", "--target", WASM32])
        .args(["-Z", "build-std=panic_abort,std", "--target-dir"])
        .arg(ci.target_dir.join("wasm-threads"))
        // as_chunks over chunks_exact: a lint newer than the stable clippy that checks
        // everything else, which does not know it (naming it there is itself a warning)
        .args(["--", "-D", "warnings", "-A", "clippy::chunks_exact_to_as_chunks"])
        .current_dir(&ci.root)
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS", THREADS_RUSTFLAGS))?;
    // the library's documentation: every public item documented, every link resolved
    run(cargo(&ci.root).args(["doc", "--no-deps", "-p", "lutra", "-p", "lutra-core"]).env("RUSTDOCFLAGS", "-D warnings"))
}
