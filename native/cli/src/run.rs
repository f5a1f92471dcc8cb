//! `lutra run`: load a model, stream generated text to stdout, timings to stderr.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use lutra::core::json::{JsonConstraint, Schema};
use lutra::core::Isa;
use lutra::engine::{Generation, DEFAULT_CONTEXT};
use lutra::{Role, SessionOptions};

use super::{default_threads, AttentionArgs, ModelArgs, SamplingArgs};

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(short, long, default_value = "Once upon a time")]
    prompt: String,
    /// Read the prompt from this file instead of --prompt
    #[arg(short, long, conflicts_with = "prompt")]
    file: Option<PathBuf>,
    /// Tokens to generate (stops early at the end of the context or an end token)
    #[arg(short = 'n', long, default_value_t = 256)]
    n_predict: usize,
    #[arg(short, long, default_value_t = default_threads())]
    threads: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Wrap the prompt in the model's chat format (one user turn; `lutra chat` holds a conversation)
    #[arg(long)]
    chat: bool,
    /// Context length (tokens), at most the model's own
    #[arg(long, default_value_t = DEFAULT_CONTEXT)]
    ctx: usize,
    #[command(flatten)]
    attention: AttentionArgs,
    /// The text is one JSON object (any keys): tokens that would break it are never sampled
    #[arg(long, conflicts_with = "json_schema")]
    json: bool,
    /// The text is one JSON document of this JSON Schema file (type, properties, required, items, enum, const)
    #[arg(long)]
    json_schema: Option<PathBuf>,
    /// Also print which kernel each tensor type's matrices run on (as `lutra inspect --kernels`)
    #[arg(short, long)]
    verbose: bool,
}

pub fn run(a: RunArgs) -> Result<(), String> {
    let prompt_text = match &a.file {
        Some(path) => std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
        None => a.prompt.clone(),
    };
    let (attention, values) = (a.attention.choice()?, a.attention.values()?);
    let json = json_constraint(a.json, a.json_schema.as_deref())?;
    let t_load = Instant::now();
    let model = a.model.load(true)?;
    let prompt = if a.chat { model.encode_chat(&[(Role::User, &prompt_text)], true) } else { model.encode(&prompt_text, true) }
        .map_err(|e| e.to_string())?;
    let context = a.ctx.min(model.info().hparams.context_length);
    super::warn_if_codebooks_short(&attention, context);
    let mut session =
        model.session(&SessionOptions { context, threads: a.threads.max(1), attention, values }).map_err(|e| e.to_string())?;
    let cache = session.engine().cache_info();
    let (session, gemv) = session.parts();
    eprintln!(
        "loaded {} in {:.2} s: {}, {} threads, kernel {}\nKV cache: {}",
        a.model.model.display(),
        t_load.elapsed().as_secs_f64(),
        model.info().summary(),
        a.threads.max(1),
        Isa::best().name(),
        cache
    );
    if a.verbose {
        // a llama2c checkpoint is quantized to bit planes on load; a GGUF file says per type
        match lutra::inspect::inspect(&a.model.model) {
            Ok(report) => eprint!("{}", report.kernels_text()),
            Err(_) => eprintln!("kernels         {}: every matrix table lookups (bit planes)", Isa::best().name()),
        }
    }

    // refuses a prompt that leaves no room before anything is printed
    let mut generation = Generation::start(session, &prompt, a.sampling.config(), a.n_predict).map_err(|e| e.to_string())?;
    if let Some(json) = json {
        generation = generation.with_constraint(Box::new(json));
    }
    let io = |e: std::io::Error| e.to_string();
    let mut out = std::io::stdout().lock();
    if !a.chat && !a.json && a.json_schema.is_none() {
        out.write_all(prompt_text.as_bytes()).and_then(|_| out.flush()).map_err(io)?;
    }
    // the prompt but its last token in batches, timed apart; the last one's logits start generation
    let t = Instant::now();
    session.prefill(&gemv).map_err(|e| e.to_string())?;
    let prompt_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    while let Some(piece) = generation.next_piece(session, &gemv).map_err(|e| e.to_string())? {
        out.write_all(piece.as_bytes()).and_then(|_| out.flush()).map_err(io)?;
    }
    let gen_s = t.elapsed().as_secs_f64();
    writeln!(out).map_err(io)?;
    if generation.stop_reason() == Some(lutra::StopReason::ContextFull) {
        let most = model.info().hparams.context_length;
        eprintln!(
            "stopped after {} tokens: the context is full ({context} positions; --ctx sets it, up to {most})",
            generation.generated()
        );
    }
    eprintln!(
        "prompt: {} tokens at {:.1} tokens/s; generation: {} tokens at {:.1} tokens/s",
        prompt.len() - 1,
        (prompt.len() - 1) as f64 / prompt_s.max(1e-9),
        generation.generated(),
        generation.generated() as f64 / gen_s.max(1e-9)
    );
    Ok(())
}

/// `--json` (any object) or `--json-schema FILE`, checked before the model loads.
fn json_constraint(any_object: bool, schema_file: Option<&std::path::Path>) -> Result<Option<JsonConstraint>, String> {
    let schema = match (any_object, schema_file) {
        (true, _) => Schema::AnyObject,
        (false, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            crate::json_schema::schema_from_json(&value, 0).map_err(|e| format!("{}: {e}", path.display()))?
        }
        (false, None) => return Ok(None),
    };
    JsonConstraint::new(&schema).map(Some).map_err(|e| e.to_string())
}
