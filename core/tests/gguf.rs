//! The GGUF reader against files written by a small writer in this test: every value
//! type reads back as written, and every kind of broken or hostile file — truncated at
//! any byte, absurd counts, lengths, dims and offsets, random mutations — is refused
//! with a typed error, never a panic or a hang.

mod common;
use common::Rng;

use lutra_core::formats::gguf::{GgmlType, Gguf, GgufError, Value, ValueType, MAX_ARRAY_DEPTH};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

// ---------------------------------------------------------------------------------
// A test-only GGUF writer

#[derive(Clone, Debug)]
enum Val {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    /// Element type id and elements (all of that type).
    Arr(u32, Vec<Val>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Val {
    fn type_id(&self) -> u32 {
        match self {
            Val::U8(_) => 0,
            Val::I8(_) => 1,
            Val::U16(_) => 2,
            Val::I16(_) => 3,
            Val::U32(_) => 4,
            Val::I32(_) => 5,
            Val::F32(_) => 6,
            Val::Bool(_) => 7,
            Val::Str(_) => 8,
            Val::Arr(..) => 9,
            Val::U64(_) => 10,
            Val::I64(_) => 11,
            Val::F64(_) => 12,
        }
    }

    /// The payload, without the type id.
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Val::U8(v) => out.push(*v),
            Val::I8(v) => out.extend(v.to_le_bytes()),
            Val::U16(v) => out.extend(v.to_le_bytes()),
            Val::I16(v) => out.extend(v.to_le_bytes()),
            Val::U32(v) => out.extend(v.to_le_bytes()),
            Val::I32(v) => out.extend(v.to_le_bytes()),
            Val::F32(v) => out.extend(v.to_le_bytes()),
            Val::Bool(v) => out.push(u8::from(*v)),
            Val::Str(s) => put_str(out, s),
            Val::Arr(ty, items) => {
                put_u32(out, *ty);
                put_u64(out, items.len() as u64);
                for item in items {
                    assert_eq!(item.type_id(), *ty, "writer misuse: mixed array");
                    item.write(out);
                }
            }
            Val::U64(v) => out.extend(v.to_le_bytes()),
            Val::I64(v) => out.extend(v.to_le_bytes()),
            Val::F64(v) => out.extend(v.to_le_bytes()),
        }
    }

