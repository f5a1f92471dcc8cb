//! GGUF v2/v3 reader (zero-copy over `&[u8]`, every length checked).
//!
//! [`Gguf::parse`] walks the whole header once — metadata keys and values, tensor
//! infos — and checks every count, length and offset against the bytes that are left
//! before using it, so a hostile file is refused with a [`GgufError`] that names the
//! byte where it went wrong: no panic, no allocation, no loop longer than the file.
//! After that, [`Gguf::metadata`], [`Gguf::get`] and [`Gguf::tensors`] re-read the
//! already checked bytes lazily; [`Gguf::tensor_data`] borrows a tensor's bytes.
//!
//! Layout (little-endian; format spec: ggml's `docs/gguf.md`):
//!
//! ```text
//! "GGUF" u32 version  u64 tensor_count  u64 metadata_kv_count
//! kv*:     string key, u32 value type, value
//! tensor*: string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64 offset
//! padding to `general.alignment` (default 32), then the tensor data; each tensor's
//! offset is relative to the start of the data section and a multiple of the alignment
//! ```
//!
//! A string is a u64 byte length and that many bytes (UTF-8; keys and tensor names are
//! validated at parse time, string values lazily by [`Value::as_str`], so the 262 144
//! tokens of a Gemma vocabulary cost no UTF-8 pass when they are not read).
//!
//! Cost: one pass over the header. Fixed-size arrays are skipped in O(1); arrays of
//! strings cost one length read per element. The start of each of the first
//! [`KV_INDEX`] metadata entries is remembered (in the `Gguf` value, no heap), so
//! later lookups jump over large arrays instead of walking them again.

