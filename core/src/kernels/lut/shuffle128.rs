//! The 128-bit lookup kernel, written once over [`Shuffle128`] for SSSE3, NEON and wasm
//! simd128: one 16-byte table per shuffle, a plane pair folded into i16 lanes, several
//! tokens' tables per weight load at prefill (`tile_group_n`). Each arch module
//! instantiates it inside its own `#[target_feature]` function.

use crate::kernels::v128::Shuffle128;
use crate::{Block64, TILE_ROWS};

/// Add the i16 lanes `v` (8 rows starting at `row`) times 2^shift into `acc`.
#[inline(always)]
fn widen_into(acc: &mut [i32; TILE_ROWS], row: usize, v: [i16; 8], shift: usize) {
    for (i, x) in v.into_iter().enumerate() {
        acc[row + i] += (x as i32) << shift;
    }
}

/// The integer sums of one tile-group for N tokens' tables: each 16 weight bytes are
/// loaded and split into indices once for all N; integer sums, so each token's do not
/// depend on N.
///
/// # Safety
/// `V`'s ISA is enabled where this is inlined (see [`Shuffle128`]); `w` is one tile-group
/// of a layout with `quads[t].len()` quads, the same for every token.
#[inline(always)]
pub(crate) unsafe fn tile_group_n<V: Shuffle128, const N: usize>(
    w: &[u8],
    quads: [&[Block64]; N],
    bits: u8,
    acc: &mut [[i32; TILE_ROWS]; N],
) {
    let bits = bits as usize;
    let n_quads = quads[0].len();
    debug_assert!(quads.iter().all(|q| q.len() == n_quads));
    debug_assert_eq!(w.len(), TILE_ROWS * 16 * n_quads * bits / 8);
    let tables = quads.map(|q| q.as_ptr().cast::<u8>());
    let mut p = w.as_ptr();
    // a pair's bytes run quad by quad, each quad's two halves (rows 0..16, 16..32) of four
    // 16-byte chunks; one half at a time keeps two i16 accumulators per token, so two
    // tokens' fit SSE's 16 registers beside the indices and tables
    let pair_bytes = n_quads * 2 * 4 * 16;
    for pair in 0..bits / 2 {
        for half in 0..2 {
            // SAFETY (every `V::` call below): the caller's contract on `V`'s ISA.
            // per token: rows 16·half + 0..8, + 8..16 as i16
            let mut a = [[unsafe { V::zero_i16() }; 2]; N];
            for quad in 0..n_quads {
                for lane in 0..4 {
                    // SAFETY: every token's tables hold `n_quads` 64-byte (aligned) blocks;
                    // the offset stays inside pair `pair`'s bytes of `w` (length checked by
                    // layout).
                    unsafe {
                        let (lo, hi) = V::nibbles(V::load(p.add(pair * pair_bytes + ((quad * 2 + half) * 4 + lane) * 16)));
                        for (a, table) in a.iter_mut().zip(tables) {
                            let table = V::load_aligned(table.add(64 * quad + 16 * lane));
                            a[0] = V::add_plane_pairs(a[0], V::lookup(table, lo));
                            a[1] = V::add_plane_pairs(a[1], V::lookup(table, hi));
                        }
                    }
                }
            }
            for (acc, a) in acc.iter_mut().zip(a) {
                for (k, v) in a.into_iter().enumerate() {
                    // SAFETY: the ISA contract.
                    widen_into(acc, 16 * half + 8 * k, unsafe { V::i16_lanes(v) }, 2 * pair);
                }
            }
        }
    }
    // SAFETY: the pairs' bytes come first in `w`.
    p = unsafe { p.add(bits / 2 * pair_bytes) };
    if bits % 2 == 1 {
        // SAFETY: the ISA contract.
        let mut a = [[unsafe { V::zero_i16() }; 4]; N];
        for quad in 0..n_quads {
            for lane in 0..4 {
                // SAFETY: as above.
                unsafe {
                    let (lo_index, hi_index) = V::nibbles(V::load(p));
                    p = p.add(16);
                    for (a, table) in a.iter_mut().zip(tables) {
                        let table = V::load_aligned(table.add(64 * quad + 16 * lane));
                        let (lo, hi) = (V::lookup(table, lo_index), V::lookup(table, hi_index));
                        a[0] = V::add_low_i8(a[0], lo);
                        a[1] = V::add_high_i8(a[1], lo);
                        a[2] = V::add_low_i8(a[2], hi);
                        a[3] = V::add_high_i8(a[3], hi);
                    }
                }
            }
        }
        for (acc, a) in acc.iter_mut().zip(a) {
            for (k, v) in a.into_iter().enumerate() {
                // SAFETY: the ISA contract.
                widen_into(acc, 8 * k, unsafe { V::i16_lanes(v) }, bits - 1);
            }
        }
    }
}