    /// Does the parsed value equal this written one?
    fn matches(&self, v: &Value<'_>) -> bool {
        match (self, v) {
            (Val::U8(a), Value::U8(b)) => a == b,
            (Val::I8(a), Value::I8(b)) => a == b,
            (Val::U16(a), Value::U16(b)) => a == b,
            (Val::I16(a), Value::I16(b)) => a == b,
            (Val::U32(a), Value::U32(b)) => a == b,
            (Val::I32(a), Value::I32(b)) => a == b,
            (Val::F32(a), Value::F32(b)) => a.to_bits() == b.to_bits(),
            (Val::Bool(a), Value::Bool(b)) => a == b,
            (Val::Str(a), Value::String(b)) => a.as_bytes() == *b && v.as_str() == Some(a.as_str()),
            (Val::Arr(ty, items), Value::Array(arr)) => {
                arr.elem_type().id() == *ty
                    && arr.len() == items.len() as u64
                    && arr.iter().count() == items.len()
                    && items.iter().zip(arr.iter()).all(|(a, b)| a.matches(&b))
                    && items.iter().enumerate().all(|(i, a)| arr.get(i as u64).is_some_and(|b| a.matches(&b)))
                    && arr.get(items.len() as u64).is_none()
            }
            (Val::U64(a), Value::U64(b)) => a == b,
            (Val::I64(a), Value::I64(b)) => a == b,
            (Val::F64(a), Value::F64(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend(v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend(v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend(s.as_bytes());
}

struct Tensor {
    name: String,
    dims: Vec<u64>,
    ty: u32,
    data: Vec<u8>,
}

impl Tensor {
    fn new(name: &str, dims: &[u64], ty: u32, seed: u8) -> Tensor {
        let t = GgmlType::from_id(ty);
        let (block, bytes) = t.block().expect("known type");
        let n: u64 = dims.iter().product();
        let size = (n / u64::from(block) * u64::from(bytes)) as usize;
        let data = (0..size).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        Tensor { name: name.into(), dims: dims.to_vec(), ty, data }
    }
}

/// A GGUF file; tensor data placed in order at `alignment` boundaries, the file ending
/// right after the last tensor's bytes. `alignment` must match any `general.alignment` in `kvs`.
fn write_gguf(version: u32, kvs: &[(&str, Val)], tensors: &[Tensor], alignment: usize) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    put_u32(&mut out, version);
    put_u64(&mut out, tensors.len() as u64);
    put_u64(&mut out, kvs.len() as u64);
    for (key, val) in kvs {
        put_str(&mut out, key);
        put_u32(&mut out, val.type_id());
        val.write(&mut out);
    }
    let mut offset = 0usize;
    let mut offsets = Vec::new();
    for t in tensors {
        put_str(&mut out, &t.name);
        put_u32(&mut out, t.dims.len() as u32);
        for &d in &t.dims {
            put_u64(&mut out, d);
        }
        put_u32(&mut out, t.ty);
        put_u64(&mut out, offset as u64);
        offsets.push(offset);
        offset = (offset + t.data.len()).next_multiple_of(alignment);
    }
    out.resize(out.len().next_multiple_of(alignment), 0);
    let data_start = out.len();
    for (t, off) in tensors.iter().zip(offsets) {
        out.resize(data_start + off, 0);
        out.extend(&t.data);
    }
    out
}

fn every_type_kvs() -> Vec<(&'static str, Val)> {
    let strs = |xs: &[&str]| Val::Arr(8, xs.iter().map(|s| Val::Str(s.to_string())).collect());
    vec![
        ("general.architecture", Val::Str("llama".into())),
        ("general.name", Val::Str("tiny test model ✓".into())),
        ("test.u8", Val::U8(200)),
        ("test.i8", Val::I8(-100)),
        ("test.u16", Val::U16(60000)),
        ("test.i16", Val::I16(-30000)),
        ("llama.context_length", Val::U32(4096)),
        ("test.i32", Val::I32(-2_000_000_000)),
        ("llama.rope.freq_base", Val::F32(10000.0)),
        ("test.bool", Val::Bool(true)),
        ("test.false", Val::Bool(false)),
        ("test.u64", Val::U64(u64::MAX - 1)),
        ("test.i64", Val::I64(i64::MIN + 1)),
        ("test.f64", Val::F64(-1.5e300)),
        ("test.small_u64", Val::U64(77)),
        ("tokenizer.ggml.tokens", strs(&["<unk>", "<s>", "</s>", "hello", "▁world", ""])),
        ("tokenizer.ggml.scores", Val::Arr(6, (0..6).map(|i| Val::F32(-(i as f32))).collect())),
        ("test.empty_strings", strs(&[])),
        ("test.bools", Val::Arr(7, vec![Val::Bool(true), Val::Bool(false), Val::Bool(true)])),
        ("test.i64s", Val::Arr(11, vec![Val::I64(-1), Val::I64(i64::MAX)])),
        (
            "test.nested",
            Val::Arr(
                9,
                vec![Val::Arr(8, vec![Val::Str("a".into()), Val::Str("bc".into())]), Val::Arr(0, vec![Val::U8(1)]), Val::Arr(4, vec![])],
            ),
        ),
        ("test.nested_strings", Val::Arr(9, vec![strs(&["x"]), strs(&["y", "zz"])])),
    ]
}

fn every_type_tensors() -> Vec<Tensor> {
    vec![
        Tensor::new("token_embd.weight", &[64, 6], 8, 1),         // Q8_0
        Tensor::new("blk.0.attn_q.weight", &[64, 64], 2, 2),      // Q4_0
        Tensor::new("blk.0.attn_norm.weight", &[64], 0, 3),       // F32
        Tensor::new("blk.0.ffn_up.weight", &[32, 3, 2, 1], 8, 4), // Q8_0, 4 dims
        Tensor::new("output_norm.weight", &[3], 0, 5),            // F32, 12 bytes: the next offset is padded
    ]
}

fn valid_file() -> Vec<u8> {
    write_gguf(3, &every_type_kvs(), &every_type_tensors(), 32)
}

/// Touch everything a parsed file offers (the mutation test's "use it" step).
fn exercise(g: &Gguf<'_>) {
    fn walk(v: &Value<'_>, depth: u32) {
        let _ = (v.as_str(), v.as_u64(), v.as_i64(), v.as_f64(), v.to_string());
        assert!(depth <= MAX_ARRAY_DEPTH);
        if let Value::Array(a) = v {
            for item in a.iter() {
                walk(&item, depth + 1);
            }
            let _ = a.get(a.len() / 2);
        }
    }
    for (k, v) in g.metadata() {
        walk(&v, 0);
        assert!(g.get(k).is_some());
    }
    let _ = (g.get_u32("llama.context_length"), g.get_str("general.name"), g.get_array("tokenizer.ggml.tokens"));
    for t in g.tensors() {
        let _ = (t.n_elements(), t.shape(), t.ggml_type.to_string());
        if let Ok(data) = g.tensor_data(&t) {
            assert_eq!(Ok(data.len() as u64), t.byte_size());
        }
        assert!(g.tensor(t.name).is_some());
    }
}

fn parse_err(bytes: &[u8]) -> GgufError {
    match Gguf::parse(bytes) {
        Ok(g) => panic!("parsed a bad file: {g:?}"),
        Err(e) => {
            // Every message is printable and says where.
            let msg = e.to_string();
            assert!(!msg.is_empty());
            e
        }
    }
}

// ---------------------------------------------------------------------------------
// Round trip

#[test]
fn round_trip_every_value_type_and_tensor() {
    let kvs = every_type_kvs();
    let tensors = every_type_tensors();
    let bytes = write_gguf(3, &kvs, &tensors, 32);
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 32);
    assert_eq!(g.metadata_count(), kvs.len() as u64);
    assert_eq!(g.tensor_count(), tensors.len() as u64);
    assert_eq!(g.data_start() % 32, 0);

    let parsed: Vec<_> = g.metadata().collect();
    assert_eq!(parsed.len(), kvs.len());
    for ((key, val), (pk, pv)) in kvs.iter().zip(&parsed) {
        assert_eq!(key, pk);
        assert!(val.matches(pv), "{key}: wrote {val:?}, read {pv:?}");
        assert!(val.matches(&g.get(key).unwrap()), "{key} via get");
    }
    assert!(g.get("no.such.key").is_none());

    // Typed helpers accept any integer width that fits.
    assert_eq!(g.get_u32("llama.context_length"), Some(4096));
    assert_eq!(g.get_u32("test.u8"), Some(200));
    assert_eq!(g.get_u32("test.u16"), Some(60000));
    assert_eq!(g.get_u32("test.small_u64"), Some(77));
    assert_eq!(g.get_u32("test.u64"), None, "does not fit u32");
    assert_eq!(g.get_u32("test.i8"), None, "negative");
    assert_eq!(g.get_u64("test.u64"), Some(u64::MAX - 1));
    assert_eq!(g.get("test.i64").and_then(|v| v.as_i64()), Some(i64::MIN + 1));
    assert_eq!(g.get_f32("llama.rope.freq_base"), Some(10000.0));
    assert_eq!(g.get_f32("test.f64"), Some(-1.5e300f64 as f32));
    assert_eq!(g.get_f32("test.u8"), None);
    assert_eq!(g.get_bool("test.bool"), Some(true));
    assert_eq!(g.get_bool("test.false"), Some(false));
    assert_eq!(g.get_str("general.architecture"), Some("llama"));
    assert_eq!(g.get_str("general.name"), Some("tiny test model ✓"));
    assert_eq!(g.get_str("test.u8"), None);
    let tokens = g.get_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.elem_type(), ValueType::String);
    assert_eq!(tokens.len(), 6);
    let words: Vec<_> = tokens.iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(words, ["<unk>", "<s>", "</s>", "hello", "▁world", ""]);
    assert_eq!(tokens.get(4).and_then(|v| v.as_str()), Some("▁world"));
    assert_eq!(g.get_array("tokenizer.ggml.scores").unwrap().get(3), Some(Value::F32(-3.0)));
    assert!(g.get_array("test.empty_strings").unwrap().is_empty());
    assert_eq!(g.get("test.nested").unwrap().to_string(), "[array; 3]");

    let infos: Vec<_> = g.tensors().collect();
    assert_eq!(infos.len(), tensors.len());
    for (t, info) in tensors.iter().zip(&infos) {
        assert_eq!(info.name, t.name);
        assert_eq!(info.shape(), &t.dims[..]);
        assert_eq!(info.n_dims as usize, t.dims.len());
        assert_eq!(info.ggml_type.id(), t.ty);
        assert_eq!(info.offset % 32, 0);
        assert_eq!(g.tensor_data(info).unwrap(), &t.data[..], "{}", t.name);
        assert_eq!(g.tensor(&t.name), Some(*info));
    }
    assert_eq!(infos[0].ggml_type, GgmlType::Q8_0);
    assert_eq!(infos[1].ggml_type, GgmlType::Q4_0);
    assert_eq!(infos[2].ggml_type, GgmlType::F32);
    assert_eq!(infos[2].dims, [64, 1, 1, 1]);
    assert_eq!(infos[3].n_elements(), Some(192));
    assert_eq!(infos[1].byte_size(), Ok(64 * 64 / 32 * 18));
    assert!(g.tensor("missing").is_none());
    exercise(&g);
}

#[test]
fn version_2_custom_alignment_and_no_tensors() {
    let kvs = [("general.alignment", Val::U32(64)), ("general.architecture", Val::Str("gemma3".into()))];
    let tensors = [Tensor::new("a", &[32], 2, 7), Tensor::new("b", &[5, 2], 0, 8)];
    let bytes = write_gguf(2, &kvs, &tensors, 64);
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!((g.version(), g.alignment()), (2, 64));
    assert_eq!(g.data_start() % 64, 0);
    let b = g.tensor("b").unwrap();
    assert_eq!(b.offset, 64);
    assert_eq!(g.tensor_data(&b).unwrap(), &tensors[1].data[..]);

    // Alignment stored as u64 and u8 is accepted too.
    for v in [Val::U64(16), Val::U8(16)] {
        let bytes = write_gguf(3, &[("general.alignment", v)], &tensors, 16);
        assert_eq!(Gguf::parse(&bytes).unwrap().alignment(), 16);
    }

    // Metadata only: no data section needed.
    let bytes = write_gguf(3, &[("general.architecture", Val::Str("llama".into()))], &[], 32);
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.tensors().count(), 0);
    assert_eq!(g.get_str("general.architecture"), Some("llama"));
}

#[test]
fn many_entries_beyond_the_index() {
    // More metadata entries than the offset index holds, with arrays of strings among them.
    let names: Vec<String> = (0..150).map(|i| format!("test.key{i}")).collect();
    let kvs: Vec<(&str, Val)> = names
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let v = if i % 3 == 0 { Val::Arr(8, (0..i).map(|j| Val::Str(format!("s{j}"))).collect()) } else { Val::U32(i as u32) };
            (k.as_str(), v)
        })
        .collect();
    let bytes = write_gguf(3, &kvs, &[Tensor::new("t", &[32], 8, 0)], 32);
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.metadata().count(), 150);
    for (k, v) in &kvs {
        assert!(v.matches(&g.get(k).unwrap()), "{k}");
    }
}

