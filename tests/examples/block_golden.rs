//! Writes `tests/golden/blocks.bin`: random llama.cpp blocks of every type lutra imports
//! (scales at every finite edge, and poisoned with each non-finite kind) with llama.cpp's
//! own dequantization of them, so CI checks lutra's import against llama.cpp without
//! building it (`tests/tests/block_import.rs`).
//!
//! ```text
//! RUSTFLAGS="-C target-cpu=native" CARGO_TARGET_DIR=target/llamacpp \
//!     cargo run -p lutra-tests --features llamacpp --example block_golden [-- OUT]
//! ```

use lutra_bench::llamacpp::blocks::{BLOCK_TYPES, NON_FINITE_SCALES};
use lutra_tests::blocks::{llama_cpp_cases, write_case, BLOCKS_GOLDEN};
use lutra_tests::golden::golden_path;

fn main() {
    let out = std::env::args().nth(1).map(Into::into).unwrap_or_else(|| golden_path(BLOCKS_GOLDEN));
    let mut bytes =
        b"lutra block-import golden: llama.cpp (llama-cpp-sys-2 0.1.161) to_float of random blocks; format in tests/src/blocks.rs\n"
            .to_vec();
    let mut count = 0;
    for t in &BLOCK_TYPES {
        // 4 x 512 with every edge scale; then 2 x 256 poisoned with each non-finite kind
        let [clean, _] = llama_cpp_cases(t, 4, 512, 0x6c75_7472_6100, true);
        write_case(&mut bytes, &clean);
        for seed in 0..NON_FINITE_SCALES.len() as u64 {
            let [_, poisoned] = llama_cpp_cases(t, 2, 256, seed, false);
            write_case(&mut bytes, &poisoned);
        }
        count += 1 + NON_FINITE_SCALES.len();
    }
    std::fs::write(&out, &bytes).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    println!("{count} cases, {} bytes -> {}", bytes.len(), out.display());
}
