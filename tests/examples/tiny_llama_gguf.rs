//! Writes one of the tiny random-weight Llama-family files the tests check against
//! llama.cpp (`lutra_tests::tiny_llama::VARIANTS`), carrying a real GGUF's tokenizer, for
//! callers outside Rust's tests: the page's test loads the Q1_0 `qwen3` one (Bonsai's
//! layout) from disk in Chromium.
//!
//! `cargo run -p lutra-tests --example tiny_llama_gguf -- NAME VOCAB.gguf OUT.gguf`

use std::process::ExitCode;

use lutra_tests::tiny_llama::{with_vocab, VARIANTS};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, vocab, out] = args.as_slice() else {
        let names: Vec<&str> = VARIANTS.iter().map(|v| v.name).collect();
        eprintln!("usage: tiny_llama_gguf NAME VOCAB.gguf OUT.gguf\nNAME: one of {}", names.join(", "));
        return ExitCode::FAILURE;
    };
    let Some(variant) = VARIANTS.iter().find(|v| v.name == name) else {
        eprintln!("{name}: no such variant");
        return ExitCode::FAILURE;
    };
    let written = std::fs::read(vocab)
        .map_err(|e| format!("{vocab}: {e}"))
        .and_then(|bytes| with_vocab(variant, &bytes).map_err(|e| format!("{vocab}: {e}")))
        .and_then(|file| std::fs::write(out, file).map_err(|e| format!("{out}: {e}")));
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