// ---------------------------------------------------------------------------------
// Broken files

#[test]
fn truncated_at_every_byte_is_an_error() {
    let bytes = valid_file();
    assert!(Gguf::parse(&bytes).is_ok());
    for len in 0..bytes.len() {
        let e = parse_err(&bytes[..len]);
        assert!(
            matches!(
                e,
                GgufError::Truncated { .. }
                    | GgufError::TensorPastEnd { .. }
                    | GgufError::DataPastEnd { .. }
                    | GgufError::StringTooLong { .. }
                    | GgufError::CountTooLarge { .. }
            ),
            "cut at {len}: {e}"
        );
    }
    assert!(parse_err(&[]).to_string().contains("byte 0"));
}

#[test]
fn wrong_magic_and_versions() {
    let mut bytes = valid_file();
    bytes[..4].copy_from_slice(b"GGUG");
    assert_eq!(parse_err(&bytes), GgufError::BadMagic { found: *b"GGUG" });
    assert!(parse_err(&bytes).to_string().contains("not a GGUF file"));
    // A llama2.c checkpoint starts with its config (dim = 288 ...).
    assert!(matches!(parse_err(&[0x20, 0x01, 0, 0, 0, 0, 0, 0]), GgufError::BadMagic { .. }));

    for version in [0u32, 1, 4, 3u32.swap_bytes()] {
        let mut bytes = valid_file();
        bytes[4..8].copy_from_slice(&version.to_le_bytes());
        assert_eq!(parse_err(&bytes), GgufError::UnsupportedVersion { version });
    }
    assert!(GgufError::UnsupportedVersion { version: 3u32.swap_bytes() }.to_string().contains("big-endian"));
}

