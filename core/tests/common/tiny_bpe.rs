//! Small hand-built byte-level BPE vocabularies (GGUF): the 256 characters of GPT-2's
//! byte alphabet, then chosen tokens and merges. For the BPE tests and the fuzz seeds.

use super::gguf_writer::{write_gguf, Meta};
use lutra_core::formats::gguf::Gguf;
use lutra_core::tokenizer::bpe::{BpeTokenizer, VocabError};
use lutra_core::tokenizer::spm::TokenType;

/// GPT-2's `bytes_to_unicode`, written independently of the library's table.
pub fn byte_char(b: u8) -> char {
    let printable = |b: u8| (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
    if printable(b) {
        return b as char;
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + rank).unwrap()
}

/// `s` in the byte alphabet.
pub fn bl(s: &str) -> String {
    s.bytes().map(byte_char).collect()
}

/// A vocabulary: the 256 byte characters (id = byte), then `extra` (piece, type), with
/// `merges` ("left right" in the byte alphabet) and further metadata.
pub struct Vocab {
    pub pre: Option<&'static str>,
    pub extra: Vec<(String, u32)>,
    pub merges: Option<Vec<String>>,
    pub kvs: Vec<(String, Meta)>,
}

impl Vocab {
    pub fn new(pre: &'static str) -> Vocab {
        Vocab { pre: Some(pre), extra: Vec::new(), merges: Some(Vec::new()), kvs: Vec::new() }
    }

    pub fn token(mut self, piece: &str, ty: TokenType) -> Self {
        self.extra.push((piece.into(), ty as u32));
        self
    }

    /// A merge of two pieces given as plain text; the joined piece is added as a token.
    pub fn merge(mut self, left: &str, right: &str) -> Self {
        let joined = bl(&format!("{left}{right}"));
        if !self.extra.iter().any(|(p, _)| *p == joined) && joined.chars().count() > 1 {
            self.extra.push((joined, TokenType::Normal as u32));
        }
        self.merges.as_mut().unwrap().push(format!("{} {}", bl(left), bl(right)));
        self
    }

    pub fn kv(mut self, key: &str, v: Meta) -> Self {
        self.kvs.push((key.into(), v));
        self
    }

    pub fn id(&self, piece: &str) -> u32 {
        256 + self.extra.iter().position(|(p, _)| p == piece).unwrap() as u32
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
        let mut types = vec![TokenType::Normal as u32; 256];
        for (p, t) in &self.extra {
            tokens.push(p.clone());
            types.push(*t);
        }
        let mut kvs = vec![("tokenizer.ggml.model".to_string(), Meta::Str("gpt2".into()))];
        if let Some(pre) = self.pre {
            kvs.push(("tokenizer.ggml.pre".into(), Meta::Str(pre.into())));
        }
        kvs.push(("tokenizer.ggml.tokens".into(), Meta::Strs(tokens)));
        kvs.push(("tokenizer.ggml.token_type".into(), Meta::U32s(types)));
        if let Some(m) = &self.merges {
            kvs.push(("tokenizer.ggml.merges".into(), Meta::Strs(m.clone())));
        }
        kvs.extend(self.kvs.iter().cloned());
        write_gguf(&kvs, &[])
    }

    pub fn load(&self) -> Result<BpeTokenizer, VocabError> {
        BpeTokenizer::from_gguf(&Gguf::parse(&self.bytes()).unwrap())
    }
}
