use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use super::{Error, Session, TextStream};
use crate::model::Gemv;
use crate::sampler::{scratch_len, Candidate, Sampler, SamplerConfig};

/// Why a generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end token (not appended to the session).
    EndToken(u32),
    /// `max_tokens` were generated.
    MaxTokens,
    /// The session's context has no position left.
    ContextFull,
    /// The [`CancelFlag`] was raised.
    Cancelled,
}

/// Raised from anywhere (another thread, a signal handler, a UI callback) to stop a
/// generation before its next token.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    /// A lowered flag.
    pub fn new() -> CancelFlag {
        CancelFlag::default()
    }
    /// Raises the flag: the generation stops before its next token.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    /// Whether the flag is raised.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
    /// Lowers the flag, for the next generation.
    pub fn reset(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Limits which tokens a generation may sample: a JSON schema
/// ([`crate::json::JsonConstraint`]), a grammar. The end token may come only when the
/// text is complete; a token without text (a control token) never.
pub trait TokenConstraint: Send {
    /// Whether a token of these bytes may come next (the state unchanged).
    fn allows(&mut self, bytes: &[u8]) -> bool;
    /// Takes the bytes of the token sampled (which `allows` admitted).
    fn advance(&mut self, bytes: &[u8]);
    /// Whether the text is complete: the end token may come.
    fn is_complete(&self) -> bool;
}

/// One generated token and the whole characters it completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token<'g> {
    /// The token id.
    pub id: u32,
    /// Possibly empty: a character split across tokens comes out with its last byte.
    pub text: &'g str,
}

/// Sampling over a session, one token a step.
///
/// Append the prompt to the session (or pass it to [`Generation::start`]); each
/// [`step`](Generation::step) computes what the session holds, samples the next token,
/// and appends it, so the session always holds the whole conversation: a next turn is
/// appended after it and nothing is processed twice. The end token that stops a
/// generation is not appended (chat formats close the turn themselves).
pub struct Generation {
    sampler: Sampler,
    scratch: Vec<Candidate>,
    max_tokens: usize,
    generated: usize,
    text: TextStream,
    cancel: CancelFlag,
    stopped: Option<StopReason>,
    /// `next_piece` has given the text's leftover.
    finished: bool,
    constraint: Option<Box<dyn TokenConstraint>>,
    /// The logits with the tokens the constraint refuses at −∞.
    masked: Vec<f32>,
}

impl Generation {
    /// Appends `prompt` (may be empty if the session already holds what to continue)
    /// and prepares to generate up to `max_tokens` tokens.
    pub fn start(session: &mut Session, prompt: &[u32], sampler: SamplerConfig, max_tokens: usize) -> Result<Generation, Error> {
        let sampler = Sampler::new(sampler)?;
        let room = session.room();
        if !prompt.is_empty() && prompt.len() >= room {
            return Err(Error::PromptTooLong { tokens: prompt.len(), room, context: session.context() });
        }
        session.append(prompt)?;
        if session.tokens().is_empty() {
            return Err(Error::NothingToPredict);
        }
        Ok(Generation {
            sampler,
            scratch: vec![Candidate::default(); scratch_len(session.model().vocab_size())],
            max_tokens,
            generated: 0,
            text: TextStream::new(),
            cancel: CancelFlag::new(),
            stopped: None,
            finished: false,
            constraint: None,
            masked: Vec::new(),
        })
    }

    /// Samples only tokens `constraint` allows: the token drawn as usual when it does,
    /// else a draw again over the logits of the allowed tokens alone (as llama.cpp
    /// applies a grammar), so the text always satisfies it. Errors with
    /// [`Error::NoAllowedToken`] if no token of the vocabulary can continue the text.
    pub fn with_constraint(mut self, constraint: Box<dyn TokenConstraint>) -> Generation {
        self.constraint = Some(constraint);
        self
    }

