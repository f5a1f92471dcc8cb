//! `cargo xtask fuzz` (and the `fuzz` step of `test`): every fuzz target in fuzz/ on its
//! seeds and corpus, a table of the runs.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::models::{fetch_gemma, fetch_stories};
use crate::process::{cargo, quiet, run, show};
use crate::toolchain::{nightly_ready, NIGHTLY};
use crate::Result;

/// Builds and runs the fuzz targets (fuzz/, nightly, AddressSanitizer).
const CARGO_FUZZ_VERSION: &str = "0.13.1";
/// The fuzz targets (fuzz/Cargo.toml), in the order they run.
const FUZZ_TARGETS: &[&str] = &["gguf", "model", "llama2c", "tokenizer_bin", "tokenize", "vocab", "codebook", "engine"];

/// cargo-fuzz at the pinned version, installed if it is not.
pub(crate) fn cargo_fuzz_ready(root: &Path) -> Result {
    let want = format!("cargo-fuzz {CARGO_FUZZ_VERSION}");
    if quiet(cargo(root).args(["fuzz", "--version"])).is_some_and(|v| v.starts_with(&want)) {
        println!("{want} present");
        return Ok(());
    }
    run(cargo(root).args(["install", "cargo-fuzz", "--locked", "--version", CARGO_FUZZ_VERSION]))
}

/// What one fuzz target's run did (libFuzzer's own counts).
pub(crate) struct FuzzRun {
    target: String,
    pub(crate) executions: u64,
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
pub(crate) fn fuzz(root: &Path, args: &[String]) -> Result<Vec<FuzzRun>> {
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
