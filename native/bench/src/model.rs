//! `lutra bench model`: prompt processing and generation tokens/s of a whole model on
//! the engine, alone or interleaved with llama.cpp on the same GGUF file.

use std::path::Path;
use std::time::{Duration, Instant};

use lutra::engine::{Attention, Model, Session};
use lutra::progress::Progress;
use lutra::threads::{Pool, Split};
use lutra::ValueFormat;
use lutra_core::model::Gemv;

use super::median;
use super::profile::{OpTotals, PhaseProfile, ProfileGemv};

/// What `lutra bench model` times.
#[derive(Clone)]
pub struct ModelBench {
    pub pp: usize,
    pub tg: usize,
    pub runs: usize,
    /// Positions filled before timing.
    pub depth: usize,
    pub attention: Attention,
    /// How the value cache stores values.
    pub values: ValueFormat,
}

/// Prompt processing (`pp` tokens, batched, logits for the last only) and generation
/// (`tg` greedy tokens), tokens/s, medians of `runs`, both starting at position `depth`
/// (like `llama-bench -d`): the first `depth` positions are filled once, then every round
/// rewinds to them without refilling what the round wrapped in the rings (as
/// `llama-bench -d` does: the cost is the same, the logits are not read).
pub fn bench_model(model: &Model, threads: usize, spec: &ModelBench) -> Result<(f64, f64), String> {
    // pp and tg are capped at the room the context leaves after `depth`
    let max = model.info().hparams.context_length;
    let room = max.saturating_sub(spec.depth + 1);
    if room == 0 {
        return Err(format!("--depth {} leaves no room in the model's context of {max}", spec.depth));
    }
    let (pp, tg) = (spec.pp.min(room), spec.tg.min(room));
    let pool = Pool::new(threads);
    let gemv = pool.split();
    let mut session = Session::with_values(model, spec.depth + pp.max(tg) + 1, &spec.attention, spec.values).map_err(|e| e.to_string())?;
    fill_depth(model, &gemv, &mut session, spec.depth)?;
    let mut pp_tps = Vec::new();
    let mut tg_tps = Vec::new();
    for run in 0..spec.runs.max(5) + 1 {
        let pp_s = lutra_pp(model, &gemv, &mut session, spec.depth, pp)?;
        let (tg_s, _) = lutra_tg(model, &gemv, &mut session, spec.depth, tg)?;
        if run > 0 {
            // the first run warms caches and the pool
            pp_tps.push(pp as f64 / pp_s);
            tg_tps.push(tg as f64 / tg_s);
        }
    }
    Ok((median(pp_tps), median(tg_tps)))
}

/// `--profile`: one prefill of `pp` tokens and `tg` decode steps at `depth` (after one
/// untimed round of each), every product and attention call timed.
pub fn profile_model(model: &Model, threads: usize, spec: &ModelBench) -> Result<[PhaseProfile; 2], String> {
    let room = model.info().hparams.context_length.saturating_sub(spec.depth + 1);
    let (pp, tg) = (spec.pp.min(room), spec.tg.min(room));
    if pp == 0 || tg == 0 {
        return Err(format!("--profile needs room for --pp and --tg after --depth {} in the model's context", spec.depth));
    }
    let pool = Pool::new(threads);
    let gemv = pool.split();
    let mut session = Session::with_values(model, spec.depth + pp.max(tg) + 1, &spec.attention, spec.values).map_err(|e| e.to_string())?;
    fill_depth(model, &gemv, &mut session, spec.depth)?;
    lutra_pp(model, &gemv, &mut session, spec.depth, pp)?;
    lutra_tg(model, &gemv, &mut session, spec.depth, tg)?;
    let profiled = ProfileGemv::new(&gemv, model.vocab_size());
    let pp_s = lutra_pp(model, &profiled, &mut session, spec.depth, pp)?;
    let prefill = PhaseProfile { phase: "prefill", tokens: pp, wall: Duration::from_secs_f64(pp_s), ops: profiled.take() };
    let (tg_s, sampling) = lutra_tg(model, &profiled, &mut session, spec.depth, tg)?;
    let mut ops = profiled.take();
    ops.insert("sampling (greedy argmax)".into(), OpTotals { time: sampling, calls: tg as u64, bytes: 0 });
    Ok([prefill, PhaseProfile { phase: "decode", tokens: tg, wall: Duration::from_secs_f64(tg_s), ops }])
}