    /// Uses `flag` to cancel (e.g. one shared with a Ctrl-C handler).
    pub fn with_cancel_flag(mut self, flag: CancelFlag) -> Generation {
        self.cancel = flag;
        self
    }

    /// The flag that stops this generation before its next token.
    pub fn cancel_flag(&self) -> CancelFlag {
        self.cancel.clone()
    }

    /// The next token, or `None` once stopped (see [`Generation::stop_reason`]).
    pub fn step<G: Gemv>(&mut self, session: &mut Session, gemv: &G) -> Result<Option<Token<'_>>, Error> {
        Ok(self.advance(session, gemv)?.map(|id| Token { id, text: self.text.released() }))
    }

    /// The loop every front-end drives: each sampled token's whole characters (maybe
    /// none: `""`), then once what is left of the text if anything is (U+FFFD for a
    /// character cut short), then `None`. Allocates nothing.
    pub fn next_piece<G: Gemv>(&mut self, session: &mut Session, gemv: &G) -> Result<Option<&str>, Error> {
        if self.finished {
            return Ok(None);
        }
        if self.advance(session, gemv)?.is_some() {
            return Ok(Some(self.text.released()));
        }
        self.finished = true;
        let rest = self.text.finish();
        Ok((!rest.is_empty()).then_some(rest))
    }

    /// Samples the next token and appends it, its text left in `self.text`; `None` once
    /// stopped.
    fn advance<G: Gemv>(&mut self, session: &mut Session, gemv: &G) -> Result<Option<u32>, Error> {
        if self.stopped.is_some() {
            return Ok(None);
        }
        let stop = if self.cancel.is_cancelled() {
            Some(StopReason::Cancelled)
        } else if self.generated >= self.max_tokens {
            Some(StopReason::MaxTokens)
        } else {
            None
        };
        if let Some(reason) = stop {
            self.stopped = Some(reason);
            return Ok(None);
        }
        // the model outlives the borrow of the session that the logits hold
        let model = self.constraint.is_some().then(|| session.model().clone());
        let (logits, tokens) = session.logits_and_tokens(gemv)?;
        let mut next = self.sampler.sample(logits, tokens, &mut self.scratch)?;
        if let (Some(constraint), Some(model)) = (self.constraint.as_deref_mut(), model.as_ref()) {
            let prev = tokens.last().copied();
            let mut allowed = |id: u32| -> Result<bool, Error> {
                if model.is_end(id) {
                    return Ok(constraint.is_complete());
                }
                let bytes = model.decode_piece(prev, id)?;
                Ok(!bytes.is_empty() && constraint.allows(bytes))
            };
            if !allowed(next)? {
                self.masked.clear();
                self.masked.extend_from_slice(logits);
                let mut any = false;
                for (id, logit) in self.masked.iter_mut().enumerate() {
                    if allowed(id as u32)? {
                        any = true;
                    } else {
                        *logit = f32::NEG_INFINITY;
                    }
                }
                if !any {
                    return Err(Error::NoAllowedToken);
                }
                next = self.sampler.sample(&self.masked, tokens, &mut self.scratch)?;
            }
            if !model.is_end(next) {
                constraint.advance(model.decode_piece(prev, next)?);
            }
        }
        self.generated += 1;
        if session.model().is_end(next) {
            self.stopped = Some(StopReason::EndToken(next));
            return Ok(None);
        }
        let prev = session.tokens().last().copied();
        self.text.push(session.model().decode_piece(prev, next)?);
        if session.room() == 0 {
            // the token is returned, but there is no position to append it to
            self.stopped = Some(StopReason::ContextFull);
        } else {
            session.append(&[next])?;
        }
        Ok(Some(next))
    }

    /// Why the generation stopped, once it has.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stopped
    }

    /// Tokens sampled so far (an end token included).
    pub fn generated(&self) -> usize {
        self.generated
    }

    /// What is left of the text when the generation is over: U+FFFD for a character
    /// cut short, else nothing.
    pub fn finish_text(&mut self) -> &str {
        self.text.finish()
    }
}
