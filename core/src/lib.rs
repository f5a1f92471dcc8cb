//! lutra-core: low-bit GEMV by table lookup instead of multiply-add (T-MAC).
//!
//! A b-bit weight matrix is split into one-bit planes; every 4 activations become a
//! 16-entry table of signed sums; 4 bits of a weight plane index that table with a
//! byte shuffle (PSHUFB, NEON TBL, wasm `i8x16.swizzle`). See `kernels::lut` for the
//! numeric contract and `kernels::quant` for the packed layout.
//!
//! The scalar path is the specification: every SIMD path produces the same integer
//! accumulators bit for bit (`kernels::lut::gemv_integer`), and the same float outputs up to
//! the order of float additions.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "alloc")]
extern crate alloc;

mod aligned;
#[cfg(feature = "alloc")]
pub mod arch;
#[cfg(feature = "alloc")]
pub mod attention;
#[cfg(feature = "alloc")]
pub mod chat;
#[cfg(feature = "alloc")]
#[warn(missing_docs)]
pub mod engine;
pub(crate) mod error;
pub mod f16;
pub mod formats;
#[cfg(feature = "alloc")]
pub mod json;
pub mod kernels;
#[cfg(feature = "alloc")]
pub mod model;
pub mod pq;
pub mod rng;
pub mod sampler;
#[cfg(feature = "alloc")]
pub mod threads;
pub mod tokenizer;

pub use aligned::{blocks_as_bytes, blocks_as_bytes_mut, Block64};
#[cfg(feature = "alloc")]
pub use aligned::{AlignedBytes, Backing};
pub use error::Error;
pub use kernels::isa::Isa;
#[cfg(feature = "alloc")]
pub use kernels::lut::OwnedTables;
pub use kernels::lut::{
    gemm, gemm_chunk_tiles, gemm_tiles, gemm_tokens, gemm_with, gemv, gemv_integer, gemv_tiles, gemv_tiles_n, gemv_tiles_pair, Tables,
    TablesMut,
};
pub use kernels::quant::{Interleave, Layout, Offset, PackedMatrix, ScaleFormat, SubScale};

/// Rows per tile: the unit of work of every kernel and of thread splitting.
pub const TILE_ROWS: usize = 32;
