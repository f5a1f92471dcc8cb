//! JSON output on request: a byte-level matcher for JSON text that follows a
//! [`Schema`] (any JSON object, or a subset of JSON Schema), so sampling can refuse every
//! token that would make the text invalid ([`crate::engine::Generation::with_constraint`]).
//!
//! The matcher accepts a byte when the text so far can still grow into a document the
//! schema allows; it is complete when the text is one. After the document it accepts
//! nothing, so the end token is the only choice left. Whitespace between tokens is
//! allowed but runs are capped ([`MAX_WHITESPACE_RUN`], one line break) so a model
//! cannot stall in it.
//! Objects with declared properties are written in the order declared: each optional
//! property may be left out, each required one may not, and no other key is allowed.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

/// What the document (or a part of it) must be.
#[derive(Debug, Clone, PartialEq)]
pub enum Schema {
    /// Any JSON value.
    Any,
    /// Any JSON object (OpenAI's `json_object`).
    AnyObject,
    String,
    /// Any JSON number.
    Number,
    /// A number without fraction or exponent.
    Integer,
    Boolean,
    Null,
    /// One of these values, each written as JSON text (`"red"`, `3`, `null`).
    Enum(Vec<String>),
    /// An array whose items are each `items`.
    Array(Box<Schema>),
    /// An object with these properties, in this order, `required` ones present.
    Object {
        properties: Vec<Property>,
    },
}

/// A declared property of an object schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Property {
    pub name: String,
    pub schema: Schema,
    pub required: bool,
}

/// A schema the matcher cannot follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaError {
    /// More alternatives (enum values, or properties of one object) than the 64 one
    /// matcher frame tracks.
    TooManyAlternatives(usize),
    /// An enum with no value, which no document satisfies.
    EmptyEnum,
    /// An enum value that is not JSON text (a string value must be written with its quotes).
    BadEnumValue(String),
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaError::TooManyAlternatives(n) => write!(f, "{n} alternatives (enum values or properties of one object); at most 64"),
            SchemaError::EmptyEnum => write!(f, "an enum without values"),
            SchemaError::BadEnumValue(v) => write!(f, "enum value {v:?} is not JSON text"),
            SchemaError::TooDeep => write!(f, "the schema nests deeper than {MAX_DEPTH} levels"),
        }
    }
}

/// Deepest nesting of a schema, and of a document under [`Schema::Any`].
pub const MAX_DEPTH: usize = 32;
/// Longest run of whitespace bytes the matcher accepts between tokens of JSON; a run
/// holds at most one line break (`\n` or `\r\n`), as llama.cpp's JSON grammar allows.
pub const MAX_WHITESPACE_RUN: u8 = 24;

/// One node of the compiled schema.
#[derive(Debug, Clone)]
enum Node {
    Any,
    AnyObject,
    String,
    Number,
    Integer,
    Boolean,
    Null,
    /// Index into `Compiled::literals`.
    Enum(u16),
    Array(u16),
    /// `keys`: index into `literals` (each key with its quotes); `values[i]`, `required[i]`.
    Object {
        keys: u16,
        values: Vec<u16>,
        required: u64,
    },
}

#[derive(Debug)]
struct Compiled {
    nodes: Vec<Node>,
    /// Lists of alternatives, each byte strings the text must match exactly.
    literals: Vec<Vec<Vec<u8>>>,
}

/// Literal lists every schema has: `true`/`false`, `null`, `true`/`false`/`null`.
const BOOLEAN: u16 = 0;
const NULL: u16 = 1;
const ANY_LITERAL: u16 = 2;

impl Compiled {
    fn new(schema: &Schema) -> Result<Compiled, SchemaError> {
        let lit = |s: &[&str]| s.iter().map(|s| s.as_bytes().to_vec()).collect();
        let mut c =
            Compiled { nodes: vec![Node::Any], literals: vec![lit(&["true", "false"]), lit(&["null"]), lit(&["true", "false", "null"])] };
        c.add(schema, 0)?;
        Ok(c)
    }

