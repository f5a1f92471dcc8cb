//! AVX-512 VBMI + VNNI on `Interleave::Permute` matrices: the four chunk tables of a
//! quad are one 64-entry `vpermb` table (index = nibble | lane·16), and the four
//! lookups of a row are adjacent bytes that `vpdpbusd` sums straight into the row's
//! i32 with the plane weight 2^p. No i16 stage, no lane folding: 7 instructions per
//! 128 lookups, whatever the bit width.

use core::arch::x86_64::*;

use core::ops::Range;

use crate::kernels::lut::Job;
use crate::{Block64, Interleave, ScaleFormat, TILE_ROWS};

/// `(a & b) | c` for `vpternlogd`.
const AND_OR: i32 = 0xea;

/// Integer accumulators of one tile-group: rows 0–16 and 16–32.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni")]
#[inline]
unsafe fn rows<const BITS: usize>(w: &[u8], quads: &[Block64]) -> (__m512i, __m512i) {
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * quads.len() * BITS / 8);
    let nibble = _mm512_set1_epi8(0x0f);
    let lane_select = _mm512_set1_epi32(0x3020_1000);
    // vpdpbusd has 4-5 cycles of latency: one accumulator per row half would make the
    // add chain, not the lookups, the limit. Four per half, used round-robin over
    // (quad, plane), keep every chain at most one dpbusd per BITS/2 quads.
    let mut lo = [_mm512_setzero_si512(); 4];
    let mut hi = [_mm512_setzero_si512(); 4];
    let mut p = w.as_ptr();
    // One quad's planes into accumulator k (0..4). Every k below is a constant once the
    // loops over 0..4 and 0..BITS unroll, so the accumulators stay in registers (a
    // runtime index spills them to the stack: 1-bit GEMV ran at a quarter of its speed).
    let mut quad_into = |quad: &Block64, k0: usize| {
        // SAFETY: `quad` is 64 aligned bytes; `p` walks exactly `w` (BITS·64 bytes per quad).
        unsafe {
            let table = _mm512_load_si512(quad.0.as_ptr().cast());
            for plane in 0..BITS {
                let k = (k0 + plane) % 4;
                let weight = _mm512_set1_epi8(1 << plane);
                let v = _mm512_loadu_si512(p.cast());
                p = p.add(64);
                let i_lo = _mm512_ternarylogic_epi32(v, nibble, lane_select, AND_OR);
                let i_hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), nibble, lane_select, AND_OR);
                lo[k] = _mm512_dpbusd_epi32(lo[k], weight, _mm512_permutexvar_epi8(i_lo, table));
                hi[k] = _mm512_dpbusd_epi32(hi[k], weight, _mm512_permutexvar_epi8(i_hi, table));
            }
        }
    };
    let mut fours = quads.chunks_exact(4);
    for four in &mut fours {
        for (qi, quad) in four.iter().enumerate() {
            quad_into(quad, qi * BITS);
        }
    }
    // groups of 16 and 32 columns have one or two quads
    for quad in fours.remainder() {
        quad_into(quad, 0);
    }
    let sum4 = |a: [__m512i; 4]| _mm512_add_epi32(_mm512_add_epi32(a[0], a[1]), _mm512_add_epi32(a[2], a[3]));
    let (rows_lo, rows_hi) = (sum4(lo), sum4(hi));
    (rows_lo, rows_hi)
}

