//! Tiny random-weight GGUF files of the Llama family (`llama` with Llama 3's RoPE
//! factors and GQA, `llama` Mistral-style with an untied head and linear RoPE scaling,
//! `qwen2` with q/k/v biases, `qwen3` with QK-norm and a head width that is not dim/heads),
//! in F32, Q8_0, Q4_0, and Q1_0 and Q2_0 (with a Q8_0 embedding and head), written deterministically so a test can rebuild exactly the file
//! llama.cpp computed the golden logits on (`llama_family_golden` example,
//! tests/golden/llama-family/).
//!
//! They share a 320-token SentencePiece vocabulary (`<unk>`, `<s>`, `</s>`, the 256 byte
//! tokens, ASCII words): llama.cpp loads it for any architecture, and the logits do not
//! depend on what the tokens spell.

use lutra_core::rng::SplitMix64;

use super::gguf_writer::{write_gguf, Meta, Tensor};

pub const VOCAB: usize = 320;
pub const CONTEXT: usize = 64;
/// Positions the golden files hold logits for.
pub const POSITIONS: usize = 32;

/// Weight storage of a file's matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    F32,
    Q8_0,
    Q4_0,
    /// Block matrices in Q1_0 (one sign bit per weight), embedding and head in Q8_0: as
    /// PrismML's 1-bit Bonsai files are.
    Q1_0,
    /// Block matrices in Q2_0 (codes −1…+2), embedding and head in Q8_0.
    Q2_0,
}

/// One tiny model: what differs between the files.
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    /// The golden file's name (`tests/golden/llama-family/NAME.bin`).
    pub name: &'static str,
    pub arch: &'static str,
    pub storage: Storage,
    pub dim: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    /// `attention.key_length`, when it is not dim / heads.
    pub head_dim: Option<usize>,
    pub rope_base: f32,
    /// `rope.scaling.type = linear` with this factor.
    pub linear_rope_factor: Option<f32>,
    /// A `rope_freqs.weight` tensor as the converter writes it for `rope_type = llama3`
    /// (factor 8, low 1, high 4, original context 8192).
    pub llama3_rope: bool,
    /// `output.weight` (else the head is the token embedding).
    pub untied: bool,
    /// q/k/v biases.
    pub qkv_bias: bool,
    /// Per-head q/k RMSNorm tensors.
    pub qk_norm: bool,
}

/// The variants the tests check against llama.cpp.
pub const VARIANTS: &[Variant] = &[
    Variant {
        name: "llama3-gqa-tied-q8_0",
        arch: "llama",
        storage: Storage::Q8_0,
        dim: 64,
        hidden: 160,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: None,
        rope_base: 500_000.0,
        linear_rope_factor: None,
        llama3_rope: true,
        untied: false,
        qkv_bias: false,
        qk_norm: false,
    },
    Variant {
        name: "mistral-style-untied-linear-f32",
        arch: "llama",
        storage: Storage::F32,
        dim: 64,
        hidden: 128,
        layers: 2,
        heads: 4,
        kv_heads: 1,
        head_dim: None,
        rope_base: 1_000_000.0,
        linear_rope_factor: Some(2.0),
        llama3_rope: false,
        untied: true,
        qkv_bias: false,
        qk_norm: false,
    },
    Variant {
        name: "qwen2-bias-tied-q8_0",
        arch: "qwen2",
        storage: Storage::Q8_0,
        dim: 64,
        hidden: 96,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: None,
        rope_base: 1_000_000.0,
        linear_rope_factor: None,
        llama3_rope: false,
        untied: false,
        qkv_bias: true,
        qk_norm: false,
    },
    Variant {
        name: "qwen3-qknorm-wide-heads-f32",
        arch: "qwen3",
        storage: Storage::F32,
        dim: 64,
        hidden: 128,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: Some(32),
        rope_base: 1_000_000.0,
        linear_rope_factor: None,
        llama3_rope: false,
        untied: true,
        qkv_bias: false,
        qk_norm: true,
    },
    Variant {
        name: "qwen3-qknorm-q4_0",
        arch: "qwen3",
        storage: Storage::Q4_0,
        dim: 64,
        hidden: 128,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: Some(32),
        rope_base: 1_000_000.0,
        linear_rope_factor: None,
        llama3_rope: false,
        untied: true,
        qkv_bias: false,
        qk_norm: true,
    },
    Variant {
        name: "qwen3-bonsai-style-q1_0",
        arch: "qwen3",
        storage: Storage::Q1_0,
        dim: 128,
        hidden: 256,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: Some(32),
        rope_base: 1_000_000.0,
        linear_rope_factor: None,
        llama3_rope: false,
        untied: true,
        qkv_bias: false,
        qk_norm: true,
    },
    Variant {
        name: "llama-tied-q2_0",
        arch: "llama",
        storage: Storage::Q2_0,
        dim: 128,
        hidden: 192,
        layers: 2,
        heads: 4,
        kv_heads: 1,
        head_dim: None,
        rope_base: 10_000.0,
        linear_rope_factor: None,
        llama3_rope: false,
        untied: false,
        qkv_bias: false,
        qk_norm: false,
    },
];

