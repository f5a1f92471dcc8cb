//! The model architectures, one file each, and the one list that registers them.
//!
//! An architecture is its hyperparameters, its weights and one forward pass over a batch
//! of tokens (the [`Architecture`] trait); the engine (`crate::engine`) reaches it only
//! through that trait, by way of the `registry!` list at the bottom of this file. To
//! add one: write `NAME.rs` with a type implementing [`Architecture`] (its
//! `runs_gguf`/`from_gguf` say which GGUF files it loads), and add one line to that list.
//!
//! * [`llama_family`]: the Llama graph: GGUF `llama`, `qwen2`, `qwen3` (Llama 2/3, Mistral,
//!   TinyLlama, Qwen), and llama2.c checkpoints mapped onto it by [`llama`] (with their
//!   packed `.lutra` files).
//! * [`gemma3`]: GGUF `gemma3`.

pub mod gemma3;
pub mod llama;
pub mod llama_family;
#[cfg(test)]
mod toy;

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::attention::{AttentionShape, KvCache};
use crate::chat::ChatTemplate;
use crate::formats::gguf::Gguf;
use crate::formats::import::{Imported, TensorSource};
use crate::formats::pack;
use crate::model::budget;
use crate::model::{Gemv, Hparams, ModelError, TablePrecision};
use crate::AlignedBytes;

/// A model architecture: hyperparameters, weights, one forward pass.
pub trait Architecture: Sized + Send + Sync + 'static {
    /// What one sequence keeps between steps: its KV cache, working buffers and logits.
    type State: ArchState;

    /// Files without a `tokenizer.chat_template` still have this chat format (Gemma's turns).
    const DEFAULT_CHAT: Option<ChatTemplate> = None;
    /// Its GGUF files must carry a SentencePiece vocabulary (any other is refused as such).
    const SENTENCEPIECE_ONLY: bool = false;

    /// Whether it runs GGUF files whose `general.architecture` is `name`.
    fn runs_gguf(name: &str) -> bool;

    /// The weights of a GGUF file it runs, `progress` told after each tensor.
    fn from_gguf(gguf: &Gguf<'_>, source: &mut dyn TensorSource, progress: &mut dyn FnMut(Imported<'_>)) -> Result<Self, ModelError>;

    /// The GGUF `general.architecture` it runs as (`llama` for llama2.c checkpoints).
    fn name(&self) -> &'static str;

    /// Its sizes, the trained context length among them.
    fn hparams(&self) -> Hparams;

    /// Its sizes (`hparams`), and which working buffers its forward pass needs (`budget`
    /// sizes sessions from them); `token_bytes` is the tokenizer's, which the engine fills in.
    fn dims(&self) -> budget::Dims;

    /// Bytes of its packed weight matrices (what a decode step streams).
    fn matrix_bytes(&self) -> usize;

    /// The buffers of its matrices, for gathering them into one allocation.
    fn matrix_buffers_mut(&mut self) -> Vec<&mut AlignedBytes>;

    /// The attention a KV cache of `context` positions (at least 1, at most
    /// `context_length`) must serve: one KV row per layer and position, from `hparams`.
    fn attention_shape(&self, context: usize) -> AttentionShape {
        let h = self.hparams();
        let context = context.min(h.context_length).max(1);
        AttentionShape { layers: h.layers, heads: h.heads, kv_heads: h.kv_heads, head_dim: h.head_dim, context }
    }

    /// Each layer's sliding window, 0 where it attends to every position.
    fn layer_windows(&self) -> Vec<usize>;

    /// Packs the model into `writer` (a `.lutra` file, read in place on load); `origin`
    /// is the file it came from. Architectures that cannot be packed yet say so.
    fn write_packed<'a>(&'a self, origin: &'a [u8], writer: &mut pack::Writer<'a>) -> Result<(), ModelError> {
        let _ = (origin, writer);
        let name = self.name();
        Err(ModelError::BadPackedFile(alloc::format!("packing {name} models is not implemented yet; run the GGUF file itself")))
    }

    /// A sequence's state over `cache` (made for `attention_shape`), its lookup products
    /// at `tables`' precision.
    fn new_state(&self, cache: Box<dyn KvCache>, tables: TablePrecision) -> Result<Self::State, ModelError>;

    /// Token `token` at position `pos`, through the LM head: its logits (kept in `state`).
    /// Positions are fed in order from 0.
    fn forward<'s, G: Gemv>(&self, gemv: &G, state: &'s mut Self::State, token: u32, pos: usize) -> Result<&'s [f32], ModelError>;

    /// `tokens` at positions `first_pos..` into the KV cache, without logits, over one
    /// pass of the weights per batch.
    fn feed_batch<G: Gemv>(&self, gemv: &G, state: &mut Self::State, tokens: &[u32], first_pos: usize) -> Result<(), ModelError>;
}

