//! The int8 dot-product path for 8-bit (Q8_0) and 5-bit (Q5_0) weights: every kernel
//! equals the scalar one bit for bit (integer sums exact, the same float operations),
//! activation quantization keeps llama.cpp's bound, and the product agrees with f64
//! arithmetic over the dequantized weights and quantized activations, decoded here from
//! the raw Q8_0/Q5_0 bytes with the `half` crate (no code shared with the import). A Q5_0
//! matrix's five-bit form gives the outputs of the byte form holding the same codes, and
//! a batch of tokens the outputs of each token alone.

mod common;
use common::Rng;

use lutra_core::kernels::int8::{gemm_rows, gemv_rows, CodeForm, Int8Activations, Int8Matrix, BLOCK};
use lutra_core::{Error, Isa};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// Random Q8_0 rows; `extreme` puts −128 and ±127 codes in some blocks.
fn q8_0_blocks(rng: &mut Rng, rows: usize, cols: usize, extreme: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rows * cols / BLOCK {
        let d = half::f16::from_f32(rng.uniform() * 0.02 + 1e-4);
        out.extend_from_slice(&d.to_bits().to_le_bytes());
        for _ in 0..BLOCK {
            let q = if extreme && rng.below(4) == 0 { [-128i8, 127, -127][rng.below(3)] } else { rng.below(255) as i8 };
            out.push(q as u8);
        }
    }
    out
}

fn decode_q8_0(blocks: &[u8]) -> Vec<f64> {
    blocks
        .chunks_exact(2 + BLOCK)
        .flat_map(|b| {
            let d = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64();
            b[2..].iter().map(move |&q| d * q as i8 as f64)
        })
        .collect()
}

fn product(isa: Isa, m: &Int8Matrix, x: &Int8Activations) -> Vec<f32> {
    let mut y = vec![0.0; m.rows()];
    gemv_rows(isa, m, x, 0..m.rows(), &mut y).unwrap();
    y
}

#[test]
fn every_isa_equals_scalar_bit_for_bit() {
    let mut rng = Rng(7);
    // column counts: a few blocks (tails of 1..3 after groups of 4), and more than one
    // 64-block piece of a row; row counts: groups of four rows in pairs, one left over,
    // and a part of a group
    for (rows, cols, extreme) in
        [(7, 32, false), (5, 96, true), (9, 224, false), (3, 640, true), (2, 64 * 32 + 96, true), (13, 160, true), (24, 64, false)]
    {
        let m = Int8Matrix::from_q8_0(&q8_0_blocks(&mut rng, rows, cols, extreme), rows, cols).unwrap();
        let mut x = Int8Activations::new(cols).unwrap();
        x.quantize(&rng.vec(cols, 3.0)).unwrap();
        let want = product(Isa::Scalar, &m, &x);
        for isa in Isa::available() {
            let got = product(isa, &m, &x);
            let same = got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits());
            assert!(same, "{} differs from scalar at {rows}x{cols} (extreme codes: {extreme})", isa.name());
        }
    }
}

#[test]
fn any_split_of_the_rows_gives_the_same_outputs() {
    let mut rng = Rng(9);
    let (rows, cols) = (23, 96);
    let m = Int8Matrix::from_q8_0(&q8_0_blocks(&mut rng, rows, cols, false), rows, cols).unwrap();
    let mut x = Int8Activations::new(cols).unwrap();
    x.quantize(&rng.vec(cols, 1.0)).unwrap();
    let whole = product(Isa::best(), &m, &x);
    for cut in [1, 3, 5, 6, 13] {
        let mut y = vec![0.0; rows];
        let (a, b) = y.split_at_mut(cut);
        gemv_rows(Isa::best(), &m, &x, 0..cut, a).unwrap();
        gemv_rows(Isa::best(), &m, &x, cut..rows, b).unwrap();
        assert_eq!(
            y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            whole.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "cut at {cut}"
        );
    }
}

