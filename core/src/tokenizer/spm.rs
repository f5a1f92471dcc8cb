//! SentencePiece-style BPE from GGUF metadata (`tokenizer.ggml.model` = `"llama"`):
//! llama.cpp's SPM tokenizer (`llm_tokenizer_spm` in `llama-vocab.cpp`), used by
//! Gemma 3 and llama GGUFs, and the Gemma chat format.
//!
//! What encoding does, step for step as llama.cpp's `llama_tokenize`:
//! 1. **Special tokens first.** Tokens of type CONTROL, USER_DEFINED and UNKNOWN are
//!    found in the raw text, longest first, each claiming its leftmost non-overlapping
//!    occurrences in what is still unclaimed; they become tokens as they are. CONTROL and
//!    UNKNOWN tokens only when `parse_special` is set; USER_DEFINED ones always (Gemma 3's
//!    `<start_of_turn>` is CONTROL; its `<b>`, `\n` runs and tabs are USER_DEFINED).
//!    Among special tokens of equal length the lower id goes first (llama.cpp leaves
//!    that order to `std::sort`); the LSTRIP/RSTRIP attributes llama.cpp sets for a few
//!    named models (phi-3, jina, modern-bert) are not modelled.
//! 2. **Each remaining piece of text** gets a space in front if `add_space_prefix` is set
//!    and it is the first piece or follows a special token; every space becomes U+2581
//!    ("▁"); the text is split into UTF-8 characters; then the adjacent pair whose
//!    concatenation is a vocabulary entry with the highest score is merged, the leftmost
//!    among equal scores, until no pair is in the vocabulary (a max-heap of candidate
//!    pairs, stale ones recognised by their byte length as llama.cpp does).
//! 3. **Byte fallback:** a final symbol that is not a vocabulary entry becomes, byte by
//!    byte, the token `<0xXX>` (or, without one, the one-byte piece).
//! 4. BOS first when asked; [`SpmTokenizer::encode_llama`] also appends EOS when
//!    `add_special` and the file's `tokenizer.ggml.add_eos_token` say so.
//!
//! Decoding (as llama.cpp's `token_to_piece` with `special = false`): NORMAL tokens with
//! "▁" turned back into spaces, BYTE tokens as their byte, USER_DEFINED tokens as their
//! text, CONTROL, UNKNOWN, UNUSED and UNDEFINED tokens as nothing. With
//! `add_space_prefix` the leading space of the first piece (at the start or after BOS)
//! is dropped, as SentencePiece does.
//!
//! Metadata is checked once, with typed errors ([`VocabError`]) where llama.cpp would
//! throw, abort or silently substitute: array lengths, element types, duplicate pieces,
//! out-of-range special ids, malformed byte tokens. An empty piece is renamed
//! `[EMPTY_<id>]` as llama.cpp does.

use alloc::{
    collections::{BTreeMap, BinaryHeap},
    string::String,
    vec::Vec,
};

use crate::formats::gguf::{Gguf, ValueType};
use crate::tokenizer::vocab::{check_model, end_of_generation, opt_bool, opt_id, parse_byte_piece, token_types, Pieces, SpecialTokens};
pub use crate::tokenizer::vocab::{
    TokenType, VocabError, KEY_ADD_BOS, KEY_ADD_EOS, KEY_BOS, KEY_EOS, KEY_EOT, KEY_MODEL, KEY_TOKENS, KEY_TOKEN_TYPE,
};
use crate::tokenizer::{Tokenizer, TokenizerError};

/// Matched in the raw text before BPE (CONTROL and UNKNOWN only with `parse_special`).
fn is_special(t: TokenType) -> bool {
    matches!(t, TokenType::Control | TokenType::UserDefined | TokenType::Unknown)
}

pub const KEY_SCORES: &str = "tokenizer.ggml.scores";
pub const KEY_UNK: &str = "tokenizer.ggml.unknown_token_id";
pub const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
pub const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";

/// "▁", SentencePiece's visible space.
const SPACE_MARK: &[u8] = "\u{2581}".as_bytes();
const NONE: u32 = u32::MAX;

/// Every byte once, so a byte token decodes to a slice of static data.
static ALL_BYTES: [u8; 256] = {
    let mut a = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        a[i] = i as u8;
        i += 1;
    }
    a
};

