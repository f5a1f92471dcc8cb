//! What the image does: report the machine, refuse damaged copies of its model, run it.

extern crate alloc;

use core::fmt::Write;

use lutra_core::engine::{Attention, Generation, Session, SingleThread};
use lutra_core::formats::gguf::Gguf;
use lutra_core::sampler::SamplerConfig;
use lutra_core::Isa;
use lutra_embedded::arena::{Heap, StaticArena};
use lutra_embedded::budget;
use lutra_embedded::packed::{check_fits, load_static, stream, Refusal};

#[cfg(not(feature = "defmt"))]
use crate::boot::Uart;
use crate::boot::{self, exit};

/// Positions of the session: stories15M's whole context.
const CONTEXT: usize = 256;
const PROMPT: &str = "Once upon a time";
const TOKENS: usize = 16;

#[global_allocator]
static ARENA: StaticArena<{ budget::arena_bytes(&budget::STORIES15M, CONTEXT) }> = StaticArena::new();

/// A line of output, formatted into a fixed buffer (no heap: also after a panic).
macro_rules! say {
    ($($arg:tt)*) => {{
        let mut line = heapless::String::<600>::new();
        let _ = write!(line, $($arg)*);
        boot::line(&line);
    }};
}

/// The engine's log records as UART lines (with `defmt`, its macros write frames).
#[cfg(not(feature = "defmt"))]
struct UartLog;

#[cfg(not(feature = "defmt"))]
impl log::Log for UartLog {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        say!("{} {}", record.level(), record.args());
    }
    fn flush(&self) {}
}

#[cfg(not(feature = "defmt"))]
static LOG: UartLog = UartLog;

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    say!("panic: {info}");
    exit(101)
}

#[no_mangle]
extern "C" fn kernel_main() -> ! {
    if let Err(why) = boot::enable_mmu() {
        say!("lutra-metal: {why}");
        exit(3);
    }
    #[cfg(not(feature = "defmt"))]
    let _ = log::set_logger(&LOG).map(|()| log::set_max_level(log::LevelFilter::Info));
    say!(
        "lutra-metal on {}: EL{}, MMU and caches on, kernels {}; arena {} bytes (compile time: stories15M, {CONTEXT} positions)",
        boot::BOARD,
        boot::exception_level(),
        Isa::best().name(),
        ARENA.capacity()
    );
    let model = boot::model();
    if model.is_empty() {
        say!("no model in this image: build it with LUTRA_METAL_MODEL=FILE.lutra");
        exit(2);
    }
    if !self_checks(model) {
        say!("SELF-CHECK FAILED");
        exit(3);
    }
    match run(model) {
        Ok(()) => exit(0),
        Err(refusal) => {
            say!("refused: {refusal}");
            exit(1)
        }
    }
}

/// Damaged copies of the model are refused with a message, never run: cut in half, a
/// bit flipped in the header, a bit flipped in a tensor.
fn self_checks(model: &'static [u8]) -> bool {
    let report = |what: &str, refusal: Option<&str>| match refusal {
        Some(why) => {
            say!("refuses a {what}: {why}");
            true
        }
        None => {
            say!("ACCEPTED a {what}");
            false
        }
    };
    let refusal = |file: &'static [u8]| {
        let mut why = heapless::String::<200>::new();
        match load_static(file, ARENA.free()) {
            Err(e) => {
                let _ = write!(why, "{e}");
                Some(why)
            }
            Ok(_) => None,
        }
    };
    let mut ok = report("truncated file", refusal(&model[..model.len() / 2]).as_deref());
    let Ok(gguf) = Gguf::parse(model) else {
        return false;
    };
    let header = gguf.data_start() / 2;
    let tensor = gguf.tensors().next().and_then(|t| gguf.tensor_range(&t).ok());
    for (what, offset) in [("bit-flipped header", Some(header)), ("bit-flipped tensor", tensor.map(|r| (r.start + r.end) as usize / 2))] {
        let Some(offset) = offset else { return false };
        ok &= report(what, boot::with_flipped(offset, 3, refusal).as_deref());
    }
    ok
}

fn run(file: &'static [u8]) -> Result<(), Refusal> {
    let t0 = boot::ticks();
    let model = load_static(file, ARENA.free())?;
    let loaded = ARENA.stats();
    let budget = check_fits(&model, CONTEXT, ARENA.free()).map_err(Refusal::TooBig)?;
    let mut session = Session::new(&model, CONTEXT, &Attention::Exact)?;
    let prompt = model.encode(PROMPT, true)?;
    let mut generation = Generation::start(&mut session, &prompt, SamplerConfig::greedy(), TOKENS)?;
    session.prefill(&SingleThread)?;
    let t1 = boot::ticks();
    let started = ARENA.stats();
    say!("--- text ---");
    // plain UART: the text as it comes; defmt: one frame once it is complete
    let mut text = heapless::String::<1024>::new();
    let _ = text.push_str(PROMPT);
    #[cfg(not(feature = "defmt"))]
    let _ = Uart.write_str(PROMPT);
    let generated = stream(
        &mut generation,
        &mut session,
        &SingleThread,
        |sealed| if sealed { ARENA.seal() } else { ARENA.unseal() },
        |piece| {
            #[cfg(not(feature = "defmt"))]
            let _ = Uart.write_str(piece);
            let _ = text.push_str(piece);
        },
    )?;
    let t2 = boot::ticks();
    #[cfg(not(feature = "defmt"))]
    say!("\n--- end ---");
    #[cfg(feature = "defmt")]
    {
        boot::line(&text);
        say!("--- end ---");
    }
    let end = ARENA.stats();
    let seconds = |a: (u64, u64), b: (u64, u64)| if a.1 == 0 { f64::NAN } else { (b.0 - a.0) as f64 / a.1 as f64 };
    say!(
        "generated {generated} tokens ({} bytes of text) in {:.2} s after {:.2} s of load and prefill (emulated: not a speed)",
        text.len() - PROMPT.len(),
        seconds(t1, t2),
        seconds(t0, t1)
    );
    say!(
        "arena: model {} bytes (bound {}), session {} bytes (budget {budget}), peak {} of {}; {} allocations refused while sealed",
        loaded.used,
        budget::import_bytes(&budget::STORIES15M),
        started.used - loaded.used,
        end.peak,
        ARENA.capacity(),
        end.refused_sealed
    );
    Ok(())
}
