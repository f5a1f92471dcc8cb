//! Byte-level BPE from GGUF metadata (`tokenizer.ggml.model` = `"gpt2"`): llama.cpp's BPE
//! tokenizer (`llm_tokenizer_bpe` in `llama-vocab.cpp`, the splitters of `unicode.cpp`),
//! used by GPT-2, Llama 3, Qwen 2/3.5, DeepSeek, Falcon, StarCoder and many others.
//!
//! What encoding does, step for step as llama.cpp's `llama_tokenize`:
//! 1. **Special tokens first**, exactly as for SentencePiece (see [`crate::tokenizer::spm`]): tokens
//!    with the CONTROL, USER_DEFINED or UNKNOWN attribute are found in the raw text,
//!    longest first (lower id first among equal lengths), each claiming its leftmost
//!    non-overlapping occurrences in what is still unclaimed; CONTROL and UNKNOWN ones only
//!    with `parse_special`. As llama.cpp does, tokens named like end-of-generation tokens
//!    (`<|endoftext|>`, `<|im_end|>`, ...) get the CONTROL attribute whatever their type
//!    in the file, and so do FIM tokens (`<|fim_prefix|>`, ...) where the file names none
//!    (the first of llama.cpp's list that exists; llama.cpp takes the first it meets in
//!    hash order, which only differs for a vocabulary with two such pieces).
//! 2. **Pre-tokenization** of each remaining piece of text into words, by the regular
//!    expressions llama.cpp uses for the file's `tokenizer.ggml.pre` ([`PreTokenizer`]),
//!    written out by hand over Unicode general categories (crate
//!    `unicode-general-category`, Unicode 16.0; llama.cpp's tables are Unicode 15.1, so
//!    the two differ only on the 5185 code points assigned in 16.0, which llama.cpp
//!    treats as unassigned).
//! 3. **Byte-level encoding**: every byte of a word becomes one character of GPT-2's
//!    byte alphabet (printable Latin-1 bytes stand for themselves, the other 68 bytes
//!    are U+0100..U+0143 in order).
//! 4. **BPE**: the adjacent pair of symbols with the lowest merge rank (order in
//!    `tokenizer.ggml.merges`), the leftmost among equal ranks, is merged until no pair
//!    has a merge. With the `ignore_merges` flag llama.cpp sets for the Llama 3 family, a
//!    word that is itself a token is taken whole first.
//! 5. A final symbol that is no token (only possible for a single byte whose character
//!    is missing from the vocabulary) becomes the tokens of the single bytes of its
//!    UTF-8 form, those that exist, as llama.cpp does.
//! 6. BOS first when asked; [`BpeTokenizer::encode_llama`] also appends EOS when
//!    `add_special` and the file's `tokenizer.ggml.add_eos_token` say so.
//!
//! Decoding (llama.cpp's `token_to_piece` with `special = false`): NORMAL tokens mapped
//! back from the byte alphabet to bytes (a character outside it prints as llama.cpp's
//! `[UNK_BYTE_0x..]` marker), USER_DEFINED tokens as their text, BYTE tokens `<0xXX>` as
//! their byte, CONTROL, UNKNOWN, UNUSED and UNDEFINED tokens as nothing.
//!
//! Metadata is checked once, with typed errors ([`VocabError`]) where llama.cpp would throw,
//! abort or silently accept something that cannot tokenize: an unknown or unsupported
//! pre-tokenizer, missing or empty merges, merges that are not `"left right"` with both
//! halves and their concatenation in the vocabulary (Hugging Face refuses those too),
//! duplicate pieces, out-of-range special ids. A repeated merge keeps its first (lowest)
//! rank, as llama.cpp's `emplace` does.
//!
//! Not modelled: the LSTRIP/RSTRIP attributes llama.cpp sets by model name (jina-v2
//! `<mask>`, phi-3, modern-bert), so the pres `jina-v2-es`/`jina-v2-de` are refused; the
//! SEP token of `jina-v1-en`/`jina-v2-code`/`roberta-bpe` (refused too); llama.cpp's
//! `<|end|>` and `</s>` attribute hacks for harmony/solar-open and gemma4/plamo
//! vocabularies. A special piece that is not UTF-8 is never matched (it could only be
//! found inside a character).

use alloc::{collections::BinaryHeap, string::String, vec::Vec};

use unicode_general_category::{get_general_category, GeneralCategory as Gc};

use crate::formats::gguf::{Array, Gguf, Value, ValueType};
use crate::tokenizer::vocab::{
    check_model, end_of_generation, opt_bool, opt_id, parse_byte_piece, token_types, Pieces, SpecialTokens, EOG_TEXTS,
};
pub use crate::tokenizer::vocab::{
    TokenType, VocabError, KEY_ADD_BOS, KEY_ADD_EOS, KEY_BOS, KEY_EOS, KEY_EOT, KEY_MODEL, KEY_TOKENS, KEY_TOKEN_TYPE,
};
use crate::tokenizer::{Tokenizer, TokenizerError};

pub const KEY_PRE: &str = "tokenizer.ggml.pre";
pub const KEY_MERGES: &str = "tokenizer.ggml.merges";

const NONE: u32 = u32::MAX;

// llama.cpp's `llama_token_attr` bits that tokenizing and decoding look at.
const ATTR_UNKNOWN: u8 = 1 << 0;
const ATTR_NORMAL: u8 = 1 << 2;
const ATTR_CONTROL: u8 = 1 << 3;
const ATTR_USER_DEFINED: u8 = 1 << 4;
const ATTR_BYTE: u8 = 1 << 5;

fn attr_of(t: TokenType) -> u8 {
    match t {
        TokenType::Normal => ATTR_NORMAL,
        TokenType::Unknown => ATTR_UNKNOWN,
        TokenType::Control => ATTR_CONTROL,
        TokenType::UserDefined => ATTR_USER_DEFINED,
        TokenType::Byte => ATTR_BYTE,
        // UNUSED and UNDEFINED: neither special nor printed
        TokenType::Unused | TokenType::Undefined => 0,
    }
}

