//! What `nvmfs bench ycsb` and `nvmfs bench tpcc` share: the run flags, SQLite's flags,
//! running one database workload on each target in turn (made fresh, loaded once, then
//! the trials), the per-operation latency table and the JSON file.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

use nvmfs_lab::db::sqlite::{JournalMode, SqliteSettings, Synchronous};
use nvmfs_lab::kernel;
use nvmfs_lab::stats::Summary;
use nvmfs_lab::study::database::{DbResult, OpLatency, Rules};
use nvmfs_lab::study::targets::{ImageSpec, StudyTarget};
use nvmfs_lab::study::{Cell, StudyProgress};
use serde::Serialize;

use crate::bench_targets::{resolve_targets, Wanted};
use crate::output;
use crate::size::parse_size;

pub const TRIALS: usize = 3;
pub const SECONDS: f64 = 5.0;
pub const WARMUP: f64 = 1.0;
pub const SEED: u64 = 1;

const GIB: u64 = 1 << 30;

/// The targets and run rules, common to both commands.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Where to run, in order (repeat for several): nvmfs, tmpfs, dir:PATH or a kernel variant
    /// [default: nvmfs, tmpfs]
    #[arg(short, long = "target", value_name = "T")]
    targets: Vec<String>,
    #[arg(long, value_name = "N", help = format!("Trials per target, the first discarded when there are several [default: {TRIALS}]"))]
    trials: Option<usize>,
    #[arg(long, value_name = "S", help = format!("Measured seconds per trial [default: {SECONDS}]"))]
    seconds: Option<f64>,
    #[arg(long, value_name = "S", help = format!("Warm-up seconds per trial, not recorded [default: {WARMUP}]"))]
    warmup: Option<f64>,
    #[arg(long, value_name = "N", help = format!("Seed of the load and of every trial's requests (the same on every target) [default: {SEED}]"))]
    seed: Option<u64>,
    /// Also write the configuration and every target's results to FILE as JSON
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Directory (a tmpfs) for nvmfs images, the tmpfs target and loop-device backing files
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub shm_dir: PathBuf,
}

/// The run rules as recorded in the JSON file.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RunSettings {
    pub trials: usize,
    pub warmup_seconds: f64,
    pub run_seconds: f64,
    pub seed: u64,
}

impl RunArgs {
    /// The run rules, checked.
    pub fn settings(&self) -> Result<RunSettings, String> {
        let s = RunSettings {
            trials: self.trials.unwrap_or(TRIALS),
            warmup_seconds: self.warmup.unwrap_or(WARMUP),
            run_seconds: self.seconds.unwrap_or(SECONDS),
            seed: self.seed.unwrap_or(SEED),
        };
        if s.trials == 0 {
            return Err("--trials must be at least 1".into());
        }
        if !s.run_seconds.is_finite() || s.run_seconds <= 0.0 {
            return Err(format!("--seconds must be > 0, got {}", s.run_seconds));
        }
        if !s.warmup_seconds.is_finite() || s.warmup_seconds < 0.0 {
            return Err(format!("--warmup must be >= 0, got {}", s.warmup_seconds));
        }
        if !self.shm_dir.is_dir() {
            return Err(format!(
                "--shm-dir {}: not a directory",
                self.shm_dir.display()
            ));
        }
        Ok(s)
    }

    /// The targets, resolved for kernel devices of `device_bytes`.
    pub fn targets(&self, device_bytes: u64) -> Result<Vec<Wanted>, String> {
        resolve_targets(&self.targets, &self.shm_dir, device_bytes)
    }

    /// The lab's rules for these settings.
    pub fn rules(&self, s: &RunSettings, device_bytes: u64) -> Rules<'_> {
        Rules {
            trials: s.trials,
            warmup_seconds: s.warmup_seconds,
            run_seconds: s.run_seconds,
            seed: s.seed,
            shm_dir: &self.shm_dir,
            device_bytes,
        }
    }
}

/// A kernel device with room for the nvmfs image's worth of database, and at least the
/// study's 8 GiB (sparse, so only written blocks use memory).
pub fn device_bytes(image: ImageSpec) -> u64 {
    (image.bytes.div_ceil(GIB) * GIB).max(8 * GIB)
}

