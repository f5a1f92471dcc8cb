//! The chat-template golden file: llama.cpp's `llama_chat_apply_template` output for a
//! set of conversations, per template (made by `tests/examples/chat_golden.rs`, checked
//! by `tests/tests/chat_template.rs`).
//!
//! The file is a header line, then records, each `KEY LEN\n` followed by exactly `LEN`
//! bytes of value and a `\n` (so values keep every newline and space):
//!
//! ```text
//! builtin   a name llama_chat_builtin_templates lists
//! template  a label starting a template block: name:NAME, gguf:FILE or synthetic:N
//! tmpl      the template string handed to llama.cpp
//! detected  builtin names whose output equals this template's in every case, comma
//!           separated; `unknown` where llama.cpp refused the template; `none` where
//!           it formatted but no builtin name matched
//! case      add_ass=0 or add_ass=1: starts a case of the current template
//! role      a message's role (role/content records alternate, in order)
//! content   a message's content
//! out       llama.cpp's output for the case (absent where it returned -1)
//! ```

/// File name of the golden file in this crate.
pub const CHAT_GOLDEN: &str = "golden/chat-templates.txt";

/// Header line of the golden file.
pub const HEADER: &str =
    "lutra chat-template golden: llama.cpp (llama-cpp-sys-2 0.1.161) llama_chat_apply_template; format in tests/src/chat.rs\n";

/// One conversation of a case: `(role, content)` pairs.
pub type Conversation = Vec<(String, String)>;

/// One formatting of one conversation.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `add_ass` of the call.
    pub add_ass: bool,
    /// The messages.
    pub messages: Conversation,
    /// llama.cpp's output; `None` where it returned -1.
    pub out: Option<String>,
}

/// The cases of one template string.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateCases {
    /// `name:NAME`, `gguf:FILE` or `synthetic:N`.
    pub label: String,
    /// The template string given to llama.cpp.
    pub tmpl: String,
    /// What the template was detected as, by output (see the module docs).
    pub detected: String,
    /// The cases.
    pub cases: Vec<Case>,
}

/// A parsed golden file.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ChatGolden {
    /// llama.cpp's builtin template names.
    pub builtins: Vec<String>,
    /// Every template block.
    pub templates: Vec<TemplateCases>,
}

/// The conversations every template is run on (each with `add_ass` false and true).
pub fn conversations() -> Vec<Conversation> {
    let c = |m: &[(&str, &str)]| m.iter().map(|&(r, c)| (r.to_owned(), c.to_owned())).collect::<Conversation>();
    vec![
        c(&[("user", "Hello")]),
        c(&[("system", "You are a helpful assistant."), ("user", "Hi there")]),
        c(&[("system", "Be brief."), ("user", "What is 2+2?"), ("assistant", "4"), ("user", "And 3+3?")]),
        c(&[("user", "Hi"), ("assistant", "Hello! How can I help?")]),
        c(&[
            ("system", " \n system with spaces \t\n"),
            ("user", "\n  hello  \n"),
            ("assistant", "  reply\n\n"),
            ("user", " \u{b}\u{c}vt-ff\r\n"),
        ]),
        c(&[("user", "Grüß dich — 你好 🌍\u{a0}"), ("assistant", "\u{a0}ответ\u{3000}"), ("user", "日本語\u{2028}")]),
        c(&[]),
        c(&[("system", "")]),
        c(&[("system", ""), ("user", ""), ("assistant", ""), ("user", "")]),
        c(&[("user", "a"), ("system", "late system"), ("user", "b"), ("system", "s1"), ("system", "s2"), ("assistant", "c")]),
        c(&[("system", "s"), ("user", "u"), ("tool", "t"), ("assistant", "a"), ("assistant_tool_call", "x"), ("function", "f")]),
        c(&[("assistant", "first"), ("model", "m"), ("User", "capital"), ("", "empty role"), ("ümlaut", "role")]),
    ]
}

fn record(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    out.extend_from_slice(format!("{key} {}\n", value.len()).as_bytes());
    out.extend_from_slice(value);
    out.push(b'\n');
}

