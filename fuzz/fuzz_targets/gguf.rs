//! The GGUF reader on any bytes: a file that parses is used completely.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = lutra_core::formats::gguf::Gguf::parse(data) {
        lutra_fuzz::touch_gguf(&g);
    }
    // a prefix parsed on its own, as the browser reads headers
    let cut = data.len() / 2;
    if let Ok(g) = lutra_core::formats::gguf::Gguf::parse_prefix(&data[..cut], data.len() as u64) {
        lutra_fuzz::touch_gguf(&g);
    }
});