use core::fmt;

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// Whether `bytes` (a file's start) begin with [`MAGIC`]: the one test of "is this GGUF"
/// for front-ends that choose a loader by content. Only the magic: [`Gguf::parse`] checks
/// the rest.
pub fn is_gguf(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// Alignment of the data section and of tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Deepest nesting of arrays inside arrays that the reader accepts.
pub const MAX_ARRAY_DEPTH: u32 = 8;
/// Number of metadata entries whose start offset is kept for O(1) access.
pub const KV_INDEX: usize = 64;

/// Fewest bytes one metadata entry can take: empty key (8), type (4), one u8 value.
const MIN_KV_BYTES: usize = 8 + 4 + 1;
/// Fewest bytes one tensor info can take: empty name (8), n_dims (4), type (4), offset (8).
const MIN_TENSOR_INFO_BYTES: usize = 8 + 4 + 4 + 8;

/// Everything the reader refuses. `at` is a byte offset into the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufError {
    /// The file ends inside a field.
    Truncated { at: u64, what: &'static str, needed: u64, left: u64 },
    /// The file does not start with `GGUF`.
    BadMagic { found: [u8; 4] },
    /// A GGUF version other than 2 or 3.
    UnsupportedVersion { version: u32 },
    /// A count whose items cannot all fit in the rest of the file.
    CountTooLarge { at: u64, what: &'static str, count: u64, left: u64 },
    /// A string length beyond the end of the file.
    StringTooLong { at: u64, len: u64, left: u64 },
    /// A key or tensor name that is not UTF-8.
    InvalidUtf8 { at: u64, what: &'static str },
    /// A metadata value type id outside 0..=12.
    UnknownValueType { at: u64, type_id: u32 },
    /// A bool stored as something other than 0 or 1.
    InvalidBool { at: u64, value: u8 },
    /// Arrays nested deeper than [`MAX_ARRAY_DEPTH`].
    ArrayTooDeep { at: u64, max: u32 },
    /// `general.alignment` holds a non-integer value.
    AlignmentType { at: u64, found: ValueType },
    /// `general.alignment` is zero or not a power of two.
    BadAlignment { at: u64, alignment: u64 },
    /// A tensor with more than [`MAX_DIMS`] dimensions.
    TooManyDims { at: u64, n_dims: u32 },
    /// A dimension above `i64::MAX`, or dimensions whose product (in elements or bytes) overflows.
    ShapeOverflow { at: u64 },
    /// The first dimension (row length) is not a multiple of the type's block size.
    RowNotMultipleOfBlock { at: u64, row: u64, block: u32, ggml_type: GgmlType },
    /// A tensor offset that is not a multiple of the alignment.
    MisalignedTensor { at: u64, offset: u64, alignment: u64 },
    /// The data section would start past the end of the file.
    DataPastEnd { data_start: u64, file_len: u64 },
    /// A tensor's bytes `[start, end)` (file offsets) extend past the end of the file.
    TensorPastEnd { start: u64, end: u64, file_len: u64 },
    /// A ggml type id this reader does not know the block size of.
    UnknownTensorType { type_id: u32 },
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GgufError::Truncated { at, what, needed, left } => {
                write!(f, "truncated GGUF: {what} at byte {at} needs {needed} bytes, only {left} left")
            }
            GgufError::BadMagic { found } => {
                write!(
                    f,
                    "not a GGUF file: starts with {:02x} {:02x} {:02x} {:02x}, expected \"GGUF\"",
                    found[0], found[1], found[2], found[3]
                )
            }
            GgufError::UnsupportedVersion { version } => {
                write!(f, "unsupported GGUF version {version} at byte 4 (supported: 2, 3")?;
                if version.swap_bytes() <= 3 {
                    write!(f, "; this looks like a big-endian file, which is not supported")?;
                }
                write!(f, ")")
            }
            GgufError::CountTooLarge { at, what, count, left } => {
                write!(f, "truncated or corrupt GGUF: {count} {what} at byte {at} cannot fit in the {left} bytes left")
            }
            GgufError::StringTooLong { at, len, left } => {
                write!(f, "truncated or corrupt GGUF: string of {len} bytes at byte {at}, only {left} bytes left")
            }
            GgufError::InvalidUtf8 { at, what } => write!(f, "bad GGUF: {what} at byte {at} is not UTF-8"),
            GgufError::UnknownValueType { at, type_id } => {
                write!(f, "bad GGUF: unknown metadata value type {type_id} at byte {at} (known: 0..=12)")
            }
            GgufError::InvalidBool { at, value } => write!(f, "bad GGUF: bool at byte {at} holds {value} (must be 0 or 1)"),
            GgufError::ArrayTooDeep { at, max } => {
                write!(f, "bad GGUF: arrays nested more than {max} deep at byte {at}")
            }
            GgufError::AlignmentType { at, found } => {
                write!(f, "bad GGUF: general.alignment at byte {at} is a {}, expected an unsigned integer", found.name())
            }
            GgufError::BadAlignment { at, alignment } => {
                write!(f, "bad GGUF: general.alignment {alignment} at byte {at} is not a power of two")
            }
            GgufError::TooManyDims { at, n_dims } => {
                write!(f, "bad GGUF: tensor with {n_dims} dimensions at byte {at} (at most {MAX_DIMS})")
            }
            GgufError::ShapeOverflow { at } => {
                write!(f, "impossible GGUF: tensor dimensions at byte {at} overflow (element or byte count beyond 2^63)")
            }
            GgufError::RowNotMultipleOfBlock { at, row, block, ggml_type } => write!(
                f,
                "bad GGUF: tensor at byte {at} has rows of {row} elements, not a multiple of the {}-element {} block",
                block,
                ggml_type.name()
            ),
            GgufError::MisalignedTensor { at, offset, alignment } => {
                write!(f, "bad GGUF: tensor offset {offset} at byte {at} is not a multiple of the alignment {alignment}")
            }
            GgufError::DataPastEnd { data_start, file_len } => {
                write!(f, "truncated GGUF: tensor data would start at byte {data_start}, the file has {file_len} bytes")
            }
            GgufError::TensorPastEnd { start, end, file_len } => {
                write!(f, "truncated GGUF: tensor data at bytes {start}..{end} extends past the end of the file ({file_len} bytes)")
            }
            GgufError::UnknownTensorType { type_id } => {
                write!(f, "unsupported tensor type: ggml type id {type_id} is unknown to this reader")
            }
        }
    }
}

impl core::error::Error for GgufError {}

type Result<T> = core::result::Result<T, GgufError>;

// ---------------------------------------------------------------------------------
// ggml tensor types

macro_rules! ggml_types {
    ($($name:ident = $id:literal, $block:literal, $bytes:literal;)*) => {
        /// A ggml tensor type (`enum ggml_type` in ggml.h) with its block geometry.
        ///
        /// Ids not in the table (removed or newer types) read as `Unknown(id)`; build
        /// values with [`GgmlType::from_id`] so a known id never lands in `Unknown`.
        #[allow(non_camel_case_types)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum GgmlType {
            $($name,)*
            Unknown(u32),
        }

        impl GgmlType {
            /// Every known type, in id order.
            pub const ALL: &'static [GgmlType] = &[$(GgmlType::$name,)*];

            pub const fn from_id(id: u32) -> GgmlType {
                match id {
                    $($id => GgmlType::$name,)*
                    other => GgmlType::Unknown(other),
                }
            }

            pub const fn id(self) -> u32 {
                match self {
                    $(GgmlType::$name => $id,)*
                    GgmlType::Unknown(id) => id,
                }
            }

            /// The name llama.cpp prints (`GGML_TYPE_` stripped), or "unknown".
            pub const fn name(self) -> &'static str {
                match self {
                    $(GgmlType::$name => stringify!($name),)*
                    GgmlType::Unknown(_) => "unknown",
                }
            }

            /// Elements per block, and bytes per block; `None` for an unknown type.
            pub const fn block(self) -> Option<(u32, u32)> {
                match self {
                    $(GgmlType::$name => Some(($block, $bytes)),)*
                    GgmlType::Unknown(_) => None,
                }
            }
        }
    };
}

