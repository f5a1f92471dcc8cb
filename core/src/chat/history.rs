//! A conversation kept whole, so that what a session is fed over many turns is exactly
//! llama.cpp's formatting of the whole conversation (`llama_chat_apply_template`), while
//! each turn computes only its new tokens.

use alloc::string::String;
use alloc::vec::Vec;

use crate::engine::{Error, Model, Role, Session};

/// The messages so far, the text the session was fed, and llama.cpp's formatting of the
/// conversation up to the last assistant cue.
#[derive(Clone, Debug, Default)]
pub struct ChatHistory {
    messages: Vec<(Role, String)>,
    fed: String,
    formatted: String,
}

/// What to feed for the next turns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatPrompt {
    /// The formatted text the tokens encode.
    pub text: String,
    /// `text` as tokens (BOS first when it starts the conversation).
    pub tokens: Vec<u32>,
    /// The template formats earlier turns differently once more follow, so the session
    /// must be cleared and fed `tokens` from the start.
    pub restart: bool,
}

impl ChatHistory {
    /// An empty conversation.
    pub fn new() -> ChatHistory {
        ChatHistory::default()
    }

    /// Adds `turns` and returns the tokens to feed: llama.cpp's formatting of the whole
    /// conversation, ending with the assistant's cue, after what the session holds.
    ///
    /// After an answer that is the text that closes the answer's turn (the template's
    /// end of turn: `<|im_end|>\n`, `<end_of_turn>\n`, `</s>`...), then the new turns. So
    /// the session holds exactly the formatted conversation, except that an answer stands
    /// as it was generated where a template would reformat it (Gemma's trims it, Mistral
    /// v7's puts a space before it). Where the template reformats anything else, the
    /// prompt is the whole conversation again, with `restart` set.
    pub fn prompt(&mut self, model: &Model, turns: &[(Role, &str)]) -> Result<ChatPrompt, Error> {
        let before = self.messages.len();
        self.messages.extend(turns.iter().map(|&(role, text)| (role, String::from(text))));
        let result = self.next_prompt(model, before);
        if result.is_err() {
            self.messages.truncate(before);
        }
        result
    }

    /// [`ChatHistory::prompt`] for `session`'s model, with the session made ready for its
    /// tokens: cleared when the conversation starts (a session that ran anything else
    /// before) or restarts. Every front-end continues a chat this way, so each feeds
    /// llama.cpp's formatting of the conversation.
    pub fn next_turn(&mut self, session: &mut Session, turns: &[(Role, &str)]) -> Result<ChatPrompt, Error> {
        let starts = self.fed.is_empty();
        let prompt = self.prompt(session.model(), turns)?;
        if starts || prompt.restart {
            session.reset();
        }
        Ok(prompt)
    }

    fn next_prompt(&mut self, model: &Model, before: usize) -> Result<ChatPrompt, Error> {
        let all: Vec<(Role, &str)> = self.messages.iter().map(|(r, t)| (*r, t.as_str())).collect();
        let full = model.format_chat(&all, true)?;
        let continued = match all[..before].last() {
            Some((Role::Assistant, _)) if !self.formatted.is_empty() => {
                // the conversation so far with the answer closed, as the template has it
                let closed = model.format_chat(&all[..before], false)?;
                let end = model.turn_end()?;
                match full.strip_prefix(closed.as_str()) {
                    Some(rest) if closed.starts_with(self.formatted.as_str()) && closed.ends_with(end.as_str()) => Some(end + rest),
                    _ => None,
                }
            }
            _ => None,
        };
        let restart = continued.is_none() && !self.fed.is_empty();
        let text = continued.unwrap_or_else(|| full.clone());
        let tokens = model.encode_chat_text(&text, self.fed.is_empty() || restart)?;
        if restart {
            self.fed.clear();
        }
        self.fed.push_str(&text);
        self.formatted = full;
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

    /// All the text the session was fed (since the last restart).
    pub fn text(&self) -> &str {
        &self.fed
    }
}
