//! Model files: reading them, and writing the one format lutra writes.
//!
//! * [`gguf`]: llama.cpp's GGUF container (header, metadata, tensor directory), read in place.
//! * [`import`]: GGUF tensors into the engine's weights (bit planes, int8 codes, f32).
//! * [`weights`]: the engine's weights as the kernels read them, and the sources of their bytes.
//! * [`pack`]: lutra's `.lutra` files (a GGUF whose tensors are already bit planes), written
//!   and read.
//! * [`llama2c`]: llama2.c's checkpoints (`model.bin`).

pub mod gguf;
#[cfg(feature = "alloc")]
pub mod import;
pub mod llama2c;
#[cfg(feature = "alloc")]
pub mod pack;
#[cfg(feature = "alloc")]
pub mod weights;
