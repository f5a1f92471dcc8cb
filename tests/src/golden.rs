//! Golden files of llama.cpp's next-token distributions, and the two agreement figures
//! `llama-perplexity --kl-divergence` reports: mean KL divergence and top-1 agreement.
//!
//! A golden file (made by `native/examples/gemma_golden.rs`; see the comment lines at its
//! top) holds a token sequence and, for each scored position `p`, llama.cpp's
//! distribution of the token after `p` given tokens `0..=p`, compactly: its `top_k` most
//! likely ids with their natural-log probabilities, and the log of the probability mass
//! of all other ids (the tail).
//!
//! ```text
//! # comment lines
//! golden model=FILE model_bytes=N llama-cpp-sys-2=X.Y.Z top_k=K n_vocab=V [more key=value]
//! tokens N
//! ID ID ID ...                      (N ids over any number of lines)
//! pos P tail T top ID:LOGP ID:LOGP ...   (K pairs, descending; positions increasing)
//! ```
//!
//! [`kl_divergence`] estimates KL(llama.cpp || ours) over the K + 1 buckets "each of
//! llama.cpp's top-K ids" and "everything else". Merging outcomes never increases a KL
//! divergence, so this is a lower bound of the full-vocabulary KL; with K = 20 the tail
//! of a confident small model rarely carries enough mass for the difference to matter,
//! and unlike a top-K-only sum it does see a model that moves mass into the tail.

use std::path::{Path, PathBuf};

/// The Gemma 3 270M Q4_K_M golden file over the start of the GPL v3 (in this crate).
pub const GEMMA3_270M_GPL3: &str = "golden/gemma3-270m-gpl3.txt";

/// The vocab files (`models/llama-vocab/ggml-vocab-NAME.gguf`) whose end-of-generation
/// tokens `golden/eog.txt` holds.
pub const EOG_VOCABS: &[&str] = &[
    "llama-spm",
    "phi-3",
    "llama-bpe",
    "qwen2",
    "qwen35",
    "gpt-2",
    "deepseek-llm",
    "deepseek-coder",
    "falcon",
    "mpt",
    "refact",
    "starcoder",
    "command-r",
];

/// Absolute path of a golden file of this crate (`tests/golden/...`).
pub fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// A parsed golden file.
#[derive(Clone, Debug, PartialEq)]
pub struct Golden {
    /// Model file name (as the generator saw it).
    pub model: String,
    /// Size of the model file in bytes.
    pub model_bytes: u64,
    /// The `llama-cpp-sys-2` version that produced the reference.
    pub llama_cpp_sys_2: String,
    /// Vocabulary size of the model.
    pub n_vocab: usize,
    /// Entries per scored position.
    pub top_k: usize,
    /// The token sequence fed, teacher-forced (BOS first where the model adds one).
    pub tokens: Vec<u32>,
    /// The scored positions, increasing.
    pub scored: Vec<Scored>,
}

/// llama.cpp's next-token distribution after one position.
#[derive(Clone, Debug, PartialEq)]
pub struct Scored {
    /// Position `p`: the distribution is of token `p + 1` given tokens `0..=p`.
    pub position: usize,
    /// The most likely ids and their natural-log probabilities, descending.
    pub top: Vec<(u32, f32)>,
    /// ln of the probability mass of every id not in `top`.
    pub tail_logprob: f32,
}