    /// Adds `schema` and its children; returns its index (the root is 1, after `Any`).
    fn add(&mut self, schema: &Schema, depth: usize) -> Result<u16, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(SchemaError::TooDeep);
        }
        let id = self.nodes.len() as u16;
        self.nodes.push(Node::Any);
        let node = match schema {
            Schema::Any => Node::Any,
            Schema::AnyObject => Node::AnyObject,
            Schema::String => Node::String,
            Schema::Number => Node::Number,
            Schema::Integer => Node::Integer,
            Schema::Boolean => Node::Boolean,
            Schema::Null => Node::Null,
            Schema::Enum(values) => {
                if values.is_empty() {
                    return Err(SchemaError::EmptyEnum);
                }
                if values.len() > 64 {
                    return Err(SchemaError::TooManyAlternatives(values.len()));
                }
                for v in values {
                    if !is_json_value(v.as_bytes()) {
                        return Err(SchemaError::BadEnumValue(v.clone()));
                    }
                }
                // written exactly as given, so without the whitespace around it
                self.literals.push(values.iter().map(|v| v.trim_matches([' ', '\t', '\n', '\r']).as_bytes().to_vec()).collect());
                Node::Enum(self.literals.len() as u16 - 1)
            }
            Schema::Array(items) => Node::Array(self.add(items, depth + 1)?),
            Schema::Object { properties } => {
                if properties.len() > 64 {
                    return Err(SchemaError::TooManyAlternatives(properties.len()));
                }
                let keys: Vec<Vec<u8>> = properties.iter().map(|p| quote(&p.name)).collect();
                self.literals.push(keys);
                let keys = self.literals.len() as u16 - 1;
                let mut values = Vec::with_capacity(properties.len());
                let mut required = 0u64;
                for (i, p) in properties.iter().enumerate() {
                    values.push(self.add(&p.schema, depth + 1)?);
                    required |= u64::from(p.required) << i;
                }
                Node::Object { keys, values, required }
            }
        };
        self.nodes[id as usize] = node;
        Ok(id)
    }
}

/// `s` as a JSON string literal, quotes included.
fn quote(s: &str) -> Vec<u8> {
    let mut out = vec![b'"'];
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(c as usize) >> 4]);
                out.push(HEX[(c as usize) & 15]);
            }
            c => {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
    out
}

/// Whether `text` is one JSON value (whitespace around it allowed).
fn is_json_value(text: &[u8]) -> bool {
    let Ok(mut m) = JsonMatcher::new(&Schema::Any) else { return false };
    let trimmed = text.trim_ascii();
    m.advance(trimmed) && m.is_complete()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Start,
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

impl Num {
    /// Whether the number may end here.
    fn complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::Exp)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ObjStep {
    /// After `{`: a key or `}`.
    Open,
    /// After `,`: a key.
    Key,
    Colon,
    /// After the value: `,` or `}`.
    AfterValue,
}

#[derive(Debug, Clone, Copy)]
enum Frame {
    /// A value of `node` is next (whitespace first).
    Value {
        node: u16,
    },
    /// Inside a string; `hex`: hex digits of a `\u` escape still to come; `utf8`:
    /// continuation bytes of a character still to come, the next one in `next`'s range.
    Str {
        escaped: bool,
        hex: u8,
        utf8: u8,
        next: Utf8Next,
    },
    Num {
        state: Num,
        integer: bool,
    },
    /// Matching `literals[list]`: `candidates` still possible after `matched` bytes.
    Lit {
        list: u16,
        candidates: u64,
        matched: u16,
    },
    /// `next`: the first declared property that may still come; `key`: the property
    /// whose value is being read.
    Obj {
        node: u16,
        step: ObjStep,
        next: u8,
        key: u8,
    },
    /// `item`: an item (not `]`) must come next, after `,`.
    Arr {
        node: u16,
        first: bool,
        item: bool,
    },
}

/// The range of the next continuation byte of a UTF-8 character: what
/// `core::str::from_utf8` accepts (no overlong forms, surrogates or code points past
/// U+10FFFF).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Utf8Next {
    Any,
    /// After E0: A0..=BF.
    AfterE0,
    /// After ED: 80..=9F.
    AfterEd,
    /// After F0: 90..=BF.
    AfterF0,
    /// After F4: 80..=8F.
    AfterF4,
}

impl Utf8Next {
    fn admits(self, b: u8) -> bool {
        match self {
            Utf8Next::Any => (0x80..=0xbf).contains(&b),
            Utf8Next::AfterE0 => (0xa0..=0xbf).contains(&b),
            Utf8Next::AfterEd => (0x80..=0x9f).contains(&b),
            Utf8Next::AfterF0 => (0x90..=0xbf).contains(&b),
            Utf8Next::AfterF4 => (0x80..=0x8f).contains(&b),
        }
    }
}

const TEXT: Frame = Frame::Str { escaped: false, hex: 0, utf8: 0, next: Utf8Next::Any };

