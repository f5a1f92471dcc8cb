//! llama2.c checkpoint reader (zero-copy over `&[u8]`, every length checked).
//!
//! The legacy ("version 0") format that karpathy's `run.c` reads: a header of 7
//! little-endian `i32` — `dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
//! seq_len` — then f32 tensors, little-endian, back to back, in this order:
//!
//! ```text
//! token_embedding [vocab, dim]          rms_att [layers, dim]
//! wq  [layers, dim, dim]                wk [layers, kv_dim, dim]
//! wv  [layers, kv_dim, dim]             wo [layers, dim, dim]
//! rms_ffn [layers, dim]                 w1 [layers, hidden, dim]
//! w2  [layers, dim, hidden]             w3 [layers, hidden, dim]
//! rms_final [dim]                       freq_cis_real [seq_len, head_size/2]
//! freq_cis_imag [seq_len, head_size/2]  wcls [vocab, dim]   (only if unshared)
//! ```
//!
//! `kv_dim = dim * n_kv_heads / n_heads`. A negative `vocab_size` in the header means
//! the classifier `wcls` is stored separately at the end; a positive one means it is
//! tied to the token embedding.
//!
//! The file must be *exactly* the size the header implies: a longer file is refused too
//! (it is a different format or a corrupt one; guessing is how wrong weights load). The
//! newer versioned llama2.c exports (magic `0x616b3432`, "ak42") are recognised and refused with their
//! own error. stories15M is 60,816,028 bytes: dim 288, hidden 768, 6 layers, 6 heads,
//! 6 KV heads, vocab 32000 (shared classifier), seq_len 256.

use core::fmt;

/// Bytes of the header (7 × i32).
pub const HEADER_BYTES: usize = 28;

/// Upper bounds on the header fields: far above any llama2.c model, low enough that a
/// garbage header is reported as such rather than as a size mismatch.
pub const MAX_DIM: usize = 1 << 16;
pub const MAX_HIDDEN_DIM: usize = 1 << 18;
pub const MAX_LAYERS: usize = 1 << 10;
pub const MAX_HEADS: usize = 1 << 10;
pub const MAX_VOCAB: usize = 1 << 21;
pub const MAX_SEQ_LEN: usize = 1 << 20;

/// `ak42` read as a little-endian i32: the magic of the versioned llama2.c exports.
const VERSIONED_MAGIC: i32 = 0x616b_3432;

