use core::fmt;

/// Every way a lutra-core call can refuse its input. Nothing here panics on bad input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Bits per weight outside what the packed format supports (1..=8).
    UnsupportedBits(u8),
    /// Group size not one of 16, 32, 64, 128, 256.
    UnsupportedGroup(usize),
    /// The number of columns is not a multiple of the group size.
    ColsNotMultipleOfGroup { cols: usize, group: usize },
    /// Zero rows or columns, or a shape whose byte size overflows `usize`.
    BadShape { rows: usize, cols: usize },
    /// A zero point that does not fit in the code range.
    BadZeroPoint { zero: u8, bits: u8 },
    /// A buffer has the wrong length.
    BufferSize { what: &'static str, expected: usize, got: usize },
    /// A quantization block holds a non-finite scale.
    NonFiniteScale { row: usize, group: usize },
    /// A weight or activation is NaN or infinite.
    NonFiniteInput,
    /// The requested instruction set is not available on this CPU / build.
    IsaUnavailable(crate::Isa),
    /// The kernel reads another code order than the matrix was packed in.
    InterleaveMismatch { isa: crate::Isa, matrix: crate::Interleave },
    /// Tables were built for another group size or length than the matrix needs.
    TablesMismatch { tables_cols: usize, tables_group: usize, cols: usize, group: usize },
    /// A product-quantized key cache needs an even number of sub-spaces in 2..=256.
    BadSubspaces(usize),
    /// A block value format for a head size that is not a whole number of its blocks.
    ValueFormat { format: &'static str, head_dim: usize },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::UnsupportedBits(b) => write!(f, "unsupported bits per weight {b} (supported: 1..=8)"),
            Error::UnsupportedGroup(g) => write!(f, "unsupported group size {g} (supported: 16, 32, 64, 128, 256)"),
            Error::ColsNotMultipleOfGroup { cols, group } => {
                write!(f, "{cols} columns is not a multiple of the group size {group}")
            }
            Error::BadShape { rows, cols } => write!(f, "impossible matrix shape {rows}x{cols}"),
            Error::BadZeroPoint { zero, bits } => write!(f, "zero point {zero} out of range for {bits}-bit codes"),
            Error::BufferSize { what, expected, got } => {
                write!(f, "{what}: expected {expected} elements, got {got}")
            }
            Error::NonFiniteScale { row, group } => write!(f, "non-finite scale at row {row}, group {group}"),
            Error::NonFiniteInput => write!(f, "input contains NaN or infinity"),
            Error::IsaUnavailable(isa) => write!(f, "instruction set {} is not available on this CPU", isa.name()),
            Error::InterleaveMismatch { isa, matrix } => {
                write!(f, "kernel {} cannot read a matrix packed in {matrix:?} order", isa.name())
            }
            Error::TablesMismatch { tables_cols, tables_group, cols, group } => {
                write!(f, "tables built for {tables_cols} columns / group {tables_group}, matrix has {cols} / {group}")
            }
            Error::BadSubspaces(s) => write!(f, "{s} sub-spaces: a PQ key cache needs an even number in 2..=256"),
            Error::ValueFormat { format, head_dim } => {
                write!(f, "{format} values need a head size that is a multiple of 32; this model's is {head_dim} (use f16 values)")
            }
        }
    }
}

impl core::error::Error for Error {}
