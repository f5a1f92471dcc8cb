//! `lutra-metal`: a `kernel8.img` for a Raspberry Pi 3 (`qemu-system-aarch64 -M raspi3b`)
//! or, with `--features raspi4b`, a Pi 4 (`-M raspi4b`, qemu ≥ 9) with no OS. It boots at EL2, turns on FP/NEON, the MMU and the caches,
//! checks that damaged copies of the packed model embedded in the image are refused,
//! then runs it: a few greedy tokens of a fixed prompt over the PL011 UART, and exits
//! through semihosting with a status (0 ran, 1 refused, 3 a self-check failed).
//!
//! Every byte of heap is one arena sized at compile time for stories15M at its full
//! context (`budget::arena_bytes`); the arena is sealed while tokens are generated.
//! Built by `cargo xtask test-pi` with `LUTRA_METAL_MODEL=FILE.lutra`.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod boot;
#[cfg(target_os = "none")]
mod kernel;

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "lutra-metal is a bare-metal image: `cargo xtask test-pi` builds it for aarch64-unknown-none and boots it in qemu -M raspi3b"
    );
    std::process::exit(2);
}
