//! llama2.c checkpoints: tiny generated files read back tensor by tensor, and hostile
//! headers and lengths refused with typed errors, never a panic.

mod common;
use common::llama2c_files::write_checkpoint_with;
use common::Rng;

use lutra_core::formats::llama2c::{
    Checkpoint, Config, Llama2cError, TensorKind, HEADER_BYTES, MAX_DIM, MAX_HIDDEN_DIM, MAX_LAYERS, MAX_VOCAB,
};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// The value the writer stores at element `i` of layer `layer` of `kind`: exact in f32
/// for tiny models, and different for every tensor, layer and index.
fn value(kind: TensorKind, layer: usize, i: usize) -> f32 {
    (kind as usize * 1_000_000 + layer * 10_000 + i) as f32
}

/// A llama2.c checkpoint with `value` in every element, in run.c's order.
fn write_checkpoint(c: &Config) -> Vec<u8> {
    write_checkpoint_with(c, value)
}

fn tiny(shared: bool) -> Config {
    Config { dim: 8, hidden_dim: 12, n_layers: 2, n_heads: 2, n_kv_heads: 1, vocab_size: 10, seq_len: 4, shared_classifier: shared }
}

/// `bytes` copied to a 4-byte-aligned position (plus `shift`) of a fresh buffer.
fn placed(bytes: &[u8], shift: usize) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; bytes.len() + 8];
    let at = buf.as_ptr().align_offset(4) + shift;
    buf[at..at + bytes.len()].copy_from_slice(bytes);
    (buf, at)
}

