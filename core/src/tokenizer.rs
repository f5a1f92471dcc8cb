//! Tokenizers: llama2.c `tokenizer.bin` and SentencePiece-style BPE from GGUF metadata.
