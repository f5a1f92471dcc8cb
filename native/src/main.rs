//! `lutra`: command-line interface.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use lutra::bench::{self, Bits, GemvOptions, Regime};
use lutra::core::Isa;

/// Weights and KV caches on transparent huge pages (see `hugepage`).
#[global_allocator]
static ALLOCATOR: lutra::hugepage::HugePageAllocator = lutra::hugepage::HugePageAllocator;

#[derive(Parser)]
#[command(name = "lutra", version, about = "Low-bit LLM kernels by table lookup instead of multiply-add")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmarks (tables on stdout; --json for one JSON object per line)
    #[command(subcommand)]
    Bench(BenchCommand),
    /// What a GGUF model file holds: architecture, hyperparameters, tensor types and their bytes
    Inspect(InspectArgs),
    /// Generate text from a model (llama2.c checkpoints for now), streaming to stdout
    Run(RunArgs),
    /// Perplexity of a text, by llama-perplexity's method (chunks of --ctx, second halves scored)
    Perplexity(PerplexityArgs),
    /// Train NoMAD key codebooks (k-means per layer, KV head and sub-space) on a text; writes a GGUF side file
    Calibrate(CalibrateArgs),
}

/// How attention reads the key cache.
#[derive(Args)]
struct AttentionArgs {
    /// exact (f16 keys) or pq (NoMAD product-quantized keys; needs --codebooks)
    #[arg(long, default_value = "exact")]
    attention: String,
    /// Codebooks from `lutra calibrate`, for --attention pq
    #[arg(long)]
    codebooks: Option<std::path::PathBuf>,
    /// With --attention pq: keep exact f16 keys of the first N positions (attention sinks; 0 = none)
    #[arg(long, default_value_t = 4)]
    pq_sink: usize,
    /// With --attention pq: keep exact f16 keys of the N most recent positions (0 = pure PQ)
    #[arg(long, default_value_t = 64)]
    pq_recent: usize,
    /// With --attention pq: which layers use PQ keys: long (layers without a sliding window; the others keep exact keys) or all
    #[arg(long, default_value = "long")]
    pq_layers: String,
}

impl AttentionArgs {
    fn choice(&self) -> Result<lutra::generate::Attention, String> {
        let long_only = match self.pq_layers.as_str() {
            "long" => true,
            "all" => false,
            other => return Err(format!("--pq-layers {other:?}: expected long or all")),
        };
        lutra::generate::Attention::from_args(&self.attention, self.codebooks.as_deref(), self.pq_sink, self.pq_recent, long_only)
    }
}

#[derive(Args)]
struct CalibrateArgs {
    #[arg(short, long)]
    model: std::path::PathBuf,
    #[arg(long)]
    tokenizer: Option<std::path::PathBuf>,
    /// Calibration text (keep it apart from the text perplexity is measured on)
    #[arg(short, long)]
    file: std::path::PathBuf,
    /// Sub-spaces per key (even, ≤ head_dim; when S does not divide head_dim the first head_dim % S get one value more; 4-bit codes take S/2 bytes per key, 8-bit S), or auto: head_dim/2 with 16 centroids, head_dim/4 with 256 (2 bits per dimension, 8× smaller than f16 keys); a list trains one set each
    #[arg(long, default_value = "auto")]
    subspaces: String,
    /// Centroids per sub-space: 16 (4-bit codes, in-register tables) or 256 (8-bit codes); a list trains one set each
    #[arg(long, default_value = "16")]
    centroids: String,
    /// Transform of keys and queries before quantization: none, hadamard, rope-pairs
    #[arg(long, default_value = "none")]
    rotation: String,
    /// Chunk length: the text runs in chunks of this many tokens, each from position 0. Codebooks serve the positions they saw: calibrate at least as long a context as you will run (BENCHMARKS.md, NoMAD quality)
    #[arg(long, default_value_t = 4096)]
    ctx: usize,
    /// Keys collected per layer and KV head (at most); three quarters train k-means, one is held out to measure
    #[arg(long, default_value_t = 16384)]
    keys: usize,
    /// Lloyd iterations
    #[arg(long, default_value_t = 20)]
    iterations: usize,
    #[arg(long, default_value_t = 4)]
    bits: u8,
    #[arg(short, long, default_value_t = std::thread::available_parallelism().map_or(1, |n| n.get()))]
    threads: usize,
    /// Transform of keys (and inversely queries) before k-means, so that key error stands for score error: opq (learned per layer and KV head: whitened by the queries, principal axes shared out among sub-spaces), query-rms (each dimension scaled by the queries' RMS) or none
    #[arg(long, default_value = "opq")]
    key_transform: String,
    /// Record the keys and queries to this file, or reuse them from it when it matches the model and --ctx
    #[arg(long)]
    recording: Option<std::path::PathBuf>,
    /// Output file; with several sub-space or centroid counts, a pattern holding {s} and {k}
    #[arg(short, long)]
    output: String,
}