/// A SentencePiece BPE vocabulary from GGUF metadata, indexed once for encoding.
#[derive(Debug, Clone)]
pub struct SpmTokenizer {
    pieces: Pieces,
    /// What each token decodes to, back to back (byte tokens: empty here).
    shown: Vec<u8>,
    shown_starts: Vec<usize>,
    scores: Vec<f32>,
    types: Vec<TokenType>,
    /// Special pieces to find in text.
    specials: SpecialTokens,
    /// `<0xXX>` token of each byte, or the one-byte piece, as llama.cpp's `byte_to_token`.
    byte_tokens: [u32; 256],
    /// The byte each BYTE token stands for.
    byte_of: BTreeMap<u32, u8>,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    /// llama.cpp's end-of-generation tokens, sorted (`vocab::end_of_generation`).
    eog: Vec<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    parse_special: bool,
    chat_template: Option<String>,
}

impl SpmTokenizer {
    /// Bytes of all pieces together.
    pub fn text_bytes(&self) -> usize {
        self.pieces.text_bytes()
    }

    /// Read the tokenizer of a GGUF file whose `tokenizer.ggml.model` is `"llama"`.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Self, VocabError> {
        check_model(g, "llama", "\"llama\" (SentencePiece)")?;
        let pieces = Pieces::from_gguf(g)?;
        let n = pieces.len();
        let scores = g.get(KEY_SCORES).ok_or(VocabError::MissingKey(KEY_SCORES))?;
        let expected = "array of f32";
        let scores = scores.as_array().ok_or(VocabError::WrongType { key: KEY_SCORES, found: scores.value_type(), expected })?;
        if scores.len() != n as u64 {
            return Err(VocabError::LengthMismatch { key: KEY_SCORES, len: scores.len(), tokens: n as u64 });
        }
        if !matches!(scores.elem_type(), ValueType::F32 | ValueType::I32) {
            return Err(VocabError::WrongType { key: KEY_SCORES, found: scores.elem_type(), expected });
        }
        let types = token_types(g, n)?;
        let mut score_vec = Vec::with_capacity(n);
        for (i, v) in scores.iter().enumerate() {
            let s = match v {
                crate::formats::gguf::Value::F32(s) => s,
                crate::formats::gguf::Value::I32(s) => s as f32,
                _ => f32::NAN,
            };
            if !s.is_finite() {
                return Err(VocabError::NonFiniteScore { token: i as u32 });
            }
            // -0.0 and 0.0 tie in llama.cpp's `<`; the heap orders by total_cmp.
            score_vec.push(s + 0.0);
        }
        if score_vec.len() != n {
            return Err(VocabError::LengthMismatch { key: KEY_SCORES, len: score_vec.len() as u64, tokens: n as u64 });
        }

        let mut t = SpmTokenizer {
            pieces,
            shown: Vec::new(),
            shown_starts: Vec::new(),
            scores: score_vec,
            types,
            specials: SpecialTokens::default(),
            byte_tokens: [NONE; 256],
            byte_of: BTreeMap::new(),
            bos: None,
            eos: None,
            eot: None,
            eog: Vec::new(),
            unk: None,
            add_bos: true,
            add_eos: false,
            add_space_prefix: true,
            parse_special: false,
            chat_template: None,
        };

        // byte tokens, both ways
        for id in 0..n as u32 {
            if t.types[id as usize] == TokenType::Byte {
                let b = parse_byte_piece(t.piece_unchecked(id)).ok_or(VocabError::BadByteToken { token: id })?;
                t.byte_of.insert(id, b);
            }
        }
        for b in 0..=255u8 {
            let hex = b"0123456789ABCDEF";
            let name = [b'<', b'0', b'x', hex[(b >> 4) as usize], hex[(b & 15) as usize], b'>'];
            t.byte_tokens[b as usize] = t.lookup(&name).or_else(|| t.lookup(&[b])).unwrap_or(NONE);
        }

