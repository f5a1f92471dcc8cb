//! Activation tables and the lookup GEMV.
//!
//! ## Numeric contract
//!
//! For a group of `G` activations `a` and codes `q = Σ_i 2^i·b_i` (bits `b_i`), with
//! planes mapped to signs `t_i = 2·b_i − 1`:
//!
//! ```text
//! Σ_k a_k·q_k = ½·Σ_i 2^i·(Σ_k a_k·t_ik) + ½·(2^bits − 1)·Σ_k a_k
//! ```
//!
//! Each 4 activations form a table `T[idx] = Σ_t (bit t of idx ? +a_t : −a_t)`. The
//! signed sums are exact in their sign, so `T[15 − idx] = −T[idx]` holds bit for bit
//! (mirror consolidation: 8 distinct magnitudes; the kernels keep all 16 entries in
//! one 16-byte register, as T-MAC does). Tables are quantized to int8 with one f32
//! scale per weight group (`scale_g = max_chunk Σ|a_t| / 127`, the exact absmax of the
//! group's entries), so every entry is in −127..=127. Every table builder (portable,
//! AVX2, AVX-512) follows the same operation order and produces identical bytes.
//!
//! The *integer accumulator* of (row, group) is `I = Σ_i 2^i·Σ_chunks Tq[idx]`, and
//! every ISA computes it exactly. The shuffle kernels sum lookups in i16, which cannot
//! overflow (a pair of planes adds at most 3·127 per chunk, a group has at most 64
//! chunks: 64·381 = 24 384 < 32 767), then widen to i32; AVX2 lets up to three pairs
//! share i16 sums where the group is short enough to bound them (`x86_64::avx2`); the
//! VBMI kernel sums in i32 directly (`vpdpbusd`). The float output is
//!
//! ```text
//! y_row = Σ_g  s·(I·scale_g/2 + (half_range − z)·A_g)        (Offset::Zero(z); Symmetric: z = half_range)
//! y_row = Σ_g  s·(I·scale_g/2 + half_range·A_g) + m·A_g       (Offset::Min)
//! ```
//!
//! with `A_g` the f32 sum of the group's activations. The float epilogue is shared
//! code (the VBMI kernel fuses it into FMAs), so float outputs of different ISAs differ
//! only by rounding: the tests hold them to 1e-5 relative.

pub(crate) mod scalar;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "wasm32"))]
pub(crate) mod shuffle128;

#[cfg(target_arch = "aarch64")]
pub(crate) mod aarch64;
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm32;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

use core::ops::Range;

use crate::f16::f16_bits_to_f32;
use crate::kernels::quant::sub_codes;
use crate::{Block64, Error, Interleave, Isa, Layout, Offset, PackedMatrix, ScaleFormat, TILE_ROWS};

/// Borrowed activation tables for one activation vector.
#[derive(Clone, Copy, Debug)]
pub struct Tables<'a> {
    /// Four 16-entry int8 tables per block (chunks 4j..4j+4), `cols / 16` blocks.
    pub quads: &'a [Block64],
    /// Per group: the f32 step of the int8 entries.
    pub scale: &'a [f32],
    /// Per group: Σ of the activations.
    pub sum: &'a [f32],
    pub cols: usize,
    pub group: usize,
}

/// Caller-provided storage for tables (no allocation).
pub struct TablesMut<'a> {
    pub quads: &'a mut [Block64],
    pub scale: &'a mut [f32],
    pub sum: &'a mut [f32],
    pub group: usize,
}

impl<'a> TablesMut<'a> {
    /// Residual tables of `x` after `first` (tables of the same `x`, cols and group):
    /// each entry is what `first`'s int8 entry misses, quantized to int8 at its own step
    /// per group, with Σa = 0. A GEMV over them adds only the correction, so the sum of
    /// the two GEMVs sees tables about 127× finer: for 5- to 8-bit weights, where int8
    /// tables are the larger error. One portable builder.
    pub fn build_residual(self, x: &[f32], first: Tables<'_>) -> Result<Tables<'a>, Error> {
        let cols = x.len();
        if first.cols != cols
            || first.group != self.group
            || self.quads.len() != cols / 16
            || self.scale.len() != first.scale.len()
            || self.sum.len() != first.scale.len()
        {
            return Err(Error::TablesMismatch { tables_cols: first.cols, tables_group: first.group, cols, group: self.group });
        }
        let per_group = self.group / 16;
        for (g, xs) in x.chunks_exact(self.group).enumerate() {
            let range = g * per_group..(g + 1) * per_group;
            self.scale[g] = build_residual_group(xs, &first.quads[range.clone()], first.scale[g], &mut self.quads[range]);
            self.sum[g] = 0.0;
        }
        Ok(Tables { quads: self.quads, scale: self.scale, sum: self.sum, cols, group: self.group })
    }

    /// Build the tables of `x` (length `16 · quads.len()`) for weight groups of `group`.
    pub fn build(self, x: &[f32]) -> Result<Tables<'a>, Error> {
        let cols = x.len();
        if !crate::kernels::quant::GROUP_SIZES.contains(&self.group) {
            return Err(Error::UnsupportedGroup(self.group));
        }
        if cols == 0 || !cols.is_multiple_of(self.group) {
            return Err(Error::ColsNotMultipleOfGroup { cols, group: self.group });
        }
        let groups = cols / self.group;
        if self.quads.len() != cols / 16 {
            return Err(Error::BufferSize { what: "table blocks", expected: cols / 16, got: self.quads.len() });
        }
        if self.scale.len() != groups || self.sum.len() != groups {
            return Err(Error::BufferSize { what: "table scales", expected: groups, got: self.scale.len().min(self.sum.len()) });
        }
        #[cfg(target_arch = "x86_64")]
        if Isa::Avx512.is_available() {
            // SAFETY: AVX-512 F/BW (and so F16C/FMA-era AVX2) are available.
            unsafe { x86_64::avx512::build_tables(x, self.group, self.quads, self.scale, self.sum) };
            finite(self.sum)?;
            return Ok(Tables { quads: self.quads, scale: self.scale, sum: self.sum, cols, group: self.group });
        }
        #[cfg(target_arch = "x86_64")]
        if Isa::Avx2.is_available() {
            // SAFETY: AVX2 and FMA are available (checked once, cached).
            unsafe { x86_64::avx2::build_tables(x, self.group, self.quads, self.scale, self.sum) };
            finite(self.sum)?;
            return Ok(Tables { quads: self.quads, scale: self.scale, sum: self.sum, cols, group: self.group });
        }
        build_tables(x, self.group, self.quads, self.scale, self.sum);
        finite(self.sum)?;
        Ok(Tables { quads: self.quads, scale: self.scale, sum: self.sum, cols, group: self.group })
    }
}