impl Golden {
    /// Reads and parses a golden file.
    pub fn load(path: &Path) -> Result<Golden, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Golden::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses a golden file's text; every count, id, position and probability is checked.
    pub fn parse(text: &str) -> Result<Golden, String> {
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())).filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));

        let (n, header) = lines.next().ok_or("empty golden file")?;
        let mut words = header.split_whitespace();
        if words.next() != Some("golden") {
            return Err(format!("line {n}: expected the `golden key=value ...` header"));
        }
        let mut kv = Vec::new();
        for w in words {
            let (k, v) = w.split_once('=').ok_or_else(|| format!("line {n}: `{w}` is not key=value"))?;
            kv.push((k, v));
        }
        let get = |key: &str| kv.iter().find(|(k, _)| *k == key).map(|(_, v)| *v).ok_or_else(|| format!("line {n}: no `{key}=`"));
        let num = |key: &str| get(key)?.parse::<u64>().map_err(|e| format!("line {n}: {key}: {e}"));
        let model = get("model")?.to_owned();
        let model_bytes = num("model_bytes")?;
        let llama_cpp_sys_2 = get("llama-cpp-sys-2")?.to_owned();
        let n_vocab = num("n_vocab")? as usize;
        let top_k = num("top_k")? as usize;
        if top_k == 0 || top_k >= n_vocab || n_vocab > u32::MAX as usize {
            return Err(format!("line {n}: top_k {top_k} must be in 1..n_vocab ({n_vocab})"));
        }

        let (n, line) = lines.next().ok_or("no `tokens N` line")?;
        let count = match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["tokens", c] => c.parse::<usize>().map_err(|e| format!("line {n}: token count: {e}"))?,
            _ => return Err(format!("line {n}: expected `tokens N`")),
        };
        let mut tokens = Vec::with_capacity(count.min(1 << 20));
        while tokens.len() < count {
            let (n, line) = lines.next().ok_or_else(|| format!("{} of {count} tokens before the end of the file", tokens.len()))?;
            for w in line.split_whitespace() {
                let id = w.parse::<u32>().map_err(|e| format!("line {n}: token `{w}`: {e}"))?;
                if id as usize >= n_vocab {
                    return Err(format!("line {n}: token {id} outside the vocabulary ({n_vocab})"));
                }
                tokens.push(id);
            }
            if tokens.len() > count {
                return Err(format!("line {n}: more than {count} tokens"));
            }
        }

        let mut scored: Vec<Scored> = Vec::new();
        for (n, line) in lines {
            let s = parse_scored(line, top_k, n_vocab).map_err(|e| format!("line {n}: {e}"))?;
            if s.position >= tokens.len() {
                return Err(format!("line {n}: position {} beyond the {} tokens", s.position, tokens.len()));
            }
            if scored.last().is_some_and(|last| last.position >= s.position) {
                return Err(format!("line {n}: position {} not after the previous one", s.position));
            }
            scored.push(s);
        }
        if scored.is_empty() {
            return Err("no scored positions".into());
        }
        Ok(Golden { model, model_bytes, llama_cpp_sys_2, n_vocab, top_k, tokens, scored })
    }
}

/// `pos P tail T top ID:LOGP ...`
fn parse_scored(line: &str, top_k: usize, n_vocab: usize) -> Result<Scored, String> {
    let mut w = line.split_whitespace();
    let mut field = |name: &str| match (w.next(), w.next()) {
        (Some(k), Some(v)) if k == name => Ok(v),
        _ => Err(format!("expected `{name} ...`")),
    };
    let position = field("pos")?.parse::<usize>().map_err(|e| format!("position: {e}"))?;
    let tail = field("tail")?;
    let tail_logprob = tail.parse::<f32>().map_err(|e| format!("tail `{tail}`: {e}"))?;
    if w.next() != Some("top") {
        return Err("expected `top ID:LOGP ...`".into());
    }
    let mut top = Vec::with_capacity(top_k);
    for pair in w {
        let (id, lp) = pair.split_once(':').ok_or_else(|| format!("`{pair}` is not ID:LOGP"))?;
        let id = id.parse::<u32>().map_err(|e| format!("id in `{pair}`: {e}"))?;
        let lp = lp.parse::<f32>().map_err(|e| format!("log-prob in `{pair}`: {e}"))?;
        if id as usize >= n_vocab {
            return Err(format!("id {id} outside the vocabulary ({n_vocab})"));
        }
        if !(lp <= 0.0) || lp.is_infinite() {
            return Err(format!("log-prob {lp} of id {id} not a finite value <= 0"));
        }
        if top.iter().any(|&(seen, _)| seen == id) {
            return Err(format!("id {id} listed twice"));
        }
        if top.last().is_some_and(|&(_, prev)| prev < lp) {
            return Err(format!("log-probs not descending at id {id}"));
        }
        top.push((id, lp));
    }
    if top.len() != top_k {
        return Err(format!("{} pairs, expected top_k = {top_k}", top.len()));
    }
    if !(tail_logprob <= 0.0) {
        return Err(format!("tail log-mass {tail_logprob} not <= 0"));
    }
    let total: f64 = top.iter().map(|&(_, lp)| (lp as f64).exp()).sum::<f64>() + (tail_logprob as f64).exp();
    if (total - 1.0).abs() > 1e-3 {
        return Err(format!("probabilities sum to {total}, not 1"));
    }
    Ok(Scored { position, top, tail_logprob })
}

