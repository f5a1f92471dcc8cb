//! llama.cpp itself, in-process through `llama-cpp-sys-2` (feature `llamacpp`): the
//! reference that `lutra bench --llamacpp` and the Gemma golden data measure against.

pub mod attention;
pub mod blocks;
pub mod ggml;
pub mod model;