impl Variant {
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.dim / self.heads)
    }

    /// The GGUF file, the same bytes on every machine.
    pub fn gguf(&self) -> Vec<u8> {
        self.build(VOCAB, spm_vocab(), CONTEXT, |_, _| {})
    }

    /// `gguf()` with its metadata and tensors edited by `edit` before writing (for files
    /// damaged one way at a time).
    pub fn gguf_edited(&self, edit: impl FnOnce(&mut Vec<(String, Meta)>, &mut Vec<Tensor>)) -> Vec<u8> {
        self.build(VOCAB, spm_vocab(), CONTEXT, edit)
    }

    /// The file with a vocabulary of `vocab` tokens described by `tokenizer`'s keys.
    fn build(
        &self,
        vocab: usize,
        tokenizer: Vec<(String, Meta)>,
        context: usize,
        edit: impl FnOnce(&mut Vec<(String, Meta)>, &mut Vec<Tensor>),
    ) -> Vec<u8> {
        let mut rng = SplitMix64::new(0x11a3a ^ self.name.len() as u64 ^ (self.name.as_bytes()[0] as u64) << 8);
        let (hd, a) = (self.head_dim(), self.arch);
        let u = |n: usize| Meta::U32(n as u32);
        let mut kvs: Vec<(String, Meta)> = vec![
            ("general.architecture".into(), Meta::Str(a.into())),
            (format!("{a}.context_length"), u(context)),
            (format!("{a}.embedding_length"), u(self.dim)),
            (format!("{a}.feed_forward_length"), u(self.hidden)),
            (format!("{a}.block_count"), u(self.layers)),
            (format!("{a}.attention.head_count"), u(self.heads)),
            (format!("{a}.attention.head_count_kv"), u(self.kv_heads)),
            (format!("{a}.rope.freq_base"), Meta::F32(self.rope_base)),
            (format!("{a}.attention.layer_norm_rms_epsilon"), Meta::F32(1e-6)),
        ];
        if let Some(k) = self.head_dim {
            kvs.push((format!("{a}.attention.key_length"), u(k)));
            kvs.push((format!("{a}.attention.value_length"), u(k)));
        }
        if let Some(f) = self.linear_rope_factor {
            kvs.push((format!("{a}.rope.scaling.type"), Meta::Str("linear".into())));
            kvs.push((format!("{a}.rope.scaling.factor"), Meta::F32(f)));
        }
        kvs.extend(tokenizer);

        let mut tensors = Vec::new();
        let mut matrix = |name: String, rows: usize, cols: usize, scale: f32, rng: &mut SplitMix64| {
            let values: Vec<f32> = (0..rows * cols).map(|_| scale * (2.0 * rng.unit() as f32 - 1.0)).collect();
            let embedding_or_head = name == "token_embd.weight" || name == "output.weight";
            tensors.push(match self.storage {
                Storage::F32 => Tensor::f32_matrix(&name, rows, cols, &values),
                Storage::Q8_0 => Tensor::q8_0(&name, rows, cols, &values),
                Storage::Q1_0 | Storage::Q2_0 if embedding_or_head => Tensor::q8_0(&name, rows, cols, &values),
                Storage::Q4_0 => Tensor::q4_0(&name, rows, cols, &values),
                Storage::Q1_0 => Tensor::q1_0(&name, rows, cols, &values),
                Storage::Q2_0 => Tensor::q2_0(&name, rows, cols, &values),
            });
        };
        // uniform(−s, s) with s = √(3/cols): unit-variance products of unit-variance inputs
        let s = |cols: usize| (3.0 / cols as f32).sqrt();
        matrix("token_embd.weight".into(), vocab, self.dim, 1.0, &mut rng);
        let (q, kv) = (self.heads * hd, self.kv_heads * hd);
        let mut layer_tensors = Vec::new();
        for l in 0..self.layers {
            let n = |t: &str| format!("blk.{l}.{t}.weight");
            matrix(n("attn_q"), q, self.dim, s(self.dim), &mut rng);
            matrix(n("attn_k"), kv, self.dim, s(self.dim), &mut rng);
            matrix(n("attn_v"), kv, self.dim, s(self.dim), &mut rng);
            matrix(n("attn_output"), self.dim, q, s(q), &mut rng);
            matrix(n("ffn_gate"), self.hidden, self.dim, s(self.dim), &mut rng);
            matrix(n("ffn_up"), self.hidden, self.dim, s(self.dim), &mut rng);
            matrix(n("ffn_down"), self.dim, self.hidden, s(self.hidden), &mut rng);
            let mut vector = |name: String, len: usize, around: f32, spread: f32| {
                let v: Vec<f32> = (0..len).map(|_| around + spread * (2.0 * rng.unit() as f32 - 1.0)).collect();
                layer_tensors.push(Tensor::f32(&name, &v));
            };
            vector(n("attn_norm"), self.dim, 1.0, 0.3);
            vector(n("ffn_norm"), self.dim, 1.0, 0.3);
            if self.qkv_bias {
                vector(format!("blk.{l}.attn_q.bias"), q, 0.0, 0.5);
                vector(format!("blk.{l}.attn_k.bias"), kv, 0.0, 0.5);
                vector(format!("blk.{l}.attn_v.bias"), kv, 0.0, 0.5);
            }
            if self.qk_norm {
                vector(n("attn_q_norm"), hd, 1.0, 0.3);
                vector(n("attn_k_norm"), hd, 1.0, 0.3);
            }
        }
        if self.untied {
            matrix("output.weight".into(), vocab, self.dim, s(self.dim), &mut rng);
        }
        let norm: Vec<f32> = (0..self.dim).map(|_| 1.0 + 0.3 * (2.0 * rng.unit() as f32 - 1.0)).collect();
        tensors.extend(layer_tensors);
        tensors.push(Tensor::f32("output_norm.weight", &norm));
        if self.llama3_rope {
            tensors.push(Tensor::f32("rope_freqs.weight", &llama3_rope_factors(self.rope_base, hd)));
        }
        edit(&mut kvs, &mut tensors);
        write_gguf(&kvs, &tensors)
    }
}

