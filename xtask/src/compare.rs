//! `cargo xtask compare`: lutra's `bench model` and llama.cpp's own `llama-bench` on the
//! same GGUF files, one invocation of each in turn (A B A B …, who goes first alternating),
//! so the machine's noise hits both alike; medians over the pairs and their ratio.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Runs `c` for its stdout; what it prints on stderr shows only if it fails (llama.cpp
/// logs every load there). Nothing goes to our stdout, which holds only the results.
fn capture(c: &mut Command) -> Result<String, String> {
    eprintln!("$ {c:?}");
    let out = c.stdin(Stdio::null()).output().map_err(|e| format!("{c:?}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(20).collect();
        return Err(format!("{c:?} exited with {}:\n{}", out.status, tail.into_iter().rev().collect::<Vec<_>>().join("\n")));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `c` with its output on our stderr.
fn run(c: &mut Command) -> Result<(), String> {
    eprintln!("$ {c:?}");
    let status = c.stdin(Stdio::null()).stdout(std::io::stderr()).status().map_err(|e| format!("{c:?}: {e}"))?;
    status.success().then_some(()).ok_or_else(|| format!("{c:?} exited with {status}"))
}

const USAGE: &str = "usage: cargo xtask compare [--tier native|avx2] [--pairs N] [--threads 1,2] [--models NAME,...] [--json]
  --tier avx2   llama.cpp built with ggml's AVX2 kernels only and lutra capped at AVX2 (LUTRA_MAX_ISA),
                the tier most CPUs have, on a host that has more; native (default): each engine's best
  --pairs N     invocations of each engine per row (at least 5; default 5)
  --models      gemma, gemma-q4_0, gemma-q8_0, stories-q4_0, stories-q8_0 (default: these five), and
                the files of `cargo xtask models shapes` as SHAPE-TYPE: qwen2.5-1.5b-q4_k_m, llama-3.2-3b-q6_k,
                qwen2.5-1.5b-q1_0 (with --types Q1_0,Q2_0,TQ1_0,TQ2_0,Q2_K,Q3_K_S,Q4_0 there), …
                (pp512 / tg128, as the issue tables quote llama-bench)";

/// A benchmark file: its name in the table, path under models/, and prompt and generated
/// tokens (stories15M's GGUF holds a context of 128, which lutra keeps to).
#[derive(Clone)]
struct Bench {
    name: String,
    file: String,
    pp: usize,
    tg: usize,
}

const BENCHES: &[(&str, &str, usize, usize)] = &[
    ("gemma", "gemma-3-270m-q4_k_m.gguf", 256, 128),
    ("gemma-q4_0", "gemma-3-270m-q4_0.gguf", 256, 128),
    ("gemma-q8_0", "gemma-3-270m-q8_0.gguf", 256, 128),
    ("stories-q4_0", "stories15M/stories15M-q4_0.gguf", 127, 127),
    ("stories-q8_0", "stories15M/stories15M-q8_0.gguf", 127, 127),
];

/// The default benches, then every shape file `cargo xtask models shapes` can write.
fn benches() -> Vec<Bench> {
    let mut out: Vec<Bench> = BENCHES.iter().map(|&(name, file, pp, tg)| Bench { name: name.into(), file: file.into(), pp, tg }).collect();
    for shape in crate::shapes::SHAPES {
        for ty in crate::shapes::TYPES.iter().chain(crate::shapes::LOW_BIT_TYPES) {
            let file = crate::shapes::shape_file(std::path::Path::new(""), shape.name, ty);
            let name = format!("{}-{}", shape.name, ty.to_lowercase());
            out.push(Bench { name, file: file.to_string_lossy().into_owned(), pp: 512, tg: 128 });
        }
    }
    out
}

struct Options {
    tier: String,
    pairs: usize,
    threads: Vec<usize>,
    models: Vec<Bench>,
    json: bool,
}

fn options(args: &[String]) -> Result<Options, String> {
    let all = benches();
    let mut o = Options { tier: "native".into(), pairs: 5, threads: vec![1, 2], models: all[..BENCHES.len()].to_vec(), json: false };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value\n{USAGE}"));
        match a.as_str() {
            "--tier" => o.tier = value()?.clone(),
            "--pairs" => o.pairs = value()?.parse().map_err(|_| format!("--pairs takes a number\n{USAGE}"))?,
            "--threads" => {
                o.threads =
                    value()?.split(',').map(|t| t.parse().map_err(|_| format!("bad thread count {t:?}"))).collect::<Result<_, _>>()?
            }
            "--models" => {
                o.models = value()?
                    .split(',')
                    .map(|m| all.iter().find(|b| b.name == m).cloned().ok_or_else(|| format!("unknown model {m:?}\n{USAGE}")))
                    .collect::<Result<_, _>>()?
            }
            "--json" => o.json = true,
            _ => return Err(format!("unknown argument {a:?}\n{USAGE}")),
        }
    }
    if !["native", "avx2"].contains(&o.tier.as_str()) {
        return Err(format!("--tier is native or avx2\n{USAGE}"));
    }
    if o.pairs < 5 {
        return Err("--pairs: at least 5 (medians of fewer are noise on these machines)".into());
    }
    Ok(o)
}

pub fn compare(root: &Path, args: &[String]) -> Result<(), String> {
    let o = options(args)?;
    // llama.cpp's tools (built once from the PyPI sdist, cached outside the repo), then lutra
    let mut tools = Command::new("bash");
    tools.arg(root.join("scripts/llamacpp-tools.sh")).env("LUTRA_LLAMACPP_TIER", &o.tier);
    let bin = PathBuf::from(capture(&mut tools)?.lines().last().unwrap_or_default().trim());
    run(Command::new("cargo").args(["build", "--release", "-p", "lutra-cli"]).current_dir(root))?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let lutra = target.join("release/lutra");
    let models = root.join("models");
    for b in &o.models {
        let path = models.join(&b.file);
        if path.exists() {
            continue;
        }
        if b.file.starts_with("shapes/") {
            return Err(format!("{} missing: run `cargo xtask models shapes`", path.display()));
        }
        // Gemma's pure Q4_0 / Q8_0 files, requantized by llama.cpp from the Q4_K_M one
        let source = models.join("gemma-3-270m-q4_k_m.gguf");
        let kind = match b.name.as_str() {
            "gemma-q4_0" => "Q4_0",
            "gemma-q8_0" => "Q8_0",
            _ => return Err(format!("{} missing: run `cargo xtask models all`", path.display())),
        };
        if !source.exists() {
            return Err(format!("{} missing: run `cargo xtask models gemma`", source.display()));
        }
        let quantize = bin.join("llama-quantize");
        run(Command::new(quantize).args(["--allow-requantize", "--pure"]).arg(&source).arg(&path).arg(kind))?;
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    let mut table = format!(
        "CPU: {cpu}; kernels: {}; medians of {} invocation pairs\n\n| model | threads | test | lutra tok/s | llama.cpp tok/s | ratio | weights per token: lutra / llama.cpp |\n|---|---|---|---|---|---|---|\n",
        if o.tier == "avx2" { "AVX2 (lutra LUTRA_MAX_ISA=avx2, llama.cpp GGML_NATIVE=OFF GGML_AVX2=ON)" } else { "each engine's best for this CPU" },
        o.pairs
    );
    for b in &o.models {
        let path = models.join(&b.file);
        for &threads in &o.threads {
            let (mut ours, mut theirs) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
            let mut model_bytes = None;
            for pair in 0..o.pairs {
                for engine in if pair % 2 == 0 { [0, 1] } else { [1, 0] } {
                    if engine == 0 {
                        let [pp, tg] = lutra_run(&lutra, &path, b, threads, &o.tier)?;
                        ours[0].push(pp);
                        ours[1].push(tg);
                    } else {
                        let ([pp, tg], size) = llama_bench(&bin, &path, b, threads)?;
                        model_bytes = size.or(model_bytes);
                        theirs[0].push(pp);
                        theirs[1].push(tg);
                    }
                }
            }
            for (i, test) in [format!("pp{}", b.pp), format!("tg{}", b.tg)].iter().enumerate() {
                let (l, c) = (median(&mut ours[i]), median(&mut theirs[i]));
                let ratio = l / c;
                if o.json {
                    println!(
                        "{{\"model\":\"{}\",\"tier\":\"{}\",\"threads\":{threads},\"test\":\"{test}\",\"lutra_tps\":{l:.1},\"llamacpp_tps\":{c:.1},\"ratio\":{ratio:.3},\"model_bytes\":{}}}",
                        b.name,
                        o.tier,
                        model_bytes.map_or("null".into(), |v| format!("{v:.0}"))
                    );
                }
                // a decode step reads every weight once (the tied embedding as the head)
                let per_token = match (i, model_bytes) {
                    (1, Some(bytes)) => format!("{:.0} MB: {:.1} / {:.1} GB/s", bytes / 1e6, bytes * l / 1e9, bytes * c / 1e9),
                    _ => "–".into(),
                };
                table += &format!("| {} | {threads} | {test} | {l:.1} | {c:.1} | {ratio:.2}× | {per_token} |\n", b.name);
            }
        }
    }
    if !o.json {
        print!("{table}");
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The number after `"key":` in a JSON line.
fn number(line: &str, key: &str) -> Option<f64> {
    let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    line[at..].split([',', '}']).next()?.trim().parse().ok()
}

/// One `lutra bench model` invocation: its pp and tg tokens/s (each a median of its runs).
fn lutra_run(lutra: &Path, model: &Path, b: &Bench, threads: usize, tier: &str) -> Result<[f64; 2], String> {
    let mut c = Command::new(lutra);
    c.args(["bench", "model", "--json", "--runs", "5", "-t", &threads.to_string()]);
    c.args(["--pp", &b.pp.to_string(), "--tg", &b.tg.to_string(), "-m"]).arg(model);
    if tier == "avx2" {
        c.env("LUTRA_MAX_ISA", "avx2");
    }
    let out = capture(&mut c)?;
    let line = out.lines().find(|l| l.contains("\"pp_tps\"")).ok_or_else(|| format!("lutra printed no result:\n{out}"))?;
    match (number(line, "pp_tps"), number(line, "tg_tps")) {
        (Some(pp), Some(tg)) => Ok([pp, tg]),
        _ => Err(format!("unreadable lutra result: {line}")),
    }
}

/// One `llama-bench` invocation (its own warm-up, one timed repetition): pp and tg tokens/s,
/// and the model's tensor bytes as llama-bench reports them (`model_size`).
fn llama_bench(bin: &Path, model: &Path, b: &Bench, threads: usize) -> Result<([f64; 2], Option<f64>), String> {
    let mut c = Command::new(bin.join("llama-bench"));
    c.args(["-o", "jsonl", "-r", "1", "-t", &threads.to_string(), "-p", &b.pp.to_string(), "-n", &b.tg.to_string(), "-m"]).arg(model);
    let out = capture(&mut c)?;
    let mut result = [None, None];
    let size = out.lines().find_map(|l| number(l, "model_size"));
    for line in out.lines().filter(|l| l.contains("\"avg_ts\"")) {
        let (prompt, gen) = (number(line, "n_prompt").unwrap_or(0.0), number(line, "n_gen").unwrap_or(0.0));
        let slot = if gen == 0.0 && prompt > 0.0 { 0 } else { 1 };
        result[slot] = number(line, "avg_ts");
    }
    match result {
        [Some(pp), Some(tg)] => Ok(([pp, tg], size)),
        _ => Err(format!("llama-bench printed no pp and tg results:\n{out}")),
    }
}