/// Why a llama2.c checkpoint was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Llama2cError {
    /// Shorter than the 28-byte header.
    TooShort { len: usize },
    /// A versioned llama2.c export (magic `ak42`), not the legacy format `run.c` reads.
    VersionedFormat { version: i32 },
    /// A header field that is zero, negative or implausibly large.
    BadField { field: &'static str, value: i32, max: usize },
    /// `n_heads` does not divide `dim`.
    HeadsDontDivideDim { dim: usize, n_heads: usize },
    /// `n_kv_heads` does not divide `n_heads`.
    KvHeadsDontDivideHeads { n_heads: usize, n_kv_heads: usize },
    /// RoPE rotates pairs of dimensions: the head size must be even.
    OddHeadSize { head_size: usize },
    /// The tensor sizes overflow the address space of this target.
    Overflow,
    /// The file is not exactly as long as the header implies.
    SizeMismatch { expected: usize, got: usize },
    /// A layer index at or past `n_layers`, or a layer asked of a global tensor.
    LayerOutOfRange { tensor: &'static str, layer: usize, n_layers: usize },
    /// An element or row index past the end of a tensor.
    IndexOutOfRange { tensor: &'static str, index: usize, len: usize },
    /// A destination buffer of the wrong length.
    BufferSize { tensor: &'static str, expected: usize, got: usize },
    /// `as_f32` on bytes that are not 4-byte aligned (copy rows out instead).
    Misaligned { tensor: &'static str },
    /// `as_f32` on a big-endian target, where the bytes are not native f32.
    BigEndian,
}

impl fmt::Display for Llama2cError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Llama2cError::TooShort { len } => {
                write!(f, "llama2.c checkpoint: {len} bytes is shorter than the {HEADER_BYTES}-byte header")
            }
            Llama2cError::VersionedFormat { version } => write!(
                f,
                "llama2.c checkpoint: a versioned export (magic ak42, version {version}); only the legacy format of run.c is supported (export with --version 0)"
            ),
            Llama2cError::BadField { field, value, max } => {
                write!(f, "llama2.c checkpoint: header field {field} = {value}, expected 1..={max}")
            }
            Llama2cError::HeadsDontDivideDim { dim, n_heads } => {
                write!(f, "llama2.c checkpoint: n_heads {n_heads} does not divide dim {dim}")
            }
            Llama2cError::KvHeadsDontDivideHeads { n_heads, n_kv_heads } => {
                write!(f, "llama2.c checkpoint: n_kv_heads {n_kv_heads} does not divide n_heads {n_heads}")
            }
            Llama2cError::OddHeadSize { head_size } => write!(f, "llama2.c checkpoint: head size {head_size} is odd (RoPE needs pairs)"),
            Llama2cError::Overflow => write!(f, "llama2.c checkpoint: the tensor sizes in the header overflow the address space"),
            Llama2cError::SizeMismatch { expected, got } => {
                write!(f, "llama2.c checkpoint: the header implies {expected} bytes, the file has {got}")
            }
            Llama2cError::LayerOutOfRange { tensor, layer, n_layers } => {
                write!(f, "llama2.c tensor {tensor}: layer {layer} out of range (model has {n_layers} layers)")
            }
            Llama2cError::IndexOutOfRange { tensor, index, len } => {
                write!(f, "llama2.c tensor {tensor}: index {index} out of range (length {len})")
            }
            Llama2cError::BufferSize { tensor, expected, got } => {
                write!(f, "llama2.c tensor {tensor}: buffer of {got} floats, expected {expected}")
            }
            Llama2cError::Misaligned { tensor } => {
                write!(f, "llama2.c tensor {tensor}: bytes not 4-byte aligned, cannot view as f32 (copy rows instead)")
            }
            Llama2cError::BigEndian => write!(f, "llama2.c tensors are little-endian: no zero-copy f32 view on a big-endian target"),
        }
    }
}

impl core::error::Error for Llama2cError {}

/// The model hyperparameters of a llama2.c header, validated. Mirrors `run.c`'s `Config`
/// field by field, under its names (`n_layers`, `n_heads`, `n_kv_heads`, `seq_len`); the
/// engine's `model::Hparams` is made from it in one place, `arch::llama`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub dim: usize,
    pub hidden_dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Always positive here; the sign in the file is `shared_classifier`.
    pub vocab_size: usize,
    pub seq_len: usize,
    /// The classifier is the token embedding (positive `vocab_size` in the header).
    pub shared_classifier: bool,
}

impl Config {
    /// Read and validate the 28-byte header at the start of `bytes`.
    pub fn from_header(bytes: &[u8]) -> Result<Config, Llama2cError> {
        let Some(header) = bytes.get(..HEADER_BYTES) else {
            return Err(Llama2cError::TooShort { len: bytes.len() });
        };
        let mut v = [0i32; 7];
        for (x, c) in v.iter_mut().zip(header.chunks_exact(4)) {
            *x = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        if v[0] == VERSIONED_MAGIC {
            return Err(Llama2cError::VersionedFormat { version: v[1] });
        }
        let field = |field: &'static str, value: i32, max: usize| match usize::try_from(value) {
            Ok(u) if (1..=max).contains(&u) => Ok(u),
            _ => Err(Llama2cError::BadField { field, value, max }),
        };
        let dim = field("dim", v[0], MAX_DIM)?;
        let hidden_dim = field("hidden_dim", v[1], MAX_HIDDEN_DIM)?;
        let n_layers = field("n_layers", v[2], MAX_LAYERS)?;
        let n_heads = field("n_heads", v[3], MAX_HEADS)?;
        let n_kv_heads = field("n_kv_heads", v[4], MAX_HEADS)?;
        // i32::MIN has no absolute value; it stays negative and `field` rejects it.
        let vocab_size = field("vocab_size", v[5].checked_abs().unwrap_or(i32::MIN), MAX_VOCAB)?;
        let seq_len = field("seq_len", v[6], MAX_SEQ_LEN)?;
        if !dim.is_multiple_of(n_heads) {
            return Err(Llama2cError::HeadsDontDivideDim { dim, n_heads });
        }
        if !n_heads.is_multiple_of(n_kv_heads) {
            return Err(Llama2cError::KvHeadsDontDivideHeads { n_heads, n_kv_heads });
        }
        let head_size = dim / n_heads;
        if !head_size.is_multiple_of(2) {
            return Err(Llama2cError::OddHeadSize { head_size });
        }
        Ok(Config { dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len, shared_classifier: v[5] > 0 })
    }

