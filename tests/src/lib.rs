//! Cross-crate tests live in tests/tests/.

pub mod golden;
