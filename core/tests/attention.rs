//! Exact attention (f16 and f32 keys; f16, q8_0 and q4_0 values) against a plain f64
//! transcription of softmax(q·K·scale)·V, on every path this CPU runs (AVX2 + F16C kernels
//! for head_dim multiple of 16, and the AVX-512 f16 value sum for head_dim multiple of 64
//! with 1 to 5 query heads per KV head; the portable loops otherwise).

mod common;

use common::Rng;
use lutra_core::attention::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, ValueFormat, PIECE_ROWS};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn f16_round(x: f32) -> f64 {
    f64::from(half::f16::from_f32(x).to_f32())
}

fn f16_values(values: &[Vec<f32>]) -> Vec<Vec<f64>> {
    values.iter().map(|v| v.iter().map(|&x| f16_round(x)).collect()).collect()
}

/// Each row cut in blocks of 32 and each block quantized and dequantized as llama.cpp's
/// `quantize_row_q8_0_ref` / `quantize_row_q4_0_ref` and `dequantize_row_*` (ggml-quants.c)
/// do it: the scale computed in f32 and stored as f16, codes from the f32 scale.
fn block_values(values: &[Vec<f32>], format: ValueFormat) -> Vec<Vec<f64>> {
    let block = |x: &[f32]| -> Vec<f64> {
        match format {
            ValueFormat::Q8_0 => {
                let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let d16 = f16_round(d);
                x.iter().map(|&v| d16 * f64::from((v * id).round())).collect()
            }
            ValueFormat::Q4_0 => {
                let (mut amax, mut max) = (0.0f32, 0.0f32);
                for &v in x {
                    if amax < v.abs() {
                        amax = v.abs();
                        max = v;
                    }
                }
                let d = max / -8.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let d16 = f16_round(d);
                x.iter().map(|&v| d16 * (f64::from(((v * id + 8.5) as i8).min(15)) - 8.0)).collect()
            }
            ValueFormat::F16 => x.iter().map(|&v| f16_round(v)).collect(),
        }
    };
    values.iter().map(|v| v.chunks(32).flat_map(block).collect()).collect()
}

/// `softmax(q·K·scale)·V` over positions `first..=pos` in f64, every query head; `key`
/// rounds a stored key value as the cache keeps it, `values` are as the cache keeps them.
#[allow(clippy::too_many_arguments)]
fn reference(
    shape: AttentionShape,
    keys: &[Vec<f32>],
    values: &[Vec<f64>],
    key: impl Fn(f32) -> f64,
    q: &[f32],
    scale: f32,
    first: usize,
    pos: usize,
) -> Vec<f64> {
    let (hd, group) = (shape.head_dim, shape.heads / shape.kv_heads);
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
            *o = (first..=pos).zip(&w).map(|(p, w)| w / sum * values[p][kv.start + d]).sum();
        }
    }
    out
}

#[test]
fn exact_attention_matches_an_f64_reference() {
    let mut rng = Rng(11);
    let shapes = [(4, 1, 256), (6, 6, 48), (8, 2, 40), (5, 1, 16), (9, 3, 128), (2, 2, 64), (4, 2, 128), (5, 1, 64)];
    for (heads, kv_heads, head_dim) in shapes {
        for precision in [KeyPrecision::F16, KeyPrecision::F32] {
            let shape = AttentionShape { layers: 2, heads, kv_heads, head_dim, context: 75 };
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
                let q = rng.vec(heads * head_dim, 1.0);
                let mut out = vec![0.0; q.len()];
                let scale = 1.0 / (head_dim as f32).sqrt();
                cache.attend(1, first, pos, &q, scale, &mut out);
                let key = |x: f32| if precision == KeyPrecision::F16 { f16_round(x) } else { f64::from(x) };
                let want = reference(shape, &keys, &f16_values(&values), key, &q, scale, first, pos);
                for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
                    let (h, d) = (i / head_dim, i % head_dim);
                    let got = f64::from(got);
                    assert!((got - want).abs() < 2e-5, "{heads}/{kv_heads}×{head_dim} {precision:?} h{h} d{d}: {got} vs {want}");
                }
            }
        }
    }
}

