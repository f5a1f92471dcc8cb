//! Writes the llama.cpp golden files that `tests/tests/gemma_logits.rs` and
//! `tests/tests/stories15m_gguf.rs` check lutra's forward passes against: llama.cpp's own
//! next-token log-probabilities, teacher-forced over a fixed English text (for Gemma the
//! start of the GNU GPL v3, present on every Debian machine as
//! /usr/share/common-licenses/GPL-3).
//!
//! ```text
//! RUSTFLAGS="-C target-cpu=native" cargo run --release -p lutra-bench --features llamacpp \
//!     --example gemma_golden [-- MODEL [TEXT [OUT]]] [--tokens N --first-scored F --name NAME]
//! ```
//!
//! Defaults (relative to the workspace root): MODEL `models/gemma-3-270m-q4_k_m.gguf`
//! (`cargo xtask models gemma`), TEXT `/usr/share/common-licenses/GPL-3`, OUT
//! `tests/golden/gemma3-270m-gpl3.txt`, N = 320 tokens fed, F = 64, NAME "Gemma 3 270M
//! Q4_K_M" (the header's description). stories15M's files (context 128):
//! `--tokens 128 --first-scored 16 --name "stories15M F32"` and so on.
//!
//! What it does, through llama.cpp's C API (crates.io `llama-cpp-sys-2`, statically
//! linked, CPU only, one thread):
//! 1. `llama_model_load_from_file` (no GPU layers), `llama_init_from_model` with
//!    n_ctx = n_batch = n_ubatch = 512; other context parameters are llama.cpp's defaults
//!    (f16 KV cache, flash attention "auto").
//! 2. `llama_tokenize(vocab, TEXT, add_special = true, parse_special = false)`: BOS then
//!    the text; the first [`N_TOKENS`] ids are kept.
//! 3. One `llama_decode` of those tokens (positions 0.., sequence 0) with `logits` set
//!    for every token, then `llama_get_logits_ith(ctx, p)` for each position p: the
//!    distribution of the token after position p.
//! 4. For every p >= [`FIRST_SCORED`]: the log-softmax (in f64) of the logits, its
//!    [`TOP_K`] largest entries, and the log of the probability mass outside them.
//!
//! The file format is described in the header the program writes (and parsed by
//! `lutra_tests::golden`).

