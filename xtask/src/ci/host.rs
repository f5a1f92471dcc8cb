//! Step `host`: the workspace's tests on this CPU (its best kernel tier), doc tests, Gemma 3
//! 270M against llama.cpp in release, `lutra chat`, the README example, PQ fidelity.

use std::collections::BTreeSet;
use std::fs;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::{Ci, X86_TIER_ORDER};
use crate::models::{write_one_bit_qwen3, GEMMA_FILE, QWEN_CODER_FILE};
use crate::process::{cargo, expect_contains, quiet, run, run_capture, show};
use crate::Result;

/// Greedy tokens each model writes for the cross-tier check (issue #42's 64).
const SAME_TEXT_TOKENS: &str = "64";

/// Every float reduction follows one order on every kernel tier, so the same file and
/// prompt give byte-identical greedy text on each x86 tier of this host (scalar up to the
/// best), on one thread and on two: stories15M (llama2.c checkpoint and Q4_0 GGUF), Gemma
/// 3 270M, Qwen2.5-Coder-0.5B-Instruct and a 1-bit qwen3 file. The one exception: files
/// with Q5_0 matrices take int8 kernels for them on the AVX2 tier alone
/// (`import::q5_0_as_int8`), so there that tier is held only to itself across thread
/// counts. (The `pi` and `web` steps hold NEON and wasm to the same text.)
fn same_text_on_every_tier(ci: &mut Ci, best: Option<&str>) -> Result {
    run(cargo(&ci.root).args(["build", "--release", "-p", "lutra-cli"]))?;
    let lutra = ci.target_dir.join("release/lutra");
    let models = ci.root.join("models");
    let story = "Once upon a time";
    // (file, prompt, whether it has Q5_0 matrices)
    let mut runs: Vec<(PathBuf, &str, bool)> = vec![
        (models.join("stories15M/model.bin"), story, false),
        (models.join("stories15M/stories15M-q4_0.gguf"), story, false),
        (models.join(GEMMA_FILE), story, true),
        (models.join(QWEN_CODER_FILE), "Write a Python function that reverses a string.", true),
    ];
    runs.push((write_one_bit_qwen3(&ci.root, &ci.target_dir.join("same-text"))?, "Otters hold hands while they sleep", false));
    let tiers: Vec<&str> = match best {
        Some(best) => X86_TIER_ORDER.iter().copied().take_while(|&t| t != best).chain([best]).collect(),
        None => {
            println!("not an x86 host: no tiers to compare text across here");
            return Ok(());
        }
    };
    for (file, prompt, q5_0) in &runs {
        let text = |tier: Option<&str>, threads: &str| -> Result<String> {
            let mut c = Command::new(&lutra);
            if let Some(tier) = tier {
                c.env("LUTRA_MAX_ISA", tier);
            }
            c.arg("run").arg("-m").arg(file).args([
                "--no-import-cache",
                "-p",
                prompt,
                "-n",
                SAME_TEXT_TOKENS,
                "--temp",
                "0",
                "-t",
                threads,
            ]);
            println!("$ {}", show(&c));
            let out = c.stdin(Stdio::null()).output().map_err(|e| format!("`{}`: {e}", show(&c)))?;
            if !out.status.success() {
                return Err(format!("`{}` exited with {}: {}", show(&c), out.status, String::from_utf8_lossy(&out.stderr)));
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
        };
        // the tier whose two-thread text each tier must write on one thread: the best one,
        // or for a Q5_0 file the AVX2 tier itself and, on an AVX2 host, SSSE3 for the rest
        let own_path = |tier: &str| *q5_0 && tier == "avx2";
        let reference_tier = |tier: &str| -> Option<&str> {
            if own_path(tier) {
                Some("avx2")
            } else if *q5_0 && best == Some("avx2") {
                Some("ssse3")
            } else {
                None
            }
        };
        let mut references: Vec<(Option<&str>, String)> = vec![];
        let mut compared = vec![];
        for &tier in &tiers {
            let got = text(Some(tier), "1")?;
            let of = reference_tier(tier);
            let want = match references.iter().find(|(t, _)| *t == of) {
                Some((_, w)) => w.clone(),
                None => {
                    let w = text(of, "2")?;
                    if w.len() <= prompt.len() {
                        return Err(format!("{}: no text after the prompt: {w:?}", file.display()));
                    }
                    references.push((of, w.clone()));
                    w
                }
            };
            if got != want {
                return Err(format!(
                    "{}: the {tier} tier on one thread wrote\n{got:?}\n  the {} tier on two threads wrote\n{want:?}",
                    file.display(),
                    of.unwrap_or("best")
                ));
            }
            compared.push(if own_path(tier) { format!("{tier} (its own Q5_0 path)") } else { tier.to_string() });
        }
        println!("same text on {} and 1 and 2 threads: {}", compared.join(", "), file.display());
    }
    ci.counts.push(("greedy text identical across x86 tiers and thread counts (models)".into(), runs.len()));
    Ok(())
}

pub(super) fn host_tests(ci: &mut Ci) -> Result {
    let expect = host_expected_isa();
    match expect {
        Some(isa) => println!("host CPU: expecting Isa::best() = {isa}"),
        None => println!("host is not x86_64: no ISA expectation for the host run"),
    }
    let mut c = cargo(&ci.root);
    if quiet(cargo(&ci.root).args(["nextest", "--version"])).is_some() {
        c.args(["nextest", "run", "--workspace"]);
    } else {
        c.args(["test", "--workspace"]);
    }
    if let Some(isa) = expect {
        c.env("LUTRA_EXPECT_ISA", isa);
    }
    let out = run_capture(&mut c)?;
    ci.count("host x86_64 (workspace)", &out, true)?;
    // kernel tests compare every tier up to the best against scalar
    if let Some(best) = expect {
        for tier in X86_TIER_ORDER.iter().take_while(|&&t| t != best).chain([&best]) {
            ci.ran(tier, "native");
        }
    }
    let out = run_capture(cargo(&ci.root).args(["test", "--workspace", "--doc"]))?;
    ci.count("host doc tests", &out, false)?;
    // Gemma 3 270M against llama.cpp's golden logits: minutes unoptimized, so ignored in
    // debug builds (the nextest run above lists it as skipped) and run here in release.
    let out = run_capture(cargo(&ci.root).args(["test", "--release", "-p", "lutra-tests", "--test", "gemma_logits", "--test", "engine"]))?;
    ci.count("host Gemma 3 270M vs llama.cpp, engine on Gemma (release)", &out, false)?;
    expect_contains(&out, "gemma3_270m_agrees_with_llama_cpp ... ok", "Gemma 3 270M agreement test")?;
    expect_contains(&out, "gemma3_270m_with_residual_tables_agrees_with_llama_cpp ... ok", "Gemma 3 270M with residual tables")?;
    expect_contains(&out, "gemma3_single_thread_logits_equal_the_pool ... ok", "engine: single thread vs pool on Gemma")?;
    expect_contains(&out, "gemma3_rewind_past_a_wrapped_ring_equals_a_fresh_session ... ok", "engine: rewind on Gemma")?;
    // On an AVX-512 host, again on the AVX2 tier: its own lookup and attention kernels.
    if expect.is_some_and(|best| best.starts_with("avx512")) {
        let out = run_capture(cargo(&ci.root).env("LUTRA_MAX_ISA", "avx2").args([
            "test",
            "--release",
            "-p",
            "lutra-tests",
            "--test",
            "gemma_logits",
            "--test",
            "engine",
            // the agreement test names its kernel tier on stderr; one test at a time, so
            // no output lands inside another test's `... ok` line
            "--",
            "--nocapture",
            "--test-threads=1",
        ]))?;
        ci.count("host Gemma 3 270M vs llama.cpp, engine on Gemma, AVX2 tier (release)", &out, false)?;
        expect_contains(&out, "kernels avx2:", "Gemma 3 270M agreement test on the AVX2 tier")?;
        expect_contains(&out, "gemma3_single_thread_logits_equal_the_pool ... ok", "engine on the AVX2 tier")?;
    }
    same_text_on_every_tier(ci, expect)?;
    // `lutra chat` through a pipe on Gemma, and the README's example on stories15M
    let out = run_capture(cargo(&ci.root).args(["test", "--release", "-p", "lutra-cli", "--test", "chat"]))?;
    ci.count("host lutra chat through a pipe (release)", &out, false)?;
    expect_contains(&out, "two_turns_share_one_session ... ok", "lutra chat test")?;
    let story = run_capture(cargo(&ci.root).args(["run", "--release", "-q", "-p", "lutra", "--example", "story"]))?;
    if !story.contains("Once upon a time") || story.split_whitespace().count() < 40 {
        return Err(format!("the README example wrote no story:\n{story}"));
    }
    println!("--- README example (examples/story.rs): {} words", story.split_whitespace().count());
    // NoMAD PQ scores vs exact scores on real keys of both models (k-means: release only)
    let out = run_capture(cargo(&ci.root).args(["test", "--release", "-p", "lutra", "--test", "pq_fidelity", "--", "--nocapture"]))?;
    ci.count("host PQ score fidelity on real keys (release)", &out, false)?;
    expect_contains(&out, "gemma3_pq_scores_follow_exact_scores ... ok", "Gemma 3 PQ fidelity test")?;
    expect_contains(&out, "stories15m_pq_scores_follow_exact_scores ... ok", "stories15M PQ fidelity test")
}

/// `Isa::best()` on this host, from /proc/cpuinfo, mirroring `lutra_core::isa::detect_x86`:
/// "avx512vbmi" with AVX-512 F/BW/VL/VBMI/VNNI, "avx512" with F/BW; otherwise no expectation
/// (the AVX2 and SSSE3 tiers are proven under qemu instead).
fn host_expected_isa() -> Option<&'static str> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let info = fs::read_to_string("/proc/cpuinfo").ok()?;
    let flags: BTreeSet<&str> = info.lines().find(|l| l.starts_with("flags"))?.split_whitespace().collect();
    let has = |want: &[&str]| want.iter().all(|f| flags.contains(f));
    // the same conditions as lutra-core's detect_x86 (the OS's xsave support aside)
    Some(if !has(&["ssse3"]) {
        "scalar"
    } else if !has(&["avx", "avx2", "fma", "f16c"]) {
        "ssse3"
    } else if !has(&["avx512f", "avx512bw"]) {
        "avx2"
    } else if has(&["avx512vbmi", "avx512_vnni", "avx512vl"]) {
        "avx512vbmi"
    } else {
        "avx512"
    })
}
