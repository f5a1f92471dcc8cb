//! Every class of bad model file, as a user meets it: the library returns the typed
//! error, and `lutra run` exits with status 1 and one readable `lutra: error:` line,
//! never a panic. Each case damages one thing in a tiny valid Gemma 3 GGUF (the fuzzers'
//! seed model); the test prints the table of classes it checked.

#[path = "../../../core/tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::gguf_writer::{write_gguf, Meta};
use common::tiny_gemma::{meta_270m, tensors, with, with_tokenizer, Kvs};
use lutra_core::engine::{Error, Model};
use lutra_core::formats::gguf::GgufError;
use lutra_core::model::ModelError;
use lutra_core::tokenizer::spm::VocabError;

/// The metadata of a runnable one-layer model; prompts of its tokens ("t0".."t299", no
/// space or byte tokens) encode as they are.
fn runnable() -> Kvs {
    with(with_tokenizer(meta_270m(1)), "tokenizer.ggml.add_space_prefix", Some(Meta::Bool(false)))
}

/// A one-layer model file with metadata `kvs` (edited from [`runnable`]).
fn tiny(kvs: Kvs) -> Vec<u8> {
    write_gguf(&kvs, &tensors(1, 7))
}

/// Byte offsets of tensor `name`'s info record: its first dimension, type id and offset.
fn tensor_info(file: &[u8], name: &str) -> (usize, usize, usize) {
    let mut key = (name.len() as u64).to_le_bytes().to_vec();
    key.extend(name.as_bytes());
    let at = file.windows(key.len()).position(|w| w == key).unwrap_or_else(|| panic!("no tensor {name}")) + key.len();
    let n_dims = u32::from_le_bytes(file[at..at + 4].try_into().unwrap()) as usize;
    let dims = at + 4;
    let ty = dims + 8 * n_dims;
    (dims, ty, ty + 4)
}

fn put(file: &mut [u8], at: usize, bytes: &[u8]) {
    file[at..at + bytes.len()].copy_from_slice(bytes);
}

/// `bytes` with tensor `name`'s info changed by `edit(file, dims, type, offset)`.
fn edit_tensor(name: &str, edit: impl Fn(&mut Vec<u8>, usize, usize, usize)) -> Vec<u8> {
    let mut file = tiny(runnable());
    let (dims, ty, offset) = tensor_info(&file, name);
    edit(&mut file, dims, ty, offset);
    file
}

fn offset_of(file: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(file[at..at + 8].try_into().unwrap())
}

struct Class {
    name: &'static str,
    file: Vec<u8>,
    typed: fn(&Error) -> bool,
    message: &'static str,
}

