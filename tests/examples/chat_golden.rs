//! Writes `tests/golden/chat-templates.txt`: llama.cpp's own `llama_chat_apply_template`
//! output for every builtin template name, every `tokenizer.chat_template` of the
//! vocab-only GGUFs in `models/llama-vocab/`, and a few synthetic template strings that
//! probe its detection rules, over the conversations of `lutra_tests::chat` (each with
//! `add_ass` false and true), so CI checks `lutra_core::chat` against llama.cpp without
//! building it (`tests/tests/chat_template.rs`). Format in `tests/src/chat.rs`.
//!
//! llama.cpp's C API does not say which kind it detected; the `detected` record lists
//! the builtin names whose output equals the template's in every case.
//!
//! ```text
//! RUSTFLAGS="-C target-cpu=native" CARGO_TARGET_DIR=target/llamacpp \
//!     cargo run -p lutra-tests --features llamacpp --example chat_golden [-- OUT]
//! ```

use std::ffi::{c_char, CStr, CString};
use std::path::Path;

use lutra_bench::llamacpp::sys::{llama_chat_apply_template, llama_chat_builtin_templates, llama_chat_message};
use lutra_core::formats::gguf::Gguf;
use lutra_tests::chat::{conversations, Case, ChatGolden, TemplateCases, CHAT_GOLDEN};
use lutra_tests::golden::golden_path;

fn builtin_names() -> Vec<String> {
    // SAFETY: a null output with len 0 only asks for the count.
    let n = unsafe { llama_chat_builtin_templates(std::ptr::null_mut(), 0) };
    let mut ptrs = vec![std::ptr::null::<c_char>(); n as usize];
    // SAFETY: `ptrs` has room for `len` pointers; llama.cpp writes at most that many,
    // each pointing at a static NUL-terminated name.
    unsafe { llama_chat_builtin_templates(ptrs.as_mut_ptr(), ptrs.len()) };
    ptrs.iter()
        .map(|&p| {
            // SAFETY: p was written by llama.cpp above: a static NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_str().expect("builtin name is UTF-8").to_owned()
        })
        .collect()
}

/// llama.cpp's formatting of `messages` with template `tmpl`; `None` where it returns -1.
fn apply(tmpl: &str, messages: &[(String, String)], add_ass: bool) -> Option<String> {
    let tmpl = CString::new(tmpl).expect("template without NUL");
    let owned: Vec<(CString, CString)> = messages
        .iter()
        .map(|(r, c)| (CString::new(r.as_str()).expect("role without NUL"), CString::new(c.as_str()).expect("content without NUL")))
        .collect();
    let chat: Vec<llama_chat_message> = owned.iter().map(|(r, c)| llama_chat_message { role: r.as_ptr(), content: c.as_ptr() }).collect();
    // SAFETY: every pointer is a live NUL-terminated string (owned by `tmpl`/`owned`),
    // `chat` holds `chat.len()` messages, and a null buffer of length 0 is never written.
    let n = unsafe { llama_chat_apply_template(tmpl.as_ptr(), chat.as_ptr(), chat.len(), add_ass, std::ptr::null_mut(), 0) };
    if n < 0 {
        return None;
    }
    // strncpy copies the output and a NUL when there is room: one byte more than its length
    let mut buf = vec![0u8; n as usize + 1];
    // SAFETY: as above; `buf` has `buf.len()` writable bytes and llama.cpp writes at most
    // `length` of them.
    let m =
        unsafe { llama_chat_apply_template(tmpl.as_ptr(), chat.as_ptr(), chat.len(), add_ass, buf.as_mut_ptr().cast(), buf.len() as i32) };
    assert_eq!(m, n, "llama.cpp formatted the same chat to different lengths");
    buf.truncate(n as usize);
    Some(String::from_utf8(buf).expect("llama.cpp output is UTF-8"))
}

fn run(label: String, tmpl: String) -> TemplateCases {
    let mut cases = Vec::new();
    for messages in conversations() {
        for add_ass in [false, true] {
            let out = apply(&tmpl, &messages, add_ass);
            cases.push(Case { add_ass, messages: messages.clone(), out });
        }
    }
    TemplateCases { label, tmpl, detected: String::new(), cases }
}

