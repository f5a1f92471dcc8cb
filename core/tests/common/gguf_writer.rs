//! A small GGUF v3 writer for model tests: the metadata value types model files use, and
//! F32 and Q8_0 tensors (Q8_0 quantized here as llama.cpp's `quantize_row_q8_0_ref` does).

/// A metadata value.
#[derive(Clone, Debug)]
pub enum Meta {
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    U32s(Vec<u32>),
    I32s(Vec<i32>),
    Bools(Vec<bool>),
    Strs(Vec<String>),
    /// Strings of any bytes (GGUF does not check UTF-8; tokenizers must).
    ByteStrs(Vec<Vec<u8>>),
    F32s(Vec<f32>),
}

impl Meta {
    /// A value read from a GGUF file, where the writer has its type.
    #[allow(dead_code)] // not every test crate that includes this copies metadata
    pub fn from_value(v: &lutra_core::formats::gguf::Value<'_>) -> Option<Meta> {
        use lutra_core::formats::gguf::{Value, ValueType};
        Some(match v {
            Value::U32(x) => Meta::U32(*x),
            Value::F32(x) => Meta::F32(*x),
            Value::Bool(x) => Meta::Bool(*x),
            Value::String(_) => Meta::Str(v.as_str()?.into()),
            Value::Array(a) => match a.elem_type() {
                ValueType::U32 => Meta::U32s(a.iter().map(|x| x.as_u32()).collect::<Option<_>>()?),
                ValueType::I32 => Meta::I32s(a.iter().map(|x| x.as_i64().map(|x| x as i32)).collect::<Option<_>>()?),
                ValueType::F32 => Meta::F32s(a.iter().map(|x| x.as_f32()).collect::<Option<_>>()?),
                ValueType::Bool => Meta::Bools(a.iter().map(|x| x.as_bool()).collect::<Option<_>>()?),
                ValueType::String => Meta::Strs(a.iter().map(|x| x.as_str().map(String::from)).collect::<Option<_>>()?),
                _ => return None,
            },
            _ => return None,
        })
    }

