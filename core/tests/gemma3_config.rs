//! Gemma 3 hyperparameters read, not assumed. Tiny random-weight `gemma3` GGUFs with the
//! metadata each Gemma 3 size's file carries import with that size's configuration and
//! run it: linear RoPE scaling on the global layers only, the sliding-window pattern and
//! base, the 27B's query scale, final-logit softcapping. Values lutra does not implement
//! are refused with `ModelError::Unsupported` naming the key.

mod common;
use common::gguf_writer::{write_gguf, Meta, Tensor};
use common::tiny_gemma::*;
use common::Rng;
use lutra_core::arch::Architecture;

use lutra_core::arch::gemma3::{Gemma3, Gemma3Config, Gemma3State};
use lutra_core::formats::gguf::Gguf;
use lutra_core::formats::import::TensorSource;
use lutra_core::model::{ModelError, SingleThread};

fn import(kvs: &Kvs, tensors: &[Tensor]) -> Result<Gemma3, ModelError> {
    Gemma3::from_gguf(&Gguf::parse(&write_gguf(kvs, tensors)).expect("the writer's GGUF parses"))
}

/// The configuration of a file of metadata only.
fn config(kvs: &Kvs) -> Result<Gemma3Config, ModelError> {
    Gemma3Config::from_gguf(&Gguf::parse(&write_gguf(kvs, &[])).expect("the writer's GGUF parses"))
}

const TOKENS: [u32; 12] = [2, 17, 299, 5, 150, 42, 42, 7, 256, 1, 88, 123];

/// Logits of `TOKENS` fed in order from position 0.
fn logits(model: &Gemma3) -> Vec<Vec<f32>> {
    let mut state = Gemma3State::new(model, CONTEXT).unwrap();
    TOKENS.iter().enumerate().map(|(pos, &t)| model.forward(&SingleThread, &mut state, t, pos).unwrap().to_vec()).collect()
}

fn bits(logits: &[Vec<f32>]) -> Vec<Vec<u32>> {
    logits.iter().map(|l| l.iter().map(|x| x.to_bits()).collect()).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// (a) The 270M's metadata: Gemma 3's defaults, and a model that runs.
#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn the_270m_metadata_imports_with_the_defaults() {
    let model = import(&meta_270m(7), &tensors(7, 1)).expect("a 270M-style file imports");
    let c = model.config;
    assert_eq!(c, config(&meta_270m(7)).unwrap(), "the model's configuration is the file's");
    let h = c.hparams;
    assert_eq!((h.dim, h.hidden_dim, h.layers, h.heads, h.kv_heads, h.head_dim), (DIM, HIDDEN, 7, HEADS, KV_HEADS, HEAD_DIM));
    assert_eq!((h.vocab_size, h.context_length, c.norm_eps), (VOCAB, CONTEXT, 1e-6));
    assert_eq!((c.rope_global, c.rope_global_scale, c.rope_local), (1_000_000.0, 1.0, 10_000.0));
    assert_eq!((c.sliding_window, c.swa_period), (WINDOW, 6));
    assert_eq!(c.query_scale.to_bits(), (1.0 / (HEAD_DIM as f32).sqrt()).to_bits());
    assert_eq!(c.final_logit_softcap, None);
    assert_eq!(c.layer_windows(), [4, 4, 4, 4, 4, 0, 4], "layer 5 of each 6 is global");
    let out = logits(&model);
    assert!(out.iter().flatten().all(|x| x.is_finite()));
    assert!(out.windows(2).all(|w| w[0] != w[1]), "logits depend on the token and position");
}

