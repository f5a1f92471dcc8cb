//! Constructors: quantize f32 weights, ternarize, and import llama.cpp blocks losslessly.

#[cfg(feature = "alloc")]
use super::PackedMatrix;
use super::{pack, GroupCodes, Layout, Offset, ScaleFormat, SubScale};
use crate::f16::{f16_bits_finite, f16_bits_to_f32, f32_to_f16_bits};
use crate::Error;

/// llama.cpp `block_q4_0`: f16 d, 16 bytes of nibbles (element j low, j+16 high).
pub const Q4_0_BLOCK_BYTES: usize = 18;
/// llama.cpp `block_q8_0`: f16 d, 32 signed bytes.
pub const Q8_0_BLOCK_BYTES: usize = 34;
/// llama.cpp `block_q5_0`: f16 d, 4 bytes of fifth bits, 16 bytes of nibbles.
pub const Q5_0_BLOCK_BYTES: usize = 22;
/// llama.cpp `block_q4_1`: f16 d, f16 m, 16 bytes of nibbles (element j low, j+16 high).
pub const Q4_1_BLOCK_BYTES: usize = 20;
/// llama.cpp `block_q5_1`: f16 d, f16 m, 4 bytes of fifth bits, 16 bytes of nibbles.
pub const Q5_1_BLOCK_BYTES: usize = 24;
/// llama.cpp `block_q5_K`: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 32 bytes of
/// fifth bits, 128 bytes of nibbles.
pub const Q5_K_BLOCK_BYTES: usize = 176;
/// llama.cpp `block_tq2_0`: 64 bytes of 2-bit codes, then f16 d; 256 elements.
pub const TQ2_0_BLOCK_BYTES: usize = 66;
/// llama.cpp `block_q1_0`: f16 d, 16 bytes of sign bits (element j: bit j % 8 of byte j / 8); 128 elements.
pub const Q1_0_BLOCK_BYTES: usize = 18;
/// llama.cpp `block_q2_0`: f16 d, 16 bytes of 2-bit codes (element j: bits 2(j % 4) of byte j / 4); 64 elements.
pub const Q2_0_BLOCK_BYTES: usize = 18;
/// llama.cpp `block_q4_K`: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles.
pub const Q4_K_BLOCK_BYTES: usize = 144;
/// llama.cpp `block_q6_K`: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 i8 scales, f16 d.
pub const Q6_K_BLOCK_BYTES: usize = 210;
/// llama.cpp `block_tq1_0`: 48 bytes of 5 trits, 4 bytes of 4 trits, f16 d; 256 elements.
pub const TQ1_0_BLOCK_BYTES: usize = 54;
/// llama.cpp `block_q2_K`: 16 bytes of 4-bit scale|min, 64 bytes of 2-bit codes, f16 d, f16 dmin.
pub const Q2_K_BLOCK_BYTES: usize = 84;
/// llama.cpp `block_q3_K`: 32 bytes of high bits, 64 bytes of 2-bit codes, 12 bytes of 6-bit scales, f16 d.
pub const Q3_K_BLOCK_BYTES: usize = 110;

/// Round half away from zero without libm (vectorizes; `as` saturates).
#[inline(always)]
pub(crate) fn round_to_i32(x: f32) -> i32 {
    (x + f32::from_bits(0.5f32.to_bits() | (x.to_bits() & 0x8000_0000))) as i32
}

fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), Error> {
    if expected != got {
        return Err(Error::BufferSize { what, expected, got });
    }
    Ok(())
}

/// Scales past the f16 range (weights beyond ±65504) are refused, not stored as inf.
fn finite_f16(bits: &[u16]) -> Result<(), Error> {
    if bits.iter().all(|&b| f16_bits_finite(b)) {
        Ok(())
    } else {
        Err(Error::NonFiniteInput)
    }
}

/// Round-to-nearest quantization of one group. `Offset::Min`: per-group min/max.
/// `Offset::Zero(z)`: symmetric around `z`, the largest-magnitude value maps to code 0
/// (the llama.cpp Q4_0 rule, generalized to `bits`).
fn quantize_group(w: &[f32], bits: u8, offset: Offset, out: &mut GroupCodes<'_>) -> Result<(), Error> {
    if w.iter().any(|v| !v.is_finite()) {
        return Err(Error::NonFiniteInput);
    }
    let qmax = ((1u32 << bits) - 1) as i32;
    match offset {
        Offset::Min => {
            let lo = w.iter().copied().fold(f32::INFINITY, f32::min);
            let hi = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let (s_bits, m_bits) = refine_min_scale(w, lo, (hi - lo) / qmax as f32, qmax, out.codes);
            finite_f16(&[s_bits, m_bits])?;
            out.scale = f16_bits_to_f32(s_bits);
            out.min = f16_bits_to_f32(m_bits);
        }
        Offset::Zero(z) => {
            let extreme = w.iter().copied().fold(0.0f32, |a, v| if v.abs() > a.abs() { v } else { a });
            let s_bits = f32_to_f16_bits(extreme / -(z.max(1) as f32));
            finite_f16(&[s_bits])?;
            let s = f16_bits_to_f32(s_bits);
            let inv = if s != 0.0 { 1.0 / s } else { 0.0 };
            for (c, &x) in out.codes.iter_mut().zip(w) {
                *c = (round_to_i32(x * inv) + z as i32).clamp(0, qmax) as u8;
            }
            out.scale = s;
        }
        Offset::Symmetric => {
            let s_bits = refine_symmetric_scale(w, qmax, out.codes);
            finite_f16(&[s_bits])?;
            out.scale = f16_bits_to_f32(s_bits);
        }
    }
    Ok(())
}

