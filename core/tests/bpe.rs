//! The GGUF byte-level BPE tokenizer (`lutra_core::tokenizer::bpe`) on small hand-built
//! vocabularies: merge order by rank with the leftmost tie rule, `ignore_merges`, special
//! tokens with and without `parse_special`, llama.cpp's attribute overrides, BOS/EOS,
//! decoding, the pre-tokenizers' word splits, and typed errors for hostile metadata.
//! (llama.cpp's own test suite on real vocabularies is `tests/tests/llama_vocab.rs`.)
#![cfg(feature = "alloc")]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod common;
use common::gguf_writer::{write_gguf, Meta};
use common::tiny_bpe::{bl, Vocab};

use lutra_core::formats::gguf::Gguf;
use lutra_core::tokenizer::bpe::{BpeTokenizer, PreTokenizer, VocabError};
use lutra_core::tokenizer::spm::TokenType;
use lutra_core::tokenizer::Tokenizer;

fn encode(t: &BpeTokenizer, text: &str, parse_special: bool) -> Vec<u32> {
    let mut out = Vec::new();
    t.encode_llama(text, false, parse_special, &mut out).unwrap();
    out
}

fn bytes_of(s: &str) -> Vec<u32> {
    s.bytes().map(u32::from).collect()
}

#[test]
fn merges_apply_by_rank_then_leftmost() {
    // "b c" outranks "a b": abc -> a bc -> abc
    let v = Vocab::new("gpt-2").merge("b", "c").merge("a", "b").merge("a", "bc");
    let t = v.load().unwrap();
    assert_eq!(encode(&t, "abc", false), [v.id(&bl("abc"))]);
    // "a b" first: ab c, and there is no "ab c"
    let v = Vocab::new("gpt-2").merge("a", "b").merge("b", "c").merge("a", "bc");
    let t = v.load().unwrap();
    assert_eq!(encode(&t, "abc", false), [v.id(&bl("ab")), u32::from(b'c')]);
    // equal ranks: the leftmost pair first
    let v = Vocab::new("gpt-2").merge("a", "a");
    let t = v.load().unwrap();
    assert_eq!(encode(&t, "aaa", false), [v.id(&bl("aa")), u32::from(b'a')]);
    assert_eq!(encode(&t, "aaaa", false), [v.id(&bl("aa")), v.id(&bl("aa"))]);
    // words are merged separately: " a" never merges with the "a" before it
    assert_eq!(encode(&t, "a a", false), bytes_of("a a"));
}

#[test]
fn a_repeated_merge_keeps_its_first_rank() {
    // "b c" at rank 0 and again at rank 2; "a b" at rank 1: b c wins
    let v = Vocab::new("gpt-2").merge("b", "c").merge("a", "b").merge("b", "c");
    let t = v.load().unwrap();
    assert_eq!(t.merge_count(), 2);
    assert_eq!(encode(&t, "abc", false), [u32::from(b'a'), v.id(&bl("bc"))]);
}

#[test]
fn llama3_takes_a_word_that_is_a_token_whole() {
    // "abc" is a token no merge reaches: llama-bpe (ignore_merges) takes it whole
    let v = Vocab::new("llama-bpe").token(&bl("abc"), TokenType::Normal).merge("x", "y");
    assert_eq!(encode(&v.load().unwrap(), "abc", false), [v.id(&bl("abc"))]);
    // dbrx has the same regex without ignore_merges
    let v = Vocab::new("dbrx").token(&bl("abc"), TokenType::Normal).merge("x", "y");
    assert_eq!(encode(&v.load().unwrap(), "abc", false), bytes_of("abc"));
}

#[test]
fn bytes_round_trip_through_the_byte_alphabet() {
    let t = Vocab::new("gpt-2").merge("x", "y").load().unwrap();
    let text = "caf\u{e9} \u{1f600}\t\n\r\u{0}\u{7f} \u{4e2d}";
    let ids = encode(&t, text, false);
    assert_eq!(ids, bytes_of(text));
    let mut out = Vec::new();
    t.decode(&ids, &mut out).unwrap();
    assert_eq!(out, text.as_bytes());
}

