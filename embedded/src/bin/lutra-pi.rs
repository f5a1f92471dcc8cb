//! `lutra-pi MODEL.lutra -p PROMPT [options]` streams a completion; `lutra-pi chat
//! MODEL.lutra [options]` holds a conversation over stdin in the file's chat template.
//! Both print load time, tokens/s and the arena's figures to stderr. A static binary for
//! aarch64-unknown-linux-musl whose only heap is an arena sized at compile time for a
//! class of models (`budget::PI_CLASS`: up to 1.5B parameters at 4 096 positions): a
//! model that needs more is refused, with the sizes, before its session starts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lutra_core::engine::{CancelFlag, StopReason};
use lutra_core::sampler::SamplerConfig;
use lutra_embedded::arena::StaticArena;
use lutra_embedded::budget;
use lutra_embedded::pi::{chat, run, ChatOptions, Options, Turn};

/// What std itself allocates: arguments, the thread pool, stdout's buffer, messages.
const STD_BYTES: usize = 1 << 20;
/// A conversation's text, its tokens and the sampler's scratch per turn, beyond the
/// session (freed turn by turn: the arena gives back the holes under its top).
const CHAT_BYTES: usize = 8 << 20;
const ARENA_BYTES: usize = budget::class_arena_bytes(&budget::PI_CLASS, budget::PI_CONTEXT) + CHAT_BYTES + STD_BYTES;

#[global_allocator]
static ARENA: StaticArena<ARENA_BYTES> = StaticArena::new();

const USAGE: &str = "usage: lutra-pi MODEL.lutra -p PROMPT [-n TOKENS] [SAMPLING] [-t THREADS] [-c CONTEXT]
       lutra-pi chat MODEL.lutra [--system TEXT] [--chat-template NAME] [-n TOKENS] [SAMPLING] [-t THREADS] [-c CONTEXT]
SAMPLING: [--temp T] [--top-k K] [--top-p P] [--min-p M] [--seed S]
chat reads one user turn per line of stdin; Ctrl-C stops an answer, at the prompt it ends the chat";

fn mib(b: usize) -> f64 {
    b as f64 / (1 << 20) as f64
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("chat") => parse(args[1..].to_vec()).and_then(converse),
        _ => parse(args).and_then(complete),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lutra-pi: {e}");
            ExitCode::FAILURE
        }
    }
}

fn complete(a: Args) -> Result<(), String> {
    let prompt = a.prompt.ok_or(USAGE)?;
    let opts = Options { model: &a.model, prompt: &prompt, max_tokens: a.n, sampler: a.sampler, threads: a.threads, context: a.context };
    let report = run(&opts, &ARENA, &mut std::io::stdout().lock())?;
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
        "arena {} bytes ({:.1} MiB, sized at compile time): model {:.2} MiB (import peak {} bytes, bound {} bytes), session {:.2} MiB of its {:.2} MiB budget (KV cache {:.2} MiB), peak {:.2} MiB, {} allocations refused while sealed; weights {:.1} MiB read in place; peak RSS {}",
        report.arena_capacity,
        mib(report.arena_capacity),
        mib(report.model_bytes()),
        report.import_peak(),
        report.import_bound.map_or("unknown".into(), |b| b.to_string()),
        mib(report.session_bytes()),
        mib(report.session_budget),
        mib(report.kv_cache_bytes),
        mib(report.arena[3].peak),
        report.arena[3].refused_sealed,
        mib(report.mapped_weight_bytes),
        peak_rss().map_or("unknown".into(), |kib| format!("{:.1} MiB", kib as f64 / 1024.0)),
    );
    Ok(())
}

fn converse(a: Args) -> Result<(), String> {
    if a.prompt.is_some() {
        return Err(format!("chat reads its turns from stdin, not -p\n{USAGE}"));
    }
    // Ctrl-C stops an answer; at the prompt it ends the chat
    let (cancel, answering) = (CancelFlag::new(), Arc::new(AtomicBool::new(false)));
    {
        let (cancel, answering) = (cancel.clone(), answering.clone());
        ctrlc::set_handler(move || {
            if answering.load(Ordering::SeqCst) {
                cancel.cancel();
            } else {
                eprintln!();
                std::process::exit(0);
            }
        })
        .map_err(|e| format!("cannot catch Ctrl-C: {e}"))?;
    }
    let opts = ChatOptions {
        model: &a.model,
        system: a.system.as_deref(),
        chat_template: a.chat_template.as_deref(),
        max_tokens: a.n,
        sampler: a.sampler,
        threads: a.threads,
        context: a.context,
    };
    let report = |t: &Turn| {
        eprintln!(
            "[{} new prompt tokens, {} generated in {:.2} s; {} of {} positions used; arena {:.2} of {:.1} MiB used, {} allocations refused while sealed]",
            t.prompt_tokens,
            t.generated,
            t.time.as_secs_f64(),
            t.position,
            t.context,
            mib(t.arena.used),
            mib(ARENA.capacity()),
            t.arena.refused_sealed,
        );
        if t.stop == Some(StopReason::Cancelled) {
            eprintln!("(stopped)");
        }
    };
    let stdin = std::io::stdin().lock();
    chat(&opts, &ARENA, stdin, &mut std::io::stdout().lock(), &cancel, &answering, report)?;
    eprintln!("peak RSS {}", peak_rss().map_or("unknown".into(), |kib| format!("{:.1} MiB", kib as f64 / 1024.0)));
    Ok(())
}

/// The process's peak resident set in KiB (Linux `VmHWM`).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()
}

struct Args {
    model: PathBuf,
    prompt: Option<String>,
    system: Option<String>,
    chat_template: Option<String>,
    n: usize,
    sampler: SamplerConfig,
    threads: usize,
    context: usize,
}

fn parse(args: Vec<String>) -> Result<Args, String> {
    let (mut model, mut prompt, mut system, mut chat_template) = (None, None, None, None);
    let (mut n, mut threads, mut context) = (256usize, 1usize, 0usize);
    let mut sampler = SamplerConfig::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value\n{USAGE}"));
        let number = |name: &str, v: String| v.parse::<f64>().map_err(|_| format!("{name}: not a number: {v}"));
        match arg.as_str() {
            "-p" | "--prompt" => prompt = Some(value("-p")?),
            "--system" => system = Some(value("--system")?),
            "--chat-template" => chat_template = Some(value("--chat-template")?),
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
    Ok(Args { model: model.ok_or(USAGE)?, prompt, system, chat_template, n, sampler, threads, context })
}
