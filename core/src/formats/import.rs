//! GGUF tensors (Q1_0, Q2_0, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, TQ1_0, TQ2_0) into lutra's packed matrices, without loss: each llama.cpp block type
//! maps to a bit-plane layout whose dequantization equals llama.cpp's bit for bit.
//! Float matrices (F32, F16, BF16) become their Q8_0 quantization, as `llama-quantize`
//! would make it.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::error::ModelError;
use core::ops::Range;

use crate::formats::gguf::{GgmlType, Gguf, GgufError, TensorInfo};
use crate::formats::pack;
use crate::formats::weights::info;
pub use crate::formats::weights::{InMemory, Lent, Matrix, TensorSource, Weights};
use crate::kernels::int8::{CodeForm, Int8Matrix};
use crate::kernels::quant::convert;
use crate::{Error, PackedMatrix, ScaleFormat};

/// `(rows, cols)` of a 2-D tensor (ggml's `ne1`, `ne0`), checked against `expected` when given.
fn shape(info: &TensorInfo<'_>, expected: Option<(usize, usize)>) -> Result<(usize, usize), ModelError> {
    let got = [info.dims[0], info.dims[1]];
    let bad = || ModelError::BadTensorShape {
        name: info.name.to_string(),
        expected: expected.map_or([0, 0], |(r, c)| [c as u64, r as u64]),
        got,
    };
    if info.n_dims != 2 || info.dims[2..].iter().any(|&d| d != 1) {
        return Err(bad());
    }
    let (rows, cols) = (usize::try_from(info.dims[1]).map_err(|_| bad())?, usize::try_from(info.dims[0]).map_err(|_| bad())?);
    if expected.is_some_and(|e| e != (rows, cols)) {
        return Err(bad());
    }
    Ok((rows, cols))
}

/// Rows per piece of a Q8_0 import.
const CHUNK_ROWS: usize = 4096;

/// Import matrix `name` (`rows × cols` = ggml `ne1 × ne0`) in the form its kernel reads:
/// Q8_0 keeps its int8 codes for the dot-product kernels (read 4096 rows at a time),
/// every other type becomes bit planes. `consumed` gets each piece's byte range within
/// the tensor's data once it is imported, so a caller can release those file pages early.
pub fn weights(
    g: &Gguf<'_>,
    source: &mut dyn TensorSource,
    name: &str,
    expected: Option<(usize, usize)>,
    mut consumed: impl FnMut(Range<usize>),
) -> Result<Weights, ModelError> {
    if pack::is_packed(g) {
        return pack::read_matrix(g, source, name, expected);
    }
    let info = info(g, name)?;
    let (rows, cols) = shape(&info, expected)?;
    if let Some(imported) = source.take_imported(name) {
        return imported;
    }
    let range = g.tensor_range(&info)?;
    if info.ggml_type == GgmlType::Q8_0 {
        let mut m = Int8Matrix::for_q8_0(rows, cols)?;
        let row_bytes = m.q8_0_row_bytes();
        for first in (0..rows).step_by(CHUNK_ROWS) {
            let piece = first * row_bytes..(first + CHUNK_ROWS.min(rows - first)) * row_bytes;
            m.set_q8_0_rows(first, source.read(range.start + piece.start as u64..range.start + piece.end as u64)?)?;
            consumed(piece);
        }
        return Ok(Weights::Int8(m));
    }
    if let Some(reader) = float_reader(info.ggml_type) {
        return float_as_q8_0(source, range, rows, cols, reader, consumed).map(Weights::Int8);
    }
    if info.ggml_type == GgmlType::Q5_0 && q5_0_as_int8() {
        let data = source.read(range)?;
        let m = Int8Matrix::from_q5_0(data, rows, cols)?;
        consumed(0..data.len());
        return Ok(Weights::Int8(m));
    }
    if lookup_import(info.ggml_type).is_none() {
        return Err(ModelError::UnsupportedTensorType { name: name.to_string(), ggml_type: info.ggml_type.name() });
    }
    lookup_matrix(info.ggml_type, source, range, rows, cols, RUN_BYTES, consumed).map(Weights::Lookup)
}

/// File bytes per run of rows a bit-plane import reads at a time: small beside any matrix,
/// large enough that a page reading a `Blob` makes few calls.
const RUN_BYTES: usize = 4 << 20;

