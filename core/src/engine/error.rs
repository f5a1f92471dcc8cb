use alloc::string::String;
use core::fmt;

use crate::formats::gguf::GgufError;
use crate::formats::llama2c::Llama2cError;
use crate::model::ModelError;
use crate::pq::PqError;
use crate::sampler::SamplerError;
use crate::tokenizer::vocab::VocabError;
use crate::tokenizer::TokenizerError;

/// Every way the engine refuses a model, a prompt or a request, with a message for people.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// The GGUF file could not be read.
    Gguf(GgufError),
    /// The llama2.c checkpoint could not be read.
    Checkpoint(Llama2cError),
    /// The model could not be built or run (missing tensors, unsupported types or
    /// configurations, shapes that do not fit).
    Model(ModelError),
    /// The GGUF tokenizer could not be built.
    Vocabulary(VocabError),
    /// A tokenizer file or call was refused.
    Tokenizer(TokenizerError),
    /// Sampler settings or logits were refused.
    Sampler(SamplerError),
    /// PQ codebooks that cannot be read or do not fit the model.
    Codebooks(PqError),
    /// Codebooks calibrated on another architecture.
    CodebooksForAnotherModel {
        /// The architecture the codebooks were trained on.
        calibrated_on: String,
        /// The model's architecture.
        model: &'static str,
    },
    /// A GGUF of an architecture the engine does not run.
    UnsupportedArchitecture(String),
    /// The model has no chat format.
    NoChatTemplate {
        /// The model's architecture.
        architecture: &'static str,
    },
    /// A chat template name that is not one of llama.cpp's builtin ones.
    UnknownChatTemplate(String),
    /// The prompt does not leave a position to generate into.
    PromptTooLong {
        /// Tokens of the prompt.
        tokens: usize,
        /// Positions left in the session.
        room: usize,
        /// Positions the session holds.
        context: usize,
    },
    /// Tokens past the end of the session's context.
    ContextFull {
        /// Positions the tokens would take.
        needed: usize,
        /// Positions the session holds.
        context: usize,
    },
    /// A context of zero positions, or more than the model's.
    BadContext {
        /// The context asked for.
        asked: usize,
        /// The model's context.
        max: usize,
    },
    /// Logits were asked for before any token was appended.
    NothingToPredict,
    /// Sessions of different models were asked to compute together.
    SessionsOfDifferentModels,
    /// A generation's [`TokenConstraint`](super::TokenConstraint) allows no token of the
    /// vocabulary.
    NoAllowedToken,
    /// A rewind to a position past the session's tokens.
    TruncateBeyondEnd {
        /// The position asked for.
        position: usize,
        /// Tokens the session holds.
        len: usize,
    },
    /// A token id outside the vocabulary.
    TokenOutOfRange {
        /// The token id.
        token: u32,
        /// The model's vocabulary size.
        vocab_size: usize,
    },
    /// A file of llama.cpp log-probabilities (`llama-perplexity --kl-divergence-base`)
    /// that is damaged or does not fit the model.
    LogitsFile(alloc::string::String),
    /// A text too short for one chunk of perplexity, or a chunk length out of range.
    PerplexityText {
        /// Tokens of the text.
        tokens: usize,
        /// The chunk length asked for.
        ctx: usize,
        /// The model's context.
        max: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Gguf(e) => write!(f, "{e}"),
            Error::Checkpoint(e) => write!(f, "{e}"),
            Error::Model(e) => write!(f, "{e}"),
            Error::Vocabulary(e) => write!(f, "{e}"),
            Error::Tokenizer(e) => write!(f, "{e}"),
            Error::Sampler(e) => write!(f, "{e}"),
            Error::Codebooks(e) => write!(f, "{e}"),
            Error::CodebooksForAnotherModel { calibrated_on, model } => {
                write!(f, "the codebooks were calibrated on a {calibrated_on} model, this is {model}")
            }
            Error::UnsupportedArchitecture(arch) => {
                write!(f, "GGUF architecture {arch:?} is not supported (lutra runs gemma3, llama, qwen2 and qwen3 GGUFs and llama2.c checkpoints)")
            }
            Error::NoChatTemplate { architecture } => write!(
                f,
                "this {architecture} model has no chat template lutra recognizes; choose one with --chat-template NAME (chatml, llama3, llama2, mistral-v7, phi3, gemma, ...) where the model has the control tokens"
            ),
            Error::UnknownChatTemplate(name) => write!(
                f,
                "unknown chat template {name:?}; llama.cpp's builtin names: {}",
                crate::chat::ChatTemplate::builtin_names().collect::<alloc::vec::Vec<_>>().join(", ")
            ),
            Error::PromptTooLong { tokens, room, context } => write!(
                f,
                "the prompt is {tokens} tokens, but {room} of the context's {context} positions are left: it must leave one to generate into"
            ),
            Error::ContextFull { needed, context } => {
                write!(f, "the context is full: {needed} positions needed, it holds {context}")
            }
            Error::BadContext { asked, max } => write!(f, "a context of {asked} positions: it must be between 1 and the model's {max}"),
            Error::NothingToPredict => write!(f, "no token to predict from: append a prompt first"),
            Error::SessionsOfDifferentModels => write!(f, "sessions of different models cannot compute together"),
            Error::NoAllowedToken => write!(f, "no token of the vocabulary can continue the constrained text"),
            Error::TruncateBeyondEnd { position, len } => {
                write!(f, "cannot rewind to position {position}: the session holds {len} tokens")
            }
            Error::TokenOutOfRange { token, vocab_size } => write!(f, "token {token} outside the vocabulary of {vocab_size}"),
            Error::LogitsFile(why) => write!(f, "llama.cpp logits file: {why}"),
            Error::PerplexityText { tokens, ctx, max } => write!(
                f,
                "perplexity needs a chunk length between 4 and the model's context {max} and a text of at least one chunk: got --ctx {ctx} and {tokens} tokens"
            ),
        }
    }
}

impl core::error::Error for Error {}

macro_rules! wrap {
    ($($from:ty => $variant:ident),*) => {$(
        impl From<$from> for Error {
            fn from(e: $from) -> Self {
                Error::$variant(e)
            }
        }
    )*};
}

wrap!(GgufError => Gguf, Llama2cError => Checkpoint, ModelError => Model, VocabError => Vocabulary,
      TokenizerError => Tokenizer, SamplerError => Sampler, PqError => Codebooks);

impl From<crate::Error> for Error {
    fn from(e: crate::Error) -> Self {
        Error::Model(ModelError::Kernel(e))
    }
}
