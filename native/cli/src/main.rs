//! `lutra`: the command line. One file per subcommand, each parsing its arguments and
//! calling the library (`lutra`); `lutra bench` runs the benchmark crate (`lutra-bench`).

mod bench;
mod calibrate;
mod chat;
mod inspect;
mod json_schema;
mod pack;
mod perplexity;
mod run;
mod serve;
mod tokenize;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use lutra::core::pq::Codebooks;
use lutra::core::Isa;
use lutra::{Attention, PqAttention, SamplerConfig, ValueFormat};

use bench::BenchCommand;
use calibrate::CalibrateArgs;
use chat::ChatArgs;
use inspect::InspectArgs;
use perplexity::PerplexityArgs;
use run::RunArgs;

#[derive(Parser)]
#[command(name = "lutra", version, about = "Low-bit LLM inference on CPUs by table lookup instead of multiply-add")]
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
    /// Pack a model into a .lutra file: weights as the kernels read them, loaded without conversion
    Pack(pack::PackArgs),
    /// Generate text from a model (GGUF: Gemma 3, Llama, Qwen 2/3; a packed .lutra; or a llama2.c checkpoint), streaming to stdout
    Run(RunArgs),
    /// An OpenAI-compatible HTTP server (chat and text completions, streaming) over --parallel sessions
    Serve(serve::ServeArgs),
    /// Chat with a model in its chat format: one line of stdin per turn, answers streamed to stdout
    Chat(ChatArgs),
    /// Perplexity of a text, by llama-perplexity's method (chunks of --ctx, second halves scored)
    Perplexity(PerplexityArgs),
    /// Token ids of a text, as llama-tokenize prints them (works on vocabulary-only GGUFs)
    Tokenize(tokenize::TokenizeArgs),
    /// Train NoMAD key codebooks (k-means per layer, KV head and sub-space) on a text; writes a GGUF side file
    Calibrate(CalibrateArgs),
}

/// How attention reads the key cache.
#[derive(Args)]
pub struct AttentionArgs {
    /// exact (f16 keys) or pq (NoMAD product-quantized keys; needs --codebooks)
    #[arg(long, default_value = "exact")]
    pub attention: String,
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
    /// How the value cache stores values: f16, q8_0 or q4_0 (llama.cpp's blocks of 32 with an f16 scale; head size a multiple of 32)
    #[arg(long = "cache-type-v", default_value = "f16")]
    cache_type_v: String,
}

impl AttentionArgs {
    /// `--attention exact|pq` with `--codebooks FILE` (required for pq).
    pub fn choice(&self) -> Result<Attention, String> {
        let long_only = match self.pq_layers.as_str() {
            "long" => true,
            "all" => false,
            other => return Err(format!("--pq-layers {other:?}: expected long or all")),
        };
        match (self.attention.as_str(), self.codebooks.as_deref()) {
            ("exact", None) => Ok(Attention::Exact),
            ("exact", Some(_)) => Err("--codebooks is only used with --attention pq".into()),
            ("pq", Some(path)) => {
                let books = read_codebooks(path)?;
                Ok(Attention::Pq(Box::new(PqAttention { books, sink: self.pq_sink, recent: self.pq_recent, long_only })))
            }
            ("pq", None) => Err("--attention pq needs --codebooks FILE (make one with `lutra calibrate`)".into()),
            (other, _) => Err(format!("--attention {other:?}: expected exact or pq")),
        }
    }

    /// `--cache-type-v f16|q8_0|q4_0`.
    pub fn values(&self) -> Result<ValueFormat, String> {
        ValueFormat::from_name(&self.cache_type_v)
            .ok_or_else(|| format!("--cache-type-v {:?}: expected f16, q8_0 or q4_0", self.cache_type_v))
    }

    /// The attention and, where not f16, the value format, for reports: "pq", "exact+q8_0".
    pub fn label(&self) -> String {
        match self.values() {
            Ok(ValueFormat::F16) | Err(_) => self.attention.clone(),
            Ok(v) => format!("{}+{}", self.attention, v.name()),
        }
    }
}

