//! llama2.c `tokenizer.bin`: generated vocabularies; merges against a direct transcription
//! of run.c's O(n²) loop; byte fallback; decoding; malformed files refused.

mod common;
use common::llama2c_files::{vocab, write_tokenizer};
use common::Rng;

use lutra_core::tokenizer::{byte_of_piece, Llama2cTokenizer, Tokenizer, TokenizerBin, TokenizerError, BOS};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn tokenizer(extra: &[(&str, f32)]) -> (Llama2cTokenizer, Vec<(f32, Vec<u8>)>) {
    let v = vocab(extra);
    let t = Llama2cTokenizer::from_bytes(&write_tokenizer(16, &v), v.len()).unwrap();
    (t, v)
}

fn id(v: &[(f32, Vec<u8>)], piece: &str) -> u32 {
    v.iter().rposition(|(_, p)| p == piece.as_bytes()).unwrap() as u32
}

fn encode(t: &Llama2cTokenizer, text: &str, bos: bool) -> Vec<u32> {
    let mut out = Vec::new();
    t.encode(text, bos, &mut out).unwrap();
    out
}

fn decode(t: &Llama2cTokenizer, tokens: &[u32]) -> Vec<u8> {
    let mut out = Vec::new();
    t.decode(tokens, &mut out).unwrap();
    out
}

/// run.c's `encode`, transcribed: linear lookups (highest id among equal pieces, as
/// the tokenizer documents), and the O(n²) best-pair merge loop.
fn reference_encode(v: &[(f32, Vec<u8>)], text: &str, bos: bool) -> Vec<u32> {
    let lookup = |s: &[u8]| v.iter().rposition(|(_, p)| p == s).map(|i| i as u32);
    let mut tokens = Vec::new();
    if bos {
        tokens.push(1);
    }
    if !text.is_empty() {
        tokens.push(lookup(b" ").unwrap());
    }
    for ch in text.chars() {
        let mut buf = [0u8; 4];
        let s = ch.encode_utf8(&mut buf).as_bytes();
        match lookup(s) {
            Some(id) => tokens.push(id),
            None => tokens.extend(s.iter().map(|&b| b as u32 + 3)),
        }
    }
    loop {
        let (mut best_score, mut best_id, mut best_idx) = (-1e10f32, 0, None);
        for i in 0..tokens.len().saturating_sub(1) {
            let mut s = v[tokens[i] as usize].1.clone();
            s.extend_from_slice(&v[tokens[i + 1] as usize].1);
            if let Some(id) = lookup(&s) {
                if v[id as usize].0 > best_score {
                    (best_score, best_id, best_idx) = (v[id as usize].0, id, Some(i));
                }
            }
        }
        let Some(i) = best_idx else { break };
        tokens[i] = best_id;
        tokens.remove(i + 1);
    }
    tokens
}

#[test]
fn merges_happen_in_score_order() {
    let (t, v) = tokenizer(&[(" ", -100.0), ("a", -10.0), ("b", -10.0), ("c", -10.0), ("ab", -1.0), ("bc", -2.0)]);
    let (sp, a, b, c, ab, bc) = (id(&v, " "), id(&v, "a"), id(&v, "b"), id(&v, "c"), id(&v, "ab"), id(&v, "bc"));
    assert_eq!(encode(&t, "abc", false), [sp, ab, c]);
    assert_eq!(encode(&t, "abc", true), [BOS, sp, ab, c]);
    // the other score order merges the other pair
    let (t, v) = tokenizer(&[(" ", -100.0), ("a", -10.0), ("b", -10.0), ("c", -10.0), ("ab", -2.0), ("bc", -1.0)]);
    assert_eq!(encode(&t, "abc", false), [id(&v, " "), id(&v, "a"), id(&v, "bc")]);
    assert_eq!((a, b, bc), (id(&v, "a"), id(&v, "b"), id(&v, "bc")));
    // merged pieces merge further, the dummy-prefix space included
    let (t, v) = tokenizer(&[(" ", -100.0), ("a", -10.0), ("b", -10.0), ("ab", -1.0), (" ab", -3.0), (" abab", -4.0), ("abab", -9.0)]);
    assert_eq!(encode(&t, "abab", false), [id(&v, " abab")]);
}

#[test]
fn equal_scores_merge_leftmost_first() {
    let (t, v) = tokenizer(&[(" ", -100.0), ("a", -10.0), ("aa", -1.0)]);
    let (sp, a, aa) = (id(&v, " "), id(&v, "a"), id(&v, "aa"));
    assert_eq!(encode(&t, "aaa", false), [sp, aa, a]);
    assert_eq!(encode(&t, "aaaa", false), [sp, aa, aa]);
    assert_eq!(encode(&t, "aaaaa", false), [sp, aa, aa, a]);
}

