//! A transformer's sizes ([`Hparams`]), and reading hyperparameters from GGUF metadata
//! as llama.cpp reads them: a missing optional key takes llama.cpp's default, a value
//! lutra does not implement is `ModelError::Unsupported` naming the key.

use alloc::string::ToString;

use super::ModelError;
use crate::formats::gguf::{Gguf, Value};

/// A transformer's sizes, one struct for every architecture: held by each one's
/// configuration (`LlamaFamilyConfig`, `Gemma3Config`), by [`budget::Dims`](super::budget::Dims)
/// and by [`ModelInfo`](crate::engine::ModelInfo), named as `ModelInfo` names them.
/// `const`-constructible, so a build for a fixed heap sizes its arena from one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hparams {
    /// Width of the residual stream (embedding length).
    pub dim: usize,
    /// Width of the feed-forward layers.
    pub hidden_dim: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (fewer than `heads` with grouped-query attention).
    pub kv_heads: usize,
    /// Dimensions per head.
    pub head_dim: usize,
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// The longest context the model was trained for.
    pub context_length: usize,
}

impl Hparams {
    /// Width of all query heads.
    pub const fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of all key (or value) heads.
    pub const fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Query heads per key/value head.
    pub const fn group(&self) -> usize {
        self.heads / self.kv_heads
    }
}

/// `Ok(None)` if `key` is absent, its value if `read` takes it; a per-layer array (which
/// llama.cpp takes for some keys) is refused, any other type is the wrong one.
pub(crate) fn optional<'a, T>(g: &Gguf<'a>, key: &'static str, read: impl Fn(&Value<'a>) -> Option<T>) -> Result<Option<T>, ModelError> {
    match g.get(key) {
        None => Ok(None),
        Some(v @ Value::Array(_)) => Err(unsupported(key, v)),
        Some(v) => read(&v).map(Some).ok_or(ModelError::MissingMetadata(key)),
    }
}

pub(crate) fn required<'a, T>(g: &Gguf<'a>, key: &'static str, read: impl Fn(&Value<'a>) -> Option<T>) -> Result<T, ModelError> {
    optional(g, key, read)?.ok_or(ModelError::MissingMetadata(key))
}

pub(crate) fn unsupported(key: &'static str, value: impl core::fmt::Display) -> ModelError {
    ModelError::Unsupported { key, value: value.to_string() }
}

/// A RoPE base, 10 000 if absent (llama.cpp's default for both keys).
pub(crate) fn rope_base(g: &Gguf<'_>, key: &'static str) -> Result<f32, ModelError> {
    match optional(g, key, Value::as_f32)?.unwrap_or(10_000.0) {
        base if base.is_finite() && base > 0.0 => Ok(base),
        base => Err(unsupported(key, base)),
    }
}

/// 1/factor of linear RoPE scaling: `factor_key` (`ARCH.rope.scaling.factor`), else the
/// older `scale_linear_key`; 1 when both are absent or 0 (llama.cpp's "unset").
pub(crate) fn linear_rope_scale(g: &Gguf<'_>, factor_key: &'static str, scale_linear_key: &'static str) -> Result<f32, ModelError> {
    let (key, factor) = match optional(g, factor_key, Value::as_f32)? {
        Some(f) => (factor_key, f),
        None => (scale_linear_key, optional(g, scale_linear_key, Value::as_f32)?.unwrap_or(0.0)),
    };
    match factor {
        0.0 => Ok(1.0),
        f if f.is_finite() && f > 0.0 => Ok(1.0 / f),
        f => Err(unsupported(key, f)),
    }
}