#[test]
fn activations_are_quantized_within_half_a_step() {
    let mut rng = Rng(11);
    let mut x = rng.vec(256, 5.0);
    x[3] = 0.0;
    x[40..72].fill(0.0); // an all-zero block: scale 0, codes 0
    let mut q = Int8Activations::new(256).unwrap();
    q.quantize(&x).unwrap();
    // recover codes and scales through a product with unit rows: row r picks column r
    let rows = 256;
    let mut blocks = Vec::new();
    for r in 0..rows {
        for b in 0..256 / BLOCK {
            blocks.extend_from_slice(&half::f16::ONE.to_bits().to_le_bytes());
            blocks.extend((0..BLOCK).map(|j| u8::from(b * BLOCK + j == r)));
        }
    }
    let picks = Int8Matrix::from_q8_0(&blocks, rows, 256).unwrap();
    let got = product(Isa::Scalar, &picks, &q);
    for (b, xs) in x.chunks_exact(BLOCK).enumerate() {
        let amax = xs.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64));
        let step = amax / 127.0;
        for (j, &v) in xs.iter().enumerate() {
            let err = (got[b * BLOCK + j] as f64 - v as f64).abs();
            // half a step, plus the f16 rounding of the scale over up to 127 steps
            assert!(err <= step * 0.5 + amax * 1e-3 + 1e-12, "x[{}] = {v}, dequantized {}", b * BLOCK + j, got[b * BLOCK + j]);
        }
    }
    assert!(got[40..72].iter().all(|&v| v == 0.0));
}

#[test]
fn product_matches_f64_over_the_decoded_blocks() {
    let mut rng = Rng(3);
    let (rows, cols) = (33, 640);
    let blocks = q8_0_blocks(&mut rng, rows, cols, true);
    let m = Int8Matrix::from_q8_0(&blocks, rows, cols).unwrap();
    let w = decode_q8_0(&blocks);
    let mut row = vec![0.0; cols];
    for r in 0..rows {
        m.dequantize_row(r, &mut row).unwrap();
        assert!(row.iter().zip(&w[r * cols..]).all(|(&a, &b)| a as f64 == b), "row {r} dequantizes differently");
    }
    let x = rng.vec(cols, 2.0);
    let mut q = Int8Activations::new(cols).unwrap();
    q.quantize(&x).unwrap();
    let y = product(Isa::best(), &m, &q);
    // against the exact product with the unquantized activations: only activation
    // quantization error (≤ half a step per value) separates them
    for r in 0..rows {
        let exact: f64 = (0..cols).map(|k| w[r * cols + k] * x[k] as f64).sum();
        let bound: f64 = (0..cols)
            .map(|k| {
                let b = k / BLOCK;
                let amax = x[b * BLOCK..][..BLOCK].iter().fold(0.0f64, |m, v| m.max(v.abs() as f64));
                w[r * cols + k].abs() * (amax / 127.0 * 0.5 + amax * 1e-3)
            })
            .sum();
        assert!((y[r] as f64 - exact).abs() <= bound + 1e-4, "row {r}: {} vs exact {exact} (bound {bound})", y[r]);
    }
}

#[test]
fn bad_input_is_refused() {
    let mut rng = Rng(5);
    assert!(matches!(Int8Matrix::from_q8_0(&[0; 34], 1, 33), Err(Error::BadShape { .. })));
    assert!(matches!(Int8Matrix::from_q8_0(&[0; 33], 1, 32), Err(Error::BufferSize { .. })));
    let mut inf = q8_0_blocks(&mut rng, 2, 64, false);
    inf[34 * 3..34 * 3 + 2].copy_from_slice(&half::f16::INFINITY.to_bits().to_le_bytes());
    assert!(matches!(Int8Matrix::from_q8_0(&inf, 2, 64), Err(Error::NonFiniteScale { row: 1, group: 1 })));
    let m = Int8Matrix::from_q8_0(&q8_0_blocks(&mut rng, 2, 64, false), 2, 64).unwrap();
    let mut x = Int8Activations::new(64).unwrap();
    let mut nan = vec![1.0; 64];
    nan[9] = f32::NAN;
    assert_eq!(x.quantize(&nan), Err(Error::NonFiniteInput));
    assert!(matches!(Int8Activations::new(48), Err(Error::BadShape { .. })));
    let mut y = [0.0; 2];
    assert!(matches!(gemv_rows(Isa::Scalar, &m, &Int8Activations::new(32).unwrap(), 0..2, &mut y), Err(Error::BufferSize { .. })));
    assert!(matches!(gemv_rows(Isa::Scalar, &m, &x, 1..3, &mut y), Err(Error::BadShape { .. })));
    assert!(matches!(gemv_rows(Isa::Scalar, &m, &x, 0..2, &mut y[..1]), Err(Error::BufferSize { .. })));
    assert!(matches!(m.dequantize_row(2, &mut [0.0; 64]), Err(Error::BadShape { .. })));
}

