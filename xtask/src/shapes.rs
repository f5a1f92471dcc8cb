//! `cargo xtask models shapes`: random-weight GGUFs with the exact shapes of the models
//! people run (Qwen2.5-1.5B, Llama-3.2-1B, Llama-3.2-3B), quantized by llama.cpp's own
//! `llama-quantize`, so speed is measured on the tensor types, shapes and byte counts of
//! the real files. Random weights make a meaningless model; the arithmetic per token is
//! the real one.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use lutra_core::formats::gguf::{Gguf, Value};

use crate::process::{run, run_capture};
use crate::Result;

/// A model's shape: what its GGUF's hyperparameters and tensor shapes are.
pub(crate) struct Shape {
    pub name: &'static str,
    arch: &'static str,
    /// llama.cpp's tokenizer test vocabulary (models/llama-vocab) with the model's tokenizer.
    vocab: &'static str,
    layers: u32,
    dim: u64,
    ffn: u64,
    heads: u64,
    kv_heads: u64,
    rope_base: f32,
    eps: f32,
    /// Q, K and V biases (Qwen2).
    qkv_bias: bool,
}

pub(crate) const SHAPES: &[Shape] = &[
    Shape {
        name: "qwen2.5-1.5b",
        arch: "qwen2",
        vocab: "ggml-vocab-qwen2.gguf",
        layers: 28,
        dim: 1536,
        ffn: 8960,
        heads: 12,
        kv_heads: 2,
        rope_base: 1_000_000.0,
        eps: 1e-6,
        qkv_bias: true,
    },
    Shape {
        name: "llama-3.2-1b",
        arch: "llama",
        vocab: "ggml-vocab-llama-bpe.gguf",
        layers: 16,
        dim: 2048,
        ffn: 8192,
        heads: 32,
        kv_heads: 8,
        rope_base: 500_000.0,
        eps: 1e-5,
        qkv_bias: false,
    },
    Shape {
        name: "llama-3.2-3b",
        arch: "llama",
        vocab: "ggml-vocab-llama-bpe.gguf",
        layers: 28,
        dim: 3072,
        ffn: 8192,
        heads: 24,
        kv_heads: 8,
        rope_base: 500_000.0,
        eps: 1e-5,
        qkv_bias: false,
    },
];

/// The llama.cpp quantization types each shape is written in (`llama-quantize` names).
pub(crate) const TYPES: &[&str] = &["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0"];

/// The types of the bit-scaling comparison (1 to 4 bits), written on request:
/// `cargo xtask models shapes --types Q1_0,Q2_0,...`.
pub(crate) const LOW_BIT_TYPES: &[&str] = &["Q1_0", "Q2_0", "TQ1_0", "TQ2_0", "Q2_K", "Q3_K_S", "Q4_0"];

/// models/shapes/NAME-type.gguf.
pub(crate) fn shape_file(models: &Path, shape: &str, ty: &str) -> PathBuf {
    models.join("shapes").join(format!("{shape}-{}.gguf", ty.to_lowercase()))
}

/// `cargo xtask models shapes [--shapes a,b] [--types Q4_K_M,...]`: writes each missing
/// file (the f16 source only while its quantizations are made).
pub(crate) fn write_shapes(root: &Path, args: &[String]) -> Result {
    let mut shapes: Vec<&Shape> = SHAPES.iter().collect();
    let mut types: Vec<String> = TYPES.iter().map(|t| t.to_string()).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--shapes" => {
                shapes = value
                    .split(',')
                    .map(|s| SHAPES.iter().find(|x| x.name == s).ok_or_else(|| format!("unknown shape {s:?}; shapes: {}", names())))
                    .collect::<Result<_>>()?
            }
            "--types" => types = value.split(',').map(|t| t.to_uppercase()).collect(),
            _ => {
                return Err(format!("unknown argument {a:?}; usage: cargo xtask models shapes [--shapes {}] [--types Q4_K_M,...]", names()))
            }
        }
    }
    let models = root.join("models");
    crate::models::fetch_vocab(root)?;
    let dir = models.join("shapes");
    fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let mut tools = Command::new("bash");
    tools.arg(root.join("scripts/llamacpp-tools.sh"));
    let bin = PathBuf::from(run_capture(&mut tools)?.lines().last().unwrap_or_default().trim());
    for shape in shapes {
        let missing: Vec<&String> = types.iter().filter(|t| !shape_file(&models, shape.name, t).exists()).collect();
        if missing.is_empty() {
            println!("{}: present", shape.name);
            continue;
        }
        let source = dir.join(format!("{}-f16.gguf", shape.name));
        if !source.exists() {
            write_f16(shape, &models.join("llama-vocab").join(shape.vocab), &source)?;
        }
        for ty in missing {
            let out = shape_file(&models, shape.name, ty);
            let partial = out.with_extension("gguf.partial");
            run(Command::new(bin.join("llama-quantize")).arg(&source).arg(&partial).arg(ty))?;
            fs::rename(&partial, &out).map_err(|e| format!("rename {}: {e}", partial.display()))?;
            println!("{}: {} ({} B)", shape.name, out.display(), fs::metadata(&out).map(|m| m.len()).unwrap_or(0));
        }
        fs::remove_file(&source).map_err(|e| format!("remove {}: {e}", source.display()))?;
    }
    Ok(())
}

