//! Transformer models over the LUT kernels. Each forward pass reads top to bottom like
//! llama2.c's `run.c`: norm, qkv, rope, attention, output, residual, ffn.

pub mod budget;
pub(crate) mod hparams;
pub(crate) mod ops;
pub(crate) mod products;

use crate::kernels::lut::Tables;
use crate::{Error, PackedMatrix};

pub use crate::attention::{SingleThread, PREFILL_BATCH};
pub use crate::error::ModelError;
pub use hparams::Hparams;
pub use products::TablePrecision;

/// A `feed_batch` request run in pieces of up to `PREFILL_BATCH` tokens, `chunk(piece,
/// first position)` each, after checking it: every token in the vocabulary, every
/// position inside the context.
pub(crate) fn feed_in_batches(
    tokens: &[u32],
    first_pos: usize,
    context: usize,
    vocab_size: usize,
    mut chunk: impl FnMut(&[u32], usize) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    if let Some(&token) = tokens.iter().find(|&&t| t as usize >= vocab_size) {
        return Err(ModelError::TokenOutOfRange { token, vocab_size });
    }
    if first_pos.checked_add(tokens.len()).is_none_or(|end| end > context) {
        return Err(ModelError::ContextFull { pos: first_pos.max(context), context });
    }
    for (i, piece) in tokens.chunks(PREFILL_BATCH).enumerate() {
        chunk(piece, first_pos + i * PREFILL_BATCH)?;
    }
    Ok(())
}

/// How matrix-vector products and attention's pieces run: on the calling thread
/// (`SingleThread`), or split across a front-end's threads (`crate::threads::Split`).
pub trait Gemv {
    fn gemv<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error>;
    /// A batch of tokens' products, `ys` token-major: see `crate::gemm`.
    fn gemm<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: &[Tables<'_>], ys: &mut [f32]) -> Result<(), Error> {
        crate::gemm(m, tables, ys)
    }
    /// `y = m · x` over int8 codes (`crate::kernels::int8`).
    fn int8_gemv(
        &self,
        m: &crate::kernels::int8::Int8Matrix,
        x: &crate::kernels::int8::Int8Activations,
        y: &mut [f32],
    ) -> Result<(), Error> {
        crate::kernels::int8::gemv(m, x, y)
    }
    /// A batch of tokens' int8 products, `ys` token-major: each token's `int8_gemv`.
    fn int8_gemm(
        &self,
        m: &crate::kernels::int8::Int8Matrix,
        xs: &[crate::kernels::int8::Int8Activations],
        ys: &mut [f32],
    ) -> Result<(), Error> {
        if ys.len() != xs.len() * m.rows() {
            return Err(Error::BufferSize { what: "output rows × batch", expected: xs.len() * m.rows(), got: ys.len() });
        }
        xs.iter().zip(ys.chunks_exact_mut(m.rows().max(1))).try_for_each(|(x, y)| self.int8_gemv(m, x, y))
    }
    /// `job(item, i)` for every item of a batch (each token's tables or int8 activations,
    /// made from its own input): the calling thread unless overridden. Each call touches
    /// only its own item, so any split gives the same items.
    fn for_each_token<T: Send>(&self, items: &mut [T], job: &(dyn Fn(&mut T, usize) -> Result<(), Error> + Sync)) -> Result<(), Error> {
        items.iter_mut().enumerate().try_for_each(|(i, item)| job(item, i))
    }
    /// Who runs attention's pieces; the calling thread unless overridden.
    fn parallel(&self) -> &dyn crate::attention::Parallel {
        &SingleThread
    }
}

impl Gemv for SingleThread {
    fn gemv<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
        crate::gemv(m, tables, y)
    }
    /// Each token's `int8_gemv`, the weights read once for several tokens where the
    /// kernel can (`crate::kernels::int8::gemm_rows`).
    fn int8_gemm(
        &self,
        m: &crate::kernels::int8::Int8Matrix,
        xs: &[crate::kernels::int8::Int8Activations],
        ys: &mut [f32],
    ) -> Result<(), Error> {
        if ys.len() != xs.len() * m.rows() {
            return Err(Error::BufferSize { what: "output rows × batch", expected: xs.len() * m.rows(), got: ys.len() });
        }
        let mut per_token = ys.chunks_exact_mut(m.rows());
        crate::kernels::int8::gemm_rows(crate::Isa::best(), m, xs, 0..m.rows(), |_| per_token.next().unwrap_or_default())
    }
}

/// The largest group size (≤ `max`) that divides `cols`.
pub fn group_for(cols: usize, max: usize) -> Result<usize, ModelError> {
    [256, 128, 64, 32].into_iter().find(|&g| g <= max && cols.is_multiple_of(g)).ok_or(ModelError::NoGroupFits { cols })
}
