//! The dequantize-then-dot baseline (the llama.cpp approach), for side-by-side ratios.
//!
//! Same codes and f16 scales as the LUT matrix it is built from, stored row-major in
//! blocks of 32 codes (llama.cpp-like packing per bit width); activations quantized to
//! int8 with one scale per weight group (like Q8_K); per block the codes are unpacked
//! to bytes and dotted with the int8 activations (`vpdpbusd` with AVX-512 VNNI, else
//! `pmaddubsw`), i32 across the group, one float multiply-add per group.

#[cfg(target_arch = "x86_64")]
mod x86_64;

use lutra_core::f16::f16_bits_to_f32;
use lutra_core::{Error, PackedMatrix};

/// Bytes of one 32-code block at `bits`.
pub fn block_bytes(bits: u8) -> usize {
    4 * bits as usize
}

/// Row-major blocked codes with per-(row, group) f16 scale and offset.
#[derive(Clone)]
pub struct BaselineMatrix {
    pub cols: usize,
    pub bits: u8,
    pub group: usize,
    codes: Vec<u8>,
    /// Per (row, group): f16 bits of s and of m (w = s·q + m).
    affine: Vec<[u16; 2]>,
}

/// Pack 32 codes of `bits` (1..=4) the way the unpackers expect.
fn pack_block(codes: &[u8; 32], bits: u8, out: &mut [u8]) {
    let two_bit = |out: &mut [u8], c: &dyn Fn(usize) -> u8| {
        for (i, o) in out[..8].iter_mut().enumerate() {
            *o = (0..4).fold(0, |a, j| a | ((c(8 * j + i) & 3) << (2 * j)));
        }
    };
    let one_bit = |out: &mut [u8], c: &dyn Fn(usize) -> u8| {
        for (i, o) in out[..4].iter_mut().enumerate() {
            *o = (0..8).fold(0, |a, j| a | ((c(8 * i + j) & 1) << j));
        }
    };
    match bits {
        4 => {
            for i in 0..16 {
                out[i] = (codes[i] & 15) | (codes[16 + i] << 4);
            }
        }
        3 => {
            two_bit(&mut out[..8], &|n| codes[n]);
            one_bit(&mut out[8..12], &|n| codes[n] >> 2);
        }
        2 => two_bit(out, &|n| codes[n]),
        1 => one_bit(out, &|n| codes[n]),
        _ => unreachable!("checked by BaselineMatrix::from_packed"),
    }
}

impl BaselineMatrix {
    /// The same weights as `m` (bits 1..=4), re-laid for dequantize-then-dot.
    pub fn from_packed<B: AsRef<[u8]>>(m: &PackedMatrix<B>) -> Result<Self, Error> {
        let l = *m.layout();
        if l.bits() > 4 {
            return Err(Error::UnsupportedBits(l.bits()));
        }
        let bb = block_bytes(l.bits());
        let mut codes = vec![0u8; l.rows() * (l.cols() / 32) * bb];
        let mut affine = Vec::with_capacity(l.rows() * l.groups());
        for r in 0..l.rows() {
            for b in 0..l.cols() / 32 {
                let mut block = [0u8; 32];
                for (k, c) in block.iter_mut().enumerate() {
                    *c = m.code(r, 32 * b + k);
                }
                let at = (r * (l.cols() / 32) + b) * bb;
                pack_block(&block, l.bits(), &mut codes[at..at + bb]);
            }
            for g in 0..l.groups() {
                let (s, off) = m.affine(r, g);
                affine.push([lutra_core::f16::f32_to_f16_bits(s), lutra_core::f16::f32_to_f16_bits(off)]);
            }
        }
        Ok(BaselineMatrix { cols: l.cols(), bits: l.bits(), group: l.group(), codes, affine })
    }

    fn row_codes(&self, r: usize) -> &[u8] {
        let n = (self.cols / 32) * block_bytes(self.bits);
        &self.codes[r * n..(r + 1) * n]
    }
    fn row_affine(&self, r: usize) -> &[[u16; 2]] {
        let n = self.cols / self.group;
        &self.affine[r * n..(r + 1) * n]
    }
}

/// int8 activations: one scale and one code sum per group.
pub struct QuantizedActivations {
    pub q: Vec<i8>,
    pub scale: Vec<f32>,
    pub sum: Vec<i32>,
    group: usize,
}

