//! Cross-crate tests live in tests/tests/.

pub mod blocks;
pub mod chat;
pub mod golden;
pub mod stories_gguf;

/// GGUF writers shared with lutra-core's tests.
#[path = "../../core/tests/common"]
pub mod common {
    pub mod gguf_writer;
    pub mod tiny_llama;
}
pub use common::{gguf_writer, tiny_llama};

/// Caps the kernel tier at `LUTRA_MAX_ISA` (as the `lutra` CLI does), so a test of a
/// whole model can run on AVX2 on an AVX-512 host; returns the tier in use.
pub fn kernel_tier_from_env() -> lutra_core::Isa {
    if let Some(name) = std::env::var("LUTRA_MAX_ISA").ok().filter(|n| !n.is_empty()) {
        let max = lutra_core::Isa::from_name(&name).unwrap_or_else(|| panic!("LUTRA_MAX_ISA={name}: not a kernel tier"));
        lutra_core::Isa::limit_to(max);
    }
    lutra_core::Isa::best()
}
