//! `lutra bench model --profile`: where one decode step and one prefill spend their time,
//! op by op. Every product and every attention call the engine makes goes through its
//! [`Gemv`]; [`ProfileGemv`] wraps the pool's and times each call, named by what the
//! matrix is (lookup of N bits, int8, the LM head). What the wrapper does not see —
//! activation tables, norms, RoPE, residual adds, KV writes — is the remainder of the
//! step's wall time, and sampling (the greedy argmax) is timed by the caller.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lutra_core::attention::{AttentionPiece, Parallel};
use lutra_core::kernels::int8::{CodeForm, Int8Activations, Int8Matrix};
use lutra_core::kernels::lut::Tables;
use lutra_core::model::Gemv;
use lutra_core::{Error, PackedMatrix};

/// Time, calls and weight bytes read, per op name.
#[derive(Clone, Copy, Default, Debug)]
pub struct OpTotals {
    pub time: Duration,
    pub calls: u64,
    /// Weight bytes the op's products read (0 for attention).
    pub bytes: u64,
}

/// A [`Gemv`] that times every call of the one it wraps.
pub struct ProfileGemv<'g, G> {
    inner: &'g G,
    /// Rows of the LM head (the vocabulary): a product with this many rows is the head.
    vocab: usize,
    ops: RefCell<BTreeMap<String, OpTotals>>,
}

impl<'g, G: Gemv> ProfileGemv<'g, G> {
    pub fn new(inner: &'g G, vocab: usize) -> Self {
        ProfileGemv { inner, vocab, ops: RefCell::new(BTreeMap::new()) }
    }

    /// The totals so far, and a fresh start.
    pub fn take(&self) -> BTreeMap<String, OpTotals> {
        std::mem::take(&mut self.ops.borrow_mut())
    }

    fn timed<T>(&self, name: impl FnOnce() -> String, bytes: usize, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        let time = start.elapsed();
        let mut ops = self.ops.borrow_mut();
        let e = ops.entry(name()).or_default();
        e.time += time;
        e.calls += 1;
        e.bytes += bytes as u64;
        out
    }

    fn name(&self, rows: usize, kind: String) -> String {
        if rows == self.vocab {
            format!("LM head ({kind})")
        } else {
            kind
        }
    }
}

fn lookup_name<B: AsRef<[u8]>>(m: &PackedMatrix<B>) -> String {
    format!("lookup {}-bit products", m.layout().bits())
}

fn int8_name(m: &Int8Matrix) -> String {
    match m.form() {
        CodeForm::Bytes => "int8 products".into(),
        CodeForm::FiveBit => "int8 products (5-bit codes)".into(),
    }
}

impl<G: Gemv> Gemv for ProfileGemv<'_, G> {
    fn gemv<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
        let name = || self.name(m.layout().rows(), lookup_name(m));
        self.timed(name, m.as_bytes().len(), || self.inner.gemv(m, tables, y))
    }
    fn gemm<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: &[Tables<'_>], ys: &mut [f32]) -> Result<(), Error> {
        let name = || self.name(m.layout().rows(), lookup_name(m));
        self.timed(name, m.as_bytes().len(), || self.inner.gemm(m, tables, ys))
    }
    fn int8_gemv(&self, m: &Int8Matrix, x: &Int8Activations, y: &mut [f32]) -> Result<(), Error> {
        let name = || self.name(m.rows(), int8_name(m));
        self.timed(name, m.bytes(), || self.inner.int8_gemv(m, x, y))
    }
    fn int8_gemm(&self, m: &Int8Matrix, xs: &[Int8Activations], ys: &mut [f32]) -> Result<(), Error> {
        let name = || self.name(m.rows(), int8_name(m));
        self.timed(name, m.bytes(), || self.inner.int8_gemm(m, xs, ys))
    }
    fn for_each_token<T: Send>(&self, items: &mut [T], job: &(dyn Fn(&mut T, usize) -> Result<(), Error> + Sync)) -> Result<(), Error> {
        self.inner.for_each_token(items, job)
    }
    fn parallel(&self) -> &dyn Parallel {
        self
    }
}

impl<G: Gemv> Parallel for ProfileGemv<'_, G> {
    fn run_pieces(&self, pieces: &mut [AttentionPiece], job: &(dyn Fn(&mut AttentionPiece) + Sync)) {
        self.timed(|| "attention".into(), 0, || self.inner.parallel().run_pieces(pieces, job))
    }
    fn threads(&self) -> usize {
        self.inner.parallel().threads()
    }
}

/// One phase's profile: its ops, the wall time of the whole phase and its tokens.
pub struct PhaseProfile {
    pub phase: &'static str,
    pub tokens: usize,
    pub wall: Duration,
    pub ops: BTreeMap<String, OpTotals>,
}

impl PhaseProfile {
    /// Rows by time, largest first, then the remainder (everything not timed).
    fn rows(&self) -> Vec<(String, OpTotals)> {
        let mut rows: Vec<(String, OpTotals)> = self.ops.iter().map(|(k, v)| (k.clone(), *v)).collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1.time));
        let timed: Duration = rows.iter().map(|r| r.1.time).sum();
        let rest = OpTotals { time: self.wall.saturating_sub(timed), calls: 0, bytes: 0 };
        rows.push(("other: tables, norms, RoPE, residuals, KV writes".into(), rest));
        rows
    }

    pub fn table(&self) -> String {
        let per_token = |d: Duration| d.as_secs_f64() * 1e3 / self.tokens.max(1) as f64;
        let mut out = format!(
            "{} ({} tokens, {:.3} ms/token, {:.1} tokens/s)\n| op | ms/token | share | calls/token | weight GB/s |\n|---|---|---|---|---|\n",
            self.phase,
            self.tokens,
            per_token(self.wall),
            self.tokens as f64 / self.wall.as_secs_f64()
        );
        for (name, t) in self.rows() {
            let share = 100.0 * t.time.as_secs_f64() / self.wall.as_secs_f64();
            let calls = if t.calls > 0 { format!("{:.1}", t.calls as f64 / self.tokens.max(1) as f64) } else { "–".into() };
            let gbps = if t.bytes > 0 { format!("{:.1}", t.bytes as f64 / t.time.as_secs_f64() / 1e9) } else { "–".into() };
            out += &format!("| {name} | {:.3} | {share:.1} % | {calls} | {gbps} |\n", per_token(t.time));
        }
        out
    }

    /// One JSON object per op.
    pub fn json(&self, context: &str) -> Vec<String> {
        self.rows()
            .into_iter()
            .map(|(name, t)| {
                format!(
                    "{{{context},\"phase\":\"{}\",\"op\":\"{name}\",\"ms_per_token\":{:.4},\"share\":{:.4},\"calls\":{},\"weight_bytes\":{}}}",
                    self.phase,
                    t.time.as_secs_f64() * 1e3 / self.tokens.max(1) as f64,
                    t.time.as_secs_f64() / self.wall.as_secs_f64(),
                    t.calls,
                    t.bytes
                )
            })
            .collect()
    }
}
