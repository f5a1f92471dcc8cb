//! lutra: low-bit LLM inference on CPUs by table lookup instead of multiply-add.
//!
//! Load a model, open a session, stream text:
//!
//! ```no_run
//! use lutra::{Model, SamplerConfig, SessionOptions};
//!
//! let model = Model::load("models/stories15M/model.bin")?; // or a Gemma 3 GGUF
//! let mut session = model.session(&SessionOptions::default())?;
//! for piece in session.generate("Once upon a time", SamplerConfig::greedy(), 64)? {
//!     print!("{}", piece?);
//! }
//! # Ok::<(), lutra::Error>(())
//! ```
//!
//! The engine itself ([`engine`]: model, session, generation, perplexity) is
//! `lutra-core`'s, shared with the browser and the Pi builds; this crate adds files,
//! threads and the CLI. Kernels and formats are in [`core`].
#![warn(missing_docs)]

pub use lutra_core as core;
pub use lutra_core::attention::ValueFormat;
pub use lutra_core::chat::{ChatHistory, ChatPrompt};
pub use lutra_core::engine;
pub use lutra_core::engine::{Attention, CacheInfo, CancelFlag, Hparams, ModelInfo, Perplexity, PqAttention, Role, StopReason};
pub use lutra_core::sampler::SamplerConfig;

pub mod calibrate;
pub mod hugepage;
pub mod import_cache;
pub mod inspect;
mod load;
pub mod memory;
pub mod progress;
pub mod threads;

use std::fmt;
use std::path::{Path, PathBuf};

pub use load::LoadOptions;
use lutra_core::engine::Generation;
pub use memory::MemoryLimit;
use threads::{Pool, Split};

/// What can go wrong: a file that cannot be opened, a model file the engine refuses,
/// or a request the engine refuses.
#[derive(Debug)]
pub enum Error {
    /// The file could not be opened or mapped.
    Open(inspect::InspectError),
    /// The model (or tokenizer) file was refused.
    Model {
        /// The file.
        path: PathBuf,
        /// Why.
        source: engine::Error,
    },
    /// The engine refused a request (a prompt too long, a bad setting, ...).
    Engine(engine::Error),
    /// The model's weights, or a session of it, would need more memory than the limit.
    OutOfMemory {
        /// What needs it: "its weights", or a session's description.
        what: String,
        /// Bytes needed.
        needed: u64,
        /// The limit it exceeds.
        limit: MemoryLimit,
        /// The longest context that fits, for a session.
        fitting_context: Option<usize>,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Open(e) => write!(f, "{e}"),
            Error::Model { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Engine(e) => write!(f, "{e}"),
            Error::OutOfMemory { what, needed, limit, fitting_context } => {
                write!(f, "{what} need {} of memory, more than {limit}", memory::human(*needed))?;
                match fitting_context {
                    Some(c) => write!(f, "; a context of {c} positions fits (--ctx {c})"),
                    None if limit.from_user => write!(f, "; raise --max-memory or use a smaller model"),
                    None => write!(f, "; use a smaller model, or set --max-memory to try anyway"),
                }
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Open(e) => Some(e),
            Error::Model { source, .. } | Error::Engine(source) => Some(source),
            Error::OutOfMemory { .. } => None,
        }
    }
}

impl From<engine::Error> for Error {
    fn from(e: engine::Error) -> Self {
        Error::Engine(e)
    }
}

/// A model loaded from a file; dereferences to the engine's [`engine::Model`]
/// (tokenizer, info, chat format).
#[derive(Clone)]
pub struct Model {
    engine: engine::Model,
    memory_limit: Option<MemoryLimit>,
}

impl Model {
    /// A GGUF (Gemma 3, Llama, Qwen 2/3), or a llama2.c checkpoint (its `tokenizer.bin` beside it,
    /// quantized to 4 bits): see [`Model::load_with`].
    pub fn load(path: impl AsRef<Path>) -> Result<Model, Error> {
        Model::load_with(path, &LoadOptions::default())
    }

