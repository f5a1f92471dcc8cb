//! `lutra-pi MODEL.lutra -p PROMPT -n N [--temp T --top-k K --top-p P --min-p M --seed S
//! -t THREADS -c CONTEXT]`: streams the text, then load time, tokens/s and the sizes of
//! the arena's figures. A static binary for aarch64-unknown-linux-musl whose only heap is
//! an arena sized at compile time for the largest model it is built for (Gemma 3 270M
//! at 2048 positions): a model that needs more is refused before its session starts.

use std::path::PathBuf;
use std::process::ExitCode;

use lutra_core::sampler::SamplerConfig;
use lutra_embedded::arena::StaticArena;
use lutra_embedded::budget;
use lutra_embedded::pi::{run, Options};

/// What std itself allocates: arguments, the thread pool, stdout's buffer, messages.
const STD_BYTES: usize = 1 << 20;
const ARENA_BYTES: usize = budget::arena_bytes(&budget::GEMMA3_270M, 2048) + STD_BYTES;

#[global_allocator]
static ARENA: StaticArena<ARENA_BYTES> = StaticArena::new();

const USAGE: &str =
    "usage: lutra-pi MODEL.lutra -p PROMPT [-n TOKENS] [--temp T] [--top-k K] [--top-p P] [--min-p M] [--seed S] [-t THREADS] [-c CONTEXT]";

fn main() -> ExitCode {
    match parse(std::env::args().skip(1).collect()).and_then(|(model, prompt, n, sampler, threads, context)| {
        let opts = Options { model: &model, prompt: &prompt, max_tokens: n, sampler, threads, context };
        let report = run(&opts, &ARENA, &mut std::io::stdout().lock())?;
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        println!();
        eprintln!(
            "load {:.3} s; context {} positions; prompt {} tokens in {:.3} s; generated {} tokens at {:.1} tokens/s ({:?})",
            report.load.as_secs_f64(),
            report.context,
            report.prompt_tokens,
            report.prefill.as_secs_f64(),
            report.generated,
            report.generated as f64 / report.generation.as_secs_f64().max(1e-9),
            report.stop,
        );
        eprintln!(
            "arena {} bytes ({:.1} MiB, sized at compile time): model {:.2} MiB, session {:.2} MiB of its {:.2} MiB budget (KV cache {:.2} MiB), peak {:.2} MiB, {} allocations refused while sealed; weights {:.1} MiB read in place; peak RSS {}",
            report.arena_capacity,
            mib(report.arena_capacity),
            mib(report.model_bytes()),
            mib(report.session_bytes()),
            mib(report.session_budget),
            mib(report.kv_cache_bytes),
            mib(report.arena[3].peak),
            report.arena[3].refused_sealed,
            mib(report.mapped_weight_bytes),
            peak_rss().map_or("unknown".into(), |kib| format!("{:.1} MiB", kib as f64 / 1024.0)),
        );
        Ok(())
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lutra-pi: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The process's peak resident set in KiB (Linux `VmHWM`).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()
}

type Parsed = (PathBuf, String, usize, SamplerConfig, usize, usize);

fn parse(args: Vec<String>) -> Result<Parsed, String> {
    let (mut model, mut prompt, mut n, mut threads, mut context) = (None, None, 256usize, 1usize, 0usize);
    let mut sampler = SamplerConfig::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value\n{USAGE}"));
        let number = |name: &str, v: String| v.parse::<f64>().map_err(|_| format!("{name}: not a number: {v}"));
        match arg.as_str() {
            "-p" | "--prompt" => prompt = Some(value("-p")?),
            "-n" => n = number("-n", value("-n")?)? as usize,
            "-t" | "--threads" => threads = number("-t", value("-t")?)? as usize,
            "-c" | "--context" => context = number("-c", value("-c")?)? as usize,
            "--temp" => sampler.temperature = number("--temp", value("--temp")?)? as f32,
            "--top-k" => sampler.top_k = number("--top-k", value("--top-k")?)? as usize,
            "--top-p" => sampler.top_p = number("--top-p", value("--top-p")?)? as f32,
            "--min-p" => sampler.min_p = number("--min-p", value("--min-p")?)? as f32,
            "--seed" => sampler.seed = value("--seed")?.parse().map_err(|_| "--seed: not an integer".to_string())?,
            "-h" | "--help" => return Err(USAGE.into()),
            other if other.starts_with('-') => return Err(format!("unknown option {other}\n{USAGE}")),
            other => model = Some(PathBuf::from(other)),
        }
    }
    Ok((model.ok_or(USAGE)?, prompt.ok_or(USAGE)?, n, sampler, threads, context))
}