/// The configuration of each Gemma 3 size from its file's metadata (sizes of the Hugging
/// Face configs; the tiny vocabulary is immaterial).
#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn every_gemma3_size_reads_its_configuration() {
    // (name, layers, dim, hidden, heads, kv heads, head_dim, window, linear RoPE factor, query_pre_attn_scalar)
    let sizes = [
        ("270M", 18, 640, 2048, 4, 1, 256, 512, None, 256),
        ("1B", 26, 1152, 6912, 4, 1, 256, 512, None, 256),
        ("4B", 34, 2560, 10240, 8, 4, 256, 1024, Some(8.0), 256),
        ("12B", 48, 3840, 15360, 16, 8, 256, 1024, Some(8.0), 256),
        ("27B", 62, 5376, 21504, 32, 16, 128, 1024, Some(8.0), 168),
    ];
    for (name, layers, dim, hidden, heads, kv, head_dim, window, factor, query_pre_attn_scalar) in sizes {
        let mut kvs = sized(layers, dim, hidden, heads, kv, head_dim, window, 131_072, VOCAB);
        if factor.is_some() {
            kvs = scaled(kvs);
        }
        let c = config(&kvs).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(c.rope_global_scale, factor.map_or(1.0, |f: f32| 1.0 / f), "{name}");
        assert_eq!((c.rope_global, c.rope_local), (1_000_000.0, 10_000.0), "{name}");
        let want = 1.0 / (query_pre_attn_scalar as f32).sqrt();
        assert_eq!(c.query_scale.to_bits(), want.to_bits(), "{name}: query scale {} ≠ 1/√{query_pre_attn_scalar}", c.query_scale);
        let windows = c.layer_windows();
        assert_eq!(windows.len(), layers);
        for (l, &w) in windows.iter().enumerate() {
            assert_eq!(w, if l % 6 == 5 { 0 } else { window }, "{name} layer {l}");
        }
    }
}

/// (b) The 4B's linear scaling by 8: the global layers' angles at position p are those
/// of p/8 (against f64), the sliding layers' are unscaled; in the forward pass scaling
/// changes global layers only.
#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn linear_rope_scaling_scales_the_global_layers() {
    let weights = tensors(7, 2);
    let model = import(&scaled(meta_270m(7)), &weights).expect("a 4B-style file imports");
    let c = model.config;
    assert_eq!((c.rope_global_scale, c.rope_local), (0.125, 10_000.0));
    assert_eq!(c.layer_windows(), [4, 4, 4, 4, 4, 0, 4]);

    // pair i of a head turns by pos · f[i]
    let (global, local) = (c.rope_frequencies(true), c.rope_frequencies(false));
    assert_eq!((global.len(), local.len()), (HEAD_DIM / 2, HEAD_DIM / 2));
    for pos in [1usize, 2, 7, 8, 9, 63, 100, 1000, 32_767, 131_071] {
        for i in 0..HEAD_DIM / 2 {
            let e = -2.0 * i as f64 / HEAD_DIM as f64;
            for (f, want) in [(global[i], pos as f64 / 8.0 * 1e6f64.powf(e)), (local[i], pos as f64 * 1e4f64.powf(e))] {
                let got = f64::from(pos as f32 * f);
                assert!((got - want).abs() <= 3e-7 * want, "pos {pos} pair {i}: angle {got} ≠ {want}");
            }
        }
    }

    // the same weights unscaled: position 0 (no rotation) agrees bit for bit, later ones do not
    let plain = logits(&import(&meta_270m(7), &weights).unwrap());
    let scaled_out = logits(&model);
    assert_eq!(bits(&scaled_out[..1]), bits(&plain[..1]));
    for pos in 1..TOKENS.len() {
        assert!(max_diff(&scaled_out[pos], &plain[pos]) > 1e-4, "position {pos}: scaling changed nothing");
    }
    // with every layer sliding (pattern 0) scaling has nothing to change
    let all_local = |kvs: Kvs| with(kvs, "gemma3.attention.sliding_window_pattern", Some(Meta::U32(0)));
    let local_model = import(&all_local(scaled(meta_270m(7))), &weights).unwrap();
    assert_eq!(local_model.config.layer_windows(), [WINDOW; 7]);
    assert_eq!(bits(&logits(&local_model)), bits(&logits(&import(&all_local(meta_270m(7)), &weights).unwrap())));
    // scaling type `none` never scales (llama.cpp), whatever the factor
    let none = with(scaled(meta_270m(7)), "gemma3.rope.scaling.type", Some(Meta::Str("none".into())));
    let none_model = import(&none, &weights).unwrap();
    assert_eq!(none_model.config.rope_global_scale, 1.0);
    assert_eq!(bits(&logits(&none_model)), bits(&plain));
    // the older key, the type defaulting to linear
    let old = with(meta_270m(7), "gemma3.rope.scale_linear", Some(Meta::F32(8.0)));
    let old_model = import(&old, &weights).unwrap();
    assert_eq!(old_model.config.rope_global_scale, 0.125);
    assert_eq!(bits(&logits(&old_model)), bits(&scaled_out));
    // a factor of 0 is llama.cpp's "unset"
    assert_eq!(config(&with(scaled(meta_270m(7)), "gemma3.rope.scaling.factor", Some(Meta::F32(0.0)))).unwrap().rope_global_scale, 1.0);
}

