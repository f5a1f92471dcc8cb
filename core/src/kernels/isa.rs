//! Instruction-set selection. x86-64 is detected once at run time (cpuid + xgetbv,
//! so it works without std); aarch64 NEON and wasm simd128 are chosen at compile time.

#[cfg(target_arch = "x86_64")]
use core::sync::atomic::{AtomicU8, Ordering};

/// A kernel implementation. `Scalar` is the reference every other one must equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    Scalar,
    /// x86-64 SSSE3 (`pshufb`, `pmaddubsw`), 128-bit.
    Ssse3,
    /// x86-64 AVX2 + FMA + F16C, 256-bit.
    Avx2,
    /// x86-64 AVX-512 F + BW, 512-bit.
    Avx512,
    /// x86-64 AVX-512 VBMI + VNNI (and VL): 64-entry `vpermb` tables, `vpdpbusd` sums
    /// (reads `Interleave::Permute` matrices); int8 products by `vpdpbusd` too.
    Avx512Vbmi,
    /// aarch64 Advanced SIMD (`tbl`).
    Neon,
    /// wasm32 simd128 (`i8x16.swizzle`).
    Simd128,
}

impl Isa {
    pub const ALL: [Isa; 7] = [Isa::Scalar, Isa::Ssse3, Isa::Avx2, Isa::Avx512, Isa::Avx512Vbmi, Isa::Neon, Isa::Simd128];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Ssse3 => "ssse3",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Vbmi => "avx512vbmi",
            Isa::Neon => "neon",
            Isa::Simd128 => "simd128",
        }
    }

    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == name)
    }

    /// Whether this build on this CPU can run the kernel.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Ssse3 | Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vbmi => x86_best() >= self,
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            Isa::Neon => true,
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Isa::Simd128 => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The fastest available kernel.
    pub fn best() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            x86_best()
        }
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        {
            Isa::Neon
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        {
            Isa::Simd128
        }
        #[cfg(not(any(
            target_arch = "x86_64",
            all(target_arch = "aarch64", target_feature = "neon"),
            all(target_arch = "wasm32", target_feature = "simd128")
        )))]
        {
            Isa::Scalar
        }
    }

    /// The code order this kernel reads; `Scalar` reads both (`accepts`).
    pub fn interleave(self) -> crate::Interleave {
        match self {
            Isa::Avx512Vbmi => crate::Interleave::Permute,
            _ => crate::Interleave::Shuffle,
        }
    }

    /// Whether this kernel can read a matrix packed in `interleave` order.
    pub fn accepts(self, interleave: crate::Interleave) -> bool {
        self == Isa::Scalar || self.interleave() == interleave
    }

    /// The fastest available kernel that reads `interleave` order.
    pub fn best_for(interleave: crate::Interleave) -> Isa {
        Isa::ALL.into_iter().rev().find(|i| i.is_available() && i.accepts(interleave)).unwrap_or(Isa::Scalar)
    }

    /// Caps every later kernel choice at `max` (x86-64: the detected tier or `max`,
    /// whichever is lower), so one machine can run and time the tiers most users have.
    /// Call it before importing a model: matrices are packed for the tier then in force.
    /// Returns the tier now in force; elsewhere the choice is made at compile time and
    /// this only reports it.
    pub fn limit_to(max: Isa) -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            let capped = detect_x86().min(max);
            X86_BEST.store(capped as u8, Ordering::Relaxed);
        }
        let _ = max;
        Isa::best()
    }

    /// Every kernel this build can run here, the reference first.
    pub fn available() -> impl Iterator<Item = Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_available())
    }
}

#[cfg(target_arch = "x86_64")]
static X86_BEST: AtomicU8 = AtomicU8::new(u8::MAX);

/// Detected once, then cached: the dispatch cost is one relaxed load.
#[cfg(target_arch = "x86_64")]
fn x86_best() -> Isa {
    let cached = X86_BEST.load(Ordering::Relaxed);
    let code = if cached == u8::MAX {
        let isa = detect_x86();
        X86_BEST.store(isa as u8, Ordering::Relaxed);
        isa as u8
    } else {
        cached
    };
    match code {
        c if c == Isa::Avx512Vbmi as u8 => Isa::Avx512Vbmi,
        c if c == Isa::Avx512 as u8 => Isa::Avx512,
        c if c == Isa::Avx2 as u8 => Isa::Avx2,
        c if c == Isa::Ssse3 as u8 => Isa::Ssse3,
        _ => Isa::Scalar,
    }
}

#[cfg(target_arch = "x86_64")]
fn detect_x86() -> Isa {
    use core::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
    // Miri runs the portable code: it has no cpuid, and checks no SIMD intrinsics
    if cfg!(miri) {
        return Isa::Scalar;
    }
    let leaf0 = __cpuid(0);
    let leaf1 = __cpuid(1);
    let ssse3 = leaf1.ecx & (1 << 9) != 0;
    if !ssse3 {
        return Isa::Scalar;
    }
    let osxsave = leaf1.ecx & (1 << 27) != 0;
    let avx = leaf1.ecx & (1 << 28) != 0;
    let fma = leaf1.ecx & (1 << 12) != 0;
    let f16c = leaf1.ecx & (1 << 29) != 0;
    if !(osxsave && avx && leaf0.eax >= 7) {
        return Isa::Ssse3;
    }
    // SAFETY: OSXSAVE is set, so xgetbv is enabled by the OS.
    let xcr0 = unsafe { _xgetbv(0) };
    let os_ymm = xcr0 & 0b110 == 0b110;
    let os_zmm = xcr0 & 0b1110_0110 == 0b1110_0110;
    // leaf 7 exists: max leaf >= 7 was checked above
    let leaf7 = __cpuid_count(7, 0);
    let avx2 = leaf7.ebx & (1 << 5) != 0;
    let avx512f = leaf7.ebx & (1 << 16) != 0;
    let avx512bw = leaf7.ebx & (1 << 30) != 0;
    if !(os_ymm && avx2 && fma && f16c) {
        return Isa::Ssse3;
    }
    let vbmi = leaf7.ecx & (1 << 1) != 0;
    let vnni = leaf7.ecx & (1 << 11) != 0;
    // VL for VNNI on 256-bit vectors (the int8 token tile); every VBMI CPU has it
    let vl = leaf7.ebx & (1 << 31) != 0;
    if os_zmm && avx512f && avx512bw && vbmi && vnni && vl {
        Isa::Avx512Vbmi
    } else if os_zmm && avx512f && avx512bw {
        Isa::Avx512
    } else {
        Isa::Avx2
    }
}