/// q8_0 and q4_0 values: attention over them equals the f64 reference over llama.cpp's
/// own quantize-then-dequantize of each block, for one to five query heads per KV head,
/// several blocks per row, windowed rings and spans longer than one piece; a head size
/// that is not a whole number of blocks is refused.
#[test]
fn block_values_match_an_f64_reference_of_llama_cpp_blocks() {
    let mut rng = Rng(15);
    for format in [ValueFormat::Q8_0, ValueFormat::Q4_0] {
        for (heads, kv_heads, head_dim, context) in
            [(4, 1, 256, 75), (6, 6, 96, 75), (5, 1, 64, 75), (3, 3, 32, 75), (4, 2, 64, PIECE_ROWS + 40)]
        {
            let shape = AttentionShape { layers: 2, heads, kv_heads, head_dim, context };
            let window = context / 2;
            let mut cache = ExactKvCache::with_value_format(shape, KeyPrecision::F16, &[window, 0], format).unwrap();
            assert_eq!(cache.value_format(), format);
            let blocks = (window + context) * kv_heads * head_dim / 32;
            assert_eq!(cache.value_bytes(), blocks * if format == ValueFormat::Q8_0 { 34 } else { 18 });
            let kv_dim = shape.kv_dim();
            let (mut keys, mut values) = (Vec::new(), Vec::new());
            for pos in 0..context {
                // a block of zeros and a block with one outlier: zero scales and a
                // scale set by a single value
                let mut v = if pos % 7 == 0 { vec![0.0; kv_dim] } else { rng.vec(kv_dim, 1.0) };
                if pos % 5 == 1 {
                    v[3] = -9.0;
                }
                let k = rng.vec(kv_dim, 2.0);
                cache.store(0, pos, &k, &v);
                cache.store(1, pos, &k, &v);
                keys.push(k);
                values.push(v);
            }
            let quantized = block_values(&values, format);
            let last = context - 1;
            for (layer, first, pos) in [(1, 0, 0), (1, 0, last), (1, 10, 50), (0, last + 1 - window, last), (0, last - 10, last)] {
                let q = rng.vec(heads * head_dim, 1.0);
                let mut out = vec![0.0; q.len()];
                let scale = 1.0 / (head_dim as f32).sqrt();
                cache.attend(layer, first, pos, &q, scale, &mut out);
                let want = reference(shape, &keys, &quantized, f16_round, &q, scale, first, pos);
                for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
                    let got = f64::from(got);
                    assert!(
                        (got - want).abs() < 2e-5,
                        "{} {heads}/{kv_heads}×{head_dim} layer {layer} {first}..={pos} [{i}]: {got} vs {want}",
                        format.name()
                    );
                }
            }
        }
        // a row of subnormal values: its scale is 0 in f16, and 1/d overflows in f32
        let tiny = AttentionShape { layers: 1, heads: 1, kv_heads: 1, head_dim: 32, context: 2 };
        let mut cache = ExactKvCache::with_value_format(tiny, KeyPrecision::F16, &[], format).unwrap();
        cache.store(0, 0, &[1.0; 32], &[1e-41; 32]);
        let mut out = [1.0; 32];
        cache.attend(0, 0, 0, &[1.0; 32], 1.0, &mut out);
        assert_eq!(out, [0.0; 32], "{}", format.name());
        let odd = AttentionShape { layers: 1, heads: 2, kv_heads: 1, head_dim: 48, context: 8 };
        let refused = ExactKvCache::with_value_format(odd, KeyPrecision::F16, &[], format).err();
        assert_eq!(refused, Some(lutra_core::Error::ValueFormat { format: format.name(), head_dim: 48 }));
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
        let shape = AttentionShape { layers: 2, heads: 4, kv_heads: 2, head_dim: 32, context };
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
    for (heads, kv_heads, head_dim) in [(4, 1, 32), (3, 3, 24)] {
        let shape = AttentionShape { layers: 2, heads, kv_heads, head_dim, context };
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
        let values_f64 = f16_values(&values);
        let last = context - 1;
        for (first, pos) in [(0, last), (5, PIECE_ROWS), (PIECE_ROWS - 3, 2 * PIECE_ROWS + 9), (last + 1 - window, last)] {
            let q = rng.vec(heads * head_dim, 1.0);
            let (mut out, mut windowed) = (vec![0.0; q.len()], vec![0.0; q.len()]);
            full.attend(1, first, pos, &q, scale, &mut out);
            let want = reference(shape, &keys, &values_f64, f16_round, &q, scale, first, pos);
            for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
                let (h, d) = (i / head_dim, i % head_dim);
                let got = f64::from(got);
                assert!((got - want).abs() < 2e-5, "{heads}/{kv_heads}×{head_dim} {first}..={pos} h{h} d{d}: {got} vs {want}");
            }
            if pos + 1 - first <= window && pos == last {
                ring.attend(0, first, pos, &q, scale, &mut windowed);
                let worst = out.iter().zip(&windowed).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
                assert!(worst < 1e-5, "ring of {window}: max |ring − full| {worst}");
            }
        }
    }
}

