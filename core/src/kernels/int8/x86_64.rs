//! Four rows at a time with `pmaddubsw`: |w| (unsigned, so −128 reads as 128) times x
//! with w's sign (x is −127..=127, so the sign flip cannot wrap); pair sums ≤ 2·128·127
//! fit i16 without saturating, `pmaddwd` by ones widens them to i32, a `phaddd` tree
//! gives the four rows' block sums in one vector, and the float step is the scalar
//! one's, lane by lane. From five tokens on, prefill's tile kernels put eight tokens in
//! the lanes instead (`TokenTile`), so a block's sums need no horizontal reduction.

use core::arch::x86_64::*;

use super::{FiveBitGroup, Group, Int8Activations, BLOCK, FIVE_BIT_BLOCK_BYTES, GROUP_ROWS, TILE_BLOCKS, TILE_TOKENS};
use crate::f16::{f16_bits_to_f32, f32_to_f16_bits};
use crate::Error;

/// `Int8Activations::quantize_portable`, a block of 32 in four vectors: the same float
/// operations (|x|'s maximum, `d = amax / 127`, `x · (1/d)` clamped to ±127, rounded half
/// away from zero through truncation and the remainder), so the same codes, scales and
/// sums. A product `0 · ∞` (a subnormal amax makes 1/d infinite) is NaN there and rounds
/// to code 0; here it is zeroed before the clamp to the same end.
///
/// # Safety
/// AVX2 must be available; `x` has `a.cols()` values.
#[target_feature(enable = "avx2")]
pub unsafe fn quantize_avx2(a: &mut Int8Activations, x: &[f32]) -> Result<(), Error> {
    debug_assert_eq!(x.len(), a.codes.len());
    let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let (low, high) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
    let (half, minus_half) = (_mm256_set1_ps(0.5), _mm256_set1_ps(-0.5));
    // bytes of `packs` come out 128-bit lane by lane: put each vector's 8 codes back in order
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let blocks = x.chunks_exact(BLOCK).zip(a.codes.chunks_exact_mut(BLOCK));
    for (((x, q), s), sum) in blocks.zip(&mut a.scales).zip(&mut a.sums) {
        // SAFETY: a block is 32 f32 = four 8-lane loads.
        let v: [__m256; 4] = core::array::from_fn(|i| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) });
        let nan = v.iter().fold(_mm256_setzero_ps(), |m, &v| _mm256_or_ps(m, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)));
        if _mm256_movemask_ps(nan) != 0 {
            return Err(Error::NonFiniteInput);
        }
        let m = v.iter().fold(_mm256_setzero_ps(), |m, &v| _mm256_max_ps(m, _mm256_and_ps(v, magnitude)));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        if !amax.is_finite() {
            return Err(Error::NonFiniteInput);
        }
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let codes = v.map(|v| {
            let y = _mm256_mul_ps(v, id);
            let y = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(y, y), y);
            let y = _mm256_min_ps(_mm256_max_ps(y, low), high);
            let t = _mm256_cvttps_epi32(y);
            let frac = _mm256_sub_ps(y, _mm256_cvtepi32_ps(t));
            let up = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half));
            let down = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(frac, minus_half));
            // the masks are −1 where true
            _mm256_add_epi32(_mm256_sub_epi32(t, up), down)
        });
        let bytes = _mm256_packs_epi16(_mm256_packs_epi32(codes[0], codes[1]), _mm256_packs_epi32(codes[2], codes[3]));
        // SAFETY: `q` is 32 bytes.
        unsafe { _mm256_storeu_si256(q.as_mut_ptr().cast(), _mm256_permutevar8x32_epi32(bytes, order)) };
        let total = _mm256_add_epi32(_mm256_add_epi32(codes[0], codes[1]), _mm256_add_epi32(codes[2], codes[3]));
        let total = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256::<1>(total));
        let total = _mm_add_epi32(total, _mm_shuffle_epi32::<0b01_00_11_10>(total));
        *sum = _mm_cvtsi128_si32(_mm_add_epi32(total, _mm_shuffle_epi32::<0b10_11_00_01>(total)));
        *s = f16_bits_to_f32(f32_to_f16_bits(d));
    }
    Ok(())
}

/// Four f16 scales at `p` as f32, as `f16_bits_to_f32` converts them (finite halves:
/// magnitude bits moved into an f32 and scaled by 2^112, subnormals included, the sign
/// put back), in SSE2 integer steps for CPUs without F16C.
///
/// # Safety
/// Four u16 readable at `p`.
#[target_feature(enable = "sse2")]
#[inline]
unsafe fn scales_sse2(p: *const u16) -> __m128 {
    // SAFETY: the caller's promise: eight bytes readable at `p`.
    let h = _mm_unpacklo_epi16(unsafe { _mm_loadl_epi64(p.cast()) }, _mm_setzero_si128());
    let magnitude = _mm_castsi128_ps(_mm_slli_epi32::<13>(_mm_and_si128(h, _mm_set1_epi32(0x7fff))));
    let magnitude = _mm_mul_ps(magnitude, _mm_castsi128_ps(_mm_set1_epi32(0x7780_0000)));
    _mm_or_ps(magnitude, _mm_castsi128_ps(_mm_slli_epi32::<16>(_mm_and_si128(h, _mm_set1_epi32(0x8000)))))
}

