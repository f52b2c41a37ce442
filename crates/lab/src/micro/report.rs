//! Benchmark records, the console table and the JSON file.

use super::measure::{Measured, Percentiles};
use super::threads::Sharing;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// What a target is, for comparing nvmfs against the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// The nvmfs library, in-process.
    Nvmfs,
    /// A kernel file system through system calls (tmpfs, dir:PATH).
    Kernel,
    /// A no-file-system reference (memcpy).
    Reference,
}

/// The result of one workload on one target (one element of the JSON array).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub workload: String,
    /// "nvmfs", "tmpfs", "dir:PATH", "run:nvmfs" or "memcpy".
    pub target: String,
    pub kind: TargetKind,
    /// Measured ops (warm-up excluded).
    pub ops: u64,
    /// Time spent inside the measured ops (sum of their latencies).
    pub elapsed_s: f64,
    /// Wall-clock length of the measured phase, including untimed
    /// preparation between ops (offset choice, file rotation).
    pub wall_s: f64,
    /// `ops / elapsed_s`.
    pub ops_per_sec: f64,
    /// Payload bytes per op (0 for metadata workloads).
    pub bytes_per_op: u64,
    pub mib_per_sec: f64,
    pub latency_ns: Percentiles,
    /// `ops_per_sec` over the best kernel target's on this workload;
    /// `None` when no kernel target ran it.
    pub ratio_to_best_kernel: Option<f64>,
    /// This target's time per op over the hardware limit's on this workload (the reference
    /// record's): 1.0 is at the limit, 1.5 takes half as long again; `None` for the
    /// references themselves and for workloads without one.
    #[serde(default)]
    pub ratio_to_limit: Option<f64>,
    /// Metadata workloads: directory levels between the workload's
    /// directory and each file (0 = flat); `None` for data workloads.
    pub dir_depth: Option<u32>,
    /// mmap-store-1k: seconds of the one msync(MS_SYNC) after the measured
    /// phase (not part of `elapsed_s` or `ops_per_sec`); `None` otherwise.
    pub final_sync_s: Option<f64>,
    /// Threads that ran the workload together (`--threads`; 1 otherwise).
    #[serde(default = "one")]
    pub threads: u32,
    /// With more than one thread: on disjoint files or one shared file or directory.
    #[serde(default)]
    pub sharing: Option<Sharing>,
    /// With more than one thread: ops/s over the same target's one-thread record.
    #[serde(default)]
    pub scaling: Option<f64>,
    /// With more than one thread: the round trip of a cache line between the first two CPUs,
    /// measured right after the run (core_link.rs). Threads that share cache lines scale
    /// far worse when the host has placed the CPUs far apart, and it moves them now and then.
    #[serde(default)]
    pub core_link_ns: Option<f64>,
    pub notes: Vec<String>,
}

fn one() -> u32 {
    1
}

impl Record {
    pub(crate) fn new(
        workload: &str,
        target: &str,
        kind: TargetKind,
        bytes_per_op: u64,
        m: &Measured,
        notes: Vec<String>,
    ) -> Self {
        let ops_per_sec = m.ops_per_sec();
        Record {
            workload: workload.to_string(),
            target: target.to_string(),
            kind,
            ops: m.ops,
            elapsed_s: m.busy.as_secs_f64(),
            wall_s: m.wall.as_secs_f64(),
            ops_per_sec,
            bytes_per_op,
            mib_per_sec: ops_per_sec * bytes_per_op as f64 / (1u64 << 20) as f64,
            latency_ns: m.latency,
            ratio_to_best_kernel: None,
            ratio_to_limit: None,
            dir_depth: None,
            final_sync_s: None,
            threads: 1,
            sharing: None,
            scaling: None,
            core_link_ns: None,
            notes,
        }
    }

    /// "1", or "2 disjoint" / "2 shared".
    pub fn run_name(&self) -> String {
        match self.sharing {
            Some(s) => format!("{} {}", self.threads, s.name()),
            None => self.threads.to_string(),
        }
    }

    /// One progress line: "randread-4k: 1,234,567 ops/s, p50 812ns, p99 1.9µs".
    pub fn summary(&self) -> String {
        let run = match self.sharing {
            Some(_) => format!(" ({} threads)", self.run_name()),
            None => String::new(),
        };
        format!(
            "{}{run}: {} ops/s, p50 {}, p99 {}",
            self.workload,
            group_thousands(self.ops_per_sec.round() as u64),
            format_ns(self.latency_ns.p50),
            format_ns(self.latency_ns.p99)
        )
    }
}

/// Sets every record's ratio to the best kernel target of its workload run the same way
/// (threads, sharing), its ratio to the hardware limit beside a one-thread reference, and a
/// threaded record's scaling over its target's one-thread record.
pub(crate) fn fill_ratios(records: &mut [Record]) {
    let best = best_of(records, |r| r.kind == TargetKind::Kernel);
    let limit = best_of(records, super::reference::is_limit);
    let mut solo: BTreeMap<(String, String), f64> = BTreeMap::new();
    for r in records.iter().filter(|r| r.sharing.is_none()) {
        solo.insert((r.workload.clone(), r.target.clone()), r.ops_per_sec);
    }
    for r in records.iter_mut() {
        r.ratio_to_best_kernel = best
            .get(&run_key(r))
            .filter(|b| **b > 0.0)
            .map(|b| r.ops_per_sec / b);
        r.ratio_to_limit = limit
            .get(&run_key(r))
            .filter(|_| r.kind != TargetKind::Reference && r.ops_per_sec > 0.0)
            .map(|l| l / r.ops_per_sec);
        r.scaling = solo
            .get(&(r.workload.clone(), r.target.clone()))
            .filter(|one| r.sharing.is_some() && **one > 0.0)
            .map(|one| r.ops_per_sec / one);
    }
}

