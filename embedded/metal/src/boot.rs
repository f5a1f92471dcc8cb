//! The machine: entry at EL2 (cores 1–3 parked, stack, `.bss` zeroed, FP/SIMD
//! untrapped), an identity-mapped MMU with caches, the PL011 UART, the generic timer,
//! semihosting exit, and the model image embedded in `.data`. All of the crate's
//! `unsafe` lives here.

use core::arch::{asm, global_asm};
use core::cell::UnsafeCell;

global_asm!(
    r#"
.section .text.boot, "ax"
.global _start
_start:
    mrs     x0, mpidr_el1
    and     x0, x0, #3
    cbz     x0, 2f
1:  wfe
    b       1b
2:  ldr     x0, =__stack_top
    mov     sp, x0
    ldr     x0, =__bss_start
    ldr     x1, =__bss_end
3:  cmp     x0, x1
    b.hs    4f
    stp     xzr, xzr, [x0], #16
    b       3b
4:  mrs     x0, CurrentEL
    lsr     x0, x0, #2
    cmp     x0, #2
    b.ne    5f
    mov     x1, #0x33ff
    msr     cptr_el2, x1
5:  mov     x1, #(3 << 20)
    msr     cpacr_el1, x1
    isb
    bl      kernel_main
6:  wfe
    b       6b
"#
);

/// The exception level the image was entered at (2 for a raw kernel8.img).
pub fn exception_level() -> u64 {
    let el: u64;
    // SAFETY: reading CurrentEL has no side effects.
    unsafe { asm!("mrs {}, CurrentEL", out(reg) el, options(nomem, nostack)) };
    el >> 2
}

#[repr(C, align(4096))]
struct Table(UnsafeCell<[u64; 512]>);

// SAFETY: written once by `enable_mmu` on the only running core, before anything reads it.
unsafe impl Sync for Table {}

static LEVEL1: Table = Table(UnsafeCell::new([0; 512]));
static LEVEL2: Table = Table(UnsafeCell::new([0; 512]));
static LEVEL2_TOP: Table = Table(UnsafeCell::new([0; 512]));

/// The board's memory map: where the peripherals start (everything from there up to
/// 4 GiB is device memory; RAM below it is normal, cacheable).
#[cfg(not(feature = "raspi4b"))]
const PERIPHERALS: u64 = 0x3F00_0000; // BCM2837: up to the local block at 0x4000_0000
#[cfg(feature = "raspi4b")]
const PERIPHERALS: u64 = 0xFC00_0000; // BCM2711, low-peripheral mode