fn read_codebooks(path: &Path) -> Result<Codebooks, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Codebooks::from_gguf(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Warns when PQ codebooks never saw positions as far as `context`.
fn warn_if_codebooks_short(attention: &Attention, context: usize) {
    if let Attention::Pq(pq) = attention {
        if let Some(seen) = pq.books.context().filter(|&c| c < context) {
            eprintln!(
                "warning: the codebooks were calibrated on positions below {seen}; keys beyond it carry rotations they never saw and score worse (calibrate with --ctx {context} on a text long enough to train on that many positions)"
            );
        }
    }
}

/// The model file and how to read it.
#[derive(Args)]
pub struct ModelArgs {
    /// Model file: GGUF (Gemma 3, Llama 2/3, Mistral, Qwen 2/3) or llama2.c checkpoint (its tokenizer.bin beside it)
    #[arg(short, long)]
    pub model: PathBuf,
    /// tokenizer.bin of a llama2.c checkpoint, if not beside it
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Bits per weight that f32 checkpoints are quantized to (1..8)
    #[arg(long, default_value_t = 4)]
    pub bits: u8,
    /// Most memory the weights and the session may use (e.g. 800M, 2G); default: the machine's RAM. A model or context over it is refused before loading
    #[arg(long, value_parser = lutra::memory::parse_size)]
    pub max_memory: Option<u64>,
    /// Chat format: one of llama.cpp's builtin template names (chatml, llama3, llama2, mistral-v7, phi3, gemma, ...), instead of the one recognized in the file's tokenizer.chat_template
    #[arg(long)]
    pub chat_template: Option<String>,
    /// Import the GGUF file's weights afresh and keep no copy. By default the imported form is kept in the user's cache directory (~/.cache/lutra/imports; LUTRA_IMPORT_CACHE=DIR moves it, LUTRA_IMPORT_CACHE=off turns it off) and later loads of the same file read it in place
    #[arg(long)]
    pub no_import_cache: bool,
    /// Add residual tables to every lookup product: the activations seen about 127x finer, as exact as an f32 evaluation of the same weights (decisive top-1 of llama.cpp's F32 run of the dequantized file at every position measured), at about half the speed
    #[arg(long)]
    pub residual_tables: bool,
}

impl ModelArgs {
    /// Loads the model, with a progress bar when `progress`.
    pub fn load(&self, progress: bool) -> Result<lutra::Model, String> {
        let opts = lutra::LoadOptions {
            tokenizer: self.tokenizer.clone(),
            bits: self.bits,
            progress,
            max_memory: self.max_memory,
            import_cache: if self.no_import_cache { None } else { lutra::import_cache::default_dir() },
            ..Default::default()
        };
        let mut model = lutra::Model::load_with(&self.model, &opts).map_err(|e| e.to_string())?;
        if self.residual_tables {
            model = model.with_table_precision(lutra::engine::TablePrecision::Residual);
        }
        match &self.chat_template {
            Some(name) => model.with_chat_template(name).map_err(|e| e.to_string()),
            None => Ok(model),
        }
    }
}

/// Sampling, named like llama.cpp's command line; the defaults are [`SamplerConfig::default`]'s.
#[derive(Args)]
pub struct SamplingArgs {
    /// 0 = greedy
    #[arg(long, default_value_t = SamplerConfig::default().temperature)]
    temp: f32,
    /// 0 = off
    #[arg(long, default_value_t = SamplerConfig::default().top_k)]
    top_k: usize,
    /// 1.0 = off
    #[arg(long, default_value_t = SamplerConfig::default().top_p)]
    top_p: f32,
    /// 0.0 = off
    #[arg(long, default_value_t = SamplerConfig::default().min_p)]
    min_p: f32,
    /// 1.0 = off
    #[arg(long, default_value_t = SamplerConfig::default().repeat_penalty)]
    repeat_penalty: f32,
    #[arg(long, default_value_t = SamplerConfig::default().repeat_last_n)]
    repeat_last_n: usize,
    /// Seed of the sampler (default: from the clock)
    #[arg(long)]
    seed: Option<u64>,
}

impl SamplingArgs {
    pub fn config(&self) -> SamplerConfig {
        let clock = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        SamplerConfig {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: self.seed.unwrap_or_else(clock),
        }
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `--threads 1,2`: one or more counts, each at least 1.
fn thread_counts(arg: &str) -> Result<Vec<usize>, String> {
    list(arg, |t| t.parse::<usize>().ok().filter(|&n| n >= 1).ok_or(format!("bad thread count {t:?}")))
}

fn list<T>(s: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    s.split(',').filter(|p| !p.is_empty()).map(|p| f(p.trim())).collect()
}

fn print_context() {
    println!(
        "# lutra {} | kernel isa: {} | cpus: {}",
        env!("CARGO_PKG_VERSION"),
        Isa::best().name(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    #[cfg(feature = "llamacpp")]
    println!("# llama.cpp ggml: {}", lutra_bench::llamacpp::ggml::ggml_cpu_features());
}

/// Weights and KV caches on transparent huge pages (see `hugepage`).
#[global_allocator]
static ALLOCATOR: lutra::hugepage::HugePageAllocator = lutra::hugepage::HugePageAllocator;

fn main() -> ExitCode {
    match parse_and_run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lutra: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parses the command line and runs it.
fn parse_and_run() -> Result<(), String> {
    let cli = Cli::parse();
    limit_isa_from_env()?;
    match cli.command {
        Command::Run(a) => run::run(a),
        Command::Chat(a) => chat::chat(a),
        Command::Serve(a) => serve::serve(a),
        Command::Perplexity(a) => perplexity::perplexity(a),
        Command::Calibrate(a) => calibrate::calibrate(a),
        Command::Inspect(a) => inspect::inspect(a),
        Command::Pack(a) => pack::pack(a),
        Command::Tokenize(a) => tokenize::tokenize(a),
        Command::Bench(c) => bench::bench(c),
    }
}

/// `LUTRA_MAX_ISA=ssse3|avx2|…` caps the kernel tier, so an AVX-512 machine can run and
/// time what most CPUs (and the browser's 128-bit wasm) have.
fn limit_isa_from_env() -> Result<(), String> {
    let Ok(name) = std::env::var("LUTRA_MAX_ISA") else { return Ok(()) };
    let max = Isa::from_name(&name).ok_or_else(|| {
        let known: Vec<_> = Isa::ALL.iter().map(|i| i.name()).collect();
        format!("LUTRA_MAX_ISA={name}: not a kernel tier (one of {})", known.join(", "))
    })?;
    Isa::limit_to(max);
    Ok(())
}
