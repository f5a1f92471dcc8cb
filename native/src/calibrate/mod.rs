//! `lutra calibrate`: run the model with exact attention over a text, collect the keys
//! every layer stores (post-norm, post-RoPE: what the cache holds), and train one k-means
//! codebook per (layer, KV head, sub-space).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lutra_core::attention::{AttentionShape, ExactKvCache, KeyPrecision, KvCache, Parallel, ValueFormat};
use lutra_core::pq::kmeans::kmeans;
use lutra_core::pq::{apply_matrix, Codebooks, PqShape, Rotation};

use lutra_core::engine::{Model, Session};

use crate::progress::Progress;
use crate::threads::Pool;

mod linalg;

/// Options of `lutra calibrate`.
pub struct CalibrateOptions {
    /// (sub-spaces, centroids) of each codebook set to train from the same keys.
    pub configs: Vec<(usize, usize)>,
    /// Fixed rotation applied to keys and queries before the key transform; stored in the codebooks.
    pub rotation: Rotation,
    /// Chunk length: each chunk runs from position 0 with BOS first.
    pub ctx: usize,
    /// Keys collected per (layer, KV head), at most.
    pub keys: usize,
    /// k-means iterations per codebook.
    pub iterations: usize,
    /// Threads for the model run (caller included) and for k-means.
    pub threads: usize,
    /// How keys are transformed before k-means (queries inversely, so scores are unchanged).
    pub key_transform: KeyTransform,
    /// Reuse the keys and queries recorded here by an earlier run with the same model,
    /// text and --ctx / --keys (or record them there).
    pub recording: Option<std::path::PathBuf>,
}

/// Makes k-means' squared error on keys stand for the error of the scores they get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyTransform {
    /// Keys are clustered as they are.
    None,
    /// Scale each key dimension by the queries' RMS in it.
    QueryRms,
    /// Whiten by the queries' second moment (squared key error then equals the mean squared
    /// score error over queries), rotate to the principal axes of the whitened keys, and
    /// deal those axes out to the sub-spaces so each gets a similar share of the variance
    /// (Ge et al., "Optimized Product Quantization", eigenvalue allocation).
    Opq,
}

impl KeyTransform {
    /// The accepted `--key-transform` values, for help and error messages.
    pub const NAMES: &'static str = "none, query-rms or opq";

    /// Parses a `--key-transform` value; `None` if it is not one of [`Self::NAMES`].
    pub fn from_name(name: &str) -> Option<KeyTransform> {
        match name {
            "none" => Some(KeyTransform::None),
            "query-rms" => Some(KeyTransform::QueryRms),
            "opq" => Some(KeyTransform::Opq),
            _ => None,
        }
    }
}

/// `--subspaces auto`: 2 bits per key dimension (8× smaller than f16 keys) — 2 values per
/// 4-bit code with 16 centroids, 4 per 8-bit code with 256 — rounded down to an even count.
pub fn auto_subspaces(head_dim: usize, centroids: usize) -> usize {
    let per_code = if centroids == 16 { 2 } else { 4 };
    ((head_dim / per_code) & !1).max(2)
}

/// k-means seed: fixed, so the same model, text and options give the same file.
const SEED: u64 = 0x6c75_7472_615f_7071;

/// Keys per (layer, KV head) and queries per layer, as the model produced them.
#[derive(Default)]
struct Recorded {
    keys: Vec<Vec<f32>>,
    queries: Vec<Vec<f32>>,
}

/// Exact attention that also records the f32 keys and queries it is given (the first
/// `limit` positions fed).
struct Recorder {
    inner: ExactKvCache,
    seen: Arc<Mutex<Recorded>>,
    limit: usize,
}

impl KvCache for Recorder {
    fn shape(&self) -> AttentionShape {
        self.inner.shape()
    }
    fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let s = self.inner.shape();
        if let Ok(mut seen) = self.seen.lock() {
            for (kvh, key) in k.chunks_exact(s.head_dim).enumerate() {
                let store = &mut seen.keys[layer * s.kv_heads + kvh];
                if store.len() < self.limit * s.head_dim {
                    store.extend_from_slice(key);
                }
            }
        }
        self.inner.store(layer, pos, k, v);
    }
    fn attend_with(&mut self, threads: &dyn Parallel, layer: usize, first: usize, pos: usize, q: &[f32], q_scale: f32, out: &mut [f32]) {
        if let Ok(mut seen) = self.seen.lock() {
            let store = &mut seen.queries[layer];
            if store.len() < self.limit * q.len() {
                store.extend_from_slice(q);
            }
        }
        self.inner.attend_with(threads, layer, first, pos, q, q_scale, out);
    }
    fn key_bytes(&self) -> usize {
        self.inner.key_bytes()
    }
    fn value_bytes(&self) -> usize {
        self.inner.value_bytes()
    }
    fn value_format(&self) -> ValueFormat {
        self.inner.value_format()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn shortest_ring(&self) -> Option<usize> {
        self.inner.shortest_ring()
    }
}

