//! x86-64 scan kernels, selected at run time through `Isa`.
pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod avx512vbmi;
pub(crate) mod ssse3;

/// How far ahead of the block being scanned the `scan16` / `scan256` kernels ask for
/// codes: a scan reads them once, and at 16k positions waited on that stream more than
/// it computed (`perf`).
const SCAN_PREFETCH_BYTES: usize = 2048;
