//! lutra-embedded: the Raspberry Pi-class binary (static arenas, no heap after start).
//!
//! For now a self-check: pack a fixed 32×64 4-bit matrix into a static-size buffer on
//! the stack, build the activation tables into caller-provided storage, and check the
//! fastest kernel against the scalar reference (integer accumulators bit for bit) and
//! against f64 arithmetic over the dequantized weights. No allocation anywhere.

use std::process::ExitCode;

use lutra_core::kernels::quant::pack;
use lutra_core::{gemv, gemv_integer, Block64, Isa, Layout, Offset, PackedMatrix, TablesMut};

const ROWS: usize = 32;
const COLS: usize = 64;
const BITS: u8 = 4;
const GROUP: usize = 32;
const GROUPS: usize = COLS / GROUP;
/// Arena for the packed matrix (codes + f16 scales); `Layout::total_bytes` must fit.
const ARENA: usize = 4096;

fn code(row: usize, col: usize) -> u8 {
    ((row * 7 + col * 3 + row * col) % 16) as u8
}

fn activation(k: usize) -> f32 {
    ((k * 5) % 9) as f32 - 4.0 + 0.25 * (k % 3) as f32
}

fn self_check() -> Result<(Isa, f64), String> {
    let layout = Layout::new(ROWS, COLS, BITS, GROUP, Offset::Zero(8)).map_err(|e| e.to_string())?;
    let mut arena = [0u8; ARENA];
    let bytes = arena.get_mut(..layout.total_bytes()).ok_or("arena too small")?;
    pack(&layout, bytes, |row, g, gc| {
        for (k, c) in gc.codes.iter_mut().enumerate() {
            *c = code(row, g * GROUP + k);
        }
        gc.scale = 1.0;
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    let m = PackedMatrix::from_bytes(layout, &*bytes).map_err(|e| e.to_string())?;

    let mut x = [0.0f32; COLS];
    for (k, v) in x.iter_mut().enumerate() {
        *v = activation(k);
    }
    let mut quads = [Block64::default(); COLS / 16];
    let (mut scale, mut sum) = ([0.0f32; GROUPS], [0.0f32; GROUPS]);
    let tables = TablesMut { quads: &mut quads, scale: &mut scale, sum: &mut sum, group: GROUP }.build(&x).map_err(|e| e.to_string())?;

    // every ISA equals the scalar reference exactly
    let mut reference = [0i32; ROWS * GROUPS];
    gemv_integer(Isa::Scalar, &m, tables, &mut reference).map_err(|e| e.to_string())?;
    let best = Isa::best();
    let mut got = [0i32; ROWS * GROUPS];
    gemv_integer(best, &m, tables, &mut got).map_err(|e| e.to_string())?;
    if got != reference {
        return Err(format!("{} integer accumulators differ from scalar", best.name()));
    }

    // the float GEMV is within the int8-table error of exact arithmetic
    let mut y = [0.0f32; ROWS];
    gemv(&m, tables, &mut y).map_err(|e| e.to_string())?;
    let (mut err, mut sig) = (0.0f64, 0.0f64);
    let mut w = [0.0f32; COLS];
    for (r, &yr) in y.iter().enumerate() {
        m.dequantize_row(r, &mut w).map_err(|e| e.to_string())?;
        for (c, &wc) in w.iter().enumerate() {
            if wc != code(r, c) as f32 - 8.0 {
                return Err(format!("dequantized w[{r}][{c}] = {wc}, want {}", code(r, c) as f32 - 8.0));
            }
        }
        let want: f64 = w.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
        err += (yr as f64 - want).powi(2);
        sig += want * want;
    }
    let nmse = err / sig;
    if nmse >= 1e-4 {
        return Err(format!("{} GEMV NMSE {nmse:e} >= 1e-4", best.name()));
    }
    Ok((best, nmse))
}

fn main() -> ExitCode {
    match self_check() {
        Ok((isa, nmse)) => {
            println!("lutra-embedded self-check: isa={} {ROWS}x{COLS} {BITS}-bit nmse={nmse:.2e} OK", isa.name());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lutra-embedded self-check FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