// Ids: ggml.h `enum ggml_type`; sizes: the static_asserts in ggml-common.h (QK_K = 256).
ggml_types! {
    F32 = 0, 1, 4;
    F16 = 1, 1, 2;
    Q4_0 = 2, 32, 18;
    Q4_1 = 3, 32, 20;
    Q5_0 = 6, 32, 22;
    Q5_1 = 7, 32, 24;
    Q8_0 = 8, 32, 34;
    Q8_1 = 9, 32, 36;
    Q2_K = 10, 256, 84;
    Q3_K = 11, 256, 110;
    Q4_K = 12, 256, 144;
    Q5_K = 13, 256, 176;
    Q6_K = 14, 256, 210;
    Q8_K = 15, 256, 292;
    IQ2_XXS = 16, 256, 66;
    IQ2_XS = 17, 256, 74;
    IQ3_XXS = 18, 256, 98;
    IQ1_S = 19, 256, 50;
    IQ4_NL = 20, 32, 18;
    IQ3_S = 21, 256, 110;
    IQ2_S = 22, 256, 82;
    IQ4_XS = 23, 256, 136;
    I8 = 24, 1, 1;
    I16 = 25, 1, 2;
    I32 = 26, 1, 4;
    I64 = 27, 1, 8;
    F64 = 28, 1, 8;
    IQ1_M = 29, 256, 56;
    BF16 = 30, 1, 2;
    TQ1_0 = 34, 256, 54;
    TQ2_0 = 35, 256, 66;
    MXFP4 = 39, 32, 17;
    NVFP4 = 40, 64, 36;
    Q1_0 = 41, 128, 18;
    Q2_0 = 42, 64, 18;
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GgmlType::Unknown(id) => write!(f, "unknown({id})"),
            t => f.write_str(t.name()),
        }
    }
}

// ---------------------------------------------------------------------------------
// Metadata values

