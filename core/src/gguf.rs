//! GGUF v2/v3 reader (zero-copy over `&[u8]`, every length checked).
