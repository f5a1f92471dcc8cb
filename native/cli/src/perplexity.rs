//! `lutra perplexity`.

use clap::Args;

use lutra::threads::Pool;

use super::{default_threads, AttentionArgs, ModelArgs};

#[derive(Args)]
pub struct PerplexityArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Text file
    #[arg(short, long, required_unless_present = "kl_divergence_base")]
    file: Option<std::path::PathBuf>,
    /// Compare with llama.cpp: a file written by `llama-perplexity --kl-divergence-base FILE`
    /// on the same model; its tokens and chunk length are used (-f and --ctx are not), and the
    /// mean KL divergence, top-token agreement and both perplexities are printed
    #[arg(long, conflicts_with = "file")]
    kl_divergence_base: Option<std::path::PathBuf>,
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
    let (attention, values) = (a.attention.choice()?, a.attention.values()?);
    if let Some(base) = &a.kl_divergence_base {
        let bytes = lutra::inspect::map_file(base).map_err(|e| e.to_string())?;
        let logits = lutra::engine::LlamaLogits::parse(&bytes).map_err(|e| format!("{}: {e}", base.display()))?;
        let model = a.model.load(false)?;
        model.check_session_memory(logits.ctx.min(model.info().hparams.context_length)).map_err(|e| e.to_string())?;
        let pool = Pool::new(a.threads.max(1));
        let k = lutra::engine::kl_divergence(&model, &pool.split(), &logits, &attention, values)
            .map_err(|e| format!("{}: {e}", base.display()))?;
        let same_top = 100.0 * k.same_top as f64 / k.positions.max(1) as f64;
        if a.json {
            println!(
                "{{\"kld\":{:.6},\"kld_stderr\":{:.6},\"kld_max\":{:.6},\"positions\":{},\"same_top\":{},\"decisive\":{},\"decisive_differ\":{},\"ppl\":{:.4},\"ppl_llamacpp\":{:.4},\"chunks\":{},\"ctx\":{}}}",
                k.mean, k.stderr, k.max, k.positions, k.same_top, k.decisive, k.decisive_differ, k.ppl, k.ppl_base, logits.chunks, logits.ctx
            );
        } else {
            println!(
                "KL divergence from llama.cpp: mean {:.6} ± {:.6}, max {:.4} over {} positions ({} chunks of {}); same top token {:.2} %; \
                 {} of {} decisive positions (llama.cpp's lead ≥ 0.1 nats) differ; perplexity {:.4} (llama.cpp {:.4})",
                k.mean, k.stderr, k.max, k.positions, logits.chunks, logits.ctx, same_top, k.decisive_differ, k.decisive, k.ppl, k.ppl_base
            );
        }
        return Ok(());
    }
    let file = a.file.as_ref().ok_or("-f FILE is needed")?;
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
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
