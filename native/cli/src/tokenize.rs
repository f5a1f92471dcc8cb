//! `lutra tokenize`: a text's token ids as the model's tokenizer makes them, printed as
//! llama.cpp's `llama-tokenize` prints them (`--ids`: `[1, 2, 3]`). A GGUF needs only its
//! vocabulary (llama.cpp's vocab-only test files work); a llama2.c checkpoint is loaded.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use lutra::core::formats::gguf::{is_gguf, Gguf};
use lutra::core::tokenizer::bpe::BpeTokenizer;
use lutra::core::tokenizer::spm::SpmTokenizer;
use lutra::core::tokenizer::{Tokenizer, TokenizerError};
use lutra::inspect::map_file;

use super::ModelArgs;

#[derive(Args)]
pub struct TokenizeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The text
    #[arg(short, long)]
    prompt: Option<String>,
    /// Read the text from this file instead of --prompt
    #[arg(short, long, conflicts_with = "prompt")]
    file: Option<PathBuf>,
    /// Print only the ids, as a list: [1, 2, 3]
    #[arg(long)]
    ids: bool,
    /// No BOS (or EOS) even where the model adds them
    #[arg(long)]
    no_bos: bool,
    /// Turn control tokens written in the text (e.g. <start_of_turn>) into their ids
    #[arg(long)]
    parse_special: bool,
}

/// A tokenizer and how to show its tokens.
enum Vocab {
    Spm(Box<SpmTokenizer>),
    Bpe(Box<BpeTokenizer>),
    Model(lutra::Model),
}

pub fn tokenize(a: TokenizeArgs) -> Result<(), String> {
    let text = match (&a.prompt, &a.file) {
        (_, Some(path)) => std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
        (Some(p), None) => p.clone(),
        (None, None) => return Err("give the text with -p TEXT or -f FILE".into()),
    };
    let path = &a.model.model;
    let map = map_file(path).map_err(|e| e.to_string())?;
    let in_file = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let vocab = if is_gguf(&map) {
        let g = Gguf::parse(&map).map_err(|e| in_file(&e))?;
        match g.get_str("tokenizer.ggml.model") {
            Some("llama") => Vocab::Spm(Box::new(SpmTokenizer::from_gguf(&g).map_err(|e| in_file(&e))?)),
            Some("gpt2") => Vocab::Bpe(Box::new(BpeTokenizer::from_gguf(&g).map_err(|e| in_file(&e))?)),
            // packed llama2.c files carry their tokenizer.bin instead
            None => Vocab::Model(a.model.load(false)?),
            Some(other) => {
                return Err(in_file(&format!(
                    "tokenizer.ggml.model {other:?} is not supported (lutra has \"llama\", SentencePiece, and \"gpt2\", byte-level BPE)"
                )))
            }
        }
    } else {
        Vocab::Model(a.model.load(false)?)
    };
    // control tokens print as nothing; show their names, as llama-tokenize does
    fn named<'t>(
        piece: Result<&'t [u8], TokenizerError>,
        name: impl FnOnce() -> Result<&'t [u8], TokenizerError>,
    ) -> Result<Vec<u8>, String> {
        match piece {
            Ok([]) => name(),
            other => other,
        }
        .map(<[u8]>::to_vec)
        .map_err(|e| e.to_string())
    }
    let (ids, pieces) = match &vocab {
        Vocab::Spm(t) => {
            let mut ids = Vec::new();
            t.encode_llama(&text, !a.no_bos, a.parse_special, &mut ids).map_err(|e| e.to_string())?;
            let pieces = pieces(&ids, |prev, id| named(t.decode_piece(prev, id), || t.piece(id)))?;
            (ids, pieces)
        }
        Vocab::Bpe(t) => {
            let mut ids = Vec::new();
            t.encode_llama(&text, !a.no_bos, a.parse_special, &mut ids).map_err(|e| e.to_string())?;
            let pieces = pieces(&ids, |prev, id| named(t.decode_piece(prev, id), || t.piece(id)))?;
            (ids, pieces)
        }
        Vocab::Model(m) => {
            if a.parse_special {
                return Err("--parse-special needs a GGUF vocabulary".into());
            }
            let ids = m.encode(&text, !a.no_bos).map_err(|e| e.to_string())?;
            let pieces = pieces(&ids, |prev, id| m.decode_piece(prev, id).map(<[u8]>::to_vec).map_err(|e| e.to_string()))?;
            (ids, pieces)
        }
    };
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| e.to_string();
    if a.ids {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        writeln!(out, "[{}]", list.join(", ")).map_err(io)?;
    } else {
        for (id, piece) in ids.iter().zip(pieces) {
            writeln!(out, "{id:6} -> '{}'", String::from_utf8_lossy(&piece)).map_err(io)?;
        }
    }
    Ok(())
}

/// Each token's bytes as it prints after the one before.
fn pieces(ids: &[u32], mut piece: impl FnMut(Option<u32>, u32) -> Result<Vec<u8>, String>) -> Result<Vec<Vec<u8>>, String> {
    let mut prev = None;
    ids.iter()
        .map(|&id| {
            let p = piece(prev, id);
            prev = Some(id);
            p
        })
        .collect()
}
