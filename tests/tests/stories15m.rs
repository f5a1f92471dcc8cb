//! The real stories15M checkpoint and tokenizer (fetched by `cargo xtask models`, which
//! CI runs as the `models` step of `cargo xtask test`): parsed, and known facts checked.

use std::path::PathBuf;

use lutra_core::formats::llama2c::{Checkpoint, Config, TensorKind};
use lutra_core::tokenizer::{Llama2cTokenizer, Tokenizer, BOS};

fn read(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/stories15M").join(name);
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}\n  run `cargo xtask models` first (fetches stories15M, ~61 MB)", path.display()))
}

#[test]
fn stories15m_checkpoint_reads() {
    let bytes = read("model.bin");
    let ck = Checkpoint::parse(&bytes).unwrap();
    let want = Config {
        dim: 288,
        hidden_dim: 768,
        n_layers: 6,
        n_heads: 6,
        n_kv_heads: 6,
        vocab_size: 32000,
        seq_len: 256,
        shared_classifier: true,
    };
    assert_eq!(*ck.config(), want);
    assert_eq!(bytes.len(), 60_816_028);
    // every weight finite; RMSNorm gains are positive on the whole
    let mut buf = Vec::new();
    for kind in TensorKind::ALL {
        let layers = if kind.per_layer() { 6 } else { 1 };
        for layer in 0..layers {
            let t = ck.tensor(kind, layer).unwrap();
            buf.resize(t.len(), 0.0);
            t.read_all(&mut buf).unwrap();
            assert!(buf.iter().all(|x| x.is_finite()), "{} layer {layer}", t.name());
            if matches!(kind, TensorKind::RmsAtt | TensorKind::RmsFfn | TensorKind::RmsFinal) {
                assert!(buf.iter().sum::<f32>() > 0.0, "{} layer {layer}", t.name());
            }
        }
    }
    // RoPE table: position 0 is the identity rotation, cos² + sin² = 1 everywhere
    let (re, im) = (ck.freq_cis_real().unwrap(), ck.freq_cis_imag().unwrap());
    assert_eq!((re.rows(), re.cols()), (256, 24));
    for i in 0..24 {
        assert_eq!((re.get(i).unwrap(), im.get(i).unwrap()), (1.0, 0.0));
    }
    for i in (0..re.len()).step_by(97) {
        let (c, s) = (re.get(i).unwrap(), im.get(i).unwrap());
        assert!((c * c + s * s - 1.0).abs() < 1e-5);
    }
}

fn tokenizer() -> Llama2cTokenizer {
    Llama2cTokenizer::from_bytes(&read("tokenizer.bin"), 32000).unwrap()
}

#[test]
fn stories15m_tokenizer_encodes_like_llama2() {
    let t = tokenizer();
    assert_eq!(t.max_token_length(), 27);
    let mut ids = Vec::new();
    t.encode("Once upon a time", true, &mut ids).unwrap();
    assert_eq!(ids, [1, 9038, 2501, 263, 931]);
    ids.clear();
    t.encode("Once upon a time", false, &mut ids).unwrap();
    assert_eq!(ids, [9038, 2501, 263, 931]);
    let mut text = Vec::new();
    t.decode(&[BOS, 9038, 2501, 263, 931], &mut text).unwrap();
    assert_eq!(text, b"Once upon a time");
    // a character with a piece of its own is that piece, not its byte token (236)
    assert_eq!(t.lookup("é".as_bytes()), Some(29948));
    ids.clear();
    t.encode("é", false, &mut ids).unwrap();
    assert_eq!(ids, [904]);
    assert_eq!(t.piece(904).unwrap(), " é".as_bytes());
    // without one, the UTF-8 bytes' fallback tokens (3 + byte): 🙂 is F0 9F 99 82
    ids.clear();
    t.encode("🙂", false, &mut ids).unwrap();
    assert_eq!(ids, [29871, 3 + 0xF0, 3 + 0x9F, 3 + 0x99, 3 + 0x82]);
}

#[test]
fn stories15m_tokenizer_round_trips() {
    let t = tokenizer();
    let texts = [
        "Lily and Ben went to the park. They saw a big, red ball!\n\"Can we play?\" asked Ben.",
        "Über naïve café — 東京 🙂 \t tabs,  double  spaces and a trailing space ",
        "x",
    ];
    for text in texts {
        let mut ids = Vec::new();
        t.encode(text, true, &mut ids).unwrap();
        assert!(ids.len() < text.len() + 2);
        let mut back = Vec::new();
        t.decode(&ids, &mut back).unwrap();
        assert_eq!(String::from_utf8(back).unwrap(), text);
    }
}