use std::ffi::{c_char, CString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::ptr;

use llama_cpp_sys_2 as sys;

/// Tokens fed (BOS included), by default.
const N_TOKENS: usize = 320;
/// First scored position, by default: positions FIRST_SCORED..N_TOKENS are scored (256 of them).
const FIRST_SCORED: usize = 64;
/// Log-probabilities stored per scored position.
const TOP_K: usize = 20;
/// Context and batch size.
const N_CTX: u32 = 512;
/// llama.cpp threads (CPU only).
const THREADS: i32 = 1;

const DEFAULT_MODEL: &str = "models/gemma-3-270m-q4_k_m.gguf";
const DEFAULT_TEXT: &str = "/usr/share/common-licenses/GPL-3";
const DEFAULT_OUT: &str = "tests/golden/gemma3-270m-gpl3.txt";

/// Where the version is pinned; the golden file records it.
const NATIVE_CARGO_TOML: &str = include_str!("../Cargo.toml");

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gemma_golden: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..");
    let usage = "usage: gemma_golden [MODEL [TEXT [OUT]]] [--tokens N --first-scored F --name NAME]";
    let (mut args, mut options) = (Vec::new(), Vec::new());
    let mut all = std::env::args().skip(1);
    while let Some(a) = all.next() {
        match a.strip_prefix("--") {
            Some(key) => options.push((key.to_string(), all.next().ok_or(usage)?)),
            None => args.push(a),
        }
    }
    let (mut n_tokens, mut first_scored, mut name) = (N_TOKENS, FIRST_SCORED, "Gemma 3 270M Q4_K_M".to_string());
    for (key, value) in &options {
        match key.as_str() {
            "tokens" => n_tokens = value.parse().map_err(|_| usage)?,
            "first-scored" => first_scored = value.parse().map_err(|_| usage)?,
            "name" => name = value.clone(),
            _ => return Err(usage.into()),
        }
    }
    if args.len() > 3 || first_scored >= n_tokens || n_tokens > N_CTX as usize {
        return Err(usage.into());
    }
    let arg = |i: usize, default: &str| -> PathBuf {
        match args.get(i) {
            Some(a) => PathBuf::from(a),
            None if Path::new(default).is_absolute() => PathBuf::from(default),
            None => root.join(default),
        }
    };
    let (model_path, text_path, out_path) = (arg(0, DEFAULT_MODEL), arg(1, DEFAULT_TEXT), arg(2, DEFAULT_OUT));

    let version = sys_version()?;
    let model_bytes =
        std::fs::metadata(&model_path).map_err(|e| format!("{}: {e} (run `cargo xtask models gemma`)", model_path.display()))?.len();
    let text = std::fs::read_to_string(&text_path).map_err(|e| format!("{}: {e}", text_path.display()))?;

    let llama = Llama::load(&model_path)?;
    let tokens = llama.tokenize(&text)?;
    if tokens.len() < n_tokens {
        return Err(format!("{}: {} tokens, need {n_tokens}", text_path.display(), tokens.len()));
    }
    let tokens = &tokens[..n_tokens];
    let rows = llama.teacher_forced(tokens)?;

    let file_name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "# lutra golden file: llama.cpp's next-token log-probabilities for {name},");
    let _ = writeln!(w, "# teacher-forced over the first {n_tokens} tokens (BOS included) of {}.", text_path.display());
    let _ = writeln!(w, "# Made by native/examples/gemma_golden.rs, from the workspace root:");
    if options.is_empty() {
        let _ = writeln!(w, "#   cargo xtask models gemma");
        let _ = writeln!(
            w,
            "#   RUSTFLAGS=\"-C target-cpu=native\" cargo run --release -p lutra-bench --features llamacpp --example gemma_golden"
        );
    } else {
        let _ = writeln!(
            w,
            "#   RUSTFLAGS=\"-C target-cpu=native\" cargo run --release -p lutra-bench --features llamacpp --example gemma_golden -- \\"
        );
        let quoted: Vec<String> = options.iter().map(|(k, v)| format!("--{k} {v:?}")).collect();
        let _ = writeln!(w, "#     {} {}", args.join(" "), quoted.join(" "));
    }
    let _ =
        writeln!(w, "# llama.cpp (crates.io llama-cpp-sys-2, statically linked), CPU only, {THREADS} thread: llama_model_load_from_file,");
    let _ = writeln!(w, "# llama_init_from_model (n_ctx = n_batch = n_ubatch = {N_CTX}, otherwise defaults: f16 KV cache),");
    let _ = writeln!(w, "# llama_tokenize(add_special = true, parse_special = false), one llama_decode with logits for every");
    let _ = writeln!(w, "# token, llama_get_logits_ith(p), log-softmax in f64.");
    let _ = writeln!(w, "# Format: the `golden` line (model file, its size in bytes, llama-cpp-sys-2 version, ...); a `tokens N`");
    let _ = writeln!(w, "# line followed by the N token ids; then one `pos P tail T top ID:LOGP ...` line per scored position P:");
    let _ = writeln!(w, "# the distribution of the token after position P (i.e. given tokens 0..=P), with its {TOP_K} most likely");
    let _ = writeln!(w, "# ids and their natural-log probabilities (descending, 4 decimals) and T = ln(1 - their total");
    let _ = writeln!(w, "# probability), the log-mass of the remaining vocabulary (4 decimals).");
    let _ = writeln!(
        w,
        "golden model={} model_bytes={model_bytes} llama-cpp-sys-2={version} n_ctx={N_CTX} threads={THREADS} top_k={TOP_K} first_scored={first_scored} n_vocab={}",
        file_name(&model_path),
        llama.n_vocab
    );
    let _ = writeln!(w, "tokens {}", tokens.len());
    for chunk in tokens.chunks(20) {
        let line: Vec<String> = chunk.iter().map(|t| t.to_string()).collect();
        let _ = writeln!(w, "{}", line.join(" "));
    }
    for (p, row) in rows.iter().enumerate().skip(first_scored) {
        let _ = write!(w, "pos {p} tail {:.4} top", row.tail);
        for &(id, lp) in &row.top {
            let _ = write!(w, " {id}:{lp:.4}");
        }
        let _ = writeln!(w);
    }

    if let Some(dir) = out_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(&out_path, &out).map_err(|e| format!("{}: {e}", out_path.display()))?;
    let mean_top1: f64 = rows[first_scored..].iter().map(|r| r.top[0].1.exp()).sum::<f64>() / (n_tokens - first_scored) as f64;
    eprintln!(
        "wrote {} ({} bytes): {} tokens, {} scored positions, mean top-1 probability {mean_top1:.4}",
        out_path.display(),
        out.len(),
        tokens.len(),
        n_tokens - first_scored
    );
    Ok(())
}

