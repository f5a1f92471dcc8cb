//! NoMAD key cache: codebook file round trip and hostile files, key encoding, query
//! tables, k-means, and PQ attention against exact attention.

mod common;

use common::Rng;
use lutra_core::attention::PqKvCache;
use lutra_core::attention::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, ValueFormat, PIECE_ROWS};
use lutra_core::pq::kmeans::kmeans;
use lutra_core::pq::{Codebooks, PqError, PqShape, Rotation};
use lutra_core::Isa;

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn random_books(rng: &mut Rng, shape: PqShape) -> Codebooks {
    let data = rng.vec(shape.layers * shape.kv_heads * shape.book_len(), 1.0);
    Codebooks::new(shape, "gemma3", Rotation::None, data).unwrap()
}

/// Key and query matrices `M = R·D`, `Q = R·D⁻¹` (R a product of random Givens
/// rotations, D positive diagonal), so `Mᵀ·Q = I`, for every (layer, KV head); and, per
/// head, the inverse key matrix `M⁻¹ = D⁻¹·Rᵀ`.
fn random_transforms(rng: &mut Rng, heads: usize, hd: usize) -> (Vec<f32>, Vec<Vec<f32>>) {
    let (mut all, mut inverses) = (Vec::new(), Vec::new());
    for _ in 0..heads {
        let mut r = vec![0.0f32; hd * hd];
        (0..hd).for_each(|i| r[i * hd + i] = 1.0);
        for _ in 0..4 * hd {
            let (i, j) = (rng.below(hd), rng.below(hd));
            if i == j {
                continue;
            }
            let a = rng.normal();
            let (c, s) = (a.cos(), a.sin());
            for row in r.chunks_exact_mut(hd) {
                let (x, y) = (row[i], row[j]);
                row[i] = c * x - s * y;
                row[j] = s * x + c * y;
            }
        }
        let d: Vec<f32> = (0..hd).map(|_| 0.5 + rng.below(100) as f32 / 50.0).collect();
        let m: Vec<f32> = (0..hd * hd).map(|x| r[x] * d[x % hd]).collect();
        let q: Vec<f32> = (0..hd * hd).map(|x| r[x] / d[x % hd]).collect();
        inverses.push((0..hd * hd).map(|x| r[(x % hd) * hd + x / hd] / d[x / hd]).collect());
        all.extend(m);
        all.extend(q);
    }
    (all, inverses)
}

#[test]
fn codebook_file_round_trips() {
    let mut rng = Rng(1);
    for (s, k) in [(4, 16), (8, 256)] {
        let books = random_books(&mut rng, PqShape::new(2, 3, 16, s, k).unwrap());
        let back = Codebooks::from_gguf(&books.to_gguf()).unwrap();
        assert_eq!(back, books);
        assert_eq!(back.context(), None);
        let dated = books.clone().with_context(8192);
        assert_eq!(Codebooks::from_gguf(&dated.to_gguf()).unwrap().context(), Some(8192));
        let scaled = books.clone().with_key_scale((0..6 * 16).map(|i| 0.5 + i as f32 / 64.0).collect()).unwrap();
        assert_eq!(Codebooks::from_gguf(&scaled.to_gguf()).unwrap(), scaled);
        let transformed = scaled.with_key_transform(random_transforms(&mut rng, 6, 16).0).unwrap();
        let back = Codebooks::from_gguf(&transformed.to_gguf()).unwrap();
        assert_eq!(back, transformed);
        assert!(back.key_transform(1, 2).is_some() && back.key_scale(1, 2).is_some());
    }
}