impl Scored {
    /// The reference distribution of `logits` (log-softmax in f64, top `k`, tail), as the
    /// generator computes it (without its rounding to 4 decimals). For tests.
    pub fn from_logits(position: usize, logits: &[f32], k: usize) -> Scored {
        assert!(k >= 1 && k < logits.len(), "k {k} must be in 1..{}", logits.len());
        let lse = log_sum_exp(logits.iter().map(|&x| x as f64));
        let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
        ids.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
        let top = ids[..k].iter().map(|&i| (i, (logits[i as usize] as f64 - lse) as f32)).collect();
        let tail = log_sum_exp(ids[k..].iter().map(|&i| logits[i as usize] as f64)) - lse;
        Scored { position, top, tail_logprob: tail as f32 }
    }

    /// llama.cpp's most likely next token.
    pub fn top1(&self) -> u32 {
        self.top[0].0
    }
}

/// ln Σ exp(x), stable; -inf for no terms.
fn log_sum_exp(xs: impl Iterator<Item = f64> + Clone) -> f64 {
    let max = xs.clone().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY || max.is_nan() {
        return max;
    }
    max + xs.map(|x| (x - max).exp()).sum::<f64>().ln()
}

/// Index of the largest logit (the first on ties; NaN never wins unless all are NaN).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] || logits[best].is_nan() && !x.is_nan() {
            best = i;
        }
    }
    best as u32
}

/// Whether our most likely next token is llama.cpp's.
pub fn top1_agrees(reference: &Scored, logits: &[f32]) -> bool {
    argmax(logits) == reference.top1()
}

/// KL(llama.cpp || ours) in nats over llama.cpp's top-K ids plus one tail bucket (the
/// rest of the vocabulary: llama.cpp's stored tail mass against the mass our
/// distribution puts outside those K ids).
///
/// `logits` are our raw logits for the position (any offset: they are log-softmaxed here,
/// in f64). llama.cpp's stored buckets are renormalized to sum to 1 first (they are
/// rounded to 4 decimals), so the estimate is never negative and is exactly 0 for
/// identical distributions. Non-finite logits give a NaN or infinite KL.
///
/// Panics if `logits` is shorter than a reference id.
pub fn kl_divergence(reference: &Scored, logits: &[f32]) -> f64 {
    let mut top_ids: Vec<usize> = reference.top.iter().map(|&(id, _)| id as usize).collect();
    top_ids.sort_unstable();
    let last = *top_ids.last().expect("a reference has at least one entry");
    assert!(last < logits.len(), "reference id {last} outside our {} logits", logits.len());

    // Ours: log-softmax, and the log-mass outside the reference's top-K (summed over
    // the complement itself, so a tiny tail keeps its precision).
    let lse = log_sum_exp(logits.iter().map(|&x| x as f64));
    let mut next = 0;
    let complement = logits.iter().enumerate().filter_map(|(i, &x)| {
        if next < top_ids.len() && top_ids[next] == i {
            next += 1;
            None
        } else {
            Some(x as f64)
        }
    });
    let complement: Vec<f64> = complement.collect();
    let our_tail = log_sum_exp(complement.iter().copied()) - lse;

    // Reference: renormalized buckets.
    let ref_lse = log_sum_exp(reference.top.iter().map(|&(_, lp)| lp as f64).chain([reference.tail_logprob as f64]));
    let mut kl = 0.0;
    for &(id, lp) in &reference.top {
        let lp = lp as f64 - ref_lse;
        kl += lp.exp() * (lp - (logits[id as usize] as f64 - lse));
    }
    let tail = reference.tail_logprob as f64 - ref_lse;
    if tail > f64::NEG_INFINITY {
        kl += tail.exp() * (tail - our_tail);
    }
    // Rounding can leave a hair below 0; NaN stays NaN.
    if kl < 0.0 {
        0.0
    } else {
        kl
    }
}