/// Four f16 scales at `p` as f32 (`vcvtph2ps`: exact, as `f16_bits_to_f32` for the
/// finite halves an `Int8Matrix` holds).
///
/// # Safety
/// AVX2 and F16C; four u16 readable at `p`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn scales_f16c(p: *const u16) -> __m128 {
    // SAFETY: the caller's promise: eight bytes readable at `p`.
    _mm_cvtph_ps(unsafe { _mm_loadl_epi64(p.cast()) })
}

/// Lane `i` (< 4) of `v` in all eight lanes.
#[target_feature(enable = "avx2")]
#[inline]
fn lane(v: __m128, i: usize) -> __m256 {
    _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(i as i32))
}

/// As `scalar::group`, 16 bytes at a time.
///
/// # Safety
/// SSSE3 must be available; `g`'s lengths agree (see `Group`).
#[target_feature(enable = "ssse3")]
pub unsafe fn group_ssse3(g: &Group<'_>, out: &mut [f32; GROUP_ROWS]) {
    debug_assert!(g.w.len() == GROUP_ROWS * g.x.len() && g.w_scales.len() == GROUP_ROWS * g.x_scales.len());
    let ones = _mm_set1_epi16(1);
    let mut acc = _mm_setzero_ps();
    for (b, &dx) in g.x_scales.iter().enumerate() {
        prefetch_block_ahead(g.w, b);
        // SAFETY (loads): row i's block b is bytes (4b + i)·32.. + 32 of `w`, block b of
        // `x` is bytes 32b.. + 32, scales 4b.. + 4 of `w_scales`: all within the lengths.
        let dot16 = |i: usize, half: usize| unsafe {
            let xv = _mm_loadu_si128(g.x.as_ptr().add(b * BLOCK + half).cast());
            let wv = _mm_loadu_si128(g.w.as_ptr().add((b * GROUP_ROWS + i) * BLOCK + half).cast());
            _mm_madd_epi16(_mm_maddubs_epi16(_mm_sign_epi8(wv, wv), _mm_sign_epi8(xv, wv)), ones)
        };
        let row = |i: usize| _mm_add_epi32(dot16(i, 0), dot16(i, 16));
        let sums = _mm_hadd_epi32(_mm_hadd_epi32(row(0), row(1)), _mm_hadd_epi32(row(2), row(3)));
        // SAFETY: scales 4b..4b + 4 lie inside `w_scales` (4 per block).
        let dw = unsafe { scales_sse2(g.w_scales.as_ptr().add(b * GROUP_ROWS)) };
        acc = _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dw, _mm_set1_ps(dx))));
    }
    // SAFETY: `out` holds four f32.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
}

/// As `scalar::group`, one 32-byte block per vector.
///
/// # Safety
/// AVX2 and F16C must be available; `g`'s lengths agree (see `Group`).
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub unsafe fn group_avx2(g: &Group<'_>, out: &mut [f32; GROUP_ROWS]) {
    debug_assert!(g.w.len() == GROUP_ROWS * g.x.len() && g.w_scales.len() == GROUP_ROWS * g.x_scales.len());
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm_setzero_ps();
    for (b, &dx) in g.x_scales.iter().enumerate() {
        prefetch_block_ahead(g.w, b);
        // SAFETY (loads): as in `group_ssse3`.
        let xv = unsafe { _mm256_loadu_si256(g.x.as_ptr().add(b * BLOCK).cast()) };
        let row = |i: usize| {
            // SAFETY: row i's block b is bytes (4b + i)·32.. + 32 of `w`, inside it.
            let wv = unsafe { _mm256_loadu_si256(g.w.as_ptr().add((b * GROUP_ROWS + i) * BLOCK).cast()) };
            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv)), ones)
        };
        // per 128-bit half: [Σ row 0, Σ row 1, Σ row 2, Σ row 3] of that half's lanes
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(row(0), row(1)), _mm256_hadd_epi32(row(2), row(3)));
        let sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
        // SAFETY: scales 4b..4b + 4 lie inside `w_scales` (4 per block).
        let dw = unsafe { scales_f16c(g.w_scales.as_ptr().add(b * GROUP_ROWS)) };
        acc = _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dw, _mm_set1_ps(dx))));
    }
    // SAFETY: `out` holds four f32.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
}

/// How far ahead of the block of four rows' byte codes being multiplied (128 bytes) the
/// kernels that read a matrix's groups in memory order ask for codes: 64 blocks, three
/// groups of Gemma 3's LM head.
const BYTES_PREFETCH_AHEAD: usize = 8192;

