//! 8-bit weights by int8 dot products instead of lookups: a GGUF Q8_0 matrix keeps its own
//! int8 codes, activations are quantized to int8 per 32 values (llama.cpp's Q8_0 × Q8_0
//! product), and each weight costs one multiply-add where the lookup path would take
//! eight bit planes of lookups. Gemma 3's tied LM head (Q8_0, 172 MiB) is most of a
//! decode step's weight bytes.
//!
//! Q5_0 matrices keep their 5-bit codes in a compact form ([`CodeForm::FiveBit`]: a
//! nibble and a fifth bit per code, 5.5 bits a weight with its f16 scale, as in Q5_0)
//! that the AVX2 kernels widen to bytes as they read it, several tokens per weight load;
//! T-MAC's open question of lookup or multiply-add per tensor is answered by measurement
//! here: at 5 bits the lookup path needs a residual table pass, and multiply-add wins
//! (BENCHMARKS.md, "per-tensor kernel choice").
//!
//! Numeric contract: per row and 32-column block the integer sum `Σ q_w·q_x` is exact on
//! every kernel (`|sum| ≤ 32·128·127 < 2^24`, so exact as f32 too); a row's output is
//! `Σ_b sum_b · (d_w,b · d_x,b)` added in block order with the same float operations
//! everywhere. Outputs are therefore **bit-identical across ISAs** (unlike the lookup
//! path, whose SIMD kernels add floats in wider vectors).

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use crate::f16::{f16_bits_finite, f16_bits_to_f32, f32_to_f16_bits};
use crate::{AlignedBytes, Error, Isa};

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod aarch64;
mod scalar;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm32;
#[cfg(target_arch = "x86_64")]
mod x86_64;

/// Values per quantization block, of weights and of activations.
pub const BLOCK: usize = 32;
const Q8_0_BLOCK_BYTES: usize = 2 + BLOCK;
const Q5_0_BLOCK_BYTES: usize = 2 + 4 + BLOCK / 2;
/// Bytes of one block of a group of four rows in the five-bit form: two 32-byte nibble
/// planes (rows 0 and 1, rows 2 and 3) and 16 bytes of fifth bits.
const FIVE_BIT_BLOCK_BYTES: usize = 80;

/// How an [`Int8Matrix`] stores its codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeForm {
    /// One byte per code, −128..=127 (Q8_0, and float matrices quantized to it).
    Bytes,
    /// Codes −16..=15 (Q5_0) stored as `u = code + 16` in 0..=31: per group of four rows
    /// and block, byte k of the first 32 bytes holds row 0's `u[k] & 15` in its low nibble
    /// and row 1's in its high one, the next 32 bytes rows 2 and 3; of the last 16 bytes,
    /// byte j holds `u_r[j] >> 4` at bit `4 + r` and `u_r[j + 16] >> 4` at bit r. A
    /// kernel multiplies u (unsigned, so `pmaddubsw` needs no sign trick) and subtracts
    /// `16·Σx`: the integer sum is the same as over the codes.
    FiveBit,
}

/// Rows a kernel call multiplies at once (their scales are stored interleaved).
pub const GROUP_ROWS: usize = 4;

/// Tokens of an AVX2 token tile (`x86_64::TokenTile`): one per 32-bit lane of a vector.
const TILE_TOKENS: usize = 8;
/// Blocks of a token tile (1024 columns, 10 KiB on the stack); wider matrices are
/// multiplied a run of blocks at a time.
#[cfg(target_arch = "x86_64")]
const TILE_BLOCKS: usize = 32;
/// Fewest tokens worth a tile: it costs the same for one token as for eight, about five
/// tokens' worth of the token-at-a-time kernel.
#[cfg(target_arch = "x86_64")]
const TILE_MIN_TOKENS: usize = 5;

/// A matrix of int8 codes with one f16 scale per row and 32 columns: `w = d · q`.
#[derive(Clone, Debug)]
pub struct Int8Matrix {
    rows: usize,
    cols: usize,
    /// Codes as bytes (two's complement), rows padded with zeros to whole groups of 4,
    /// each group's rows interleaved block by block: row r's block b is at
    /// `(r/4)·4·cols + b·128 + (r%4)·32`. A kernel then reads the matrix as one
    /// sequential stream; four rows read side by side from row-major codes are four
    /// streams 640 bytes apart on Gemma's LM head, which this machine's hardware
    /// prefetcher follows at 13 GB/s against 30 GB/s for one stream.
    codes: AlignedBytes,
    /// Scales of groups of 4 rows, block-major within a group: row r, block b is at
    /// `(r/4)·(cols/32)·4 + b·4 + r%4`, so a kernel loads four rows' scales at once.
    /// f16 bits as the file has them (every source scale is an f16; the kernels convert
    /// exactly): as f32 they were 11 % of the LM head's bytes, read once per token. As
    /// bytes, so that a packed file's scales are read in place.
    scales: AlignedBytes,
    /// Whether some code is −128: the relaxed-SIMD wasm kernel needs `|q| ≤ 127` on the
    /// side whose sign it flips (llama.cpp's quantizer writes −127..=127).
    has_minus_128: bool,
    form: CodeForm,
}

