//! `Layout` is valid by construction and every way into a `PackedMatrix` or a kernel
//! checks its bytes.
//!
//! The fields of `Layout` are private, so `Layout { bits: 0, interleave:
//! Interleave::Permute, .. }` (which once sent the AVX-512 VBMI kernel past its
//! buffer: its `_ =>` arms run any other width as 8 bits) no longer compiles; that is
//! a compile-time guarantee, pinned by the `compile_fail` example on `Layout`, and
//! cannot be a test here. What can be tested: every bad `Layout::new` input is a typed
//! error, `PackedMatrix::from_bytes` refuses a byte buffer of the wrong length, and
//! the kernels refuse bytes that stop matching the layout after construction (a
//! storage whose `as_ref` changes), all without a panic.

mod common;
use common::Rng;

use core::cell::Cell;

use lutra_core::{
    gemm, gemm_with, gemv, gemv_integer, gemv_tiles, gemv_tiles_pair, Error, Interleave, Isa, Layout, Offset, OwnedTables, PackedMatrix,
    ScaleFormat, Tables,
};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

#[test]
fn every_bad_layout_is_a_typed_error() {
    let new = Layout::new;
    // bits outside 1..=8 (checked first, whatever else is wrong)
    assert_eq!(new(32, 64, 0, 32, Offset::Min).unwrap_err(), Error::UnsupportedBits(0));
    assert_eq!(new(32, 64, 9, 32, Offset::Min).unwrap_err(), Error::UnsupportedBits(9));
    assert_eq!(new(0, 0, 0, 48, Offset::Zero(200)).unwrap_err(), Error::UnsupportedBits(0));
    // group not one of 16, 32, 64, 128, 256
    for group in [0, 1, 8, 48, 96, 512] {
        assert_eq!(new(32, 768, 4, group, Offset::Min).unwrap_err(), Error::UnsupportedGroup(group));
    }
    // zero rows or columns
    assert_eq!(new(0, 64, 4, 32, Offset::Min).unwrap_err(), Error::BadShape { rows: 0, cols: 64 });
    assert_eq!(new(1, 0, 4, 32, Offset::Min).unwrap_err(), Error::BadShape { rows: 1, cols: 0 });
    // columns not a whole number of groups
    assert_eq!(new(1, 100, 4, 32, Offset::Min).unwrap_err(), Error::ColsNotMultipleOfGroup { cols: 100, group: 32 });
    assert_eq!(new(1, 16, 4, 32, Offset::Min).unwrap_err(), Error::ColsNotMultipleOfGroup { cols: 16, group: 32 });
    // shapes whose byte size overflows usize (written for 32- and 64-bit usize alike)
    let overflowing = [
        (usize::MAX, 16),          // padding rows to a whole tile overflows
        (usize::MAX / 16, 32),     // rows × cols overflows
        (usize::MAX / 64, 16),     // rows × cols fits, × 8 bytes does not
        (1, usize::MAX & !255),    // one tile of very wide rows
        (usize::MAX / 4, 1 << 20), // both large
    ];
    for (rows, cols) in overflowing {
        assert_eq!(new(rows, cols, 4, 16, Offset::Min).unwrap_err(), Error::BadShape { rows, cols }, "{rows} x {cols}");
    }
    // zero points outside the code range
    for (bits, zero) in [(1, 2), (2, 4), (3, 8), (4, 16), (5, 32), (6, 64), (7, 128), (1, 255)] {
        assert_eq!(new(32, 64, bits, 32, Offset::Zero(zero)).unwrap_err(), Error::BadZeroPoint { zero, bits }, "{bits} bits");
    }
    // and the edges that are fine
    for (bits, zero) in [(1, 1), (2, 3), (4, 15), (4, 8), (7, 127), (8, 255), (8, 0)] {
        assert!(new(32, 64, bits, 32, Offset::Zero(zero)).is_ok(), "{bits} bits, zero {zero}");
    }
}

