//! Writes llama.cpp's logits for the tiny Llama-family files of
//! `lutra_tests::tiny_llama` into tests/golden/llama-family/NAME.bin, which
//! tests/tests/llama_family.rs checks lutra's forward pass against.
//!
//! ```text
//! RUSTFLAGS="-C target-cpu=native" CARGO_TARGET_DIR=target/llamacpp \
//!     cargo run -p lutra-tests --features llamacpp --example llama_family_golden
//! ```
//!
//! Each file is written to a temporary directory and loaded by llama.cpp in-process
//! (crates.io llama-cpp-sys-2, CPU only, one thread, n_ctx 512, default context
//! parameters: f16 KV cache); its tokens are decoded as one batch with logits at every
//! position (`LlamaCppModel::logits_all`).

use std::path::Path;
use std::process::ExitCode;

use lutra_bench::llamacpp::model::LlamaCppModel;
use lutra_tests::tiny_llama::{tokens, FamilyGolden, VARIANTS};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llama_family_golden: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out_dir = root.join("tests/golden/llama-family");
    std::fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
    let tmp = std::env::temp_dir().join(format!("lutra-llama-family-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    for v in VARIANTS {
        let gguf = v.gguf();
        let path = tmp.join(format!("{}.gguf", v.name));
        std::fs::write(&path, &gguf).map_err(|e| e.to_string())?;
        let mut llama = LlamaCppModel::load_with_context(&path, 1, 512)?;
        let tokens = tokens();
        let logits = llama.logits_all(&tokens)?;
        let golden =
            FamilyGolden { file_len: gguf.len() as u64, file_checksum: lutra_core::formats::pack::checksum(&gguf), tokens, logits };
        let out = out_dir.join(format!("{}.bin", v.name));
        std::fs::write(&out, golden.to_bytes()).map_err(|e| e.to_string())?;
        println!("{}: {} bytes of GGUF, {} positions × {} logits", out.display(), gguf.len(), golden.logits.len(), llama.n_vocab());
    }
    std::fs::remove_dir_all(&tmp).map_err(|e| e.to_string())
}