impl Int8Matrix {
    fn check_shape(rows: usize, cols: usize) -> Result<(), Error> {
        if rows == 0 || cols == 0 || !cols.is_multiple_of(BLOCK) || rows.checked_mul(cols).is_none() {
            return Err(Error::BadShape { rows, cols });
        }
        Ok(())
    }

    fn scale_index(&self, row: usize, block: usize) -> usize {
        Self::scale_index_of(self.cols, row, block)
    }

    fn scale_index_of(cols: usize, row: usize, block: usize) -> usize {
        (row / GROUP_ROWS * (cols / BLOCK) + block) * GROUP_ROWS + row % GROUP_ROWS
    }

    /// Byte offset of row `row`'s block `block` in `codes` (the `Bytes` form).
    fn code_offset(&self, row: usize, block: usize) -> usize {
        Self::code_offset_of(self.cols, row, block)
    }

    fn code_offset_of(cols: usize, row: usize, block: usize) -> usize {
        row / GROUP_ROWS * GROUP_ROWS * cols + (block * GROUP_ROWS + row % GROUP_ROWS) * BLOCK
    }

    /// Bytes of one group of four rows' codes.
    fn group_bytes(form: CodeForm, cols: usize) -> usize {
        match form {
            CodeForm::Bytes => GROUP_ROWS * cols,
            CodeForm::FiveBit => cols / BLOCK * FIVE_BIT_BLOCK_BYTES,
        }
    }

    /// Code bytes of a `rows × cols` matrix: rows padded to whole groups.
    fn codes_len(form: CodeForm, rows: usize, cols: usize) -> usize {
        rows.div_ceil(GROUP_ROWS) * Self::group_bytes(form, cols)
    }

    pub fn form(&self) -> CodeForm {
        self.form
    }

    /// Byte offset in `codes` of the five-bit group block holding row `row`'s block `block`.
    fn five_bit_offset(&self, row: usize, block: usize) -> usize {
        Self::five_bit_offset_of(self.cols, row, block)
    }

    fn five_bit_offset_of(cols: usize, row: usize, block: usize) -> usize {
        row / GROUP_ROWS * Self::group_bytes(CodeForm::FiveBit, cols) + block * FIVE_BIT_BLOCK_BYTES
    }

    /// Row `row`'s codes of block `block`.
    fn block_codes(&self, row: usize, block: usize) -> [i8; BLOCK] {
        let mut out = [0; BLOCK];
        match self.form {
            CodeForm::Bytes => {
                for (o, &q) in out.iter_mut().zip(&self.codes.as_ref()[self.code_offset(row, block)..][..BLOCK]) {
                    *o = q as i8;
                }
            }
            CodeForm::FiveBit => {
                let group_block = &self.codes.as_ref()[self.five_bit_offset(row, block)..][..FIVE_BIT_BLOCK_BYTES];
                for (k, o) in out.iter_mut().enumerate() {
                    *o = five_bit_code(group_block, row % GROUP_ROWS, k);
                }
            }
        }
        out
    }