#[test]
fn key_transforms_leave_scores_unchanged() {
    let mut rng = Rng(9);
    let (hd, s) = (16, 8);
    for k in [16, 256] {
        let shape = PqShape::new(1, 2, hd, s, k).unwrap();
        let (transform, inverses) = random_transforms(&mut rng, 2, hd);
        let books = random_books(&mut rng, shape).with_key_transform(transform).unwrap();
        for (kvh, inverse) in inverses.iter().enumerate() {
            let book = books.book(0, kvh);
            for _ in 0..20 {
                // a key whose transform is made of centroids: it encodes to them, and the
                // tables score it as q·key to within their rounding
                let codes: Vec<usize> = (0..s).map(|_| rng.below(k)).collect();
                let moved: Vec<f32> = (0..hd).map(|d| book[(d / 2 * k + codes[d / 2]) * 2 + d % 2]).collect();
                let key: Vec<f32> = inverse.chunks_exact(hd).map(|row| row.iter().zip(&moved).map(|(a, b)| a * b).sum()).collect();
                let mut got = vec![0u8; s];
                books.encode(0, kvh, &key, &mut got);
                assert_eq!(got.iter().map(|&c| c as usize).collect::<Vec<_>>(), codes);
                let q = rng.vec(hd, 1.0);
                let (mut float, mut tables) = (vec![0.0; s * k], vec![0u8; s * k]);
                let ts = books.query_tables(0, kvh, &q, 1.0, &mut float, &mut tables);
                let sum: u16 = (0..s).map(|i| u16::from(tables[i * k + codes[i]])).sum();
                let exact: f32 = q.iter().zip(&key).map(|(a, b)| a * b).sum();
                assert!((ts.score(sum) - exact).abs() <= s as f32 * ts.scale * 0.5 + 1e-3, "{} vs {exact}", ts.score(sum));
            }
        }
    }
}

#[test]
fn impossible_shapes_are_refused() {
    for (hd, s, k) in [(16, 0, 16), (16, 3, 16), (16, 32, 16), (16, 18, 16), (16, 4, 8), (16, 4, 17), (512, 512, 16)] {
        assert!(matches!(PqShape::new(1, 1, hd, s, k), Err(PqError::BadShape(_))), "{hd} {s} {k}");
    }
}

#[test]
fn hostile_codebook_files_are_typed_errors() {
    let mut rng = Rng(2);
    let plain = random_books(&mut rng, PqShape::new(2, 1, 8, 4, 16).unwrap());
    let books = plain.clone().with_key_transform(random_transforms(&mut rng, 2, 8).0).unwrap();
    let file = books.to_gguf();
    // truncated anywhere
    for len in 0..file.len() {
        assert!(Codebooks::from_gguf(&file[..len]).is_err(), "truncated to {len}");
    }
    // any single byte changed: an error or a valid (finite, consistent) codebook, never a panic
    for i in 0..file.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = file.clone();
            bad[i] ^= flip;
            if let Ok(b) = Codebooks::from_gguf(&bad) {
                let s = b.shape();
                assert_eq!(b.book(s.layers - 1, s.kv_heads - 1).len(), s.book_len());
            }
        }
    }
    // a NaN centroid
    let mut nan = plain.to_gguf();
    let at = nan.len() - 4;
    nan[at..].copy_from_slice(&f32::NAN.to_le_bytes());
    assert!(matches!(Codebooks::from_gguf(&nan), Err(PqError::Malformed(_))));
    // a NaN in a key matrix, and matrices of the wrong size
    let mut nan = file.clone();
    let at = nan.len() - 4 * 8 * 8 - 4;
    nan[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    assert!(matches!(Codebooks::from_gguf(&nan), Err(PqError::Malformed(_))));
    assert!(matches!(books.clone().with_key_transform(vec![0.0; 7]), Err(PqError::Malformed(_))));
    // a model file is not a codebook file
    let mut other = file.clone();
    let pos = other.windows(8).position(|w| w == b"lutra-pq").unwrap();
    other[pos..pos + 8].copy_from_slice(b"llama-pq");
    assert!(matches!(Codebooks::from_gguf(&other), Err(PqError::Malformed(_))));
}

#[test]
fn codebooks_for_another_model_are_refused() {
    let mut rng = Rng(3);
    let books = random_books(&mut rng, PqShape::new(2, 1, 16, 4, 16).unwrap());
    let shape = AttentionShape { layers: 3, heads: 4, kv_heads: 1, head_dim: 16, context: 64 };
    assert!(matches!(PqKvCache::new(shape, books.clone(), Isa::Scalar), Err(PqError::WrongModel { .. })));
    let shape = AttentionShape { layers: 2, heads: 4, kv_heads: 2, head_dim: 16, context: 64 };
    assert!(matches!(PqKvCache::new(shape, books, Isa::Scalar), Err(PqError::WrongModel { .. })));
}

