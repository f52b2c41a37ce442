//! Seed 001's benchmarks as study cells (Bryant et al., 2002): filemark (multithreaded
//! Postmark), pgmeter (Iometer's access specifications) and AIM7's disk subtests, each on a
//! fresh target, with the paper's run rules as far as the lab's trials carry them:
//!
//! - **filemark** (section 5.2): one creation phase, then `trials` transaction phases, each
//!   ending with a remount; the first phase is discarded and the rest give the mean and the
//!   95% interval. A phase is a number of transactions (the paper: 2 minutes), and the file
//!   system is made afresh for every thread count (a cell per thread count). A phase's rate
//!   is all its transactions over its wall time, with no warm-up transactions (the discarded
//!   first phase takes the start-up effects): filemark's own rate, the sum of each thread's
//!   rate over its own time, overstates throughput when threads outnumber cores and their
//!   shares are short, since the threads then run one after another (it is kept in the raw
//!   results as `per_second`).
//! - **pgmeter** (sections 3.1, 5.1): `trials` tests on the same preallocated files, each
//!   starting with a remount (pgmeter's own cache flush), then a warm-up and a measured
//!   phase; the first test is discarded as in every study cell. The paper took its interval
//!   from one 5-minute test's 10-second intervals, which are autocorrelated; independent
//!   tests after a remount are the lab's rule, and every test's own intervals (a tenth of
//!   its measured phase each) are kept in the raw results.
//! - **AIM7** (section 5.3): `trials` whole sweeps over the task counts, each after a
//!   remount (the first on the fresh file system), the first discarded. The study bounds
//!   each subrun by time (tasks start fresh job lists until the period is over) rather than
//!   by one list per task as AIM7 does: a list takes milliseconds on nvmfs and seconds on a
//!   journaling file system doing O_SYNC writes, and a time bound gives every subrun enough
//!   jobs to time and the same length on every target. The cell's curve is
//!   the mean jobs/minute at each task count over the kept sweeps, its headline the peak of
//!   that curve with the interval of that point. One cell runs the whole sweep, not one cell
//!   per task count: AIM7's result is where its curve peaks, which only a sweep on one file
//!   system shows (the paper ran one sweep per file system and CPU count and judged
//!   anomalies from the curve's shape); repeating the sweep gives the intervals.

use super::database::closing;
use super::targets::{ImageSpec, StudyTarget, TargetEntry, TargetVisitor};
use super::StudyProgress;
use crate::aim7::{self, Aim7Config, Aim7Result};
use crate::filebench::LabTarget;
use crate::pgmeter::{self, AccessSpec, PgmeterConfig, PgmeterResult};
use crate::postmark::{filemark, FilemarkConfig, FilemarkResult};
use crate::stats::Summary;
use crate::targets::api::MicroFs;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;

const MIB: u64 = 1 << 20;

/// filemark as a study workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FilemarkWorkload {
    /// Threads, files, transactions per phase and the rest. The study sets `phases` (its
    /// trials) and `seed` when it runs, its op limit caps `transactions`, and it runs no
    /// warm-up transactions (see the module's notes).
    pub config: FilemarkConfig,
    /// The paper's file count for this workload.
    pub paper_files: u32,
}

/// A pgmeter test case as a study workload; the warm-up, measured phase, op limit and seed
/// are the study's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PgmeterWorkload {
    pub spec: AccessSpec,
    /// Test files (the paper: one per disk).
    pub files: usize,
    pub file_size_bytes: u64,
    /// Outstanding I/Os per file, each a thread.
    pub outstanding: usize,
}

/// An AIM7 sweep as a study workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Aim7Workload {
    pub config: Aim7Config,
}

/// How a cell runs: trial count, phase lengths and where targets are made.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// filemark's transaction phases, pgmeter's tests, AIM7's sweeps; the first discarded.
    pub trials: usize,
    /// pgmeter's warm-up.
    pub warmup_seconds: f64,
    /// pgmeter's measured phase.
    pub run_seconds: f64,
    /// Caps pgmeter's measured I/Os and filemark's transactions per phase.
    pub ops_max: Option<u64>,
    pub seed: u64,
    pub shm_dir: &'a Path,
    pub device_bytes: u64,
}

/// Which benchmark a cell ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Program {
    Filemark,
    Pgmeter,
    Aim7,
}