/// Asks for the byte codes `BYTES_PREFETCH_AHEAD` past block `b` of a group (`w` as in
/// `Group`; past the group's end that is the next group's, as the callers read groups in
/// memory order; past the last group, whatever follows the codes). The hardware
/// prefetcher alone ran one thread's LM head stream (Gemma 3: 178 MB a token) at 24–27
/// GB/s, under the 30–34 of `bench membw`; asked this far ahead, 30–37
/// (bench/results/journal-2026-11-29-to-2026-12-06.md, "Weights on huge pages, and the LM
/// head prefetched"). 256 bytes ahead gave 27–29, 4096 33. Asking for the scales too (far
/// ahead or near) measured slower.
#[target_feature(enable = "sse")]
#[inline]
fn prefetch_block_ahead(w: &[u8], b: usize) {
    // only an address, up to BYTES_PREFETCH_AHEAD + 64 bytes past the block being read
    // and perhaps outside `w`'s allocation: a prefetch reads nothing into the program and
    // never faults
    let codes = w.as_ptr().wrapping_add(b * GROUP_ROWS * BLOCK + BYTES_PREFETCH_AHEAD);
    _mm_prefetch::<_MM_HINT_T0>(codes.cast());
    _mm_prefetch::<_MM_HINT_T0>(codes.wrapping_add(64).cast());
}

/// One token over whole groups of either code form in one call, each group as
/// `group_avx2` or `five_bit_avx2` computes it (inlined here): a call per group (20
/// blocks in Gemma 3) cost 14 % of its single-token int8 instructions (callgrind).
///
/// # Safety
/// AVX2 and F16C must be available; `w` holds `out.len() / 4` whole groups of `group_bytes` each
/// in form `five_bit` or bytes, `w_scales` their `x.scales.len()` scales per row,
/// interleaved as in `Group`.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn groups_avx2(five_bit: bool, w: &[u8], w_scales: &[u16], group_bytes: usize, x: &Int8Activations, out: &mut [f32]) {
    let group_scales = GROUP_ROWS * x.scales.len();
    for (group, out) in out.chunks_exact_mut(GROUP_ROWS).enumerate() {
        let (w, w_scales) = (&w[group * group_bytes..][..group_bytes], &w_scales[group * group_scales..][..group_scales]);
        let out: &mut [f32; GROUP_ROWS] = out.try_into().expect("four rows");
        // SAFETY: AVX2 (the caller's promise); the group's lengths agree.
        unsafe {
            if five_bit {
                five_bit_avx2(&FiveBitGroup { w, w_scales }, [x], core::array::from_mut(out));
            } else {
                group_avx2(&Group { w, w_scales, x: &x.codes, x_scales: &x.scales }, out);
            }
        }
    }
}

/// `groups_avx2` over byte codes with AVX-512 VNNI (one token: decode): per row and block
/// an xor (w + 128, unsigned) and a `vpdpbusd` where `group_avx2` takes two `psignb`, a
/// `pmaddubsw` and a `pmaddwd`, and `128·Σx` taken off the block's sums:
/// `Σ(w + 128)·x − 128·Σx = Σ w·x`, so the same sums and the same floats.
///
/// # Safety
/// AVX2, F16C, AVX-512 F/VL and VNNI must be available; `w` holds `out.len() / 4` whole
/// groups of byte codes, `group_bytes` each, `w_scales` their `x.scales.len()` scales per
/// row, interleaved as in `Group`.
#[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512vnni")]
pub unsafe fn groups_bytes_vnni(w: &[u8], w_scales: &[u16], group_bytes: usize, x: &Int8Activations, out: &mut [f32]) {
    let blocks = x.scales.len();
    let group_scales = GROUP_ROWS * blocks;
    debug_assert!(group_bytes == GROUP_ROWS * BLOCK * blocks && x.codes.len() == blocks * BLOCK && x.sums.len() == blocks);
    let bias = _mm256_set1_epi8(i8::MIN);
    for (group, out) in out.chunks_exact_mut(GROUP_ROWS).enumerate() {
        let (w, w_scales) = (&w[group * group_bytes..][..group_bytes], &w_scales[group * group_scales..][..group_scales]);
        let mut acc = _mm_setzero_ps();
        for ((b, &dx), &sum) in x.scales.iter().enumerate().zip(&x.sums) {
            prefetch_block_ahead(w, b);
            // SAFETY: block b of `x` is codes 32b.. + 32 (`blocks` blocks).
            let xv = unsafe { _mm256_loadu_si256(x.codes.as_ptr().add(b * BLOCK).cast()) };
            let row = |i: usize| {
                // SAFETY: row i's block b is bytes (4b + i)·32.. + 32 of the group's `w`.
                let wv = unsafe { _mm256_loadu_si256(w.as_ptr().add((b * GROUP_ROWS + i) * BLOCK).cast()) };
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_xor_si256(wv, bias), xv)
            };
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(row(0), row(1)), _mm256_hadd_epi32(row(2), row(3)));
            let sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            let sums = _mm_sub_epi32(sums, _mm_set1_epi32(128 * sum));
            // SAFETY: scales 4b..4b + 4 lie inside the group's `w_scales` (4 per block).
            let dw = unsafe { scales_f16c(w_scales.as_ptr().add(b * GROUP_ROWS)) };
            acc = _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dw, _mm_set1_ps(dx))));
        }
        // SAFETY: `out` holds four f32.
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
    }
}

