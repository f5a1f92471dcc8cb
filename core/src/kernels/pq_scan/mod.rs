//! Score kernels ("scan"): for a run of keys, the integer sums of their sub-space
//! table entries, `score[key] = Σ_s table_s[code_s(key)]`.
//!
//! ## Code layout
//!
//! Keys are stored in blocks of `BLOCK_KEYS` = 32.
//!
//! * 4-bit codes (`K` = 16): a block is `S / 2` chunks of 32 bytes; chunk `p` covers
//!   sub-spaces `2p` and `2p + 1`. For `j < 16`, byte `j` holds
//!   `code(key j, 2p) | code(key j + 16, 2p) << 4` and byte `16 + j` holds
//!   `code(key j, 2p + 1) | code(key j + 16, 2p + 1) << 4`. With the tables stored
//!   `S × 16` contiguous, a 16-byte shuffle (`pshufb`, `tbl`, `swizzle`) of one table
//!   by 16 code bytes gives the low nibbles' lookups (keys 0..16) and another the high
//!   nibbles' (keys 16..32); AVX2 does both sub-spaces of a chunk at once (one table
//!   per 128-bit lane), AVX-512 two chunks.
//! * 8-bit codes (`K` = 256): a block is `S` rows of 32 bytes; byte `32s + j` is
//!   `code(key j, s)`.
//!
//! ## Numeric contract
//!
//! Tables are `u8`; `S ≤ 256`, so every sum is at most 256 · 255 = 65 280 and fits a
//! `u16` exactly. The scalar kernel (`scalar.rs`) is the specification; every SIMD
//! kernel returns the same `u16` for every key, bit for bit. The shuffle kernels add
//! the looked-up bytes as `u16` pairs into one accumulator and the odd bytes alone into
//! another; the even-byte sums are then `a − (b << 8)`, exact modulo 2^16, so exact.

pub(crate) mod scalar;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "wasm32"))]
pub(crate) mod shuffle128;

#[cfg(target_arch = "aarch64")]
pub(crate) mod aarch64;
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm32;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

use crate::{Error, Isa};

/// Keys per code block: the unit every scan kernel works on.
pub const BLOCK_KEYS: usize = 32;

/// Most sub-spaces a scan accepts: 256 · 255 still fits a `u16`.
pub const MAX_SUBSPACES: usize = 256;

/// Bytes of one block of 32 keys with 4-bit codes over `subspaces` sub-spaces (16 · subspaces).
pub const fn block_bytes16(subspaces: usize) -> usize {
    BLOCK_KEYS / 2 * subspaces
}

/// Bytes of one block with 8-bit codes (32 · subspaces).
pub const fn block_bytes256(subspaces: usize) -> usize {
    BLOCK_KEYS * subspaces
}

/// Byte of a 4-bit block holding (key, s), and the shift of its nibble.
#[inline(always)]
fn at16(key: usize, s: usize) -> (usize, u32) {
    (32 * (s / 2) + 16 * (s % 2) + key % 16, if key < 16 { 0 } else { 4 })
}

/// Write `code` (0..16) for key `key` (0..32) of sub-space `s` into a 4-bit block.
///
/// # Panics
/// If `key ≥ 32` or the byte of sub-space `s` lies outside `block`; the code is masked
/// to 4 bits.
pub fn set_code16(block: &mut [u8], subspaces: usize, key: usize, s: usize, code: u8) {
    assert!(key < BLOCK_KEYS && s < subspaces, "key {key} / sub-space {s} outside a block of {subspaces} sub-spaces");
    let (at, shift) = at16(key, s);
    block[at] = (block[at] & !(0x0f << shift)) | (code & 0x0f) << shift;
}

/// Read the code of key `key` (0..32), sub-space `s` from a 4-bit block.
///
/// # Panics
/// As `set_code16`.
pub fn get_code16(block: &[u8], subspaces: usize, key: usize, s: usize) -> u8 {
    assert!(key < BLOCK_KEYS && s < subspaces, "key {key} / sub-space {s} outside a block of {subspaces} sub-spaces");
    let (at, shift) = at16(key, s);
    (block[at] >> shift) & 0x0f
}

/// Write `code` for key `key` (0..32) of sub-space `s` into an 8-bit block.
///
/// # Panics
/// If `key ≥ 32` or `s ≥ subspaces` or the block is too short.
pub fn set_code256(block: &mut [u8], subspaces: usize, key: usize, s: usize, code: u8) {
    assert!(key < BLOCK_KEYS && s < subspaces, "key {key} / sub-space {s} outside a block of {subspaces} sub-spaces");
    block[BLOCK_KEYS * s + key] = code;
}

