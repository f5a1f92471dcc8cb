use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ops::Range;

use super::{budget, Error};
use crate::arch::llama;
use crate::arch::llama_family::LlamaFamily;
use crate::arch::Network;
use crate::attention::PqKvCache;
use crate::attention::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, ValueFormat};
use crate::chat::ChatTemplate;
use crate::formats::gguf::Gguf;
use crate::formats::import::{InMemory, TensorSource};
use crate::formats::llama2c::Checkpoint;
use crate::formats::pack;
use crate::model::{Hparams, ModelError, TablePrecision};
use crate::pq::Codebooks;
use crate::tokenizer::bpe::BpeTokenizer;
use crate::tokenizer::spm::SpmTokenizer;
use crate::tokenizer::{Llama2cTokenizer, Tokenizer};
use crate::Isa;

/// A model and its tokenizer, ready to run. Cloning shares the weights.
#[derive(Clone)]
pub struct Model {
    inner: Arc<Inner>,
    info: ModelInfo,
    chat: Option<ChatTemplate>,
    tables: TablePrecision,
}

pub(crate) struct Inner {
    pub(crate) net: Network,
    tokenizer: Vocabulary,
}

enum Vocabulary {
    Llama2c(Box<Llama2cTokenizer>),
    Spm(Box<SpmTokenizer>),
    Bpe(Box<BpeTokenizer>),
}

impl Vocabulary {
    /// A GGUF file's tokenizer: SentencePiece (`llama`) or byte-level BPE (`gpt2`).
    fn from_gguf(g: &Gguf<'_>) -> Result<Vocabulary, Error> {
        Ok(match g.get_str(crate::tokenizer::vocab::KEY_MODEL) {
            Some("gpt2") => Vocabulary::Bpe(Box::new(BpeTokenizer::from_gguf(g)?)),
            _ => Vocabulary::Spm(Box::new(SpmTokenizer::from_gguf(g)?)),
        })
    }

    fn tokenizer(&self) -> &dyn Tokenizer {
        match self {
            Vocabulary::Llama2c(t) => &**t,
            Vocabulary::Spm(t) => &**t,
            Vocabulary::Bpe(t) => &**t,
        }
    }
}

/// What a model is, for reports and for front-ends choosing settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// The GGUF `general.architecture` (`gemma3`, `llama`, `qwen2`, `qwen3`), or `llama`
    /// for llama2.c checkpoints.
    pub architecture: &'static str,
    /// Its sizes, the trained context length among them.
    pub hparams: Hparams,
    /// Bytes of the packed weight matrices (what a decode step streams).
    pub matrix_bytes: usize,
    /// How the weights are stored: GGUF tensor types with their counts (`("Q4_K", 108)`),
    /// or `("f32 quantized to 4 bits", n)` for a llama2.c checkpoint.
    pub tensor_types: Vec<(String, usize)>,
    /// Whether the model has a chat format that [`Model::encode_chat`] writes.
    pub chat: bool,
    /// The chat format: llama.cpp's name of the builtin template in use (`"gemma"`,
    /// `"llama3"`, `"chatml"`, ...), recognized in the file's template as
    /// `llama_chat_apply_template` does, or chosen with [`Model::with_chat_template`].
    pub chat_template: Option<&'static str>,
    /// Whether the file carries a `tokenizer.chat_template` of its own.
    pub chat_template_in_file: bool,
    /// Whether the weights came from a packed `.lutra` file (read in place, unconverted).
    pub packed: bool,
}

impl ModelInfo {
    fn new(
        net: &Network,
        tensor_types: Vec<(String, usize)>,
        chat: Option<ChatTemplate>,
        chat_template_in_file: bool,
        packed: bool,
    ) -> Self {
        ModelInfo {
            architecture: net.name(),
            hparams: net.hparams(),
            matrix_bytes: net.matrix_bytes(),
            tensor_types,
            chat: chat.is_some(),
            chat_template: chat.and_then(ChatTemplate::name),
            chat_template_in_file,
            packed,
        }
    }

    /// One line: architecture and sizes.
    pub fn summary(&self) -> String {
        let h = &self.hparams;
        let heads =
            if h.kv_heads == h.heads { format!("{} heads", h.heads) } else { format!("{} heads / {} KV heads", h.heads, h.kv_heads) };
        format!(
            "{}, dim {}, {} layers, {heads}, vocab {}, {:.1} MiB of matrices",
            self.architecture,
            h.dim,
            h.layers,
            h.vocab_size,
            self.matrix_bytes as f64 / (1 << 20) as f64
        )
    }
}

