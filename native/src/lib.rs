//! lutra: low-bit LLM inference by table lookup — the std side: threads, benchmarks.
//!
//! The kernels live in `lutra-core` (re-exported as `lutra::core`).

pub use lutra_core as core;

pub mod baseline;
pub mod bench;
pub mod bench_attention;
pub mod calibrate;
pub mod generate;
#[cfg(feature = "llamacpp")]
pub mod ggml;
#[cfg(feature = "llamacpp")]
pub mod ggml_attention;
pub mod hugepage;
pub mod inspect;
pub mod linalg;
#[cfg(feature = "llamacpp")]
pub mod llamacpp_model;
pub mod parallel;
pub mod pool;
pub mod progress;
