//! llama2.c `tokenizer.bin` files: the first two bytes say the vocabulary size; a file
//! that loads encodes and decodes text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lutra_core::tokenizer::{Llama2cTokenizer, Tokenizer};

fuzz_target!(|data: &[u8]| {
    let Some((n, file)) = data.split_first_chunk::<2>() else { return };
    let _ = lutra_core::tokenizer::TokenizerBin::parse(file);
    if let Ok(t) = Llama2cTokenizer::from_bytes(file, u16::from_le_bytes(*n) as usize) {
        let mut ids = Vec::new();
        if t.encode(" the ab\n€ \u{0}", true, &mut ids).is_ok() {
            assert!(ids.iter().all(|&id| (id as usize) < t.vocab_size()));
            let mut out = Vec::new();
            let _ = t.decode(&ids, &mut out);
        }
    }
});
