//! `cargo xtask`: the workspace's CI and demo, in plain std Rust.
//!
//! ```text
//! cargo xtask test [STEP...]   everything CI runs (.ci/run), in order, failing fast
//! cargo xtask demo [ARGS...]   fetch stories15M, release build, `lutra run` a story (ARGS replace the defaults)
//! cargo xtask models [stories15M|gemma|vocab|stories-gguf|all]   fetch models into the git-ignored models/
//! cargo xtask web [--model gemma|qwen] [--port PORT]  build the page (www/) and serve it on 127.0.0.1
//! cargo xtask test-web [--gemma] [--qwen]     build the page and run its tests in headless Chromium
//! cargo xtask fuzz [--seconds S] [TARGET...]  each fuzz target for S seconds (default 60), a table of the runs
//! ```
//!
//! Steps of `test`: install, lint, models, host, x86, aarch64, wasm, build (all by default).
//! Cross-target settings (linkers, runners, the wasm simd128 flag) live in
//! `.cargo/config.toml`, never in a global RUSTFLAGS, which would replace them.
//!
//! Where each job lives (one module per job; the steps of `test` under `ci/`, one file per step):
//!
//! ```text
//! main.rs           argument dispatch and the usage text
//! ci/mod.rs         `cargo xtask test`: the step table, the state of a run (`Ci`), the summary
//! ci/install.rs     step `install`: apt packages, rust targets, nightly, miri, wasm-bindgen, defmt-print
//! ci/lint.rs        step `lint`: cargo fmt, clippy on every target, rustdoc
//! ci/host.rs        step `host`: the workspace's tests on this CPU, Gemma against llama.cpp, the README example
//! ci/x86.rs         step `x86`: lutra-core on emulated x86 CPUs (qemu-x86_64)
//! ci/miri.rs        step `miri`: Miri on the portable code
//! ci/aarch64.rs     step `aarch64`: lutra-core and lutra-embedded under qemu-aarch64
//! ci/wasm.rs        step `wasm`: lutra-core and lutra-wasm under node
//! ci/build.rs       step `build`: release builds for aarch64 (gnu, musl), bare metal and wasm
//! ci/pi.rs          step `pi` (also `cargo xtask test-pi`): lutra-pi under qemu-user, the bare-metal image on emulated Pis
//! models.rs         `cargo xtask models` and step `models`: stories15M, Gemma 3 270M, llama.cpp's vocab files
//! web.rs            `cargo xtask web`, `cargo xtask test-web` and step `web`: the page in www/
//! fuzz.rs           `cargo xtask fuzz` and step `fuzz`
//! compare.rs        `cargo xtask compare`: lutra against llama.cpp's llama-bench
//! demo.rs           `cargo xtask demo`
//! toolchain.rs      target triples, the pinned nightly and the threaded wasm build's flags (shared)
//! process.rs        running commands: `run`, `run_capture`, `quiet`, `cargo` (shared)
//! ```

mod ci;
mod compare;
mod demo;
mod fuzz;
mod models;
mod process;
mod shapes;
mod toolchain;
mod web;

use std::env;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ci::{test, STEPS};
use demo::demo;
use fuzz::fuzz;
use models::models;
use web::{test_web, web};

type Result<T = ()> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("demo") => demo(&args[1..]),
        Some("models") => models(&args[1..]),
        Some("web") => web(&args[1..]),
        Some("test-pi") => test(&["pi".to_string()]),
        Some("fuzz") => fuzz(&workspace_root(), &args[1..]).map(|_| ()),
        Some("compare") => compare::compare(&workspace_root(), &args[1..]),
        Some("test-web") => {
            let root = workspace_root();
            let target_dir = env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
            let flag = |name: &str| args[1..].iter().any(|a| a == name);
            test_web(&root, &target_dir, flag("--gemma"), flag("--qwen"))
        }
        _ => {
            eprintln!(
                "usage: cargo xtask test [STEP...] | cargo xtask demo [ARGS...] | cargo xtask models [stories15M|gemma|vocab|stories-gguf|all]\n       cargo xtask web [--model gemma|qwen] [--port PORT] | cargo xtask test-web [--gemma] [--qwen] | cargo xtask test-pi\n       cargo xtask fuzz [--seconds S] [TARGET...]\n       cargo xtask compare [--tier native|avx2] [--pairs N] [--threads 1,2] [--models NAME,...] [--json]\n\nsteps of `test`:"
            );
            for (name, what, _) in STEPS {
                eprintln!("  {name:8} {what}");
            }
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\nxtask: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask/ has a parent").to_path_buf()
}