#[test]
fn special_tokens_with_and_without_parse_special() {
    let v = Vocab::new("gpt-2")
        .token("<|endoftext|>", TokenType::Control)
        .token("<tool>", TokenType::UserDefined)
        .token("<bad>", TokenType::Unknown)
        .merge("x", "y");
    let t = v.load().unwrap();
    let (eot, tool, bad) = (v.id("<|endoftext|>"), v.id("<tool>"), v.id("<bad>"));
    let text = "hi<|endoftext|><tool><bad>";
    // USER_DEFINED always; CONTROL and UNKNOWN only with parse_special
    let mut want = bytes_of("hi<|endoftext|>");
    want.push(tool);
    want.extend(bytes_of("<bad>"));
    assert_eq!(encode(&t, text, false), want);
    assert_eq!(encode(&t, text, true), [u32::from(b'h'), u32::from(b'i'), eot, tool, bad]);
    // Tokenizer::encode follows set_parse_special
    let mut t = t;
    let mut out = Vec::new();
    t.encode("<|endoftext|>", false, &mut out).unwrap();
    assert_eq!(out, bytes_of("<|endoftext|>"));
    t.set_parse_special(true);
    out.clear();
    t.encode("<|endoftext|>", false, &mut out).unwrap();
    assert_eq!(out, [eot]);
}

#[test]
fn longest_special_token_first() {
    let v = Vocab::new("gpt-2").token("<a>", TokenType::UserDefined).token("<a><b>", TokenType::UserDefined).merge("x", "y");
    let t = v.load().unwrap();
    assert_eq!(encode(&t, "<a><b><a>", false), [v.id("<a><b>"), v.id("<a>")]);
}

#[test]
fn end_of_generation_pieces_become_control_as_in_llama_cpp() {
    // typed NORMAL in the file, CONTROL by llama.cpp's text rules
    let v = Vocab::new("qwen2").token("<|im_end|>", TokenType::Normal).token("<|fim_prefix|>", TokenType::Normal).merge("x", "y");
    let t = v.load().unwrap();
    assert_eq!(encode(&t, "<|im_end|>", false), bytes_of("<|im_end|>"));
    assert_eq!(encode(&t, "<|im_end|><|fim_prefix|>", true), [v.id("<|im_end|>"), v.id("<|fim_prefix|>")]);
    let mut out = Vec::new();
    t.decode(&[v.id("<|im_end|>"), v.id("<|fim_prefix|>")], &mut out).unwrap();
    assert!(out.is_empty());
    assert_eq!(t.eot(), Some(v.id("<|im_end|>")));
    // a file that names its FIM prefix token: no text rule for FIM prefixes
    let v =
        Vocab::new("qwen2").token("<|fim_prefix|>", TokenType::Normal).merge("x", "y").kv("tokenizer.ggml.fim_pre_token_id", Meta::U32(0));
    let t = v.load().unwrap();
    assert_eq!(encode(&t, "<|fim_prefix|>", true), bytes_of("<|fim_prefix|>"));
}

#[test]
fn bos_and_eos_follow_the_pre_tokenizer_and_the_file() {
    let bos = Meta::U32(1);
    let eos = Meta::U32(2);
    // gpt-2: no BOS by default
    let t = Vocab::new("gpt-2").merge("x", "y").kv("tokenizer.ggml.bos_token_id", bos.clone()).load().unwrap();
    assert!(!t.add_bos());
    let mut out = Vec::new();
    t.encode_llama("a", true, false, &mut out).unwrap();
    assert_eq!(out, [u32::from(b'a')]);
    // llama-bpe: BOS by default; the file may add EOS
    let t = Vocab::new("llama-bpe")
        .merge("x", "y")
        .kv("tokenizer.ggml.bos_token_id", bos.clone())
        .kv("tokenizer.ggml.eos_token_id", eos.clone())
        .kv("tokenizer.ggml.add_eos_token", Meta::Bool(true))
        .load()
        .unwrap();
    assert!(t.add_bos() && t.add_eos());
    out.clear();
    t.encode_llama("a", true, false, &mut out).unwrap();
    assert_eq!(out, [1, u32::from(b'a'), 2]);
    out.clear();
    t.encode_llama("a", false, false, &mut out).unwrap();
    assert_eq!(out, [u32::from(b'a')]);
    // Tokenizer::encode: BOS as asked, never EOS; decode skips both
    out.clear();
    t.encode("a", true, &mut out).unwrap();
    assert_eq!(out, [1, u32::from(b'a')]);
    let mut text = Vec::new();
    t.decode(&[1, u32::from(b'a'), 2], &mut text).unwrap();
    assert_eq!(text, b"a");
    // the file overrides the default
    let t = Vocab::new("llama-bpe").merge("x", "y").kv("tokenizer.ggml.add_bos_token", Meta::Bool(false)).load().unwrap();
    assert!(!t.add_bos());
    // the default BOS of "gpt2" vocabularies is id 11
    assert_eq!(Vocab::new("gpt-2").merge("x", "y").load().unwrap().bos(), Some(11));
}