/// As `scalar::five_bit_group` for N tokens: each block's 128 codes are widened to bytes
/// `u = code + 16` once (two nibble planes, the fifth bits moved to bit 4), then per
/// token `pmaddubsw(u, x)` (u ≤ 31, so pair sums ≤ 2·31·127 and two `phaddw` rounds
/// ≤ 8·31·127 < 2^15: no saturation), one `pmaddwd` by ones, and `Σu·x − 16·Σx` is
/// the block sum over the codes.
///
/// # Safety
/// AVX2 and F16C must be available; `g` and every token's lengths agree (see `FiveBitGroup`).
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub unsafe fn five_bit_avx2<const N: usize>(g: &FiveBitGroup<'_>, xs: [&Int8Activations; N], out: &mut [[f32; GROUP_ROWS]; N]) {
    let blocks = g.w_scales.len() / GROUP_ROWS;
    debug_assert!(g.w.len() == blocks * FIVE_BIT_BLOCK_BYTES && xs.iter().all(|x| x.codes.len() == blocks * BLOCK));
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm_setzero_ps(); N];
    for b in 0..blocks {
        // SAFETY: block b's 80 bytes lie inside `w` (80 per block), its four scales
        // inside `w_scales`, and each token's block b inside that token's codes.
        let (u, dw) =
            unsafe { (five_bit_unpack(g.w.as_ptr().add(b * FIVE_BIT_BLOCK_BYTES)), scales_f16c(g.w_scales.as_ptr().add(b * GROUP_ROWS))) };
        for (t, x) in xs.iter().enumerate() {
            // SAFETY: as above.
            let xv = unsafe { _mm256_loadu_si256(x.codes.as_ptr().add(b * BLOCK).cast()) };
            let p = |i: usize| _mm256_maddubs_epi16(u[i], xv);
            let pairs = _mm256_hadd_epi16(_mm256_hadd_epi16(p(0), p(1)), _mm256_hadd_epi16(p(2), p(3)));
            // per 128-bit half: [Σ row 0, Σ row 1, Σ row 2, Σ row 3] of that half's codes
            let h = _mm256_madd_epi16(pairs, ones);
            let sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            let sums = _mm_sub_epi32(sums, _mm_set1_epi32(16 * x.sums[b]));
            acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dw, _mm_set1_ps(x.scales[b]))));
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: `o` holds four f32.
        unsafe { _mm_storeu_ps(o.as_mut_ptr(), a) };
    }
}

/// Up to eight tokens' activations over a run of blocks, transposed for kernels that
/// broadcast four codes of a row against every token at once: `codes[at][j]` holds token
/// t's codes `4j..4j + 4` of the run's block `at` at bytes `4t..4t + 4`. Missing tokens
/// are zeros.
#[repr(C, align(32))]
pub struct TokenTile {
    codes: [[[u8; 4 * TILE_TOKENS]; BLOCK / 4]; TILE_BLOCKS],
    scales: [[f32; TILE_TOKENS]; TILE_BLOCKS],
    /// `16 · Σ q` per block: the five-bit kernels' correction for their unsigned codes.
    sums16: [[i32; TILE_TOKENS]; TILE_BLOCKS],
}

impl TokenTile {
    pub fn new() -> Self {
        TokenTile {
            codes: [[[0; 4 * TILE_TOKENS]; BLOCK / 4]; TILE_BLOCKS],
            scales: [[0.0; TILE_TOKENS]; TILE_BLOCKS],
            sums16: [[0; TILE_TOKENS]; TILE_BLOCKS],
        }
    }

    /// Blocks `blocks` (at most `TILE_BLOCKS`) of the tokens, as an 8×8 transpose of
    /// 32-bit words per block (the tile is remade for every call's rows, so it must cost
    /// little next to them).
    ///
    /// # Safety
    /// AVX2 must be available; every token has codes for `blocks`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn fill_avx2(&mut self, xs: &[Option<&Int8Activations>; TILE_TOKENS], blocks: core::ops::Range<usize>) {
        debug_assert!(blocks.len() <= TILE_BLOCKS && xs.iter().flatten().all(|x| x.codes.len() >= blocks.end * BLOCK));
        for (at, b) in blocks.enumerate() {
            // SAFETY: block b's 32 codes lie inside each token's codes (the caller's promise).
            let r = xs.map(|x| x.map_or(_mm256_setzero_si256(), |x| unsafe { _mm256_loadu_si256(x.codes.as_ptr().add(b * BLOCK).cast()) }));
            let t = [0, 2, 4, 6].map(|i| (_mm256_unpacklo_epi32(r[i], r[i + 1]), _mm256_unpackhi_epi32(r[i], r[i + 1])));
            // words j and j + 4 of four tokens each: [0|4], [1|5], [2|6], [3|7]
            let quad = |lo: usize| {
                let (a, b) = (t[lo], t[lo + 1]);
                [
                    _mm256_unpacklo_epi64(a.0, b.0),
                    _mm256_unpackhi_epi64(a.0, b.0),
                    _mm256_unpacklo_epi64(a.1, b.1),
                    _mm256_unpackhi_epi64(a.1, b.1),
                ]
            };
            let (first, last) = (quad(0), quad(2));
            for j in 0..4 {
                let words = [_mm256_permute2x128_si256::<0x20>(first[j], last[j]), _mm256_permute2x128_si256::<0x31>(first[j], last[j])];
                for (half, v) in words.into_iter().enumerate() {
                    // SAFETY: `codes[at][j + 4·half]` is 32 bytes, aligned (the type's alignment).
                    unsafe { _mm256_store_si256(self.codes[at][j + 4 * half].as_mut_ptr().cast(), v) };
                }
            }
            for (t, x) in xs.iter().enumerate() {
                self.scales[at][t] = x.map_or(0.0, |x| x.scales[b]);
                // |Σ q| ≤ 32·127, so 16·Σ q fits easily
                self.sums16[at][t] = x.map_or(0, |x| 16 * x.sums[b]);
            }
        }
    }
}

