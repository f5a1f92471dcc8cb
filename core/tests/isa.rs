//! Which kernel `Isa::best()` picks. CI sets `LUTRA_EXPECT_ISA` for each emulated CPU
//! (qemu-x86_64 `-cpu Nehalem` → "ssse3", `-cpu Haswell` → "avx2", qemu-aarch64 →
//! "neon", a native AVX-512 host → "avx512" or, with VBMI + VNNI, "avx512vbmi"), so a
//! run proves that the tier it was meant to test is the one that ran (and
//! `LUTRA_EXPECT_DOTPROD=1` that an aarch64 build has the `sdot` int8 kernels). Env vars do not
//! reach wasm tests, so there the expectation is compiled in.

use lutra_core::Isa;

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
fn best_isa_is_the_expected_tier() {
    let best = Isa::best();
    assert!(best.is_available(), "{} is best but not available", best.name());
    assert!(Isa::available().all(|i| i <= best || !matches!(i, Isa::Ssse3 | Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vbmi)));

    #[cfg(not(target_arch = "wasm32"))]
    match std::env::var("LUTRA_EXPECT_ISA") {
        Ok(want) => {
            eprintln!("Isa::best() = {} (expected {want})", best.name());
            assert_eq!(best.name(), want, "LUTRA_EXPECT_ISA");
        }
        Err(_) => eprintln!("Isa::best() = {} (LUTRA_EXPECT_ISA not set)", best.name()),
    }

    // and, for a build meant for cores with the dot-product extension, that the int8
    // kernels' `sdot` form is the one compiled in
    #[cfg(target_arch = "aarch64")]
    if let Ok(want) = std::env::var("LUTRA_EXPECT_DOTPROD") {
        assert_eq!(cfg!(target_feature = "dotprod"), want == "1", "LUTRA_EXPECT_DOTPROD={want}");
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    assert_eq!(best, Isa::Simd128);
}
