//! Gamma-distributed samples as filebench draws them (`gamma_dist.c`):
//! Knuth's algorithm A for shape > 1 (file sizes and directory widths and
//! depths all use shape 1.5), Ahrens-Dieter GS for shape <= 1.

use std::f64::consts::{E, PI};

/// A source of uniform doubles in [0, 1).
pub trait Uniform {
    fn uniform(&mut self) -> f64;
}

impl Uniform for fastrand::Rng {
    fn uniform(&mut self) -> f64 {
        self.f64()
    }
}

/// One sample of Gamma(shape, scale); mean `shape * scale`.
///
/// Shape and scale must be positive and finite (callers validate
/// configuration before building a fileset).
pub fn sample<R: Uniform>(rng: &mut R, shape: f64, scale: f64) -> f64 {
    debug_assert!(shape > 0.0 && scale > 0.0);
    if shape > 1.0 {
        knuth_a(rng, shape) * scale
    } else {
        ahrens_dieter_gs(rng, shape) * scale
    }
}

/// Knuth, TAOCP vol. 2, 3.4.1 algorithm A, exactly as filebench codes it:
/// `Y = tan(pi U)`, `X = sqrt(2a-1) Y + a - 1`, reject `X <= 0`, reject
/// when `V > (1 + Y^2) exp((a-1) ln(X/(a-1)) - sqrt(2a-1) Y)`.
fn knuth_a<R: Uniform>(rng: &mut R, a: f64) -> f64 {
    let s = (2.0 * a - 1.0).sqrt();
    let am1 = a - 1.0;
    loop {
        let (x, y) = loop {
            let y = (PI * rng.uniform()).tan();
            let x = s * y + am1;
            if x > 0.0 {
                break (x, y);
            }
        };
        let v = rng.uniform();
        if v <= (1.0 + y * y) * (am1 * (x / am1).ln() - s * y).exp() {
            return x;
        }
    }
}

/// Ahrens and Dieter's GS algorithm for 0 < a <= 1.
fn ahrens_dieter_gs<R: Uniform>(rng: &mut R, a: f64) -> f64 {
    let b = (E + a) / E;
    loop {
        let p = b * rng.uniform();
        let v = rng.uniform();
        if p <= 1.0 {
            let x = p.powf(1.0 / a);
            if v <= (-x).exp() {
                return x;
            }
        } else {
            let x = -((b - p) / a).ln();
            if v <= x.powf(a - 1.0) {
                return x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(shape: f64, scale: f64, n: usize) -> (f64, f64) {
        let mut rng = fastrand::Rng::with_seed(7);
        let xs: Vec<f64> = (0..n).map(|_| sample(&mut rng, shape, scale)).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        (mean, var)
    }

    #[test]
    fn shape_one_and_a_half_has_gamma_mean_and_variance() {
        // Filebench's file sizes: shape 1.5, mean 128 KiB => scale mean/1.5.
        let mean_want = 131_072.0;
        let scale = mean_want / 1.5;
        let (mean, var) = moments(1.5, scale, 200_000);
        assert!((mean / mean_want - 1.0).abs() < 0.01, "mean {mean}");
        // Var = shape * scale^2; the shape estimate mean^2/var must be ~1.5
        // (an exponential, shape 1, or a plain mean would fail this).
        let var_want = 1.5 * scale * scale;
        assert!(
            (var / var_want - 1.0).abs() < 0.03,
            "var {var} want {var_want}"
        );
        let shape_est = mean * mean / var;
        assert!((shape_est - 1.5).abs() < 0.05, "shape {shape_est}");
    }

    #[test]
    fn small_shapes_use_gs_and_keep_their_mean() {
        let (mean, var) = moments(0.5, 2.0, 200_000);
        assert!((mean - 1.0).abs() < 0.02, "mean {mean}");
        assert!((var - 2.0).abs() < 0.1, "var {var}");
    }

    #[test]
    fn samples_are_positive_and_deterministic_per_seed() {
        let mut a = fastrand::Rng::with_seed(1);
        let mut b = fastrand::Rng::with_seed(1);
        for _ in 0..1000 {
            let x = sample(&mut a, 1.5, 10.0);
            assert!(x > 0.0 && x.is_finite());
            assert_eq!(x, sample(&mut b, 1.5, 10.0));
        }
    }
}
