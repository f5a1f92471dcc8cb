//! Writes tests/golden/eog.txt: for each of llama.cpp's vocab files whose tokenizer lutra
//! has, the tokens llama.cpp ends generation at (`llama_vocab_is_eog` over every id, the
//! file loaded `vocab_only` in-process), which tests/tests/llama_vocab.rs checks lutra's
//! tokenizers against.
//!
//! ```text
//! RUSTFLAGS="-C target-cpu=native" CARGO_TARGET_DIR=target/llamacpp \
//!     cargo run -p lutra-tests --features llamacpp --example eog_golden
//! ```

use std::ffi::CString;
use std::fmt::Write as _;
use std::path::Path;

use lutra_bench::llamacpp::sys;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    lutra_bench::llamacpp::model::init_backend();
    let mut out = String::from("# llama.cpp's end-of-generation token ids per vocab file (tests/examples/eog_golden.rs)\n");
    for name in lutra_tests::golden::EOG_VOCABS {
        let path = root.join(format!("models/llama-vocab/ggml-vocab-{name}.gguf"));
        let cpath = CString::new(path.to_string_lossy().as_bytes()).expect("no NUL in the path");
        // SAFETY: default parameters from llama.cpp itself, a NUL-terminated path; the
        // model is null-checked, read only through its vocabulary, and freed once.
        let ids: Vec<String> = unsafe {
            let mut params = sys::llama_model_default_params();
            params.vocab_only = true;
            let model = sys::llama_model_load_from_file(cpath.as_ptr(), params);
            assert!(!model.is_null(), "{}: llama.cpp cannot load it", path.display());
            let vocab = sys::llama_model_get_vocab(model);
            let ids = (0..sys::llama_vocab_n_tokens(vocab)).filter(|&t| sys::llama_vocab_is_eog(vocab, t)).map(|t| t.to_string()).collect();
            sys::llama_model_free(model);
            ids
        };
        let _ = writeln!(out, "{name}: {}", ids.join(" "));
    }
    std::fs::write(root.join("tests/golden/eog.txt"), &out).expect("write tests/golden/eog.txt");
    print!("{out}");
}