/// Header with the given counts and nothing (or `rest`) after it.
fn header(version: u32, tensors: u64, kvs: u64, rest: &[u8]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    put_u32(&mut out, version);
    put_u64(&mut out, tensors);
    put_u64(&mut out, kvs);
    out.extend(rest);
    out
}

#[test]
fn absurd_counts_fail_fast() {
    let body = &valid_file()[24..];
    let e = parse_err(&header(3, 1 << 60, 0, body));
    assert!(matches!(e, GgufError::CountTooLarge { at: 8, count, .. } if count == 1 << 60), "{e}");
    let e = parse_err(&header(3, 0, 1 << 60, body));
    assert!(matches!(e, GgufError::CountTooLarge { at: 16, count, .. } if count == 1 << 60), "{e}");
    assert!(e.to_string().contains("byte 16"), "{e}");
    let e = parse_err(&header(3, u64::MAX, u64::MAX, body));
    assert!(matches!(e, GgufError::CountTooLarge { .. }), "{e}");

    // An array count that cannot fit.
    let mut kv = Vec::new();
    put_str(&mut kv, "a");
    put_u32(&mut kv, 9);
    put_u32(&mut kv, 8); // of strings
    put_u64(&mut kv, 1 << 60);
    kv.extend([0u8; 64]);
    let e = parse_err(&header(3, 0, 1, &kv));
    assert!(matches!(e, GgufError::CountTooLarge { what: "array elements", .. }), "{e}");
    // Of u64: len * 8 would overflow u64 if computed naively.
    kv[13..17].copy_from_slice(&10u32.to_le_bytes());
    kv[17..25].copy_from_slice(&(u64::MAX / 4).to_le_bytes());
    assert!(matches!(parse_err(&header(3, 0, 1, &kv)), GgufError::CountTooLarge { .. }));
}