/// The benchmark's token at `pos`: spread over the vocabulary, the same every run.
fn token(model: &Model, pos: usize) -> u32 {
    ((pos * 7919) % model.vocab_size()) as u32
}

/// Feeds `depth` tokens, reporting progress on stderr when it takes long.
fn fill_depth(model: &Model, gemv: &Split<'_, Pool>, session: &mut Session, depth: usize) -> Result<(), String> {
    let mut bar = (depth >= 256).then(|| Progress::new(format!("filling the context to depth {depth}"), depth));
    let tokens: Vec<u32> = (0..depth).map(|pos| token(model, pos)).collect();
    for batch in tokens.chunks(256) {
        session.feed(gemv, batch).map_err(|e| e.to_string())?;
        if let Some(bar) = bar.as_mut() {
            bar.update(session.position(), "tokens");
        }
    }
    if let Some(bar) = bar.as_mut() {
        bar.finish();
    }
    Ok(())
}

/// lutra's prompt processing: `pp` tokens from position `from`, in batches, logits for
/// the last one only, as llama.cpp computes them. Returns seconds.
fn lutra_pp<G: Gemv>(model: &Model, gemv: &G, session: &mut Session, from: usize, pp: usize) -> Result<f64, String> {
    session.rewind_for_timing(from).map_err(|e| e.to_string())?;
    let batch: Vec<u32> = (from..from + pp).map(|pos| token(model, pos)).collect();
    let t = Instant::now();
    if let Some((&last, rest)) = batch.split_last() {
        session.feed(gemv, rest).and_then(|_| session.forward(gemv, last).map(drop)).map_err(|e| e.to_string())?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// lutra's generation: `tg` greedy tokens from BOS at position `from`. Returns seconds,
/// and the part of them spent choosing tokens.
fn lutra_tg<G: Gemv>(model: &Model, gemv: &G, session: &mut Session, from: usize, tg: usize) -> Result<(f64, Duration), String> {
    session.rewind_for_timing(from).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let mut sampling = Duration::ZERO;
    let mut token = model.bos();
    for _ in 0..tg {
        let logits = session.forward(gemv, token).map_err(|e| e.to_string())?;
        let s = Instant::now();
        token = lutra_core::sampler::argmax(logits).ok_or("no finite logit to take the argmax of")? as u32;
        sampling += s.elapsed();
    }
    Ok((t.elapsed().as_secs_f64(), sampling))
}

/// `lutra bench model --llamacpp`: lutra and llama.cpp on the same GGUF file, tokens/s
/// medians over the same interleaved rounds.
#[derive(Clone, Copy, Debug)]
pub struct VsLlamaCpp {
    pub pp_tps: f64,
    pub tg_tps: f64,
    pub llamacpp_pp_tps: f64,
    pub llamacpp_tg_tps: f64,
    /// Prompt and generated tokens actually timed (capped at the context; pp 0 at a depth).
    pub pp: usize,
    pub tg: usize,
    pub depth: usize,
    /// Timed rounds (the warm-up round excluded).
    pub rounds: usize,
}

/// llama.cpp loads `path` once for `threads` threads; then, after one discarded warm-up
/// round, `runs.max(5)` rounds each time lutra's pp and tg and llama.cpp's pp and tg
/// (which engine goes first alternates from round to round; llama.cpp's spinning
/// workers are parked and lutra's idle ones left to park before the other engine is
/// timed). llama.cpp's pp decodes the prompt as one batch, like llama-bench; lutra's
/// feeds it in `PREFILL_BATCH`-token batches.
#[cfg(feature = "llamacpp")]
pub fn bench_model_vs_llamacpp(model: &Model, path: &Path, threads: usize, spec: &ModelBench) -> Result<VsLlamaCpp, String> {
    use crate::llamacpp::model::LlamaCppModel;
    let (pp, tg, runs, depth) = (spec.pp, spec.tg, spec.runs, spec.depth);
    let mut magic = [0u8; 4];
    let is_gguf = std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic)).is_ok()
        && lutra_core::formats::gguf::is_gguf(&magic);
    if !is_gguf || model.info().packed {
        return Err(format!(
            "{}: --llamacpp needs a GGUF model (llama.cpp reads neither llama2.c checkpoints nor packed files)",
            path.display()
        ));
    }
    let context = model.info().hparams.context_length.min(depth + pp.max(tg) + 1);
    let (pp, tg) = (pp.min(context - depth), tg.min(context - depth - 1));
    if tg == 0 || (pp == 0 && depth == 0) {
        return Err(format!("--llamacpp needs --tg (and, without --depth, --pp) of at least 1 (got {pp} and {tg})"));
    }
    // at a depth only generation is timed, after a context filled once
    let pp = if depth > 0 { 0 } else { pp };
    let mut llama = LlamaCppModel::load_with_context(path, threads, depth + pp.max(tg))?;
    let pool = Pool::new(threads);
    let gemv = pool.split();
    let mut session = Session::with_values(model, context, &spec.attention, spec.values).map_err(|e| e.to_string())?;
    if depth > 0 {
        fill_depth(model, &gemv, &mut session, depth)?;
        llama.fill(depth)?;
        llama.pause();
    }
    let rounds = runs.max(5);
    let (mut pp_tps, mut tg_tps, mut l_pp_tps, mut l_tg_tps) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds + 1 {
        let lutra = |session: &mut Session| -> Result<(f64, f64), String> {
            let pp_s = if pp > 0 { lutra_pp(model, &gemv, session, 0, pp)? } else { f64::NAN };
            let r = (pp_s, lutra_tg(model, &gemv, session, depth, tg)?.0);
            // lutra's idle workers spin for at most 200 µs before parking.
            std::thread::sleep(std::time::Duration::from_millis(2));
            Ok(r)
        };
        let llamacpp = |llama: &mut LlamaCppModel| -> Result<(f64, f64), String> {
            let r = if depth > 0 { (f64::NAN, llama.tg_at(depth, tg)?) } else { (llama.pp(pp)?, llama.tg(tg)?) };
            llama.pause();
            Ok(r)
        };
        let ((a, b), (c, d)) = if round % 2 == 0 {
            let l = lutra(&mut session)?;
            (l, llamacpp(&mut llama)?)
        } else {
            let c = llamacpp(&mut llama)?;
            (lutra(&mut session)?, c)
        };
        if round > 0 {
            // round 0 warms caches, pages and both thread pools
            pp_tps.push(pp as f64 / a);
            tg_tps.push(tg as f64 / b);
            l_pp_tps.push(pp as f64 / c);
            l_tg_tps.push(tg as f64 / d);
        }
    }
    Ok(VsLlamaCpp {
        pp_tps: median(pp_tps),
        tg_tps: median(tg_tps),
        llamacpp_pp_tps: median(l_pp_tps),
        llamacpp_tg_tps: median(l_tg_tps),
        pp,
        tg,
        depth,
        rounds,
    })
}

/// Without the `llamacpp` feature there is no llama.cpp to compare with.
#[cfg(not(feature = "llamacpp"))]
pub fn bench_model_vs_llamacpp(_model: &Model, _path: &Path, _threads: usize, _spec: &ModelBench) -> Result<VsLlamaCpp, String> {
    Err("--llamacpp: this lutra was built without llama.cpp; rebuild with `--features llamacpp` \
         (RUSTFLAGS=\"-C target-cpu=native\" cargo build --release -p lutra-cli --features llamacpp)"
        .into())
}