/// What a session reads from an architecture's state.
pub trait ArchState: Send {
    /// Positions its KV cache holds.
    fn context(&self) -> usize;
    /// Its KV cache.
    fn cache(&self) -> &dyn KvCache;
    /// The logits of the last `forward`.
    fn logits(&self) -> &[f32];
}

/// One sequence's state, for an architecture whose forward pass keeps its working
/// buffers in a `B`: the KV cache, `B` (allocated once) and the logits of the last
/// `forward`.
pub struct State<B> {
    pub(crate) context: usize,
    pub(crate) cache: Box<dyn KvCache>,
    pub(crate) batch: Box<B>,
    pub(crate) logits: Vec<f32>,
}

impl<B> State<B> {
    /// Over `cache`, which must be made for `model.attention_shape` of its context (else
    /// `CacheShape`); `batch` makes the working buffers once it fits.
    pub(crate) fn for_model<A: Architecture>(
        model: &A,
        cache: Box<dyn KvCache>,
        batch: impl FnOnce() -> Result<B, ModelError>,
    ) -> Result<State<B>, ModelError> {
        let context = cache.shape().context;
        let expected = model.attention_shape(context);
        if cache.shape() != expected {
            return Err(ModelError::CacheShape { expected, got: cache.shape() });
        }
        let logits = alloc::vec![0.0; model.hparams().vocab_size];
        Ok(State { context, cache, batch: Box::new(batch()?), logits })
    }

    /// Bytes of the KV cache.
    pub fn kv_cache_bytes(&self) -> usize {
        self.cache.key_bytes() + self.cache.value_bytes()
    }
}

impl<B: Send> ArchState for State<B> {
    fn context(&self) -> usize {
        self.context
    }
    fn cache(&self) -> &dyn KvCache {
        &*self.cache
    }
    fn logits(&self) -> &[f32] {
        &self.logits
    }
}