/// What a filemark, pgmeter or AIM7 cell measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchResult {
    pub program: Program,
    /// What `ops_per_sec` counts: `transactions/s`, `ops/s` or `jobs/min`.
    pub metric: String,
    /// filemark's creation phase or pgmeter's preallocation (AIM7: none).
    pub setup_seconds: f64,
    pub setup: serde_json::Value,
    pub trials: Vec<BenchTrial>,
    /// The headline over the kept trials: filemark's transactions/s, pgmeter's ops/s,
    /// AIM7's jobs/minute at the peak of the mean curve.
    pub ops_per_sec: Option<Summary>,
    /// Mean MB/s (2^20 bytes) moved over the kept trials.
    pub mb_per_sec: Option<f64>,
    /// AIM7's curve: jobs/minute at each task count over the kept sweeps.
    pub sweep: Option<Sweep>,
    pub stopped_early: Option<String>,
}

/// One trial: a filemark transaction phase, a pgmeter test or an AIM7 sweep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchTrial {
    pub index: usize,
    pub discarded: bool,
    /// Whether the file system was remounted (caches dropped) just before it.
    pub remounted: bool,
    pub seconds: f64,
    /// Transactions, I/Os or jobs.
    pub ops: u64,
    /// The metric: transactions/s, ops/s, or the sweep's own peak jobs/minute.
    pub value: f64,
    pub mb_per_sec: f64,
    /// The benchmark's own record of the trial.
    pub detail: serde_json::Value,
}

/// A curve measured inside a cell (AIM7's table of subruns).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sweep {
    /// What x counts, e.g. `tasks`.
    pub x_label: String,
    pub points: Vec<SweepPoint>,
    /// The x of the highest mean, which the headline reports.
    pub peak_x: Option<f64>,
}

/// One point of a [`Sweep`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct SweepPoint {
    pub x: f64,
    pub value: Summary,
}

impl BenchResult {
    /// The curve this cell measured, if it measured one.
    pub fn sweep(&self) -> Option<&Sweep> {
        self.sweep.as_ref()
    }
}

/// The filemark run of a workload under `rules`: its phases are the trials, without
/// warm-up transactions, its transactions capped by the op limit.
pub fn filemark_config(w: &FilemarkWorkload, rules: &Rules<'_>) -> io::Result<FilemarkConfig> {
    let mut c = w.config.clone();
    c.phases = u32::try_from(rules.trials).unwrap_or(u32::MAX);
    // filemark's seeds are Postmark's (1 ..= i32::MAX, thread i uses seed + i).
    c.seed = (rules.seed % 1_000_000) as u32 + 1;
    c.warmup_transactions = 0;
    if let Some(n) = rules.ops_max {
        c.transactions = c
            .transactions
            .min(u32::try_from(n).unwrap_or(u32::MAX).max(1));
    }
    c.validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("filemark: {e}")))?;
    Ok(c)
}

/// The nvmfs image for a filemark workload: room for every file at its largest three
/// times over (the file count drifts while creates and deletes balance) and 256 MiB.
pub fn filemark_image(c: &FilemarkConfig) -> ImageSpec {
    let data = u64::from(c.files) * u64::from(c.size_high) * 3;
    let dirs = u64::from(c.threads) * (u64::from(c.subdirectories) + 1);
    ImageSpec {
        bytes: round_up(data + 256 * MIB, 64 * MIB),
        inodes: (u64::from(c.files) * 4 + dirs + 4096).next_power_of_two(),
    }
}

/// The pgmeter test of a workload under `rules`, for trial `index`.
pub fn pgmeter_config(w: &PgmeterWorkload, rules: &Rules<'_>, index: usize) -> PgmeterConfig {
    PgmeterConfig {
        spec: w.spec.clone(),
        files: w.files,
        file_size_bytes: w.file_size_bytes,
        outstanding: w.outstanding,
        warmup_seconds: rules.warmup_seconds,
        run_seconds: rules.run_seconds,
        ops_max: rules.ops_max,
        // pgmeter recorded 10-second intervals of 5-minute tests: a tenth of the phase.
        interval_seconds: rules.run_seconds / 10.0,
        seed: rules.seed ^ (index as u64 + 1),
    }
}

/// The nvmfs image for a pgmeter workload: its files and 256 MiB.
pub fn pgmeter_image(w: &PgmeterWorkload) -> ImageSpec {
    ImageSpec {
        bytes: round_up(w.files as u64 * w.file_size_bytes + 256 * MIB, 64 * MIB),
        inodes: 4096,
    }
}