/// One codebook set per `opts.configs` entry, all from the keys of one run over `text`.
pub fn calibrate(model: &Model, text: &str, opts: &CalibrateOptions) -> Result<Vec<Calibrated>, String> {
    let shape = model.attention_shape(opts.ctx);
    let shapes = opts
        .configs
        .iter()
        .map(|&(s, k)| PqShape::new(shape.layers, shape.kv_heads, shape.head_dim, s, k).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    if opts.ctx < 2 || opts.keys == 0 {
        return Err("--ctx must be at least 2 and --keys at least 1".into());
    }
    let tokens = model.encode(text, true).map_err(|e| e.to_string())?;
    let most = shapes.iter().map(|s| s.centroids).max().unwrap_or(0);
    if tokens.len() < most {
        return Err(format!("the text is {} tokens; calibration needs at least --centroids {most} keys", tokens.len()));
    }

    // 1. keys and queries, chunk by chunk, each chunk from position 0
    let (seen, fed) = match opts.recording.as_deref().map(|p| (p, load_recording(p, shape))) {
        Some((_, Some(r))) => r,
        other => {
            let (seen, fed) = record(model, &tokens, shape, opts)?;
            if let Some((path, _)) = other {
                save_recording(path, shape, &seen, fed)?;
            }
            (seen, fed)
        }
    };

    // 2. train on the first three quarters of the positions, measure on the rest
    let train_n = if fed >= 4 * most { fed * 3 / 4 } else { fed };
    let hd = shape.head_dim;
    let mut train_keys: Vec<Vec<f32>> = seen.keys.iter().map(|k| k[..train_n * hd].to_vec()).collect();
    for key in train_keys.iter_mut().flat_map(|k| k.chunks_exact_mut(hd)) {
        opts.rotation.apply(key);
    }
    // second moments of the (rotated) queries of each KV head's group
    let moments: Vec<Vec<f64>> = if opts.key_transform == KeyTransform::None {
        Vec::new()
    } else {
        let mut q = vec![0.0f32; hd];
        let mut out = Vec::new();
        for layer in 0..shape.layers {
            for kvh in 0..shape.kv_heads {
                let mut m = vec![0.0f64; hd * hd];
                for pos in 0..train_n {
                    for g in 0..shape.group() {
                        q.copy_from_slice(&seen.queries[layer][(pos * shape.heads + kvh * shape.group() + g) * hd..][..hd]);
                        opts.rotation.apply(&mut q);
                        for (i, &qi) in q.iter().enumerate() {
                            let row = &mut m[i * hd..(i + 1) * hd];
                            row.iter_mut().zip(&q).for_each(|(m, &qj)| *m += f64::from(qi) * f64::from(qj));
                        }
                    }
                }
                let n = (train_n * shape.group()) as f64;
                m.iter_mut().for_each(|v| *v /= n);
                out.push(m);
            }
        }
        out
    };
    // per-dimension RMS of the queries, normalized to mean 1
    let mut key_scale = Vec::new();
    if opts.key_transform == KeyTransform::QueryRms {
        for m in &moments {
            let rms: Vec<f64> = (0..hd).map(|i| m[i * hd + i].sqrt()).collect();
            let mean = rms.iter().sum::<f64>() / hd as f64;
            key_scale.extend(rms.iter().map(|r| (r / mean).max(1e-3) as f32));
        }
        for (h, keys) in train_keys.iter_mut().enumerate() {
            let scale = &key_scale[h * hd..(h + 1) * hd];
            for key in keys.chunks_exact_mut(hd) {
                key.iter_mut().zip(scale).for_each(|(k, s)| *k *= s);
            }
        }
    }
    // what OPQ learns whatever the sub-spaces, once per (layer, KV head)
    let bases: Vec<OpqBasis> = if opts.key_transform == KeyTransform::Opq {
        let t = Instant::now();
        let bases: Vec<OpqBasis> = moments.iter().zip(&train_keys).map(|(m, keys)| OpqBasis::new(m, keys, hd)).collect();
        eprintln!("opq: {} key bases in {:.1} s", bases.len(), t.elapsed().as_secs_f64());
        bases
    } else {
        Vec::new()
    };
    let mut out = Vec::new();
    for &pq in &shapes {
        let mut books = if opts.key_transform == KeyTransform::Opq {
            let transforms: Vec<Vec<f32>> = bases.iter().map(|b| b.transform(pq)).collect();
            let mut moved = train_keys.clone();
            for (keys, t) in moved.iter_mut().zip(&transforms) {
                keys.chunks_exact_mut(hd).for_each(|key| apply_matrix(&t[..hd * hd], key));
            }
            train(model, &moved, shape, pq, train_n, opts)?.with_key_transform(transforms.concat()).map_err(|e| e.to_string())?
        } else {
            train(model, &train_keys, shape, pq, train_n, opts)?
        };
        if opts.key_transform == KeyTransform::QueryRms {
            books = books.with_key_scale(key_scale.clone()).map_err(|e| e.to_string())?;
        }
        books = books.with_context(opts.ctx.min(train_n));
        if train_n < fed {
            let f = fidelity(&books, &seen, shape, train_n..fed);
            eprint!("score fidelity on {} held-out positions ({}):\n{}", fed - train_n, books.shape(), fidelity_table(&f));
            out.push(Calibrated { books, fidelity: f });
        } else {
            out.push(Calibrated { books, fidelity: Vec::new() });
        }
    }
    Ok(out)
}

/// Runs the model with exact attention over `tokens`, recording keys and queries.
fn record(model: &Model, tokens: &[u32], shape: AttentionShape, opts: &CalibrateOptions) -> Result<(Recorded, usize), String> {
    let heads = shape.layers * shape.kv_heads;
    let seen = Arc::new(Mutex::new(Recorded { keys: vec![Vec::new(); heads], queries: vec![Vec::new(); shape.layers] }));
    let inner = ExactKvCache::with_windows(shape, KeyPrecision::F16, &model.layer_windows());
    let recorder = Recorder { inner, seen: seen.clone(), limit: opts.keys };
    let mut session = Session::with_cache(model, Box::new(recorder)).map_err(|e| e.to_string())?;
    let pool = Pool::new(opts.threads);
    let gemv = pool.split();
    let t = Instant::now();
    let wanted = opts.keys.min(tokens.len());
    let mut fed = 0usize;
    let mut bar = Progress::new("collecting keys and queries", wanted);
    for chunk in tokens.chunks(shape.context) {
        let mut chunk = chunk[..chunk.len().min(wanted - fed)].to_vec();
        if let Some(first) = chunk.first_mut() {
            *first = model.bos();
        }
        // each chunk runs from position 0
        session.reset();
        for batch in chunk.chunks(256) {
            session.feed(&gemv, batch).map_err(|e| e.to_string())?;
            fed += batch.len();
            bar.update(fed, "tokens");
        }
        if fed >= wanted {
            break;
        }
    }
    bar.finish();
    eprintln!("collected {fed} keys per layer and KV head in {:.1} s", t.elapsed().as_secs_f64());
    drop(session);

    let seen = Arc::try_unwrap(seen).map_err(|_| "key recorder still shared")?.into_inner().map_err(|e| e.to_string())?;
    Ok((seen, fed))
}

const RECORDING_MAGIC: &[u8; 8] = b"LUTRAKQ1";

/// A recording's header: magic, then layers, KV heads, query heads, head_dim, context, positions (u64 LE).
fn recording_header(shape: AttentionShape, fed: usize) -> Vec<u8> {
    let mut h = RECORDING_MAGIC.to_vec();
    for v in [shape.layers, shape.kv_heads, shape.heads, shape.head_dim, shape.context, fed] {
        h.extend_from_slice(&(v as u64).to_le_bytes());
    }
    h
}

fn save_recording(path: &std::path::Path, shape: AttentionShape, seen: &Recorded, fed: usize) -> Result<(), String> {
    let mut bytes = recording_header(shape, fed);
    for v in seen.keys.iter().chain(&seen.queries).flatten() {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// The recording at `path`, if it exists and was made for this attention shape.
fn load_recording(path: &std::path::Path, shape: AttentionShape) -> Option<(Recorded, usize)> {
    let bytes = std::fs::read(path).ok()?;
    let fed = u64::from_le_bytes(bytes.get(48..56)?.try_into().ok()?) as usize;
    if bytes.get(..56)? != recording_header(shape, fed).as_slice() {
        return None;
    }
    let (k_len, q_len) = (fed.checked_mul(shape.head_dim)?, fed.checked_mul(shape.heads * shape.head_dim)?);
    let total = shape.layers.checked_mul(shape.kv_heads * k_len + q_len)?;
    let floats: Vec<f32> = bytes.get(56..)?.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    if floats.len() != total {
        return None;
    }
    let (keys, queries) = floats.split_at(shape.layers * shape.kv_heads * k_len);
    eprintln!("keys and queries of {fed} positions from {}", path.display());
    Some((
        Recorded {
            keys: keys.chunks_exact(k_len).map(<[f32]>::to_vec).collect(),
            queries: queries.chunks_exact(q_len).map(<[f32]>::to_vec).collect(),
        },
        fed,
    ))
}

/// Trained codebooks and how well their scores follow exact scores on the held-out
/// quarter of the positions, per layer (empty when the text was too short to hold any out).
pub struct Calibrated {
    /// The codebooks of one (sub-spaces, centroids) configuration.
    pub books: Codebooks,
    /// Per layer; empty when no positions were held out.
    pub fidelity: Vec<LayerFidelity>,
}

/// PQ scores against exact scores for one layer, averaged over up to 32 query positions
/// × the query heads of each KV head, each query scored against every held-out key.
#[derive(Clone, Copy, Debug)]
pub struct LayerFidelity {
    /// Pearson correlation of PQ scores with exact scores.
    pub pearson: f64,
    /// Spearman rank correlation of PQ scores with exact scores.
    pub spearman: f64,
    /// KL(softmax exact ‖ softmax PQ).
    pub kl: f64,
    /// The same KL with the query tables kept in f32 (no u8 rounding).
    pub kl_f32_tables: f64,
}

/// What OPQ learns of one (layer, KV head), whatever the sub-spaces: with the queries'
/// second moment `Σ_q = U Λ Uᵀ`, the whitening `W = Λ^½ Uᵀ` (so `‖W (k − k̂)‖²` is the
/// score error `k̂` causes, averaged over the queries) and the principal axes of the
/// whitened training keys.
struct OpqBasis {
    hd: usize,
    /// `Λ^½`, floored at 1e-3 of the largest.
    root: Vec<f64>,
    /// `W`, row-major.
    w: Vec<f64>,
    /// Variance along each principal axis, and the axes (`axes[i * hd + a]`: component i of axis a).
    variance: Vec<f64>,
    axes: Vec<f64>,
}

impl OpqBasis {
    fn new(q_moment: &[f64], keys: &[f32], hd: usize) -> OpqBasis {
        let (lambda, u) = linalg::symmetric_eigen(q_moment, hd);
        let floor = lambda.iter().copied().fold(0.0f64, f64::max) * 1e-6;
        let root: Vec<f64> = lambda.iter().map(|&l| l.max(floor).max(f64::MIN_POSITIVE).sqrt()).collect();
        // row i of W is root[i] · (column i of U)
        let mut w = vec![0.0f64; hd * hd];
        for i in 0..hd {
            for j in 0..hd {
                w[i * hd + j] = root[i] * u[j * hd + i];
            }
        }
        // covariance of the whitened keys
        let n = keys.len() / hd;
        let (mut mean, mut cov) = (vec![0.0f64; hd], vec![0.0f64; hd * hd]);
        let mut white = vec![0.0f64; hd];
        let mut whitened = Vec::with_capacity(n * hd);
        for key in keys.chunks_exact(hd) {
            for (x, row) in white.iter_mut().zip(w.chunks_exact(hd)) {
                *x = row.iter().zip(key).map(|(a, &b)| a * f64::from(b)).sum();
            }
            mean.iter_mut().zip(&white).for_each(|(m, x)| *m += x);
            whitened.extend_from_slice(&white);
        }
        mean.iter_mut().for_each(|m| *m /= n as f64);
        for x in whitened.chunks_exact(hd) {
            for i in 0..hd {
                let xi = x[i] - mean[i];
                cov[i * hd..(i + 1) * hd].iter_mut().zip(x).zip(&mean).for_each(|((c, xj), mj)| *c += xi * (xj - mj));
            }
        }
        let (variance, axes) = linalg::symmetric_eigen(&cov, hd);
        OpqBasis { hd, root, w, variance, axes }
    }

    /// The key and query matrices `[M, Q]` (each `hd × hd`, row-major) for `pq`'s
    /// sub-spaces: `M = R W` and `Q = R Λ^-1 W` (= `R Λ^-½ Uᵀ`), so `(Q q)·(M k) = q·k`.
    /// The rows of `R` are the principal axes, dealt out largest variance first, each to
    /// the sub-space (with room) whose product of variances is smallest so far.
    fn transform(&self, pq: PqShape) -> Vec<f32> {
        let hd = self.hd;
        let mut order: Vec<usize> = (0..hd).collect();
        order.sort_by(|&a, &b| self.variance[b].total_cmp(&self.variance[a]));
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); pq.subspaces];
        let mut log_product = vec![0.0f64; pq.subspaces];
        for axis in order {
            let s = (0..pq.subspaces)
                .filter(|&s| members[s].len() < pq.sub_range(s).len())
                .min_by(|&a, &b| log_product[a].total_cmp(&log_product[b]))
                .unwrap_or(0);
            members[s].push(axis);
            log_product[s] += self.variance[axis].max(1e-30).ln();
        }
        let mut out = vec![0.0f32; 2 * hd * hd];
        let (m, q) = out.split_at_mut(hd * hd);
        for (r, &axis) in members.iter().flatten().enumerate() {
            for j in 0..hd {
                let (mut mk, mut mq) = (0.0f64, 0.0f64);
                for i in 0..hd {
                    let a = self.axes[i * hd + axis] * self.w[i * hd + j];
                    mk += a;
                    mq += a / (self.root[i] * self.root[i]);
                }
                m[r * hd + j] = mk as f32;
                q[r * hd + j] = mq as f32;
            }
        }
        out
    }
}

/// One line per layer and a mean.
pub fn fidelity_table(layers: &[LayerFidelity]) -> String {
    let mut t = String::from("layer  pearson  spearman  KL(exact‖pq)  KL with f32 tables\n");
    let line = |name: String, f: &LayerFidelity| {
        format!("{name:>5}  {:>7.4}  {:>8.4}  {:>12.5}  {:>18.5}\n", f.pearson, f.spearman, f.kl, f.kl_f32_tables)
    };
    for (l, f) in layers.iter().enumerate() {
        t += &line(l.to_string(), f);
    }
    t += &line("mean".into(), &mean_fidelity(layers));
    t
}

/// The field-wise mean over layers (all zeros for none).
pub fn mean_fidelity(layers: &[LayerFidelity]) -> LayerFidelity {
    let n = layers.len().max(1) as f64;
    let sum = |f: fn(&LayerFidelity) -> f64| layers.iter().map(f).sum::<f64>() / n;
    LayerFidelity { pearson: sum(|f| f.pearson), spearman: sum(|f| f.spearman), kl: sum(|f| f.kl), kl_f32_tables: sum(|f| f.kl_f32_tables) }
}

fn fidelity(books: &Codebooks, seen: &Recorded, shape: AttentionShape, held: std::ops::Range<usize>) -> Vec<LayerFidelity> {
    let (hd, group, pq) = (shape.head_dim, shape.group(), books.shape());
    let scale = 1.0 / (hd as f32).sqrt();
    let n = held.len();
    let mut layers = Vec::new();
    let mut codes = vec![0u8; pq.subspaces];
    let (mut float, mut tables) = (vec![0.0f32; pq.subspaces * pq.centroids], vec![0u8; pq.subspaces * pq.centroids]);
    for layer in 0..shape.layers {
        let mut acc = [0.0f64; 4];
        let mut count = 0;
        for kvh in 0..shape.kv_heads {
            let keys = &seen.keys[layer * shape.kv_heads + kvh][held.start * hd..held.end * hd];
            let mut all_codes = Vec::with_capacity(n * pq.subspaces);
            for key in keys.chunks_exact(hd) {
                books.encode(layer, kvh, key, &mut codes);
                all_codes.extend_from_slice(&codes);
            }
            let step = (n / 32).max(1);
            for pos in held.clone().step_by(step) {
                for g in 0..group {
                    let h = kvh * group + g;
                    let q = &seen.queries[layer][(pos * shape.heads + h) * hd..][..hd];
                    let exact: Vec<f64> =
                        keys.chunks_exact(hd).map(|k| f64::from(lutra_core::kernels::attend::dot(q, k) * scale)).collect();
                    let ts = books.query_tables(layer, kvh, q, scale, &mut float, &mut tables);
                    let approx: Vec<f64> = all_codes
                        .chunks_exact(pq.subspaces)
                        .map(|c| {
                            let sum: u16 = c.iter().enumerate().map(|(s, &code)| u16::from(tables[s * pq.centroids + code as usize])).sum();
                            f64::from(ts.score(sum))
                        })
                        .collect();
                    let float_tables: Vec<f64> = all_codes
                        .chunks_exact(pq.subspaces)
                        .map(|c| {
                            let sum: f32 = c.iter().enumerate().map(|(s, &code)| float[s * pq.centroids + code as usize]).sum();
                            f64::from(sum)
                        })
                        .collect();
                    acc[0] += pearson(&exact, &approx);
                    acc[1] += pearson(&ranks(&exact), &ranks(&approx));
                    acc[2] += kl_softmax(&exact, &approx);
                    acc[3] += kl_softmax(&exact, &float_tables);
                    count += 1;
                }
            }
        }
        let m = acc.map(|v| v / count as f64);
        layers.push(LayerFidelity { pearson: m[0], spearman: m[1], kl: m[2], kl_f32_tables: m[3] });
    }
    layers
}

fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        ab += (x - ma) * (y - mb);
        aa += (x - ma) * (x - ma);
        bb += (y - mb) * (y - mb);
    }
    if aa == 0.0 || bb == 0.0 {
        return 1.0;
    }
    ab / (aa * bb).sqrt()
}

