//! Packed low-bit weights: the tile / bit-plane layout every kernel streams.
//!
//! A matrix of `rows x cols` codes `q` (unsigned, `bits` wide) is cut into tiles of
//! 32 rows and, along each row, groups of `group` columns. Each (row, group) has an
//! f16 scale `s` and either a matrix-wide integer zero point (`w = s·(q − z)`) or an
//! f16 minimum (`w = s·q + m`).
//!
//! The code bits are split into planes. Planes are stored in *slices*: pairs of
//! planes (0,1), (2,3), … and, when `bits` is odd, a single last plane. Inside a
//! tile-group the bytes are, in order:
//!
//! ```text
//! for each pair slice j:   for quad (16 columns):  for half h (rows 16h..16h+16):  for chunk l in 0..4:
//!     16 bytes; byte i: low nibble  = index of (row 16h + i/2,     plane 2j + i%2)
//!                       high nibble = index of (row 16h + 8 + i/2, plane 2j + i%2)
//! single slice:            for quad:  for chunk l in 0..4:
//!     16 bytes; byte i: low nibble = index of (row i), high nibble = index of (row 16 + i)
//! ```
//!
//! That is the `Interleave::Shuffle` order, for 16-entry shuffles (SSSE3, AVX2,
//! AVX-512BW, NEON, simd128). `Interleave::Permute` is the order for AVX-512 VBMI's
//! 64-entry `vpermb` and VNNI's `vpdpbusd`:
//!
//! ```text
//! for quad:  for plane p:
//!     64 bytes; byte 4r + l: low nibble  = index of (row r,      plane p, chunk 4·quad + l)
//!                            high nibble = index of (row 16 + r, plane p, chunk 4·quad + l)
//! ```
//!
//! so the four chunks' tables sit in one 64-byte register (index = nibble | l·16) and
//! the four lookups of one row are adjacent bytes, summed straight into i32 by
//! `vpdpbusd` with the plane's weight 2^p.
//!
//! An *index* is 4 bits: bit t = plane bit of column 4·chunk + t.
//!
//! Each tile-group's codes are followed by its 32 f16 scales and (with `Offset::Min`)
//! its 32 f16 minima: one record, so a GEMV streams the matrix front to back. With
//! `ScaleFormat::SubBlock` a record spans a whole K-quant super-block of 256 columns: the
//! rows' f16 `d` (and `dmin`), each group's packed integer sub-scale (and minimum) codes,
//! then the groups' weight codes — the bytes llama.cpp's blocks hold, no more, and each
//! group's scales read before its codes, so the stream still only moves forward. Sixteen bytes that
//! share one chunk are looked up with one 16-entry table (one shuffle per nibble half);
//! in a pair slice the two planes of a row sit in adjacent bytes, so one
//! multiply-add-pairs (`pmaddubsw` with weights 1, 2) combines the planes and widens
//! to i16 at once. Four chunks are adjacent, so AVX-512 reads 64 bytes against 64
//! bytes of tables (four tables, one per 128-bit lane) with no broadcast.

pub mod convert;

pub use convert::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES};

use crate::f16::{f16_bits_finite, f16_bits_to_f32};
use crate::{Error, Isa, TILE_ROWS};

/// How the per-group offset is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offset {
    /// `w = s·(q − z)`, one integer zero point for the whole matrix (llama.cpp Q4_0: z = 8).
    Zero(u8),
    /// `w = s·q + m`, an f16 minimum per (row, group).
    Min,
    /// `w = s·(q − (2^bits − 1)/2)`: the grid ±½, ±3⁄2, … ·s, symmetric around 0 (1 bit:
    /// ±s/2, like llama.cpp Q1_0). The offset term of the GEMV vanishes.
    Symmetric,
}

/// How the per-(row, group) scales and minima are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleFormat {
    /// IEEE half: what llama.cpp's own blocks carry (Q4_0, Q5_0, Q8_0, TQ2_0).
    F16,
    /// f32: any scale, K-quant products `d · sc` included, exactly (4 bytes each).
    F32,
    /// The K-quants' two levels, as compact as llama.cpp's blocks: per (row, group) an
    /// integer code of `bits` (4, 6 or 8; two's complement when `signed`) and, with
    /// `Offset::Min`, an unsigned minimum code of the same width; per (row, super-block of
    /// 256 columns) an f16 `d` (and `dmin`). The scale is `d·code`, the minimum
    /// `−(dmin·min_code)`: an f16 times an integer of at most 8 bits is exact in f32, so
    /// every kernel computes the very floats the `F32` form stores.
    SubBlock { bits: u8, signed: bool },
}

/// Columns of a K-quant super-block: one f16 `d` (and `dmin`) per row covers them.
pub const SUPER_BLOCK: usize = 256;

impl ScaleFormat {
    /// Bytes of one block of 32 stored scales (or minima).
    pub fn block_bytes(self) -> usize {
        match self {
            ScaleFormat::F16 => 2 * TILE_ROWS,
            ScaleFormat::F32 => 4 * TILE_ROWS,
            ScaleFormat::SubBlock { bits, .. } => TILE_ROWS * bits as usize / 8,
        }
    }
}

/// One (row, group)'s scale in `ScaleFormat::SubBlock` terms: its super-block's `d` and
/// `dmin` (f16 values) and its own integer codes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SubScale {
    pub d: f32,
    pub dmin: f32,
    pub code: i32,
    pub min_code: i32,
}

