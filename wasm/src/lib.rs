//! wasm-bindgen API over lutra-core (filled by a later issue).
//!
//! The crate also builds on the host (wasm-bindgen's macros are inert there), so
//! `cargo build --workspace` and the host tests cover it.

use wasm_bindgen::prelude::*;

/// Name of the kernel `lutra_core` picks in this build ("simd128" on a
/// `+simd128` wasm build, "scalar" without it).
#[wasm_bindgen]
pub fn best_isa() -> String {
    lutra_core::Isa::best().name().into()
}

#[cfg(test)]
mod tests {
    #[cfg_attr(not(target_arch = "wasm32"), test)]
    #[cfg_attr(target_arch = "wasm32", wasm_bindgen_test::wasm_bindgen_test)]
    fn best_isa_is_a_known_name() {
        let name = super::best_isa();
        assert!(lutra_core::Isa::from_name(&name).is_some(), "{name}");
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        assert_eq!(name, "simd128");
    }
}