/// Identity map of the 32-bit address space at EL2: RAM normal write-back cacheable, the
/// peripherals (and, on a Pi 3, the local block at 0x4000_0000) device memory. Without it
/// every access is Device memory: unaligned loads fault and nothing is cached.
pub fn enable_mmu() -> Result<(), &'static str> {
    if exception_level() != 2 {
        return Err("the MMU is set up for EL2 (a raw kernel8.img); this image was entered at another level");
    }
    const BLOCK: u64 = 0b01;
    const TABLE: u64 = 0b11;
    const ACCESSED: u64 = 1 << 10;
    const INNER_SHAREABLE: u64 = 3 << 8;
    const READ_WRITE: u64 = 1 << 6; // AP[1]: RES1 in the EL2 regime
    const NORMAL: u64 = 0 << 2; // MAIR attribute 0
    const DEVICE: u64 = 1 << 2; // MAIR attribute 1
    const EXECUTE_NEVER: u64 = 1 << 54;
    const GIB: u64 = 1 << 30;
    let device = BLOCK | ACCESSED | READ_WRITE | DEVICE | EXECUTE_NEVER;
    let normal = BLOCK | ACCESSED | READ_WRITE | INNER_SHAREABLE | NORMAL;
    let kind = |address: u64| if address >= PERIPHERALS || (!cfg!(feature = "raspi4b") && address >= GIB) { device } else { normal };
    // SAFETY: the MMU is off and this is the only core running: nothing else reads the
    // tables while they are written.
    unsafe {
        let level2 = &mut *LEVEL2.0.get();
        for (i, entry) in level2.iter_mut().enumerate() {
            let address = (i as u64) << 21;
            *entry = address | kind(address);
        }
        // the first GiB in 2 MiB blocks, the other three whole, except the last GiB of
        // a Pi 4, where the peripherals start inside it: 2 MiB blocks there too
        let level1 = &mut *LEVEL1.0.get();
        level1[0] = LEVEL2.0.get() as u64 | TABLE;
        for (g, entry) in level1.iter_mut().enumerate().take(4).skip(1) {
            let address = g as u64 * GIB;
            *entry = address | kind(address);
        }
        if cfg!(feature = "raspi4b") {
            let top = &mut *LEVEL2_TOP.0.get();
            for (i, entry) in top.iter_mut().enumerate() {
                let address = 3 * GIB + ((i as u64) << 21);
                *entry = address | kind(address);
            }
            level1[3] = LEVEL2_TOP.0.get() as u64 | TABLE;
        }
    }
    let mair: u64 = 0xFF; // attribute 0: normal, write-back; attribute 1: device nGnRnE
                          // T0SZ = 32 (4 GiB, walks start at level 1), inner/outer write-back write-allocate,
                          // inner shareable, 4 KiB granule, 32-bit physical addresses, RES1 bits 23 and 31
    let tcr: u64 = 32 | (1 << 8) | (1 << 10) | (3 << 12) | (1 << 23) | (1 << 31);
    let ttbr = LEVEL1.0.get() as u64;
    // SAFETY: the tables map all memory this image touches to itself, so execution
    // continues at the same addresses once translation is on.
    unsafe {
        asm!(
            "msr mair_el2, {mair}",
            "msr tcr_el2, {tcr}",
            "msr ttbr0_el2, {ttbr}",
            "dsb ish",
            "isb",
            "tlbi alle2",
            "dsb ish",
            "isb",
            "mrs {x}, sctlr_el2",
            "orr {x}, {x}, #(1 << 0)",  // M: translation on
            "orr {x}, {x}, #(1 << 2)",  // C: data cache
            "orr {x}, {x}, #(1 << 12)", // I: instruction cache
            "bic {x}, {x}, #(1 << 1)",  // A: no alignment faults
            "msr sctlr_el2, {x}",
            "isb",
            mair = in(reg) mair,
            tcr = in(reg) tcr,
            ttbr = in(reg) ttbr,
            x = out(reg) _,
            options(nostack),
        );
    }
    Ok(())
}

/// The board's PL011 UART (UART0).
pub struct Uart;

#[cfg(not(feature = "raspi4b"))]
const UART_DATA: usize = 0x3F20_1000;
#[cfg(feature = "raspi4b")]
const UART_DATA: usize = 0xFE20_1000;

/// The board this image is built for.
pub const BOARD: &str = if cfg!(feature = "raspi4b") { "raspi4b" } else { "raspi3b" };
const UART_FLAGS: usize = UART_DATA + 0x18;
const TRANSMIT_FULL: u32 = 1 << 5;

impl Uart {
    pub fn write_byte(&self, byte: u8) {
        // SAFETY: the PL011's registers, mapped as device memory; 32-bit accesses.
        unsafe {
            while core::ptr::read_volatile(UART_FLAGS as *const u32) & TRANSMIT_FULL != 0 {
                core::hint::spin_loop();
            }
            core::ptr::write_volatile(UART_DATA as *mut u32, u32::from(byte));
        }
    }
}

impl core::fmt::Write for Uart {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        s.bytes().for_each(|b| self.write_byte(b));
        Ok(())
    }
}

/// The generic timer: (ticks, ticks per second; 0 when the firmware set no frequency).
pub fn ticks() -> (u64, u64) {
    let (count, frequency): (u64, u64);
    // SAFETY: reading the counter and its frequency has no side effects.
    unsafe {
        asm!("isb", "mrs {}, cntpct_el0", out(reg) count, options(nomem, nostack));
        asm!("mrs {}, cntfrq_el0", out(reg) frequency, options(nomem, nostack));
    }
    (count, frequency)
}