/// `variant`'s weights with the tokenizer (every `tokenizer.*` key) of a real GGUF,
/// e.g. one of llama.cpp's vocab files: a model the CLI can chat with in that
/// vocabulary's format, with a context of 1024. The embedding and a tied head grow to
/// the vocabulary.
pub fn with_vocab(variant: &Variant, vocab_gguf: &[u8]) -> Result<Vec<u8>, String> {
    let vocab = lutra_core::formats::gguf::Gguf::parse(vocab_gguf).map_err(|e| e.to_string())?;
    let n = vocab.get_array("tokenizer.ggml.tokens").ok_or("no tokenizer.ggml.tokens")?.len() as usize;
    let mut tokenizer = Vec::new();
    for (key, value) in vocab.metadata() {
        if key.starts_with("tokenizer.") {
            tokenizer.push((key.to_string(), Meta::from_value(&value).ok_or_else(|| format!("{key}: a value type the writer lacks"))?));
        }
    }
    Ok(variant.build(n, tokenizer, 1024, |_, _| {}))
}

/// The token ids the golden logits are for: BOS, then random ids.
pub fn tokens() -> Vec<u32> {
    let mut rng = SplitMix64::new(7);
    core::iter::once(1).chain((1..POSITIONS).map(|_| 3 + rng.below(VOCAB as u64 - 3) as u32)).collect()
}