/// The type of a metadata value (`gguf_type` in the spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    pub const fn from_id(id: u32) -> Option<ValueType> {
        Some(match id {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    pub const fn id(self) -> u32 {
        match self {
            ValueType::U8 => 0,
            ValueType::I8 => 1,
            ValueType::U16 => 2,
            ValueType::I16 => 3,
            ValueType::U32 => 4,
            ValueType::I32 => 5,
            ValueType::F32 => 6,
            ValueType::Bool => 7,
            ValueType::String => 8,
            ValueType::Array => 9,
            ValueType::U64 => 10,
            ValueType::I64 => 11,
            ValueType::F64 => 12,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// Bytes of one value, or `None` for strings and arrays.
    pub const fn fixed_size(self) -> Option<usize> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// Fewest bytes a value of this type takes (a string: its length; an array: type and count).
    const fn min_size(self) -> usize {
        match self.fixed_size() {
            Some(n) => n,
            None if matches!(self, ValueType::String) => 8,
            None => 12,
        }
    }
}

/// One metadata value, borrowed from the file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    /// Raw bytes of a string; [`Value::as_str`] checks UTF-8.
    String(&'a [u8]),
    Array(Array<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl<'a> Value<'a> {
    /// The value's bytes as GGUF stores them after its type id, handed to `out` piece by
    /// piece: what a writer copying another file's metadata emits.
    pub fn write_payload(&self, out: &mut impl FnMut(&[u8])) {
        match *self {
            Value::U8(x) => out(&[x]),
            Value::I8(x) => out(&[x as u8]),
            Value::U16(x) => out(&x.to_le_bytes()),
            Value::I16(x) => out(&x.to_le_bytes()),
            Value::U32(x) => out(&x.to_le_bytes()),
            Value::I32(x) => out(&x.to_le_bytes()),
            Value::F32(x) => out(&x.to_le_bytes()),
            Value::Bool(x) => out(&[x as u8]),
            Value::String(s) => {
                out(&(s.len() as u64).to_le_bytes());
                out(s);
            }
            Value::Array(a) => {
                out(&a.elem_type().id().to_le_bytes());
                out(&a.len().to_le_bytes());
                out(a.bytes());
            }
            Value::U64(x) => out(&x.to_le_bytes()),
            Value::I64(x) => out(&x.to_le_bytes()),
            Value::F64(x) => out(&x.to_le_bytes()),
        }
    }

    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Any integer value that is not negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer value in `0..=u32::MAX`.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_u64().and_then(|v| u32::try_from(v).ok())
    }

    /// Any integer value in the range of `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// An f32 or f64 value (f64 rounded to f32).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    /// An f32 or f64 value.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// A string value that is valid UTF-8.
    pub fn as_str(&self) -> Option<&'a str> {
        match *self {
            Value::String(s) => core::str::from_utf8(s).ok(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<Array<'a>> {
        match *self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Scalars as numbers, strings quoted, arrays as `[<type>; <len>]` (elements not listed).
impl fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => match core::str::from_utf8(s) {
                Ok(s) => write!(f, "{s:?}"),
                Err(_) => write!(f, "<{} bytes, not UTF-8>", s.len()),
            },
            Value::Array(a) => write!(f, "[{}; {}]", a.elem_type.name(), a.len),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
        }
    }
}

/// An array value: its element type, length and (checked) element bytes.
#[derive(Clone, Copy)]
pub struct Array<'a> {
    elem_type: ValueType,
    len: u64,
    /// Exactly the element bytes.
    data: &'a [u8],
    /// File offset of `data`, for error messages.
    base: usize,
    /// Nesting depth of the elements.
    depth: u32,
}

impl<'a> Array<'a> {
    pub fn elem_type(&self) -> ValueType {
        self.elem_type
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The raw element bytes (for fixed-size types: `len` little-endian values).
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    /// The elements in order.
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter { elem_type: self.elem_type, left: self.len, cur: Cursor { buf: self.data, pos: 0, base: self.base }, depth: self.depth }
    }

    /// Element `i`: O(1) for fixed-size types, a walk for strings and arrays.
    pub fn get(&self, i: u64) -> Option<Value<'a>> {
        if i >= self.len {
            return None;
        }
        match self.elem_type.fixed_size() {
            Some(size) => {
                let start = usize::try_from(i).ok()?.checked_mul(size)?;
                let mut cur = Cursor { buf: self.data, pos: start, base: self.base };
                read_value(&mut cur, self.elem_type, self.depth, None).ok()
            }
            None => self.iter().nth(usize::try_from(i).ok()?),
        }
    }
}

impl fmt::Debug for Array<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Array").field("elem_type", &self.elem_type).field("len", &self.len).finish_non_exhaustive()
    }
}

impl PartialEq for Array<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.elem_type == other.elem_type && self.len == other.len && self.data == other.data
    }
}

impl<'a> IntoIterator for Array<'a> {
    type Item = Value<'a>;
    type IntoIter = ArrayIter<'a>;
    fn into_iter(self) -> ArrayIter<'a> {
        self.iter()
    }
}

/// Iterator over the elements of an [`Array`].
#[derive(Clone)]
pub struct ArrayIter<'a> {
    elem_type: ValueType,
    left: u64,
    cur: Cursor<'a>,
    depth: u32,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        match read_value(&mut self.cur, self.elem_type, self.depth, None) {
            Ok(v) => {
                self.left -= 1;
                Some(v)
            }
            // Checked at parse time; if it happens anyway, stop rather than repeat.
            Err(_) => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.left).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

// ---------------------------------------------------------------------------------
// Reading primitives