/// SQLite's settings as flags; a flag left out keeps the command's default, which each
/// command adds to the help of --synchronous, --journal-mode and --mmap-size (`mut_arg`).
#[derive(clap::Args, Debug)]
pub struct SqliteArgs {
    /// SQLite journal mode: delete, truncate, persist or wal
    #[arg(long, value_name = "MODE")]
    journal_mode: Option<JournalMode>,
    /// SQLite PRAGMA synchronous: off, normal, full or extra
    #[arg(long, value_name = "S")]
    synchronous: Option<Synchronous>,
    /// SQLite PRAGMA mmap_size, the bytes of the database read through a mapping (0: none)
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    mmap_size: Option<u64>,
    /// SQLite page size when the database is created, a power of two in 512..=64K
    /// [default: 4096]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    page_size: Option<u64>,
    /// SQLite PRAGMA cache_size: pages when positive, KiB when negative [default: -2000]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    cache_size: Option<i64>,
}

impl SqliteArgs {
    /// Whether any SQLite flag was given.
    pub fn given(&self) -> bool {
        self.journal_mode.is_some()
            || self.synchronous.is_some()
            || self.mmap_size.is_some()
            || self.page_size.is_some()
            || self.cache_size.is_some()
    }

    /// `defaults` with the given flags applied, checked.
    pub fn apply(&self, mut s: SqliteSettings) -> Result<SqliteSettings, String> {
        set(&mut s.journal_mode, self.journal_mode);
        set(&mut s.synchronous, self.synchronous);
        set(&mut s.mmap_size, self.mmap_size);
        if let Some(p) = self.page_size {
            s.page_size = u32::try_from(p).map_err(|_| format!("--page-size {p}: too large"))?;
        }
        set(&mut s.cache_size, self.cache_size);
        s.validate().map_err(|e| e.to_string())?;
        Ok(s)
    }
}

/// Appends `[default: ...]` to the help of a flattened flag (see [`SqliteArgs`]).
pub fn with_default(arg: clap::Arg, default: &str) -> clap::Arg {
    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
    arg.help(format!("{help} [default: {default}]"))
}

pub fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// One command's run over its targets.
pub struct Bench<'a> {
    /// `ycsb` or `tpcc`, for messages.
    pub command: &'static str,
    /// `ycsb-a` ... or `tpcc`, for the records.
    pub workload: String,
    /// What the trials' value counts: `ops/s` or `tpmC`.
    pub metric: &'static str,
    pub image: ImageSpec,
    pub rules: Rules<'a>,
}

/// One target's outcome, for the table and the JSON file.
#[derive(Serialize)]
pub struct Record {
    pub workload: String,
    pub target: String,
    /// ok, stopped early, skipped (unavailable), failed, interrupted.
    pub status: String,
    pub metric: &'static str,
    /// The metric (ops/s or tpmC) over the kept trials.
    pub ops_per_sec: Option<Summary>,
    /// TPC-C: transactions of every type per minute over the kept trials.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_tpm: Option<Summary>,
    /// Per operation type over the kept trials (see [`kept_latency`]).
    pub latency: BTreeMap<String, OpLatency>,
    pub result: Option<DbResult>,
    pub provision: Option<serde_json::Value>,
}

/// Checks the JSON path and installs Ctrl-C handling; `Err` is the exit status.
pub fn start(command: &str, json: Option<&PathBuf>) -> Result<(), u8> {
    if let Some(path) = json {
        if let Err(e) = super::bench::check_writable(path) {
            eprintln!("nvmfs bench {command}: --json {}: {e}", path.display());
            return Err(2);
        }
    }
    if let Err(e) = kernel::install_interrupt_handler() {
        eprintln!("nvmfs bench {command}: warning: {e}");
    }
    Ok(())
}

/// Runs the workload on each target in turn (`run_on` loads and runs the trials on a fresh
/// target and closes it), printing each target's table as it finishes: `complete` adds the
/// command's own fields to the record and formats the table.
/// `Err(1)` when stdout is gone.
pub fn run_all(
    bench: &Bench<'_>,
    wanted: &[Wanted],
    run_on: &dyn Fn(StudyTarget, &mut dyn StudyProgress) -> io::Result<DbResult>,
    complete: &dyn Fn(&mut Record) -> String,
) -> Result<Vec<Record>, u8> {
    let mut records = Vec::new();
    for (i, w) in wanted.iter().enumerate() {
        if kernel::interrupted() {
            break;
        }
        eprintln!(
            "[{}/{}] {} on {}",
            i + 1,
            wanted.len(),
            bench.workload,
            w.label()
        );
        let mut record = run_target(bench, w, run_on);
        if !output::print("bench", &complete(&mut record)) {
            return Err(1);
        }
        records.push(record);
    }
    Ok(records)
}

