//! Sampler: greedy, determinism, empirical frequencies against the softmax, top-k / top-p
//! / min-p against a naive llama.cpp-order reference, repeat penalty, typed errors.

mod common;
use common::Rng;

use lutra_core::sampler::{argmax, scratch_len, Candidate, Sampler, SamplerConfig, SamplerError};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

/// Temperature 1, every filter and the penalty off.
fn plain(seed: u64) -> SamplerConfig {
    SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, repeat_penalty: 1.0, repeat_last_n: 64, seed }
}

fn scratch(vocab: usize) -> Vec<Candidate> {
    vec![Candidate::default(); scratch_len(vocab)]
}

fn draws(config: SamplerConfig, logits: &[f32], recent: &[u32], n: usize) -> Vec<u32> {
    let mut s = Sampler::new(config).unwrap();
    let mut sc = scratch(logits.len());
    (0..n).map(|_| s.sample(logits, recent, &mut sc).unwrap()).collect()
}

fn counts(tokens: &[u32], vocab: usize) -> Vec<usize> {
    let mut c = vec![0; vocab];
    for &t in tokens {
        c[t as usize] += 1;
    }
    c
}

fn kept_ids(config: SamplerConfig, logits: &[f32], recent: &[u32]) -> Vec<u32> {
    let s = Sampler::new(config).unwrap();
    let mut sc = scratch(logits.len());
    let mut ids: Vec<u32> = s.filter(logits, recent, &mut sc).unwrap().iter().map(|c| c.id).collect();
    ids.sort_unstable();
    ids
}

/// Probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 on ids 3, 0, 4, 1, 2 (logits = ln p).
fn hand_made() -> (Vec<f32>, [u32; 5]) {
    let order = [3u32, 0, 4, 1, 2];
    let p = [0.5f32, 0.25, 0.125, 0.0625, 0.0625];
    let mut logits = vec![0.0; 5];
    for (&id, &p) in order.iter().zip(&p) {
        logits[id as usize] = p.ln() + 1.7; // an offset changes nothing
    }
    (logits, order)
}

/// llama.cpp's chain written naively: full sort, top-k, softmax, top-p, min-p.
fn reference_kept(config: &SamplerConfig, logits: &[f32]) -> Vec<u32> {
    let mut c: Vec<(f32, u32)> = logits.iter().enumerate().filter(|(_, l)| l.is_finite()).map(|(i, &l)| (l, i as u32)).collect();
    c.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(a.1.cmp(&b.1)));
    if config.top_k > 0 {
        c.truncate(config.top_k);
    }
    let max = c[0].0;
    let z: f64 = c.iter().map(|x| ((x.0 - max) as f64).exp()).sum();
    if config.top_p < 1.0 {
        let mut cum = 0.0;
        for i in 0..c.len() {
            cum += ((c[i].0 - max) as f64).exp() / z;
            if cum >= config.top_p as f64 {
                c.truncate(i + 1);
                break;
            }
        }
    }
    if config.min_p > 0.0 {
        let min_logit = max + config.min_p.ln();
        c.retain(|x| x.0 >= min_logit);
    }
    let mut ids: Vec<u32> = c.iter().map(|x| x.1).collect();
    ids.sort_unstable();
    ids
}

#[test]
fn greedy_picks_argmax_lowest_id_on_ties() {
    let mut s = Sampler::new(SamplerConfig::greedy()).unwrap();
    let mut sc = scratch(6);
    assert_eq!(s.sample(&[0.1, 2.0, -3.0, 1.9, f32::NAN, 0.0], &[], &mut sc), Ok(1));
    assert_eq!(s.sample(&[0.5, 3.0, 3.0, f32::NEG_INFINITY, 3.0, 1.0], &[], &mut sc), Ok(1));
    assert_eq!(s.sample(&[-0.0, 0.0, -1.0, -2.0, -3.0, -4.0], &[], &mut sc), Ok(0));
    let mut rng = Rng(7);
    let logits = rng.logits(50_000, 20.0);
    let argmax = (0..logits.len()).fold(0, |b, i| if logits[i] > logits[b] { i } else { b });
    let mut sc = scratch(logits.len());
    assert_eq!(s.sample(&logits, &[], &mut sc), Ok(argmax as u32));
    // Greedy ignores the filters: the argmax survives them all.
    let cfg = SamplerConfig { temperature: 0.0, top_k: 3, top_p: 0.1, min_p: 0.9, ..SamplerConfig::default() };
    assert_eq!(Sampler::new(cfg).unwrap().sample(&logits, &[], &mut sc), Ok(argmax as u32));
}