/// convert_hf_to_gguf's `rope_freqs` for `rope_type = llama3` (factor 8, low_freq_factor 1,
/// high_freq_factor 4, original context 8192), in f32 as torch computes the frequencies.
pub fn llama3_rope_factors(base: f32, head_dim: usize) -> Vec<f32> {
    let (factor, low, high, old_context) = (8.0f64, 1.0f64, 4.0f64, 8192.0f64);
    let (low_wavelen, high_wavelen) = (old_context / low, old_context / high);
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / (base as f64).powf((2 * i) as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let f = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old_context / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            f as f32
        })
        .collect()
}

/// A 320-token SentencePiece vocabulary: `<unk>`, `<s>`, `</s>`, the byte tokens, then
/// words.
fn spm_vocab() -> Vec<(String, Meta)> {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    let words = ["▁the", "▁a", "▁otter", "▁river", "▁swims", "▁and", "▁eats", "▁fish", "▁in", "▁water", "s", "ed", "ing", "▁is", "▁of"];
    let mut i = 0;
    while tokens.len() < VOCAB {
        let w = words[i % words.len()];
        tokens.push(if i < words.len() { w.to_string() } else { format!("{w}{}", i / words.len()) });
        i += 1;
    }
    let types: Vec<i32> = (0..VOCAB)
        .map(|i| {
            if i == 0 {
                2
            } else if i < 3 {
                3
            } else if i < 259 {
                6
            } else {
                1
            }
        })
        .collect();
    let scores: Vec<f32> = (0..VOCAB).map(|i| if i < 259 { 0.0 } else { -(i as f32) }).collect();
    vec![
        ("tokenizer.ggml.model".into(), Meta::Str("llama".into())),
        ("tokenizer.ggml.tokens".into(), Meta::Strs(tokens)),
        ("tokenizer.ggml.scores".into(), Meta::F32s(scores)),
        ("tokenizer.ggml.token_type".into(), Meta::I32s(types)),
        ("tokenizer.ggml.bos_token_id".into(), Meta::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Meta::U32(2)),
        ("tokenizer.ggml.unknown_token_id".into(), Meta::U32(0)),
    ]
}

/// llama.cpp's logits for one variant (`tests/golden/llama-family/NAME.bin`): which file
/// (its length and `lutra_core::formats::pack::checksum`), the tokens fed, and one row of logits
/// per position. Layout: `LFG1`, u64 file length, u64 checksum, u32 positions, u32
/// vocabulary, the token ids (u32), the logits (f32), all little-endian.
#[derive(Clone, Debug, PartialEq)]
pub struct FamilyGolden {
    pub file_len: u64,
    pub file_checksum: u64,
    pub tokens: Vec<u32>,
    pub logits: Vec<Vec<f32>>,
}

impl FamilyGolden {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = b"LFG1".to_vec();
        out.extend(self.file_len.to_le_bytes());
        out.extend(self.file_checksum.to_le_bytes());
        out.extend((self.tokens.len() as u32).to_le_bytes());
        out.extend((self.logits.first().map_or(0, Vec::len) as u32).to_le_bytes());
        self.tokens.iter().for_each(|t| out.extend(t.to_le_bytes()));
        self.logits.iter().flatten().for_each(|x| out.extend(x.to_le_bytes()));
        out
    }

    pub fn parse(bytes: &[u8]) -> Result<FamilyGolden, String> {
        let rest = bytes.strip_prefix(b"LFG1").ok_or("not an LFG1 golden file")?;
        let word = |at: usize, n: usize| rest.get(at..at + n).ok_or_else(|| "truncated golden file".to_string());
        let u64_at = |at| word(at, 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
        let u32_at = |at| word(at, 4).map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()));
        let (file_len, file_checksum) = (u64_at(0)?, u64_at(8)?);
        let (n, vocab) = (u32_at(16)? as usize, u32_at(20)? as usize);
        let tokens = (0..n).map(|i| u32_at(24 + 4 * i)).collect::<Result<Vec<_>, _>>()?;
        let start = 24 + 4 * n;
        let floats = word(start, 4 * n * vocab)?;
        if rest.len() != start + 4 * n * vocab {
            return Err("golden file has trailing bytes".into());
        }
        let values: Vec<f32> = floats.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(FamilyGolden { file_len, file_checksum, tokens, logits: values.chunks_exact(vocab.max(1)).map(<[f32]>::to_vec).collect() })
    }
}