/// Ranks (ties in input order), for Spearman's correlation.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    for (rank, i) in order.into_iter().enumerate() {
        r[i] = rank as f64;
    }
    r
}

fn kl_softmax(p_logits: &[f64], q_logits: &[f64]) -> f64 {
    let lse = |v: &[f64]| {
        let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
    };
    let (lp, lq) = (lse(p_logits), lse(q_logits));
    p_logits.iter().zip(q_logits).map(|(p, q)| (p - lp).exp() * ((p - lp) - (q - lq))).sum()
}

/// k-means per (layer, KV head, sub-space), jobs shared by the threads.
fn train(
    model: &Model,
    keys: &[Vec<f32>],
    shape: AttentionShape,
    pq: PqShape,
    fed: usize,
    opts: &CalibrateOptions,
) -> Result<Codebooks, String> {
    let heads = keys.len();
    let k = pq.centroids;
    let jobs = heads * pq.subspaces;
    let next = AtomicUsize::new(0);
    let books: Vec<Mutex<Vec<f32>>> = (0..heads).map(|_| Mutex::new(vec![0.0; pq.book_len()])).collect();
    let t = Instant::now();
    let err_sum = Mutex::new(0.0f64);
    let bar = Mutex::new(Progress::new(format!("k-means, {k} centroids"), jobs));
    std::thread::scope(|scope| {
        for _ in 0..opts.threads {
            scope.spawn(|| {
                let mut points = Vec::new();
                let mut centroids = Vec::new();
                loop {
                    let job = next.fetch_add(1, Ordering::Relaxed);
                    if job >= jobs {
                        break;
                    }
                    let (head, s) = (job / pq.subspaces, job % pq.subspaces);
                    let dims = pq.sub_range(s);
                    points.clear();
                    for key in keys[head].chunks_exact(shape.head_dim) {
                        points.extend_from_slice(&key[dims.clone()]);
                    }
                    centroids.resize(k * dims.len(), 0.0);
                    let err = kmeans(&points, dims.len(), k, opts.iterations, SEED ^ job as u64, &mut centroids);
                    if let Ok(mut e) = err_sum.lock() {
                        *e += f64::from(err);
                    }
                    if let Ok(mut book) = books[head].lock() {
                        book[k * dims.start..k * dims.end].copy_from_slice(&centroids);
                    }
                    if let Ok(mut bar) = bar.lock() {
                        bar.update(job + 1, "sub-spaces");
                    }
                }
            });
        }
    });
    if let Ok(mut bar) = bar.lock() {
        bar.finish();
    }
    let err = err_sum.into_inner().map_err(|e| e.to_string())?;
    let energy: f64 = keys.iter().flatten().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / (heads * fed) as f64;
    eprintln!(
        "k-means: {jobs} sub-spaces of {k} centroids in {:.1} s; {pq}: key reconstruction error {:.4} of the key energy",
        t.elapsed().as_secs_f64(),
        err / heads as f64 / energy
    );
    let mut data = Vec::with_capacity(heads * pq.book_len());
    for b in books {
        data.extend(b.into_inner().map_err(|e| e.to_string())?);
    }
    Codebooks::new(pq, model.info().architecture, opts.rotation, data).map_err(|e| e.to_string())
}