impl TokenTile {
    /// Block `at`'s `16·Σx` and scales, a lane per token.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sums_and_scales(&self, at: usize) -> (__m256i, __m256) {
        let (sums16, scales) = (&self.sums16[at], &self.scales[at]);
        // SAFETY: eight i32 and eight f32, each 32 bytes at a multiple of 32 from the
        // tile's (32-aligned) start.
        unsafe { (_mm256_load_si256(sums16.as_ptr().cast()), _mm256_load_ps(scales.as_ptr())) }
    }
}

/// Block `b` of a five-bit group as rows of bytes `u = code + 16`, into `u`.
///
/// # Safety
/// AVX2 must be available; `g.w` holds block `b`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn five_bit_rows(g: &FiveBitGroup<'_>, b: usize, u: &mut Rows) {
    // SAFETY: block b's 80 bytes lie inside `w` (the caller's promise); `u` rows are 32
    // aligned bytes.
    unsafe {
        for (row, v) in u.0.iter_mut().zip(five_bit_unpack(g.w.as_ptr().add(b * FIVE_BIT_BLOCK_BYTES))) {
            _mm256_store_si256(row.as_mut_ptr().cast(), v);
        }
    }
}

/// Four rows' sums of a tile's eight tokens, token-major as the callers keep them
/// (`acc[token][row]`), as one vector per row; `store_rows` is its inverse.
#[target_feature(enable = "avx2")]
#[inline]
fn load_rows(acc: &[[f32; GROUP_ROWS]; TILE_TOKENS]) -> [__m256; GROUP_ROWS] {
    // SAFETY: each `acc[t]` is four f32.
    let token = |t: usize| unsafe { _mm_loadu_ps(acc[t].as_ptr()) };
    // tokens t and t + 4 side by side, then a 4×4 transpose in each 128-bit half
    transpose_halves([0, 1, 2, 3].map(|t| _mm256_set_m128(token(t + 4), token(t))))
}

/// `load_rows` backwards: row vectors into `acc[token][row]`.
#[target_feature(enable = "avx2")]
#[inline]
fn store_rows(rows: [__m256; GROUP_ROWS], acc: &mut [[f32; GROUP_ROWS]; TILE_TOKENS]) {
    for (t, v) in transpose_halves(rows).into_iter().enumerate() {
        // SAFETY: each `acc[t]` is four f32.
        unsafe {
            _mm_storeu_ps(acc[t].as_mut_ptr(), _mm256_castps256_ps128(v));
            _mm_storeu_ps(acc[t + 4].as_mut_ptr(), _mm256_extractf128_ps::<1>(v));
        }
    }
}

/// The 4×4 transpose of each 128-bit half of four vectors (its own inverse).
#[target_feature(enable = "avx2")]
#[inline]
fn transpose_halves(v: [__m256; 4]) -> [__m256; 4] {
    let (lo01, hi01) = (_mm256_unpacklo_ps(v[0], v[1]), _mm256_unpackhi_ps(v[0], v[1]));
    let (lo23, hi23) = (_mm256_unpacklo_ps(v[2], v[3]), _mm256_unpackhi_ps(v[2], v[3]));
    let pd = _mm256_castps_pd;
    [
        _mm256_castpd_ps(_mm256_unpacklo_pd(pd(lo01), pd(lo23))),
        _mm256_castpd_ps(_mm256_unpackhi_pd(pd(lo01), pd(lo23))),
        _mm256_castpd_ps(_mm256_unpacklo_pd(pd(hi01), pd(hi23))),
        _mm256_castpd_ps(_mm256_unpackhi_pd(pd(hi01), pd(hi23))),
    ]
}