/// Read the code of key `key` (0..32), sub-space `s` from an 8-bit block.
///
/// # Panics
/// As `set_code256`.
pub fn get_code256(block: &[u8], subspaces: usize, key: usize, s: usize) -> u8 {
    assert!(key < BLOCK_KEYS && s < subspaces, "key {key} / sub-space {s} outside a block of {subspaces} sub-spaces");
    block[BLOCK_KEYS * s + key]
}

/// Sub-spaces whose tables the x86 shuffle `scan256` kernels rewrite at a time (4 KiB
/// on the stack; larger S runs in passes that add into the scores).
#[cfg(target_arch = "x86_64")]
const DIFF_SUBSPACES: usize = 16;

/// A 256-entry table for the `pshufb` scans: 16 chunks of 16 entries, one per high
/// nibble of the code, each xored with the next chunk of its half (chunks 7 and 15
/// kept). A scan runs eight shuffles per half (codes below 128; codes of 128 and up,
/// bit 7 flipped), chunk k's indices being the code plus 0x70 − 16k, saturated: bit 7
/// stays clear, so the shuffle reads the low nibble's entry, exactly for the chunks k at
/// or above the code's own (0x70 − 16k ≡ 0 mod 16 keeps the low nibble), and the xor of
/// those lookups telescopes to the code's entry in its own chunk.
#[cfg(target_arch = "x86_64")]
fn diff_tables(table: &[u8; 256], diff: &mut [u8; 256]) {
    let (chunks, _) = table.as_chunks::<16>();
    for (k, (d, t)) in diff.as_chunks_mut::<16>().0.iter_mut().zip(chunks).enumerate() {
        let next = if k % 8 < 7 { u128::from_ne_bytes(chunks[k + 1]) } else { 0 };
        *d = (u128::from_ne_bytes(*t) ^ next).to_ne_bytes();
    }
}

/// Query heads `scan256_heads` looks up together: one 4-byte table entry holds all.
pub const SCAN_HEADS: usize = 4;

/// Whether `isa` scans 8-bit codes faster for several query heads at once
/// (`scan256_heads`: one gather serves four heads) than head by head. Measured (`lutra
/// bench attention`, gemma3 shape, AVX2): pq256 at 16k positions 1.10 ms with the
/// gathers against 1.47 ms head by head with byte shuffles (`scan256`); AVX-512 VBMI's
/// `vpermi2b` scan head by head stays faster than the gathers (pq256 1.4× exact f16
/// against 1.0×).
pub fn scan256_prefers_heads(isa: Isa) -> bool {
    matches!(isa, Isa::Avx2 | Isa::Avx512)
}

/// Checks shared by both code widths (`entries` = K = 16 or 256; `block_bytes` from
/// the sub-space count once it is known to be small); returns the number of blocks.
fn check(
    isa: Isa,
    codes: usize,
    subspaces: usize,
    block_bytes: fn(usize) -> usize,
    tables: usize,
    entries: usize,
    out: usize,
) -> Result<usize, Error> {
    if subspaces == 0 || !subspaces.is_multiple_of(2) || subspaces > MAX_SUBSPACES {
        return Err(Error::BadSubspaces(subspaces));
    }
    let block_bytes = block_bytes(subspaces);
    if !codes.is_multiple_of(block_bytes) {
        let expected = codes.div_ceil(block_bytes) * block_bytes;
        return Err(Error::BufferSize { what: "pq codes (whole blocks of 32 keys)", expected, got: codes });
    }
    if tables != entries * subspaces {
        return Err(Error::BufferSize { what: "pq tables", expected: entries * subspaces, got: tables });
    }
    let blocks = codes / block_bytes;
    if out != BLOCK_KEYS * blocks {
        return Err(Error::BufferSize { what: "pq scores", expected: BLOCK_KEYS * blocks, got: out });
    }
    if !isa.is_available() {
        return Err(Error::IsaUnavailable(isa));
    }
    Ok(blocks)
}

