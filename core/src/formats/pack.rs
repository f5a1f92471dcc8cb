//! `.lutra`, written and read: a model packed exactly as the kernels read it — bit planes, scales and int8
//! codes in their in-memory layouts, 64-byte aligned — so loading it is no conversion
//! work: a mapped file (or an image in flash) is read in place.
//!
//! The container is GGUF (the reader is already hardened against hostile files): the
//! source model's metadata (hyperparameters, tokenizer) is kept as it was, and
//! - `lutra.format` (u32) is the format version, `lutra.source` names where the weights
//!   came from (`gguf` or `llama2c`);
//! - each matrix is one `I8` tensor of its packed bytes, its layout in
//!   `lutra.layout.NAME` (u32 array: kind, rows, cols, then per kind: lookup `bits, group,
//!   offset kind, zero point, interleave, scale format`; int8 (codes as bytes, or in the
//!   five-bit form of Q5_0): nothing more — codes then f16 scales);
//! - `lutra.checksum.NAME` (u64) is each tensor's checksum, checked as it is read, and
//!   `lutra.header_checksum` (u64, the first entry) covers the header with its own value
//!   zeroed: a truncated or bit-flipped file is an error, never wrong output.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use crate::error::ModelError;
use crate::formats::gguf::{GgmlType, Gguf, TensorInfo, Value, MAGIC};
use crate::formats::weights::{info, TensorSource, Weights};
use crate::kernels::int8::Int8Matrix;
use crate::{AlignedBytes, Interleave, Offset, PackedMatrix, ScaleFormat};

/// The format version this build writes and reads (2: int8 codes interleaved by groups
/// of four rows; 3: int8 scales as f16 bits; 4: K-quant scales as the file's sub-block
/// codes, `ScaleFormat::SubBlock`).
pub const VERSION: u32 = 4;
pub const FORMAT_KEY: &str = "lutra.format";
pub const SOURCE_KEY: &str = "lutra.source";
pub const HEADER_CHECKSUM_KEY: &str = "lutra.header_checksum";
/// The source GGUF's tensor types and counts (`Q6_K=1,Q1_0=196,F32=141`), which a packed
/// file's own I8 tensors no longer tell.
pub const SOURCE_TENSOR_TYPES_KEY: &str = "lutra.source_tensor_types";
/// Tensor data alignment: one AVX-512 load never splits a cache line.
pub const ALIGNMENT: usize = 64;

const LOOKUP: u32 = 0;
const INT8: u32 = 1;
const INT8_FIVE_BIT: u32 = 2;

/// The tensor types of `g` with their counts, in order of first appearance; for a packed
/// file those of the GGUF it was packed from, where it records them.
pub fn tensor_type_counts(g: &Gguf<'_>) -> Vec<(String, usize)> {
    if let Some(recorded) = g.get_str(SOURCE_TENSOR_TYPES_KEY) {
        let parsed: Option<Vec<(String, usize)>> = recorded
            .split(',')
            .map(|entry| {
                let (name, count) = entry.split_once('=')?;
                Some((name.to_string(), count.parse().ok()?))
            })
            .collect();
        if let Some(types) = parsed {
            return types;
        }
    }
    let mut types: Vec<(String, usize)> = Vec::new();
    for t in g.tensors() {
        let name = t.ggml_type.name();
        match types.iter_mut().find(|(n, _)| n == name) {
            Some((_, count)) => *count += 1,
            None => types.push((name.to_string(), 1)),
        }
    }
    types
}

/// Whether `g` is a packed `.lutra` file (it carries a format version).
pub fn is_packed(g: &Gguf<'_>) -> bool {
    g.get(FORMAT_KEY).is_some()
}

/// A packed file's version and header checksum, checked: an error names what is wrong.
pub fn check_header(g: &Gguf<'_>) -> Result<(), String> {
    match g.get_u32(FORMAT_KEY) {
        Some(VERSION) => {}
        Some(v) => return Err(alloc::format!("packed with format version {v}; this build reads version {VERSION} (pack it again)")),
        None => return Err("no format version".into()),
    }
    let want = g.get_u64(HEADER_CHECKSUM_KEY).ok_or("no header checksum")?;
    let header = g.bytes().get(..g.data_start()).ok_or("the header is incomplete")?;
    if header_checksum(header) != want {
        return Err("the header fails its checksum (a damaged file)".into());
    }
    Ok(())
}