/// Ends the program: semihosting `SYS_EXIT` with `code` as qemu's exit status, or (on
/// real hardware, without the feature) a parked core.
pub fn exit(code: u32) -> ! {
    #[cfg(feature = "semihosting")]
    {
        const SYS_EXIT: u64 = 0x18;
        const APPLICATION_EXIT: u64 = 0x20026;
        let block = [APPLICATION_EXIT, u64::from(code)];
        // SAFETY: the semihosting call reads the two-word block and does not return.
        unsafe { asm!("hlt #0xf000", in("x0") SYS_EXIT, in("x1") block.as_ptr(), options(nostack)) };
    }
    let _ = code;
    loop {
        // SAFETY: waiting for an event has no other effect.
        unsafe { asm!("wfe", options(nomem, nostack)) };
    }
}

const MODEL_BYTES: usize = include_bytes!(concat!(env!("OUT_DIR"), "/model.lutra")).len();

/// The packed model, 64-byte aligned as packed matrices are read in place; in `.data`
/// so the self-checks can damage a byte and repair it.
#[repr(C, align(64))]
struct Image(UnsafeCell<[u8; MODEL_BYTES]>);

// SAFETY: only this single-core program touches it; mutation happens in `with_flipped`
// while no reference into it is alive.
unsafe impl Sync for Image {}

static MODEL: Image = Image(UnsafeCell::new(*include_bytes!(concat!(env!("OUT_DIR"), "/model.lutra"))));

/// The embedded packed model.
pub fn model() -> &'static [u8] {
    // SAFETY: read-only outside `with_flipped`, which never overlaps a caller's borrow.
    unsafe { &*MODEL.0.get() }
}

/// Runs `check` on the model with bit `bit` of byte `offset` flipped, then repairs it.
/// `check` gets the bytes for its own duration only (it returns nothing borrowed).
pub fn with_flipped(
    offset: usize,
    bit: u8,
    check: impl FnOnce(&'static [u8]) -> Option<heapless::String<200>>,
) -> Option<heapless::String<200>> {
    let flip = || {
        // SAFETY: `offset` is checked against the image; no reference into it is alive.
        unsafe {
            let bytes = &mut *MODEL.0.get();
            if let Some(b) = bytes.get_mut(offset) {
                *b ^= 1 << (bit & 7);
            }
        }
    };
    flip();
    let result = check(model());
    flip();
    result
}

/// One line of the image's own output: plain text on the UART, or one defmt frame.
pub fn line(text: &str) {
    #[cfg(not(feature = "defmt"))]
    {
        use core::fmt::Write;
        let _ = Uart.write_str(text);
        Uart.write_byte(b'\n');
    }
    #[cfg(feature = "defmt")]
    defmt::println!("{=str}", text);
}

/// defmt frames (rzCOBS) on the UART, one frame at a time: a single core, and the
/// engine never logs from an interrupt (there are none).
#[cfg(feature = "defmt")]
mod defmt_uart {
    use core::cell::UnsafeCell;
    use core::sync::atomic::{AtomicBool, Ordering};

    #[defmt::global_logger]
    struct UartLogger;

    struct EncoderCell(UnsafeCell<defmt::Encoder>);

    // SAFETY: only used between `acquire` and `release`, which `TAKEN` makes exclusive.
    unsafe impl Sync for EncoderCell {}

    static TAKEN: AtomicBool = AtomicBool::new(false);
    static ENCODER: EncoderCell = EncoderCell(UnsafeCell::new(defmt::Encoder::new()));

    fn emit(bytes: &[u8]) {
        bytes.iter().for_each(|&b| super::Uart.write_byte(b));
    }

    // SAFETY: frames never interleave: `acquire` refuses to nest (a logging call from
    // inside a logging call ends the program), so the encoder has one user at a time.
    unsafe impl defmt::Logger for UartLogger {
        fn acquire() {
            if TAKEN.swap(true, Ordering::Acquire) {
                super::exit(102);
            }
            // SAFETY: exclusive, as above.
            unsafe { (*ENCODER.0.get()).start_frame(emit) }
        }
        unsafe fn flush() {}
        unsafe fn release() {
            // SAFETY: exclusive until TAKEN is cleared.
            unsafe { (*ENCODER.0.get()).end_frame(emit) };
            TAKEN.store(false, Ordering::Release);
        }
        unsafe fn write(bytes: &[u8]) {
            // SAFETY: exclusive, as above.
            unsafe { (*ENCODER.0.get()).write(bytes, emit) }
        }
    }

    #[defmt::panic_handler]
    fn defmt_panic() -> ! {
        super::exit(101)
    }
}
