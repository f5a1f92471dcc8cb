//! Transformer models over the LUT kernels. Each forward pass reads top to bottom like
//! llama2.c's `run.c`: norm, qkv, rope, attention, output, residual, ffn.

pub mod budget;
pub(crate) mod hparams;
pub(crate) mod ops;
pub(crate) mod products;

use core::fmt;

use crate::kernels::lut::Tables;
use crate::{Error, PackedMatrix};

pub use crate::attention::{SingleThread, PREFILL_BATCH};

/// Why a model could not be built or run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// The GGUF file is malformed.
    Gguf(crate::formats::gguf::GgufError),
    /// A tensor the architecture needs is not in the file.
    MissingTensor(alloc::string::String),
    /// A metadata key the architecture needs is missing or has the wrong type.
    MissingMetadata(&'static str),
    /// A metadata value (or tensor) lutra does not implement, or that no model can have:
    /// running the file anyway would give wrong results, so it is refused.
    Unsupported { key: &'static str, value: alloc::string::String },
    /// A tensor of a type lutra cannot import (yet).
    UnsupportedTensorType { name: alloc::string::String, ggml_type: &'static str },
    /// A tensor whose shape does not fit the architecture.
    BadTensorShape { name: alloc::string::String, expected: [u64; 2], got: [u64; 2] },
    /// A file of another architecture.
    WrongArchitecture { expected: &'static str, found: alloc::string::String },
    /// A kernel or format error.
    Kernel(Error),
    /// The llama2.c checkpoint is malformed.
    Checkpoint(crate::formats::llama2c::Llama2cError),
    /// A token id outside the vocabulary.
    TokenOutOfRange { token: u32, vocab_size: usize },
    /// A position at or beyond the context length.
    ContextFull { pos: usize, context: usize },
    /// A dimension no supported group size divides.
    NoGroupFits { cols: usize },
    /// Bits per weight outside 1..=8.
    UnsupportedBits(u8),
    /// A KV cache made for another attention shape.
    CacheShape { expected: crate::attention::AttentionShape, got: crate::attention::AttentionShape },
    /// PQ codebooks that cannot be read or do not fit the model.
    Codebooks(crate::pq::PqError),
    /// A packed `.lutra` file that is damaged, truncated or of another format version.
    BadPackedFile(alloc::string::String),
    /// A `TensorSource` could not deliver bytes `start..end` of the file.
    Read { start: u64, end: u64, reason: alloc::string::String },
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Gguf(e) => write!(f, "{e}"),
            ModelError::BadPackedFile(why) => write!(f, "packed model file: {why}"),
            ModelError::Read { start, end, reason } => write!(f, "could not read bytes {start}..{end} of the model file: {reason}"),
            ModelError::MissingTensor(name) => write!(f, "tensor {name} is missing from the model file"),
            ModelError::MissingMetadata(key) => write!(f, "metadata key {key} is missing or has the wrong type"),
            ModelError::Unsupported { key, value } => write!(f, "{key} = {value} is not supported"),
            ModelError::UnsupportedTensorType { name, ggml_type } => {
                write!(f, "tensor {name} has type {ggml_type}, which lutra cannot import yet")
            }
            ModelError::BadTensorShape { name, expected, got } => {
                write!(f, "tensor {name} has shape {got:?}, expected {expected:?}")
            }
            ModelError::WrongArchitecture { expected, found } => write!(f, "the file holds a {found} model, not {expected}"),
            ModelError::Kernel(e) => write!(f, "{e}"),
            ModelError::Checkpoint(e) => write!(f, "{e}"),
            ModelError::TokenOutOfRange { token, vocab_size } => write!(f, "token {token} outside the vocabulary of {vocab_size}"),
            ModelError::ContextFull { pos, context } => write!(f, "position {pos} is beyond the context of {context} tokens"),
            ModelError::NoGroupFits { cols } => write!(f, "no group size of 32, 64, 128 or 256 divides {cols} columns"),
            ModelError::UnsupportedBits(b) => write!(f, "unsupported bits per weight {b} (supported: 1..=8)"),
            ModelError::CacheShape { expected, got } => write!(f, "KV cache made for {got:?}, the model needs {expected:?}"),
            ModelError::Codebooks(e) => write!(f, "{e}"),
        }
    }
}

impl core::error::Error for ModelError {}

impl From<Error> for ModelError {
    fn from(e: Error) -> Self {
        ModelError::Kernel(e)
    }
}

impl From<crate::pq::PqError> for ModelError {
    fn from(e: crate::pq::PqError) -> Self {
        ModelError::Codebooks(e)
    }
}

impl From<crate::formats::gguf::GgufError> for ModelError {
    fn from(e: crate::formats::gguf::GgufError) -> Self {
        ModelError::Gguf(e)
    }
}

impl From<crate::formats::llama2c::Llama2cError> for ModelError {
    fn from(e: crate::formats::llama2c::Llama2cError) -> Self {
        ModelError::Checkpoint(e)
    }
}

/// A `feed_batch` request run in pieces of up to `PREFILL_BATCH` tokens, `chunk(piece,
/// first position)` each, after checking it: every token in the vocabulary, every
/// position inside the context.
pub(crate) fn feed_in_batches(
    tokens: &[u32],
    first_pos: usize,
    context: usize,
    vocab_size: usize,
    mut chunk: impl FnMut(&[u32], usize) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    if let Some(&token) = tokens.iter().find(|&&t| t as usize >= vocab_size) {
        return Err(ModelError::TokenOutOfRange { token, vocab_size });
    }
    if first_pos.checked_add(tokens.len()).is_none_or(|end| end > context) {
        return Err(ModelError::ContextFull { pos: first_pos.max(context), context });
    }
    for (i, piece) in tokens.chunks(PREFILL_BATCH).enumerate() {
        chunk(piece, first_pos + i * PREFILL_BATCH)?;
    }
    Ok(())
}

/// How matrix-vector products and attention's pieces run: on the calling thread
/// (`SingleThread`), or split across a front-end's threads (`crate::threads::Split`).
pub trait Gemv {
    fn gemv<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error>;
    /// A batch of tokens' products, `ys` token-major: see `crate::gemm`.
    fn gemm<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: &[Tables<'_>], ys: &mut [f32]) -> Result<(), Error> {
        crate::gemm(m, tables, ys)
    }
    /// `y = m · x` over int8 codes (`crate::kernels::int8`).
    fn int8_gemv(
        &self,
        m: &crate::kernels::int8::Int8Matrix,
        x: &crate::kernels::int8::Int8Activations,
        y: &mut [f32],
    ) -> Result<(), Error> {
        crate::kernels::int8::gemv(m, x, y)
    }
    /// A batch of tokens' int8 products, `ys` token-major: each token's `int8_gemv`.
    fn int8_gemm(
        &self,
        m: &crate::kernels::int8::Int8Matrix,
        xs: &[crate::kernels::int8::Int8Activations],
        ys: &mut [f32],
    ) -> Result<(), Error> {
        if ys.len() != xs.len() * m.rows() {
            return Err(Error::BufferSize { what: "output rows × batch", expected: xs.len() * m.rows(), got: ys.len() });
        }
        xs.iter().zip(ys.chunks_exact_mut(m.rows().max(1))).try_for_each(|(x, y)| self.int8_gemv(m, x, y))
    }
    /// `job(item, i)` for every item of a batch (each token's tables or int8 activations,
    /// made from its own input): the calling thread unless overridden. Each call touches
    /// only its own item, so any split gives the same items.
    fn for_each_token<T: Send>(&self, items: &mut [T], job: &(dyn Fn(&mut T, usize) -> Result<(), Error> + Sync)) -> Result<(), Error> {
        items.iter_mut().enumerate().try_for_each(|(i, item)| job(item, i))
    }
    /// Who runs attention's pieces; the calling thread unless overridden.
    fn parallel(&self) -> &dyn crate::attention::Parallel {
        &SingleThread
    }
}

impl Gemv for SingleThread {
    fn gemv<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
        crate::gemv(m, tables, y)
    }
    /// Each token's `int8_gemv`, the weights read once for several tokens where the
    /// kernel can (`crate::kernels::int8::gemm_rows`).
    fn int8_gemm(
        &self,
        m: &crate::kernels::int8::Int8Matrix,
        xs: &[crate::kernels::int8::Int8Activations],
        ys: &mut [f32],
    ) -> Result<(), Error> {
        if ys.len() != xs.len() * m.rows() {
            return Err(Error::BufferSize { what: "output rows × batch", expected: xs.len() * m.rows(), got: ys.len() });
        }
        let mut per_token = ys.chunks_exact_mut(m.rows());
        crate::kernels::int8::gemm_rows(crate::Isa::best(), m, xs, 0..m.rows(), |_| per_token.next().unwrap_or_default())
    }
}

/// The largest group size (≤ `max`) that divides `cols`.
pub fn group_for(cols: usize, max: usize) -> Result<usize, ModelError> {
    [256, 128, 64, 32].into_iter().find(|&g| g <= max && cols.is_multiple_of(g)).ok_or(ModelError::NoGroupFits { cols })
}