impl SubScale {
    /// `d·code`, exact in f32.
    #[inline(always)]
    pub fn scale(&self) -> f32 {
        self.d * self.code as f32
    }
    /// `−(dmin·min_code)`, exact in f32 (llama.cpp subtracts `dmin·m`).
    #[inline(always)]
    pub fn min(&self) -> f32 {
        -(self.dmin * self.min_code as f32)
    }
}

/// Code `r` (0..32) of a block of 32 sub-block codes `bits` wide. 8-bit codes are one
/// byte each. Narrower ones keep the low four bits of rows k and k + 16 in byte k (0..16, as
/// the weight codes pair rows) and, 6-bit ones, bits 4–5 of rows k, k + 8, k + 16, k + 24
/// in byte k of 8 more: so 32 codes unpack with a few whole-vector shifts and masks.
#[inline(always)]
pub(crate) fn sub_code(block: &[u8], bits: u8, signed: bool, r: usize) -> i32 {
    let v = if bits == 8 {
        block[r]
    } else {
        let low = (block[r % 16] >> (4 * (r / 16))) & 15;
        if bits == 6 {
            low | ((block[16 + r % 8] >> (2 * (r / 8))) & 3) << 4
        } else {
            low
        }
    };
    widen_sub_code(v, bits, signed)
}

#[inline(always)]
fn widen_sub_code(v: u8, bits: u8, signed: bool) -> i32 {
    if signed {
        (((v << (8 - bits)) as i8) >> (8 - bits)) as i32
    } else {
        v as i32
    }
}

/// All 32 codes of a block (`sub_code` for each r), as f32: straight-line loops over
/// fixed arrays, which compilers turn into a few vector operations (this runs once per
/// tile-group in every GEMV).
#[inline(always)]
pub(crate) fn sub_codes(block: &[u8], bits: u8, signed: bool) -> [f32; TILE_ROWS] {
    let mut v = [0u8; TILE_ROWS];
    if bits == 8 {
        v.copy_from_slice(&block[..TILE_ROWS]);
    } else {
        let low: &[u8; 16] = block[..16].try_into().expect("16 bytes of low bits");
        for k in 0..16 {
            v[k] = low[k] & 15;
            v[k + 16] = low[k] >> 4;
        }
        if bits == 6 {
            let high: &[u8; 8] = block[16..24].try_into().expect("8 bytes of high bits");
            for k in 0..8 {
                v[k] |= (high[k] & 3) << 4;
                v[k + 8] |= ((high[k] >> 2) & 3) << 4;
                v[k + 16] |= ((high[k] >> 4) & 3) << 4;
                v[k + 24] |= (high[k] >> 6) << 4;
            }
        }
    }
    let mut out = [0.0; TILE_ROWS];
    if signed {
        let shift = 8 - bits;
        for r in 0..TILE_ROWS {
            out[r] = (((v[r] << shift) as i8) >> shift) as f32;
        }
    } else {
        for r in 0..TILE_ROWS {
            out[r] = v[r] as f32;
        }
    }
    out
}

/// Writes `code` as code `r` of a sub-block code block (`sub_code`'s arrangement);
/// `Err` if it does not fit `bits` (signed or not).
fn store_sub_code(block: &mut [u8], bits: u8, signed: bool, r: usize, code: i32) -> Result<(), ()> {
    let (lo, hi) = if signed { (-(1i32 << (bits - 1)), (1i32 << (bits - 1)) - 1) } else { (0, (1i32 << bits) - 1) };
    if !(lo..=hi).contains(&code) {
        return Err(());
    }
    let v = code as u8;
    if bits == 8 {
        block[r] = v;
        return Ok(());
    }
    let shift = 4 * (r / 16);
    block[r % 16] = (block[r % 16] & !(15 << shift)) | ((v & 15) << shift);
    if bits == 6 {
        let shift = 2 * (r / 8);
        let byte = &mut block[16 + r % 8];
        *byte = (*byte & !(3 << shift)) | (((v >> 4) & 3) << shift);
    }
    Ok(())
}

/// Byte order of the codes inside a tile-group (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Interleave {
    /// 16-entry tables, one per 128-bit lane: every ISA but AVX-512 VBMI.
    Shuffle,
    /// 64-entry tables (`vpermb`) and 4-byte dot products (`vpdpbusd`).
    Permute,
}

impl Interleave {
    /// The order the fastest kernel on this machine reads.
    pub fn native() -> Interleave {
        Isa::best().interleave()
    }
}

/// Shape and format of a packed matrix; computes where everything lives.
///
/// The fields are private: a `Layout` comes only from `Layout::new` (and the
/// `with_*` methods, which change nothing `new` checked), so every `Layout` that
/// exists has 1..=8 bits, a supported group that divides `cols`, a zero point in
/// range and a byte size that fits in `usize`. The kernels rely on that (the VBMI
/// kernel's bit-width dispatch, the tile-group lengths), so safe code cannot write
/// `Layout { bits: 0, .. }` by hand:
///
/// ```compile_fail,E0451
/// use lutra_core::{Interleave, Layout, Offset, ScaleFormat};
/// let _ = Layout { rows: 32, cols: 64, bits: 0, group: 32, offset: Offset::Min, interleave: Interleave::Permute, scales: ScaleFormat::F16 };
/// ```
///
/// ```
/// use lutra_core::{Error, Interleave, Layout, Offset};
/// assert_eq!(Layout::new(32, 64, 0, 32, Offset::Min), Err(Error::UnsupportedBits(0)));
/// let l = Layout::new(32, 64, 4, 32, Offset::Min)?.with_interleave(Interleave::Permute);
/// assert_eq!((l.rows(), l.cols(), l.bits(), l.group()), (32, 64, 4, 32));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    rows: usize,
    cols: usize,
    bits: u8,
    group: usize,
    offset: Offset,
    interleave: Interleave,
    scales: ScaleFormat,
}