    /// The header these hyperparameters are written as (the inverse of `from_header`).
    pub fn to_header(&self) -> [u8; HEADER_BYTES] {
        let vocab = self.vocab_size as i32;
        let fields = [
            self.dim as i32,
            self.hidden_dim as i32,
            self.n_layers as i32,
            self.n_heads as i32,
            self.n_kv_heads as i32,
            if self.shared_classifier { vocab } else { vocab.wrapping_neg() },
            self.seq_len as i32,
        ];
        let mut out = [0u8; HEADER_BYTES];
        for (o, x) in out.chunks_exact_mut(4).zip(fields) {
            o.copy_from_slice(&x.to_le_bytes());
        }
        out
    }

    pub fn head_size(&self) -> usize {
        self.dim / self.n_heads
    }

    /// `dim * n_kv_heads / n_heads`: the width of K and V.
    pub fn kv_dim(&self) -> usize {
        self.head_size() * self.n_kv_heads
    }

    /// `(rows, cols)` of one layer's slice of `kind` (the whole tensor for global ones).
    pub fn shape(&self, kind: TensorKind) -> (usize, usize) {
        use TensorKind::*;
        match kind {
            TokenEmbedding | Wcls => (self.vocab_size, self.dim),
            RmsAtt | RmsFfn | RmsFinal => (1, self.dim),
            Wq | Wo => (self.dim, self.dim),
            Wk | Wv => (self.kv_dim(), self.dim),
            W1 | W3 => (self.hidden_dim, self.dim),
            W2 => (self.dim, self.hidden_dim),
            FreqCisReal | FreqCisImag => (self.seq_len, self.head_size() / 2),
        }
    }

    /// Byte offset of every tensor (indexed by `TensorKind as usize`; `Wcls` is the end of
    /// the file when shared) and the total file size, all with checked arithmetic.
    fn layout(&self) -> Result<([usize; TensorKind::COUNT], usize), Llama2cError> {
        let mut offsets = [0usize; TensorKind::COUNT];
        let mut at = HEADER_BYTES;
        for kind in TensorKind::ALL {
            offsets[kind as usize] = at;
            if kind == TensorKind::Wcls && self.shared_classifier {
                continue;
            }
            let (rows, cols) = self.shape(kind);
            let copies = if kind.per_layer() { self.n_layers } else { 1 };
            let bytes = rows.checked_mul(cols).and_then(|n| n.checked_mul(copies)).and_then(|n| n.checked_mul(4));
            at = bytes.and_then(|b| at.checked_add(b)).ok_or(Llama2cError::Overflow)?;
        }
        Ok((offsets, at))
    }

    /// The exact file size this header implies.
    pub fn file_size(&self) -> Result<usize, Llama2cError> {
        Ok(self.layout()?.1)
    }
}

/// The tensors of a llama2.c checkpoint, in file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorKind {
    TokenEmbedding,
    RmsAtt,
    Wq,
    Wk,
    Wv,
    Wo,
    RmsFfn,
    W1,
    W2,
    W3,
    RmsFinal,
    FreqCisReal,
    FreqCisImag,
    Wcls,
}

impl TensorKind {
    pub const COUNT: usize = 14;
    /// File order.
    pub const ALL: [TensorKind; Self::COUNT] = {
        use TensorKind::*;
        [TokenEmbedding, RmsAtt, Wq, Wk, Wv, Wo, RmsFfn, W1, W2, W3, RmsFinal, FreqCisReal, FreqCisImag, Wcls]
    };

