//! 64-byte aligned storage: one AVX-512 load never splits a cache line.

/// 64 bytes, aligned to 64. The unit of packed weights and of activation tables
/// (four 16-entry tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Block64(pub [u8; 64]);

impl Default for Block64 {
    fn default() -> Self {
        Block64([0; 64])
    }
}

/// View a slice of blocks as bytes (e.g. a static arena of blocks holding a packed matrix).
pub fn blocks_as_bytes(blocks: &[Block64]) -> &[u8] {
    // SAFETY: Block64 is repr(C) over [u8; 64] with no padding; size 64, align 64.
    unsafe { core::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), blocks.len() * 64) }
}

/// View a mutable slice of blocks as bytes.
pub fn blocks_as_bytes_mut(blocks: &mut [Block64]) -> &mut [u8] {
    // SAFETY: as above; the borrow of `blocks` is carried by the result.
    unsafe { core::slice::from_raw_parts_mut(blocks.as_mut_ptr().cast::<u8>(), blocks.len() * 64) }
}

/// A heap byte buffer whose start is 64-byte aligned.
#[cfg(feature = "alloc")]
#[derive(Clone, Debug, Default)]
pub struct AlignedBytes {
    blocks: alloc::vec::Vec<Block64>,
    len: usize,
}

#[cfg(feature = "alloc")]
impl AlignedBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        AlignedBytes { blocks: alloc::vec![Block64::default(); len.div_ceil(64)], len }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(feature = "alloc")]
impl AsRef<[u8]> for AlignedBytes {
    fn as_ref(&self) -> &[u8] {
        &blocks_as_bytes(&self.blocks)[..self.len]
    }
}

#[cfg(feature = "alloc")]
impl AsMut<[u8]> for AlignedBytes {
    fn as_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut blocks_as_bytes_mut(&mut self.blocks)[..len]
    }
}
