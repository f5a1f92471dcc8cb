//! `lutra pack`: a model into a `.lutra` file that loads without conversion.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use lutra_core::formats::gguf::is_gguf;
use lutra_core::formats::pack::Writer;

use super::ModelArgs;

#[derive(Args)]
pub struct PackArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Output file (written beside it first, then renamed: an existing file is replaced
    /// only by a complete one)
    #[arg(short, long)]
    output: PathBuf,
}

pub fn pack(a: PackArgs) -> Result<(), String> {
    let t0 = Instant::now();
    let model = a.model.load(true)?;
    let path = &a.model.model;
    let map = |p: &Path| lutra::inspect::map_file(p).map_err(|e| e.to_string());
    // what the packed file keeps of its origin: the GGUF's metadata, or the checkpoint's tokenizer
    let file = map(path)?;
    let origin = if is_gguf(&file) {
        file
    } else {
        map(&a.model.tokenizer.clone().unwrap_or_else(|| path.parent().unwrap_or(Path::new(".")).join("tokenizer.bin")))?
    };
    let mut writer = Writer::new();
    model.engine().write_packed(&origin, &mut writer).map_err(|e| format!("{}: {e}", path.display()))?;

    let partial = a.output.with_extension("lutra.partial");
    let file = std::fs::File::create(&partial).map_err(|e| format!("{}: {e}", partial.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let written = writer.finish(|piece| out.write_all(piece)).and_then(|n| out.flush().map(|_| n));
    let written = match written {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(format!("{}: {e}", partial.display()));
        }
    };
    std::fs::rename(&partial, &a.output).map_err(|e| format!("{} -> {}: {e}", partial.display(), a.output.display()))?;
    eprintln!(
        "packed {} into {}: {:.1} MiB in {:.2} s ({})",
        path.display(),
        a.output.display(),
        written as f64 / (1 << 20) as f64,
        t0.elapsed().as_secs_f64(),
        model.engine().info().summary()
    );
    Ok(())
}
