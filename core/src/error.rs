//! The crate's error types: `Error` for kernels and layouts (no allocation), `ModelError`
//! for building and running models (file formats, architectures, sessions). They live at
//! the crate root, below every layer that returns them, so `formats` and `model` both
//! depend on this module and neither on the other.

use core::fmt;

/// Every way a lutra-core call can refuse its input. Nothing here panics on bad input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Bits per weight outside what the packed format supports (1..=8).
    UnsupportedBits(u8),
    /// Group size not one of 16, 32, 64, 128, 256.
    UnsupportedGroup(usize),
    /// The number of columns is not a multiple of the group size.
    ColsNotMultipleOfGroup { cols: usize, group: usize },
    /// Zero rows or columns, or a shape whose byte size overflows `usize`.
    BadShape { rows: usize, cols: usize },
    /// A zero point that does not fit in the code range.
    BadZeroPoint { zero: u8, bits: u8 },
    /// A buffer has the wrong length.
    BufferSize { what: &'static str, expected: usize, got: usize },
    /// A quantization block holds a non-finite scale.
    NonFiniteScale { row: usize, group: usize },
    /// Sub-block scale codes of a width other than 4, 6 or 8 bits.
    UnsupportedScaleCode(u8),
    /// A sub-block scale or minimum code outside its width, or a super-block whose groups
    /// disagree on their `d`.
    BadSubScale { row: usize, group: usize },
    /// A weight or activation is NaN or infinite.
    NonFiniteInput,
    /// The requested instruction set is not available on this CPU / build.
    IsaUnavailable(crate::Isa),
    /// The kernel reads another code order than the matrix was packed in.
    InterleaveMismatch { isa: crate::Isa, matrix: crate::Interleave },
    /// Tables were built for another group size or length than the matrix needs.
    TablesMismatch { tables_cols: usize, tables_group: usize, cols: usize, group: usize },
    /// A product-quantized key cache needs an even number of sub-spaces in 2..=256.
    BadSubspaces(usize),
    /// A block value format for a head size that is not a whole number of its blocks.
    ValueFormat { format: &'static str, head_dim: usize },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::UnsupportedBits(b) => write!(f, "unsupported bits per weight {b} (supported: 1..=8)"),
            Error::UnsupportedGroup(g) => write!(f, "unsupported group size {g} (supported: 16, 32, 64, 128, 256)"),
            Error::ColsNotMultipleOfGroup { cols, group } => {
                write!(f, "{cols} columns is not a multiple of the group size {group}")
            }
            Error::BadShape { rows, cols } => write!(f, "impossible matrix shape {rows}x{cols}"),
            Error::BadZeroPoint { zero, bits } => write!(f, "zero point {zero} out of range for {bits}-bit codes"),
            Error::BufferSize { what, expected, got } => {
                write!(f, "{what}: expected {expected} elements, got {got}")
            }
            Error::NonFiniteScale { row, group } => write!(f, "non-finite scale at row {row}, group {group}"),
            Error::UnsupportedScaleCode(b) => write!(f, "unsupported sub-block scale codes of {b} bits (supported: 4, 6, 8)"),
            Error::BadSubScale { row, group } => {
                write!(
                    f,
                    "sub-block scale code out of range, or a super-block scale that differs between groups, at row {row}, group {group}"
                )
            }
            Error::NonFiniteInput => write!(f, "input contains NaN or infinity"),
            Error::IsaUnavailable(isa) => write!(f, "instruction set {} is not available on this CPU", isa.name()),
            Error::InterleaveMismatch { isa, matrix } => {
                write!(f, "kernel {} cannot read a matrix packed in {matrix:?} order", isa.name())
            }
            Error::TablesMismatch { tables_cols, tables_group, cols, group } => {
                write!(f, "tables built for {tables_cols} columns / group {tables_group}, matrix has {cols} / {group}")
            }
            Error::BadSubspaces(s) => write!(f, "{s} sub-spaces: a PQ key cache needs an even number in 2..=256"),
            Error::ValueFormat { format, head_dim } => {
                write!(f, "{format} values need a head size that is a multiple of 32; this model's is {head_dim} (use f16 values)")
            }
        }
    }
}

impl core::error::Error for Error {}

#[cfg(feature = "alloc")]
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

#[cfg(feature = "alloc")]
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

#[cfg(feature = "alloc")]
impl core::error::Error for ModelError {}

#[cfg(feature = "alloc")]
impl From<Error> for ModelError {
    fn from(e: Error) -> Self {
        ModelError::Kernel(e)
    }
}

#[cfg(feature = "alloc")]
impl From<crate::pq::PqError> for ModelError {
    fn from(e: crate::pq::PqError) -> Self {
        ModelError::Codebooks(e)
    }
}

#[cfg(feature = "alloc")]
impl From<crate::formats::gguf::GgufError> for ModelError {
    fn from(e: crate::formats::gguf::GgufError) -> Self {
        ModelError::Gguf(e)
    }
}

#[cfg(feature = "alloc")]
impl From<crate::formats::llama2c::Llama2cError> for ModelError {
    fn from(e: crate::formats::llama2c::Llama2cError) -> Self {
        ModelError::Checkpoint(e)
    }
}
