//! GGUF tokenizer metadata on any bytes: a file whose vocabulary builds (SentencePiece
//! or byte-level BPE) tokenizes a fixed set of texts, with and without special tokens,
//! to ids inside the vocabulary that decode again.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lutra_core::formats::gguf::Gguf;
use lutra_core::tokenizer::bpe::BpeTokenizer;
use lutra_core::tokenizer::spm::SpmTokenizer;
use lutra_core::tokenizer::Tokenizer;

const TEXTS: &[&str] = &["Hello world", " 123  4567\n\n\tend", "<|endoftext|><s>é😀 ab'll", ""];

fn exercise(t: &dyn Tokenizer, encode: impl Fn(&str, bool, &mut Vec<u32>) -> bool) {
    for text in TEXTS {
        for parse_special in [false, true] {
            let mut ids = Vec::new();
            if encode(text, parse_special, &mut ids) {
                assert!(ids.iter().all(|&id| (id as usize) < t.vocab_size()), "id past the vocabulary");
                let mut back = Vec::new();
                t.decode(&ids, &mut back).expect("ids in range decode");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data) else { return };
    if let Ok(t) = SpmTokenizer::from_gguf(&g) {
        exercise(&t, |s, p, out| t.encode_llama(s, true, p, out).is_ok());
    }
    if let Ok(t) = BpeTokenizer::from_gguf(&g) {
        exercise(&t, |s, p, out| t.encode_llama(s, true, p, out).is_ok());
    }
});