fn classes() -> Vec<Class> {
    let good = tiny(runnable());
    let mut v = Vec::new();
    let mut add = |name, file, typed: fn(&Error) -> bool, message| v.push(Class { name, file, typed, message });

    add("truncated", good[..good.len() / 2].to_vec(), |e| matches!(e, Error::Gguf(GgufError::TensorPastEnd { .. })), "past the end");
    add("truncated header", good[..20].to_vec(), |e| matches!(e, Error::Gguf(GgufError::Truncated { .. })), "truncated GGUF");
    let mut f = good.clone();
    put(&mut f, 0, b"GGUX");
    add("wrong magic", f, |e| matches!(e, Error::Gguf(GgufError::BadMagic { .. })), "not a GGUF file");
    let mut f = good.clone();
    put(&mut f, 4, &4u32.to_le_bytes());
    add("wrong version", f, |e| matches!(e, Error::Gguf(GgufError::UnsupportedVersion { version: 4 })), "unsupported GGUF version 4");
    let mut f = good.clone();
    put(&mut f, 8, &(1u64 << 60).to_le_bytes());
    add("huge tensor count", f, |e| matches!(e, Error::Gguf(GgufError::CountTooLarge { .. })), "cannot fit");
    let mut f = good.clone();
    put(&mut f, 16, &u64::MAX.to_le_bytes());
    add("huge metadata count", f, |e| matches!(e, Error::Gguf(GgufError::CountTooLarge { .. })), "cannot fit");
    let f = edit_tensor("output_norm.weight", |f, _, _, at| {
        let far = offset_of(f, at) + (1 << 40);
        put(f, at, &far.to_le_bytes())
    });
    add("offset past the end", f, |e| matches!(e, Error::Gguf(GgufError::TensorPastEnd { .. })), "past the end");
    let f = edit_tensor("output_norm.weight", |f, _, _, at| {
        let off = offset_of(f, at) + 4;
        put(f, at, &off.to_le_bytes())
    });
    add("misaligned data", f, |e| matches!(e, Error::Gguf(GgufError::MisalignedTensor { .. })), "alignment");
    let f = edit_tensor("blk.0.attn_q.weight", |f, dims, _, _| {
        put(f, dims, &(1u64 << 62).to_le_bytes());
    });
    add("dimension product overflows", f, |e| matches!(e, Error::Gguf(GgufError::ShapeOverflow { .. })), "overflow");
    let f = edit_tensor("blk.0.attn_q.weight", |f, _, ty, _| put(f, ty, &99u32.to_le_bytes()));
    add(
        "unknown tensor type",
        f,
        |e| matches!(e, Error::Model(ModelError::Gguf(GgufError::UnknownTensorType { type_id: 99 }))),
        "ggml type id 99",
    );
    // IQ4_NL (type 20, no larger than the tensor's own blocks): a codebook type lutra
    // has no bit-plane form of
    let f = edit_tensor("blk.0.attn_q.weight", |f, _, ty, _| put(f, ty, &20u32.to_le_bytes()));
    add(
        "tensor type not importable (IQ4_NL matrix)",
        f,
        |e| matches!(e, Error::Model(ModelError::UnsupportedTensorType { .. })),
        "cannot import",
    );
    add(
        "shape disagrees with metadata",
        tiny(with(runnable(), "gemma3.feed_forward_length", Some(Meta::U32(256)))),
        |e| matches!(e, Error::Model(ModelError::BadTensorShape { .. })),
        "blk.0.ffn_gate.weight",
    );
    let mut f = good.clone();
    let at = f.windows(20).position(|w| w == b"general.architecture").unwrap();
    f[at + 3] = 0xff;
    add("bad UTF-8 in a metadata key", f, |e| matches!(e, Error::Gguf(GgufError::InvalidUtf8 { .. })), "UTF-8");
    let mut f = good.clone();
    let at = f.windows(6).position(|w| w == b"gemma3").unwrap();
    f[at + 2] = 0xff;
    add(
        "bad UTF-8 in a metadata value (the architecture)",
        f,
        |e| matches!(e, Error::Model(ModelError::MissingMetadata("general.architecture"))),
        "general.architecture",
    );
    let mut f = good.clone();
    let at = f.windows(21).position(|w| w == b"tokenizer.ggml.tokens").unwrap() + 21 + 4 + 4;
    put(&mut f, at, &(1u64 << 40).to_le_bytes());
    add("huge vocabulary", f, |e| matches!(e, Error::Gguf(GgufError::CountTooLarge { .. })), "cannot fit");
    let kvs = with(runnable(), "tokenizer.ggml.tokens", Some(Meta::Strs((0..400).map(|i| format!("t{i}")).collect())));
    add(
        "vocabulary beyond the model's",
        tiny(with(kvs, "tokenizer.ggml.scores", Some(Meta::F32s(vec![0.0; 400])))),
        |e| matches!(e, Error::Model(ModelError::BadTensorShape { .. })),
        "token_embd.weight",
    );
    add(
        "a tokenizer the architecture does not use (gpt2 BPE in a gemma3 file)",
        tiny(with(runnable(), "tokenizer.ggml.model", Some(Meta::Str("gpt2".into())))),
        |e| matches!(e, Error::Vocabulary(VocabError::WrongModel { .. })),
        "tokenizer.ggml.model",
    );
    add(
        "hyperparameter beyond the limits",
        tiny(with(runnable(), "gemma3.block_count", Some(Meta::U32(0x3e00_0001)))),
        |e| matches!(e, Error::Model(ModelError::Unsupported { .. })),
        "gemma3.block_count",
    );
    add(
        "another architecture",
        tiny(with(runnable(), "general.architecture", Some(Meta::Str("mamba".into())))),
        |e| matches!(e, Error::UnsupportedArchitecture(_)),
        "mamba",
    );
    v
}