/// The sliding-window keys: the pattern's period, no window (every layer global, as
/// llama.cpp runs such files), and the sliding layers' own RoPE base.
#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn sliding_window_keys_choose_the_layers_and_their_base() {
    let weights = tensors(7, 3);
    let pattern = |p: u32| config(&with(meta_270m(7), "gemma3.attention.sliding_window_pattern", Some(Meta::U32(p)))).unwrap();
    assert_eq!(pattern(2).layer_windows(), [4, 0, 4, 0, 4, 0, 4]);
    assert_eq!(pattern(1).layer_windows(), [0; 7]);
    assert_eq!(pattern(0).layer_windows(), [4; 7]);

    // no window: every layer global, as every layer of a period of 1
    let no_window = import(&with(meta_270m(7), "gemma3.attention.sliding_window", None), &weights).unwrap();
    assert_eq!((no_window.config.sliding_window, no_window.config.layer_windows()), (0, vec![0; 7]));
    let zero_window = config(&with(meta_270m(7), "gemma3.attention.sliding_window", Some(Meta::U32(0)))).unwrap();
    assert_eq!(zero_window.layer_windows(), [0; 7]);
    let period_1 = import(&with(meta_270m(7), "gemma3.attention.sliding_window_pattern", Some(Meta::U32(1))), &weights).unwrap();
    assert_eq!(bits(&logits(&no_window)), bits(&logits(&period_1)));
    assert_ne!(bits(&logits(&no_window)), bits(&logits(&import(&meta_270m(7), &weights).unwrap())), "the window mattered");

    // the sliding layers' base: 10 000 unless the file says otherwise
    let plain = logits(&import(&meta_270m(7), &weights).unwrap());
    let base = |b: f32| import(&with(meta_270m(7), "gemma3.rope.freq_base_swa", Some(Meta::F32(b))), &weights).unwrap();
    assert_eq!(bits(&logits(&base(10_000.0))), bits(&plain));
    let other = base(500.0);
    assert_eq!(other.config.rope_local, 500.0);
    assert!(max_diff(&logits(&other)[3], &plain[3]) > 1e-4, "the sliding layers' base changed nothing");
}

/// The query scale is what attention multiplies queries by: doubling the QK-norm weights
/// of the queries (exact) and halving `query_scale` gives the same logits bit for bit,
/// doubling alone does not.
#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn attention_uses_the_query_scale() {
    let weights = tensors(7, 4);
    let doubled: Vec<Tensor> = weights
        .iter()
        .map(|t| {
            if !t.name.ends_with("attn_q_norm.weight") {
                return t.clone();
            }
            let v: Vec<f32> = t.data.chunks_exact(4).map(|b| 2.0 * f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            Tensor::f32(&t.name, &v)
        })
        .collect();
    let want = logits(&import(&meta_270m(7), &weights).unwrap());
    let mut model = import(&meta_270m(7), &doubled).unwrap();
    assert_ne!(bits(&logits(&model)), bits(&want), "doubled queries changed nothing");
    model.config.query_scale /= 2.0;
    assert_eq!(bits(&logits(&model)), bits(&want));
}

