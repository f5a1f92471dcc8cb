//! `lutra calibrate`.

use clap::Args;

use super::{default_threads, list, ModelArgs};

#[derive(Args)]
pub struct CalibrateArgs {
    #[command(flatten)]
    model: ModelArgs,
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
    #[arg(long, default_value_t = lutra::engine::DEFAULT_CONTEXT)]
    ctx: usize,
    /// Keys collected per layer and KV head (at most); three quarters train k-means, one is held out to measure
    #[arg(long, default_value_t = 16384)]
    keys: usize,
    /// Lloyd iterations
    #[arg(long, default_value_t = 20)]
    iterations: usize,
    #[arg(short, long, default_value_t = default_threads())]
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

pub fn calibrate(a: CalibrateArgs) -> Result<(), String> {
    let text = std::fs::read_to_string(&a.file).map_err(|e| format!("{}: {e}", a.file.display()))?;
    let model = a.model.load(false)?;
    let subspaces = list(&a.subspaces, |v| match v {
        "auto" => Ok(None),
        _ => v.parse::<usize>().map(Some).map_err(|_| format!("bad --subspaces {v:?}: a number or auto")),
    })?;
    let centroids = list(&a.centroids, |v| v.parse::<usize>().map_err(|_| format!("bad --centroids {v:?}")))?;
    let head_dim = model.attention_shape(a.ctx).head_dim;
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
    for lutra::calibrate::Calibrated { books, .. } in lutra::calibrate::calibrate(&model, &text, &opts)? {
        let s = books.shape();
        let path = a.output.replace("{s}", &s.subspaces.to_string()).replace("{k}", &s.centroids.to_string());
        std::fs::write(&path, books.to_gguf()).map_err(|e| format!("{path}: {e}"))?;
        eprintln!("wrote {path} ({s}, rotation {})", books.rotation().name());
    }
    Ok(())
}