        // what each token prints as
        let mut shown = Vec::with_capacity(t.pieces.text_bytes());
        let mut shown_starts = Vec::with_capacity(n + 1);
        shown_starts.push(0);
        for id in 0..n as u32 {
            let piece = t.piece_unchecked(id);
            match t.types[id as usize] {
                TokenType::Normal => {
                    let mut rest = piece;
                    while !rest.is_empty() {
                        if rest.starts_with(SPACE_MARK) {
                            shown.push(b' ');
                            rest = &rest[SPACE_MARK.len()..];
                        } else {
                            shown.push(rest[0]);
                            rest = &rest[1..];
                        }
                    }
                }
                TokenType::UserDefined => shown.extend_from_slice(piece),
                _ => {}
            }
            shown_starts.push(shown.len());
        }
        t.shown = shown;
        t.shown_starts = shown_starts;

        // special tokens, found in text before the rest is tokenized
        let special = (0..n as u32).filter(|&id| is_special(t.types[id as usize])).collect();
        t.specials = SpecialTokens::new(special, |id| t.piece_unchecked(id), |id| t.types[id as usize] == TokenType::UserDefined);

        // special ids and flags (defaults of llama.cpp's "llama" model)
        t.bos = opt_id(g, KEY_BOS, Some(1), n)?;
        t.eos = opt_id(g, KEY_EOS, Some(2), n)?;
        t.unk = opt_id(g, KEY_UNK, Some(0), n)?;
        t.eot = match opt_id(g, KEY_EOT, None, n)? {
            Some(id) => Some(id),
            None => ["<end_of_turn>", "<|eot_id|>", "<|im_end|>", "<|end|>"]
                .iter()
                .find_map(|s| t.lookup(s.as_bytes()))
                .filter(|&id| t.types[id as usize] == TokenType::Control),
        };
        t.eog = end_of_generation(g, n, |piece| t.lookup(piece), t.eos, t.eot);
        t.add_bos = opt_bool(g, KEY_ADD_BOS, true)?;
        t.add_eos = opt_bool(g, KEY_ADD_EOS, false)?;
        t.add_space_prefix = opt_bool(g, KEY_ADD_SPACE_PREFIX, true)?;
        t.chat_template = match g.get(KEY_CHAT_TEMPLATE) {
            None => None,
            Some(v) => {
                Some(v.as_str().ok_or(VocabError::WrongType { key: KEY_CHAT_TEMPLATE, found: v.value_type(), expected: "string" })?.into())
            }
        };
        Ok(t)
    }

    fn piece_unchecked(&self, token: u32) -> &[u8] {
        self.pieces.get(token)
    }

    fn out_of_range(&self, token: u32) -> TokenizerError {
        TokenizerError::TokenOutOfRange { token, vocab_size: self.scores.len() }
    }

    /// The stored piece of `token` (spaces as "▁").
    pub fn piece(&self, token: u32) -> Result<&[u8], TokenizerError> {
        if (token as usize) < self.scores.len() {
            Ok(self.piece_unchecked(token))
        } else {
            Err(self.out_of_range(token))
        }
    }

    pub fn score(&self, token: u32) -> Result<f32, TokenizerError> {
        self.scores.get(token as usize).copied().ok_or(self.out_of_range(token))
    }

    pub fn token_type(&self, token: u32) -> Result<TokenType, TokenizerError> {
        self.types.get(token as usize).copied().ok_or(self.out_of_range(token))
    }

    /// The id whose piece is exactly `piece`.
    pub fn lookup(&self, piece: &[u8]) -> Option<u32> {
        self.pieces.lookup(piece)
    }

    /// `tokenizer.ggml.unknown_token_id` (default 0).
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }

    /// End of turn: `tokenizer.ggml.eot_token_id`, or the CONTROL token `<end_of_turn>`
    /// (Gemma), `<|eot_id|>`, `<|im_end|>` or `<|end|>`.
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }

    /// Does generation stop at `token`: llama.cpp's end-of-generation set (EOS, end of
    /// turn, and the tokens it recognizes by their text).
    pub fn is_eog(&self, token: u32) -> bool {
        self.eog.binary_search(&token).is_ok()
    }

    /// `tokenizer.ggml.add_bos_token` (default true): pass this as `bos` to `encode`.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// `tokenizer.ggml.add_eos_token` (default false).
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// `tokenizer.ggml.add_space_prefix` (default true; false in Gemma 3's file).
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// `tokenizer.chat_template`, if the file has one (Gemma 3 270M's has none).
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Whether [`Tokenizer::encode`] matches CONTROL tokens (`<start_of_turn>`, `<bos>`,
    /// ...) written in the text, as llama.cpp's `parse_special`. Off by default.
    pub fn parse_special(&self) -> bool {
        self.parse_special
    }

    pub fn set_parse_special(&mut self, on: bool) {
        self.parse_special = on;
    }

    /// The token of byte `b` (`<0xXX>`, else the one-byte piece).
    fn byte_token(&self, b: u8) -> Result<u32, TokenizerError> {
        match self.byte_tokens[b as usize] {
            NONE => Err(TokenizerError::NoByteToken { byte: b }),
            t => Ok(t),
        }
    }

    /// Exactly llama.cpp's `llama_tokenize(vocab, text, add_special, parse_special)`:
    /// BOS first if `add_special` and the file's add_bos_token, EOS last if
    /// `add_special` and add_eos_token. Appends to `out`.
    pub fn encode_llama(&self, text: &str, add_special: bool, parse_special: bool, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        self.encode_impl(text, add_special && self.add_bos, parse_special, out)?;
        if add_special && self.add_eos {
            out.push(self.eos.ok_or(self.out_of_range(2))?);
        }
        Ok(())
    }

    fn encode_impl(&self, text: &str, bos: bool, parse_special: bool, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        if bos {
            out.push(self.bos.ok_or(self.out_of_range(1))?);
        }
        if text.is_empty() {
            return Ok(());
        }
        let bytes = text.as_bytes();
        let specials = self.specials.find(bytes, parse_special);
        let mut buf = Vec::new();
        let mut prev_special = true;
        let mut at = 0;
        for (pos, id) in specials.iter().copied().chain(core::iter::once((bytes.len(), NONE))) {
            if pos > at {
                // raw text at..pos, as bytes: a special piece that is not UTF-8 may
                // have split a character, which BPE then sees as its bytes
                buf.clear();
                if self.add_space_prefix && prev_special {
                    buf.extend_from_slice(SPACE_MARK);
                }
                for &b in &bytes[at..pos] {
                    if b == b' ' {
                        buf.extend_from_slice(SPACE_MARK);
                    } else {
                        buf.push(b);
                    }
                }
                self.bpe(&buf, out)?;
            }
            if id != NONE {
                out.push(id);
                prev_special = true;
                at = pos + self.piece_unchecked(id).len();
            } else {
                prev_special = false;
            }
        }
        Ok(())
    }

    /// llama.cpp's `llm_tokenizer_spm_session::tokenize` of escaped text.
    fn bpe(&self, text: &[u8], out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        // symbols: one per UTF-8 character; `len` 0 once merged into the left neighbour
        let mut start = Vec::new();
        let mut len = Vec::new();
        let mut offs = 0;
        while offs < text.len() {
            let lead = text[offs];
            let l = match lead {
                0x00..=0x7f => 1,
                0xf0..=0xff => 4,
                0xe0..=0xef => 3,
                0xc0..=0xdf => 2,
                _ => 1,
            };
            let l = l.min(text.len() - offs);
            start.push(offs);
            len.push(l);
            offs += l;
        }
        let n = start.len();
        let mut next: Vec<usize> = (1..=n).collect(); // n = none
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect(); // usize::MAX = none
        let mut heap = BinaryHeap::with_capacity(n);
        let candidate = |left: usize, right: usize, len: &[usize]| -> Option<Bigram> {
            let size = len[left] + len[right];
            let id = self.lookup(&text[start[left]..start[left] + size])?;
            Some(Bigram { score: self.scores[id as usize], left, right, size })
        };
        for i in 1..n {
            heap.extend(candidate(i - 1, i, &len));
        }
        while let Some(b) = heap.pop() {
            if len[b.left] == 0 || len[b.right] == 0 || len[b.left] + len[b.right] != b.size {
                continue;
            }
            len[b.left] += len[b.right];
            len[b.right] = 0;
            let after = next[b.right];
            next[b.left] = after;
            if after < n {
                prev[after] = b.left;
            }
            if prev[b.left] < n {
                heap.extend(candidate(prev[b.left], b.left, &len));
            }
            if after < n {
                heap.extend(candidate(b.left, after, &len));
            }
        }
        let mut i = 0;
        while i < n {
            let s = &text[start[i]..start[i] + len[i]];
            match self.lookup(s) {
                Some(t) => out.push(t),
                None => {
                    for &b in s {
                        out.push(self.byte_token(b)?);
                    }
                }
            }
            i = next[i];
        }
        Ok(())
    }
}