/// Random Q5_0 rows (f16 d, 4 bytes of fifth bits, 16 of nibbles), with the same
/// weights as Q8_0 rows of codes `q − 16` (the second result).
fn q5_0_blocks(rng: &mut Rng, rows: usize, cols: usize) -> (Vec<u8>, Vec<u8>) {
    let (mut q5, mut q8) = (Vec::new(), Vec::new());
    for _ in 0..rows * cols / BLOCK {
        let d = half::f16::from_f32(rng.uniform() * 0.05 + 1e-4).to_bits().to_le_bytes();
        // extremes (0 and 31) in some blocks
        let q: Vec<u8> = (0..BLOCK).map(|_| if rng.below(5) == 0 { [0, 31][rng.below(2)] } else { rng.below(32) as u8 }).collect();
        let fifth = q.iter().enumerate().fold(0u32, |h, (j, &q)| h | u32::from(q >> 4) << j);
        q5.extend_from_slice(&d);
        q5.extend_from_slice(&fifth.to_le_bytes());
        q5.extend((0..16).map(|j| (q[j] & 15) | (q[j + 16] & 15) << 4));
        q8.extend_from_slice(&d);
        q8.extend(q.iter().map(|&q| (q as i8 - 16) as u8));
    }
    (q5, q8)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn five_bit_form_equals_the_byte_form_of_its_codes_on_every_isa() {
    let mut rng = Rng(21);
    for (rows, cols) in [(1, 32), (7, 96), (9, 640), (6, 64 * 32 + 96)] {
        let (q5, q8) = q5_0_blocks(&mut rng, rows, cols);
        let five = Int8Matrix::from_q5_0(&q5, rows, cols).unwrap();
        assert_eq!(five.form(), CodeForm::FiveBit);
        assert!(five.bytes() < Int8Matrix::from_q8_0(&q8, rows, cols).unwrap().bytes());
        let bytes = Int8Matrix::from_q8_0(&q8, rows, cols).unwrap();
        // dequantization: llama.cpp's d·(q − 16), decoded here from the Q5_0 bytes
        let w = decode_q8_0(&q8);
        let mut row = vec![0.0; cols];
        for r in 0..rows {
            five.dequantize_row(r, &mut row).unwrap();
            assert!(row.iter().zip(&w[r * cols..]).all(|(&a, &b)| a as f64 == b), "row {r} dequantizes differently");
        }
        let mut x = Int8Activations::new(cols).unwrap();
        // large activations too, so that codes reach ±127
        x.quantize(&rng.vec(cols, 40.0)).unwrap();
        let want = product(Isa::Scalar, &bytes, &x);
        for isa in Isa::available() {
            assert_eq!(bits(&product(isa, &five, &x)), bits(&want), "{} at {rows}x{cols}", isa.name());
        }
    }
}

#[test]
fn a_batch_of_tokens_equals_each_token_alone() {
    let mut rng = Rng(23);
    // every batch size up to 9 on a narrow matrix; on one wider than two runs of the AVX2
    // tile kernels (32 blocks each), batches that fill one, two and four tiles of eight,
    // the last in part or whole
    for ((rows, cols), batches) in [((13, 320), &[1, 2, 3, 4, 5, 6, 7, 8, 9][..]), ((9, 64 * 32 + 96), &[5, 8, 13, 32, 37])] {
        let (q5, q8) = q5_0_blocks(&mut rng, rows, cols);
        // and bytes over the whole range, −128 included
        let extreme = q8_0_blocks(&mut rng, rows, cols, true);
        let matrices =
            [Int8Matrix::from_q5_0(&q5, rows, cols), Int8Matrix::from_q8_0(&q8, rows, cols), Int8Matrix::from_q8_0(&extreme, rows, cols)];
        for m in matrices.map(Result::unwrap) {
            for &tokens in batches {
                let xs: Vec<Int8Activations> = (0..tokens)
                    .map(|_| {
                        let mut x = Int8Activations::new(cols).unwrap();
                        x.quantize(&rng.vec(cols, 2.0)).unwrap();
                        x
                    })
                    .collect();
                // whole and partial groups of rows
                for range in [0..rows, 3..rows.min(10), 5..6] {
                    let alone: Vec<Vec<f32>> = xs
                        .iter()
                        .map(|x| {
                            let mut y = vec![0.0; range.len()];
                            gemv_rows(Isa::Scalar, &m, x, range.clone(), &mut y).unwrap();
                            y
                        })
                        .collect();
                    for isa in Isa::available() {
                        let mut ys = vec![vec![0.0; range.len()]; tokens];
                        let mut each = ys.iter_mut();
                        gemm_rows(isa, &m, &xs, range.clone(), |_| each.next().unwrap()).unwrap();
                        for (t, (y, alone)) in ys.iter().zip(&alone).enumerate() {
                            assert_eq!(bits(y), bits(alone), "{} {:?}, token {t} of {tokens}, rows {range:?}", isa.name(), m.form());
                        }
                    }
                }
            }
        }
    }
}

/// Scales are stored as f16 and converted in each kernel (F16C, or integer steps on
/// SSSE3, NEON and simd128): every finite half — zeros, subnormals, 65504 — as a block
/// scale of a Q8_0 and of a Q5_0 matrix dequantizes to the `half` crate's value and
/// multiplies to the scalar kernel's outputs on every ISA, one token and eight.
#[test]
fn every_finite_f16_scale_gives_the_scalar_outputs() {
    let mut rng = Rng(29);
    let finite: Vec<u16> = (0..=u16::MAX).filter(|h| h & 0x7c00 != 0x7c00).collect();
    let (rows, cols) = (64, finite.len() / 64 * BLOCK);
    assert_eq!(rows * cols / BLOCK, finite.len());
    let (q5, q8) = q5_0_blocks(&mut rng, rows, cols);
    let with_scales = |blocks: &[u8], block_bytes: usize| {
        let mut out = blocks.to_vec();
        for (b, &h) in out.chunks_exact_mut(block_bytes).zip(&finite) {
            b[..2].copy_from_slice(&h.to_le_bytes());
        }
        out
    };
    let q8 = with_scales(&q8, 2 + BLOCK);
    let w = decode_q8_0(&q8);
    let matrices = [Int8Matrix::from_q8_0(&q8, rows, cols).unwrap(), Int8Matrix::from_q5_0(&with_scales(&q5, 22), rows, cols).unwrap()];
    let xs: Vec<Int8Activations> = (0..8)
        .map(|_| {
            let mut x = Int8Activations::new(cols).unwrap();
            x.quantize(&rng.vec(cols, 2.0)).unwrap();
            x
        })
        .collect();
    for m in &matrices {
        let mut row = vec![0.0; cols];
        for r in 0..rows {
            m.dequantize_row(r, &mut row).unwrap();
            assert!(row.iter().zip(&w[r * cols..]).all(|(&a, &b)| a as f64 == b), "{:?} row {r} dequantizes differently", m.form());
        }
        let alone: Vec<Vec<f32>> = xs.iter().map(|x| product(Isa::Scalar, m, x)).collect();
        for isa in Isa::available() {
            assert_eq!(bits(&product(isa, m, &xs[0])), bits(&alone[0]), "{} {:?}, one token", isa.name(), m.form());
            let mut ys = vec![vec![0.0; rows]; xs.len()];
            let mut each = ys.iter_mut();
            gemm_rows(isa, m, &xs, 0..rows, |_| each.next().unwrap()).unwrap();
            for (t, (y, alone)) in ys.iter().zip(&alone).enumerate() {
                assert_eq!(bits(y), bits(alone), "{} {:?}, token {t} of 8", isa.name(), m.form());
            }
        }
    }
}

#[test]
fn bad_q5_0_input_is_refused() {
    let mut rng = Rng(25);
    let (mut q5, _) = q5_0_blocks(&mut rng, 2, 64);
    assert!(matches!(Int8Matrix::from_q5_0(&q5[1..], 2, 64), Err(Error::BufferSize { .. })));
    assert!(matches!(Int8Matrix::from_q5_0(&q5, 2, 48), Err(Error::BadShape { .. })));
    q5[22 * 3..22 * 3 + 2].copy_from_slice(&half::f16::NAN.to_bits().to_le_bytes());
    assert!(matches!(Int8Matrix::from_q5_0(&q5, 2, 64), Err(Error::NonFiniteScale { row: 1, group: 1 })));
    let m = Int8Matrix::from_q5_0(&q5_0_blocks(&mut rng, 2, 64).0, 2, 64).unwrap();
    let x = Int8Activations::new(64).unwrap();
    let mut short = [0.0; 1];
    let mut outs = [&mut short[..]].into_iter();
    let err = gemm_rows(Isa::Scalar, &m, core::slice::from_ref(&x), 0..2, |_| outs.next().unwrap());
    assert!(matches!(err, Err(Error::BufferSize { .. })));
}

#[test]
fn a_packed_five_bit_matrix_reads_back_unchanged() {
    use lutra_core::formats::import::{weights, InMemory, Weights};
    let mut rng = Rng(27);
    let (rows, cols) = (6, 96);
    let m = Int8Matrix::from_q5_0(&q5_0_blocks(&mut rng, rows, cols).0, rows, cols).unwrap();
    let w = Weights::Int8(m.clone());
    let mut writer = lutra_core::formats::pack::Writer::new();
    writer.matrix("w", &w);
    let mut file = Vec::new();
    writer
        .finish(|piece| {
            file.extend_from_slice(piece);
            Ok::<_, ()>(())
        })
        .unwrap();
    let g = lutra_core::formats::gguf::Gguf::parse(&file).unwrap();
    let Weights::Int8(back) = weights(&g, &mut InMemory(&file), "w", Some((rows, cols)), |_| {}).unwrap() else {
        panic!("an int8 matrix read back as bit planes")
    };
    assert_eq!(back.form(), CodeForm::FiveBit);
    assert_eq!(back.parts(), m.parts());
}

/// Every code at its extreme — 31 in the five-bit kernels' unsigned form (code 15), −128
/// and 127 as bytes — against activations at ±127: the largest sums the batch kernels
/// add in 16 bits, equal to the scalar kernel's.
#[test]
fn the_largest_sums_do_not_overflow_a_batch() {
    let (rows, cols) = (8, 640);
    let (mut q5, mut minus_128, mut plus_127) = (Vec::new(), Vec::new(), Vec::new());
    let d = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    for _ in 0..rows * cols / BLOCK {
        q5.extend_from_slice(&d);
        q5.extend_from_slice(&u32::MAX.to_le_bytes());
        q5.extend_from_slice(&[0xff; 16]);
        minus_128.extend_from_slice(&d);
        minus_128.extend_from_slice(&[0x80; BLOCK]);
        plus_127.extend_from_slice(&d);
        plus_127.extend_from_slice(&[0x7f; BLOCK]);
    }
    let matrices = [
        (Int8Matrix::from_q5_0(&q5, rows, cols).unwrap(), 15.0),
        (Int8Matrix::from_q8_0(&minus_128, rows, cols).unwrap(), -128.0),
        (Int8Matrix::from_q8_0(&plus_127, rows, cols).unwrap(), 127.0),
    ];
    for ((m, code), sign) in matrices.iter().flat_map(|m| [(m, 1.0f32), (m, -1.0)]) {
        let xs: Vec<Int8Activations> = (0..8)
            .map(|_| {
                let mut x = Int8Activations::new(cols).unwrap();
                x.quantize(&vec![sign; cols]).unwrap();
                x
            })
            .collect();
        for isa in Isa::available() {
            let mut ys = vec![vec![0.0; rows]; xs.len()];
            let mut each = ys.iter_mut();
            gemm_rows(isa, m, &xs, 0..rows, |_| each.next().unwrap()).unwrap();
            let mut alone = vec![0.0; rows];
            gemv_rows(Isa::Scalar, m, &xs[0], 0..rows, &mut alone).unwrap();
            // Σ code·(±127) over 640 columns, at scales 0.01 and 1/127 (both rounded to f16)
            let want = f64::from(sign) * code * 640.0 * 0.01;
            assert!((f64::from(alone[0]) - want).abs() < 1e-3 * want.abs(), "scalar {} vs {want}", alone[0]);
            for y in &ys {
                assert_eq!(bits(y), bits(&alone), "{} {:?}", isa.name(), m.form());
            }
        }
    }
}
