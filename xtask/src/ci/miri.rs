//! Step `miri`: Miri (nightly) on the portable code.

use std::process::Command;

use super::Ci;
use crate::process::run_capture;
use crate::toolchain::NIGHTLY;
use crate::Result;

/// Miri over the scalar paths (SIMD detection reports scalar under Miri): lutra-core's
/// unit tests and the GGUF and llama2.c loader tests, and lutra-embedded's arena
/// allocator. (The tiny models end to end, `--test fuzz_seeds`, pass too but take
/// 9 minutes: run it by hand.)
pub(super) fn miri(ci: &mut Ci) -> Result {
    let miri = |args: &[&str]| {
        let mut c = Command::new("rustup");
        c.args(["run", NIGHTLY, "cargo", "miri", "test", "--target-dir"]).arg(ci.target_dir.join("miri")).args(args).current_dir(&ci.root);
        c
    };
    let mut out = run_capture(&mut miri(&["-p", "lutra-embedded", "--lib", "--no-default-features"]))?;
    // the exhaustive loops (every truncation, 10 000 mutations, a million entries) run
    // natively; under Miri they would take hours. `rounds_like_roundf` and
    // `exp_matches_libm` sweep 300 000 and 200 000 floats through safe scalar arithmetic
    // (256 s and 116 s of this step), `f16_rows_round_like_half` 1.4 million (its F16C
    // path is what it tests, and Miri runs the portable one): they run on every other
    // target, and Miri has nothing to find in them
    let skips = [
        "truncated_at_every_byte",
        "every_truncation",
        "random_",
        "many_entries_beyond_the_index",
        "rounds_like_roundf",
        "exp_matches_libm_over_the_softmax_range",
        "f16_rows_round_like_half",
    ]
    .map(|t| ["--skip", t]);
    let core = ["-p", "lutra-core", "--lib", "--test", "gguf", "--test", "llama2c", "--"];
    out += &run_capture(&mut miri(&[&core[..], skips.as_flattened()].concat()))?;
    // the thread pool's lifetime-erased jobs and its join/close protocol (data races,
    // use after return); Miri's own ROUNDS keep this to seconds
    out += &run_capture(&mut miri(&["-p", "lutra", "--lib", "--", "threads::pool::"]))?;
    ci.count("Miri (lutra-core unit + loader tests, lutra-embedded arena, thread pool)", &out, false)?;
    ci.ran("scalar", "Miri");
    Ok(())
}