pub fn layout_key(tensor: &str) -> String {
    alloc::format!("lutra.layout.{tensor}")
}

pub fn checksum_key(tensor: &str) -> String {
    alloc::format!("lutra.checksum.{tensor}")
}

/// A 64-bit checksum, 8 bytes per step (a few GB/s): catches truncation and bit flips,
/// not an adversary (the reader's bounds checks do that).
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let v = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        h = (h ^ v).wrapping_mul(0xff51_afd7_ed55_8ccd).rotate_left(31);
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(0xc4ce_b9fe_1a85_ec53).rotate_left(29);
    }
    h ^ (h >> 33)
}

/// A bit-plane matrix's layout as stored in `lutra.layout.NAME` (an int8 matrix's is
/// `[INT8 or INT8_FIVE_BIT, rows, cols]`).
fn lookup_words(l: &crate::Layout) -> Vec<u32> {
    let (offset, zero) = match l.offset() {
        Offset::Zero(z) => (0, z as u32),
        Offset::Min => (1, 0),
        Offset::Symmetric => (2, 0),
    };
    let interleave = match l.interleave() {
        Interleave::Shuffle => 0,
        Interleave::Permute => 1,
    };
    let mut words = vec![LOOKUP, l.rows() as u32, l.cols() as u32, l.bits() as u32, l.group() as u32, offset, zero, interleave];
    match l.scales() {
        ScaleFormat::F16 => words.push(0),
        ScaleFormat::F32 => words.push(1),
        // two more words: the codes' width and signedness
        ScaleFormat::SubBlock { bits, signed } => words.extend([2, bits as u32, signed as u32]),
    }
    words
}

/// What `lutra.layout.NAME` describes, read back.
pub enum StoredLayout {
    Lookup(crate::Layout),
    Int8 { rows: usize, cols: usize, form: crate::kernels::int8::CodeForm },
}

/// Parses `lutra.layout.NAME`; `None` for anything this version did not write.
pub fn parse_layout(words: &[u32]) -> Option<StoredLayout> {
    match *words {
        [LOOKUP, rows, cols, bits, group, offset, zero, interleave, scales, ref sub @ ..] => {
            let offset = match offset {
                0 => Offset::Zero(u8::try_from(zero).ok()?),
                1 => Offset::Min,
                2 => Offset::Symmetric,
                _ => return None,
            };
            let interleave = match interleave {
                0 => Interleave::Shuffle,
                1 => Interleave::Permute,
                _ => return None,
            };
            let scales = match (scales, sub) {
                (0, []) => ScaleFormat::F16,
                (1, []) => ScaleFormat::F32,
                (2, &[bits, signed @ (0 | 1)]) => ScaleFormat::SubBlock { bits: u8::try_from(bits).ok()?, signed: signed == 1 },
                _ => return None,
            };
            let layout = crate::Layout::new(rows as usize, cols as usize, u8::try_from(bits).ok()?, group as usize, offset).ok()?;
            Some(StoredLayout::Lookup(layout.with_interleave(interleave).with_scales(scales).ok()?))
        }
        [INT8, rows, cols] => {
            Some(StoredLayout::Int8 { rows: rows as usize, cols: cols as usize, form: crate::kernels::int8::CodeForm::Bytes })
        }
        [INT8_FIVE_BIT, rows, cols] => {
            Some(StoredLayout::Int8 { rows: rows as usize, cols: cols as usize, form: crate::kernels::int8::CodeForm::FiveBit })
        }
        _ => None,
    }
}

/// Where the header checksum's value sits: the first metadata entry, right after the
/// 24-byte file header, its key and its type.
pub const HEADER_CHECKSUM_AT: usize = 24 + 8 + HEADER_CHECKSUM_KEY.len() + 4;