/// A NaN or infinity anywhere in a group makes its Σa non-finite; the tables of such
/// input are refused rather than checked value by value.
fn finite(sums: &[f32]) -> Result<(), Error> {
    if sums.iter().all(|s| s.is_finite()) {
        Ok(())
    } else {
        Err(Error::NonFiniteInput)
    }
}

const ROUND_MAGIC: f32 = 12_582_912.0;

/// Tables of every group (lengths checked by the caller).
#[inline(always)]
pub(crate) fn build_tables(x: &[f32], group: usize, quads: &mut [Block64], scale: &mut [f32], sum: &mut [f32]) {
    let quads_per_group = group / 16;
    for (g, xs) in x.chunks_exact(group).enumerate() {
        (scale[g], sum[g]) = build_group(xs, &mut quads[g * quads_per_group..(g + 1) * quads_per_group]);
    }
}

/// Sign of activation t in entry `idx`: bit t of idx set → +1.
pub(crate) const SIGNS: [[f32; 16]; 4] = {
    let mut s = [[0.0; 16]; 4];
    let mut t = 0;
    while t < 4 {
        let mut idx = 0;
        while idx < 16 {
            s[t][idx] = if idx & (1 << t) != 0 { 1.0 } else { -1.0 };
            idx += 1;
        }
        t += 1;
    }
    s
};

/// Σ|a| of each chunk is `(|a0| + |a1|) + (|a2| + |a3|)`; the group's scale is their
/// maximum over 127. Σa runs in 16 lanes (lane j: activations ≡ j mod 16, in order),
/// then halves 8, 4, 2, 1. Every table builder follows exactly these orders, so
/// tables are bit-identical whichever builds them.
#[inline(always)]
pub(crate) fn group_stats(xs: &[f32]) -> (f32, f32) {
    let mut absmax = 0.0f32;
    for c in xs.chunks_exact(4) {
        let a = (c[0].abs() + c[1].abs()) + (c[2].abs() + c[3].abs());
        absmax = if a > absmax { a } else { absmax };
    }
    let mut lanes = [0.0f32; 16];
    for x16 in xs.chunks_exact(16) {
        for (l, &x) in lanes.iter_mut().zip(x16) {
            *l += x;
        }
    }
    (absmax, crate::kernels::fold_lanes(lanes))
}

/// Tables of one group; returns (scale, Σx).
///
/// Entry `idx` of a chunk is `((s0·a0 + s1·a1) + s2·a2) + s3·a3` (signs from the bits of
/// idx; products by ±1 are exact, so `T[15 − idx] = −T[idx]` holds exactly: mirror
/// consolidation), times 127/absmax, clamped to ±127, rounded half to even.
#[inline(always)]
fn build_group(xs: &[f32], quads: &mut [Block64]) -> (f32, f32) {
    let (absmax, sum) = group_stats(xs);
    let inv = if absmax > 0.0 { 127.0 / absmax } else { 0.0 };
    for (q, xq) in quads.iter_mut().zip(xs.chunks_exact(16)) {
        for (lane, a) in xq.chunks_exact(4).enumerate() {
            let t = &mut q.0[16 * lane..16 * lane + 16];
            for (idx, e) in t.iter_mut().enumerate() {
                let v = ((SIGNS[0][idx] * a[0] + SIGNS[1][idx] * a[1]) + SIGNS[2][idx] * a[2]) + SIGNS[3][idx] * a[3];
                // Round half to even by adding 1.5·2^23: the integer lands in the low
                // mantissa bits (two's complement), exact for |v| < 2^22. No float→int
                // conversion, so it vectorizes everywhere.
                *e = ((v * inv).clamp(-127.0, 127.0) + ROUND_MAGIC).to_bits() as u8;
            }
        }
    }
    (absmax / 127.0, sum)
}

/// Residual tables of one group: what `first` (int8 entries at step `first_scale`) leaves
/// of each exact entry, quantized again at its own step; returns that step.
#[inline(always)]
fn build_residual_group(xs: &[f32], first: &[Block64], first_scale: f32, quads: &mut [Block64]) -> f32 {
    let entry = |a: &[f32], idx: usize| ((SIGNS[0][idx] * a[0] + SIGNS[1][idx] * a[1]) + SIGNS[2][idx] * a[2]) + SIGNS[3][idx] * a[3];
    let mut absmax = 0.0f32;
    for (q, xq) in first.iter().zip(xs.chunks_exact(16)) {
        for (lane, a) in xq.chunks_exact(4).enumerate() {
            for idx in 0..16 {
                let r = entry(a, idx) - first_scale * f32::from(q.0[16 * lane + idx] as i8);
                absmax = absmax.max(r.abs());
            }
        }
    }
    let inv = if absmax > 0.0 { 127.0 / absmax } else { 0.0 };
    for ((q, f), xq) in quads.iter_mut().zip(first).zip(xs.chunks_exact(16)) {
        for (lane, a) in xq.chunks_exact(4).enumerate() {
            for idx in 0..16 {
                let r = entry(a, idx) - first_scale * f32::from(f.0[16 * lane + idx] as i8);
                q.0[16 * lane + idx] = ((r * inv).clamp(-127.0, 127.0) + ROUND_MAGIC).to_bits() as u8;
            }
        }
    }
    absmax / 127.0
}