/// Reported while a model loads: after each tensor (or matrix), and after each chunk of
/// a tensor imported in chunks.
#[derive(Debug, Clone)]
pub struct LoadProgress<'a> {
    /// Tensors (or matrices) done, out of `total`.
    pub done: usize,
    /// Tensors (or matrices) in all.
    pub total: usize,
    /// The tensor just imported, or being imported.
    pub tensor: &'a str,
    /// Bytes of the model file the import has finished reading (absolute offsets): a
    /// caller that maps the file may release those pages.
    pub consumed: Option<Range<usize>>,
    /// Whether `tensor` is done (`done` counts it), rather than a run of its rows.
    pub finished: bool,
}

/// Whether this build runs GGUF files whose `general.architecture` is `name`.
pub fn runs_architecture(name: &str) -> bool {
    Network::runs_gguf(name)
}

/// Who speaks a chat turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions for the whole conversation.
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
}

/// How attention reads the key cache.
#[derive(Clone, Default)]
pub enum Attention {
    /// f16 keys.
    #[default]
    Exact,
    /// NoMAD product-quantized keys.
    Pq(Box<PqAttention>),
}

/// Product-quantized keys: codebooks from `lutra calibrate`, and the keys kept exact.
#[derive(Clone)]
pub struct PqAttention {
    /// Codebooks trained for this model.
    pub books: Codebooks,
    /// The first positions whose keys stay exact (attention sinks).
    pub sink: usize,
    /// The most recent positions whose keys stay exact.
    pub recent: usize,
    /// Sliding-window layers keep exact keys; only the global layers read codes.
    pub long_only: bool,
}

impl Model {
    /// A GGUF file's bytes (Gemma 3).
    pub fn from_gguf(bytes: &[u8]) -> Result<Model, Error> {
        Self::from_gguf_with_progress(bytes, |_| {})
    }

