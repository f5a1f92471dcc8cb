//! The arena: a packed stories15M runs on an arena sized at compile time from its
//! hyperparameters (`budget::arena_bytes`), the arena is sealed while tokens are
//! generated (any allocation would fail and be counted: none is), on one thread and
//! two, and the budget bounds what was really used. Without the test harness
//! (`harness = false`): its threads would allocate from the same arena.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use lutra_core::sampler::SamplerConfig;
use lutra_embedded::arena::StaticArena;
use lutra_embedded::budget;
use lutra_embedded::pi::{run, Options};

/// Two runs' budgets of stories15M at its full context (the first run's blocks are not
/// all reclaimed: a bump arena), plus std's own allocations (the thread pool, stdout).
const STD_BYTES: usize = 1 << 20;
const ARENA_BYTES: usize = 2 * budget::arena_bytes(&budget::STORIES15M, 256) + STD_BYTES;

static ARENA: StaticArena<ARENA_BYTES> = StaticArena::new();
/// Until the test file is packed (the checkpoint read, quantized and written: not what
/// is measured), allocations go to the system allocator.
static ARMED: AtomicBool = AtomicBool::new(false);

struct Phased;

// SAFETY: each block is freed by the allocator that made it (told apart by address).
unsafe impl GlobalAlloc for Phased {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if ARMED.load(Ordering::Acquire) {
                ARENA.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe {
            if ARENA.contains(ptr) {
                ARENA.dealloc(ptr, layout)
            } else {
                System.dealloc(ptr, layout)
            }
        }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above; a system block stays with the system allocator.
        unsafe {
            if ARENA.contains(ptr) {
                ARENA.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}

#[global_allocator]
static PHASED: Phased = Phased;

fn main() {
    // the part of libtest's command line that test runners (cargo-nextest) use to list tests
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("sealed_arena_generation: test");
        }
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories15M");
    let file = std::env::temp_dir().join(format!("arena-{}.lutra", std::process::id()));
    {
        let checkpoint = std::fs::read(dir.join("model.bin")).expect("models/stories15M: run `cargo xtask models stories`");
        let tokenizer = std::fs::read(dir.join("tokenizer.bin")).unwrap();
        let model = lutra_core::engine::Model::from_llama2c(&checkpoint, &tokenizer, 4).unwrap();
        let mut writer = lutra_core::formats::pack::Writer::new();
        model.write_packed(&tokenizer, &mut writer).unwrap();
        let mut out = std::fs::File::create(&file).unwrap();
        writer.finish(|p| std::io::Write::write_all(&mut out, p)).unwrap();
    }
    ARMED.store(true, Ordering::Release);
    println!("arena {} bytes", ARENA.capacity());
    for threads in [1, 2] {
        // room for the whole text before the arena is sealed
        let mut out = Vec::with_capacity(64 << 10);
        let opts =
            Options { model: &file, prompt: "Once upon a time", max_tokens: 40, sampler: SamplerConfig::greedy(), threads, context: 0 };
        let report = run(&opts, &ARENA, &mut out).unwrap();
        let [_, _, started, end] = report.arena;
        let (import, session, budget) = (report.model_bytes(), report.session_bytes(), report.session_budget);
        let text = String::from_utf8_lossy(&out);
        println!(
            "threads {threads}: import {import} bytes (budget {}), session {session} bytes (budget {budget}), {} allocations refused while sealed\n{text}",
            budget::import_bytes(&budget::STORIES15M),
            end.refused_sealed
        );
        assert!(text.len() > 40, "{text:?}");
        assert_eq!(end.refused_sealed, 0, "{} allocations refused while generating on {threads} thread(s)", end.refused_sealed);
        assert_eq!(end.allocations, started.allocations, "allocations while generating");
        assert_eq!(budget, budget::STORIES15M.session_bytes(256), "the model's dims differ from the compile-time preset");
        // the budgets bound what was used, and not by much
        assert!(import <= budget::import_bytes(&budget::STORIES15M) && session <= budget);
        assert!(budget as f64 <= 1.1 * session as f64, "session budget {budget} is loose for {session} bytes used");
    }
    std::fs::remove_file(&file).unwrap();
    println!("arena: sealed_arena_generation ... ok (1 and 2 threads, 40 tokens each)");
}