/// K = 16: `codes` holds n = codes.len() / block_bytes16(S) whole blocks; `tables` is
/// S × 16 u8 (table s at tables[16s..16s+16]); `out` has n·32 entries;
/// out[32b + j] = Σ_s tables[16s + code16(block b, key j, s)].
///
/// Every ISA returns the same scores as `Isa::Scalar`, bit for bit.
pub fn scan16(isa: Isa, codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) -> Result<(), Error> {
    check(isa, codes.len(), subspaces, block_bytes16, tables.len(), 16, out.len())?;
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `check` confirmed SSSE3 at run time and every buffer length.
        Isa::Ssse3 => unsafe { x86_64::ssse3::scan16(codes, subspaces, tables, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `check` confirmed AVX2 at run time and every buffer length.
        Isa::Avx2 => unsafe { x86_64::avx2::scan16(codes, subspaces, tables, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `check` confirmed AVX-512 F/BW (which Avx512Vbmi includes) and every buffer length.
        Isa::Avx512 | Isa::Avx512Vbmi => unsafe { x86_64::avx512::scan16(codes, subspaces, tables, out) },
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        // SAFETY: NEON is enabled for this build (compile-time target feature); lengths checked.
        Isa::Neon => unsafe { aarch64::neon::scan16(codes, subspaces, tables, out) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        // SAFETY: simd128 is enabled for this build (compile-time target feature); lengths checked.
        Isa::Simd128 => unsafe { wasm32::simd128::scan16(codes, subspaces, tables, out) },
        _ => scalar::scan16(codes, subspaces, tables, out),
    }
    Ok(())
}

/// K = 256: `tables` is S × 256 u8 (table s at tables[256s..256s+256]); otherwise as
/// `scan16`, with 8-bit blocks (`block_bytes256`).
///
/// AVX-512 VBMI has its own kernel (`vpermi2b` over the 256-entry table); SSSE3, AVX2
/// and AVX-512 without VBMI run 16 byte shuffles per register of codes over
/// `diff_tables`; NEON chains four 64-byte `tbl`/`tbx` lookups; simd128 runs the
/// scalar reference: 16 swizzles per 16 codes (`swizzle` zeroes indices ≥ 16, so chunk
/// k at `code − 16k` selects exactly) measured 1.06–1.10× slower than it in node on x86
/// (bench/results/journal-2026-11-29-to-2026-12-06.md, "pq256 by byte shuffles on SSSE3 and AVX2; attention timed in
/// wasm").
pub fn scan256(isa: Isa, codes: &[u8], subspaces: usize, tables: &[u8], out: &mut [u16]) -> Result<(), Error> {
    check(isa, codes.len(), subspaces, block_bytes256, tables.len(), 256, out.len())?;
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `check` confirmed SSSE3 at run time and every buffer length.
        Isa::Ssse3 => unsafe { x86_64::ssse3::scan256(codes, subspaces, tables, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `check` confirmed AVX2 (which every AVX-512 tier includes) at run time
        // and every buffer length.
        Isa::Avx2 | Isa::Avx512 => unsafe { x86_64::avx2::scan256(codes, subspaces, tables, out) },
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        // SAFETY: NEON is enabled for this build (compile-time target feature); lengths checked.
        Isa::Neon => unsafe { aarch64::neon::scan256(codes, subspaces, tables, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `check` confirmed AVX-512 F/BW/VBMI at run time and every buffer length.
        Isa::Avx512Vbmi => unsafe { x86_64::avx512vbmi::scan256(codes, subspaces, tables, out) },
        _ => scalar::scan256(codes, subspaces, tables, out),
    }
    Ok(())
}

/// K = 256 for `heads` (1..=4) query heads over the same codes (grouped-query
/// attention): `tables` is S × 256 entries of `SCAN_HEADS` bytes, head h's entry for
/// code c of sub-space s at `(256s + c)·4 + h` (bytes of heads past `heads` unread);
/// `out` is `heads` runs of n·32 scores, head h's at `h·n·32`. Each head's scores equal
/// `scan256` over its own tables, bit for bit.
pub fn scan256_heads(isa: Isa, codes: &[u8], subspaces: usize, tables: &[u8], heads: usize, out: &mut [u16]) -> Result<(), Error> {
    if heads == 0 || heads > SCAN_HEADS || !out.len().is_multiple_of(heads) {
        return Err(Error::BufferSize {
            what: "pq scores of 1-4 heads",
            expected: out.len().next_multiple_of(heads.max(1)),
            got: out.len(),
        });
    }
    check(isa, codes.len(), subspaces, block_bytes256, tables.len(), 256 * SCAN_HEADS, out.len() / heads)?;
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `check` confirmed AVX2 (which every AVX-512 tier includes) at run time
        // and every buffer length.
        Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vbmi => unsafe { x86_64::avx2::scan256_heads(codes, subspaces, tables, heads, out) },
        _ => scalar::scan256_heads(codes, subspaces, tables, heads, out),
    }
    Ok(())
}
