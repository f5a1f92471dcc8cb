//! Writes stories15M as llama.cpp's converter and quantizer make it (see
//! `lutra_tests::stories_gguf`): `models/stories15M/stories15M-{f32,q8_0,q4_0}.gguf`,
//! then checks each against the SHA-256 sum of llama.cpp's own file
//! (tests/golden/stories15M-gguf.sha256, from `scripts/stories15m-gguf-reference.sh`).
//! `cargo xtask models stories` runs it.
//!
//! ```text
//! cargo run --release -p lutra-tests --example stories_gguf
//! ```

use std::path::Path;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stories_gguf: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |p: &str| std::fs::read(root.join(p)).map_err(|e| format!("{p}: {e} (run `cargo xtask models stories vocab` first)"));
    let files =
        lutra_tests::stories_gguf::write(&read("models/stories15M/model.bin")?, &read("models/llama-vocab/ggml-vocab-llama-spm.gguf")?)?;
    let sums = std::fs::read_to_string(root.join("tests/golden/stories15M-gguf.sha256")).map_err(|e| e.to_string())?;
    for (name, bytes) in files {
        let path = root.join("models/stories15M").join(name);
        std::fs::write(&path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let out = Command::new("sha256sum").arg(&path).output().map_err(|e| format!("sha256sum: {e}"))?;
        let got = String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string();
        let want =
            sums.lines().find(|l| l.ends_with(name)).and_then(|l| l.split_whitespace().next()).ok_or(format!("no sum for {name}"))?;
        if got != want {
            return Err(format!("{}: SHA-256 {got}, llama.cpp's file has {want}", path.display()));
        }
        println!("{} ({} bytes): equal to llama.cpp's (SHA-256 {got})", path.display(), bytes.len());
    }
    Ok(())
}
