//! x86-64 kernels, selected once at run time (`Isa::best`).
pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod avx512vbmi;
pub(crate) mod ssse3;
