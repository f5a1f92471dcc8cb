//! The GGUF SentencePiece tokenizer (`lutra_core::tokenizer::spm`) on small vocabularies written
//! by a test-only GGUF writer: merges by score with the leftmost tie rule, byte
//! fallback, special tokens with and without `parse_special`, the space prefix,
//! decoding, the Gemma chat format, and typed errors for inconsistent metadata.
#![cfg(feature = "alloc")]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use lutra_core::formats::gguf::{Gguf, ValueType};
use lutra_core::tokenizer::spm::{format_gemma_chat, gemma_chat_prompt, ChatRole, SpmTokenizer, TokenType, VocabError};
use lutra_core::tokenizer::{Tokenizer, TokenizerError};

mod common;
use common::gguf_writer::Meta as Val;

/// A metadata-only GGUF file (`common::gguf_writer`).
fn write_gguf(kvs: &[(&str, Val)]) -> Vec<u8> {
    let kvs: Vec<(String, Val)> = kvs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    common::gguf_writer::write_gguf(&kvs, &[])
}

// ---------------------------------------------------------------------------------
// A small vocabulary

const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER: i32 = 4;
const BYTE: i32 = 6;

/// (piece, score, type) in id order: pad, eos, bos, unk, two control and one
/// user-defined token, the 256 byte tokens (ids 7..=262), then ordinary pieces.
fn vocab() -> Vec<(Vec<u8>, f32, i32)> {
    let mut v: Vec<(Vec<u8>, f32, i32)> = vec![
        (b"<pad>".to_vec(), 0.0, CONTROL),
        (b"<eos>".to_vec(), 0.0, CONTROL),
        (b"<bos>".to_vec(), 0.0, CONTROL),
        (b"<unk>".to_vec(), 0.0, UNKNOWN),
        (b"<start_of_turn>".to_vec(), 0.0, CONTROL),
        (b"<end_of_turn>".to_vec(), 0.0, CONTROL),
        (b"<b>".to_vec(), 0.0, USER),
    ];
    for b in 0..=255u8 {
        v.push((format!("<0x{b:02X}>").into_bytes(), 0.0, BYTE));
    }
    let normal: &[(&str, f32)] = &[
        ("\u{2581}", -1.0),
        ("a", -2.0),
        ("b", -2.0),
        ("c", -2.0),
        ("h", -2.0),
        ("i", -2.0),
        ("é", -2.0),
        ("\n", -2.0),
        ("ab", -5.0),
        ("bc", -3.0),
        ("abc", -4.0),
        ("\u{2581}a", -6.0),
        ("\u{2581}h", -3.5),
        ("hi", -3.0),
        ("\u{2581}hi", -2.5),
        ("aa", -7.0),
        ("\u{2581}\u{2581}", -8.0),
        ("user", -9.0),
        ("model", -9.0),
        ("u", -2.0),
        ("s", -2.0),
        ("e", -2.0),
        ("r", -2.0),
        ("us", -8.0),
        ("use", -8.5),
        ("m", -2.0),
        ("o", -2.0),
        ("d", -2.0),
        ("l", -2.0),
        ("mo", -8.0),
        ("mod", -8.2),
        ("mode", -8.4),
        ("<s", -9.0),
    ];
    for &(p, s) in normal {
        v.push((p.as_bytes().to_vec(), s, NORMAL));
    }
    v
}

fn id(piece: &str) -> u32 {
    vocab().iter().position(|(p, _, _)| p == piece.as_bytes()).unwrap_or_else(|| panic!("no piece {piece:?}")) as u32
}

fn byte(b: u8) -> u32 {
    7 + u32::from(b)
}

fn kvs_of(v: &[(Vec<u8>, f32, i32)], add_space_prefix: bool) -> Vec<(&'static str, Val)> {
    vec![
        ("general.architecture", Val::Str("gemma3".into())),
        ("tokenizer.ggml.model", Val::Str("llama".into())),
        ("tokenizer.ggml.tokens", Val::ByteStrs(v.iter().map(|t| t.0.clone()).collect())),
        ("tokenizer.ggml.scores", Val::F32s(v.iter().map(|t| t.1).collect())),
        ("tokenizer.ggml.token_type", Val::I32s(v.iter().map(|t| t.2).collect())),
        ("tokenizer.ggml.bos_token_id", Val::U32(2)),
        ("tokenizer.ggml.eos_token_id", Val::U32(1)),
        ("tokenizer.ggml.unknown_token_id", Val::U32(3)),
        ("tokenizer.ggml.add_bos_token", Val::Bool(true)),
        ("tokenizer.ggml.add_space_prefix", Val::Bool(add_space_prefix)),
    ]
}