#[test]
fn scores_at_or_below_run_c_floor_never_merge() {
    let (t, v) = tokenizer(&[(" ", -100.0), ("a", -10.0), ("aa", -1e10), (" a", -2e10)]);
    assert_eq!(encode(&t, "aa", false), [id(&v, " "), id(&v, "a"), id(&v, "a")]);
}

#[test]
fn empty_text_has_no_dummy_prefix() {
    let (t, _) = tokenizer(&[(" ", -100.0)]);
    assert_eq!(encode(&t, "", true), [BOS]);
    assert_eq!(encode(&t, "", false), Vec::<u32>::new());
    // encode appends
    let mut out = vec![7];
    t.encode("", true, &mut out).unwrap();
    assert_eq!(out, [7, BOS]);
}

#[test]
fn unknown_code_points_fall_back_to_bytes_and_decode_back() {
    let (t, v) = tokenizer(&[(" ", -100.0), ("a", -10.0), ("é", -10.0)]);
    let toks = encode(&t, "a€é", true);
    // € = E2 82 AC has no piece: three byte tokens; é has one
    assert_eq!(toks, [BOS, id(&v, " "), id(&v, "a"), 3 + 0xE2, 3 + 0x82, 3 + 0xAC, id(&v, "é")]);
    assert_eq!(decode(&t, &toks), "a€é".as_bytes());
    assert_eq!(t.decode_piece(None, 3 + 0xE2).unwrap(), [0xE2]);
    // a NUL is a character like any other
    assert_eq!(encode(&t, "\0", false), [id(&v, " "), 3]);
}

#[test]
fn decode_strips_the_space_after_bos_only() {
    let (t, v) = tokenizer(&[(" ", -100.0), ("a", -10.0), (" Once", -5.0), (" upon", -5.0)]);
    let (once, upon) = (id(&v, " Once"), id(&v, " upon"));
    assert_eq!(t.decode_piece(Some(BOS), once).unwrap(), b"Once");
    assert_eq!(t.decode_piece(None, once).unwrap(), b" Once");
    assert_eq!(t.decode_piece(Some(once), upon).unwrap(), b" upon");
    assert_eq!(decode(&t, &[BOS, once, upon, 2]), b"Once upon");
    assert_eq!(t.decode_piece(None, BOS).unwrap(), b"\n<s>\n");
    assert_eq!(t.decode_piece(None, 3 + 0x41).unwrap(), b"A");
    let n = v.len() as u32;
    assert_eq!(t.decode_piece(None, n), Err(TokenizerError::TokenOutOfRange { token: n, vocab_size: v.len() }));
}

#[test]
fn older_exports_byte_tokens_decode_to_raw_bytes() {
    // stories15M's tokenizer.bin stores byte b as the UTF-8 of U+00b, and also has the
    // same characters as ordinary pieces: encoding prefers the ordinary piece.
    let mut v = vocab(&[(" ", -100.0), ("é", -7.0)]);
    for b in 0..=255u8 {
        v[3 + b as usize].1 = char::from(b).to_string().into_bytes();
    }
    let t = Llama2cTokenizer::from_bytes(&write_tokenizer(8, &v), v.len()).unwrap();
    assert_eq!(t.decode_piece(None, 3 + 0xE9).unwrap(), [0xE9]);
    assert_eq!(t.decode_piece(None, 3 + 0x41).unwrap(), b"A");
    let e_acute = id(&v, "é");
    assert!(e_acute > 258);
    assert_eq!(encode(&t, "é", false), [id(&v, " "), e_acute]);
    assert_eq!(t.lookup(b"A"), Some(3 + 0x41));
    assert_eq!(byte_of_piece(3 + 0xE9, "é".as_bytes()), Some(0xE9));
    assert_eq!(byte_of_piece(400, "é".as_bytes()), None);
    assert_eq!(byte_of_piece(400, b"<0x7f>"), Some(0x7F));
    assert_eq!(byte_of_piece(400, b"<0xG0>"), None);
}

#[test]
fn agrees_with_run_c_merge_loop_on_random_vocabularies() {
    let mut rng = Rng(11);
    let alphabet = ["a", "b", "c", " ", "é", "ü"];
    for _ in 0..30 {
        let mut extra: Vec<(String, f32)> = alphabet[..4].iter().map(|c| (c.to_string(), -50.0)).collect();
        for _ in 0..40 {
            let len = 2 + rng.below(4);
            let piece: String = (0..len).map(|_| alphabet[rng.below(alphabet.len())]).collect();
            // few distinct scores, so ties are common
            extra.push((piece, -(rng.below(6) as f32)));
        }
        let extra_ref: Vec<(&str, f32)> = extra.iter().map(|(p, s)| (p.as_str(), *s)).collect();
        let (t, v) = tokenizer(&extra_ref);
        for _ in 0..10 {
            let len = rng.below(30);
            let text: String = (0..len).map(|_| alphabet[rng.below(alphabet.len())]).collect();
            let bos = rng.below(2) == 0;
            assert_eq!(encode(&t, &text, bos), reference_encode(&v, &text, bos), "text {text:?}");
            let toks = encode(&t, &text, true);
            assert_eq!(decode(&t, &toks), text.as_bytes());
        }
    }
}