/// `rows` for two tokens at once: each 64 weight bytes are loaded and split into nibble
/// indices once, then looked up in both tokens' tables. Integer sums, so the same as two
/// `rows` calls whatever the accumulator order.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni")]
#[inline]
unsafe fn rows_pair<const BITS: usize>(w: &[u8], quads: [&[Block64]; 2]) -> [(__m512i, __m512i); 2] {
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * quads[0].len() * BITS / 8);
    debug_assert_eq!(quads[0].len(), quads[1].len());
    let nibble = _mm512_set1_epi8(0x0f);
    let lane_select = _mm512_set1_epi32(0x3020_1000);
    // two accumulators per (token, half): eight dpbusd chains, as `rows` has; k is a
    // constant once the loops unroll (quads in twos), as in `rows`
    let mut acc = [[_mm512_setzero_si512(); 4]; 2];
    let mut p = w.as_ptr();
    let mut quad_into = |quad0: &Block64, quad1: &Block64, k0: usize| {
        // SAFETY: both quads are 64 aligned bytes; `p` walks exactly `w` (BITS·64 bytes per quad).
        unsafe {
            let tables = [_mm512_load_si512(quad0.0.as_ptr().cast()), _mm512_load_si512(quad1.0.as_ptr().cast())];
            for plane in 0..BITS {
                let k = (k0 + plane) % 2;
                let weight = _mm512_set1_epi8(1 << plane);
                let v = _mm512_loadu_si512(p.cast());
                p = p.add(64);
                let i_lo = _mm512_ternarylogic_epi32(v, nibble, lane_select, AND_OR);
                let i_hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), nibble, lane_select, AND_OR);
                for (a, table) in acc.iter_mut().zip(tables) {
                    a[k] = _mm512_dpbusd_epi32(a[k], weight, _mm512_permutexvar_epi8(i_lo, table));
                    a[2 + k] = _mm512_dpbusd_epi32(a[2 + k], weight, _mm512_permutexvar_epi8(i_hi, table));
                }
            }
        }
    };
    let (mut twos0, mut twos1) = (quads[0].chunks_exact(2), quads[1].chunks_exact(2));
    for (two0, two1) in (&mut twos0).zip(&mut twos1) {
        quad_into(&two0[0], &two1[0], 0);
        quad_into(&two0[1], &two1[1], BITS);
    }
    // a group of 16 columns has one quad
    for (quad0, quad1) in twos0.remainder().iter().zip(twos1.remainder()) {
        quad_into(quad0, quad1, 0);
    }
    acc.map(|a| (_mm512_add_epi32(a[0], a[1]), _mm512_add_epi32(a[2], a[3])))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni")]
#[inline]
unsafe fn tile_group_bits<const BITS: usize>(w: &[u8], quads: &[Block64], acc: &mut [i32; TILE_ROWS]) {
    // SAFETY: same contract as the caller's.
    let (lo, hi) = unsafe { rows::<BITS>(w, quads) };
    let dst = acc.as_mut_ptr().cast::<__m512i>();
    // SAFETY: `acc` is 32 i32 = two 512-bit vectors.
    unsafe {
        _mm512_storeu_si512(dst, _mm512_add_epi32(_mm512_loadu_si512(dst), lo));
        _mm512_storeu_si512(dst.add(1), _mm512_add_epi32(_mm512_loadu_si512(dst.add(1)), hi));
    }
}

/// # Safety
/// The CPU must support AVX-512 F, BW, VBMI and VNNI; `w` is one tile-group of a
/// `Permute` layout with `quads.len()` quads.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni")]
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

crate::kernels::lut::define_run!("avx512f,avx512bw,avx512vbmi,avx512vnni,avx2,fma,f16c"; |b| super::avx512::f16x32(b));

/// The float epilogue of one matrix, shared by the one- and two-token kernels: per group
/// `acc += s·(I·α + β) [+ m·Σa]`, each product rounded before its add as on every tier, so
/// every token gets the scalar epilogue's floats either way.
struct Epilogue<'a> {
    job: &'a Job<'a>,
    bytes: *const u8,
    scales: ScaleFormat,
}

impl<'a> Epilogue<'a> {
    fn new(job: &'a Job<'a>) -> Self {
        Epilogue { job, bytes: job.bytes.as_ptr(), scales: job.layout.scales() }
    }

