//! wasm-bindgen API over lutra-core (filled by a later issue).