/// Lloyd iterations on a uniform grid: assign codes for the current parameters, refit
/// the parameters to the codes by least squares, and keep going while the squared
/// error falls. `assign(p, codes)` writes codes and returns their error; `refit(codes)`
/// returns the next parameters (None: no valid fit). Keeps the best seen.
fn refine<P: Copy>(codes: &mut [u8], start: P, assign: impl Fn(P, &mut [u8]) -> f32, refit: impl Fn(&[u8]) -> Option<P>) -> P {
    let mut best = start;
    let mut best_err = assign(best, codes);
    let mut trial = [0u8; 256];
    let trial = &mut trial[..codes.len()];
    trial.copy_from_slice(codes);
    for _ in 0..6 {
        let Some(cand) = refit(trial) else { break };
        let err = assign(cand, trial);
        if err >= best_err {
            break;
        }
        best_err = err;
        best = cand;
        codes.copy_from_slice(trial);
    }
    best
}

/// Codes for `w ≈ s·q + m` (f16 `s`, `m`) from the group's range, then refits of
/// (s, m): for 1–2 bits this roughly halves the error of plain min/max.
fn refine_min_scale(w: &[f32], lo: f32, step: f32, qmax: i32, codes: &mut [u8]) -> (u16, u16) {
    let assign = |(s_bits, m_bits): (u16, u16), codes: &mut [u8]| -> f32 {
        let (s, m) = (f16_bits_to_f32(s_bits), f16_bits_to_f32(m_bits));
        let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
        let mut err = 0.0f32;
        for (c, &x) in codes.iter_mut().zip(w) {
            *c = round_to_i32((x - m) * inv).clamp(0, qmax) as u8;
            let e = x - (s * *c as f32 + m);
            err += e * e;
        }
        err
    };
    // least squares of w on [q, 1]
    let refit = |codes: &[u8]| {
        let n = w.len() as f32;
        let (mut sq, mut sqq, mut sw, mut sqw) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
        for (&c, &x) in codes.iter().zip(w) {
            let q = c as f32;
            sq += q;
            sqq += q * q;
            sw += x;
            sqw += q * x;
        }
        let det = n * sqq - sq * sq;
        let s = (n * sqw - sq * sw) / det;
        let m = (sw - s * sq) / n;
        (det > 0.0 && s > 0.0 && m.is_finite()).then(|| (f32_to_f16_bits(s), f32_to_f16_bits(m)))
    };
    refine(codes, (f32_to_f16_bits(step), f32_to_f16_bits(lo)), assign, refit)
}

/// Codes for `w ≈ s·(q − qmax/2)`: start from the range (largest |w| at the outermost
/// grid point), then least-squares refits of s.
fn refine_symmetric_scale(w: &[f32], qmax: i32, codes: &mut [u8]) -> u16 {
    let half = qmax as f32 * 0.5;
    let assign = |s_bits: u16, codes: &mut [u8]| -> f32 {
        let s = f16_bits_to_f32(s_bits);
        let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
        let mut err = 0.0f32;
        for (c, &x) in codes.iter_mut().zip(w) {
            *c = round_to_i32(x * inv + half).clamp(0, qmax) as u8;
            let e = x - s * (*c as f32 - half);
            err += e * e;
        }
        err
    };
    let refit = |codes: &[u8]| {
        let (mut num, mut den) = (0.0f32, 0.0f32);
        for (&c, &x) in codes.iter().zip(w) {
            let t = c as f32 - half;
            num += t * x;
            den += t * t;
        }
        (den > 0.0 && num > 0.0).then(|| f32_to_f16_bits(num / den))
    };
    let amax = w.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    refine(codes, f32_to_f16_bits(amax / half), assign, refit)
}

/// Quantize row-major f32 weights into `out` (`layout.total_bytes()`).
pub fn quantize_into(w: &[f32], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    check_len("f32 weights", layout.rows * layout.cols, w.len())?;
    pack(layout, out, |row, g, gc| {
        let start = row * layout.cols + g * layout.group;
        quantize_group(&w[start..start + layout.group], layout.bits, layout.offset, gc)
    })
}

/// Ternary {−1, 0, +1}·s with s = mean |w| per group (BitNet b1.58 absmean), stored as
/// 2-bit codes q = t + 1 with zero point 1.
pub fn ternary_layout(rows: usize, cols: usize, group: usize) -> Result<Layout, Error> {
    Layout::new(rows, cols, 2, group, Offset::Zero(1))
}

