//! `lutra_core::chat` against llama.cpp's `llama_chat_apply_template`, byte for byte,
//! from the golden file `tests/golden/chat-templates.txt` (made by
//! `tests/examples/chat_golden.rs`; format in `tests/src/chat.rs`).

use lutra_core::chat::{ChatTemplate, BUILTIN_NAMES};
use lutra_tests::chat::{ChatGolden, CHAT_GOLDEN};
use lutra_tests::golden::golden_path;

fn golden() -> ChatGolden {
    let path = golden_path(CHAT_GOLDEN);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ChatGolden::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_golden_case_is_equal() {
    let g = golden();
    let mut failures = Vec::new();
    let (mut all_cases, mut all_equal) = (0, 0);
    println!("{:<32} {:<46} {:>5} {:>5}", "template", "detected (llama.cpp / lutra)", "cases", "equal");
    for t in &g.templates {
        let kind = ChatTemplate::detect(&t.tmpl);
        let lutra_name = match kind {
            None => "unknown",
            Some(k) => k.name().unwrap_or("none"),
        };
        let detected_ok = t.detected.split(',').any(|n| n == lutra_name);
        if !detected_ok {
            failures.push(format!("{}: llama.cpp detects {}, lutra {lutra_name}", t.label, t.detected));
        }
        let mut equal = 0;
        for (i, case) in t.cases.iter().enumerate() {
            let messages: Vec<(&str, &str)> = case.messages.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
            let ours = kind.map(|k| {
                let mut s = String::new();
                k.apply(&messages, case.add_ass, &mut s);
                s
            });
            if ours == case.out {
                equal += 1;
            } else if failures.len() < 20 {
                failures.push(format!(
                    "{} case {i} (add_ass={}, {:?}):\n  llama.cpp {:?}\n  lutra     {:?}",
                    t.label, case.add_ass, case.messages, case.out, ours
                ));
            }
        }
        all_cases += t.cases.len();
        all_equal += equal;
        let det = format!("{} / {lutra_name}", t.detected);
        println!("{:<32} {:<46} {:>5} {:>5}", t.label, det, t.cases.len(), equal);
    }
    println!("{:<32} {:<46} {:>5} {:>5}", "all", "", all_cases, all_equal);
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    assert!(all_cases > 0);
}

#[test]
fn builtin_names_match_llama_cpp() {
    let g = golden();
    let missing: Vec<&str> = g.builtins.iter().map(String::as_str).filter(|n| ChatTemplate::from_name(n).is_none()).collect();
    let extra: Vec<&str> = BUILTIN_NAMES.iter().map(|(n, _)| *n).filter(|n| !g.builtins.iter().any(|b| b == n)).collect();
    println!("llama.cpp builtin names lutra lacks: {missing:?}");
    println!("lutra names llama.cpp lacks: {extra:?}");
    assert!(extra.is_empty(), "names llama.cpp does not have: {extra:?}");
    // every builtin name lutra implements is a golden template block of its own
    for (n, k) in BUILTIN_NAMES {
        assert_eq!(k.name(), Some(*n));
        assert!(g.templates.iter().any(|t| t.label == format!("name:{n}")), "{n} has no golden block");
    }
}

#[test]
fn real_templates_detected_as_llama_cpp() {
    let g = golden();
    let real: Vec<_> = g.templates.iter().filter(|t| t.label.starts_with("gguf:")).collect();
    assert!(real.len() >= 5, "expected the vocab GGUFs' templates, found {}", real.len());
    for t in real {
        let ours = ChatTemplate::detect(&t.tmpl).map(|k| k.name().unwrap_or("none")).unwrap_or("unknown");
        println!("{:<40} llama.cpp {:<12} lutra {ours}", t.label, t.detected);
        assert!(t.detected.split(',').any(|n| n == ours), "{}: llama.cpp {}, lutra {ours}", t.label, t.detected);
    }
}
