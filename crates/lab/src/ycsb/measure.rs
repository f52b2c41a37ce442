//! Per-operation latency histograms, as YCSB's `Measurements` keeps them: one series per
//! database operation (`READ`, `UPDATE`, `INSERT`, `SCAN`) plus `READ-MODIFY-WRITE`, and a
//! `-FAILED` series for each holding the operations that found no record.
//!
//! Latencies are in nanoseconds, measured from the moment the operation actually started
//! (YCSB's default `measurement.interval=op`), not from its scheduled start under a target
//! throughput (`intended`), so they do not include time an operation waited behind a slow one.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

/// The operations YCSB measures, in the order CoreWorkload weighs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum OpKind {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

impl OpKind {
    /// Every kind, in YCSB's order.
    pub const ALL: [OpKind; 5] = [
        OpKind::Read,
        OpKind::Update,
        OpKind::Insert,
        OpKind::Scan,
        OpKind::ReadModifyWrite,
    ];

    /// YCSB's measurement name.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "READ",
            OpKind::Update => "UPDATE",
            OpKind::Insert => "INSERT",
            OpKind::Scan => "SCAN",
            OpKind::ReadModifyWrite => "READ-MODIFY-WRITE",
        }
    }

    /// The series name: `READ` or `READ-FAILED`.
    pub fn series_name(self, ok: bool) -> String {
        if ok {
            self.name().to_string()
        } else {
            format!("{}-FAILED", self.name())
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// 1 ns .. 1 h at 3 significant digits (0.1 % resolution).
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("constant bounds are valid")
}

/// One client thread's histograms; merged across threads at the end of a phase. Histograms
/// are created on first use, so a thread of workload C holds one, not ten.
#[derive(Debug, Default)]
pub struct Measurements {
    /// Indexed by `OpKind as usize`, `[ok, failed]`.
    series: [[Option<Histogram<u64>>; 2]; 5],
}

impl Measurements {
    /// No measurements yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one operation of `kind` that took `latency_ns`; `ok == false` files it under
    /// the `-FAILED` series.
    pub fn record(&mut self, kind: OpKind, ok: bool, latency_ns: u64) {
        let slot = &mut self.series[kind.index()][usize::from(!ok)];
        slot.get_or_insert_with(new_histogram)
            .saturating_record(latency_ns.max(1));
    }

    /// Operations recorded under `kind` (successful when `ok`, failed otherwise).
    pub fn count(&self, kind: OpKind, ok: bool) -> u64 {
        self.series[kind.index()][usize::from(!ok)]
            .as_ref()
            .map_or(0, Histogram::len)
    }

    /// Adds another thread's measurements.
    pub fn merge(&mut self, other: &Measurements) {
        for (mine, theirs) in self.series.iter_mut().zip(&other.series) {
            for (m, t) in mine.iter_mut().zip(theirs) {
                if let Some(t) = t {
                    // Both histograms have the same bounds, so adding cannot fail.
                    let m = m.get_or_insert_with(new_histogram);
                    m.add(t).expect("histograms with equal bounds add");
                }
            }
        }
    }

    /// Summaries of every non-empty series, keyed by YCSB's series name.
    pub fn summaries(&self) -> BTreeMap<String, OpStats> {
        let mut out = BTreeMap::new();
        for kind in OpKind::ALL {
            for ok in [true, false] {
                if let Some(h) = &self.series[kind.index()][usize::from(!ok)] {
                    out.insert(kind.series_name(ok), OpStats::of(h));
                }
            }
        }
        out
    }
}

/// Count and latency of one series, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OpStats {
    pub count: u64,
    pub latency_ns_mean: f64,
    pub latency_ns_min: u64,
    pub latency_ns_p50: u64,
    pub latency_ns_p95: u64,
    pub latency_ns_p99: u64,
    pub latency_ns_max: u64,
}

impl OpStats {
    fn of(h: &Histogram<u64>) -> Self {
        OpStats {
            count: h.len(),
            latency_ns_mean: h.mean(),
            latency_ns_min: h.min(),
            latency_ns_p50: h.value_at_quantile(0.50),
            latency_ns_p95: h.value_at_quantile(0.95),
            latency_ns_p99: h.value_at_quantile(0.99),
            latency_ns_max: h.max(),
        }
    }
}
