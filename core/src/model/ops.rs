//! The f32 vector operations every model shares (libm for the transcendental parts).

/// `out = x / rms(x) · weight`, rms over all of `x`, with `eps` inside the root.
pub(crate) fn rmsnorm(out: &mut [f32], x: &[f32], weight: &[f32], eps: f32) {
    let ss = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / libm::sqrtf(ss + eps);
    for ((o, &x), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = x * inv * w;
    }
}

/// `rmsnorm` in place.
pub(crate) fn rmsnorm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    let ss = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / libm::sqrtf(ss + eps);
    for (x, &w) in x.iter_mut().zip(weight) {
        *x = *x * inv * w;
    }
}

/// `x += y`.
pub(crate) fn add(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Rotary-embedding angles for one frequency set: the frequencies computed once, and the
/// cos / sin of one position at a time, shared by every head and layer that rotates with
/// them (a `powf` and a `sincosf` per pair per head per layer cost more than the rotation).
pub struct RopeAngles {
    freq: alloc::vec::Vec<f32>,
    pub(crate) cos: alloc::vec::Vec<f32>,
    pub(crate) sin: alloc::vec::Vec<f32>,
}

impl RopeAngles {
    /// Pair `i` turns by `pos · freq[i]`.
    pub(crate) fn new(freq: alloc::vec::Vec<f32>) -> RopeAngles {
        let n = freq.len();
        RopeAngles { freq, cos: alloc::vec![1.0; n], sin: alloc::vec![0.0; n] }
    }

    pub(crate) fn set_position(&mut self, pos: usize) {
        for ((&f, c), s) in self.freq.iter().zip(&mut self.cos).zip(&mut self.sin) {
            (*s, *c) = libm::sincosf(pos as f32 * f);
        }
    }
}

/// NEOX RoPE: dimension i rotates with i + head_dim/2, by pair i's angle.
pub(crate) fn rope_neox(head: &mut [f32], angles: &RopeAngles) {
    let half = head.len() / 2;
    let (first, second) = head.split_at_mut(half);
    for (((a, b), &cos), &sin) in first.iter_mut().zip(second).zip(&angles.cos).zip(&angles.sin) {
        (*a, *b) = (*a * cos - *b * sin, *a * sin + *b * cos);
    }
}

/// Normal (llama2.c, ggml's default) RoPE: adjacent pairs (2j, 2j + 1) rotate by pair j's angle.
pub(crate) fn rope_adjacent(head: &mut [f32], angles: &RopeAngles) {
    for ((pair, &cos), &sin) in head.chunks_exact_mut(2).zip(&angles.cos).zip(&angles.sin) {
        let (a, b) = (pair[0], pair[1]);
        pair[0] = a * cos - b * sin;
        pair[1] = a * sin + b * cos;
    }
}