pub const GROUP_SIZES: [usize; 5] = [16, 32, 64, 128, 256];

impl Layout {
    pub fn new(rows: usize, cols: usize, bits: u8, group: usize, offset: Offset) -> Result<Layout, Error> {
        let layout = Layout { rows, cols, bits, group, offset, interleave: Interleave::native(), scales: ScaleFormat::F16 };
        layout.validate()?;
        Ok(layout)
    }

    /// The invariants every `Layout` holds (see the type's docs): `new` establishes them
    /// and `PackedMatrix::from_bytes` checks them again (a few comparisons and checked
    /// products).
    fn validate(&self) -> Result<(), Error> {
        let &Layout { rows, cols, bits, group, offset, .. } = self;
        if !(1..=8).contains(&bits) {
            return Err(Error::UnsupportedBits(bits));
        }
        if !GROUP_SIZES.contains(&group) {
            return Err(Error::UnsupportedGroup(group));
        }
        if rows == 0 || cols == 0 {
            return Err(Error::BadShape { rows, cols });
        }
        if !cols.is_multiple_of(group) {
            return Err(Error::ColsNotMultipleOfGroup { cols, group });
        }
        if let Offset::Zero(z) = offset {
            if bits < 8 && z as u32 >= 1u32 << bits {
                return Err(Error::BadZeroPoint { zero: z, bits });
            }
        }
        if let ScaleFormat::SubBlock { bits, .. } = self.scales {
            if !matches!(bits, 4 | 6 | 8) {
                return Err(Error::UnsupportedScaleCode(bits));
            }
            // every group size divides a super-block; the columns must be whole ones
            if !cols.is_multiple_of(SUPER_BLOCK) {
                return Err(Error::ColsNotMultipleOfGroup { cols, group: SUPER_BLOCK });
            }
        }
        // Every size below is derived from these products; refuse shapes that overflow.
        // Eight bytes per (padded) weight bound the total of any scale format and offset
        // (codes ≤ 1 byte, scales and minima ≤ 2·4 bytes per 16 weights).
        rows.checked_next_multiple_of(TILE_ROWS)
            .and_then(|r| r.checked_mul(cols))
            .and_then(|n| n.checked_mul(8))
            .ok_or(Error::BadShape { rows, cols })?;
        Ok(())
    }

    /// Rows of the matrix (not padded to whole tiles).
    #[inline]
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Columns of the matrix (a multiple of `group`).
    #[inline]
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// Bits per code, 1..=8.
    #[inline]
    pub fn bits(&self) -> u8 {
        self.bits
    }
    /// Columns per scale group, one of `GROUP_SIZES`.
    #[inline]
    pub fn group(&self) -> usize {
        self.group
    }
    /// How the per-group offset is stored.
    #[inline]
    pub fn offset(&self) -> Offset {
        self.offset
    }
    /// Byte order of the codes.
    #[inline]
    pub fn interleave(&self) -> Interleave {
        self.interleave
    }
    /// How scales (and minima) are stored.
    #[inline]
    pub fn scales(&self) -> ScaleFormat {
        self.scales
    }

    /// The same layout with another code order.
    pub fn with_interleave(self, interleave: Interleave) -> Layout {
        Layout { interleave, ..self }
    }

    /// The same layout with scales (and minima) stored as `scales`; refuses sub-block
    /// codes of an unsupported width or columns that are not whole super-blocks.
    pub fn with_scales(self, scales: ScaleFormat) -> Result<Layout, Error> {
        let layout = Layout { scales, ..self };
        layout.validate()?;
        Ok(layout)
    }