/// The checksum of a header (`bytes[..data_start]`) with its own value taken as zero.
pub fn header_checksum(header: &[u8]) -> u64 {
    let mut copy = header.to_vec();
    if let Some(value) = copy.get_mut(HEADER_CHECKSUM_AT..HEADER_CHECKSUM_AT + 8) {
        value.fill(0);
    }
    checksum(&copy)
}

/// The name of an int8 matrix's scales tensor (its codes are the tensor `name`).
pub fn scales_name(name: &str) -> String {
    alloc::format!("{name}.scales")
}

/// A GGUF file being written: metadata entries, then tensors, data aligned to 64.
pub struct Writer<'a> {
    kvs: Vec<u8>,
    kv_count: u64,
    tensors: Vec<(String, GgmlType, u64, Cow<'a, [u8]>)>,
    /// Bit planes in the order every kernel reads (else as this machine's were imported).
    portable: bool,
}

impl Default for Writer<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> Writer<'a> {
    /// A file that starts with room for the header checksum, then the format version.
    pub fn new() -> Self {
        let mut w = Writer { kvs: Vec::new(), kv_count: 0, tensors: Vec::new(), portable: true };
        w.u64(HEADER_CHECKSUM_KEY, 0);
        w.u32(FORMAT_KEY, VERSION);
        w.u32("general.alignment", ALIGNMENT as u32);
        w
    }

    /// A file for this machine's fastest kernel only: bit-plane matrices keep the code
    /// order they were imported in (AVX-512 VBMI's 64-entry tables), written as they are
    /// rather than reordered; another machine reads such a file at its scalar speed. For
    /// an import cache, which keys its files by the kernel tier.
    pub fn for_this_machine() -> Self {
        Writer { portable: false, ..Writer::new() }
    }

    fn key(&mut self, key: &str, type_id: u32) {
        self.kv_count += 1;
        self.kvs.extend_from_slice(&(key.len() as u64).to_le_bytes());
        self.kvs.extend_from_slice(key.as_bytes());
        self.kvs.extend_from_slice(&type_id.to_le_bytes());
    }

    pub fn u32(&mut self, key: &str, v: u32) {
        self.key(key, 4);
        self.kvs.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, key: &str, v: u64) {
        self.key(key, 10);
        self.kvs.extend_from_slice(&v.to_le_bytes());
    }

    pub fn f32(&mut self, key: &str, v: f32) {
        self.key(key, 6);
        self.kvs.extend_from_slice(&v.to_le_bytes());
    }

    pub fn str(&mut self, key: &str, v: &str) {
        self.key(key, 8);
        self.kvs.extend_from_slice(&(v.len() as u64).to_le_bytes());
        self.kvs.extend_from_slice(v.as_bytes());
    }

    pub fn u32s(&mut self, key: &str, v: &[u32]) {
        self.key(key, 9);
        self.kvs.extend_from_slice(&4u32.to_le_bytes());
        self.kvs.extend_from_slice(&(v.len() as u64).to_le_bytes());
        v.iter().for_each(|x| self.kvs.extend_from_slice(&x.to_le_bytes()));
    }

    /// Copies one metadata entry of another GGUF file as it was.
    pub fn value(&mut self, key: &str, v: &Value<'_>) {
        self.key(key, v.value_type().id());
        v.write_payload(&mut |bytes| self.kvs.extend_from_slice(bytes));
    }

    /// Every metadata entry of `g` but its alignment and `lutra.*` keys (this file sets
    /// its own), and `g`'s tensor types.
    pub fn copy_metadata(&mut self, g: &Gguf<'_>) {
        let types: Vec<String> = tensor_type_counts(g).iter().map(|(t, n)| format!("{t}={n}")).collect();
        self.str(SOURCE_TENSOR_TYPES_KEY, &types.join(","));
        for (key, value) in g.metadata() {
            if key != "general.alignment" && !key.starts_with("lutra.") {
                self.value(key, &value);
            }
        }
    }

    /// A matrix: its bytes as I8 tensors (int8: codes as `name`, scales as
    /// `name.scales`), its layout and checksums as metadata.
    pub fn matrix(&mut self, name: &str, w: &'a Weights) {
        match w {
            Weights::Lookup(m) => self.lookup(name, m),
            Weights::Int8(m) => {
                let kind = match m.form() {
                    crate::kernels::int8::CodeForm::Bytes => INT8,
                    crate::kernels::int8::CodeForm::FiveBit => INT8_FIVE_BIT,
                };
                self.u32s(&layout_key(name), &[kind, m.rows() as u32, m.cols() as u32]);
                let (codes, scales) = m.parts();
                self.tensor(name, GgmlType::I8, Cow::Borrowed(codes));
                self.tensor(&scales_name(name), GgmlType::I8, Cow::Borrowed(scales));
            }
        }
    }

    /// A bit-plane matrix, in the 16-entry-table order every kernel reads (a matrix
    /// packed for AVX-512 VBMI's 64-entry tables is reordered once, here), so one file
    /// runs unconverted on x86, ARM and wasm ([`Writer::for_this_machine`]: as it is).
    pub fn lookup(&mut self, name: &str, m: &'a PackedMatrix<AlignedBytes>) {
        let portable = match m.layout().interleave() {
            Interleave::Permute if self.portable => PackedMatrix::repack(m, Interleave::Shuffle).ok(),
            _ => None,
        };
        let (layout, bytes) = match portable {
            Some(p) => (*p.layout(), Cow::Owned(p.as_bytes().to_vec())),
            None => (*m.layout(), Cow::Borrowed(m.as_bytes())),
        };
        self.u32s(&layout_key(name), &lookup_words(&layout));
        self.tensor(name, GgmlType::I8, bytes);
    }

    /// An f32 vector as an F32 tensor.
    pub fn f32s(&mut self, name: &str, v: &[f32]) {
        self.tensor(name, GgmlType::F32, Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect()));
    }

    /// Raw bytes as an I8 tensor (e.g. a llama2.c `tokenizer.bin`).
    pub fn blob(&mut self, name: &str, bytes: &'a [u8]) {
        self.tensor(name, GgmlType::I8, Cow::Borrowed(bytes));
    }

    fn tensor(&mut self, name: &str, ty: GgmlType, data: Cow<'a, [u8]>) {
        self.u64(&checksum_key(name), checksum(&data));
        let elements = match ty {
            GgmlType::F32 => data.len() as u64 / 4,
            _ => data.len() as u64,
        };
        self.tensors.push((name.to_string(), ty, elements, data));
    }

    /// Writes the file through `out`, piece by piece; returns its length.
    pub fn finish<E>(self, mut out: impl FnMut(&[u8]) -> Result<(), E>) -> Result<u64, E> {
        let mut header = Vec::new();
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&3u32.to_le_bytes());
        header.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&self.kv_count.to_le_bytes());
        header.extend_from_slice(&self.kvs);
        let mut offset = 0u64;
        for (name, ty, elements, data) in &self.tensors {
            header.extend_from_slice(&(name.len() as u64).to_le_bytes());
            header.extend_from_slice(name.as_bytes());
            header.extend_from_slice(&1u32.to_le_bytes());
            header.extend_from_slice(&elements.to_le_bytes());
            header.extend_from_slice(&ty.id().to_le_bytes());
            header.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + data.len() as u64).next_multiple_of(ALIGNMENT as u64);
        }
        header.resize(header.len().next_multiple_of(ALIGNMENT), 0);
        let sum = header_checksum(&header);
        header[HEADER_CHECKSUM_AT..HEADER_CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
        out(&header)?;
        let mut written = header.len() as u64;
        let zeros = [0u8; ALIGNMENT];
        for (_, _, _, data) in &self.tensors {
            out(data)?;
            let pad = data.len().next_multiple_of(ALIGNMENT) - data.len();
            out(&zeros[..pad])?;
            written += (data.len() + pad) as u64;
        }
        Ok(written)
    }
}

