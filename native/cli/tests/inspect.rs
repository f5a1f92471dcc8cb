//! `lutra inspect` as a user runs it: the built binary on a generated GGUF file, and on
//! broken, empty, missing and non-GGUF files (a clear error and a non-zero exit, never
//! a panic).

use std::path::PathBuf;
use std::process::{Command, Output};

#[path = "../../../core/tests/common/mod.rs"]
mod common;

use common::gguf_writer::{write_gguf, Meta, Tensor};

/// A tiny llama GGUF v3: a few hyperparameters, a 5-token vocabulary, and tensors of
/// F32 (1), Q8_0 (1) and Q4_0 (2), data aligned to 32 bytes (bytes 0, 1, 2, … each).
fn tiny_llama() -> Vec<u8> {
    // (name, dims, ggml type id, bytes)
    let tensors: [(&str, &[u64], u32, usize); 4] = [
        ("token_embd.weight", &[64, 5], 8, 5 * 2 * 34),
        ("blk.0.attn_norm.weight", &[64], 0, 64 * 4),
        ("blk.0.attn_q.weight", &[64, 64], 2, 64 * 2 * 18),
        ("blk.0.attn_k.weight", &[64, 64], 2, 64 * 2 * 18),
    ];
    let tensors = tensors.map(|(name, dims, ggml_type, bytes)| Tensor {
        name: name.into(),
        dims: dims.to_vec(),
        ggml_type,
        data: (0..bytes).map(|i| i as u8).collect(),
    });
    let tokens = ["<unk>", "<s>", "</s>", "a", "b"].map(String::from).to_vec();
    let kvs = [
        ("general.architecture", Meta::Str("llama".into())),
        ("general.name", Meta::Str("tiny \"test\" llama".into())),
        ("llama.context_length", Meta::U32(128)),
        ("llama.embedding_length", Meta::U32(64)),
        ("llama.block_count", Meta::U32(1)),
        ("llama.rope.freq_base", Meta::F32(10000.0)),
        ("tokenizer.ggml.model", Meta::Str("llama".into())),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
    ]
    .map(|(k, v)| (k.to_string(), v));
    write_gguf(&kvs, &tensors)
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("inspect-{}-{name}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn lutra(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lutra")).env("LUTRA_IMPORT_CACHE", "off").arg("inspect").args(args).output().unwrap()
}