/// The portable builder, for tests that pin every builder to it.
pub fn build_tables_portable(x: &[f32], group: usize, quads: &mut [Block64], scale: &mut [f32], sum: &mut [f32]) {
    build_tables(x, group, quads, scale, sum)
}

/// Owned tables (reused across tokens: `build` overwrites).
#[cfg(feature = "alloc")]
#[derive(Clone, Debug, Default)]
pub struct OwnedTables {
    quads: alloc::vec::Vec<Block64>,
    scale: alloc::vec::Vec<f32>,
    sum: alloc::vec::Vec<f32>,
    cols: usize,
    group: usize,
}

#[cfg(feature = "alloc")]
impl OwnedTables {
    pub fn new(cols: usize, group: usize) -> Result<Self, Error> {
        if !crate::kernels::quant::GROUP_SIZES.contains(&group) {
            return Err(Error::UnsupportedGroup(group));
        }
        if cols == 0 || !cols.is_multiple_of(group) {
            return Err(Error::ColsNotMultipleOfGroup { cols, group });
        }
        Ok(OwnedTables {
            quads: alloc::vec![Block64::default(); cols / 16],
            scale: alloc::vec![0.0; cols / group],
            sum: alloc::vec![0.0; cols / group],
            cols,
            group,
        })
    }
    pub fn build(&mut self, x: &[f32]) -> Result<Tables<'_>, Error> {
        if x.len() != self.cols {
            return Err(Error::BufferSize { what: "activations", expected: self.cols, got: x.len() });
        }
        TablesMut { quads: &mut self.quads, scale: &mut self.scale, sum: &mut self.sum, group: self.group }.build(x)
    }
    pub fn view(&self) -> Tables<'_> {
        Tables { quads: &self.quads, scale: &self.scale, sum: &self.sum, cols: self.cols, group: self.group }
    }

    /// Residual tables of `x` after `first`: see `TablesMut::build_residual`.
    pub fn build_residual(&mut self, x: &[f32], first: Tables<'_>) -> Result<Tables<'_>, Error> {
        if x.len() != self.cols {
            return Err(Error::BufferSize { what: "activations", expected: self.cols, got: x.len() });
        }
        TablesMut { quads: &mut self.quads, scale: &mut self.scale, sum: &mut self.sum, group: self.group }.build_residual(x, first)
    }
}

/// Everything a kernel needs, validated once.
pub(crate) struct Job<'a> {
    pub bytes: &'a [u8],
    pub layout: Layout,
    pub tables: Tables<'a>,
    // The layout's derived sizes, computed once: the per-tile-group offsets below run
    // in the innermost driver loop, where `Layout`'s own accessors (a division each)
    // cost 7 % of a prefill.
    groups: usize,
    records_per_tile: usize,
    /// log2 of `Layout::groups_per_record` (a power of two), and that minus one.
    record_shift: u32,
    record_mask: usize,
    record_bytes: usize,
    code_bytes: usize,
    /// Where a record's first group's codes and scales start, and one group's scale (and
    /// minimum) blocks (`Layout::record_bytes`); the super-block header is at the start.
    codes_at: usize,
    scales_at: usize,
    group_scale_bytes: usize,
    scale_block_bytes: usize,
    quads_per_group: usize,
    /// `half_range − z` (`Offset::Zero(z)`; 0 for `Symmetric`) or `half_range` (`Min`):
    /// a group's β is this times its Σa (`beta`).
    beta_per_sum: f32,
}

/// How far ahead of the tile-group a GEMV reads `Job::prefetch_ahead` asks for. One core
/// streams DRAM latency-bound: on a Xeon (family 6 model 207) VM the hardware prefetchers
/// alone kept a cold 8960×1536 GEMV at 6–7 GB/s, about half of what a plain read reaches
/// (`lutra bench gemv --regime cold`); 4 KiB ahead gave 11–13 GB/s at every bit width
/// (2 KiB: 10–11, 8 and 16 KiB: no better).
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 4096;