#[test]
fn long_prompts_are_fast() {
    let (t, v) = tokenizer(&[(" ", -100.0), ("a", -10.0), ("b", -10.0), ("ab", -1.0), ("abab", -2.0), ("abababab", -3.0)]);
    let text = "ab".repeat(4000);
    let toks = encode(&t, &text, false);
    assert_eq!(toks.len(), 1 + 1000);
    assert_eq!(toks[1], id(&v, "abababab"));
    assert_eq!(decode(&t, &toks)[1..], *text.as_bytes());
}

#[test]
fn byte_fallback_needs_the_byte_tokens() {
    let v: Vec<(f32, Vec<u8>)> = vec![(0.0, b"<unk>".to_vec()), (0.0, b"<s>".to_vec()), (0.0, b"</s>".to_vec()), (0.0, b" ".to_vec())];
    let t = Llama2cTokenizer::from_bytes(&write_tokenizer(8, &v), 4).unwrap();
    let mut out = Vec::new();
    assert_eq!(t.encode("z", false, &mut out), Err(TokenizerError::NoByteToken { byte: b'z' }));
    assert!(TokenizerError::NoByteToken { byte: b'z' }.to_string().contains("0x7A"));
}

#[test]
fn malformed_files_are_refused() {
    let v = vocab(&[(" ", -1.0), ("ab", -2.0)]);
    let file = write_tokenizer(16, &v);
    let n = v.len();
    assert_eq!(TokenizerBin::parse(&file).unwrap().len(), n);
    // every truncation: a typed error, a short count at entry boundaries
    for cut in 0..file.len() {
        match Llama2cTokenizer::from_bytes(&file[..cut], n) {
            Err(TokenizerError::Truncated { .. } | TokenizerError::PieceBeyondFile { .. }) => {}
            Err(TokenizerError::VocabMismatch { expected, found }) => assert!(expected == n && found < n),
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    assert!(matches!(TokenizerBin::parse(&file[..2]), Err(TokenizerError::Truncated { what: "max_token_length", .. })));
    assert_eq!(Llama2cTokenizer::from_bytes(&file, n + 1).unwrap_err(), TokenizerError::VocabMismatch { expected: n + 1, found: n });
    assert_eq!(Llama2cTokenizer::from_bytes(&file, n - 1).unwrap_err(), TokenizerError::VocabMismatch { expected: n - 1, found: n });

    let mut bad = file.clone();
    bad[..4].copy_from_slice(&(-1i32).to_le_bytes());
    assert_eq!(TokenizerBin::parse(&bad).unwrap_err(), TokenizerError::BadMaxTokenLength(-1));
    // the first entry (token 0, "<unk>") at byte 4: score, length, bytes
    let mut bad = file.clone();
    bad[8..12].copy_from_slice(&(-5i32).to_le_bytes());
    assert_eq!(TokenizerBin::parse(&bad).unwrap_err(), TokenizerError::NegativeLength { token: 0, len: -5 });
    let mut bad = file.clone();
    bad[8..12].copy_from_slice(&i32::MAX.to_le_bytes());
    assert!(matches!(TokenizerBin::parse(&bad), Err(TokenizerError::PieceBeyondFile { token: 0, .. })));
    let mut bad = file.clone();
    bad[4..8].copy_from_slice(&f32::NAN.to_le_bytes());
    assert_eq!(TokenizerBin::parse(&bad).unwrap_err(), TokenizerError::NonFiniteScore { token: 0 });
    let mut bad = file.clone();
    bad[..4].copy_from_slice(&3i32.to_le_bytes());
    assert_eq!(TokenizerBin::parse(&bad).unwrap_err(), TokenizerError::PieceTooLong { token: 0, len: 5, max: 3 });
    for e in [TokenizerError::BadMaxTokenLength(-1), TokenizerError::VocabMismatch { expected: 3, found: 2 }] {
        assert!(e.to_string().contains("tokenizer file"));
    }

    // random corruption never panics
    let mut rng = Rng(5);
    for _ in 0..2000 {
        let mut bad = file.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(bad.len());
            bad[at] = rng.next() as u8;
        }
        bad.truncate(rng.below(bad.len() + 1).max(bad.len() / 2));
        if let Ok(t) = Llama2cTokenizer::from_bytes(&bad, n) {
            let mut out = Vec::new();
            let _ = t.encode("ab a", true, &mut out);
            let mut text = Vec::new();
            let _ = t.decode(&out, &mut text);
        }
    }
}