/// A refused file: non-zero exit, one `lutra: error:` line naming `needle`, no panic.
fn assert_refused(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit status {:?}, stderr {stderr}", out.status);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("lutra: error: "), "{stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn reports_a_valid_file() {
    let path = write("ok.gguf", &tiny_llama());
    let out = lutra(&[path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("GGUF v3, alignment 32, 8 metadata entries"), "{stdout}");
    assert!(stdout.contains("architecture    llama"), "{stdout}");
    assert!(stdout.contains("vocab size      5"), "{stdout}");
    assert!(stdout.contains("llama.context_length"), "{stdout}");
    assert!(stdout.contains("tensors         4 (8576 parameters)"), "{stdout}");
    let row = |ty: &str| stdout.lines().find(|l| l.trim_start().starts_with(ty)).unwrap_or_else(|| panic!("no {ty} row in {stdout}"));
    let cols = |ty: &str| row(ty).split_whitespace().skip(1).take(2).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(cols("F32"), ["1", "256"]);
    assert_eq!(cols("Q4_0"), ["2", "4608"]);
    assert_eq!(cols("Q8_0"), ["1", "340"]);
    assert_eq!(cols("total"), ["4", "5204"]);
    // bits per weight in the file, from ggml's block geometry: 34 bytes per 32 (Q8_0),
    // 18 per 32 (Q4_0), 4 bytes per value (F32)
    let bits = |ty: &str| row(ty).split_whitespace().nth(5).unwrap_or_default().to_owned();
    assert_eq!([bits("F32"), bits("Q8_0"), bits("Q4_0")], ["32.000", "8.500", "4.500"]);

    let out = lutra(&["--json", path.to_str().unwrap()]);
    assert!(out.status.success());
    let json = String::from_utf8_lossy(&out.stdout);
    assert_eq!(json.lines().count(), 1);
    for part in [
        "\"version\":3",
        "\"architecture\":\"llama\"",
        "\"name\":\"tiny \\\"test\\\" llama\"",
        "\"vocab_size\":5",
        "\"llama.context_length\":128",
        "\"llama.rope.freq_base\":10000",
        "\"tensor_count\":4",
        "{\"type\":\"Q4_0\",\"id\":2,\"tensors\":2,\"bytes\":4608}",
        "\"total_bytes\":5204",
    ] {
        assert!(json.contains(part), "expected {part} in {json}");
    }

    // the kernels each type runs on: on the scalar tier Q4_0 is looked up, Q8_0 multiplied
    let out = Command::new(env!("CARGO_BIN_EXE_lutra"))
        .env("LUTRA_IMPORT_CACHE", "off")
        .args(["inspect", "--kernels", path.to_str().unwrap()])
        .env("LUTRA_MAX_ISA", "scalar")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("kernels         scalar"), "{stdout}");
    let kernel = |ty: &str| stdout.lines().rfind(|l| l.trim_start().starts_with(ty)).unwrap_or_default().to_owned();
    assert!(kernel("Q4_0").ends_with("table lookups (bit planes)"), "{stdout}");
    assert!(kernel("Q8_0").ends_with("int8 dot products (int8 codes)"), "{stdout}");
    // imported bits per weight: Q4_0 as 4 bit planes with an f16 scale per 32 weights
    // (4.5, as the file); Q8_0 as int8 codes with f16 scales, its 5 rows padded to 8
    // (8.5 · 8/5 = 13.6); F32 norms kept as f32
    let imported = |ty: &str| kernel(ty).split_whitespace().skip(1).take(3).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(imported("Q4_0"), ["4.500", "4.500", "1.000"], "{stdout}");
    assert_eq!(imported("Q8_0"), ["8.500", "13.600", "1.600"], "{stdout}");
    assert_eq!(imported("F32"), ["32.000", "32.000", "1.000"], "{stdout}");
    let out = Command::new(env!("CARGO_BIN_EXE_lutra"))
        .env("LUTRA_IMPORT_CACHE", "off")
        .args(["inspect", "--kernels", "--json", path.to_str().unwrap()])
        .env("LUTRA_MAX_ISA", "scalar")
        .output()
        .unwrap();
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains("\"kernels\":{\"tier\":\"scalar\",\"types\":{"), "{json}");
    assert!(json.contains("\"Q4_0\":\"table lookups (bit planes)\""), "{json}");
    assert!(json.contains("\"Q4_0\":{\"bytes\":4608,\"file_bits_per_weight\":4.5,\"bits_per_weight\":4.5}"), "{json}");
    assert!(json.trim_end().ends_with("}}}"), "{json}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn refuses_truncated_files() {
    let bytes = tiny_llama();
    for (i, len) in [bytes.len() - 1, bytes.len() / 2, 100, 30, 3].into_iter().enumerate() {
        let path = write(&format!("cut{i}.gguf"), &bytes[..len]);
        assert_refused(&lutra(&[path.to_str().unwrap()]), "truncated");
        std::fs::remove_file(path).unwrap();
    }
}

#[test]
fn refuses_missing_empty_and_foreign_files() {
    let missing = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no-such-model.gguf");
    assert_refused(&lutra(&[missing.to_str().unwrap()]), "no-such-model.gguf");

    let empty = write("empty.gguf", &[]);
    assert_refused(&lutra(&[empty.to_str().unwrap()]), "empty file");
    std::fs::remove_file(empty).unwrap();

    let text = write("text.bin", b"just some text, not a model\n");
    assert_refused(&lutra(&[text.to_str().unwrap()]), "not a GGUF file");
    std::fs::remove_file(text).unwrap();

    // A directory is not a model either.
    assert_refused(&lutra(&[env!("CARGO_TARGET_TMPDIR")]), "lutra: error:");
}

#[test]
fn refuses_hostile_headers() {
    let mut bytes = tiny_llama();
    bytes[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let path = write("count.gguf", &bytes);
    assert_refused(&lutra(&[path.to_str().unwrap()]), "cannot fit");
    std::fs::remove_file(path).unwrap();

    let mut bytes = tiny_llama();
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    let path = write("v1.gguf", &bytes);
    assert_refused(&lutra(&[path.to_str().unwrap()]), "unsupported GGUF version 1");
    std::fs::remove_file(path).unwrap();
}