/// A workload and how it ran: records are compared only with others run the same way.
fn run_key(r: &Record) -> (String, String) {
    (r.workload.clone(), r.run_name())
}

/// The highest ops/s of each workload run among the records `pick` takes.
fn best_of(records: &[Record], pick: impl Fn(&Record) -> bool) -> BTreeMap<(String, String), f64> {
    let mut best = BTreeMap::new();
    for r in records.iter().filter(|r| pick(r)) {
        let b: &mut f64 = best.entry(run_key(r)).or_insert(0.0);
        *b = b.max(r.ops_per_sec);
    }
    best
}

/// The console table, followed by the notes attached to the records.
pub fn format_table(records: &[Record]) -> String {
    let tw = records
        .iter()
        .map(|r| r.target.chars().count())
        .max()
        .unwrap_or(0)
        .max("target".len());
    let ww = records
        .iter()
        .map(|r| r.workload.chars().count())
        .max()
        .unwrap_or(0)
        .max(14);
    // The threads columns only when some record ran with more than one thread.
    let threaded = records.iter().any(|r| r.sharing.is_some());
    let run_cols = |run: &str, scaling: &str, link: &str| match threaded {
        true => format!(" {run:<12} {scaling:>11} {link:>8}"),
        false => String::new(),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<ww$} {:<tw$}{} {:>14} {:>9} {:>9} {:>10} {:>9}",
        "workload",
        "target",
        run_cols("threads", "vs 1 thread", "CPU link"),
        "ops/s",
        "p50",
        "p99",
        "vs kernel",
        "x limit"
    );
    let times = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.2}x"));
    for r in records {
        let _ = writeln!(
            out,
            "{:<ww$} {:<tw$}{} {:>14} {:>9} {:>9} {:>10} {:>9}",
            r.workload,
            r.target,
            run_cols(
                &r.run_name(),
                &times(r.scaling),
                &r.core_link_ns
                    .map_or_else(|| "-".to_string(), |ns| format!("{ns:.0} ns"))
            ),
            group_thousands(r.ops_per_sec.round() as u64),
            format_ns(r.latency_ns.p50),
            format_ns(r.latency_ns.p99),
            times(r.ratio_to_best_kernel),
            times(r.ratio_to_limit)
        );
    }
    out.push_str(&format_notes(records));
    out
}

/// Each distinct note once, with the targets (and workload, if only one)
/// it applies to.
fn format_notes(records: &[Record]) -> String {
    let mut by_note: BTreeMap<&str, (Vec<&str>, Vec<&str>)> = BTreeMap::new();
    for r in records {
        for n in &r.notes {
            let (targets, workloads) = by_note.entry(n).or_default();
            if !targets.contains(&r.target.as_str()) {
                targets.push(&r.target);
            }
            if !workloads.contains(&r.workload.as_str()) {
                workloads.push(&r.workload);
            }
        }
    }
    let mut out = String::new();
    if !by_note.is_empty() {
        out.push_str("notes:\n");
    }
    for (note, (targets, workloads)) in by_note {
        let scope = match workloads.as_slice() {
            [one] => format!("{one} on {}", targets.join(", ")),
            _ => targets.join(", "),
        };
        let _ = writeln!(out, "  - {scope}: {note}");
    }
    out
}

/// Prints [`format_table`] to stdout.
pub fn print_table(records: &[Record]) {
    print!("{}", format_table(records));
}

/// The records as a pretty-printed JSON array (no wrapper object).
pub fn to_json(records: &[Record]) -> String {
    serde_json::to_string_pretty(records).expect("records serialize")
}

/// Writes [`to_json`] to `path` (the `--json FILE` output).
pub fn write_json(path: &Path, records: &[Record]) -> io::Result<()> {
    let mut text = to_json(records);
    text.push('\n');
    std::fs::write(path, text)
}

/// 1234567 -> "1,234,567".
pub fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    // The leading group has 1-3 digits, every later one exactly 3.
    let first = match digits.len() % 3 {
        0 => 3,
        r => r,
    };
    let mut out = digits[..first].to_string();
    for group in digits.as_bytes()[first..].chunks(3) {
        out.push(',');
        out.push_str(std::str::from_utf8(group).expect("ASCII digits"));
    }
    out
}

/// A latency with a unit that keeps 2-3 significant digits.
pub fn format_ns(ns: u64) -> String {
    let x = ns as f64;
    match ns {
        0..=999 => format!("{ns}ns"),
        1_000..=9_999 => format!("{:.2}µs", x / 1e3),
        10_000..=99_999 => format!("{:.1}µs", x / 1e3),
        100_000..=999_999 => format!("{:.0}µs", x / 1e3),
        1_000_000..=999_999_999 => format!("{:.2}ms", x / 1e6),
        _ => format!("{:.2}s", x / 1e9),
    }
}
