//! llama.cpp itself, in-process through `llama-cpp-sys-2` (feature `llamacpp`): the
//! reference that `lutra bench --llamacpp` and the Gemma golden data measure against.

/// The raw bindings, for examples and tests that call llama.cpp directly.
pub use llama_cpp_sys_2 as sys;

pub mod attention;
pub mod blocks;
pub mod ggml;
pub mod model;
