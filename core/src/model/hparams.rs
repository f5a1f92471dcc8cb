//! Reading hyperparameters from GGUF metadata as llama.cpp reads them: a missing
//! optional key takes llama.cpp's default, a value lutra does not implement is
//! `ModelError::Unsupported` naming the key.

use alloc::string::ToString;

use super::ModelError;
use crate::formats::gguf::{Gguf, Value};

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
