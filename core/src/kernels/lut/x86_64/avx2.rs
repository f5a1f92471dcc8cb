//! AVX2: two chunks per `vpshufb` (one table per 128-bit lane); `vpmaddubsw` weighs
//! and adds plane pairs, and the float epilogue stays in registers.
//!
//! Plane pairs accumulate in i16 with weights (4^l, 2·4^l) for the l-th pair of a
//! *set*, so several pairs share accumulators and are widened to i32 once per set, not
//! once per pair. A set holds as many pairs as keep every i16 sum in range: a lookup is
//! at most 127 in magnitude, a word of an accumulator takes one weighted pair per
//! 32-byte load, two loads per quad, so a set of `s` pairs over `q` quads sums to at most
//! `2·q·(4^s − 1)·127` (`pairs_per_set`). An odd last plane is its own set. Where twice
//! that fits too, a set's two lanes (two chunks of the same rows) are added in i16 before
//! widening (`lane_sum_pairs`).

use core::arch::x86_64::*;
use core::ops::Range;

use crate::kernels::lut::Job;
use crate::{Block64, Interleave, ScaleFormat, TILE_ROWS};

/// The most a word of a set's i16 accumulators can reach: one weighted pair per 32-byte
/// load, two loads per quad.
fn set_bound(n_quads: usize, pairs: usize) -> usize {
    2 * n_quads * ((1usize << (2 * pairs)) - 1) * 127
}

/// Pairs of planes that may share i16 accumulators over `n_quads` quads (at most 3:
/// with a fourth, weights 64 and 128, even one quad's sums would overflow).
fn pairs_per_set(n_quads: usize) -> usize {
    (1..=3).rev().find(|&p| set_bound(n_quads, p) <= i16::MAX as usize).unwrap_or(1)
}

/// Pairs of planes (0 for none) whose set's two lanes may be added in i16 as well, each
/// word then at most twice `set_bound`.
fn lane_sum_pairs(n_quads: usize) -> usize {
    (0..=3).rev().find(|&p| 2 * set_bound(n_quads, p) <= i16::MAX as usize).unwrap_or(0)
}

/// Whether every set of a BITS-bit matrix with `n_quads` quads may add its lanes in i16
/// (`rows`' LANE_SUM): among others 4 and 5 bits in groups of up to 64 (Q4_0, Q4_K), 6
/// and 7 in groups of 16 (Q6_K), 2 and 3 bits always; an odd plane always (its words are
/// at most `2·n_quads·127`, twice that summed: n_quads ≤ 16 keeps it in range).
fn lanes_fit(bits: usize, n_quads: usize) -> bool {
    (bits / 2).min(pairs_per_set(n_quads)) <= lane_sum_pairs(n_quads)
}

/// The i16 rows of `a` (the two 128-bit lanes are two chunks of the same 8 rows) as i32
/// rows. With LANE_SUM (the lanes' sum of every word fits i16) the lanes are added
/// before widening, two vectors per pair of permutes: half the widening instructions.
#[target_feature(enable = "avx2")]
#[inline]
fn widen<const LANE_SUM: bool>(a: [__m256i; 4]) -> [__m256i; 4] {
    let mut rows = [_mm256_setzero_si256(); 4];
    if LANE_SUM {
        for k in [0, 2] {
            // a[k]'s chunks summed in the low lane, a[k + 1]'s in the high one
            let sum =
                _mm256_add_epi16(_mm256_permute2x128_si256::<0x20>(a[k], a[k + 1]), _mm256_permute2x128_si256::<0x31>(a[k], a[k + 1]));
            rows[k] = _mm256_cvtepi16_epi32(_mm256_castsi256_si128(sum));
            rows[k + 1] = _mm256_cvtepi16_epi32(_mm256_extracti128_si256::<1>(sum));
        }
    } else {
        for (r, a) in rows.iter_mut().zip(a) {
            let lo = _mm256_cvtepi16_epi32(_mm256_castsi256_si128(a));
            let hi = _mm256_cvtepi16_epi32(_mm256_extracti128_si256::<1>(a));
            *r = _mm256_add_epi32(lo, hi);
        }
    }
    rows
}