    pub fn tiles(&self) -> usize {
        self.rows.div_ceil(TILE_ROWS)
    }
    /// Groups per row.
    pub fn groups(&self) -> usize {
        self.cols / self.group
    }
    /// Bytes of codes for one tile-group (32 rows × `group` columns × `bits`).
    pub fn tile_group_bytes(&self) -> usize {
        TILE_ROWS * self.group * self.bits as usize / 8
    }
    /// Number of (row, group) scales, rows padded to whole tiles.
    pub fn scale_count(&self) -> usize {
        self.tiles() * self.groups() * TILE_ROWS
    }
    /// Groups per record: 1, or a super-block's with `ScaleFormat::SubBlock`.
    pub fn groups_per_record(&self) -> usize {
        match self.scales {
            ScaleFormat::SubBlock { .. } => SUPER_BLOCK / self.group,
            _ => 1,
        }
    }
    /// Blocks of 32 values per scale kind: 2 with `Offset::Min` (scales and minima), else 1.
    fn scale_kinds(&self) -> usize {
        if self.offset == Offset::Min {
            2
        } else {
            1
        }
    }
    /// Bytes of a record's super-block header: 32 f16 `d` (and 32 `dmin`) with
    /// `ScaleFormat::SubBlock`, nothing otherwise.
    fn header_bytes(&self) -> usize {
        match self.scales {
            ScaleFormat::SubBlock { .. } => 2 * TILE_ROWS * self.scale_kinds(),
            _ => 0,
        }
    }
    /// Bytes of one record: a group's codes then its 32 scales and (with `Offset::Min`)
    /// 32 minima; with `ScaleFormat::SubBlock`, the super-block header, every group's
    /// scale codes, then every group's weight codes (`groups_per_record`), so a GEMV meets
    /// each group's scales before or beside its codes. Records follow each other tile by
    /// tile, column by column: the matrix is read as one sequential stream.
    pub fn record_bytes(&self) -> usize {
        let per_group = self.tile_group_bytes() + self.scales.block_bytes() * self.scale_kinds();
        self.groups_per_record() * per_group + self.header_bytes()
    }
    /// Bytes of one tile (32 rows, every column).
    pub fn tile_bytes(&self) -> usize {
        self.groups() / self.groups_per_record() * self.record_bytes()
    }
    /// Total bytes of the packed representation.
    pub fn total_bytes(&self) -> usize {
        self.tiles() * self.tile_bytes()
    }
    /// Bits per weight including scales (and minima), for the unpadded rows.
    pub fn bits_per_weight(&self) -> f64 {
        let kinds = self.scale_kinds() as f64;
        let group_bits = 8.0 * self.scales.block_bytes() as f64 / TILE_ROWS as f64;
        let super_bits = 8.0 * self.header_bytes() as f64 / TILE_ROWS as f64 / SUPER_BLOCK as f64;
        self.bits as f64 + kinds * group_bits / self.group as f64 + super_bits
    }
    /// `(2^bits − 1) / 2`: the code of the midpoint that plane sign-mapping centers on.
    pub fn half_range(&self) -> f32 {
        ((1u32 << self.bits) - 1) as f32 * 0.5
    }
    /// Byte offset of the record that holds tile-group (tile, g).
    pub fn record_offset(&self, tile: usize, g: usize) -> usize {
        let per_record = self.groups_per_record();
        (tile * (self.groups() / per_record) + g / per_record) * self.record_bytes()
    }
    /// Where a record's codes and scale blocks start, from the record's start.
    fn codes_and_scales_at(&self) -> (usize, usize) {
        match self.scales {
            ScaleFormat::SubBlock { .. } => {
                let scales = self.header_bytes();
                (scales + self.groups_per_record() * self.scales.block_bytes() * self.scale_kinds(), scales)
            }
            _ => (0, self.tile_group_bytes()),
        }
    }
    /// Byte offset of the codes of tile-group (tile, g).
    pub fn tile_group_offset(&self, tile: usize, g: usize) -> usize {
        self.record_offset(tile, g) + self.codes_and_scales_at().0 + g % self.groups_per_record() * self.tile_group_bytes()
    }
    /// Byte offset of the super-block header of (tile, g)'s record: 32 f16 `d`, then
    /// (with `Offset::Min`) 32 f16 `dmin` (`ScaleFormat::SubBlock` only: the record's start).
    pub fn super_block_offset(&self, tile: usize, g: usize) -> usize {
        self.record_offset(tile, g)
    }
    /// Byte offset of the 32 scales of tile-group (tile, g).
    pub fn scale_block_offset(&self, tile: usize, g: usize) -> usize {
        let per_group = self.scales.block_bytes() * self.scale_kinds();
        self.record_offset(tile, g) + self.codes_and_scales_at().1 + g % self.groups_per_record() * per_group
    }
    /// Byte offset of the 32 minima of tile-group (tile, g) (`Offset::Min` only).
    pub fn min_block_offset(&self, tile: usize, g: usize) -> usize {
        self.scale_block_offset(tile, g) + self.scales.block_bytes()
    }
    /// Index of the first of the 32 scales of tile-group (tile, g).
    pub fn scale_index(&self, tile: usize, g: usize) -> usize {
        (tile * self.groups() + g) * TILE_ROWS
    }
}

/// A packed matrix over any byte storage (owned `AlignedBytes`, a `&[u8]` into an
/// mmap or a static arena).
#[derive(Clone, Debug)]
pub struct PackedMatrix<B> {
    layout: Layout,
    data: B,
}

impl<B: AsRef<[u8]>> PackedMatrix<B> {
    /// Wrap bytes produced by `pack` (or saved from `as_bytes`). Checks the layout,
    /// that `data` is exactly `layout.total_bytes()` long and that every scale is finite.
    pub fn from_bytes(layout: Layout, data: B) -> Result<Self, Error> {
        layout.validate()?;
        let got = data.as_ref().len();
        if got != layout.total_bytes() {
            return Err(Error::BufferSize { what: "packed matrix bytes", expected: layout.total_bytes(), got });
        }
        let m = PackedMatrix { layout, data };
        for tile in 0..layout.tiles() {
            for g in 0..layout.groups() {
                if let Some(r) = m.first_non_finite_scale(tile, g) {
                    return Err(Error::NonFiniteScale { row: tile * TILE_ROWS + r, group: g });
                }
            }
        }
        Ok(m)
    }

