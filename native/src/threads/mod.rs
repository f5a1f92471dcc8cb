//! Threads: a persistent pool, and matrix products and attention pieces split across it.

mod parallel;
mod pool;

pub use parallel::{for_each_token, gemm, gemv, gemv_rayon, int8_gemm, int8_gemv};
pub use pool::{ChunkCounter, DisjointSlice, Pool};

use lutra_core::int8::{Int8Activations, Int8Matrix};
use lutra_core::lut::Tables;
use lutra_core::model::kv::Parallel;
use lutra_core::model::Gemv;
use lutra_core::{Error, Isa, PackedMatrix};

/// Matrix products and attention pieces split across a [`Pool`]: the engine's
/// [`Gemv`] on native targets. Results equal [`SingleThread`](lutra_core::model::SingleThread)'s bit for bit.
pub struct PoolGemv<'p>(pub &'p Pool);

impl Gemv for PoolGemv<'_> {
    fn gemv<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
        gemv(self.0, Isa::best_for(m.layout().interleave()), m, tables, y)
    }
    fn gemm<B: AsRef<[u8]> + Sync>(&self, m: &PackedMatrix<B>, tables: &[Tables<'_>], ys: &mut [f32]) -> Result<(), Error> {
        gemm(self.0, Isa::best_for(m.layout().interleave()), m, tables, ys)
    }
    fn int8_gemv(&self, m: &Int8Matrix, x: &Int8Activations, y: &mut [f32]) -> Result<(), Error> {
        int8_gemv(self.0, Isa::best(), m, x, y)
    }
    fn int8_gemm(&self, m: &Int8Matrix, xs: &[Int8Activations], ys: &mut [f32]) -> Result<(), Error> {
        int8_gemm(self.0, Isa::best(), m, xs, ys)
    }
    fn for_each_token<T: Send>(&self, items: &mut [T], job: &(dyn Fn(&mut T, usize) -> Result<(), Error> + Sync)) -> Result<(), Error> {
        for_each_token(self.0, items, job)
    }
    fn parallel(&self) -> &dyn Parallel {
        self.0
    }
}