#[test]
fn string_lengths_beyond_the_file() {
    for len in [u64::MAX, 1 << 40, 1000] {
        // As a key.
        let mut kv = Vec::new();
        put_u64(&mut kv, len);
        kv.extend(b"general.name");
        put_u32(&mut kv, 8);
        put_str(&mut kv, "x");
        let e = parse_err(&header(3, 0, 1, &kv));
        assert!(matches!(e, GgufError::StringTooLong { at: 24, len: l, .. } if l == len), "{e}");
        // As a value.
        let mut kv = Vec::new();
        put_str(&mut kv, "general.name");
        put_u32(&mut kv, 8);
        put_u64(&mut kv, len);
        kv.extend([b'x'; 20]);
        assert!(matches!(parse_err(&header(3, 0, 1, &kv)), GgufError::StringTooLong { .. }));
        // As a tensor name.
        let mut ti = Vec::new();
        put_u64(&mut ti, len);
        ti.extend([0u8; 40]);
        assert!(matches!(parse_err(&header(3, 1, 0, &ti)), GgufError::StringTooLong { .. }));
    }
}

/// A file with one tensor info written raw, followed by `data_len` data bytes.
fn one_tensor(dims: &[u64], ty: u32, offset: u64, kvs: &[(&str, Val)], alignment: usize, data_len: usize) -> Vec<u8> {
    let mut out = header(3, 1, kvs.len() as u64, &[]);
    for (k, v) in kvs {
        put_str(&mut out, k);
        put_u32(&mut out, v.type_id());
        v.write(&mut out);
    }
    put_str(&mut out, "t");
    put_u32(&mut out, dims.len() as u32);
    for &d in dims {
        put_u64(&mut out, d);
    }
    put_u32(&mut out, ty);
    put_u64(&mut out, offset);
    out.resize(out.len().next_multiple_of(alignment) + data_len, 0);
    out
}

