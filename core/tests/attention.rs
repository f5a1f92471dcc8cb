//! Exact attention (f16 and f32 keys, f16 values) against a plain f64 transcription of
//! softmax(q·K·scale)·V, on every path this CPU runs (AVX2 + F16C kernels for head_dim
//! multiple of 16, and the AVX-512 value sum for head_dim multiple of 64 with 1 to 5 query
//! heads per KV head; the portable loops otherwise).

mod common;

use common::Rng;
use lutra_core::model::kv::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, PIECE_ROWS};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn f16_round(x: f32) -> f64 {
    f64::from(half::f16::from_f32(x).to_f32())
}

/// `softmax(q·K·scale)·V` over positions `first..=pos` in f64, every query head; `key`
/// rounds a stored key value as the cache keeps it, values are rounded to f16.
#[allow(clippy::too_many_arguments)]
fn reference(
    shape: AttentionShape,
    keys: &[Vec<f32>],
    values: &[Vec<f32>],
    key: impl Fn(f32) -> f64,
    q: &[f32],
    scale: f32,
    first: usize,
    pos: usize,
) -> Vec<f64> {
    let (hd, group) = (shape.head_dim, shape.n_heads / shape.n_kv_heads);
    let mut out = vec![0.0; q.len()];
    for (h, qh) in q.chunks_exact(hd).enumerate() {
        let kv = (h / group) * hd..(h / group + 1) * hd;
        let scores: Vec<f64> = (first..=pos)
            .map(|p| qh.iter().zip(&keys[p][kv.clone()]).map(|(&a, &b)| f64::from(a) * key(b)).sum::<f64>() * f64::from(scale))
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = w.iter().sum();
        for (d, o) in out[h * hd..(h + 1) * hd].iter_mut().enumerate() {
            *o = (first..=pos).zip(&w).map(|(p, w)| w / sum * f16_round(values[p][kv.start + d])).sum();
        }
    }
    out
}

#[test]
fn exact_attention_matches_an_f64_reference() {
    let mut rng = Rng(11);
    let shapes = [(4, 1, 256), (6, 6, 48), (8, 2, 40), (5, 1, 16), (9, 3, 128), (2, 2, 64), (4, 2, 128), (5, 1, 64)];
    for (n_heads, n_kv_heads, head_dim) in shapes {
        for precision in [KeyPrecision::F16, KeyPrecision::F32] {
            let shape = AttentionShape { layers: 2, n_heads, n_kv_heads, head_dim, context: 75 };
            let mut cache = ExactKvCache::new(shape, precision);
            let kv_dim = shape.kv_dim();
            let (mut keys, mut values) = (Vec::new(), Vec::new());
            for pos in 0..shape.context {
                let (k, v) = (rng.vec(kv_dim, 2.0), rng.vec(kv_dim, 1.0));
                cache.store(1, pos, &k, &v);
                keys.push(k);
                values.push(v);
            }
            for (first, pos) in [(0, 0), (0, 74), (10, 50), (33, 33)] {
                let q = rng.vec(n_heads * head_dim, 1.0);
                let mut out = vec![0.0; q.len()];
                let scale = 1.0 / (head_dim as f32).sqrt();
                cache.attend(1, first, pos, &q, scale, &mut out);
                let key = |x: f32| if precision == KeyPrecision::F16 { f16_round(x) } else { f64::from(x) };
                let want = reference(shape, &keys, &values, key, &q, scale, first, pos);
                for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
                    let (h, d) = (i / head_dim, i % head_dim);
                    let got = f64::from(got);
                    assert!((got - want).abs() < 2e-5, "{n_heads}/{n_kv_heads}×{head_dim} {precision:?} h{h} d{d}: {got} vs {want}");
                }
            }
        }
    }
}

