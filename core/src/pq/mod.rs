//! NoMAD attention: a product-quantized key cache whose attention scores are table
//! lookups and integer adds (Zhang et al., NeurIPS'24).
//!
//! A key of `head_dim` values is split into `S` sub-spaces of `head_dim / S` values;
//! each is stored as the index of its nearest centroid (`K` = 16: a 4-bit code, or
//! `K` = 256: an 8-bit code). Per decode step, each query head builds one table per
//! sub-space, `LUT_s[i] = q_s · c_{s,i} / √head_dim`, quantized to `u8` with one scale
//! shared by every sub-space (`LUT_s[i] ≈ scale · u8 + bias_s`), so a key's score is
//! `scale · Σ_s u8_s[code_s] + Σ_s bias_s` and the sum is exact integer arithmetic.
//!
//! This module trains and stores the codebooks; the cache is `crate::attention::pq`, the
//! score scans `crate::kernels::pq_scan` (keys in blocks of `BLOCK_KEYS`, its byte layout).

#[cfg(feature = "alloc")]
pub mod codebook;
#[cfg(feature = "alloc")]
pub mod kmeans;

#[cfg(feature = "alloc")]
pub use codebook::{apply_matrix, Codebooks, PqError, PqShape, Rotation, TableScale};