#[test]
fn encoding_picks_the_nearest_centroid() {
    let mut rng = Rng(4);
    let shape = PqShape::new(1, 1, 8, 4, 16).unwrap();
    let books = random_books(&mut rng, shape);
    let book = books.book(0, 0);
    for _ in 0..50 {
        let key = rng.vec(8, 1.0);
        let mut codes = [0u8; 4];
        books.encode(0, 0, &key, &mut codes);
        for s in 0..4 {
            let x = &key[2 * s..2 * s + 2];
            let d = |c: usize| {
                let cv = &book[(s * 16 + c) * 2..][..2];
                (cv[0] - x[0]).powi(2) + (cv[1] - x[1]).powi(2)
            };
            assert!((0..16).all(|c| d(codes[s] as usize) <= d(c)));
        }
    }
}

#[test]
fn query_tables_reproduce_centroid_dot_products() {
    let mut rng = Rng(5);
    for k in [16, 256] {
        let shape = PqShape::new(1, 1, 32, 8, k).unwrap();
        let books = random_books(&mut rng, shape);
        let q = rng.vec(32, 1.0);
        let (mut float, mut tables) = (vec![0.0; 8 * k], vec![0u8; 8 * k]);
        let ts = books.query_tables(0, 0, &q, 0.5, &mut float, &mut tables);
        // a key made of centroids: its score is Σ_s q_s · c_s · 0.5, within the rounding of 8 tables
        let book = books.book(0, 0);
        for _ in 0..20 {
            let codes: Vec<usize> = (0..8).map(|_| rng.below(k)).collect();
            let exact: f32 = (0..8).map(|s| (0..4).map(|d| q[s * 4 + d] * book[(s * k + codes[s]) * 4 + d]).sum::<f32>() * 0.5).sum();
            let sum: u16 = (0..8).map(|s| u16::from(tables[s * k + codes[s]])).sum();
            assert!((ts.score(sum) - exact).abs() <= 8.0 * ts.scale * 0.5 + 1e-4, "{} vs {exact}", ts.score(sum));
            // `float` holds the unrounded tables themselves
            let unrounded: f32 = (0..8).map(|s| float[s * k + codes[s]]).sum();
            assert!((unrounded - exact).abs() < 1e-4, "{unrounded} vs {exact}");
        }
    }
}

#[test]
fn uneven_subspaces_encode_score_and_round_trip() {
    let mut rng = Rng(10);
    for k in [16, 256] {
        // 10 dimensions in 4 sub-spaces: 3, 3, 2, 2
        let shape = PqShape::new(1, 1, 10, 4, k).unwrap();
        assert_eq!((0..4).map(|s| shape.sub_range(s)).collect::<Vec<_>>(), [0..3, 3..6, 6..8, 8..10]);
        let books = random_books(&mut rng, shape);
        assert_eq!(Codebooks::from_gguf(&books.to_gguf()).unwrap(), books);
        let book = books.book(0, 0);
        let centroid = |s: usize, c: usize| {
            let r = shape.sub_range(s);
            &book[k * r.start + c * r.len()..][..r.len()]
        };
        for _ in 0..20 {
            let codes: Vec<usize> = (0..4).map(|_| rng.below(k)).collect();
            let key: Vec<f32> = (0..4).flat_map(|s| centroid(s, codes[s]).to_vec()).collect();
            let mut got = [0u8; 4];
            books.encode(0, 0, &key, &mut got);
            assert_eq!(got.map(usize::from).to_vec(), codes);
            let q = rng.vec(10, 1.0);
            let (mut float, mut tables) = (vec![0.0; 4 * k], vec![0u8; 4 * k]);
            let ts = books.query_tables(0, 0, &q, 1.0, &mut float, &mut tables);
            let sum: u16 = (0..4).map(|s| u16::from(tables[s * k + codes[s]])).sum();
            let exact: f32 = q.iter().zip(&key).map(|(a, b)| a * b).sum();
            assert!((ts.score(sum) - exact).abs() <= 4.0 * ts.scale * 0.5 + 1e-4, "{} vs {exact}", ts.score(sum));
        }
    }
}