/// A position in `buf`, whose first byte is at file offset `base`.
#[derive(Clone)]
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn at(&self) -> u64 {
        self.base.saturating_add(self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8]> {
        let truncated = GgufError::Truncated { at: self.at(), what, needed: n, left: self.left() as u64 };
        let n = usize::try_from(n).map_err(|_| truncated)?;
        let end = self.pos.checked_add(n).ok_or(truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let at = self.at();
        let left = self.left() as u64;
        let s = self.take(N as u64, what)?;
        s.first_chunk::<N>().copied().ok_or(GgufError::Truncated { at, what, needed: N as u64, left })
    }

    fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A GGUF string: u64 length, then the bytes.
    fn string(&mut self, what: &'static str) -> Result<&'a [u8]> {
        let at = self.at();
        let len = self.u64(what)?;
        let left = self.left() as u64;
        if len > left {
            return Err(GgufError::StringTooLong { at, len, left });
        }
        self.take(len, what)
    }

    /// Refuse `count` items of at least `min_item` bytes each that cannot fit in what is left.
    fn check_count(&self, at: u64, count: u64, min_item: usize, what: &'static str) -> Result<()> {
        let left = self.left() as u64;
        if count > left / min_item as u64 {
            return Err(GgufError::CountTooLarge { at, what, count, left });
        }
        Ok(())
    }

    fn value_type(&mut self) -> Result<ValueType> {
        let at = self.at();
        let id = self.u32("value type")?;
        ValueType::from_id(id).ok_or(GgufError::UnknownValueType { at, type_id: id })
    }
}

/// Read one value of type `ty` at nesting `depth`. `known_end` (the end of this value,
/// known from the metadata index) lets an already checked array of strings or arrays
/// be taken without walking it.
fn read_value<'a>(cur: &mut Cursor<'a>, ty: ValueType, depth: u32, known_end: Option<usize>) -> Result<Value<'a>> {
    Ok(match ty {
        ValueType::U8 => Value::U8(cur.u8("u8 value")?),
        ValueType::I8 => Value::I8(i8::from_le_bytes(cur.array("i8 value")?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(cur.array("u16 value")?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(cur.array("i16 value")?)),
        ValueType::U32 => Value::U32(cur.u32("u32 value")?),
        ValueType::I32 => Value::I32(i32::from_le_bytes(cur.array("i32 value")?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(cur.array("f32 value")?)),
        ValueType::U64 => Value::U64(cur.u64("u64 value")?),
        ValueType::I64 => Value::I64(i64::from_le_bytes(cur.array("i64 value")?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(cur.array("f64 value")?)),
        ValueType::Bool => {
            let at = cur.at();
            match cur.u8("bool value")? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                value => return Err(GgufError::InvalidBool { at, value }),
            }
        }
        ValueType::String => Value::String(cur.string("string value")?),
        ValueType::Array => Value::Array(read_array(cur, depth, known_end)?),
    })
}

/// The position after `count` strings starting at `cur.pos`: the hot loop of a parse
/// (a 262 144-token vocabulary), so a tight loop of length reads. On a bad length it
/// re-reads with the generic reader, which names the error.
fn skip_strings(cur: &Cursor<'_>, count: u64) -> Result<usize> {
    let buf = cur.buf;
    let mut pos = cur.pos;
    let mut ok = true;
    for _ in 0..count {
        let len = match buf.get(pos..).and_then(|rest| rest.first_chunk::<8>()) {
            Some(b) => u64::from_le_bytes(*b),
            None => {
                ok = false;
                break;
            }
        };
        // pos + 8 <= buf.len() here, so neither subtraction nor addition overflows.
        let rest = (buf.len() - pos - 8) as u64;
        if len > rest {
            ok = false;
            break;
        }
        pos += 8 + len as usize;
    }
    if ok {
        return Ok(pos);
    }
    let mut slow = cur.clone();
    for _ in 0..count {
        slow.string("string value")?;
    }
    Ok(slow.pos)
}

fn read_array<'a>(cur: &mut Cursor<'a>, depth: u32, known_end: Option<usize>) -> Result<Array<'a>> {
    let at = cur.at();
    if depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::ArrayTooDeep { at, max: MAX_ARRAY_DEPTH });
    }
    let elem_type = cur.value_type()?;
    let len_at = cur.at();
    let len = cur.u64("array length")?;
    cur.check_count(len_at, len, elem_type.min_size(), "array elements")?;
    let start = cur.pos;
    match (elem_type.fixed_size(), known_end) {
        (Some(size), _) => {
            // len <= left / size, so the product cannot overflow.
            let bytes = cur.take(len * size as u64, "array elements")?;
            if elem_type == ValueType::Bool {
                if let Some(i) = bytes.iter().position(|&b| b > 1) {
                    let value = bytes.get(i).copied().unwrap_or(0);
                    return Err(GgufError::InvalidBool { at: cur.base.saturating_add(start + i) as u64, value });
                }
            }
        }
        (None, Some(end)) if end >= start && end <= cur.buf.len() => cur.pos = end,
        (None, _) if elem_type == ValueType::String => cur.pos = skip_strings(cur, len)?,
        (None, _) => {
            for _ in 0..len {
                read_value(cur, elem_type, depth + 1, None)?;
            }
        }
    }
    let data = cur.buf.get(start..cur.pos).unwrap_or_default();
    Ok(Array { elem_type, len, data, base: cur.base.saturating_add(start), depth: depth + 1 })
}

// ---------------------------------------------------------------------------------
// Tensor infos