/// Greedy against a naive loop, on vocabularies of every length around `argmax`'s lanes
/// and chunks, drawn from few distinct values (ties), NaN, ±0, ±∞: with the penalty off
/// (`argmax` of the raw logits) and on (the penalized candidates' path).
#[test]
fn greedy_matches_a_naive_argmax_with_ties_nan_and_infinities() {
    let mut rng = Rng(11);
    let pool = [f32::NAN, f32::NEG_INFINITY, -0.0, 0.0, 1.5, -2.25, 3.0, 7.0];
    for case in 0..3000 {
        let n = if case % 10 == 0 { 1 + rng.below(5000) } else { 1 + rng.below(80) };
        let mut logits: Vec<f32> = (0..n).map(|_| pool[rng.below(pool.len())]).collect();
        if case % 7 == 0 {
            logits[rng.below(n)] = f32::INFINITY;
        }
        let penalty = if case % 2 == 0 { 1.0 } else { 1.5 };
        let recent: Vec<u32> = (0..rng.below(4)).map(|_| rng.below(n) as u32).collect();
        let mut values: Vec<f32> = logits.iter().map(|&l| if l.is_nan() { f32::NEG_INFINITY } else { l }).collect();
        if penalty != 1.0 {
            let mut seen = vec![false; n];
            for &t in &recent {
                let (t, l) = (t as usize, logits[t as usize]);
                if !seen[t] && l.is_finite() {
                    values[t] = if l <= 0.0 { l * penalty } else { l / penalty };
                }
                seen[t] = true;
            }
        }
        let mut best: Option<usize> = None;
        for (i, &v) in values.iter().enumerate() {
            if v > f32::NEG_INFINITY && best.is_none_or(|b| v > values[b]) {
                best = Some(i);
            }
        }
        let want = match (logits.iter().position(|&l| l == f32::INFINITY), best) {
            (Some(t), _) => Err(SamplerError::InfiniteLogit { token: t as u32 }),
            (None, Some(b)) => Ok(b as u32),
            (None, None) => Err(SamplerError::NoCandidates),
        };
        let cfg = SamplerConfig { repeat_penalty: penalty, ..SamplerConfig::greedy() };
        let got = Sampler::new(cfg).unwrap().sample(&logits, &recent, &mut scratch(n));
        assert_eq!(got, want, "case {case}: {logits:?}, recent {recent:?}, penalty {penalty}");
        if penalty == 1.0 {
            let raw = logits.iter().position(|&l| l == f32::INFINITY).or(best);
            assert_eq!(argmax(&logits), raw, "case {case}: {logits:?}");
        }
    }
    assert_eq!(argmax(&[]), None);
}

#[test]
fn same_seed_same_tokens_different_seeds_differ() {
    let logits = Rng(1).logits(64, 2.0);
    let a = draws(plain(42), &logits, &[], 200);
    assert_eq!(a, draws(plain(42), &logits, &[], 200));
    assert_ne!(a, draws(plain(43), &logits, &[], 200));
    assert_ne!(draws(plain(0), &logits, &[], 200), draws(plain(1), &logits, &[], 200));
    // reseed restarts the stream.
    let mut s = Sampler::new(plain(5)).unwrap();
    let mut sc = scratch(logits.len());
    let first: Vec<u32> = (0..20).map(|_| s.sample(&logits, &[], &mut sc).unwrap()).collect();
    s.reseed(5);
    let again: Vec<u32> = (0..20).map(|_| s.sample(&logits, &[], &mut sc).unwrap()).collect();
    assert_eq!(first, again);
}

