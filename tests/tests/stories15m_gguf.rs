//! stories15M as the `llama`-architecture GGUF files llama.cpp's converter and quantizer
//! make (byte for byte: `cargo xtask models stories-gguf` checks their SHA-256 against
//! llama.cpp's own), run by lutra's Llama-family graph against llama.cpp's next-token
//! distributions on the same files (tests/golden/stories15M-{f32,q8_0,q4_0}-stories.txt,
//! from native/examples/gemma_golden.rs; 112 scored positions of a stories15M story).
//!
//! Per file: mean KL(llama.cpp || lutra) ≤ 0.01 (the top-20-plus-tail estimate of
//! `lutra_tests::golden`), and top-1 agreement at every position where llama.cpp's
//! choice leads its second by ≥ 0.5 nats. lutra imports the F32 file as its Q8_0
//! quantization (as `llama-quantize` rounds), so the F32 and Q8_0 files must also give
//! lutra bit-identical logits.

use lutra_core::arch::Architecture;
use std::path::PathBuf;

use lutra_core::arch::llama_family::{Arch, LlamaFamily, LlamaFamilyState};
use lutra_core::formats::gguf::Gguf;
use lutra_core::model::SingleThread;
use lutra_tests::golden::{golden_path, Golden, Tally};

const MAX_MEAN_KL: f64 = 0.01;
/// llama.cpp's top-1 log-probability lead over its second choice that makes a position decisive.
const DECISIVE_GAP: f32 = 0.5;

fn load(file: &str) -> (Vec<u8>, LlamaFamily) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/stories15M").join(file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!("{}: {e}\n  run `cargo xtask models stories-gguf` first (writes stories15M's GGUF files)", path.display())
    });
    let model = LlamaFamily::from_gguf(&Gguf::parse(&bytes).expect("parses")).expect("imports");
    (bytes, model)
}

/// Teacher-forced logits of lutra at every golden position, checked against llama.cpp's.
fn agree(file: &str, golden: &str) -> Vec<Vec<f32>> {
    let golden = Golden::load(&golden_path(golden)).unwrap();
    let (bytes, model) = load(file);
    assert_eq!(bytes.len() as u64, golden.model_bytes, "{file} is not the file the golden file was made from");
    assert_eq!(model.config.arch, Arch::Llama);
    let mut state = LlamaFamilyState::new(&model, golden.tokens.len()).unwrap();
    let (mut tally, mut decisive, mut all_logits) = (Tally::default(), 0, Vec::new());
    let mut scored = golden.scored.iter().peekable();
    for (pos, &token) in golden.tokens.iter().enumerate() {
        let logits = model.forward(&SingleThread, &mut state, token, pos).unwrap();
        if let Some(reference) = scored.next_if(|s| s.position == pos) {
            assert!(logits.iter().all(|x| x.is_finite()), "{file}: non-finite logits at {pos}");
            let agreed_before = tally.top1_agreed;
            tally.add(reference, logits);
            if reference.top[0].1 - reference.top[1].1 >= DECISIVE_GAP {
                decisive += 1;
                assert_eq!(tally.top1_agreed, agreed_before + 1, "{file}: top-1 differs from llama.cpp's at decisive position {pos}");
            }
            all_logits.push(logits.to_vec());
        }
    }
    eprintln!(
        "{file} vs llama.cpp (llama-cpp-sys-2 {}): mean KL {:.5} over {} positions (worst {:.4} at {}), top-1 {}/{} ({} decisive, all agreed)",
        golden.llama_cpp_sys_2,
        tally.mean_kl(),
        tally.positions,
        tally.worst.unwrap().1,
        tally.worst.unwrap().0,
        tally.top1_agreed,
        tally.positions,
        decisive
    );
    assert_eq!(tally.positions, golden.scored.len());
    assert!(decisive >= 56, "{file}: only {decisive} decisive positions");
    assert!(tally.mean_kl() <= MAX_MEAN_KL, "{file}: mean KL {} above {MAX_MEAN_KL}", tally.mean_kl());
    all_logits
}