#[test]
fn hostile_tensor_infos() {
    assert!(Gguf::parse(&one_tensor(&[32, 2], 8, 0, &[], 32, 68)).is_ok());

    let e = parse_err(&one_tensor(&[1, 1, 1, 1, 1], 0, 0, &[], 32, 4));
    assert!(matches!(e, GgufError::TooManyDims { n_dims: 5, .. }), "{e}");
    let e = parse_err(
        &one_tensor(&[32, 2], 8, 0, &[], 32, 68)
            .into_iter()
            .take(24 + 8 + 1)
            .chain(u32::MAX.to_le_bytes())
            .chain([0; 64])
            .collect::<Vec<_>>(),
    );
    assert!(matches!(e, GgufError::TooManyDims { n_dims: u32::MAX, .. }), "{e}");

    // Products that overflow u64, or exceed i64::MAX, or a byte count that does.
    for dims in [&[1u64 << 32, 1 << 32][..], &[1 << 62, 4], &[u64::MAX], &[1 << 63, 0], &[1 << 31, 1 << 31, 4], &[32, 1 << 62]] {
        let e = parse_err(&one_tensor(dims, 0, 0, &[], 32, 64));
        assert!(matches!(e, GgufError::ShapeOverflow { .. }), "{dims:?}: {e}");
    }

    // Rows that do not divide into blocks.
    let e = parse_err(&one_tensor(&[48, 2], 2, 0, &[], 32, 1000));
    assert!(matches!(e, GgufError::RowNotMultipleOfBlock { row: 48, block: 32, ggml_type: GgmlType::Q4_0, .. }), "{e}");
    let e = parse_err(&one_tensor(&[640, 1], 12, 0, &[], 32, 1000));
    assert!(matches!(e, GgufError::RowNotMultipleOfBlock { block: 256, .. }), "{e}");

    // Offsets past the end, at the end of u64, misaligned.
    let e = parse_err(&one_tensor(&[32, 2], 8, 64, &[], 32, 68));
    assert!(matches!(e, GgufError::TensorPastEnd { .. }), "{e}");
    let e = parse_err(&one_tensor(&[32, 2], 8, u64::MAX - 31, &[], 32, 68));
    assert!(matches!(e, GgufError::TensorPastEnd { .. }), "{e}");
    let e = parse_err(&one_tensor(&[32, 2], 8, 0, &[], 32, 67));
    assert!(matches!(e, GgufError::TensorPastEnd { .. }), "{e}");
    let e = parse_err(&one_tensor(&[32, 2], 8, 16, &[], 32, 100));
    assert!(matches!(e, GgufError::MisalignedTensor { offset: 16, alignment: 32, .. }), "{e}");
    assert!(e.to_string().contains("not a multiple of the alignment 32"));
    // 16 is aligned under general.alignment = 16.
    assert!(Gguf::parse(&one_tensor(&[32, 2], 8, 16, &[("general.alignment", Val::U32(16))], 16, 100)).is_ok());
}

#[test]
fn bad_alignment() {
    for a in [0u32, 3, 48, 100] {
        let e = parse_err(&one_tensor(&[32], 0, 0, &[("general.alignment", Val::U32(a))], 32, 128));
        assert!(matches!(e, GgufError::BadAlignment { alignment, .. } if alignment == u64::from(a)), "{a}: {e}");
    }
    let e = parse_err(&one_tensor(&[32], 0, 0, &[("general.alignment", Val::Str("32".into()))], 32, 128));
    assert!(matches!(e, GgufError::AlignmentType { found: ValueType::String, .. }), "{e}");
    let e = parse_err(&one_tensor(&[32], 0, 0, &[("general.alignment", Val::I32(-32))], 32, 128));
    assert!(matches!(e, GgufError::AlignmentType { .. }), "{e}");
    // A huge power of two: the data section cannot start inside the file.
    let e = parse_err(&one_tensor(&[32], 0, 0, &[("general.alignment", Val::U64(1 << 63))], 32, 128));
    assert!(matches!(e, GgufError::DataPastEnd { .. }), "{e}");
}

