//! The Llama-family loader refuses what its graph does not implement, or what no model
//! can have, with a typed error naming the key or tensor, before running anything; and
//! reads what it implements as llama.cpp does. Each case edits one thing in a tiny file
//! that otherwise imports (`common::tiny_llama`).

mod common;
use common::gguf_writer::{Meta, Tensor};
use common::tiny_llama::VARIANTS;

use lutra_core::arch::llama_family::{LlamaFamily, LlamaFamilyConfig};
use lutra_core::formats::gguf::Gguf;
use lutra_core::model::ModelError;

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// llama3-gqa-tied-q8_0 with `key` set to `value` (added if absent).
fn with_key(key: &str, value: Meta) -> Vec<u8> {
    VARIANTS[0].gguf_edited(|kvs, _| match kvs.iter_mut().find(|(k, _)| k == key) {
        Some(kv) => kv.1 = value,
        None => kvs.push((key.into(), value)),
    })
}

fn import(bytes: &[u8]) -> Result<LlamaFamily, ModelError> {
    LlamaFamily::from_gguf(&Gguf::parse(bytes).expect("the file parses"))
}

fn unsupported_key(r: Result<LlamaFamily, ModelError>) -> String {
    match r {
        Err(ModelError::Unsupported { key, value }) => format!("{key} = {value}"),
        Err(e) => panic!("expected Unsupported, got {e:?}"),
        Ok(_) => panic!("expected Unsupported, the file imported"),
    }
}

#[test]
fn unimplemented_hyperparameters_are_refused_naming_the_key() {
    let u = |n: u32| Meta::U32(n);
    for (key, value, named) in [
        ("llama.block_count", u(0x3E00_0001), "llama.block_count"),
        ("llama.block_count", u(0), "llama.block_count"),
        ("llama.attention.head_count_kv", u(3), "llama.attention.head_count_kv"),
        ("llama.attention.head_count", u(0), "llama.attention.head_count"),
        ("llama.attention.key_length", u(15), "llama.attention.key_length"),
        ("llama.attention.value_length", u(8), "llama.attention.value_length"),
        ("llama.rope.dimension_count", u(8), "llama.rope.dimension_count"),
        ("llama.expert_count", u(8), "llama.expert_count"),
        ("llama.rope.scaling.type", Meta::Str("yarn".into()), "llama.rope.scaling.type"),
        ("llama.rope.scaling.type", Meta::Str("longrope".into()), "llama.rope.scaling.type"),
        ("llama.rope.scaling.attn_factor", Meta::F32(0.5), "llama.rope.scaling.attn_factor"),
        ("llama.rope.freq_base", Meta::F32(f32::NAN), "llama.rope.freq_base"),
        ("llama.rope.scaling.factor", Meta::F32(-2.0), "llama.rope.scaling.factor"),
        ("llama.attention.layer_norm_rms_epsilon", Meta::F32(f32::INFINITY), "llama.attention.layer_norm_rms_epsilon"),
        ("llama.context_length", u(1 << 30), "llama.context_length"),
        ("llama.feed_forward_length", Meta::U32s(vec![160, 160]), "llama.feed_forward_length"),
    ] {
        let got = unsupported_key(import(&with_key(key, value.clone())));
        assert!(got.starts_with(named), "{key} = {value:?}: {got}");
    }
    // a required key missing, or of the wrong type
    let missing = VARIANTS[0].gguf_edited(|kvs, _| kvs.retain(|(k, _)| k != "llama.embedding_length"));
    assert!(matches!(import(&missing), Err(ModelError::MissingMetadata("llama.embedding_length"))));
    let wrong_type = with_key("llama.attention.layer_norm_rms_epsilon", Meta::Str("small".into()));
    assert!(matches!(import(&wrong_type), Err(ModelError::MissingMetadata("llama.attention.layer_norm_rms_epsilon"))));
    let other = with_key("general.architecture", Meta::Str("phi3".into()));
    assert!(matches!(import(&other), Err(ModelError::WrongArchitecture { .. })));
}

