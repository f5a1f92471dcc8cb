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

/// Bytes that outlive a model: a mapped file, or a `static` image on bare metal.
#[cfg(feature = "alloc")]
pub trait Backing: Send + Sync {
    fn bytes(&self) -> &[u8];
}

/// A byte buffer whose start is 64-byte aligned: owned (heap), or a range of shared
/// [`Backing`] bytes read in place (a packed `.lutra` file mapped or in flash).
#[cfg(feature = "alloc")]
#[derive(Clone, Default)]
pub struct AlignedBytes {
    repr: Repr,
}

#[cfg(feature = "alloc")]
#[derive(Clone)]
enum Repr {
    Owned { blocks: alloc::vec::Vec<Block64>, len: usize },
    Shared { backing: alloc::sync::Arc<dyn Backing>, start: usize, len: usize },
}

#[cfg(feature = "alloc")]
impl Default for Repr {
    fn default() -> Self {
        Repr::Owned { blocks: alloc::vec::Vec::new(), len: 0 }
    }
}

#[cfg(feature = "alloc")]
impl core::fmt::Debug for AlignedBytes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let kind = if self.is_shared() { "shared" } else { "owned" };
        write!(f, "AlignedBytes({} bytes, {kind})", self.len())
    }
}

#[cfg(feature = "alloc")]
impl AlignedBytes {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        AlignedBytes { repr: Repr::Owned { blocks: alloc::vec![Block64::default(); len.div_ceil(64)], len } }
    }

    /// Bytes `range` of `backing`, read in place; `None` unless the range lies inside the
    /// backing bytes and starts 64-byte aligned in memory.
    pub fn shared(backing: alloc::sync::Arc<dyn Backing>, range: core::ops::Range<usize>) -> Option<Self> {
        let bytes = backing.bytes().get(range.clone())?;
        if !(bytes.as_ptr() as usize).is_multiple_of(64) {
            return None;
        }
        Some(AlignedBytes { repr: Repr::Shared { backing, start: range.start, len: range.len() } })
    }

    /// Moves the owned buffers among `buffers` shorter than `shorter_than` bytes into one
    /// new allocation, end to end in the order given (each from a 64-byte boundary), and
    /// leaves each a view of its range there: the same bytes, one allocation instead of
    /// many. A weight matrix of a few hundred KiB is an allocation too small for a 2 MiB
    /// page, so on 4 KiB pages; one allocation of all of them can be backed with huge
    /// pages (the native crate's allocator asks for them on allocations of 4 MiB and
    /// more, which is the bound it passes), and a decode step then reads its weights
    /// without a page walk or a prefetcher restart every 4 KiB.
    ///
    /// Each original is freed as soon as it is copied, so resident memory peaks at the
    /// weights plus one moved buffer where freed memory goes back to the system (large
    /// allocations do; small ones may stay in the allocator's heap): the bound keeps large
    /// buffers, which gain nothing, from raising that peak (Gemma 3's 178 MB LM head
    /// would have). Shared buffers stay where they are. Returns the bytes moved: 0, with
    /// nothing changed, when there is nothing to move or no memory for it (every
    /// allocation is made before the first buffer moves).
    pub fn gather(buffers: &mut [&mut AlignedBytes], shorter_than: usize) -> usize {
        let moves = |b: &AlignedBytes| match &b.repr {
            Repr::Owned { len, .. } if *len < shorter_than => Some(len.div_ceil(64)),
            _ => None,
        };
        // every owned buffer is in memory now, so their sum fits in usize
        let total: usize = buffers.iter().filter_map(|b| moves(b)).sum();
        let (mut blocks, mut ranges) = (alloc::vec::Vec::new(), alloc::vec::Vec::new());
        if total == 0 || blocks.try_reserve_exact(total).is_err() || ranges.try_reserve_exact(buffers.len()).is_err() {
            return 0;
        }
        let mut gathered = alloc::sync::Arc::new(Gathered(blocks));
        let Some(Gathered(blocks)) = alloc::sync::Arc::get_mut(&mut gathered) else {
            return 0; // unreachable: no clone of `gathered` exists yet
        };
        for b in buffers.iter_mut() {
            let range = match (&b.repr, moves(b)) {
                (Repr::Owned { blocks: own, len }, Some(n)) => {
                    let start = 64 * blocks.len();
                    // within the reserved capacity: no reallocation
                    blocks.extend_from_slice(&own[..n]);
                    Some(start..start + len)
                }
                _ => None,
            };
            if range.is_some() {
                **b = AlignedBytes::default();
            }
            ranges.push(range);
        }
        let backing: alloc::sync::Arc<dyn Backing> = gathered;
        for (b, range) in buffers.iter_mut().zip(ranges) {
            if let Some(range) = range {
                // 64-byte aligned (a whole number of blocks in), inside the gathered bytes
                **b = AlignedBytes { repr: Repr::Shared { backing: backing.clone(), start: range.start, len: range.len() } };
            }
        }
        64 * total
    }

    /// A copy of `bytes`, owned.
    pub fn copy_of(bytes: &[u8]) -> Self {
        let mut owned = Self::zeroed(bytes.len());
        owned.as_mut().copy_from_slice(bytes);
        owned
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Owned { len, .. } | Repr::Shared { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the bytes are read in place from shared backing.
    pub fn is_shared(&self) -> bool {
        matches!(self.repr, Repr::Shared { .. })
    }

    /// The bytes as little-endian f32 values (`len` a multiple of 4): the start is 64-byte
    /// aligned, so the view needs no copy.
    pub fn as_f32s(&self) -> &[f32] {
        let bytes = self.as_ref();
        #[cfg(target_endian = "big")]
        compile_error!("lutra reads little-endian f32 in place");
        // SAFETY: the start is 64-byte aligned (`zeroed` allocates Block64s, `shared`
        // checks it), every bit pattern is a valid f32, and the length rounds down to
        // whole values inside the buffer; the borrow of `self` is carried by the result.
        unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast::<f32>(), bytes.len() / 4) }
    }

    /// As `as_f32s`, mutable; shared bytes are copied first (they are read-only).
    pub fn as_f32s_mut(&mut self) -> &mut [f32] {
        let bytes = self.as_mut();
        // SAFETY: as in `as_f32s`; `as_mut` returned owned, aligned, exclusive bytes.
        unsafe { core::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<f32>(), bytes.len() / 4) }
    }

    /// The bytes as little-endian u16 values (`len` a multiple of 2), without a copy.
    pub fn as_u16s(&self) -> &[u16] {
        let bytes = self.as_ref();
        // SAFETY: as in `as_f32s` (the start is 64-byte aligned, so 2-byte aligned; every
        // bit pattern is a valid u16; whole values inside the buffer; borrow carried).
        unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast::<u16>(), bytes.len() / 2) }
    }

    /// As `as_u16s`, mutable; shared bytes are copied first (they are read-only).
    pub fn as_u16s_mut(&mut self) -> &mut [u16] {
        let bytes = self.as_mut();
        // SAFETY: as in `as_u16s`; `as_mut` returned owned, aligned, exclusive bytes.
        unsafe { core::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<u16>(), bytes.len() / 2) }
    }
}

