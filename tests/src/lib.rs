//! Cross-crate tests live in tests/tests/.

pub mod blocks;
pub mod chat;
pub mod golden;