#[test]
fn accessors_and_builders_keep_the_layout() {
    let l = Layout::new(45, 96, 3, 32, Offset::Zero(4)).unwrap();
    assert_eq!((l.rows(), l.cols(), l.bits(), l.group(), l.offset()), (45, 96, 3, 32, Offset::Zero(4)));
    assert_eq!((l.interleave(), l.scales()), (Interleave::native(), ScaleFormat::F16));
    assert_eq!((l.tiles(), l.groups()), (2, 3));
    for interleave in [Interleave::Shuffle, Interleave::Permute] {
        for scales in [ScaleFormat::F16, ScaleFormat::F32] {
            let m = l.with_interleave(interleave).with_scales(scales).unwrap();
            assert_eq!((m.interleave(), m.scales()), (interleave, scales));
            assert_eq!((m.rows(), m.cols(), m.bits(), m.group(), m.offset()), (l.rows(), l.cols(), l.bits(), l.group(), l.offset()));
        }
    }
}

/// One small matrix in every code order, scale format and offset kind.
fn matrices() -> Vec<PackedMatrix<lutra_core::AlignedBytes>> {
    let mut rng = Rng(12);
    let mut out = Vec::new();
    for (bits, offset) in [(3, Offset::Min), (4, Offset::Zero(8)), (8, Offset::Zero(128)), (1, Offset::Symmetric)] {
        let m = PackedMatrix::quantize(&rng.vec(45 * 64, 0.05), 45, 64, bits, 32, offset).unwrap();
        for interleave in [Interleave::Shuffle, Interleave::Permute] {
            for scales in [ScaleFormat::F16, ScaleFormat::F32] {
                out.push(PackedMatrix::relayout(&m, m.layout().with_interleave(interleave).with_scales(scales).unwrap()).unwrap());
            }
        }
    }
    out
}

#[test]
fn from_bytes_refuses_a_buffer_of_the_wrong_length() {
    for m in matrices() {
        let l = *m.layout();
        let total = l.total_bytes();
        assert_eq!(m.as_bytes().len(), total);
        let mut short = m.as_bytes().to_vec();
        short.pop();
        let mut long = m.as_bytes().to_vec();
        long.push(0);
        for (bytes, got) in [(&short[..], total - 1), (&long[..], total + 1), (&[][..], 0)] {
            assert_eq!(
                PackedMatrix::from_bytes(l, bytes).unwrap_err(),
                Error::BufferSize { what: "packed matrix bytes", expected: total, got },
                "{l:?}"
            );
        }
        // the exact bytes are accepted and give the same matrix
        let again = PackedMatrix::from_bytes(l, m.as_bytes()).unwrap();
        assert_eq!(again.layout(), m.layout());
        assert_eq!(again.as_bytes(), m.as_bytes());
    }
}

#[test]
fn from_bytes_matrix_multiplies_like_the_original() {
    let mut rng = Rng(13);
    for m in matrices() {
        let l = *m.layout();
        let again = PackedMatrix::from_bytes(l, m.as_bytes()).unwrap();
        let mut t = OwnedTables::new(l.cols(), l.group()).unwrap();
        let tables = t.build(&rng.vec(l.cols(), 1.0)).unwrap();
        for isa in Isa::available().filter(|i| i.accepts(l.interleave())) {
            let (mut want, mut got) = (vec![0.0; l.rows()], vec![0.0; l.rows()]);
            gemv_tiles(isa, &m, tables, 0..l.tiles(), &mut want).unwrap();
            gemv_tiles(isa, &again, tables, 0..l.tiles(), &mut got).unwrap();
            assert_eq!(got, want, "{} {l:?}", isa.name());
        }
    }
}

/// Storage whose `as_ref` shortens (or lengthens) by one byte once `changed` is set:
/// the length `from_bytes` checked no longer holds when a kernel runs.
struct Changing<'a> {
    bytes: &'a [u8],
    changed: &'a Cell<bool>,
    longer: bool,
}

impl AsRef<[u8]> for Changing<'_> {
    fn as_ref(&self) -> &[u8] {
        match (self.changed.get(), self.longer) {
            (false, false) => self.bytes,
            (true, false) => &self.bytes[..self.bytes.len() - 1],
            (false, true) => &self.bytes[..self.bytes.len() - 1],
            (true, true) => self.bytes,
        }
    }
}

