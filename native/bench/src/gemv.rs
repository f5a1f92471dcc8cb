//! `lutra bench …`: measurement commands that print a table and, with `--json`, one
//! JSON object per line. Medians of repeated samples; the engines compared in one row
//! are sampled in interleaved rounds so machine noise hits them alike.

use std::fmt::Write as _;
use std::hint::black_box;

use lutra_core::model::Gemv;
use lutra_core::{gemv_tiles, Error, Isa, Offset, OwnedTables, PackedMatrix, Tables, TILE_ROWS};

use crate::baseline::{BaselineMatrix, QuantizedActivations};
use crate::{normals, Contender, Timer};
use lutra::threads::Pool;

/// A weight format of the GEMV bench: `1..=4` bits or ternary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bits {
    Int(u8),
    Ternary,
}

impl Bits {
    pub fn parse(s: &str) -> Result<Bits, String> {
        match s {
            "t" | "ternary" => Ok(Bits::Ternary),
            _ => match s.parse::<u8>() {
                Ok(b @ 1..=8) => Ok(Bits::Int(b)),
                _ => Err(format!("bits must be 1..8 or t (ternary), got {s:?}")),
            },
        }
    }
    pub fn label(self) -> String {
        match self {
            Bits::Int(b) => b.to_string(),
            Bits::Ternary => "t".into(),
        }
    }
    /// llama.cpp types of the same bit width, fastest-first candidates.
    #[cfg(feature = "llamacpp")]
    pub fn llamacpp_types(self) -> &'static [&'static str] {
        match self {
            Bits::Int(1) => &["Q1_0"],
            Bits::Int(2) => &["Q2_K"],
            Bits::Int(3) => &["Q3_K"],
            Bits::Int(4) => &["Q4_K", "Q4_0"],
            Bits::Int(8) => &["Q8_0"],
            Bits::Ternary => &["TQ2_0"],
            _ => &[],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Regime {
    /// One matrix, repeated: cache-resident when it fits; measures compute.
    Hot,
    /// Distinct copies totalling ≥ 256 MiB, visited in turn: weights stream from DRAM.
    Cold,
}

impl Regime {
    pub fn parse(s: &str) -> Result<Regime, String> {
        match s {
            "hot" => Ok(Regime::Hot),
            "cold" => Ok(Regime::Cold),
            _ => Err(format!("regime must be hot or cold, got {s:?}")),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Regime::Hot => "hot",
            Regime::Cold => "cold",
        }
    }
    pub fn copies(self, bytes: usize) -> usize {
        match self {
            Regime::Hot => 1,
            Regime::Cold => (COLD_BYTES.div_ceil(bytes.max(1))).max(2),
        }
    }
}

pub const COLD_BYTES: usize = 256 << 20;

#[derive(Clone, Debug)]
pub struct GemvOptions {
    pub shapes: Vec<(usize, usize)>,
    pub bits: Vec<Bits>,
    pub threads: Vec<usize>,
    pub regimes: Vec<Regime>,
    pub group: usize,
    pub isa: Isa,
    pub samples: usize,
    pub rayon: bool,
    pub baseline: bool,
    pub llamacpp: bool,
    /// Weight copies in huge-page-advised memory (as the model loader allocates them).
    pub huge_pages: bool,
}

/// One measured row.
#[derive(Clone, Debug)]
pub struct GemvRow {
    pub shape: (usize, usize),
    pub regime: Regime,
    pub bits: Bits,
    pub threads: usize,
    pub isa: Isa,
    pub ns: f64,
    pub weight_bytes: usize,
    pub baseline_ns: Option<f64>,
    pub llamacpp: Option<(String, f64, bool)>,
    pub rayon_ns: Option<f64>,
    /// Cold regime: DRAM read GB/s on the same threads, sampled in the same rounds.
    pub dram_gbps: Option<f64>,
}

impl GemvRow {
    pub fn gmacs(&self) -> f64 {
        (self.shape.0 * self.shape.1) as f64 / self.ns
    }
    pub fn gbps(&self) -> f64 {
        self.weight_bytes as f64 / self.ns
    }
    pub fn json(&self) -> String {
        let mut s = format!(
            "{{\"shape\":\"{}x{}\",\"regime\":\"{}\",\"bits\":{},\"threads\":{},\"isa\":\"{}\",\"ns\":{:.0},\"gmacs\":{:.2},\"gbps\":{:.2},\"weight_bytes\":{}",
            self.shape.0,
            self.shape.1,
            self.regime.name(),
            match self.bits {
                Bits::Int(b) => b.to_string(),
                Bits::Ternary => "\"t\"".into(),
            },
            self.threads,
            self.isa.name(),
            self.ns,
            self.gmacs(),
            self.gbps(),
            self.weight_bytes
        );
        if let Some(b) = self.baseline_ns {
            let _ = write!(s, ",\"baseline_ns\":{b:.0}");
        }
        if let Some((t, ns, repack)) = &self.llamacpp {
            let _ = write!(s, ",\"llamacpp_type\":\"{t}\",\"llamacpp_ns\":{ns:.0},\"llamacpp_repack\":{repack}");
        }
        if let Some(r) = self.rayon_ns {
            let _ = write!(s, ",\"rayon_ns\":{r:.0}");
        }
        if let Some(d) = self.dram_gbps {
            let _ = write!(s, ",\"dram_gbps\":{d:.2},\"dram_fraction\":{:.3}", self.gbps() / d);
        }
        s.push('}');
        s
    }
}

fn quantize(w: &[f32], rows: usize, cols: usize, bits: Bits, group: usize, isa: Isa) -> PackedMatrix<lutra_core::AlignedBytes> {
    let m = match bits {
        // 1 bit: the symmetric ±s/2 grid (as llama.cpp Q1_0); more bits: per-group min (as Q2_K..Q4_K)
        Bits::Int(1) => PackedMatrix::quantize(w, rows, cols, 1, group, Offset::Symmetric),
        Bits::Int(b) => PackedMatrix::quantize(w, rows, cols, b, group, Offset::Min),
        Bits::Ternary => PackedMatrix::ternarize(w, rows, cols, group),
    }
    .expect("bench shapes are valid");
    // in the order the chosen kernel reads
    if m.layout().interleave() == isa.interleave() {
        m
    } else {
        PackedMatrix::repack(&m, isa.interleave()).expect("repack")
    }
}

/// Run the GEMV benchmark, printing rows as they finish.
pub fn gemv(opts: &GemvOptions, mut emit: impl FnMut(&GemvRow)) -> Result<Vec<GemvRow>, String> {
    let mut rows_out = Vec::new();
    for &(rows, cols) in &opts.shapes {
        if !cols.is_multiple_of(opts.group) {
            return Err(format!("shape {rows}x{cols}: K={cols} is not a multiple of the group size {}", opts.group));
        }
        let w = normals(rows * cols, 1, 0.02);
        let x = normals(cols, 2, 1.0);
        for &bits in &opts.bits {
            let m = quantize(&w, rows, cols, bits, opts.group, opts.isa);
            let base = if opts.baseline { BaselineMatrix::from_packed(&m).ok() } else { None };
            for &regime in &opts.regimes {
                let copies = regime.copies(m.layout().total_bytes());
                let ms: Vec<PackedMatrix<Weights>> = (0..copies)
                    .map(|_| {
                        let bytes = if opts.huge_pages {
                            Weights::Huge(lutra::hugepage::HugeBytes::copy_of(m.as_bytes()).map_err(|e| e.to_string())?)
                        } else {
                            let mut heap = lutra_core::AlignedBytes::zeroed(m.as_bytes().len());
                            heap.as_mut().copy_from_slice(m.as_bytes());
                            Weights::Heap(heap)
                        };
                        PackedMatrix::from_bytes(*m.layout(), bytes).map_err(|e| e.to_string())
                    })
                    .collect::<Result<_, String>>()?;
                let bases: Vec<_> = base.iter().flat_map(|b| (0..copies).map(move |_| b.clone())).collect();
                for &threads in &opts.threads {
                    let row = gemv_one(opts, &ms, &bases, &x, bits, regime, threads)?;
                    emit(&row);
                    rows_out.push(row);
                }
            }
        }
    }
    Ok(rows_out)
}

/// Where the bench keeps its weight copies.
pub enum Weights {
    Heap(lutra_core::AlignedBytes),
    Huge(lutra::hugepage::HugeBytes),
}

impl AsRef<[u8]> for Weights {
    fn as_ref(&self) -> &[u8] {
        match self {
            Weights::Heap(v) => v.as_ref(),
            Weights::Huge(h) => h.as_ref(),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn gemv_one(
    opts: &GemvOptions,
    ms: &[PackedMatrix<Weights>],
    bases: &[BaselineMatrix],
    x: &[f32],
    bits: Bits,
    regime: Regime,
    threads: usize,
) -> Result<GemvRow, String> {
    let l = *ms[0].layout();
    let pool = Pool::new(threads);
    let mut tables = OwnedTables::new(l.cols(), l.group()).map_err(|e| e.to_string())?;
    let mut y = vec![0.0f32; l.rows()];
    let isa = opts.isa;
    let mut next = 0usize;
    let mut lut = || {
        let m = &ms[next % ms.len()];
        next += 1;
        let t = tables.build(black_box(x)).expect("tables");
        pool.split().isa(isa).gemv(m, t, &mut y).expect("gemv");
        black_box(&y);
    };
    // the baseline, split over the same pool
    let mut qa = QuantizedActivations::new(l.cols(), l.group());
    let mut yb = vec![0.0f32; l.rows()];
    let mut next_b = 0usize;
    let mut baseline = || {
        let b = &bases[next_b % bases.len()];
        next_b += 1;
        qa.quantize(black_box(x));
        let qa = &qa;
        let all = pool.split().for_each_chunk(&mut yb, 64, |rows, y| {
            crate::baseline::gemv_rows(b, qa, rows, y);
            Ok(())
        });
        all.expect("baseline");
        black_box(&yb);
    };
    let rayon_pool =
        if opts.rayon { Some(rayon::ThreadPoolBuilder::new().num_threads(threads).build().map_err(|e| e.to_string())?) } else { None };
    let mut tables_r = OwnedTables::new(l.cols(), l.group()).map_err(|e| e.to_string())?;
    let mut yr = vec![0.0f32; l.rows()];
    let mut next_r = 0usize;
    let mut with_rayon = || {
        let m = &ms[next_r % ms.len()];
        next_r += 1;
        let t = tables_r.build(black_box(x)).expect("tables");
        rayon_pool.as_ref().expect("rayon pool").install(|| gemv_rayon(isa, m, t, &mut yr).expect("gemv"));
        black_box(&yr);
    };
    #[cfg(feature = "llamacpp")]
    let mut ggml = if opts.llamacpp { best_llamacpp(bits, l.rows(), l.cols(), regime, threads)? } else { None };
    #[cfg(not(feature = "llamacpp"))]
    if opts.llamacpp {
        return Err("this build has no llama.cpp: rebuild with `--features llamacpp`".into());
    }

    // cold: the DRAM read bandwidth of these threads, sampled in the same rounds, from
    // memory allocated like the weights
    let dram = DramReader::new(if regime == Regime::Cold { COLD_BYTES } else { 0 }, opts.huge_pages)?;
    let mut read_dram = || dram.read(&pool);
    let sampler = Timer { samples: opts.samples };
    let mut engines: Vec<Contender<'_, '_>> = vec![Contender { run: &mut lut, settle: None }];
    if regime == Regime::Cold {
        engines.push(Contender { run: &mut read_dram, settle: None });
    }
    if !bases.is_empty() {
        engines.push(Contender { run: &mut baseline, settle: None });
    }
    if opts.rayon {
        engines.push(Contender { run: &mut with_rayon, settle: None });
    }
    #[cfg(feature = "llamacpp")]
    let ggml_cell = ggml.as_mut().map(|(_, g, _)| std::cell::RefCell::new(g));
    #[cfg(feature = "llamacpp")]
    let mut ggml_run = ggml_cell.as_ref().map(|g| move || g.borrow_mut().run().expect("ggml run"));
    #[cfg(feature = "llamacpp")]
    let mut ggml_pause = ggml_cell.as_ref().map(|g| move || g.borrow_mut().pause());
    #[cfg(feature = "llamacpp")]
    if let (Some(run), Some(pause)) = (ggml_run.as_mut(), ggml_pause.as_mut()) {
        engines.push(Contender { run, settle: Some(pause) });
    }
    let t = sampler.medians_settled(&mut engines);
    drop(engines);
    let mut i = 1;
    let dram_gbps = (regime == Regime::Cold).then(|| {
        i += 1;
        COLD_BYTES as f64 / t[i - 1]
    });
    let baseline_ns = (!bases.is_empty()).then(|| {
        i += 1;
        t[i - 1]
    });
    let rayon_ns = opts.rayon.then(|| {
        i += 1;
        t[i - 1]
    });
    #[allow(unused_mut)]
    let mut llamacpp = None;
    #[cfg(feature = "llamacpp")]
    if let Some((name, g, copies)) = &ggml {
        // ggml runs all copies in one graph: per-GEMV time
        llamacpp = Some((name.clone(), t[i] / *copies as f64, g.repacked()));
    }
    Ok(GemvRow {
        shape: (l.rows(), l.cols()),
        regime,
        bits,
        threads,
        isa,
        ns: t[0],
        weight_bytes: l.total_bytes(),
        baseline_ns,
        llamacpp,
        rayon_ns,
        dram_gbps,
    })
}

/// Bits per weight of llama.cpp types (block bytes · 8 / block elements).
#[cfg(feature = "llamacpp")]
fn ggml_bits_per_weight(ty: &str) -> f64 {
    match ty {
        "Q8_0" => 8.5,
        "Q4_K" | "Q4_0" => 4.5,
        "Q3_K" => 3.4375,
        "Q2_K" => 2.625,
        "TQ2_0" => 2.0625,
        "Q1_0" => 1.125,
        _ => 16.0,
    }
}

/// llama.cpp's type of these bits, with `copies` matrices for the regime; when there
/// are candidates (4-bit: Q4_K, Q4_0) the faster one, timed briefly.
#[cfg(feature = "llamacpp")]
fn best_llamacpp(
    bits: Bits,
    rows: usize,
    cols: usize,
    regime: Regime,
    threads: usize,
) -> Result<Option<(String, crate::llamacpp::ggml::GgmlGemv, usize)>, String> {
    let mut best: Option<(f64, String, crate::llamacpp::ggml::GgmlGemv, usize)> = None;
    for &ty in bits.llamacpp_types() {
        let bytes = (rows * cols) as f64 * ggml_bits_per_weight(ty) / 8.0;
        let copies = regime.copies(bytes as usize);
        let mut g = match crate::llamacpp::ggml::GgmlGemv::new(ty, rows, cols, copies, threads, true) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("llama.cpp {ty}: {e}");
                continue;
            }
        };
        let t =
            if bits.llamacpp_types().len() > 1 { Timer { samples: 5 }.medians(&mut [&mut || g.run().expect("ggml run")])[0] } else { 0.0 };
        g.pause();
        if best.as_ref().is_none_or(|b| t < b.0) {
            best = Some((t, ty.to_string(), g, copies));
        }
    }
    Ok(best.map(|(_, name, g, copies)| (name, g, copies)))
}

/// lutra's GEMV split with rayon's work stealing instead of lutra's pool (same chunks
/// of tiles), for `lutra bench gemv --pool rayon`.
pub fn gemv_rayon<B: AsRef<[u8]> + Sync>(isa: Isa, m: &PackedMatrix<B>, tables: Tables<'_>, y: &mut [f32]) -> Result<(), Error> {
    use rayon::prelude::*;
    let l = *m.layout();
    if y.len() != l.rows() {
        return Err(Error::BufferSize { what: "output rows", expected: l.rows(), got: y.len() });
    }
    let chunk = (l.tiles() / (8 * rayon::current_num_threads())).clamp(1, 16);
    y.par_chunks_mut(chunk * TILE_ROWS).enumerate().try_for_each(|(i, y)| {
        let start = i * chunk;
        let end = (start + chunk).min(l.tiles());
        gemv_tiles(isa, m, tables, start..end, y)
    })
}

pub fn print_gemv_header() {
    println!(
        "{:>12} {:>5} {:>4} {:>3} {:>10} {:>10} {:>8} {:>8} {:>11} {:>7} {:>7} {:>11} {:>7} {:>9}",
        "shape", "regime", "bits", "thr", "isa", "ns", "GMAC/s", "GB/s", "baseline_ns", "x_base", "type", "llama_ns", "x_llama", "%DRAM"
    );
}

pub fn print_gemv_row(r: &GemvRow) {
    let (base, xb) = match r.baseline_ns {
        Some(b) => (format!("{b:.0}"), format!("{:.2}", b / r.ns)),
        None => ("-".into(), "-".into()),
    };
    let (ty, ln, xl) = match &r.llamacpp {
        Some((t, ns, _)) => (t.clone(), format!("{ns:.0}"), format!("{:.2}", ns / r.ns)),
        None => ("-".into(), "-".into(), "-".into()),
    };
    let dram = r.dram_gbps.map_or("-".into(), |d| format!("{:.0}% of {d:.1}", 100.0 * r.gbps() / d));
    println!(
        "{:>12} {:>5} {:>4} {:>3} {:>10} {:>10.0} {:>8.1} {:>8.1} {:>11} {:>7} {:>7} {:>11} {:>7} {:>9}",
        format!("{}x{}", r.shape.0, r.shape.1),
        r.regime.name(),
        r.bits.label(),
        r.threads,
        r.isa.name(),
        r.ns,
        r.gmacs(),
        r.gbps(),
        base,
        xb,
        ty,
        ln,
        xl,
        dram
    );
    if let Some(rn) = r.rayon_ns {
        println!("{:>12} rayon: {rn:.0} ns ({:.2}x the lutra pool)", "", rn / r.ns);
    }
}

/// A large buffer whose full read measures DRAM bandwidth.
pub struct DramReader {
    bytes: Weights,
}

impl DramReader {
    pub fn new(len: usize, huge_pages: bool) -> Result<DramReader, String> {
        let pattern: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let bytes = if huge_pages {
            Weights::Huge(lutra::hugepage::HugeBytes::copy_of(&pattern).map_err(|e| e.to_string())?)
        } else {
            let mut heap = lutra_core::AlignedBytes::zeroed(len);
            heap.as_mut().copy_from_slice(&pattern);
            Weights::Heap(heap)
        };
        Ok(DramReader { bytes })
    }

    /// Read every byte once, split across the pool's threads.
    pub fn read(&self, pool: &Pool) {
        let b = self.bytes.as_ref();
        let per = b.len().div_ceil(pool.threads()).next_multiple_of(256);
        let total = std::sync::atomic::AtomicU64::new(0);
        pool.run(|i| {
            let part = &b[(i * per).min(b.len())..((i + 1) * per).min(b.len())];
            total.fetch_add(read_sum(part), std::sync::atomic::Ordering::Relaxed);
        });
        black_box(total.into_inner());
    }
}

/// DRAM read bandwidth in GB/s: a sum over `mib` MiB, split across threads.
pub fn membw(threads: usize, mib: usize, samples: usize, huge_pages: bool) -> Result<f64, String> {
    let reader = DramReader::new(mib << 20, huge_pages)?;
    let pool = Pool::new(threads);
    let mut run = || reader.read(&pool);
    run();
    let t = Timer { samples }.medians(&mut [&mut run])[0];
    Ok((mib << 20) as f64 / t)
}

/// The widest loads this CPU has: with 16-byte loads too few cache lines are in
/// flight to saturate DRAM (measured: 18 vs 24 GB/s on one core).
fn read_sum(v: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512 F detected at run time.
        return unsafe { read_sum_avx512(v) };
    }
    read_sum_portable(v)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn read_sum_avx512(v: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 4];
    let blocks = v.chunks_exact(256);
    let rest = read_sum_portable(blocks.remainder());
    for b in blocks {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `b` holds 256 bytes = four 64-byte vectors.
            *a = _mm512_add_epi64(*a, unsafe { _mm512_loadu_si512(b.as_ptr().add(64 * k).cast()) });
        }
    }
    let sum = _mm512_add_epi64(_mm512_add_epi64(acc[0], acc[1]), _mm512_add_epi64(acc[2], acc[3]));
    (_mm512_reduce_add_epi64(sum) as u64).wrapping_add(rest)
}

/// Eight independent accumulators so loads, not adds, set the pace.
fn read_sum_portable(v: &[u8]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = v.chunks_exact(64);
    let rest: u64 = chunks.remainder().iter().fold(0, |a, &b| a.wrapping_add(b as u64));
    for c in chunks {
        for (a, w) in acc.iter_mut().zip(c.chunks_exact(8)) {
            *a = a.wrapping_add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
    }
    acc.iter().fold(rest, |a, &b| a.wrapping_add(b))
}

/// llama.cpp `quantize_row_q4_0_ref`, transcribed: blocks of 32, d = max/−8.
pub fn quantize_q4_0(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / 32 * 18);
    for b in x.chunks_exact(32) {
        let max = b.iter().copied().fold(0.0f32, |m, v| if v.abs() > m.abs() { v } else { m });
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&lutra_core::f16::f32_to_f16_bits(d).to_le_bytes());
        let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
        for j in 0..16 {
            out.push(q(b[j]) | (q(b[j + 16]) << 4));
        }
    }
    out
}