fn lutra(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lutra")).env("LUTRA_IMPORT_CACHE", "off").args(args).output().unwrap()
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bad-{}-{name}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn every_bad_input_class_is_a_typed_error_and_exit_status_1() {
    let good = tiny(runnable());
    Model::from_gguf(&good).expect("the undamaged file loads");
    let mut table = vec!["| class | typed error | `lutra run` says (exit 1) |".to_string(), "|---|---|---|".into()];
    let mut failures = Vec::new();
    for (i, class) in classes().into_iter().enumerate() {
        let err = match Model::from_gguf(&class.file) {
            Ok(_) => {
                failures.push(format!("{}: the library loaded it", class.name));
                continue;
            }
            Err(e) => e,
        };
        if !(class.typed)(&err) {
            failures.push(format!("{}: unexpected error {err:?}", class.name));
        }
        let path = write(&format!("{i}.gguf"), &class.file);
        let out = lutra(&["run", "-m", path.to_str().unwrap(), "-n", "2"]);
        std::fs::remove_file(&path).ok();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = stderr.lines().find(|l| l.starts_with("lutra: error: ")).unwrap_or("");
        if out.status.code() != Some(1) || !line.contains(class.message) || stderr.contains("panicked") || !out.stdout.is_empty() {
            failures.push(format!("{}: status {:?}, expected {:?} in {stderr:?}", class.name, out.status.code(), class.message));
        }
        let variant = format!("{err:?}");
        let variant = variant.split([' ', '{', '(']).take(2).collect::<Vec<_>>().join("(");
        table.push(format!("| {} | `{variant}` | {} |", class.name, line.trim_start_matches("lutra: error: ").replace('|', "/")));
    }
    println!("{}", table.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A prompt longer than the context, and a context over `--max-memory`: refused
/// before anything is generated, the latter naming the context that fits, which then
/// runs; a generation that fills the context stops with a message.
#[test]
fn context_and_memory_limits_are_clear_refusals() {
    let path = write("ok.gguf", &tiny(runnable()));
    let p = path.to_str().unwrap();
    let long = "t1".repeat(200);
    let out = lutra(&["run", "-m", p, "-p", &long, "-n", "2", "--ctx", "64"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the prompt is") && out.stdout.is_empty(), "{stderr}");

    // generation that reaches the end of the context stops there, saying so
    let out = lutra(&["run", "-m", p, "-p", "t1", "-n", "100", "--ctx", "8", "--temp", "0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("stopped after 7 tokens: the context is full (8 positions"), "{stderr}");

    let model = Model::from_gguf(&tiny(runnable())).unwrap();
    let weights = model.info().matrix_bytes as u64;
    let limit = weights + model.dims().session_bytes(40) as u64;
    let out = lutra(&["run", "-m", p, "-p", "t1", "-n", "2", "--ctx", "64", "--max-memory", &limit.to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("more than the --max-memory limit") && stderr.contains("a context of 40 positions fits (--ctx 40)"),
        "{stderr}"
    );
    let out = lutra(&["run", "-m", p, "-p", "t1", "-n", "2", "--ctx", "40", "--max-memory", &limit.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let out = lutra(&["run", "-m", p, "-p", "t1", "-n", "2", "--max-memory", &(weights / 2).to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("its weights need"), "{stderr}");
    std::fs::remove_file(&path).ok();
}

/// A `.lutra` file made by `lutra pack` runs; with one byte of a tensor flipped, or cut
/// short, it is refused by its checksums, exit status 1.
#[test]
fn a_damaged_packed_file_is_refused() {
    let gguf = write("to-pack.gguf", &tiny(runnable()));
    let packed = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bad-{}-tiny.lutra", std::process::id()));
    let out = lutra(&["pack", "-m", gguf.to_str().unwrap(), "-o", packed.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = |bytes: &[u8]| {
        std::fs::write(&packed, bytes).unwrap();
        lutra(&["run", "-m", packed.to_str().unwrap(), "-p", "t1", "-n", "2", "--temp", "0"])
    };
    let good = std::fs::read(&packed).unwrap();
    assert!(run(&good).status.success());
    let mut flipped = good.clone();
    let at = flipped.len() - 1000;
    flipped[at] ^= 0x10;
    for (what, bytes, needle) in [("flipped", flipped, "checksum"), ("cut", good[..good.len() - 100].to_vec(), "past the end")] {
        let out = run(&bytes);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
        assert!(stderr.starts_with("lutra: error: ") && stderr.contains(needle) && !stderr.contains("panicked"), "{what}: {stderr}");
    }
    std::fs::remove_file(&packed).ok();
    std::fs::remove_file(&gguf).ok();
}