/// Running totals of the agreement over scored positions.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Positions scored.
    pub positions: usize,
    /// Sum of KL over them (nats).
    pub kl_sum: f64,
    /// Positions whose top-1 agreed.
    pub top1_agreed: usize,
    /// The largest KL so far and its position.
    pub worst: Option<(usize, f64)>,
    /// Positions whose top-1 disagreed: (position, llama.cpp's id, ours).
    pub disagreements: Vec<(usize, u32, u32)>,
}

impl Tally {
    /// Scores one position; returns its KL.
    pub fn add(&mut self, reference: &Scored, logits: &[f32]) -> f64 {
        let kl = kl_divergence(reference, logits);
        self.positions += 1;
        self.kl_sum += kl;
        let ours = argmax(logits);
        if ours == reference.top1() {
            self.top1_agreed += 1;
        } else {
            self.disagreements.push((reference.position, reference.top1(), ours));
        }
        // `!(kl <= worst)` keeps a NaN KL as the worst.
        if self.worst.is_none_or(|(_, w)| !(kl <= w)) {
            self.worst = Some((reference.position, kl));
        }
        kl
    }

    /// Mean KL in nats (NaN with no positions).
    pub fn mean_kl(&self) -> f64 {
        self.kl_sum / self.positions as f64
    }

    /// Fraction of positions whose top-1 agreed (NaN with no positions).
    pub fn top1_agreement(&self) -> f64 {
        self.top1_agreed as f64 / self.positions as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random logits in [-4, 4) with a few peaks.
    fn logits(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let x = (s >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0;
                if i % 17 == 3 {
                    x + 6.0
                } else {
                    x
                }
            })
            .collect()
    }

    /// Full-vocabulary KL(p || q) in f64.
    fn full_kl(p: &[f32], q: &[f32]) -> f64 {
        let lp = log_sum_exp(p.iter().map(|&x| x as f64));
        let lq = log_sum_exp(q.iter().map(|&x| x as f64));
        p.iter().zip(q).map(|(&a, &b)| (a as f64 - lp).exp() * ((a as f64 - lp) - (b as f64 - lq))).sum()
    }

    /// Writes a golden file the way the generator does (4 decimals).
    fn format(model_bytes: u64, n_vocab: usize, top_k: usize, tokens: &[u32], scored: &[Scored]) -> String {
        let mut s = format!(
            "# a comment\n\ngolden model=m.gguf model_bytes={model_bytes} llama-cpp-sys-2=0.1.161 n_ctx=512 top_k={top_k} n_vocab={n_vocab}\ntokens {}\n",
            tokens.len()
        );
        for chunk in tokens.chunks(3) {
            s += &chunk.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
            s += "\n";
        }
        for r in scored {
            s += &format!("pos {} tail {:.4} top", r.position, r.tail_logprob);
            for (id, lp) in &r.top {
                s += &format!(" {id}:{lp:.4}");
            }
            s += "\n";
        }
        s
    }

    fn synthetic() -> (Vec<Vec<f32>>, String) {
        let rows: Vec<Vec<f32>> = (0..3).map(|p| logits(40, p)).collect();
        let scored: Vec<Scored> = rows.iter().enumerate().map(|(p, l)| Scored::from_logits(p + 2, l, 5)).collect();
        (rows, format(1234, 40, 5, &[2, 7, 39, 0, 11, 5, 5], &scored))
    }

    #[test]
    fn parses_a_synthetic_file() {
        let (rows, text) = synthetic();
        let g = Golden::parse(&text).unwrap();
        assert_eq!((g.model.as_str(), g.model_bytes, g.llama_cpp_sys_2.as_str()), ("m.gguf", 1234, "0.1.161"));
        assert_eq!((g.n_vocab, g.top_k), (40, 5));
        assert_eq!(g.tokens, [2, 7, 39, 0, 11, 5, 5]);
        assert_eq!(g.scored.iter().map(|s| s.position).collect::<Vec<_>>(), [2, 3, 4]);
        for (s, l) in g.scored.iter().zip(&rows) {
            let exact = Scored::from_logits(s.position, l, 5);
            assert_eq!(s.top.iter().map(|t| t.0).collect::<Vec<_>>(), exact.top.iter().map(|t| t.0).collect::<Vec<_>>());
            for (a, b) in s.top.iter().zip(&exact.top) {
                assert!((a.1 - b.1).abs() <= 5.1e-5, "{a:?} vs {b:?}");
            }
            assert!((s.tail_logprob - exact.tail_logprob).abs() <= 5.1e-5);
        }
    }

