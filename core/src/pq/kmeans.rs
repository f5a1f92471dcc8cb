//! Deterministic k-means (k-means++ seeding, Lloyd iterations) for training codebooks.

use alloc::vec;
use alloc::vec::Vec;

use super::codebook::nearest;
use crate::rng::SplitMix64;

/// `k` centroids of `dim` values for the `points` (rows of `dim`), written to `centroids`
/// (`k × dim`). Same points, `k`, `iterations` and `seed` → same centroids, on every
/// platform (sequential f32 sums). Fewer distinct points than `k` leaves duplicates.
/// Returns the final mean squared distance of the points to their centroids.
pub fn kmeans(points: &[f32], dim: usize, k: usize, iterations: usize, seed: u64, centroids: &mut [f32]) -> f32 {
    let n = points.len() / dim;
    assert!(n > 0 && dim > 0 && centroids.len() == k * dim, "kmeans: no points or a centroid buffer of the wrong size");
    let point = |i: usize| &points[i * dim..(i + 1) * dim];
    let dist2 = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>();
    let mut rng = SplitMix64::new(seed);

    // k-means++: each next centroid drawn with probability ∝ squared distance to the nearest chosen one
    centroids[..dim].copy_from_slice(point(rng.below(n as u64) as usize));
    let mut best: Vec<f32> = (0..n).map(|i| dist2(point(i), &centroids[..dim])).collect();
    for c in 1..k {
        let total: f64 = best.iter().map(|&d| f64::from(d)).sum();
        let pick = if total > 0.0 {
            let mut target = rng.unit() * total;
            let mut pick = n - 1;
            for (i, &d) in best.iter().enumerate() {
                target -= f64::from(d);
                if target <= 0.0 {
                    pick = i;
                    break;
                }
            }
            pick
        } else {
            rng.below(n as u64) as usize
        };
        centroids[c * dim..(c + 1) * dim].copy_from_slice(point(pick));
        for (i, b) in best.iter_mut().enumerate() {
            *b = b.min(dist2(point(i), &centroids[c * dim..(c + 1) * dim]));
        }
    }

    // Lloyd
    let mut assign = vec![usize::MAX; n];
    let mut sums = vec![0.0f64; k * dim];
    let mut counts = vec![0usize; k];
    for _ in 0..iterations {
        let mut changed = false;
        for (i, a) in assign.iter_mut().enumerate() {
            let c = nearest(centroids, point(i));
            changed |= *a != c;
            *a = c;
        }
        if !changed {
            break;
        }
        sums.fill(0.0);
        counts.fill(0);
        for (i, &c) in assign.iter().enumerate() {
            counts[c] += 1;
            for (s, &x) in sums[c * dim..(c + 1) * dim].iter_mut().zip(point(i)) {
                *s += f64::from(x);
            }
        }
        for c in 0..k {
            if counts[c] > 0 {
                for (m, &s) in centroids[c * dim..(c + 1) * dim].iter_mut().zip(&sums[c * dim..(c + 1) * dim]) {
                    *m = (s / counts[c] as f64) as f32;
                }
            } else {
                // an empty cluster takes the point worst served by its centroid
                let far = (0..n)
                    .max_by(|&a, &b| {
                        let da = dist2(point(a), &centroids[assign[a] * dim..(assign[a] + 1) * dim]);
                        let db = dist2(point(b), &centroids[assign[b] * dim..(assign[b] + 1) * dim]);
                        da.total_cmp(&db)
                    })
                    .unwrap_or(0);
                centroids[c * dim..(c + 1) * dim].copy_from_slice(point(far));
                assign[far] = c;
            }
        }
    }
    let err: f64 = (0..n).map(|i| f64::from(dist2(point(i), &centroids[nearest(centroids, point(i)) * dim..][..dim]))).sum();
    (err / n as f64) as f32
}