    pub fn name(self) -> &'static str {
        use TensorKind::*;
        match self {
            TokenEmbedding => "token_embedding",
            RmsAtt => "rms_att",
            Wq => "wq",
            Wk => "wk",
            Wv => "wv",
            Wo => "wo",
            RmsFfn => "rms_ffn",
            W1 => "w1",
            W2 => "w2",
            W3 => "w3",
            RmsFinal => "rms_final",
            FreqCisReal => "freq_cis_real",
            FreqCisImag => "freq_cis_imag",
            Wcls => "wcls",
        }
    }

    /// Stored once per layer (`[layers, ...]`).
    pub fn per_layer(self) -> bool {
        use TensorKind::*;
        matches!(self, RmsAtt | Wq | Wk | Wv | Wo | RmsFfn | W1 | W2 | W3)
    }
}

/// A parsed checkpoint: the validated config and zero-copy views of its tensors.
#[derive(Debug, Clone, Copy)]
pub struct Checkpoint<'a> {
    bytes: &'a [u8],
    config: Config,
    offsets: [usize; TensorKind::COUNT],
}

impl<'a> Checkpoint<'a> {
    /// Validate the header and that `bytes` is exactly as long as it implies.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Llama2cError> {
        let config = Config::from_header(bytes)?;
        let (offsets, expected) = config.layout()?;
        if bytes.len() != expected {
            return Err(Llama2cError::SizeMismatch { expected, got: bytes.len() });
        }
        Ok(Checkpoint { bytes, config, offsets })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// One tensor: `layer` selects the slice of a per-layer tensor and must be 0 for a
    /// global one. `Wcls` of a shared-classifier model is the token embedding.
    pub fn tensor(&self, kind: TensorKind, layer: usize) -> Result<F32Tensor<'a>, Llama2cError> {
        let kind = if kind == TensorKind::Wcls && self.config.shared_classifier { TensorKind::TokenEmbedding } else { kind };
        let layers = if kind.per_layer() { self.config.n_layers } else { 1 };
        if layer >= layers {
            return Err(Llama2cError::LayerOutOfRange { tensor: kind.name(), layer, n_layers: layers });
        }
        let (rows, cols) = self.config.shape(kind);
        // parse() proved the whole layout fits in the file, so none of this overflows;
        // it is checked anyway rather than trusted.
        let len = rows.checked_mul(cols).and_then(|n| n.checked_mul(4)).ok_or(Llama2cError::Overflow)?;
        let start = len.checked_mul(layer).and_then(|o| o.checked_add(self.offsets[kind as usize])).ok_or(Llama2cError::Overflow)?;
        let bytes = start
            .checked_add(len)
            .and_then(|end| self.bytes.get(start..end))
            .ok_or(Llama2cError::SizeMismatch { expected: start.saturating_add(len), got: self.bytes.len() })?;
        Ok(F32Tensor { name: kind.name(), bytes, rows, cols })
    }

    pub fn token_embedding(&self) -> Result<F32Tensor<'a>, Llama2cError> {
        self.tensor(TensorKind::TokenEmbedding, 0)
    }

    pub fn rms_final(&self) -> Result<F32Tensor<'a>, Llama2cError> {
        self.tensor(TensorKind::RmsFinal, 0)
    }

    /// `wcls`, or the token embedding when the classifier is shared.
    pub fn classifier(&self) -> Result<F32Tensor<'a>, Llama2cError> {
        self.tensor(TensorKind::Wcls, 0)
    }

    pub fn freq_cis_real(&self) -> Result<F32Tensor<'a>, Llama2cError> {
        self.tensor(TensorKind::FreqCisReal, 0)
    }

    pub fn freq_cis_imag(&self) -> Result<F32Tensor<'a>, Llama2cError> {
        self.tensor(TensorKind::FreqCisImag, 0)
    }

    /// All weights of one layer.
    pub fn layer(&self, layer: usize) -> Result<Layer<'a>, Llama2cError> {
        use TensorKind::*;
        let t = |kind| self.tensor(kind, layer);
        Ok(Layer {
            rms_att: t(RmsAtt)?,
            wq: t(Wq)?,
            wk: t(Wk)?,
            wv: t(Wv)?,
            wo: t(Wo)?,
            rms_ffn: t(RmsFfn)?,
            w1: t(W1)?,
            w2: t(W2)?,
            w3: t(W3)?,
        })
    }
}

