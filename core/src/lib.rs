//! lutra-core: low-bit GEMV by table lookup instead of multiply-add (T-MAC).
//!
//! A b-bit weight matrix is split into one-bit planes; every 4 activations become a
//! 16-entry table of signed sums; 4 bits of a weight plane index that table with a
//! byte shuffle (PSHUFB, NEON TBL, wasm `i8x16.swizzle`). See `lut` for the numeric
//! contract and `quant` for the packed layout.
//!
//! The scalar path is the specification: every SIMD path produces the same integer
//! accumulators bit for bit (`lut::gemv_integer`), and the same float outputs up to
//! the order of float additions.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "alloc")]
extern crate alloc;

mod aligned;
#[cfg(feature = "alloc")]
pub mod arch;
#[cfg(feature = "alloc")]
pub mod bpe;
#[cfg(feature = "alloc")]
pub mod chat;
#[cfg(feature = "alloc")]
#[warn(missing_docs)]
pub mod engine;
mod error;
pub mod f16;
pub mod gguf;
#[cfg(feature = "alloc")]
pub mod int8;
pub mod isa;
pub mod llama2c;
pub mod lut;
#[cfg(feature = "alloc")]
pub mod model;
#[cfg(feature = "alloc")]
pub mod pack;
pub mod pq;
pub mod quant;
pub mod rng;
pub mod sampler;
#[cfg(feature = "alloc")]
pub mod spm;
#[cfg(feature = "alloc")]
pub mod threads;
pub mod tokenizer;
#[cfg(feature = "alloc")]
pub mod vocab;

pub use aligned::{blocks_as_bytes, blocks_as_bytes_mut, Block64};
#[cfg(feature = "alloc")]
pub use aligned::{AlignedBytes, Backing};
pub use error::Error;
pub use isa::Isa;
#[cfg(feature = "alloc")]
pub use lut::OwnedTables;
pub use lut::{
    gemm, gemm_chunk_tiles, gemm_tiles, gemm_tokens, gemm_with, gemv, gemv_integer, gemv_tiles, gemv_tiles_n, gemv_tiles_pair, Tables,
    TablesMut,
};
pub use quant::{Interleave, Layout, Offset, PackedMatrix, ScaleFormat};

/// Rows per tile: the unit of work of every kernel and of thread splitting.
pub const TILE_ROWS: usize = 32;
