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
    /// Copies `bytes` into a fresh anonymous mapping advised for huge pages.
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

/// The system allocator, asking for transparent huge pages on every allocation of at
/// least `HUGE` bytes (weights, KV caches): those are streamed front to back, and on
/// 4 KiB pages the prefetcher stops at every page boundary. Large allocations come
/// fresh from `mmap`, so the advice lands before the first touch. Only advice: where
/// THP is off, nothing changes.
pub struct HugePageAllocator;

pub(crate) const HUGE: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

impl HugePageAllocator {
    fn advise(ptr: *mut u8, size: usize) {
        if ptr.is_null() || size < HUGE {
            return;
        }
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
        let end = (ptr as usize + size) & !(HUGE_PAGE - 1);
        if end > start {
            // SAFETY: [start, end) lies inside the allocation just made; MADV_HUGEPAGE
            // changes no contents, only how the range is backed, and its failure is harmless.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
}

// SAFETY: every call forwards to `System` with the same arguments; `advise` only
// adds advice on memory `System` just returned.
unsafe impl std::alloc::GlobalAlloc for HugePageAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        let p = unsafe { std::alloc::System.alloc(layout) };
        Self::advise(p, layout.size());
        p
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on unchanged.
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        Self::advise(p, layout.size());
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from `System` through this allocator with this layout.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc` is passed on unchanged.
        let p = unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        Self::advise(p, new_size);
        p
    }
}