/// (d) `final_logit_softcapping`: logits are `cap·tanh(raw/cap)` of the uncapped model's,
/// bounded by the cap; 0 means none.
#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn final_logit_softcapping_caps_the_logits() {
    let weights = tensors(7, 5);
    let raw = logits(&import(&meta_270m(7), &weights).unwrap());
    let largest = raw.iter().flatten().fold(0.0f32, |m, x| m.max(x.abs()));
    let cap = largest / 3.0;
    let capped_model = import(&with(meta_270m(7), "gemma3.final_logit_softcapping", Some(Meta::F32(cap))), &weights).unwrap();
    assert_eq!(capped_model.config.final_logit_softcap, Some(cap));
    let capped = logits(&capped_model);
    let (mut over, mut moved) = (0usize, 0.0f32);
    for (r, c) in raw.iter().flatten().zip(capped.iter().flatten()) {
        assert!(c.abs() <= cap, "{c} beyond the cap {cap}");
        let want = f64::from(cap) * (f64::from(*r) / f64::from(cap)).tanh();
        assert!((f64::from(*c) - want).abs() <= 4.0 * f64::from(f32::EPSILON) * f64::from(cap), "{c} ≠ cap·tanh({r}/cap) = {want}");
        over += usize::from(r.abs() > cap);
        moved = moved.max((r - c).abs());
    }
    assert!(over > 0 && moved > cap / 2.0, "the cap never bit: largest logit {largest}, cap {cap}");

    let zero = import(&with(meta_270m(7), "gemma3.final_logit_softcapping", Some(Meta::F32(0.0))), &weights).unwrap();
    assert_eq!(zero.config.final_logit_softcap, None);
    assert_eq!(bits(&logits(&zero)), bits(&raw));
}

fn refused<T>(result: Result<T, ModelError>) -> (&'static str, String) {
    match result {
        Err(ModelError::Unsupported { key, value }) => (key, value),
        Err(other) => panic!("expected ModelError::Unsupported, got {other:?}"),
        Ok(_) => panic!("expected ModelError::Unsupported, the file was accepted"),
    }
}

/// (c) Values lutra does not implement: a typed error naming the key and the value,
/// before any tensor is imported.
#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn unimplemented_values_are_refused_by_key() {
    let base = || scaled(meta_270m(7));
    let s = |v: &str| Some(Meta::Str(v.into()));
    let cases: Vec<(&str, Option<Meta>, &str, &str)> = vec![
        ("gemma3.rope.scaling.type", s("yarn"), "gemma3.rope.scaling.type", "yarn"),
        ("gemma3.rope.scaling.type", s("longrope"), "gemma3.rope.scaling.type", "longrope"),
        ("gemma3.rope.scaling.type", s("dynamic"), "gemma3.rope.scaling.type", "dynamic"),
        ("gemma3.rope.scaling.factor", Some(Meta::F32(-8.0)), "gemma3.rope.scaling.factor", "-8"),
        ("gemma3.rope.scaling.factor", Some(Meta::F32(f32::NAN)), "gemma3.rope.scaling.factor", "NaN"),
        ("gemma3.rope.scaling.attn_factor", Some(Meta::F32(0.5)), "gemma3.rope.scaling.attn_factor", "0.5"),
        ("gemma3.attention.value_length", Some(Meta::U32(32)), "gemma3.attention.value_length", "32 (key_length 16)"),
        ("gemma3.rope.dimension_count", Some(Meta::U32(8)), "gemma3.rope.dimension_count", "8 (key_length 16)"),
        ("gemma3.attn_logit_softcapping", Some(Meta::F32(50.0)), "gemma3.attn_logit_softcapping", "50"),
        ("gemma3.final_logit_softcapping", Some(Meta::F32(f32::INFINITY)), "gemma3.final_logit_softcapping", "inf"),
        (
            "gemma3.attention.sliding_window_pattern",
            Some(Meta::Bools(vec![true; 7])),
            "gemma3.attention.sliding_window_pattern",
            "[bool; 7]",
        ),
        ("gemma3.attention.head_count_kv", Some(Meta::U32s(vec![2; 7])), "gemma3.attention.head_count_kv", "[u32; 7]"),
        ("gemma3.feed_forward_length", Some(Meta::U32s(vec![128; 7])), "gemma3.feed_forward_length", "[u32; 7]"),
        ("gemma3.attention.head_count_kv", Some(Meta::U32(3)), "gemma3.attention.head_count_kv", "3 (with 4 query heads)"),
        ("gemma3.attention.key_length", Some(Meta::U32(15)), "gemma3.attention.key_length", "15"),
        ("gemma3.rope.freq_base", Some(Meta::F32(0.0)), "gemma3.rope.freq_base", "0"),
        ("gemma3.rope.freq_base_swa", Some(Meta::F32(-1.0)), "gemma3.rope.freq_base_swa", "-1"),
    ];
    for (set, value, key, shown) in cases {
        let kvs = with(base(), set, value);
        assert_eq!(refused(config(&kvs)), (key, shown.to_string()), "{set}");
        let message = config(&kvs).unwrap_err().to_string();
        assert!(message.contains(key) && message.contains(shown), "{message}");
    }

    // the model refuses too, and an untied LM head, which lutra would not use
    let weights = tensors(7, 6);
    let (key, value) = refused(import(&with(base(), "gemma3.rope.scaling.type", s("yarn")), &weights));
    assert_eq!((key, value.as_str()), ("gemma3.rope.scaling.type", "yarn"));
    let mut untied = weights.clone();
    untied.push(Tensor::q8_0("output.weight", VOCAB, DIM, &vec![0.5; VOCAB * DIM]));
    assert_eq!(refused(import(&base(), &untied)).0, "output.weight");
    assert!(import(&base(), &weights).is_ok(), "the file without the refused value imports");
}