    /// The first row of tile-group (tile, g) whose scale or minimum is not finite, read
    /// from the stored blocks (sub-block codes are small integers: a finite f16 `d` and
    /// `dmin` make every product finite, so a record's header is checked at its first group).
    fn first_non_finite_scale(&self, tile: usize, g: usize) -> Option<usize> {
        let l = &self.layout;
        let bytes = self.data.as_ref();
        let f16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let block_finite = |at: usize, r: usize| match l.scales {
            ScaleFormat::F16 => f16_bits_finite(f16_at(at + 2 * r)),
            ScaleFormat::F32 => {
                f32::from_le_bytes([bytes[at + 4 * r], bytes[at + 4 * r + 1], bytes[at + 4 * r + 2], bytes[at + 4 * r + 3]]).is_finite()
            }
            ScaleFormat::SubBlock { .. } => true,
        };
        let has_mins = l.offset == Offset::Min;
        if let ScaleFormat::SubBlock { .. } = l.scales {
            if !g.is_multiple_of(l.groups_per_record()) {
                return None;
            }
            let head = l.super_block_offset(tile, g);
            let kinds = if has_mins { 2 } else { 1 };
            return (0..TILE_ROWS).find(|&r| (0..kinds).any(|k| !f16_bits_finite(f16_at(head + 2 * (k * TILE_ROWS + r)))));
        }
        let (scales, mins) = (l.scale_block_offset(tile, g), has_mins.then(|| l.min_block_offset(tile, g)));
        (0..TILE_ROWS).find(|&r| !block_finite(scales, r) || mins.is_some_and(|at| !block_finite(at, r)))
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    pub fn as_bytes(&self) -> &[u8] {
        self.data.as_ref()
    }
    /// The storage, to move (`AlignedBytes::gather`: the same bytes elsewhere).
    #[cfg(feature = "alloc")]
    pub(crate) fn data_mut(&mut self) -> &mut B {
        &mut self.data
    }
    /// The stored scales of tile-group (tile, g) (32 values in the layout's format).
    pub fn scales(&self, tile: usize, g: usize) -> &[u8] {
        let at = self.layout.scale_block_offset(tile, g);
        &self.data.as_ref()[at..at + self.layout.scales.block_bytes()]
    }
    /// The stored minima of tile-group (tile, g); `None` for zero-point matrices.
    pub fn mins(&self, tile: usize, g: usize) -> Option<&[u8]> {
        (self.layout.offset == Offset::Min).then(|| {
            let at = self.layout.min_block_offset(tile, g);
            &self.data.as_ref()[at..at + self.layout.scales.block_bytes()]
        })
    }
    /// Scale `i` (index as `Layout::scale_index`) and minimum `i` (0 without minima), as
    /// f32 (exact for every format).
    pub fn scale_and_min(&self, i: usize) -> (f32, f32) {
        if let Some(sub) = self.sub_scale(i) {
            return (sub.scale(), if self.layout.offset == Offset::Min { sub.min() } else { 0.0 });
        }
        let (tile, g, r) = self.scale_position(i);
        let s = self.value_at(self.layout.scale_block_offset(tile, g), r);
        let m = if self.layout.offset == Offset::Min { self.value_at(self.layout.min_block_offset(tile, g), r) } else { 0.0 };
        (s, m)
    }
    /// Scale `i` as stored by `ScaleFormat::SubBlock` (its super-block's `d`, `dmin` and
    /// its codes); `None` for the other formats.
    pub fn sub_scale(&self, i: usize) -> Option<SubScale> {
        let ScaleFormat::SubBlock { bits, signed } = self.layout.scales else { return None };
        let (tile, g, r) = self.scale_position(i);
        let d = self.data.as_ref();
        let head = self.layout.super_block_offset(tile, g);
        let f16_at = |at: usize| stored_f16(u16::from_le_bytes([d[at], d[at + 1]]));
        let has_mins = self.layout.offset == Offset::Min;
        Some(SubScale {
            d: f16_at(head + 2 * r),
            dmin: if has_mins { f16_at(head + 2 * TILE_ROWS + 2 * r) } else { 0.0 },
            code: sub_code(&d[self.layout.scale_block_offset(tile, g)..], bits, signed, r),
            min_code: if has_mins { sub_code(&d[self.layout.min_block_offset(tile, g)..], bits, false, r) } else { 0 },
        })
    }
    /// (tile, group, row in tile) of scale index `i`.
    fn scale_position(&self, i: usize) -> (usize, usize, usize) {
        let tg = i / TILE_ROWS;
        (tg / self.layout.groups(), tg % self.layout.groups(), i % TILE_ROWS)
    }
    fn value_at(&self, block: usize, r: usize) -> f32 {
        let d = self.data.as_ref();
        match self.layout.scales {
            ScaleFormat::F16 => stored_f16(u16::from_le_bytes([d[block + 2 * r], d[block + 2 * r + 1]])),
            ScaleFormat::F32 => f32::from_le_bytes(d[block + 4 * r..block + 4 * r + 4].try_into().expect("4 bytes")),
            ScaleFormat::SubBlock { .. } => unreachable!("sub-block scales are read by sub_scale"),
        }
    }

    /// The code of (row, col), read back from the planes.
    pub fn code(&self, row: usize, col: usize) -> u8 {
        let (g, k) = (col / self.layout.group, col % self.layout.group);
        let (chunk, t) = (k / 4, k % 4);
        (0..self.layout.bits as usize).fold(0, |q, p| q | ((self.nibble(row, g, chunk, p) >> t) & 1) << p)
    }

    /// Plane `p`'s bits of row `row`'s four codes in chunk `chunk` of group `g` (bit t
    /// for column `4·chunk + t` of the group).
    fn nibble(&self, row: usize, g: usize, chunk: usize, p: usize) -> u8 {
        let l = &self.layout;
        let (tile, r) = (row / TILE_ROWS, row % TILE_ROWS);
        let base = l.tile_group_offset(tile, g);
        let (quad, lane) = (chunk / 4, chunk % 4);
        let (byte, high) = match l.interleave {
            Interleave::Shuffle if p / 2 < l.bits as usize / 2 => {
                let (h, rr) = (r / 16, r % 16);
                let i = 2 * (rr % 8) + p % 2;
                (base + (p / 2) * 8 * l.group + quad * 128 + h * 64 + lane * 16 + i, rr >= 8)
            }
            Interleave::Shuffle => (base + (l.bits as usize / 2) * 8 * l.group + quad * 64 + lane * 16 + r % 16, r >= 16),
            Interleave::Permute => (base + (quad * l.bits as usize + p) * 64 + 4 * (r % 16) + lane, r >= 16),
        };
        let w = self.as_bytes()[byte];
        if high {
            w >> 4
        } else {
            w & 15
        }
    }

    /// Scale and offset of (row, group) as f32: `w = scale·q + offset`.
    pub fn affine(&self, row: usize, g: usize) -> (f32, f32) {
        let (s, m) = self.scale_and_min(self.layout.scale_index(row / TILE_ROWS, g) + row % TILE_ROWS);
        match self.layout.offset {
            Offset::Zero(z) => (s, -(s * z as f32)),
            Offset::Symmetric => (s, -(s * self.layout.half_range())),
            Offset::Min => (s, m),
        }
    }

    /// Dequantize one row into `out` (`cols` values).
    ///
    /// Zero-point matrices compute `s·(q − z)` exactly as llama.cpp's
    /// `dequantize_row_q4_0` / `_q8_0` do (integer difference, then one f32 product).
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) -> Result<(), Error> {
        let l = self.layout;
        if row >= l.rows {
            return Err(Error::BadShape { rows: row, cols: l.cols });
        }
        if out.len() != l.cols {
            return Err(Error::BufferSize { what: "dequantized row", expected: l.cols, got: out.len() });
        }
        for (g, out) in out.chunks_exact_mut(l.group).enumerate() {
            let (s, m) = self.affine(row, g);
            // each plane's nibble once per four codes (an embedding row per token)
            for (chunk, out) in out.chunks_exact_mut(4).enumerate() {
                let mut codes = [0u8; 4];
                for p in 0..l.bits as usize {
                    let nibble = self.nibble(row, g, chunk, p);
                    for (t, q) in codes.iter_mut().enumerate() {
                        *q |= ((nibble >> t) & 1) << p;
                    }
                }
                for (o, q) in out.iter_mut().zip(codes) {
                    *o = match l.offset {
                        Offset::Zero(z) => (q as i32 - z as i32) as f32 * s,
                        Offset::Symmetric => (q as f32 - l.half_range()) * s,
                        Offset::Min => s * q as f32 + m,
                    };
                }
            }
        }
        Ok(())
    }
}