/// Sets `out` to `rows` where `first` (the first set, whose weights are relative to plane
/// 0: no shift, no add — one set holds every pair of Q4_0, Q4_K and Q6_K groups), else
/// adds `rows · 2^shift`.
#[target_feature(enable = "avx2")]
#[inline]
fn put_rows(out: &mut [__m256i; 4], rows: [__m256i; 4], shift: i32, first: bool) {
    if first {
        *out = rows;
    } else {
        let count = _mm_cvtsi32_si128(shift);
        for (o, r) in out.iter_mut().zip(rows) {
            *o = _mm256_add_epi32(*o, _mm256_sll_epi32(r, count));
        }
    }
}

/// Integer accumulators of one tile-group for N tokens' tables: `[token][k]` holds rows
/// 8k..8k+8 as i32. Each 32 weight bytes are loaded and split into nibble indices once
/// for all N tokens; integer sums, so each token's rows do not depend on N.
///
/// # Safety
/// The CPU must support AVX2; `w` is one tile-group of a `Shuffle` layout of BITS bits
/// with `n_quads` quads, each of `tables` points at that group's `n_quads` (aligned)
/// table blocks, and `per_set` is `pairs_per_set(n_quads)`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn rows<const BITS: usize, const N: usize, const LANE_SUM: bool>(
    w: &[u8],
    tables: [*const u8; N],
    n_quads: usize,
    per_set: usize,
) -> [[__m256i; 4]; N] {
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * n_quads * BITS / 8);
    debug_assert_eq!(per_set, pairs_per_set(n_quads));
    debug_assert!(n_quads <= 16 && (!LANE_SUM || lanes_fit(BITS, n_quads)));
    let nibble = _mm256_set1_epi8(0x0f);
    let mut out = [[_mm256_setzero_si256(); 4]; N];
    let mut p = w.as_ptr();
    // per token: low and high nibbles of the first 32 bytes of a chunk pair, then of the
    // second (rows 0..8, 8..16, 16..24, 24..32 once widened)
    let mut a = [[_mm256_setzero_si256(); 4]; N];
    for pair in 0..BITS / 2 {
        let level = pair % per_set;
        // bytes (4^level, 2·4^level): the pair's two planes, relative to the set's first
        let weights = _mm256_set1_epi16((0x0201u16 << (2 * level)) as i16);
        for quad in 0..n_quads {
            for half in 0..2 {
                for lanes in 0..2 {
                    // SAFETY: `p` walks exactly `w`; every token's tables hold `n_quads`
                    // 64-byte (aligned) blocks.
                    unsafe {
                        let v = _mm256_loadu_si256(p.cast());
                        p = p.add(32);
                        let i_lo = _mm256_and_si256(v, nibble);
                        let i_hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
                        for (a, table) in a.iter_mut().zip(tables) {
                            let table = _mm256_load_si256(table.add(64 * quad + 32 * lanes).cast());
                            let lo = _mm256_shuffle_epi8(table, i_lo);
                            let hi = _mm256_shuffle_epi8(table, i_hi);
                            a[2 * half] = _mm256_add_epi16(a[2 * half], _mm256_maddubs_epi16(weights, lo));
                            a[2 * half + 1] = _mm256_add_epi16(a[2 * half + 1], _mm256_maddubs_epi16(weights, hi));
                        }
                    }
                }
            }
        }
        if level + 1 == per_set || pair + 1 == BITS / 2 {
            for (out, a) in out.iter_mut().zip(a.iter_mut()) {
                put_rows(out, widen::<LANE_SUM>(*a), 2 * (pair - level) as i32, pair == level);
                *a = [_mm256_setzero_si256(); 4];
            }
        }
    }
    if BITS % 2 == 1 {
        // Byte i of a chunk is row i (low nibble) and 16 + i (high nibble): one
        // `vpmaddubsw` keeps the even rows, one the odd, each widened to i16 in place.
        let even = _mm256_set1_epi16(0x0001);
        let odd = _mm256_set1_epi16(0x0100);
        // per token: even and odd rows of 0..16, even and odd rows of 16..32
        let mut e = [[_mm256_setzero_si256(); 4]; N];
        for quad in 0..n_quads {
            for lanes in 0..2 {
                // SAFETY: as above.
                unsafe {
                    let v = _mm256_loadu_si256(p.cast());
                    p = p.add(32);
                    let i_lo = _mm256_and_si256(v, nibble);
                    let i_hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
                    for (e, table) in e.iter_mut().zip(tables) {
                        let table = _mm256_load_si256(table.add(64 * quad + 32 * lanes).cast());
                        let lo = _mm256_shuffle_epi8(table, i_lo);
                        let hi = _mm256_shuffle_epi8(table, i_hi);
                        e[0] = _mm256_add_epi16(e[0], _mm256_maddubs_epi16(even, lo));
                        e[1] = _mm256_add_epi16(e[1], _mm256_maddubs_epi16(odd, lo));
                        e[2] = _mm256_add_epi16(e[2], _mm256_maddubs_epi16(even, hi));
                        e[3] = _mm256_add_epi16(e[3], _mm256_maddubs_epi16(odd, hi));
                    }
                }
            }
        }
        for (out, e) in out.iter_mut().zip(e) {
            // interleave even and odd rows back: rows 0..8, 8..16, 16..24, 24..32
            let a = [
                _mm256_unpacklo_epi16(e[0], e[1]),
                _mm256_unpackhi_epi16(e[0], e[1]),
                _mm256_unpacklo_epi16(e[2], e[3]),
                _mm256_unpackhi_epi16(e[2], e[3]),
            ];
            // lanes summed in i16 whatever LANE_SUM: always in range for one plane
            put_rows(out, widen::<true>(a), BITS as i32 - 1, BITS == 1);
        }
    }
    out
}

