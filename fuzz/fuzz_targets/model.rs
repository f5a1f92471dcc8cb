//! GGUF → model import (Gemma 3, every tensor type it reads, packed `.lutra` files of
//! either architecture), then a few greedy tokens of whatever imported.
#![no_main]
use libfuzzer_sys::fuzz_target;
use lutra_core::engine::{Model, SamplerConfig};

fuzz_target!(|data: &[u8]| {
    if let Ok(model) = Model::from_gguf(data) {
        lutra_fuzz::run(&model, &[3, 4], SamplerConfig::greedy(), 2);
    }
});