fn build(kvs: &[(&str, Val)]) -> Result<SpmTokenizer, VocabError> {
    let bytes = write_gguf(kvs);
    let g = Gguf::parse(&bytes).expect("writer output parses");
    SpmTokenizer::from_gguf(&g)
}

fn tok(add_space_prefix: bool) -> SpmTokenizer {
    build(&kvs_of(&vocab(), add_space_prefix)).expect("valid vocabulary")
}

fn enc(t: &SpmTokenizer, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
    let mut out = Vec::new();
    t.encode_llama(text, add_special, parse_special, &mut out).unwrap();
    out
}

fn dec(t: &SpmTokenizer, ids: &[u32]) -> String {
    let mut out = Vec::new();
    t.decode(ids, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

// ---------------------------------------------------------------------------------
// Encoding

#[test]
fn metadata_is_read() {
    let t = tok(false);
    assert_eq!(t.vocab_size(), vocab().len());
    assert_eq!((t.bos(), t.eos(), t.unk(), t.eot()), (Some(2), Some(1), Some(3), Some(5)));
    assert!(t.add_bos() && !t.add_eos() && !t.add_space_prefix() && !t.parse_special());
    assert_eq!(t.chat_template(), None);
    assert_eq!(t.token_type(6).unwrap(), TokenType::UserDefined);
    assert_eq!(t.token_type(byte(0x41)).unwrap(), TokenType::Byte);
    assert_eq!(t.piece(id("ab")).unwrap(), b"ab");
    assert_eq!(t.score(id("bc")).unwrap(), -3.0);
    assert_eq!(t.lookup("\u{2581}hi".as_bytes()), Some(id("\u{2581}hi")));
    assert_eq!(t.lookup(b"zz"), None);
    assert!(t.is_eog(1) && t.is_eog(5) && !t.is_eog(2));
    let n = t.vocab_size() as u32;
    assert_eq!(t.piece(n), Err(TokenizerError::TokenOutOfRange { token: n, vocab_size: n as usize }));
    assert!(t.score(n).is_err() && t.token_type(n).is_err());
}

#[test]
fn merges_by_score() {
    let t = tok(false);
    // "abc": bc (-3) beats ab (-5), then a+bc = abc (-4) → [abc]
    assert_eq!(enc(&t, "abc", false, false), [id("abc")]);
    // "abca": bc first; then a+bc (-4) beats c+a (not a piece) → [abc, a]
    assert_eq!(enc(&t, "abca", false, false), [id("abc"), id("a")]);
    // "cab": ab is the only pair → [c, ab]
    assert_eq!(enc(&t, "cab", false, false), [id("c"), id("ab")]);
    // "hi": hi (-3)
    assert_eq!(enc(&t, "hi", false, false), [id("hi")]);
    // " hi": ▁h (-3.5) vs hi (-3) → hi first, then ▁+hi = ▁hi
    assert_eq!(enc(&t, " hi", false, false), [id("\u{2581}hi")]);
    // "ab" alone merges
    assert_eq!(enc(&t, "ab", false, false), [id("ab")]);
}

#[test]
fn leftmost_wins_ties() {
    let t = tok(false);
    // "aaa": both pairs score aa (-7): the leftmost merges → [aa, a]
    assert_eq!(enc(&t, "aaa", false, false), [id("aa"), id("a")]);
    assert_eq!(enc(&t, "aaaaa", false, false), [id("aa"), id("aa"), id("a")]);
    // two spaces then three: ▁▁ pairs from the left
    assert_eq!(enc(&t, "   ", false, false), [id("\u{2581}\u{2581}"), id("\u{2581}")]);
}

#[test]
fn merges_chain_through_longer_pieces() {
    let t = tok(false);
    // m o d e l: mo(-8) first, then mod(-8.2), then mode(-8.4); "model" needs mode+l
    // which is a piece (-9) → one token
    assert_eq!(enc(&t, "model", false, false), [id("model")]);
    assert_eq!(enc(&t, "user", false, false), [id("user")]);
}

#[test]
fn space_prefix() {
    let with = tok(true);
    let without = tok(false);
    assert_eq!(enc(&without, "hi", false, false), [id("hi")]);
    assert_eq!(enc(&with, "hi", false, false), [id("\u{2581}hi")]);
    // the prefix goes before the first text and after each special token
    assert_eq!(enc(&with, "hi<b>hi", false, false), [id("\u{2581}hi"), 6, id("\u{2581}hi")]);
    assert_eq!(enc(&without, "hi<b>hi", false, false), [id("hi"), 6, id("hi")]);
    // and decodes away at the start or after BOS only
    assert_eq!(dec(&with, &[id("\u{2581}hi"), id("\u{2581}hi")]), "hi hi");
    assert_eq!(dec(&with, &[2, id("\u{2581}hi")]), "hi");
    assert_eq!(dec(&without, &[id("\u{2581}hi"), id("\u{2581}hi")]), " hi hi");
}

#[test]
fn byte_fallback() {
    let t = tok(false);
    // 'z' has no piece; 'é' does; '€' (E2 82 AC) does not
    assert_eq!(enc(&t, "z", false, false), [byte(b'z')]);
    assert_eq!(enc(&t, "é", false, false), [id("é")]);
    assert_eq!(enc(&t, "a€b", false, false), [id("a"), byte(0xE2), byte(0x82), byte(0xAC), id("b")]);
    assert_eq!(enc(&t, "\u{1F980}", false, false), [byte(0xF0), byte(0x9F), byte(0xA6), byte(0x80)]);
    // bytes decode to the raw byte, so split characters come back whole
    assert_eq!(dec(&t, &enc(&t, "a€b \u{1F980}z", false, false)), "a€b \u{1F980}z");
    assert_eq!(t.decode_piece(None, byte(0xE2)).unwrap(), [0xE2]);
}

#[test]
fn missing_byte_token_is_an_error() {
    // a vocabulary without byte tokens: an unknown character cannot be encoded
    let v: Vec<(Vec<u8>, f32, i32)> = vec![
        (b"<unk>".to_vec(), 0.0, UNKNOWN),
        (b"<s>".to_vec(), 0.0, CONTROL),
        (b"</s>".to_vec(), 0.0, CONTROL),
        (b"a".to_vec(), -1.0, NORMAL),
        ("\u{2581}".as_bytes().to_vec(), -1.0, NORMAL),
    ];
    let t = build(&kvs_of(&v, true)).unwrap();
    // (with add_space_prefix: "▁a▁a")
    assert_eq!(enc(&t, "a a", false, false), [4, 3, 4, 3]);
    let mut out = Vec::new();
    assert_eq!(t.encode_llama("ab", false, false, &mut out), Err(TokenizerError::NoByteToken { byte: b'b' }));
    // ... but a one-byte piece serves as the byte's token, as in llama.cpp
    assert_eq!(enc(&t, "aa", false, false), [4, 3, 3]);
}

#[test]
fn special_tokens() {
    let t = tok(false);
    let sot = 4;
    let eot = 5;
    // user-defined tokens are always matched whole
    assert_eq!(enc(&t, "a<b>c", false, false), [id("a"), 6, id("c")]);
    // control tokens only with parse_special; without, they are plain text
    assert_eq!(enc(&t, "<start_of_turn>hi", false, true), [sot, id("hi")]);
    let plain = enc(&t, "<start_of_turn>hi", false, false);
    assert!(!plain.contains(&sot) && plain.len() > 2, "{plain:?}");
    assert_eq!(dec(&t, &plain), "<start_of_turn>hi");
    // adjacent and repeated specials
    assert_eq!(enc(&t, "<end_of_turn><start_of_turn><b><b>", false, true), [eot, sot, 6, 6]);
    // BOS: with add_special and add_bos_token; "<bos>" in the text is a second one
    assert_eq!(enc(&t, "<bos>hi", true, true), [2, 2, id("hi")]);
    assert_eq!(enc(&t, "", true, true), [2]);
    assert_eq!(enc(&t, "", false, true), Vec::<u32>::new());
    // the trait follows the tokenizer's flag
    let mut t2 = t.clone();
    let mut out = Vec::new();
    t2.encode("<start_of_turn>hi", true, &mut out).unwrap();
    assert_eq!(out[0], 2);
    assert_ne!(out[1], sot);
    t2.set_parse_special(true);
    out.clear();
    t2.encode("<start_of_turn>hi", true, &mut out).unwrap();
    assert_eq!(out, [2, sot, id("hi")]);
    // decoding: control tokens print nothing, user-defined ones their text
    assert_eq!(dec(&t, &[sot, id("hi"), 6, eot]), "hi<b>");
}

#[test]
fn longer_special_tokens_claim_first() {
    // "<x>" and "<x><y>" both user-defined: the longer one claims its occurrence first
    let mut v = vocab();
    v.push((b"<x>".to_vec(), 0.0, USER));
    v.push((b"<x><y>".to_vec(), 0.0, USER));
    v.push((b"y>".to_vec(), 0.0, USER));
    let n = v.len() as u32;
    let t = build(&kvs_of(&v, false)).unwrap();
    let (x, xy, y) = (n - 3, n - 2, n - 1);
    assert_eq!(enc(&t, "<x><y>", false, false), [xy]);
    assert_eq!(enc(&t, "<x><x><y>", false, false), [x, xy]);
    // with no longer token around, "<x>" and "y>" each claim their own bytes
    assert_eq!(enc(&t, "<x>y>", false, false), [x, y]);
}

#[test]
fn decode_pieces() {
    let t = tok(false);
    assert_eq!(t.decode_piece(None, id("\u{2581}hi")).unwrap(), b" hi");
    assert_eq!(t.decode_piece(Some(2), id("\u{2581}\u{2581}")).unwrap(), b"  ");
    assert_eq!(t.decode_piece(None, 2).unwrap(), b"");
    assert_eq!(t.decode_piece(None, 3).unwrap(), b"");
    assert_eq!(t.decode_piece(None, 6).unwrap(), b"<b>");
    let n = t.vocab_size() as u32;
    assert!(matches!(t.decode_piece(None, n), Err(TokenizerError::TokenOutOfRange { .. })));
    let mut out = Vec::new();
    assert!(t.decode(&[id("a"), n], &mut out).is_err());
}

/// Random strings over the vocabulary's alphabet: decode(encode(s)) == s, and the
/// result equals a direct O(n²) transcription of llama.cpp's merge loop.
#[test]
fn random_round_trips_match_reference_merge() {
    let t = tok(false);
    let v = vocab();
    let alphabet = ["a", "b", "c", "h", "i", " ", "é", "\n", "z", "€", "<b>", "<s", "u", "s", "e", "r", "m", "o", "d", "l"];
    let mut state = 0x1234_5678_9abc_def0u64;
    for _ in 0..300 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = (state % 24) as usize;
        let mut s = String::new();
        let mut r = state;
        for _ in 0..len {
            r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            s.push_str(alphabet[(r >> 33) as usize % alphabet.len()]);
        }
        let ids = enc(&t, &s, false, false);
        assert_eq!(dec(&t, &ids), s, "{s:?}");
        // reference: split at "<b>", then per fragment the quadratic merge loop
        let mut want = Vec::new();
        for (i, frag) in s.split("<b>").enumerate() {
            if i > 0 {
                want.push(6);
            }
            want.extend(reference_spm(&v, &frag.replace(' ', "\u{2581}")));
        }
        assert_eq!(ids, want, "{s:?}");
    }
}

/// llama.cpp's SPM merge, written plainly: repeatedly merge the best-scoring adjacent
/// pair (the leftmost among equals) whose concatenation is a piece.
fn reference_spm(v: &[(Vec<u8>, f32, i32)], text: &str) -> Vec<u32> {
    let find = |p: &[u8]| v.iter().position(|t| t.0 == p).map(|i| i as u32);
    let mut syms: Vec<Vec<u8>> = text.chars().map(|c| c.to_string().into_bytes()).collect();
    loop {
        let mut best: Option<(f32, usize)> = None;
        for i in 0..syms.len().saturating_sub(1) {
            let cat = [syms[i].clone(), syms[i + 1].clone()].concat();
            if let Some(id) = find(&cat) {
                let s = v[id as usize].1;
                if best.is_none_or(|(b, _)| s > b) {
                    best = Some((s, i));
                }
            }
        }
        let Some((_, i)) = best else { break };
        let right = syms.remove(i + 1);
        syms[i].extend(right);
    }
    let mut out = Vec::new();
    for s in syms {
        match find(&s) {
            Some(id) => out.push(id),
            None => out.extend(s.iter().map(|&b| byte(b))),
        }
    }
    out
}

// ---------------------------------------------------------------------------------
// Chat format

#[test]
fn gemma_chat_format() {
    assert_eq!(gemma_chat_prompt("hi"), "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n");
    let mut s = String::new();
    format_gemma_chat(
        &[(ChatRole::System, " Be brief. "), (ChatRole::User, " hi\n"), (ChatRole::Model, "hello"), (ChatRole::User, "bye")],
        true,
        &mut s,
    );
    assert_eq!(
        s,
        "<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\nhello<end_of_turn>\n\
         <start_of_turn>user\nbye<end_of_turn>\n<start_of_turn>model\n"
    );
    let mut s = String::new();
    format_gemma_chat(&[(ChatRole::User, "x")], false, &mut s);
    assert_eq!(s, "<start_of_turn>user\nx<end_of_turn>\n");
    // encoded with BOS and parse_special: the turn markers are single tokens
    let t = tok(false);
    assert_eq!(
        enc(&t, &gemma_chat_prompt("hi"), true, true),
        [2, 4, id("user"), id("\n"), id("hi"), 5, id("\n"), 4, id("model"), id("\n")]
    );
}

// ---------------------------------------------------------------------------------
// Bad metadata

fn with(kvs: &[(&'static str, Val)], key: &'static str, v: Option<Val>) -> Vec<(&'static str, Val)> {
    let mut out: Vec<_> = kvs.iter().filter(|(k, _)| *k != key).cloned().collect();
    if let Some(v) = v {
        out.push((key, v));
    }
    out
}

#[test]
fn inconsistent_metadata_is_refused() {
    let v = vocab();
    let n = v.len() as u64;
    let base = kvs_of(&v, false);
    let err = |kvs: &[(&str, Val)]| build(kvs).unwrap_err();
    assert_eq!(err(&with(&base, "tokenizer.ggml.tokens", None)), VocabError::MissingKey("tokenizer.ggml.tokens"));
    assert_eq!(err(&with(&base, "tokenizer.ggml.scores", None)), VocabError::MissingKey("tokenizer.ggml.scores"));
    assert_eq!(err(&with(&base, "tokenizer.ggml.model", None)), VocabError::MissingKey("tokenizer.ggml.model"));
    assert_eq!(
        err(&with(&base, "tokenizer.ggml.model", Some(Val::Str("gpt2".into())))),
        VocabError::WrongModel { found: "gpt2".into(), expected: "\"llama\" (SentencePiece)" }
    );
    assert!(matches!(err(&with(&base, "tokenizer.ggml.model", Some(Val::U32(1)))), VocabError::WrongType { .. }));
    // lengths
    let short_scores = Val::F32s(v.iter().skip(1).map(|t| t.1).collect());
    assert_eq!(
        err(&with(&base, "tokenizer.ggml.scores", Some(short_scores))),
        VocabError::LengthMismatch { key: "tokenizer.ggml.scores", len: n - 1, tokens: n }
    );
    let long_types = Val::I32s(v.iter().map(|t| t.2).chain([1]).collect());
    assert_eq!(
        err(&with(&base, "tokenizer.ggml.token_type", Some(long_types))),
        VocabError::LengthMismatch { key: "tokenizer.ggml.token_type", len: n + 1, tokens: n }
    );
    // element types
    let int_tokens = Val::I32s(vec![0; v.len()]);
    assert_eq!(
        err(&with(&base, "tokenizer.ggml.tokens", Some(int_tokens))),
        VocabError::WrongType { key: "tokenizer.ggml.tokens", found: ValueType::I32, expected: "array of strings" }
    );
    assert!(matches!(err(&with(&base, "tokenizer.ggml.scores", Some(Val::F32(0.0)))), VocabError::WrongType { .. }));
    let str_types = Val::ByteStrs(vec![b"x".to_vec(); v.len()]);
    assert!(matches!(err(&with(&base, "tokenizer.ggml.token_type", Some(str_types))), VocabError::WrongType { .. }));
    assert!(matches!(err(&with(&base, "tokenizer.ggml.add_bos_token", Some(Val::U32(1)))), VocabError::WrongType { .. }));
    // ids
    assert_eq!(
        err(&with(&base, "tokenizer.ggml.bos_token_id", Some(Val::U32(n as u32)))),
        VocabError::BadSpecialId { key: "tokenizer.ggml.bos_token_id", id: n, vocab_size: n as usize }
    );
    assert!(matches!(err(&with(&base, "tokenizer.ggml.eos_token_id", Some(Val::I32(-1)))), VocabError::WrongType { .. }));
    assert!(matches!(err(&with(&base, "tokenizer.ggml.eos_token_id", Some(Val::Str("1".into())))), VocabError::WrongType { .. }));
    // empty vocabulary
    let empty = kvs_of(&[], false);
    assert_eq!(err(&empty), VocabError::BadVocabSize { tokens: 0 });
    // non-finite score
    let mut bad = v.clone();
    bad[9].1 = f32::NAN;
    assert_eq!(err(&kvs_of(&bad, false)), VocabError::NonFiniteScore { token: 9 });
    // duplicate piece
    let mut dup = v.clone();
    dup.push((b"ab".to_vec(), 0.0, NORMAL));
    assert_eq!(err(&kvs_of(&dup, false)), VocabError::DuplicatePiece { first: id("ab"), second: v.len() as u32 });
    // a BYTE token not written <0xXX>
    let mut bb = v.clone();
    bb[byte(0x41) as usize].0 = b"<0xZZ>".to_vec();
    assert_eq!(err(&kvs_of(&bb, false)), VocabError::BadByteToken { token: byte(0x41) });
    // errors print
    assert!(VocabError::MissingKey("k").to_string().contains("k"));
}

#[test]
fn lenient_where_llama_cpp_is() {
    let v = vocab();
    let base = kvs_of(&v, false);
    // no token_type: every token NORMAL; byte fallback still finds <0xXX> by text
    let t = build(&with(&base, "tokenizer.ggml.token_type", None)).unwrap();
    assert_eq!(t.token_type(6).unwrap(), TokenType::Normal);
    assert_eq!(enc(&t, "z", false, false), [byte(b'z')]);
    // integer scores are accepted
    let iscores = Val::I32s(v.iter().map(|t| t.1 as i32).collect());
    assert!(build(&with(&base, "tokenizer.ggml.scores", Some(iscores))).is_ok());
    // defaults without the optional keys: bos 1, eos 2, add_bos, add_space_prefix
    let bare: Vec<_> = base.iter().filter(|(k, _)| !k.ends_with("_id") && !k.starts_with("tokenizer.ggml.add_")).cloned().collect();
    let t = build(&bare).unwrap();
    assert_eq!((t.bos(), t.eos(), t.unk()), (Some(1), Some(2), Some(0)));
    assert!(t.add_bos() && t.add_space_prefix() && !t.add_eos());
    // an empty piece is renamed as llama.cpp does, and a chat template is kept
    let mut e = v.clone();
    e.push((Vec::new(), 0.0, NORMAL));
    let k = with(&kvs_of(&e, false), "tokenizer.chat_template", Some(Val::Str("{{ x }}".into())));
    let t = build(&k).unwrap();
    assert_eq!(t.piece(v.len() as u32).unwrap(), format!("[EMPTY_{}]", v.len()).as_bytes());
    assert_eq!(t.chat_template(), Some("{{ x }}"));
    // add_eos_token: encode_llama appends EOS with add_special
    let t = build(&with(&base, "tokenizer.ggml.add_eos_token", Some(Val::Bool(true)))).unwrap();
    assert_eq!(enc(&t, "hi", true, false), [2, id("hi"), 1]);
}
