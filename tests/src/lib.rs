//! Cross-crate tests live in tests/tests/.

pub mod blocks;
pub mod chat;
#[path = "../../core/tests/common/gguf_writer.rs"]
pub mod gguf_writer;
pub mod golden;
pub mod stories_gguf;
pub mod tiny_llama;