impl<'a> Job<'a> {
    fn new<B: AsRef<[u8]>>(m: &'a PackedMatrix<B>, t: Tables<'a>) -> Result<Self, Error> {
        let l = *m.layout();
        if t.cols != l.cols() || t.group != l.group() {
            return Err(Error::TablesMismatch { tables_cols: t.cols, tables_group: t.group, cols: l.cols(), group: l.group() });
        }
        // `from_bytes` checked the length once, but `B::as_ref` is foreign code that may
        // hand back another slice now; the kernels read `total_bytes` (partly through raw
        // pointers), so check again, once per call.
        let bytes = m.as_bytes();
        if bytes.len() != l.total_bytes() {
            return Err(Error::BufferSize { what: "packed matrix bytes", expected: l.total_bytes(), got: bytes.len() });
        }
        // `Tables` has public fields: lengths a builder did not make are refused here,
        // not met as an index panic inside a kernel.
        if t.quads.len() != l.cols() / 16 {
            return Err(Error::BufferSize { what: "table blocks", expected: l.cols() / 16, got: t.quads.len() });
        }
        if t.scale.len() != l.groups() || t.sum.len() != l.groups() {
            return Err(Error::BufferSize { what: "table scales", expected: l.groups(), got: t.scale.len().min(t.sum.len()) });
        }
        let per_record = l.groups_per_record();
        // (tile 0, group 0)'s offsets give the record's inner ones
        let scales_at = l.scale_block_offset(0, 0);
        let next_scales_at = if per_record > 1 { l.scale_block_offset(0, 1) } else { scales_at };
        Ok(Job {
            bytes,
            layout: l,
            tables: t,
            groups: l.groups(),
            records_per_tile: l.groups() / per_record,
            record_shift: per_record.trailing_zeros(),
            record_mask: per_record - 1,
            record_bytes: l.record_bytes(),
            code_bytes: l.tile_group_bytes(),
            codes_at: l.tile_group_offset(0, 0),
            scales_at,
            group_scale_bytes: next_scales_at - scales_at,
            scale_block_bytes: l.scales().block_bytes(),
            quads_per_group: l.group() / 16,
            beta_per_sum: match l.offset() {
                Offset::Zero(z) => l.half_range() - z as f32,
                Offset::Symmetric => l.half_range() - l.half_range(),
                Offset::Min => l.half_range(),
            },
        })
    }
    /// β of group g in `y += s·(I·α + β) [+ m·Σa]`: every float epilogue's, so all compute
    /// it alike.
    #[inline(always)]
    pub fn beta(&self, g: usize) -> f32 {
        self.beta_of(self.tables.sum[g])
    }
    /// `beta` of a group whose Σa is `sum`.
    #[inline(always)]
    pub fn beta_of(&self, sum: f32) -> f32 {
        self.beta_per_sum * sum
    }
    /// Whether the layout stores per-group minima (`Offset::Min`).
    #[inline(always)]
    pub fn has_mins(&self) -> bool {
        self.layout.offset() == Offset::Min
    }
    #[inline(always)]
    pub fn groups(&self) -> usize {
        self.groups
    }
    /// Byte offset of the record holding tile-group (tile, g) (`Layout::record_offset`).
    #[inline(always)]
    pub fn record_offset(&self, tile: usize, g: usize) -> usize {
        (tile * self.records_per_tile + (g >> self.record_shift)) * self.record_bytes
    }
    /// Asks the cache for the matrix bytes `PREFETCH_AHEAD` past tile-group (tile, g)'s
    /// share of the stream (its record's bytes over its groups), so a GEMV walking the
    /// tile-groups in order has every line requested once, that far ahead. A hint: it
    /// changes no result, and only x86-64 has it (measured there; see `PREFETCH_AHEAD`).
    #[inline(always)]
    pub fn prefetch_ahead(&self, tile: usize, g: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            let share = self.record_bytes >> self.record_shift;
            let start = self.record_offset(tile, g) + (g & self.record_mask) * share + PREFETCH_AHEAD;
            for at in (start & !63..start + share).step_by(64) {
                x86_64::prefetch(self.bytes.as_ptr().wrapping_add(at));
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (tile, g);
    }
    /// Codes of tile-group (tile, g).
    #[inline(always)]
    pub fn tile_group(&self, tile: usize, g: usize) -> &'a [u8] {
        // one group per record (every format but `SubBlock`): the record starts with the
        // codes; the general form costs a few percent on small models' decode
        let at = if self.record_mask == 0 {
            (tile * self.groups + g) * self.record_bytes
        } else {
            self.record_offset(tile, g) + self.codes_at + (g & self.record_mask) * self.code_bytes
        };
        &self.bytes[at..][..self.code_bytes]
    }
    /// Byte offset of (tile, g)'s super-block header (`Layout::super_block_offset`).
    #[inline(always)]
    pub fn super_block_offset(&self, tile: usize, g: usize) -> usize {
        self.record_offset(tile, g)
    }
    /// Byte offset of the 32 scales of tile-group (tile, g) (`Layout::scale_block_offset`).
    #[inline(always)]
    pub fn scale_block_offset(&self, tile: usize, g: usize) -> usize {
        if self.record_mask == 0 {
            // one group per record, as in `tile_group`
            return (tile * self.groups + g) * self.record_bytes + self.code_bytes;
        }
        self.record_offset(tile, g) + self.scales_at + (g & self.record_mask) * self.group_scale_bytes
    }
    /// Byte offset of the 32 minima of tile-group (tile, g) (`Layout::min_block_offset`).
    #[inline(always)]
    pub fn min_block_offset(&self, tile: usize, g: usize) -> usize {
        self.scale_block_offset(tile, g) + self.scale_block_bytes
    }
    /// Table blocks of group g.
    #[inline(always)]
    pub fn quads(&self, g: usize) -> &'a [Block64] {
        let n = self.quads_per_group;
        &self.tables.quads[g * n..][..n]
    }
    /// The 32 f16 at `at`, as f32.
    #[inline(always)]
    fn f16_block<C: Fn(&[u8; 64]) -> [f32; TILE_ROWS]>(&self, at: usize, f16x32: &C) -> [f32; TILE_ROWS] {
        f16x32(self.bytes[at..at + 64].try_into().expect("64-byte f16 block"))
    }
    /// The 32 values of the scale (or minimum) block at `at`, as f32 (`F16` and `F32`).
    #[inline(always)]
    fn scale_block<C: Fn(&[u8; 64]) -> [f32; TILE_ROWS]>(&self, at: usize, f16x32: &C) -> [f32; TILE_ROWS] {
        match self.layout.scales() {
            ScaleFormat::F32 => {
                let mut out = [0.0; TILE_ROWS];
                for (o, b) in out.iter_mut().zip(self.bytes[at..at + 128].chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
                out
            }
            _ => self.f16_block(at, f16x32),
        }
    }
    /// Tile-group (tile, g)'s 32 scales and, with `Offset::Min`, 32 minima, as f32; each
    /// ISA passes its f16 conversion. Sub-block scales are multiplied out here, `d·code`
    /// and `−(dmin·min_code)`, the very products the `F32` form stores, converting a
    /// super-block's `d` (and `dmin`) once for all its groups (`header` keeps the last
    /// ones). (The x86 kernels' epilogues do this in registers.)
    #[inline(always)]
    pub fn affine_cached<C: Fn(&[u8; 64]) -> [f32; TILE_ROWS]>(
        &self,
        tile: usize,
        g: usize,
        f16x32: &C,
        header: &mut SuperBlockHeader,
    ) -> ([f32; TILE_ROWS], Option<[f32; TILE_ROWS]>) {
        let at = self.scale_block_offset(tile, g);
        let ScaleFormat::SubBlock { bits, signed } = self.layout.scales() else {
            let mins = self.has_mins().then(|| self.scale_block(self.min_block_offset(tile, g), f16x32));
            return (self.scale_block(at, f16x32), mins);
        };
        let head = self.super_block_offset(tile, g);
        if header.record != head + 1 {
            header.d = self.f16_block(head, f16x32);
            if self.has_mins() {
                header.dmin = self.f16_block(head + 64, f16x32);
            }
            header.record = head + 1;
        }
        let codes = sub_codes(&self.bytes[at..], bits, signed);
        let mut scales = [0.0; TILE_ROWS];
        for r in 0..TILE_ROWS {
            scales[r] = header.d[r] * codes[r];
        }
        if !self.has_mins() {
            return (scales, None);
        }
        let codes = sub_codes(&self.bytes[self.min_block_offset(tile, g)..], bits, false);
        let mut mins = [0.0; TILE_ROWS];
        for r in 0..TILE_ROWS {
            mins[r] = -(header.dmin[r] * codes[r]);
        }
        (scales, Some(mins))
    }
}