#[test]
#[cfg_attr(debug_assertions, ignore = "a minute unoptimized: `cargo xtask test host` runs it with --release")]
fn stories15m_gguf_files_agree_with_llama_cpp() {
    let f32_logits = agree("stories15M-f32.gguf", "golden/stories15M-f32-stories.txt");
    let q8_logits = agree("stories15M-q8_0.gguf", "golden/stories15M-q8_0-stories.txt");
    agree("stories15M-q4_0.gguf", "golden/stories15M-q4_0-stories.txt");
    // the F32 file's matrices are imported as exactly llama-quantize's Q8_0 blocks (the
    // Q8_0 file's tensors), so the two run the same arithmetic
    assert!(f32_logits == q8_logits, "the F32 file's import differs from llama-quantize's Q8_0");
}

/// Batched prefill equals feeding one token at a time, bit for bit, on a real file.
#[test]
#[cfg_attr(debug_assertions, ignore = "a minute unoptimized: `cargo xtask test host` runs it with --release")]
fn stories15m_gguf_batched_prefill_equals_token_by_token() {
    let (_, model) = load("stories15M-q4_0.gguf");
    let tokens: Vec<u32> = (0..100u32).map(|i| (i * 7919 + 13) % 32000).collect();
    let (mut one, mut batched) = (LlamaFamilyState::new(&model, 128).unwrap(), LlamaFamilyState::new(&model, 128).unwrap());
    for (pos, &t) in tokens[..99].iter().enumerate() {
        model.feed(&SingleThread, &mut one, t, pos).unwrap();
    }
    model.feed_batch(&SingleThread, &mut batched, &tokens[..37], 0).unwrap();
    model.feed_batch(&SingleThread, &mut batched, &tokens[37..99], 37).unwrap();
    let want = model.forward(&SingleThread, &mut one, tokens[99], 99).unwrap().to_vec();
    assert_eq!(model.forward(&SingleThread, &mut batched, tokens[99], 99).unwrap(), &want[..]);
}

/// The memory estimate from the header alone (what `--max-memory` checks before loading)
/// is exactly the imported matrices plus the f32 vectors, for F32 matrices (imported as
/// int8) as for Q8_0 and Q4_0 ones.
#[test]
fn weight_estimate_from_the_header_matches_the_loaded_model() {
    for file in ["stories15M-f32.gguf", "stories15M-q8_0.gguf", "stories15M-q4_0.gguf"] {
        let (bytes, model) = load(file);
        let gguf = Gguf::parse(&bytes).unwrap();
        let estimate = lutra_core::formats::import::weight_bytes_needed(&gguf).unwrap();
        let vectors: u64 = gguf.tensors().filter(|t| t.n_dims == 1).map(|t| t.byte_size().unwrap()).sum();
        let matrices = model.matrix_bytes() as u64;
        assert_eq!(estimate, matrices + vectors, "{file}: estimate {estimate}, matrices {matrices}, vectors {vectors}");
    }
}

/// Two threads (the pool splits each int8 batch product by rows, once per batch) give
/// the single thread's logits bit for bit, for int8 (Q8_0) and lookup (Q4_0) weights.
#[test]
#[cfg_attr(debug_assertions, ignore = "a minute unoptimized: `cargo xtask test host` runs it with --release")]
fn stories15m_gguf_two_threads_equal_one() {
    use lutra::threads::Pool;
    let pool = Pool::new(2);
    let tokens: Vec<u32> = (0..90u32).map(|i| (i * 104_729 + 7) % 32000).collect();
    for file in ["stories15M-q8_0.gguf", "stories15M-q4_0.gguf"] {
        let (_, model) = load(file);
        let (mut one, mut two) = (LlamaFamilyState::new(&model, 128).unwrap(), LlamaFamilyState::new(&model, 128).unwrap());
        model.feed_batch(&SingleThread, &mut one, &tokens[..89], 0).unwrap();
        model.feed_batch(&pool.split(), &mut two, &tokens[..89], 0).unwrap();
        let want = model.forward(&SingleThread, &mut one, tokens[89], 89).unwrap().to_vec();
        assert_eq!(model.forward(&pool.split(), &mut two, tokens[89], 89).unwrap(), &want[..], "{file}");
    }
}