#[test]
fn tensors_the_graph_does_not_read_are_refused_by_name() {
    let extra = |name: &str, len: usize| VARIANTS[0].gguf_edited(|_, tensors| tensors.push(Tensor::f32(name, &vec![0.5; len])));
    for (name, len) in [("blk.0.ffn_up.bias", 160), ("blk.0.attn_qkv.weight", 64), ("output.bias", 320), ("blk.9.attn_norm.weight", 64)] {
        let got = unsupported_key(import(&extra(name, len)));
        assert!(got.contains(name), "{name}: {got}");
    }
    // QK-norm weights belong to qwen3 only
    assert!(unsupported_key(import(&extra("blk.0.attn_q_norm.weight", 16))).contains("attn_q_norm"));
    // a missing tensor
    let missing = VARIANTS[0].gguf_edited(|_, tensors| tensors.retain(|t| t.name != "blk.1.ffn_down.weight"));
    assert!(matches!(import(&missing), Err(ModelError::Unsupported { .. } | ModelError::MissingTensor(_))));
    // a RoPE factor of zero would divide by zero
    let zero = VARIANTS[0].gguf_edited(|_, tensors| {
        let t = tensors.iter_mut().find(|t| t.name == "rope_freqs.weight").unwrap();
        t.data[..4].copy_from_slice(&0f32.to_le_bytes());
    });
    assert!(unsupported_key(import(&zero)).starts_with("rope_freqs.weight"));
    // a weight that is not finite in an F32 matrix gives a non-finite Q8_0 scale, refused
    let nan = VARIANTS[1].gguf_edited(|_, tensors| {
        let t = tensors.iter_mut().find(|t| t.name == "blk.0.attn_k.weight").unwrap();
        t.data[40..44].copy_from_slice(&f32::NAN.to_le_bytes());
    });
    assert!(matches!(import(&nan), Err(ModelError::Kernel(lutra_core::Error::NonFiniteScale { .. }))));
}

#[test]
fn hyperparameters_are_read_as_llama_cpp_reads_them() {
    let c = LlamaFamilyConfig::from_gguf(&Gguf::parse(&VARIANTS[3].gguf()).unwrap()).unwrap();
    let h = c.hparams;
    assert_eq!((h.dim, h.heads, h.kv_heads, h.head_dim, h.q_dim(), h.kv_dim()), (64, 4, 2, 32, 128, 64));
    // linear scaling by 2 halves every frequency
    let c = LlamaFamilyConfig::from_gguf(&Gguf::parse(&VARIANTS[1].gguf()).unwrap()).unwrap();
    assert_eq!(c.rope_scale, 0.5);
    let f = c.rope_frequencies(None);
    assert!((f[1] as f64 - 0.5 * 1e6f64.powf(-2.0 / 16.0)).abs() < 1e-9, "{}", f[1]);
    // the Llama 3 factors divide: the last pair turns 8× slower
    let m = import(&VARIANTS[0].gguf()).unwrap();
    let factors = m.rope_factors.as_deref().unwrap();
    assert_eq!((factors[0], factors[factors.len() - 1]), (1.0, 8.0));
    let f = m.config.rope_frequencies(Some(factors));
    let want = 500_000f64.powf(-14.0 / 16.0) / 8.0;
    assert!(((f[7] as f64) - want).abs() / want < 1e-6, "{} vs {want}", f[7]);
    // defaults: KV heads = heads, key length = dim / heads, RoPE base 10 000
    let defaults =
        VARIANTS[0].gguf_edited(|kvs, _| kvs.retain(|(k, _)| k != "llama.attention.head_count_kv" && k != "llama.rope.freq_base"));
    let err = import(&defaults).err();
    // without head_count_kv the file's K/V shapes (2 KV heads) no longer fit 4
    assert!(matches!(err, Some(ModelError::BadTensorShape { .. })), "{err:?}");
}