#[derive(Args)]
struct PerplexityArgs {
    #[arg(short, long)]
    model: std::path::PathBuf,
    #[arg(long)]
    tokenizer: Option<std::path::PathBuf>,
    /// Text file
    #[arg(short, long)]
    file: std::path::PathBuf,
    #[arg(long, default_value_t = 256)]
    ctx: usize,
    #[arg(long, default_value_t = 4)]
    bits: u8,
    #[arg(short, long, default_value_t = std::thread::available_parallelism().map_or(1, |n| n.get()))]
    threads: usize,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    attention: AttentionArgs,
}

#[derive(Args)]
struct BenchModelArgs {
    #[arg(short, long)]
    model: std::path::PathBuf,
    #[arg(long)]
    tokenizer: Option<std::path::PathBuf>,
    /// Thread counts
    #[arg(short, long, default_value = "1,2")]
    threads: String,
    #[arg(long, default_value_t = 4)]
    bits: u8,
    /// Prompt tokens (capped at the context)
    #[arg(long, default_value_t = 256)]
    pp: usize,
    /// Generated tokens
    #[arg(long, default_value_t = 128)]
    tg: usize,
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Also time llama.cpp on the same GGUF file, in rounds interleaved with lutra's (needs --features llamacpp)
    #[arg(long)]
    llamacpp: bool,
    #[arg(long)]
    json: bool,
    /// Positions filled before pp and tg are timed (like llama-bench -d)
    #[arg(long, default_value_t = 0)]
    depth: usize,
    #[command(flatten)]
    attention: AttentionArgs,
}

#[derive(Args)]
struct RunArgs {
    /// Model file: GGUF (Gemma 3) or llama2.c checkpoint (its tokenizer.bin beside it)
    #[arg(short, long)]
    model: std::path::PathBuf,
    /// tokenizer.bin, if not beside the model
    #[arg(long)]
    tokenizer: Option<std::path::PathBuf>,
    #[arg(short, long, default_value = "Once upon a time")]
    prompt: String,
    /// Tokens to generate (stops early at the end of the context or an end token)
    #[arg(short = 'n', long, default_value_t = 256)]
    n_predict: usize,
    #[arg(short, long, default_value_t = std::thread::available_parallelism().map_or(1, |n| n.get()))]
    threads: usize,
    /// Bits per weight that f32 checkpoints are quantized to (1..8)
    #[arg(long, default_value_t = 4)]
    bits: u8,
    /// 0 = greedy
    #[arg(long, default_value_t = 0.8)]
    temp: f32,
    /// 0 = off
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// 1.0 = off
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// 0.0 = off
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// 1.0 = off
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    #[arg(long, default_value_t = 64)]
    repeat_last_n: usize,
    /// Seed of the sampler (default: from the clock)
    #[arg(long)]
    seed: Option<u64>,
    /// Wrap the prompt in the model's chat template (Gemma 3)
    #[arg(long)]
    chat: bool,
    /// Context length for GGUF models (tokens)
    #[arg(long, default_value_t = 4096)]
    ctx: usize,
    #[command(flatten)]
    attention: AttentionArgs,
}