pub fn ternarize_into(w: &[f32], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    check_len("f32 weights", layout.rows * layout.cols, w.len())?;
    if layout.bits != 2 || layout.offset != Offset::Zero(1) {
        return Err(Error::BadZeroPoint { zero: 1, bits: layout.bits });
    }
    pack(layout, out, |row, g, gc| {
        let start = row * layout.cols + g * layout.group;
        let grp = &w[start..start + layout.group];
        if grp.iter().any(|v| !v.is_finite()) {
            return Err(Error::NonFiniteInput);
        }
        let mean_abs = grp.iter().map(|v| v.abs()).sum::<f32>() / grp.len() as f32;
        let s_bits = f32_to_f16_bits(mean_abs);
        finite_f16(&[s_bits])?;
        let s = f16_bits_to_f32(s_bits);
        gc.scale = s;
        let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
        for (c, &x) in gc.codes.iter_mut().zip(grp) {
            *c = (round_to_i32(x * inv).clamp(-1, 1) + 1) as u8;
        }
        Ok(())
    })
}

/// Layout of an imported Q4_0 matrix: 4 bits, group 32, zero point 8.
pub fn q4_0_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    Layout::new(rows, cols, 4, 32, Offset::Zero(8))
}

/// Layout of an imported Q8_0 matrix: 8 bits (q + 128), group 32, zero point 128.
pub fn q8_0_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    Layout::new(rows, cols, 8, 32, Offset::Zero(128))
}

/// The f16 `d` at the start of `block`, as f32 (exact).
fn block_scale(block: &[u8], row: usize, g: usize) -> Result<f32, Error> {
    let d = u16::from_le_bytes([block[0], block[1]]);
    if !f16_bits_finite(d) {
        return Err(Error::NonFiniteScale { row, group: g });
    }
    Ok(f16_bits_to_f32(d))
}

/// Import llama.cpp Q4_0 rows (`rows × cols/32` blocks of 18 bytes) without loss.
pub fn import_q4_0_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    check_len("Q4_0 bytes", layout.rows * (layout.cols / 32) * Q4_0_BLOCK_BYTES, blocks.len())?;
    let per_row = layout.cols / 32;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g) * Q4_0_BLOCK_BYTES..][..Q4_0_BLOCK_BYTES];
        gc.scale = block_scale(b, row, g)?;
        for j in 0..16 {
            gc.codes[j] = b[2 + j] & 15;
            gc.codes[j + 16] = b[2 + j] >> 4;
        }
        Ok(())
    })
}

/// Import llama.cpp Q8_0 rows (`rows × cols/32` blocks of 34 bytes) without loss.
pub fn import_q8_0_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    check_len("Q8_0 bytes", layout.rows * (layout.cols / 32) * Q8_0_BLOCK_BYTES, blocks.len())?;
    let per_row = layout.cols / 32;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g) * Q8_0_BLOCK_BYTES..][..Q8_0_BLOCK_BYTES];
        gc.scale = block_scale(b, row, g)?;
        for j in 0..32 {
            gc.codes[j] = (b[2 + j] as i8 as i16 + 128) as u8;
        }
        Ok(())
    })
}

/// Layout of an imported Q5_0 matrix: 5 bits, group 32, zero point 16.
pub fn q5_0_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    Layout::new(rows, cols, 5, 32, Offset::Zero(16))
}

/// Import llama.cpp Q5_0 rows without loss: element j of a block is
/// `(qs[j] & 15) | bit j of qh << 4`, element j + 16 is `(qs[j] >> 4) | bit j + 16 of qh << 4`.
pub fn import_q5_0_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    check_len("Q5_0 bytes", layout.rows * (layout.cols / 32) * Q5_0_BLOCK_BYTES, blocks.len())?;
    let per_row = layout.cols / 32;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g) * Q5_0_BLOCK_BYTES..][..Q5_0_BLOCK_BYTES];
        gc.scale = block_scale(b, row, g)?;
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        for j in 0..16 {
            gc.codes[j] = (b[6 + j] & 15) | ((((qh >> j) & 1) as u8) << 4);
            gc.codes[j + 16] = (b[6 + j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
        }
        Ok(())
    })
}

/// Layout of an imported Q4_1 matrix: 4 bits, group 32, f16 scale `d` and minimum `m`.
pub fn q4_1_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    Layout::new(rows, cols, 4, 32, Offset::Min)
}

/// Layout of an imported Q5_1 matrix: 5 bits, group 32, f16 scale `d` and minimum `m`.
pub fn q5_1_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    Layout::new(rows, cols, 5, 32, Offset::Min)
}

