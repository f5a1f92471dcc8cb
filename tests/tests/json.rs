//! The JSON matcher (`lutra_core::json`) against serde_json, a parser it shares no code
//! with: on generated documents, every prefix of each and thousands of mutations, the
//! matcher accepts a text exactly when it can still become a document and is complete
//! exactly when serde_json parses it; schemas hold documents to their types, properties
//! and enums.

use lutra_core::json::{JsonMatcher, Property, Schema, MAX_WHITESPACE_RUN};
use lutra_core::rng::SplitMix64;

fn accepts(schema: &Schema, text: &[u8]) -> (bool, bool) {
    let mut m = JsonMatcher::new(schema).unwrap();
    let ok = m.advance(text);
    (ok, ok && m.is_complete())
}

/// Whether `text` is JSON, by serde_json; a number too large for an f64 is JSON all the
/// same (the grammar has no range), which serde_json refuses by choice.
fn serde_parses(text: &[u8]) -> bool {
    match serde_json::from_slice::<serde_json::Value>(text) {
        Ok(_) => true,
        Err(e) => e.to_string().starts_with("number out of range"),
    }
}

/// A random JSON value as text, nested at most `depth` deep, with some whitespace.
fn value(rng: &mut SplitMix64, depth: u32, out: &mut String) {
    // at most one line break a run, as the matcher allows
    let ws = |rng: &mut SplitMix64, out: &mut String| {
        out.push_str(["", "", "\n", "\r\n"][rng.below(4) as usize]);
        for _ in 0..rng.below(3) {
            out.push([' ', '\t'][rng.below(2) as usize]);
        }
    };
    match rng.below(if depth == 0 { 5 } else { 7 }) {
        0 => out.push_str(["true", "false", "null"][rng.below(3) as usize]),
        1 => out.push_str(["0", "-1", "12", "3.25", "-0.5e-3", "7E+2", "1e9", "-12.0"][rng.below(8) as usize]),
        2 | 3 => {
            out.push('"');
            for _ in 0..rng.below(6) {
                out.push_str(["a", "Z", " ", "\\n", "\\\"", "\\u00e9", "é", "otter", "\\\\", "/"][rng.below(10) as usize]);
            }
            out.push('"');
        }
        4 => out.push_str(&rng.below(1000).to_string()),
        5 => {
            out.push('[');
            for i in 0..rng.below(4) {
                if i > 0 {
                    out.push(',');
                }
                ws(rng, out);
                value(rng, depth - 1, out);
                ws(rng, out);
            }
            out.push(']');
        }
        _ => {
            out.push('{');
            for i in 0..rng.below(4) {
                if i > 0 {
                    out.push(',');
                }
                ws(rng, out);
                out.push_str(&format!("\"k{}\"", rng.below(5)));
                ws(rng, out);
                out.push(':');
                ws(rng, out);
                value(rng, depth - 1, out);
            }
            out.push('}');
        }
    }
}

#[test]
fn any_value_is_accepted_as_serde_json_parses_it_prefix_by_prefix() {
    let mut rng = SplitMix64::new(7);
    for _ in 0..2000 {
        let mut doc = String::new();
        value(&mut rng, 4, &mut doc);
        let doc = doc.as_bytes();
        assert!(serde_parses(doc), "{}", String::from_utf8_lossy(doc));
        assert_eq!(accepts(&Schema::Any, doc), (true, true), "{}", String::from_utf8_lossy(doc));
        // every prefix can still become a document; only the whole one (or a number that
        // could go on) is complete
        let mut m = JsonMatcher::new(&Schema::Any).unwrap();
        for (i, &b) in doc.iter().enumerate() {
            assert!(m.advance(&[b]), "{} refused at byte {i}", String::from_utf8_lossy(doc));
            if i + 1 < doc.len() {
                assert_eq!(m.is_complete(), serde_parses(&doc[..=i]), "{} at byte {i}", String::from_utf8_lossy(doc));
            }
        }
        // nothing may follow a document but the end (a number's end needs the next byte)
        if !doc.last().unwrap().is_ascii_digit() {
            assert!(!m.advance(b" "), "{}", String::from_utf8_lossy(doc));
        }
    }
}