#[test]
fn unknown_tensor_type_parses_but_has_no_data() {
    for id in [4u32, 31, 99, u32::MAX] {
        let bytes = one_tensor(&[32, 2], id, 0, &[], 32, 64);
        let g = Gguf::parse(&bytes).unwrap();
        let t = g.tensor("t").unwrap();
        assert_eq!(t.ggml_type, GgmlType::Unknown(id));
        assert_eq!(t.ggml_type.id(), id);
        assert_eq!(t.byte_size(), Err(GgufError::UnknownTensorType { type_id: id }));
        let e = g.tensor_data(&t).unwrap_err();
        assert_eq!(e, GgufError::UnknownTensorType { type_id: id });
        assert!(e.to_string().contains(&format!("id {id}")), "{e}");
    }
}

#[test]
fn tensor_data_checks_caller_built_infos() {
    let bytes = valid_file();
    let g = Gguf::parse(&bytes).unwrap();
    let mut t = g.tensor("blk.0.attn_q.weight").unwrap();
    t.offset = u64::MAX - 10;
    assert!(matches!(g.tensor_data(&t), Err(GgufError::TensorPastEnd { .. })));
    t.offset = 0;
    t.dims = [u64::MAX, 2, 1, 1];
    assert!(matches!(g.tensor_data(&t), Err(GgufError::ShapeOverflow { .. })));
    t.dims = [33, 1, 1, 1];
    assert!(matches!(g.tensor_data(&t), Err(GgufError::RowNotMultipleOfBlock { .. })));
}

#[test]
fn bad_metadata_values() {
    let one_kv = |ty: u32, payload: &[u8]| {
        let mut kv = Vec::new();
        put_str(&mut kv, "k");
        put_u32(&mut kv, ty);
        kv.extend(payload);
        header(3, 0, 1, &kv)
    };
    assert!(matches!(parse_err(&one_kv(13, &[0; 16])), GgufError::UnknownValueType { type_id: 13, at: 33 }));
    assert!(matches!(parse_err(&one_kv(u32::MAX, &[0; 16])), GgufError::UnknownValueType { .. }));
    assert!(matches!(parse_err(&one_kv(7, &[2])), GgufError::InvalidBool { value: 2, at: 37 }));
    let mut arr = Vec::new();
    Val::Arr(0, vec![Val::U8(0), Val::U8(1), Val::U8(5)]).write(&mut arr);
    arr[0] = 7; // now an array of bools holding 5
    assert!(matches!(parse_err(&one_kv(9, &arr)), GgufError::InvalidBool { value: 5, .. }));
    // Array of unknown element type.
    let mut arr = Vec::new();
    put_u32(&mut arr, 77);
    put_u64(&mut arr, 0);
    assert!(matches!(parse_err(&one_kv(9, &arr)), GgufError::UnknownValueType { type_id: 77, .. }));
    // Non-UTF-8 key.
    let mut kv = Vec::new();
    put_u64(&mut kv, 2);
    kv.extend([0xff, 0xfe]);
    put_u32(&mut kv, 0);
    kv.push(1);
    assert!(matches!(parse_err(&header(3, 0, 1, &kv)), GgufError::InvalidUtf8 { what: "metadata key", at: 24 }));
    // A non-UTF-8 string value parses; as_str refuses it.
    let bytes = one_kv(8, &[2, 0, 0, 0, 0, 0, 0, 0, 0xc3, 0x28]);
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.get("k"), Some(Value::String(&[0xc3, 0x28])));
    assert_eq!(g.get_str("k"), None);
}

