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
