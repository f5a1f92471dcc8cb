//! `lutra_core::chat`: llama.cpp's template detection rules at their edges, and empty
//! conversations. (Byte-for-byte agreement with llama.cpp over many conversations is
//! `tests/tests/chat_template.rs`, from llama.cpp's own output.)
#![cfg(feature = "alloc")]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use lutra_core::chat::{ChatTemplate, BUILTIN_NAMES};

fn fmt(t: ChatTemplate, messages: &[(&str, &str)], add_assistant: bool) -> String {
    let mut s = String::new();
    t.apply(messages, add_assistant, &mut s);
    s
}

#[test]
fn names_round_trip_and_are_exact() {
    for &(n, t) in BUILTIN_NAMES {
        assert_eq!(ChatTemplate::from_name(n), Some(t));
        assert_eq!(t.name(), Some(n));
        // a builtin name as the template text selects that kind before any substring rule
        assert_eq!(ChatTemplate::detect(n), Some(t));
    }
    assert_eq!(BUILTIN_NAMES.len(), 54);
    assert_eq!(ChatTemplate::from_name("ChatML"), None);
    assert_eq!(ChatTemplate::from_name("chatml "), None);
    assert_eq!(ChatTemplate::from_name(""), None);
    assert_eq!(ChatTemplate::Dots1.name(), None);
}

#[test]
fn detection_edges() {
    use ChatTemplate as T;
    let d = ChatTemplate::detect;
    assert_eq!(d(""), None);
    assert_eq!(d("{{ messages }}"), None);
    assert_eq!(d("CHATML"), None);
    assert_eq!(d("chatml "), None);
    // any text starting with "mistral" goes down the [INST] branch
    assert_eq!(d("mistral"), Some(T::Llama2));
    assert_eq!(d("mistral-v7x"), Some(T::Llama2));
    assert_eq!(d(" mistral"), None);
    // order: <|im_start|> wins over everything after it
    assert_eq!(d("<|im_start|>[INST]<start_of_turn>"), Some(T::ChatMl));
    assert_eq!(d("<|im_start|><|im_sep|><end_of_utterance>"), Some(T::Phi4));
    assert_eq!(d("<|im_start|><end_of_utterance>"), Some(T::SmolVlm));
    // llama2 variants: strip > bos > sys
    assert_eq!(d("[INST] <<SYS>> bos_token + '[INST] content.strip()"), Some(T::Llama2SysStrip));
    assert_eq!(d("[INST] <<SYS>> bos_token + '[INST]"), Some(T::Llama2SysBos));
    assert_eq!(d("[INST] <<SYS>>"), Some(T::Llama2Sys));
    assert_eq!(d("[INST]"), Some(T::Llama2));
    // mistral: [SYSTEM_PROMPT] first, then v1 (" [INST]") before v3-tekken ("\"[INST]\"")
    assert_eq!(d("[INST][SYSTEM_PROMPT][AVAILABLE_TOOLS]"), Some(T::MistralV7));
    assert_eq!(d("[AVAILABLE_TOOLS] [INST] \"[INST]\""), Some(T::MistralV1));
    assert_eq!(d("[AVAILABLE_TOOLS]\"[INST]\""), Some(T::MistralV3Tekken));
    assert_eq!(d("[AVAILABLE_TOOLS][INST]"), Some(T::MistralV3));
    assert_eq!(d("<|assistant|><|end|><|user|></s>"), Some(T::Phi3));
    assert_eq!(d("<|assistant|><|user|><|tool_declare|></s>"), Some(T::ExaoneMoe));
    assert_eq!(d("<|assistant|><|user|></s>"), Some(T::Falcon3));
    assert_eq!(d("<|assistant|><|user|>"), Some(T::GlmEdge));
    assert_eq!(d("<|user|><|endoftext|>"), Some(T::Zephyr));
    assert_eq!(d("<start_of_turn>"), Some(T::Gemma));
    assert_eq!(d("USER: ASSISTANT: "), Some(T::Vicuna));
    assert_eq!(d("USER: ASSISTANT: SYSTEM: "), Some(T::VicunaOrca));
    assert_eq!(d("<|start_of_role|>"), Some(T::Granite3));
    assert_eq!(d("<|start_of_role|><tools>"), Some(T::Granite41));
    assert_eq!(d("<|start_of_role|><tool_call>g4_default_system_message"), Some(T::Granite40));
    assert_eq!(d("<role>ASSISTANT</role>'HUMAN'\"HUMAN\"<think>"), Some(T::Bailing));
    assert_eq!(d("<role>ASSISTANT</role>\"HUMAN\"<think>"), Some(T::BailingThink));
    assert_eq!(d("<role>ASSISTANT</role>\"HUMAN\""), None);
    assert_eq!(d("<|endofuserprompt|>"), Some(T::Dots1));
    assert_eq!(d("<|begin|><|end|><|content|>"), Some(T::SolarOpen));
    // "<|assistant|>" + "<|end|>" is Phi-3 even with SOLAR's markers
    assert_eq!(d("<|begin|><|end|><|content|><|assistant|>"), Some(T::Phi3));
}