#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile_group_bits<const BITS: usize>(w: &[u8], quads: &[Block64], acc: &mut [i32; TILE_ROWS]) {
    // SAFETY: the caller's contract; `quads` holds the group's table blocks.
    let (n_quads, table) = (quads.len(), [quads.as_ptr().cast()]);
    let per_set = pairs_per_set(n_quads);
    let [rows] = unsafe {
        if lanes_fit(BITS, n_quads) {
            rows::<BITS, 1, true>(w, table, n_quads, per_set)
        } else {
            rows::<BITS, 1, false>(w, table, n_quads, per_set)
        }
    };
    let dst = acc.as_mut_ptr().cast::<__m256i>();
    for (k, r) in rows.into_iter().enumerate() {
        // SAFETY: `acc` is 32 i32 = four 256-bit vectors.
        unsafe { _mm256_storeu_si256(dst.add(k), _mm256_add_epi32(_mm256_loadu_si256(dst.add(k)), r)) };
    }
}

/// # Safety
/// The CPU must support AVX2; `w` is one tile-group of a layout with `quads.len()` quads.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn tile_group(w: &[u8], quads: &[Block64], bits: u8, _: Interleave, acc: &mut [i32; TILE_ROWS]) {
    // SAFETY (all arms): same contract as this function. `bits` comes from a `Layout`,
    // whose private fields hold 1..=8 (only `Layout::new` makes one), so `_` is 8.
    unsafe {
        match bits {
            1 => tile_group_bits::<1>(w, quads, acc),
            2 => tile_group_bits::<2>(w, quads, acc),
            3 => tile_group_bits::<3>(w, quads, acc),
            4 => tile_group_bits::<4>(w, quads, acc),
            5 => tile_group_bits::<5>(w, quads, acc),
            6 => tile_group_bits::<6>(w, quads, acc),
            7 => tile_group_bits::<7>(w, quads, acc),
            _ => tile_group_bits::<8>(w, quads, acc),
        }
    }
}