#[test]
fn golden_sequence_is_the_same_on_every_platform() {
    let logits: Vec<f32> = (0..16).map(|i| (i % 5) as f32 * 0.25).collect();
    let got = draws(plain(2024), &logits, &[], 24);
    let golden: [u32; 24] = [4, 10, 13, 3, 6, 8, 9, 10, 1, 15, 9, 12, 14, 12, 7, 3, 9, 9, 1, 0, 4, 3, 11, 1];
    assert_eq!(got, golden);
    let cfg = SamplerConfig { seed: 7, ..SamplerConfig::default() };
    assert_eq!(kept_ids(cfg, &logits, &[]), (0..15).collect::<Vec<u32>>());
    let got = draws(cfg, &logits, &[], 24);
    // top_p 0.95 drops token 15 (the last of the lowest logits, by id).
    let golden: [u32; 24] = [4, 14, 3, 13, 7, 2, 3, 2, 7, 3, 14, 9, 13, 14, 10, 8, 14, 6, 2, 7, 9, 14, 8, 8];
    assert_eq!(got, golden);
}

#[test]
fn top_k_1_equals_greedy() {
    let mut rng = Rng(3);
    for seed in 0..8 {
        let logits = rng.logits(1000, 8.0);
        let mut greedy = Sampler::new(SamplerConfig::greedy()).unwrap();
        let mut sc = scratch(logits.len());
        let expected = greedy.sample(&logits, &[], &mut sc).unwrap();
        let cfg = SamplerConfig { top_k: 1, temperature: 1.5, top_p: 1.0, min_p: 0.0, seed, ..SamplerConfig::default() };
        assert!(draws(cfg, &logits, &[], 10).iter().all(|&t| t == expected));
    }
}

#[test]
fn frequencies_match_softmax() {
    let logits = [1.0f32, 0.0, 2.0, -1.0, 0.5, f32::NAN];
    let max = 2.0f64;
    let z: f64 = logits[..5].iter().map(|&l| (l as f64 - max).exp()).sum();
    let n = 20_000;
    let c = counts(&draws(plain(11), &logits, &[], n), logits.len());
    for i in 0..5 {
        let p = (logits[i] as f64 - max).exp() / z;
        let f = c[i] as f64 / n as f64;
        assert!((f - p).abs() < 0.015, "token {i}: frequency {f}, softmax {p}");
    }
    assert_eq!(c[5], 0, "NaN logit was sampled");
}

#[test]
fn temperature_sharpens_and_flattens() {
    let logits = [1.0f32, 0.0];
    let n = 4000;
    let share = |t: f32| {
        let cfg = SamplerConfig { temperature: t, ..plain(9) };
        counts(&draws(cfg, &logits, &[], n), 2)[0] as f64 / n as f64
    };
    // p0 = 1 / (1 + e^(-1/T)): 0.731 at T=1, 0.881 at T=0.5, 0.562 at T=4.
    assert!((share(1.0) - 0.731).abs() < 0.03);
    assert!((share(0.5) - 0.881).abs() < 0.03);
    assert!((share(4.0) - 0.562).abs() < 0.03);
    assert!(share(1e-6) == 1.0);
}

#[test]
fn top_p_keeps_smallest_prefix_reaching_p() {
    let (logits, order) = hand_made();
    let sorted = |ids: &[u32]| {
        let mut v = ids.to_vec();
        v.sort_unstable();
        v
    };
    // Cumulative: 0.5, 0.75, 0.875, 0.9375, 1.
    for (p, keep) in [(0.3f32, 1), (0.6, 2), (0.8, 3), (0.9, 4), (0.99, 5), (1.0, 5)] {
        let cfg = SamplerConfig { top_p: p, ..plain(1) };
        assert_eq!(kept_ids(cfg, &logits, &[]), sorted(&order[..keep]), "top_p {p}");
    }
    // Sampling sees exactly the kept set.
    let cfg = SamplerConfig { top_p: 0.8, ..plain(1) };
    let c = counts(&draws(cfg, &logits, &[], 2000), 5);
    for (rank, &id) in order.iter().enumerate() {
        assert_eq!(c[id as usize] > 0, rank < 3, "token {id}: {c:?}");
    }
    // Masses are normalized over the top-k set: with top_k 3 the kept masses are
    // 4/7, 2/7, 1/7, so top_p 0.8 keeps 2.
    let cfg = SamplerConfig { top_k: 3, top_p: 0.8, ..plain(1) };
    assert_eq!(kept_ids(cfg, &logits, &[]), sorted(&order[..2]));
}

