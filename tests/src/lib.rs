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
