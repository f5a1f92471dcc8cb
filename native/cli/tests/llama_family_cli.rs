//! `lutra` as a user runs it on Llama-family GGUF files with real vocabularies: tiny
//! random-weight `qwen2`, `llama` (Llama 3 style) and `qwen3` models carrying the
//! tokenizers of llama.cpp's vocab files (`cargo xtask models vocab`: Qwen 2's byte-level
//! BPE and its ChatML template, Llama 3's BPE, Phi-3's SentencePiece and its template).
//! `inspect`, `run`, `perplexity` and `tokenize` work on them; `chat`, driven through a
//! pipe, feeds exactly the conversation as llama.cpp's `llama_chat_apply_template`
//! formats it (lutra_core::chat, which tests/tests/chat_template.rs checks against
//! llama.cpp's own output, 2184 of 2184 cases), turn after turn, for each template kind.

#[allow(dead_code)]
#[path = "../../../core/tests/common"]
mod common {
    pub mod gguf_writer;
    pub mod tiny_llama;
}

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::tiny_llama::{with_vocab, VARIANTS};
use lutra_core::chat::ChatTemplate;

fn vocab(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/llama-vocab").join(format!("ggml-vocab-{name}.gguf"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}: run `cargo xtask models vocab`", p.display()))
}

/// A tiny model of `variant` (index into VARIANTS) with vocabulary `vocab_name`, written
/// once per test run (over what an earlier run left).
fn model(variant: usize, vocab_name: &str) -> PathBuf {
    static WRITTEN: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-{vocab_name}.gguf", VARIANTS[variant].name));
    let mut written = WRITTEN.lock().unwrap();
    if !written.contains(&path) {
        // written beside and renamed over: nextest runs each test in its own process, and
        // rewriting a file in place that another test's lutra has mapped kills it (SIGBUS)
        let partial = path.with_extension(format!("{}.partial", std::process::id()));
        std::fs::write(&partial, with_vocab(&VARIANTS[variant], &vocab(vocab_name)).unwrap()).unwrap();
        std::fs::rename(&partial, &path).unwrap();
        written.push(path.clone());
    }
    path
}

fn lutra(args: &[&str], stdin: &str) -> (bool, String, String) {
    lutra_with_cache("off", args, stdin)
}

/// `lutra` with `LUTRA_IMPORT_CACHE` set to `cache` (a directory, or `off`).
fn lutra_with_cache(cache: &str, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lutra"))
        .env("LUTRA_IMPORT_CACHE", cache)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Undoes Rust's `{:?}` escaping of a string (the escapes `--verbose-prompt` prints).
fn unescape(quoted: &str) -> String {
    let s = quoted.strip_prefix('"').and_then(|s| s.strip_suffix('"')).expect("a quoted string");
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('u') => {
                let hex: String = chars.by_ref().skip(1).take_while(|&c| c != '}').collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
            }
            Some(other) => out.push(other),
            None => panic!("dangling escape in {quoted}"),
        }
    }
    out
}

#[test]
fn inspect_run_perplexity_and_tokenize_work_on_llama_family_files() {
    for (variant, vocab_name, arch, template) in
        [(2, "qwen2", "qwen2", Some("chatml")), (0, "llama-bpe", "llama", None), (3, "phi-3", "qwen3", Some("phi3"))]
    {
        let path = model(variant, vocab_name);
        let m = path.to_str().unwrap();
        let (ok, stdout, stderr) = lutra(&["inspect", m], "");
        assert!(ok, "inspect {vocab_name}: {stderr}");
        assert!(stdout.contains(&format!("architecture    {arch}")), "{stdout}");
        if let Some(t) = template {
            assert!(stdout.contains(&format!("chat template   {t} ")), "{stdout}");
        }

        let (ok, stdout, stderr) = lutra(&["run", "-m", m, "-p", "The otter swims", "-n", "12", "--temp", "0", "-t", "1"], "");
        assert!(ok, "run {vocab_name}: {stderr}");
        assert!(stdout.starts_with("The otter swims"), "{vocab_name}: {stdout}");
        assert!(stderr.contains("generation:"), "{stderr}");

        let text = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("ppl-{vocab_name}-{}.txt", std::process::id()));
        std::fs::write(&text, "The river otter swims and eats fish in the water. ".repeat(12)).unwrap();
        let (ok, stdout, stderr) = lutra(&["perplexity", "-m", m, "-f", text.to_str().unwrap(), "--ctx", "32", "-t", "1"], "");
        assert!(ok && stdout.starts_with("perplexity "), "perplexity {vocab_name}: {stdout}{stderr}");

        let (ok, stdout, _) = lutra(&["tokenize", "-m", m, "-p", "Hello world", "--ids", "--no-bos"], "");
        let (ok_vocab, stdout_vocab, _) = lutra(
            &[
                "tokenize",
                "-m",
                &format!("{}/../../models/llama-vocab/ggml-vocab-{vocab_name}.gguf", env!("CARGO_MANIFEST_DIR")),
                "-p",
                "Hello world",
                "--ids",
                "--no-bos",
            ],
            "",
        );
        assert!(
            ok && ok_vocab && stdout == stdout_vocab,
            "{vocab_name}: the model tokenizes as its vocabulary: {stdout} vs {stdout_vocab}"
        );

        // the chat format recognized from the file's own template, as llama.cpp names it
        let (_, _, stderr) = lutra(&["chat", "-m", m, "-n", "0", "--verbose-prompt"], "hi\n");
        match template {
            Some(t) => assert!(stderr.contains("prompt:"), "{vocab_name} ({t}): {stderr}"),
            None => assert!(stderr.contains("no chat template lutra recognizes") && stderr.contains("--chat-template"), "{stderr}"),
        }
        std::fs::remove_file(&text).ok();
    }
}