#[test]
fn min_p_drops_tokens_below_fraction_of_max() {
    let (logits, order) = hand_made();
    let sorted = |ids: &[u32]| {
        let mut v = ids.to_vec();
        v.sort_unstable();
        v
    };
    // p / p_max: 1, 0.5, 0.25, 0.125, 0.125.
    for (m, keep) in [(0.0f32, 5), (0.1, 5), (0.2, 3), (0.3, 2), (0.6, 1), (1.0, 1)] {
        let cfg = SamplerConfig { min_p: m, ..plain(1) };
        assert_eq!(kept_ids(cfg, &logits, &[]), sorted(&order[..keep]), "min_p {m}");
    }
    let cfg = SamplerConfig { min_p: 0.3, ..plain(2) };
    let c = counts(&draws(cfg, &logits, &[], 2000), 5);
    for (rank, &id) in order.iter().enumerate() {
        assert_eq!(c[id as usize] > 0, rank < 2, "token {id}: {c:?}");
    }
    // Combined: the shorter of the two prefixes.
    let cfg = SamplerConfig { top_p: 0.9, min_p: 0.2, ..plain(1) };
    assert_eq!(kept_ids(cfg, &logits, &[]), sorted(&order[..3]));
    let cfg = SamplerConfig { top_p: 0.6, min_p: 0.2, ..plain(1) };
    assert_eq!(kept_ids(cfg, &logits, &[]), sorted(&order[..2]));
}

#[test]
fn filters_match_naive_reference() {
    let mut rng = Rng(99);
    let configs = [
        (0, 0.95, 0.0),
        (0, 0.5, 0.0),
        (0, 0.999, 0.0),
        (40, 0.95, 0.05),
        (100, 1.0, 0.0),
        (0, 1.0, 0.01),
        (7, 0.3, 0.2),
        (3000, 0.9, 0.0),
        (5000, 1.0, 0.0),
    ];
    for (round, scale) in [2.0f32, 8.0, 30.0].into_iter().enumerate() {
        let mut logits = rng.logits(3000, scale);
        logits[17] = f32::NAN;
        logits[18] = f32::NEG_INFINITY;
        logits[100] = logits[200]; // a tie
        for &(top_k, top_p, min_p) in &configs {
            let cfg = SamplerConfig { top_k, top_p, min_p, ..plain(round as u64) };
            let s = Sampler::new(cfg).unwrap();
            let mut sc = scratch(logits.len());
            let kept = s.filter(&logits, &[], &mut sc).unwrap();
            // The draw's order: by logit descending then id, or by id.
            let by_logit = kept.windows(2).all(|w| w[0].logit > w[1].logit || (w[0].logit == w[1].logit && w[0].id < w[1].id));
            let by_id = kept.windows(2).all(|w| w[0].id < w[1].id);
            assert!(by_logit || by_id);
            assert_eq!(by_logit, top_p < 1.0 || (top_k > 0 && top_k < 2998));
            let mut ids: Vec<u32> = kept.iter().map(|c| c.id).collect();
            ids.sort_unstable();
            assert_eq!(ids, reference_kept(&cfg, &logits), "scale {scale} top_k {top_k} top_p {top_p} min_p {min_p}");
        }
    }
}

#[test]
fn large_vocab_default_config() {
    let vocab = 262_144;
    let mut logits = Rng(5).logits(vocab, 12.0);
    logits[1234] = 40.0;
    logits[99_999] = 39.5;
    let mut s = Sampler::new(SamplerConfig { seed: 3, ..SamplerConfig::default() }).unwrap();
    let mut sc = scratch(vocab);
    for _ in 0..3 {
        let t = s.sample(&logits, &[], &mut sc).unwrap();
        assert!(t == 1234 || t == 99_999, "{t}");
    }
}

