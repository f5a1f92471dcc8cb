//! `Engine`: a model, one session and the generation in progress, for the page's worker.

use lutra_core::chat::ChatHistory;
use lutra_core::engine::{default_context, Attention, Generation, Model, Role, Session, StopReason, TensorSource};
use lutra_core::formats::gguf::{is_gguf, Gguf};
use lutra_core::sampler::SamplerConfig;
use wasm_bindgen::prelude::*;

use crate::js;
use crate::pool::products;
use crate::source::{complete, JsSource, ModelFile};

/// A model, one session and the generation in progress.
#[wasm_bindgen]
pub struct Engine {
    model: Model,
    session: Session,
    generation: Option<Generation>,
    /// The conversation while `start` is given chat messages (as `lutra chat` keeps it).
    history: ChatHistory,
    /// The answer being generated to the last chat message.
    answer: String,
    chatting: bool,
}

#[wasm_bindgen]
impl Engine {
    /// A GGUF file (any architecture the engine runs) of `file_len` bytes, with a session of
    /// `context` positions (0: [`default_context`] of the model's), read a piece at a time
    /// through `read(offset, length) → Uint8Array` (a worker reads pieces of a `Blob` with
    /// `FileReaderSync`): the header first, then each matrix a run of rows (about 4 MiB of
    /// the file) at a time, so wasm memory holds the weights and one piece, never the file
    /// nor a whole tensor. `progress(done, total)` after each imported tensor.
    pub fn from_gguf_blob(
        file_len: f64,
        read: js_sys::Function,
        context: usize,
        progress: Option<js_sys::Function>,
    ) -> Result<Engine, JsError> {
        let file_len = file_len as u64;
        let mut source = JsSource::new(read);
        let magic = source.read(0..4.min(file_len)).map_err(js)?;
        if !is_gguf(magic) {
            return Err(JsError::new("not a GGUF file (it does not start with the GGUF magic)"));
        }
        // the header: a prefix doubled until it parses (the whole file at worst, where the
        // parse error is then the file's own)
        let mut len = (1u64 << 20).min(file_len);
        let mut header = Vec::new();
        loop {
            header.clear();
            header.extend_from_slice(source.read(0..len).map_err(js)?);
            if len == file_len || Gguf::parse_prefix(&header, file_len).is_ok() {
                break;
            }
            len = (len * 2).min(file_len);
        }
        let gguf = Gguf::parse_prefix(&header, file_len).map_err(js)?;
        let model = Model::from_gguf_source(&gguf, &mut source, |p| {
            if let (Some(f), true) = (&progress, p.finished) {
                let _ = f.call2(&JsValue::NULL, &JsValue::from(p.done as u32), &JsValue::from(p.total as u32));
            }
        })
        .map_err(js)?;
        Engine::new(model, context)
    }

    /// A llama2.c checkpoint and its `tokenizer.bin`, quantized to `bits` (1..=8).
    pub fn from_llama2c(
        checkpoint: ModelFile,
        tokenizer: &[u8],
        bits: u8,
        context: usize,
        progress: Option<js_sys::Function>,
    ) -> Result<Engine, JsError> {
        complete(&checkpoint, "checkpoint")?;
        let model = Model::from_llama2c_with_progress(&checkpoint.bytes, tokenizer, bits, |p| {
            if let Some(f) = &progress {
                let _ = f.call2(&JsValue::NULL, &JsValue::from(p.done as u32), &JsValue::from(p.total as u32));
            }
        })
        .map_err(js)?;
        drop(checkpoint);
        Engine::new(model, context)
    }

    fn new(model: Model, context: usize) -> Result<Engine, JsError> {
        let max = model.info().hparams.context_length;
        let context = if context == 0 { default_context(max) } else { context.min(max) };
        let session = Session::new(&model, context, &Attention::Exact).map_err(js)?;
        Ok(Engine { model, session, generation: None, history: ChatHistory::new(), answer: String::new(), chatting: false })
    }

    /// What the model is, one line.
    pub fn summary(&self) -> String {
        self.model.info().summary()
    }

    /// Whether the model has a chat format (`start` with `chat`).
    pub fn has_chat(&self) -> bool {
        self.model.info().chat
    }

    /// Positions the session holds.
    pub fn context(&self) -> usize {
        self.session.context()
    }

    /// Positions the session uses.
    pub fn position(&self) -> usize {
        self.session.position()
    }

    /// Starts a generation of up to `max_tokens`. Plain text (`chat` false) starts a new
    /// sequence; a chat message is the conversation's next user turn, fed as llama.cpp
    /// formats the whole conversation (`ChatHistory`, as `lutra chat` does); a plain run
    /// ends the conversation. Returns the prompt's token count. `seed` is rounded to an
    /// integer.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &mut self,
        prompt: &str,
        chat: bool,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        repeat_last_n: usize,
        seed: f64,
    ) -> Result<usize, JsError> {
        // the last answer, whole or stopped, as the session holds it
        if self.generation.take().is_some() && self.chatting {
            self.history.add_answer(&core::mem::take(&mut self.answer));
        }
        self.answer.clear();
        if !chat && self.chatting {
            self.history = ChatHistory::new();
        }
        self.chatting = chat;
        let tokens = if chat {
            self.history.next_turn(&mut self.session, &[(Role::User, prompt)]).map_err(js)?.tokens
        } else {
            self.session.reset();
            self.model.encode(prompt, true).map_err(js)?
        };
        let sampler = SamplerConfig { temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed: seed as u64 };
        self.generation = Some(Generation::start(&mut self.session, &tokens, sampler, max_tokens).map_err(js)?);
        Ok(tokens.len())
    }

    /// Stops the generation before its next token (the Stop button); its answer so far
    /// stays in the conversation.
    pub fn cancel(&self) {
        if let Some(generation) = &self.generation {
            generation.cancel_flag().cancel();
        }
    }

    /// Computes the prompt but its last token (the first `next_token` computes that one
    /// with the logits), so prompt and generation speed can be timed apart.
    pub fn prefill(&mut self) -> Result<(), JsError> {
        self.session.prefill(&products()).map_err(js)
    }

    /// The next piece of text (possibly empty while a character is incomplete), or
    /// `undefined` once the generation has stopped.
    pub fn next_token(&mut self) -> Result<Option<String>, JsError> {
        let Some(generation) = self.generation.as_mut() else { return Ok(None) };
        let piece = generation.next_piece(&mut self.session, &products()).map_err(js)?;
        if let (Some(piece), true) = (piece, self.chatting) {
            self.answer.push_str(piece);
        }
        Ok(piece.map(String::from))
    }

    /// Why the generation stopped: "end", "max_tokens", "context_full", "cancelled", or
    /// `undefined` while it runs.
    pub fn stop_reason(&self) -> Option<String> {
        let reason = self.generation.as_ref()?.stop_reason()?;
        Some(
            match reason {
                StopReason::EndToken(_) => "end",
                StopReason::MaxTokens => "max_tokens",
                StopReason::ContextFull => "context_full",
                StopReason::Cancelled => "cancelled",
            }
            .into(),
        )
    }

    /// Tokens the generation has sampled.
    pub fn generated(&self) -> usize {
        self.generation.as_ref().map_or(0, |g| g.generated())
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) {
        self.generation = None;
        self.history = ChatHistory::new();
        self.answer.clear();
        self.session.reset();
    }
}