/// Sliding-window layers keep a ring of their window: attention over the last `window`
/// positions, from a partial window at the start to long after the ring wrapped (and a
/// caller asking for fewer positions than the ring holds), equals a full-context cache's.
#[test]
fn windowed_layers_keep_a_ring_and_attend_as_the_full_cache() {
    let mut rng = Rng(12);
    let (window, context) = (24, 100);
    for precision in [KeyPrecision::F16, KeyPrecision::F32] {
        let shape = AttentionShape { layers: 2, n_heads: 4, n_kv_heads: 2, head_dim: 32, context };
        let mut ring = ExactKvCache::with_windows(shape, precision, &[window, 0]);
        let mut full = ExactKvCache::new(shape, precision);
        let width = if precision == KeyPrecision::F16 { 2 } else { 4 };
        assert_eq!(ring.key_bytes(), (window + context) * shape.kv_dim() * width);
        assert_eq!(ring.value_bytes(), (window + context) * shape.kv_dim() * 2);
        let mut worst = 0.0f32;
        for pos in 0..context {
            for layer in 0..2 {
                let (k, v) = (rng.vec(shape.kv_dim(), 2.0), rng.vec(shape.kv_dim(), 1.0));
                ring.store(layer, pos, &k, &v);
                full.store(layer, pos, &k, &v);
            }
            let q = rng.vec(4 * 32, 1.0);
            let first = (pos + 1).saturating_sub(window);
            for (layer, first) in [(0, first), (0, first + (pos - first) / 2), (1, 0), (1, first)] {
                let (mut a, mut b) = (vec![0.0; q.len()], vec![0.0; q.len()]);
                ring.attend(layer, first, pos, &q, 0.2, &mut a);
                full.attend(layer, first, pos, &q, 0.2, &mut b);
                worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(worst, f32::max);
            }
        }
        assert!(worst < 1e-5, "{precision:?}: max |ring − full| {worst}");
    }
}

/// A span longer than `PIECE_ROWS` is attended in pieces merged by their softmax shares:
/// the result still equals one softmax over the whole span (f64 reference), for spans
/// starting and ending mid-piece, and for a ring whose window crosses a piece boundary.
#[test]
fn long_spans_attend_in_pieces_as_one_softmax() {
    let mut rng = Rng(14);
    let context = 2 * PIECE_ROWS + 300;
    for (n_heads, n_kv_heads, head_dim) in [(4, 1, 32), (3, 3, 24)] {
        let shape = AttentionShape { layers: 2, n_heads, n_kv_heads, head_dim, context };
        let window = PIECE_ROWS + 77;
        let mut full = ExactKvCache::new(shape, KeyPrecision::F16);
        let mut ring = ExactKvCache::with_windows(shape, KeyPrecision::F16, &[window, 0]);
        let kv_dim = shape.kv_dim();
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for pos in 0..context {
            // a few large keys, so that the pieces' maxima differ widely
            let spread = if pos % 97 == 0 { 12.0 } else { 2.0 };
            let (k, v) = (rng.vec(kv_dim, spread), rng.vec(kv_dim, 1.0));
            for layer in 0..2 {
                full.store(layer, pos, &k, &v);
                ring.store(layer, pos, &k, &v);
            }
            keys.push(k);
            values.push(v);
        }
        let scale = 1.0 / (head_dim as f32).sqrt();
        let last = context - 1;
        for (first, pos) in [(0, last), (5, PIECE_ROWS), (PIECE_ROWS - 3, 2 * PIECE_ROWS + 9), (last + 1 - window, last)] {
            let q = rng.vec(n_heads * head_dim, 1.0);
            let (mut out, mut windowed) = (vec![0.0; q.len()], vec![0.0; q.len()]);
            full.attend(1, first, pos, &q, scale, &mut out);
            let want = reference(shape, &keys, &values, f16_round, &q, scale, first, pos);
            for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
                let (h, d) = (i / head_dim, i % head_dim);
                let got = f64::from(got);
                assert!((got - want).abs() < 2e-5, "{n_heads}/{n_kv_heads}×{head_dim} {first}..={pos} h{h} d{d}: {got} vs {want}");
            }
            if pos + 1 - first <= window && pos == last {
                ring.attend(0, first, pos, &q, scale, &mut windowed);
                let worst = out.iter().zip(&windowed).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
                assert!(worst < 1e-5, "ring of {window}: max |ring − full| {worst}");
            }
        }
    }
}
