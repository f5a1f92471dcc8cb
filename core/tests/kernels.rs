//! Every kernel against the scalar reference (integer accumulators bit for bit), and
//! the GEMV against f32 arithmetic over the dequantized weights.

mod common;
use common::Rng;

use lutra_core::kernels::quant::convert::{
    self, Q2_K_BLOCK_BYTES, Q3_K_BLOCK_BYTES, Q4_0_BLOCK_BYTES, Q4_1_BLOCK_BYTES, Q4_K_BLOCK_BYTES, Q5_0_BLOCK_BYTES, Q5_1_BLOCK_BYTES,
    Q5_K_BLOCK_BYTES, Q6_K_BLOCK_BYTES, Q8_0_BLOCK_BYTES, TQ1_0_BLOCK_BYTES, TQ2_0_BLOCK_BYTES,
};
use lutra_core::{
    gemm_tiles, gemv, gemv_integer, gemv_tiles, gemv_tiles_n, gemv_tiles_pair, Error, Interleave, Isa, Offset, OwnedTables, PackedMatrix,
    ScaleFormat,
};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn dequantized<B: AsRef<[u8]>>(m: &PackedMatrix<B>) -> Vec<f32> {
    let l = m.layout();
    let mut w = vec![0.0; l.rows() * l.cols()];
    for (r, row) in w.chunks_exact_mut(l.cols()).enumerate() {
        m.dequantize_row(r, row).unwrap();
    }
    w
}

fn matvec_f64(w: &[f32], x: &[f32], rows: usize) -> Vec<f64> {
    let cols = x.len();
    (0..rows).map(|r| (0..cols).map(|k| w[r * cols + k] as f64 * x[k] as f64).sum()).collect()
}

fn nmse(got: &[f32], want: &[f64]) -> f64 {
    let err: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum();
    let sig: f64 = want.iter().map(|w| w * w).sum();
    err / sig
}

fn gemv_with(isa: Isa, m: &PackedMatrix<lutra_core::AlignedBytes>, x: &[f32]) -> Vec<f32> {
    let l = m.layout();
    let mut t = OwnedTables::new(l.cols(), l.group()).unwrap();
    let tables = t.build(x).unwrap();
    let mut y = vec![0.0; l.rows()];
    gemv_tiles(isa, m, tables, 0..l.tiles(), &mut y).unwrap();
    y
}

fn integers(isa: Isa, m: &PackedMatrix<lutra_core::AlignedBytes>, x: &[f32]) -> Vec<i32> {
    let l = m.layout();
    let mut t = OwnedTables::new(l.cols(), l.group()).unwrap();
    let tables = t.build(x).unwrap();
    let mut out = vec![0; l.scale_count()];
    gemv_integer(isa, m, tables, &mut out).unwrap();
    out
}

/// Shapes small enough for qemu and node, with a partial last tile.
const ROWS: usize = 45;

