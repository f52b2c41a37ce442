//! Per-flowop statistics and filebench's IO summary (`stats.c`): counts,
//! bytes and latency per flowop, with HDR histograms for percentiles.

use super::personality::{Flowop, OpKind};
use crate::micro::measure::new_histogram;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// One thread's counters, indexed like the flowop list. Ops are recorded into a small
/// batch first and added to the counters and histograms a batch at a time: a personality
/// runs up to 200 threads, so between two of one thread's ops the CPU has usually run other
/// threads, and a histogram bucket and counter touched per op missed the caches (recording
/// took 7-9% of a webproxy run's samples on nvmfs, whose ops are short enough to show it).
/// A batch appends to one buffer and then works through the flowops' lines while they are hot.
pub struct ThreadStats {
    per_op: Vec<(u64, u64, Histogram<u64>)>,
    batch: Vec<Recorded>,
}

/// One op waiting in a thread's batch.
#[derive(Clone, Copy)]
struct Recorded {
    flowop: u32,
    latency_ns: u64,
    bytes: u64,
}

/// Ops per batch: 24 KiB per thread.
const BATCH: usize = 1024;

impl ThreadStats {
    pub fn new(flowops: usize) -> Self {
        ThreadStats {
            per_op: (0..flowops).map(|_| (0, 0, new_histogram())).collect(),
            batch: Vec::with_capacity(BATCH),
        }
    }

    pub fn record(&mut self, flowop: usize, latency_ns: u64, bytes: u64) {
        assert!(flowop < self.per_op.len(), "flowop {flowop} out of range");
        self.batch.push(Recorded {
            flowop: flowop as u32,
            latency_ns,
            bytes,
        });
        if self.batch.len() == BATCH {
            self.add_batch();
        }
    }

    fn add_batch(&mut self) {
        for r in self.batch.drain(..) {
            let (count, total_bytes, hist) = &mut self.per_op[r.flowop as usize];
            *count += 1;
            *total_bytes += r.bytes;
            hist.saturating_record(r.latency_ns.max(1));
        }
    }
}

/// Latency percentiles of one flowop, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub mean: f64,
    pub min: u64,
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            mean: h.mean(),
            min: h.min(),
            p50: h.value_at_quantile(0.50),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// One flowop's totals over all threads of a trial. Only the percentiles
/// are kept: a full histogram is a few hundred KiB, times flowops, trials
/// and every run of a study.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowopStats {
    pub name: String,
    pub kind: OpKind,
    pub ops: u64,
    pub bytes: u64,
    pub latency_ns: Latency,
}

impl FlowopStats {
    /// Adds up the threads' counters per flowop.
    pub fn merge(flowops: &[Flowop], threads: Vec<ThreadStats>) -> Vec<FlowopStats> {
        let mut out: Vec<(u64, u64, Histogram<u64>)> = (0..flowops.len())
            .map(|_| (0, 0, new_histogram()))
            .collect();
        for mut t in threads {
            t.add_batch();
            for (acc, (count, bytes, hist)) in out.iter_mut().zip(t.per_op) {
                acc.0 += count;
                acc.1 += bytes;
                // Same bounds on both sides, so adding cannot fail.
                let _ = acc.2.add(&hist);
            }
        }
        flowops
            .iter()
            .zip(out)
            .map(|(f, (ops, bytes, hist))| FlowopStats {
                name: f.name.clone(),
                kind: f.op.kind(),
                ops,
                bytes,
                latency_ns: Latency::of(&hist),
            })
            .collect()
    }
}

/// Filebench's "IO Summary" line for one trial.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IoSummary {
    /// Every IO flowop counts as one op (open, close, stat, delete, fsync
    /// too); semaphore and hog flowops do not.
    pub ops: u64,
    pub ops_per_sec: f64,
    pub reads_per_sec: f64,
    pub writes_per_sec: f64,
    /// MB = 2^20 bytes.
    pub mb_per_sec: f64,
    /// Mean latency over all flowops, milliseconds.
    pub ms_per_op: f64,
}

impl IoSummary {
    /// Counts the IO flowops only, as filebench: semaphores and hog show in
    /// the per-flowop table but not here.
    pub fn of(flowops: &[FlowopStats], seconds: f64) -> Self {
        let secs = seconds.max(1e-9);
        let io: Vec<&FlowopStats> = flowops.iter().filter(|f| f.kind.is_io()).collect();
        let flowops = &io[..];
        let ops: u64 = flowops.iter().map(|f| f.ops).sum();
        let count =
            |k: OpKind| -> u64 { flowops.iter().filter(|f| f.kind == k).map(|f| f.ops).sum() };
        let bytes: u64 = flowops.iter().map(|f| f.bytes).sum();
        let lat_total_ns: f64 = flowops
            .iter()
            .map(|f| f.latency_ns.mean * f.ops as f64)
            .sum();
        IoSummary {
            ops,
            ops_per_sec: ops as f64 / secs,
            reads_per_sec: count(OpKind::Read) as f64 / secs,
            writes_per_sec: count(OpKind::Write) as f64 / secs,
            mb_per_sec: bytes as f64 / (1u64 << 20) as f64 / secs,
            ms_per_op: if ops > 0 {
                lat_total_ns / ops as f64 / 1e6
            } else {
                0.0
            },
        }
    }
}