/// Declares every architecture once: the model and state enums the engine holds, and
/// their forwarding to [`Architecture`]. One line per architecture: `Variant(Type)`.
macro_rules! registry {
    ($($(#[doc = $doc:literal])* $(#[cfg($cfg:meta)])? $variant:ident($ty:ty),)+) => {
        /// A loaded model of any registered architecture.
        pub(crate) enum Network {
            $($(#[doc = $doc])* $(#[cfg($cfg)])? $variant(Box<$ty>),)+
        }

        /// A sequence's state, of the same architecture as its `Network`.
        pub(crate) enum NetworkState {
            $($(#[cfg($cfg)])? $variant(Box<<$ty as Architecture>::State>),)+
        }

        impl Network {
            /// The weights of a GGUF file whose `general.architecture` is `name`, by
            /// the first architecture that runs it; `None` if none does.
            pub(crate) fn from_gguf(
                name: &str,
                gguf: &Gguf<'_>,
                source: &mut dyn TensorSource,
                progress: &mut dyn FnMut(Imported<'_>),
            ) -> Option<Result<Network, ModelError>> {
                $($(#[cfg($cfg)])? {
                    if <$ty as Architecture>::runs_gguf(name) {
                        return Some(<$ty as Architecture>::from_gguf(gguf, source, progress).map(|m| Network::$variant(Box::new(m))));
                    }
                })+
                None
            }

            /// Whether an architecture runs GGUF files of `name`.
            pub(crate) fn runs_gguf(name: &str) -> bool {
                $($(#[cfg($cfg)])? {
                    if <$ty as Architecture>::runs_gguf(name) {
                        return true;
                    }
                })+
                false
            }

            /// The chat format of files of `name` that carry none.
            pub(crate) fn default_chat(name: &str) -> Option<ChatTemplate> {
                $($(#[cfg($cfg)])? {
                    if <$ty as Architecture>::runs_gguf(name) {
                        return <$ty as Architecture>::DEFAULT_CHAT;
                    }
                })+
                None
            }

            /// Whether GGUF files of `name` must carry a SentencePiece vocabulary.
            pub(crate) fn sentencepiece_only(name: &str) -> bool {
                $($(#[cfg($cfg)])? {
                    if <$ty as Architecture>::runs_gguf(name) {
                        return <$ty as Architecture>::SENTENCEPIECE_ONLY;
                    }
                })+
                false
            }

            pub(crate) fn name(&self) -> &'static str {
                match self { $($(#[cfg($cfg)])? Network::$variant(m) => <$ty as Architecture>::name(m),)+ }
            }
            pub(crate) fn hparams(&self) -> Hparams {
                match self { $($(#[cfg($cfg)])? Network::$variant(m) => <$ty as Architecture>::hparams(m),)+ }
            }
            pub(crate) fn dims(&self) -> budget::Dims {
                match self { $($(#[cfg($cfg)])? Network::$variant(m) => <$ty as Architecture>::dims(m),)+ }
            }
            pub(crate) fn matrix_bytes(&self) -> usize {
                match self { $($(#[cfg($cfg)])? Network::$variant(m) => <$ty as Architecture>::matrix_bytes(m),)+ }
            }
            pub(crate) fn matrix_buffers_mut(&mut self) -> Vec<&mut AlignedBytes> {
                match self { $($(#[cfg($cfg)])? Network::$variant(m) => <$ty as Architecture>::matrix_buffers_mut(m),)+ }
            }
            pub(crate) fn attention_shape(&self, context: usize) -> AttentionShape {
                match self { $($(#[cfg($cfg)])? Network::$variant(m) => <$ty as Architecture>::attention_shape(m, context),)+ }
            }
            pub(crate) fn layer_windows(&self) -> Vec<usize> {
                match self { $($(#[cfg($cfg)])? Network::$variant(m) => <$ty as Architecture>::layer_windows(m),)+ }
            }
            pub(crate) fn write_packed<'a>(&'a self, origin: &'a [u8], writer: &mut pack::Writer<'a>) -> Result<(), ModelError> {
                match self { $($(#[cfg($cfg)])? Network::$variant(m) => <$ty as Architecture>::write_packed(m, origin, writer),)+ }
            }
            pub(crate) fn new_state(&self, cache: Box<dyn KvCache>, tables: TablePrecision) -> Result<NetworkState, ModelError> {
                match self {
                    $($(#[cfg($cfg)])? Network::$variant(m) => Ok(NetworkState::$variant(Box::new(<$ty as Architecture>::new_state(m, cache, tables)?))),)+
                }
            }
            pub(crate) fn forward<G: Gemv>(&self, gemv: &G, state: &mut NetworkState, token: u32, pos: usize) -> Result<(), ModelError> {
                match (self, state) {
                    $($(#[cfg($cfg)])? (Network::$variant(m), NetworkState::$variant(s)) => <$ty as Architecture>::forward(m, gemv, s, token, pos).map(drop),)+
                    #[allow(unreachable_patterns)]
                    _ => unreachable!("a session's state is made by its own model"),
                }
            }
            pub(crate) fn feed_batch<G: Gemv>(&self, gemv: &G, state: &mut NetworkState, tokens: &[u32], first_pos: usize) -> Result<(), ModelError> {
                match (self, state) {
                    $($(#[cfg($cfg)])? (Network::$variant(m), NetworkState::$variant(s)) => <$ty as Architecture>::feed_batch(m, gemv, s, tokens, first_pos),)+
                    #[allow(unreachable_patterns)]
                    _ => unreachable!("a session's state is made by its own model"),
                }
            }
        }

        impl NetworkState {
            pub(crate) fn context(&self) -> usize {
                match self { $($(#[cfg($cfg)])? NetworkState::$variant(s) => ArchState::context(&**s),)+ }
            }
            pub(crate) fn cache(&self) -> &dyn KvCache {
                match self { $($(#[cfg($cfg)])? NetworkState::$variant(s) => ArchState::cache(&**s),)+ }
            }
            pub(crate) fn logits(&self) -> &[f32] {
                match self { $($(#[cfg($cfg)])? NetworkState::$variant(s) => ArchState::logits(&**s),)+ }
            }
        }
    };
}

registry! {
    Gemma3(gemma3::Gemma3),
    LlamaFamily(llama_family::LlamaFamily),
    /// A two-matrix toy that proves the seam: its own file plus this line (tests only).
    #[cfg(test)]
    Toy(toy::Toy),
}

impl Network {
    /// [`Network::forward`] for one token of each of several sequences of this model,
    /// `tokens[i]` at `positions[i]` of `states[i]`: over one pass of the weights per
    /// `PREFILL_BATCH` of them where the architecture batches across sequences (the llama
    /// family), one at a time otherwise. Each state's logits are its own `forward`'s, bit
    /// for bit; `logits` is working memory.
    pub(crate) fn forward_many<G: Gemv>(
        &self,
        gemv: &G,
        states: &mut [&mut NetworkState],
        tokens: &[u32],
        positions: &[usize],
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        if let Network::LlamaFamily(m) = self {
            let n = states.len();
            let mut family: Vec<&mut llama_family::LlamaFamilyState> = states
                .iter_mut()
                .filter_map(|s| match &mut **s {
                    NetworkState::LlamaFamily(s) => Some(&mut **s),
                    #[allow(unreachable_patterns)]
                    _ => None,
                })
                .collect();
            if family.len() == n {
                let batch = crate::model::PREFILL_BATCH;
                for ((states, tokens), positions) in family.chunks_mut(batch).zip(tokens.chunks(batch)).zip(positions.chunks(batch)) {
                    m.forward_many(gemv, states, tokens, positions, logits)?;
                }
                return Ok(());
            }
        }
        for ((s, &token), &pos) in states.iter_mut().zip(tokens).zip(positions) {
            self.forward(gemv, s, token, pos)?;
        }
        Ok(())
    }
}