/// Two turns through a pipe for each template kind: every prompt fed is the formatted
/// conversation after what was fed before, so that everything fed (prompts and answers)
/// is llama.cpp's formatting of the whole conversation, the answers as generated: where
/// a template reformats an answer (Gemma's trims it, Mistral v7's puts a space before
/// it) the session keeps the generated text, and nothing is fed twice.
#[test]
fn chat_through_a_pipe_feeds_llama_cpps_formatting_of_the_conversation() {
    let path = model(2, "qwen2");
    let m = path.to_str().unwrap();
    let system = "You are a helpful otter.";
    let turns = ["Where do otters sleep?", "And what do they eat?"];
    let mut exact = 0;
    for name in ["chatml", "llama3", "llama2", "mistral-v7", "phi3", "gemma", "zephyr", "deepseek3", "command-r", "vicuna"] {
        let (ok, _, stderr) = lutra(
            &["chat", "-m", m, "--chat-template", name, "--system", system, "-n", "6", "--temp", "0", "-t", "1", "--verbose-prompt"],
            &format!("{}\n{}\n", turns[0], turns[1]),
        );
        assert!(ok, "{name}: {stderr}");
        let (mut fed, mut answers, mut restarts) = (String::new(), Vec::new(), 0);
        for line in stderr.lines() {
            if line.starts_with("restart: ") {
                // the session was cleared: everything is fed again
                fed.clear();
                restarts += 1;
            } else if let Some(q) = line.strip_prefix("prompt: ") {
                fed.push_str(&unescape(q));
            } else if let Some(q) = line.strip_prefix("answer: ") {
                let a = unescape(q);
                fed.push_str(&a);
                answers.push(a);
            }
        }
        assert_eq!(answers.len(), 2, "{name}: {stderr}");
        eprintln!("{name}: {} bytes fed, {restarts} restarts", fed.len());
        assert_eq!(restarts, 0, "{name}: {stderr}");
        let messages = [("system", system), ("user", turns[0]), ("assistant", answers[0].as_str()), ("user", turns[1])];
        let template = ChatTemplate::from_name(name).unwrap();
        let mut first = String::new();
        template.apply(&messages[..2], true, &mut first);
        let first_fed = stderr.lines().find_map(|l| l.strip_prefix("prompt: ")).map(unescape);
        assert_eq!(first_fed.as_ref(), Some(&first), "{name}: the first prompt is not llama.cpp's formatting");
        // the session holds llama.cpp's formatting of the conversation with the cue for
        // the second answer, then that answer; the first answer stands as generated where
        // the template would reformat it (trimmed, or after a space)
        let mut want = String::new();
        template.apply(&messages, true, &mut want);
        want.push_str(&answers[1]);
        let after_answer =
            fed.strip_prefix(&first).and_then(|f| f.strip_prefix(answers[0].as_str())).expect("first prompt, then the answer");
        let rendered = want.strip_prefix(&first).and_then(|w| w.strip_suffix(after_answer));
        assert_eq!(rendered.map(str::trim), Some(answers[0].trim()), "{name}: fed\n{fed:?}\nllama.cpp formats\n{want:?}");
        if rendered == Some(answers[0].as_str()) {
            exact += 1;
        }
    }
    assert!(exact >= 7, "only {exact} templates fed exactly llama.cpp's text");
    let (ok, _, stderr) = lutra(&["chat", "-m", m, "--chat-template", "no-such-template"], "hi\n");
    assert!(!ok && stderr.contains("unknown chat template \"no-such-template\"") && stderr.contains("chatml"), "{stderr}");
}

