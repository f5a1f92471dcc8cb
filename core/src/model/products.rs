//! Products of a batch of token activations with imported weights, whichever kernel
//! each matrix runs on, and the scratch memory they need.

use alloc::vec;
use alloc::vec::Vec;

use super::ops::add;
use super::{Gemv, Hparams, ModelError, PREFILL_BATCH};
use crate::formats::import::Weights;
use crate::kernels::int8::Int8Activations;
use crate::{OwnedTables, Tables};

/// Working memory of up to `PREFILL_BATCH` tokens of a transformer with grouped-query
/// attention and a gated feed-forward: activations (token-major), the products' scratch,
/// and each model's rotary angles `R`.
pub struct Batch<R> {
    pub x: Vec<f32>,
    pub xb: Vec<f32>,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub attn: Vec<f32>,
    pub hb: Vec<f32>,
    pub hb2: Vec<f32>,
    pub scratch: Scratch,
    pub rope: R,
}

impl<R> Batch<R> {
    /// Widths per token: the residual stream, all query heads, all key/value heads, the
    /// feed-forward's hidden layer.
    pub fn new(dim: usize, q_dim: usize, kv_dim: usize, hidden_dim: usize, scratch: Scratch, rope: R) -> Batch<R> {
        let n = PREFILL_BATCH;
        Batch {
            x: vec![0.0; n * dim],
            xb: vec![0.0; n * dim],
            q: vec![0.0; n * q_dim],
            k: vec![0.0; n * kv_dim],
            v: vec![0.0; n * kv_dim],
            attn: vec![0.0; n * q_dim],
            hb: vec![0.0; n * hidden_dim],
            hb2: vec![0.0; n * hidden_dim],
            scratch,
            rope,
        }
    }
}

/// The first `n` rows of `width` values of a token-major buffer.
pub(crate) fn first_rows(v: &mut [f32], n: usize, width: usize) -> core::slice::ChunksExactMut<'_, f32> {
    v[..n * width].chunks_exact_mut(width)
}

/// A job on one token's pair of rows (see `for_each_row_pair`) and its index.
pub(crate) type RowsJob<'a> = dyn Fn(&mut (&mut [f32], &mut [f32]), usize) -> Result<(), crate::Error> + Sync + 'a;

/// `job` on each of the first `n` (≤ `PREFILL_BATCH`) rows of two token-major buffers,
/// paired by token (rows of `a_width` and `b_width` values), on every thread of `gemv`.
pub(crate) fn for_each_row_pair<G: Gemv>(
    gemv: &G,
    (a, a_width): (&mut [f32], usize),
    (b, b_width): (&mut [f32], usize),
    n: usize,
    job: &RowsJob<'_>,
) -> Result<(), ModelError> {
    let mut pairs = first_rows(a, n, a_width).zip(first_rows(b, n, b_width));
    let mut rows: [(&mut [f32], &mut [f32]); PREFILL_BATCH] = core::array::from_fn(|_| pairs.next().unwrap_or_default());
    Ok(gemv.for_each_token(&mut rows[..n], job)?)
}

/// `ys[i] = m · xs[i]` for the first `n` rows of `xs`: over one table set per token for
/// the lookup kernels, over the token's int8 activations for the dot-product kernels.
pub(crate) fn batch_product<G: Gemv>(
    gemv: &G,
    m: &Weights,
    scratch: &mut Scratch,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) -> Result<(), ModelError> {
    batch_products(gemv, scratch, xs, n, [(m, ys)])
}

