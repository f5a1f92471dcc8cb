//! The byte-level BPE tokenizer (`lutra_core::tokenizer::bpe`) on llama.cpp's real vocabularies
//! (`models/llama-vocab/ggml-vocab-*.gguf`, `cargo xtask models vocab`), beyond what
//! llama.cpp's suite (`llama_vocab.rs`) checks: decoding gives back any UTF-8 text, and
//! control tokens written in the text are found with `parse_special` only.

use std::path::PathBuf;

use lutra_core::formats::gguf::Gguf;
use lutra_core::rng::SplitMix64;
use lutra_core::tokenizer::bpe::BpeTokenizer;
use lutra_core::tokenizer::Tokenizer;

fn vocab_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/llama-vocab");
    assert!(dir.join("ggml-vocab-llama-bpe.gguf").is_file(), "{} missing: run `cargo xtask models vocab`", dir.display());
    dir
}

/// Every vocabulary file of `tokenizer.ggml.model` "gpt2", by name.
fn gpt2_vocabs() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(vocab_dir()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "gguf")).collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        let g = Gguf::parse(&bytes).unwrap();
        if g.get_str("tokenizer.ggml.model") == Some("gpt2") {
            let name = path.file_stem().unwrap().to_string_lossy().trim_start_matches("ggml-vocab-").to_string();
            out.push((name, bytes));
        }
    }
    out
}

/// GPT-2's `bytes_to_unicode`: the UTF-8 of the character standing for byte `b`.
fn byte_char(b: u8) -> Vec<u8> {
    let printable = |b: u8| (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
    let c = if printable(b) { char::from(b) } else { char::from_u32(0x100 + (0..b).filter(|&x| !printable(x)).count() as u32).unwrap() };
    c.to_string().into_bytes()
}

/// A code point in `lo..=hi` (surrogates drawn again).
fn char_in(rng: &mut SplitMix64, lo: u32, hi: u32) -> char {
    loop {
        if let Some(c) = char::from_u32(lo + rng.below(u64::from(hi - lo + 1)) as u32) {
            return c;
        }
    }
}

/// Random text that stresses the pre-tokenizers: words, digits, contractions, runs of
/// spaces and line breaks, marks, CJK, emoji, and any code point at all.
fn random_text(rng: &mut SplitMix64) -> String {
    let mut s = String::new();
    for _ in 0..rng.below(40) {
        match rng.below(12) {
            0 => s.push(char_in(rng, 0x61, 0x7a)),
            1 => s.push(char_in(rng, 0x20, 0x7e)),
            2 => s.push([' ', '\n', '\t', '\r', '\u{a0}', '\u{3000}', '\u{2028}', '\u{85}', '\u{b}'][rng.below(9) as usize]),
            3 => s.push(char_in(rng, 0x30, 0x39)),
            4 => s.push_str(["'s", "'LL", "'Re", "'d", "'", "\r\n", "   ", "\n\n"][rng.below(8) as usize]),
            5 => s.push(char_in(rng, 0xc0, 0x24f)),
            6 => s.push(char_in(rng, 0x300, 0x36f)),
            7 => s.push(char_in(rng, 0x4e00, 0x9fff)),
            8 => s.push(char_in(rng, 0x1f300, 0x1f6ff)),
            9 => s.push(char_in(rng, 0x600, 0x6ff)),
            10 => s.push(char_in(rng, 0x900, 0x97f)),
            _ => s.push(char_in(rng, 0, 0x10ffff)),
        }
    }
    s
}

#[test]
fn decoding_gives_back_any_text() {
    let mut rng = SplitMix64::new(0x5eed);
    for (name, bytes) in gpt2_vocabs() {
        let t = BpeTokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"));
        // bytes whose character of the byte alphabet the vocabulary lacks (falcon, mpt,
        // starcoder, refact: 0xC0, 0xC1, 0xF5.. and more): llama.cpp drops them
        let missing: Vec<u8> = (0..=255u8).filter(|&b| t.lookup(&byte_char(b)).is_none()).collect();
        for _ in 0..400 {
            let text = random_text(&mut rng);
            let mut ids = Vec::new();
            t.encode_llama(&text, false, false, &mut ids).unwrap();
            let mut back = Vec::new();
            t.decode(&ids, &mut back).unwrap();
            let want: Vec<u8> = text.bytes().filter(|b| !missing.contains(b)).collect();
            assert_eq!(String::from_utf8_lossy(&back), String::from_utf8_lossy(&want), "{name}: {text:?} {ids:?}");
        }
    }
}

#[test]
fn control_tokens_only_with_parse_special() {
    let bytes = std::fs::read(vocab_dir().join("ggml-vocab-llama-bpe.gguf")).unwrap();
    let t = BpeTokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    let (bot, eot) = (t.lookup(b"<|begin_of_text|>").unwrap(), t.lookup(b"<|eot_id|>").unwrap());
    assert_eq!((bot, eot), (128000, 128009));
    let encode = |text: &str, add_special, parse_special| {
        let mut out = Vec::new();
        t.encode_llama(text, add_special, parse_special, &mut out).unwrap();
        out
    };
    let hi = encode("Hi there", false, false);
    let text = "<|begin_of_text|>Hi there<|eot_id|>";
    assert_eq!(encode(text, false, true), [vec![bot], hi.clone(), vec![eot]].concat());
    // Llama 3 adds BOS
    assert_eq!(encode(text, true, true), [vec![bot, bot], hi.clone(), vec![eot]].concat());
    // without parse_special the markers are text
    let plain = encode(text, false, false);
    assert!(!plain.contains(&bot) && !plain.contains(&eot));
    let mut back = Vec::new();
    t.decode(&plain, &mut back).unwrap();
    assert_eq!(back, text.as_bytes());
    // control tokens print as nothing
    back.clear();
    t.decode(&[eot], &mut back).unwrap();
    assert!(back.is_empty());
}