/// `lutra pack` takes `llama`, `qwen2` and `qwen3` GGUF files: the `.lutra` file runs,
/// keeps the chat template (its `chat` formats turns as the GGUF's does) and the
/// tokenizer, and writes text (the same text where this machine's fastest kernel reads
/// the portable code order; tests/tests/llama_family.rs checks packed logits against
/// llama.cpp's on every variant).
#[test]
fn pack_writes_llama_family_files_that_run() {
    for (variant, vocab_name) in [(2, "qwen2"), (0, "llama-bpe"), (3, "phi-3"), (4, "qwen2")] {
        let path = model(variant, vocab_name);
        let packed = path.with_extension(format!("{}.lutra", std::process::id()));
        let (m, p) = (path.to_str().unwrap(), packed.to_str().unwrap());
        let (ok, _, stderr) = lutra(&["pack", "-m", m, "-o", p], "");
        assert!(ok && stderr.contains("packed "), "pack {vocab_name}: {stderr}");
        let run = |file: &str| lutra(&["run", "-m", file, "-p", "The otter swims", "-n", "12", "--temp", "0", "-t", "1"], "");
        let ((ok, from_gguf, stderr), (ok_packed, from_packed, stderr_packed)) = (run(m), run(p));
        assert!(ok && ok_packed, "{vocab_name}: {stderr}{stderr_packed}");
        assert!(from_packed.starts_with("The otter swims") && from_packed.len() > "The otter swims".len(), "{from_packed}");
        if lutra_core::Isa::best().interleave() == lutra_core::Interleave::Shuffle {
            assert_eq!(from_packed, from_gguf, "{vocab_name}: packed and GGUF text differ");
        }
        let prompt = |file: &str| lutra(&["chat", "-m", file, "-n", "0", "--verbose-prompt"], "hi\n").2;
        let (gguf_prompt, packed_prompt) = (prompt(m), prompt(p));
        let fed = |s: &str| s.lines().filter(|l| l.contains("prompt:")).map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(fed(&packed_prompt), fed(&gguf_prompt), "{vocab_name}: the packed file formats chat turns differently");
        std::fs::remove_file(&packed).ok();
    }
}

/// The import cache: the first load of a GGUF file keeps its imported weights (and says
/// where), the next reads them in place with the same greedy text, a damaged entry is
/// imported again and replaced, a changed source file gets a new entry that replaces
/// the old one, and `--no-import-cache` neither reads nor writes one.
#[test]
fn the_import_cache_keeps_imported_weights_and_gives_the_same_text() {
    let source = model(2, "qwen2");
    // a copy of its own, so that changing it disturbs no other test
    let path = source.with_extension(format!("cache-{}.gguf", std::process::id()));
    std::fs::copy(&source, &path).unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("import-cache-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let (m, cache) = (path.to_str().unwrap(), dir.to_str().unwrap());
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "-m", m, "-p", "The otter swims", "-n", "16", "--temp", "0", "-t", "1"];
        args.extend_from_slice(extra);
        lutra_with_cache(cache, &args, "")
    };
    let entries = || -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&dir).map_or(vec![], |d| d.flatten().map(|e| e.path()).collect());
        v.sort();
        v
    };

    let (ok, uncached, stderr) = run(&["--no-import-cache"]);
    assert!(ok && !stderr.contains("import cache") && !stderr.contains("kept in"), "{stderr}");
    assert!(entries().is_empty(), "--no-import-cache wrote {:?}", entries());

    let (ok, first, stderr) = run(&[]);
    assert!(ok && stderr.contains("kept the imported weights in") && stderr.contains(cache), "{stderr}");
    let kept = entries();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].extension().is_some_and(|e| e == "lutra"), "{kept:?}");

    let (ok, second, stderr) = run(&[]);
    assert!(ok && stderr.contains("reading the imported weights kept in"), "{stderr}");
    assert_eq!((&first, &second), (&uncached, &uncached), "cached and imported text differ");

    // a damaged entry: refused by its checksums, imported again, replaced
    let mut bytes = std::fs::read(&kept[0]).unwrap();
    let at = bytes.len() - 64;
    bytes[at] ^= 0x01;
    std::fs::write(&kept[0], &bytes).unwrap();
    let (ok, third, stderr) = run(&[]);
    assert!(ok && stderr.contains("unusable") && stderr.contains("kept the imported weights in"), "{stderr}");
    assert_eq!(third, uncached);
    assert_eq!(entries(), kept);

    // the source file changed (its modification time): a new entry replaces the old one
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(later).unwrap();
    let (ok, fourth, stderr) = run(&[]);
    assert!(ok && stderr.contains("kept the imported weights in"), "{stderr}");
    assert_eq!(fourth, uncached);
    let now = entries();
    assert!(now.len() == 1 && now != kept, "{kept:?} then {now:?}");

    std::fs::remove_dir_all(&dir).ok();
    std::fs::remove_file(&path).ok();
}