impl QuantizedActivations {
    pub fn new(cols: usize, group: usize) -> Self {
        QuantizedActivations { q: vec![0; cols], scale: vec![0.0; cols / group], sum: vec![0; cols / group], group }
    }
    pub fn quantize(&mut self, x: &[f32]) {
        for (g, xs) in x.chunks_exact(self.group).enumerate() {
            let amax = xs.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
            let mut sum = 0i32;
            for (q, &v) in self.q[g * self.group..(g + 1) * self.group].iter_mut().zip(xs) {
                *q = (v * inv).round() as i8;
                sum += *q as i32;
            }
            self.scale[g] = amax / 127.0;
            self.sum[g] = sum;
        }
    }
}

/// Unpack one block to 32 codes (the scalar reference of the unpackers).
fn unpack_block(bits: u8, b: &[u8]) -> [u8; 32] {
    let mut c = [0u8; 32];
    let two = |n: usize| (b[n % 8] >> (2 * (n / 8))) & 3;
    let one = |b: &[u8], n: usize| (b[n / 8] >> (n % 8)) & 1;
    for (n, c) in c.iter_mut().enumerate() {
        *c = match bits {
            4 => (b[n % 16] >> (4 * (n / 16))) & 15,
            3 => two(n) | (one(&b[8..], n) << 2),
            2 => two(n),
            _ => one(b, n),
        };
    }
    c
}

fn row_scalar(m: &BaselineMatrix, a: &QuantizedActivations, r: usize) -> f32 {
    let bb = block_bytes(m.bits);
    let blocks_per_group = m.group / 32;
    let codes = m.row_codes(r);
    let mut y = 0.0f32;
    for (g, &[s, off]) in m.row_affine(r).iter().enumerate() {
        let mut dot = 0i32;
        for b in 0..blocks_per_group {
            let blk = g * blocks_per_group + b;
            let c = unpack_block(m.bits, &codes[blk * bb..(blk + 1) * bb]);
            dot += c.iter().zip(&a.q[32 * blk..32 * blk + 32]).map(|(&c, &q)| c as i32 * q as i32).sum::<i32>();
        }
        y += a.scale[g] * (f16_bits_to_f32(s) * dot as f32 + f16_bits_to_f32(off) * a.sum[g] as f32);
    }
    y
}

/// `y[rows] = W[rows]·x` for the row range `rows` (y holds exactly those rows).
pub fn gemv_rows(m: &BaselineMatrix, a: &QuantizedActivations, rows: std::ops::Range<usize>, y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if x86_64::available() {
        // SAFETY: `available` checked AVX2 (+FMA) at run time.
        unsafe { x86_64::gemv_rows(m, a, rows, y) };
        return;
    }
    for (r, y) in rows.zip(y) {
        *y = row_scalar(m, a, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lutra_core::Offset;

    #[test]
    fn simd_baseline_equals_scalar_and_tracks_the_lut_gemv() {
        let (rows, cols) = (40, 512);
        let mut seed = 1u32;
        let mut rnd = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        let w: Vec<f32> = (0..rows * cols).map(|_| rnd()).collect();
        let x: Vec<f32> = (0..cols).map(|_| rnd()).collect();
        for bits in 1..=4u8 {
            let m = PackedMatrix::quantize(&w, rows, cols, bits, 128, Offset::Min).unwrap();
            let b = BaselineMatrix::from_packed(&m).unwrap();
            for r in 0..rows {
                for k in (0..cols).step_by(7) {
                    let blk = r * (cols / 32) + k / 32;
                    let bb = block_bytes(bits);
                    assert_eq!(unpack_block(bits, &b.codes[blk * bb..(blk + 1) * bb])[k % 32], m.code(r, k));
                }
            }
            let mut a = QuantizedActivations::new(cols, 128);
            a.quantize(&x);
            let mut y = vec![0.0; rows];
            gemv_rows(&b, &a, 0..rows, &mut y);
            let mut t = lutra_core::OwnedTables::new(cols, 128).unwrap();
            let mut y_lut = vec![0.0; rows];
            lutra_core::gemv(&m, t.build(&x).unwrap(), &mut y_lut).unwrap();
            for r in 0..rows {
                let s = row_scalar(&b, &a, r);
                assert!((y[r] - s).abs() <= 1e-4 * (1.0 + s.abs()), "bits={bits} row {r}: simd {} scalar {s}", y[r]);
                assert!((y[r] - y_lut[r]).abs() <= 0.05 * (1.0 + s.abs()), "bits={bits} row {r}: {} vs lut {}", y[r], y_lut[r]);
            }
        }
    }
}
