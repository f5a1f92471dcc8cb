//! Anonymous memory that the kernel is asked to back with transparent huge pages.
//!
//! A GEMV streams its weights front to back; with 4 KiB pages the hardware prefetcher
//! restarts at every page boundary, with 2 MiB pages it does not.

use memmap2::{Advice, MmapMut};

/// A copy of some bytes in huge-page-advised anonymous memory.
pub struct HugeBytes {
    map: MmapMut,
    len: usize,
}

impl HugeBytes {
    pub fn copy_of(bytes: &[u8]) -> std::io::Result<HugeBytes> {
        let mut map = MmapMut::map_anon(bytes.len().max(1))?;
        // Advice only: where THP is off the copy still works, on 4 KiB pages.
        let _ = map.advise(Advice::HugePage);
        map[..bytes.len()].copy_from_slice(bytes);
        Ok(HugeBytes { map, len: bytes.len() })
    }
}

impl AsRef<[u8]> for HugeBytes {
    fn as_ref(&self) -> &[u8] {
        &self.map[..self.len]
    }
}