// Reading: every tensor checked against its checksum as it is read.

/// A tensor's bytes against its `lutra.checksum.NAME`.
pub(crate) fn verify(g: &Gguf<'_>, name: &str, data: &[u8]) -> Result<(), ModelError> {
    let want = g.get_u64(&checksum_key(name)).ok_or_else(|| ModelError::BadPackedFile(format!("no checksum for tensor {name}")))?;
    if checksum(data) != want {
        return Err(ModelError::BadPackedFile(format!("tensor {name} fails its checksum (a damaged or truncated file)")));
    }
    Ok(())
}

/// An F32 tensor of `len` values of a packed file, read in place where the source lends
/// it (the llama2.c token embedding: 37 MiB for stories15M), checked.
pub fn packed_f32s(g: &Gguf<'_>, source: &mut dyn TensorSource, name: &str, len: usize) -> Result<AlignedBytes, ModelError> {
    let info = info(g, name)?;
    if info.ggml_type != GgmlType::F32 || info.n_elements() != Some(len as u64) {
        return Err(ModelError::BadPackedFile(format!("tensor {name} is not {len} f32 values")));
    }
    lend(g, source, name, &info)
}

/// One I8 tensor of a packed file, read in place where the source lends it, checked.
fn packed_tensor(g: &Gguf<'_>, source: &mut dyn TensorSource, name: &str) -> Result<AlignedBytes, ModelError> {
    let info = info(g, name)?;
    if info.ggml_type != GgmlType::I8 || info.n_dims != 1 {
        return Err(ModelError::BadPackedFile(format!("tensor {name} is not a byte array")));
    }
    lend(g, source, name, &info)
}