/// Makes the target fresh, runs the workload on it, and removes it.
fn run_target(
    bench: &Bench<'_>,
    w: &Wanted,
    run_on: &dyn Fn(StudyTarget, &mut dyn StudyProgress) -> io::Result<DbResult>,
) -> Record {
    let mut record = Record {
        workload: bench.workload.clone(),
        target: w.label().to_string(),
        status: String::new(),
        metric: bench.metric,
        ops_per_sec: None,
        total_tpm: None,
        latency: BTreeMap::new(),
        result: None,
        provision: None,
    };
    if let Some(why) = w.unavailable() {
        eprintln!("  {}: unavailable: {why}", record.target);
        record.status = format!("skipped: {why}");
        return record;
    }
    let scratch = format!("nvmfs-bench-{}-{}", bench.command, std::process::id());
    let rules = &bench.rules;
    let made = w.make(&scratch, |t| {
        StudyTarget::create_sized(t, rules.shm_dir, rules.device_bytes, bench.image)
    });
    let mut progress = StderrProgress {
        metric: bench.metric,
    };
    let outcome = made.and_then(|target| {
        record.provision = Some(target.describe());
        run_on(target, &mut progress)
    });
    record.status = status(&outcome);
    if let Ok(r) = outcome {
        record.ops_per_sec = r.ops_per_sec;
        record.latency = kept_latency(&r);
        record.result = Some(r);
    }
    record
}

fn status(outcome: &io::Result<DbResult>) -> String {
    match outcome {
        Ok(r) => match &r.stopped_early {
            Some(why) if why.starts_with("interrupted") => "interrupted".to_string(),
            Some(why) => format!("stopped early: {why}"),
            None => "ok".to_string(),
        },
        Err(_) if kernel::interrupted() => "interrupted".to_string(),
        Err(e) => format!("failed: {e}"),
    }
}

/// Progress of one target on stderr.
struct StderrProgress {
    metric: &'static str,
}

impl StudyProgress for StderrProgress {
    fn cell_started(&mut self, _: usize, _: usize, _: &str, _: &str) {}

    fn note(&mut self, msg: &str) {
        eprintln!("  {msg}");
    }

    fn tick(&mut self, trial: usize, trials: usize, value: f64, _measuring: bool) {
        let discarded = if trials > 1 && trial == 0 {
            " (discarded)"
        } else {
            ""
        };
        eprintln!(
            "  trial {}/{trials}: {value:.1} {}{discarded}",
            trial + 1,
            self.metric
        );
    }

    fn cell_done(&mut self, _: &Cell) {}
}

/// Latency per operation type over the kept trials: counts summed, the mean over every
/// kept operation (the trials' means weighted by their counts), the largest maximum, and,
/// since percentiles of separate trials do not combine, the last kept trial's p50, p95
/// and p99.
pub fn kept_latency(r: &DbResult) -> BTreeMap<String, OpLatency> {
    let mut out: BTreeMap<String, OpLatency> = BTreeMap::new();
    for t in r.trials.iter().filter(|t| !t.discarded) {
        for (op, l) in &t.latency {
            let merged = out.entry(op.clone()).or_insert(OpLatency {
                count: 0,
                mean_ns: 0.0,
                ..*l
            });
            let count = merged.count + l.count;
            if count > 0 {
                merged.mean_ns = (merged.mean_ns * merged.count as f64
                    + l.mean_ns * l.count as f64)
                    / count as f64;
            }
            merged.count = count;
            merged.max_ns = merged.max_ns.max(l.max_ns);
            (merged.p50_ns, merged.p95_ns, merged.p99_ns) = (l.p50_ns, l.p95_ns, l.p99_ns);
        }
    }
    out
}

/// `NAME: mean ± half-width (95% CI, n kept trials)`.
pub fn format_summary(name: &str, s: Option<Summary>) -> String {
    match s {
        Some(m) if m.ci95_half_width.is_finite() => format!(
            "{name}: {:.1} ± {:.1} (95% CI, {} kept trials)\n",
            m.mean, m.ci95_half_width, m.n
        ),
        Some(m) => format!("{name}: {:.1} (1 kept trial, no interval)\n", m.mean),
        None => format!("{name}: no kept trial\n"),
    }
}

