//! lutra in the browser: the engine (`lutra_core::engine`) behind wasm-bindgen, for the
//! page in `www/` (which runs it in a Web Worker), on the simd128 lookup kernels.
//! Single-threaded, except in the threaded build (`+atomics`, shared memory: see
//! the `threads` module), where the page may start a pool of Web Workers.
//!
//! A model file reaches wasm memory through a [`ModelFile`] filled chunk by chunk from a
//! stream (never one giant JS `ArrayBuffer` copied in); an [`Engine`] imports it, drops
//! the file's bytes, and generates token by token (`next_token`), so the worker can
//! yield between tokens and a Stop takes effect before the next one.
//!
//! The crate also builds on the host (wasm-bindgen's macros are inert there), so
//! `cargo build --workspace` and the host tests cover it.
//!
//! Modules by concern: [`engine`] (the `Engine` binding: load, chat, generate), [`source`]
//! (model bytes from JS: whole files in chunks, or pieces read on demand), [`pool`] (the
//! page's threads as the engine's `Workers`; the atomics implementation in `threads`),
//! [`selfcheck`] (kernel self-check and attention timings for the page's tests and
//! benches).

use lutra_core::formats::gguf::is_gguf;
use lutra_core::sampler::SamplerConfig;
use wasm_bindgen::prelude::*;

pub mod engine;
pub mod pool;
pub mod selfcheck;
pub mod source;
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
pub mod threads;

pub use engine::Engine;
pub use source::ModelFile;

/// Whether a file's first bytes are GGUF's magic (`lutra_core::formats::gguf::is_gguf`): how the
/// page tells a GGUF picked from disk without its extension from a llama2.c checkpoint.
#[wasm_bindgen(js_name = is_gguf)]
pub fn starts_as_gguf(bytes: &[u8]) -> bool {
    is_gguf(bytes)
}

/// The engine's sampler defaults ([`SamplerConfig::default`]) for the page's form, as a
/// plain object the worker can post: `{ temperature, top_k, top_p, min_p, repeat_penalty,
/// repeat_last_n }`. No seed: the page picks its own.
#[wasm_bindgen]
pub fn sampler_defaults() -> Result<js_sys::Object, JsValue> {
    let object = js_sys::Object::new();
    for (name, value) in sampler_default_fields() {
        js_sys::Reflect::set(&object, &name.into(), &value.into())?;
    }
    Ok(object)
}

/// [`sampler_defaults`]' fields. An f32 goes out as the f64 of its shortest decimal form
/// (0.8, not 0.800000011920929): what the form shows, and it rounds back to the same f32.
fn sampler_default_fields() -> [(&'static str, f64); 6] {
    let d = SamplerConfig::default();
    let decimal = |v: f32| v.to_string().parse().unwrap_or(f64::from(v));
    [
        ("temperature", decimal(d.temperature)),
        ("top_k", d.top_k as f64),
        ("top_p", decimal(d.top_p)),
        ("min_p", decimal(d.min_p)),
        ("repeat_penalty", decimal(d.repeat_penalty)),
        ("repeat_last_n", d.repeat_last_n as f64),
    ]
}

/// Bytes of this module's linear memory (it grows and never shrinks: its peak).
#[wasm_bindgen]
pub fn memory_bytes() -> f64 {
    #[cfg(target_arch = "wasm32")]
    return (core::arch::wasm32::memory_size(0) * 65536) as f64;
    #[cfg(not(target_arch = "wasm32"))]
    0.0
}

/// A JS error carrying `e`'s message.
pub(crate) fn js(e: impl core::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

#[cfg(test)]
mod tests {
    /// The page's form gets `SamplerConfig::default()`: each field as written in decimal,
    /// and the same f32 once the page passes it back to `start`.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn sampler_defaults_are_the_engine_defaults() {
        let d = lutra_core::sampler::SamplerConfig::default();
        let fields = super::sampler_default_fields();
        let got = |name: &str| fields.iter().find(|f| f.0 == name).unwrap_or_else(|| panic!("{name}")).1;
        assert_eq!(got("temperature") as f32, d.temperature);
        assert_eq!(got("top_k") as usize, d.top_k);
        assert_eq!(got("top_p") as f32, d.top_p);
        assert_eq!(got("min_p") as f32, d.min_p);
        assert_eq!(got("repeat_penalty") as f32, d.repeat_penalty);
        assert_eq!(got("repeat_last_n") as usize, d.repeat_last_n);
        // the shortest decimal, not the f32's exact binary value
        assert_eq!(got("temperature").to_string(), d.temperature.to_string());
        assert_eq!(got("top_p").to_string(), d.top_p.to_string());
    }
}