    /// From llama.cpp Q5_0 rows (`rows × cols/32` blocks of an f16 `d`, 4 bytes of fifth
    /// bits and 16 of nibbles; weight `d·(q − 16)`), without loss, in the five-bit form.
    pub fn from_q5_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::check_shape(rows, cols)?;
        let per_row = cols / BLOCK;
        if rows.checked_mul(per_row * Q5_0_BLOCK_BYTES) != Some(blocks.len()) {
            return Err(Error::BufferSize {
                what: "Q5_0 blocks",
                expected: rows.saturating_mul(per_row * Q5_0_BLOCK_BYTES),
                got: blocks.len(),
            });
        }
        let form = CodeForm::FiveBit;
        let mut m = Int8Matrix {
            rows,
            cols,
            codes: AlignedBytes::zeroed(Self::codes_len(form, rows, cols)),
            scales: AlignedBytes::zeroed(Self::scales_len(rows, cols) * 2),
            has_minus_128: false,
            form,
        };
        // the slices once, not per block: each accessor call checks for shared bytes
        let (scales, codes) = (m.scales.as_u16s_mut(), m.codes.as_mut());
        for (i, b) in blocks.chunks_exact(Q5_0_BLOCK_BYTES).enumerate() {
            let (row, block) = (i / per_row, i % per_row);
            let d = u16::from_le_bytes([b[0], b[1]]);
            if !f16_bits_finite(d) {
                return Err(Error::NonFiniteScale { row, group: block });
            }
            scales[Self::scale_index_of(cols, row, block)] = d;
            let fifth = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            let r = row % GROUP_ROWS;
            let group_block: &mut [u8; FIVE_BIT_BLOCK_BYTES] =
                (&mut codes[Self::five_bit_offset_of(cols, row, block)..][..FIVE_BIT_BLOCK_BYTES]).try_into().expect("80 bytes");
            let (low, high) = group_block.split_at_mut(64);
            let plane = &mut low[r / 2 * 32..][..32];
            // code k < 16 is byte k's low nibble and code k + 16 its high one; byte k of
            // the last 16 holds code k's fifth bit at bit 4 + r and code k + 16's at bit r
            for k in 0..16 {
                let q = b[6 + k];
                plane[k] |= (q & 15) << (4 * (r % 2));
                plane[k + 16] |= (q >> 4) << (4 * (r % 2));
                high[k] |= ((((fifth >> k) & 1) as u8) << (4 + r)) | ((((fifth >> (k + 16)) & 1) as u8) << r);
            }
        }
        Ok(m)
    }

    /// From llama.cpp Q8_0 rows (`rows × cols/32` blocks of an f16 `d` and 32 int8 codes),
    /// without loss: `dequantize_row` equals llama.cpp's dequantization bit for bit.
    pub fn from_q8_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        let mut m = Self::for_q8_0(rows, cols)?;
        let row_bytes = m.q8_0_row_bytes();
        if rows.checked_mul(row_bytes) != Some(blocks.len()) {
            return Err(Error::BufferSize { what: "Q8_0 blocks", expected: rows.saturating_mul(row_bytes), got: blocks.len() });
        }
        m.set_q8_0_rows(0, blocks)?;
        Ok(m)
    }

    /// A `rows × cols` matrix of zeros, to be filled from Q8_0 rows by `set_q8_0_rows`
    /// (an import that reads the file a piece at a time).
    pub fn for_q8_0(rows: usize, cols: usize) -> Result<Self, Error> {
        Self::check_shape(rows, cols)?;
        Ok(Int8Matrix {
            rows,
            cols,
            codes: AlignedBytes::zeroed(Self::codes_len(CodeForm::Bytes, rows, cols)),
            scales: AlignedBytes::zeroed(Self::scales_len(rows, cols) * 2),
            has_minus_128: false,
            form: CodeForm::Bytes,
        })
    }

    fn scales_len(rows: usize, cols: usize) -> usize {
        rows.div_ceil(GROUP_ROWS) * GROUP_ROWS * (cols / BLOCK)
    }

    /// A matrix from its stored parts (a packed `.lutra` file): `codes` in `form` and
    /// `scales` (f16 bits), both in this type's interleaved orders, checked.
    pub fn from_parts(rows: usize, cols: usize, form: CodeForm, codes: AlignedBytes, scales: AlignedBytes) -> Result<Self, Error> {
        Self::check_shape(rows, cols)?;
        let codes_len = Self::codes_len(form, rows, cols);
        if codes.len() != codes_len {
            return Err(Error::BufferSize { what: "int8 codes", expected: codes_len, got: codes.len() });
        }
        let want = Self::scales_len(rows, cols) * 2;
        if scales.len() != want {
            return Err(Error::BufferSize { what: "int8 scales (bytes)", expected: want, got: scales.len() });
        }
        let mut m = Int8Matrix { rows, cols, codes, scales, has_minus_128: false, form };
        let per_row = cols / BLOCK;
        for row in 0..rows {
            for block in 0..per_row {
                if !f16_bits_finite(m.scales.as_u16s()[m.scale_index(row, block)]) {
                    return Err(Error::NonFiniteScale { row, group: block });
                }
            }
        }
        m.has_minus_128 = form == CodeForm::Bytes && m.codes.as_ref().contains(&0x80);
        Ok(m)
    }

    /// The stored parts, to move (`AlignedBytes::gather`: the same bytes elsewhere).
    pub(crate) fn buffers_mut(&mut self) -> [&mut AlignedBytes; 2] {
        [&mut self.codes, &mut self.scales]
    }

    /// The stored parts: codes, then scales (as `from_parts` takes them).
    pub fn parts(&self) -> (&[u8], &[u8]) {
        (self.codes.as_ref(), self.scales.as_ref())
    }

    /// Bytes of one row in Q8_0.
    pub fn q8_0_row_bytes(&self) -> usize {
        self.cols / BLOCK * Q8_0_BLOCK_BYTES
    }

    /// Rows `first..` from whole Q8_0 rows `blocks`, without loss (a matrix of the
    /// `Bytes` form, as `for_q8_0` makes).
    pub fn set_q8_0_rows(&mut self, first: usize, blocks: &[u8]) -> Result<(), Error> {
        let (per_row, row_bytes) = (self.cols / BLOCK, self.q8_0_row_bytes());
        let n = blocks.len() / row_bytes;
        let fits = self.form == CodeForm::Bytes && blocks.len().is_multiple_of(row_bytes);
        if !fits || first.checked_add(n).is_none_or(|end| end > self.rows) {
            return Err(Error::BufferSize {
                what: "Q8_0 rows",
                expected: (self.rows.saturating_sub(first)) * row_bytes,
                got: blocks.len(),
            });
        }
        let cols = self.cols;
        let (scales, codes) = (self.scales.as_u16s_mut(), self.codes.as_mut());
        for (i, b) in blocks.chunks_exact(Q8_0_BLOCK_BYTES).enumerate() {
            let (row, block) = (first + i / per_row, i % per_row);
            let d = u16::from_le_bytes([b[0], b[1]]);
            if !f16_bits_finite(d) {
                return Err(Error::NonFiniteScale { row, group: block });
            }
            scales[Self::scale_index_of(cols, row, block)] = d;
            let at = Self::code_offset_of(cols, row, block);
            codes[at..at + BLOCK].copy_from_slice(&b[2..]);
            // a fold the compiler vectorizes (`contains` was a memchr call per block)
            self.has_minus_128 |= b[2..].iter().fold(false, |seen, &c| seen | (c == 0x80));
        }
        Ok(())
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes held: codes and scales.
    pub fn bytes(&self) -> usize {
        self.codes.len() + self.scales.len()
    }

    /// Bytes a `rows × cols` matrix of `form` holds (what [`Self::bytes`] will say),
    /// without making it; `None` for a shape this type refuses or whose size overflows.
    pub fn bytes_for(form: CodeForm, rows: usize, cols: usize) -> Option<usize> {
        Self::check_shape(rows, cols).ok()?;
        let groups = rows.div_ceil(GROUP_ROWS);
        let scales = groups.checked_mul(GROUP_ROWS * (cols / BLOCK))?.checked_mul(2)?;
        let group_bytes = match form {
            CodeForm::Bytes => GROUP_ROWS.checked_mul(cols)?,
            CodeForm::FiveBit => (cols / BLOCK).checked_mul(FIVE_BIT_BLOCK_BYTES)?,
        };
        groups.checked_mul(group_bytes)?.checked_add(scales)
    }

    /// Row `row` as f32: `d · q`, as llama.cpp dequantizes Q8_0 (and Q5_0).
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) -> Result<(), Error> {
        if row >= self.rows {
            return Err(Error::BadShape { rows: row + 1, cols: self.cols });
        }
        if out.len() != self.cols {
            return Err(Error::BufferSize { what: "dequantized row", expected: self.cols, got: out.len() });
        }
        for (b, o) in out.chunks_exact_mut(BLOCK).enumerate() {
            let d = f16_bits_to_f32(self.scales.as_u16s()[self.scale_index(row, b)]);
            for (o, q) in o.iter_mut().zip(self.block_codes(row, b)) {
                *o = q as f32 * d;
            }
        }
        Ok(())
    }
}

