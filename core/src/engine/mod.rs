//! The engine every front-end stands on: the CLI and the `lutra` library, the browser
//! (`lutra-wasm`) and the Pi (`lutra-embedded`). No generation loop lives anywhere else.
//!
//! * [`Model`]: weights and tokenizer, from GGUF bytes or a llama2.c checkpoint; cheap to
//!   clone (shared), [`Model::info`] says what it is.
//! * [`Session`]: one sequence — its KV cache, its tokens and its position. Tokens are
//!   appended (a prompt, a chat turn, a generated token) and computed when logits are
//!   asked for, in batches over one pass of the weights; a conversation keeps appending
//!   to the same session, so earlier turns are never processed again.
//! * [`Generation`]: sampling steps over a session, stopping at an end token, at
//!   `max_tokens`, at the end of the context or when its [`CancelFlag`] is raised; text
//!   comes out through a [`TextStream`] in whole UTF-8 characters.
//! * [`perplexity`]: llama-perplexity's method on the engine.
//!
//! Matrix products go through a [`Gemv`]: [`SingleThread`] here (the
//! browser and the Pi), a thread pool in the `lutra` crate; results are the same bit for
//! bit.

pub use crate::model::budget;
mod error;
mod generate;
mod model;
mod perplexity;
mod session;
mod text;

pub use crate::formats::import::{InMemory, Lent, TensorSource};
pub use crate::model::{Gemv, Hparams, SingleThread, TablePrecision};
pub use crate::sampler::SamplerConfig;
pub use error::Error;
pub use generate::{CancelFlag, Generation, StopReason, Token, TokenConstraint};
pub use model::{runs_architecture, Attention, LoadProgress, Model, ModelInfo, PqAttention, Role};
pub use perplexity::{kl_divergence, perplexity, KlDivergence, LlamaLogits, Perplexity};
pub use session::{default_context, CacheInfo, Session, DEFAULT_CONTEXT};
pub use text::TextStream;
