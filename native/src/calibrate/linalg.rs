//! The little dense linear algebra calibration needs: eigen-decomposition of symmetric
//! matrices (head_dim × head_dim second moments), by cyclic Jacobi rotations in f64.

/// Eigenvalues and eigenvectors of the symmetric `n × n` row-major matrix `a`:
/// `(values, vectors)` with `vectors[i * n + j]` the i-th component of eigenvector `j`,
/// so `a = V · diag(values) · Vᵀ`. Values are not sorted.
pub fn symmetric_eigen(a: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    assert_eq!(a.len(), n * n, "symmetric_eigen: {n}×{n} matrix expected");
    let mut a = a.to_vec();
    let mut v = vec![0.0; n * n];
    (0..n).for_each(|i| v[i * n + i] = 1.0);
    let total: f64 = a.iter().map(|x| x * x).sum();
    for _sweep in 0..100 {
        let off: f64 =
            (0..n).flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j))).map(|(i, j)| a[i * n + j] * a[i * n + j]).sum();
        if off <= total * 1e-30 || off == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                // the rotation that zeroes a[p][q] (Golub & Van Loan, symmetric Schur)
                let theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (akp, akq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p * n + k], a[q * n + k]);
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for k in 0..n {
                    let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    ((0..n).map(|i| a[i * n + i]).collect(), v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eigen_decomposition_reconstructs_the_matrix() {
        for n in [1, 2, 5, 32] {
            // a random symmetric matrix with a repeated eigenvalue's worth of structure
            let mut seed = 0x1234_5678_u64 + n as u64;
            let mut next = || {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5
            };
            let b: Vec<f64> = (0..n * n).map(|_| next()).collect();
            let mut a = vec![0.0; n * n];
            for i in 0..n {
                for j in 0..n {
                    a[i * n + j] = (0..n).map(|k| b[i * n + k] * b[j * n + k]).sum::<f64>() + if i == j { 1.0 } else { 0.0 };
                }
            }
            let (values, v) = symmetric_eigen(&a, n);
            for i in 0..n {
                for j in 0..n {
                    let back: f64 = (0..n).map(|k| v[i * n + k] * values[k] * v[j * n + k]).sum();
                    assert!((back - a[i * n + j]).abs() < 1e-9, "n {n}: A[{i}][{j}] {} rebuilt as {back}", a[i * n + j]);
                    let dot: f64 = (0..n).map(|k| v[k * n + i] * v[k * n + j]).sum();
                    assert!((dot - f64::from(u8::from(i == j))).abs() < 1e-9, "n {n}: eigenvectors {i}, {j} not orthonormal");
                }
            }
            assert!(values.iter().all(|&x| x >= 1.0 - 1e-9), "n {n}: BBᵀ + I has eigenvalues ≥ 1: {values:?}");
        }
    }
}