/// Import llama.cpp Q4_1 rows without loss: weight `q·d + m`, codes as Q4_0's.
pub fn import_q4_1_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    check_len("Q4_1 bytes", layout.rows * (layout.cols / 32) * Q4_1_BLOCK_BYTES, blocks.len())?;
    let per_row = layout.cols / 32;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g) * Q4_1_BLOCK_BYTES..][..Q4_1_BLOCK_BYTES];
        (gc.scale, gc.min) = (block_scale(b, row, g)?, f16_at(b, 2, row, g)?);
        for j in 0..16 {
            gc.codes[j] = b[4 + j] & 15;
            gc.codes[j + 16] = b[4 + j] >> 4;
        }
        Ok(())
    })
}

/// Import llama.cpp Q5_1 rows without loss: weight `q·d + m`, codes as Q5_0's.
pub fn import_q5_1_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    check_len("Q5_1 bytes", layout.rows * (layout.cols / 32) * Q5_1_BLOCK_BYTES, blocks.len())?;
    let per_row = layout.cols / 32;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g) * Q5_1_BLOCK_BYTES..][..Q5_1_BLOCK_BYTES];
        (gc.scale, gc.min) = (block_scale(b, row, g)?, f16_at(b, 2, row, g)?);
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        for j in 0..16 {
            gc.codes[j] = (b[8 + j] & 15) | ((((qh >> j) & 1) as u8) << 4);
            gc.codes[j + 16] = (b[8 + j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
        }
        Ok(())
    })
}

/// Layout of an imported TQ2_0 matrix: 2 bits, group 256, zero point 1.
pub fn tq2_0_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    Layout::new(rows, cols, 2, 256, Offset::Zero(1))
}

/// Import llama.cpp TQ2_0 rows without loss: element `128c + 32l + m` of a block is
/// `(qs[32c + m] >> 2l) & 3`, weight `(q − 1)·d`.
pub fn import_tq2_0_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    check_len("TQ2_0 bytes", layout.rows * (layout.cols / 256) * TQ2_0_BLOCK_BYTES, blocks.len())?;
    let per_row = layout.cols / 256;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g) * TQ2_0_BLOCK_BYTES..][..TQ2_0_BLOCK_BYTES];
        gc.scale = block_scale(&b[64..], row, g)?;
        for c in 0..2 {
            for l in 0..4 {
                for m in 0..32 {
                    gc.codes[128 * c + 32 * l + m] = (b[32 * c + m] >> (2 * l)) & 3;
                }
            }
        }
        Ok(())
    })
}

/// Layout of an imported Q1_0 matrix: 1 bit, group 128, `Offset::Symmetric` (weight
/// `(q − ½)·s`) with step `s = 2d`. Doubling an f16 is exact, so `s` keeps the file's
/// f16 scales unless some |d| > 32752 (weights past ±32752, which no trained model has
/// but a file may hold): then f32 scales hold `2d` exactly.
pub fn q1_0_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    Layout::new(rows, cols, 1, 128, Offset::Symmetric)
}

/// `q1_0_layout`, with f32 scales where `blocks` hold a scale whose double overflows f16.
pub fn q1_0_layout_for(blocks: &[u8], rows: usize, cols: usize) -> Result<Layout, Error> {
    let layout = q1_0_layout(rows, cols)?;
    let wide = blocks.chunks_exact(Q1_0_BLOCK_BYTES).any(|b| {
        let d = u16::from_le_bytes([b[0], b[1]]);
        f16_bits_finite(d) && !f16_bits_finite(f32_to_f16_bits(2.0 * f16_bits_to_f32(d)))
    });
    if wide {
        layout.with_scales(ScaleFormat::F32)
    } else {
        Ok(layout)
    }
}

/// Import llama.cpp Q1_0 rows without loss: bit j of a block is element j's sign, weight
/// `±d` = `(q − ½)·2d`.
pub fn import_q1_0_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    check_len("Q1_0 bytes", layout.rows * (layout.cols / 128) * Q1_0_BLOCK_BYTES, blocks.len())?;
    let per_row = layout.cols / 128;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g) * Q1_0_BLOCK_BYTES..][..Q1_0_BLOCK_BYTES];
        gc.scale = 2.0 * block_scale(b, row, g)?;
        for (j, c) in gc.codes.iter_mut().enumerate() {
            *c = (b[2 + j / 8] >> (j % 8)) & 1;
        }
        Ok(())
    })
}

/// Layout of an imported Q2_0 matrix: 2 bits, group 64, zero point 1 (codes −1, 0, +1, +2).
pub fn q2_0_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    Layout::new(rows, cols, 2, 64, Offset::Zero(1))
}

/// Import llama.cpp Q2_0 rows without loss: element j of a block is
/// `(qs[j / 4] >> 2(j % 4)) & 3`, weight `(q − 1)·d`.
pub fn import_q2_0_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    check_len("Q2_0 bytes", layout.rows * (layout.cols / 64) * Q2_0_BLOCK_BYTES, blocks.len())?;
    let per_row = layout.cols / 64;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g) * Q2_0_BLOCK_BYTES..][..Q2_0_BLOCK_BYTES];
        gc.scale = block_scale(b, row, g)?;
        for (j, c) in gc.codes.iter_mut().enumerate() {
            *c = (b[2 + j / 4] >> (2 * (j % 4))) & 3;
        }
        Ok(())
    })
}

