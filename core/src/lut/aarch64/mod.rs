pub(crate) mod neon;
