//! Transformer models (Llama, Gemma 3) over the LUT kernels.
