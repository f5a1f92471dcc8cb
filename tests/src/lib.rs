//! Cross-crate tests live in tests/tests/.

pub mod blocks;
pub mod golden;