#[test]
fn kmeans_is_deterministic_and_finds_separated_clusters() {
    let mut rng = Rng(6);
    let centers = [[-10.0f32, 0.0], [10.0, 0.0], [0.0, 10.0], [0.0, -10.0]];
    let points: Vec<f32> = (0..400)
        .flat_map(|i| {
            let c = centers[i % 4];
            [c[0] + rng.normal() * 0.1, c[1] + rng.normal() * 0.1]
        })
        .collect();
    let (mut a, mut b) = (vec![0.0; 8], vec![0.0; 8]);
    let err = kmeans(&points, 2, 4, 20, 7, &mut a);
    kmeans(&points, 2, 4, 20, 7, &mut b);
    assert_eq!(a, b);
    assert!(err < 0.1, "mean squared error {err}");
    for c in centers {
        assert!(a.chunks_exact(2).any(|m| (m[0] - c[0]).abs() < 0.2 && (m[1] - c[1]).abs() < 0.2), "{c:?} not found in {a:?}");
    }
}

/// Keys built from centroids are encoded exactly, so PQ attention differs from exact
/// attention (f32 keys) only by the u8 rounding of the query tables; and every ISA's scan
/// (head by head, or four heads per gather with 256 centroids) gives the scalar result
/// bit for bit, for groups of 2 and of 5 query heads per KV head.
#[test]
fn pq_attention_matches_exact_attention_on_representable_keys() {
    let mut rng = Rng(7);
    for (s, k, heads) in [(8, 16, 4), (16, 16, 4), (8, 256, 4), (8, 256, 10)] {
        let shape = AttentionShape { layers: 2, heads, kv_heads: 2, head_dim: 16, context: 80 };
        let books = random_books(&mut rng, PqShape::new(2, 2, 16, s, k).unwrap());
        let mut caches: Vec<PqKvCache> = Isa::available().map(|isa| PqKvCache::new(shape, books.clone(), isa).unwrap()).collect();
        let mut exact = ExactKvCache::new(shape, KeyPrecision::F32);
        let sd = 16 / s;
        for pos in 0..shape.context {
            for layer in 0..2 {
                let mut key = vec![0.0; 32];
                for h in 0..2 {
                    for sub in 0..s {
                        let c = rng.below(k);
                        key[h * 16 + sub * sd..][..sd].copy_from_slice(&books.book(layer, h)[(sub * k + c) * sd..][..sd]);
                    }
                }
                let v = rng.vec(32, 1.0);
                caches.iter_mut().for_each(|pq| pq.store(layer, pos, &key, &v));
                exact.store(layer, pos, &key, &v);
            }
        }
        for (first, pos) in [(0, 0), (0, 79), (5, 40), (33, 64), (31, 31)] {
            let q = rng.vec(heads * 16, 1.0);
            let mut b = vec![0.0; q.len()];
            exact.attend(1, first, pos, &q, 0.25, &mut b);
            let mut scalar = Vec::new();
            for pq in &mut caches {
                let mut a = vec![0.0; q.len()];
                pq.attend(1, first, pos, &q, 0.25, &mut a);
                let err = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
                assert!(err < 0.05, "S={s} K={k} first={first} pos={pos}: max |pq − exact| {err}");
                if scalar.is_empty() {
                    scalar = a;
                } else {
                    assert_eq!(a, scalar, "S={s} K={k} {heads} heads first={first} pos={pos}: an ISA's scores differ from scalar");
                }
            }
        }
    }
}

/// The same random key and value (head_dim 16, one KV head) at `pos` of both layers of both caches.
fn store_both(rng: &mut Rng, a: &mut impl KvCache, b: &mut impl KvCache, pos: usize) {
    for layer in 0..2 {
        let (k, v) = (rng.vec(16, 3.0), rng.vec(16, 1.0));
        a.store(layer, pos, &k, &v);
        b.store(layer, pos, &k, &v);
    }
}