/// llama.cpp `quantize_row_q8_0_ref`, transcribed: blocks of 32, d = amax/127.
pub fn quantize_q8_0(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / 32 * 34);
    for b in x.chunks_exact(32) {
        let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&lutra_core::f16::f32_to_f16_bits(d).to_le_bytes());
        out.extend(b.iter().map(|&v| (v * id).round() as i8 as u8));
    }
    out
}

/// One accuracy row: NMSE of lutra's GEMV against f64 products with the dequantized
/// weights (table error alone) and with the original f32 weights (total error).
#[derive(Clone, Debug)]
pub struct AccuracyRow {
    pub format: String,
    pub bits_per_weight: f64,
    pub nmse_vs_dequantized: f64,
    pub nmse_vs_f32: f64,
    pub baseline_nmse_vs_dequantized: Option<f64>,
}

fn nmse(got: &[f32], want: &[f64]) -> f64 {
    let err: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum();
    err / want.iter().map(|w| w * w).sum::<f64>()
}

fn matvec_f64(w: &[f32], x: &[f32]) -> Vec<f64> {
    w.chunks_exact(x.len()).map(|row| row.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum()).collect()
}

/// `lutra bench accuracy`: every format on one random matrix (rows × cols) and vector.
pub fn accuracy(rows: usize, cols: usize, group: usize) -> Result<Vec<AccuracyRow>, String> {
    let w = normals(rows * cols, 3, 0.02);
    let mut x = normals(cols, 4, 1.0);
    // a few outlier activations, as real models have
    for i in (0..cols).step_by(509) {
        x[i] *= 12.0;
    }
    let exact = matvec_f64(&w, &x);
    let formats: Vec<(String, PackedMatrix<lutra_core::AlignedBytes>)> = vec![
        ("W1 symmetric".into(), PackedMatrix::quantize(&w, rows, cols, 1, group, Offset::Symmetric).map_err(|e| e.to_string())?),
        ("W2 min".into(), PackedMatrix::quantize(&w, rows, cols, 2, group, Offset::Min).map_err(|e| e.to_string())?),
        ("W3 min".into(), PackedMatrix::quantize(&w, rows, cols, 3, group, Offset::Min).map_err(|e| e.to_string())?),
        ("W4 min".into(), PackedMatrix::quantize(&w, rows, cols, 4, group, Offset::Min).map_err(|e| e.to_string())?),
        ("ternary".into(), PackedMatrix::ternarize(&w, rows, cols, group).map_err(|e| e.to_string())?),
        ("Q4_0 import".into(), PackedMatrix::from_q4_0(&quantize_q4_0(&w), rows, cols).map_err(|e| e.to_string())?),
        ("Q8_0 import".into(), PackedMatrix::from_q8_0(&quantize_q8_0(&w), rows, cols).map_err(|e| e.to_string())?),
    ];
    let mut out = Vec::new();
    for (name, m) in formats {
        let l = *m.layout();
        let mut deq = vec![0.0f32; rows * cols];
        for (r, row) in deq.chunks_exact_mut(cols).enumerate() {
            m.dequantize_row(r, row).map_err(|e| e.to_string())?;
        }
        let want = matvec_f64(&deq, &x);
        let mut t = OwnedTables::new(cols, l.group()).map_err(|e| e.to_string())?;
        let mut y = vec![0.0; rows];
        lutra_core::gemv(&m, t.build(&x).map_err(|e| e.to_string())?, &mut y).map_err(|e| e.to_string())?;
        let baseline = BaselineMatrix::from_packed(&m).ok().map(|b| {
            let mut qa = QuantizedActivations::new(cols, l.group());
            qa.quantize(&x);
            let mut yb = vec![0.0; rows];
            crate::baseline::gemv_rows(&b, &qa, 0..rows, &mut yb);
            nmse(&yb, &want)
        });
        out.push(AccuracyRow {
            format: name,
            bits_per_weight: l.bits_per_weight(),
            nmse_vs_dequantized: nmse(&y, &want),
            nmse_vs_f32: nmse(&y, &exact),
            baseline_nmse_vs_dequantized: baseline,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rayon split gives the single-thread GEMV bit for bit (its timings compare the
    /// same work), and refuses an output of the wrong size.
    #[test]
    fn the_rayon_split_equals_the_single_thread_gemv() {
        let (rows, cols) = (333, 512);
        let m = PackedMatrix::quantize(&normals(rows * cols, 9, 0.05), rows, cols, 3, 64, Offset::Min).unwrap();
        let mut t = OwnedTables::new(cols, 64).unwrap();
        let tables = t.build(&normals(cols, 10, 1.0)).unwrap();
        let mut want = vec![0.0; rows];
        gemv_tiles(Isa::best(), &m, tables, 0..m.layout().tiles(), &mut want).unwrap();
        let mut y = vec![f32::NAN; rows];
        rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap().install(|| gemv_rayon(Isa::best(), &m, tables, &mut y)).unwrap();
        assert_eq!(y, want);
        assert!(matches!(gemv_rayon(Isa::best(), &m, tables, &mut [0.0; 3]), Err(Error::BufferSize { .. })));
    }
}