crate::kernels::lut::define_run!("avx2,fma,f16c"; |b| f16x32(b));

/// 32 f16 scales to f32 with F16C `vcvtph2ps`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn f16x32(bytes: &[u8; 64]) -> [f32; TILE_ROWS] {
    // SAFETY: [f32; 32] is four __m256 of plain bits.
    unsafe { core::mem::transmute(f16x32_regs(bytes.as_ptr())) }
}

/// 32 f16 at `p` as four vectors of 8 f32.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn f16x32_regs(p: *const u8) -> [__m256; 4] {
    let mut out = [_mm256_setzero_ps(); 4];
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: callers pass 64 readable bytes.
        *o = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.add(16 * i).cast()) });
    }
    out
}

/// The float epilogue of one matrix in registers, shared by the one- and N-token
/// kernels: the operations and their order are the portable epilogue's
/// (`lut::FloatOut`), so every token's floats equal the other ISAs' up to nothing but
/// this fact, and each other whatever N.
struct Epilogue<'a> {
    job: &'a Job<'a>,
    scales: ScaleFormat,
}

impl<'a> Epilogue<'a> {
    fn new(job: &'a Job<'a>) -> Self {
        Epilogue { job, scales: job.layout.scales() }
    }

    /// The 32 f32 scales (or minima) of the `F16` or `F32` block at byte `at`.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn block(&self, at: usize) -> [__m256; 4] {
        let wide = self.scales == ScaleFormat::F32;
        let p = self.job.bytes[at..at + if wide { 128 } else { 64 }].as_ptr();
        // SAFETY: `p` starts a block of 32 f16 (64 bytes) or f32 (128, `wide`), checked
        // just above.
        unsafe {
            if wide {
                let p = p.cast::<f32>();
                [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)), _mm256_loadu_ps(p.add(16)), _mm256_loadu_ps(p.add(24))]
            } else {
                f16x32_regs(p)
            }
        }
    }

    /// The 32 sub-block codes at byte `at` as f32 (`quant::sub_codes`' arrangement: low
    /// nibbles of 16 bytes are rows 0–16, high nibbles rows 16–32; 6-bit codes take two
    /// more bits per row from the next 8 bytes, 2·(row / 8) up in byte row % 8).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn sub_codes(&self, at: usize, bits: u8, signed: bool) -> [__m256; 4] {
        let len = match bits {
            8 => 32,
            6 => 24,
            _ => 16,
        };
        let p = self.job.bytes[at..at + len].as_ptr();
        // SAFETY: each load reads only the `len` bytes checked just above.
        let v = unsafe {
            if bits == 8 {
                _mm256_loadu_si256(p.cast())
            } else {
                let (low, nibble) = (_mm_loadu_si128(p.cast()), _mm_set1_epi8(0x0f));
                let v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(low), nibble), _mm_and_si128(low, nibble));
                if bits == 6 {
                    // qword j (rows 8j..8j + 8) shifted down 2j: byte k's low two bits are
                    // bits 2j, 2j + 1 of high byte k
                    let high = _mm256_set1_epi64x(p.add(16).cast::<i64>().read_unaligned());
                    let picked = _mm256_srlv_epi64(high, _mm256_set_epi64x(6, 4, 2, 0));
                    // two bits ≤ 3, so the 16-bit shift moves nothing across bytes
                    _mm256_or_si256(v, _mm256_slli_epi16::<4>(_mm256_and_si256(picked, _mm256_set1_epi8(3))))
                } else {
                    v
                }
            }
        };
        let (lo, hi) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let eights = [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)];
        let shift = _mm_cvtsi32_si128(32 - bits as i32);
        eights.map(|e| {
            let c = _mm256_cvtepu8_epi32(e);
            _mm256_cvtepi32_ps(if signed { _mm256_sra_epi32(_mm256_sll_epi32(c, shift), shift) } else { c })
        })
    }

    /// Tile-group (tile, g)'s scales, and minima when the layout has them.
    #[target_feature(enable = "avx2,f16c")]
    #[inline]
    fn affine(&self, tile: usize, g: usize) -> ([__m256; 4], Option<[__m256; 4]>) {
        if let ScaleFormat::SubBlock { bits, signed } = self.scales {
            // codes times d in registers: the same f32 products as the portable
            // `Job::affine_cached` (one IEEE multiply each), without its round trip through memory,
            // which cost group-16 types (Q2_K, Q3_K, Q6_K) as much as their lookups
            let head = self.job.super_block_offset(tile, g);
            let (d, codes) = (self.block(head), self.sub_codes(self.job.scale_block_offset(tile, g), bits, signed));
            let scales = [0, 1, 2, 3].map(|i| _mm256_mul_ps(d[i], codes[i]));
            if !self.job.has_mins() {
                return (scales, None);
            }
            let (dmin, codes) = (self.block(head + 64), self.sub_codes(self.job.min_block_offset(tile, g), bits, false));
            // −(dmin·code): negation only flips the sign bit, as the portable code's does
            let sign = _mm256_set1_ps(-0.0);
            return (scales, Some([0, 1, 2, 3].map(|i| _mm256_xor_ps(_mm256_mul_ps(dmin[i], codes[i]), sign))));
        }
        let at = self.job.scale_block_offset(tile, g);
        let mins = if self.job.has_mins() { Some(self.block(self.job.min_block_offset(tile, g))) } else { None };
        (self.block(at), mins)
    }

    /// Adds group `g`'s integer sums `ints`, over one token's tables (its `job`), to that
    /// token's `f`: `f += s·(I·α + β) [+ m·Σa]`, multiplies and adds as the portable
    /// epilogue has them.
    ///
    /// # Safety
    /// `g` < `job.groups()`: the lengths are checked once per job (`Job::new`), not per
    /// group and token.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn add(&self, f: &mut [__m256; 4], ints: [__m256i; 4], job: &Job<'_>, g: usize, affine: &([__m256; 4], Option<[__m256; 4]>)) {
        // SAFETY: `g` < the job's group count (the caller's contract), the length of both
        // (checked by `Job::new`).
        let (sum, scale) = unsafe { (*job.tables.sum.get_unchecked(g), *job.tables.scale.get_unchecked(g)) };
        let alpha = _mm256_set1_ps(scale * 0.5);
        let (scales, mins) = affine;
        let beta = _mm256_set1_ps(job.beta_of(sum));
        for k in 0..4 {
            let x = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(ints[k]), alpha), beta);
            let mut x = _mm256_mul_ps(scales[k], x);
            if let Some(m) = mins {
                x = _mm256_add_ps(x, _mm256_mul_ps(m[k], _mm256_set1_ps(sum)));
            }
            f[k] = _mm256_add_ps(f[k], x);
        }
    }

    /// Writes tile `tile`'s rows (of the tiles from `first`) into `y`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn store(&self, f: [__m256; 4], tile: usize, first: usize, y: &mut [f32]) {
        let start = (tile - first) * TILE_ROWS;
        let n = (self.job.layout.rows() - tile * TILE_ROWS).min(TILE_ROWS);
        let mut rows = [0.0f32; TILE_ROWS];
        // a whole tile straight into `y`; the last, partial one through `rows` (a
        // `memcpy` call per tile and token was 1.5 % of a stories15M prefill)
        let out = if n == TILE_ROWS { &mut y[start..start + TILE_ROWS] } else { &mut rows[..] };
        for (k, v) in f.into_iter().enumerate() {
            // SAFETY: `out` holds 32 f32, 8 at 8k.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * k), v) };
        }
        if n < TILE_ROWS {
            y[start..start + n].copy_from_slice(&rows[..n]);
        }
    }
}