/// Template strings probing the detection rules' edges.
const SYNTHETIC: &[&str] = &[
    "mistral",
    "mistral-custom {{ messages }}",
    "CHATML",
    "chatml ",
    "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}",
    "",
    "[INST] <<SYS>> bos_token + '[INST]",
    "[INST] <<SYS>> content.strip()",
    "[INST] <<SYS>>",
    "[INST] [SYSTEM_PROMPT] <|im_start|>",
    "' [INST] ' + system_message",
    "[AVAILABLE_TOOLS] \"[INST]\"",
    "[AVAILABLE_TOOLS][INST]",
    "<|im_start|><|im_sep|>",
    "<|im_start|><end_of_utterance>",
    "<|assistant|><|user|></s>",
    "<|assistant|><|user|>",
    "<|assistant|><|user|><|tool_declare|>",
    "<|user|><|endoftext|><start_of_turn>",
    "<start_of_turn>user",
    "USER: ASSISTANT: SYSTEM: ",
    "<|start_of_role|><tools>g4_default_system_message",
    "<|start_of_role|><tool_call>",
    "<|start_header_id|><|end_header_id|>",
    "[|system|][|assistant|][|endofturn|][|tool|]",
    "<role>ASSISTANT</role>\"HUMAN\"<think>",
    "<|begin|><|end|><|content|>",
    "<|endofuserprompt|>",
    "<｜Assistant｜><｜User｜><｜end▁of▁sentence｜>",
    "'Assistant: ' + message['content'] + eos_token",
    "<|extra_0|><|extra_4|>",
    "<|start|><|channel|>",
];

fn main() {
    let out_path = std::env::args().nth(1).map(Into::into).unwrap_or_else(|| golden_path(CHAT_GOLDEN));
    let builtins = builtin_names();
    let mut templates: Vec<TemplateCases> = builtins.iter().map(|n| run(format!("name:{n}"), n.clone())).collect();
    let n_builtin = templates.len();

    let vocab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/llama-vocab");
    let mut files: Vec<_> = std::fs::read_dir(&vocab)
        .unwrap_or_else(|e| panic!("{}: {e}", vocab.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    files.sort();
    for f in files {
        let bytes = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let g = Gguf::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if let Some(t) = g.get_str("tokenizer.chat_template") {
            let name = f.file_name().expect("file name").to_string_lossy();
            templates.push(run(format!("gguf:{name}"), t.to_owned()));
        }
    }
    for (i, s) in SYNTHETIC.iter().enumerate() {
        templates.push(run(format!("synthetic:{i}"), (*s).to_owned()));
    }

    // the kind, by output: the builtin names formatting every case identically
    let fingerprints: Vec<(String, Vec<Option<String>>)> =
        templates[..n_builtin].iter().map(|t| (t.tmpl.clone(), t.cases.iter().map(|c| c.out.clone()).collect())).collect();
    for t in &mut templates {
        let outs: Vec<Option<String>> = t.cases.iter().map(|c| c.out.clone()).collect();
        t.detected = if outs.iter().all(Option::is_none) {
            "unknown".into()
        } else {
            let same: Vec<&str> = fingerprints.iter().filter(|(_, f)| *f == outs).map(|(n, _)| n.as_str()).collect();
            if same.is_empty() {
                "none".into()
            } else {
                same.join(",")
            }
        };
    }

    let golden = ChatGolden { builtins, templates };
    let bytes = golden.write();
    std::fs::write(&out_path, &bytes).unwrap_or_else(|e| panic!("{}: {e}", out_path.display()));
    let cases: usize = golden.templates.iter().map(|t| t.cases.len()).sum();
    println!("{} templates, {cases} cases, {} bytes -> {}", golden.templates.len(), bytes.len(), out_path.display());
    for t in &golden.templates {
        println!("{:<40} detected {}", t.label, t.detected);
    }
}