#[derive(Args)]
struct InspectArgs {
    /// GGUF model file
    file: std::path::PathBuf,
    /// One JSON object instead of a table
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Low-bit GEMV: lutra LUT kernel vs a dequantize-then-dot baseline (and llama.cpp with --features llamacpp)
    Gemv(GemvArgs),
    /// DRAM read bandwidth (sum over a large buffer), the physical limit of a streaming GEMV
    Membw(MembwArgs),
    /// GEMV accuracy per format: NMSE against f64 over the dequantized and the original weights
    Accuracy(AccuracyArgs),
    /// Model speed: prompt processing and generation tokens/s (medians)
    Model(BenchModelArgs),
    /// One decode token's attention over one layer: NoMAD PQ keys vs exact f32/f16 keys (and llama.cpp)
    Attention(BenchAttentionArgs),
}

#[derive(Args)]
struct BenchAttentionArgs {
    /// Context lengths (cached positions)
    #[arg(long, default_value = "1024,4096,16384,32768")]
    ctx: String,
    /// Shapes: gemma3 (4 query heads, 1 KV head, head_dim 256), llama7b (32 heads, head_dim 128)
    #[arg(long, default_value = "gemma3,llama7b")]
    shapes: String,
    /// Thread counts, for lutra's pieces and llama.cpp alike
    #[arg(short, long, default_value = "1")]
    threads: String,
    #[arg(long, default_value_t = 7)]
    samples: usize,
    /// Also time llama.cpp's ggml_flash_attn_ext with f16 and q8_0 keys (needs --features llamacpp)
    #[arg(long)]
    llamacpp: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct AccuracyArgs {
    #[arg(long, default_value = "1024x4096")]
    shape: String,
    #[arg(long, default_value_t = 128)]
    group: usize,
    #[arg(long)]
    json: bool,
}

/// `--threads 1,2`: one or more counts, each at least 1.
fn thread_counts(arg: &str) -> Result<Vec<usize>, String> {
    list(arg, |t| t.parse::<usize>().ok().filter(|&n| n >= 1).ok_or(format!("bad thread count {t:?}")))
}

fn list<T>(s: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    s.split(',').filter(|p| !p.is_empty()).map(|p| f(p.trim())).collect()
}

fn parse_shape(s: &str) -> Result<(usize, usize), String> {
    let (m, k) = s.split_once('x').ok_or_else(|| format!("shape must be MxK, got {s:?}"))?;
    let m = m.parse().map_err(|_| format!("bad row count in {s:?}"))?;
    let k = k.parse().map_err(|_| format!("bad column count in {s:?}"))?;
    if m == 0 || k == 0 {
        return Err(format!("empty shape {s:?}"));
    }
    Ok((m, k))
}

#[derive(Args)]
struct GemvArgs {
    /// Bit widths: 1..8 or t (ternary)
    #[arg(long, default_value = "1,2,3,4,t")]
    bits: String,
    /// Thread counts
    #[arg(long, default_value = "1,2")]
    threads: String,
    /// Shapes MxK (M output rows, K columns)
    #[arg(long, default_value = "4096x4096,11008x4096,4096x11008,640x2048,2048x640,262144x640")]
    shapes: String,
    /// hot (one matrix, repeated) and/or cold (≥ 256 MiB of distinct copies)
    #[arg(long, default_value = "hot,cold")]
    regime: String,
    /// Weight group size along K
    #[arg(long, default_value_t = 128)]
    group: usize,
    /// Kernel: scalar, ssse3, avx2, avx512, neon, simd128 (default: the best available)
    #[arg(long)]
    isa: Option<String>,
    /// Timed samples per row (median reported; at least 5)
    #[arg(long, default_value_t = 7)]
    samples: usize,
    /// Also time the same split with rayon instead of the lutra pool
    #[arg(long)]
    rayon: bool,
    /// Skip the dequantize-then-dot baseline
    #[arg(long)]
    no_baseline: bool,
    /// Also time llama.cpp's ggml kernel of the same bits (needs --features llamacpp)
    #[arg(long)]
    llamacpp: bool,
    /// One JSON object per line instead of a table
    #[arg(long)]
    json: bool,
    /// Keep weights on 4 KiB pages (default: transparent huge pages advised)
    #[arg(long)]
    no_huge_pages: bool,
}

#[derive(Args)]
struct MembwArgs {
    #[arg(long, default_value = "1,2")]
    threads: String,
    /// Buffer size in MiB
    #[arg(long, default_value_t = 1024)]
    mib: usize,
    #[arg(long, default_value_t = 9)]
    samples: usize,
    #[arg(long)]
    json: bool,
    /// Use 4 KiB pages (default: transparent huge pages advised, as for weights)
    #[arg(long)]
    no_huge_pages: bool,
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Run(a) => {
            let seed = a
                .seed
                .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
            let opts = lutra::generate::RunOptions {
                model: a.model,
                tokenizer: a.tokenizer,
                prompt: a.prompt,
                tokens: a.n_predict,
                threads: a.threads.max(1),
                bits: a.bits,
                chat: a.chat,
                context: a.ctx,
                attention: a.attention.choice()?,
                sampler: lutra::core::sampler::SamplerConfig {
                    temperature: a.temp,
                    top_k: a.top_k,
                    top_p: a.top_p,
                    min_p: a.min_p,
                    repeat_penalty: a.repeat_penalty,
                    repeat_last_n: a.repeat_last_n,
                    seed,
                },
            };
            lutra::generate::run(&opts)?;
        }
        Command::Perplexity(a) => {
            let text = std::fs::read_to_string(&a.file).map_err(|e| format!("{}: {e}", a.file.display()))?;
            let attention = a.attention.choice()?;
            let loaded = lutra::generate::load(&a.model, a.tokenizer.as_deref(), a.bits)?;
            let p = lutra::generate::perplexity(&loaded, &text, a.ctx, a.threads.max(1), &attention)?;
            if a.json {
                println!(
                    "{{\"ppl\":{:.4},\"chunks\":{},\"ctx\":{},\"attention\":\"{}\",\"key_bytes\":{}}}",
                    p.ppl, p.chunks, p.ctx, p.keys, p.key_bytes
                );
            } else {
                println!(
                    "perplexity {:.4} over {} chunks of {} tokens ({} scored), {} keys ({} key-cache bytes)",
                    p.ppl, p.chunks, p.ctx, p.scored, p.keys, p.key_bytes
                );
            }
        }
        Command::Bench(BenchCommand::Model(a)) => {
            let attention = a.attention.choice()?;
            let loaded = lutra::generate::load(&a.model, a.tokenizer.as_deref(), a.bits)?;
            let threads = thread_counts(&a.threads)?;
            if a.llamacpp {
                return bench_model_vs_llamacpp(&a, &loaded, &threads);
            }
            let spec = lutra::generate::ModelBench { pp: a.pp, tg: a.tg, runs: a.runs, depth: a.depth, attention };
            for t in threads {
                let (pp, tg) = lutra::generate::bench_model(&loaded, t, &spec)?;
                let name = a.model.display();
                let kind = &a.attention.attention;
                if a.json {
                    println!(
                        "{{\"model\":\"{name}\",\"bits\":{},\"threads\":{t},\"depth\":{},\"attention\":\"{kind}\",\"pp_tps\":{pp:.1},\"tg_tps\":{tg:.1}}}",
                        a.bits, a.depth
                    );
                } else {
                    println!(
                        "{name}, {}-bit, {t} thread(s), depth {}, {kind} attention: prompt {pp:.1} tokens/s, generation {tg:.1} tokens/s (medians of {})",
                        a.bits,
                        a.depth,
                        a.runs.max(5)
                    );
                }
            }
        }
        Command::Bench(BenchCommand::Attention(a)) => {
            use lutra::bench_attention::{bench_attention, table, SHAPES};
            let ctxs = list(&a.ctx, |c| c.parse::<usize>().ok().filter(|&n| n >= 1).ok_or(format!("bad context {c:?}")))?;
            let shapes =
                list(&a.shapes, |n| SHAPES.iter().copied().find(|s| s.name == n).ok_or(format!("unknown shape {n:?} (gemma3, llama7b)")))?;
            let threads = thread_counts(&a.threads)?;
            let rows = bench_attention(&shapes, &ctxs, a.samples, a.llamacpp, &threads)?;
            if a.json {
                rows.iter().for_each(|r| println!("{}", r.json()));
            } else {
                print!("{}", table(&rows));
            }
        }
        Command::Calibrate(a) => {
            let text = std::fs::read_to_string(&a.file).map_err(|e| format!("{}: {e}", a.file.display()))?;
            let loaded = lutra::generate::load(&a.model, a.tokenizer.as_deref(), a.bits)?;
            let subspaces = list(&a.subspaces, |v| match v {
                "auto" => Ok(None),
                _ => v.parse::<usize>().map(Some).map_err(|_| format!("bad --subspaces {v:?}: a number or auto")),
            })?;
            let centroids = list(&a.centroids, |v| v.parse::<usize>().map_err(|_| format!("bad --centroids {v:?}")))?;
            let head_dim = loaded.attention_shape(a.ctx).head_dim;
            let configs: Vec<(usize, usize)> = subspaces
                .iter()
                .flat_map(|&s| centroids.iter().map(move |&k| (s.unwrap_or_else(|| lutra::calibrate::auto_subspaces(head_dim, k)), k)))
                .collect();
            if configs.len() > 1 && !(a.output.contains("{s}") && a.output.contains("{k}")) {
                return Err("several --subspaces / --centroids: give -o a pattern with {s} and {k}".into());
            }
            let rotation = lutra::core::pq::Rotation::from_name(&a.rotation)
                .ok_or_else(|| format!("--rotation {:?}: expected none, hadamard or rope-pairs", a.rotation))?;
            let opts = lutra::calibrate::CalibrateOptions {
                configs,
                rotation,
                key_transform: lutra::calibrate::KeyTransform::from_name(&a.key_transform)
                    .ok_or_else(|| format!("--key-transform {:?}: expected {}", a.key_transform, lutra::calibrate::KeyTransform::NAMES))?,
                recording: a.recording.clone(),
                ctx: a.ctx,
                keys: a.keys,
                iterations: a.iterations,
                threads: a.threads.max(1),
            };
            for lutra::calibrate::Calibrated { books, .. } in lutra::calibrate::calibrate(&loaded, &text, &opts)? {
                let s = books.shape();
                let path = a.output.replace("{s}", &s.subspaces.to_string()).replace("{k}", &s.centroids.to_string());
                std::fs::write(&path, books.to_gguf()).map_err(|e| format!("{path}: {e}"))?;
                eprintln!("wrote {path} ({s}, rotation {})", books.rotation().name());
            }
        }
        Command::Inspect(a) => {
            let report = lutra::inspect::inspect(&a.file).map_err(|e| e.to_string())?;
            if a.json {
                println!("{}", report.json());
            } else {
                print!("{}", report.text());
            }
        }
        Command::Bench(BenchCommand::Gemv(a)) => {
            let isa = match &a.isa {
                None => Isa::best(),
                Some(name) => {
                    let isa = Isa::from_name(name).ok_or_else(|| format!("unknown isa {name:?}"))?;
                    if !isa.is_available() {
                        return Err(format!("isa {name} is not available on this CPU/build"));
                    }
                    isa
                }
            };
            let opts = GemvOptions {
                shapes: list(&a.shapes, parse_shape)?,
                bits: list(&a.bits, Bits::parse)?,
                threads: thread_counts(&a.threads)?,
                regimes: list(&a.regime, Regime::parse)?,
                group: a.group,
                isa,
                samples: a.samples,
                json: a.json,
                rayon: a.rayon,
                baseline: !a.no_baseline,
                llamacpp: a.llamacpp,
                huge_pages: !a.no_huge_pages,
            };
            if !a.json {
                print_context();
                bench::print_gemv_header();
            }
            bench::gemv(&opts, |row| {
                if a.json {
                    println!("{}", row.json());
                } else {
                    bench::print_gemv_row(row);
                }
            })?;
        }
        Command::Bench(BenchCommand::Accuracy(a)) => {
            let (rows, cols) = parse_shape(&a.shape)?;
            let rows_out = bench::accuracy(rows, cols, a.group)?;
            if !a.json {
                println!(
                    "# GEMV accuracy, {rows}x{cols}, group {} (Q4_0/Q8_0: 32), weights N(0, 0.02²), activations N(0,1) with outliers",
                    a.group
                );
                println!("{:>14} {:>6} {:>16} {:>14} {:>20}", "format", "bpw", "nmse_vs_dequant", "nmse_vs_f32", "baseline_vs_dequant");
            }
            for r in rows_out {
                let b = r.baseline_nmse_vs_dequantized;
                if a.json {
                    println!(
                        "{{\"format\":\"{}\",\"bpw\":{:.3},\"nmse_vs_dequantized\":{:.3e},\"nmse_vs_f32\":{:.3e}{}}}",
                        r.format,
                        r.bits_per_weight,
                        r.nmse_vs_dequantized,
                        r.nmse_vs_f32,
                        b.map(|b| format!(",\"baseline_nmse_vs_dequantized\":{b:.3e}")).unwrap_or_default()
                    );
                } else {
                    let b = b.map(|b| format!("{b:.2e}")).unwrap_or_else(|| "-".into());
                    println!(
                        "{:>14} {:>6.3} {:>16.2e} {:>14.2e} {:>20}",
                        r.format, r.bits_per_weight, r.nmse_vs_dequantized, r.nmse_vs_f32, b
                    );
                }
            }
        }
        Command::Bench(BenchCommand::Membw(a)) => {
            for t in thread_counts(&a.threads)? {
                let gbps = bench::membw(t.max(1), a.mib, a.samples, !a.no_huge_pages)?;
                if a.json {
                    println!("{{\"bench\":\"membw\",\"threads\":{t},\"mib\":{},\"gbps\":{gbps:.2}}}", a.mib);
                } else {
                    println!("DRAM read, {t} thread(s), {} MiB: {gbps:.1} GB/s (median of {})", a.mib, a.samples.max(5));
                }
            }
        }
    }
    Ok(())
}