/// FIM tokens llama.cpp finds by text when the file names none (key, candidate pieces);
/// the one found becomes CONTROL.
const FIM_PIECES: &[(&[&str], &[&str])] = &[
    (
        &["tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"],
        &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<\u{ff5c}fim\u{2581}begin\u{ff5c}>",
            "<PRE>",
            "\u{2581}<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
    ),
    (
        &["tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"],
        &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<\u{ff5c}fim\u{2581}hole\u{ff5c}>",
            "<SUF>",
            "\u{2581}<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
    ),
    (
        &["tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"],
        &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<\u{ff5c}fim\u{2581}end\u{ff5c}>",
            "<MID>",
            "\u{2581}<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
    ),
    (&["tokenizer.ggml.fim_pad_token_id"], &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"]),
    (&["tokenizer.ggml.fim_rep_token_id"], &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"]),
    (&["tokenizer.ggml.fim_sep_token_id"], &["<|file_sep|>"]),
];

/// gpt-oss tokens llama.cpp always prints: USER_DEFINED whatever the file says.
const ALWAYS_SHOWN: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// How text is split into words before BPE: one variant per family of llama.cpp's
/// pre-tokenizer regular expressions (`llm_tokenizer_bpe`'s `regex_exprs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PreTokenizer {
    /// Llama 3: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
    /// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
    Llama3,
    /// Qwen 2: Llama 3's with `\p{N}` (single digits) for `\p{N}{1,3}`.
    Qwen2,
    /// Qwen 3.5: Qwen 2's with marks (`\p{M}`) counted as letters.
    Qwen35,
    /// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`.
    Gpt2,
    /// StarCoder: every `\p{N}` alone, then GPT-2's.
    Starcoder,
    /// Falcon: runs of ``[\p{P}\$\+<=>\^~\|`]``, then GPT-2's, then `[0-9][0-9][0-9]`.
    Falcon,
    /// llama.cpp's default (a file without `tokenizer.ggml.pre`): runs of
    /// `[\p{P}\$\+<=>\^~\|]`, GPT-2's, runs of `\p{N}`, then `[0-9][0-9][0-9]`.
    Default,
    /// DeepSeek LLM: `[\r\n]`, `\s?` + Latin/Greek/Cyrillic/... letters, `\s?` + ASCII and
    /// full-width punctuation, `\s+$`, CJK runs, `\p{N}+`.
    DeepseekLlm,
    /// DeepSeek Coder: `[\r\n]`, `\s?\p{L}+`, `\s?\p{P}+`, CJK runs, each `\p{N}` alone.
    DeepseekCoder,
}

/// `tokenizer.ggml.pre` names llama.cpp knows (its `LLAMA_VOCAB_PRE_TYPE_*`) and lutra
/// does not support: other regexes, a SEP token, LSTRIP attributes, no byte encoding.
const LLAMA_CPP_ONLY_PRES: &[&str] = &[
    "minicpm5",
    "deepseek-v3",
    "spark2_5",
    "youtu",
    "jina-v2-es",
    "jina-v2-de",
    "jais-2",
    "gemma4",
    "granite-embed-multi-311m",
    "sarvam-moe",
    "jina-v1-en",
    "jina-v2-code",
    "roberta-bpe",
    "whitespace",
    "poro-chat",
    "chatglm-bpe",
    "glm4",
    "glm5",
    "viking",
    "tekken",
    "bloom",
    "gpt3-finnish",
    "exaone-moe",
    "chameleon",
    "gpt-4o",
    "llama4",
    "kanana2",
    "talkie",
    "granite-embed-multi-97m",
    "tiny_aya",
    "cohere2moe",
    "superbpe",
    "bailingmoe",
    "bailingmoe2",
    "llada-moe",
    "seed-coder",
    "hunyuan-dense",
    "hy_v4",
    "joyai-llm",
    "kimi-k2",
    "ufakzeka",
    "grok-2",
    "afmoe",
    "laguna",
    "minimax-m2",
];

/// What llama.cpp sets up for a `tokenizer.ggml.pre` name.
struct PreConfig {
    pre: PreTokenizer,
    /// Take a word that is a token whole, before merging.
    ignore_merges: bool,
    /// Default of `add_bos_token` (the file may override it).
    add_bos: bool,
}

impl PreTokenizer {
    /// The pre-tokenizer of a `tokenizer.ggml.pre` value, as llama.cpp maps names to
    /// `LLAMA_VOCAB_PRE_TYPE_*`: `Err(true)` for a name llama.cpp knows that lutra does
    /// not support, `Err(false)` for a name llama.cpp does not know either.
    fn config(name: &str) -> Result<PreConfig, bool> {
        use PreTokenizer::*;
        let cfg = |pre, ignore_merges, add_bos| Ok(PreConfig { pre, ignore_merges, add_bos });
        match name {
            // llama.cpp takes an empty name, as a missing key, for its default
            "default" | "" => cfg(Default, false, false),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2" | "jina-v5-nano" => {
                cfg(Llama3, true, true)
            }
            "dbrx" | "smaug-bpe" => cfg(Llama3, false, false),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" | "stablelm2" | "hunyuan" | "solar-open" => {
                cfg(Qwen2, false, false)
            }
            "qwen35" => cfg(Qwen35, false, false),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "a.x-4.0" | "mellum" | "modern-bert" | "exaone4" | "mpt" | "olmo"
            | "jais" | "trillion" | "granite-docling" => cfg(Gpt2, false, false),
            "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
                cfg(Starcoder, false, false)
            }
            "falcon" => cfg(Falcon, false, false),
            "deepseek-llm" => cfg(DeepseekLlm, false, false),
            "deepseek-coder" => cfg(DeepseekCoder, false, false),
            _ => Err(LLAMA_CPP_ONLY_PRES.contains(&name)),
        }
    }
}

fn pre_error(name: &str, known: bool) -> VocabError {
    if known {
        VocabError::UnsupportedPre { name: name.into() }
    } else {
        VocabError::UnknownPre { name: name.into() }
    }
}

// ---------------------------------------------------------------------------------
// Unicode classes, as llama.cpp's `unicode_cpt_flags`

/// The categories a splitter asks about; all false outside the text being split (where
/// llama.cpp's flags are 0), `any` true for every character inside it.
#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    letter: bool,
    number: bool,
    mark: bool,
    punct: bool,
    ws: bool,
    any: bool,
}

fn flags(c: char) -> Flags {
    let (letter, number, mark, punct) = match get_general_category(c) {
        Gc::UppercaseLetter | Gc::LowercaseLetter | Gc::TitlecaseLetter | Gc::ModifierLetter | Gc::OtherLetter => {
            (true, false, false, false)
        }
        Gc::DecimalNumber | Gc::LetterNumber | Gc::OtherNumber => (false, true, false, false),
        Gc::NonspacingMark | Gc::SpacingMark | Gc::EnclosingMark => (false, false, true, false),
        Gc::ConnectorPunctuation
        | Gc::DashPunctuation
        | Gc::OpenPunctuation
        | Gc::ClosePunctuation
        | Gc::InitialPunctuation
        | Gc::FinalPunctuation
        | Gc::OtherPunctuation => (false, false, false, true),
        _ => (false, false, false, false),
    };
    // Rust's `char::is_whitespace` is Unicode White_Space: llama.cpp's whitespace set
    Flags { letter, number, mark, punct, ws: c.is_whitespace(), any: true }
}