    /// As [`Model::load`], with options.
    pub fn load_with(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Model, Error> {
        let memory_limit = MemoryLimit::new(opts.max_memory);
        Ok(Model { engine: load::load(path.as_ref(), opts, memory_limit)?, memory_limit })
    }

    /// Refuses a session of `context` positions when the weights and the session's
    /// memory (the engine's upper bound, [`engine::budget`]) exceed the memory limit the
    /// model was loaded under; the error names the longest context that fits.
    pub fn check_session_memory(&self, context: usize) -> Result<(), Error> {
        let Some(limit) = self.memory_limit else { return Ok(()) };
        let (dims, weights) = (self.dims(), self.info().matrix_bytes as u64);
        let needed = |c: usize| weights.saturating_add(dims.session_bytes(c) as u64);
        if needed(context) <= limit.bytes {
            return Ok(());
        }
        // session bytes grow with the context: the longest that fits, by bisection
        let (mut fits, mut over) = (0, context);
        while over - fits > 1 {
            let mid = fits + (over - fits) / 2;
            if needed(mid) <= limit.bytes {
                fits = mid;
            } else {
                over = mid;
            }
        }
        Err(Error::OutOfMemory {
            what: format!("the weights and a session of {context} positions"),
            needed: needed(context),
            limit,
            fitting_context: (fits > 0).then_some(fits),
        })
    }

    /// The model with chat turns formatted by llama.cpp's builtin template `name`
    /// (`"chatml"`, `"llama3"`, ...) rather than the one recognized in the file.
    pub fn with_chat_template(self, name: &str) -> Result<Model, Error> {
        Ok(Model { engine: self.engine.with_chat_template(name)?, memory_limit: self.memory_limit })
    }

    /// The model with its sessions' lookup products at `tables`' precision
    /// ([`engine::Model::with_table_precision`]).
    pub fn with_table_precision(self, tables: engine::TablePrecision) -> Model {
        Model { engine: self.engine.with_table_precision(tables), memory_limit: self.memory_limit }
    }

    /// The engine's model, for use with [`engine::Session`] directly.
    pub fn engine(&self) -> &engine::Model {
        &self.engine
    }

    /// A session: a KV cache and a thread pool.
    pub fn session(&self, opts: &SessionOptions) -> Result<Session, Error> {
        let context = if opts.context == 0 { engine::default_context(self.info().hparams.context_length) } else { opts.context };
        self.check_session_memory(context)?;
        let inner = engine::Session::with_values(&self.engine, context, &opts.attention, opts.values)?;
        Ok(Session { inner, pool: Pool::new(opts.threads.max(1)) })
    }
}

impl std::ops::Deref for Model {
    type Target = engine::Model;
    fn deref(&self) -> &engine::Model {
        &self.engine
    }
}

/// How to open a session.
#[derive(Clone)]
pub struct SessionOptions {
    /// Positions the session holds (0: [`engine::default_context`] of the model's).
    pub context: usize,
    /// Threads for matrix products and attention.
    pub threads: usize,
    /// How attention reads the key cache.
    pub attention: Attention,
    /// How the value cache stores values (f16; q8_0 / q4_0 for head sizes that are a
    /// multiple of 32).
    pub values: ValueFormat,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            context: 0,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            attention: Attention::Exact,
            values: ValueFormat::F16,
        }
    }
}

/// One sequence: the engine's [`engine::Session`] and the threads that run it.
pub struct Session {
    inner: engine::Session,
    pool: Pool,
}

impl Session {
    /// The engine session (tokens, position, KV cache).
    pub fn engine(&self) -> &engine::Session {
        &self.inner
    }

    /// The engine session and the threads' [`engine::Gemv`], to drive the engine directly.
    pub fn parts(&mut self) -> (&mut engine::Session, Split<'_, Pool>) {
        (&mut self.inner, self.pool.split())
    }

    /// Appends `tokens` and computes them into the KV cache, without logits.
    pub fn feed(&mut self, tokens: &[u32]) -> Result<(), Error> {
        Ok(self.inner.feed(&self.pool.split(), tokens)?)
    }

    /// Appends `token` and returns the logits of the next position.
    pub fn forward(&mut self, token: u32) -> Result<&[f32], Error> {
        Ok(self.inner.forward(&self.pool.split(), token)?)
    }

    /// Keeps the first `position` tokens (see [`engine::Session::truncate`]).
    pub fn truncate(&mut self, position: usize) -> Result<(), Error> {
        Ok(self.inner.truncate(position)?)
    }

    /// Forgets every token.
    pub fn reset(&mut self) {
        self.inner.reset();
    }

    /// Generates from `prompt` (with BOS when the session is empty; otherwise it
    /// continues the session), up to `max_tokens`: an iterator of text pieces in whole
    /// UTF-8 characters.
    pub fn generate(&mut self, prompt: &str, sampler: SamplerConfig, max_tokens: usize) -> Result<TextPieces<'_>, Error> {
        let tokens = self.inner.model().encode(prompt, self.inner.tokens().is_empty())?;
        let generation = Generation::start(&mut self.inner, &tokens, sampler, max_tokens)?;
        Ok(TextPieces { session: self, generation, done: false })
    }
}

/// The text of a generation as it is produced, from [`Session::generate`].
pub struct TextPieces<'s> {
    session: &'s mut Session,
    generation: Generation,
    done: bool,
}

impl TextPieces<'_> {
    /// Why the generation stopped, once it has.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.generation.stop_reason()
    }

    /// The flag that stops the generation before its next token.
    pub fn cancel_flag(&self) -> CancelFlag {
        self.generation.cancel_flag()
    }
}

impl Iterator for TextPieces<'_> {
    type Item = Result<String, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let (session, gemv) = self.session.parts();
        loop {
            match self.generation.next_piece(session, &gemv) {
                Ok(Some("")) => continue,
                Ok(Some(piece)) => return Some(Ok(piece.to_string())),
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e.into()));
                }
            }
        }
    }
}