/// The nvmfs image for an AIM7 sweep: each task's temporary file and the shared one at
/// the largest subrun's size, twice over, and 256 MiB.
pub fn aim7_image(c: &Aim7Config) -> ImageSpec {
    let tasks = c.task_counts.iter().copied().max().unwrap_or(1) as u64;
    let kib = c
        .task_counts
        .iter()
        .map(|&t| u64::from(c.file_kib(t)))
        .max()
        .unwrap_or(0);
    ImageSpec {
        bytes: round_up((tasks + 1) * kib * 1024 * 2 + 256 * MIB, 64 * MIB),
        inodes: (tasks * 4 + 4096).next_power_of_two(),
    }
}

/// Bytes a workload keeps on its file system at most (the kernel devices are sized from it).
pub fn footprint_bytes(config: &super::workload::WorkloadConfig) -> u64 {
    use super::workload::WorkloadConfig as W;
    match config {
        W::Filemark(w) => u64::from(w.config.files) * u64::from(w.config.size_high) * 2,
        W::Pgmeter(w) => w.files as u64 * w.file_size_bytes,
        W::Aim7(w) => aim7_image(&w.config).bytes,
        W::Filebench(_) | W::Ycsb(_) | W::Tpcc(_) => 0,
    }
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

struct FilemarkJob<'a> {
    cfg: &'a FilemarkConfig,
    interrupted: &'a dyn Fn() -> bool,
}

impl TargetVisitor for FilemarkJob<'_> {
    type Output = io::Result<FilemarkResult>;

    fn visit<T: LabTarget>(self, target: &mut T) -> io::Result<FilemarkResult>
    where
        <T::Fs as MicroFs>::Name: Send + Sync,
        <T::Fs as MicroFs>::File: Send,
    {
        filemark::run(target, self.cfg, self.interrupted)
    }
}

/// Runs filemark on a fresh `t`.
pub fn run_filemark_cell(
    w: &FilemarkWorkload,
    t: &TargetEntry,
    rules: &Rules<'_>,
    provision: &mut Option<serde_json::Value>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<BenchResult> {
    let cfg = filemark_config(w, rules)?;
    let target =
        StudyTarget::create_sized(t, rules.shm_dir, rules.device_bytes, filemark_image(&cfg))?;
    *provision = Some(target.describe());
    progress.note(&format!(
        "filemark: {} files on {} thread(s), {} phases of {} transactions",
        cfg.files, cfg.threads, cfg.phases, cfg.transactions
    ));
    let r = closing(target, |t| {
        t.visit(FilemarkJob {
            cfg: &cfg,
            interrupted,
        })
    })?;
    Ok(filemark_result(r))
}

/// A filemark run as trials: each transaction phase is one, preceded by the remount that
/// ended the phase (or the creation) before it, its value all its transactions over its
/// wall time.
fn filemark_result(r: FilemarkResult) -> BenchResult {
    let n = r.transaction_phases.len();
    let mut remounted_before = r.creation.remounted;
    let mut trials = Vec::with_capacity(n);
    for (index, p) in r.transaction_phases.iter().enumerate() {
        let bytes = p.counts.bytes_read + p.counts.bytes_written;
        trials.push(BenchTrial {
            index,
            // filemark's own rule, which its summary follows.
            discarded: n > 1 && index == 0,
            remounted: remounted_before,
            seconds: p.wall_seconds,
            ops: p.transactions,
            value: rate(p.transactions as f64, p.wall_seconds),
            mb_per_sec: rate(bytes as f64 / MIB as f64, p.wall_seconds),
            detail: serde_json::to_value(p).unwrap_or_default(),
        });
        remounted_before = p.remounted;
    }
    let setup = serde_json::json!({
        "files_per_thread": r.files_per_thread,
        "transactions_per_thread": r.transactions_per_thread,
        "creation": r.creation,
    });
    BenchResult {
        program: Program::Filemark,
        metric: "transactions/s".into(),
        setup_seconds: r.creation.wall_seconds,
        setup,
        mb_per_sec: kept_mean(&trials, |t| t.mb_per_sec),
        ops_per_sec: kept_summary(&trials),
        trials,
        sweep: None,
        stopped_early: r.stopped_early,
    }
}

fn rate(amount: f64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        amount / seconds
    } else {
        0.0
    }
}