/// Flags of `chunk[i]`, all false past its end.
fn flags_at(chunk: &[char], i: usize) -> Flags {
    chunk.get(i).map_or(Flags::default(), |&c| flags(c))
}

fn is_rn(c: Option<char>) -> bool {
    matches!(c, Some('\r' | '\n'))
}

// ---------------------------------------------------------------------------------
// Pre-tokenizers. Each splits one chunk of characters and appends the word lengths (in
// characters) to `out`, as llama.cpp's `unicode_regex_split_custom_*` do with offsets.

/// Appends word lengths; `at` is where the last word ended.
struct Words<'o> {
    out: &'o mut Vec<usize>,
    at: usize,
}

impl Words<'_> {
    /// End a word at `end` (nothing if it would be empty).
    fn end(&mut self, end: usize) {
        if end > self.at {
            self.out.push(end - self.at);
        }
        self.at = end;
    }
}

/// The contraction at `pos` (`'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`), ASCII
/// case-insensitive if `fold`: its length in characters. (llama.cpp folds with its
/// Unicode lowercase map, under which no other character becomes one of these letters.)
fn contraction(chunk: &[char], pos: usize, fold: bool) -> Option<usize> {
    if chunk.get(pos) != Some(&'\'') {
        return None;
    }
    let low = |i: usize| chunk.get(i).map(|&c| if fold { c.to_ascii_lowercase() } else { c });
    match low(pos + 1)? {
        's' | 't' | 'm' | 'd' => Some(2),
        a @ ('r' | 'v' | 'l') => {
            let want = if a == 'l' { 'l' } else { 'e' };
            (low(pos + 2) == Some(want)).then_some(3)
        }
        _ => None,
    }
}

/// GPT-2's regex: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
/// (with llama.cpp's trailing `|\s+` for whitespace at the end).
fn split_gpt2(chunk: &[char], out: &mut Vec<usize>) {
    let n = chunk.len();
    let f = |i| flags_at(chunk, i);
    let mut w = Words { out, at: 0 };
    let mut pos = 0;
    while pos < n {
        if let Some(len) = contraction(chunk, pos, false) {
            pos += len;
            w.end(pos);
            continue;
        }
        let space = chunk[pos] == ' ';
        let f2 = if space { f(pos + 1) } else { f(pos) };
        // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: one class after an optional space
        let class: Option<fn(Flags) -> bool> = if f2.letter {
            Some(|f| f.letter)
        } else if f2.number {
            Some(|f| f.number)
        } else if !(f2.ws || f2.letter || f2.number) && f2.any {
            Some(|f| !(f.ws || f.letter || f.number) && f.any)
        } else {
            None
        };
        if let Some(class) = class {
            pos += usize::from(space);
            while class(f(pos)) {
                pos += 1;
            }
            w.end(pos);
            continue;
        }
        let mut spaces = 0;
        while f(pos + spaces).ws {
            spaces += 1;
        }
        if spaces > 1 && pos + spaces < n {
            // `\s+(?!\S)`: the last space goes with the word after
            pos += spaces - 1;
        } else if spaces > 0 {
            pos += spaces;
        } else {
            pos += 1;
        }
        w.end(pos);
    }
}

