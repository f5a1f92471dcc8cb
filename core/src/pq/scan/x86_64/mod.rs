//! x86-64 scan kernels, selected at run time through `Isa`.
pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod avx512vbmi;
pub(crate) mod ssse3;
