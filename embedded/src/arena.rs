//! A fixed region of memory, sized at compile time, as the global allocator: the Pi
//! binaries' heap is this arena and nothing else (no `brk`, no `mmap`, no growth).
//!
//! Bump allocation, with the top block freed or resized in place (so a growing `Vec`
//! while loading does not leave copies behind). Other frees, and the padding an aligned
//! block leaves below it, are remembered as holes (up to [`HOLES`] ranges, merged where
//! they touch): when the top block is freed, the holes right under it go too, so a
//! chat's per-turn buffers, freed in any order, give their memory back. [`StaticArena::seal`] makes every later
//! allocation fail: while sealed (the whole of generation) allocating is impossible, not
//! merely avoided, and the attempt is counted. The memory is an uninitialised `static`,
//! so it lives in `.bss`: pages never touched are never resident.
//!
//! `unsafe` here is the allocator's contract with the compiler, like the thread pool's.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, Ordering};

/// The arena's bookkeeping, under a spin lock (the thread pool's workers may allocate
/// while starting; a Pi has no contention worth more than a spin).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArenaStats {
    /// Bytes from the start of the arena to the end of the last live block.
    pub used: usize,
    /// The most `used` has ever been.
    pub peak: usize,
    /// Allocations and growing reallocations served.
    pub allocations: usize,
    /// Allocations refused: the arena was full, or sealed.
    pub refused: usize,
    /// Refused because the arena was sealed.
    pub refused_sealed: usize,
}

#[repr(C, align(4096))]
struct Memory<const N: usize>([u8; N]);

/// Free ranges below the top remembered at once; one more is left unused (as a bump
/// allocator would) until the top comes down to it.
pub const HOLES: usize = 256;

/// Free byte ranges `start..end` under the top block, none touching another.
#[derive(Clone, Copy)]
struct Holes {
    ranges: [(usize, usize); HOLES],
    len: usize,
}

impl Holes {
    /// Remembers `start..end` as free, merged with the ranges it touches.
    fn add(&mut self, mut start: usize, mut end: usize) {
        if start >= end {
            return;
        }
        let mut i = 0;
        while i < self.len {
            let (s, e) = self.ranges[i];
            if e == start || s == end {
                (start, end) = (start.min(s), end.max(e));
                self.len -= 1;
                self.ranges[i] = self.ranges[self.len];
            } else {
                i += 1;
            }
        }
        if self.len < HOLES {
            self.ranges[self.len] = (start, end);
            self.len += 1;
        }
    }

    /// The top after freeing everything free right under `top`.
    fn lower(&mut self, top: usize) -> usize {
        match self.ranges[..self.len].iter().position(|&(_, e)| e == top) {
            Some(i) => {
                let start = self.ranges[i].0;
                self.len -= 1;
                self.ranges[i] = self.ranges[self.len];
                // merged on insertion: nothing else ends at `start`
                start
            }
            None => top,
        }
    }
}

/// `N` bytes of heap, in `.bss`.
pub struct StaticArena<const N: usize> {
    memory: UnsafeCell<MaybeUninit<Memory<N>>>,
    lock: AtomicBool,
    state: UnsafeCell<State>,
}

#[derive(Clone, Copy)]
struct State {
    stats: ArenaStats,
    sealed: bool,
    holes: Holes,
}

impl State {
    /// The top block, `offset..used`, is free: the top comes down to it and through
    /// the holes under it.
    fn free_top(&mut self, offset: usize) {
        self.stats.used = self.holes.lower(offset);
    }
}

// SAFETY: `state` is only touched under `lock`; `memory` only through the blocks handed
// out, which never overlap.
unsafe impl<const N: usize> Sync for StaticArena<N> {}

impl<const N: usize> Default for StaticArena<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> StaticArena<N> {
    pub const fn new() -> Self {
        StaticArena {
            memory: UnsafeCell::new(MaybeUninit::uninit()),
            lock: AtomicBool::new(false),
            state: UnsafeCell::new(State {
                stats: ArenaStats { used: 0, peak: 0, allocations: 0, refused: 0, refused_sealed: 0 },
                sealed: false,
                holes: Holes { ranges: [(0, 0); HOLES], len: 0 },
            }),
        }
    }