/// One activation vector quantized to int8 per 32 values, as llama.cpp quantizes the
/// activations of a Q8_0 product (`d = max|x|/127` rounded to f16, `q = round(x/d)`).
#[derive(Clone, Debug)]
pub struct Int8Activations {
    codes: Vec<i8>,
    scales: Vec<f32>,
    /// `Σ q` per block: the five-bit kernels' correction for their unsigned codes.
    sums: Vec<i32>,
}

impl Int8Activations {
    /// Room for vectors of `cols` values (a multiple of 32).
    pub fn new(cols: usize) -> Result<Self, Error> {
        if cols == 0 || !cols.is_multiple_of(BLOCK) {
            return Err(Error::BadShape { rows: 1, cols });
        }
        Ok(Int8Activations { codes: vec![0; cols], scales: vec![0.0; cols / BLOCK], sums: vec![0; cols / BLOCK] })
    }

    pub fn cols(&self) -> usize {
        self.codes.len()
    }

    /// Quantizes `x`; NaN or infinity is refused (a scale would be meaningless).
    pub fn quantize(&mut self, x: &[f32]) -> Result<(), Error> {
        if x.len() != self.codes.len() {
            return Err(Error::BufferSize { what: "activations", expected: self.codes.len(), got: x.len() });
        }
        #[cfg(target_arch = "x86_64")]
        if Isa::Avx2.is_available() {
            // SAFETY: AVX2 is available (checked once, cached).
            return unsafe { x86_64::quantize_avx2(self, x) };
        }
        self.quantize_portable(x)
    }

    /// `quantize` (lengths checked by the caller) in plain arithmetic, which every
    /// compilation of it performs alike: the AVX2 build only runs it 8 wide.
    #[inline(always)]
    pub(crate) fn quantize_portable(&mut self, x: &[f32]) -> Result<(), Error> {
        let blocks = x.chunks_exact(BLOCK).zip(self.codes.chunks_exact_mut(BLOCK));
        for (((x, q), s), sum) in blocks.zip(&mut self.scales).zip(&mut self.sums) {
            let amax = x.iter().fold(0.0f32, |m, v| max_of(m, v.abs()));
            if !amax.is_finite() || x.iter().any(|v| v.is_nan()) {
                return Err(Error::NonFiniteInput);
            }
            *s = f16_bits_to_f32(f32_to_f16_bits(quantize_q8_0_block(x, q)));
            *sum = q.iter().map(|&q| i32::from(q)).sum();
        }
        Ok(())
    }
}

/// `f32::max` for an `a` that is not NaN (a NaN `b` is ignored, as there): a compare and
/// a select, where wasm has no instruction for `f32::max`'s NaN rule and called `fmaxf`
/// once per value.
#[inline(always)]
pub(crate) fn max_of(a: f32, b: f32) -> f32 {
    if b > a {
        b
    } else {
        a
    }
}

