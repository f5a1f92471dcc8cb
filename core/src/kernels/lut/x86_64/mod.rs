//! x86-64 kernels, selected once at run time (`Isa::best`).
pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod avx512vbmi;
pub(crate) mod ssse3;

/// Asks for the cache line at `p` (any address: a prefetch reads nothing the program
/// sees and never faults).
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    // SAFETY: SSE is part of x86-64; `prefetcht0` has no memory-safety requirement.
    unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast()) }
}
