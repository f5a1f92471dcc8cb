//! `lutra bench …`: tables on stdout, --json for one JSON object per line.

use clap::{Args, Subcommand};
use lutra::core::Isa;

use super::{list, print_context, thread_counts, AttentionArgs, ModelArgs};
use lutra_bench::gemv::{self, Bits, GemvOptions, Regime};
use lutra_bench::model::{bench_model, bench_model_vs_llamacpp, profile_model, ModelBench};

#[derive(Subcommand)]
pub enum BenchCommand {
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
pub struct BenchModelArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Thread counts
    #[arg(short, long, default_value = "1,2")]
    threads: String,
    /// Prompt tokens (capped at the context)
    #[arg(long, default_value_t = 256)]
    pp: usize,
    /// Generated tokens
    #[arg(long, default_value_t = 128)]
    tg: usize,
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Also time llama.cpp on the same GGUF file, in rounds interleaved with lutra's (needs --features llamacpp)
    #[arg(long, conflicts_with = "profile")]
    llamacpp: bool,
    /// Instead of tokens/s: where one prefill of --pp tokens and --tg decode steps spend their time, op by op (each kind of product, the LM head, attention, sampling, the rest)
    #[arg(long)]
    profile: bool,
    #[arg(long)]
    json: bool,
    /// Positions filled before pp and tg are timed (like llama-bench -d)
    #[arg(long, default_value_t = 0)]
    depth: usize,
    #[command(flatten)]
    attention: AttentionArgs,
}

#[derive(Args)]
pub struct BenchAttentionArgs {
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
pub struct AccuracyArgs {
    #[arg(long, default_value = "1024x4096")]
    shape: String,
    #[arg(long, default_value_t = 128)]
    group: usize,
    #[arg(long)]
    json: bool,
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
pub struct GemvArgs {
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
pub struct MembwArgs {
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

pub fn bench(command: BenchCommand) -> Result<(), String> {
    match command {
        BenchCommand::Model(a) => {
            let attention = a.attention.choice()?;
            let model = a.model.load(false)?;
            let threads = thread_counts(&a.threads)?;
            if a.llamacpp {
                return versus_llamacpp(&a, &model, &threads);
            }
            let spec = ModelBench { pp: a.pp, tg: a.tg, runs: a.runs, depth: a.depth, attention, values: a.attention.values()? };
            for t in threads {
                let name = a.model.model.display();
                let kind = a.attention.label();
                let weights = weights_label(model.info());
                if a.profile {
                    let isa = lutra_core::Isa::best().name();
                    for phase in profile_model(&model, t, &spec)? {
                        if a.json {
                            let context = format!(
                                "\"model\":\"{name}\",\"weights\":\"{weights}\",\"threads\":{t},\"depth\":{},\"attention\":\"{kind}\",\"isa\":\"{isa}\"",
                                a.depth
                            );
                            phase.json(&context).iter().for_each(|line| println!("{line}"));
                        } else {
                            println!(
                                "{name} ({weights}), {t} thread(s), depth {}, {kind} attention, kernels {isa}: {}",
                                a.depth,
                                phase.table()
                            );
                        }
                    }
                    continue;
                }
                let (pp, tg) = bench_model(&model, t, &spec)?;
                if a.json {
                    println!(
                        "{{\"model\":\"{name}\",\"weights\":\"{weights}\",\"threads\":{t},\"depth\":{},\"attention\":\"{kind}\",\"pp_tps\":{pp:.1},\"tg_tps\":{tg:.1}}}",
                        a.depth
                    );
                } else {
                    println!(
                        "{name} ({weights}), {t} thread(s), depth {}, {kind} attention: prompt {pp:.1} tokens/s, generation {tg:.1} tokens/s (medians of {})",
                        a.depth,
                        a.runs.max(5)
                    );
                }
            }
        }
        BenchCommand::Attention(a) => {
            use lutra_bench::attention::{bench_attention, table, SHAPES};
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
        BenchCommand::Gemv(a) => {
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
                rayon: a.rayon,
                baseline: !a.no_baseline,
                llamacpp: a.llamacpp,
                huge_pages: !a.no_huge_pages,
            };
            if !a.json {
                print_context();
                gemv::print_gemv_header();
            }
            gemv::gemv(&opts, |row| {
                if a.json {
                    println!("{}", row.json());
                } else {
                    gemv::print_gemv_row(row);
                }
            })?;
        }
        BenchCommand::Accuracy(a) => {
            let (rows, cols) = parse_shape(&a.shape)?;
            let rows_out = gemv::accuracy(rows, cols, a.group)?;
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
        BenchCommand::Membw(a) => {
            for t in thread_counts(&a.threads)? {
                let gbps = gemv::membw(t.max(1), a.mib, a.samples, !a.no_huge_pages)?;
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

/// The weights' storage in a few characters: the file's quantized tensor types
/// (`Q4_0+Q6_K`; norms' F32 left out unless nothing else), or how a llama2.c checkpoint
/// was quantized.
fn weights_label(info: &lutra::ModelInfo) -> String {
    let quantized: Vec<&str> = info.tensor_types.iter().map(|(t, _)| t.as_str()).filter(|t| *t != "F32").collect();
    if quantized.is_empty() {
        "F32".to_string()
    } else {
        quantized.join("+")
    }
}

/// `lutra bench model --llamacpp`: lutra and llama.cpp side by side, per thread count.
fn versus_llamacpp(a: &BenchModelArgs, model: &lutra::Model, threads: &[usize]) -> Result<(), String> {
    let name = a.model.model.display();
    let kind = a.attention.label();
    let spec =
        ModelBench { pp: a.pp, tg: a.tg, runs: a.runs, depth: a.depth, attention: a.attention.choice()?, values: a.attention.values()? };
    let mut header = false;
    for &t in threads {
        let r = bench_model_vs_llamacpp(model, &a.model.model, t, &spec)?;
        let num = |v: f64| if v.is_finite() { format!("{v:.1}") } else { "null".into() };
        if a.json {
            println!(
                "{{\"model\":\"{name}\",\"weights\":\"{}\",\"threads\":{t},\"depth\":{},\"attention\":\"{kind}\",\"pp_tps\":{},\"tg_tps\":{},\"llamacpp_pp_tps\":{},\"llamacpp_tg_tps\":{}}}",
                weights_label(model.info()),
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