/// Layout of an imported Q4_K matrix: 4 bits, group 32, the file's 6-bit scale and
/// minimum codes under its f16 `d` and `dmin` per super-block (4.5 bits per weight).
pub fn q4_k_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    super_blocks(cols)?;
    Layout::new(rows, cols, 4, 32, Offset::Min)?.with_scales(ScaleFormat::SubBlock { bits: 6, signed: false })
}

/// Layout of an imported Q5_K matrix: as Q4_K's with 5 bits (5.5 bits per weight).
pub fn q5_k_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    super_blocks(cols)?;
    Layout::new(rows, cols, 5, 32, Offset::Min)?.with_scales(ScaleFormat::SubBlock { bits: 6, signed: false })
}

/// Layout of an imported Q6_K matrix: 6 bits, group 16, zero point 32, the file's int8
/// scale codes under its f16 `d` (6.5625 bits per weight).
pub fn q6_k_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    super_blocks(cols)?;
    Layout::new(rows, cols, 6, 16, Offset::Zero(32))?.with_scales(ScaleFormat::SubBlock { bits: 8, signed: true })
}

/// K-quants come in super-blocks of 256.
fn super_blocks(cols: usize) -> Result<usize, Error> {
    if cols == 0 || !cols.is_multiple_of(256) {
        return Err(Error::ColsNotMultipleOfGroup { cols, group: 256 });
    }
    Ok(cols / 256)
}

/// `get_scale_min_k4` of llama.cpp: the 6-bit scale and minimum of sub-block `j`.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

fn f16_at(b: &[u8], at: usize, row: usize, g: usize) -> Result<f32, Error> {
    block_scale(&b[at..at + 2], row, g)
}

/// Import llama.cpp Q4_K rows without loss: sub-block `j` (32 elements) of a super-block
/// has scale `d·sc_j` and minimum `dmin·m_j`; chunk c holds sub-blocks 2c (low nibbles)
/// and 2c + 1 (high nibbles) of `qs[32c..32c + 32]`.
pub fn import_q4_k_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    let per_row = super_blocks(layout.cols)?;
    check_len("Q4_K bytes", layout.rows * per_row * Q4_K_BLOCK_BYTES, blocks.len())?;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g / 8) * Q4_K_BLOCK_BYTES..][..Q4_K_BLOCK_BYTES];
        let (d, dmin) = (f16_at(b, 0, row, g)?, f16_at(b, 2, row, g)?);
        let j = g % 8;
        let (sc, m) = scale_min_k4(j, &b[4..16]);
        gc.sub = SubScale { d, dmin, code: sc as i32, min_code: m as i32 };
        let qs = &b[16 + 32 * (j / 2)..][..32];
        for (c, &q) in gc.codes.iter_mut().zip(qs) {
            *c = if j % 2 == 0 { q & 15 } else { q >> 4 };
        }
        Ok(())
    })
}

/// Import llama.cpp Q5_K rows without loss: as Q4_K's, each code with its fifth bit,
/// bit `j` of `qh[l]` for element `l` of sub-block `j`.
pub fn import_q5_k_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    let per_row = super_blocks(layout.cols)?;
    check_len("Q5_K bytes", layout.rows * per_row * Q5_K_BLOCK_BYTES, blocks.len())?;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g / 8) * Q5_K_BLOCK_BYTES..][..Q5_K_BLOCK_BYTES];
        let (d, dmin) = (f16_at(b, 0, row, g)?, f16_at(b, 2, row, g)?);
        let j = g % 8;
        let (sc, m) = scale_min_k4(j, &b[4..16]);
        gc.sub = SubScale { d, dmin, code: sc as i32, min_code: m as i32 };
        let (qh, qs) = (&b[16..48], &b[48 + 32 * (j / 2)..][..32]);
        for ((c, &q), &h) in gc.codes.iter_mut().zip(qs).zip(qh) {
            *c = (if j % 2 == 0 { q & 15 } else { q >> 4 }) | (((h >> j) & 1) << 4);
        }
        Ok(())
    })
}

/// Import llama.cpp Q6_K rows without loss: 16 groups of 16 per super-block, scale
/// `d·sc` (i8 sc), code `(low 4 bits | high 2 bits << 4)`, weight `(q − 32)·d·sc`.
pub fn import_q6_k_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    let per_row = super_blocks(layout.cols)?;
    check_len("Q6_K bytes", layout.rows * per_row * Q6_K_BLOCK_BYTES, blocks.len())?;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g / 16) * Q6_K_BLOCK_BYTES..][..Q6_K_BLOCK_BYTES];
        let d = f16_at(b, 208, row, g)?;
        let (ql, qh, sc) = (&b[..128], &b[128..192], &b[192..208]);
        // a group of 16 lies within one (n, k) run of 32: its low nibbles and high bit
        // pairs are consecutive bytes at one shift
        let first = (g % 16) * 16;
        let (n, k, l) = (first / 128, (first % 128) / 32, first % 32);
        let low = &ql[64 * n + l + 32 * (k % 2)..][..16];
        let high = &qh[32 * n + l..][..16];
        let low_shift = if k < 2 { 0 } else { 4 };
        for ((c, &lo), &hi) in gc.codes.iter_mut().zip(low).zip(high) {
            *c = ((lo >> low_shift) & 15) | (((hi >> (2 * k)) & 3) << 4);
        }
        gc.sub = SubScale { d, dmin: 0.0, code: sc[8 * n + l / 16 + 2 * k] as i8 as i32, min_code: 0 };
        Ok(())
    })
}