/// A possible merge of the symbols at `left` and `right`, `size` bytes together.
#[derive(Debug, Clone, Copy)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl Ord for Bigram {
    /// Higher score first, then the leftmost (llama.cpp's `llm_bigram_spm::comparator`).
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.score.total_cmp(&other.score).then(other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == core::cmp::Ordering::Equal
    }
}

impl Eq for Bigram {}

impl Tokenizer for SpmTokenizer {
    fn vocab_size(&self) -> usize {
        self.scores.len()
    }

    fn bos(&self) -> Option<u32> {
        self.bos
    }

    fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// BOS if `bos` (pass [`SpmTokenizer::add_bos`] to follow the file), then the text
    /// as llama.cpp tokenizes it with `parse_special` = [`SpmTokenizer::parse_special`].
    /// Never appends EOS (see [`SpmTokenizer::encode_llama`]).
    fn encode(&self, text: &str, bos: bool, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        self.encode_impl(text, bos, self.parse_special, out)
    }

    fn decode_piece(&self, prev: Option<u32>, token: u32) -> Result<&[u8], TokenizerError> {
        let i = token as usize;
        if i >= self.scores.len() {
            return Err(self.out_of_range(token));
        }
        if let Some(&b) = self.byte_of.get(&token) {
            return Ok(core::slice::from_ref(&ALL_BYTES[b as usize]));
        }
        let mut s = self.shown.get(self.shown_starts[i]..self.shown_starts[i + 1]).unwrap_or(&[]);
        if self.add_space_prefix && (prev.is_none() || prev == self.bos) {
            if let [b' ', rest @ ..] = s {
                s = rest;
            }
        }
        Ok(s)
    }
}