/// The `llama-cpp-sys-2` version pinned in native/Cargo.toml (`version = "=X.Y.Z"`).
fn sys_version() -> Result<String, String> {
    NATIVE_CARGO_TOML
        .lines()
        .find(|l| l.trim_start().starts_with("llama-cpp-sys-2"))
        .and_then(|l| l.split("version = \"=").nth(1))
        .and_then(|rest| rest.split('"').next())
        .map(str::to_owned)
        .ok_or_else(|| "no exact `llama-cpp-sys-2 = { version = \"=...\" }` pin in native/Cargo.toml".into())
}

/// One position's distribution: top-K (id, log-prob) descending, and ln of the rest.
struct Row {
    top: Vec<(u32, f64)>,
    tail: f64,
}

/// A loaded model and a context over it; freed on drop.
struct Llama {
    model: *mut sys::llama_model,
    ctx: *mut sys::llama_context,
    vocab: *const sys::llama_vocab,
    n_vocab: usize,
}

impl Llama {
    fn load(path: &Path) -> Result<Llama, String> {
        let cpath = CString::new(path.to_string_lossy().as_bytes()).map_err(|_| "NUL in model path".to_string())?;
        crate::llamacpp::model::init_backend();
        // SAFETY: the parameter structs come from llama.cpp's own default constructors
        // and `cpath` is NUL-terminated. Results are null-checked.
        unsafe {
            let mut mparams = sys::llama_model_default_params();
            mparams.n_gpu_layers = 0;
            let model = sys::llama_model_load_from_file(cpath.as_ptr(), mparams);
            if model.is_null() {
                return Err(format!("{}: llama_model_load_from_file failed", path.display()));
            }
            let mut llama = Llama { model, ctx: ptr::null_mut(), vocab: ptr::null(), n_vocab: 0 };
            let mut cparams = sys::llama_context_default_params();
            cparams.n_ctx = N_CTX;
            cparams.n_batch = N_CTX;
            cparams.n_ubatch = N_CTX;
            cparams.n_threads = THREADS;
            cparams.n_threads_batch = THREADS;
            cparams.no_perf = true;
            llama.ctx = sys::llama_init_from_model(model, cparams);
            if llama.ctx.is_null() {
                return Err("llama_init_from_model failed".into());
            }
            llama.vocab = sys::llama_model_get_vocab(model);
            let n = sys::llama_vocab_n_tokens(llama.vocab);
            llama.n_vocab = usize::try_from(n).ok().filter(|&n| n > TOP_K).ok_or_else(|| format!("n_vocab {n}"))?;
            Ok(llama)
        }
    }

