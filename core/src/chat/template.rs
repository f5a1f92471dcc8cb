//! Chat templates as llama.cpp's `llama_chat_apply_template` formats them.
//!
//! llama.cpp does not run Jinja there: it recognises a template by substrings of its
//! Jinja text (or by a builtin name such as `"chatml"`), then formats the conversation
//! with a fixed, hand-written rule per template kind. [`ChatTemplate::detect`] follows
//! its detection rules in its order, and [`ChatTemplate::apply`] produces the same bytes
//! as its formatter (llama-cpp-sys-2 0.1.161; `tests/golden/chat-templates.txt` holds
//! llama.cpp's own output, checked by `tests/tests/chat_template.rs`).
//!
//! Deliberately reproduced details of llama.cpp:
//! - "trim" strips the C `isspace` bytes (space, `\t`, `\n`, `\v`, `\f`, `\r`) at both
//!   ends, not Unicode whitespace (Rust's `str::trim` would also strip U+00A0 and
//!   friends; `u8::is_ascii_whitespace` would keep `\v`).
//! - Which contents are trimmed, and what happens to system messages, differ per kind
//!   (documented on each variant); roles other than `system`/`user`/`assistant` are
//!   dropped by some kinds, printed verbatim by others, or treated as the assistant.
//! - Some kinds ignore `add_assistant` (llama2, mistral, minicpm, orion, rwkv-world,
//!   hunyuan, deepseek-ocr); rwkv-world ends with `Assistant:` after a final user turn
//!   whatever `add_assistant` says.
//! - A template text that *is* a builtin name selects that kind before any substring
//!   rule; a text starting with `mistral` counts as a `[INST]` template.
//!
//! The C API sees NUL-terminated strings, so a role, content or template with an
//! embedded NUL byte is cut there by llama.cpp; this module keeps every byte.

use alloc::string::String;