#[cfg(feature = "alloc")]
impl AsRef<[u8]> for AlignedBytes {
    fn as_ref(&self) -> &[u8] {
        match &self.repr {
            Repr::Owned { blocks, len } => &blocks_as_bytes(blocks)[..*len],
            Repr::Shared { backing, start, len } => &backing.bytes()[*start..*start + *len],
        }
    }
}

/// The allocation [`AlignedBytes::gather`] moves buffers into.
#[cfg(feature = "alloc")]
struct Gathered(alloc::vec::Vec<Block64>);

#[cfg(feature = "alloc")]
impl Backing for Gathered {
    fn bytes(&self) -> &[u8] {
        blocks_as_bytes(&self.0)
    }
}

#[cfg(feature = "alloc")]
impl AsMut<[u8]> for AlignedBytes {
    /// Owned bytes as they are; shared bytes are copied into owned ones first.
    fn as_mut(&mut self) -> &mut [u8] {
        if let Repr::Shared { .. } = self.repr {
            *self = Self::copy_of(self.as_ref());
        }
        match &mut self.repr {
            Repr::Owned { blocks, len } => &mut blocks_as_bytes_mut(blocks)[..*len],
            Repr::Shared { .. } => &mut [],
        }
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;

    struct File(alloc::vec::Vec<Block64>);

    impl Backing for File {
        fn bytes(&self) -> &[u8] {
            blocks_as_bytes(&self.0)
        }
    }

    fn pattern(len: usize, seed: u8) -> alloc::vec::Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    #[test]
    fn gather_moves_short_owned_buffers_into_one_allocation_and_keeps_every_byte() {
        const BOUND: usize = 150_000;
        let lens = [0, 1, 63, 64, 65, 200_000, 4096, 100_000];
        let mut owned: alloc::vec::Vec<AlignedBytes> =
            lens.iter().enumerate().map(|(i, &len)| AlignedBytes::copy_of(&pattern(len, i as u8))).collect();
        let long_at = owned[5].as_ref().as_ptr();
        let file: alloc::sync::Arc<dyn Backing> = alloc::sync::Arc::new(File(alloc::vec![Block64([7; 64]); 4]));
        let mut lent = AlignedBytes::shared(file.clone(), 64..192).expect("aligned range");
        let lent_at = lent.as_ref().as_ptr();
        let mut buffers: alloc::vec::Vec<&mut AlignedBytes> = owned.iter_mut().collect();
        buffers.insert(3, &mut lent);
        let moved = AlignedBytes::gather(&mut buffers, BOUND);
        assert_eq!(moved, lens.iter().filter(|&&l| l < BOUND).map(|l| l.div_ceil(64) * 64).sum::<usize>());
        // the lent buffer and the long one are untouched, still read where they were
        assert_eq!((lent.as_ref().as_ptr(), lent.len()), (lent_at, 128));
        assert!(!owned[5].is_shared());
        assert_eq!(owned[5].as_ref().as_ptr(), long_at);
        let mut previous_end = None;
        for (i, (b, &len)) in owned.iter().zip(&lens).enumerate() {
            assert_eq!(b.as_ref(), &pattern(len, i as u8)[..], "buffer {i}'s bytes");
            if len >= BOUND {
                continue;
            }
            assert!(b.is_shared(), "buffer {i} moved");
            let start = b.as_ref().as_ptr() as usize;
            assert_eq!(start % 64, 0, "buffer {i} starts 64-byte aligned");
            // end to end in one allocation, in order
            if let Some(end) = previous_end {
                assert_eq!(start, end, "buffer {i} follows the one before");
            }
            previous_end = Some(start + len.div_ceil(64) * 64);
        }
        // nothing left to move
        let mut buffers: alloc::vec::Vec<&mut AlignedBytes> = owned.iter_mut().collect();
        assert_eq!(AlignedBytes::gather(&mut buffers, BOUND), 0);
    }
}