/// Trit `n` of a TQ1_0 byte (llama.cpp stores each byte as ⌈v·256/243⌉, so the trits
/// come out by multiplication with u8 wrap-around).
fn trit(b: u8, n: u32) -> u8 {
    ((b.wrapping_mul(3u8.pow(n)) as u16 * 3) >> 8) as u8
}

/// Import llama.cpp TQ1_0 rows without loss into the TQ2_0 layout (2 bits, group 256,
/// zero 1): `qs[0..32]` hold elements `32n + m` (trit n), `qs[32..48]` elements
/// `160 + 16n + m`, `qh[0..4]` elements `240 + 4n + j`.
pub fn import_tq1_0_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    check_len("TQ1_0 bytes", layout.rows * (layout.cols / 256) * TQ1_0_BLOCK_BYTES, blocks.len())?;
    let per_row = layout.cols / 256;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g) * TQ1_0_BLOCK_BYTES..][..TQ1_0_BLOCK_BYTES];
        gc.scale = f16_at(b, 52, row, g)?;
        for n in 0..5 {
            for (m, &byte) in b[..32].iter().enumerate() {
                gc.codes[32 * n + m] = trit(byte, n as u32);
            }
            for (m, &byte) in b[32..48].iter().enumerate() {
                gc.codes[160 + 16 * n + m] = trit(byte, n as u32);
            }
        }
        for n in 0..4 {
            for (j, &byte) in b[48..52].iter().enumerate() {
                gc.codes[240 + 4 * n + j] = trit(byte, n as u32);
            }
        }
        Ok(())
    })
}

/// Layout of an imported Q2_K matrix: 2 bits, group 16, the file's 4-bit scale
/// `sc & 15` and minimum `sc >> 4` codes under its f16 `d` and `dmin` (2.625 bits per
/// weight).
pub fn q2_k_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    super_blocks(cols)?;
    Layout::new(rows, cols, 2, 16, Offset::Min)?.with_scales(ScaleFormat::SubBlock { bits: 4, signed: false })
}

/// Layout of an imported Q3_K matrix: 3 bits (value + 4), group 16, zero point 4, the
/// file's signed 6-bit scale codes `sc − 32` under its f16 `d` (3.4375 bits per weight).
pub fn q3_k_layout(rows: usize, cols: usize) -> Result<Layout, Error> {
    super_blocks(cols)?;
    Layout::new(rows, cols, 3, 16, Offset::Zero(4))?.with_scales(ScaleFormat::SubBlock { bits: 6, signed: true })
}

/// Where element `e` (0..256) of a Q2_K/Q3_K super-block keeps its 2 low bits: the byte
/// of `qs` and the shift.
fn k_low2(e: usize) -> (usize, u32) {
    let (n, r) = (e / 128, e % 128);
    (32 * n + (r % 32), 2 * (r / 32) as u32)
}

/// Import llama.cpp Q2_K rows without loss: group `g` of 16 elements has scale
/// `d·(scales[g] & 15)` and minimum `dmin·(scales[g] >> 4)`.
pub fn import_q2_k_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    let per_row = super_blocks(layout.cols)?;
    check_len("Q2_K bytes", layout.rows * per_row * Q2_K_BLOCK_BYTES, blocks.len())?;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g / 16) * Q2_K_BLOCK_BYTES..][..Q2_K_BLOCK_BYTES];
        let (d, dmin) = (f16_at(b, 80, row, g)?, f16_at(b, 82, row, g)?);
        let sc = b[g % 16];
        gc.sub = SubScale { d, dmin, code: (sc & 15) as i32, min_code: (sc >> 4) as i32 };
        let first = (g % 16) * 16;
        for (i, c) in gc.codes.iter_mut().enumerate() {
            let (byte, shift) = k_low2(first + i);
            *c = (b[16 + byte] >> shift) & 3;
        }
        Ok(())
    })
}

/// The signed 6-bit scale `j` of a Q3_K super-block (llama.cpp's `aux` unpacking).
fn q3_k_scale(j: usize, s: &[u8]) -> i32 {
    let low = if j < 8 { s[j] & 15 } else { s[j - 8] >> 4 };
    let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    (low | (high << 4)) as i32 - 32
}