/// One block of values as llama.cpp's `quantize_row_q8_0_ref` quantizes it: codes
/// `round(x / d)` from the f32 scale `d = max|x| / 127`, which it returns (stored as f16
/// by the caller). Activations of Q8_0 products and q8_0 value caches both use it.
#[inline(always)]
pub(crate) fn quantize_q8_0_block(x: &[f32], codes: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0.0f32, |m, v| max_of(m, v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in codes.iter_mut().zip(x) {
        // |v·id| ≤ 127 up to rounding; the clamp matters only where a subnormal amax
        // makes 1/d infinite (that block's f16 scale is then 0 anyway)
        *q = round_half_away((v * id).clamp(-127.0, 127.0)) as i8;
    }
    d
}

/// `roundf` (half away from zero) for |x| < 2^23, branch-free so the quantizing loop
/// vectorizes (libm's call was a tenth of a prefill): the truncation, plus or minus one
/// where the exact remainder reaches a half.
#[inline(always)]
fn round_half_away(x: f32) -> i32 {
    let t = x as i32;
    let frac = x - t as f32;
    t + i32::from(frac >= 0.5) - i32::from(frac <= -0.5)
}

/// `y = W·x` with the fastest kernel here. `y.len() == rows`.
pub fn gemv(m: &Int8Matrix, x: &Int8Activations, y: &mut [f32]) -> Result<(), Error> {
    gemv_rows(Isa::best(), m, x, 0..m.rows, y)
}

/// Rows `rows` of `W·x` into `y` (`y.len() == rows.len()`), with kernel `isa`
/// (for splitting across threads, and for testing every kernel against `Scalar`).
pub fn gemv_rows(isa: Isa, m: &Int8Matrix, x: &Int8Activations, rows: Range<usize>, y: &mut [f32]) -> Result<(), Error> {
    let mut y = Some(y);
    gemm_rows(isa, m, core::slice::from_ref(x), rows, |_| y.take().unwrap_or(&mut []))
}

/// Whether `isa` has the multi-token kernels (AVX2 and up, both code forms): they read a
/// group's weights once for up to four tokens, and from five tokens on, for eight on a
/// token tile (`rows_tiled`). Elsewhere tokens run one at a time, and five-bit codes are
/// widened to bytes a block at a time for the byte kernel.
fn multi_token(isa: Isa) -> bool {
    matches!(isa, Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vbmi)
}

/// Rows `rows` of `W·x_t` for every token t of `xs`, into `out(t)` (called once per
/// token, in order; each `rows.len()` long), with kernel `isa`. Each output equals
/// `gemv_rows` of that token bit for bit; where `isa` has a multi-token kernel the
/// weights are read once for several tokens.
pub fn gemm_rows<'y>(
    isa: Isa,
    m: &Int8Matrix,
    xs: &[Int8Activations],
    rows: Range<usize>,
    mut out: impl FnMut(usize) -> &'y mut [f32],
) -> Result<(), Error> {
    if let Some(x) = xs.iter().find(|x| x.cols() != m.cols) {
        return Err(Error::BufferSize { what: "quantized activations", expected: m.cols, got: x.cols() });
    }
    if rows.start > rows.end || rows.end > m.rows {
        return Err(Error::BadShape { rows: rows.end, cols: m.cols });
    }
    if !isa.is_available() {
        return Err(Error::IsaUnavailable(isa));
    }
    let mut next = 0;
    let mut out = || {
        let y = out(next);
        next += 1;
        if y.len() == rows.len() {
            Ok(y)
        } else {
            Err(Error::BufferSize { what: "output rows", expected: rows.len(), got: y.len() })
        }
    };
    for tile in xs.chunks(TILE_TOKENS) {
        #[cfg(target_arch = "x86_64")]
        if multi_token(isa) && tile.len() >= TILE_MIN_TOKENS {
            let mut ys: [&mut [f32]; TILE_TOKENS] = Default::default();
            for y in &mut ys[..tile.len()] {
                *y = out()?;
            }
            rows_tiled(isa, m, &core::array::from_fn(|t| tile.get(t)), rows.clone(), &mut ys[..tile.len()]);
            continue;
        }
        for batch in tile.chunks(if multi_token(isa) { 4 } else { 1 }) {
            match batch {
                [a, b, c, d] => rows_n(isa, m, [a, b, c, d], rows.clone(), [out()?, out()?, out()?, out()?]),
                [a, b, c] => rows_n(isa, m, [a, b, c], rows.clone(), [out()?, out()?, out()?]),
                [a, b] => rows_n(isa, m, [a, b], rows.clone(), [out()?, out()?]),
                _ => {
                    for x in batch {
                        #[cfg(target_arch = "x86_64")]
                        if multi_token(isa) {
                            rows_one_avx2(isa, m, x, rows.clone(), out()?);
                            continue;
                        }
                        rows_n(isa, m, [x], rows.clone(), [out()?]);
                    }
                }
            }
        }
    }
    Ok(())
}