    pub const fn capacity(&self) -> usize {
        N
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        while self.lock.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            core::hint::spin_loop();
        }
        // SAFETY: the lock is held, so this is the only reference to the state.
        let r = f(unsafe { &mut *self.state.get() });
        self.lock.store(false, Ordering::Release);
        r
    }

    /// Whether `ptr` points into the arena.
    pub fn contains(&self, ptr: *const u8) -> bool {
        (self.base()..self.base() + N).contains(&(ptr as usize))
    }

    fn base(&self) -> usize {
        self.memory.get() as usize
    }

    /// Offset of a new block of `layout`, or `None` (counted) when it does not fit.
    fn reserve(&self, s: &mut State, layout: Layout) -> Option<usize> {
        let refuse = |s: &mut State| {
            s.stats.refused += 1;
            if s.sealed {
                s.stats.refused_sealed += 1;
            }
            None
        };
        if s.sealed {
            return refuse(s);
        }
        let base = self.base();
        let start = (base + s.stats.used).checked_next_multiple_of(layout.align())? - base;
        match start.checked_add(layout.size()) {
            Some(end) if end <= N => {
                s.holes.add(s.stats.used, start);
                s.stats.used = end;
                s.stats.peak = s.stats.peak.max(end);
                s.stats.allocations += 1;
                Some(start)
            }
            _ => refuse(s),
        }
    }
}

// SAFETY: blocks are disjoint ranges of `memory` aligned as asked (the offset is rounded
// up from the arena's address), and a block is only reused after it was freed.
unsafe impl<const N: usize> GlobalAlloc for StaticArena<N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.with(|s| self.reserve(s, layout)) {
            // SAFETY: `start + size <= N`, inside `memory`.
            Some(start) => unsafe { (self.memory.get() as *mut u8).add(start) },
            None => core::ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let offset = ptr as usize - self.base();
        self.with(|s| {
            if offset + layout.size() == s.stats.used {
                s.free_top(offset);
            } else {
                s.holes.add(offset, offset + layout.size());
            }
        });
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let offset = ptr as usize - self.base();
        let in_place = self.with(|s| {
            if new_size <= layout.size() {
                if offset + layout.size() == s.stats.used {
                    s.stats.used = offset + new_size;
                } else {
                    s.holes.add(offset + new_size, offset + layout.size());
                }
                return Some(true);
            }
            if offset + layout.size() != s.stats.used {
                return None; // not the top block: move it
            }
            if s.sealed || offset + new_size > N {
                s.stats.refused += 1;
                s.stats.refused_sealed += usize::from(s.sealed);
                return Some(false);
            }
            s.stats.used = offset + new_size;
            s.stats.peak = s.stats.peak.max(s.stats.used);
            s.stats.allocations += 1;
            Some(true)
        });
        match in_place {
            Some(true) => ptr,
            Some(false) => core::ptr::null_mut(),
            None => {
                // SAFETY: the caller's layout with the new size is valid (GlobalAlloc::realloc's contract).
                let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                // SAFETY: as for `alloc`.
                let new = unsafe { self.alloc(new_layout) };
                if !new.is_null() {
                    // SAFETY: both blocks are live, disjoint and at least `layout.size()` long.
                    unsafe {
                        core::ptr::copy_nonoverlapping(ptr, new, layout.size());
                        self.dealloc(ptr, layout);
                    }
                }
                new
            }
        }
    }
}

/// What the Pi front-ends need of their heap, whatever its size.
pub trait Heap: Sync {
    fn capacity(&self) -> usize;
    fn stats(&self) -> ArenaStats;
    /// From now on every allocation fails (and is counted in `refused_sealed`).
    fn seal(&self);
    fn unseal(&self);
    /// Bytes still free above the top block.
    fn free(&self) -> usize {
        self.capacity() - self.stats().used
    }
}