/// The last super-block header `Job::affine_cached` converted: its record's offset + 1
/// (0: none yet), its 32 `d` and 32 `dmin`.
#[derive(Clone)]
pub(crate) struct SuperBlockHeader {
    record: usize,
    d: [f32; TILE_ROWS],
    dmin: [f32; TILE_ROWS],
}

impl Default for SuperBlockHeader {
    fn default() -> Self {
        SuperBlockHeader { record: 0, d: [0.0; TILE_ROWS], dmin: [0.0; TILE_ROWS] }
    }
}

/// 32 f16 (little-endian bits) to f32, in a loop the compiler vectorizes; ISAs with
/// a conversion instruction (F16C, AVX-512) pass their own.
#[inline(always)]
pub(crate) fn f16x32_portable(bytes: &[u8; 64]) -> [f32; TILE_ROWS] {
    let mut out = [0.0; TILE_ROWS];
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
    out
}

/// What happens to each tile-group's 32 integer accumulators.
pub(crate) trait Epilogue {
    /// `f16x32` converts a block of 32 stored f16 scales.
    fn group<C: Fn(&[u8; 64]) -> [f32; TILE_ROWS]>(&mut self, job: &Job<'_>, tile: usize, g: usize, acc: &[i32; TILE_ROWS], f16x32: C);
    fn tile_end(&mut self, job: &Job<'_>, tile: usize);
}

/// The float GEMV: accumulate groups, then store the tile's rows.
pub(crate) struct FloatOut<'y> {
    y: &'y mut [f32],
    first_tile: usize,
    acc: [f32; TILE_ROWS],
    header: SuperBlockHeader,
}

impl<'y> FloatOut<'y> {
    /// Rows of the tiles from `first_tile` on into `y`.
    pub(crate) fn new(y: &'y mut [f32], first_tile: usize) -> Self {
        FloatOut { y, first_tile, acc: [0.0; TILE_ROWS], header: SuperBlockHeader::default() }
    }
}

impl Epilogue for FloatOut<'_> {
    #[inline(always)]
    fn group<C: Fn(&[u8; 64]) -> [f32; TILE_ROWS]>(&mut self, job: &Job<'_>, tile: usize, g: usize, acc: &[i32; TILE_ROWS], f16x32: C) {
        let (scales, mins) = job.affine_cached(tile, g, &f16x32, &mut self.header);
        self.group_with(job, g, acc, &scales, mins.as_ref());
    }
    #[inline(always)]
    fn tile_end(&mut self, job: &Job<'_>, tile: usize) {
        let start = (tile - self.first_tile) * TILE_ROWS;
        let rows = (job.layout.rows() - tile * TILE_ROWS).min(TILE_ROWS);
        self.y[start..start + rows].copy_from_slice(&self.acc[..rows]);
        self.acc = [0.0; TILE_ROWS];
    }
}

impl FloatOut<'_> {
    /// `group` with the tile-group's scales (and minima) already converted: a
    /// multi-token run converts them once for all its tokens.
    #[inline(always)]
    pub(crate) fn group_with(
        &mut self,
        job: &Job<'_>,
        g: usize,
        acc: &[i32; TILE_ROWS],
        scales: &[f32; TILE_ROWS],
        mins: Option<&[f32; TILE_ROWS]>,
    ) {
        let (alpha, beta, sum) = (job.tables.scale[g] * 0.5, job.beta(g), job.tables.sum[g]);
        if let Some(mins) = mins {
            for r in 0..TILE_ROWS {
                self.acc[r] += scales[r] * (acc[r] as f32 * alpha + beta) + mins[r] * sum;
            }
        } else {
            for r in 0..TILE_ROWS {
                self.acc[r] += scales[r] * (acc[r] as f32 * alpha + beta);
            }
        }
    }
}

/// The integer accumulators themselves, `[tile][group][32]` (the bit-exact contract).
pub(crate) struct IntOut<'o> {
    out: &'o mut [i32],
}

impl Epilogue for IntOut<'_> {
    #[inline(always)]
    fn group<C: Fn(&[u8; 64]) -> [f32; TILE_ROWS]>(&mut self, job: &Job<'_>, tile: usize, g: usize, acc: &[i32; TILE_ROWS], _: C) {
        let at = job.layout.scale_index(tile, g);
        self.out[at..at + TILE_ROWS].copy_from_slice(acc);
    }
    #[inline(always)]
    fn tile_end(&mut self, _: &Job<'_>, _: usize) {}
}