#[test]
fn mutated_documents_are_complete_exactly_when_serde_json_parses_them() {
    let mut rng = SplitMix64::new(11);
    let alphabet = b"{}[]:,\" 0123456789.-+eEtrufalsn\\/ax";
    let (mut parsed, mut refused) = (0, 0);
    for _ in 0..100_000 {
        let mut doc = String::new();
        value(&mut rng, 3, &mut doc);
        let mut doc = doc.into_bytes();
        for _ in 0..1 + rng.below(2) {
            let at = rng.below(doc.len() as u64 + 1) as usize;
            let c = alphabet[rng.below(alphabet.len() as u64) as usize];
            match rng.below(3) {
                0 if at < doc.len() => doc[at] = c,
                1 if at < doc.len() => {
                    doc.remove(at);
                }
                _ => doc.insert(at, c),
            }
        }
        // the matcher ends a document at its last byte; serde_json allows whitespace after
        while doc.last().is_some_and(|b| b.is_ascii_whitespace()) {
            doc.pop();
        }
        let want = serde_parses(&doc);
        let (_, complete) = accepts(&Schema::Any, &doc);
        // a raw line break is never inside a string: two with only blanks between are
        // one run of whitespace with two line breaks, which the matcher refuses
        let blank_lines = doc.contains(&b'\r') || {
            let breaks: Vec<usize> = (0..doc.len()).filter(|&i| doc[i] == b'\n').collect();
            breaks.windows(2).any(|w| doc[w[0] + 1..w[1]].iter().all(|b| matches!(b, b' ' | b'\t')))
        };
        if complete || !blank_lines {
            assert_eq!(complete, want, "{:?}", String::from_utf8_lossy(&doc));
        }
        if want {
            parsed += 1;
        } else {
            refused += 1;
        }
    }
    assert!(parsed > 1000 && refused > 1000, "{parsed} parsed, {refused} refused");
}