/// A five-bit group block's four rows as bytes `u = code + 16`, one row per vector in
/// code order: two nibble planes, the fifth bits moved to bit 4.
///
/// # Safety
/// AVX2 must be available; `p` points at one group block's 80 readable bytes.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn five_bit_unpack(p: *const u8) -> [__m256i; GROUP_ROWS] {
    let nibble = _mm256_set1_epi8(0x0f);
    // SAFETY: the 80 bytes are readable (the caller's promise).
    let (low01, low23, fifth) = unsafe {
        let fifth = _mm_loadu_si128(p.add(64).cast());
        (
            _mm256_loadu_si256(p.cast()),
            _mm256_loadu_si256(p.add(32).cast()),
            // bytes 0..16 carry codes 0..16's fifth bits at bits 4..8; shifted by a
            // nibble, bytes 16..32 carry codes 16..32's there too
            _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(fifth), _mm_slli_epi16::<4>(fifth)),
        )
    };
    // each fifth bit isolated, then moved to bit 4 of its own byte
    [
        _mm256_or_si256(_mm256_and_si256(low01, nibble), _mm256_and_si256(fifth, _mm256_set1_epi8(0x10))),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(low01), nibble),
            _mm256_srli_epi16::<1>(_mm256_and_si256(fifth, _mm256_set1_epi8(0x20))),
        ),
        _mm256_or_si256(_mm256_and_si256(low23, nibble), _mm256_srli_epi16::<2>(_mm256_and_si256(fifth, _mm256_set1_epi8(0x40)))),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(low23), nibble),
            _mm256_srli_epi16::<3>(_mm256_and_si256(fifth, _mm256_set1_epi8(0x80u8 as i8))),
        ),
    ]
}

/// As `scalar::five_bit_group` for the (up to) eight tokens of `tile`, over the tile's
/// first `g.w_scales.len() / 4` blocks, adding to `acc[token][row]`. Tokens sit in the
/// vector's lanes and each four codes of a row are broadcast against them, so a block's
/// sums come out one vector per row with no horizontal reduction: per row and block,
/// eight `pmaddubsw` (u ≤ 31, pair sums ≤ 2·31·127, four of them added in i16
/// ≤ 31 496 < 2^15), two `pmaddwd` by ones, and the float step, for eight tokens — the
/// token-at-a-time kernel spends about as much on one token's four rows.
///
/// # Safety
/// AVX2 and F16C must be available; `g.w` holds `g.w_scales.len() / 4 ≤ TILE_BLOCKS` group
/// blocks.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn five_bit_tile_avx2(g: &FiveBitGroup<'_>, tile: &TokenTile, acc: &mut [[f32; GROUP_ROWS]; TILE_TOKENS]) {
    let blocks = g.w_scales.len() / GROUP_ROWS;
    debug_assert!(blocks <= TILE_BLOCKS && g.w.len() == blocks * FIVE_BIT_BLOCK_BYTES);
    let ones = _mm256_set1_epi16(1);
    let mut sum = load_rows(acc);
    let mut u = Rows([[0; TILE_TOKENS]; GROUP_ROWS]);
    for b in 0..blocks {
        // SAFETY: `w` holds the group's blocks (the caller's promise).
        unsafe { five_bit_rows(g, b, &mut u) };
        // read back from memory: `vpbroadcastd` of a load is a load-port operation, where
        // LLVM's register version takes two shuffles per broadcast (measured slower)
        let u = core::hint::black_box(&u);
        let x = &tile.codes[b];
        let mut dot = [_mm256_setzero_si256(); GROUP_ROWS];
        for half in 0..2 {
            let mut pairs = [_mm256_setzero_si256(); GROUP_ROWS];
            for j in 4 * half..4 * half + 4 {
                // SAFETY: `x[j]` is 32 aligned bytes.
                let xv = unsafe { _mm256_load_si256(x[j].as_ptr().cast()) };
                for (p, row) in pairs.iter_mut().zip(&u.0) {
                    *p = _mm256_add_epi16(*p, _mm256_maddubs_epi16(_mm256_set1_epi32(row[j]), xv));
                }
            }
            for (d, p) in dot.iter_mut().zip(pairs) {
                *d = _mm256_add_epi32(*d, _mm256_madd_epi16(p, ones));
            }
        }
        let (sums16, dx) = tile.sums_and_scales(b);
        // SAFETY: block b's four scales lie inside `w_scales`.
        let dw = unsafe { scales_f16c(g.w_scales.as_ptr().add(b * GROUP_ROWS)) };
        add_block(&mut sum, dot, sums16, dx, dw);
    }
    store_rows(sum, acc);
}