fn header(fields: [i32; 7]) -> Vec<u8> {
    fields.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn stories15m_size_from_its_header() {
    let c = Config {
        dim: 288,
        hidden_dim: 768,
        n_layers: 6,
        n_heads: 6,
        n_kv_heads: 6,
        vocab_size: 32000,
        seq_len: 256,
        shared_classifier: true,
    };
    assert_eq!(c.file_size(), Ok(60_816_028));
    assert_eq!(Config::from_header(&c.to_header()), Ok(c));
    assert_eq!((c.head_size(), c.kv_dim()), (48, 288));
}

#[test]
fn round_trip_every_tensor() {
    for shared in [true, false] {
        let c = tiny(shared);
        let file = write_checkpoint(&c);
        assert_eq!(c.file_size(), Ok(file.len()));
        let (buf, at) = placed(&file, 0);
        let ck = Checkpoint::parse(&buf[at..at + file.len()]).unwrap();
        assert_eq!(*ck.config(), c);
        assert_eq!(c.kv_dim(), 4);
        for kind in TensorKind::ALL {
            let layers = if kind.per_layer() { c.n_layers } else { 1 };
            // a shared classifier reads as the token embedding
            let stored = if kind == TensorKind::Wcls && shared { TensorKind::TokenEmbedding } else { kind };
            for layer in 0..layers {
                let t = ck.tensor(kind, layer).unwrap();
                let (rows, cols) = c.shape(kind);
                assert_eq!((t.rows(), t.cols(), t.len(), t.bytes().len()), (rows, cols, rows * cols, rows * cols * 4));
                assert_eq!(t.name(), stored.name());
                let want: Vec<f32> = (0..rows * cols).map(|i| value(stored, layer, i)).collect();
                for (i, w) in want.iter().enumerate() {
                    assert_eq!(t.get(i), Ok(*w), "{} layer {layer} [{i}]", kind.name());
                }
                let mut row = vec![0.0; cols];
                for r in 0..rows {
                    t.read_row(r, &mut row).unwrap();
                    assert_eq!(row, want[r * cols..(r + 1) * cols]);
                }
                let mut all = vec![0.0; rows * cols];
                t.read_all(&mut all).unwrap();
                assert_eq!(all, want);
                assert_eq!(t.as_f32().unwrap(), &want[..]);
                // out of range
                assert_eq!(
                    t.get(rows * cols),
                    Err(Llama2cError::IndexOutOfRange { tensor: t.name(), index: rows * cols, len: rows * cols })
                );
                assert_eq!(t.get(usize::MAX), Err(Llama2cError::IndexOutOfRange { tensor: t.name(), index: usize::MAX, len: rows * cols }));
                assert!(matches!(t.read_row(rows, &mut row), Err(Llama2cError::IndexOutOfRange { .. })));
                assert!(matches!(t.read_row(usize::MAX, &mut row), Err(Llama2cError::IndexOutOfRange { .. })));
                let mut wide = vec![0.0; cols + 1];
                assert_eq!(t.read_row(0, &mut wide), Err(Llama2cError::BufferSize { tensor: t.name(), expected: cols, got: cols + 1 }));
                assert!(matches!(t.read_all(&mut wide[..0]), Err(Llama2cError::BufferSize { .. })));
            }
            let e = ck.tensor(kind, layers).unwrap_err();
            assert!(matches!(e, Llama2cError::LayerOutOfRange { layer, .. } if layer == layers));
        }
        let l1 = ck.layer(1).unwrap();
        assert_eq!(l1.w2.get(3), Ok(value(TensorKind::W2, 1, 3)));
        assert_eq!((l1.wk.rows(), l1.wk.cols()), (4, 8));
        assert!(matches!(ck.layer(2), Err(Llama2cError::LayerOutOfRange { .. })));
        assert_eq!(ck.classifier().unwrap().bytes(), ck.tensor(TensorKind::Wcls, 0).unwrap().bytes());
        assert_eq!(ck.token_embedding().unwrap().get(11), Ok(value(TensorKind::TokenEmbedding, 0, 11)));
        assert_eq!(ck.rms_final().unwrap().len(), 8);
        assert_eq!(ck.freq_cis_real().unwrap().cols(), 2);
        assert_eq!(ck.freq_cis_imag().unwrap().get(0), Ok(value(TensorKind::FreqCisImag, 0, 0)));
    }
}

#[test]
fn misaligned_bytes_still_decode_but_refuse_the_f32_view() {
    let c = tiny(true);
    let file = write_checkpoint(&c);
    let (buf, at) = placed(&file, 1);
    let ck = Checkpoint::parse(&buf[at..at + file.len()]).unwrap();
    let t = ck.tensor(TensorKind::Wq, 1).unwrap();
    assert_eq!(t.as_f32(), Err(Llama2cError::Misaligned { tensor: "wq" }));
    assert_eq!(t.get(5), Ok(value(TensorKind::Wq, 1, 5)));
    let mut row = [0.0; 8];
    t.read_row(2, &mut row).unwrap();
    assert_eq!(row[0], value(TensorKind::Wq, 1, 16));
}

#[test]
fn every_truncation_and_extension_is_refused() {
    for shared in [true, false] {
        let file = write_checkpoint(&tiny(shared));
        for n in 0..file.len() {
            let e = Checkpoint::parse(&file[..n]).unwrap_err();
            if n < HEADER_BYTES {
                assert_eq!(e, Llama2cError::TooShort { len: n });
            } else {
                assert_eq!(e, Llama2cError::SizeMismatch { expected: file.len(), got: n });
            }
        }
        for extra in [1, 3, 4, 4 * 8] {
            let mut long = file.clone();
            long.resize(file.len() + extra, 0);
            assert_eq!(Checkpoint::parse(&long).unwrap_err(), Llama2cError::SizeMismatch { expected: file.len(), got: long.len() });
        }
    }
}

#[test]
fn bad_header_fields_are_named() {
    let good = [8, 12, 2, 2, 1, 10, 4];
    let names = ["dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"];
    for (f, name) in names.iter().enumerate() {
        for bad in [0, -1, i32::MIN, i32::MAX] {
            if f == 5 && bad == -1 {
                continue; // a negative vocab_size is legal: the unshared classifier
            }
            let mut h = good;
            h[f] = bad;
            let e = Config::from_header(&header(h)).unwrap_err();
            assert!(matches!(e, Llama2cError::BadField { field, value, .. } if field == *name && value == bad), "{e}");
        }
    }
    let c = Config::from_header(&header([8, 12, 2, 2, 1, -1, 4])).unwrap();
    assert_eq!((c.vocab_size, c.shared_classifier), (1, false));
    let e = Config::from_header(&header([8, 12, 2, 2, 1, i32::MIN, 4])).unwrap_err();
    assert_eq!(e, Llama2cError::BadField { field: "vocab_size", value: i32::MIN, max: MAX_VOCAB });
    assert!(e.to_string().contains("vocab_size"));
}

#[test]
fn head_counts_must_divide() {
    let e = Config::from_header(&header([10, 12, 2, 3, 1, 10, 4])).unwrap_err();
    assert_eq!(e, Llama2cError::HeadsDontDivideDim { dim: 10, n_heads: 3 });
    let e = Config::from_header(&header([12, 12, 2, 3, 2, 10, 4])).unwrap_err();
    assert_eq!(e, Llama2cError::KvHeadsDontDivideHeads { n_heads: 3, n_kv_heads: 2 });
    let e = Config::from_header(&header([8, 12, 2, 2, 4, 10, 4])).unwrap_err();
    assert_eq!(e, Llama2cError::KvHeadsDontDivideHeads { n_heads: 2, n_kv_heads: 4 });
    let e = Config::from_header(&header([6, 12, 2, 2, 1, 10, 4])).unwrap_err();
    assert_eq!(e, Llama2cError::OddHeadSize { head_size: 3 });
    for e in [Llama2cError::HeadsDontDivideDim { dim: 10, n_heads: 3 }, Llama2cError::OddHeadSize { head_size: 3 }] {
        assert!(e.to_string().starts_with("llama2.c checkpoint"));
    }
}

#[test]
fn versioned_exports_are_recognised() {
    // export.py writes struct.pack("I", 0x616b3432): the bytes "24ka"
    let mut h = 0x616b_3432u32.to_le_bytes().to_vec();
    h.extend_from_slice(&2i32.to_le_bytes());
    h.resize(256, 0);
    assert_eq!(Checkpoint::parse(&h).unwrap_err(), Llama2cError::VersionedFormat { version: 2 });
}

#[test]
fn absurd_dims_overflow_or_mismatch_never_panic() {
    let max = [MAX_DIM as i32, MAX_HIDDEN_DIM as i32, MAX_LAYERS as i32, 1, 1, -(MAX_VOCAB as i32), 1 << 20];
    let mut file = header(max);
    file.resize(4096, 0);
    let e = Checkpoint::parse(&file).unwrap_err();
    if cfg!(target_pointer_width = "64") {
        assert!(matches!(e, Llama2cError::SizeMismatch { expected, got: 4096 } if expected > 1 << 40));
    } else {
        assert_eq!(e, Llama2cError::Overflow);
    }
    // one past every limit
    for (f, m) in [MAX_DIM, MAX_HIDDEN_DIM, MAX_LAYERS].iter().enumerate() {
        let mut h = [8, 12, 2, 2, 1, 10, 4];
        h[f] = *m as i32 + 1;
        assert!(matches!(Config::from_header(&header(h)), Err(Llama2cError::BadField { .. })));
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(7);
    let good = write_checkpoint(&tiny(false));
    for round in 0..3000 {
        let mut file = if round % 2 == 0 {
            good.clone()
        } else {
            let len = (rng.next() % 600) as usize;
            (0..len).map(|_| rng.next() as u8).collect()
        };
        // small header fields are more interesting than uniform ones
        for _ in 0..(rng.next() % 4) {
            if file.len() >= HEADER_BYTES {
                let f = (rng.next() % 7) as usize * 4;
                let v = (rng.next() % 40) as i32 - 8;
                file[f..f + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        if rng.next().is_multiple_of(3) {
            file.truncate((rng.next() as usize) % (file.len() + 1));
        }
        if let Ok(ck) = Checkpoint::parse(&file) {
            assert_eq!(ck.config().file_size(), Ok(file.len()));
            for kind in TensorKind::ALL {
                let t = ck.tensor(kind, 0).unwrap();
                assert!(t.is_empty() || t.get(t.len() - 1).is_ok());
            }
        }
    }
}