#[test]
fn decoding_by_token_type() {
    let v = Vocab::new("gpt-2")
        .token("<0x41>", TokenType::Byte)
        .token("<ctl>", TokenType::Control)
        .token("<usr>", TokenType::UserDefined)
        .token("<unused>", TokenType::Unused)
        .token("\u{20ac}", TokenType::Normal)
        .merge("x", "y");
    let t = v.load().unwrap();
    let piece = |id| t.decode_piece(None, id).unwrap().to_vec();
    assert_eq!(piece(v.id("<0x41>")), b"A");
    assert_eq!(piece(v.id("<ctl>")), b"");
    assert_eq!(piece(v.id("<usr>")), b"<usr>");
    assert_eq!(piece(v.id("<unused>")), b"");
    assert_eq!(piece(u32::from(b' ')), b" ");
    // a character outside the byte alphabet: llama.cpp's marker
    assert_eq!(piece(v.id("\u{20ac}")), "[UNK_BYTE_0xe282ac\u{20ac}]".as_bytes());
    assert!(t.decode_piece(None, 100_000).is_err());
}

#[test]
fn hostile_vocabularies_are_typed_errors() {
    let base = || Vocab::new("gpt-2").merge("x", "y");
    let mut v = base();
    v.merges = None;
    assert_eq!(v.load().unwrap_err(), VocabError::MissingKey("tokenizer.ggml.merges"));
    let mut v = base();
    v.merges = Some(Vec::new());
    assert_eq!(v.load().unwrap_err(), VocabError::NoMerges);
    // a merge naming a piece that is not a token, or joining to one that is not
    let mut v = base();
    v.merges.as_mut().unwrap().push("\u{4e2d} x".into());
    assert_eq!(v.load().unwrap_err(), VocabError::MergeUnknownPiece { index: 1 });
    let mut v = base();
    v.merges.as_mut().unwrap().push("q r".into());
    assert_eq!(v.load().unwrap_err(), VocabError::MergeUnknownPiece { index: 1 });
    // no separator
    let mut v = base();
    v.merges.as_mut().unwrap().insert(0, "xy".into());
    assert_eq!(v.load().unwrap_err(), VocabError::BadMerge { index: 0 });
    // not UTF-8: patch a marker merge in the file
    let mut v = base();
    v.merges.as_mut().unwrap().push("~MARK x".into());
    let mut bytes = v.bytes();
    let at = bytes.windows(5).position(|w| w == b"~MARK").unwrap();
    bytes[at] = 0xff;
    assert_eq!(BpeTokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap_err(), VocabError::BadMerge { index: 1 });
    // pre-tokenizers
    let mut v = base();
    v.pre = Some("no-such-pre");
    assert_eq!(v.load().unwrap_err(), VocabError::UnknownPre { name: "no-such-pre".into() });
    assert!(v.load().unwrap_err().to_string().contains("no-such-pre"));
    v.pre = Some("tekken");
    assert_eq!(v.load().unwrap_err(), VocabError::UnsupportedPre { name: "tekken".into() });
    v.pre = None; // llama.cpp's default regexes
    assert_eq!(v.load().unwrap().pre_tokenizer().0, PreTokenizer::Default);
    // other keys
    let v = base().token("a", TokenType::Normal);
    assert_eq!(v.load().unwrap_err(), VocabError::DuplicatePiece { first: 97, second: 257 });
    let v = base().kv("tokenizer.ggml.bos_token_id", Meta::U32(1_000_000));
    assert!(matches!(v.load().unwrap_err(), VocabError::BadSpecialId { .. }));
    let v = base().token("<0xZZ>", TokenType::Byte);
    assert!(matches!(v.load().unwrap_err(), VocabError::BadByteToken { .. }));
    let g_bytes = write_gguf(&[("tokenizer.ggml.model".into(), Meta::Str("llama".into()))], &[]);
    assert!(matches!(BpeTokenizer::from_gguf(&Gguf::parse(&g_bytes).unwrap()).unwrap_err(), VocabError::WrongModel { .. }));
    let g_bytes = write_gguf(&[("tokenizer.ggml.model".into(), Meta::Str("gpt2".into()))], &[]);
    assert_eq!(BpeTokenizer::from_gguf(&Gguf::parse(&g_bytes).unwrap()).unwrap_err(), VocabError::MissingKey("tokenizer.ggml.tokens"));
}