#[test]
fn json_object_takes_objects_only() {
    assert_eq!(accepts(&Schema::AnyObject, br#"{"a": [1, {"b": null}], "c": "d"}"#), (true, true));
    assert!(!accepts(&Schema::AnyObject, b"[1]").0);
    assert!(!accepts(&Schema::AnyObject, b"\"x\"").0);
    assert!(!accepts(&Schema::AnyObject, b"{} {}").0, "one document");
    assert_eq!(accepts(&Schema::AnyObject, b"  {\"a\":1"), (true, false));
}

#[test]
fn whitespace_runs_are_capped() {
    let run = " ".repeat(MAX_WHITESPACE_RUN as usize);
    assert!(accepts(&Schema::AnyObject, format!("{run}{{\"a\":{run}1}}").as_bytes()).1);
    assert!(!accepts(&Schema::AnyObject, format!("{run} {{}}").as_bytes()).0);
    // inside a string, spaces and line breaks are text
    assert!(accepts(&Schema::AnyObject, format!("{{\"a\": \"{run}{run}\\n\\n\"}}").as_bytes()).1);
    // one line break a run: pretty-printed JSON, not blank lines
    assert!(accepts(&Schema::AnyObject, b"{\n  \"a\": [\r\n    1\n  ]\n}").1);
    for doc in [&b"{\n\n\"a\": 1}"[..], b"{\"a\":\n \n1}", b"{\r\r\n}", b"{\n\r}", b"{\r }"] {
        assert!(!accepts(&Schema::AnyObject, doc).0, "{:?}", String::from_utf8_lossy(doc));
    }
}

fn person() -> Schema {
    let p = |name: &str, schema: Schema, required: bool| Property { name: name.into(), schema, required };
    Schema::Object {
        properties: vec![
            p("name", Schema::String, true),
            p("age", Schema::Integer, true),
            p("nickname", Schema::String, false),
            p("color", Schema::Enum(vec!["\"red\"".into(), "\"green\"".into(), "null".into(), "10".into(), "1".into()]), false),
            p("tags", Schema::Array(Box::new(Schema::Boolean)), false),
            p("pet", Schema::Object { properties: vec![p("kind", Schema::String, true), p("wet", Schema::Null, false)] }, false),
        ],
    }
}

#[test]
fn schemas_hold_types_required_properties_order_and_enums() {
    let s = person();
    let ok = [
        r#"{"name": "Ann", "age": 31}"#,
        r#"{"name":"Bo","age":-4,"nickname":"b","color":"green","tags":[true,false],"pet":{"kind":"otter","wet":null}}"#,
        r#"{"name": "C", "age": 0, "color": null}"#,
        r#"{"name": "C", "age": 0, "color": 10}"#,
        r#"{"name": "C", "age": 0, "color": 1, "tags": []}"#,
    ];
    for doc in ok {
        assert_eq!(accepts(&s, doc.as_bytes()), (true, true), "{doc}");
        assert!(serde_parses(doc.as_bytes()));
    }
    let refused = [
        r#"{"age": 31, "name": "Ann"}"#,
        r#"{"name": "Ann"}"#,
        r#"{"name": "Ann", "age": 3.5}"#,
        r#"{"name": "Ann", "age": 3, "colour": "red"}"#,
        r#"{"name": "Ann", "age": 3, "color": "blue"}"#,
        r#"{"name": "Ann", "age": 3, "color": 12}"#,
        r#"{"name": 5, "age": 3}"#,
        r#"{"name": "A", "age": 3, "tags": [1]}"#,
        r#"{"name": "A", "age": 3, "tags": [true,]}"#,
        r#"{"name": "A", "age": 3, "pet": {"wet": null}}"#,
        r#"{"name": "A", "age": 3, "nickname": "x", "nickname": "y"}"#,
        r#"{"name": "A", "age": 3,}"#,
    ];
    for doc in refused {
        assert!(!accepts(&s, doc.as_bytes()).1, "{doc}");
    }
}

#[test]
fn bad_schemas_are_refused() {
    assert!(JsonMatcher::new(&Schema::Enum(vec![])).is_err());
    assert!(JsonMatcher::new(&Schema::Enum(vec!["red".into()])).is_err(), "a string enum value needs its quotes");
    // whitespace around an enum value is not part of it
    assert!(accepts(&Schema::Enum(vec![" 1 ".into(), "\n\"a b\"".into()]), b"  \"a b\"").1);
    assert!(JsonMatcher::new(&Schema::Enum((0..65).map(|i| i.to_string()).collect())).is_err());
    let mut deep = Schema::String;
    for _ in 0..40 {
        deep = Schema::Array(Box::new(deep));
    }
    assert!(JsonMatcher::new(&deep).is_err());
}

/// Generation under a schema on a real model (stories15M, which was never trained to write
/// JSON): every text that ends is a document serde_json parses, with the declared keys
/// and values; a generation cut by `max_tokens` is a prefix the matcher accepts.
#[test]
fn constrained_generation_writes_documents_of_the_schema() {
    use lutra_core::engine::{Attention, Generation, Model, Session, SingleThread, StopReason};
    use lutra_core::json::JsonConstraint;
    use lutra_core::sampler::SamplerConfig;

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories15M");
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}: run `cargo xtask models` first"));
    let model = Model::from_llama2c(&read("model.bin"), &read("tokenizer.bin"), 4).unwrap();
    let p = |name: &str, schema: Schema, required: bool| Property { name: name.into(), schema, required };
    let schema = Schema::Object {
        properties: vec![
            p("happy", Schema::Boolean, true),
            p("mood", Schema::Enum(vec!["\"sunny\"".into(), "\"rainy\"".into()]), true),
            p("age", Schema::Integer, false),
        ],
    };
    let (mut ended, mut cut) = (0, 0);
    // temperatures 0, 0.8 and 1.5 by turns
    for seed in 0..12u64 {
        let mut session = Session::new(&model, 256, &Attention::Exact).unwrap();
        let prompt = model.encode("Once upon a time", true).unwrap();
        let sampler = SamplerConfig { temperature: [0.0, 0.8, 1.5][seed as usize % 3], seed, ..SamplerConfig::default() };
        let mut g = Generation::start(&mut session, &prompt, sampler, 240)
            .unwrap()
            .with_constraint(Box::new(JsonConstraint::new(&schema).unwrap()));
        let mut text = String::new();
        while let Some(piece) = g.next_piece(&mut session, &SingleThread).unwrap() {
            text.push_str(piece);
        }
        eprintln!("seed {seed}: {:?} {text:?}", g.stop_reason());
        match g.stop_reason() {
            Some(StopReason::EndToken(_)) => {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text:?}"));
                assert!(v["happy"].is_boolean() && (v["mood"] == "sunny" || v["mood"] == "rainy"), "seed {seed}: {v}");
                assert!(v.get("age").is_none_or(|a| a.is_number() && !a.to_string().contains(['.', 'e', 'E'])), "seed {seed}: {v}");
                ended += 1;
            }
            reason => {
                assert_eq!(reason, Some(StopReason::MaxTokens), "seed {seed}");
                assert!(accepts(&schema, text.as_bytes()).0, "seed {seed}: {text:?}");
                cut += 1;
            }
        }
    }
    eprintln!("{ended} documents ended, {cut} cut by max_tokens");
    assert!(ended >= 6, "{ended} of 12 ended");
}