/// The driver loop, instantiated inside each ISA's `#[target_feature]` function so
/// that the epilogue is compiled (and vectorized) for that ISA.
macro_rules! define_run {
    ($($feature:literal)?) => {
        $crate::kernels::lut::define_run!($($feature)? ; |b| $crate::kernels::lut::f16x32_portable(b));
    };
    ($($feature:literal)? ; $f16x32:expr) => {
        $(#[target_feature(enable = $feature)])?
        pub(crate) unsafe fn run<E: $crate::kernels::lut::Epilogue>(
            job: &$crate::kernels::lut::Job<'_>,
            tiles: core::ops::Range<usize>,
            epi: &mut E,
        ) {
            for tile in tiles {
                for g in 0..job.groups() {
                    job.prefetch_ahead(tile, g);
                    let mut acc = [0i32; $crate::TILE_ROWS];
                    // SAFETY: the caller checked that this ISA is available; `tile_group`
                    // reads only within the slices it is given.
                    unsafe { tile_group(job.tile_group(tile, g), job.quads(g), job.layout.bits(), job.layout.interleave(), &mut acc) };
                    epi.group(job, tile, g, &acc, $f16x32);
                }
                epi.tile_end(job, tile);
            }
        }
    };
}
pub(crate) use define_run;

/// `define_run`'s loop for N tokens' tables over the same tiles, on the 128-bit ISAs whose
/// `tile_group_n` loads and splits each weight byte once for all N: every token's
/// integer sums go through its own `FloatOut`, the same epilogue its GEMV runs, so each
/// token's floats are that GEMV's bit for bit.
macro_rules! define_run_n {
    ($feature:literal) => {
        /// # Safety
        /// The ISA must be available; every job is validated (by `Job::new`) against one
        /// matrix, and each `y` holds exactly the rows of `tiles`.
        /// Up to two tokens share each lookup pass; more (an even number) go through it a
        /// pair at a time, and share the tile-group's scales (multiplied out once).
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn run_float_n<const N: usize>(
            jobs: [&$crate::kernels::lut::Job<'_>; N],
            tiles: core::ops::Range<usize>,
            ys: [&mut [f32]; N],
        ) {
            // SAFETY: the caller's contract; 2 divides N where it is taken.
            unsafe {
                if N > 2 && N.is_multiple_of(2) {
                    run_float_p::<N, 2>(jobs, tiles, ys)
                } else {
                    run_float_p::<N, N>(jobs, tiles, ys)
                }
            }
        }

        /// `run_float_n` with the lookups in passes of `P` tokens (`P` divides `N`).
        ///
        /// # Safety
        /// As `run_float_n`.
        #[target_feature(enable = $feature)]
        unsafe fn run_float_p<const N: usize, const P: usize>(
            jobs: [&$crate::kernels::lut::Job<'_>; N],
            tiles: core::ops::Range<usize>,
            ys: [&mut [f32]; N],
        ) {
            let mut outs = ys.map(|y| $crate::kernels::lut::FloatOut::new(y, tiles.start));
            let mut header = $crate::kernels::lut::SuperBlockHeader::default();
            for tile in tiles {
                for g in 0..jobs[0].groups() {
                    jobs[0].prefetch_ahead(tile, g);
                    let mut acc = [[0i32; $crate::TILE_ROWS]; N];
                    for (pass, acc) in acc.chunks_exact_mut(P).enumerate() {
                        let quads: [_; P] = core::array::from_fn(|i| jobs[pass * P + i].quads(g));
                        let acc: &mut [[i32; $crate::TILE_ROWS]; P] = acc.try_into().expect("chunks of P");
                        // SAFETY: the caller's contract; all jobs share the matrix, so every
                        // token's group tables have the layout's `group / 16` blocks.
                        unsafe { tile_group_n(jobs[0].tile_group(tile, g), quads, jobs[0].layout.bits(), acc) };
                    }
                    let job = jobs[0];
                    let f16x32 = |b: &[u8; 64]| $crate::kernels::lut::f16x32_portable(b);
                    let (scales, mins) = job.affine_cached(tile, g, &f16x32, &mut header);
                    for ((out, job), acc) in outs.iter_mut().zip(jobs).zip(&acc) {
                        out.group_with(job, g, acc, &scales, mins.as_ref());
                    }
                }
                for (out, job) in outs.iter_mut().zip(jobs) {
                    $crate::kernels::lut::Epilogue::tile_end(out, job, tile);
                }
            }
        }
    };
}
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "wasm32"))]
pub(crate) use define_run_n;

/// Tokens per multi-token lookup pass that `gemm` uses on `isa` (1: each token alone).
/// AVX2 takes two: on a Zen 4 (AVX2 tier) the lookups of Gemma 3 and stories15M
/// prefills took 6–14 % less time in pairs than one token at a time, and more in threes
/// or fours (the i16 accumulators of three tokens do not fit 16 registers beside the
/// tables). SSSE3 takes two as well (Gemma 3 prefill 1.10–1.16× on the same host), and
/// simd128: in Chromium 156 on that host the page's builds prefilled Gemma 3 1.22–1.25×
/// and stories15M 1.14–1.19× faster in pairs (`www/bench/prefill.mjs --chromium`). NEON
/// has the same two-token kernel (tested bit for bit) but runs one token at a time until
/// an ARM machine measures it. Sub-block scales are multiplied out once per tile-group
/// and pass, so AVX-512 VBMI and AVX2 take eight tokens of those (in lookups of two): a
/// Qwen2.5-1.5B-shaped Q4_K_M prefill ran at 0.7× (VBMI) and 0.85× (AVX2) the f32-scale
/// form's speed in pairs.
pub fn gemm_tokens(isa: Isa, scales: ScaleFormat) -> usize {
    match (isa, scales) {
        (Isa::Avx512Vbmi | Isa::Avx2 | Isa::Ssse3 | Isa::Simd128, ScaleFormat::SubBlock { .. }) => 8,
        (Isa::Avx512Vbmi | Isa::Avx2 | Isa::Ssse3 | Isa::Simd128, _) => 2,
        _ => 1,
    }
}