/// The float GEMV of N tokens over the same tiles, the epilogue in registers. Each
/// tile-group's codes are looked up P tokens at a time (P divides N; P = N while the
/// tokens' sums fit in registers) while they sit in L1, and its scales are loaded (or, for
/// sub-block scales, multiplied out) once for all N. Every token's epilogue is the same
/// operations in the same order, so each `y` is its GEMV's.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_float_bits<const BITS: usize, const N: usize, const P: usize, const LANE_SUM: bool>(
    jobs: [&Job<'_>; N],
    tiles: Range<usize>,
    mut ys: [&mut [f32]; N],
) {
    let e = Epilogue::new(jobs[0]);
    let first = tiles.start;
    let job = jobs[0];
    let n_quads = job.layout.group() / 16;
    let per_set = pairs_per_set(n_quads);
    let table_blocks = jobs.map(|j| j.tables.quads.as_ptr());
    for tile in tiles {
        let mut f = [[_mm256_setzero_ps(); 4]; N];
        for g in 0..job.groups() {
            job.prefetch_ahead(tile, g);
            let codes = job.tile_group(tile, g);
            let affine = e.affine(tile, g);
            for first in (0..N).step_by(P) {
                // group g's table blocks of tokens first..first + P; every token's hold
                // `groups · n_quads` (`Job::new`)
                let tables: [*const u8; P] = core::array::from_fn(|i| table_blocks[first + i].wrapping_add(g * n_quads).cast());
                // SAFETY: `codes` is the tile-group's; the table pointers are in bounds
                // (above), all jobs sharing one matrix.
                let ints = unsafe { rows::<BITS, P, LANE_SUM>(codes, tables, n_quads, per_set) };
                for (i, ints) in ints.into_iter().enumerate() {
                    // SAFETY: g < `job.groups()`.
                    unsafe { e.add(&mut f[first + i], ints, jobs[first + i], g, &affine) };
                }
            }
        }
        for (f, y) in f.into_iter().zip(ys.iter_mut()) {
            e.store(f, tile, first, y);
        }
    }
}

