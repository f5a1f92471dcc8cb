//! Every block type lutra imports, against llama.cpp's own dequantization: the stored
//! golden cases (CI, no llama.cpp build) and, with feature `llamacpp`, a property test
//! over fresh random blocks with llama.cpp in-process. Finite scales (±0, subnormals,
//! ±65504) give weights equal to llama.cpp's bit for bit; a NaN or ±Inf scale, which
//! would make llama.cpp compute non-finite weights, is refused naming its row.

use lutra_tests::blocks::{check_case, read_cases, Expected, BLOCKS_GOLDEN};
use lutra_tests::golden::golden_path;

#[test]
fn imports_equal_llama_cpp_on_the_golden_blocks() {
    let path = golden_path(BLOCKS_GOLDEN);
    let cases = read_cases(&std::fs::read(&path).unwrap()).unwrap();
    let mut types: Vec<&str> = cases.iter().map(|c| c.type_name.as_str()).collect();
    types.dedup();
    assert_eq!(types, ["Q1_0", "Q2_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "TQ1_0", "TQ2_0"]);
    let refused = cases.iter().filter(|c| matches!(c.expected, Expected::NonFiniteScaleInRow(_))).count();
    assert_eq!(refused, 5 * types.len(), "each type poisoned with each non-finite kind");
    let failures: Vec<String> = cases.iter().filter_map(|c| check_case(c).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The engine imports a matrix a run of whole tiles at a time (the page reads a `Blob` so):
/// each golden case stacked to 68 rows, read 32 rows at a time, gives llama.cpp's weights
/// row for row, and the runs cover the blocks once, in order.
#[test]
fn imports_in_runs_of_rows_equal_llama_cpp() {
    let cases = read_cases(&std::fs::read(golden_path(BLOCKS_GOLDEN)).unwrap()).unwrap();
    let mut checked = 0;
    for c in cases.iter().filter(|c| c.rows == 4) {
        let Expected::Weights(want) = &c.expected else { continue };
        let copies = 17;
        let (rows, blocks) = (c.rows * copies, c.blocks.repeat(copies));
        let (m, runs) = lutra_tests::blocks::import_in_runs(&c.type_name, &blocks, rows, c.cols, 32).unwrap();
        let bounds: Vec<(usize, usize)> = runs.iter().map(|r| (r.start, r.end)).collect();
        let row_bytes = blocks.len() / rows;
        assert_eq!(bounds, [(0, 32 * row_bytes), (32 * row_bytes, 64 * row_bytes), (64 * row_bytes, blocks.len())], "{}", c.type_name);
        let mut row = vec![0f32; c.cols];
        for r in 0..rows {
            m.dequantize_row(r, &mut row).unwrap();
            let expected = &want[r % c.rows * c.cols..][..c.cols];
            assert!(row.iter().zip(expected).all(|(a, b)| a.to_bits() == b.to_bits()), "{} row {r}", c.type_name);
        }
        checked += 1;
    }
    assert_eq!(checked, 14, "every type");
}

/// 200 fresh random matrices per type (and each poisoned once), llama.cpp in-process.
#[cfg(feature = "llamacpp")]
#[test]
fn imports_equal_llama_cpp_on_random_blocks() {
    use lutra_bench::llamacpp::blocks::BLOCK_TYPES;
    for t in &BLOCK_TYPES {
        for seed in 0..200 {
            for case in lutra_tests::blocks::llama_cpp_cases(t, 4, 512, seed, seed % 2 == 0) {
                check_case(&case).unwrap();
            }
        }
    }
}

/// Q1_0 stores its step `2d` in the file's f16 scales (as many bytes as the file: 1.125
/// bits per weight), unless some |d| > 32752 makes `2d` overflow f16: then f32 scales keep
/// every weight ±d exactly. Q2_0 keeps its f16 `d` (2.25 bits per weight).
#[test]
fn one_and_two_bit_imports_are_as_compact_as_the_file() {
    use lutra_core::kernels::quant::ScaleFormat;
    use lutra_core::PackedMatrix;
    let (rows, cols) = (64, 512);
    let block = |d: u16, payload: u8, size: usize| {
        let mut b = d.to_le_bytes().to_vec();
        b.resize(size, payload);
        b
    };
    let q1: Vec<u8> = (0..rows * cols / 128).flat_map(|i| block(0x2000 + i as u16, 0x5a, 18)).collect();
    let m = PackedMatrix::from_q1_0(&q1, rows, cols).unwrap();
    assert_eq!((m.layout().scales(), m.layout().total_bytes()), (ScaleFormat::F16, q1.len()));
    let mut wide = q1.clone();
    wide[18..20].copy_from_slice(&0x7800u16.to_le_bytes()); // 32768, block 1 of row 0
    let m = PackedMatrix::from_q1_0(&wide, rows, cols).unwrap();
    assert_eq!(m.layout().scales(), ScaleFormat::F32);
    // read 32 rows at a time, a wide scale only in the last run widens the whole matrix
    let mut wide_last = q1.clone();
    let last_row = (rows - 1) * cols / 128 * 18;
    wide_last[last_row..last_row + 2].copy_from_slice(&0x7800u16.to_le_bytes());
    let (in_runs, _) = lutra_tests::blocks::import_in_runs("Q1_0", &wide_last, rows, cols, 32).unwrap();
    assert_eq!(in_runs.layout().scales(), ScaleFormat::F32);
    assert_eq!(in_runs.as_bytes(), PackedMatrix::from_q1_0(&wide_last, rows, cols).unwrap().as_bytes());
    let mut row = vec![0f32; cols];
    m.dequantize_row(0, &mut row).unwrap();
    // 0x5a = 0b0101_1010: elements 1, 3, 4, 6 of each byte are +d
    let want: Vec<f32> = (0..128).map(|j| if 0x5au8 >> (j % 8) & 1 == 1 { 32768.0 } else { -32768.0 }).collect();
    assert_eq!(row[128..256], want[..]);
    let q2: Vec<u8> = (0..rows * cols / 64).flat_map(|i| block(0x2000 + i as u16, 0xe4, 18)).collect();
    let m = PackedMatrix::from_q2_0(&q2, rows, cols).unwrap();
    assert_eq!((m.layout().scales(), m.layout().total_bytes()), (ScaleFormat::F16, q2.len()));
}