/// A stored f16 as f32; NaN for infinities and NaNs (which `f16_bits_to_f32`, made for
/// finite values, would turn into large finite ones), so `from_bytes` refuses them.
fn stored_f16(bits: u16) -> f32 {
    if f16_bits_finite(bits) {
        f16_bits_to_f32(bits)
    } else {
        f32::NAN
    }
}

/// What a packer needs for one (row, group): its codes, scale and minimum. Layouts
/// with `ScaleFormat::F16` store them rounded to f16 (exact for values that came from f16).
/// `ScaleFormat::SubBlock` layouts store `sub` instead (`d` and `dmin` rounded to f16,
/// the same for every group of a super-block).
pub struct GroupCodes<'a> {
    pub codes: &'a mut [u8],
    pub scale: f32,
    pub min: f32,
    pub sub: SubScale,
}

/// Pack a matrix into `out` (`layout.total_bytes()` long), pulling each (row, group)
/// from `source`. No allocation: the scratch is one tile-group on the stack (8 KiB).
/// Rows past `layout.rows()` (tile padding) get code 0 and scale 0.
pub fn pack<F>(layout: &Layout, out: &mut [u8], mut source: F) -> Result<(), Error>
where
    F: FnMut(usize, usize, &mut GroupCodes<'_>) -> Result<(), Error>,
{
    if out.len() != layout.total_bytes() {
        return Err(Error::BufferSize { what: "packed matrix bytes", expected: layout.total_bytes(), got: out.len() });
    }
    let mask = ((1u16 << layout.bits) - 1) as u8;
    let mut scratch = [0u8; TILE_ROWS * 256];
    // the same codes as 4-code words, which `index` takes a plane of in a few operations
    let mut words = [0u32; TILE_ROWS * 256 / 4];
    let g_len = layout.group;
    for tile in 0..layout.tiles() {
        for g in 0..layout.groups() {
            // where this tile-group's scales go, worked out once for its 32 rows
            let blocks = ScaleBlocks::of(layout, tile, g);
            for r in 0..TILE_ROWS {
                let row = tile * TILE_ROWS + r;
                let codes = &mut scratch[r * g_len..(r + 1) * g_len];
                codes.fill(0);
                let (mut scale, mut min, mut sub) = (0.0f32, 0.0f32, SubScale::default());
                if row < layout.rows {
                    let mut gc = GroupCodes { codes, scale: 0.0, min: 0.0, sub };
                    source(row, g, &mut gc)?;
                    (scale, min, sub) = (gc.scale, gc.min, gc.sub);
                    for c in gc.codes.iter_mut() {
                        *c &= mask;
                    }
                }
                if let ScaleFormat::SubBlock { bits, signed } = layout.scales {
                    store_sub_scale(&blocks, (bits, signed), out, row, g, r, sub)?;
                    continue;
                }
                store_scale(layout, out, blocks.scales, r, scale).map_err(|_| Error::NonFiniteScale { row, group: g })?;
                if let Some(mins) = blocks.mins {
                    store_scale(layout, out, mins, r, min).map_err(|_| Error::NonFiniteScale { row, group: g })?;
                }
            }
            let at = layout.tile_group_offset(tile, g);
            let words = &mut words[..TILE_ROWS * g_len / 4];
            for (w, c) in words.iter_mut().zip(scratch[..TILE_ROWS * g_len].chunks_exact(4)) {
                *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
            let out = &mut out[at..at + layout.tile_group_bytes()];
            pack_codes(words, g_len, layout.bits, layout.interleave, out);
        }
    }
    Ok(())
}

/// Where one tile-group's scales are stored: its scale block, its minima block
/// (`Offset::Min`), and for `ScaleFormat::SubBlock` its record's super-block header and
/// whether this group is the record's first (which writes the header).
struct ScaleBlocks {
    scales: usize,
    mins: Option<usize>,
    header: usize,
    first_in_record: bool,
}

impl ScaleBlocks {
    fn of(layout: &Layout, tile: usize, g: usize) -> ScaleBlocks {
        ScaleBlocks {
            scales: layout.scale_block_offset(tile, g),
            mins: (layout.offset == Offset::Min).then(|| layout.min_block_offset(tile, g)),
            header: layout.super_block_offset(tile, g),
            first_in_record: g.is_multiple_of(layout.groups_per_record()),
        }
    }
}

/// Row `r` (matrix row `row`) of tile-group `g`'s sub-block scale, codes `bits` wide
/// (`signed` or not): `d` (and `dmin`) into the super-block header (written by its first
/// group, checked by the others), its codes into the group's blocks.
fn store_sub_scale(
    at: &ScaleBlocks,
    (bits, signed): (u8, bool),
    out: &mut [u8],
    row: usize,
    g: usize,
    r: usize,
    sub: SubScale,
) -> Result<(), Error> {
    let bad = Error::BadSubScale { row, group: g };
    let header = [(at.header, sub.d), (at.header + 2 * TILE_ROWS, sub.dmin)];
    for (slot_at, v) in header.into_iter().take(if at.mins.is_some() { 2 } else { 1 }) {
        let f16 = crate::f16::f32_to_f16_bits(v);
        if !f16_bits_finite(f16) {
            return Err(Error::NonFiniteScale { row, group: g });
        }
        let slot = &mut out[slot_at + 2 * r..slot_at + 2 * r + 2];
        if at.first_in_record {
            slot.copy_from_slice(&f16.to_le_bytes());
        } else if slot != f16.to_le_bytes() {
            return Err(bad);
        }
    }
    store_sub_code(&mut out[at.scales..], bits, signed, r, sub.code).map_err(|_| bad)?;
    if let Some(mins) = at.mins {
        store_sub_code(&mut out[mins..], bits, false, r, sub.min_code).map_err(|_| bad)?;
    }
    Ok(())
}

/// Write value `r` of a scale block in the layout's format; refuses values that are
/// not finite in that format.
fn store_scale(layout: &Layout, out: &mut [u8], block: usize, r: usize, v: f32) -> Result<(), ()> {
    match layout.scales {
        ScaleFormat::F16 => {
            let bits = crate::f16::f32_to_f16_bits(v);
            if !f16_bits_finite(bits) {
                return Err(());
            }
            out[block + 2 * r..block + 2 * r + 2].copy_from_slice(&bits.to_le_bytes());
        }
        ScaleFormat::F32 => {
            if !v.is_finite() {
                return Err(());
            }
            out[block + 4 * r..block + 4 * r + 4].copy_from_slice(&v.to_le_bytes());
        }
        ScaleFormat::SubBlock { .. } => unreachable!("pack stores sub-block scales with store_sub_scale"),
    }
    Ok(())
}

/// One packed byte: bit `p` of the four codes of `low` (one per byte, code t's at bit t)
/// in its low nibble, of the four of `high` in its high nibble, in one multiply: the
/// eight masked bits sit at 8t, and the multiply by
/// Σ 2^(56 − 7t) moves bit 8t to 56 + t, every other product to a distinct bit outside
/// 56..64 (8t − 7s ∈ 0..8 only for s = t), so no carry reaches the top byte.
#[inline(always)]
fn plane_byte(low: u32, high: u32, p: usize) -> u8 {
    let bits = ((u64::from(high) << 32 | u64::from(low)) >> p) & 0x0101_0101_0101_0101;
    (bits.wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8
}

/// Every byte of a packed tile-group in order, as `f(o, (row_low, row_high), chunk,
/// plane)`: byte `o` holds bit `plane` of the four codes of chunk `chunk` (codes
/// 4·chunk..4·chunk + 4) of row `row_low` in its low nibble and of row `row_high` in its
/// high one. The one definition of both code orders, which packing and unpacking share.
#[inline(always)]
fn plane_bytes(group: usize, bits: u8, interleave: Interleave, mut f: impl FnMut(usize, (usize, usize), usize, usize)) {
    let bits = bits as usize;
    let mut o = 0;
    match interleave {
        // per quad of 16 codes and plane: 16 row pairs (r, r + 16), four chunk bytes each
        Interleave::Permute => {
            for quad in 0..group / 16 {
                for p in 0..bits {
                    for r in 0..16 {
                        for lane in 0..4 {
                            f(o, (r, r + 16), 4 * quad + lane, p);
                            o += 1;
                        }
                    }
                }
            }
        }
        // plane pairs (2j, 2j + 1) interleaved per quad, half and chunk over rows
        // (r, r + 8); then an odd last plane over rows (r, r + 16)
        Interleave::Shuffle => {
            for j in 0..bits / 2 {
                for quad in 0..group / 16 {
                    for h in 0..2 {
                        for lane in 0..4 {
                            for i in 0..16 {
                                let r = 16 * h + i / 2;
                                f(o, (r, r + 8), 4 * quad + lane, 2 * j + i % 2);
                                o += 1;
                            }
                        }
                    }
                }
            }
            if bits % 2 == 1 {
                for c in 0..group / 4 {
                    for i in 0..16 {
                        f(o, (i, i + 16), c, bits - 1);
                        o += 1;
                    }
                }
            }
        }
    }
}

/// A tile-group's codes (32 rows × `group`, as 4-code words, row-major) packed into `out`
/// in `interleave` order.
fn pack_codes(words: &[u32], group: usize, bits: u8, interleave: Interleave, out: &mut [u8]) {
    let chunks = group / 4;
    debug_assert_eq!(out.len(), TILE_ROWS * group * bits as usize / 8);
    plane_bytes(group, bits, interleave, |o, (low, high), c, p| {
        out[o] = plane_byte(words[low * chunks + c], words[high * chunks + c], p);
    });
}

/// The inverse of [`pack_codes`]: a packed tile-group back into 4-code words.
#[cfg(any(test, feature = "alloc"))]
fn unpack_codes(packed: &[u8], group: usize, bits: u8, interleave: Interleave, words: &mut [u32]) {
    let chunks = group / 4;
    words.fill(0);
    // bit t of a nibble to bit 8t (t < 4): products t + 7s land on 8t only for s = t
    let spread = |nibble: u8| u32::from(nibble).wrapping_mul(0x0020_4081) & 0x0101_0101;
    plane_bytes(group, bits, interleave, |o, (low, high), c, p| {
        let b = packed[o];
        words[low * chunks + c] |= spread(b & 15) << p;
        words[high * chunks + c] |= spread(b >> 4) << p;
    });
}

/// `src`, packed in `from`, with its codes in `to` order instead (into `out`, as long):
/// scales, headers and record offsets are the same in both orders, only the bytes of
/// each tile-group's codes move.
#[cfg(feature = "alloc")]
fn reorder_codes(from: &Layout, src: &[u8], to: Interleave, out: &mut [u8]) {
    out.copy_from_slice(src);
    let mut words = [0u32; TILE_ROWS * 256 / 4];
    let words = &mut words[..TILE_ROWS * from.group / 4];
    let n = from.tile_group_bytes();
    for tile in 0..from.tiles() {
        for g in 0..from.groups() {
            let at = from.tile_group_offset(tile, g);
            unpack_codes(&src[at..at + n], from.group, from.bits, from.interleave, words);
            pack_codes(words, from.group, from.bits, to, &mut out[at..at + n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{pack_codes, plane_byte, unpack_codes, Interleave, TILE_ROWS};
    use alloc::vec;
    use alloc::vec::Vec;

    /// Unpacking gives back the codes packed, in both orders, for every width and group.
    #[test]
    fn unpacking_inverts_packing() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for bits in 1..=8u8 {
            for group in [16, 32, 64, 128, 256] {
                let mask = (1u32 << bits) - 1;
                let words: Vec<u32> = (0..TILE_ROWS * group / 4)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        (state as u32) & (mask * 0x0101_0101)
                    })
                    .collect();
                for interleave in [Interleave::Shuffle, Interleave::Permute] {
                    let mut packed = vec![0u8; TILE_ROWS * group * bits as usize / 8];
                    pack_codes(&words, group, bits, interleave, &mut packed);
                    let mut back = vec![0u32; words.len()];
                    unpack_codes(&packed, group, bits, interleave, &mut back);
                    assert_eq!(back, words, "{bits} bits, group {group}, {interleave:?}");
                }
            }
        }
    }

    /// Against the definition, bit by bit: word pairs whose eight code bytes take each
    /// value 0..=255 at one position (the others random), every plane.
    #[test]
    fn plane_byte_gathers_bit_p_of_each_code() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        // every byte value at every position; under Miri one random pair each, not 32
        let pairs_per_value = if cfg!(miri) { 1 } else { 32 };
        for i in 0..8 * 256 * pairs_per_value {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut codes = state.to_le_bytes();
            codes[i / (256 * pairs_per_value)] = (i / pairs_per_value % 256) as u8;
            let low = u32::from_le_bytes([codes[0], codes[1], codes[2], codes[3]]);
            let high = u32::from_le_bytes([codes[4], codes[5], codes[6], codes[7]]);
            for p in 0..8 {
                let want = (0..8).fold(0u8, |acc, t| acc | (((codes[t] >> p) & 1) << t));
                assert_eq!(plane_byte(low, high, p), want, "codes {codes:?}, plane {p}");
            }
        }
    }
}
