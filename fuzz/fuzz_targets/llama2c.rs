//! A llama2.c checkpoint and tokenizer, quantized to 1–8 bits and run: the first byte
//! picks the bits, the next four the checkpoint's length, the rest is the tokenizer.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lutra_core::engine::{Model, SamplerConfig};

fuzz_target!(|data: &[u8]| {
    let Some((&bits, rest)) = data.split_first() else { return };
    let Some((len, rest)) = rest.split_first_chunk::<4>() else { return };
    let len = (u32::from_le_bytes(*len) as usize).min(rest.len());
    let (checkpoint, tokenizer) = rest.split_at(len);
    if let Ok(c) = lutra_core::formats::llama2c::Checkpoint::parse(checkpoint) {
        let _ = c.config();
    }
    if let Ok(model) = Model::from_llama2c(checkpoint, tokenizer, 1 + bits % 8) {
        lutra_fuzz::run(&model, &[5, 6, 7], SamplerConfig::greedy(), 2);
    }
});