/// A `rows × cols` matrix of llama.cpp blocks of type `t` (at `range` of `source`) as bit
/// planes, read and imported about `run_bytes` of the file at a time, so the tensor is
/// never whole in memory beside its imported form. `consumed` gets each run's byte range
/// within the tensor once it is imported. A type without a bit-plane import is refused.
pub fn lookup_matrix(
    t: GgmlType,
    source: &mut dyn TensorSource,
    range: Range<u64>,
    rows: usize,
    cols: usize,
    run_bytes: usize,
    mut consumed: impl FnMut(Range<usize>),
) -> Result<PackedMatrix<crate::AlignedBytes>, ModelError> {
    let Some((layout, import)) = lookup_import(t) else {
        return Err(ModelError::UnsupportedTensorType { name: String::new(), ggml_type: t.name() });
    };
    let wrong_size = |got| ModelError::from(Error::BufferSize { what: "tensor bytes for its rows", expected: rows, got });
    let tensor_bytes = usize::try_from(range.end - range.start).map_err(|_| wrong_size(usize::MAX))?;
    if rows == 0 || !tensor_bytes.is_multiple_of(rows) {
        return Err(wrong_size(tensor_bytes));
    }
    let row_bytes = tensor_bytes / rows;
    let run = convert::ChunkedImport::rows_per_run(row_bytes, run_bytes);
    let runs = || (0..rows).step_by(run).map(|first| (first, run.min(rows - first)));
    let bytes_of = |(first, n): (usize, usize)| first * row_bytes..(first + n) * row_bytes;
    let at = |piece: &Range<usize>| range.start + piece.start as u64..range.start + piece.end as u64;
    let mut layout = layout(rows, cols)?;
    // Q1_0's scales are f16 unless some run holds one whose double overflows f16: then the
    // import starts again with f32 scales (rare: weights past ±32752), so a file is read once
    'import: loop {
        let mut m = convert::ChunkedImport::new(layout, import);
        for r in runs() {
            let piece = bytes_of(r);
            let blocks = source.read(at(&piece))?;
            if t == GgmlType::Q1_0 && layout.scales() == ScaleFormat::F16 {
                let scales = convert::q1_0_layout_for(blocks, r.1, cols)?.scales();
                if scales != layout.scales() {
                    layout = layout.with_scales(scales)?;
                    continue 'import;
                }
            }
            m.push(blocks, r.1)?;
            consumed(piece);
        }
        return Ok(m.finish()?);
    }
}

/// The bit-plane layout of a `rows × cols` matrix of one GGUF type.
type LayoutFor = fn(usize, usize) -> Result<crate::Layout, Error>;

/// The bit-plane layout of a matrix of GGUF type `t`, and the import of its blocks.
fn lookup_import(t: GgmlType) -> Option<(LayoutFor, convert::ImportRows)> {
    Some(match t {
        GgmlType::Q4_0 => (convert::q4_0_layout, convert::import_q4_0_into),
        GgmlType::Q5_0 => (convert::q5_0_layout, convert::import_q5_0_into),
        GgmlType::Q4_1 => (convert::q4_1_layout, convert::import_q4_1_into),
        GgmlType::Q5_1 => (convert::q5_1_layout, convert::import_q5_1_into),
        GgmlType::Q5_K => (convert::q5_k_layout, convert::import_q5_k_into),
        GgmlType::Q4_K => (convert::q4_k_layout, convert::import_q4_k_into),
        GgmlType::Q6_K => (convert::q6_k_layout, convert::import_q6_k_into),
        GgmlType::Q2_K => (convert::q2_k_layout, convert::import_q2_k_into),
        GgmlType::Q3_K => (convert::q3_k_layout, convert::import_q3_k_into),
        GgmlType::TQ2_0 => (convert::tq2_0_layout, convert::import_tq2_0_into),
        GgmlType::TQ1_0 => (convert::tq2_0_layout, convert::import_tq1_0_into),
        // f16 steps; a file with weights past ±32752 takes f32 ones (`q1_0_layout_for`)
        GgmlType::Q1_0 => (convert::q1_0_layout, convert::import_q1_0_into),
        GgmlType::Q2_0 => (convert::q2_0_layout, convert::import_q2_0_into),
        GgmlType::Q8_0 => (convert::q8_0_layout, convert::import_q8_0_into),
        _ => return None,
    })
}