    /// The 32 f32 scales (or minima) of the block at byte `at`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni,avx512vl,fma")]
    #[inline]
    fn block(&self, at: usize) -> (__m512, __m512) {
        // SAFETY: scale and minimum blocks are 64 (f16) or 128 (f32) bytes inside
        // `job.bytes` (layout-checked).
        unsafe {
            if self.scales == ScaleFormat::F32 {
                (_mm512_loadu_ps(self.bytes.add(at).cast()), _mm512_loadu_ps(self.bytes.add(at + 64).cast()))
            } else {
                let v = _mm512_loadu_si512(self.bytes.add(at).cast());
                (_mm512_cvtph_ps(_mm512_castsi512_si256(v)), _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(v)))
            }
        }
    }

    /// The 32 sub-block codes at byte `at` as f32 (`quant::sub_codes`' arrangement: low
    /// nibbles of 16 bytes are rows 0–16, high nibbles rows 16–32; 6-bit codes take two
    /// more bits per row from the next 8 bytes, 2·(row / 8) up in byte row % 8).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
    #[inline]
    fn sub_codes(&self, at: usize, bits: u8, signed: bool) -> (__m512, __m512) {
        // SAFETY: a code block is 16 (4-bit), 24 (6-bit) or 32 (8-bit) bytes inside
        // `job.bytes` (layout-checked); each load reads only its part.
        let v = unsafe {
            let p = self.bytes.add(at);
            if bits == 8 {
                _mm256_loadu_si256(p.cast())
            } else {
                let (low, nibble) = (_mm_loadu_si128(p.cast()), _mm_set1_epi8(0x0f));
                let v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(low), nibble), _mm_and_si128(low, nibble));
                if bits == 6 {
                    let high = _mm256_set1_epi64x(p.add(16).cast::<i64>().read_unaligned());
                    // qword j (rows 8j..8j + 8): byte k is the 8 bits from bit 8k + 2j of the high bytes
                    let at_bits = |j: i64| (0..8).fold(0i64, |c, k| c | ((8 * k + 2 * j) << (8 * k)));
                    let picked = _mm256_multishift_epi64_epi8(_mm256_set_epi64x(at_bits(3), at_bits(2), at_bits(1), at_bits(0)), high);
                    // two bits ≤ 3, so the 16-bit shift moves nothing across bytes
                    _mm256_or_si256(v, _mm256_slli_epi16::<4>(_mm256_and_si256(picked, _mm256_set1_epi8(3))))
                } else {
                    v
                }
            }
        };
        let (mut lo, mut hi) = (_mm512_cvtepu8_epi32(_mm256_castsi256_si128(v)), _mm512_cvtepu8_epi32(_mm256_extracti128_si256::<1>(v)));
        if signed {
            let shift = _mm512_set1_epi32(32 - bits as i32);
            lo = _mm512_srav_epi32(_mm512_sllv_epi32(lo, shift), shift);
            hi = _mm512_srav_epi32(_mm512_sllv_epi32(hi, shift), shift);
        }
        (_mm512_cvtepi32_ps(lo), _mm512_cvtepi32_ps(hi))
    }

    /// Group `g`'s scales, and minima when the layout has them.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni,avx512vl,fma")]
    #[inline]
    fn affine(&self, tile: usize, g: usize) -> ((__m512, __m512), Option<(__m512, __m512)>) {
        if let ScaleFormat::SubBlock { bits, signed } = self.scales {
            // codes times d in registers: the same f32 products as the portable
            // `Job::affine_cached` (one IEEE multiply each), without its round trip through memory,
            // which cost group-16 types (Q2_K, Q3_K, Q6_K) as much as their lookups
            let head = self.job.super_block_offset(tile, g);
            let at = self.job.scale_block_offset(tile, g);
            let d = self.block(head);
            let scales = self.sub_codes(at, bits, signed);
            let scales = (_mm512_mul_ps(d.0, scales.0), _mm512_mul_ps(d.1, scales.1));
            if !self.job.has_mins() {
                return (scales, None);
            }
            let dmin = self.block(head + 64);
            let codes = self.sub_codes(self.job.min_block_offset(tile, g), bits, false);
            // −(dmin·code): negation only flips the sign bit, as the portable code's does
            let negate = |v: __m512| _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(i32::MIN)));
            return (scales, Some((negate(_mm512_mul_ps(dmin.0, codes.0)), negate(_mm512_mul_ps(dmin.1, codes.1)))));
        }
        let mins = if self.job.has_mins() { Some(self.block(self.job.min_block_offset(tile, g))) } else { None };
        (self.block(self.job.scale_block_offset(tile, g)), mins)
    }

    /// Adds group `g`'s integer sums `ints`, over one token's tables (its `job`), to that
    /// token's `f`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni,avx512vl,fma")]
    #[inline]
    fn add(
        &self,
        f: &mut (__m512, __m512),
        ints: (__m512i, __m512i),
        job: &Job<'_>,
        g: usize,
        affine: ((__m512, __m512), Option<(__m512, __m512)>),
    ) {
        let (((s_lo, s_hi), mins), (i_lo, i_hi)) = (affine, ints);
        let sum = job.tables.sum[g];
        let alpha = _mm512_set1_ps(job.tables.scale[g] * 0.5);
        let beta = _mm512_set1_ps(job.beta(g));
        // the portable epilogue's float steps, each rounded (no FMA): `f + s·(I·α + β)
        // [+ m·Σa]` is the same float on every tier
        let term = |i: __m512i, s: __m512, m: Option<__m512>| {
            let x = _mm512_mul_ps(s, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(i), alpha), beta));
            match m {
                Some(m) => _mm512_add_ps(x, _mm512_mul_ps(m, _mm512_set1_ps(sum))),
                None => x,
            }
        };
        f.0 = _mm512_add_ps(f.0, term(i_lo, s_lo, mins.map(|m| m.0)));
        f.1 = _mm512_add_ps(f.1, term(i_hi, s_hi, mins.map(|m| m.1)));
    }

    /// Writes tile `tile`'s rows (of the tiles from `first`) into `y`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni,avx512vl,fma")]
    #[inline]
    fn store(&self, f: (__m512, __m512), tile: usize, first: usize, y: &mut [f32]) {
        let start = (tile - first) * TILE_ROWS;
        let n = (self.job.layout.rows() - tile * TILE_ROWS).min(TILE_ROWS);
        let out = &mut y[start..start + n];
        let mask = |k: usize| if k >= 16 { u16::MAX } else { (1u16 << k) - 1 };
        // SAFETY: masked stores write only the `n` rows of `out`.
        unsafe {
            _mm512_mask_storeu_ps(out.as_mut_ptr(), mask(n), f.0);
            if n > 16 {
                _mm512_mask_storeu_ps(out.as_mut_ptr().add(16), mask(n - 16), f.1);
            }
        }
    }
}