/// Filebench-style text: one line per flowop, then the IO summary.
pub fn format_filebench(flowops: &[FlowopStats], seconds: f64) -> String {
    let secs = seconds.max(1e-9);
    let mut s = String::new();
    for f in flowops.iter().rev() {
        let mb = f.bytes as f64 / (1u64 << 20) as f64 / secs;
        s += &format!(
            "{:<20} {:>9}ops {:>10.0}ops/s {:>7.1}mb/s {:>9.3}ms/op [{:.3}ms - {:.3}ms]\n",
            f.name,
            f.ops,
            f.ops as f64 / secs,
            mb,
            f.latency_ns.mean / 1e6,
            f.latency_ns.min as f64 / 1e6,
            f.latency_ns.max as f64 / 1e6,
        );
    }
    let io = IoSummary::of(flowops, seconds);
    s += &format!(
        "IO Summary: {} ops {:.3} ops/s {:.0}/{:.0} rd/wr {:.1}mb/s {:.3}ms/op\n",
        io.ops, io.ops_per_sec, io.reads_per_sec, io.writes_per_sec, io.mb_per_sec, io.ms_per_op
    );
    s
}

/// [`format_filebench`] over several trials together: ops and bytes add
/// up, the time is the trials' total, the mean latency is weighted by ops,
/// min and max are over all trials (the columns filebench prints; the
/// percentiles of the trials cannot be combined and are not shown).
pub fn format_filebench_trials(trials: &[(&[FlowopStats], f64)]) -> String {
    let Some((first, _)) = trials.first() else {
        return String::new();
    };
    let mut rows: Vec<FlowopStats> = first
        .iter()
        .map(|f| FlowopStats {
            name: f.name.clone(),
            kind: f.kind,
            ops: 0,
            bytes: 0,
            latency_ns: Latency::default(),
        })
        .collect();
    let mut latency_sum = vec![0.0f64; rows.len()];
    for (flowops, _) in trials {
        for ((row, sum), f) in rows.iter_mut().zip(&mut latency_sum).zip(flowops.iter()) {
            if f.ops == 0 {
                continue;
            }
            let lat = &mut row.latency_ns;
            lat.min = if row.ops == 0 {
                f.latency_ns.min
            } else {
                lat.min.min(f.latency_ns.min)
            };
            lat.max = lat.max.max(f.latency_ns.max);
            row.ops += f.ops;
            row.bytes += f.bytes;
            *sum += f.latency_ns.mean * f.ops as f64;
        }
    }
    for (row, sum) in rows.iter_mut().zip(latency_sum) {
        if row.ops > 0 {
            row.latency_ns.mean = sum / row.ops as f64;
        }
    }
    let seconds = trials.iter().map(|t| t.1).sum();
    format_filebench(&rows, seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filebench::personality::{Op, SetId};

    fn flowop(name: &str, op: Op) -> Flowop {
        Flowop {
            name: name.into(),
            set: SetId::Main,
            iters: 1,
            op,
        }
    }

    #[test]
    fn merge_and_summary_add_up() {
        let ops = [
            flowop("readfile1", Op::ReadWholeFile { fd: 1, iosize: 1 }),
            flowop("appendfilerand1", Op::AppendFileRand { fd: 1, iosize: 1 }),
            flowop("statfile1", Op::StatFile),
            flowop(
                "semblock1",
                Op::SemBlock {
                    value: 1,
                    highwater: 1,
                },
            ),
        ];
        let mut a = ThreadStats::new(4);
        let mut b = ThreadStats::new(4);
        // A semaphore wait is listed but not in the IO summary.
        a.record(3, 5_000_000_000, 0);
        for _ in 0..10 {
            a.record(0, 1_000, 4096);
            b.record(1, 3_000, 100);
        }
        b.record(2, 2_000_000, 0);
        let merged = FlowopStats::merge(&ops, vec![a, b]);
        assert_eq!(merged[0].ops, 10);
        assert_eq!(merged[0].bytes, 40_960);
        // HDR histograms keep 3 significant digits.
        assert!(merged[1].latency_ns.p50.abs_diff(3_000) <= 3);
        assert!(merged[2].latency_ns.max.abs_diff(2_000_000) <= 2_000);
        // 21 ops over 2 s; 10 reads, 10 writes.
        let io = IoSummary::of(&merged, 2.0);
        assert_eq!(io.ops, 21);
        assert!((io.ops_per_sec - 10.5).abs() < 1e-9);
        assert!((io.reads_per_sec - 5.0).abs() < 1e-9);
        assert!((io.writes_per_sec - 5.0).abs() < 1e-9);
        let mb = (40_960.0 + 1_000.0) / 1_048_576.0 / 2.0;
        assert!((io.mb_per_sec - mb).abs() < 1e-9);
        // Mean latency over all ops: (10*1us + 10*3us + 2ms) / 21.
        let want_ms = (10.0 * 1_000.0 + 10.0 * 3_000.0 + 2_000_000.0) / 21.0 / 1e6;
        assert!(
            (io.ms_per_op - want_ms).abs() < want_ms * 0.002,
            "{}",
            io.ms_per_op
        );
        assert_eq!(merged[3].ops, 1);
        let text = format_filebench(&merged, 2.0);
        assert!(text.starts_with("semblock1 "), "{text}");
        assert!(
            text.contains("IO Summary: 21 ops 10.500 ops/s 5/5 rd/wr"),
            "{text}"
        );
        // Two such trials together: twice the ops in twice the time.
        let two = format_filebench_trials(&[(&merged, 2.0), (&merged, 2.0)]);
        assert!(
            two.contains("IO Summary: 42 ops 10.500 ops/s 5/5 rd/wr"),
            "{two}"
        );
        assert!(two.contains("readfile1                   20ops"), "{two}");
    }
}
