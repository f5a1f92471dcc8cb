//! GEMV rows split across threads: tiles handed out in chunks (see `pool`).

use lutra_core::{gemv_tiles, Error, Isa, PackedMatrix, Tables, TILE_ROWS};

use crate::pool::{ChunkCounter, DisjointSlice, Pool};

/// Tiles per chunk: small enough to balance two noisy cores, large enough that the
/// counter is not contended (a 32-row tile of 4096 columns at 2 bits is 32 KiB).
fn chunk_tiles(tiles: usize, threads: usize) -> usize {
    (tiles / (8 * threads)).clamp(1, 16)
}

/// `y = W·x` on every thread of `pool`.
pub fn gemv<B: AsRef<[u8]> + Sync>(pool: &Pool, isa: Isa, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
    let l = *m.layout();
    if y.len() != l.rows {
        return Err(Error::BufferSize { what: "output rows", expected: l.rows, got: y.len() });
    }
    if pool.threads() == 1 {
        return gemv_tiles(isa, m, tables, 0..l.tiles(), y);
    }
    let counter = ChunkCounter::new(l.tiles(), chunk_tiles(l.tiles(), pool.threads()));
    let out = DisjointSlice::new(y);
    let first_error = std::sync::Mutex::new(None);
    pool.run(|_| {
        while let Some(tiles) = counter.next() {
            let rows = tiles.start * TILE_ROWS..(tiles.end * TILE_ROWS).min(l.rows);
            // SAFETY: each tile range comes from the counter exactly once, so row
            // ranges of different calls never overlap.
            let y = unsafe { out.range_mut(rows) };
            if let Err(e) = gemv_tiles(isa, m, tables, tiles, y) {
                first_error.lock().unwrap().get_or_insert(e);
            }
        }
    });
    first_error.into_inner().unwrap().map_or(Ok(()), Err)
}

/// The same split with rayon's work stealing, kept for the comparison in
/// `lutra bench gemv --pool rayon`.
pub fn gemv_rayon<B: AsRef<[u8]> + Sync>(isa: Isa, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
    use rayon::prelude::*;
    let l = *m.layout();
    if y.len() != l.rows {
        return Err(Error::BufferSize { what: "output rows", expected: l.rows, got: y.len() });
    }
    let chunk = chunk_tiles(l.tiles(), rayon::current_num_threads());
    y.par_chunks_mut(chunk * TILE_ROWS).enumerate().try_for_each(|(i, y)| {
        let start = i * chunk;
        let end = (start + chunk).min(l.tiles());
        gemv_tiles(isa, m, tables, start..end, y)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lutra_core::{Offset, OwnedTables};

    #[test]
    fn threaded_splits_equal_the_single_thread_result() {
        let (rows, cols) = (333, 512);
        let w = crate::bench::normals(rows * cols, 9, 0.05);
        let x = crate::bench::normals(cols, 10, 1.0);
        let m = PackedMatrix::quantize(&w, rows, cols, 3, 64, Offset::Min).unwrap();
        let mut t = OwnedTables::new(cols, 64).unwrap();
        let tables = t.build(&x).unwrap();
        let mut want = vec![0.0; rows];
        gemv_tiles(Isa::best(), &m, tables, 0..m.layout().tiles(), &mut want).unwrap();
        for threads in 1..=3 {
            let pool = Pool::new(threads);
            let mut y = vec![f32::NAN; rows];
            gemv(&pool, Isa::best(), &m, tables, &mut y).unwrap();
            assert_eq!(y, want, "pool of {threads}");
        }
        let mut y = vec![f32::NAN; rows];
        gemv_rayon(Isa::best(), &m, tables, &mut y).unwrap();
        assert_eq!(y, want, "rayon");
        assert!(matches!(gemv(&Pool::new(2), Isa::best(), &m, tables, &mut [0.0; 3]), Err(Error::BufferSize { .. })));
    }
}
