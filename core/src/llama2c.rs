//! llama2.c checkpoint reader (zero-copy over `&[u8]`, every length checked).