/// The caches the attention timings run (`kv::synthetic`: the profiler example, the wasm
/// `AttentionTimer`) hold what they say: the exact kinds attend as the f64 reference over
/// the same generated keys and values (f16 and q8_0 values), every kind attends to finite
/// outputs, and unknown names are errors.
#[test]
fn synthetic_caches_hold_their_generated_positions() {
    use lutra_core::attention::synthetic;
    let ctx = 70;
    for name in ["gemma3", "llama7b"] {
        let shape = synthetic::shape(name, ctx).unwrap();
        let kv_dim = shape.kv_dim();
        let keys: Vec<Vec<f32>> = (0..ctx).map(|p| synthetic::values(kv_dim, 2 * p as u64 + 7)).collect();
        let values: Vec<Vec<f32>> = (0..ctx).map(|p| synthetic::values(kv_dim, 2 * p as u64 + 8)).collect();
        let q = synthetic::values(shape.heads * shape.head_dim, 3);
        let scale = 1.0 / (shape.head_dim as f32).sqrt();
        for kind in synthetic::KINDS {
            let mut cache = synthetic::cache(kind, shape, lutra_core::Isa::best()).unwrap();
            let mut out = vec![0.0; q.len()];
            cache.attend(0, 0, ctx - 1, &q, scale, &mut out);
            assert!(out.iter().all(|v| v.is_finite()), "{name} {kind}");
            let stored = match kind {
                "exact_f16" => f16_values(&values),
                "exact_f16+q8_0" => block_values(&values, ValueFormat::Q8_0),
                _ => continue,
            };
            let want = reference(shape, &keys, &stored, f16_round, &q, scale, 0, ctx - 1);
            for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
                assert!((f64::from(got) - want).abs() < 2e-5, "{name} {kind} [{i}]: {got} vs {want}");
            }
        }
    }
    let shape = synthetic::shape("gemma3", 8).unwrap();
    assert!(synthetic::shape("gpt2", 8).is_none());
    for kind in ["pq99", "exact_f32", "pq16+q5_1", ""] {
        assert!(synthetic::cache(kind, shape, lutra_core::Isa::best()).is_err(), "{kind}");
    }
    for context in [0, synthetic::MAX_CONTEXT + 1, usize::MAX] {
        assert!(
            synthetic::cache("exact_f16", synthetic::shape("llama7b", context).unwrap(), lutra_core::Isa::best()).is_err(),
            "{context}"
        );
    }
}

/// `scale · q · key` in the one order every tier follows: 16 lanes, lane j summing
/// `q[i]·k[i]` (multiply, then add) over i ≡ j mod 16 in order; the lanes folded in halves
/// (j + 8, j + 4, j + 2, j + 1); then the tail in order.
fn canonical_score(q: &[f32], key: &[f32], scale: f32) -> f32 {
    let whole = q.len() / 16 * 16;
    let mut lanes = [0.0f32; 16];
    for i in 0..whole {
        lanes[i % 16] += q[i] * key[i];
    }
    for width in [8, 4, 2, 1] {
        for j in 0..width {
            lanes[j] += lanes[j + width];
        }
    }
    let mut tail = 0.0f32;
    for i in whole..q.len() {
        tail += q[i] * key[i];
    }
    (lanes[0] + tail) * scale
}

/// The softmax as every tier computes it: the max, `e^(s − max)` by the engine's `exp`,
/// the sum in 16 lanes (then the lanes in order, then the tail), one reciprocal.
fn canonical_softmax(s: &mut [f32]) {
    let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for v in s.iter_mut() {
        *v = lutra_core::kernels::attend::exp(*v - max);
    }
    let whole = s.len() / 16 * 16;
    let mut lanes = [0.0f32; 16];
    for (i, &v) in s[..whole].iter().enumerate() {
        lanes[i % 16] += v;
    }
    let mut sum = 0.0f32;
    for l in lanes {
        sum += l;
    }
    let mut tail = 0.0f32;
    for &v in &s[whole..] {
        tail += v;
    }
    let inv = 1.0 / (sum + tail);
    for v in s.iter_mut() {
        *v *= inv;
    }
}

