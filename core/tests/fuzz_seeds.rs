//! The files the fuzzers (`fuzz/`) start from, each checked to load here: a tiny Gemma 3
//! GGUF with a SentencePiece vocabulary and its packed `.lutra` form, tiny `llama`,
//! `qwen2` and `qwen3` GGUFs (F32, Q8_0, Q4_0), a tiny llama2.c
//! checkpoint with its `tokenizer.bin` and their packed form, a PQ codebook file.
//! With `LUTRA_FUZZ_SEEDS=DIR` they are also written to `DIR/<target>/` (`cargo xtask
//! fuzz` does this before it fuzzes).

mod common;
use common::gguf_writer::write_gguf;
use common::llama2c_files::tiny_checkpoint_and_tokenizer;
use common::tiny_bpe::Vocab;
use common::tiny_gemma::{meta_270m, tensors, with_tokenizer};
use common::tiny_llama::VARIANTS;
use common::Rng;

use lutra_core::engine::{Attention, Generation, Model, SamplerConfig, Session, SingleThread};
use lutra_core::pq::{Codebooks, PqShape, Rotation};
use lutra_core::tokenizer::spm::TokenType;

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn tiny_gemma() -> Vec<u8> {
    write_gguf(&with_tokenizer(meta_270m(2)), &tensors(2, 7))
}

/// A byte-level BPE vocabulary with a few merges, a control and a user-defined token;
/// checked to tokenize.
fn tiny_bpe(pre: &'static str) -> Vec<u8> {
    let v = Vocab::new(pre)
        .merge("a", "b")
        .merge(" ", "t")
        .merge("h", "e")
        .merge(" t", "he")
        .token("<|endoftext|>", TokenType::Control)
        .token("<user>", TokenType::UserDefined);
    let t = v.load().expect("the tiny BPE vocabulary builds");
    let mut ids = Vec::new();
    t.encode_llama("ab the<user>", false, false, &mut ids).unwrap();
    assert_eq!(ids.len(), 3, "{ids:?}");
    v.bytes()
}

fn packed(model: &Model, origin: &[u8]) -> Vec<u8> {
    let mut writer = lutra_core::formats::pack::Writer::new();
    model.write_packed(origin, &mut writer).unwrap();
    let mut out = Vec::new();
    writer
        .finish(|p| {
            out.extend_from_slice(p);
            Ok::<_, ()>(())
        })
        .unwrap();
    out
}

/// A few greedy tokens: the model runs, not only loads.
fn runs(model: &Model) {
    let mut session = Session::new(model, 8, &Attention::Exact).unwrap();
    let prompt = [model.bos(), 3, 4];
    let mut g = Generation::start(&mut session, &prompt, SamplerConfig::greedy(), 3).unwrap();
    while g.step(&mut session, &SingleThread).unwrap().is_some() {}
}

fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let gemma = tiny_gemma();
    let gemma_model = Model::from_gguf(&gemma).expect("the tiny Gemma seed imports");
    runs(&gemma_model);
    let gemma_packed = packed(&gemma_model, &gemma);
    runs(&Model::from_gguf(&gemma_packed).expect("the packed Gemma seed imports"));
    let (checkpoint, tokenizer) = tiny_checkpoint_and_tokenizer();
    let llama = Model::from_llama2c(&checkpoint, &tokenizer, 4).expect("the tiny llama2.c seed imports");
    runs(&llama);
    let llama_packed = packed(&llama, &tokenizer);
    runs(&Model::from_gguf(&llama_packed).expect("the packed llama2.c seed imports"));
    let mut rng = Rng(5);
    let shape = PqShape::new(2, 1, 16, 4, 16).unwrap();
    let books = Codebooks::new(shape, "tiny", Rotation::None, rng.vec(2 * 16 * 16, 1.0)).unwrap();
    let codebook = books.to_gguf();
    assert_eq!(Codebooks::from_gguf(&codebook).unwrap(), books);
    // the Llama family: each branch of the graph, each weight storage
    let family: Vec<(&str, Vec<u8>)> = VARIANTS.iter().map(|v| (v.name, v.gguf())).collect();
    for (name, bytes) in &family {
        runs(&Model::from_gguf(bytes).unwrap_or_else(|e| panic!("the {name} seed imports: {e}")));
    }
    // the targets' framing: bits selector and checkpoint length; vocabulary size
    let mut checkpoint_with_tokenizer = vec![3];
    checkpoint_with_tokenizer.extend((checkpoint.len() as u32).to_le_bytes());
    checkpoint_with_tokenizer.extend(&checkpoint);
    checkpoint_with_tokenizer.extend(&tokenizer);
    let mut seeds = vec![
        ("gguf", "tiny-gemma3.gguf", gemma.clone()),
        ("gguf", "tiny-gemma3.lutra", gemma_packed.clone()),
        ("gguf", "codebook.gguf", codebook.clone()),
        ("model", "tiny-gemma3.gguf", gemma),
        ("model", "tiny-gemma3.lutra", gemma_packed),
        ("model", "tiny-llama2c.lutra", llama_packed),
        ("llama2c", "tiny", checkpoint_with_tokenizer),
        ("tokenizer_bin", "tiny", [&(llama.vocab_size() as u16).to_le_bytes()[..], &tokenizer].concat()),
        ("codebook", "tiny.gguf", codebook),
        ("tokenize", "text", b" the ab ba\n\xe2\x82\xac \x00".to_vec()),
        ("vocab", "tiny-gemma3.gguf", tiny_gemma()),
        ("vocab", "tiny-bpe-llama3.gguf", tiny_bpe("llama-bpe")),
        ("vocab", "tiny-bpe-qwen2.gguf", tiny_bpe("qwen2")),
        ("engine", "settings", vec![4, 200, 12, 90, 1, 2, 3, b' ', b'a', b'b']),
    ];
    seeds.extend(family.into_iter().map(|(name, bytes)| ("model", name, bytes)));
    seeds
}

#[test]
fn fuzz_seeds_load_and_run() {
    let seeds = seeds();
    if let Some(dir) = std::env::var_os("LUTRA_FUZZ_SEEDS") {
        for (target, name, bytes) in &seeds {
            let dir = std::path::Path::new(&dir).join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
}
