//! `lutra tokenize` as a user runs it, against llama.cpp's tokenizer test files
//! (`cargo xtask models vocab`): `--ids --no-bos` prints llama.cpp's ids for every test
//! string of SentencePiece and byte-level BPE vocabularies, in llama-tokenize's
//! `[1, 2, 3]` form.

use std::path::PathBuf;
use std::process::Command;

fn vocab(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/llama-vocab").join(format!("ggml-vocab-{name}.gguf"));
    assert!(p.is_file(), "{} missing: run `cargo xtask models vocab`", p.display());
    p
}

fn lutra(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lutra")).env("LUTRA_IMPORT_CACHE", "off").args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn ids_equal_llama_cpp_on_its_test_strings() {
    let text = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("tokenize-{}.txt", std::process::id()));
    // every case of the small SentencePiece files; every 9th of the BPE ones (each run
    // loads 150k-280k merges; tests/tests/llama_vocab.rs checks every case in-process)
    for (name, every) in [("llama-spm", 1), ("phi-3", 1), ("llama-bpe", 9), ("qwen2", 9), ("gpt-2", 9)] {
        let path = vocab(name);
        let inp = std::fs::read_to_string(path.with_extension("gguf.inp")).unwrap();
        let out = std::fs::read_to_string(path.with_extension("gguf.out")).unwrap();
        let texts = inp.split("\n__ggml_vocab_test__\n");
        for (case, (s, ids)) in texts.zip(out.lines()).enumerate().step_by(every) {
            std::fs::write(&text, s).unwrap();
            let (ok, stdout, stderr) =
                lutra(&["tokenize", "-m", path.to_str().unwrap(), "-f", text.to_str().unwrap(), "--ids", "--no-bos"]);
            assert!(ok, "{name} case {case}: {stderr}");
            let want: Vec<&str> = ids.split_whitespace().collect();
            assert_eq!(stdout, format!("[{}]\n", want.join(", ")), "{name} case {case}: {s:?}");
        }
    }
    std::fs::remove_file(&text).ok();
}

#[test]
fn bos_control_tokens_and_unsupported_vocabularies() {
    let spm = vocab("llama-spm");
    let spm = spm.to_str().unwrap();
    let (ok, stdout, _) = lutra(&["tokenize", "-m", spm, "-p", "Hello world", "--ids"]);
    assert!(ok && stdout.starts_with("[1, ") && !stdout.starts_with("[1, 1,"), "{stdout}");
    let (ok, stdout, _) = lutra(&["tokenize", "-m", spm, "-p", "<s>", "--ids", "--no-bos", "--parse-special"]);
    assert!(ok && stdout == "[1]\n", "{stdout}");
    let (ok, stdout, _) = lutra(&["tokenize", "-m", spm, "-p", "<s>", "--ids", "--no-bos"]);
    assert!(ok && stdout != "[1]\n", "without --parse-special <s> is text: {stdout}");
    let (ok, stdout, _) = lutra(&["tokenize", "-m", spm, "-p", "Hi"]);
    assert!(ok && stdout.lines().next() == Some("     1 -> '<s>'"), "{stdout}");
    let gemma4 = vocab("gemma-4");
    let (ok, _, stderr) = lutra(&["tokenize", "-m", gemma4.to_str().unwrap(), "-p", "Hi"]);
    assert!(!ok && stderr.contains("tokenizer.ggml.model \"gemma4\" is not supported"), "{stderr}");
}
