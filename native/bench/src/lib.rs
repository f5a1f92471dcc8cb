//! Benchmarks behind `lutra bench`: commands that print tables (and JSON), never timed
//! tests. Every comparison runs its contenders interleaved in one process.

pub mod attention;
pub mod baseline;
pub mod gemv;
#[cfg(feature = "llamacpp")]
pub mod llamacpp;
pub mod model;
pub mod profile;

use std::time::{Duration, Instant};

/// Deterministic pseudo-random normals (sum of 4 uniforms), dependency-free.
pub fn normals(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            let mut u = 0.0f32;
            for _ in 0..4 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                u += (s >> 40) as f32 / (1u64 << 24) as f32;
            }
            (u - 2.0) * 1.732_050_8 * scale
        })
        .collect()
}

/// One timed contender and what to do, untimed, after each of its sample batches.
pub struct Contender<'a, 'b> {
    pub run: &'a mut (dyn FnMut() + 'b),
    pub settle: Option<&'a mut (dyn FnMut() + 'b)>,
}

/// Median of `samples` timings of `f`, after a warm-up; each sample repeats `f` enough
/// times to last ≥ 1 ms, so timer resolution never matters.
pub struct Timer {
    pub samples: usize,
}

impl Timer {
    fn inner_reps(f: &mut dyn FnMut()) -> usize {
        let start = Instant::now();
        let mut n = 0;
        while start.elapsed() < Duration::from_millis(2) || n < 2 {
            f();
            n += 1;
        }
        let per = start.elapsed().as_secs_f64() / n as f64;
        ((1e-3 / per).ceil() as usize).max(1)
    }

    /// Interleaved: round k samples every engine once, so noise hits all alike.
    pub fn medians(&self, engines: &mut [&mut dyn FnMut()]) -> Vec<f64> {
        let mut engines: Vec<Contender<'_, '_>> = engines.iter_mut().map(|f| Contender { run: &mut **f, settle: None }).collect();
        self.medians_settled(&mut engines)
    }

    /// As `medians`, running each engine's `settle` (untimed) after its samples: ggml's
    /// workers spin after a run and would otherwise steal the next engine's core.
    pub fn medians_settled(&self, engines: &mut [Contender<'_, '_>]) -> Vec<f64> {
        let reps: Vec<usize> = engines
            .iter_mut()
            .map(|e| {
                let n = Self::inner_reps(e.run);
                if let Some(settle) = e.settle.as_mut() {
                    settle();
                }
                n
            })
            .collect();
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); engines.len()];
        for _ in 0..self.samples.max(5) {
            for (i, e) in engines.iter_mut().enumerate() {
                // an untimed batch first: the other engines' data has just passed
                // through the caches, and "hot" means this engine's weights are there
                for _ in 0..reps[i] {
                    (e.run)();
                }
                let start = Instant::now();
                for _ in 0..reps[i] {
                    (e.run)();
                }
                times[i].push(start.elapsed().as_secs_f64() * 1e9 / reps[i] as f64);
                if let Some(settle) = e.settle.as_mut() {
                    settle();
                }
            }
        }
        times.into_iter().map(median).collect()
    }
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}