/// One tensor's header entry. Unused trailing dimensions are 1 (ggml's `ne`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorInfo<'a> {
    pub name: &'a str,
    pub n_dims: u32,
    /// `dims[0]` is the row length (contiguous elements); `dims[1]` the number of rows.
    pub dims: [u64; MAX_DIMS],
    pub ggml_type: GgmlType,
    /// Byte offset relative to the start of the data section.
    pub offset: u64,
}

impl TensorInfo<'_> {
    /// The used dimensions, `dims[..n_dims]`.
    pub fn shape(&self) -> &[u64] {
        let n = (self.n_dims as usize).min(MAX_DIMS);
        self.dims.get(..n).unwrap_or(&self.dims)
    }

    /// Product of the dimensions, `None` on overflow.
    pub fn n_elements(&self) -> Option<u64> {
        self.dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }

    /// Bytes of the tensor's data, from its type's block geometry.
    pub fn byte_size(&self) -> Result<u64> {
        let (block, bytes) = self.ggml_type.block().ok_or(GgufError::UnknownTensorType { type_id: self.ggml_type.id() })?;
        byte_size(&self.dims, block, bytes, self.ggml_type, 0)
    }
}

/// Data bytes of a tensor of shape `dims` in blocks of `block` elements / `bytes` bytes;
/// `at` locates the tensor info for errors.
fn byte_size(dims: &[u64; MAX_DIMS], block: u32, bytes: u32, ggml_type: GgmlType, at: u64) -> Result<u64> {
    let overflow = GgufError::ShapeOverflow { at };
    if dims.iter().any(|&d| d > i64::MAX as u64) {
        return Err(overflow);
    }
    let n = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).filter(|&n| n <= i64::MAX as u64).ok_or(overflow)?;
    if !dims[0].is_multiple_of(u64::from(block)) {
        return Err(GgufError::RowNotMultipleOfBlock { at, row: dims[0], block, ggml_type });
    }
    (n / u64::from(block)).checked_mul(u64::from(bytes)).filter(|&b| b <= i64::MAX as u64).ok_or(overflow)
}

fn read_tensor_info<'a>(cur: &mut Cursor<'a>, alignment: u64) -> Result<TensorInfo<'a>> {
    let at = cur.at();
    let name = cur.string("tensor name")?;
    let name = core::str::from_utf8(name).map_err(|_| GgufError::InvalidUtf8 { at, what: "tensor name" })?;
    let dims_at = cur.at();
    let n_dims = cur.u32("tensor n_dims")?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::TooManyDims { at: dims_at, n_dims });
    }
    let mut dims = [1u64; MAX_DIMS];
    for d in dims.iter_mut().take(n_dims as usize) {
        *d = cur.u64("tensor dimension")?;
    }
    let ggml_type = GgmlType::from_id(cur.u32("tensor type")?);
    let offset_at = cur.at();
    let offset = cur.u64("tensor offset")?;
    if !offset.is_multiple_of(alignment) {
        return Err(GgufError::MisalignedTensor { at: offset_at, offset, alignment });
    }
    if dims.iter().any(|&d| d > i64::MAX as u64)
        || dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).is_none_or(|n| n > i64::MAX as u64)
    {
        return Err(GgufError::ShapeOverflow { at: dims_at });
    }
    if let Some((block, bytes)) = ggml_type.block() {
        byte_size(&dims, block, bytes, ggml_type, dims_at)?;
    }
    Ok(TensorInfo { name, n_dims, dims, ggml_type, offset })
}

// ---------------------------------------------------------------------------------
// The file

/// A parsed GGUF file: borrowed bytes plus the offsets found by one checked pass.
#[derive(Clone)]
pub struct Gguf<'a> {
    bytes: &'a [u8],
    version: u32,
    tensor_count: u64,
    kv_count: u64,
    alignment: u64,
    /// File offset of the first tensor info (= end of the metadata).
    tensor_info_start: usize,
    /// File offset of the data section (aligned; the file length for a file without tensors).
    data_start: usize,
    /// The whole file's length (`bytes` may be a prefix of it).
    file_len: u64,
    /// File offsets of the first `KV_INDEX` metadata entries.
    kv_index: [usize; KV_INDEX],
}

impl fmt::Debug for Gguf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gguf")
            .field("len", &self.bytes.len())
            .field("version", &self.version)
            .field("tensor_count", &self.tensor_count)
            .field("kv_count", &self.kv_count)
            .field("alignment", &self.alignment)
            .field("data_start", &self.data_start)
            .finish_non_exhaustive()
    }
}

impl<'a> Gguf<'a> {
    /// Check and index a whole GGUF file. Everything later read through the returned
    /// value lies inside `bytes` and was validated here.
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>> {
        Self::parse_prefix(bytes, bytes.len() as u64)
    }

