//! The engine's weights as the kernels read them ([`Weights`]), and where their bytes
//! come from ([`TensorSource`]: a file in memory, a lent mapping, or a reader of pieces).
//! Both importing a GGUF file (`import`) and reading a packed one (`pack`) produce these.

use alloc::string::ToString;
use alloc::vec::Vec;
use core::ops::Range;

use crate::error::ModelError;
use crate::formats::gguf::{Gguf, GgufError, TensorInfo};
use crate::kernels::int8::Int8Matrix;
use crate::{AlignedBytes, Error, PackedMatrix};

pub type Matrix = PackedMatrix<AlignedBytes>;

/// An imported weight matrix, in the form its kernel reads: bit planes for the lookup
/// kernels, or (Q8_0) int8 codes for the int8 dot-product kernels (`crate::kernels::int8`).
#[derive(Clone, Debug)]
pub enum Weights {
    Lookup(Matrix),
    Int8(Int8Matrix),
}

impl Weights {
    /// Its buffers, to move (`AlignedBytes::gather`), appended to `out`.
    pub(crate) fn buffers_mut<'a>(&'a mut self, out: &mut Vec<&'a mut AlignedBytes>) {
        match self {
            Weights::Lookup(m) => out.push(m.data_mut()),
            Weights::Int8(m) => out.extend(m.buffers_mut()),
        }
    }

    pub fn rows(&self) -> usize {
        match self {
            Weights::Lookup(m) => m.layout().rows(),
            Weights::Int8(m) => m.rows(),
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Weights::Lookup(m) => m.layout().cols(),
            Weights::Int8(m) => m.cols(),
        }
    }

    /// Bytes the kernels read.
    pub fn bytes(&self) -> usize {
        match self {
            Weights::Lookup(m) => m.as_bytes().len(),
            Weights::Int8(m) => m.bytes(),
        }
    }

    /// Row `row` as f32, equal to llama.cpp's dequantization of the file's row.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) -> Result<(), Error> {
        match self {
            Weights::Lookup(m) => m.dequantize_row(row, out),
            Weights::Int8(m) => m.dequantize_row(row, out),
        }
    }
}

/// Tensor `name`'s directory entry, or `MissingTensor`.
pub(crate) fn info<'a>(g: &Gguf<'a>, name: &str) -> Result<TensorInfo<'a>, ModelError> {
    g.tensor(name).ok_or_else(|| ModelError::MissingTensor(name.to_string()))
}

/// Where an import reads tensor bytes: the parsed file itself ([`InMemory`]), or a
/// reader that fetches ranges on demand (the browser reads them from a `Blob`, so the
/// whole file is never in wasm memory next to the imported weights).
pub trait TensorSource {
    /// File bytes `range` (absolute offsets, inside the file as `Gguf::tensor_range`
    /// checked), valid until the next call.
    fn read(&mut self, range: Range<u64>) -> Result<&[u8], ModelError>;

    /// Bytes `range` lent for as long as a model lives (a mapped file), so a packed
    /// `.lutra` matrix is read in place; `None` (the default) copies them from `read`.
    fn share(&mut self, range: Range<u64>) -> Option<AlignedBytes> {
        let _ = range;
        None
    }

    /// Matrix `name` as a loader imported it ahead of time (on several threads, before the
    /// architecture asks for it), handed over once: what [`weights`](crate::formats::import::weights)
    /// would have returned for it. `None` (the default) imports it now.
    fn take_imported(&mut self, name: &str) -> Option<Result<Weights, ModelError>> {
        let _ = name;
        None
    }
}

/// A whole file in memory (or mapped).
pub struct InMemory<'a>(pub &'a [u8]);

impl TensorSource for InMemory<'_> {
    fn read(&mut self, range: Range<u64>) -> Result<&[u8], ModelError> {
        file_range(self.0, range)
    }
}

fn file_range(file: &[u8], range: Range<u64>) -> Result<&[u8], ModelError> {
    let past_end = GgufError::TensorPastEnd { start: range.start, end: range.end, file_len: file.len() as u64 };
    let start = usize::try_from(range.start).map_err(|_| past_end)?;
    let end = usize::try_from(range.end).map_err(|_| past_end)?;
    Ok(file.get(start..end).ok_or(past_end)?)
}

/// Bytes that outlive the model (a mapped file, a `static` image on bare metal): a
/// packed file's tensors are lent in place, never copied.
pub struct Lent(pub alloc::sync::Arc<dyn crate::Backing>);

impl TensorSource for Lent {
    fn read(&mut self, range: Range<u64>) -> Result<&[u8], ModelError> {
        file_range(self.0.bytes(), range)
    }
    fn share(&mut self, range: Range<u64>) -> Option<AlignedBytes> {
        let range = usize::try_from(range.start).ok()?..usize::try_from(range.end).ok()?;
        AlignedBytes::shared(self.0.clone(), range)
    }
}