    fn type_id(&self) -> u32 {
        match self {
            Meta::U32(_) => 4,
            Meta::I32(_) => 5,
            Meta::F32(_) => 6,
            Meta::Bool(_) => 7,
            Meta::Str(_) => 8,
            Meta::U32s(_) | Meta::I32s(_) | Meta::Bools(_) | Meta::Strs(_) | Meta::ByteStrs(_) | Meta::F32s(_) => 9,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Meta::U32(v) => out.extend(v.to_le_bytes()),
            Meta::I32(v) => out.extend(v.to_le_bytes()),
            Meta::F32(v) => out.extend(v.to_le_bytes()),
            Meta::Bool(v) => out.push(u8::from(*v)),
            Meta::Str(s) => put_str(out, s),
            Meta::U32s(v) => {
                out.extend(4u32.to_le_bytes());
                out.extend((v.len() as u64).to_le_bytes());
                v.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
            Meta::I32s(v) => {
                out.extend(5u32.to_le_bytes());
                out.extend((v.len() as u64).to_le_bytes());
                v.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
            Meta::Bools(v) => {
                out.extend(7u32.to_le_bytes());
                out.extend((v.len() as u64).to_le_bytes());
                v.iter().for_each(|&x| out.push(u8::from(x)));
            }
            Meta::Strs(v) => {
                out.extend(8u32.to_le_bytes());
                out.extend((v.len() as u64).to_le_bytes());
                v.iter().for_each(|s| put_str(out, s));
            }
            Meta::ByteStrs(v) => {
                out.extend(8u32.to_le_bytes());
                out.extend((v.len() as u64).to_le_bytes());
                v.iter().for_each(|s| put_bytes(out, s));
            }
            Meta::F32s(v) => {
                out.extend(6u32.to_le_bytes());
                out.extend((v.len() as u64).to_le_bytes());
                v.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

fn put_bytes(out: &mut Vec<u8>, s: &[u8]) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s);
}

/// A tensor: ggml dims (`ne0` first), type id and data.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub ggml_type: u32,
    pub data: Vec<u8>,
}

impl Tensor {
    /// An F32 vector.
    pub fn f32(name: &str, values: &[f32]) -> Tensor {
        Tensor {
            name: name.into(),
            dims: vec![values.len() as u64],
            ggml_type: 0,
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// A `rows × cols` matrix (row-major `values`), Q8_0: per 32 values an f16 scale
    /// `d = max|x| / 127` and `round(x / d)` as i8.
    pub fn q8_0(name: &str, rows: usize, cols: usize, values: &[f32]) -> Tensor {
        assert!(cols.is_multiple_of(32) && values.len() == rows * cols, "writer misuse: Q8_0 shape");
        let mut data = Vec::with_capacity(rows * cols / 32 * 34);
        for block in values.chunks_exact(32) {
            let amax = block.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            data.extend(half::f16::from_f32(d).to_bits().to_le_bytes());
            data.extend(block.iter().map(|x| (x * id).round() as i8 as u8));
        }
        Tensor { name: name.into(), dims: vec![cols as u64, rows as u64], ggml_type: 8, data }
    }
}

impl Tensor {
    /// A `rows × cols` matrix (row-major `values`), F32.
    pub fn f32_matrix(name: &str, rows: usize, cols: usize, values: &[f32]) -> Tensor {
        assert_eq!(values.len(), rows * cols, "writer misuse: F32 shape");
        Tensor { dims: vec![cols as u64, rows as u64], ..Tensor::f32(name, values) }
    }

    /// A `rows × cols` matrix, Q4_0 as llama.cpp's `quantize_row_q4_0_ref` makes it: per 32
    /// values the one of largest magnitude `m`, an f16 scale `d = m / −8`, and codes
    /// `min(15, trunc(x / d + 8.5))`, value j in the low nibble of byte j, j + 16 in its high one.
    pub fn q4_0(name: &str, rows: usize, cols: usize, values: &[f32]) -> Tensor {
        assert!(cols.is_multiple_of(32) && values.len() == rows * cols, "writer misuse: Q4_0 shape");
        let mut data = Vec::with_capacity(rows * cols / 32 * 18);
        for block in values.chunks_exact(32) {
            let (mut amax, mut max) = (0.0f32, 0.0f32);
            for &v in block {
                if amax < v.abs() {
                    (amax, max) = (v.abs(), v);
                }
            }
            let d = max / -8.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            data.extend(half::f16::from_f32(d).to_bits().to_le_bytes());
            let code = |x: f32| ((x * id + 8.5) as i8).min(15) as u8;
            data.extend((0..16).map(|j| code(block[j]) | code(block[j + 16]) << 4));
        }
        Tensor { name: name.into(), dims: vec![cols as u64, rows as u64], ggml_type: 2, data }
    }

    /// A `rows × cols` matrix, Q1_0 as llama.cpp's `quantize_row_q1_0_ref` makes it: per 128
    /// values an f16 scale `d` = their mean magnitude, and bit j of byte j / 8 set where
    /// value j is ≥ 0 (weight `+d`, else `−d`).
    pub fn q1_0(name: &str, rows: usize, cols: usize, values: &[f32]) -> Tensor {
        assert!(cols.is_multiple_of(128) && values.len() == rows * cols, "writer misuse: Q1_0 shape");
        let mut data = Vec::with_capacity(rows * cols / 128 * 18);
        for block in values.chunks_exact(128) {
            let d = block.iter().map(|x| x.abs()).sum::<f32>() / 128.0;
            data.extend(half::f16::from_f32(d).to_bits().to_le_bytes());
            data.extend(block.chunks_exact(8).map(|b| (0..8).fold(0u8, |byte, j| byte | u8::from(b[j] >= 0.0) << j)));
        }
        Tensor { name: name.into(), dims: vec![cols as u64, rows as u64], ggml_type: 41, data }
    }

    /// A `rows × cols` matrix, Q2_0 as llama.cpp's `quantize_row_q2_0_ref` makes it: per 64
    /// values an f16 scale `d` = the largest magnitude, codes `clamp(round(x / d), −1, 2) + 1`,
    /// value j in bits 2(j % 4) of byte j / 4.
    pub fn q2_0(name: &str, rows: usize, cols: usize, values: &[f32]) -> Tensor {
        assert!(cols.is_multiple_of(64) && values.len() == rows * cols, "writer misuse: Q2_0 shape");
        let mut data = Vec::with_capacity(rows * cols / 64 * 18);
        for block in values.chunks_exact(64) {
            let d = block.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            data.extend(half::f16::from_f32(d).to_bits().to_le_bytes());
            let code = |x: f32| ((x * id).round() as i32 + 1).clamp(0, 3) as u8;
            data.extend(block.chunks_exact(4).map(|b| (0..4).fold(0u8, |byte, j| byte | code(b[j]) << (2 * j))));
        }
        Tensor { name: name.into(), dims: vec![cols as u64, rows as u64], ggml_type: 42, data }
    }
}

/// A GGUF v3 file, tensor data aligned to 32 bytes.
pub fn write_gguf(kvs: &[(String, Meta)], tensors: &[Tensor]) -> Vec<u8> {
    const ALIGN: usize = 32;
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((kvs.len() as u64).to_le_bytes());
    for (key, value) in kvs {
        put_str(&mut out, key);
        out.extend(value.type_id().to_le_bytes());
        value.write(&mut out);
    }
    let mut offset = 0usize;
    for t in tensors {
        put_str(&mut out, &t.name);
        out.extend((t.dims.len() as u32).to_le_bytes());
        t.dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
        out.extend(t.ggml_type.to_le_bytes());
        out.extend((offset as u64).to_le_bytes());
        offset = (offset + t.data.len()).next_multiple_of(ALIGN);
    }
    for t in tensors {
        out.resize(out.len().next_multiple_of(ALIGN), 0);
        out.extend(&t.data);
    }
    out
}