    /// Check and index the header of a GGUF file of `file_len` bytes from its first bytes
    /// `bytes` (at least the metadata and tensor infos): tensor ranges are checked against
    /// `file_len`, and a caller reads tensor data itself (`tensor_range`), so the whole
    /// file never has to be in memory at once. A prefix too short for the header is an
    /// error (retry with more bytes); so is a prefix longer than `file_len`.
    pub fn parse_prefix(bytes: &'a [u8], file_len: u64) -> Result<Gguf<'a>> {
        if bytes.len() as u64 > file_len {
            return Err(GgufError::DataPastEnd { data_start: bytes.len() as u64, file_len });
        }
        let mut cur = Cursor { buf: bytes, pos: 0, base: 0 };
        let magic: [u8; 4] = cur.array("magic")?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = cur.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion { version });
        }
        let tensor_count_at = cur.at();
        let tensor_count = cur.u64("tensor count")?;
        let kv_count_at = cur.at();
        let kv_count = cur.u64("metadata count")?;
        cur.check_count(tensor_count_at, tensor_count, MIN_TENSOR_INFO_BYTES, "tensor infos")?;
        cur.check_count(kv_count_at, kv_count, MIN_KV_BYTES, "metadata entries")?;

        let mut kv_index = [0usize; KV_INDEX];
        let mut alignment = None;
        for i in 0..kv_count {
            if let Some(slot) = usize::try_from(i).ok().and_then(|i| kv_index.get_mut(i)) {
                *slot = cur.pos;
            }
            let key_at = cur.at();
            let key = cur.string("metadata key")?;
            let key = core::str::from_utf8(key).map_err(|_| GgufError::InvalidUtf8 { at: key_at, what: "metadata key" })?;
            let ty = cur.value_type()?;
            let value_at = cur.at();
            let value = read_value(&mut cur, ty, 0, None)?;
            if key == "general.alignment" && alignment.is_none() {
                let a = value.as_u64().ok_or(GgufError::AlignmentType { at: value_at, found: ty })?;
                if !a.is_power_of_two() {
                    return Err(GgufError::BadAlignment { at: value_at, alignment: a });
                }
                alignment = Some(a);
            }
        }
        let alignment = alignment.unwrap_or(DEFAULT_ALIGNMENT);

        let tensor_info_start = cur.pos;
        cur.check_count(tensor_count_at, tensor_count, MIN_TENSOR_INFO_BYTES, "tensor infos")?;
        // The tensor whose data ends last: (start offset, end offset), relative to the data section.
        let mut last = (0u64, 0u64);
        for _ in 0..tensor_count {
            let info = read_tensor_info(&mut cur, alignment)?;
            if let Ok(size) = info.byte_size() {
                let end = info.offset.saturating_add(size);
                if end > last.1 {
                    last = (info.offset, end);
                }
            }
        }