impl ChatGolden {
    /// Serializes in the golden format.
    pub fn write(&self) -> Vec<u8> {
        let mut out = HEADER.as_bytes().to_vec();
        for b in &self.builtins {
            record(&mut out, "builtin", b.as_bytes());
        }
        for t in &self.templates {
            record(&mut out, "template", t.label.as_bytes());
            record(&mut out, "tmpl", t.tmpl.as_bytes());
            record(&mut out, "detected", t.detected.as_bytes());
            for c in &t.cases {
                record(&mut out, "case", if c.add_ass { b"add_ass=1" } else { b"add_ass=0" });
                for (r, m) in &c.messages {
                    record(&mut out, "role", r.as_bytes());
                    record(&mut out, "content", m.as_bytes());
                }
                if let Some(o) = &c.out {
                    record(&mut out, "out", o.as_bytes());
                }
            }
        }
        out
    }

    /// Parses the golden format; every record is checked.
    pub fn parse(bytes: &[u8]) -> Result<ChatGolden, String> {
        let rest = bytes.strip_prefix(HEADER.as_bytes()).ok_or("missing header line")?;
        let mut g = ChatGolden::default();
        let mut pos = 0usize;
        let mut pending_role: Option<String> = None;
        while pos < rest.len() {
            let nl = rest[pos..].iter().position(|&b| b == b'\n').ok_or_else(|| format!("byte {pos}: unterminated record header"))?;
            let head = std::str::from_utf8(&rest[pos..pos + nl]).map_err(|e| format!("byte {pos}: {e}"))?;
            let (key, len) = head.split_once(' ').ok_or_else(|| format!("byte {pos}: bad record header {head:?}"))?;
            let len: usize = len.parse().map_err(|e| format!("byte {pos}: {head:?}: {e}"))?;
            let start = pos + nl + 1;
            let end = start.checked_add(len).filter(|&e| e < rest.len()).ok_or_else(|| format!("byte {pos}: {key} runs past the end"))?;
            if rest[end] != b'\n' {
                return Err(format!("byte {pos}: {key} value not followed by a newline"));
            }
            let value = String::from_utf8(rest[start..end].to_vec()).map_err(|e| format!("byte {pos}: {key}: {e}"))?;
            pos = end + 1;
            let err = |what: &str| format!("byte {pos}: `{key}` {what}");
            let template = g.templates.last_mut();
            match key {
                "builtin" => g.builtins.push(value),
                "template" => {
                    g.templates.push(TemplateCases { label: value, tmpl: String::new(), detected: String::new(), cases: Vec::new() })
                }
                "tmpl" => template.ok_or_else(|| err("outside a template"))?.tmpl = value,
                "detected" => template.ok_or_else(|| err("outside a template"))?.detected = value,
                "case" => {
                    let add_ass = match value.as_str() {
                        "add_ass=0" => false,
                        "add_ass=1" => true,
                        _ => return Err(err("is not add_ass=0|1")),
                    };
                    template.ok_or_else(|| err("outside a template"))?.cases.push(Case { add_ass, messages: Vec::new(), out: None });
                }
                "role" if pending_role.is_none() => pending_role = Some(value),
                "content" => {
                    let role = pending_role.take().ok_or_else(|| err("without a role"))?;
                    let case = template.and_then(|t| t.cases.last_mut()).ok_or_else(|| err("outside a case"))?;
                    if case.out.is_some() {
                        return Err(err("after the case's output"));
                    }
                    case.messages.push((role, value));
                }
                "out" => {
                    let case = template.and_then(|t| t.cases.last_mut()).ok_or_else(|| err("outside a case"))?;
                    if case.out.replace(value).is_some() {
                        return Err(err("twice"));
                    }
                }
                _ => return Err(err("unexpected")),
            }
        }
        if pending_role.is_some() {
            return Err("a role without content at the end".into());
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let g = ChatGolden {
            builtins: vec!["chatml".into()],
            templates: vec![TemplateCases {
                label: "name:chatml".into(),
                tmpl: "chatml".into(),
                detected: "chatml".into(),
                cases: vec![
                    Case { add_ass: true, messages: vec![("user".into(), " a\nb \n".into())], out: Some("x\n\n".into()) },
                    Case { add_ass: false, messages: vec![], out: None },
                ],
            }],
        };
        assert_eq!(ChatGolden::parse(&g.write()), Ok(g));
        assert!(ChatGolden::parse(b"nope").is_err());
    }
}