/// `gemm_rows` for the tokens of `xs` (`None` past the last; `ys` has one output per
/// token) on the AVX2 tile kernel of `m`'s form, a run of `TILE_BLOCKS` blocks at a
/// time; AVX2 is available and shapes are checked by the caller. Between runs a row's
/// partial sums wait in `ys` (an f32 stored and loaded is unchanged, so the float steps
/// stay the scalar kernel's).
#[cfg(target_arch = "x86_64")]
fn rows_tiled(isa: Isa, m: &Int8Matrix, xs: &[Option<&Int8Activations>; TILE_TOKENS], rows: Range<usize>, ys: &mut [&mut [f32]]) {
    // AVX-512 VBMI's tier has VNNI (and VL, `isa::detect_x86`)
    let vnni = isa == Isa::Avx512Vbmi;
    let per_row = m.cols / BLOCK;
    let group_bytes = Int8Matrix::group_bytes(m.form, m.cols);
    let block_bytes = group_bytes / per_row;
    let mut tile = x86_64::TokenTile::new();
    for start in (0..per_row).step_by(TILE_BLOCKS) {
        let run = start..(start + TILE_BLOCKS).min(per_row);
        // SAFETY: the caller checked that AVX2 is available and that every token has
        // `cols` codes, which hold the run's blocks.
        unsafe { tile.fill_avx2(xs, run.clone()) };
        for group in rows.start / GROUP_ROWS..rows.end.div_ceil(GROUP_ROWS) {
            let first = group * GROUP_ROWS;
            let wanted = first.max(rows.start)..(first + GROUP_ROWS).min(rows.end);
            let (in_group, in_ys) = (wanted.start - first..wanted.end - first, wanted.start - rows.start..wanted.end - rows.start);
            let mut acc = [[0.0f32; GROUP_ROWS]; TILE_TOKENS];
            if start > 0 {
                for (acc, y) in acc.iter_mut().zip(ys.iter()) {
                    acc[in_group.clone()].copy_from_slice(&y[in_ys.clone()]);
                }
            }
            let w_scales = &m.scales.as_u16s()[(group * per_row + run.start) * GROUP_ROWS..][..run.len() * GROUP_ROWS];
            let w = &m.codes.as_ref()[group * group_bytes + run.start * block_bytes..][..run.len() * block_bytes];
            // `w` holds `run.len() ≤ TILE_BLOCKS` blocks of the group in `m`'s form,
            // `w_scales` their scales, and the tile those blocks.
            // SAFETY: the caller checked AVX2 and F16C, and `isa` (AVX-512 F/VL/VNNI where `vnni`).
            unsafe {
                match (m.form, vnni) {
                    (CodeForm::FiveBit, true) => x86_64::five_bit_tile_vnni(&FiveBitGroup { w, w_scales }, &tile, &mut acc),
                    (CodeForm::FiveBit, false) => x86_64::five_bit_tile_avx2(&FiveBitGroup { w, w_scales }, &tile, &mut acc),
                    (CodeForm::Bytes, true) => x86_64::bytes_tile_vnni(w, w_scales, &tile, &mut acc),
                    (CodeForm::Bytes, false) => x86_64::bytes_tile_avx2(w, w_scales, &tile, &mut acc),
                }
            }
            for (acc, y) in acc.iter().zip(ys.iter_mut()) {
                y[in_ys.clone()].copy_from_slice(&acc[in_group.clone()]);
            }
        }
    }
}

/// `rows_n` for one token on AVX2 and up: the whole groups inside `rows` in one kernel
/// call, a part of a group at either end as `rows_n`.
#[cfg(target_arch = "x86_64")]
fn rows_one_avx2(isa: Isa, m: &Int8Matrix, x: &Int8Activations, rows: Range<usize>, y: &mut [f32]) {
    let whole = rows.start.div_ceil(GROUP_ROWS)..rows.end / GROUP_ROWS;
    if whole.is_empty() {
        return rows_n(isa, m, [x], rows, [y]);
    }
    let (per_row, group_bytes) = (m.cols / BLOCK, Int8Matrix::group_bytes(m.form, m.cols));
    let (first, end) = (whole.start * GROUP_ROWS, whole.end * GROUP_ROWS);
    let (head, rest) = y.split_at_mut(first - rows.start);
    let (mid, tail) = rest.split_at_mut(end - first);
    rows_n(isa, m, [x], rows.start..first, [head]);
    let w = &m.codes.as_ref()[whole.start * group_bytes..whole.end * group_bytes];
    let w_scales = &m.scales.as_u16s()[whole.start * GROUP_ROWS * per_row..whole.end * GROUP_ROWS * per_row];
    // `w` and `w_scales` are the whole groups' in `m.form`, `mid` their rows, and `x` has
    // `cols` codes.
    // SAFETY: the caller checked `isa`: AVX2 and F16C from AVX2 up, AVX-512 F/VL/VNNI on AVX-512 VBMI's tier.
    unsafe {
        if isa == Isa::Avx512Vbmi && m.form == CodeForm::Bytes {
            x86_64::groups_bytes_vnni(w, w_scales, group_bytes, x, mid)
        } else {
            x86_64::groups_avx2(m.form == CodeForm::FiveBit, w, w_scales, group_bytes, x, mid)
        }
    };
    rows_n(isa, m, [x], end..rows.end, [tail]);
}