    /// `llama_tokenize` with add_special = true, parse_special = false.
    fn tokenize(&self, text: &str) -> Result<Vec<i32>, String> {
        let len = i32::try_from(text.len()).map_err(|_| "text too long".to_string())?;
        // At most one token per byte, plus BOS/EOS.
        let mut tokens = vec![0i32; text.len() + 2];
        let cap = i32::try_from(tokens.len()).map_err(|_| "text too long".to_string())?;
        // SAFETY: `text` is `len` valid bytes (no NUL needed: the length is passed);
        // `tokens` has room for `cap` ids; vocab is live.
        let n = unsafe { sys::llama_tokenize(self.vocab, text.as_ptr().cast::<c_char>(), len, tokens.as_mut_ptr(), cap, true, false) };
        let n = usize::try_from(n).map_err(|_| format!("llama_tokenize returned {n}"))?;
        tokens.truncate(n);
        Ok(tokens)
    }

    /// One batch of `tokens` at positions 0.. with logits everywhere; per position the
    /// top-K log-probs and the tail's log-mass.
    fn teacher_forced(&self, tokens: &[i32]) -> Result<Vec<Row>, String> {
        let n = tokens.len();
        if n > N_CTX as usize {
            return Err(format!("{n} tokens exceed n_ctx {N_CTX}"));
        }
        let n_i32 = n as i32;
        // SAFETY: llama_batch_init allocates arrays for n tokens with one sequence id
        // each; we fill exactly n entries, decode, and free the batch once. The logits
        // pointer of position i is valid for n_vocab floats until the next decode.
        unsafe {
            let mut batch = sys::llama_batch_init(n_i32, 0, 1);
            for (i, &t) in tokens.iter().enumerate() {
                *batch.token.add(i) = t;
                *batch.pos.add(i) = i as i32;
                *batch.n_seq_id.add(i) = 1;
                **batch.seq_id.add(i) = 0;
                *batch.logits.add(i) = 1;
            }
            batch.n_tokens = n_i32;
            let rc = sys::llama_decode(self.ctx, batch);
            sys::llama_batch_free(batch);
            if rc != 0 {
                return Err(format!("llama_decode returned {rc}"));
            }
            let mut rows = Vec::with_capacity(n);
            for i in 0..n {
                let p = sys::llama_get_logits_ith(self.ctx, i as i32);
                if p.is_null() {
                    return Err(format!("no logits for position {i}"));
                }
                let logits = std::slice::from_raw_parts(p, self.n_vocab);
                rows.push(top_logprobs(logits)?);
            }
            Ok(rows)
        }
    }
}

impl Drop for Llama {
    fn drop(&mut self) {
        // SAFETY: each pointer is freed once, context before model.
        unsafe {
            if !self.ctx.is_null() {
                sys::llama_free(self.ctx);
            }
            sys::llama_model_free(self.model);
        }
    }
}

/// Log-softmax in f64: the TOP_K largest (id, log-prob) descending (ties by id) and
/// ln of the probability mass of all other ids.
fn top_logprobs(logits: &[f32]) -> Result<Row, String> {
    if let Some(i) = logits.iter().position(|x| !x.is_finite()) {
        return Err(format!("logit {i} is {}", logits[i]));
    }
    let max = logits.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let lse = max + logits.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    let by_logit_desc = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
    ids.select_nth_unstable_by(TOP_K - 1, by_logit_desc);
    let (top_ids, rest) = ids.split_at_mut(TOP_K);
    top_ids.sort_unstable_by(by_logit_desc);
    // The tail's log-mass straight from its own log-sum-exp (precise even when tiny).
    let rest_max = rest.iter().fold(f64::NEG_INFINITY, |m, &i| m.max(logits[i as usize] as f64));
    let rest_lse = rest_max + rest.iter().map(|&i| (logits[i as usize] as f64 - rest_max).exp()).sum::<f64>().ln();
    Ok(Row { top: top_ids.iter().map(|&i| (i, logits[i as usize] as f64 - lse)).collect(), tail: rest_lse - lse })
}