/// The trials' values over the kept ones.
fn kept_summary(trials: &[BenchTrial]) -> Option<Summary> {
    let kept: Vec<f64> = trials
        .iter()
        .filter(|t| !t.discarded)
        .map(|t| t.value)
        .collect();
    Summary::of(&kept)
}

fn kept_mean(trials: &[BenchTrial], f: impl Fn(&BenchTrial) -> f64) -> Option<f64> {
    let kept: Vec<f64> = trials.iter().filter(|t| !t.discarded).map(f).collect();
    (!kept.is_empty()).then(|| kept.iter().sum::<f64>() / kept.len() as f64)
}

struct PgmeterJob<'a> {
    cfg: &'a PgmeterConfig,
    interrupted: &'a dyn Fn() -> bool,
    progress: &'a mut dyn FnMut(pgmeter::Progress<'_>),
}

impl TargetVisitor for PgmeterJob<'_> {
    type Output = io::Result<PgmeterResult>;

    fn visit<T: LabTarget>(self, target: &mut T) -> io::Result<PgmeterResult>
    where
        <T::Fs as MicroFs>::Name: Send + Sync,
        <T::Fs as MicroFs>::File: Send,
    {
        pgmeter::run(target, self.cfg, self.interrupted, self.progress)
    }
}

/// Runs a pgmeter workload's tests on a fresh `t`.
pub fn run_pgmeter_cell(
    w: &PgmeterWorkload,
    t: &TargetEntry,
    rules: &Rules<'_>,
    provision: &mut Option<serde_json::Value>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<BenchResult> {
    pgmeter_config(w, rules, 0)
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("pgmeter: {e}")))?;
    let target = StudyTarget::create_sized(t, rules.shm_dir, rules.device_bytes, pgmeter_image(w))?;
    *provision = Some(target.describe());
    closing(target, |target| {
        pgmeter_trials(target, w, rules, interrupted, progress)
    })
}

fn pgmeter_trials(
    target: &mut StudyTarget,
    w: &PgmeterWorkload,
    rules: &Rules<'_>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<BenchResult> {
    let mut trials = Vec::new();
    let mut stopped_early = None;
    let mut setup = (0.0, serde_json::Value::Null);
    for index in 0..rules.trials {
        if interrupted() {
            stopped_early = Some("interrupted".to_string());
            break;
        }
        let cfg = pgmeter_config(w, rules, index);
        let mut on_progress = |p: pgmeter::Progress<'_>| match p {
            pgmeter::Progress::Setup(msg) => progress.note(msg),
            pgmeter::Progress::Tick(t) => {
                progress.tick(index, rules.trials, t.ops_per_sec, t.measuring)
            }
        };
        let r = target.visit(PgmeterJob {
            cfg: &cfg,
            interrupted,
            progress: &mut on_progress,
        })?;
        if index == 0 {
            setup = (
                r.prepared.seconds,
                serde_json::to_value(r.prepared).unwrap_or_default(),
            );
        }
        let stop = r.stopped_early.clone();
        trials.push(BenchTrial {
            index,
            discarded: rules.trials > 1 && index == 0,
            remounted: r.remounted,
            seconds: r.seconds,
            ops: r.ops,
            value: r.ops_per_sec,
            mb_per_sec: r.mb_per_sec,
            detail: serde_json::to_value(&r).unwrap_or_default(),
        });
        if stop.is_some() {
            stopped_early = stop;
            break;
        }
    }
    Ok(BenchResult {
        program: Program::Pgmeter,
        metric: "ops/s".into(),
        setup_seconds: setup.0,
        setup: setup.1,
        ops_per_sec: kept_summary(&trials),
        mb_per_sec: kept_mean(&trials, |t| t.mb_per_sec),
        trials,
        sweep: None,
        stopped_early,
    })
}

struct Aim7Job<'a> {
    cfg: &'a Aim7Config,
    /// Remount before the sweep (every sweep but the first, which has a fresh file system).
    remount: bool,
    interrupted: &'a dyn Fn() -> bool,
    progress: &'a mut dyn FnMut(aim7::Progress<'_>),
}

impl TargetVisitor for Aim7Job<'_> {
    type Output = io::Result<(bool, Aim7Result)>;

    fn visit<T: LabTarget>(self, target: &mut T) -> io::Result<(bool, Aim7Result)>
    where
        <T::Fs as MicroFs>::Name: Send + Sync,
        <T::Fs as MicroFs>::File: Send,
    {
        let remounted = self.remount && target.remount()?;
        let r = aim7::run(target.fs(), self.cfg, self.interrupted, self.progress)?;
        Ok((remounted, r))
    }
}