    /// As [`Model::from_gguf`], reporting each tensor as it is imported.
    pub fn from_gguf_with_progress(bytes: &[u8], progress: impl FnMut(LoadProgress<'_>)) -> Result<Model, Error> {
        Self::from_gguf_source(&Gguf::parse(bytes)?, &mut InMemory(bytes), progress)
    }

    /// A GGUF file whose header was parsed on its own ([`Gguf::parse_prefix`]) and whose
    /// tensors are read from `source` a piece at a time, so the file and the imported
    /// weights never have to be in memory together (the browser reads pieces of a `Blob`).
    pub fn from_gguf_source(
        gguf: &Gguf<'_>,
        source: &mut dyn TensorSource,
        mut progress: impl FnMut(LoadProgress<'_>),
    ) -> Result<Model, Error> {
        let arch = gguf.get_str("general.architecture").ok_or(ModelError::MissingMetadata("general.architecture"))?;
        if pack::is_packed(gguf) {
            pack::check_header(gguf).map_err(|why| Error::Model(ModelError::BadPackedFile(why)))?;
            if arch == "llama" && gguf.get_str(pack::SOURCE_KEY) == Some("llama2c") {
                let (net, tokenizer) = llama::from_packed(gguf, source)?;
                let tokenizer = Llama2cTokenizer::from_bytes(&tokenizer, net.config.hparams.vocab_size)?;
                let bits = net.lm_head_bits();
                return Ok(Self::llama(net, tokenizer, format!("{bits}-bit bit planes, packed"), true));
            }
        }
        if !Network::runs_gguf(arch) {
            return Err(Error::UnsupportedArchitecture(arch.into()));
        }
        let tokenizer = if Network::sentencepiece_only(arch) {
            Vocabulary::Spm(Box::new(SpmTokenizer::from_gguf(gguf)?))
        } else {
            Vocabulary::from_gguf(gguf)?
        };
        let data_start = gguf.data_start();
        // a chunk has read `consumed` of its tensor; a finished tensor all of it
        let mut report = |p: crate::formats::import::Imported<'_>| {
            let file = gguf.tensor(p.tensor).and_then(|info| {
                let range = p.consumed.clone().or_else(|| info.byte_size().ok().map(|len| 0..len as usize))?;
                let start = data_start.checked_add(usize::try_from(info.offset).ok()?)?;
                Some(start + range.start..start + range.end)
            });
            progress(LoadProgress { done: p.done, total: p.total, tensor: p.tensor, consumed: file, finished: p.consumed.is_none() });
        };
        let types = pack::tensor_type_counts(gguf);
        let file_template = gguf.get_str(crate::tokenizer::spm::KEY_CHAT_TEMPLATE);
        let chat = file_template.and_then(ChatTemplate::detect).or(Network::default_chat(arch));
        let net = Network::from_gguf(arch, gguf, source, &mut report).ok_or_else(|| Error::UnsupportedArchitecture(arch.into()))??;
        let info = ModelInfo::new(&net, types, chat, file_template.is_some(), pack::is_packed(gguf));
        if info.hparams.vocab_size != tokenizer.tokenizer().vocab_size() {
            return Err(ModelError::Unsupported {
                key: "tokenizer.ggml.tokens",
                value: format!("{} tokens for a vocabulary of {}", tokenizer.tokenizer().vocab_size(), info.hparams.vocab_size),
            }
            .into());
        }
        Ok(Model::new(net, tokenizer, info, chat))
    }

    /// A llama2.c checkpoint and its `tokenizer.bin`, the weights quantized to `bits` (1..=8).
    pub fn from_llama2c(checkpoint: &[u8], tokenizer: &[u8], bits: u8) -> Result<Model, Error> {
        Self::from_llama2c_with_progress(checkpoint, tokenizer, bits, |_| {})
    }

    /// As [`Model::from_llama2c`], reporting each matrix as it is quantized.
    pub fn from_llama2c_with_progress(
        checkpoint: &[u8],
        tokenizer: &[u8],
        bits: u8,
        mut progress: impl FnMut(LoadProgress<'_>),
    ) -> Result<Model, Error> {
        let ckpt = Checkpoint::parse(checkpoint)?;
        let tokenizer = Llama2cTokenizer::from_bytes(tokenizer, ckpt.config().vocab_size)?;
        let net = llama::from_llama2c_with_progress(&ckpt, bits, |done, total| {
            progress(LoadProgress { done, total, tensor: "matrices", consumed: None, finished: true });
        })?;
        Ok(Self::llama(net, tokenizer, format!("f32 quantized to {bits} bits"), false))
    }

    fn llama(net: LlamaFamily, tokenizer: Llama2cTokenizer, kind: String, packed: bool) -> Model {
        let types = alloc::vec![(kind, 7 * net.config.hparams.layers + 1)];
        let net = Network::LlamaFamily(Box::new(net));
        let info = ModelInfo::new(&net, types, None, false, packed);
        Model::new(net, Vocabulary::Llama2c(Box::new(tokenizer)), info, None)
    }

    /// Packs the model (`crate::formats::pack`: a `.lutra` file, read in place on load) into
    /// `writer`. `origin` is the file the model came from: the GGUF (its metadata and
    /// tokenizer are kept), or for a llama2.c model its `tokenizer.bin`.
    pub fn write_packed<'a>(&'a self, origin: &'a [u8], writer: &mut pack::Writer<'a>) -> Result<(), Error> {
        if let Vocabulary::Llama2c(_) = self.inner.tokenizer {
            // a llama2.c model's origin is its tokenizer.bin, which the packed file keeps
            Llama2cTokenizer::from_bytes(origin, self.info.hparams.vocab_size)?;
        }
        Ok(self.inner.net.write_packed(origin, writer)?)
    }

    fn new(net: Network, tokenizer: Vocabulary, info: ModelInfo, chat: Option<ChatTemplate>) -> Model {
        Model { inner: Arc::new(Inner { net, tokenizer }), info, chat, tables: TablePrecision::Auto }
    }

    /// The model with chat turns formatted by llama.cpp's builtin template `name`
    /// (`"chatml"`, `"llama3"`, `"gemma"`, `"mistral-v7"`, ...; see
    /// [`ChatTemplate::from_name`]) instead of the one recognized in the file.
    pub fn with_chat_template(mut self, name: &str) -> Result<Model, Error> {
        let t = ChatTemplate::from_name(name).ok_or_else(|| Error::UnknownChatTemplate(name.into()))?;
        if matches!(self.inner.tokenizer, Vocabulary::Llama2c(_)) {
            // its tokenizer has no control tokens to write turns with
            return Err(Error::NoChatTemplate { architecture: self.info.architecture });
        }
        self.chat = Some(t);
        self.info.chat = true;
        self.info.chat_template = t.name();
        Ok(self)
    }

    /// The model with its sessions' lookup products at `tables`' precision:
    /// [`TablePrecision::Residual`] makes them as exact as an f32 evaluation of the same
    /// weights, at about half the speed.
    pub fn with_table_precision(mut self, tables: TablePrecision) -> Model {
        self.tables = tables;
        self
    }

    /// The precision its sessions' lookup products run at.
    pub fn table_precision(&self) -> TablePrecision {
        self.tables
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// Moves the weight matrices this model owns that are shorter than `shorter_than`
    /// bytes (codes and scales counted apart) into one allocation, in the order a decode
    /// step reads them ([`crate::AlignedBytes::gather`]). Where only large allocations get
    /// huge pages (the native crate's allocator asks for them from 4 MiB, and passes that
    /// bound), the small matrices then do too, where they add up to a huge page or more:
    /// Gemma 3 270M's are 0.1–1 MiB (bench/results/journal-2026-11-29-to-2026-12-06.md,
    /// "Weights on huge pages, and the LM head prefetched"). The bytes are the same, so
    /// are the results. Returns the bytes moved: 0 when a clone of this model shares the
    /// weights (nothing moves then) or they are read in place from a packed file.
    pub fn gather_weights(&mut self, shorter_than: usize) -> usize {
        let Some(inner) = Arc::get_mut(&mut self.inner) else { return 0 };
        let mut buffers = inner.net.matrix_buffers_mut();
        crate::AlignedBytes::gather(&mut buffers, shorter_than)
    }

    /// What the model is.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.info.hparams.vocab_size
    }

    /// The beginning-of-sequence token.
    pub fn bos(&self) -> u32 {
        match &self.inner.tokenizer {
            Vocabulary::Llama2c(t) => t.bos().unwrap_or(1),
            Vocabulary::Spm(t) => t.bos().unwrap_or(2),
            Vocabulary::Bpe(t) => t.bos().unwrap_or(0),
        }
    }

    /// Whether a text's tokens start with BOS when asked for (`encode(text, true)`): the
    /// GGUF's `add_bos_token` (Qwen's files say no), always for llama2.c.
    pub fn adds_bos(&self) -> bool {
        match &self.inner.tokenizer {
            Vocabulary::Llama2c(_) => true,
            Vocabulary::Spm(t) => t.add_bos(),
            Vocabulary::Bpe(t) => t.add_bos(),
        }
    }

    /// The tokens of `text`, BOS first when `bos` (and the vocabulary adds one: [`Model::adds_bos`]).
    pub fn encode(&self, text: &str, bos: bool) -> Result<Vec<u32>, Error> {
        let mut out = Vec::new();
        self.inner.tokenizer.tokenizer().encode(text, bos && self.adds_bos(), &mut out)?;
        Ok(out)
    }

    /// `messages` formatted as llama.cpp's `llama_chat_apply_template` formats them with
    /// the model's template, ending with the cue for the assistant's answer when
    /// `add_assistant`.
    pub fn format_chat(&self, messages: &[(Role, &str)], add_assistant: bool) -> Result<String, Error> {
        let t = self.chat.ok_or(Error::NoChatTemplate { architecture: self.info.architecture })?;
        let role = |r: Role| match r {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let messages: Vec<(&str, &str)> = messages.iter().map(|&(r, text)| (role(r), text)).collect();
        let mut text = String::new();
        t.apply(&messages, add_assistant, &mut text);
        Ok(text)
    }

    /// Formatted chat text as tokens, control tokens (`<|im_start|>`, `<end_of_turn>`...)
    /// parsed as such; BOS first when `bos` and the vocabulary adds one.
    pub fn encode_chat_text(&self, text: &str, bos: bool) -> Result<Vec<u32>, Error> {
        let mut out = Vec::new();
        let bos = bos && self.adds_bos();
        match &self.inner.tokenizer {
            Vocabulary::Spm(t) => t.encode_llama(text, bos, true, &mut out)?,
            Vocabulary::Bpe(t) => t.encode_llama(text, bos, true, &mut out)?,
            Vocabulary::Llama2c(_) => return Err(Error::NoChatTemplate { architecture: self.info.architecture }),
        }
        Ok(out)
    }

    /// Chat turns in the model's format, ending with the cue for the assistant's answer.
    /// `first`: the turns open the conversation (BOS first); otherwise they follow an
    /// answer that stopped at (and without feeding) its end-of-turn token, which these
    /// tokens then close: the text that ends an assistant turn in this template, then
    /// the new turns. (A caller that keeps the whole conversation gets llama.cpp's
    /// formatting of it exactly from [`ChatHistory`](crate::chat::ChatHistory).)
    pub fn encode_chat(&self, turns: &[(Role, &str)], first: bool) -> Result<Vec<u32>, Error> {
        let mut text = if first { String::new() } else { self.turn_end()? };
        text.push_str(&self.format_chat(turns, true)?);
        self.encode_chat_text(&text, first)
    }

    /// What the template writes after an assistant's text to end its turn.
    pub(crate) fn turn_end(&self) -> Result<String, Error> {
        const ANSWER: &str = "\u{1}";
        let open = self.format_chat(&[(Role::User, "?")], true)?;
        let closed = self.format_chat(&[(Role::User, "?"), (Role::Assistant, ANSWER)], false)?;
        Ok(closed.strip_prefix(open.as_str()).and_then(|rest| rest.split_once(ANSWER)).map_or(String::new(), |(_, end)| end.into()))
    }

    /// The bytes `token` adds to the text after `prev` (not always whole UTF-8
    /// characters: feed them to a [`TextStream`](super::TextStream)).
    pub fn decode_piece(&self, prev: Option<u32>, token: u32) -> Result<&[u8], Error> {
        Ok(self.inner.tokenizer.tokenizer().decode_piece(prev, token)?)
    }

    /// The text of `tokens` (BOS and EOS left out; bytes that are not UTF-8 as U+FFFD).
    pub fn decode(&self, tokens: &[u32]) -> Result<String, Error> {
        let mut bytes = Vec::new();
        self.inner.tokenizer.tokenizer().decode(tokens, &mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Whether generating `token` ends the text (end of sequence or of turn; llama2.c
    /// models also stop at BOS, as `run.c` does).
    pub fn is_end(&self, token: u32) -> bool {
        match &self.inner.tokenizer {
            Vocabulary::Llama2c(t) => Some(token) == t.eos() || Some(token) == t.bos(),
            Vocabulary::Spm(t) => t.is_eog(token),
            Vocabulary::Bpe(t) => t.is_eog(token),
        }
    }

    /// The tokens that end generation.
    pub fn end_tokens(&self) -> Vec<u32> {
        (0..self.vocab_size() as u32).filter(|&t| self.is_end(t)).collect()
    }

    /// The attention a KV cache of `context` positions must serve.
    pub fn attention_shape(&self, context: usize) -> AttentionShape {
        self.inner.net.attention_shape(context)
    }

    /// Each layer's sliding window (Gemma 3's local layers), 0 where it attends to everything.
    pub fn layer_windows(&self) -> Vec<usize> {
        self.inner.net.layer_windows()
    }

    /// The hyperparameters its memory depends on: what [`budget`](super::budget) sizes
    /// sessions from.
    pub fn dims(&self) -> budget::Dims {
        let (token_bytes, merges) = match &self.inner.tokenizer {
            Vocabulary::Llama2c(t) => (t.text_bytes(), 0),
            Vocabulary::Spm(t) => (t.text_bytes(), 0),
            Vocabulary::Bpe(t) => (t.text_bytes(), t.merge_count()),
        };
        let dims = self.inner.net.dims();
        let residual_tables = dims.buffers.residual_tables || self.tables == TablePrecision::Residual;
        budget::Dims { token_bytes, merges, buffers: budget::Buffers { residual_tables, ..dims.buffers }, ..dims }
    }

    /// A KV cache of `context` positions reading keys as `attention` says, f16 values.
    pub fn kv_cache(&self, context: usize, attention: &Attention) -> Result<Box<dyn KvCache>, Error> {
        self.kv_cache_with_values(context, attention, ValueFormat::F16)
    }

    /// As `kv_cache`, storing values as `values` (a block format needs a head size that is
    /// a multiple of 32).
    pub fn kv_cache_with_values(&self, context: usize, attention: &Attention, values: ValueFormat) -> Result<Box<dyn KvCache>, Error> {
        let max = self.info().hparams.context_length;
        if context == 0 || context > max {
            return Err(Error::BadContext { asked: context, max });
        }
        values.check(self.info().hparams.head_dim)?;
        let (shape, windows) = (self.attention_shape(context), self.layer_windows());
        match attention {
            Attention::Exact => Ok(Box::new(ExactKvCache::with_value_format(shape, KeyPrecision::F16, &windows, values)?)),
            Attention::Pq(pq) => {
                let arch = self.info().architecture;
                if pq.books.model() != arch {
                    return Err(Error::CodebooksForAnotherModel { calibrated_on: pq.books.model().into(), model: arch });
                }
                // sliding-window layers keep rings, of exact keys (long_only) or of codes
                let exact: Vec<bool> = windows.iter().map(|&w| pq.long_only && w > 0).collect();
                let cache = PqKvCache::new(shape, pq.books.clone(), Isa::best())?
                    .with_exact_keys(pq.sink, pq.recent)
                    .with_layers(&exact, &windows)
                    .with_value_format(values)?;
                Ok(Box::new(cache))
            }
        }
    }
}