fn names() -> String {
    SHAPES.iter().map(|s| s.name).collect::<Vec<_>>().join(",")
}

/// A tensor to write: name, GGUF dims (innermost first), f16 or f32.
struct TensorSpec {
    name: String,
    dims: Vec<u64>,
    f16: bool,
}

impl TensorSpec {
    fn bytes(&self) -> u64 {
        self.dims.iter().product::<u64>() * if self.f16 { 2 } else { 4 }
    }
}

fn tensors(s: &Shape, vocab: u64) -> Vec<TensorSpec> {
    let head_dim = s.dim / s.heads;
    let (q, kv) = (s.dim, s.kv_heads * head_dim);
    let t = |name: String, dims: &[u64], f16| TensorSpec { name, dims: dims.to_vec(), f16 };
    // tied embeddings, as Qwen2.5-1.5B and Llama-3.2-1B/3B ship: no output.weight
    let mut out = vec![t("token_embd.weight".into(), &[s.dim, vocab], true), t("output_norm.weight".into(), &[s.dim], false)];
    for l in 0..s.layers {
        let b = |n: &str| format!("blk.{l}.{n}");
        out.push(t(b("attn_norm.weight"), &[s.dim], false));
        out.push(t(b("attn_q.weight"), &[s.dim, q], true));
        out.push(t(b("attn_k.weight"), &[s.dim, kv], true));
        out.push(t(b("attn_v.weight"), &[s.dim, kv], true));
        if s.qkv_bias {
            out.push(t(b("attn_q.bias"), &[q], false));
            out.push(t(b("attn_k.bias"), &[kv], false));
            out.push(t(b("attn_v.bias"), &[kv], false));
        }
        out.push(t(b("attn_output.weight"), &[q, s.dim], true));
        out.push(t(b("ffn_norm.weight"), &[s.dim], false));
        out.push(t(b("ffn_gate.weight"), &[s.dim, s.ffn], true));
        out.push(t(b("ffn_up.weight"), &[s.dim, s.ffn], true));
        out.push(t(b("ffn_down.weight"), &[s.ffn, s.dim], true));
    }
    out
}

const ALIGNMENT: u64 = 32;