/// Scores, probabilities and the value sum are the same floats on every CPU: this build's
/// kernels (AVX2/AVX-512 on such a host; SSE, NEON or simd128 portable loops elsewhere)
/// against the canonical order written out above, bit for bit, for f16, q8_0 and q4_0
/// values, one to four query heads, head dims that take the vector kernels and one that
/// leaves a tail, and row counts past the kernels' 32-row blocks.
#[test]
fn attention_floats_follow_one_order_on_every_cpu() {
    use lutra_core::f16::{f16_bits_to_f32, f32_to_f16_bits};
    use lutra_core::kernels::attend::{self, BlockRows, Rows, SoftmaxStats, ValueRows, VALUE_BLOCK};
    let mut rng = Rng(61);
    for (hd, heads, n) in [(256, 4, 37), (64, 1, 70), (48, 1, 9), (128, 2, 33), (64, 3, 5), (40, 2, 11)] {
        let keys: Vec<u16> = rng.vec(hd * n, 1.0).iter().map(|&v| f32_to_f16_bits(v)).collect();
        let raw_values = rng.vec(hd * n, 1.0);
        let q = rng.vec(hd * heads, 1.0);
        let scale = 1.0 / (hd as f32).sqrt();
        let mut row = vec![0.0; hd];
        let mut scores = vec![0.0; heads * n];
        attend::scores_f16(Rows { data: &keys, stride: hd, len: hd, count: n }, &q, scale, &mut row, &mut scores, n);
        let key = |i: usize| keys[i * hd..][..hd].iter().map(|&h| f16_bits_to_f32(h)).collect::<Vec<f32>>();
        let mut want = vec![0.0f32; heads * n];
        for g in 0..heads {
            for i in 0..n {
                want[g * n + i] = canonical_score(&q[g * hd..][..hd], &key(i), scale);
            }
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&scores), bits(&want), "scores, head_dim {hd}, {heads} heads, {n} rows");
        for g in 0..heads {
            canonical_softmax(&mut want[g * n..][..n]);
        }
        // the value rows in each format, and each row as the f32 values it holds
        let mut f16s = vec![0u16; hd * n];
        let blocks = hd * n / VALUE_BLOCK;
        let (mut q8, mut q4) = ((vec![0u8; hd * n], vec![0u16; blocks]), (vec![0u8; hd * n / 2], vec![0u16; blocks]));
        for (b, x) in raw_values.chunks_exact(VALUE_BLOCK).enumerate() {
            let x: &[f32; VALUE_BLOCK] = x.try_into().unwrap();
            attend::quantize_q8_0(x, &mut q8.0[b * 32..][..32], &mut q8.1[b]);
            attend::quantize_q4_0(x, &mut q4.0[b * 16..][..16], &mut q4.1[b]);
        }
        for (h, &v) in f16s.iter_mut().zip(&raw_values) {
            *h = f32_to_f16_bits(v);
        }
        let formats = [
            ValueRows::F16(Rows { data: &f16s, stride: hd, len: hd, count: n }),
            ValueRows::Q8_0(BlockRows { codes: &q8.0, scales: &q8.1, len: hd, count: n }),
            ValueRows::Q4_0(BlockRows { codes: &q4.0, scales: &q4.1, len: hd, count: n }),
        ];
        // block formats need whole 32-value blocks
        let usable = if hd % VALUE_BLOCK == 0 { 3 } else { 1 };
        for values in formats.into_iter().take(usable) {
            let mut p = scores.clone();
            let mut out = vec![f32::NAN; heads * hd];
            let mut stats = vec![SoftmaxStats::default(); heads];
            attend::softmax_mix(values, &mut p, n, &mut row, &mut out, &mut stats);
            assert_eq!(bits(&p), bits(&want), "probabilities, head_dim {hd}, {heads} heads");
            // `out_g[d] = Σ_i p_g[i] · v_i[d]`, rows in order from +0, multiply then add
            let mut expected = vec![0.0f32; heads * hd];
            let mut v = vec![0.0f32; hd];
            for i in 0..n {
                values.decode(i, &mut v);
                for g in 0..heads {
                    for d in 0..hd {
                        expected[g * hd + d] += want[g * n + i] * v[d];
                    }
                }
            }
            let what = match values {
                ValueRows::F16(_) => "f16",
                ValueRows::Q8_0(_) => "q8_0",
                ValueRows::Q4_0(_) => "q4_0",
            };
            assert_eq!(bits(&out), bits(&expected), "{what} value sum, head_dim {hd}, {heads} heads, {n} rows");
        }
    }
}