/// Import llama.cpp Q3_K rows without loss: value = low 2 bits − (high bit ? 0 : 4),
/// stored as code value + 4; group `g` of 16 has scale `d·(sc_g − 32)`.
pub fn import_q3_k_into(blocks: &[u8], layout: &Layout, out: &mut [u8]) -> Result<(), Error> {
    let per_row = super_blocks(layout.cols)?;
    check_len("Q3_K bytes", layout.rows * per_row * Q3_K_BLOCK_BYTES, blocks.len())?;
    pack(layout, out, |row, g, gc| {
        let b = &blocks[(row * per_row + g / 16) * Q3_K_BLOCK_BYTES..][..Q3_K_BLOCK_BYTES];
        let (hmask, qs, scales) = (&b[..32], &b[32..96], &b[96..108]);
        let d = f16_at(b, 108, row, g)?;
        gc.sub = SubScale { d, dmin: 0.0, code: q3_k_scale(g % 16, scales), min_code: 0 };
        let first = (g % 16) * 16;
        for (i, c) in gc.codes.iter_mut().enumerate() {
            let e = first + i;
            let (byte, shift) = k_low2(e);
            let low = (qs[byte] >> shift) & 3;
            let high = (hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
            // value + 4 = low + 4·high
            *c = low + 4 * high;
        }
        Ok(())
    })
}

#[cfg(feature = "alloc")]
impl PackedMatrix<crate::AlignedBytes> {
    fn build(layout: Layout, f: impl FnOnce(&Layout, &mut [u8]) -> Result<(), Error>) -> Result<Self, Error> {
        let mut data = crate::AlignedBytes::zeroed(layout.total_bytes());
        f(&layout, data.as_mut())?;
        Ok(PackedMatrix { layout, data })
    }

    /// Quantize row-major f32 weights (round to nearest, per-group range).
    pub fn quantize(w: &[f32], rows: usize, cols: usize, bits: u8, group: usize, offset: Offset) -> Result<Self, Error> {
        Self::build(Layout::new(rows, cols, bits, group, offset)?, |l, o| quantize_into(w, l, o))
    }

    /// Ternary weights with an absmean scale per group.
    pub fn ternarize(w: &[f32], rows: usize, cols: usize, group: usize) -> Result<Self, Error> {
        Self::build(ternary_layout(rows, cols, group)?, |l, o| ternarize_into(w, l, o))
    }

    /// The same matrix in another code order (e.g. for a kernel of another ISA).
    pub fn repack<B: AsRef<[u8]>>(m: &PackedMatrix<B>, interleave: super::Interleave) -> Result<Self, Error> {
        Self::relayout(m, m.layout().with_interleave(interleave))
    }

    /// The same matrix in `layout`, which may differ from `m`'s only in code order and
    /// scale format (widening f16 scales to f32 is exact, and so is expanding sub-block
    /// scales to f32; sub-block scales come only from sub-block scales).
    pub fn relayout<B: AsRef<[u8]>>(m: &PackedMatrix<B>, layout: Layout) -> Result<Self, Error> {
        let same = |l: &Layout| (l.rows, l.cols, l.bits, l.group, l.offset);
        let sub_source = matches!(m.layout().scales, ScaleFormat::SubBlock { .. });
        if same(&layout) != same(m.layout()) || (matches!(layout.scales, ScaleFormat::SubBlock { .. }) && !sub_source) {
            return Err(Error::BadShape { rows: layout.rows, cols: layout.cols });
        }
        if layout == m.layout().with_interleave(layout.interleave) {
            // only the code order changes: each tile-group's bytes are reordered in place
            return Self::build(layout, |l, o| {
                super::reorder_codes(m.layout(), m.as_bytes(), l.interleave, o);
                Ok(())
            });
        }
        Self::build(layout, |l, o| {
            pack(l, o, |row, g, gc| {
                for (k, c) in gc.codes.iter_mut().enumerate() {
                    *c = m.code(row, g * l.group + k);
                }
                let i = l.scale_index(row / crate::TILE_ROWS, g) + row % crate::TILE_ROWS;
                (gc.scale, gc.min) = m.scale_and_min(i);
                gc.sub = m.sub_scale(i).unwrap_or_default();
                Ok(())
            })
        })
    }

    /// Import llama.cpp `Q4_0` blocks.
    pub fn from_q4_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q4_0_layout(rows, cols)?, |l, o| import_q4_0_into(blocks, l, o))
    }

    /// Import llama.cpp `Q5_0` blocks.
    pub fn from_q5_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q5_0_layout(rows, cols)?, |l, o| import_q5_0_into(blocks, l, o))
    }

    /// Import llama.cpp `Q4_1` blocks.
    pub fn from_q4_1(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q4_1_layout(rows, cols)?, |l, o| import_q4_1_into(blocks, l, o))
    }

    /// Import llama.cpp `Q5_1` blocks.
    pub fn from_q5_1(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q5_1_layout(rows, cols)?, |l, o| import_q5_1_into(blocks, l, o))
    }

    /// Import llama.cpp `Q5_K` blocks (super-blocks of 256).
    pub fn from_q5_k(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q5_k_layout(rows, cols)?, |l, o| import_q5_k_into(blocks, l, o))
    }

    /// Import llama.cpp `TQ2_0` blocks (ternary, 256 per block).
    pub fn from_tq2_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(tq2_0_layout(rows, cols)?, |l, o| import_tq2_0_into(blocks, l, o))
    }

    /// Import llama.cpp `Q1_0` blocks (one sign bit per weight, 128 per block).
    pub fn from_q1_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q1_0_layout_for(blocks, rows, cols)?, |l, o| import_q1_0_into(blocks, l, o))
    }

    /// Import llama.cpp `Q2_0` blocks (codes −1…+2, 64 per block).
    pub fn from_q2_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q2_0_layout(rows, cols)?, |l, o| import_q2_0_into(blocks, l, o))
    }

    /// Import llama.cpp `Q4_K` blocks (super-blocks of 256).
    pub fn from_q4_k(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q4_k_layout(rows, cols)?, |l, o| import_q4_k_into(blocks, l, o))
    }

    /// Import llama.cpp `Q6_K` blocks (super-blocks of 256).
    pub fn from_q6_k(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q6_k_layout(rows, cols)?, |l, o| import_q6_k_into(blocks, l, o))
    }

    /// Import llama.cpp `TQ1_0` blocks (ternary, base 3, 256 per block).
    pub fn from_tq1_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(tq2_0_layout(rows, cols)?, |l, o| import_tq1_0_into(blocks, l, o))
    }

    /// Import llama.cpp `Q2_K` blocks (super-blocks of 256).
    pub fn from_q2_k(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q2_k_layout(rows, cols)?, |l, o| import_q2_k_into(blocks, l, o))
    }

    /// Import llama.cpp `Q3_K` blocks (super-blocks of 256).
    pub fn from_q3_k(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q3_k_layout(rows, cols)?, |l, o| import_q3_k_into(blocks, l, o))
    }

    /// Import llama.cpp `Q8_0` blocks.
    pub fn from_q8_0(blocks: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        Self::build(q8_0_layout(rows, cols)?, |l, o| import_q8_0_into(blocks, l, o))
    }
}