/// Writes `shape` as an f16 GGUF: its hyperparameters, the tokenizer entries of `vocab`,
/// matrices uniform in ±0.035 (σ = 0.02), norms 1, biases 0.
fn write_f16(shape: &Shape, vocab: &Path, out: &Path) -> Result {
    let vocab_bytes = fs::read(vocab).map_err(|e| format!("read {}: {e}", vocab.display()))?;
    let v = Gguf::parse(&vocab_bytes).map_err(|e| format!("{}: {e}", vocab.display()))?;
    let mut kvs = Vec::new();
    let mut count = 0u64;
    let mut kv = |key: &str, ty: u32, value: &[u8]| {
        kvs.extend_from_slice(&(key.len() as u64).to_le_bytes());
        kvs.extend_from_slice(key.as_bytes());
        kvs.extend_from_slice(&ty.to_le_bytes());
        kvs.extend_from_slice(value);
        count += 1;
    };
    let string = |s: &str| [&(s.len() as u64).to_le_bytes()[..], s.as_bytes()].concat();
    let a = shape.arch;
    kv("general.architecture", 8, &string(a));
    kv("general.name", 8, &string(&format!("{} (random weights, lutra shapes)", shape.name)));
    kv("general.file_type", 4, &1u32.to_le_bytes());
    kv("general.alignment", 4, &(ALIGNMENT as u32).to_le_bytes());
    kv(&format!("{a}.block_count"), 4, &shape.layers.to_le_bytes());
    kv(&format!("{a}.context_length"), 4, &32768u32.to_le_bytes());
    kv(&format!("{a}.embedding_length"), 4, &(shape.dim as u32).to_le_bytes());
    kv(&format!("{a}.feed_forward_length"), 4, &(shape.ffn as u32).to_le_bytes());
    kv(&format!("{a}.attention.head_count"), 4, &(shape.heads as u32).to_le_bytes());
    kv(&format!("{a}.attention.head_count_kv"), 4, &(shape.kv_heads as u32).to_le_bytes());
    kv(&format!("{a}.rope.dimension_count"), 4, &((shape.dim / shape.heads) as u32).to_le_bytes());
    kv(&format!("{a}.rope.freq_base"), 6, &shape.rope_base.to_le_bytes());
    kv(&format!("{a}.attention.layer_norm_rms_epsilon"), 6, &shape.eps.to_le_bytes());
    let mut vocab_size = 0;
    for (key, value) in v.metadata() {
        if !key.starts_with("tokenizer.") {
            continue;
        }
        if let (Value::Array(tokens), "tokenizer.ggml.tokens") = (&value, key) {
            vocab_size = tokens.len();
        }
        let mut bytes = Vec::new();
        value.write_payload(&mut |b| bytes.extend_from_slice(b));
        kv(key, value.value_type().id(), &bytes);
    }
    if vocab_size == 0 {
        return Err(format!("{}: no tokenizer.ggml.tokens", vocab.display()));
    }
    let specs = tensors(shape, vocab_size);
    let mut header = Vec::new();
    header.extend_from_slice(b"GGUF");
    header.extend_from_slice(&3u32.to_le_bytes());
    header.extend_from_slice(&(specs.len() as u64).to_le_bytes());
    header.extend_from_slice(&count.to_le_bytes());
    header.extend_from_slice(&kvs);
    let mut offset = 0u64;
    for t in &specs {
        header.extend_from_slice(&(t.name.len() as u64).to_le_bytes());
        header.extend_from_slice(t.name.as_bytes());
        header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        t.dims.iter().for_each(|d| header.extend_from_slice(&d.to_le_bytes()));
        header.extend_from_slice(&(if t.f16 { 1u32 } else { 0 }).to_le_bytes());
        header.extend_from_slice(&offset.to_le_bytes());
        offset = (offset + t.bytes()).next_multiple_of(ALIGNMENT);
    }
    header.resize((header.len() as u64).next_multiple_of(ALIGNMENT) as usize, 0);
    let partial = out.with_extension("gguf.partial");
    let file = fs::File::create(&partial).map_err(|e| format!("create {}: {e}", partial.display()))?;
    let mut w = BufWriter::with_capacity(1 << 22, file);
    let err = |e: std::io::Error| format!("write {}: {e}", partial.display());
    w.write_all(&header).map_err(err)?;
    let mut rng = 0x2545_f491_4f6c_dd1du64 ^ shape.dim;
    let mut buf = Vec::with_capacity(1 << 20);
    for t in &specs {
        let n = t.dims.iter().product::<u64>();
        let mut left = n;
        while left > 0 {
            let chunk = left.min(1 << 19);
            buf.clear();
            for _ in 0..chunk {
                if t.f16 {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    // uniform in ±√3·0.02: standard deviation 0.02
                    let u = (rng >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                    buf.extend_from_slice(&lutra_core::f16::f32_to_f16_bits(u * 0.034_641).to_le_bytes());
                } else {
                    let norm = t.name.ends_with("norm.weight");
                    buf.extend_from_slice(&(if norm { 1.0f32 } else { 0.0 }).to_le_bytes());
                }
            }
            w.write_all(&buf).map_err(err)?;
            left -= chunk;
        }
        let pad = t.bytes().next_multiple_of(ALIGNMENT) - t.bytes();
        w.write_all(&vec![0u8; pad as usize]).map_err(err)?;
    }
    w.flush().map_err(err)?;
    drop(w);
    fs::rename(&partial, out).map_err(|e| format!("rename {}: {e}", partial.display()))?;
    println!("{}: {} ({} tensors, vocab {vocab_size})", shape.name, out.display(), specs.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameter counts the models' publishers state (their safetensors' totals, tied
    /// embeddings counted once), from each shape's tensor list and vocabulary size.
    #[test]
    fn shapes_have_the_published_parameter_counts() {
        for (name, vocab, params) in [
            ("qwen2.5-1.5b", 151_936, 1_543_714_304u64),
            ("llama-3.2-1b", 128_256, 1_235_814_400),
            ("llama-3.2-3b", 128_256, 3_212_749_824),
        ] {
            let shape = SHAPES.iter().find(|s| s.name == name).unwrap();
            let total: u64 = tensors(shape, vocab).iter().map(|t| t.dims.iter().product::<u64>()).sum();
            assert_eq!(total, params, "{name}");
        }
    }
}
