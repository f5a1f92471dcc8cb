//! The reference kernel: defines every integer accumulator. Written to read like the
//! layout description in `quant`, not to be fast.

use crate::{Block64, Interleave, TILE_ROWS};

/// Integer accumulators of one tile-group. `w`: the tile-group's codes; `quads`: the
/// group's tables; `acc` is added to.
///
/// # Safety
/// None needed; `unsafe` only to share the signature of the SIMD kernels.
pub(crate) unsafe fn tile_group(w: &[u8], quads: &[Block64], bits: u8, interleave: Interleave, acc: &mut [i32; TILE_ROWS]) {
    match interleave {
        Interleave::Shuffle => shuffle_order(w, quads, bits, acc),
        Interleave::Permute => permute_order(w, quads, bits, acc),
    }
}

fn permute_order(w: &[u8], quads: &[Block64], bits: u8, acc: &mut [i32; TILE_ROWS]) {
    let table = |chunk: usize, idx: u8| quads[chunk / 4].0[16 * (chunk % 4) + idx as usize] as i8 as i32;
    let mut bytes = w.iter();
    for quad in 0..quads.len() {
        for plane in 0..bits as usize {
            for r in 0..16 {
                for lane in 0..4 {
                    let byte = *bytes.next().expect("tile-group length matches its layout");
                    acc[r] += table(4 * quad + lane, byte & 15) << plane;
                    acc[16 + r] += table(4 * quad + lane, byte >> 4) << plane;
                }
            }
        }
    }
}

fn shuffle_order(w: &[u8], quads: &[Block64], bits: u8, acc: &mut [i32; TILE_ROWS]) {
    let bits = bits as usize;
    let table = |chunk: usize, idx: u8| quads[chunk / 4].0[16 * (chunk % 4) + idx as usize] as i8 as i32;
    let mut bytes = w.iter();
    let mut next = || *bytes.next().expect("tile-group length matches its layout");
    for pair in 0..bits / 2 {
        for quad in 0..quads.len() {
            for half in 0..2 {
                for lane in 0..4 {
                    let chunk = 4 * quad + lane;
                    for i in 0..16 {
                        let byte = next();
                        let plane = 2 * pair + i % 2;
                        let row = 16 * half + i / 2;
                        acc[row] += table(chunk, byte & 15) << plane;
                        acc[row + 8] += table(chunk, byte >> 4) << plane;
                    }
                }
            }
        }
    }
    if bits % 2 == 1 {
        let plane = bits - 1;
        for quad in 0..quads.len() {
            for lane in 0..4 {
                let chunk = 4 * quad + lane;
                for i in 0..16 {
                    let byte = next();
                    acc[i] += table(chunk, byte & 15) << plane;
                    acc[16 + i] += table(chunk, byte >> 4) << plane;
                }
            }
        }
    }
}

crate::kernels::lut::define_run!();