    #[test]
    fn rejects_malformed_files() {
        let (_, text) = synthetic();
        let cases: &[(&str, &str, &str)] = &[
            ("golden model", "nolden model", "header"),
            ("model_bytes=1234", "model_bytes=x", "model_bytes"),
            ("tokens 7", "tokens 8", "token `pos`"),
            ("tokens 7", "tokens 5", "more than 5"),
            ("pos 3 ", "pos 2 ", "not after"),
            ("pos 4 ", "pos 7 ", "beyond"),
            ("n_vocab=40", "n_vocab=30", "outside the vocabulary"),
            ("top_k=5", "top_k=4", "expected top_k"),
            (" tail -", " tail +", "not <= 0"),
            (" tail -", " tail -9", "sum to"),
        ];
        for &(from, to, expect) in cases {
            assert!(text.contains(from), "{from}");
            let bad = text.replacen(from, to, 1);
            let err = Golden::parse(&bad).unwrap_err();
            assert!(err.contains(expect), "{from} -> {to}: {err}");
        }
        let truncated = &text[..text.find("pos").unwrap()];
        assert!(Golden::parse(truncated).unwrap_err().contains("no scored"));
        assert!(Golden::parse("").is_err());
        // A pair with a positive log-prob, a duplicate id, a non-descending order.
        let line = text.lines().find(|l| l.starts_with("pos 2")).unwrap();
        let pairs: Vec<&str> = line.split(" top ").nth(1).unwrap().split(' ').collect();
        let (id0, lp0) = pairs[0].split_once(':').unwrap();
        let (id1, _) = pairs[1].split_once(':').unwrap();
        for bad_pair in [format!("{id1}:{lp0}"), format!("{id0}:0.5")] {
            let bad = text.replacen(pairs[0], &bad_pair, 1);
            assert!(Golden::parse(&bad).is_err(), "{bad_pair}");
        }
        let swapped = text.replacen(&format!("{} {}", pairs[0], pairs[1]), &format!("{} {}", pairs[1], pairs[0]), 1);
        assert!(Golden::parse(&swapped).unwrap_err().contains("descending"));
    }

    #[test]
    fn kl_is_zero_for_identical_and_shifted_logits() {
        let l = logits(1000, 7);
        let r = Scored::from_logits(0, &l, 20);
        assert!(kl_divergence(&r, &l) < 1e-12);
        // Softmax ignores a constant offset.
        let shifted: Vec<f32> = l.iter().map(|x| x + 37.5).collect();
        assert!(kl_divergence(&r, &shifted) < 1e-9, "{}", kl_divergence(&r, &shifted));
        // Rounded to 4 decimals, as in a golden file: still ~0.
        let (rows, text) = synthetic();
        let g = Golden::parse(&text).unwrap();
        for (s, l) in g.scored.iter().zip(&rows) {
            let kl = kl_divergence(s, l);
            assert!(kl < 1e-4, "{kl}");
            assert!(top1_agrees(s, l));
        }
    }

    #[test]
    fn kl_grows_with_a_perturbation_and_bounds_the_full_kl_from_below() {
        let p = logits(1000, 11);
        let r = Scored::from_logits(0, &p, 20);
        let mut last = 0.0;
        for scale in [0.05f32, 0.2, 0.8] {
            let q: Vec<f32> = p.iter().zip(logits(1000, 99)).map(|(a, b)| a + scale * b).collect();
            let kl = kl_divergence(&r, &q);
            let full = full_kl(&p, &q);
            assert!(kl > last, "scale {scale}: {kl} after {last}");
            assert!(kl <= full + 1e-12, "bucketed {kl} above full {full}");
            last = kl;
        }
        // With every id in the top, bucketing is lossless: the estimate is the full KL.
        let small = logits(30, 5);
        let q: Vec<f32> = small.iter().zip(logits(30, 6)).map(|(a, b)| a + 0.3 * b).collect();
        let all = Scored { tail_logprob: f32::NEG_INFINITY, ..Scored::from_logits(0, &small, 29) };
        let mut all = all;
        let last_id = (0..30u32).find(|i| !all.top.iter().any(|t| t.0 == *i)).unwrap();
        let lse = log_sum_exp(small.iter().map(|&x| x as f64));
        all.top.push((last_id, (small[last_id as usize] as f64 - lse) as f32));
        assert!((kl_divergence(&all, &q) - full_kl(&small, &q)).abs() < 1e-6);
    }