#[test]
fn nested_array_depth_is_bounded() {
    let nest = |depth: u32| {
        let mut v = Val::Arr(0, vec![Val::U8(9)]);
        for _ in 1..depth {
            v = Val::Arr(9, vec![v]);
        }
        v
    };
    let ok = write_gguf(3, &[("deep", nest(MAX_ARRAY_DEPTH))], &[], 32);
    let g = Gguf::parse(&ok).unwrap();
    assert!(nest(MAX_ARRAY_DEPTH).matches(&g.get("deep").unwrap()));
    let e = parse_err(&write_gguf(3, &[("deep", nest(MAX_ARRAY_DEPTH + 1))], &[], 32));
    assert!(matches!(e, GgufError::ArrayTooDeep { .. }), "{e}");

    // A long chain of nested array headers: refused at the bound, not by the stack.
    let mut kv = Vec::new();
    put_str(&mut kv, "deep");
    put_u32(&mut kv, 9);
    for _ in 0..100_000 {
        put_u32(&mut kv, 9);
        put_u64(&mut kv, 1);
    }
    assert!(matches!(parse_err(&header(3, 0, 1, &kv)), GgufError::ArrayTooDeep { .. }));
}

#[test]
fn ggml_type_table() {
    // Spot checks against ggml.h / ggml-common.h.
    let expect = [
        (0, GgmlType::F32, 1, 4),
        (1, GgmlType::F16, 1, 2),
        (2, GgmlType::Q4_0, 32, 18),
        (6, GgmlType::Q5_0, 32, 22),
        (8, GgmlType::Q8_0, 32, 34),
        (10, GgmlType::Q2_K, 256, 84),
        (11, GgmlType::Q3_K, 256, 110),
        (12, GgmlType::Q4_K, 256, 144),
        (14, GgmlType::Q6_K, 256, 210),
        (30, GgmlType::BF16, 1, 2),
        (34, GgmlType::TQ1_0, 256, 54),
        (35, GgmlType::TQ2_0, 256, 66),
    ];
    for (id, t, block, bytes) in expect {
        assert_eq!(GgmlType::from_id(id), t);
        assert_eq!(t.id(), id);
        assert_eq!(t.block(), Some((block, bytes)), "{t}");
    }
    for t in GgmlType::ALL {
        assert_eq!(GgmlType::from_id(t.id()), *t);
    }
    for removed in [4, 5, 31, 32, 33, 36, 37, 38] {
        assert_eq!(GgmlType::from_id(removed), GgmlType::Unknown(removed));
    }
    assert_eq!(GgmlType::Q4_K.to_string(), "Q4_K");
    assert_eq!(GgmlType::Unknown(99).to_string(), "unknown(99)");
}

// ---------------------------------------------------------------------------------
// Random mutations

#[test]
fn random_mutations_never_panic() {
    // Fewer rounds where the tests run emulated (qemu, node).
    let rounds = if cfg!(any(target_arch = "wasm32", target_arch = "aarch64")) { 2_000 } else { 10_000 };
    let valid = valid_file();
    let mut rng = Rng(0x6767_7566);
    let mut parsed = 0;
    for _ in 0..rounds {
        let mut bytes = valid.clone();
        for _ in 0..1 + rng.below(4) {
            let pos = rng.below(bytes.len());
            match rng.below(6) {
                0 => bytes[pos] ^= 1 << rng.below(8),
                1 => bytes[pos] = rng.next() as u8,
                2 => {
                    let end = (pos + 8).min(bytes.len());
                    bytes[pos..end].fill(0xff);
                }
                3 => {
                    let v = [u64::MAX, 1 << 60, 1 << 32, 5, 0][rng.below(5)];
                    bytes.splice(pos..pos, v.to_le_bytes());
                }
                4 => bytes.truncate(pos),
                _ => {
                    // Small integer at a random position: a plausible but wrong count/len/dim.
                    let end = (pos + 8).min(bytes.len());
                    let v = (rng.next() % 300).to_le_bytes();
                    bytes[pos..end].copy_from_slice(&v[..end - pos]);
                }
            }
            if bytes.is_empty() {
                break;
            }
        }
        if let Ok(g) = Gguf::parse(&bytes) {
            parsed += 1;
            exercise(&g);
        }
    }
    // Some mutations (a flipped data byte) leave a valid file: those were exercised too.
    assert!(parsed > 0);
}