/// Missing required keys, and keys of the wrong type, are `MissingMetadata`; keys llama.cpp
/// defaults are defaulted as it does.
#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn required_keys_and_types() {
    for key in [
        "gemma3.context_length",
        "gemma3.embedding_length",
        "gemma3.block_count",
        "gemma3.feed_forward_length",
        "gemma3.attention.head_count",
        "gemma3.attention.layer_norm_rms_epsilon",
        "tokenizer.ggml.tokens",
    ] {
        assert_eq!(config(&with(meta_270m(7), key, None)), Err(ModelError::MissingMetadata(key)), "{key}");
    }
    let wrong_type = with(meta_270m(7), "gemma3.rope.scaling.type", Some(Meta::U32(1)));
    assert_eq!(config(&wrong_type), Err(ModelError::MissingMetadata("gemma3.rope.scaling.type")));
    let wrong_type = with(meta_270m(7), "gemma3.final_logit_softcapping", Some(Meta::Str("30".into())));
    assert_eq!(config(&wrong_type), Err(ModelError::MissingMetadata("gemma3.final_logit_softcapping")));

    // llama.cpp's defaults: KV heads = heads, key and value length = dim / heads, RoPE base 10 000
    let mut kvs = meta_270m(7);
    for key in ["gemma3.attention.head_count_kv", "gemma3.attention.key_length", "gemma3.attention.value_length", "gemma3.rope.freq_base"] {
        kvs = with(kvs, key, None);
    }
    let c = config(&kvs).unwrap();
    assert_eq!((c.hparams.kv_heads, c.hparams.head_dim, c.rope_global), (HEADS, DIM / HEADS, 10_000.0));
    assert_eq!(
        config(&with(meta_270m(7), "general.architecture", Some(Meta::Str("llama".into())))).unwrap_err().to_string(),
        "the file holds a llama model, not gemma3"
    );
}

/// Copies each range asked for out of the file, as the browser copies pieces of a
/// `Blob`, and remembers the largest piece.
struct Pieces<'a> {
    file: &'a [u8],
    piece: Vec<u8>,
    largest: usize,
}

impl TensorSource for Pieces<'_> {
    fn read(&mut self, range: std::ops::Range<u64>) -> Result<&[u8], ModelError> {
        self.piece.clear();
        self.piece.extend_from_slice(&self.file[range.start as usize..range.end as usize]);
        self.largest = self.largest.max(self.piece.len());
        Ok(&self.piece)
    }
}

#[test]
fn a_header_and_pieces_read_on_demand_import_the_same_model() {
    let file = write_gguf(&meta_270m(2), &tensors(2, 1));
    let whole = Gemma3::from_gguf(&Gguf::parse(&file).unwrap()).unwrap();
    // the header alone: a prefix grown until it parses
    let mut len = 64;
    let header = loop {
        match Gguf::parse_prefix(&file[..len.min(file.len())], file.len() as u64) {
            Ok(g) => break g,
            Err(_) if len < file.len() => len *= 2,
            Err(e) => panic!("{e}"),
        }
    };
    assert!(header.bytes().len() < file.len(), "the header parsed only from the whole file");
    let mut source = Pieces { file: &file, piece: Vec::new(), largest: 0 };
    let pieces = Gemma3::from_gguf_source(&header, &mut source, |_| {}).unwrap();
    assert_eq!(bits(&logits(&whole)), bits(&logits(&pieces)));
    // the largest piece is one tensor (the embedding), never the data section
    let embedding = VOCAB * DIM / 32 * 34;
    assert_eq!(source.largest, embedding);
    assert!(source.largest < file.len() - header.data_start());
    // a prefix longer than the file it claims to start is refused
    assert!(Gguf::parse_prefix(&file, file.len() as u64 - 1).is_err());
}