    #[test]
    fn kl_sees_mass_moved_into_the_tail() {
        let p = logits(500, 3);
        let r = Scored::from_logits(0, &p, 20);
        let top: Vec<u32> = r.top.iter().map(|t| t.0).collect();
        // Ours: the top-20 logits unchanged, the other 480 raised by 2 nats. Relative
        // order inside the top is the same, but a top-only sum would miss the tail.
        let q: Vec<f32> = p.iter().enumerate().map(|(i, &x)| if top.contains(&(i as u32)) { x } else { x + 2.0 }).collect();
        let kl = kl_divergence(&r, &q);
        // Exact two-level KL: the top ids keep their ratios, so only the top/tail split differs.
        let p_tail = (r.tail_logprob as f64).exp();
        let lq = log_sum_exp(q.iter().map(|&x| x as f64));
        let q_tail = log_sum_exp(q.iter().enumerate().filter(|(i, _)| !top.contains(&(*i as u32))).map(|(_, &x)| x as f64)) - lq;
        let q_tail = q_tail.exp();
        let expect = (1.0 - p_tail) * ((1.0 - p_tail) / (1.0 - q_tail)).ln() + p_tail * (p_tail / q_tail).ln();
        assert!(kl > 0.01, "{kl}");
        assert!((kl - expect).abs() < 1e-6, "{kl} vs {expect}");
        // Mass moved out of the tail counts too.
        let q2: Vec<f32> = p.iter().enumerate().map(|(i, &x)| if top.contains(&(i as u32)) { x } else { x - 5.0 }).collect();
        assert!(kl_divergence(&r, &q2) > 0.01);
        // A reference with an empty tail ignores ours there, except through renormalization.
        let z = Scored { tail_logprob: f32::NEG_INFINITY, ..r.clone() };
        assert!(kl_divergence(&z, &q).is_finite());
    }

    #[test]
    fn top1_and_tally() {
        let l = logits(100, 1);
        let r = Scored::from_logits(9, &l, 20);
        assert!(top1_agrees(&r, &l));
        assert_eq!(argmax(&l), r.top1());
        let mut swapped = l.clone();
        let (a, b) = (r.top[0].0 as usize, r.top[1].0 as usize);
        swapped.swap(a, b);
        assert!(!top1_agrees(&r, &swapped));
        assert_eq!(argmax(&[1.0, f32::NAN, 3.0, 3.0]), 2);
        assert_eq!(argmax(&[f32::NAN, 1.0]), 1);

        let mut t = Tally::default();
        assert!(t.add(&r, &l) < 1e-12);
        let kl = t.add(&r, &swapped);
        assert!(kl > 0.0);
        assert_eq!((t.positions, t.top1_agreed), (2, 1));
        assert_eq!(t.disagreements, [(9, r.top[0].0, r.top[1].0)]);
        assert_eq!(t.worst, Some((9, kl)));
        assert!((t.mean_kl() - kl / 2.0).abs() < 1e-12);
        assert_eq!(t.top1_agreement(), 0.5);
        let nan = vec![f32::NAN; 100];
        t.add(&r, &nan);
        assert!(t.mean_kl().is_nan() && t.worst.unwrap().1.is_nan());
    }

    /// The committed Gemma 3 270M golden file parses and has what the agreement test needs.
    #[test]
    fn the_gemma_golden_file_parses() {
        let g = Golden::load(&golden_path(GEMMA3_270M_GPL3)).unwrap();
        assert_eq!(g.model, "gemma-3-270m-q4_k_m.gguf");
        assert_eq!(g.model_bytes, 253_113_024);
        assert_eq!((g.n_vocab, g.top_k), (262_144, 20));
        assert_eq!(g.tokens.len(), 320);
        assert_eq!(g.tokens[0], 2, "BOS first");
        assert!(g.scored.len() >= 256, "{} scored positions", g.scored.len());
        assert_eq!(g.scored.last().unwrap().position, 319);
    }
}