/// Positions kept exact (sinks and the recent window) score exactly: with every position
/// covered, PQ attention equals exact f16-key attention even with useless codebooks.
#[test]
fn exactly_kept_positions_score_exactly() {
    let mut rng = Rng(8);
    let shape = AttentionShape { layers: 2, heads: 2, kv_heads: 1, head_dim: 16, context: 70 };
    let books = random_books(&mut rng, PqShape::new(2, 1, 16, 8, 16).unwrap());
    for (sink, recent) in [(70, 0), (0, 70), (30, 40), (5, 65)] {
        let mut pq = PqKvCache::new(shape, books.clone(), Isa::best()).unwrap().with_exact_keys(sink, recent);
        let mut exact = ExactKvCache::new(shape, KeyPrecision::F16);
        let mut worst = 0.0f32;
        for pos in 0..shape.context {
            store_both(&mut rng, &mut pq, &mut exact, pos);
            let q = rng.vec(32, 1.0);
            let (mut a, mut b) = (vec![0.0; 32], vec![0.0; 32]);
            // with sink + recent = context every position is exact from the start
            pq.attend(1, 0, pos, &q, 0.25, &mut a);
            exact.attend(1, 0, pos, &q, 0.25, &mut b);
            worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(worst, f32::max);
        }
        assert!(worst < 1e-5, "sink {sink} recent {recent}: max |pq − exact| {worst}");
    }
    // layers kept exact score exactly too, with no window at all
    let mut pq = PqKvCache::new(shape, books.clone(), Isa::best()).unwrap().with_layers(&[false, true], &[]);
    let mut exact = ExactKvCache::new(shape, KeyPrecision::F16);
    for pos in 0..shape.context {
        store_both(&mut rng, &mut pq, &mut exact, pos);
    }
    let q = rng.vec(32, 1.0);
    let (mut a, mut b) = (vec![0.0; 32], vec![0.0; 32]);
    pq.attend(1, 3, 69, &q, 0.25, &mut a);
    exact.attend(1, 3, 69, &q, 0.25, &mut b);
    assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-5), "{a:?} vs {b:?}");
    pq.attend(0, 3, 69, &q, 0.25, &mut a);
    exact.attend(0, 3, 69, &q, 0.25, &mut b);
    assert!(a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-3), "layer 0 is PQ with useless codebooks");
    // 1 PQ layer × 3 blocks × 32 keys × 4 code bytes + 1 exact layer × 70 positions × 16 f16
    assert_eq!(pq.key_bytes(), 3 * 32 * 4 + 2 * 70 * 16);

    // an exact layer with a sliding window keeps a ring of it, and attends as before
    let mut ring = PqKvCache::new(shape, books.clone(), Isa::best()).unwrap().with_layers(&[false, true], &[0, 16]);
    assert_eq!(ring.key_bytes(), 3 * 32 * 4 + 2 * 16 * 16);
    assert_eq!(ring.value_bytes(), (70 + 16) * 16 * 2);
    let mut worst = 0.0f32;
    for pos in 0..shape.context {
        store_both(&mut rng, &mut ring, &mut exact, pos);
        let first = (pos + 1).saturating_sub(16);
        ring.attend(1, first, pos, &q, 0.25, &mut a);
        exact.attend(1, first, pos, &q, 0.25, &mut b);
        worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(worst, f32::max);
    }
    assert!(worst < 1e-5, "ring vs exact: {worst}");
    // the exact window's keys are kept for the PQ layers only
    let both = PqKvCache::new(shape, books.clone(), Isa::best()).unwrap().with_exact_keys(2, 8).with_layers(&[false, true], &[0, 16]);
    assert_eq!(both.key_bytes(), 3 * 32 * 4 + 2 * 16 * 16 + 2 * (2 + 8) * 16);
    // ... and found there when the PQ layer is not layer 0: a window over the whole
    // context in PQ layer 1 scores every position exactly
    let mut late =
        PqKvCache::new(shape, books.clone(), Isa::best()).unwrap().with_exact_keys(4, shape.context).with_layers(&[true, false], &[]);
    let mut exact = ExactKvCache::new(shape, KeyPrecision::F16);
    for pos in 0..shape.context {
        store_both(&mut rng, &mut late, &mut exact, pos);
    }
    late.attend(1, 0, 69, &q, 0.25, &mut a);
    exact.attend(1, 0, 69, &q, 0.25, &mut b);
    assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-5), "{a:?} vs {b:?}");

    // a window shorter than the context: positions outside it use the codes
    let pq = PqKvCache::new(shape, books, Isa::best()).unwrap().with_exact_keys(1, 4);
    // 2 layers × 3 blocks of 32 keys × 4 code bytes, plus f16 keys of 1 + 4 positions per layer
    assert_eq!(pq.key_bytes(), 2 * 3 * 32 * 4 + 2 * 2 * (1 + 4) * 16);
}

