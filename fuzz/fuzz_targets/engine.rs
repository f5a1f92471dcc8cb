//! The engine end to end on a tiny packed model (the `model` seeds' llama2.c one): the
//! first 5 bytes are sampler settings, the rest a prompt as text; load, encode, sample.
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use lutra_core::engine::Model;

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/seeds/model/tiny-llama2c.lutra");
        Model::from_gguf(&std::fs::read(path).expect("fuzz/seeds: run `cargo xtask fuzz`")).unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let (settings, prompt) = data.split_at(data.len().min(5));
    let sampler = lutra_fuzz::sampler(settings);
    let text = String::from_utf8_lossy(prompt);
    if let Ok(ids) = model().encode(&text, false) {
        lutra_fuzz::run(model(), &ids, sampler, 4);
    }
});