/// A template kind of llama.cpp's `llama_chat_apply_template`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChatTemplate {
    /// `chatml` (Qwen and many others): `<|im_start|>ROLE\nCONTENT<|im_end|>\n`.
    ChatMl,
    /// `llama2`: `[INST] ` once, system content + `\n` unmarked, no trimming.
    Llama2,
    /// `llama2-sys`: system content in `<<SYS>>\n...\n<</SYS>>\n\n`.
    Llama2Sys,
    /// `llama2-sys-bos`: as `llama2-sys`, with `<s>` before each later `[INST]`.
    Llama2SysBos,
    /// `llama2-sys-strip`: as `llama2-sys`, every content trimmed.
    Llama2SysStrip,
    /// `mistral-v1`: ` [INST] ` ... ` [/INST]`.
    MistralV1,
    /// `mistral-v3`: `[INST] ` ... `[/INST]`, assistant content trimmed.
    MistralV3,
    /// `mistral-v3-tekken`: `[INST]` ... `[/INST]`, no spaces.
    MistralV3Tekken,
    /// `mistral-v7`: `[SYSTEM_PROMPT] `, `[INST] `, and a space before assistant content.
    MistralV7,
    /// `mistral-v7-tekken`: as `mistral-v7` without the spaces.
    MistralV7Tekken,
    /// `phi3`: `<|ROLE|>\nCONTENT<|end|>\n`.
    Phi3,
    /// `phi4`: `<|im_start|>ROLE<|im_sep|>CONTENT<|im_end|>`.
    Phi4,
    /// `falcon3`: `<|ROLE|>\nCONTENT\n`.
    Falcon3,
    /// `zephyr`: `<|ROLE|>\nCONTENT<|endoftext|>\n`.
    Zephyr,
    /// `monarch`: `<s>` before every message but the first.
    Monarch,
    /// `gemma`: system contents (trimmed, concatenated) go in front of the next
    /// non-model turn; `assistant` is `model`; contents trimmed.
    Gemma,
    /// `orion`: `Human: ` ... `\n\nAssistant: </s>`.
    Orion,
    /// `openchat`: `GPT4 Correct Role: `.
    OpenChat,
    /// `vicuna`: `USER: ` / `ASSISTANT: `.
    Vicuna,
    /// `vicuna-orca`: as `vicuna` with `SYSTEM: `.
    VicunaOrca,
    /// `deepseek` (deepseek-coder): `### Instruction:` / `### Response:`.
    Deepseek,
    /// `deepseek2`: `User: ` / `Assistant: `.
    Deepseek2,
    /// `deepseek3`: `<｜User｜>` / `<｜Assistant｜>`.
    Deepseek3,
    /// `deepseek-ocr`: contents concatenated.
    DeepseekOcr,
    /// `command-r`: `<|START_OF_TURN_TOKEN|><|USER_TOKEN|>`..., contents trimmed.
    CommandR,
    /// `llama3`: `<|start_header_id|>ROLE<|end_header_id|>\n\n`, contents trimmed.
    Llama3,
    /// `chatglm3`: `[gMASK]sop<|ROLE|>\n CONTENT`.
    ChatGlm3,
    /// `chatglm4`: `[gMASK]<sop><|ROLE|>\nCONTENT`.
    ChatGlm4,
    /// `glmedge`: `<|ROLE|>\nCONTENT`.
    GlmEdge,
    /// `minicpm`: `<用户>` ... `<AI>`, contents trimmed.
    MiniCpm,
    /// `exaone3`: `[|ROLE|]`, contents trimmed.
    Exaone3,
    /// `exaone4`: as `exaone3` with a `tool` role.
    Exaone4,
    /// `exaone-moe`: `<|ROLE|>\n` ... `<|endofturn|>\n`.
    ExaoneMoe,
    /// `rwkv-world`: `User: ` / `Assistant: `, contents trimmed.
    RwkvWorld,
    /// `granite`: IBM Granite 3.x.
    Granite3,
    /// `granite-4.0`: IBM Granite 4.0.
    Granite40,
    /// `granite-4.1`: IBM Granite 4.1.
    Granite41,
    /// `gigachat`.
    GigaChat,
    /// `megrez`.
    Megrez,
    /// `yandex`.
    Yandex,
    /// `bailing`: `<role>HUMAN</role>`.
    Bailing,
    /// `bailing-think`: as `bailing`, `<think>` after the generation prompt.
    BailingThink,
    /// `bailing2`: Ling 2.0.
    Bailing2,
    /// `llama4`: `<|header_start|>ROLE<|header_end|>\n\n`, contents trimmed.
    Llama4,
    /// `smolvlm`.
    SmolVlm,
    /// dots.llm1 (detected only; llama.cpp has no builtin name for it).
    Dots1,
    /// `hunyuan-moe`.
    HunyuanMoe,
    /// `gpt-oss` (OpenAI MoE, Harmony).
    GptOss,
    /// `hunyuan-dense`.
    HunyuanDense,
    /// `hunyuan-vl`.
    HunyuanVl,
    /// `kimi-k2`.
    KimiK2,
    /// `seed_oss`.
    SeedOss,
    /// `grok-2`.
    Grok2,
    /// `pangu-embedded`.
    PanguEmbedded,
    /// `solar-open`.
    SolarOpen,
}

use ChatTemplate as T;

/// llama.cpp's builtin template names (`llama_chat_builtin_templates`) and their kinds.
pub const BUILTIN_NAMES: &[(&str, ChatTemplate)] = &[
    ("bailing", T::Bailing),
    ("bailing-think", T::BailingThink),
    ("bailing2", T::Bailing2),
    ("chatglm3", T::ChatGlm3),
    ("chatglm4", T::ChatGlm4),
    ("chatml", T::ChatMl),
    ("command-r", T::CommandR),
    ("deepseek", T::Deepseek),
    ("deepseek-ocr", T::DeepseekOcr),
    ("deepseek2", T::Deepseek2),
    ("deepseek3", T::Deepseek3),
    ("exaone-moe", T::ExaoneMoe),
    ("exaone3", T::Exaone3),
    ("exaone4", T::Exaone4),
    ("falcon3", T::Falcon3),
    ("gemma", T::Gemma),
    ("gigachat", T::GigaChat),
    ("glmedge", T::GlmEdge),
    ("gpt-oss", T::GptOss),
    ("granite", T::Granite3),
    ("granite-4.0", T::Granite40),
    ("granite-4.1", T::Granite41),
    ("grok-2", T::Grok2),
    ("hunyuan-dense", T::HunyuanDense),
    ("hunyuan-moe", T::HunyuanMoe),
    ("hunyuan-vl", T::HunyuanVl),
    ("kimi-k2", T::KimiK2),
    ("llama2", T::Llama2),
    ("llama2-sys", T::Llama2Sys),
    ("llama2-sys-bos", T::Llama2SysBos),
    ("llama2-sys-strip", T::Llama2SysStrip),
    ("llama3", T::Llama3),
    ("llama4", T::Llama4),
    ("megrez", T::Megrez),
    ("minicpm", T::MiniCpm),
    ("mistral-v1", T::MistralV1),
    ("mistral-v3", T::MistralV3),
    ("mistral-v3-tekken", T::MistralV3Tekken),
    ("mistral-v7", T::MistralV7),
    ("mistral-v7-tekken", T::MistralV7Tekken),
    ("monarch", T::Monarch),
    ("openchat", T::OpenChat),
    ("orion", T::Orion),
    ("pangu-embedded", T::PanguEmbedded),
    ("phi3", T::Phi3),
    ("phi4", T::Phi4),
    ("rwkv-world", T::RwkvWorld),
    ("seed_oss", T::SeedOss),
    ("smolvlm", T::SmolVlm),
    ("solar-open", T::SolarOpen),
    ("vicuna", T::Vicuna),
    ("vicuna-orca", T::VicunaOrca),
    ("yandex", T::Yandex),
    ("zephyr", T::Zephyr),
];