#[test]
fn every_isa_equals_scalar_for_every_format() {
    let mut rng = Rng(1);
    let isas: Vec<Isa> = Isa::available().collect();
    assert!(isas.contains(&Isa::Scalar));
    for bits in 1..=8u8 {
        for group in [16, 32, 64, 128, 256] {
            for offset in [Offset::Min, Offset::Symmetric, Offset::Zero(((1u16 << bits) / 2) as u8)] {
                let cols = group * if group == 256 { 1 } else { 2 };
                let w = rng.vec(ROWS * cols, 0.05);
                // activations with outliers, as in real models
                let mut x = rng.vec(cols, 1.0);
                x[3] *= 20.0;
                let packed = PackedMatrix::quantize(&w, ROWS, cols, bits, group, offset).unwrap();
                let mut reference = None;
                for (interleave, scales) in [
                    (Interleave::Shuffle, ScaleFormat::F16),
                    (Interleave::Permute, ScaleFormat::F16),
                    (Interleave::Shuffle, ScaleFormat::F32),
                    (Interleave::Permute, ScaleFormat::F32),
                ] {
                    let layout = packed.layout().with_interleave(interleave).with_scales(scales).unwrap();
                    let m = PackedMatrix::relayout(&packed, layout).unwrap();
                    for r in (0..ROWS).step_by(7) {
                        for c in (0..cols).step_by(5) {
                            assert_eq!(m.code(r, c), packed.code(r, c));
                        }
                    }
                    let ints = integers(Isa::Scalar, &m, &x);
                    assert!(ints.iter().any(|&v| v != 0));
                    // the scalar reference does not depend on the code order
                    assert_eq!(reference.get_or_insert_with(|| ints.clone()), &ints);
                    let y_ref = gemv_with(Isa::Scalar, &m, &x);
                    for &isa in isas.iter().filter(|i| i.accepts(interleave)) {
                        let got = integers(isa, &m, &x);
                        assert_eq!(got, ints, "{} bits={bits} group={group} {offset:?}", isa.name());
                        // floats too: every tier follows the scalar epilogue's order
                        let y = gemv_with(isa, &m, &x);
                        if let Some(r) = (0..y.len()).find(|&r| y[r].to_bits() != y_ref[r].to_bits()) {
                            panic!(
                                "{} bits={bits} group={group} {offset:?} {interleave:?} {scales:?} row {r}: {} vs scalar {}",
                                isa.name(),
                                y[r],
                                y_ref[r]
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The multi-token products (prefill: two, three and four tokens, and a whole batch
/// through `gemm_tiles`) give each token exactly its own GEMV's floats, for every width,
/// offset, scale format and group size, over a range of tiles that ends in a partial
/// tile, on every ISA that reads the layout.
#[test]
fn multi_token_products_equal_each_tokens_gemv() {
    let mut rng = Rng(31);
    for bits in 1..=8u8 {
        for (group, offset) in [(16, Offset::Min), (64, Offset::Symmetric), (128, Offset::Zero(((1u16 << bits) / 2) as u8))] {
            let cols = 256;
            let packed = PackedMatrix::quantize(&rng.vec(ROWS * cols, 0.05), ROWS, cols, bits, group, offset).unwrap();
            let xs: Vec<Vec<f32>> = (0..5).map(|_| rng.vec(cols, 1.0)).collect();
            let mut owned: Vec<OwnedTables> = (0..5).map(|_| OwnedTables::new(cols, group).unwrap()).collect();
            for (t, x) in owned.iter_mut().zip(&xs) {
                t.build(x).unwrap();
            }
            let tables: Vec<_> = owned.iter().map(|t| t.view()).collect();
            for (interleave, scales) in
                [(Interleave::Permute, ScaleFormat::F16), (Interleave::Permute, ScaleFormat::F32), (Interleave::Shuffle, ScaleFormat::F16)]
            {
                let m = PackedMatrix::relayout(&packed, packed.layout().with_interleave(interleave).with_scales(scales).unwrap()).unwrap();
                let tiles = 1..m.layout().tiles();
                let rows = ROWS - 32;
                for isa in Isa::available().filter(|i| i.accepts(interleave)) {
                    let what = format!("{} bits={bits} group={group} {offset:?} {scales:?}", isa.name());
                    let want: Vec<Vec<f32>> = tables
                        .iter()
                        .map(|t| {
                            let mut y = vec![0.0; rows];
                            gemv_tiles(isa, &m, *t, tiles.clone(), &mut y).unwrap();
                            y
                        })
                        .collect();
                    let mut y = vec![vec![f32::NAN; rows]; 5];
                    let [y0, y1, ..] = &mut y[..] else { unreachable!() };
                    gemv_tiles_pair(isa, &m, [tables[0], tables[1]], tiles.clone(), [y0, y1]).unwrap();
                    assert_eq!(y[..2], want[..2], "pair {what}");
                    let [y0, y1, y2, ..] = &mut y[..] else { unreachable!() };
                    gemv_tiles_n(isa, &m, [tables[0], tables[1], tables[2]], tiles.clone(), [y0, y1, y2]).unwrap();
                    assert_eq!(y[..3], want[..3], "three {what}");
                    let [y0, y1, y2, y3, _] = &mut y[..] else { unreachable!() };
                    gemv_tiles_n(isa, &m, [tables[0], tables[1], tables[2], tables[3]], tiles.clone(), [y0, y1, y2, y3]).unwrap();
                    assert_eq!(y[..4], want[..4], "four {what}");
                    let mut got = vec![vec![f32::NAN; rows]; 5];
                    let mut outs = got.iter_mut().enumerate();
                    gemm_tiles(isa, &m, &tables, tiles.clone(), |b| {
                        let (at, y) = outs.next().expect("one output per token");
                        assert_eq!(b, at, "tokens' outputs are asked for in order");
                        y.as_mut_slice()
                    })
                    .unwrap();
                    assert_eq!(got, want, "gemm_tiles {what}");
                }
                let mut short = vec![0.0; rows - 1];
                let err = gemv_tiles_pair(
                    Isa::best_for(interleave),
                    &m,
                    [tables[0], tables[1]],
                    tiles.clone(),
                    [&mut vec![0.0; rows], &mut short],
                )
                .unwrap_err();
                assert!(matches!(err, Error::BufferSize { .. }), "{err:?}");
            }
        }
    }
}

#[test]
fn extreme_tables_do_not_overflow_i16() {
    // all activations equal, all codes maximal (or all zero): every lookup hits +127
    // (or −127), the largest sums the i16 stages can see. Every group size, since how
    // many planes share an i16 accumulator depends on it (AVX2).
    let isas: Vec<Isa> = Isa::available().collect();
    for (bits, group, code) in (1..=8u8).flat_map(|b| [16, 32, 64, 128, 256].into_iter().flat_map(move |g| [(b, g, u8::MAX), (b, g, 0)])) {
        let layout = lutra_core::Layout::new(32, 256, bits, group, Offset::Min).unwrap();
        let mut data = lutra_core::AlignedBytes::zeroed(layout.total_bytes());
        lutra_core::kernels::quant::pack(&layout, data.as_mut(), |_, _, gc| {
            gc.codes.fill(code);
            gc.scale = 1.0;
            Ok(())
        })
        .unwrap();
        let m = PackedMatrix::from_bytes(layout, data).unwrap();
        let x = vec![1.0f32; 256];
        let planes: i32 = (0..bits).map(|i| 1 << i).sum();
        let sign = if code == 0 { -1 } else { 1 };
        for interleave in [Interleave::Shuffle, Interleave::Permute] {
            let m = PackedMatrix::repack(&m, interleave).unwrap();
            let reference = integers(Isa::Scalar, &m, &x);
            let chunks = group as i32 / 4;
            assert!(reference.iter().all(|&v| v == sign * chunks * 127 * planes), "bits={bits} group={group}");
            for &isa in isas.iter().filter(|i| i.accepts(interleave)) {
                assert_eq!(integers(isa, &m, &x), reference, "{} bits={bits} group={group} code={code}", isa.name());
            }
        }
    }
}

#[test]
fn gemv_matches_f32_over_dequantized_weights() {
    // Table (int8) error only. Bound from the int8 table step: NMSE ~ 1e-5..1e-4.
    let mut rng = Rng(7);
    let (rows, cols) = (64, 512);
    for (bits, offset) in
        [(1, Offset::Symmetric), (1, Offset::Min), (2, Offset::Min), (2, Offset::Symmetric), (3, Offset::Min), (4, Offset::Min)]
    {
        let w = rng.vec(rows * cols, 0.02);
        let x = rng.vec(cols, 1.0);
        let m = PackedMatrix::quantize(&w, rows, cols, bits, 128, offset).unwrap();
        let want = matvec_f64(&dequantized(&m), &x, rows);
        let got = gemv_with(Isa::best(), &m, &x);
        let e = nmse(&got, &want);
        assert!(e < 1e-4, "bits={bits} {offset:?}: NMSE {e:e}");
        // and quantization itself is sane: total error vs the original weights
        let total = nmse(&got, &matvec_f64(&w, &x, rows));
        let bound = [0.0, 0.45, 0.15, 0.05, 0.015][bits as usize];
        assert!(total < bound, "bits={bits} {offset:?}: total NMSE {total:e} >= {bound}");
    }
}

#[test]
fn ternary_round_trip_and_gemv() {
    let mut rng = Rng(3);
    let (rows, cols) = (40, 256);
    let w = rng.vec(rows * cols, 0.1);
    let m = PackedMatrix::ternarize(&w, rows, cols, 64).unwrap();
    for r in 0..rows {
        for c in 0..cols {
            assert!(m.code(r, c) <= 2);
        }
    }
    let deq = dequantized(&m);
    for (r, row) in deq.chunks_exact(cols).enumerate() {
        let (s, _) = m.affine(r, 0);
        assert!(row[..64].iter().all(|&v| v == 0.0 || v == s || v == -s));
    }
    let x = rng.vec(cols, 1.0);
    let e = nmse(&gemv_with(Isa::best(), &m, &x), &matvec_f64(&deq, &x, rows));
    assert!(e < 1e-4, "ternary NMSE {e:e}");
}

/// An imported matrix against llama.cpp's own dequantization (transcribed in this file):
/// bit-identical weights in both code orders, and GEMV NMSE ≤ 1e-4 on every ISA.
fn assert_imports_like_llama_cpp(name: &str, m: &PackedMatrix<lutra_core::AlignedBytes>, reference: &[f32], x: &[f32]) {
    let rows = m.layout().rows();
    let deq = dequantized(m);
    let diffs = deq.iter().zip(reference).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert_eq!(diffs, 0, "{name}: {diffs} dequantized values differ from llama.cpp's");
    for interleave in [Interleave::Shuffle, Interleave::Permute] {
        assert_eq!(dequantized(&PackedMatrix::repack(m, interleave).unwrap()), deq, "{name} {interleave:?}");
    }
    let want = matvec_f64(reference, x, rows);
    for isa in Isa::available().filter(|i| i.accepts(m.layout().interleave())) {
        let e = nmse(&gemv_with(isa, m, x), &want);
        assert!(e <= 1e-4, "{name} {}: NMSE {e:e}", isa.name());
    }
}

fn f16(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_bits().to_le_bytes()
}

/// llama.cpp `dequantize_row_q4_0`, transcribed.
fn ggml_dequant_q4_0(blocks: &[u8]) -> Vec<f32> {
    let mut y = Vec::new();
    for b in blocks.chunks_exact(Q4_0_BLOCK_BYTES) {
        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        let mut out = [0.0f32; 32];
        for j in 0..16 {
            out[j] = ((b[2 + j] & 0x0f) as i32 - 8) as f32 * d;
            out[j + 16] = ((b[2 + j] >> 4) as i32 - 8) as f32 * d;
        }
        y.extend_from_slice(&out);
    }
    y
}

/// llama.cpp `dequantize_row_q8_0`, transcribed.
fn ggml_dequant_q8_0(blocks: &[u8]) -> Vec<f32> {
    let mut y = Vec::new();
    for b in blocks.chunks_exact(Q8_0_BLOCK_BYTES) {
        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        y.extend(b[2..].iter().map(|&q| q as i8 as f32 * d));
    }
    y
}

#[test]
fn q4_0_and_q8_0_import_losslessly_and_gemv_within_1e4() {
    let mut rng = Rng(11);
    let (rows, cols) = (96, 1024);
    let mut q4 = Vec::new();
    let mut q8 = Vec::new();
    for _ in 0..rows * cols / 32 {
        q4.extend_from_slice(&f16(0.001 + rng.uniform() * 0.01));
        q4.extend((0..16).map(|_| rng.next() as u8));
        q8.extend_from_slice(&f16(0.0001 + rng.uniform() * 0.001));
        q8.extend((0..32).map(|_| rng.next() as u8));
    }
    let x = rng.vec(cols, 1.0);
    for (name, blocks, reference) in [("Q4_0", &q4, ggml_dequant_q4_0(&q4)), ("Q8_0", &q8, ggml_dequant_q8_0(&q8))] {
        let m = if name == "Q4_0" {
            PackedMatrix::from_q4_0(blocks, rows, cols).unwrap()
        } else {
            PackedMatrix::from_q8_0(blocks, rows, cols).unwrap()
        };
        assert_imports_like_llama_cpp(name, &m, &reference, &x);
    }
}

#[test]
fn bad_shapes_and_buffers_are_typed_errors() {
    assert_eq!(
        PackedMatrix::quantize(&[0.0; 100], 1, 100, 4, 32, Offset::Min).unwrap_err(),
        Error::ColsNotMultipleOfGroup { cols: 100, group: 32 }
    );
    assert_eq!(PackedMatrix::quantize(&[0.0; 64], 1, 64, 9, 32, Offset::Min).unwrap_err(), Error::UnsupportedBits(9));
    assert_eq!(PackedMatrix::quantize(&[0.0; 64], 1, 64, 4, 48, Offset::Min).unwrap_err(), Error::UnsupportedGroup(48));
    assert_eq!(PackedMatrix::quantize(&[], 0, 64, 4, 32, Offset::Min).unwrap_err(), Error::BadShape { rows: 0, cols: 64 });
    assert_eq!(PackedMatrix::quantize(&[0.0; 64], 1, 64, 2, 32, Offset::Zero(4)).unwrap_err(), Error::BadZeroPoint { zero: 4, bits: 2 });
    assert!(matches!(PackedMatrix::quantize(&[0.0; 63], 1, 64, 4, 32, Offset::Min), Err(Error::BufferSize { .. })));
    assert_eq!(PackedMatrix::quantize(&[f32::NAN; 64], 1, 64, 4, 32, Offset::Min).unwrap_err(), Error::NonFiniteInput);
    assert!(matches!(lutra_core::Layout::new(usize::MAX / 4, 1 << 20, 4, 32, Offset::Min), Err(Error::BadShape { .. })));
    // a Q4_0 block whose scale is infinite
    let mut blocks = vec![0u8; Q4_0_BLOCK_BYTES];
    blocks[..2].copy_from_slice(&0x7c00u16.to_le_bytes());
    assert!(matches!(PackedMatrix::from_q4_0(&blocks, 1, 32), Err(Error::NonFiniteScale { row: 0, group: 0 })));
    assert!(matches!(PackedMatrix::from_q8_0(&blocks, 1, 32), Err(Error::BufferSize { .. })));
    // tables for another group size or length
    let m = PackedMatrix::quantize(&[0.5; 64], 1, 64, 4, 32, Offset::Min).unwrap();
    let mut t = OwnedTables::new(64, 64).unwrap();
    let tables = t.build(&[1.0; 64]).unwrap();
    assert!(matches!(lutra_core::gemv(&m, tables, &mut [0.0]), Err(Error::TablesMismatch { .. })));
    let mut t = OwnedTables::new(64, 32).unwrap();
    assert!(matches!(t.build(&[1.0; 32]), Err(Error::BufferSize { .. })));
    let tables = t.build(&[1.0; 64]).unwrap();
    assert!(matches!(lutra_core::gemv(&m, tables, &mut [0.0; 2]), Err(Error::BufferSize { .. })));
    // an ISA this machine cannot run
    if let Some(other) = Isa::available().find(|i| !i.accepts(m.layout().interleave())) {
        let mut out = vec![0; m.layout().scale_count()];
        assert_eq!(
            gemv_integer(other, &m, tables, &mut out).unwrap_err(),
            Error::InterleaveMismatch { isa: other, matrix: m.layout().interleave() }
        );
    }
    if let Some(missing) = Isa::ALL.into_iter().find(|i| !i.is_available()) {
        let mut out = vec![0; m.layout().scale_count()];
        assert_eq!(gemv_integer(missing, &m, tables, &mut out).unwrap_err(), Error::IsaUnavailable(missing));
    }
}

#[test]
fn codes_round_trip_through_the_planes() {
    let mut rng = Rng(5);
    for (bits, offset) in (1..=8u8).flat_map(|b| [(b, Offset::Min), (b, Offset::Symmetric)]) {
        let (rows, cols) = (33, 64);
        let w = rng.vec(rows * cols, 1.0);
        let m = PackedMatrix::quantize(&w, rows, cols, bits, 32, offset).unwrap();
        let deq = dequantized(&m);
        for r in 0..rows {
            for g in 0..2 {
                let (s, off) = m.affine(r, g);
                for k in 0..32 {
                    let i = r * cols + g * 32 + k;
                    // the stored code is the nearest point of the group's grid
                    let best = (0..1u32 << bits).map(|q| (s * q as f32 + off - w[i]).abs()).fold(f32::INFINITY, f32::min);
                    assert!((deq[i] - w[i]).abs() <= best + 1e-5 * (1.0 + w[i].abs()), "bits={bits} r={r} k={k}");
                    if offset == Offset::Min {
                        assert_eq!(deq[i], s * m.code(r, g * 32 + k) as f32 + off);
                    }
                }
            }
        }
    }
}

#[test]
fn every_table_builder_matches_the_portable_one() {
    let mut rng = Rng(21);
    for group in [16, 32, 64, 128, 256] {
        let cols = 512;
        let mut x = rng.vec(cols, 1.0);
        x[5] = 0.0;
        x[17] *= 100.0;
        x[100..132].fill(0.0); // an all-zero group (scale 0)
                               // the group's largest chunk (Σ|a| = 127, so the step is 1) with entries such as
                               // 0.5 − 0.25 + 0.25 + 126 = 126.5: ties, rounded half to even by every builder
        x[256..260].copy_from_slice(&[0.5, 0.25, 0.25, 126.0]);
        let mut t = OwnedTables::new(cols, group).unwrap();
        let built = t.build(&x).unwrap();
        let mut quads = vec![lutra_core::Block64::default(); cols / 16];
        let (mut scale, mut sum) = (vec![0.0; cols / group], vec![0.0; cols / group]);
        lutra_core::kernels::lut::build_tables_portable(&x, group, &mut quads, &mut scale, &mut sum);
        assert_eq!(built.quads, &quads[..]);
        assert_eq!(built.scale, &scale[..]);
        assert_eq!(built.sum, &sum[..]);
        // mirror consolidation holds exactly, and entries stay in −127..=127
        for q in &quads {
            for table in q.0.chunks_exact(16) {
                for idx in 0..16 {
                    assert_eq!(table[idx] as i8, (table[15 - idx] as i8).wrapping_neg());
                    assert_ne!(table[idx] as i8, i8::MIN);
                }
            }
        }
    }
}

/// llama.cpp `dequantize_row_q5_0`, transcribed.
fn ggml_dequant_q5_0(blocks: &[u8]) -> Vec<f32> {
    let mut y = Vec::new();
    for b in blocks.chunks_exact(Q5_0_BLOCK_BYTES) {
        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let mut out = [0.0f32; 32];
        for j in 0..16 {
            let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
            out[j] = (((b[6 + j] & 0x0f) | xh_0) as i32 - 16) as f32 * d;
            out[j + 16] = (((b[6 + j] >> 4) | xh_1) as i32 - 16) as f32 * d;
        }
        y.extend_from_slice(&out);
    }
    y
}

/// llama.cpp `dequantize_row_tq2_0`, transcribed.
fn ggml_dequant_tq2_0(blocks: &[u8]) -> Vec<f32> {
    let mut y = Vec::new();
    for b in blocks.chunks_exact(TQ2_0_BLOCK_BYTES) {
        let d = half::f16::from_le_bytes([b[64], b[65]]).to_f32();
        for j in (0..64).step_by(32) {
            for l in 0..4 {
                for m in 0..32 {
                    let q = ((b[j + m] >> (l * 2)) & 3) as i8;
                    y.push((q - 1) as f32 * d);
                }
            }
        }
    }
    y
}

#[test]
fn q5_0_and_tq2_0_import_losslessly() {
    let mut rng = Rng(13);
    let (rows, cols) = (40, 512);
    let mut q5 = Vec::new();
    let mut tq2 = Vec::new();
    for _ in 0..rows * cols / 32 {
        q5.extend_from_slice(&f16(0.001 + rng.uniform() * 0.01));
        q5.extend((0..20).map(|_| rng.next() as u8));
    }
    for _ in 0..rows * cols / 256 {
        tq2.extend((0..64).map(|_| rng.next() as u8));
        tq2.extend_from_slice(&f16(0.01 + rng.uniform() * 0.02));
    }
    let x = rng.vec(cols, 1.0);
    for (name, m, reference) in [
        ("Q5_0", PackedMatrix::from_q5_0(&q5, rows, cols).unwrap(), ggml_dequant_q5_0(&q5)),
        ("TQ2_0", PackedMatrix::from_tq2_0(&tq2, rows, cols).unwrap(), ggml_dequant_tq2_0(&tq2)),
    ] {
        assert_imports_like_llama_cpp(name, &m, &reference, &x);
    }
    assert!(matches!(PackedMatrix::from_q5_0(&q5[1..], rows, cols), Err(Error::BufferSize { .. })));
    assert!(matches!(PackedMatrix::from_tq2_0(&tq2, rows, 100), Err(Error::ColsNotMultipleOfGroup { .. })));
}

/// llama.cpp `dequantize_row_q4_K` (with `get_scale_min_k4`), transcribed.
fn ggml_dequant_q4_k(blocks: &[u8]) -> Vec<f32> {
    let scale_min = |j: usize, q: &[u8]| -> (u8, u8) {
        if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
        }
    };
    let mut y = Vec::new();
    for b in blocks.chunks_exact(Q4_K_BLOCK_BYTES) {
        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        let min = half::f16::from_le_bytes([b[2], b[3]]).to_f32();
        let (scales, qs) = (&b[4..16], &b[16..]);
        let mut is = 0;
        for j in (0..256).step_by(64) {
            let q = &qs[j / 2..j / 2 + 32];
            let (sc, m) = scale_min(is, scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = scale_min(is + 1, scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            y.extend(q.iter().map(|&q| d1 * (q & 0xF) as f32 - m1));
            y.extend(q.iter().map(|&q| d2 * (q >> 4) as f32 - m2));
            is += 2;
        }
    }
    y
}

/// llama.cpp `dequantize_row_q6_K`, transcribed.
fn ggml_dequant_q6_k(blocks: &[u8]) -> Vec<f32> {
    let mut y = Vec::new();
    for b in blocks.chunks_exact(Q6_K_BLOCK_BYTES) {
        let d = half::f16::from_le_bytes([b[208], b[209]]).to_f32();
        let mut out = [0.0f32; 256];
        for n in 0..2 {
            let (ql, qh, sc) = (&b[64 * n..], &b[128 + 32 * n..], &b[192 + 8 * n..]);
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                out[128 * n + l] = d * sc[is] as i8 as f32 * q1 as f32;
                out[128 * n + l + 32] = d * sc[is + 2] as i8 as f32 * q2 as f32;
                out[128 * n + l + 64] = d * sc[is + 4] as i8 as f32 * q3 as f32;
                out[128 * n + l + 96] = d * sc[is + 6] as i8 as f32 * q4 as f32;
            }
        }
        y.extend_from_slice(&out);
    }
    y
}

#[test]
fn q4_k_and_q6_k_import_losslessly() {
    let mut rng = Rng(17);
    let (rows, cols) = (36, 512);
    let mut q4k = Vec::new();
    let mut q6k = Vec::new();
    for _ in 0..rows * cols / 256 {
        q4k.extend_from_slice(&f16(0.0005 + rng.uniform() * 0.002));
        q4k.extend_from_slice(&f16(0.0005 + rng.uniform() * 0.002));
        q4k.extend((0..140).map(|_| rng.next() as u8));
        q6k.extend((0..208).map(|_| rng.next() as u8));
        q6k.extend_from_slice(&f16(0.0001 + rng.uniform() * 0.0005));
    }
    let x = rng.vec(cols, 1.0);
    for (name, m, reference) in [
        ("Q4_K", PackedMatrix::from_q4_k(&q4k, rows, cols).unwrap(), ggml_dequant_q4_k(&q4k)),
        ("Q6_K", PackedMatrix::from_q6_k(&q6k, rows, cols).unwrap(), ggml_dequant_q6_k(&q6k)),
    ] {
        assert_imports_like_llama_cpp(name, &m, &reference, &x);
    }
    assert!(matches!(PackedMatrix::from_q4_k(&q4k, rows, 640), Err(Error::ColsNotMultipleOfGroup { cols: 640, group: 256 })));
    assert!(matches!(PackedMatrix::from_q6_k(&q6k[..100], rows, cols), Err(Error::BufferSize { .. })));
}

/// llama.cpp `dequantize_row_q4_1` and `dequantize_row_q5_1`, transcribed (`fifth`: Q5_1).
fn ggml_dequant_q4_1_q5_1(blocks: &[u8], fifth: bool) -> Vec<f32> {
    let size = if fifth { Q5_1_BLOCK_BYTES } else { Q4_1_BLOCK_BYTES };
    let mut y = Vec::new();
    for b in blocks.chunks_exact(size) {
        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        let m = half::f16::from_le_bytes([b[2], b[3]]).to_f32();
        let (qh, qs) = if fifth { (u32::from_le_bytes([b[4], b[5], b[6], b[7]]), &b[8..]) } else { (0, &b[4..]) };
        let mut out = [0.0f32; 32];
        for j in 0..16 {
            let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
            out[j] = ((qs[j] & 0x0F) | xh_0) as f32 * d + m;
            out[j + 16] = ((qs[j] >> 4) | xh_1) as f32 * d + m;
        }
        y.extend_from_slice(&out);
    }
    y
}

/// llama.cpp `dequantize_row_q5_K`, transcribed.
fn ggml_dequant_q5_k(blocks: &[u8]) -> Vec<f32> {
    let scale_min = |j: usize, q: &[u8]| -> (u8, u8) {
        if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
        }
    };
    let mut y = Vec::new();
    for b in blocks.chunks_exact(Q5_K_BLOCK_BYTES) {
        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        let min = half::f16::from_le_bytes([b[2], b[3]]).to_f32();
        let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..]);
        let (mut is, mut u1, mut u2) = (0, 1u8, 2u8);
        for j in (0..256).step_by(64) {
            let ql = &qs[j / 2..j / 2 + 32];
            let (sc, m) = scale_min(is, scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = scale_min(is + 1, scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            y.extend((0..32).map(|l| d1 * ((ql[l] & 0xF) + if qh[l] & u1 != 0 { 16 } else { 0 }) as f32 - m1));
            y.extend((0..32).map(|l| d2 * ((ql[l] >> 4) + if qh[l] & u2 != 0 { 16 } else { 0 }) as f32 - m2));
            is += 2;
            u1 <<= 2;
            u2 <<= 2;
        }
    }
    y
}

/// Q4_1, Q5_1 and Q5_K (offset-with-minimum types, 4 and 5 bits) import as llama.cpp
/// dequantizes them, and every kernel tier multiplies them like the f64 reference.
#[test]
fn q4_1_q5_1_and_q5_k_import_losslessly() {
    let mut rng = Rng(23);
    let (rows, cols) = (36, 512);
    let (mut q4_1, mut q5_1, mut q5_k) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rows * cols / 32 {
        for (out, payload) in [(&mut q4_1, 16), (&mut q5_1, 20)] {
            out.extend_from_slice(&f16(0.0005 + rng.uniform() * 0.002));
            out.extend_from_slice(&f16(rng.uniform() * 0.02 - 0.01));
            out.extend((0..payload).map(|_| rng.next() as u8));
        }
    }
    for _ in 0..rows * cols / 256 {
        q5_k.extend_from_slice(&f16(0.0005 + rng.uniform() * 0.002));
        q5_k.extend_from_slice(&f16(0.0005 + rng.uniform() * 0.002));
        q5_k.extend((0..172).map(|_| rng.next() as u8));
    }
    let x = rng.vec(cols, 1.0);
    for (name, m, reference) in [
        ("Q4_1", PackedMatrix::from_q4_1(&q4_1, rows, cols).unwrap(), ggml_dequant_q4_1_q5_1(&q4_1, false)),
        ("Q5_1", PackedMatrix::from_q5_1(&q5_1, rows, cols).unwrap(), ggml_dequant_q4_1_q5_1(&q5_1, true)),
        ("Q5_K", PackedMatrix::from_q5_k(&q5_k, rows, cols).unwrap(), ggml_dequant_q5_k(&q5_k)),
    ] {
        assert_imports_like_llama_cpp(name, &m, &reference, &x);
    }
    assert!(matches!(PackedMatrix::from_q5_k(&q5_k, rows, 640), Err(Error::ColsNotMultipleOfGroup { cols: 640, group: 256 })));
    assert!(matches!(PackedMatrix::from_q5_1(&q5_1[..100], rows, cols), Err(Error::BufferSize { .. })));
}

/// llama.cpp `dequantize_row_q2_K`, transcribed.
fn ggml_dequant_q2_k(blocks: &[u8]) -> Vec<f32> {
    let mut y = Vec::new();
    for b in blocks.chunks_exact(Q2_K_BLOCK_BYTES) {
        let (scales, qs) = (&b[..16], &b[16..80]);
        let d = half::f16::from_le_bytes([b[80], b[81]]).to_f32();
        let min = half::f16::from_le_bytes([b[82], b[83]]).to_f32();
        let mut is = 0;
        for n in 0..2 {
            let q = &qs[32 * n..];
            for j in 0..4 {
                let shift = 2 * j;
                for half in 0..2 {
                    let sc = scales[is];
                    is += 1;
                    let (dl, ml) = (d * (sc & 0xF) as f32, min * (sc >> 4) as f32);
                    for l in 0..16 {
                        y.push(dl * ((q[l + 16 * half] >> shift) & 3) as i8 as f32 - ml);
                    }
                }
            }
        }
    }
    y
}

/// llama.cpp `dequantize_row_q3_K` (with its `aux` scale unpacking), transcribed.
fn ggml_dequant_q3_k(blocks: &[u8]) -> Vec<f32> {
    let mut y = Vec::new();
    for b in blocks.chunks_exact(Q3_K_BLOCK_BYTES) {
        let (hm, qs, sb) = (&b[..32], &b[32..96], &b[96..108]);
        let d_all = half::f16::from_le_bytes([b[108], b[109]]).to_f32();
        let mut aux = [0u32; 4];
        for (k, a) in aux.iter_mut().take(3).enumerate() {
            *a = u32::from_le_bytes(sb[4 * k..4 * k + 4].try_into().unwrap());
        }
        let (kmask1, kmask2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
        let tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
        aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
        aux[0] = (aux[0] & kmask2) | ((tmp & kmask1) << 4);
        aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
        let scales: Vec<i8> = aux.iter().flat_map(|a| a.to_le_bytes()).map(|v| v as i8).collect();
        let mut is = 0;
        let mut m = 1u8;
        for n in 0..2 {
            let q = &qs[32 * n..];
            for j in 0..4 {
                let shift = 2 * j;
                for half in 0..2 {
                    let dl = d_all * (scales[is] as i32 - 32) as f32;
                    is += 1;
                    for l in 0..16 {
                        let v = ((q[l + 16 * half] >> shift) & 3) as i8 - if hm[l + 16 * half] & m != 0 { 0 } else { 4 };
                        y.push(dl * v as f32);
                    }
                }
                m <<= 1;
            }
        }
    }
    y
}

#[test]
fn q2_k_and_q3_k_import_losslessly() {
    let mut rng = Rng(19);
    let (rows, cols) = (36, 512);
    let mut q2k = Vec::new();
    let mut q3k = Vec::new();
    for _ in 0..rows * cols / 256 {
        q2k.extend((0..80).map(|_| rng.next() as u8));
        q2k.extend_from_slice(&f16(0.0005 + rng.uniform() * 0.002));
        q2k.extend_from_slice(&f16(0.0005 + rng.uniform() * 0.002));
        q3k.extend((0..108).map(|_| rng.next() as u8));
        q3k.extend_from_slice(&f16(0.0002 + rng.uniform() * 0.001));
    }
    let x = rng.vec(cols, 1.0);
    for (name, m, reference) in [
        ("Q2_K", PackedMatrix::from_q2_k(&q2k, rows, cols).unwrap(), ggml_dequant_q2_k(&q2k)),
        ("Q3_K", PackedMatrix::from_q3_k(&q3k, rows, cols).unwrap(), ggml_dequant_q3_k(&q3k)),
    ] {
        assert_imports_like_llama_cpp(name, &m, &reference, &x);
    }
    assert!(matches!(PackedMatrix::from_q3_k(&q3k, rows, 640), Err(Error::ColsNotMultipleOfGroup { cols: 640, group: 256 })));
    assert!(matches!(PackedMatrix::from_q2_k(&q2k[..50], rows, cols), Err(Error::BufferSize { .. })));
}

/// llama.cpp `dequantize_row_tq1_0`, transcribed.
fn ggml_dequant_tq1_0(blocks: &[u8]) -> Vec<f32> {
    let pow3: [u8; 6] = [1, 3, 9, 27, 81, 243];
    let xi = |q: u8| ((q as u16 * 3) >> 8) as i16;
    let mut y = Vec::new();
    for b in blocks.chunks_exact(TQ1_0_BLOCK_BYTES) {
        let (qs, qh) = (&b[..48], &b[48..52]);
        let d = half::f16::from_le_bytes([b[52], b[53]]).to_f32();
        for &p in &pow3[..5] {
            y.extend(qs[..32].iter().map(|&q| (xi(q.wrapping_mul(p)) - 1) as f32 * d));
        }
        for &p in &pow3[..5] {
            y.extend(qs[32..48].iter().map(|&q| (xi(q.wrapping_mul(p)) - 1) as f32 * d));
        }
        for &p in &pow3[..4] {
            y.extend(qh.iter().map(|&h| (xi(h.wrapping_mul(p)) - 1) as f32 * d));
        }
    }
    y
}

#[test]
fn tq1_0_imports_losslessly() {
    let mut rng = Rng(23);
    let (rows, cols) = (34, 512);
    let mut blocks = Vec::new();
    for _ in 0..rows * cols / 256 {
        blocks.extend((0..52).map(|_| rng.next() as u8));
        blocks.extend_from_slice(&f16(0.01 + rng.uniform() * 0.02));
    }
    let m = PackedMatrix::from_tq1_0(&blocks, rows, cols).unwrap();
    assert_imports_like_llama_cpp("TQ1_0", &m, &ggml_dequant_tq1_0(&blocks), &rng.vec(cols, 1.0));
}

/// Residual tables: the GEMV over the first tables plus the GEMV over the residual
/// tables is about 100× closer to the exact product than the first alone (8-bit weights).
#[test]
fn residual_tables_refine_the_product() {
    let mut rng = Rng(99);
    let (rows, cols, group) = (64, 256, 64);
    let w = rng.vec(rows * cols, 0.02);
    let x = rng.vec(cols, 1.0);
    let m = PackedMatrix::quantize(&w, rows, cols, 8, group, Offset::Min).unwrap();
    let mut deq = vec![0.0; cols];
    let exact: Vec<f64> = (0..rows)
        .map(|r| {
            m.dequantize_row(r, &mut deq).unwrap();
            deq.iter().zip(&x).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum()
        })
        .collect();
    let mut first = OwnedTables::new(cols, group).unwrap();
    let mut second = OwnedTables::new(cols, group).unwrap();
    let t = first.build(&x).unwrap();
    let (mut y1, mut y2) = (vec![0.0; rows], vec![0.0; rows]);
    gemv(&m, t, &mut y1).unwrap();
    let r = second.build_residual(&x, t).unwrap();
    gemv(&m, r, &mut y2).unwrap();
    let err = |y: &dyn Fn(usize) -> f64| (0..rows).map(|i| (y(i) - exact[i]).powi(2)).sum::<f64>();
    let one = err(&|i| f64::from(y1[i]));
    let two = err(&|i| f64::from(y1[i] + y2[i]));
    assert!(two * 100.0 < one, "squared error {one:e} with one table, {two:e} with the residual");
    // tables of another shape are refused
    let mut other = OwnedTables::new(cols, 32).unwrap();
    assert!(other.build_residual(&x, t).is_err());
}

/// An import a run of rows at a time (whole tiles, the last run short) is byte-identical
/// to the import in one piece, for a legacy type and the K-quants; a run that does not
/// start on a tile, one past the last row, or a matrix left short is an error.
#[test]
fn chunked_import_is_identical() {
    let mut rng = Rng(7);
    let (rows, cols) = (100, 256);
    let mut q8 = Vec::new();
    for _ in 0..rows * cols / 32 {
        q8.extend_from_slice(&half::f16::from_f32(0.01 + rng.uniform() * 0.1).to_bits().to_le_bytes());
        q8.extend((0..32).map(|_| rng.below(256) as u8));
    }
    let mut cases = vec![(PackedMatrix::from_q8_0(&q8, rows, cols).unwrap(), q8.clone(), convert::import_q8_0_into as convert::ImportRows)];
    for (name, import) in [
        ("Q2_K", convert::import_q2_k_into as convert::ImportRows),
        ("Q3_K", convert::import_q3_k_into),
        ("Q4_K", convert::import_q4_k_into),
        ("Q5_K", convert::import_q5_k_into),
        ("Q6_K", convert::import_q6_k_into),
    ] {
        let (blocks, whole) = random_k_quant(&mut rng, name, rows, cols);
        cases.push((whole, blocks, import));
    }
    for (whole, blocks, import) in cases {
        let row_bytes = blocks.len() / rows;
        let run = convert::ChunkedImport::rows_per_run(row_bytes, 40 * row_bytes);
        assert_eq!(run, 32);
        let mut chunked = convert::ChunkedImport::new(*whole.layout(), import);
        for first in (0..rows).step_by(run) {
            let n = run.min(rows - first);
            chunked.push(&blocks[first * row_bytes..(first + n) * row_bytes], n).unwrap();
        }
        assert_eq!(chunked.finish().unwrap().as_bytes(), whole.as_bytes());

        let mut bad = convert::ChunkedImport::new(*whole.layout(), import);
        bad.push(&blocks[..8 * row_bytes], 8).unwrap();
        assert!(bad.push(&blocks[8 * row_bytes..16 * row_bytes], 8).is_err(), "a run that does not start on a tile");
        let mut past = convert::ChunkedImport::new(*whole.layout(), import);
        assert!(past.push(&blocks, rows + 1).is_err(), "more rows than the matrix");
        past.push(&blocks[..32 * row_bytes], 32).unwrap();
        assert!(past.finish().is_err(), "rows left");
    }
    // a NaN scale in row 70 (the third run) is named as row 70, not the run's row 6
    let mut poisoned = q8.clone();
    let at = 70 * cols / 32 * 34 + 34;
    poisoned[at..at + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
    let layout = *PackedMatrix::from_q8_0(&q8, rows, cols).unwrap().layout();
    let mut chunked = convert::ChunkedImport::new(layout, convert::import_q8_0_into);
    let row_bytes = cols / 32 * 34;
    chunked.push(&poisoned[..64 * row_bytes], 64).unwrap();
    assert_eq!(chunked.push(&poisoned[64 * row_bytes..], rows - 64).err(), Some(Error::NonFiniteScale { row: 70, group: 1 }));
}

/// Random llama.cpp K-quant blocks of `name` (Q2_K … Q6_K) for a rows × cols matrix, with
/// positive super-block scales, and the matrix imported from them.
fn random_k_quant(rng: &mut Rng, name: &str, rows: usize, cols: usize) -> (Vec<u8>, PackedMatrix<lutra_core::AlignedBytes>) {
    let mut blocks = Vec::new();
    for _ in 0..rows * cols / 256 {
        let mut d = || f16(0.0005 + rng.uniform() * 0.002);
        let (head, payload, tail): (Vec<u8>, usize, Vec<u8>) = match name {
            "Q2_K" => (vec![], 80, [d(), d()].concat()),
            "Q3_K" => (vec![], 108, d().to_vec()),
            "Q4_K" => ([d(), d()].concat(), 140, vec![]),
            "Q5_K" => ([d(), d()].concat(), 172, vec![]),
            _ => (vec![], 208, d().to_vec()),
        };
        blocks.extend(head);
        blocks.extend((0..payload).map(|_| rng.next() as u8));
        blocks.extend(tail);
    }
    let m = match name {
        "Q2_K" => PackedMatrix::from_q2_k(&blocks, rows, cols),
        "Q3_K" => PackedMatrix::from_q3_k(&blocks, rows, cols),
        "Q4_K" => PackedMatrix::from_q4_k(&blocks, rows, cols),
        "Q5_K" => PackedMatrix::from_q5_k(&blocks, rows, cols),
        _ => PackedMatrix::from_q6_k(&blocks, rows, cols),
    };
    (blocks, m.unwrap())
}

/// K-quants keep the file's own scale bytes (sub-block codes under an f16 pair per 256
/// columns), and every ISA's products over them — one token, two to four, a batch — are
/// bit for bit the products over the same scales multiplied out to f32.
#[test]
fn k_quant_scales_take_the_files_bytes_and_give_the_f32_forms_floats() {
    let mut rng = Rng(43);
    let (rows, cols) = (45, 512);
    for (name, file_bits) in [("Q2_K", 2.625), ("Q3_K", 3.4375), ("Q4_K", 4.5), ("Q5_K", 5.5), ("Q6_K", 6.5625)] {
        let (blocks, imported) = random_k_quant(&mut rng, name, rows, cols);
        let l = *imported.layout();
        assert!(matches!(l.scales(), ScaleFormat::SubBlock { .. }), "{name}: {:?}", l.scales());
        assert_eq!(l.bits_per_weight(), file_bits, "{name}");
        assert_eq!(8.0 * blocks.len() as f64 / (rows * cols) as f64, file_bits, "{name}");
        assert_eq!(l.total_bytes(), l.tiles() * 32 * blocks.len() / rows, "{name}: padded rows aside, the file's bytes");
        // eleven tokens: a batch of eight (AVX-512 VBMI's pass for these scales), a pair, one
        let xs: Vec<Vec<f32>> = (0..11).map(|_| rng.vec(cols, 1.0)).collect();
        let mut owned: Vec<OwnedTables> = (0..11).map(|_| OwnedTables::new(cols, l.group()).unwrap()).collect();
        for (t, x) in owned.iter_mut().zip(&xs) {
            t.build(x).unwrap();
        }
        let tables: Vec<_> = owned.iter().map(|t| t.view()).collect();
        for interleave in [Interleave::Shuffle, Interleave::Permute] {
            let sub = PackedMatrix::repack(&imported, interleave).unwrap();
            let wide = PackedMatrix::relayout(&sub, sub.layout().with_scales(ScaleFormat::F32).unwrap()).unwrap();
            assert_eq!(dequantized(&sub), dequantized(&wide), "{name} {interleave:?}");
            for isa in Isa::available().filter(|i| i.accepts(interleave)) {
                let what = format!("{name} {interleave:?} {}", isa.name());
                assert_eq!(integers(isa, &sub, &xs[0]), integers(isa, &wide, &xs[0]), "{what}");
                let bits = |y: Vec<f32>| y.into_iter().map(f32::to_bits).collect::<Vec<_>>();
                let want: Vec<Vec<f32>> = xs.iter().map(|x| gemv_with(isa, &wide, x)).collect();
                // and every tier's floats are the scalar epilogue's
                for (t, x) in xs.iter().enumerate() {
                    assert_eq!(bits(gemv_with(isa, &sub, x)), bits(gemv_with(Isa::Scalar, &sub, x)), "token {t}, {what} against scalar");
                }
                for (x, want) in xs.iter().zip(&want) {
                    assert_eq!(bits(gemv_with(isa, &sub, x)), bits(want.clone()), "one token, {what}");
                }
                let tiles = 0..l.tiles();
                let mut y = vec![vec![f32::NAN; rows]; 5];
                let [y0, y1, ..] = &mut y[..] else { unreachable!() };
                gemv_tiles_pair(isa, &sub, [tables[0], tables[1]], tiles.clone(), [y0, y1]).unwrap();
                let [y0, y1, y2, ..] = &mut y[..] else { unreachable!() };
                gemv_tiles_n(isa, &sub, [tables[0], tables[1], tables[2]], tiles.clone(), [y0, y1, y2]).unwrap();
                assert_eq!(y[..3], want[..3], "pair and three, {what}");
                let mut got = vec![vec![f32::NAN; rows]; 11];
                let mut outs = got.iter_mut();
                gemm_tiles(isa, &sub, &tables, tiles, |_| outs.next().expect("one output per token").as_mut_slice()).unwrap();
                assert_eq!(got, want, "gemm_tiles {what}");
            }
        }
    }
}

/// Sub-block scale layouts refuse what they cannot hold, with typed errors.
#[test]
fn sub_block_scales_refuse_bad_layouts_and_values() {
    let l = lutra_core::Layout::new(32, 512, 4, 32, Offset::Min).unwrap();
    assert_eq!(l.with_scales(ScaleFormat::SubBlock { bits: 5, signed: false }).unwrap_err(), Error::UnsupportedScaleCode(5));
    let short = lutra_core::Layout::new(32, 384, 4, 32, Offset::Min).unwrap();
    assert_eq!(
        short.with_scales(ScaleFormat::SubBlock { bits: 6, signed: false }).unwrap_err(),
        Error::ColsNotMultipleOfGroup { cols: 384, group: 256 }
    );
    // f16 or f32 scales cannot be split into a super-block scale and codes
    let q = PackedMatrix::quantize(&Rng(3).vec(32 * 512, 0.05), 32, 512, 4, 32, Offset::Min).unwrap();
    let sub = q.layout().with_scales(ScaleFormat::SubBlock { bits: 6, signed: false }).unwrap();
    assert!(matches!(PackedMatrix::relayout(&q, sub), Err(Error::BadShape { .. })));
    // codes that do not fit the narrower width
    let (_, q6) = random_k_quant(&mut Rng(5), "Q6_K", 32, 256);
    let narrow = q6.layout().with_scales(ScaleFormat::SubBlock { bits: 4, signed: true }).unwrap();
    assert!(matches!(PackedMatrix::relayout(&q6, narrow), Err(Error::BadSubScale { .. })));
    // an infinite super-block scale in stored bytes
    let (_, q4) = random_k_quant(&mut Rng(7), "Q4_K", 32, 512);
    let mut bytes = q4.as_bytes().to_vec();
    let at = q4.layout().super_block_offset(0, 8) + 2 * 5;
    bytes[at..at + 2].copy_from_slice(&0x7c00u16.to_le_bytes());
    assert_eq!(PackedMatrix::from_bytes(*q4.layout(), bytes).unwrap_err(), Error::NonFiniteScale { row: 5, group: 8 });
    // the same for a stored f16 scale (a hostile packed file): refused, not read as 65536
    let q = PackedMatrix::quantize(&Rng(9).vec(32 * 64, 0.05), 32, 64, 4, 32, Offset::Zero(8)).unwrap();
    let mut bytes = q.as_bytes().to_vec();
    let at = q.layout().scale_block_offset(0, 1) + 2 * 3;
    bytes[at..at + 2].copy_from_slice(&0xfc00u16.to_le_bytes());
    assert_eq!(PackedMatrix::from_bytes(*q.layout(), bytes).unwrap_err(), Error::NonFiniteScale { row: 3, group: 1 });
    // and an infinite d in the file
    let mut blocks = vec![0u8; Q4_K_BLOCK_BYTES];
    blocks[..2].copy_from_slice(&0x7c00u16.to_le_bytes());
    assert!(matches!(PackedMatrix::from_q4_k(&blocks, 1, 256), Err(Error::NonFiniteScale { row: 0, group: 0 })));
}