        let infos_end = cur.pos as u64;
        let data_start = infos_end.checked_next_multiple_of(alignment).unwrap_or(u64::MAX);
        let data_start = if data_start <= file_len {
            data_start
        } else if tensor_count == 0 {
            file_len
        } else {
            return Err(GgufError::DataPastEnd { data_start, file_len });
        };
        if last.1 > file_len - data_start {
            let start = data_start.saturating_add(last.0);
            return Err(GgufError::TensorPastEnd { start, end: data_start.saturating_add(last.1), file_len });
        }
        // data_start ≤ infos_end rounded up, and infos_end ≤ bytes.len(), so it fits in usize.
        let data_start = usize::try_from(data_start).map_err(|_| GgufError::DataPastEnd { data_start, file_len })?;
        Ok(Gguf { bytes, file_len, version, tensor_count, kv_count, alignment, tensor_info_start, data_start, kv_index })
    }

    /// The bytes parsed: the whole file, or the prefix given to `parse_prefix`.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The file's length (of which `bytes` may be a prefix).
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn tensor_count(&self) -> u64 {
        self.tensor_count
    }

    pub fn metadata_count(&self) -> u64 {
        self.kv_count
    }

    /// `general.alignment`, or 32.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// File offset of the data section; tensor offsets are relative to it.
    pub fn data_start(&self) -> usize {
        self.data_start
    }

    /// The metadata entries in file order.
    pub fn metadata(&self) -> Metadata<'_, 'a> {
        Metadata { gguf: self, i: 0, pos: self.kv_index[0] }
    }

    /// The first metadata value under `key` (a linear scan over the keys).
    pub fn get(&self, key: &str) -> Option<Value<'a>> {
        self.metadata().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// An integer value that fits in u32, whatever its stored width.
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        self.get(key)?.as_u32()
    }

    /// A non-negative integer value, whatever its stored width.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// An f32 or f64 value.
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f32()
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    /// A UTF-8 string value.
    pub fn get_str(&self, key: &str) -> Option<&'a str> {
        self.get(key)?.as_str()
    }

    pub fn get_array(&self, key: &str) -> Option<Array<'a>> {
        self.get(key)?.as_array()
    }

    /// The tensor infos in file order.
    pub fn tensors(&self) -> Tensors<'a> {
        Tensors {
            cur: Cursor { buf: self.bytes, pos: self.tensor_info_start, base: 0 },
            left: self.tensor_count,
            alignment: self.alignment,
        }
    }

    /// The first tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<TensorInfo<'a>> {
        self.tensors().find(|t| t.name == name)
    }

    /// The bytes of a tensor. Refuses an unknown type (naming its id) and any range
    /// outside the file, whatever the `TensorInfo` holds.
    pub fn tensor_data(&self, info: &TensorInfo<'_>) -> Result<&'a [u8]> {
        let range = self.tensor_range(info)?;
        let not_loaded = GgufError::TensorPastEnd { start: range.start, end: range.end, file_len: self.bytes.len() as u64 };
        let (start, end) = (usize::try_from(range.start).map_err(|_| not_loaded)?, usize::try_from(range.end).map_err(|_| not_loaded)?);
        self.bytes.get(start..end).ok_or(not_loaded)
    }

    /// The file offsets `[start, end)` of a tensor's data, checked against the file length.
    pub fn tensor_range(&self, info: &TensorInfo<'_>) -> Result<core::ops::Range<u64>> {
        let size = info.byte_size()?;
        let start = (self.data_start as u64).checked_add(info.offset);
        let end = start.and_then(|s| s.checked_add(size));
        match (start, end) {
            (Some(s), Some(e)) if e <= self.file_len => Ok(s..e),
            _ => Err(GgufError::TensorPastEnd { start: start.unwrap_or(u64::MAX), end: end.unwrap_or(u64::MAX), file_len: self.file_len }),
        }
    }

    /// The end of metadata entry `i`, when the index knows it.
    fn kv_end(&self, i: u64) -> Option<usize> {
        let next = i.checked_add(1)?;
        if next >= self.kv_count {
            Some(self.tensor_info_start)
        } else {
            self.kv_index.get(usize::try_from(next).ok()?).copied()
        }
    }
}

/// Iterator over metadata entries: `(key, value)`.
pub struct Metadata<'g, 'a> {
    gguf: &'g Gguf<'a>,
    i: u64,
    pos: usize,
}

impl<'a> Iterator for Metadata<'_, 'a> {
    type Item = (&'a str, Value<'a>);

    fn next(&mut self) -> Option<(&'a str, Value<'a>)> {
        if self.i >= self.gguf.kv_count {
            return None;
        }
        let mut cur = Cursor { buf: self.gguf.bytes, pos: self.pos, base: 0 };
        let entry = (|| {
            let key = core::str::from_utf8(cur.string("metadata key").ok()?).ok()?;
            let ty = cur.value_type().ok()?;
            let value = read_value(&mut cur, ty, 0, self.gguf.kv_end(self.i)).ok()?;
            Some((key, value))
        })();
        match entry {
            Some(e) => {
                self.i += 1;
                self.pos = cur.pos;
                Some(e)
            }
            // Checked at parse time; if it happens anyway, stop.
            None => {
                self.i = self.gguf.kv_count;
                None
            }
        }
    }
}

/// Iterator over tensor infos.
#[derive(Clone)]
pub struct Tensors<'a> {
    cur: Cursor<'a>,
    left: u64,
    alignment: u64,
}

impl<'a> Iterator for Tensors<'a> {
    type Item = TensorInfo<'a>;

    fn next(&mut self) -> Option<TensorInfo<'a>> {
        if self.left == 0 {
            return None;
        }
        match read_tensor_info(&mut self.cur, self.alignment) {
            Ok(info) => {
                self.left -= 1;
                Some(info)
            }
            Err(_) => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.left).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_gguf_reads_only_the_magic() {
        assert!(super::is_gguf(b"GGUF"));
        assert!(super::is_gguf(b"GGUF\x03\x00\x00\x00"));
        assert!(!super::is_gguf(b"GGU"));
        assert!(!super::is_gguf(b"gguf\x03\x00\x00\x00"));
        assert!(!super::is_gguf(b""));
    }
}
