//! A small GGUF v3 writer for model tests: the metadata value types model files use, and
//! F32 and Q8_0 tensors (Q8_0 quantized here as llama.cpp's `quantize_row_q8_0_ref` does).

/// A metadata value.
#[derive(Clone, Debug)]
pub enum Meta {
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(String),
    U32s(Vec<u32>),
    Bools(Vec<bool>),
    Strs(Vec<String>),
    F32s(Vec<f32>),
}

impl Meta {
    fn type_id(&self) -> u32 {
        match self {
            Meta::U32(_) => 4,
            Meta::F32(_) => 6,
            Meta::Bool(_) => 7,
            Meta::Str(_) => 8,
            Meta::U32s(_) | Meta::Bools(_) | Meta::Strs(_) | Meta::F32s(_) => 9,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Meta::U32(v) => out.extend(v.to_le_bytes()),
            Meta::F32(v) => out.extend(v.to_le_bytes()),
            Meta::Bool(v) => out.push(u8::from(*v)),
            Meta::Str(s) => put_str(out, s),
            Meta::U32s(v) => {
                out.extend(4u32.to_le_bytes());
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
            Meta::F32s(v) => {
                out.extend(6u32.to_le_bytes());
                out.extend((v.len() as u64).to_le_bytes());
                v.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
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