/// A target's table: the status line, `lines` (the command's own: setup and metric), the
/// latency per operation type in µs, and the database's checks.
pub fn format_record(r: &Record, lines: &str) -> String {
    let mut s = format!("== {} on {}: {}\n", r.workload, r.target, r.status);
    let Some(result) = &r.result else {
        return s;
    };
    s += &format!("engine: {}\n", result.engine);
    s += lines;
    if !r.latency.is_empty() {
        s += &format!(
            "{:<20} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
            "operation", "count", "mean µs", "p50 µs", "p95 µs", "p99 µs", "max µs"
        );
    }
    let us = |ns: u64| ns as f64 / 1e3;
    for (op, l) in &r.latency {
        s += &format!(
            "{op:<20} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}\n",
            l.count,
            l.mean_ns / 1e3,
            us(l.p50_ns),
            us(l.p95_ns),
            us(l.p99_ns),
            us(l.max_ns)
        );
    }
    for c in &result.checks {
        s += &format!("check: {c}\n");
    }
    s
}

/// The JSON file's contents.
#[derive(Serialize)]
struct Report<'a, C: Serialize> {
    schema: &'static str,
    config: &'a C,
    records: &'a [Record],
    interrupted: bool,
}

/// Writes the JSON file and picks the exit status: 130 when interrupted, 1 when a target
/// failed or none could run, else 0.
pub fn finish<C: Serialize>(
    command: &str,
    schema: &'static str,
    json: Option<&PathBuf>,
    config: &C,
    records: &[Record],
) -> u8 {
    let interrupted = kernel::interrupted();
    let report = Report {
        schema,
        config,
        records,
        interrupted,
    };
    let runs = records
        .iter()
        .map(|r| (r.status.starts_with("failed"), r.result.is_some()));
    crate::bench_targets::finish_report(command, json, &report, interrupted, runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmfs_lab::study::database::DbTrial;

    fn lat(count: u64, mean_ns: f64, p: u64, max_ns: u64) -> OpLatency {
        OpLatency {
            count,
            mean_ns,
            p50_ns: p,
            p95_ns: p * 2,
            p99_ns: p * 3,
            max_ns,
        }
    }

    fn trial(index: usize, discarded: bool, l: OpLatency) -> DbTrial {
        DbTrial {
            index,
            discarded,
            remounted: false,
            seconds: 1.0,
            ops: l.count,
            value: l.count as f64,
            latency: BTreeMap::from([("READ".to_string(), l)]),
            fixed_load: None,
            detail: serde_json::Value::Null,
        }
    }

    #[test]
    fn kept_latency_sums_counts_weights_means_and_keeps_the_last_percentiles() {
        let r = DbResult {
            engine: "e".into(),
            metric: "ops/s".into(),
            setup_seconds: 0.0,
            setup: serde_json::Value::Null,
            trials: vec![
                trial(0, true, lat(1000, 1e6, 999, 99_999_999)),
                trial(1, false, lat(100, 1000.0, 10, 5000)),
                trial(2, false, lat(300, 2000.0, 20, 4000)),
            ],
            ops_per_sec: None,
            latency_mean_ns: BTreeMap::new(),
            stopped_early: None,
            checks: Vec::new(),
        };
        let l = kept_latency(&r)["READ"];
        assert_eq!(l.count, 400);
        assert_eq!(l.mean_ns, 1750.0);
        assert_eq!((l.p50_ns, l.p95_ns, l.p99_ns), (20, 40, 60));
        assert_eq!(l.max_ns, 5000);
    }

    #[test]
    fn sqlite_flags_apply_over_the_defaults_and_are_checked() {
        let a = SqliteArgs {
            journal_mode: Some(JournalMode::Truncate),
            synchronous: None,
            mmap_size: Some(0),
            page_size: Some(8192),
            cache_size: Some(-500),
        };
        assert!(a.given());
        let s = a.apply(SqliteSettings::default()).unwrap();
        assert_eq!(s.journal_mode, JournalMode::Truncate);
        assert_eq!(s.synchronous, SqliteSettings::default().synchronous);
        assert_eq!((s.mmap_size, s.page_size, s.cache_size), (0, 8192, -500));
        let a = SqliteArgs {
            page_size: Some(3000),
            ..a
        };
        let err = a.apply(SqliteSettings::default()).unwrap_err();
        assert!(err.contains("page size 3000"), "{err}");
    }

    #[test]
    fn a_summary_without_interval_says_so() {
        let one = Summary::of(&[5.0]);
        assert!(format_summary("tpmC", one).contains("no interval"));
        let two = Summary::of(&[5.0, 7.0]);
        assert!(format_summary("ops/s", two).contains("± "));
        assert!(format_summary("ops/s", None).contains("no kept trial"));
    }
}
