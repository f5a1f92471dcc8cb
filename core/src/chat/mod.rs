//! Chat: llama.cpp's templates and the one conversation loop every front-end uses.
//!
//! * [`template`]: [`ChatTemplate`], llama.cpp's `llama_chat_apply_template` (detection by
//!   the file's Jinja text or a builtin name, then its fixed formatting rule). A leaf: it
//!   depends on nothing but strings.
//! * [`history`]: [`ChatHistory`], a conversation kept whole so each turn feeds a
//!   `Session` exactly the tokens llama.cpp's formatting of the whole conversation adds.
//!   It sits on the engine (`Model::format_chat`, `Session`); the CLI, the page and the Pi
//!   drive it.

pub mod history;
pub mod template;

pub use history::{ChatHistory, ChatPrompt};
pub use template::*;
