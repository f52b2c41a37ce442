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

/// The widest 95% interval, relative to the mean, that ends a run's trials (seed 001,
/// section 5.2: "Additional trials were conducted for any test where the confidence interval
/// half-width was larger than 10% of the mean").
pub const CI_TARGET: f64 = 0.10;

/// Whether a run with `kept` counted values, which has run `done` of at most `max` trials,
/// runs one more under seed 001's rule: while its 95% interval is wider than [`CI_TARGET`] of
/// its mean. Two values are the least an interval needs; `done` and `max` count every trial
/// the rule counts (the discarded first included), so `max` bounds the run's length.
pub fn wants_another_trial(kept: &[f64], done: usize, max: usize) -> bool {
    if done >= max || kept.len() < 2 {
        return false;
    }
    Summary::of(kept).is_some_and(|s| s.relative_ci() > CI_TARGET)
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
    fn another_trial_only_while_the_interval_is_wider_than_a_tenth_of_the_mean() {
        // 100, 104, 92: sd 6.11, half-width 4.303 * 6.11 / sqrt 3 = 15.2 (15.5% of 98.7).
        let wide = [100.0, 104.0, 92.0];
        assert!(wants_another_trial(&wide, 4, 8));
        // The same values with a fourth close to the mean: half-width 3.182 * 5.0 / 2 = 8.0
        // (8.1% of 98.5), inside the target.
        let narrowed = [100.0, 104.0, 92.0, 98.0];
        assert!(Summary::of(&narrowed).unwrap().relative_ci() < CI_TARGET);
        assert!(!wants_another_trial(&narrowed, 5, 8));
        // The limit ends the run whatever the interval.
        assert!(!wants_another_trial(&wide, 8, 8));
        // Fewer than two values have no interval to judge.
        assert!(!wants_another_trial(&[100.0], 2, 8));
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
