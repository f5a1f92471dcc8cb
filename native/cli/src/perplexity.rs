//! `lutra perplexity`.

use clap::Args;

use lutra::threads::Pool;

use super::{default_threads, AttentionArgs, ModelArgs};

#[derive(Args)]
pub struct PerplexityArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Text file
    #[arg(short, long)]
    file: std::path::PathBuf,
    #[arg(long, default_value_t = 256)]
    ctx: usize,
    #[arg(short, long, default_value_t = default_threads())]
    threads: usize,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    attention: AttentionArgs,
}

pub fn perplexity(a: PerplexityArgs) -> Result<(), String> {
    let text = std::fs::read_to_string(&a.file).map_err(|e| format!("{}: {e}", a.file.display()))?;
    let (attention, values) = (a.attention.choice()?, a.attention.values()?);
    let model = a.model.load(false)?;
    model.check_session_memory(a.ctx.min(model.info().hparams.context_length)).map_err(|e| e.to_string())?;
    super::warn_if_codebooks_short(&attention, a.ctx);
    let pool = Pool::new(a.threads.max(1));
    let p = lutra::engine::perplexity(&model, &pool.split(), &text, a.ctx, &attention, values).map_err(|e| e.to_string())?;
    if a.json {
        println!(
            "{{\"ppl\":{:.4},\"chunks\":{},\"ctx\":{},\"attention\":\"{}\",\"key_bytes\":{},\"values\":\"{}\",\"value_bytes\":{}}}",
            p.ppl,
            p.chunks,
            p.ctx,
            p.keys,
            p.key_bytes,
            p.values.name(),
            p.value_bytes
        );
    } else {
        println!(
            "perplexity {:.4} over {} chunks of {} tokens ({} scored), {} keys ({} key-cache bytes), {} values ({} value-cache bytes)",
            p.ppl,
            p.chunks,
            p.ctx,
            p.scored,
            p.keys,
            p.key_bytes,
            p.values.name(),
            p.value_bytes
        );
    }
    Ok(())
}