impl<const N: usize> Heap for StaticArena<N> {
    fn capacity(&self) -> usize {
        N
    }
    fn stats(&self) -> ArenaStats {
        self.with(|s| s.stats)
    }
    fn seal(&self) {
        self.with(|s| s.sealed = true);
    }
    fn unseal(&self) {
        self.with(|s| s.sealed = false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn blocks_are_aligned_disjoint_and_the_top_one_is_reused() {
        let arena = StaticArena::<4096>::new();
        // SAFETY (test): every block is used within its layout and freed with it.
        unsafe {
            let a = arena.alloc(layout(10, 1));
            let b = arena.alloc(layout(100, 64));
            assert!(!a.is_null() && !b.is_null());
            assert_eq!(b as usize % 64, 0);
            assert!(b as usize >= a as usize + 10, "blocks overlap");
            b.write_bytes(0xAB, 100);
            a.write_bytes(0xCD, 10);
            assert_eq!(*b, 0xAB);
            let used = arena.stats().used;
            arena.dealloc(b, layout(100, 64));
            assert!(arena.stats().used < used, "the top block is given back");
            let c = arena.alloc(layout(100, 64));
            assert_eq!(c, b, "and reused");
            // a block below the top stays a hole
            let before = arena.stats().used;
            arena.dealloc(a, layout(10, 1));
            assert_eq!(arena.stats().used, before);
        }
    }

    #[test]
    fn freeing_the_top_gives_back_the_holes_and_padding_under_it() {
        let arena = StaticArena::<4096>::new();
        // SAFETY (test): as above.
        unsafe {
            let keep = arena.alloc(layout(24, 8));
            let kept = arena.stats().used;
            let a = arena.alloc(layout(10, 1));
            let b = arena.alloc(layout(100, 64)); // padding under it
            let c = arena.alloc(layout(8, 8));
            arena.dealloc(a, layout(10, 1));
            arena.dealloc(b, layout(100, 64));
            assert!(arena.stats().used > kept, "holes under a live top stay");
            arena.dealloc(c, layout(8, 8));
            assert_eq!(arena.stats().used, kept, "the top, the holes and the padding under it");
            // freed in the other order, too
            let a = arena.alloc(layout(10, 1));
            let b = arena.alloc(layout(100, 64));
            arena.dealloc(b, layout(100, 64));
            arena.dealloc(a, layout(10, 1));
            assert_eq!(arena.stats().used, kept);
            assert_eq!(arena.alloc(layout(24, 8)), keep.add(24), "reused");
        }
    }

    #[test]
    fn the_top_block_grows_in_place_and_others_move_with_their_bytes() {
        let arena = StaticArena::<4096>::new();
        // SAFETY (test): as above; reallocated blocks are used through the new pointer.
        unsafe {
            let a = arena.alloc(layout(16, 8));
            a.write_bytes(7, 16);
            let grown = arena.realloc(a, layout(16, 8), 64);
            assert_eq!(grown, a, "the top block grows where it is");
            let b = arena.alloc(layout(8, 8));
            let moved = arena.realloc(grown, layout(64, 8), 128);
            assert_ne!(moved, grown);
            assert!((0..16).all(|i| *moved.add(i) == 7), "moved with its bytes");
            assert!(moved as usize >= b as usize + 8);
        }
    }

    #[test]
    fn full_or_sealed_refuses_and_counts() {
        let arena = StaticArena::<256>::new();
        // SAFETY (test): as above.
        unsafe {
            assert!(arena.alloc(layout(512, 1)).is_null(), "bigger than the arena");
            let a = arena.alloc(layout(64, 8));
            arena.seal();
            assert!(arena.alloc(layout(8, 8)).is_null());
            assert!(arena.realloc(a, layout(64, 8), 128).is_null(), "no growing while sealed");
            assert_eq!(arena.realloc(a, layout(64, 8), 32), a, "shrinking is fine");
            arena.unseal();
            assert!(!arena.alloc(layout(8, 8)).is_null());
        }
        let s = arena.stats();
        assert_eq!((s.refused, s.refused_sealed), (3, 2));
        assert!(s.peak <= 256 && s.used <= s.peak);
    }
}