/// Whether Q5_0 matrices run as five-bit int8 codes (`int8::CodeForm::FiveBit`) rather
/// than as bit planes, chosen per kernel tier by measurement (BENCHMARKS.md, "Per-tensor
/// kernel choice"): on AVX2 the int8 kernel (several tokens per weight load) gives 1.29× /
/// 1.40× the prefill of bit planes on Gemma 3 / Qwen2.5 0.5B at equal decode speed, since
/// 5-bit lookups need a residual table pass; elsewhere the bit planes stay (the tiers
/// without a native five-bit kernel widen the codes block by block, 15× slower on SSSE3).
///
/// The one place where a tier changes the arithmetic, not only the speed: a file with Q5_0
/// matrices writes other text on the AVX2 tier than on the rest (ARCHITECTURE.md, "One
/// float order"). One form for every tier waits for five-bit multi-token int8 kernels on
/// SSE, NEON and simd128 (`bench/results/2026-12-07-ab-one-float-order-q5_0-planes-on-avx2.txt`,
/// `2026-12-07-q5_0-int8-everywhere.txt`).
pub fn q5_0_as_int8() -> bool {
    crate::Isa::best() == crate::Isa::Avx2
}

/// The form [`weights`] imports a matrix of a GGUF type to here.
enum ImportedForm {
    Int8(CodeForm),
    /// Bit planes, in the layout this function gives a `rows × cols` matrix.
    Lookup(LayoutFor),
}

fn imported_form(t: GgmlType) -> Option<ImportedForm> {
    Some(match t {
        GgmlType::Q8_0 | GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => ImportedForm::Int8(CodeForm::Bytes),
        GgmlType::Q5_0 if q5_0_as_int8() => ImportedForm::Int8(CodeForm::FiveBit),
        _ => ImportedForm::Lookup(lookup_import(t)?.0),
    })
}

/// Which kernel a matrix of type `t` runs on here (the tier `Isa::best()` names), as
/// [`weights`] imports it; `None` for a type it refuses.
pub fn matrix_kernel(t: GgmlType) -> Option<&'static str> {
    Some(match imported_form(t)? {
        ImportedForm::Int8(CodeForm::Bytes) if t == GgmlType::Q8_0 => "int8 dot products (int8 codes)",
        ImportedForm::Int8(CodeForm::Bytes) => "int8 dot products where 2-D (quantized to Q8_0)",
        ImportedForm::Int8(CodeForm::FiveBit) => "int8 dot products (5-bit codes)",
        ImportedForm::Lookup(_) => "table lookups (bit planes)",
    })
}

/// How to read one value of a float tensor type (F32, F16, BF16) from its bytes.
type FloatReader = (usize, fn(&[u8]) -> f32);

/// Bytes per value, and how to read one, for the float tensor types (F32, F16, BF16).
fn float_reader(t: GgmlType) -> Option<FloatReader> {
    match t {
        GgmlType::F32 => Some((4, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        GgmlType::F16 => Some((2, |b| crate::f16::f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]])))),
        GgmlType::BF16 => Some((2, |b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))),
        _ => None,
    }
}

/// A float matrix quantized to Q8_0 as `llama-quantize` does it (ggml's
/// `quantize_row_q8_0_ref`: scale amax/127 rounded to f16, codes `roundf(x · 127/amax)`
/// from the f32 scale), so an F32 file runs as its Q8_0 quantization would, on the int8
/// kernels. A block with a non-finite weight gets a NaN scale, which the import refuses.
fn float_as_q8_0(
    source: &mut dyn TensorSource,
    range: Range<u64>,
    rows: usize,
    cols: usize,
    (value_bytes, to_f32): FloatReader,
    mut consumed: impl FnMut(Range<usize>),
) -> Result<Int8Matrix, ModelError> {
    const BLOCK: usize = 32;
    let mut m = Int8Matrix::for_q8_0(rows, cols)?;
    let row_bytes = cols * value_bytes;
    let chunk = (1 << 20) / row_bytes.max(1) + 1;
    let mut blocks = Vec::with_capacity(chunk.min(rows) * m.q8_0_row_bytes());
    for first in (0..rows).step_by(chunk) {
        let piece = first * row_bytes..(first + chunk.min(rows - first)) * row_bytes;
        let data = source.read(range.start + piece.start as u64..range.start + piece.end as u64)?;
        blocks.clear();
        for values in data.chunks_exact(BLOCK * value_bytes) {
            let x: [f32; BLOCK] = core::array::from_fn(|j| to_f32(&values[j * value_bytes..]));
            let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let d = if x.iter().all(|v| v.is_finite()) { amax / 127.0 } else { f32::NAN };
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            blocks.extend_from_slice(&crate::f16::f32_to_f16_bits(d).to_le_bytes());
            blocks.extend(x.iter().map(|&v| libm::roundf(v * id) as i8 as u8));
        }
        m.set_q8_0_rows(first, &blocks)?;
        consumed(piece);
    }
    Ok(m)
}