/// The float GEMV with the epilogue fused in registers: the tile's 32 sums never leave
/// registers.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni,avx512vl,fma")]
unsafe fn run_float_bits<const BITS: usize>(job: &Job<'_>, tiles: Range<usize>, y: &mut [f32]) {
    let e = Epilogue::new(job);
    let first = tiles.start;
    for tile in tiles {
        let mut f = (_mm512_setzero_ps(), _mm512_setzero_ps());
        for g in 0..job.groups() {
            job.prefetch_ahead(tile, g);
            // SAFETY: the tile-group and the group's tables have the layout's lengths.
            let ints = unsafe { rows::<BITS>(job.tile_group(tile, g), job.quads(g)) };
            e.add(&mut f, ints, job, g, e.affine(tile, g));
        }
        e.store(f, tile, first, y);
    }
}

/// `run_float_bits` for N tokens (N even) over the same tiles: each tile-group's codes are
/// looked up a pair of tokens at a time (`rows_pair`) while they sit in L1, and its scales
/// are loaded (or, for sub-block scales, multiplied out) once for all N. Each token's
/// epilogue is the same multiplies and adds in the same order, so each `y` is what
/// `run_float` writes.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vnni,avx512vl,fma")]
unsafe fn run_float_n_bits<const BITS: usize, const N: usize>(jobs: [&Job<'_>; N], tiles: Range<usize>, mut ys: [&mut [f32]; N]) {
    let e = Epilogue::new(jobs[0]);
    let first = tiles.start;
    for tile in tiles {
        let mut f = [(_mm512_setzero_ps(), _mm512_setzero_ps()); N];
        for g in 0..jobs[0].groups() {
            jobs[0].prefetch_ahead(tile, g);
            let codes = jobs[0].tile_group(tile, g);
            let affine = e.affine(tile, g);
            for (f, jobs) in f.chunks_exact_mut(2).zip(jobs.chunks_exact(2)) {
                // SAFETY: the tile-group and both tokens' group tables have the layout's lengths.
                let ints = unsafe { rows_pair::<BITS>(codes, [jobs[0].quads(g), jobs[1].quads(g)]) };
                for ((f, ints), job) in f.iter_mut().zip(ints).zip(jobs) {
                    e.add(f, ints, job, g, affine);
                }
            }
        }
        for (f, y) in f.into_iter().zip(ys.iter_mut()) {
            e.store(f, tile, first, y);
        }
    }
}

/// `run_float` for N tokens' tables (N even) over the same matrix and tiles.
///
/// # Safety
/// As `run_float`, for every job, which must share one matrix; N is even.
pub(crate) unsafe fn run_float_n<const N: usize>(jobs: [&Job<'_>; N], tiles: Range<usize>, ys: [&mut [f32]; N]) {
    debug_assert!(N.is_multiple_of(2));
    // SAFETY (all arms): the caller's contract. A `Layout` holds 1..=8 bits (private
    // fields, made only by `Layout::new`), so `_` is 8.
    unsafe {
        match jobs[0].layout.bits() {
            1 => run_float_n_bits::<1, N>(jobs, tiles, ys),
            2 => run_float_n_bits::<2, N>(jobs, tiles, ys),
            3 => run_float_n_bits::<3, N>(jobs, tiles, ys),
            4 => run_float_n_bits::<4, N>(jobs, tiles, ys),
            5 => run_float_n_bits::<5, N>(jobs, tiles, ys),
            6 => run_float_n_bits::<6, N>(jobs, tiles, ys),
            7 => run_float_n_bits::<7, N>(jobs, tiles, ys),
            _ => run_float_n_bits::<8, N>(jobs, tiles, ys),
        }
    }
}

/// `y` rows of `tiles` (see `lut::gemv_tiles`).
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VBMI, VNNI and FMA; `job` is validated (by
/// `Job::new`: its bytes are exactly `layout.total_bytes()`) and `y` holds exactly the
/// rows of `tiles`.
pub(crate) unsafe fn run_float(job: &Job<'_>, tiles: Range<usize>, y: &mut [f32]) {
    // SAFETY (all arms): the caller's contract. A `Layout` holds 1..=8 bits (private
    // fields, made only by `Layout::new`), so `_` is 8.
    unsafe {
        match job.layout.bits() {
            1 => run_float_bits::<1>(job, tiles, y),
            2 => run_float_bits::<2>(job, tiles, y),
            3 => run_float_bits::<3>(job, tiles, y),
            4 => run_float_bits::<4>(job, tiles, y),
            5 => run_float_bits::<5>(job, tiles, y),
            6 => run_float_bits::<6>(job, tiles, y),
            7 => run_float_bits::<7>(job, tiles, y),
            _ => run_float_bits::<8>(job, tiles, y),
        }
    }
}
