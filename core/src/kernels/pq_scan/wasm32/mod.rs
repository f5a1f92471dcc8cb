pub(crate) mod simd128;