/// `lutra bench model --llamacpp`: lutra and llama.cpp side by side, per thread count.
fn bench_model_vs_llamacpp(a: &BenchModelArgs, loaded: &lutra::generate::Loaded, threads: &[usize]) -> Result<(), String> {
    let name = a.model.display();
    let kind = &a.attention.attention;
    let spec = lutra::generate::ModelBench { pp: a.pp, tg: a.tg, runs: a.runs, depth: a.depth, attention: a.attention.choice()? };
    let mut header = false;
    for &t in threads {
        let r = lutra::generate::bench_model_vs_llamacpp(loaded, &a.model, t, &spec)?;
        let num = |v: f64| if v.is_finite() { format!("{v:.1}") } else { "null".into() };
        if a.json {
            println!(
                "{{\"model\":\"{name}\",\"bits\":{},\"threads\":{t},\"depth\":{},\"attention\":\"{kind}\",\"pp_tps\":{},\"tg_tps\":{},\"llamacpp_pp_tps\":{},\"llamacpp_tg_tps\":{}}}",
                a.bits,
                r.depth,
                num(r.pp_tps),
                num(r.tg_tps),
                num(r.llamacpp_pp_tps),
                num(r.llamacpp_tg_tps)
            );
            continue;
        }
        if !header {
            header = true;
            print_context();
            println!(
                "# {name}: lutra ({kind} attention) vs llama.cpp in this process, like `llama-bench -p {} -n {} -d {}`; tokens/s, medians of {} interleaved rounds (1 warm-up round discarded)",
                r.pp, r.tg, r.depth, r.rounds
            );
            println!(
                "# pp: lutra feeds the prompt in batches of 32 tokens per pass over the weights, llama.cpp as one batch; both compute logits for the last prompt token only. tg: one token per decode, after the first {} positions",
                r.depth
            );
        }
        if r.pp > 0 {
            println!(
                "{t} thread(s): pp{} lutra {:.1}, llama.cpp {:.1} (lutra/llama.cpp {:.3})",
                r.pp,
                r.pp_tps,
                r.llamacpp_pp_tps,
                r.pp_tps / r.llamacpp_pp_tps
            );
        }
        println!(
            "{t} thread(s): tg{} at depth {} lutra {:.1}, llama.cpp {:.1} (lutra/llama.cpp {:.3})",
            r.tg,
            r.depth,
            r.tg_tps,
            r.llamacpp_tg_tps,
            r.tg_tps / r.llamacpp_tg_tps
        );
    }
    Ok(())
}

fn print_context() {
    println!(
        "# lutra {} | kernel isa: {} | cpus: {}",
        env!("CARGO_PKG_VERSION"),
        Isa::best().name(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    #[cfg(feature = "llamacpp")]
    println!("# llama.cpp ggml: {}", lutra::ggml::ggml_cpu_features());
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lutra: error: {e}");
            ExitCode::FAILURE
        }
    }
}