#[test]
fn kernels_refuse_bytes_that_no_longer_match_the_layout() {
    let mut rng = Rng(14);
    for m in matrices() {
        let l = *m.layout();
        let total = l.total_bytes();
        let mut t0 = OwnedTables::new(l.cols(), l.group()).unwrap();
        let mut t1 = OwnedTables::new(l.cols(), l.group()).unwrap();
        let tables = [t0.build(&rng.vec(l.cols(), 1.0)).unwrap(), t1.build(&rng.vec(l.cols(), 1.0)).unwrap()];
        let mut padded = m.as_bytes().to_vec();
        padded.push(0);
        for longer in [false, true] {
            let bytes = if longer { &padded[..] } else { m.as_bytes() };
            let changed = Cell::new(false);
            let bad = PackedMatrix::from_bytes(l, Changing { bytes, changed: &changed, longer }).unwrap();
            changed.set(true);
            let got = if longer { total + 1 } else { total - 1 };
            let want = Error::BufferSize { what: "packed matrix bytes", expected: total, got };
            let rows = l.rows();
            let mut y = vec![0.0; 3 * rows];
            assert_eq!(gemv(&bad, tables[0], &mut y[..rows]).unwrap_err(), want, "{l:?}");
            assert_eq!(gemm(&bad, &tables[..1], &mut y[..rows]).unwrap_err(), want);
            assert_eq!(gemm(&bad, &[tables[0], tables[1], tables[0]], &mut y).unwrap_err(), want);
            for isa in Isa::available().filter(|i| i.accepts(l.interleave())) {
                let (y0, rest) = y.split_at_mut(rows);
                assert_eq!(gemv_tiles(isa, &bad, tables[0], 0..l.tiles(), y0).unwrap_err(), want, "{}", isa.name());
                let pair = gemv_tiles_pair(isa, &bad, tables, 0..l.tiles(), [y0, &mut rest[..rows]]);
                assert_eq!(pair.unwrap_err(), want, "{}", isa.name());
                assert_eq!(gemm_with(isa, &bad, &tables, &mut y[..2 * rows]).unwrap_err(), want, "{}", isa.name());
                let mut ints = vec![0; l.scale_count()];
                assert_eq!(gemv_integer(isa, &bad, tables[0], &mut ints).unwrap_err(), want, "{}", isa.name());
            }
        }
    }
}

#[test]
fn kernels_refuse_hand_built_tables_of_the_wrong_length() {
    let mut rng = Rng(15);
    for m in matrices() {
        let l = *m.layout();
        let mut t = OwnedTables::new(l.cols(), l.group()).unwrap();
        let good = t.build(&rng.vec(l.cols(), 1.0)).unwrap();
        let mut y = vec![0.0; l.rows()];
        let short_quads = Tables { quads: &good.quads[..good.quads.len() - 1], ..good };
        let err = gemv(&m, short_quads, &mut y).unwrap_err();
        assert_eq!(err, Error::BufferSize { what: "table blocks", expected: l.cols() / 16, got: l.cols() / 16 - 1 });
        let short_scales = Tables { scale: &good.scale[..l.groups() - 1], ..good };
        assert!(matches!(gemv(&m, short_scales, &mut y), Err(Error::BufferSize { what: "table scales", .. })));
        let short_sums = Tables { sum: &good.sum[..l.groups() - 1], ..good };
        assert!(matches!(gemv(&m, short_sums, &mut y), Err(Error::BufferSize { what: "table scales", .. })));
        for isa in Isa::available().filter(|i| i.accepts(l.interleave())) {
            let mut ints = vec![0; l.scale_count()];
            assert!(matches!(gemv_integer(isa, &m, short_quads, &mut ints), Err(Error::BufferSize { .. })));
            let (mut y0, mut y1) = (vec![0.0; l.rows()], vec![0.0; l.rows()]);
            let pair = gemv_tiles_pair(isa, &m, [good, short_sums], 0..l.tiles(), [&mut y0, &mut y1]);
            assert!(matches!(pair, Err(Error::BufferSize { .. })), "{}", isa.name());
        }
        // the builder's own tables still multiply
        gemv(&m, good, &mut y).unwrap();
    }
}