/// One transformer layer's weights (row-major `[rows, cols]`, rows are output features).
#[derive(Debug, Clone, Copy)]
pub struct Layer<'a> {
    pub rms_att: F32Tensor<'a>,
    pub wq: F32Tensor<'a>,
    pub wk: F32Tensor<'a>,
    pub wv: F32Tensor<'a>,
    pub wo: F32Tensor<'a>,
    pub rms_ffn: F32Tensor<'a>,
    pub w1: F32Tensor<'a>,
    pub w2: F32Tensor<'a>,
    pub w3: F32Tensor<'a>,
}

/// A row-major `[rows, cols]` f32 tensor as raw little-endian bytes in the file.
#[derive(Debug, Clone, Copy)]
pub struct F32Tensor<'a> {
    name: &'static str,
    bytes: &'a [u8],
    rows: usize,
    cols: usize,
}

impl<'a> F32Tensor<'a> {
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The raw little-endian bytes (`4 * rows * cols` of them).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / 4
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Element `i` in row-major order.
    pub fn get(&self, i: usize) -> Result<f32, Llama2cError> {
        let b = i.checked_mul(4).and_then(|s| self.bytes.get(s..s.checked_add(4)?)).ok_or(Llama2cError::IndexOutOfRange {
            tensor: self.name,
            index: i,
            len: self.len(),
        })?;
        Ok(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The raw bytes of row `r`.
    pub fn row_bytes(&self, r: usize) -> Result<&'a [u8], Llama2cError> {
        let w = self.cols * 4;
        r.checked_mul(w).and_then(|s| self.bytes.get(s..s.checked_add(w)?)).ok_or(Llama2cError::IndexOutOfRange {
            tensor: self.name,
            index: r,
            len: self.rows,
        })
    }

    /// Decode row `r` into `out` (exactly `cols` long).
    pub fn read_row(&self, r: usize, out: &mut [f32]) -> Result<(), Llama2cError> {
        let bytes = self.row_bytes(r)?;
        decode_into(self.name, bytes, out)
    }

    /// Decode the whole tensor into `out` (exactly `rows * cols` long).
    pub fn read_all(&self, out: &mut [f32]) -> Result<(), Llama2cError> {
        decode_into(self.name, self.bytes, out)
    }

    /// Zero-copy view as `&[f32]`: only when the bytes are 4-byte aligned (they are when
    /// the file is memory-mapped or in a 4-aligned buffer, as the header is 28 bytes and
    /// every tensor a whole number of floats) and the target is little-endian.
    pub fn as_f32(&self) -> Result<&'a [f32], Llama2cError> {
        if cfg!(target_endian = "big") {
            return Err(Llama2cError::BigEndian);
        }
        let ptr = self.bytes.as_ptr().cast::<f32>();
        if !ptr.is_aligned() {
            return Err(Llama2cError::Misaligned { tensor: self.name });
        }
        // `self.bytes` holds `len() * 4` initialised bytes (rows * cols * 4) borrowed for 'a
        // and never mutated through this shared borrow; every bit pattern is a valid f32,
        // and on this little-endian target the file's byte order is the native one.
        // SAFETY: `ptr` is non-null, 4-byte aligned (checked above) and covers `len()` f32.
        Ok(unsafe { core::slice::from_raw_parts(ptr, self.len()) })
    }
}

fn decode_into(tensor: &'static str, bytes: &[u8], out: &mut [f32]) -> Result<(), Llama2cError> {
    if out.len() * 4 != bytes.len() {
        return Err(Llama2cError::BufferSize { tensor, expected: bytes.len() / 4, got: out.len() });
    }
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    Ok(())
}