#[test]
fn empty_conversations() {
    use ChatTemplate as T;
    let with_prefix: &[(ChatTemplate, &str)] = &[
        (T::Llama2, "[INST] "),
        (T::Llama2Sys, "[INST] "),
        (T::Llama2SysBos, "[INST] "),
        (T::Llama2SysStrip, "[INST] "),
        (T::ChatGlm3, "[gMASK]sop"),
        (T::ChatGlm4, "[gMASK]<sop>"),
        (T::GigaChat, "<s>"),
        (T::Bailing2, "<role>SYSTEM</role>detailed thinking off<|role_end|>"),
        (T::SmolVlm, "<|im_start|>"),
        (T::HunyuanVl, "<｜hy_begin▁of▁sentence｜>"),
    ];
    let mut kinds: Vec<ChatTemplate> = BUILTIN_NAMES.iter().map(|&(_, t)| t).collect();
    kinds.push(T::Dots1);
    for t in kinds {
        let want = with_prefix.iter().find(|(k, _)| *k == t).map_or("", |(_, p)| p);
        assert_eq!(fmt(t, &[], false), want, "{t:?}");
        // with add_assistant only the generation prompt is added
        assert!(fmt(t, &[], true).starts_with(want), "{t:?}");
    }
    assert_eq!(fmt(T::ChatMl, &[], true), "<|im_start|>assistant\n");
    assert_eq!(fmt(T::Llama3, &[], true), "<|start_header_id|>assistant<|end_header_id|>\n\n");
    // kinds without a generation prompt ignore add_assistant
    assert_eq!(fmt(T::MistralV7, &[], true), "");
    assert_eq!(fmt(T::Orion, &[("user", "x")], true), "Human: x\n\nAssistant: </s>");
}

#[test]
fn appends_and_trims_like_c_isspace() {
    let mut s = String::from("prefix|");
    ChatTemplate::Llama3.apply(&[("user", "\u{b}\u{c} hi \t\r\n")], false, &mut s);
    assert_eq!(s, "prefix|<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
    // U+00A0 and U+3000 are not C whitespace: kept
    assert_eq!(
        fmt(ChatTemplate::CommandR, &[("user", "\u{a0}x\u{3000}")], false),
        "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>\u{a0}x\u{3000}<|END_OF_TURN_TOKEN|>"
    );
    // Gemma merges every system message (trimmed) into the next non-model turn
    assert_eq!(
        fmt(ChatTemplate::Gemma, &[("system", " a "), ("system", "b"), ("assistant", "m"), ("user", "u")], true),
        "<start_of_turn>model\nm<end_of_turn>\n<start_of_turn>user\nab\n\nu<end_of_turn>\n<start_of_turn>model\n"
    );
    // rwkv-world prompts the assistant after a final user turn whatever add_assistant says
    assert_eq!(fmt(ChatTemplate::RwkvWorld, &[("user", "q")], false), "User: q\n\nAssistant:");
}

#[test]
fn no_panic_on_odd_input() {
    let odd = ["", " ", "\0", "ü", "\u{b}", "🌍", "system", "user", "assistant", "tool", "a\nb"];
    let mut kinds: Vec<ChatTemplate> = BUILTIN_NAMES.iter().map(|&(_, t)| t).collect();
    kinds.push(ChatTemplate::Dots1);
    for t in kinds {
        for r in odd {
            for c in odd {
                let msgs = [(r, c), ("user", c), (c, r)];
                for add in [false, true] {
                    let _ = fmt(t, &msgs, add);
                }
            }
        }
    }
    for s in odd {
        let _ = ChatTemplate::detect(s);
    }
}