/// A block value format reaches every layer of a PQ cache — the PQ layers' values and
/// the exact layers' — whichever order the builders run in: with every key kept exact,
/// PQ attention equals an exact cache with the same q4_0 values. Head sizes that are not
/// a whole number of 32-value blocks are refused.
#[test]
fn block_values_reach_every_layer_of_a_pq_cache() {
    let mut rng = Rng(21);
    let shape = AttentionShape { layers: 2, heads: 4, kv_heads: 2, head_dim: 32, context: 70 };
    let books = random_books(&mut rng, PqShape::new(2, 2, 32, 16, 16).unwrap());
    let q4 = ValueFormat::Q4_0;
    let new = || PqKvCache::new(shape, books.clone(), Isa::best()).unwrap().with_exact_keys(shape.context, 0);
    let mut after = new().with_layers(&[false, true], &[0, 16]).with_value_format(q4).unwrap();
    let mut before = new().with_value_format(q4).unwrap().with_layers(&[false, true], &[0, 16]);
    let mut exact = ExactKvCache::with_value_format(shape, KeyPrecision::F16, &[], q4).unwrap();
    // PQ layer: 70 rows, exact layer: a ring of 16; 2 KV heads of one 18-byte block each
    assert_eq!(after.value_bytes(), (70 + 16) * 2 * 18);
    assert_eq!((after.value_format(), before.value_bytes()), (q4, after.value_bytes()));
    let mut worst = 0.0f32;
    for pos in 0..shape.context {
        for layer in 0..2 {
            let (k, v) = (rng.vec(64, 3.0), rng.vec(64, 1.0));
            for c in [&mut after as &mut dyn KvCache, &mut before, &mut exact] {
                c.store(layer, pos, &k, &v);
            }
        }
        let q = rng.vec(4 * 32, 1.0);
        for (layer, first) in [(0, 0), (1, (pos + 1).saturating_sub(16))] {
            let mut outs = [vec![0.0; q.len()], vec![0.0; q.len()], vec![0.0; q.len()]];
            for (c, out) in [&mut after as &mut dyn KvCache, &mut before, &mut exact].into_iter().zip(&mut outs) {
                c.attend(layer, first, pos, &q, 0.2, out);
            }
            assert_eq!(outs[0], outs[1], "layer {layer} position {pos}");
            worst = outs[0].iter().zip(&outs[2]).map(|(x, y)| (x - y).abs()).fold(worst, f32::max);
        }
    }
    assert!(worst < 1e-5, "max |pq − exact| {worst}");
    let odd = AttentionShape { head_dim: 16, ..shape };
    let books = random_books(&mut rng, PqShape::new(2, 2, 16, 8, 16).unwrap());
    let refused = PqKvCache::new(odd, books, Isa::best()).unwrap().with_value_format(ValueFormat::Q8_0).err();
    assert_eq!(refused, Some(PqError::Kernel(lutra_core::Error::ValueFormat { format: "q8_0", head_dim: 16 })));
}

