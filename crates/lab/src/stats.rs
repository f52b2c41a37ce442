//! Run-rule statistics (seed 001, section 5): mean and 95% confidence
//! interval of repeated trials (Student-t), and the "significant difference"
//! rule: the intervals do not overlap and the means differ by at least 10%.

use serde::{Deserialize, Serialize};

/// Two-sided 95% Student-t critical values for 1..=30 degrees of freedom.
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// The minimum relative difference of means for "significant" (seed 001).
pub const SIGNIFICANT_RATIO: f64 = 1.10;

/// The two-sided 95% critical value of Student's t with `df` degrees of freedom.
/// Beyond the table, values for 40, 60 and 120 degrees, then the normal 1.96.
pub fn t_critical_95(df: usize) -> f64 {
    match df {
        0 => f64::INFINITY,
        1..=30 => T95[df - 1],
        31..=40 => 2.021,
        41..=60 => 2.000,
        61..=120 => 1.980,
        _ => 1.960,
    }
}

/// Mean, spread and 95% confidence interval of a set of trial results.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples (kept trials).
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n - 1 in the denominator); 0 for one sample.
    pub stddev: f64,
    /// Half-width of the 95% interval; infinite for a single sample, whose
    /// interval is unknown.
    pub ci95_half_width: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none or any is not finite.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let n = samples.len();
        let mean = samples.iter().sum::<f64>() / n as f64;
        let stddev = if n > 1 {
            let ss: f64 = samples.iter().map(|v| (v - mean).powi(2)).sum();
            (ss / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        let half = if n > 1 {
            t_critical_95(n - 1) * stddev / (n as f64).sqrt()
        } else {
            f64::INFINITY
        };
        Some(Summary {
            n,
            mean,
            stddev,
            ci95_half_width: half,
            ci95_low: mean - half,
            ci95_high: mean + half,
        })
    }

    /// Relative half-width of the interval (half-width / mean).
    pub fn relative_ci(&self) -> f64 {
        if self.mean == 0.0 {
            f64::INFINITY
        } else {
            self.ci95_half_width / self.mean.abs()
        }
    }
}

/// How two results compare under the run rules.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Comparison {
    /// `a.mean / b.mean`.
    pub ratio: f64,
    /// The 95% intervals do not overlap and the larger mean is at least
    /// [`SIGNIFICANT_RATIO`] times the smaller.
    pub significant: bool,
}

/// Compares `a` against `b` (the baseline).
pub fn compare(a: &Summary, b: &Summary) -> Comparison {
    let ratio = if b.mean != 0.0 {
        a.mean / b.mean
    } else {
        f64::INFINITY
    };
    let disjoint = a.ci95_low > b.ci95_high || b.ci95_low > a.ci95_high;
    let (lo, hi) = if a.mean < b.mean {
        (a.mean, b.mean)
    } else {
        (b.mean, a.mean)
    };
    let far_enough = lo > 0.0 && hi / lo >= SIGNIFICANT_RATIO;
    Comparison {
        ratio,
        significant: disjoint && far_enough,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_data() {
        // Mean 5, sample sd sqrt(2.5); t(4) = 2.776.
        let s = Summary::of(&[3.0, 4.0, 5.0, 6.0, 7.0]).unwrap();
        assert_eq!(s.n, 5);
        assert!((s.mean - 5.0).abs() < 1e-12);
        assert!((s.stddev - 2.5f64.sqrt()).abs() < 1e-12);
        let half = 2.776 * 2.5f64.sqrt() / 5f64.sqrt();
        assert!(
            (s.ci95_half_width - half).abs() < 1e-9,
            "{}",
            s.ci95_half_width
        );
        assert!((s.ci95_low - (5.0 - half)).abs() < 1e-9);
        assert!((s.ci95_high - (5.0 + half)).abs() < 1e-9);
    }

    #[test]
    fn single_sample_has_unknown_interval_and_empty_has_none() {
        let s = Summary::of(&[42.0]).unwrap();
        assert_eq!(s.mean, 42.0);
        assert!(s.ci95_half_width.is_infinite());
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn t_table_edges() {
        assert_eq!(t_critical_95(1), 12.706);
        assert_eq!(t_critical_95(30), 2.042);
        assert_eq!(t_critical_95(1000), 1.96);
        assert!(t_critical_95(0).is_infinite());
        for df in 1..200 {
            assert!(
                t_critical_95(df + 1) <= t_critical_95(df),
                "monotone at {df}"
            );
        }
    }

    #[test]
    fn significance_needs_disjoint_intervals_and_ten_percent() {
        let tight = |m: f64| Summary::of(&[m - 0.1, m, m + 0.1]).unwrap();
        // 20% apart, tight intervals: significant.
        let c = compare(&tight(120.0), &tight(100.0));
        assert!(c.significant);
        assert!((c.ratio - 1.2).abs() < 1e-12);
        // 5% apart, tight intervals: disjoint but below 10%.
        assert!(!compare(&tight(105.0), &tight(100.0)).significant);
        // 50% apart but wide, overlapping intervals.
        let wide = |m: f64| Summary::of(&[m - 60.0, m, m + 60.0]).unwrap();
        assert!(!compare(&wide(150.0), &wide(100.0)).significant);
        // Symmetric: slower by 20% is significant too.
        assert!(compare(&tight(100.0), &tight(120.0)).significant);
    }
}