/// The Llama 3 family's regex, `digits` = 3 (Llama 3) or 1 (Qwen 2, Qwen 3.5), `marks`
/// (Qwen 3.5) counting `\p{M}` with `\p{L}`:
/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
/// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
fn split_llama3(chunk: &[char], out: &mut Vec<usize>, digits: usize, marks: bool) {
    let n = chunk.len();
    let f = |i| flags_at(chunk, i);
    let letter = |f: Flags| f.letter || (marks && f.mark);
    let mut w = Words { out, at: 0 };
    let mut pos = 0;
    while pos < n {
        let c = chunk[pos];
        let fl = f(pos);
        if let Some(len) = contraction(chunk, pos, true) {
            pos += len;
            w.end(pos);
            continue;
        }
        // `[^\r\n\p{L}\p{N}]?\p{L}+`
        if !(c == '\r' || c == '\n' || fl.number) && (letter(fl) || letter(f(pos + 1))) {
            pos += 1;
            while letter(f(pos)) {
                pos += 1;
            }
            w.end(pos);
            continue;
        }
        // `\p{N}{1,3}`: a run of numbers in pieces of `digits`
        if fl.number {
            let mut start = pos;
            while f(pos).number {
                pos += 1;
                if pos - start >= digits {
                    w.end(pos);
                    start = pos;
                }
            }
            w.end(pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        let other = |f: Flags| !(f.ws || letter(f) || f.number);
        let f2 = if c == ' ' { f(pos + 1) } else { fl };
        if other(f2) && fl.any {
            pos += usize::from(c == ' ');
            while other(f(pos)) && f(pos).any {
                pos += 1;
            }
            while is_rn(chunk.get(pos).copied()) {
                pos += 1;
            }
            w.end(pos);
            continue;
        }
        // whitespace: `\s*[\r\n]+` up to the last line break of the run, else
        // `\s+(?!\S)` leaving one space to the next word, else `\s+`
        let mut spaces = 0;
        let mut after_rn = 0;
        while f(pos + spaces).ws {
            if is_rn(chunk.get(pos + spaces).copied()) {
                after_rn = pos + spaces + 1;
            }
            spaces += 1;
        }
        if after_rn > 0 {
            pos = after_rn;
        } else if spaces > 1 && pos + spaces < n {
            pos += spaces - 1;
        } else if spaces > 0 {
            pos += spaces;
        } else {
            pos += 1;
        }
        w.end(pos);
    }
}

/// One regex of llama.cpp's `std::regex` fallback, by the shape of its match.
#[derive(Clone, Copy)]
enum Rx {
    /// One character of the class: `[\r\n]`, `\p{N}`.
    One(fn(char) -> bool),
    /// A run of the class: `[...]+`, `\p{N}+`.
    Run(fn(char) -> bool),
    /// An optional whitespace, then a run of the class: `\s?[...]+`.
    SpaceRun(fn(char) -> bool),
    /// Whitespace up to the end of the chunk: `\s+$`.
    TrailingSpace,
    /// Three ASCII digits: `[0-9][0-9][0-9]`.
    ThreeDigits,
}

impl Rx {
    /// The leftmost match at or after `from` in `chunk`, as `std::regex_iterator` finds it.
    fn find(self, chunk: &[char], from: usize) -> Option<(usize, usize)> {
        let n = chunk.len();
        let run_end = |mut i: usize, class: fn(char) -> bool| {
            while i < n && class(chunk[i]) {
                i += 1;
            }
            i
        };
        match self {
            Rx::One(class) => (from..n).find(|&i| class(chunk[i])).map(|i| (i, i + 1)),
            Rx::Run(class) => (from..n).find(|&i| class(chunk[i])).map(|i| (i, run_end(i, class))),
            Rx::SpaceRun(class) => (from..n).find_map(|i| {
                if chunk[i].is_whitespace() && i + 1 < n && class(chunk[i + 1]) {
                    Some((i, run_end(i + 1, class)))
                } else if class(chunk[i]) {
                    Some((i, run_end(i, class)))
                } else {
                    None
                }
            }),
            Rx::TrailingSpace => {
                let mut start = n;
                while start > from && chunk[start - 1].is_whitespace() {
                    start -= 1;
                }
                (start < n).then_some((start, n))
            }
            Rx::ThreeDigits => {
                (from..n.saturating_sub(2)).find(|&i| chunk[i..i + 3].iter().all(|c| c.is_ascii_digit())).map(|i| (i, i + 3))
            }
        }
    }
}

/// Split every word of `words` (lengths in characters of `cps`) at the matches of `rx`:
/// each match and each stretch between matches becomes a word.
fn split_rx(cps: &[char], words: &[usize], rx: Rx, out: &mut Vec<usize>) {
    let mut start = 0;
    for &len in words {
        let chunk = &cps[start..start + len];
        let mut pos = 0;
        while let Some((s, e)) = rx.find(chunk, pos) {
            if s > pos {
                out.push(s - pos);
            }
            out.push(e - s);
            pos = e;
        }
        if pos < len {
            out.push(len - pos);
        }
        start += len;
    }
}

/// Apply a custom splitter to every word of `words`.
fn split_each(cps: &[char], words: &[usize], out: &mut Vec<usize>, split: fn(&[char], &mut Vec<usize>)) {
    let mut start = 0;
    for &len in words {
        split(&cps[start..start + len], out);
        start += len;
    }
}

fn in_ranges(ranges: &[(char, char)], c: char) -> bool {
    ranges.iter().any(|&(a, b)| a <= c && c <= b)
}

/// llama.cpp runs regexes without `\p{..}` as `std::wregex` over the text with every
/// non-ASCII whitespace replaced by U+000B: such a character is in no bracket class.
fn wide(class: &[(char, char)], c: char) -> bool {
    !(c as u32 > 0x7f && c.is_whitespace()) && in_ranges(class, c)
}

/// Runs of `[\p{P}\$\+<=>\^~\|`]`: Falcon's first regex.
fn falcon_punct(c: char) -> bool {
    flags(c).punct || "$+<=>^~|`".contains(c)
}

/// Runs of `[\p{P}\$\+<=>\^~\|]`: the default pre-tokenizer's first regex.
fn default_punct(c: char) -> bool {
    flags(c).punct || "$+<=>^~|".contains(c)
}

fn number(c: char) -> bool {
    flags(c).number
}

fn letter(c: char) -> bool {
    flags(c).letter
}

fn punct(c: char) -> bool {
    flags(c).punct
}

fn cr_lf(c: char) -> bool {
    c == '\r' || c == '\n'
}

/// DeepSeek LLM's `[A-Za-zµÀ-ÖØ-öø-ƺ...]` (letters of cased scripts), from llama.cpp.
const DEEPSEEK_LETTERS: &[(char, char)] = &[
    ('A', 'Z'),
    ('a', 'z'),
    ('\u{b5}', '\u{b5}'),
    ('\u{c0}', '\u{d6}'),
    ('\u{d8}', '\u{f6}'),
    ('\u{f8}', '\u{1ba}'),
    ('\u{1bc}', '\u{1bf}'),
    ('\u{1c4}', '\u{293}'),
    ('\u{295}', '\u{2af}'),
    ('\u{370}', '\u{373}'),
    ('\u{376}', '\u{377}'),
    ('\u{37b}', '\u{37d}'),
    ('\u{37f}', '\u{37f}'),
    ('\u{386}', '\u{386}'),
    ('\u{388}', '\u{38a}'),
    ('\u{38c}', '\u{38c}'),
    ('\u{38e}', '\u{3a1}'),
    ('\u{3a3}', '\u{3f5}'),
    ('\u{3f7}', '\u{481}'),
    ('\u{48a}', '\u{52f}'),
    ('\u{531}', '\u{556}'),
    ('\u{10a0}', '\u{10c5}'),
    ('\u{13a0}', '\u{13f5}'),
    ('\u{13f8}', '\u{13fd}'),
    ('\u{1c90}', '\u{1cba}'),
    ('\u{1cbd}', '\u{1cbf}'),
    ('\u{1d00}', '\u{1d2b}'),
    ('\u{1d6b}', '\u{1d77}'),
    ('\u{1d79}', '\u{1d9a}'),
    ('\u{1e00}', '\u{1f15}'),
    ('\u{1f18}', '\u{1f1d}'),
    ('\u{1f20}', '\u{1f45}'),
    ('\u{1f48}', '\u{1f4d}'),
    ('\u{1f50}', '\u{1f57}'),
    ('\u{1f59}', '\u{1f59}'),
    ('\u{1f5b}', '\u{1f5b}'),
    ('\u{1f5d}', '\u{1f5d}'),
    ('\u{1f5f}', '\u{1f7d}'),
    ('\u{1f80}', '\u{1fb4}'),
    ('\u{1fb6}', '\u{1fbc}'),
    ('\u{1fbe}', '\u{1fbe}'),
    ('\u{1fc2}', '\u{1fc4}'),
    ('\u{1fc6}', '\u{1fcc}'),
    ('\u{1fd0}', '\u{1fd3}'),
    ('\u{1fd6}', '\u{1fdb}'),
    ('\u{1fe0}', '\u{1fec}'),
    ('\u{1ff2}', '\u{1ff4}'),
    ('\u{1ff6}', '\u{1ffc}'),
    ('\u{2102}', '\u{2102}'),
    ('\u{2107}', '\u{2107}'),
    ('\u{210a}', '\u{2113}'),
    ('\u{2115}', '\u{2115}'),
    ('\u{2119}', '\u{211d}'),
    ('\u{2124}', '\u{2124}'),
    ('\u{2126}', '\u{2126}'),
    ('\u{2128}', '\u{2128}'),
    ('\u{212a}', '\u{212d}'),
    ('\u{212f}', '\u{2134}'),
    ('\u{2139}', '\u{2139}'),
    ('\u{213c}', '\u{213f}'),
    ('\u{2145}', '\u{2149}'),
    ('\u{214e}', '\u{214e}'),
    ('\u{2183}', '\u{2184}'),
    ('\u{2c00}', '\u{2c7b}'),
    ('\u{2c7e}', '\u{2ce4}'),
    ('\u{2ceb}', '\u{2cee}'),
    ('\u{2cf2}', '\u{2cf3}'),
    ('\u{a640}', '\u{a66d}'),
    ('\u{a680}', '\u{a69b}'),
    ('\u{a722}', '\u{a76f}'),
    ('\u{a771}', '\u{a787}'),
    ('\u{a78b}', '\u{a78e}'),
    ('\u{ab70}', '\u{abbf}'),
    ('\u{fb00}', '\u{fb06}'),
    ('\u{fb13}', '\u{fb17}'),
    ('\u{ff21}', '\u{ff3a}'),
    ('\u{ff41}', '\u{ff5a}'),
    ('\u{10400}', '\u{1044f}'),
    ('\u{104b0}', '\u{104d3}'),
    ('\u{104d8}', '\u{104fb}'),
    ('\u{10c80}', '\u{10cb2}'),
    ('\u{10cc0}', '\u{10cf2}'),
    ('\u{118a0}', '\u{118df}'),
    ('\u{1e900}', '\u{1e943}'),
];

/// DeepSeek LLM's `[!-/:-~！-／：-～‘-‟　-。]`.
const DEEPSEEK_PUNCT: &[(char, char)] =
    &[('!', '/'), (':', '~'), ('\u{ff01}', '\u{ff0f}'), ('\u{ff1a}', '\u{ff5e}'), ('\u{2018}', '\u{201f}'), ('\u{3000}', '\u{3002}')];

/// DeepSeek's `[一-龥ࠀ-一가-퟿]`.
const DEEPSEEK_CJK: &[(char, char)] = &[('\u{4e00}', '\u{9fa5}'), ('\u{800}', '\u{4e00}'), ('\u{ac00}', '\u{d7ff}')];

impl PreTokenizer {
    /// The pre-tokenizer llama.cpp uses for a `tokenizer.ggml.pre` value.
    pub fn from_name(name: &str) -> Result<PreTokenizer, VocabError> {
        PreTokenizer::config(name).map(|cfg| cfg.pre).map_err(|known| pre_error(name, known))
    }

    /// The words `text` splits into (before byte-level encoding and BPE).
    pub fn split_str(self, text: &str) -> Vec<&str> {
        let chars: Vec<char> = text.chars().collect();
        let mut lens = Vec::new();
        self.split(&chars, &mut lens);
        let mut words = Vec::with_capacity(lens.len());
        let (mut rest, mut chars) = (text, &chars[..]);
        for len in lens {
            let Some((word_chars, rest_chars)) = chars.split_at_checked(len) else { break };
            let Some((word, tail)) = rest.split_at_checked(word_chars.iter().map(|c| c.len_utf8()).sum()) else { break };
            words.push(word);
            rest = tail;
            chars = rest_chars;
        }
        words
    }

    /// Split `cps` into words; appends their lengths in characters to `out`.
    fn split(self, cps: &[char], out: &mut Vec<usize>) {
        let whole = [cps.len()];
        let mut a = Vec::new();
        let mut b = Vec::new();
        // each regex splits the words the previous ones left
        let rxs: &[Rx] = match self {
            PreTokenizer::Llama3 => return split_llama3(cps, out, 3, false),
            PreTokenizer::Qwen2 => return split_llama3(cps, out, 1, false),
            PreTokenizer::Qwen35 => return split_llama3(cps, out, 1, true),
            PreTokenizer::Gpt2 => return split_gpt2(cps, out),
            PreTokenizer::Starcoder => {
                split_rx(cps, &whole, Rx::One(number), &mut a);
                return split_each(cps, &a, out, split_gpt2);
            }
            PreTokenizer::Falcon => {
                split_rx(cps, &whole, Rx::Run(falcon_punct), &mut a);
                split_each(cps, &a, &mut b, split_gpt2);
                return split_rx(cps, &b, Rx::ThreeDigits, out);
            }
            PreTokenizer::Default => {
                split_rx(cps, &whole, Rx::Run(default_punct), &mut a);
                split_each(cps, &a, &mut b, split_gpt2);
                a.clear();
                split_rx(cps, &b, Rx::Run(number), &mut a);
                return split_rx(cps, &a, Rx::ThreeDigits, out);
            }
            PreTokenizer::DeepseekLlm => &[
                Rx::One(cr_lf),
                Rx::SpaceRun(|c| wide(DEEPSEEK_LETTERS, c)),
                Rx::SpaceRun(|c| wide(DEEPSEEK_PUNCT, c)),
                Rx::TrailingSpace,
                Rx::Run(|c| wide(DEEPSEEK_CJK, c)),
                Rx::Run(number),
            ],
            PreTokenizer::DeepseekCoder => {
                &[Rx::One(cr_lf), Rx::SpaceRun(letter), Rx::SpaceRun(punct), Rx::Run(|c| wide(DEEPSEEK_CJK, c)), Rx::One(number)]
            }
        };
        a.push(cps.len());
        for &rx in rxs {
            b.clear();
            split_rx(cps, &a, rx, &mut b);
            core::mem::swap(&mut a, &mut b);
        }
        out.extend_from_slice(&a);
    }
}

// ---------------------------------------------------------------------------------
// GPT-2's byte alphabet

/// The character byte `b` stands as: itself for `!`..`~`, `¡`..`¬`, `®`..`ÿ`; the
/// other 68 bytes U+0100.. in byte order (GPT-2's `bytes_to_unicode`).
const BYTE_CHARS: [char; 256] = {
    let mut t = ['\0'; 256];
    let mut b = 0;
    while b < 256 {
        let cp = if is_printable(b as u8) { b as u32 } else { 0x100 + EXTRA_RANK[b] as u32 };
        t[b] = match char::from_u32(cp) {
            Some(c) => c,
            None => '\0',
        };
        b += 1;
    }
    t
};

const fn is_printable(b: u8) -> bool {
    (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae
}

/// For a byte that is not printable, its position among those that are not.
const EXTRA_RANK: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut next = 0u8;
    let mut b = 0;
    while b < 256 {
        if !is_printable(b as u8) {
            t[b] = next;
            next += 1;
        }
        b += 1;
    }
    t
};

/// The bytes that are not printable, in order: U+0100 + i stands for `EXTRA_BYTES[i]`.
const EXTRA_BYTES: [u8; 68] = {
    let mut t = [0u8; 68];
    let mut b = 0;
    while b < 256 {
        if !is_printable(b as u8) {
            t[EXTRA_RANK[b] as usize] = b as u8;
        }
        b += 1;
    }
    t
};

/// The byte a character of the alphabet stands for.
fn char_byte(c: char) -> Option<u8> {
    match c as u32 {
        cp @ 0..=0xff if is_printable(cp as u8) => Some(cp as u8),
        cp @ 0x100..=0x143 => Some(EXTRA_BYTES[(cp - 0x100) as usize]),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------
// the tokenizer

/// A merge: two tokens, the token they make, and the rank (lower merges first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Merge {
    left: u32,
    right: u32,
    rank: u32,
    result: u32,
}

/// A byte-level BPE vocabulary from GGUF metadata, indexed once for encoding.
#[derive(Debug, Clone)]
pub struct BpeTokenizer {
    pieces: Pieces,
    /// What each token decodes to, back to back.
    shown: Vec<u8>,
    shown_starts: Vec<usize>,
    types: Vec<TokenType>,
    /// llama.cpp's attribute bits per token (the type plus its overrides).
    attrs: Vec<u8>,
    /// Sorted by (left, right); one entry per pair, the lowest rank.
    merges: Vec<Merge>,
    /// Token of the alphabet character of each byte (NONE where missing).
    byte_symbols: [u32; 256],
    /// Special pieces to find in text.
    specials: SpecialTokens,
    pre: PreTokenizer,
    pre_name: String,
    ignore_merges: bool,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    /// llama.cpp's end-of-generation tokens, sorted (`vocab::end_of_generation`).
    eog: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    parse_special: bool,
}

fn string_array<'a>(g: &Gguf<'a>, key: &'static str) -> Result<Option<Array<'a>>, VocabError> {
    let Some(v) = g.get(key) else { return Ok(None) };
    let a = v.as_array().ok_or(VocabError::WrongType { key, found: v.value_type(), expected: "array of strings" })?;
    if a.elem_type() != ValueType::String {
        return Err(VocabError::WrongType { key, found: a.elem_type(), expected: "array of strings" });
    }
    Ok(Some(a))
}

/// llama.cpp's `llama_decode_text`: each character of the byte alphabet back to its
/// byte; any other character as `[UNK_BYTE_0x<its UTF-8 in hex><the whole piece>]`.
fn decode_piece_text(piece: &[u8], out: &mut Vec<u8>) {
    for chunk in piece.utf8_chunks() {
        let chars = chunk.valid().chars().map(Some);
        // an invalid byte reads as U+FFFD, as in llama.cpp's `unicode_cpts_from_utf8`
        let bad = chunk.invalid().iter().map(|_| None);
        for c in chars.chain(bad) {
            let c = c.unwrap_or(char::REPLACEMENT_CHARACTER);
            match char_byte(c) {
                Some(b) => out.push(b),
                None => {
                    out.extend_from_slice(b"[UNK_BYTE_0x");
                    let mut utf8 = [0u8; 4];
                    for &b in c.encode_utf8(&mut utf8).as_bytes() {
                        let hex = b"0123456789abcdef";
                        out.push(hex[(b >> 4) as usize]);
                        out.push(hex[(b & 15) as usize]);
                    }
                    out.extend_from_slice(piece);
                    out.push(b']');
                }
            }
        }
    }
}

impl BpeTokenizer {
    /// Read the tokenizer of a GGUF file whose `tokenizer.ggml.model` is `"gpt2"`.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Self, VocabError> {
        check_model(g, "gpt2", "\"gpt2\" (byte-level BPE)")?;
        // llama.cpp falls back to its default regexes, with a warning, without the key
        let pre_name: String = match g.get(KEY_PRE) {
            None => "default".into(),
            Some(v) => v.as_str().ok_or(VocabError::WrongType { key: KEY_PRE, found: v.value_type(), expected: "string" })?.into(),
        };
        let cfg = PreTokenizer::config(&pre_name).map_err(|known| pre_error(&pre_name, known))?;

        let pieces = Pieces::from_gguf(g)?;
        let n = pieces.len();
        let types = token_types(g, n)?;

        let mut t = BpeTokenizer {
            pieces,
            shown: Vec::new(),
            shown_starts: Vec::new(),
            attrs: types.iter().map(|&ty| attr_of(ty)).collect(),
            types,
            merges: Vec::new(),
            byte_symbols: [NONE; 256],
            specials: SpecialTokens::default(),
            pre: cfg.pre,
            pre_name,
            ignore_merges: cfg.ignore_merges,
            bos: None,
            eos: None,
            eot: None,
            eog: Vec::new(),
            add_bos: cfg.add_bos,
            add_eos: false,
            parse_special: false,
        };

        // attribute overrides llama.cpp makes by token text (`llama_vocab::impl::load`)
        for (keys, pieces) in FIM_PIECES {
            if keys.iter().all(|k| g.get(k).is_none()) {
                if let Some(id) = pieces.iter().find_map(|p| t.lookup(p.as_bytes())) {
                    t.attrs[id as usize] |= ATTR_CONTROL;
                }
            }
        }
        // end-of-generation tokens are CONTROL too
        for p in EOG_TEXTS {
            if let Some(id) = t.lookup(p.as_bytes()) {
                t.attrs[id as usize] |= ATTR_CONTROL;
            }
        }
        for p in ALWAYS_SHOWN {
            if let Some(id) = t.lookup(p.as_bytes()) {
                t.attrs[id as usize] = ATTR_USER_DEFINED;
            }
        }

        // what each token prints as
        let budget = (t.pieces.text_bytes() as u64).saturating_mul(4).saturating_add(1 << 20);
        let mut shown = Vec::with_capacity(t.pieces.text_bytes());
        let mut shown_starts = Vec::with_capacity(n + 1);
        shown_starts.push(0);
        for id in 0..n as u32 {
            let piece = t.piece_unchecked(id);
            let attr = t.attrs[id as usize];
            if attr & (ATTR_UNKNOWN | ATTR_CONTROL) != 0 {
                // printed only with `special`
            } else if attr & ATTR_USER_DEFINED != 0 {
                shown.extend_from_slice(piece);
            } else if attr & ATTR_NORMAL != 0 {
                decode_piece_text(piece, &mut shown);
            } else if attr & ATTR_BYTE != 0 {
                shown.push(parse_byte_piece(piece).ok_or(VocabError::BadByteToken { token: id })?);
            }
            if shown.len() as u64 > budget {
                return Err(VocabError::DecodeTooLarge { bytes: shown.len() as u64 });
            }
            shown_starts.push(shown.len());
        }
        t.shown = shown;
        t.shown_starts = shown_starts;

        // merges: "left right", split at the first space after the first byte
        let merges = string_array(g, KEY_MERGES)?.ok_or(VocabError::MissingKey(KEY_MERGES))?;
        if merges.is_empty() {
            return Err(VocabError::NoMerges);
        }
        let mut list = Vec::new();
        for (i, v) in merges.iter().enumerate() {
            let index = i as u64;
            let s = match v {
                Value::String(s) => core::str::from_utf8(s).map_err(|_| VocabError::BadMerge { index })?,
                _ => return Err(VocabError::BadMerge { index }),
            };
            let space = s.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1).ok_or(VocabError::BadMerge { index })?;
            let (left, right) = (&s[..space], &s[space + 1..]);
            let unknown = VocabError::MergeUnknownPiece { index };
            let l = t.lookup(left.as_bytes()).ok_or(unknown.clone())?;
            let r = t.lookup(right.as_bytes()).ok_or(unknown.clone())?;
            let joined = [left.as_bytes(), right.as_bytes()].concat();
            let result = t.lookup(&joined).ok_or(unknown)?;
            let rank = u32::try_from(i).map_err(|_| VocabError::BadMerge { index })?;
            list.push(Merge { left: l, right: r, rank, result });
        }
        // by pair, then rank: the first of a repeated pair wins
        list.sort_unstable();
        list.dedup_by(|b, a| (a.left, a.right) == (b.left, b.right));
        t.merges = list;

        for (b, &c) in BYTE_CHARS.iter().enumerate() {
            let mut utf8 = [0u8; 4];
            t.byte_symbols[b] = t.lookup(c.encode_utf8(&mut utf8).as_bytes()).unwrap_or(NONE);
        }

        // special tokens, found in text before the rest is tokenized (a piece that is not
        // UTF-8 could only match inside a character)
        let special = (0..n as u32)
            .filter(|&id| t.attrs[id as usize] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN) != 0)
            .filter(|&id| core::str::from_utf8(t.piece_unchecked(id)).is_ok())
            .collect();
        t.specials =
            SpecialTokens::new(special, |id| t.piece_unchecked(id), |id| t.attrs[id as usize] & (ATTR_CONTROL | ATTR_UNKNOWN) == 0);

        // special ids and flags (defaults of llama.cpp's "gpt2" model: BOS = EOS = 11)
        t.bos = opt_id(g, KEY_BOS, Some(11), n)?;
        t.eos = opt_id(g, KEY_EOS, Some(11), n)?;
        t.eot = match opt_id(g, KEY_EOT, None, n)? {
            Some(id) => Some(id),
            None => ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>"]
                .iter()
                .find_map(|s| t.lookup(s.as_bytes())),
        };
        t.eog = end_of_generation(g, n, |piece| t.lookup(piece), t.eos, t.eot);
        t.add_bos = opt_bool(g, KEY_ADD_BOS, t.add_bos)?;
        t.add_eos = opt_bool(g, KEY_ADD_EOS, false)?;
        Ok(t)
    }

    fn piece_unchecked(&self, token: u32) -> &[u8] {
        self.pieces.get(token)
    }

    fn out_of_range(&self, token: u32) -> TokenizerError {
        TokenizerError::TokenOutOfRange { token, vocab_size: self.types.len() }
    }

    /// Bytes of all pieces together.
    pub fn text_bytes(&self) -> usize {
        self.pieces.text_bytes()
    }

    /// The stored piece of `token` (in the byte alphabet for NORMAL tokens).
    pub fn piece(&self, token: u32) -> Result<&[u8], TokenizerError> {
        if (token as usize) < self.types.len() {
            Ok(self.piece_unchecked(token))
        } else {
            Err(self.out_of_range(token))
        }
    }

    /// The type the file gives `token`.
    pub fn token_type(&self, token: u32) -> Result<TokenType, TokenizerError> {
        self.types.get(token as usize).copied().ok_or(self.out_of_range(token))
    }

    /// The id whose piece is exactly `piece`.
    pub fn lookup(&self, piece: &[u8]) -> Option<u32> {
        self.pieces.lookup(piece)
    }

    /// The number of distinct merges.
    pub fn merge_count(&self) -> usize {
        self.merges.len()
    }

    /// The pre-tokenizer, and the `tokenizer.ggml.pre` name it was chosen by.
    pub fn pre_tokenizer(&self) -> (PreTokenizer, &str) {
        (self.pre, &self.pre_name)
    }

    /// End of turn: `tokenizer.ggml.eot_token_id`, or the token `<|eot_id|>`,
    /// `<|im_end|>`, `<|end|>`, `<end_of_turn>`, `<|endoftext|>` or `<|end_of_text|>`.
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }

    /// Does generation stop at `token`: llama.cpp's end-of-generation set (EOS, end of
    /// turn, and the tokens it recognizes by their text).
    pub fn is_eog(&self, token: u32) -> bool {
        self.eog.binary_search(&token).is_ok()
    }

    /// `tokenizer.ggml.add_bos_token` (default false, true for the Llama 3 family).
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// `tokenizer.ggml.add_eos_token` (default false).
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether [`Tokenizer::encode`] matches CONTROL tokens written in the text, as
    /// llama.cpp's `parse_special`. Off by default.
    pub fn parse_special(&self) -> bool {
        self.parse_special
    }

    pub fn set_parse_special(&mut self, on: bool) {
        self.parse_special = on;
    }

    /// Exactly llama.cpp's `llama_tokenize(vocab, text, add_special, parse_special)`:
    /// BOS first if `add_special` and the file's add_bos_token, EOS last if
    /// `add_special` and add_eos_token. Appends to `out`.
    pub fn encode_llama(&self, text: &str, add_special: bool, parse_special: bool, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        self.encode_impl(text, add_special && self.add_bos, parse_special, out)?;
        if add_special && self.add_eos {
            out.push(self.eos.ok_or(self.out_of_range(11))?);
        }
        Ok(())
    }

    fn encode_impl(&self, text: &str, bos: bool, parse_special: bool, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        if bos {
            out.push(self.bos.ok_or(self.out_of_range(11))?);
        }
        let mut scratch = Scratch::default();
        let mut at = 0;
        for (pos, id) in self.specials.find(text.as_bytes(), parse_special).into_iter().chain(core::iter::once((text.len(), NONE))) {
            // special pieces are UTF-8, so they start and end on character boundaries
            if let Some(raw) = text.get(at..pos).filter(|s| !s.is_empty()) {
                self.encode_text(raw, &mut scratch, out);
            }
            if id != NONE {
                out.push(id);
                at = pos + self.piece_unchecked(id).len();
            }
        }
        Ok(())
    }

    /// Pre-tokenize a piece of text without special tokens, then BPE each word.
    fn encode_text(&self, text: &str, s: &mut Scratch, out: &mut Vec<u32>) {
        s.chars.clear();
        s.chars.extend(text.chars());
        s.words.clear();
        self.pre.split(&s.chars, &mut s.words);
        // the words' lengths add up to the text's (checked anyway: never a panic)
        let mut bytes = text.as_bytes();
        let mut chars = &s.chars[..];
        for &len in &s.words {
            let Some((word_chars, rest_chars)) = chars.split_at_checked(len) else { break };
            let nbytes: usize = word_chars.iter().map(|c| c.len_utf8()).sum();
            let Some((word, rest)) = bytes.split_at_checked(nbytes) else { break };
            self.bpe_word(word, &mut s.bpe, out);
            bytes = rest;
            chars = rest_chars;
        }
    }

    /// llama.cpp's `llm_tokenizer_bpe_session::tokenize` of one word (raw bytes).
    fn bpe_word(&self, word: &[u8], s: &mut BpeScratch, out: &mut Vec<u32>) {
        if self.ignore_merges {
            s.encoded.clear();
            for &b in word {
                let mut utf8 = [0u8; 4];
                s.encoded.extend_from_slice(BYTE_CHARS[b as usize].encode_utf8(&mut utf8).as_bytes());
            }
            if let Some(id) = self.lookup(&s.encoded) {
                out.push(id);
                return;
            }
        }
        // one symbol per byte; `alive` false once merged into the left neighbour
        let n = word.len();
        s.ids.clear();
        s.ids.extend(word.iter().map(|&b| self.byte_symbols[b as usize]));
        s.alive.clear();
        s.alive.resize(n, true);
        s.next.clear();
        s.next.extend(1..=n); // n = none
        s.prev.clear();
        s.prev.extend((0..n).map(|i| i.wrapping_sub(1))); // usize::MAX = none
        s.heap.clear();
        for i in 1..n {
            self.push_pair(s, i - 1, i);
        }
        while let Some(c) = s.heap.pop() {
            let (l, r) = (c.left, c.right);
            // stale: a side merged since (llama.cpp compares the texts)
            if !s.alive[l] || !s.alive[r] || s.ids[l] != c.left_id || s.ids[r] != c.right_id {
                continue;
            }
            s.ids[l] = c.result;
            s.alive[r] = false;
            let after = s.next[r];
            s.next[l] = after;
            if after < n {
                s.prev[after] = l;
            }
            if s.prev[l] < n {
                self.push_pair(s, s.prev[l], l);
            }
            if after < n {
                self.push_pair(s, l, after);
            }
        }
        let mut i = 0;
        while i < n {
            match s.ids[i] {
                NONE => {
                    // a byte whose alphabet character is no token: its UTF-8 bytes as
                    // one-byte tokens, where they exist (llama.cpp drops the others)
                    let mut utf8 = [0u8; 4];
                    for &b in BYTE_CHARS[word[i] as usize].encode_utf8(&mut utf8).as_bytes() {
                        out.extend(self.lookup(&[b]));
                    }
                }
                id => out.push(id),
            }
            i = s.next[i];
        }
    }

    fn push_pair(&self, s: &mut BpeScratch, left: usize, right: usize) {
        let (a, b) = (s.ids[left], s.ids[right]);
        if a == NONE || b == NONE {
            return;
        }
        if let Ok(k) = self.merges.binary_search_by(|m| (m.left, m.right).cmp(&(a, b))) {
            let m = self.merges[k];
            s.heap.push(Candidate { rank: m.rank, left, right, left_id: a, right_id: b, result: m.result });
        }
    }
}