/// Bytes a loaded model of GGUF `g` holds its tensors in, from the header alone: each
/// tensor in the form [`weights`] imports it to (a packed file's tensors as stored), or
/// its size in the file. What a caller compares with the memory it has before loading.
pub fn weight_bytes_needed(g: &Gguf<'_>) -> Result<u64, GgufError> {
    let packed = pack::is_packed(g);
    let mut total = 0u64;
    for t in g.tensors() {
        let in_file = t.byte_size()?;
        // a tensor stored as it is (or that the import will refuse) counts at its size in the file
        let held = if packed { None } else { imported_bytes(&t) };
        total = total.saturating_add(held.map_or(in_file, |b| b as u64));
    }
    Ok(total)
}

/// Bytes of the form [`weights`] imports 2-D matrix `t` to on this tier (codes and scales),
/// from its shape alone; `None` for a tensor it keeps as it is (1-D) or refuses.
pub fn imported_bytes(t: &TensorInfo<'_>) -> Option<usize> {
    if t.n_dims != 2 {
        return None;
    }
    let (rows, cols) = (usize::try_from(t.dims[1]).ok()?, usize::try_from(t.dims[0]).ok()?);
    match imported_form(t.ggml_type)? {
        ImportedForm::Int8(form) => Int8Matrix::bytes_for(form, rows, cols),
        ImportedForm::Lookup(layout) => layout(rows, cols).ok().map(|l| l.total_bytes()),
    }
}

/// Import F32 vector `name` of `len` values.
pub fn vector(g: &Gguf<'_>, source: &mut dyn TensorSource, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let info = info(g, name)?;
    if info.ggml_type != GgmlType::F32 {
        return Err(ModelError::UnsupportedTensorType { name: name.to_string(), ggml_type: info.ggml_type.name() });
    }
    if info.n_elements() != Some(len as u64) {
        return Err(ModelError::BadTensorShape { name: name.to_string(), expected: [len as u64, 1], got: [info.dims[0], info.dims[1]] });
    }
    let data = source.read(g.tensor_range(&info)?)?;
    if pack::is_packed(g) {
        pack::verify(g, name, data)?;
    }
    Ok(data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

/// A required `u32` metadata value.
pub fn meta_u32(g: &Gguf<'_>, key: &'static str) -> Result<usize, ModelError> {
    g.get_u32(key).map(|v| v as usize).ok_or(ModelError::MissingMetadata(key))
}

/// A required `f32` metadata value.
pub fn meta_f32(g: &Gguf<'_>, key: &'static str) -> Result<f32, ModelError> {
    g.get_f32(key).ok_or(ModelError::MissingMetadata(key))
}

/// Reported after each imported tensor, and after each chunk of a tensor imported in
/// chunks (`consumed` then holds the byte range of the tensor's data read so far).
pub struct Imported<'a> {
    pub done: usize,
    pub total: usize,
    /// The tensor just imported (or being imported).
    pub tensor: &'a str,
    /// `Some(bytes of the tensor's data)` for a chunk, `None` once the tensor is done.
    pub consumed: Option<core::ops::Range<usize>>,
}

pub(crate) struct Importer<'g, 'a, 's, F> {
    pub(crate) g: &'g Gguf<'a>,
    pub(crate) source: &'s mut dyn TensorSource,
    pub(crate) progress: F,
    pub(crate) done: usize,
    pub(crate) total: usize,
}

impl<F: FnMut(Imported<'_>)> Importer<'_, '_, '_, F> {
    pub(crate) fn report(&mut self, tensor: &str) {
        self.done += 1;
        (self.progress)(Imported { done: self.done, total: self.total, tensor, consumed: None });
    }
    pub(crate) fn matrix(&mut self, name: String, shape: (usize, usize)) -> Result<Weights, ModelError> {
        let (done, total, progress) = (self.done, self.total, &mut self.progress);
        let m = weights(self.g, self.source, &name, Some(shape), |range| {
            progress(Imported { done, total, tensor: &name, consumed: Some(range) });
        })?;
        self.report(&name);
        Ok(m)
    }
    pub(crate) fn vector(&mut self, name: String, len: usize) -> Result<Vec<f32>, ModelError> {
        let v = vector(self.g, self.source, &name, len)?;
        self.report(&name);
        Ok(v)
    }
}