#[test]
fn repeat_penalty_follows_llama_cpp_sign_rule() {
    let logits = [2.0f32, -1.0, 0.5, 1.0, 0.0];
    let cfg = SamplerConfig { repeat_penalty: 2.0, repeat_last_n: 64, ..plain(1) };
    let s = Sampler::new(cfg).unwrap();
    let mut sc = scratch(logits.len());
    // Token 0 twice: penalized once. Token 4 (logit 0) stays 0.
    let kept = s.filter(&logits, &[0, 1, 0, 4], &mut sc).unwrap();
    let mut by_id = [0.0f32; 5];
    for c in kept.iter() {
        by_id[c.id as usize] = c.logit;
    }
    assert_eq!(by_id, [1.0, -2.0, 0.5, 1.0, 0.0]);
    // The input is not modified.
    assert_eq!(logits, [2.0, -1.0, 0.5, 1.0, 0.0]);
    // Only the last repeat_last_n tokens count.
    let cfg2 = SamplerConfig { repeat_last_n: 2, ..cfg };
    let kept = Sampler::new(cfg2).unwrap().filter(&logits, &[0, 3, 3], &mut sc).unwrap();
    let l3 = kept.iter().find(|c| c.id == 3).unwrap().logit;
    let l0 = kept.iter().find(|c| c.id == 0).unwrap().logit;
    assert_eq!((l0, l3), (2.0, 0.5));
    let cfg0 = SamplerConfig { repeat_last_n: 0, ..cfg };
    let kept = Sampler::new(cfg0).unwrap().filter(&logits, &[0, 1], &mut sc).unwrap();
    assert_eq!(kept.iter().find(|c| c.id == 0).unwrap().logit, 2.0);
    // Greedy sees the penalized logits.
    let g = SamplerConfig { repeat_penalty: 2.0, ..SamplerConfig::greedy() };
    let mut s = Sampler::new(g).unwrap();
    assert_eq!(s.sample(&[2.0, 1.5], &[0], &mut sc), Ok(1));
    assert_eq!(s.sample(&[2.0, 1.5], &[], &mut sc), Ok(0));
    // A penalty lowers a repeated token's frequency: 1/4 -> e / (3e^2 + e) = 0.109.
    let flat = [2.0f32, 2.0, 2.0, 2.0];
    let n = 4000;
    let without = counts(&draws(plain(4), &flat, &[2], n), 4)[2];
    let with = counts(&draws(SamplerConfig { repeat_penalty: 2.0, ..plain(4) }, &flat, &[2], n), 4)[2];
    assert!((with as f64) < 0.6 * without as f64, "with {with}, without {without}");
}

#[test]
fn invalid_configs_are_typed_errors() {
    let d = SamplerConfig::default();
    let nan = f32::NAN;
    let cases = [
        (SamplerConfig { temperature: -0.1, ..d }, SamplerError::InvalidTemperature(-0.1)),
        (SamplerConfig { temperature: f32::INFINITY, ..d }, SamplerError::InvalidTemperature(f32::INFINITY)),
        (SamplerConfig { top_p: 0.0, ..d }, SamplerError::InvalidTopP(0.0)),
        (SamplerConfig { top_p: 1.01, ..d }, SamplerError::InvalidTopP(1.01)),
        (SamplerConfig { top_p: -1.0, ..d }, SamplerError::InvalidTopP(-1.0)),
        (SamplerConfig { min_p: -0.01, ..d }, SamplerError::InvalidMinP(-0.01)),
        (SamplerConfig { min_p: 1.5, ..d }, SamplerError::InvalidMinP(1.5)),
        (SamplerConfig { repeat_penalty: 0.0, ..d }, SamplerError::InvalidRepeatPenalty(0.0)),
        (SamplerConfig { repeat_penalty: -1.1, ..d }, SamplerError::InvalidRepeatPenalty(-1.1)),
    ];
    for (cfg, err) in cases {
        assert_eq!(Sampler::new(cfg).err(), Some(err));
        assert!(!err.to_string().is_empty());
    }
    for cfg in [
        SamplerConfig { temperature: nan, ..d },
        SamplerConfig { top_p: nan, ..d },
        SamplerConfig { min_p: nan, ..d },
        SamplerConfig { repeat_penalty: nan, ..d },
    ] {
        let e = Sampler::new(cfg).unwrap_err();
        assert!(e.to_string().contains("NaN"), "{e}");
    }
    // The edges that are allowed.
    for cfg in [
        SamplerConfig { temperature: 0.0, top_p: 1.0, min_p: 0.0, ..d },
        SamplerConfig { min_p: 1.0, repeat_penalty: 0.5, top_k: usize::MAX, repeat_last_n: usize::MAX, ..d },
    ] {
        assert!(Sampler::new(cfg).is_ok());
    }
    assert!(Sampler::new(d).is_ok());
    assert!(Sampler::new(SamplerConfig::greedy()).is_ok());
}