/// Buffers reused across the words of one call.
#[derive(Default)]
struct Scratch {
    chars: Vec<char>,
    words: Vec<usize>,
    bpe: BpeScratch,
}

#[derive(Default)]
struct BpeScratch {
    encoded: Vec<u8>,
    ids: Vec<u32>,
    alive: Vec<bool>,
    next: Vec<usize>,
    prev: Vec<usize>,
    heap: BinaryHeap<Candidate>,
}

/// A possible merge of the symbols at `left` and `right`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Candidate {
    rank: u32,
    left: usize,
    right: usize,
    left_id: u32,
    right_id: u32,
    result: u32,
}

impl Ord for Candidate {
    /// Lowest rank first, then the leftmost (llama.cpp's `llm_bigram_bpe::comparator`).
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        let key = |c: &Self| (c.rank, c.left, c.right, c.left_id, c.right_id, c.result);
        key(other).cmp(&key(self))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Tokenizer for BpeTokenizer {
    fn vocab_size(&self) -> usize {
        self.types.len()
    }

    fn bos(&self) -> Option<u32> {
        self.bos
    }

    fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// BOS if `bos` (pass [`BpeTokenizer::add_bos`] to follow the file), then the text
    /// as llama.cpp tokenizes it with `parse_special` = [`BpeTokenizer::parse_special`].
    /// Never appends EOS (see [`BpeTokenizer::encode_llama`]).
    fn encode(&self, text: &str, bos: bool, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        self.encode_impl(text, bos, self.parse_special, out)
    }

    fn decode_piece(&self, _prev: Option<u32>, token: u32) -> Result<&[u8], TokenizerError> {
        let i = token as usize;
        if i >= self.types.len() {
            return Err(self.out_of_range(token));
        }
        Ok(self.shown.get(self.shown_starts[i]..self.shown_starts[i + 1]).unwrap_or(&[]))
    }
}