/// Runs an AIM7 workload's sweeps on a fresh `t`.
pub fn run_aim7_cell(
    w: &Aim7Workload,
    t: &TargetEntry,
    rules: &Rules<'_>,
    provision: &mut Option<serde_json::Value>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<BenchResult> {
    w.config
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("AIM7: {e}")))?;
    let target =
        StudyTarget::create_sized(t, rules.shm_dir, rules.device_bytes, aim7_image(&w.config))?;
    *provision = Some(target.describe());
    closing(target, |target| {
        aim7_sweeps(target, w, rules, interrupted, progress)
    })
}

fn aim7_sweeps(
    target: &mut StudyTarget,
    w: &Aim7Workload,
    rules: &Rules<'_>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<BenchResult> {
    let mut trials = Vec::new();
    let mut kept_sweeps = Vec::new();
    let mut stopped_early = None;
    for index in 0..rules.trials {
        if interrupted() {
            stopped_early = Some("interrupted".to_string());
            break;
        }
        let mut on_progress = |p: aim7::Progress<'_>| match p {
            aim7::Progress::Setup(msg) => progress.note(msg),
            aim7::Progress::Subrun(s) => {
                progress.tick(index, rules.trials, s.jobs_per_minute, true)
            }
        };
        let (remounted, r) = target.visit(Aim7Job {
            cfg: &w.config,
            remount: index > 0,
            interrupted,
            progress: &mut on_progress,
        })?;
        let discarded = rules.trials > 1 && index == 0;
        trials.push(aim7_trial(index, discarded, remounted, &r));
        let stop = r.stopped_early.clone();
        if !discarded && stop.is_none() {
            kept_sweeps.push(r);
        }
        if stop.is_some() {
            stopped_early = stop;
            break;
        }
    }
    let sweep = aim7_curve(&kept_sweeps);
    let headline = sweep
        .peak_x
        .and_then(|x| sweep.points.iter().find(|p| p.x == x))
        .map(|p| p.value);
    Ok(BenchResult {
        program: Program::Aim7,
        metric: "jobs/min".into(),
        setup_seconds: 0.0,
        setup: serde_json::Value::Null,
        ops_per_sec: headline,
        mb_per_sec: kept_mean(&trials, |t| t.mb_per_sec),
        trials,
        sweep: Some(sweep),
        stopped_early,
    })
}

/// A sweep as a trial: its jobs and time over all subruns, its own peak as the value.
fn aim7_trial(index: usize, discarded: bool, remounted: bool, r: &Aim7Result) -> BenchTrial {
    let seconds: f64 = r.subruns.iter().map(|s| s.seconds).sum();
    let bytes: u64 = r.subruns.iter().map(|s| s.read_bytes + s.write_bytes).sum();
    BenchTrial {
        index,
        discarded,
        remounted,
        seconds,
        ops: r.subruns.iter().map(|s| s.jobs).sum(),
        value: r.peak.map_or(0.0, |p| p.jobs_per_minute),
        mb_per_sec: rate(bytes as f64 / MIB as f64, seconds),
        detail: serde_json::to_value(r).unwrap_or_default(),
    }
}

/// Jobs/minute at each task count over the sweeps that completed, and the peak of the means.
fn aim7_curve(sweeps: &[Aim7Result]) -> Sweep {
    let mut tasks: Vec<usize> = sweeps
        .iter()
        .flat_map(|r| r.subruns.iter().map(|s| s.tasks))
        .collect();
    tasks.sort_unstable();
    tasks.dedup();
    let points: Vec<SweepPoint> = tasks
        .into_iter()
        .filter_map(|n| {
            let values: Vec<f64> = sweeps
                .iter()
                .flat_map(|r| r.subruns.iter())
                .filter(|s| s.tasks == n && s.stopped_early.is_none())
                .map(|s| s.jobs_per_minute)
                .collect();
            Summary::of(&values).map(|value| SweepPoint { x: n as f64, value })
        })
        .collect();
    let peak_x = points
        .iter()
        .max_by(|a, b| a.value.mean.total_cmp(&b.value.mean))
        .map(|p| p.x);
    Sweep {
        x_label: "tasks".into(),
        points,
        peak_x,
    }
}