#[test]
fn bad_logits_and_buffers_are_typed_errors() {
    for cfg in [SamplerConfig::greedy(), SamplerConfig::default(), plain(0)] {
        let mut s = Sampler::new(cfg).unwrap();
        let mut sc = scratch(4);
        assert_eq!(s.sample(&[f32::NAN; 4], &[], &mut sc), Err(SamplerError::NoCandidates));
        assert_eq!(s.sample(&[f32::NEG_INFINITY; 4], &[], &mut sc), Err(SamplerError::NoCandidates));
        assert_eq!(s.sample(&[f32::NAN, f32::NEG_INFINITY, f32::NAN, f32::NAN], &[], &mut sc), Err(SamplerError::NoCandidates));
        assert_eq!(s.sample(&[0.0, f32::INFINITY, 1.0, 0.0], &[], &mut sc), Err(SamplerError::InfiniteLogit { token: 1 }));
        assert_eq!(s.sample(&[], &[], &mut sc), Err(SamplerError::EmptyLogits));
        assert_eq!(s.sample(&[0.0; 5], &[], &mut sc), Err(SamplerError::ScratchTooSmall { needed: 5, got: 4 }));
        assert_eq!(s.filter(&[0.0; 5], &[], &mut sc).err(), Some(SamplerError::ScratchTooSmall { needed: 5, got: 4 }));
        // A single finite logit among NaNs is always chosen.
        for _ in 0..10 {
            assert_eq!(s.sample(&[f32::NAN, f32::NEG_INFINITY, -50.0, f32::NAN], &[], &mut sc), Ok(2));
        }
        // A bigger scratch is fine.
        let mut big = scratch(100);
        assert!(s.sample(&[0.0; 4], &[], &mut big).is_ok());
    }
    for e in [
        SamplerError::NoCandidates,
        SamplerError::InfiniteLogit { token: 1 },
        SamplerError::EmptyLogits,
        SamplerError::ScratchTooSmall { needed: 5, got: 4 },
        SamplerError::TokenOutOfRange { token: 9, vocab_size: 4 },
        SamplerError::VocabTooLarge(usize::MAX),
    ] {
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn recent_tokens_out_of_range_are_refused_when_penalty_is_on() {
    let mut sc = scratch(4);
    let on = SamplerConfig { repeat_penalty: 1.3, repeat_last_n: 2, ..plain(0) };
    let mut s = Sampler::new(on).unwrap();
    assert_eq!(s.sample(&[0.0; 4], &[1, 4], &mut sc), Err(SamplerError::TokenOutOfRange { token: 4, vocab_size: 4 }));
    // Outside the window: ignored.
    assert!(s.sample(&[0.0; 4], &[9, 1, 2], &mut sc).is_ok());
    // Penalty off: the history is not read.
    let mut off = Sampler::new(plain(0)).unwrap();
    assert!(off.sample(&[0.0; 4], &[u32::MAX], &mut sc).is_ok());
}
