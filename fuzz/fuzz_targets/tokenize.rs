//! The real tokenizers on any text: stories15M's llama2.c tokenizer, Gemma 3's
//! SentencePiece vocabulary, and the byte-level BPE vocabularies of Llama 3 and Qwen 2
//! from llama.cpp's test files (models/, fetched by `cargo xtask models all`). Encoding
//! never fails on valid UTF-8, every id is in the vocabulary, and Gemma's (byte
//! fallback, no added prefix) and the BPE ones decode back to the very text — Gemma's
//! unless the text holds U+2581, the vocabulary's own space mark, which decodes to a
//! space (as in llama.cpp).
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use lutra_core::formats::gguf::Gguf;
use lutra_core::tokenizer::bpe::BpeTokenizer;
use lutra_core::tokenizer::spm::SpmTokenizer;
use lutra_core::tokenizer::{Llama2cTokenizer, Tokenizer};

const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models");

fn stories() -> &'static Llama2cTokenizer {
    static T: OnceLock<Llama2cTokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let bytes = std::fs::read(format!("{MODELS}/stories15M/tokenizer.bin")).expect("models/stories15M/tokenizer.bin");
        Llama2cTokenizer::from_bytes(&bytes, 32000).unwrap()
    })
}

fn gemma() -> &'static SpmTokenizer {
    static T: OnceLock<SpmTokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let path = format!("{MODELS}/gemma-3-270m-q4_k_m.gguf");
        let len = std::fs::metadata(&path).expect("models/gemma-3-270m-q4_k_m.gguf").len();
        let mut head = vec![0u8; 16 << 20];
        let n = std::io::Read::read(&mut std::fs::File::open(&path).unwrap(), &mut head).unwrap();
        SpmTokenizer::from_gguf(&Gguf::parse_prefix(&head[..n], len).unwrap()).unwrap()
    })
}

fn bpe(name: &str, cell: &'static OnceLock<BpeTokenizer>) -> &'static BpeTokenizer {
    cell.get_or_init(|| {
        let path = format!("{MODELS}/llama-vocab/ggml-vocab-{name}.gguf");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        BpeTokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap()
    })
}

fn llama3() -> &'static BpeTokenizer {
    static T: OnceLock<BpeTokenizer> = OnceLock::new();
    bpe("llama-bpe", &T)
}

fn qwen2() -> &'static BpeTokenizer {
    static T: OnceLock<BpeTokenizer> = OnceLock::new();
    bpe("qwen2", &T)
}

// Loading the four vocabularies takes ~11 s under ASan, more than libFuzzer's per-input
// timeout, so it happens before the first input rather than inside it.
fuzz_target!(
    init: {
        llama3();
        qwen2();
        stories();
        gemma();
    },
    |data: &[u8]| {
        let Ok(text) = std::str::from_utf8(data) else { return };
        for t in [llama3(), qwen2()] {
            let mut ids = Vec::new();
            t.encode_llama(text, false, false, &mut ids).expect("valid UTF-8 always encodes");
            assert!(ids.iter().all(|&id| (id as usize) < t.vocab_size()));
            let mut back = Vec::new();
            t.decode(&ids, &mut back).unwrap();
            assert_eq!(back, text.as_bytes(), "a BPE tokenizer does not round-trip {text:?}");
        }
        for t in [stories() as &dyn Tokenizer, gemma() as &dyn Tokenizer] {
            let mut ids = Vec::new();
            t.encode(text, true, &mut ids).expect("valid UTF-8 always encodes");
            assert!(ids.iter().all(|&id| (id as usize) < t.vocab_size()));
            let mut back = Vec::new();
            t.decode(&ids, &mut back).unwrap();
        }
        if text.contains('\u{2581}') {
            return;
        }
        let mut ids = Vec::new();
        gemma().encode(text, false, &mut ids).unwrap();
        let mut back = Vec::new();
        gemma().decode(&ids, &mut back).unwrap();
        assert_eq!(back, text.as_bytes(), "Gemma's tokenizer does not round-trip {text:?}");
    }
);