/// `gemm_rows` for N tokens at once, shapes checked by the caller.
fn rows_n<const N: usize>(isa: Isa, m: &Int8Matrix, xs: [&Int8Activations; N], rows: Range<usize>, mut ys: [&mut [f32]; N]) {
    let mut row = rows.start;
    while row < rows.end {
        // the group holding `row` (rows past the matrix are zero codes and scales); a
        // part of a group is computed whole, so a row's value does not depend on a split
        let first = row / GROUP_ROWS * GROUP_ROWS;
        let wanted = row - first..(first + GROUP_ROWS).min(rows.end) - first;
        let mut all = [[0.0; GROUP_ROWS]; N];
        group_products(isa, m, first / GROUP_ROWS, xs, &mut all);
        for (y, all) in ys.iter_mut().zip(&all) {
            y[row - rows.start..][..wanted.len()].copy_from_slice(&all[wanted.clone()]);
        }
        row += wanted.len();
    }
}

/// Group `group`'s four rows times each of N tokens; `isa` is available.
fn group_products<const N: usize>(isa: Isa, m: &Int8Matrix, group: usize, xs: [&Int8Activations; N], out: &mut [[f32; GROUP_ROWS]; N]) {
    let per_row = m.cols / BLOCK;
    let group_bytes = Int8Matrix::group_bytes(m.form, m.cols);
    let w = &m.codes.as_ref()[group * group_bytes..][..group_bytes];
    let w_scales = &m.scales.as_u16s()[group * GROUP_ROWS * per_row..][..GROUP_ROWS * per_row];
    match m.form {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: every tier from AVX2 up has AVX2 and F16C (`Isa::Avx2` requires both), which the caller checked; `w` and
        // `w_scales` are one group's, and every token has `cols` codes (checked).
        CodeForm::Bytes if N > 1 && multi_token(isa) => unsafe { x86_64::group_avx2_n(w, w_scales, xs, out) },
        CodeForm::Bytes => {
            for (x, out) in xs.iter().zip(out) {
                let g = Group { w, w_scales, x: &x.codes, x_scales: &x.scales };
                group_product(isa, m.has_minus_128, &g, out);
            }
        }
        CodeForm::FiveBit => five_bit_products(isa, &FiveBitGroup { w, w_scales }, xs, out),
    }
}

/// Four adjacent rows and the activations, with lengths that agree: `w` is the 4 rows'
/// `4 · cols` codes, interleaved block by block (row i's block b at `b·128 + i·32`),
/// `w_scales` their `4 · cols/32` interleaved f16 scales, `x` `cols` codes and
/// `x_scales` `cols/32` scales. Built only by `group_products`, from checked shapes.
pub(crate) struct Group<'a> {
    pub w: &'a [u8],
    pub w_scales: &'a [u16],
    pub x: &'a [i8],
    pub x_scales: &'a [f32],
}

/// Four adjacent rows in the five-bit form: `w` is `cols/32 · 80` bytes (see
/// `CodeForm::FiveBit`), `w_scales` `4 · cols/32` interleaved f16 scales. Activations passed
/// with it have `cols` codes. Built only by `group_products`, from checked shapes.
pub(crate) struct FiveBitGroup<'a> {
    pub w: &'a [u8],
    pub w_scales: &'a [u16],
}

/// Code k (0..32) of row r (0..4) of one five-bit group block.
fn five_bit_code(group_block: &[u8], r: usize, k: usize) -> i8 {
    let low = (group_block[r / 2 * 32 + k] >> (4 * (r % 2))) & 15;
    let (byte, bit) = if k < 16 { (k, 4 + r) } else { (k - 16, r) };
    let fifth = (group_block[64 + byte] >> bit) & 1;
    (low | fifth << 4) as i8 - 16
}

