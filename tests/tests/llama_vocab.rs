//! llama.cpp's own tokenizer test suite (`models/ggml-vocab-*.gguf` with `.inp` test
//! strings and `.out` ids, from the llama-cpp-python sdist: `cargo xtask models vocab`):
//! for every vocabulary whose tokenizer type lutra has, every case must give llama.cpp's
//! ids (`llama_tokenize(text, add_special = false, parse_special = false)`, as
//! llama.cpp's `test-tokenizer-0` calls it), and decoding them must give the text back
//! where the tokenizer can represent it. Prints a table: vocab, type, cases, passed.

use std::path::PathBuf;

use lutra_core::formats::gguf::Gguf;
use lutra_core::tokenizer::bpe::BpeTokenizer;
use lutra_core::tokenizer::spm::SpmTokenizer;
use lutra_core::tokenizer::Tokenizer;

fn vocab_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/llama-vocab");
    assert!(dir.join("ggml-vocab-llama-bpe.gguf.out").is_file(), "{} missing: run `cargo xtask models vocab`", dir.display());
    dir
}

/// The test strings of a `.inp` file and the ids of its `.out` file, paired.
fn cases(inp: &str, out: &str) -> Vec<(String, Vec<u32>)> {
    const SEPARATOR: &str = "\n__ggml_vocab_test__\n";
    let mut texts: Vec<&str> = inp.split(SEPARATOR).collect();
    // the file ends with a separator: an empty piece after it
    if texts.last() == Some(&"") {
        texts.pop();
    }
    let ids: Vec<Vec<u32>> = out.lines().map(|l| l.split_whitespace().map(|t| t.parse().expect("an id")).collect()).collect();
    assert_eq!(texts.len(), ids.len(), "{} test strings, {} id lines", texts.len(), ids.len());
    texts.into_iter().map(String::from).zip(ids).collect()
}

/// A tokenizer lutra has for a vocabulary file, by its `tokenizer.ggml.model`.
enum Vocab {
    Spm(SpmTokenizer),
    Bpe(BpeTokenizer),
}

impl Vocab {
    fn from_gguf(g: &Gguf<'_>) -> Option<Result<Vocab, String>> {
        match g.get_str("tokenizer.ggml.model")? {
            "llama" => Some(SpmTokenizer::from_gguf(g).map(Vocab::Spm).map_err(|e| e.to_string())),
            "gpt2" => Some(BpeTokenizer::from_gguf(g).map(Vocab::Bpe).map_err(|e| e.to_string())),
            _ => None,
        }
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        match self {
            Vocab::Spm(t) => t.encode_llama(text, false, false, &mut out).map_err(|e| e.to_string())?,
            Vocab::Bpe(t) => t.encode_llama(text, false, false, &mut out).map_err(|e| e.to_string())?,
        }
        Ok(out)
    }

    fn is_eog(&self, token: u32) -> bool {
        match self {
            Vocab::Spm(t) => t.is_eog(token),
            Vocab::Bpe(t) => t.is_eog(token),
        }
    }

    fn decode(&self, ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Vocab::Spm(t) => t.decode(ids, &mut out).unwrap(),
            Vocab::Bpe(t) => t.decode(ids, &mut out).unwrap(),
        }
        out
    }
}

#[test]
fn every_supported_vocabulary_tokenizes_as_llama_cpp() {
    let dir = vocab_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf") && p.with_extension("gguf.out").is_file())
        .collect();
    files.sort();
    let mut table =
        vec!["| vocab | tokenizer | cases | ids equal llama.cpp's | decode(encode(s)) == s |".to_string(), "|---|---|---|---|---|".into()];
    let (mut failures, mut checked) = (Vec::new(), 0);
    for path in files {
        let name = path.file_stem().unwrap().to_string_lossy().trim_start_matches("ggml-vocab-").to_string();
        let bytes = std::fs::read(&path).unwrap();
        let g = Gguf::parse(&bytes).unwrap();
        let kind = g.get_str("tokenizer.ggml.model").unwrap_or("?").to_string();
        let vocab = match Vocab::from_gguf(&g) {
            None => {
                table.push(format!("| {name} | {kind} | — | not supported | — |"));
                continue;
            }
            Some(v) => v.unwrap_or_else(|e| panic!("{name}: {e}")),
        };
        let inp = std::fs::read_to_string(path.with_extension("gguf.inp")).unwrap();
        let out = std::fs::read_to_string(path.with_extension("gguf.out")).unwrap();
        let cases = cases(&inp, &out);
        let (mut passed, mut round_trips) = (0, 0);
        for (text, want) in &cases {
            match vocab.encode(text) {
                Ok(got) if &got == want => passed += 1,
                got => failures.push(format!("{name}: {text:?}: llama.cpp {want:?}, lutra {got:?}")),
            }
            round_trips += usize::from(vocab.decode(want) == text.as_bytes());
        }
        checked += 1;
        table.push(format!("| {name} | {kind} | {} | {passed} | {round_trips} |", cases.len()));
    }
    println!("{}", table.join("\n"));
    assert!(checked >= 2, "only {checked} vocabularies checked");
    assert!(failures.is_empty(), "{} cases differ:\n{}", failures.len(), failures.join("\n"));
}

/// Generation ends at exactly the tokens where llama.cpp's does (tests/golden/eog.txt,
/// `llama_vocab_is_eog` over every id: EOS, end of turn, and the tokens llama.cpp
/// recognizes by their text, e.g. Llama 3's `<|end_of_text|>` and `<|eot_id|>`, Qwen's
/// `<|im_end|>` and `<|endoftext|>`).
#[test]
fn end_of_generation_tokens_are_llama_cpps() {
    let golden = std::fs::read_to_string(lutra_tests::golden::golden_path("golden/eog.txt")).unwrap();
    let mut checked = 0;
    for line in golden.lines().filter(|l| !l.starts_with('#')) {
        let (name, ids) = line.split_once(": ").unwrap();
        let want: Vec<u32> = ids.split_whitespace().map(|t| t.parse().unwrap()).collect();
        let bytes = std::fs::read(vocab_dir().join(format!("ggml-vocab-{name}.gguf"))).unwrap();
        let g = Gguf::parse(&bytes).unwrap();
        let vocab = Vocab::from_gguf(&g).unwrap().unwrap();
        let n = g.get_array("tokenizer.ggml.tokens").unwrap().len() as u32;
        let got: Vec<u32> = (0..n).filter(|&t| vocab.is_eog(t)).collect();
        assert_eq!(got, want, "{name}");
        checked += 1;
    }
    assert_eq!(checked, lutra_tests::golden::EOG_VOCABS.len());
}
