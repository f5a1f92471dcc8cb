//! `lutra`: the command line (`cli/`) and its benchmarks (`bench/`).

mod bench;
mod cli;

use std::process::ExitCode;

/// Weights and KV caches on transparent huge pages (see `hugepage`).
#[global_allocator]
static ALLOCATOR: lutra::hugepage::HugePageAllocator = lutra::hugepage::HugePageAllocator;

fn main() -> ExitCode {
    match cli::main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lutra: error: {e}");
            ExitCode::FAILURE
        }
    }
}
