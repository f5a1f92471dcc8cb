//! What the GGUF tokenizers share (SentencePiece in [`crate::tokenizer::spm`], byte-level BPE in
//! [`crate::tokenizer::bpe`]): the metadata keys and their checks, token types, the pieces with
//! their lookup index, the errors, and special tokens written in a text (llama.cpp's
//! `tokenizer_st_partition`): a byte trie over the vocabulary's special pieces, longest
//! first, so each finds its leftmost occurrences not already claimed.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::formats::gguf::{Gguf, Value, ValueType};

pub const KEY_MODEL: &str = "tokenizer.ggml.model";
pub const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
pub const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
pub const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
pub const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
pub const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
pub const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
pub const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";

const NONE: u32 = u32::MAX;

/// Why GGUF tokenizer metadata was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VocabError {
    /// A required key is absent.
    MissingKey(&'static str),
    /// A key holds another type (for arrays: another element type) than expected.
    WrongType { key: &'static str, found: ValueType, expected: &'static str },
    /// `tokenizer.ggml.model` names another tokenizer than the one being built.
    WrongModel { found: String, expected: &'static str },
    /// `tokenizer.ggml.pre` names a pre-tokenizer llama.cpp does not know.
    UnknownPre { name: String },
    /// `tokenizer.ggml.pre` names a pre-tokenizer llama.cpp knows and lutra does not have.
    UnsupportedPre { name: String },
    /// The vocabulary is empty, or has more tokens than an `i32` id can name.
    BadVocabSize { tokens: u64 },
    /// A per-token array whose length differs from the number of tokens.
    LengthMismatch { key: &'static str, len: u64, tokens: u64 },
    /// A NaN or infinite score.
    NonFiniteScore { token: u32 },
    /// Two tokens with the same piece (llama.cpp aborts on this).
    DuplicatePiece { first: u32, second: u32 },
    /// A special-token id at or past the vocabulary size.
    BadSpecialId { key: &'static str, id: u64, vocab_size: usize },
    /// A token of type BYTE whose piece is not `<0xXX>`.
    BadByteToken { token: u32 },
    /// `tokenizer.ggml.merges` is empty: nothing would ever merge.
    NoMerges,
    /// Merge `index` is not UTF-8, or not two pieces separated by a space.
    BadMerge { index: u64 },
    /// A half of merge `index`, or the two halves joined, is not a token.
    MergeUnknownPiece { index: u64 },
    /// What the tokens print as would take more than four times the bytes of the pieces
    /// (plus 1 MiB): only pieces made of characters outside the byte alphabet do that.
    DecodeTooLarge { bytes: u64 },
}

impl fmt::Display for VocabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GGUF tokenizer: ")?;
        match self {
            VocabError::MissingKey(key) => write!(f, "missing key {key}"),
            VocabError::WrongType { key, found, expected } => write!(f, "{key} holds {}, expected {expected}", found.name()),
            VocabError::WrongModel { found, expected } => write!(f, "{KEY_MODEL} is {found:?}, expected {expected}"),
            VocabError::UnknownPre { name } => write!(f, "unknown pre-tokenizer tokenizer.ggml.pre = {name:?}"),
            VocabError::UnsupportedPre { name } => write!(f, "pre-tokenizer tokenizer.ggml.pre = {name:?} is not supported"),
            VocabError::BadVocabSize { tokens } => write!(f, "vocabulary of {tokens} tokens"),
            VocabError::LengthMismatch { key, len, tokens } => write!(f, "{key} has {len} entries for {tokens} tokens"),
            VocabError::NonFiniteScore { token } => write!(f, "token {token} has a NaN or infinite score"),
            VocabError::DuplicatePiece { first, second } => write!(f, "tokens {first} and {second} have the same piece"),
            VocabError::BadSpecialId { key, id, vocab_size } => write!(f, "{key} = {id} is outside the vocabulary of {vocab_size}"),
            VocabError::BadByteToken { token } => write!(f, "byte token {token} is not written <0xXX>"),
            VocabError::NoMerges => write!(f, "tokenizer.ggml.merges is empty"),
            VocabError::BadMerge { index } => write!(f, "merge {index} is not UTF-8 \"left right\""),
            VocabError::MergeUnknownPiece { index } => {
                write!(f, "merge {index} names a piece, or makes one, that is not in the vocabulary")
            }
            VocabError::DecodeTooLarge { bytes } => write!(f, "the decoded pieces would take {bytes} bytes"),
        }
    }
}

impl core::error::Error for VocabError {}

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TokenType {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
}

impl TokenType {
    /// As llama.cpp: any value it does not know is UNDEFINED.
    pub fn from_i64(v: i64) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// Refuses a vocabulary whose `tokenizer.ggml.model` is not `model` (`expected` says
/// what that is, for the message).
pub(crate) fn check_model(g: &Gguf<'_>, model: &str, expected: &'static str) -> Result<(), VocabError> {
    let v = g.get(KEY_MODEL).ok_or(VocabError::MissingKey(KEY_MODEL))?;
    match v.as_str() {
        Some(m) if m == model => Ok(()),
        Some(other) => Err(VocabError::WrongModel { found: other.into(), expected }),
        None => Err(VocabError::WrongType { key: KEY_MODEL, found: v.value_type(), expected: "string" }),
    }
}

pub(crate) fn opt_bool(g: &Gguf<'_>, key: &'static str, default: bool) -> Result<bool, VocabError> {
    match g.get(key) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or(VocabError::WrongType { key, found: v.value_type(), expected: "bool" }),
    }
}

/// A special-token id: `default` (if inside the vocabulary of `n`) when the key is absent.
pub(crate) fn opt_id(g: &Gguf<'_>, key: &'static str, default: Option<u32>, n: usize) -> Result<Option<u32>, VocabError> {
    match g.get(key) {
        None => Ok(default.filter(|&d| (d as usize) < n)),
        Some(v) => {
            let id = v.as_u64().ok_or(VocabError::WrongType { key, found: v.value_type(), expected: "a token id" })?;
            match u32::try_from(id) {
                Ok(id) if (id as usize) < n => Ok(Some(id)),
                _ => Err(VocabError::BadSpecialId { key, id, vocab_size: n }),
            }
        }
    }
}

/// Token texts llama.cpp ends generation at, whatever the ids the file names
/// (`llama_vocab::impl::load`, llama.cpp of the llama-cpp-python 0.3.36 sdist).
pub(crate) const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// The fill-in-the-middle pad, repository and file-separator tokens, which llama.cpp
/// also ends generation at: the id its key names, else the first token spelled so.
const FIM_ENDS: [(&str, &[&str]); 3] = [
    ("tokenizer.ggml.fim_pad_token_id", &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"]),
    ("tokenizer.ggml.fim_rep_token_id", &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"]),
    ("tokenizer.ggml.fim_sep_token_id", &["<|file_sep|>"]),
];

/// llama.cpp's end-of-generation set, sorted: EOS, EOT, EOM (`tokenizer.ggml.eom_token_id`),
/// the fill-in-the-middle ends, and every token spelled as one of its end markers (Llama
/// 3.1 stops at `<|eot_id|>`, `<|eom_id|>` and `<|end_of_text|>`; Qwen 2.5 at `<|im_end|>`
/// and `<|endoftext|>`). An id key out of range is ignored, as llama.cpp ignores it.
pub(crate) fn end_of_generation(
    g: &Gguf<'_>,
    n: usize,
    lookup: impl Fn(&[u8]) -> Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
) -> Vec<u32> {
    let id = |key: &str| g.get(key).and_then(|v| v.as_u64()).and_then(|id| u32::try_from(id).ok()).filter(|&id| (id as usize) < n);
    let mut ids: Vec<u32> = EOG_TEXTS.iter().filter_map(|t| lookup(t.as_bytes())).collect();
    ids.extend([eos, eot, id("tokenizer.ggml.eom_token_id")].into_iter().flatten());
    for (key, texts) in FIM_ENDS {
        ids.extend(id(key).or_else(|| texts.iter().find_map(|t| lookup(t.as_bytes()))));
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// `tokenizer.ggml.token_type` for `n` tokens (all NORMAL without the key).
pub(crate) fn token_types(g: &Gguf<'_>, n: usize) -> Result<Vec<TokenType>, VocabError> {
    let Some(v) = g.get(KEY_TOKEN_TYPE) else { return Ok(alloc::vec![TokenType::Normal; n]) };
    let expected = "array of i32";
    let a = v.as_array().ok_or(VocabError::WrongType { key: KEY_TOKEN_TYPE, found: v.value_type(), expected })?;
    if a.len() != n as u64 {
        return Err(VocabError::LengthMismatch { key: KEY_TOKEN_TYPE, len: a.len(), tokens: n as u64 });
    }
    if !matches!(a.elem_type(), ValueType::I32 | ValueType::U32 | ValueType::I8 | ValueType::U8 | ValueType::I16 | ValueType::U16) {
        return Err(VocabError::WrongType { key: KEY_TOKEN_TYPE, found: a.elem_type(), expected });
    }
    let types: Vec<TokenType> = a.iter().map(|v| TokenType::from_i64(v.as_i64().unwrap_or(0))).collect();
    if types.len() != n {
        return Err(VocabError::LengthMismatch { key: KEY_TOKEN_TYPE, len: types.len() as u64, tokens: n as u64 });
    }
    Ok(types)
}

/// The byte of a `<0xXX>` piece (either case of hex digits).
pub(crate) fn parse_byte_piece(piece: &[u8]) -> Option<u8> {
    if let [b'<', b'0', b'x', hi, lo, b'>'] = *piece {
        let hex = |c: u8| (c as char).to_digit(16);
        return Some((hex(hi)? * 16 + hex(lo)?) as u8);
    }
    None
}

/// The tokens' pieces (`tokenizer.ggml.tokens`) and an index from piece to id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pieces {
    /// All pieces back to back; token `i` is `text[starts[i]..starts[i + 1]]`.
    text: Vec<u8>,
    starts: Vec<usize>,
    /// Token ids sorted by piece bytes (pieces are unique).
    sorted: Vec<u32>,
}

impl Pieces {
    /// The pieces of `tokenizer.ggml.tokens` (an empty one renamed `[EMPTY_i]` as
    /// llama.cpp does), refused when two are equal.
    pub(crate) fn from_gguf(g: &Gguf<'_>) -> Result<Pieces, VocabError> {
        let tokens = g.get(KEY_TOKENS).ok_or(VocabError::MissingKey(KEY_TOKENS))?;
        let expected = "array of strings";
        let tokens = tokens.as_array().ok_or(VocabError::WrongType { key: KEY_TOKENS, found: tokens.value_type(), expected })?;
        if tokens.elem_type() != ValueType::String {
            return Err(VocabError::WrongType { key: KEY_TOKENS, found: tokens.elem_type(), expected });
        }
        let n64 = tokens.len();
        if n64 == 0 || n64 > i32::MAX as u64 {
            return Err(VocabError::BadVocabSize { tokens: n64 });
        }
        let n = n64 as usize; // <= i32::MAX, and <= the array's bytes / 8
        let mut text = Vec::with_capacity(tokens.bytes().len().saturating_sub(n.saturating_mul(8)));
        let mut starts = Vec::with_capacity(n + 1);
        starts.push(0);
        for (i, v) in tokens.iter().enumerate() {
            match v {
                Value::String(s) if !s.is_empty() => text.extend_from_slice(s),
                _ => text.extend_from_slice(alloc::format!("[EMPTY_{i}]").as_bytes()),
            }
            starts.push(text.len());
        }
        if starts.len() != n + 1 {
            return Err(VocabError::LengthMismatch { key: KEY_TOKENS, len: starts.len() as u64 - 1, tokens: n64 });
        }
        let mut p = Pieces { text, starts, sorted: (0..n as u32).collect() };
        let mut sorted = core::mem::take(&mut p.sorted);
        sorted.sort_unstable_by(|&a, &b| p.get(a).cmp(p.get(b)));
        for w in sorted.windows(2) {
            if p.get(w[0]) == p.get(w[1]) {
                return Err(VocabError::DuplicatePiece { first: w[0].min(w[1]), second: w[0].max(w[1]) });
            }
        }
        p.sorted = sorted;
        Ok(p)
    }

    /// Number of tokens.
    pub(crate) fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// The piece of `token` (empty past the vocabulary).
    pub(crate) fn get(&self, token: u32) -> &[u8] {
        let i = token as usize;
        match (self.starts.get(i), self.starts.get(i + 1)) {
            (Some(&s), Some(&e)) => self.text.get(s..e).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// The id whose piece is exactly `piece`.
    pub(crate) fn lookup(&self, piece: &[u8]) -> Option<u32> {
        let i = self.sorted.partition_point(|&t| self.get(t) < piece);
        self.sorted.get(i).copied().filter(|&t| self.get(t) == piece)
    }

    /// Bytes of all pieces together.
    pub(crate) fn text_bytes(&self) -> usize {
        self.text.len()
    }
}

/// The special pieces of a vocabulary and where they occur in text.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpecialTokens {
    /// Token ids by rank: longest piece first, then lower id (llama.cpp's order).
    ids: Vec<u32>,
    /// Piece length by rank.
    lens: Vec<usize>,
    /// By rank: matched even without `parse_special` (user-defined tokens).
    always: Vec<bool>,
    /// Per trie node: the rank of the piece that ends there, or NONE.
    rank_at: Vec<u32>,
    edges: BTreeMap<(u32, u8), u32>,
}

impl SpecialTokens {
    /// The tokens `ids` with their pieces; `always(id)` for those matched even when the
    /// caller does not parse specials.
    pub(crate) fn new<'p>(mut ids: Vec<u32>, piece: impl Fn(u32) -> &'p [u8], always: impl Fn(u32) -> bool) -> Self {
        ids.sort_by(|&a, &b| piece(b).len().cmp(&piece(a).len()).then(a.cmp(&b)));
        let mut rank_at = alloc::vec![NONE];
        let mut edges = BTreeMap::new();
        for (rank, &id) in ids.iter().enumerate() {
            let mut node = 0u32;
            for &byte in piece(id) {
                node = *edges.entry((node, byte)).or_insert_with(|| {
                    rank_at.push(NONE);
                    rank_at.len() as u32 - 1
                });
            }
            rank_at[node as usize] = rank as u32;
        }
        let lens = ids.iter().map(|&id| piece(id).len()).collect();
        let always = ids.iter().map(|&id| always(id)).collect();
        SpecialTokens { ids, lens, always, rank_at, edges }
    }

    /// (position, id) of the special tokens claimed in `text`, by position: in rank order,
    /// each takes its leftmost occurrences that lie wholly in text no earlier one claimed
    /// (llama.cpp's fragment splitting). Without `parse_special` only the `always` ones.
    pub(crate) fn find(&self, text: &[u8], parse_special: bool) -> Vec<(usize, u32)> {
        let mut found = Vec::new(); // (rank, position)
        for p in 0..text.len() {
            let mut node = 0u32;
            for &b in &text[p..] {
                let Some(&c) = self.edges.get(&(node, b)) else { break };
                node = c;
                let rank = self.rank_at[c as usize];
                if rank != NONE && (parse_special || self.always[rank as usize]) {
                    found.push((rank, p));
                }
            }
        }
        if found.is_empty() {
            return Vec::new();
        }
        found.sort_unstable();
        let mut claimed = alloc::vec![false; text.len()];
        let mut taken = Vec::new();
        for (rank, p) in found {
            let span = p..p + self.lens[rank as usize];
            if claimed[span.clone()].iter().all(|&c| !c) {
                claimed[span].iter_mut().for_each(|c| *c = true);
                taken.push((p, self.ids[rank as usize]));
            }
        }
        taken.sort_unstable();
        taken
    }
}