/// As `scalar::group` for the (up to) eight tokens of `tile`, over the tile's first
/// `w_scales.len() / 4` blocks, adding to `acc[token][row]`: the byte form's codes on
/// the tile layout of `five_bit_tile_avx2`, with llama.cpp's sign trick (|w| times x
/// with w's sign; pair sums ≤ 2·128·127 fit i16, but two of them may not, so each
/// `pmaddubsw` is widened by `pmaddwd` before it is added).
///
/// # Safety
/// AVX2 and F16C must be available; `w` is four rows' interleaved codes of `w_scales.len() / 4 ≤
/// TILE_BLOCKS` blocks (`128` bytes each).
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn bytes_tile_avx2(w: &[u8], w_scales: &[u16], tile: &TokenTile, acc: &mut [[f32; GROUP_ROWS]; TILE_TOKENS]) {
    let blocks = w_scales.len() / GROUP_ROWS;
    debug_assert!(blocks <= TILE_BLOCKS && w.len() == blocks * GROUP_ROWS * BLOCK);
    let ones = _mm256_set1_epi16(1);
    let mut sum = load_rows(acc);
    let (mut codes, mut magnitudes) = (Rows([[0; TILE_TOKENS]; GROUP_ROWS]), Rows([[0; TILE_TOKENS]; GROUP_ROWS]));
    for b in 0..blocks {
        // SAFETY: row i's block b is bytes (4b + i)·32.. + 32 of `w`; `codes` and
        // `magnitudes` rows are 32 aligned bytes.
        unsafe {
            for (i, (c, m)) in codes.0.iter_mut().zip(&mut magnitudes.0).enumerate() {
                let v = _mm256_loadu_si256(w.as_ptr().add((b * GROUP_ROWS + i) * BLOCK).cast());
                _mm256_store_si256(c.as_mut_ptr().cast(), v);
                _mm256_store_si256(m.as_mut_ptr().cast(), _mm256_sign_epi8(v, v));
            }
        }
        // broadcasts from memory, as in `five_bit_tile_avx2`
        let (codes, magnitudes) = core::hint::black_box((&codes, &magnitudes));
        let x = &tile.codes[b];
        let mut dot = [_mm256_setzero_si256(); GROUP_ROWS];
        for (j, x) in x.iter().enumerate() {
            // SAFETY: `x` is 32 aligned bytes.
            let xv = unsafe { _mm256_load_si256(x.as_ptr().cast()) };
            for (d, (c, m)) in dot.iter_mut().zip(codes.0.iter().zip(&magnitudes.0)) {
                let signed = _mm256_sign_epi8(xv, _mm256_set1_epi32(c[j]));
                *d = _mm256_add_epi32(*d, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi32(m[j]), signed), ones));
            }
        }
        // SAFETY: the tile's block b holds 8 scales, 32 aligned bytes; block b's four
        // scales lie inside `w_scales`.
        let (dx, dw) = unsafe { (_mm256_load_ps(tile.scales[b].as_ptr()), scales_f16c(w_scales.as_ptr().add(b * GROUP_ROWS))) };
        for (i, (s, d)) in sum.iter_mut().zip(dot).enumerate() {
            let scale = _mm256_mul_ps(lane(dw, i), dx);
            *s = _mm256_add_ps(*s, _mm256_mul_ps(_mm256_cvtepi32_ps(d), scale));
        }
    }
    store_rows(sum, acc);
}

/// `five_bit_tile_avx2` with AVX-512 VNNI: one `vpdpbusd` per row and four codes
/// (u ≤ 31 unsigned times the tokens' signed codes, summed into i32) instead of a
/// `pmaddubsw`, an i16 add and a share of a `pmaddwd`; the same integer sums, so the
/// same floats.
///
/// # Safety
/// AVX2, F16C, AVX-512 F/VL and VNNI must be available; otherwise as `five_bit_tile_avx2`.
#[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512vnni")]
pub unsafe fn five_bit_tile_vnni(g: &FiveBitGroup<'_>, tile: &TokenTile, acc: &mut [[f32; GROUP_ROWS]; TILE_TOKENS]) {
    let blocks = g.w_scales.len() / GROUP_ROWS;
    debug_assert!(blocks <= TILE_BLOCKS && g.w.len() == blocks * FIVE_BIT_BLOCK_BYTES);
    let mut u = Rows([[0; TILE_TOKENS]; GROUP_ROWS]);
    let mut sum = load_rows(acc);
    for b in 0..blocks {
        // SAFETY: `w` holds the group's blocks (the caller's promise).
        unsafe { five_bit_rows(g, b, &mut u) };
        let dot = dot_tile_vnni(core::hint::black_box(&u), &tile.codes[b]);
        let (sums16, dx) = tile.sums_and_scales(b);
        // SAFETY: block b's four scales lie inside `w_scales`.
        let dw = unsafe { scales_f16c(g.w_scales.as_ptr().add(b * GROUP_ROWS)) };
        add_block(&mut sum, dot, sums16, dx, dw);
    }
    store_rows(sum, acc);
}

