//! Generation allocates nothing: a counting global allocator around the token loop of
//! stories15M, packed to 4 bits and loaded as `lutra-pi` loads it (one thread and two).
//! Without the test harness (`harness = false`): its own threads allocate while a slow
//! test runs (the timeout watcher under qemu), and would be counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn main() {
    // the part of libtest's command line that test runners (cargo-nextest) use to list tests
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("generation_allocates_nothing: test");
        }
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories15M");
    let checkpoint = std::fs::read(dir.join("model.bin")).expect("models/stories15M: run `cargo xtask models stories`");
    let tokenizer = std::fs::read(dir.join("tokenizer.bin")).unwrap();
    let model = lutra_core::engine::Model::from_llama2c(&checkpoint, &tokenizer, 4).unwrap();
    let mut writer = lutra_core::pack::Writer::new();
    model.write_packed(&tokenizer, &mut writer).unwrap();
    let mut packed = Vec::new();
    writer
        .finish(|p| {
            packed.extend_from_slice(p);
            Ok::<_, ()>(())
        })
        .unwrap();
    let file = std::env::temp_dir().join(format!("no-alloc-{}.lutra", std::process::id()));
    std::fs::write(&file, &packed).unwrap();

    for threads in [1, 2] {
        let (text, during) =
            lutra_embedded::generate_counting(&file, threads, "Once upon a time", 40, || ALLOCATIONS.load(Ordering::Relaxed)).unwrap();
        assert!(text.len() > 40, "{text:?}");
        assert_eq!(during, 0, "{during} allocations while generating 40 tokens on {threads} thread(s)");
    }
    std::fs::remove_file(&file).unwrap();
    println!("no_alloc: generation_allocates_nothing ... ok (1 and 2 threads, 40 tokens each)");
}