#[test]
fn huge_counts_are_refused_before_allocating() {
    // the merges array claims 2^40 entries in a file of a few kilobytes
    let v = Vocab::new("gpt-2").merge("x", "y");
    let mut bytes = v.bytes();
    let key = b"tokenizer.ggml.merges";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    // value type (array), element type (string), then the u64 count
    bytes[at + 8..at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    match Gguf::parse(&bytes) {
        Err(_) => {}
        Ok(g) => assert!(BpeTokenizer::from_gguf(&g).is_err()),
    }
}

#[test]
fn pre_tokenizer_words() {
    let split = |pre: &str, text: &str| PreTokenizer::from_name(pre).unwrap().split_str(text).join("|");
    // Llama 3: digits by three, case-insensitive contractions, newline runs kept with
    // the punctuation before them, one space left for the next word
    assert_eq!(split("llama-bpe", "Hello world 12345"), "Hello| world| |123|45");
    assert_eq!(split("llama-bpe", "I'M here"), "I|'M| here");
    assert_eq!(split("llama-bpe", "a \n\n b"), "a| \n\n| b");
    assert_eq!(split("llama-bpe", "x!!\n\ny"), "x|!!\n\n|y");
    assert_eq!(split("llama-bpe", "a  b  "), "a| | b|  ");
    assert_eq!(split("llama-bpe", "$x"), "$x");
    // GPT-2: contractions in lower case only, a space joins the run after it
    assert_eq!(split("gpt-2", "I'M here"), "I|'|M| here");
    assert_eq!(split("gpt-2", "x!!\n\ny"), "x|!!|\n|\n|y");
    assert_eq!(split("gpt-2", "it's 12345"), "it|'s| 12345");
    // Qwen 2: single digits; Qwen 3.5: marks go with letters
    assert_eq!(split("qwen2", "a12345"), "a|1|2|3|4|5");
    assert_eq!(split("qwen2", "e\u{301}x"), "e|\u{301}x");
    assert_eq!(split("qwen35", "e\u{301}x"), "e\u{301}x");
    // StarCoder: every number alone, then GPT-2's
    assert_eq!(split("starcoder", "ab12 c3"), "ab|1|2| c|3");
    // Falcon: punctuation runs first, then GPT-2's, then three digits at a time
    assert_eq!(split("falcon", "x 12345 $$a"), "x| |123|45| |$$|a");
    // DeepSeek LLM: newlines alone, trailing spaces, numbers apart
    assert_eq!(split("deepseek-llm", "Hello  world\n"), "Hello| | world|\n");
    assert_eq!(split("deepseek-llm", "a 12"), "a| |12");
    // DeepSeek Coder: letters with one space before (then CJK runs apart), each digit alone
    assert_eq!(split("deepseek-coder", "\u{4e2d}\u{6587}abc 12"), "\u{4e2d}\u{6587}|abc| |1|2");
    // no text, no words
    assert_eq!(split("llama-bpe", ""), "");
}

#[test]
fn long_inputs_stay_fast() {
    // one 100 kB word, and 100 kB of spaces: linear splitting, n log n merging
    let v = Vocab::new("llama-bpe").merge("a", "a").merge("aa", "aa");
    let t = v.load().unwrap();
    let word = "a".repeat(100_000);
    assert_eq!(encode(&t, &word, false), vec![v.id(&bl("aaaa")); 25_000]);
    let spaces = " ".repeat(100_000);
    assert_eq!(encode(&t, &spaces, false).len(), 100_000);
    let t = Vocab::new("deepseek-llm").merge("a", "a").load().unwrap();
    assert_eq!(encode(&t, &format!("x{spaces}y{spaces}"), false).len(), 200_002);
}
