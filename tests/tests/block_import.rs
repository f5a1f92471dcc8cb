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
    assert_eq!(types, ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "TQ1_0", "TQ2_0"]);
    let refused = cases.iter().filter(|c| matches!(c.expected, Expected::NonFiniteScaleInRow(_))).count();
    assert_eq!(refused, 5 * types.len(), "each type poisoned with each non-finite kind");
    let failures: Vec<String> = cases.iter().filter_map(|c| check_case(c).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
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
