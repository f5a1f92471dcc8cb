//! The value half of every cache: rows in f16 or llama.cpp's q8_0 / q4_0 blocks, and the
//! softmax · V sum over them.

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use super::*;

/// How a value cache stores each row of `head_dim` values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ValueFormat {
    /// IEEE half precision, 2 bytes a value.
    #[default]
    F16,
    /// llama.cpp's q8_0: blocks of 32 int8 codes and an f16 scale, 1.06 bytes a value.
    Q8_0,
    /// llama.cpp's q4_0: blocks of 32 4-bit codes and an f16 scale, 0.56 bytes a value.
    Q4_0,
}

impl ValueFormat {
    pub const ALL: [ValueFormat; 3] = [ValueFormat::F16, ValueFormat::Q8_0, ValueFormat::Q4_0];

    /// The name llama.cpp's `--cache-type-v` gives it: "f16", "q8_0", "q4_0".
    pub fn name(self) -> &'static str {
        match self {
            ValueFormat::F16 => "f16",
            ValueFormat::Q8_0 => "q8_0",
            ValueFormat::Q4_0 => "q4_0",
        }
    }

    pub fn from_name(name: &str) -> Option<ValueFormat> {
        ValueFormat::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether rows of `head_dim` values can be stored this way: the block formats need
    /// whole blocks of 32.
    pub fn check(self, head_dim: usize) -> Result<(), Error> {
        match self {
            ValueFormat::F16 => Ok(()),
            _ if head_dim.is_multiple_of(VALUE_BLOCK) => Ok(()),
            format => Err(Error::ValueFormat { format: format.name(), head_dim }),
        }
    }

    /// Code bytes of one row (block formats).
    pub(super) fn code_bytes(self, head_dim: usize) -> usize {
        match self {
            ValueFormat::F16 => 0,
            ValueFormat::Q8_0 => head_dim,
            ValueFormat::Q4_0 => head_dim / 2,
        }
    }
}

/// The values (in a `ValueFormat`) and the softmax · V half of attention, shared by every
/// key cache.
pub struct ValueCache {
    shape: AttentionShape,
    rows: LayerRows,
    format: ValueFormat,
    /// F16: the values, `[layer][kv_head][row][head_dim]`.
    halves: Vec<u16>,
    /// Block formats: each row's codes, in the same row order.
    codes: Vec<u8>,
    /// Block formats: each row's `head_dim / 32` f16 scales.
    scales: Vec<u16>,
}

impl ValueCache {
    pub fn new(shape: AttentionShape) -> ValueCache {
        ValueCache::with_windows(shape, &[])
    }

    /// Layers with `windows[l] > 0` keep a ring of that many positions.
    pub fn with_windows(shape: AttentionShape, windows: &[usize]) -> ValueCache {
        ValueCache::checked(shape, windows, ValueFormat::F16)
    }

    /// As `with_windows`, storing values as `format`; refuses a block format for a
    /// head_dim that is not a multiple of 32.
    pub fn with_format(shape: AttentionShape, windows: &[usize], format: ValueFormat) -> Result<ValueCache, Error> {
        format.check(shape.head_dim)?;
        Ok(ValueCache::checked(shape, windows, format))
    }

    /// `with_format` for a `format` already checked against `shape.head_dim`.
    pub(crate) fn checked(shape: AttentionShape, windows: &[usize], format: ValueFormat) -> ValueCache {
        let rows = LayerRows::new(shape.layers, shape.context, windows);
        let n = rows.total() * shape.kv_heads;
        let (halves, codes, scales) = match format {
            ValueFormat::F16 => (n * shape.head_dim, 0, 0),
            _ => (0, n * format.code_bytes(shape.head_dim), n * (shape.head_dim / VALUE_BLOCK)),
        };
        ValueCache { shape, rows, format, halves: vec![0; halves], codes: vec![0; codes], scales: vec![0; scales] }
    }

    pub fn bytes(&self) -> usize {
        2 * self.halves.len() + self.codes.len() + 2 * self.scales.len()
    }

    pub fn format(&self) -> ValueFormat {
        self.format
    }

    /// The rows layout (shared with keys kept the same way).
    pub(crate) fn rows(&self) -> &LayerRows {
        &self.rows
    }

    pub fn store(&mut self, layer: usize, pos: usize, v: &[f32]) {
        let (shape, format) = (self.shape, self.format);
        let quantize = match format {
            ValueFormat::F16 => return self.rows.store(&shape, &mut self.halves, layer, pos, v, kernels::f16_row),
            ValueFormat::Q8_0 => kernels::quantize_q8_0,
            ValueFormat::Q4_0 => kernels::quantize_q4_0,
        };
        let (hd, row) = (shape.head_dim, pos % self.rows.cap(layer));
        let (code_bytes, blocks) = (format.code_bytes(hd), hd / VALUE_BLOCK);
        for (kv_head, x) in v.chunks_exact(hd).enumerate().take(shape.kv_heads) {
            let at = self.rows.index(&shape, layer, kv_head, row);
            let codes = self.codes[at * code_bytes..][..code_bytes].chunks_exact_mut(code_bytes / blocks);
            let scales = &mut self.scales[at * blocks..][..blocks];
            for ((x, codes), scale) in x.chunks_exact(VALUE_BLOCK).zip(codes).zip(scales) {
                quantize(x.try_into().expect("chunks of VALUE_BLOCK"), codes, scale);
            }
        }
    }

    /// Value rows `rows` of `kv_head` in `layer` (rows of one span, counted from the
    /// layer's first), as the value-sum kernels read them.
    ///
    /// # Panics
    /// If `layer`, `kv_head` or `rows` lie outside the cache.
    pub fn value_rows(&self, layer: usize, kv_head: usize, rows: Range<usize>) -> ValueRows<'_> {
        let (hd, count) = (self.shape.head_dim, rows.len());
        let at = self.rows.index(&self.shape, layer, kv_head, rows.start);
        let blocks = || BlockRows {
            codes: &self.codes[at * self.format.code_bytes(hd)..],
            scales: &self.scales[at * (hd / VALUE_BLOCK)..],
            len: hd,
            count,
        };
        match self.format {
            ValueFormat::F16 => ValueRows::F16(Rows { data: &self.halves[at * hd..], stride: hd, len: hd, count }),
            ValueFormat::Q8_0 => ValueRows::Q8_0(blocks()),
            ValueFormat::Q4_0 => ValueRows::Q4_0(blocks()),
        }
    }

    /// The f16 value rows `0..count` of `kv_head` in `layer` (None for block formats).
    pub(super) fn f16_rows(&self, layer: usize, kv_head: usize, count: usize) -> Option<Rows<'_, u16>> {
        match self.value_rows(layer, kv_head, 0..count) {
            ValueRows::F16(rows) => Some(rows),
            _ => None,
        }
    }

    /// A piece's softmax of its `group` score rows (`scores[g * PIECE_ROWS..]`), then its
    /// `out[g · head_dim..]` = the rows' weighted sum of the values in its rows of
    /// `kv_head`: each value row is read and converted once for the whole group.
    pub(crate) fn softmax_mix(&self, layer: usize, piece: &mut AttentionPiece) {
        let values = self.value_rows(layer, piece.kv_head, piece.rows.clone());
        // the piece's query heads only (a token block's piece holds more room)
        let out = &mut piece.out[..self.shape.group() * self.shape.head_dim];
        kernels::softmax_mix(values, &mut piece.scores, PIECE_ROWS, &mut piece.row, out, &mut piece.stats);
    }
}