fn packed(model: &Gemma3, source: &Gguf<'_>) -> Vec<u8> {
    let mut w = lutra_core::formats::pack::Writer::new();
    model.write_packed(source, &mut w);
    let mut out = Vec::new();
    w.finish(|piece| {
        out.extend_from_slice(piece);
        Ok::<_, ()>(())
    })
    .unwrap();
    out
}

fn import_packed(bytes: &[u8]) -> Result<Gemma3, String> {
    let g = Gguf::parse(bytes).map_err(|e| e.to_string())?;
    lutra_core::formats::pack::check_header(&g)?;
    Gemma3::from_gguf(&g).map_err(|e| e.to_string())
}

#[test]
fn a_packed_file_imports_to_the_same_model_and_damage_is_refused() {
    let file = write_gguf(&meta_270m(2), &tensors(2, 4));
    let g = Gguf::parse(&file).unwrap();
    let model = Gemma3::from_gguf(&g).unwrap();
    let lutra = packed(&model, &g);
    let again = import_packed(&lutra).unwrap();
    assert_eq!(bits(&logits(&model)), bits(&logits(&again)));
    // packing what was unpacked gives the same file
    assert_eq!(packed(&again, &g), lutra);

    let data_start = Gguf::parse(&lutra).unwrap().data_start();
    // every tensor byte is covered by a checksum; every header byte by the header's
    let mut rng = Rng(8);
    for _ in 0..64 {
        let at = rng.below(lutra.len());
        let mut flipped = lutra.clone();
        flipped[at] ^= 1 << rng.below(8);
        match import_packed(&flipped) {
            Err(_) => {}
            // a flip in the zero padding between tensors changes nothing read
            Ok(m) => assert!(at >= data_start && bits(&logits(&m)) == bits(&logits(&model)), "a flip at byte {at} went unnoticed"),
        }
    }
    for cut in [10, 100, data_start - 1, data_start + 10, lutra.len() - 1] {
        assert!(import_packed(&lutra[..cut]).is_err(), "truncated at {cut}");
    }
    // another format version
    let version_at = lutra.windows(12).position(|w| w == b"lutra.format").unwrap() + 12 + 4;
    let mut newer = lutra.clone();
    for other in [lutra_core::formats::pack::VERSION - 1, lutra_core::formats::pack::VERSION + 1] {
        newer[version_at..version_at + 4].copy_from_slice(&other.to_le_bytes());
        let refused = import_packed(&newer).err();
        assert!(refused.as_ref().is_some_and(|e| e.contains(&format!("version {other}"))), "{refused:?}");
    }
}

/// Found by `cargo xtask fuzz` (target `model`): a `block_count` of 0x3E00_0001 made the
/// import reserve room for a billion layers before it looked for their tensors. Every
/// size a buffer is made from is now bounded, and refused by key beyond the bound.
#[test]
fn hyperparameters_beyond_the_limits_are_refused_before_anything_is_allocated() {
    for (key, value) in [
        ("gemma3.block_count", 0x3E00_0001),
        ("gemma3.embedding_length", 1 << 20),
        ("gemma3.feed_forward_length", u32::MAX),
        ("gemma3.attention.head_count", 1 << 16),
        ("gemma3.context_length", u32::MAX),
    ] {
        let kvs = with(meta_270m(2), key, Some(Meta::U32(value)));
        match config(&kvs) {
            Err(ModelError::Unsupported { key: k, .. }) => assert_eq!(k, key),
            other => panic!("{key} = {value}: {other:?}"),
        }
        assert!(matches!(import(&kvs, &tensors(2, 1)), Err(ModelError::Unsupported { .. })), "{key}");
    }
}
