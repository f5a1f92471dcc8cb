//! `TextStream` against std's `String::from_utf8_lossy`: whatever the cuts between
//! pushes, the characters that come out are the lossy decoding of all the bytes, and no
//! push releases part of a character.

use lutra_core::engine::TextStream;

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// Pushes `bytes` cut at `cuts` (each push a token's piece) and collects the output.
fn streamed(bytes: &[u8], cuts: &[usize]) -> String {
    let mut stream = TextStream::new();
    let (mut out, mut at) = (String::new(), 0);
    for &cut in cuts.iter().chain([&bytes.len()]) {
        let piece = stream.push(&bytes[at..cut.max(at)]);
        out.push_str(piece);
        at = cut.max(at);
    }
    out.push_str(stream.finish());
    out
}

#[test]
fn split_characters_come_out_whole() {
    // "é" (2 bytes), "€" (3), "🦦" (4) as SentencePiece byte-fallback tokens would carry them
    let text = "otter é € 🦦!".as_bytes();
    let mut stream = TextStream::new();
    let mut out = String::new();
    for (i, b) in text.iter().enumerate() {
        let piece = stream.push(&[*b]).to_string();
        // nothing released is ever a partial character, and nothing is held back too long
        assert!(text[..=i].starts_with(out.as_bytes()) && (i + 1 - out.len() - piece.len()) < 4, "byte {i}");
        out.push_str(&piece);
    }
    assert_eq!(out, "otter é € 🦦!");
    assert_eq!(stream.finish(), "");
}

#[test]
fn any_cuts_give_the_lossy_decoding() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let valid = "Ünïcödé ŧëxŧ, 日本語, 🦦🌊 and ASCII.".as_bytes();
    for round in 0..2000 {
        // valid text with some bytes replaced by random ones: stray continuations,
        // truncated sequences, overlong forms, surrogates
        let mut bytes = valid.to_vec();
        for _ in 0..round % 5 {
            let i = next() as usize % bytes.len();
            bytes[i] = next() as u8;
        }
        if round % 7 == 0 {
            bytes.truncate(bytes.len() - 1 - next() as usize % 3);
        }
        let mut cuts: Vec<usize> = (0..next() % 12).map(|_| next() as usize % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        assert_eq!(streamed(&bytes, &cuts), String::from_utf8_lossy(&bytes), "round {round}, cuts {cuts:?}");
    }
}