/// C's `isspace` in the "C" locale.
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// llama.cpp's `trim`: C-`isspace` bytes off both ends (ASCII bytes, so the cuts are on
/// char boundaries).
fn trim(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_ascii() && c_space(c as u8))
}

impl ChatTemplate {
    /// The kind of one of llama.cpp's builtin names (`"chatml"`, `"llama3"`, ...), exactly.
    pub fn from_name(name: &str) -> Option<ChatTemplate> {
        BUILTIN_NAMES.iter().find(|(n, _)| *n == name).map(|&(_, t)| t)
    }

    /// llama.cpp's builtin template names, in its order.
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        BUILTIN_NAMES.iter().map(|&(n, _)| n)
    }

    /// llama.cpp's builtin name of this kind (`None` for [`ChatTemplate::Dots1`], which
    /// llama.cpp only detects).
    pub fn name(self) -> Option<&'static str> {
        BUILTIN_NAMES.iter().find(|(_, t)| *t == self).map(|&(n, _)| n)
    }

    /// The kind llama.cpp's `llm_chat_detect_template` picks for a template: a builtin
    /// name, else the first matching substring rule over the Jinja text. `None` where
    /// llama.cpp reports the template unsupported.
    pub fn detect(tmpl: &str) -> Option<ChatTemplate> {
        if let Some(t) = Self::from_name(tmpl) {
            return Some(t);
        }
        let has = |s: &str| tmpl.contains(s);
        let t = if has("<|im_start|>") {
            if has("<|im_sep|>") {
                T::Phi4
            } else if has("<end_of_utterance>") {
                T::SmolVlm
            } else {
                T::ChatMl
            }
        } else if tmpl.starts_with("mistral") || has("[INST]") {
            if has("[SYSTEM_PROMPT]") {
                T::MistralV7
            } else if has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]") {
                if has(" [INST]") {
                    T::MistralV1
                } else if has("\"[INST]\"") {
                    T::MistralV3Tekken
                } else {
                    T::MistralV3
                }
            } else if has("content.strip()") {
                T::Llama2SysStrip
            } else if has("bos_token + '[INST]") {
                T::Llama2SysBos
            } else if has("<<SYS>>") {
                T::Llama2Sys
            } else {
                T::Llama2
            }
        } else if has("<|assistant|>") && has("<|end|>") {
            T::Phi3
        } else if has("[gMASK]<sop>") {
            T::ChatGlm4
        } else if has("<|assistant|>") && has("<|user|>") {
            if has("<|tool_declare|>") {
                T::ExaoneMoe
            } else if has("</s>") {
                T::Falcon3
            } else {
                T::GlmEdge
            }
        } else if has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>") {
            T::GlmEdge
        } else if has("<|user|>") && has("<|endoftext|>") {
            T::Zephyr
        } else if has("bos_token + message['role']") {
            T::Monarch
        } else if has("<start_of_turn>") {
            T::Gemma
        } else if has("'\\n\\nAssistant: ' + eos_token") {
            T::Orion
        } else if has("GPT4 Correct ") {
            T::OpenChat
        } else if has("USER: ") && has("ASSISTANT: ") {
            if has("SYSTEM: ") {
                T::VicunaOrca
            } else {
                T::Vicuna
            }
        } else if has("### Instruction:") && has("<|EOT|>") {
            T::Deepseek
        } else if has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>") {
            T::CommandR
        } else if has("<|start_header_id|>") && has("<|end_header_id|>") {
            T::Llama3
        } else if has("[gMASK]sop") {
            T::ChatGlm3
        } else if has("<用户>") {
            T::MiniCpm
        } else if has("'Assistant: ' + message['content'] + eos_token") {
            T::Deepseek2
        } else if has("<｜Assistant｜>") && has("<｜User｜>") && has("<｜end▁of▁sentence｜>") {
            T::Deepseek3
        } else if has("[|system|]") && has("[|assistant|]") && has("[|endofturn|]") {
            if has("[|tool|]") {
                T::Exaone4
            } else {
                T::Exaone3
            }
        } else if has("rwkv-world") || has("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}") {
            T::RwkvWorld
        } else if has("<|start_of_role|>") {
            if has("<tool_call>") || has("<tools>") {
                if has("g4_default_system_message") {
                    T::Granite40
                } else {
                    T::Granite41
                }
            } else {
                T::Granite3
            }
        } else if has("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]") {
            T::GigaChat
        } else if has("<|role_start|>") {
            T::Megrez
        } else if has(" Ассистент:") {
            T::Yandex
        } else if has("<role>ASSISTANT</role>") && has("'HUMAN'") {
            T::Bailing
        } else if has("<role>ASSISTANT</role>") && has("\"HUMAN\"") && has("<think>") {
            T::BailingThink
        } else if has("<role>ASSISTANT</role>") && has("<role>HUMAN</role>") && has("<|role_end|>") {
            T::Bailing2
        } else if has("<|header_start|>") && has("<|header_end|>") {
            T::Llama4
        } else if has("<|endofuserprompt|>") {
            T::Dots1
        } else if has("<|extra_0|>") && has("<|extra_4|>") {
            T::HunyuanMoe
        } else if has("<|start|>") && has("<|channel|>") {
            T::GptOss
        } else if has("<｜hy_Assistant｜>") && has("<｜hy_begin▁of▁sentence｜>") {
            T::HunyuanVl
        } else if has("<｜hy_Assistant｜>") && has("<｜hy_place▁holder▁no▁3｜>") {
            T::HunyuanDense
        } else if has("<|im_assistant|>assistant<|im_middle|>") {
            T::KimiK2
        } else if has("<seed:bos>") {
            T::SeedOss
        } else if has("'Assistant: '  + message['content'] + '<|separator|>") {
            T::Grok2
        } else if has("[unused9]系统：[unused10]") {
            T::PanguEmbedded
        } else if has("<|begin|>") && has("<|end|>") && has("<|content|>") {
            T::SolarOpen
        } else {
            return None;
        };
        Some(t)
    }

    /// Append the conversation `messages` (`(role, content)` pairs, roles as llama.cpp
    /// takes them: `system`, `user`, `assistant`, ...) to `out`, formatted as
    /// `llama_chat_apply_template` formats it; `add_assistant` asks for the start of an
    /// assistant turn at the end (where the kind has one).
    pub fn apply(&self, messages: &[(&str, &str)], add_assistant: bool, out: &mut String) {
        let o = out;
        let ass = add_assistant;
        match *self {
            T::ChatMl => {
                for &(r, c) in messages {
                    push(o, &["<|im_start|>", r, "\n", c, "<|im_end|>\n"]);
                }
                tail(o, ass, "<|im_start|>assistant\n");
            }
            T::MistralV7 | T::MistralV7Tekken => {
                let sp = if *self == T::MistralV7 { " " } else { "" };
                for &(r, c) in messages {
                    match r {
                        "system" => push(o, &["[SYSTEM_PROMPT]", sp, c, "[/SYSTEM_PROMPT]"]),
                        "user" => push(o, &["[INST]", sp, c, "[/INST]"]),
                        _ => push(o, &[sp, c, "</s>"]),
                    }
                }
            }
            T::MistralV1 | T::MistralV3 | T::MistralV3Tekken => {
                let lead = if *self == T::MistralV1 { " " } else { "" };
                let trail = if *self == T::MistralV3Tekken { "" } else { " " };
                let trim_assistant = *self == T::MistralV3;
                let mut inside = false;
                for &(r, c) in messages {
                    if !inside {
                        push(o, &[lead, "[INST]", trail]);
                        inside = true;
                    }
                    match r {
                        "system" => push(o, &[c, "\n\n"]),
                        "user" => push(o, &[c, lead, "[/INST]"]),
                        _ => {
                            let c = if trim_assistant { trim(c) } else { c };
                            push(o, &[trail, c, "</s>"]);
                            inside = false;
                        }
                    }
                }
            }
            T::Llama2 | T::Llama2Sys | T::Llama2SysBos | T::Llama2SysStrip => {
                let sys_tags = *self != T::Llama2;
                let bos_inside = *self == T::Llama2SysBos;
                let strip = *self == T::Llama2SysStrip;
                let mut inside = true;
                o.push_str("[INST] ");
                for &(r, c) in messages {
                    let c = if strip { trim(c) } else { c };
                    if !inside {
                        inside = true;
                        o.push_str(if bos_inside { "<s>[INST] " } else { "[INST] " });
                    }
                    match r {
                        "system" if sys_tags => push(o, &["<<SYS>>\n", c, "\n<</SYS>>\n\n"]),
                        "system" => push(o, &[c, "\n"]),
                        "user" => push(o, &[c, " [/INST]"]),
                        _ => {
                            push(o, &[c, "</s>"]);
                            inside = false;
                        }
                    }
                }
            }
            T::Phi3 => {
                for &(r, c) in messages {
                    push(o, &["<|", r, "|>\n", c, "<|end|>\n"]);
                }
                tail(o, ass, "<|assistant|>\n");
            }
            T::Phi4 => {
                for &(r, c) in messages {
                    push(o, &["<|im_start|>", r, "<|im_sep|>", c, "<|im_end|>"]);
                }
                tail(o, ass, "<|im_start|>assistant<|im_sep|>");
            }
            T::Falcon3 => {
                for &(r, c) in messages {
                    push(o, &["<|", r, "|>\n", c, "\n"]);
                }
                tail(o, ass, "<|assistant|>\n");
            }
            T::Zephyr => {
                for &(r, c) in messages {
                    push(o, &["<|", r, "|>\n", c, "<|endoftext|>\n"]);
                }
                tail(o, ass, "<|assistant|>\n");
            }
            T::Monarch => {
                for (i, &(r, c)) in messages.iter().enumerate() {
                    push(o, &[if i == 0 { "" } else { "<s>" }, r, "\n", c, "</s>\n"]);
                }
                tail(o, ass, "<s>assistant\n");
            }
            T::Gemma => {
                let mut system = String::new();
                for &(r, c) in messages {
                    if r == "system" {
                        system.push_str(trim(c));
                        continue;
                    }
                    let r = if r == "assistant" { "model" } else { r };
                    push(o, &["<start_of_turn>", r, "\n"]);
                    if !system.is_empty() && r != "model" {
                        push(o, &[&system, "\n\n"]);
                        system.clear();
                    }
                    push(o, &[trim(c), "<end_of_turn>\n"]);
                }
                tail(o, ass, "<start_of_turn>model\n");
            }
            T::Orion => {
                let mut system = String::new();
                for &(r, c) in messages {
                    match r {
                        "system" => system.push_str(c),
                        "user" => {
                            o.push_str("Human: ");
                            if !system.is_empty() {
                                push(o, &[&system, "\n\n"]);
                                system.clear();
                            }
                            push(o, &[c, "\n\nAssistant: </s>"]);
                        }
                        _ => push(o, &[c, "</s>"]),
                    }
                }
            }
            T::OpenChat => {
                for &(r, c) in messages {
                    if r == "system" {
                        push(o, &[c, "<|end_of_turn|>"]);
                    } else {
                        o.push_str("GPT4 Correct ");
                        let mut chars = r.chars();
                        if let Some(first) = chars.next() {
                            // C `toupper` of the first byte: ASCII only
                            o.push(first.to_ascii_uppercase());
                        }
                        push(o, &[chars.as_str(), ": ", c, "<|end_of_turn|>"]);
                    }
                }
                tail(o, ass, "GPT4 Correct Assistant:");
            }
            T::Vicuna | T::VicunaOrca => {
                for &(r, c) in messages {
                    match r {
                        "system" if *self == T::VicunaOrca => push(o, &["SYSTEM: ", c, "\n"]),
                        "system" => push(o, &[c, "\n\n"]),
                        "user" => push(o, &["USER: ", c, "\n"]),
                        "assistant" => push(o, &["ASSISTANT: ", c, "</s>\n"]),
                        _ => {}
                    }
                }
                tail(o, ass, "ASSISTANT:");
            }
            T::Deepseek => {
                for &(r, c) in messages {
                    match r {
                        "system" => o.push_str(c),
                        "user" => push(o, &["### Instruction:\n", c, "\n"]),
                        "assistant" => push(o, &["### Response:\n", c, "\n<|EOT|>\n"]),
                        _ => {}
                    }
                }
                tail(o, ass, "### Response:\n");
            }
            T::CommandR => {
                for &(r, c) in messages {
                    let tag = match r {
                        "system" => "<|SYSTEM_TOKEN|>",
                        "user" => "<|USER_TOKEN|>",
                        "assistant" => "<|CHATBOT_TOKEN|>",
                        _ => continue,
                    };
                    push(o, &["<|START_OF_TURN_TOKEN|>", tag, trim(c), "<|END_OF_TURN_TOKEN|>"]);
                }
                tail(o, ass, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
            }
            T::Llama3 => {
                for &(r, c) in messages {
                    push(o, &["<|start_header_id|>", r, "<|end_header_id|>\n\n", trim(c), "<|eot_id|>"]);
                }
                tail(o, ass, "<|start_header_id|>assistant<|end_header_id|>\n\n");
            }
            T::ChatGlm3 => {
                o.push_str("[gMASK]sop");
                for &(r, c) in messages {
                    push(o, &["<|", r, "|>\n ", c]);
                }
                tail(o, ass, "<|assistant|>");
            }
            T::ChatGlm4 => {
                o.push_str("[gMASK]<sop>");
                for &(r, c) in messages {
                    push(o, &["<|", r, "|>\n", c]);
                }
                tail(o, ass, "<|assistant|>\n");
            }
            T::GlmEdge => {
                for &(r, c) in messages {
                    push(o, &["<|", r, "|>\n", c]);
                }
                tail(o, ass, "<|assistant|>");
            }
            T::MiniCpm => {
                for &(r, c) in messages {
                    if r == "user" {
                        push(o, &["<用户>", trim(c), "<AI>"]);
                    } else {
                        o.push_str(trim(c));
                    }
                }
            }
            T::Deepseek2 => {
                for &(r, c) in messages {
                    match r {
                        "system" => push(o, &[c, "\n\n"]),
                        "user" => push(o, &["User: ", c, "\n\n"]),
                        "assistant" => push(o, &["Assistant: ", c, "<｜end▁of▁sentence｜>"]),
                        _ => {}
                    }
                }
                tail(o, ass, "Assistant:");
            }
            T::Deepseek3 => {
                for &(r, c) in messages {
                    match r {
                        "system" => push(o, &[c, "\n\n"]),
                        "user" => push(o, &["<｜User｜>", c]),
                        "assistant" => push(o, &["<｜Assistant｜>", c, "<｜end▁of▁sentence｜>"]),
                        _ => {}
                    }
                }
                tail(o, ass, "<｜Assistant｜>");
            }
            T::DeepseekOcr => {
                for &(_, c) in messages {
                    o.push_str(c);
                }
            }
            T::Exaone3 | T::Exaone4 => {
                for &(r, c) in messages {
                    let c = trim(c);
                    match r {
                        "system" => push(o, &["[|system|]", c, "[|endofturn|]\n"]),
                        "user" => push(o, &["[|user|]", c, "\n"]),
                        "assistant" => push(o, &["[|assistant|]", c, "[|endofturn|]\n"]),
                        "tool" if *self == T::Exaone4 => push(o, &["[|tool|]", c, "[|endofturn|]\n"]),
                        _ => {}
                    }
                }
                tail(o, ass, "[|assistant|]");
            }
            T::ExaoneMoe => {
                for &(r, c) in messages {
                    if matches!(r, "system" | "user" | "assistant" | "tool") {
                        push(o, &["<|", r, "|>\n", trim(c), "<|endofturn|>\n"]);
                    }
                }
                tail(o, ass, "<|assistant|>\n");
            }
            T::RwkvWorld => {
                for (i, &(r, c)) in messages.iter().enumerate() {
                    match r {
                        "system" => push(o, &["System: ", trim(c), "\n\n"]),
                        "user" => {
                            push(o, &["User: ", trim(c), "\n\n"]);
                            if i + 1 == messages.len() {
                                o.push_str("Assistant:");
                            }
                        }
                        "assistant" => push(o, &["Assistant: ", trim(c), "\n\n"]),
                        _ => {}
                    }
                }
            }
            T::Granite3 => {
                for &(r, c) in messages {
                    push(o, &["<|start_of_role|>", r, "<|end_of_role|>"]);
                    if r == "assistant_tool_call" {
                        o.push_str("<|tool_call|>");
                    }
                    push(o, &[c, "<|end_of_text|>\n"]);
                }
                tail(o, ass, "<|start_of_role|>assistant<|end_of_role|>");
            }
            T::Granite40 | T::Granite41 => {
                for &(r, c) in messages {
                    if r == "assistant_tool_call" {
                        o.push_str("<|start_of_role|>assistant<|end_of_role|><|tool_call|>");
                    } else {
                        push(o, &["<|start_of_role|>", r, "<|end_of_role|>"]);
                    }
                    push(o, &[c, "<|end_of_text|>\n"]);
                }
                tail(o, ass, "<|start_of_role|>assistant<|end_of_role|>");
            }
            T::GigaChat => {
                let rest = match messages {
                    [("system", s), rest @ ..] => {
                        push(o, &["<s>", s, "<|message_sep|>"]);
                        rest
                    }
                    _ => {
                        o.push_str("<s>");
                        messages
                    }
                };
                for &(r, c) in rest {
                    match r {
                        "user" => push(o, &["user<|role_sep|>", c, "<|message_sep|>", "available functions<|role_sep|>[]<|message_sep|>"]),
                        "assistant" => push(o, &["assistant<|role_sep|>", c, "<|message_sep|>"]),
                        _ => {}
                    }
                }
                tail(o, ass, "assistant<|role_sep|>");
            }
            T::Megrez => {
                for &(r, c) in messages {
                    push(o, &["<|role_start|>", r, "<|role_end|>", c, "<|turn_end|>"]);
                }
                tail(o, ass, "<|role_start|>assistant<|role_end|>");
            }
            T::Yandex => {
                for &(r, c) in messages {
                    match r {
                        "user" => push(o, &[" Пользователь: ", c, "\n\n"]),
                        "assistant" => push(o, &[" Ассистент: ", c, "\n\n"]),
                        _ => {}
                    }
                }
                tail(o, ass, " Ассистент:[SEP]");
            }
            T::Bailing | T::BailingThink | T::Bailing2 => {
                if *self == T::Bailing2 && !matches!(messages.first(), Some(("system", _))) {
                    o.push_str("<role>SYSTEM</role>detailed thinking off<|role_end|>");
                }
                for &(r, c) in messages {
                    o.push_str("<role>");
                    if r == "user" {
                        o.push_str("HUMAN");
                    } else {
                        o.extend(r.chars().map(|ch| ch.to_ascii_uppercase()));
                    }
                    push(o, &["</role>", c]);
                    if *self == T::Bailing2 {
                        o.push_str("<|role_end|>");
                    }
                }
                if ass {
                    o.push_str("<role>ASSISTANT</role>");
                    if *self == T::BailingThink {
                        o.push_str("<think>");
                    }
                }
            }
            T::Llama4 => {
                for &(r, c) in messages {
                    push(o, &["<|header_start|>", r, "<|header_end|>\n\n", trim(c), "<|eot|>"]);
                }
                tail(o, ass, "<|header_start|>assistant<|header_end|>\n\n");
            }
            T::SmolVlm => {
                o.push_str("<|im_start|>");
                for &(r, c) in messages {
                    match r {
                        "system" => push(o, &[c, "\n\n"]),
                        "user" => push(o, &["User: ", c, "<end_of_utterance>\n"]),
                        _ => push(o, &["Assistant: ", c, "<end_of_utterance>\n"]),
                    }
                }
                tail(o, ass, "Assistant:");
            }
            T::Dots1 => {
                for &(r, c) in messages {
                    match r {
                        "system" => push(o, &["<|system|>", c, "<|endofsystem|>"]),
                        "user" => push(o, &["<|userprompt|>", c, "<|endofuserprompt|>"]),
                        _ => push(o, &["<|response|>", c, "<|endofresponse|>"]),
                    }
                }
                tail(o, ass, "<|response|>");
            }
            T::HunyuanMoe => {
                for &(r, c) in messages {
                    match r {
                        "system" => push(o, &["<|startoftext|>", c, "<|extra_4|>"]),
                        "assistant" => push(o, &[c, "<|eos|>"]),
                        _ => push(o, &["<|startoftext|>", c, "<|extra_0|>"]),
                    }
                }
            }
            T::GptOss => {
                for &(r, c) in messages {
                    let end = if r == "assistant" { "<|return|>" } else { "<|end|>" };
                    push(o, &["<|start|>", r, "<|message|>", c, end]);
                }
                tail(o, ass, "<|start|>assistant");
            }
            T::HunyuanDense => {
                for (i, &(r, c)) in messages.iter().enumerate() {
                    if i == 0 && r == "system" {
                        push(o, &[c, "<｜hy_place▁holder▁no▁3｜>"]);
                    }
                    match r {
                        "assistant" => push(o, &["<｜hy_Assistant｜>", c, "<｜hy_place▁holder▁no▁2｜>"]),
                        "user" => push(o, &["<｜hy_User｜>", c, "<｜hy_Assistant｜>"]),
                        _ => {}
                    }
                }
            }
            T::HunyuanVl => {
                o.push_str("<｜hy_begin▁of▁sentence｜>");
                for (i, &(r, c)) in messages.iter().enumerate() {
                    if i == 0 && r == "system" {
                        push(o, &[c, "<｜hy_place▁holder▁no▁3｜>"]);
                        continue;
                    }
                    match r {
                        "user" => push(o, &[c, "<｜hy_User｜>"]),
                        "assistant" => push(o, &[c, "<｜hy_Assistant｜>"]),
                        _ => {}
                    }
                }
            }
            T::KimiK2 => {
                for &(r, c) in messages {
                    let head = match r {
                        "system" => "<|im_system|>system<|im_middle|>",
                        "user" => "<|im_user|>user<|im_middle|>",
                        "assistant" => "<|im_assistant|>assistant<|im_middle|>",
                        "tool" => "<|im_system|>tool<|im_middle|>",
                        _ => "",
                    };
                    push(o, &[head, c, "<|im_end|>"]);
                }
                tail(o, ass, "<|im_assistant|>assistant<|im_middle|>");
            }
            T::SeedOss => {
                for &(r, c) in messages {
                    let c = if r == "assistant" { trim(c) } else { c };
                    push(o, &["<seed:bos>", r, "\n", c, "<seed:eos>"]);
                }
                tail(o, ass, "<seed:bos>assistant\n");
            }
            T::Grok2 => {
                for &(r, c) in messages {
                    match r {
                        "system" => push(o, &["System: ", trim(c), "<|separator|>\n\n"]),
                        "user" => push(o, &["Human: ", trim(c), "<|separator|>\n\n"]),
                        "assistant" => push(o, &["Assistant: ", c, "<|separator|>\n\n"]),
                        _ => {}
                    }
                }
                tail(o, ass, "Assistant:");
            }
            T::PanguEmbedded => {
                for (i, &(r, c)) in messages.iter().enumerate() {
                    if i == 0 && r != "system" {
                        o.push_str("[unused9]系统：[unused10]");
                    }
                    let head = match r {
                        "system" => "[unused9]系统：",
                        "user" => "[unused9]用户：",
                        "assistant" => "[unused9]助手：",
                        "tool" => "[unused9]工具：",
                        "function" => "[unused9]方法：",
                        _ => continue,
                    };
                    push(o, &[head, c, "[unused10]"]);
                }
                tail(o, ass, "[unused9]助手：");
            }
            T::SolarOpen => {
                for &(r, c) in messages {
                    push(o, &["<|begin|>", r, "<|content|>", c, "<|end|>"]);
                }
                tail(o, ass, "<|begin|>assistant");
            }
        }
    }
}

fn push(out: &mut String, parts: &[&str]) {
    for p in parts {
        out.push_str(p);
    }
}

fn tail(out: &mut String, add_assistant: bool, s: &str) {
    if add_assistant {
        out.push_str(s);
    }
}
