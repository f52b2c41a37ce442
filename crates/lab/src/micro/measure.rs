//! The timing loop shared by all workloads, and latency percentiles.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::io;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// A benchmark workload, split so that only the operation itself is timed.
pub trait Workload {
    /// Untimed: gets ready for the next op (picks an offset, rotates a full
    /// file, ...). Returns `Ok(false)` when the workload has run out of work.
    fn prepare(&mut self) -> io::Result<bool>;
    /// Timed: exactly one benchmarked operation.
    fn op(&mut self) -> io::Result<()>;
}

/// How long to run a workload.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Warm-up (caches, lazily allocated structures); not recorded.
    pub warmup: Duration,
    /// Caps the warm-up for workloads that consume a finite supply (unlink).
    pub warmup_max_ops: u64,
    /// Wall-clock length of the measured phase.
    pub run: Duration,
    /// The threads of a `--threads` run wait here after their setup, so their warm-ups and
    /// measured phases overlap (threads.rs).
    pub start: Option<Arc<Barrier>>,
}

/// The outcome of the measured phase.
#[derive(Debug, Clone)]
pub struct Measured {
    pub ops: u64,
    /// Sum of the op latencies: time spent inside the operations only, so
    /// harness overhead (RNG, histogram, untimed file rotation) is excluded
    /// equally for every target.
    pub busy: Duration,
    /// Wall-clock length of the measured phase, including `prepare`.
    pub wall: Duration,
    pub latency: Percentiles,
    /// Every op's latency (threads.rs merges the threads' histograms).
    pub histogram: Histogram<u64>,
    /// The workload ran out of work before the time was up.
    pub exhausted: bool,
}

impl Measured {
    pub fn ops_per_sec(&self) -> f64 {
        let secs = self.busy.as_secs_f64();
        if secs > 0.0 {
            self.ops as f64 / secs
        } else {
            0.0
        }
    }

    /// The threads of one run as one measurement: the ops/s is the sum of the threads' own
    /// rates (each over the time it spent inside its ops), latencies are over all their ops.
    pub fn merge(parts: &[Measured]) -> Measured {
        let mut histogram = new_histogram();
        for p in parts {
            histogram.add(&p.histogram).expect("same histogram bounds");
        }
        let ops: u64 = parts.iter().map(|p| p.ops).sum();
        let rate: f64 = parts.iter().map(|p| p.ops_per_sec()).sum();
        Measured {
            ops,
            busy: if rate > 0.0 {
                Duration::from_secs_f64(ops as f64 / rate)
            } else {
                Duration::ZERO
            },
            wall: parts.iter().map(|p| p.wall).max().unwrap_or_default(),
            latency: Percentiles::from_histogram(&histogram),
            histogram,
            exhausted: parts.iter().any(|p| p.exhausted),
        }
    }
}

/// Latency percentiles in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
}

impl Percentiles {
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        }
    }
}

/// 1 ns .. 1 h at 3 significant digits: 0.1 % resolution, ~200 KiB.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// Runs a warm-up, then the measured phase, recording every op's latency.
pub fn measure<W: Workload + ?Sized>(w: &mut W, limits: &Limits) -> io::Result<Measured> {
    if let Some(b) = &limits.start {
        b.wait();
    }
    warm_up(w, limits)?;
    let mut hist = new_histogram();
    let mut ops = 0u64;
    let mut busy = Duration::ZERO;
    let mut exhausted = false;
    let start = Instant::now();
    let deadline = start + limits.run;
    loop {
        if !w.prepare()? {
            exhausted = true;
            break;
        }
        let t0 = Instant::now();
        w.op()?;
        let t1 = Instant::now();
        let took = t1 - t0;
        hist.saturating_record(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
        busy += took;
        ops += 1;
        if t1 >= deadline {
            break;
        }
    }
    Ok(Measured {
        ops,
        busy,
        wall: start.elapsed(),
        latency: Percentiles::from_histogram(&hist),
        histogram: hist,
        exhausted,
    })
}

fn warm_up<W: Workload + ?Sized>(w: &mut W, limits: &Limits) -> io::Result<()> {
    let deadline = Instant::now() + limits.warmup;
    let mut done = 0u64;
    while done < limits.warmup_max_ops && Instant::now() < deadline {
        if !w.prepare()? {
            break;
        }
        w.op()?;
        done += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_distribution() {
        let mut h = new_histogram();
        for v in 1..=10_000u64 {
            h.record(v * 100).unwrap(); // 100 ns .. 1 ms, uniform
        }
        let p = Percentiles::from_histogram(&h);
        let near = |got: u64, want: u64| (got as f64 - want as f64).abs() <= want as f64 * 0.001;
        assert!(near(p.p50, 500_000), "p50 {}", p.p50);
        assert!(near(p.p90, 900_000), "p90 {}", p.p90);
        assert!(near(p.p99, 990_000), "p99 {}", p.p99);
        assert!(near(p.p999, 999_000), "p999 {}", p.p999);
        assert!(near(p.max, 1_000_000), "max {}", p.max);
        assert!((p.mean - 500_050.0).abs() < 500.0, "mean {}", p.mean);
        assert!(p.p50 <= p.p90 && p.p90 <= p.p99 && p.p99 <= p.p999 && p.p999 <= p.max);
    }

    #[test]
    fn percentiles_single_outlier_shows_only_in_max() {
        let mut h = new_histogram();
        for _ in 0..9_999 {
            h.record(1_000).unwrap();
        }
        h.record(5_000_000).unwrap();
        let p = Percentiles::from_histogram(&h);
        assert_eq!(p.p50, 1_000);
        assert_eq!(p.p999, 1_000);
        assert!(p.max >= 4_995_000);
    }

    #[test]
    fn empty_histogram_gives_zeros() {
        assert_eq!(
            Percentiles::from_histogram(&new_histogram()),
            Percentiles::default()
        );
    }

    /// Counts down from `left`; each op sleeps a little.
    struct Countdown {
        left: u64,
        ops: u64,
    }

    impl Workload for Countdown {
        fn prepare(&mut self) -> io::Result<bool> {
            Ok(self.left > 0)
        }
        fn op(&mut self) -> io::Result<()> {
            self.left -= 1;
            self.ops += 1;
            std::thread::sleep(Duration::from_micros(50));
            Ok(())
        }
    }

    #[test]
    fn exhausted_workload_stops_and_warmup_is_capped() {
        let mut w = Countdown { left: 30, ops: 0 };
        let limits = Limits {
            warmup: Duration::from_secs(10),
            warmup_max_ops: 5,
            run: Duration::from_secs(10),
            start: None,
        };
        let m = measure(&mut w, &limits).unwrap();
        assert!(m.exhausted);
        assert_eq!(m.ops, 25, "5 warm-up ops are not counted");
        assert_eq!(w.ops, 30);
        assert!(m.busy >= Duration::from_micros(50 * 25));
        assert!(m.latency.p50 >= 50_000);
        assert!(m.ops_per_sec() > 0.0 && m.ops_per_sec() <= 20_000.0);
    }

    #[test]
    fn timed_phase_stops_at_deadline() {
        let mut w = Countdown {
            left: u64::MAX,
            ops: 0,
        };
        let limits = Limits {
            warmup: Duration::from_millis(5),
            warmup_max_ops: u64::MAX,
            run: Duration::from_millis(30),
            start: None,
        };
        let m = measure(&mut w, &limits).unwrap();
        assert!(!m.exhausted);
        assert!(m.ops > 0);
        assert!(m.wall >= Duration::from_millis(30) && m.wall < Duration::from_secs(2));
    }
}