/// What a frame did with a byte.
enum Step {
    Consumed,
    /// A new top frame takes the byte.
    Retry,
    /// The frame is complete and took the byte (a closing quote or bracket, a literal's
    /// last byte); `Some(i)`: the literal alternative matched.
    Done(Option<u8>),
    /// The frame was already complete: the byte belongs to its parent.
    Pass(Option<u8>),
    Reject,
}

/// The node every compiled schema has at 0: `Any`, for the values inside `Any` and
/// `AnyObject` documents. The root is node 1.
const ANY_NODE: u16 = 0;
const ROOT: u16 = 1;

/// The bits `from..to` (to ≤ 64).
fn bits(from: usize, to: usize) -> u64 {
    let below = |n: usize| if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    below(to) & !below(from)
}

/// The state of a JSON document being written (see the module docs).
#[derive(Debug, Clone)]
pub struct JsonMatcher {
    schema: alloc::sync::Arc<Compiled>,
    stack: Vec<Frame>,
    done: bool,
    /// The current run of whitespace: bytes, and whether it has a `\r` / a `\n`.
    whitespace: u8,
    line_break: (bool, bool),
}

impl JsonMatcher {
    /// A matcher at the start of a document of `schema`.
    pub fn new(schema: &Schema) -> Result<JsonMatcher, SchemaError> {
        let schema = alloc::sync::Arc::new(Compiled::new(schema)?);
        let mut stack = Vec::with_capacity(MAX_DEPTH + 4);
        stack.push(Frame::Value { node: ROOT });
        Ok(JsonMatcher { schema, stack, done: false, whitespace: 0, line_break: (false, false) })
    }

    /// Whether the text so far is a whole document.
    pub fn is_complete(&self) -> bool {
        self.done || matches!(self.stack.as_slice(), [Frame::Num { state, .. }] if state.complete())
    }

    /// Whether `bytes` may follow, without taking them; `scratch` is working memory
    /// (a clone of any matcher), so checking a whole vocabulary allocates nothing.
    pub fn allows(&self, bytes: &[u8], scratch: &mut JsonMatcher) -> bool {
        scratch.stack.clone_from(&self.stack);
        scratch.schema.clone_from(&self.schema);
        scratch.done = self.done;
        scratch.whitespace = self.whitespace;
        scratch.line_break = self.line_break;
        scratch.advance(bytes)
    }

    /// Takes `bytes`; false (and the matcher in an unspecified state) if the text can no
    /// longer become a document.
    pub fn advance(&mut self, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.push(b))
    }

    fn push(&mut self, b: u8) -> bool {
        if self.done {
            return false;
        }
        let whitespace = matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        let in_string = matches!(self.stack.last(), Some(Frame::Str { .. }));
        if whitespace && !in_string {
            let (cr, lf) = self.line_break;
            let refused = match b {
                b'\r' => cr || lf,
                b'\n' => lf,
                _ => cr && !lf,
            };
            if refused || self.whitespace >= MAX_WHITESPACE_RUN {
                return false;
            }
            self.whitespace += 1;
            self.line_break = (cr || b == b'\r', lf || b == b'\n');
        } else {
            self.whitespace = 0;
            self.line_break = (false, false);
        }
        loop {
            let Some(&top) = self.stack.last() else { return false };
            match step(&self.schema, &mut self.stack, top, b, whitespace) {
                Step::Consumed => return true,
                Step::Retry => continue,
                Step::Reject => return false,
                Step::Done(matched) => {
                    self.stack.pop();
                    if self.stack.is_empty() {
                        self.done = true;
                    } else {
                        self.child_done(matched);
                    }
                    return true;
                }
                Step::Pass(matched) => {
                    self.stack.pop();
                    if self.stack.is_empty() {
                        // a root number ends with the document: nothing may follow it
                        self.done = true;
                        return false;
                    }
                    self.child_done(matched);
                }
            }
        }
    }

    /// The top frame's child is complete (`matched`: the literal alternative it was).
    fn child_done(&mut self, matched: Option<u8>) {
        let top = self.stack.len() - 1;
        self.stack[top] = match self.stack[top] {
            Frame::Obj { node, step: ObjStep::Open | ObjStep::Key, next, key } => match matched {
                Some(k) => Frame::Obj { node, step: ObjStep::Colon, next: k + 1, key: k },
                None => Frame::Obj { node, step: ObjStep::Colon, next, key },
            },
            Frame::Obj { node, next, key, .. } => Frame::Obj { node, step: ObjStep::AfterValue, next, key },
            Frame::Arr { node, .. } => Frame::Arr { node, first: false, item: false },
            other => other,
        };
    }
}