/// `bytes_tile_avx2` with AVX-512 VNNI: each code w as the unsigned byte w + 128 (one xor
/// per row and block), one `vpdpbusd` per row and four codes, and `128·Σx` taken off
/// after (from the tile's `16·Σx`): `Σ(w + 128)·x − 128·Σx = Σ w·x` exactly, so the same
/// floats as the AVX2 kernel, which needs a `psignb`, a `pmaddubsw`, a `pmaddwd` and an
/// add for the same four codes.
///
/// # Safety
/// AVX2, F16C, AVX-512 F/VL and VNNI must be available; otherwise as `bytes_tile_avx2`.
#[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512vnni")]
pub unsafe fn bytes_tile_vnni(w: &[u8], w_scales: &[u16], tile: &TokenTile, acc: &mut [[f32; GROUP_ROWS]; TILE_TOKENS]) {
    let blocks = w_scales.len() / GROUP_ROWS;
    debug_assert!(blocks <= TILE_BLOCKS && w.len() == blocks * GROUP_ROWS * BLOCK);
    let bias = _mm256_set1_epi8(i8::MIN);
    let mut u = Rows([[0; TILE_TOKENS]; GROUP_ROWS]);
    let mut sum = load_rows(acc);
    for b in 0..blocks {
        // SAFETY: row i's block b is bytes (4b + i)·32.. + 32 of `w`; `u` rows are 32
        // aligned bytes.
        unsafe {
            for (i, row) in u.0.iter_mut().enumerate() {
                let v = _mm256_loadu_si256(w.as_ptr().add((b * GROUP_ROWS + i) * BLOCK).cast());
                _mm256_store_si256(row.as_mut_ptr().cast(), _mm256_xor_si256(v, bias));
            }
        }
        let dot = dot_tile_vnni(core::hint::black_box(&u), &tile.codes[b]);
        let (sums16, dx) = tile.sums_and_scales(b);
        // SAFETY: block b's four scales lie inside `w_scales`.
        let dw = unsafe { scales_f16c(w_scales.as_ptr().add(b * GROUP_ROWS)) };
        add_block(&mut sum, dot, _mm256_slli_epi32::<3>(sums16), dx, dw);
    }
    store_rows(sum, acc);
}

/// Adds one block of a token tile to the rows' float sums: `(dot − correction)` (each
/// row's integer sums of the tile's tokens, less their offset codes' share) times
/// `dw_row · dx`, in the scalar kernel's order.
#[target_feature(enable = "avx2")]
#[inline]
fn add_block(sum: &mut [__m256; GROUP_ROWS], dot: [__m256i; GROUP_ROWS], correction: __m256i, dx: __m256, dw: __m128) {
    for (i, (s, d)) in sum.iter_mut().zip(dot).enumerate() {
        let scale = _mm256_mul_ps(lane(dw, i), dx);
        *s = _mm256_add_ps(*s, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(d, correction)), scale));
    }
}

/// A group block's four rows of unsigned codes, as i32 words of four codes each, aligned
/// for broadcasts from memory.
#[repr(C, align(32))]
struct Rows([[i32; TILE_TOKENS]; GROUP_ROWS]);

/// One block's `Σ u·x` per row (a vector of the tile's eight tokens), u unsigned: a
/// `vpdpbusd` per row and four codes, two accumulators per row so that its latency does
/// not chain eight deep.
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
#[inline]
fn dot_tile_vnni(u: &Rows, x: &[[u8; 4 * TILE_TOKENS]; BLOCK / 4]) -> [__m256i; GROUP_ROWS] {
    let mut dot = [[_mm256_setzero_si256(); 2]; GROUP_ROWS];
    for (j, x) in x.iter().enumerate() {
        // SAFETY: `x` is 32 aligned bytes.
        let xv = unsafe { _mm256_load_si256(x.as_ptr().cast()) };
        for (d, row) in dot.iter_mut().zip(&u.0) {
            d[j % 2] = _mm256_dpbusd_epi32(d[j % 2], _mm256_set1_epi32(row[j]), xv);
        }
    }
    dot.map(|[a, b]| _mm256_add_epi32(a, b))
}

/// `group_avx2` for N tokens: each row's codes and their magnitudes are loaded and made
/// once per block for all N; each token's float steps are `group_avx2`'s.
///
/// # Safety
/// AVX2 and F16C must be available; `w` is four rows' interleaved codes (`4 · cols` bytes),
/// `w_scales` their `4 · cols/32` scales, and every token has `cols` codes.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn group_avx2_n<const N: usize>(w: &[u8], w_scales: &[u16], xs: [&Int8Activations; N], out: &mut [[f32; GROUP_ROWS]; N]) {
    let blocks = w_scales.len() / GROUP_ROWS;
    debug_assert!(w.len() == blocks * GROUP_ROWS * BLOCK && xs.iter().all(|x| x.codes.len() == blocks * BLOCK));
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm_setzero_ps(); N];
    for b in 0..blocks {
        // SAFETY (loads): row i's block b is bytes (4b + i)·32.. + 32 of `w`, its scales
        // 4b.. + 4 of `w_scales`, each token's block b inside that token's vectors.
        let (wv, dw) = unsafe {
            let row = |i: usize| _mm256_loadu_si256(w.as_ptr().add((b * GROUP_ROWS + i) * BLOCK).cast());
            ([row(0), row(1), row(2), row(3)], scales_f16c(w_scales.as_ptr().add(b * GROUP_ROWS)))
        };
        let magnitude = wv.map(|w| _mm256_sign_epi8(w, w));
        for (t, x) in xs.iter().enumerate() {
            // SAFETY: as above.
            let xv = unsafe { _mm256_loadu_si256(x.codes.as_ptr().add(b * BLOCK).cast()) };
            let row = |i: usize| _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude[i], _mm256_sign_epi8(xv, wv[i])), ones);
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(row(0), row(1)), _mm256_hadd_epi32(row(2), row(3)));
            let sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(dw, _mm_set1_ps(x.scales[b]))));
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: `o` holds four f32.
        unsafe { _mm_storeu_ps(o.as_mut_ptr(), a) };
    }
}