/// What every lookup entry checks before its one `match isa`: the ISA runs on this CPU
/// (`is_available` is what makes each arm's `unsafe` call sound) and reads the matrix's
/// code order.
fn usable(isa: Isa, matrix: Interleave) -> Result<(), Error> {
    if !isa.is_available() {
        return Err(Error::IsaUnavailable(isa));
    }
    if !isa.accepts(matrix) {
        return Err(Error::InterleaveMismatch { isa, matrix });
    }
    Ok(())
}

/// Runs `job` over `tiles` through epilogue `epi` on `isa`'s `tile_group` kernel.
fn dispatch<E: Epilogue>(isa: Isa, job: &Job<'_>, tiles: Range<usize>, epi: &mut E) -> Result<(), Error> {
    usable(isa, job.layout.interleave())?;
    match isa {
        // SAFETY: the scalar kernel has no CPU requirement.
        Isa::Scalar => unsafe { scalar::run(job, tiles, epi) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `is_available` confirmed SSSE3 at run time.
        Isa::Ssse3 => unsafe { x86_64::ssse3::run(job, tiles, epi) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `is_available` confirmed AVX2, FMA and F16C at run time.
        Isa::Avx2 => unsafe { x86_64::avx2::run(job, tiles, epi) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `is_available` confirmed AVX-512 F/BW (and AVX2) at run time.
        Isa::Avx512 => unsafe { x86_64::avx512::run(job, tiles, epi) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `is_available` confirmed AVX-512 F/BW/VBMI/VNNI at run time.
        Isa::Avx512Vbmi => unsafe { x86_64::avx512vbmi::run(job, tiles, epi) },
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        // SAFETY: NEON is enabled for this build (compile-time target feature).
        Isa::Neon => unsafe { aarch64::neon::run(job, tiles, epi) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        // SAFETY: simd128 is enabled for this build (compile-time target feature).
        Isa::Simd128 => unsafe { wasm32::simd128::run(job, tiles, epi) },
        #[allow(unreachable_patterns)]
        _ => return Err(Error::IsaUnavailable(isa)),
    }
    Ok(())
}

/// `y = W·x` with the fastest kernel that reads the matrix's order. `y.len() == rows`.
pub fn gemv<B: AsRef<[u8]>>(m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
    gemv_tiles(Isa::best_for(m.layout().interleave()), m, tables, 0..m.layout().tiles(), y)
}

/// Rows of tiles `tiles` only (for splitting across threads): `y` holds exactly those
/// rows, `min(tiles.end·32, rows) − tiles.start·32` values.
pub fn gemv_tiles<B: AsRef<[u8]>>(
    isa: Isa,
    m: &PackedMatrix<B>,
    tables: Tables<'_>,
    tiles: Range<usize>,
    y: &mut [f32],
) -> Result<(), Error> {
    let job = Job::new(m, tables)?;
    let l = &job.layout;
    if tiles.start > tiles.end || tiles.end > l.tiles() {
        return Err(Error::BadShape { rows: tiles.end * TILE_ROWS, cols: l.cols() });
    }
    let rows = (tiles.end * TILE_ROWS).min(l.rows()).saturating_sub(tiles.start * TILE_ROWS);
    if y.len() != rows {
        return Err(Error::BufferSize { what: "output rows", expected: rows, got: y.len() });
    }
    usable(isa, l.interleave())?;
    match isa {
        // the tiers whose float epilogue is fused into the kernel
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `usable` confirmed the ISA; job and `y` were validated above.
        Isa::Avx512Vbmi => unsafe { x86_64::avx512vbmi::run_float(&job, tiles, y) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `usable` confirmed AVX2, FMA and F16C; job and `y` were validated above.
        Isa::Avx2 => unsafe { x86_64::avx2::run_float([&job], tiles, [y]) },
        _ => {
            let mut epi = FloatOut::new(y, tiles.start);
            dispatch(isa, &job, tiles, &mut epi)?;
        }
    }
    Ok(())
}

/// Bytes of weights a batched product reads per chunk of tiles: small enough that the
/// chunk stays in L1/L2 while every token of the batch runs over it.
const GEMM_CHUNK_BYTES: usize = 48 * 1024;

/// Tiles per chunk of `m` for `gemm` (at least one).
pub fn gemm_chunk_tiles<B: AsRef<[u8]>>(m: &PackedMatrix<B>) -> usize {
    let tiles = m.layout().tiles().max(1);
    (GEMM_CHUNK_BYTES * tiles / m.as_bytes().len().max(1)).clamp(1, tiles)
}

/// `y_b = W·x_b` for a batch of tokens' tables, `ys` token-major (`tables.len() × rows`):
/// each token's rows are what `gemv` gives it, bit for bit, but W is read from memory
/// once per chunk of tiles for the whole batch instead of once per token (prefill).
pub fn gemm<B: AsRef<[u8]>>(m: &PackedMatrix<B>, tables: &[Tables<'_>], ys: &mut [f32]) -> Result<(), Error> {
    gemm_with(Isa::best_for(m.layout().interleave()), m, tables, ys)
}

/// `gemm` on the given ISA's kernels.
pub fn gemm_with<B: AsRef<[u8]>>(isa: Isa, m: &PackedMatrix<B>, tables: &[Tables<'_>], ys: &mut [f32]) -> Result<(), Error> {
    let l = m.layout();
    if ys.len() != tables.len() * l.rows() {
        return Err(Error::BufferSize { what: "output rows × batch", expected: tables.len() * l.rows(), got: ys.len() });
    }
    // refused before any chunk is written (each chunk's `gemv_tiles*` checks again)
    if m.as_bytes().len() != l.total_bytes() {
        return Err(Error::BufferSize { what: "packed matrix bytes", expected: l.total_bytes(), got: m.as_bytes().len() });
    }
    // one token (decode): no chunking, the GEMV as it is
    if let [t] = tables {
        return gemv_tiles(isa, m, *t, 0..l.tiles(), ys);
    }
    let per_chunk = gemm_chunk_tiles(m);
    for start in (0..l.tiles()).step_by(per_chunk) {
        let tiles = start..(start + per_chunk).min(l.tiles());
        let rows = tiles.start * TILE_ROWS..(tiles.end * TILE_ROWS).min(l.rows());
        let mut outs = ys.chunks_exact_mut(l.rows());
        gemm_tiles(isa, m, tables, tiles, |_| {
            &mut outs.next().expect("ys holds tables.len() rows of outputs (checked above)")[rows.clone()]
        })?;
    }
    Ok(())
}

/// Every token's rows of `tiles` (one chunk of a `gemm`, for splitting across threads):
/// `out(b)` is token b's output for those rows (as for `gemv_tiles`), asked for once per
/// token, in order. Tokens run `gemm_tokens` at a time through the multi-token kernels,
/// each token's rows what `gemv_tiles` writes, bit for bit.
pub fn gemm_tiles<'y, B: AsRef<[u8]>>(
    isa: Isa,
    m: &PackedMatrix<B>,
    tables: &[Tables<'_>],
    tiles: Range<usize>,
    mut out: impl FnMut(usize) -> &'y mut [f32],
) -> Result<(), Error> {
    let mut next = 0;
    let mut out = || {
        next += 1;
        out(next - 1)
    };
    let per_pass = gemm_tokens(isa, m.layout().scales());
    for batch in tables.chunks(per_pass) {
        // a short last batch goes in pairs (where `isa` has a pair kernel), then alone
        if let &[t0, t1, t2, t3, t4, t5, t6, t7] = batch {
            let ys = [out(), out(), out(), out(), out(), out(), out(), out()];
            gemv_tiles_n(isa, m, [t0, t1, t2, t3, t4, t5, t6, t7], tiles.clone(), ys)?;
            continue;
        }
        for pair in batch.chunks(2) {
            match *pair {
                [t0, t1] if per_pass > 1 => gemv_tiles_n(isa, m, [t0, t1], tiles.clone(), [out(), out()])?,
                _ => {
                    for &t in pair {
                        gemv_tiles(isa, m, t, tiles.clone(), out())?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// `gemv_tiles` for two tokens' tables over the same tiles (see `gemv_tiles_n`).
pub fn gemv_tiles_pair<B: AsRef<[u8]>>(
    isa: Isa,
    m: &PackedMatrix<B>,
    tables: [Tables<'_>; 2],
    tiles: Range<usize>,
    ys: [&mut [f32]; 2],
) -> Result<(), Error> {
    gemv_tiles_n(isa, m, tables, tiles, ys)
}

/// `gemv_tiles` for N tokens' tables over the same tiles: where `isa` has a multi-token
/// kernel (AVX2, SSSE3, NEON, simd128; AVX-512 VBMI for N = 2) each weight byte is loaded
/// and split into indices once for all N,
/// elsewhere N calls. Each `y` is what `gemv_tiles` writes, bit for bit.
pub fn gemv_tiles_n<const N: usize, B: AsRef<[u8]>>(
    isa: Isa,
    m: &PackedMatrix<B>,
    tables: [Tables<'_>; N],
    tiles: Range<usize>,
    ys: [&mut [f32]; N],
) -> Result<(), Error> {
    let jobs = tables.map(|t| Job::new(m, t));
    if let Some(Err(e)) = jobs.iter().find(|j| j.is_err()) {
        return Err(*e);
    }
    let jobs = jobs.map(|j| j.expect("every job checked just above"));
    let l = *m.layout();
    if tiles.start > tiles.end || tiles.end > l.tiles() {
        return Err(Error::BadShape { rows: tiles.end * TILE_ROWS, cols: l.cols() });
    }
    let rows = (tiles.end * TILE_ROWS).min(l.rows()).saturating_sub(tiles.start * TILE_ROWS);
    if let Some(y) = ys.iter().find(|y| y.len() != rows) {
        return Err(Error::BufferSize { what: "output rows", expected: rows, got: y.len() });
    }
    usable(isa, l.interleave())?;
    let jobs_ref = jobs.each_ref();
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `usable` confirmed the ISA; every job is validated against the one
        // matrix, each `y` holds exactly the rows of `tiles`, and N is even.
        Isa::Avx512Vbmi if N.is_multiple_of(2) => unsafe { x86_64::avx512vbmi::run_float_n(jobs_ref, tiles, ys) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `usable` confirmed the ISA; every job is validated against the one
        // matrix, and each `y` holds exactly the rows of `tiles`.
        Isa::Avx2 => unsafe { x86_64::avx2::run_float(jobs_ref, tiles, ys) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as for AVX2.
        Isa::Ssse3 => unsafe { x86_64::ssse3::run_float_n(jobs_ref, tiles, ys) },
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        // SAFETY: NEON is enabled for this build; jobs and `ys` as for AVX2.
        Isa::Neon => unsafe { aarch64::neon::run_float_n(jobs_ref, tiles, ys) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        // SAFETY: simd128 is enabled for this build; jobs and `ys` as for AVX2.
        Isa::Simd128 => unsafe { wasm32::simd128::run_float_n(jobs_ref, tiles, ys) },
        // no multi-token kernel: one token at a time
        _ => {
            let _ = jobs_ref;
            for (t, y) in tables.into_iter().zip(ys) {
                gemv_tiles(isa, m, t, tiles.clone(), y)?;
            }
        }
    }
    Ok(())
}

/// The integer accumulators `[tile][group][32]` (rows padded to whole tiles): the
/// quantity every ISA must reproduce exactly.
pub fn gemv_integer<B: AsRef<[u8]>>(isa: Isa, m: &PackedMatrix<B>, tables: Tables<'_>, out: &mut [i32]) -> Result<(), Error> {
    let job = Job::new(m, tables)?;
    if out.len() != job.layout.scale_count() {
        return Err(Error::BufferSize { what: "integer accumulators", expected: job.layout.scale_count(), got: out.len() });
    }
    let tiles = 0..job.layout.tiles();
    dispatch(isa, &job, tiles, &mut IntOut { out })
}
