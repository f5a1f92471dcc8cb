//! AVX2 (+ AVX-512 VNNI where present) dequantize-then-dot rows.

use std::arch::x86_64::*;

use super::{block_bytes, BaselineMatrix, QuantizedActivations};
use lutra_core::f16::f16_bits_to_f32;

pub fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

fn vnni() -> bool {
    is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl")
}

/// 32 codes of one block as bytes (see `pack_block` for the layouts).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn unpack(bits: u8, p: *const u8) -> __m256i {
    // SAFETY (whole function): `p` points at `block_bytes(bits)` readable bytes.
    unsafe {
        let two_bit = |p: *const u8| {
            let x = _mm256_set1_epi64x(p.cast::<i64>().read_unaligned());
            _mm256_and_si256(_mm256_srlv_epi64(x, _mm256_set_epi64x(6, 4, 2, 0)), _mm256_set1_epi8(3))
        };
        let one_bit = |p: *const u8, set: i8| {
            let x = _mm256_set1_epi32(p.cast::<i32>().read_unaligned());
            let spread = _mm256_shuffle_epi8(x, _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0));
            let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
            _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(set))
        };
        match bits {
            4 => {
                let v = _mm_loadu_si128(p.cast());
                let m = _mm_set1_epi8(15);
                _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m))
            }
            3 => _mm256_or_si256(two_bit(p), one_bit(p.add(8), 4)),
            2 => two_bit(p),
            _ => one_bit(p, 1),
        }
    }
}

macro_rules! rows_kernel {
    ($name:ident, $features:literal, $dot:expr) => {
        #[target_feature(enable = $features)]
        unsafe fn $name(m: &BaselineMatrix, a: &QuantizedActivations, rows: std::ops::Range<usize>, y: &mut [f32]) {
            let bb = block_bytes(m.bits);
            let per_group = m.group / 32;
            let dot = $dot;
            for (r, out) in rows.zip(y) {
                let codes = m.row_codes(r).as_ptr();
                let mut acc = _mm256_setzero_ps();
                let mut offset = 0.0f32;
                for (g, &[s, off]) in m.row_affine(r).iter().enumerate() {
                    let mut sum = _mm256_setzero_si256();
                    for b in 0..per_group {
                        let blk = g * per_group + b;
                        // SAFETY: block `blk` of the row and its 32 activations are in bounds
                        // (row length cols/32 blocks, cols activations).
                        unsafe {
                            let c = unpack(m.bits, codes.add(blk * bb));
                            let q = _mm256_loadu_si256(a.q.as_ptr().add(32 * blk).cast());
                            sum = dot(sum, c, q);
                        }
                    }
                    let scale = a.scale[g];
                    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(scale * f16_bits_to_f32(s)), acc);
                    offset += scale * f16_bits_to_f32(off) * a.sum[g] as f32;
                }
                let h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
                let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                let h = _mm_add_ss(h, _mm_movehdup_ps(h));
                *out = _mm_cvtss_f32(h) + offset;
            }
        }
    };
}

rows_kernel!(rows_avx2, "avx2,fma", |sum, c, q| _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(c, q), _mm256_set1_epi16(1))));
rows_kernel!(rows_vnni, "avx2,fma,avx512f,avx512vl,avx512vnni", |sum, c, q| _mm256_dpbusd_epi32(sum, c, q));

/// # Safety
/// The CPU must support AVX2 and FMA (`available`).
pub unsafe fn gemv_rows(m: &BaselineMatrix, a: &QuantizedActivations, rows: std::ops::Range<usize>, y: &mut [f32]) {
    if vnni() {
        // SAFETY: AVX-512 VNNI/VL detected at run time; AVX2/FMA by the caller.
        unsafe { rows_vnni(m, a, rows, y) }
    } else {
        // SAFETY: AVX2/FMA checked by the caller.
        unsafe { rows_avx2(m, a, rows, y) }
    }
}