fn lend(g: &Gguf<'_>, source: &mut dyn TensorSource, name: &str, info: &TensorInfo<'_>) -> Result<AlignedBytes, ModelError> {
    let range = g.tensor_range(info)?;
    let bytes = match source.share(range.clone()) {
        Some(shared) => shared,
        None => AlignedBytes::copy_of(source.read(range)?),
    };
    verify(g, name, bytes.as_ref())?;
    Ok(bytes)
}

/// A byte tensor of a packed file, copied out and checked (a tokenizer).
pub fn packed_blob(g: &Gguf<'_>, source: &mut dyn TensorSource, name: &str) -> Result<Vec<u8>, ModelError> {
    let info = info(g, name)?;
    let data = source.read(g.tensor_range(&info)?)?;
    verify(g, name, data)?;
    Ok(data.to_vec())
}

/// A matrix of a packed `.lutra` file, as it was stored.
pub(crate) fn read_matrix(
    g: &Gguf<'_>,
    source: &mut dyn TensorSource,
    name: &str,
    expected: Option<(usize, usize)>,
) -> Result<Weights, ModelError> {
    let key = layout_key(name);
    let words: Vec<u32> = match g.get(&key).and_then(|v| v.as_array()) {
        Some(a) => a.iter().map(|v| v.as_u32()).collect::<Option<_>>().unwrap_or_default(),
        None => return Err(ModelError::MissingTensor(name.to_string())),
    };
    let layout = parse_layout(&words).ok_or_else(|| ModelError::BadPackedFile(format!("{key} holds no layout this version reads")))?;
    let (rows, cols) = match &layout {
        StoredLayout::Lookup(l) => (l.rows(), l.cols()),
        StoredLayout::Int8 { rows, cols, .. } => (*rows, *cols),
    };
    if expected.is_some_and(|e| e != (rows, cols)) {
        let [r, c] = expected.map_or([0, 0], |(r, c)| [r as u64, c as u64]);
        return Err(ModelError::BadTensorShape { name: name.to_string(), expected: [c, r], got: [cols as u64, rows as u64] });
    }
    Ok(match layout {
        StoredLayout::Lookup(l) => Weights::Lookup(PackedMatrix::from_bytes(l, packed_tensor(g, source, name)?)?),
        StoredLayout::Int8 { rows, cols, form } => {
            let codes = packed_tensor(g, source, name)?;
            let scales = packed_tensor(g, source, &scales_name(name))?;
            Weights::Int8(Int8Matrix::from_parts(rows, cols, form, codes, scales)?)
        }
    })
}