/// What the top frame `top` of `stack` does with byte `b` (the schema borrowed apart from
/// the stack: no reference count touched per byte).
fn step(schema: &Compiled, stack: &mut Vec<Frame>, top: Frame, b: u8, whitespace: bool) -> Step {
    let last = stack.len() - 1;
    let deeper = |stack: &Vec<Frame>| stack.len() > MAX_DEPTH + 2;
    match top {
        Frame::Value { node } => {
            if whitespace {
                return Step::Consumed;
            }
            let content = match (&schema.nodes[node as usize], b) {
                (Node::Any | Node::String, b'"') => TEXT,
                (Node::Any | Node::Number, b'-' | b'0'..=b'9') => Frame::Num { state: Num::Start, integer: false },
                (Node::Integer, b'-' | b'0'..=b'9') => Frame::Num { state: Num::Start, integer: true },
                (Node::Any, b't' | b'f' | b'n') => Frame::Lit { list: ANY_LITERAL, candidates: u64::MAX, matched: 0 },
                (Node::Boolean, _) => Frame::Lit { list: BOOLEAN, candidates: u64::MAX, matched: 0 },
                (Node::Null, _) => Frame::Lit { list: NULL, candidates: u64::MAX, matched: 0 },
                (Node::Enum(list), _) => Frame::Lit { list: *list, candidates: u64::MAX, matched: 0 },
                (Node::Any | Node::AnyObject | Node::Object { .. }, b'{') if !deeper(stack) => {
                    stack[last] = Frame::Obj { node, step: ObjStep::Open, next: 0, key: 0 };
                    return Step::Consumed;
                }
                (Node::Any | Node::Array(_), b'[') if !deeper(stack) => {
                    stack[last] = Frame::Arr { node, first: true, item: false };
                    return Step::Consumed;
                }
                _ => return Step::Reject,
            };
            stack[last] = content;
            match content {
                Frame::Str { .. } => Step::Consumed,
                _ => Step::Retry,
            }
        }
        Frame::Str { escaped, hex, utf8, next } => {
            let text = |utf8, next| Frame::Str { escaped: false, hex: 0, utf8, next };
            let next = match (escaped, hex, utf8, b) {
                (false, 0, 1.., _) if next.admits(b) => text(utf8 - 1, Utf8Next::Any),
                (false, 0, 1.., _) => return Step::Reject,
                (false, 0, 0, b'"') => return Step::Done(None),
                (false, 0, 0, b'\\') => Frame::Str { escaped: true, hex: 0, utf8: 0, next },
                (false, 0, 0, 0x20..=0x7f) => TEXT,
                (false, 0, 0, 0xc2..=0xdf) => text(1, Utf8Next::Any),
                (false, 0, 0, 0xe0) => text(2, Utf8Next::AfterE0),
                (false, 0, 0, 0xed) => text(2, Utf8Next::AfterEd),
                (false, 0, 0, 0xe1..=0xef) => text(2, Utf8Next::Any),
                (false, 0, 0, 0xf0) => text(3, Utf8Next::AfterF0),
                (false, 0, 0, 0xf4) => text(3, Utf8Next::AfterF4),
                (false, 0, 0, 0xf1..=0xf3) => text(3, Utf8Next::Any),
                (true, _, _, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => TEXT,
                (true, _, _, b'u') => Frame::Str { escaped: false, hex: 4, utf8: 0, next },
                (false, 1..=4, _, b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F') => Frame::Str { escaped: false, hex: hex - 1, utf8: 0, next },
                _ => return Step::Reject,
            };
            stack[last] = next;
            Step::Consumed
        }
        Frame::Num { state, integer } => {
            use Num::*;
            let next = match (state, b) {
                (Start, b'-') => Some(Minus),
                (Start | Minus, b'0') => Some(Zero),
                (Start | Minus, b'1'..=b'9') => Some(Int),
                (Int, b'0'..=b'9') => Some(Int),
                (Zero | Int, b'.') if !integer => Some(Dot),
                (Zero | Int | Frac, b'e' | b'E') if !integer => Some(E),
                (Dot | Frac, b'0'..=b'9') => Some(Frac),
                (E, b'+' | b'-') => Some(ESign),
                (E | ESign | Exp, b'0'..=b'9') => Some(Exp),
                _ => None,
            };
            match next {
                Some(state) => {
                    stack[last] = Frame::Num { state, integer };
                    Step::Consumed
                }
                None if state.complete() => Step::Pass(None),
                None => Step::Reject,
            }
        }
        Frame::Lit { list, candidates, matched } => {
            let alternatives = &schema.literals[list as usize];
            let m = matched as usize;
            let (mut still, mut ended, mut ending) = (0u64, None, 0u64);
            for (i, alt) in alternatives.iter().enumerate().filter(|&(i, _)| candidates >> i & 1 == 1) {
                if alt.len() == m {
                    ended = ended.or(Some(i as u8));
                } else if alt[m] == b {
                    still |= 1 << i;
                    ending |= u64::from(alt.len() == m + 1) << i;
                }
            }
            if still == 0 {
                return ended.map_or(Step::Reject, |i| Step::Pass(Some(i)));
            }
            if still == ending {
                // every alternative left ends with this byte (one, bar duplicates)
                return Step::Done(Some(still.trailing_zeros() as u8));
            }
            stack[last] = Frame::Lit { list, candidates: still, matched: matched + 1 };
            Step::Consumed
        }
        Frame::Obj { node, step, next, key } => {
            if whitespace {
                return Step::Consumed;
            }
            let declared = match &schema.nodes[node as usize] {
                Node::Object { keys, values, required } => Some((*keys, values.len(), *required)),
                _ => None,
            };
            let required_left = |required: u64| required & bits(next as usize, 64) != 0;
            match (step, b) {
                (ObjStep::Open | ObjStep::AfterValue, b'}') => match declared {
                    Some((_, _, required)) if required_left(required) => Step::Reject,
                    _ => Step::Done(None),
                },
                (ObjStep::Open | ObjStep::Key, b'"') if !deeper(stack) => {
                    let child = match declared {
                        Some((keys, count, required)) => {
                            // the properties from `next` up to the first required one
                            let upto = (next as usize..count).find(|&i| required >> i & 1 == 1).map_or(count, |i| i + 1);
                            let candidates = bits(next as usize, upto);
                            if candidates == 0 {
                                return Step::Reject;
                            }
                            Frame::Lit { list: keys, candidates, matched: 0 }
                        }
                        None => TEXT,
                    };
                    stack.push(child);
                    match child {
                        Frame::Str { .. } => Step::Consumed,
                        _ => Step::Retry,
                    }
                }
                (ObjStep::Colon, b':') => {
                    let value = match &schema.nodes[node as usize] {
                        Node::Object { values, .. } => values[key as usize],
                        _ => ANY_NODE,
                    };
                    stack.push(Frame::Value { node: value });
                    Step::Consumed
                }
                (ObjStep::AfterValue, b',') => match declared {
                    Some((_, count, _)) if next as usize >= count => Step::Reject,
                    _ => {
                        stack[last] = Frame::Obj { node, step: ObjStep::Key, next, key };
                        Step::Consumed
                    }
                },
                _ => Step::Reject,
            }
        }
        Frame::Arr { node, first, item } => {
            if whitespace {
                return Step::Consumed;
            }
            let items = match &schema.nodes[node as usize] {
                Node::Array(items) => *items,
                _ => ANY_NODE,
            };
            match (first, item, b) {
                (_, false, b']') => Step::Done(None),
                (false, false, b',') => {
                    stack[last] = Frame::Arr { node, first: false, item: true };
                    Step::Consumed
                }
                (true, _, _) | (_, true, _) if !deeper(stack) => {
                    stack.push(Frame::Value { node: items });
                    Step::Retry
                }
                _ => Step::Reject,
            }
        }
    }
}

/// A [`JsonMatcher`] as a generation's [`TokenConstraint`](crate::engine::TokenConstraint).
#[derive(Debug, Clone)]
pub struct JsonConstraint {
    matcher: JsonMatcher,
    scratch: JsonMatcher,
}

impl JsonConstraint {
    /// Text that is one document of `schema`.
    pub fn new(schema: &Schema) -> Result<JsonConstraint, SchemaError> {
        let matcher = JsonMatcher::new(schema)?;
        Ok(JsonConstraint { scratch: matcher.clone(), matcher })
    }
}

impl crate::engine::TokenConstraint for JsonConstraint {
    fn allows(&mut self, bytes: &[u8]) -> bool {
        self.matcher.allows(bytes, &mut self.scratch)
    }
    fn advance(&mut self, bytes: &[u8]) {
        self.matcher.advance(bytes);
    }
    fn is_complete(&self) -> bool {
        self.matcher.is_complete()
    }
}