/// `batch_product` for several matrices of the same input (q, k and v; gate and up):
/// each kind of prepared input — a table set per (columns, group), int8 activations per
/// column count — is made once for all of them.
pub(crate) fn batch_products<G: Gemv, const K: usize>(
    gemv: &G,
    scratch: &mut Scratch,
    xs: &[f32],
    n: usize,
    products: [(&Weights, &mut [f32]); K],
) -> Result<(), ModelError> {
    for (i, (m, _)) in products.iter().enumerate() {
        if !products[..i].iter().any(|(done, _)| input_form(done) == input_form(m)) {
            scratch.prepare(gemv, m, xs, n)?;
        }
    }
    for (m, ys) in products {
        let (rows, cols) = (m.rows(), m.cols());
        match m {
            Weights::Lookup(m) => {
                let set = &scratch.tables[scratch.table_set(cols, m.layout().group())?].1;
                let views: [Tables<'_>; PREFILL_BATCH] = core::array::from_fn(|i| set[i].tables.view());
                let ys = &mut ys[..n * rows];
                gemv.gemm(m, &views[..n], ys)?;
                if set[0].residual.is_some() {
                    let views: [Tables<'_>; PREFILL_BATCH] =
                        core::array::from_fn(|i| set[i].residual.as_ref().unwrap_or(&set[i].tables).view());
                    let out = &mut scratch.residual_out[..n * rows];
                    gemv.gemm(m, &views[..n], out)?;
                    add(ys, out);
                }
            }
            Weights::Int8(m) => gemv.int8_gemm(m, &scratch.int8(cols)?[..n], &mut ys[..n * rows])?,
        }
    }
    Ok(())
}

/// What [`Scratch::for_matrices`] allocates for `matrices`, as `budget` counts it: the most
/// group sizes of lookup matrices on one input width, and the int8 matrices' input widths.
pub(crate) fn scratch_sets<'m>(matrices: impl Iterator<Item = &'m Weights>) -> (usize, usize) {
    let (mut lookup, mut int8): (Vec<(usize, usize)>, Vec<usize>) = (Vec::new(), Vec::new());
    for m in matrices {
        match m {
            Weights::Lookup(m) => {
                let key = (m.layout().cols(), m.layout().group());
                if !lookup.contains(&key) {
                    lookup.push(key);
                }
            }
            Weights::Int8(m) if !int8.contains(&m.cols()) => int8.push(m.cols()),
            Weights::Int8(_) => {}
        }
    }
    let groups_per_width = lookup.iter().map(|(cols, _)| lookup.iter().filter(|(c, _)| c == cols).count()).max().unwrap_or(0);
    (groups_per_width, int8.len())
}

/// What a matrix's kernel reads of its input: tables of (columns, group), or int8
/// activations of (columns, 0).
fn input_form(m: &Weights) -> (bool, usize, usize) {
    match m {
        Weights::Lookup(m) => (true, m.layout().cols(), m.layout().group()),
        Weights::Int8(m) => (false, m.cols(), 0),
    }
}

/// How finely the lookup products see their activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TablePrecision {
    /// Int8 tables (T-MAC's), as fast as lookups go; llama2.c checkpoints at 5 bits and
    /// more add residual tables, where the tables' rounding would dominate the weights' error.
    #[default]
    Auto,
    /// Residual tables beside the int8 tables of every lookup matrix: each product sees
    /// its activations about 127× finer, as exact as an f32 evaluation of the same weights
    /// (BENCHMARKS.md, "1- and 2-bit GGUF files"), at about half the speed.
    Residual,
}

/// Per-token working memory of the products: one table set per token of a batch for
/// each (columns, group) of lookup matrices, one int8 activation vector per token for
/// each column count of int8 matrices.
pub struct Scratch {
    tables: Vec<((usize, usize), Vec<TokenTables>)>,
    /// The residual products before they are added (empty without residual tables).
    residual_out: Vec<f32>,
    int8: Vec<Vec<Int8Activations>>,
}

/// One token's tables for matrices of one (columns, group), and its residual tables where
/// the model uses them: what the int8 tables rounded off, for a second product added to
/// the first (`Scratch::with_residual_tables`).
struct TokenTables {
    tables: OwnedTables,
    residual: Option<OwnedTables>,
}

impl Scratch {
    /// Where the table set for matrices of `cols` columns in groups of `group` is.
    fn table_set(&self, cols: usize, group: usize) -> Result<usize, ModelError> {
        let at = self.tables.iter().position(|(key, _)| *key == (cols, group));
        at.ok_or(ModelError::Kernel(crate::Error::TablesMismatch { tables_cols: 0, tables_group: 0, cols, group }))
    }