/// `out[i] = Σ_b sum_{i,b} · (d_w · d_x)` in block order for the group's four rows; `isa`
/// is available (checked by the caller).
fn group_product(isa: Isa, has_minus_128: bool, g: &Group<'_>, out: &mut [f32; GROUP_ROWS]) {
    let _ = has_minus_128;
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked that SSSE3 is available; `Group`'s lengths agree.
        Isa::Ssse3 => unsafe { x86_64::group_ssse3(g, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: every tier from AVX2 up has AVX2 and F16C (`Isa::Avx2` requires both), which the caller checked; lengths as above.
        Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vbmi => unsafe { x86_64::group_avx2(g, out) },
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        // SAFETY: NEON is enabled for this build; `Group`'s lengths agree.
        Isa::Neon => unsafe { aarch64::group(g, out) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        // SAFETY: simd128 is enabled for this build; `Group`'s lengths agree.
        Isa::Simd128 => unsafe { wasm32::group(has_minus_128, g, out) },
        _ => scalar::group(g, out),
    }
}

/// The five-bit group times each of N tokens, as `scalar::five_bit_group` computes it.
fn five_bit_products<const N: usize>(isa: Isa, g: &FiveBitGroup<'_>, xs: [&Int8Activations; N], out: &mut [[f32; GROUP_ROWS]; N]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: every tier from AVX2 up has AVX2 and F16C (`Isa::Avx2` requires both), which the caller checked; the lengths
        // of `g` and of each token agree (`FiveBitGroup`).
        Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vbmi => unsafe { x86_64::five_bit_avx2(g, xs, out) },
        Isa::Scalar => {
            for (x, out) in xs.iter().zip(out) {
                scalar::five_bit_group(g, x, out);
            }
        }
        _ => {
            for (x, out) in xs.iter().zip(out) {
                five_bit_widened(isa, g, x, out);
            }
        }
    }
}

/// A five-bit group on a kernel for bytes: each block's codes widened to bytes and
/// multiplied alone, its result added in block order (`0 + v` is v exactly, so the float
/// steps are the scalar kernel's).
fn five_bit_widened(isa: Isa, g: &FiveBitGroup<'_>, x: &Int8Activations, out: &mut [f32; GROUP_ROWS]) {
    let mut acc = [0.0f32; GROUP_ROWS];
    for (b, group_block) in g.w.chunks_exact(FIVE_BIT_BLOCK_BYTES).enumerate() {
        let mut w = [0u8; GROUP_ROWS * BLOCK];
        for (i, w) in w.iter_mut().enumerate() {
            *w = five_bit_code(group_block, i / BLOCK, i % BLOCK) as u8;
        }
        let one = Group {
            w: &w,
            w_scales: &g.w_scales[b * GROUP_ROWS..][..GROUP_ROWS],
            x: &x.codes[b * BLOCK..][..BLOCK],
            x_scales: &x.scales[b..][..1],
        };
        let mut part = [0.0; GROUP_ROWS];
        group_product(isa, false, &one, &mut part);
        for (a, p) in acc.iter_mut().zip(part) {
            *a += p;
        }
    }
    *out = acc;
}

#[cfg(test)]
mod rounding_tests {
    use super::{round_half_away, Int8Activations};
    use alloc::vec;
    use alloc::vec::Vec;

    /// A block whose largest magnitude is subnormal: 1/d overflows to infinity, which
    /// once overflowed the rounding (a fuzzer's find, through a Gemma prefill).
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn subnormal_blocks_quantize_to_a_zero_scale() {
        let mut a = Int8Activations::new(64).unwrap();
        let mut x = [0.0f32; 64];
        x[3] = f32::from_bits(1);
        x[5] = -f32::from_bits(0x0040_0000);
        x[40] = 1.5;
        a.quantize(&x).unwrap();
        assert_eq!(a.scales, [0.0, 1.5 / 127.0_f32].map(|d| f32::from(half::f16::from_f32(d))));
        assert_eq!(a.codes[5], -127);
        assert_eq!(a.codes[40], 127);
    }

    /// The dispatched quantizer (8 wide where AVX2 exists) gives the portable one's codes,
    /// scales and sums, bit for bit: values at exact halves of a step, subnormals, zeros,
    /// and spreads over many magnitudes; and both refuse NaN and infinity.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn every_build_of_the_quantizer_agrees() {
        let cols = 256;
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..64 {
            let x: Vec<f32> = (0..cols)
                // the last rounds: blocks of subnormals and zeros only (1/d infinite)
                .map(|i| match if round >= 48 { 1 + i % 2 } else { (round + i) % 7 } {
                    // exact halves of the step 127 sets when the block's max is 127
                    0 => ((next() % 255) as f32 - 127.0) + 0.5,
                    1 => f32::from_bits((next() as u32) & 0x807f_ffff), // subnormal or zero
                    2 => 0.0,
                    _ => (next() as i32 as f32) * 2f32.powi((next() % 40) as i32 - 50),
                })
                .collect();
            let (mut a, mut b) = (Int8Activations::new(cols).unwrap(), Int8Activations::new(cols).unwrap());
            a.quantize(&x).unwrap();
            b.quantize_portable(&x).unwrap();
            assert_eq!(
                (&a.codes, a.scales.iter().map(|s| s.to_bits()).collect::<Vec<_>>(), &a.sums),
                (&b.codes, b.scales.iter().map(|s| s.to_bits()).collect(), &b.sums)
            );
        }
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = vec![1.0f32; cols];
            x[77] = bad;
            let mut a = Int8Activations::new(cols).unwrap();
            assert!(matches!(a.quantize(&x), Err(crate::Error::NonFiniteInput)));
            assert!(matches!(a.quantize_portable(&x), Err(crate::Error::NonFiniteInput)));
        }
    }

    /// Equal to libm's `roundf` at every half in ±200, its neighbours, and a sweep of all
    /// magnitudes below 2^23.
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn rounds_like_roundf() {
        for i in -400..=400 {
            let half = i as f32 / 2.0;
            let up = f32::from_bits(half.to_bits().wrapping_add(1));
            let down = f32::from_bits(half.to_bits().wrapping_sub(1));
            for x in [half, up, down, half + 0.25] {
                assert_eq!(round_half_away(x), libm::roundf(x) as i32, "{x:e}");
            }
        }
        for bits in (0..0x4b00_0000u32).step_by(4099) {
            let x = f32::from_bits(bits);
            assert_eq!(round_half_away(x), libm::roundf(x) as i32, "{x:e}");
            assert_eq!(round_half_away(-x), libm::roundf(-x) as i32, "{:e}", -x);
        }
    }
}
