//! PQ codebook side files (`lutra calibrate` output) on any bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(books) = lutra_core::pq::Codebooks::from_gguf(data) {
        let _ = books.to_gguf();
    }
});
