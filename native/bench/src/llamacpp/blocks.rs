//! Random llama.cpp quantization blocks of every type lutra imports, including the
//! scales a damaged or hostile file can hold (±0, subnormals, ±65504, NaN, ±Inf), and
//! llama.cpp's own dequantization of them (ggml's `to_float`, in-process). This is the
//! reference of the block-import property test (`tests/tests/block_import.rs`, feature
//! `llamacpp`) and of the golden file CI checks without building llama.cpp
//! (`tests/examples/block_golden.rs`).

use llama_cpp_sys_2 as sys;
use lutra_core::rng::SplitMix64;

/// A block type: ggml's name, and where its f16 scales sit in a block.
#[derive(Clone, Copy, Debug)]
pub struct BlockType {
    /// ggml's type name.
    pub name: &'static str,
    ty: sys::ggml_type,
    /// Byte offsets of the f16 scale fields (`d`, and `dmin` where the type has one).
    pub scale_offsets: &'static [usize],
}

/// Every block type lutra imports from GGUF.
pub const BLOCK_TYPES: [BlockType; 14] = [
    BlockType { name: "Q1_0", ty: sys::GGML_TYPE_Q1_0, scale_offsets: &[0] },
    BlockType { name: "Q2_0", ty: sys::GGML_TYPE_Q2_0, scale_offsets: &[0] },
    BlockType { name: "Q4_0", ty: sys::GGML_TYPE_Q4_0, scale_offsets: &[0] },
    BlockType { name: "Q4_1", ty: sys::GGML_TYPE_Q4_1, scale_offsets: &[0, 2] },
    BlockType { name: "Q5_0", ty: sys::GGML_TYPE_Q5_0, scale_offsets: &[0] },
    BlockType { name: "Q5_1", ty: sys::GGML_TYPE_Q5_1, scale_offsets: &[0, 2] },
    BlockType { name: "Q8_0", ty: sys::GGML_TYPE_Q8_0, scale_offsets: &[0] },
    BlockType { name: "Q2_K", ty: sys::GGML_TYPE_Q2_K, scale_offsets: &[80, 82] },
    BlockType { name: "Q3_K", ty: sys::GGML_TYPE_Q3_K, scale_offsets: &[108] },
    BlockType { name: "Q4_K", ty: sys::GGML_TYPE_Q4_K, scale_offsets: &[0, 2] },
    BlockType { name: "Q5_K", ty: sys::GGML_TYPE_Q5_K, scale_offsets: &[0, 2] },
    BlockType { name: "Q6_K", ty: sys::GGML_TYPE_Q6_K, scale_offsets: &[208] },
    BlockType { name: "TQ1_0", ty: sys::GGML_TYPE_TQ1_0, scale_offsets: &[52] },
    BlockType { name: "TQ2_0", ty: sys::GGML_TYPE_TQ2_0, scale_offsets: &[64] },
];

/// Finite f16 scales at the edges: ±0, the smallest and largest subnormals, the
/// smallest normal, ±65504 (the largest finite).
pub const EDGE_SCALES: [u16; 8] = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff];
/// Non-finite f16 scales: ±Inf, quiet and signalling NaN, a negative NaN.
pub const NON_FINITE_SCALES: [u16; 5] = [0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00];

impl BlockType {
    /// Bytes of one block (ggml's `type_size`).
    pub fn block_bytes(&self) -> usize {
        // SAFETY: a valid ggml type.
        unsafe { sys::ggml_type_size(self.ty) }
    }

    /// Weights per block (ggml's `blck_size`).
    pub fn block_elems(&self) -> usize {
        // SAFETY: a valid ggml type; ggml returns a pointer into its static table.
        unsafe { (*sys::ggml_get_type_traits(self.ty)).blck_size as usize }
    }

    /// `n` blocks of random payload bytes whose scales are random finite f16 values,
    /// about a quarter of them taken from [`EDGE_SCALES`].
    pub fn random_blocks(&self, n: usize, seed: u64) -> Vec<u8> {
        let mut rng = SplitMix64::new(seed);
        let size = self.block_bytes();
        let mut out = vec![0u8; n * size];
        for block in out.chunks_exact_mut(size) {
            block.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
            for &at in self.scale_offsets {
                let r = rng.next_u64();
                let bits = if r.is_multiple_of(4) {
                    EDGE_SCALES[(r >> 8) as usize % EDGE_SCALES.len()]
                } else {
                    // any sign and mantissa, an exponent below 31 (finite)
                    let e = ((r >> 8) % 31) as u16;
                    ((r >> 16) as u16 & 0x83ff) | (e << 10)
                };
                block[at..at + 2].copy_from_slice(&bits.to_le_bytes());
            }
        }
        out
    }

    /// Sets scale field `field` of block `block` to `bits`.
    pub fn set_scale(&self, blocks: &mut [u8], block: usize, field: usize, bits: u16) {
        let at = block * self.block_bytes() + self.scale_offsets[field];
        blocks[at..at + 2].copy_from_slice(&bits.to_le_bytes());
    }

    /// llama.cpp's dequantization of whole blocks (`to_float`).
    pub fn dequantize(&self, blocks: &[u8]) -> Vec<f32> {
        let n_blocks = blocks.len() / self.block_bytes();
        assert_eq!(n_blocks * self.block_bytes(), blocks.len(), "{}: whole blocks only", self.name);
        let mut out = vec![0f32; n_blocks * self.block_elems()];
        // SAFETY: a valid ggml type; every type listed has a to_float.
        let to_float = unsafe { (*sys::ggml_get_type_traits(self.ty)).to_float }.expect("quantized types have to_float");
        // SAFETY: `blocks` holds exactly n_blocks blocks and `out` their n_blocks *
        // blck_size floats; ggml reads and writes only those.
        unsafe { to_float(blocks.as_ptr().cast(), out.as_mut_ptr(), out.len() as i64) };
        out
    }
}
