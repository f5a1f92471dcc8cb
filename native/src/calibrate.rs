//! `lutra calibrate`: run the model with exact attention over a text, collect the keys
//! every layer stores (post-norm, post-RoPE: what the cache holds), and train one k-means
//! codebook per (layer, KV head, sub-space).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lutra_core::model::kv::{AttentionShape, ExactKvCache, KeyPrecision, KvCache};
use lutra_core::pq::kmeans::kmeans;
use lutra_core::pq::{Codebooks, PqShape, Rotation};

use crate::generate::{Loaded, PoolGemv};
use crate::pool::Pool;

pub struct CalibrateOptions {
    /// (sub-spaces, centroids) of each codebook set to train from the same keys.
    pub configs: Vec<(usize, usize)>,
    pub rotation: Rotation,
    /// Chunk length: each chunk runs from position 0 with BOS first.
    pub ctx: usize,
    /// Keys collected per (layer, KV head), at most.
    pub keys: usize,
    pub iterations: usize,
    pub threads: usize,
}

/// k-means seed: fixed, so the same model, text and options give the same file.
const SEED: u64 = 0x6c75_7472_615f_7071;

/// Exact attention that also records the f32 keys it is given.
struct Recorder {
    inner: ExactKvCache,
    keys: Arc<Mutex<Vec<Vec<f32>>>>,
    limit: usize,
}

impl KvCache for Recorder {
    fn shape(&self) -> AttentionShape {
        self.inner.shape()
    }
    fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let hd = self.inner.shape().head_dim;
        let heads = self.inner.shape().n_kv_heads;
        if let Ok(mut keys) = self.keys.lock() {
            for (kvh, key) in k.chunks_exact(hd).enumerate() {
                let store = &mut keys[layer * heads + kvh];
                if store.len() < self.limit * hd {
                    store.extend_from_slice(key);
                }
            }
        }
        self.inner.store(layer, pos, k, v);
    }
    fn attend(&mut self, layer: usize, first: usize, pos: usize, q: &[f32], q_scale: f32, out: &mut [f32]) {
        self.inner.attend(layer, first, pos, q, q_scale, out);
    }
    fn key_bytes(&self) -> usize {
        self.inner.key_bytes()
    }
    fn value_bytes(&self) -> usize {
        self.inner.value_bytes()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// One codebook set per `opts.configs` entry, all from the keys of one run over `text`.
pub fn calibrate(loaded: &Loaded, text: &str, opts: &CalibrateOptions) -> Result<Vec<Codebooks>, String> {
    let shape = loaded.attention_shape(opts.ctx);
    let shapes = opts
        .configs
        .iter()
        .map(|&(s, k)| PqShape::new(shape.layers, shape.n_kv_heads, shape.head_dim, s, k).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    if opts.ctx < 2 || opts.keys == 0 {
        return Err("--ctx must be at least 2 and --keys at least 1".into());
    }
    let mut tokens = Vec::new();
    loaded.encode(text, true, &mut tokens)?;
    let most = shapes.iter().map(|s| s.centroids).max().unwrap_or(0);
    if tokens.len() < most {
        return Err(format!("the text is {} tokens; calibration needs at least --centroids {most} keys", tokens.len()));
    }

    // 1. keys, chunk by chunk, each chunk from position 0
    let heads = shape.layers * shape.n_kv_heads;
    let keys = Arc::new(Mutex::new(vec![Vec::with_capacity(opts.keys * shape.head_dim); heads]));
    let recorder = Recorder { inner: ExactKvCache::new(shape, KeyPrecision::F16), keys: keys.clone(), limit: opts.keys };
    let mut session = loaded.session_with_cache(Box::new(recorder))?;
    let pool = Pool::new(opts.threads);
    let gemv = PoolGemv(&pool);
    let t = Instant::now();
    let wanted = opts.keys.min(tokens.len());
    let mut fed = 0usize;
    'chunks: for chunk in tokens.chunks(shape.context) {
        for (pos, &token) in chunk.iter().enumerate() {
            let input = if pos == 0 { loaded.bos() } else { token };
            loaded.forward(&gemv, &mut session, input, pos)?;
            fed += 1;
            if fed.is_multiple_of(64) {
                eprint!("\rcollecting keys: {fed}/{wanted} tokens ({:.0} s)", t.elapsed().as_secs_f64());
            }
            if fed >= wanted {
                break 'chunks;
            }
        }
    }
    eprintln!("\rcollected {fed} keys per layer and KV head in {:.1} s", t.elapsed().as_secs_f64());
    drop(session);

    let mut keys = Arc::try_unwrap(keys).map_err(|_| "key recorder still shared")?.into_inner().map_err(|e| e.to_string())?;
    for key in keys.iter_mut().flat_map(|k| k.chunks_exact_mut(shape.head_dim)) {
        opts.rotation.apply(key);
    }
    shapes.iter().map(|&pq| train(loaded, &keys, shape, pq, fed, opts)).collect()
}

/// k-means per (layer, KV head, sub-space), jobs shared by the threads.
fn train(
    loaded: &Loaded,
    keys: &[Vec<f32>],
    shape: AttentionShape,
    pq: PqShape,
    fed: usize,
    opts: &CalibrateOptions,
) -> Result<Codebooks, String> {
    let heads = keys.len();
    let (sd, k) = (pq.sub_dim(), pq.centroids);
    let jobs = heads * pq.subspaces;
    let next = AtomicUsize::new(0);
    let books: Vec<Mutex<Vec<f32>>> = (0..heads).map(|_| Mutex::new(vec![0.0; pq.book_len()])).collect();
    let t = Instant::now();
    let err_sum = Mutex::new(0.0f64);
    std::thread::scope(|scope| {
        for _ in 0..opts.threads {
            scope.spawn(|| {
                let mut points = Vec::new();
                let mut centroids = vec![0.0f32; k * sd];
                loop {
                    let job = next.fetch_add(1, Ordering::Relaxed);
                    if job >= jobs {
                        break;
                    }
                    let (head, s) = (job / pq.subspaces, job % pq.subspaces);
                    points.clear();
                    for key in keys[head].chunks_exact(shape.head_dim) {
                        points.extend_from_slice(&key[s * sd..(s + 1) * sd]);
                    }
                    let err = kmeans(&points, sd, k, opts.iterations, SEED ^ job as u64, &mut centroids);
                    if let Ok(mut e) = err_sum.lock() {
                        *e += f64::from(err);
                    }
                    if let Ok(mut book) = books[head].lock() {
                        book[s * k * sd..(s + 1) * k * sd].copy_from_slice(&centroids);
                    }
                    if job.is_multiple_of(16) {
                        eprint!("\rk-means: {job}/{jobs} sub-spaces ({:.0} s)", t.elapsed().as_secs_f64());
                    }
                }
            });
        }
    });
    let err = err_sum.into_inner().map_err(|e| e.to_string())?;
    let energy: f64 = keys.iter().flatten().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / (heads * fed) as f64;
    eprintln!(
        "\rk-means: {jobs} sub-spaces of {k} centroids in {:.1} s; {pq}: key reconstruction error {:.4} of the key energy",
        t.elapsed().as_secs_f64(),
        err / heads as f64 / energy
    );
    let mut data = Vec::with_capacity(heads * pq.book_len());
    for b in books {
        data.extend(b.into_inner().map_err(|e| e.to_string())?);
    }
    Codebooks::new(pq, loaded.architecture(), opts.rotation, data).map_err(|e| e.to_string())
}
