//! A conversation kept whole, so that what a session is fed over many turns is exactly
//! llama.cpp's formatting of the whole conversation (`llama_chat_apply_template`), while
//! each turn computes only its new tokens.

use alloc::string::String;
use alloc::vec::Vec;

use super::{Error, Model, Role};

/// The messages so far and the text the session was fed.
#[derive(Clone, Debug, Default)]
pub struct ChatHistory {
    messages: Vec<(Role, String)>,
    fed: String,
}

/// What to feed for the next turns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatPrompt {
    /// The formatted text the tokens encode.
    pub text: String,
    /// `text` as tokens (BOS first when it starts the conversation).
    pub tokens: Vec<u32>,
    /// The template formats earlier messages differently once more follow (some trim
    /// or rewrite them), so the session must be cleared and fed `tokens` from the start.
    pub restart: bool,
}

impl ChatHistory {
    /// An empty conversation.
    pub fn new() -> ChatHistory {
        ChatHistory::default()
    }

    /// Adds `turns` and returns the tokens to feed: the formatted conversation, ending
    /// with the assistant's cue, after the text fed so far.
    pub fn prompt(&mut self, model: &Model, turns: &[(Role, &str)]) -> Result<ChatPrompt, Error> {
        let before = self.messages.len();
        self.messages.extend(turns.iter().map(|&(role, text)| (role, String::from(text))));
        let messages: Vec<(Role, &str)> = self.messages.iter().map(|(r, t)| (*r, t.as_str())).collect();
        let full = match model.format_chat(&messages, true) {
            Ok(full) => full,
            Err(e) => {
                self.messages.truncate(before);
                return Err(e);
            }
        };
        let (text, first) = match full.strip_prefix(self.fed.as_str()) {
            Some(rest) if !self.fed.is_empty() => (String::from(rest), false),
            _ => (full.clone(), true),
        };
        let tokens = model.encode_chat_text(&text, first)?;
        let restart = first && !self.fed.is_empty();
        self.fed = full;
        Ok(ChatPrompt { text, tokens, restart })
    }

    /// Records the assistant's answer to the last prompt (its text as generated, the
    /// end-of-turn token left out: the next prompt's text closes the turn).
    pub fn add_answer(&mut self, text: &str) {
        self.messages.push((Role::Assistant, String::from(text)));
        self.fed.push_str(text);
    }

    /// The messages so far, answers included.
    pub fn messages(&self) -> &[(Role, String)] {
        &self.messages
    }

    /// All the text fed so far: the formatted conversation.
    pub fn text(&self) -> &str {
        &self.fed
    }
}
