//! A GGUF file's matrices are converted on several threads before the architecture asks
//! for them (`LoadOptions::import_threads`); the model must be the one the core library
//! imports on one thread in the architecture's order (`engine::Model::from_gguf`, which
//! does not go through the loader): logits equal bit for bit over a prompt, for 1, 2 and
//! more threads than matrices of one kind. Models come from `cargo xtask models`.

use std::path::PathBuf;

use lutra::core::engine::{self, Attention, SingleThread};

fn logits_of_reference(bytes: &[u8], tokens: &[u32]) -> Vec<Vec<f32>> {
    let model = engine::Model::from_gguf(bytes).unwrap();
    let mut session = engine::Session::new(&model, 64, &Attention::Exact).unwrap();
    tokens.iter().map(|&t| session.forward(&SingleThread, t).unwrap().to_vec()).collect()
}

fn logits_loaded(path: &PathBuf, threads: usize, tokens: &[u32]) -> Vec<Vec<f32>> {
    let opts = lutra::LoadOptions { import_threads: Some(threads), ..Default::default() };
    let model = lutra::Model::load_with(path, &opts).unwrap_or_else(|e| panic!("{e}\n  run `cargo xtask models all` first"));
    let mut session = model.session(&lutra::SessionOptions { context: 64, threads: 1, ..Default::default() }).unwrap();
    tokens.iter().map(|&t| session.forward(t).unwrap().to_vec()).collect()
}

#[test]
fn matrices_imported_ahead_on_any_thread_count_equal_the_core_import() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for file in ["models/stories15M/stories15M-q4_0.gguf", "models/gemma-3-270m-q4_k_m.gguf"] {
        let path = root.join(file);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}\n  run `cargo xtask models all` first", path.display()));
        let tokens = [2, 651, 6037, 576, 6081, 603, 1, 29871];
        let want = logits_of_reference(&bytes, &tokens);
        for threads in [1, 2, 7] {
            let got = logits_loaded(&path, threads, &tokens);
            for (pos, (g, w)) in got.iter().zip(&want).enumerate() {
                let same = g.len() == w.len() && g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{file}, {threads} import threads: logits differ at position {pos}");
            }
        }
    }
}