// ---------------------------------------------------------------------------------
// Gemma chat format

/// Who says a turn of a chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatRole {
    System,
    User,
    /// The assistant ("model" in Gemma's format; "assistant" in HF terms).
    Model,
}

/// Append Gemma's chat format of `turns` to `out`, as the Jinja chat template shipped
/// with Gemma 3 (HF `tokenizer_config.json`; the 270M GGUF carries no template) renders
/// it, minus the leading `{{ bos_token }}`, which [`Tokenizer::encode`] adds with
/// `bos = true`: each turn is `<start_of_turn>ROLE\n` + trimmed content +
/// `<end_of_turn>\n`, ROLE `user` or `model`; a leading system turn's content plus
/// `"\n\n"` is put in front of the first user turn's content; with
/// `add_generation_prompt`, `<start_of_turn>model\n` ends the prompt. Encode the result
/// with `parse_special` on. (The template also rejects non-alternating roles; this
/// function formats whatever it is given.)
pub fn format_gemma_chat(turns: &[(ChatRole, &str)], add_generation_prompt: bool, out: &mut String) {
    let (system, turns) = match turns {
        [(ChatRole::System, s), rest @ ..] => (Some(s.trim()), rest),
        _ => (None, turns),
    };
    let mut pending_system = system;
    for (i, &(role, content)) in turns.iter().enumerate() {
        let role = match role {
            ChatRole::Model => "model",
            ChatRole::User | ChatRole::System => "user",
        };
        out.push_str("<start_of_turn>");
        out.push_str(role);
        out.push('\n');
        if i == 0 {
            if let Some(s) = pending_system.take() {
                out.push_str(s);
                out.push_str("\n\n");
            }
        }
        out.push_str(content.trim());
        out.push_str("<end_of_turn>\n");
    }
    if add_generation_prompt {
        out.push_str("<start_of_turn>model\n");
    }
}

/// One user message as a Gemma prompt: `<start_of_turn>user\n{message}<end_of_turn>\n`
/// `<start_of_turn>model\n` (encode with BOS and `parse_special`).
pub fn gemma_chat_prompt(message: &str) -> String {
    let mut s = String::with_capacity(message.len() + 64);
    format_gemma_chat(&[(ChatRole::User, message)], true, &mut s);
    s
}