/// Each token's `y` rows of `tiles` (see `lut::gemv_tiles`); every `y` is what N = 1
/// writes for its token. Up to four tokens share the lookups in registers; more (an even
/// number) go through them a pair at a time.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; every job is validated (by `Job::new`) against
/// one `Shuffle` matrix, and each `y` holds exactly the rows of `tiles`.
pub(crate) unsafe fn run_float<const N: usize>(jobs: [&Job<'_>; N], tiles: Range<usize>, ys: [&mut [f32]; N]) {
    // SAFETY: the caller's contract; 2 divides N where it is taken.
    unsafe {
        if N > 4 && N.is_multiple_of(2) {
            run_float_p::<N, 2>(jobs, tiles, ys)
        } else {
            run_float_p::<N, N>(jobs, tiles, ys)
        }
    }
}

/// `run_float` with P tokens per lookup call.
///
/// # Safety
/// As `run_float`; P divides N.
unsafe fn run_float_p<const N: usize, const P: usize>(jobs: [&Job<'_>; N], tiles: Range<usize>, ys: [&mut [f32]; N]) {
    let lane_sum = lanes_fit(jobs[0].layout.bits() as usize, jobs[0].layout.group() / 16);
    // SAFETY (all arms): the caller's contract, and LANE_SUM only where `lanes_fit`. A
    // `Layout` holds 1..=8 bits (private fields, made only by `Layout::new`), so `_` is 8.
    unsafe {
        match (jobs[0].layout.bits(), lane_sum) {
            (1, _) => run_float_bits::<1, N, P, true>(jobs, tiles, ys),
            (2, true) => run_float_bits::<2, N, P, true>(jobs, tiles, ys),
            (2, false) => run_float_bits::<2, N, P, false>(jobs, tiles, ys),
            (3, true) => run_float_bits::<3, N, P, true>(jobs, tiles, ys),
            (3, false) => run_float_bits::<3, N, P, false>(jobs, tiles, ys),
            (4, true) => run_float_bits::<4, N, P, true>(jobs, tiles, ys),
            (4, false) => run_float_bits::<4, N, P, false>(jobs, tiles, ys),
            (5, true) => run_float_bits::<5, N, P, true>(jobs, tiles, ys),
            (5, false) => run_float_bits::<5, N, P, false>(jobs, tiles, ys),
            (6, true) => run_float_bits::<6, N, P, true>(jobs, tiles, ys),
            (6, false) => run_float_bits::<6, N, P, false>(jobs, tiles, ys),
            (7, true) => run_float_bits::<7, N, P, true>(jobs, tiles, ys),
            (7, false) => run_float_bits::<7, N, P, false>(jobs, tiles, ys),
            (_, true) => run_float_bits::<8, N, P, true>(jobs, tiles, ys),
            (_, false) => run_float_bits::<8, N, P, false>(jobs, tiles, ys),
        }
    }
}

/// Activation tables with AVX2: a chunk's 16 entries are two vectors (`s0·a0 + s1·a1 +
/// s2·a2 + s3·a3` as one multiply and three FMAs whose products by ±1 are exact, so each
/// rounds once, as the portable builder's adds do), scaled, clamped, rounded half to even
/// by `vcvtps2dq`, and narrowed two chunks at a time. The group statistics are the
/// portable code's, compiled 8-wide. Same bytes as the portable builder (a non-finite
/// activation makes Σa non-finite, and `TablesMut::build` refuses those tables).
///
/// # Safety
/// The CPU must support AVX2 and FMA; lengths as checked by `TablesMut::build`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn build_tables(x: &[f32], group: usize, quads: &mut [Block64], scale: &mut [f32], sum: &mut [f32]) {
    use crate::kernels::lut::SIGNS;
    // entries 0..8 and 8..16 of each activation's signs
    let signs: [[__m256; 2]; 4] = core::array::from_fn(|t| {
        // SAFETY: 16 f32 per row of SIGNS.
        unsafe { [_mm256_loadu_ps(SIGNS[t].as_ptr()), _mm256_loadu_ps(SIGNS[t].as_ptr().add(8))] }
    });
    let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
    // dwords of `packs_epi16(packs_epi32(c0 lo, c0 hi), packs_epi32(c1 lo, c1 hi))` back
    // in entry order: four entries per dword, lanes interleaved by the packs
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let quads_per_group = group / 16;
    for (g, xs) in x.chunks_exact(group).enumerate() {
        let (absmax, s) = crate::kernels::lut::group_stats(xs);
        let inv = _mm256_set1_ps(if absmax > 0.0 { 127.0 / absmax } else { 0.0 });
        let entries = |a: &[f32]| -> [__m256i; 2] {
            let a = [a[0], a[1], a[2], a[3]].map(|v| _mm256_set1_ps(v));
            core::array::from_fn(|h| {
                let mut t = _mm256_mul_ps(a[0], signs[0][h]);
                t = _mm256_fmadd_ps(a[1], signs[1][h], t);
                t = _mm256_fmadd_ps(a[2], signs[2][h], t);
                t = _mm256_fmadd_ps(a[3], signs[3][h], t);
                _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(t, inv), lo), hi))
            })
        };
        for (q, xq) in quads[g * quads_per_group..(g + 1) * quads_per_group].iter_mut().zip(xs.chunks_exact(16)) {
            for (half, a) in xq.chunks_exact(8).enumerate() {
                let ([c0l, c0h], [c1l, c1h]) = (entries(&a[..4]), entries(&a[4..]));
                let bytes = _mm256_packs_epi16(_mm256_packs_epi32(c0l, c0h), _mm256_packs_epi32(c1l, c1h));
                // SAFETY: 32 bytes at 32·half inside the 64-byte block.
                unsafe { _mm256_storeu_si256(q.0.as_mut_ptr().add(32 * half).cast(), _mm256_permutevar8x32_epi32(bytes, order)) };
            }
        }
        scale[g] = absmax / 127.0;
        sum[g] = s;
    }
}