/// A sliding-window layer coded with PQ keeps a ring of its window's codes and values
/// (window 40: not a whole number of 32-key blocks) and attends as a full-context PQ
/// cache does, with and without exactly kept positions, before and long after wrapping.
#[test]
fn windowed_pq_layers_keep_a_ring_and_attend_as_the_full_cache() {
    let mut rng = Rng(13);
    let (window, context) = (40, 150);
    let shape = AttentionShape { layers: 2, heads: 2, kv_heads: 1, head_dim: 16, context };
    for (subspaces, centroids) in [(8, 16), (4, 256)] {
        let books = random_books(&mut rng, PqShape::new(2, 1, 16, subspaces, centroids).unwrap());
        let code_bytes = books.shape().code_bytes_per_key();
        for (sink, recent) in [(0, 0), (4, 8)] {
            let new = || PqKvCache::new(shape, books.clone(), Isa::best()).unwrap().with_exact_keys(sink, recent);
            let mut ring = new().with_layers(&[], &[window, 0]);
            let mut full = new();
            // layer 0: 2 blocks of 32 keys; layer 1: 5 blocks
            assert_eq!(ring.key_bytes(), (2 + 5) * 32 * code_bytes + 2 * 2 * (sink + recent) * 16);
            assert_eq!(ring.value_bytes(), (window + context) * 16 * 2);
            let mut worst = 0.0f32;
            for pos in 0..context {
                store_both(&mut rng, &mut ring, &mut full, pos);
                let q = rng.vec(32, 1.0);
                let first = (pos + 1).saturating_sub(window);
                for (layer, first) in [(0, first), (0, first + (pos - first) / 2), (1, 0)] {
                    let (mut a, mut b) = (vec![0.0; 32], vec![0.0; 32]);
                    ring.attend(layer, first, pos, &q, 0.25, &mut a);
                    full.attend(layer, first, pos, &q, 0.25, &mut b);
                    worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(worst, f32::max);
                }
            }
            assert!(worst < 1e-5, "K={centroids} sink {sink} recent {recent}: max |ring − full| {worst}");
        }
    }
}

/// Over a span longer than `PIECE_ROWS` (scored in pieces): exactly kept positions in the
/// first, middle and last pieces still overwrite their PQ scores (sinks and recent keys
/// covering the span equal exact attention), and a PQ ring longer than a piece attends
/// as the full-context PQ cache does.
#[test]
fn long_pq_spans_attend_in_pieces() {
    let mut rng = Rng(15);
    let context = 2 * PIECE_ROWS + 300;
    let shape = AttentionShape { layers: 2, heads: 2, kv_heads: 1, head_dim: 16, context };
    for (subspaces, centroids) in [(8, 16), (4, 256)] {
        let books = random_books(&mut rng, PqShape::new(2, 1, 16, subspaces, centroids).unwrap());
        let (sink, recent) = (PIECE_ROWS + 10, PIECE_ROWS + 290);
        let mut covered = PqKvCache::new(shape, books.clone(), Isa::best()).unwrap().with_exact_keys(sink, recent);
        let mut exact = ExactKvCache::new(shape, KeyPrecision::F16);
        let window = PIECE_ROWS + 40;
        let mut ring = PqKvCache::new(shape, books.clone(), Isa::best()).unwrap().with_layers(&[], &[window, 0]);
        let mut full = PqKvCache::new(shape, books, Isa::best()).unwrap();
        for pos in 0..context {
            store_both(&mut rng, &mut covered, &mut exact, pos);
            store_both(&mut rng, &mut ring, &mut full, pos);
        }
        // the recent keys are a ring, valid for the latest position only
        let last = context - 1;
        for first in [0, 7, PIECE_ROWS + 1, 2 * PIECE_ROWS - 5] {
            let q = rng.vec(32, 1.0);
            let (mut a, mut b) = (vec![0.0; 32], vec![0.0; 32]);
            covered.attend(1, first, last, &q, 0.25, &mut a);
            exact.attend(1, first, last, &q, 0.25, &mut b);
            let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            assert!(worst < 1e-5, "K={centroids} from {first}: max |pq − exact| {worst}");
        }
        let q = rng.vec(32, 1.0);
        let (mut a, mut b) = (vec![0.0; 32], vec![0.0; 32]);
        ring.attend(0, last + 1 - window, last, &q, 0.25, &mut a);
        full.attend(0, last + 1 - window, last, &q, 0.25, &mut b);
        let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        assert!(worst < 1e-5, "K={centroids}: max |ring − full| {worst}");
        full.attend(0, 0, last, &q, 0.25, &mut b);
        assert!(a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-4), "the window changes the result");
    }
}