/// Fills rows `[first, first + rows)` of a matrix in `layout` from llama.cpp blocks (one of
/// the `import_*_into` functions).
pub type ImportRows = fn(&[u8], &Layout, &mut [u8]) -> Result<(), Error>;

/// A matrix imported from llama.cpp blocks a run of rows at a time, in order: the caller
/// reads each run from the file only when it is needed, so the whole tensor is never in
/// memory beside its imported form (the page reads a `Blob` this way). The result is
/// byte-identical to importing every row at once.
#[cfg(feature = "alloc")]
pub struct ChunkedImport {
    layout: Layout,
    data: crate::AlignedBytes,
    import: ImportRows,
    rows_done: usize,
}

#[cfg(feature = "alloc")]
impl ChunkedImport {
    /// An import of a matrix of `layout`, each run of rows filled by `import`.
    pub fn new(layout: Layout, import: ImportRows) -> ChunkedImport {
        ChunkedImport { data: crate::AlignedBytes::zeroed(layout.total_bytes()), layout, import, rows_done: 0 }
    }

    /// Rows per run for `row_bytes` of blocks per row: about `target_bytes` of them, a
    /// whole number of tiles (runs start on a tile, so each fills a run of whole tiles).
    pub fn rows_per_run(row_bytes: usize, target_bytes: usize) -> usize {
        (target_bytes / row_bytes.max(1) / crate::TILE_ROWS).max(1) * crate::TILE_ROWS
    }

    /// Imports the next `rows` rows from their `blocks`. Every run but the last must be a
    /// whole number of tiles.
    pub fn push(&mut self, blocks: &[u8], rows: usize) -> Result<(), Error> {
        let first = self.rows_done;
        let end = first.checked_add(rows).filter(|&e| e <= self.layout.rows && rows > 0);
        if end.is_none() || !first.is_multiple_of(crate::TILE_ROWS) {
            return Err(Error::BadShape { rows, cols: self.layout.cols });
        }
        // the run's tiles are a contiguous run of the whole matrix's tiles
        let part = Layout { rows, ..self.layout };
        let at = first / crate::TILE_ROWS * self.layout.tile_bytes();
        // errors name rows of the whole matrix, not of the run
        (self.import)(blocks, &part, &mut self.data.as_mut()[at..at + part.total_bytes()]).map_err(|e| match e {
            Error::NonFiniteScale { row, group } => Error::NonFiniteScale { row: first + row, group },
            Error::BadSubScale { row, group } => Error::BadSubScale { row: first + row, group },
            e => e,
        })?;
        self.rows_done = first + rows;
        Ok(())
    }

    /// The imported matrix, once every row has been pushed.
    pub fn finish(self) -> Result<PackedMatrix<crate::AlignedBytes>, Error> {
        if self.rows_done != self.layout.rows {
            return Err(Error::BufferSize { what: "imported rows", expected: self.layout.rows, got: self.rows_done });
        }
        Ok(PackedMatrix { layout: self.layout, data: self.data })
    }
}