    /// Where the int8 activations for matrices of `cols` columns are.
    fn int8_set(&self, cols: usize) -> Result<usize, ModelError> {
        let at = self.int8.iter().position(|a| a.first().is_some_and(|a| a.cols() == cols));
        at.ok_or(ModelError::Kernel(crate::Error::BufferSize { what: "int8 activations", expected: cols, got: 0 }))
    }

    fn int8(&self, cols: usize) -> Result<&[Int8Activations], ModelError> {
        Ok(&self.int8[self.int8_set(cols)?])
    }

    /// Tables (or int8 activations) of the first `n` rows of `xs`, as `m`'s kernel reads
    /// them, token by token on `gemv`'s threads.
    fn prepare<G: Gemv>(&mut self, gemv: &G, m: &Weights, xs: &[f32], n: usize) -> Result<(), ModelError> {
        let cols = m.cols();
        if xs.len() < n * cols {
            return Err(ModelError::Kernel(crate::Error::BufferSize { what: "activations", expected: n * cols, got: xs.len() }));
        }
        let input = |i: usize| &xs[i * cols..(i + 1) * cols];
        match m {
            Weights::Lookup(m) => {
                let at = self.table_set(cols, m.layout().group())?;
                gemv.for_each_token(&mut self.tables[at].1[..n], &|t: &mut TokenTables, i| {
                    let first = t.tables.build(input(i))?;
                    match &mut t.residual {
                        Some(r) => r.build_residual(input(i), first).map(|_| ()),
                        None => Ok(()),
                    }
                })?;
            }
            Weights::Int8(_) => {
                let at = self.int8_set(cols)?;
                gemv.for_each_token(&mut self.int8[at][..n], &|a: &mut Int8Activations, i| a.quantize(input(i)))?;
            }
        }
        Ok(())
    }

    /// Room for the products of up to `PREFILL_BATCH` tokens with each of `matrices`.
    pub(crate) fn for_matrices<'m>(matrices: impl Iterator<Item = &'m Weights>) -> Result<Scratch, ModelError> {
        let mut tables = Vec::new();
        let mut int8: Vec<Vec<Int8Activations>> = Vec::new();
        for m in matrices {
            match m {
                Weights::Lookup(m) => {
                    let key = (m.layout().cols(), m.layout().group());
                    if !tables.iter().any(|(k, _)| *k == key) {
                        let set = (0..PREFILL_BATCH)
                            .map(|_| OwnedTables::new(key.0, key.1).map(|tables| TokenTables { tables, residual: None }))
                            .collect::<Result<Vec<_>, _>>()?;
                        tables.push((key, set));
                    }
                }
                Weights::Int8(m) if !int8.iter().any(|a| a.first().is_some_and(|a| a.cols() == m.cols())) => {
                    int8.push((0..PREFILL_BATCH).map(|_| Int8Activations::new(m.cols())).collect::<Result<Vec<_>, _>>()?)
                }
                Weights::Int8(_) => {}
            }
        }
        Ok(Scratch { tables, residual_out: Vec::new(), int8 })
    }

    /// With residual tables for every table set, and room for the residual products of a
    /// batch of a model of sizes `h`, or of one token's logits: each lookup product becomes
    /// the product over a token's int8 tables plus the product over what they rounded off
    /// (`TablePrecision::Residual`, and llama2.c checkpoints at 5–8 bits, where the
    /// tables' rounding would dominate the weights' error).
    pub(crate) fn with_residual_tables(mut self, h: &Hparams) -> Result<Scratch, ModelError> {
        let widest = h.dim.max(h.hidden_dim).max(h.q_dim());
        let out_len = (PREFILL_BATCH * widest).max(h.vocab_size);
        for ((cols, group), set) in &mut self.tables {
            for t in set {
                t.residual = Some(OwnedTables::new(*cols, *group)?);
            }
        }
        self.residual_out = vec![0.0; out_len];
        Ok(self)
    }
}
