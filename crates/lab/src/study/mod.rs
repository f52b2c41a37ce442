//! `nvmfs study NAME`: a whole source study in one command.
//!
//! Each study is a module that defines a [`StudyDef`]: [`nvm2015`] holds seed 000's
//! Filebench and database workloads and findings, [`linux2002`] seed 001's filemark, pgmeter
//! and AIM7 ones. This module runs a study's workloads on nvmfs and on the kernel variants
//! of its [`targets::TargetPlan`] this machine can provision, one after the other, with the
//! run rules (fresh mkfs per workload, remount between trials, the first trial discarded,
//! 95% intervals); [`database`] and [`fsbench`] run the cells of the benchmarks other than
//! Filebench. Then [`report`] writes the results directory (with [`curves`] for the scaling
//! figures) and [`findings`] checks the paper's claims against the run.

pub mod curves;
pub mod database;
pub mod env;
pub mod filemap2021;
pub mod findings;
pub mod fsbench;
pub mod linux2002;
pub mod nvm2015;
pub mod nvmfs2013;
pub mod report;
pub mod run_nvmfs;
pub mod targets;
pub mod workload;

pub use workload::Size;

use crate::filebench::{Progress, RunConfig, RunResult};
use crate::stats::Summary;
use findings::Finding;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::PathBuf;
use std::time::Instant;
use targets::StudyTarget;
use workload::{StudyWorkload, WorkloadConfig};

/// Everything a study run needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StudyConfig {
    pub size: Size,
    /// Trials per workload and target, the first discarded.
    pub trials: usize,
    /// Filebench cells: at most this many trials more while the kept trials' 95% interval is
    /// wider than 10% of their mean (seed 001's rule, `stats::wants_another_trial`).
    #[serde(default)]
    pub extra_trials: usize,
    pub warmup_seconds: f64,
    pub run_seconds: f64,
    /// Also end a trial after this many flowops (all threads together).
    pub ops_max: Option<u64>,
    /// Target names to run (nvmfs, kernel variant names); empty = all available.
    pub only_targets: Vec<String>,
    /// Workload ids to run; empty = all.
    pub only_workloads: Vec<String>,
    /// Where images and loop-device backing files go (a tmpfs).
    pub shm_dir: PathBuf,
    /// Results directory.
    pub out_dir: PathBuf,
    /// Charts are normalised to this target.
    pub baseline: String,
    pub seed: u64,
    /// Trials and phase lengths of the database workloads (YCSB, TPC-C).
    pub db: DbPhases,
    /// Filebench trials run at a farther CPU placement than the nearest seen are set aside
    /// and run again (filebench/placement.rs).
    #[serde(default)]
    pub hold_placement: bool,
    /// How the `run:nvmfs` target starts `nvmfs run` (set by the command line).
    #[serde(skip)]
    pub runner: targets::Runner,
}

/// Trial count and lengths of the database cells. A YCSB trial has two phases of
/// `run_seconds` each (flat out, then at the fixed offered load); a TPC-C trial one of twice
/// that, so both take about as long as a Filebench trial of the same size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DbPhases {
    pub trials: usize,
    pub warmup_seconds: f64,
    pub run_seconds: f64,
}

impl StudyConfig {
    /// The settings of `--quick`, `--full` or neither.
    pub fn for_size(size: Size, out_dir: PathBuf) -> Self {
        let (trials, warmup, run) = match size {
            Size::Quick => (4, 0.3, 1.0),
            Size::Default => (4, 1.0, 5.0),
            Size::Full => (5, 5.0, 30.0),
        };
        // 84 database cells: a quick run keeps them to about 4 s each, provisioning included.
        let db = match size {
            Size::Quick => DbPhases {
                trials: 4,
                warmup_seconds: 0.1,
                run_seconds: 0.25,
            },
            Size::Default => DbPhases {
                trials: 4,
                warmup_seconds: 0.5,
                run_seconds: 2.5,
            },
            Size::Full => DbPhases {
                trials: 5,
                warmup_seconds: 2.0,
                run_seconds: 15.0,
            },
        };
        StudyConfig {
            size,
            trials,
            extra_trials: trials,
            warmup_seconds: warmup,
            run_seconds: run,
            ops_max: None,
            only_targets: Vec::new(),
            only_workloads: Vec::new(),
            shm_dir: PathBuf::from("/dev/shm"),
            out_dir,
            baseline: "ext4".into(),
            seed: 2015,
            db,
            hold_placement: true,
            runner: targets::Runner::Absent,
        }
    }
}

/// One workload on one target.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    pub workload: String,
    pub target: String,
    pub paper_name: Option<String>,
    pub status: CellStatus,
    /// Present when the run completed (possibly stopped early).
    pub result: Option<CellResult>,
    /// How the target was made (mkfs and mount lines, device, versions).
    pub provision: Option<serde_json::Value>,
    pub wall_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "snake_case")]
pub enum CellStatus {
    Ok,
    /// Ran, but a trial stopped before its limit; the reason says why.
    StoppedEarly(String),
    /// Provisioning or a flowop failed.
    Failed(String),
    Interrupted,
}

/// What a cell measured, by benchmark.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "benchmark", rename_all = "snake_case")]
pub enum CellResult {
    Filebench(RunResult),
    /// YCSB or TPC-C.
    Database(database::DbResult),
    /// filemark, pgmeter or AIM7.
    FsBench(fsbench::BenchResult),
}

impl CellResult {
    /// The headline rate over the kept trials: what the figures and ratios compare.
    pub fn ops_per_sec(&self) -> Option<Summary> {
        match self {
            CellResult::Filebench(r) => r.ops_per_sec,
            CellResult::Database(r) => r.ops_per_sec,
            CellResult::FsBench(r) => r.ops_per_sec,
        }
    }

    /// Why the run ended before its limits, if it did.
    pub fn stopped_early(&self) -> Option<&str> {
        match self {
            CellResult::Filebench(r) => r.stopped_early.as_deref(),
            CellResult::Database(r) => r.stopped_early.as_deref(),
            CellResult::FsBench(r) => r.stopped_early.as_deref(),
        }
    }

    /// The Filebench run, when the cell was one.
    pub fn filebench(&self) -> Option<&RunResult> {
        match self {
            CellResult::Filebench(r) => Some(r),
            _ => None,
        }
    }

    /// The YCSB or TPC-C run, when the cell was one.
    pub fn database(&self) -> Option<&database::DbResult> {
        match self {
            CellResult::Database(r) => Some(r),
            _ => None,
        }
    }

    /// The filemark, pgmeter or AIM7 run, when the cell was one.
    pub fn fsbench(&self) -> Option<&fsbench::BenchResult> {
        match self {
            CellResult::FsBench(r) => Some(r),
            _ => None,
        }
    }

    /// What [`CellResult::ops_per_sec`] counts.
    pub fn metric(&self) -> &str {
        match self {
            CellResult::Filebench(_) => "ops/s",
            CellResult::Database(r) => &r.metric,
            CellResult::FsBench(r) => &r.metric,
        }
    }
}

impl Cell {
    pub fn ops_per_sec(&self) -> Option<Summary> {
        self.result.as_ref().and_then(CellResult::ops_per_sec)
    }
}

/// A source study the lab reproduces: each is a module (like [`nvm2015`]) that defines one.
pub struct StudyDef {
    /// The name `nvmfs study NAME` takes, e.g. `nvm-2015`.
    pub name: &'static str,
    /// The heading of report.md after the name.
    pub title: &'static str,
    /// The run settings of `--quick`, `--full` or neither (trials, phase lengths,
    /// baseline), before the command line's overrides.
    pub config: fn(Size, PathBuf) -> StudyConfig,
    /// Which targets it runs and what the paper called them.
    pub targets: &'static targets::TargetPlan,
    /// How a run here differs from the paper's testbed (environment.json, report.md).
    pub emulation: fn() -> Vec<String>,
    /// Every workload (bar group) at a size, in the order they run.
    pub workloads: fn(Size) -> Vec<StudyWorkload>,
    /// The paper's findings a run can check.
    pub findings: fn() -> Vec<Finding>,
    /// The opening paragraphs of report.md.
    pub intro: fn(&StudyResult) -> String,
}

impl std::fmt::Debug for StudyDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every study `nvmfs study` knows.
pub const STUDIES: &[&StudyDef] = &[&nvm2015::STUDY, &linux2002::STUDY];

/// The study called `name`.
pub fn find(name: &str) -> Option<&'static StudyDef> {
    STUDIES.iter().copied().find(|s| s.name == name)
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct StudyResult {
    /// Which study ran.
    #[serde(skip)]
    pub study: &'static StudyDef,
    pub config: StudyConfig,
    pub workloads: Vec<StudyWorkload>,
    pub targets: Vec<targets::TargetEntry>,
    pub cells: Vec<Cell>,
    pub interrupted: bool,
    pub wall_seconds: f64,
}

/// Live progress of a study.
pub trait StudyProgress {
    fn cell_started(&mut self, index: usize, total: usize, workload: &str, target: &str);
    fn note(&mut self, msg: &str);
    fn tick(&mut self, trial: usize, trials: usize, ops_per_sec: f64, measuring: bool);
    fn cell_done(&mut self, cell: &Cell);
}

/// Runs a study's workloads over every available target.
pub fn run_study(
    study: &'static StudyDef,
    cfg: &StudyConfig,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<StudyResult> {
    let start = Instant::now();
    let workloads: Vec<StudyWorkload> = (study.workloads)(cfg.size)
        .into_iter()
        .filter(|w| cfg.only_workloads.is_empty() || cfg.only_workloads.contains(&w.id))
        .collect();
    if workloads.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "no workload selected; known: {}",
                (study.workloads)(cfg.size)
                    .iter()
                    .map(|w| w.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let device_bytes = targets::device_size_bytes(&workloads);
    let target_list =
        targets::discover_for(study.targets, device_bytes, &cfg.only_targets, &cfg.runner)?;
    for t in target_list.iter().filter(|t| t.unavailable.is_some()) {
        progress.note(&format!(
            "{}: unavailable: {}",
            t.name,
            t.unavailable.as_deref().unwrap_or("")
        ));
    }
    let runnable: Vec<&targets::TargetEntry> = target_list
        .iter()
        .filter(|t| t.unavailable.is_none())
        .collect();
    let total = workloads.len() * runnable.len();
    let mut cells = Vec::new();
    'all: for w in &workloads {
        for t in &runnable {
            if interrupted() {
                break 'all;
            }
            progress.cell_started(cells.len(), total, &w.id, &t.name);
            let cell = match (&cfg.runner, t.is_run()) {
                (targets::Runner::Binary(bin), true) => run_nvmfs::run_cell(
                    study.name,
                    cfg,
                    w,
                    t,
                    bin.as_path(),
                    device_bytes,
                    progress,
                ),
                _ => run_cell(cfg, w, t, device_bytes, interrupted, progress),
            };
            progress.cell_done(&cell);
            cells.push(cell);
        }
    }
    Ok(StudyResult {
        study,
        config: cfg.clone(),
        workloads,
        targets: target_list,
        cells,
        interrupted: interrupted(),
        wall_seconds: start.elapsed().as_secs_f64(),
    })
}

/// Fresh file system, populate, trials, teardown: one bar of a figure.
fn run_cell(
    cfg: &StudyConfig,
    w: &StudyWorkload,
    t: &targets::TargetEntry,
    device_bytes: u64,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> Cell {
    let start = Instant::now();
    let mut provision = None;
    let outcome = match &w.config {
        WorkloadConfig::Filebench(f) => run_filebench_cell(
            cfg,
            &f.personality,
            t,
            device_bytes,
            &mut provision,
            interrupted,
            progress,
        )
        .map(CellResult::Filebench),
        WorkloadConfig::Ycsb(y) => database::run_ycsb_cell(
            y,
            t,
            &db_rules(cfg, device_bytes),
            &mut provision,
            interrupted,
            progress,
        )
        .map(CellResult::Database),
        WorkloadConfig::Tpcc(c) => database::run_tpcc_cell(
            c,
            t,
            &db_rules(cfg, device_bytes),
            &mut provision,
            interrupted,
            progress,
        )
        .map(CellResult::Database),
        WorkloadConfig::Filemark(f) => fsbench::run_filemark_cell(
            f,
            t,
            &fs_rules(cfg, device_bytes),
            &mut provision,
            interrupted,
            progress,
        )
        .map(CellResult::FsBench),
        WorkloadConfig::Pgmeter(p) => fsbench::run_pgmeter_cell(
            p,
            t,
            &fs_rules(cfg, device_bytes),
            &mut provision,
            interrupted,
            progress,
        )
        .map(CellResult::FsBench),
        WorkloadConfig::Aim7(a) => fsbench::run_aim7_cell(
            a,
            t,
            &fs_rules(cfg, device_bytes),
            &mut provision,
            interrupted,
            progress,
        )
        .map(CellResult::FsBench),
    };
    let status = match &outcome {
        Ok(r) => match r.stopped_early() {
            Some(why) if why.starts_with("interrupted") => CellStatus::Interrupted,
            Some(why) => CellStatus::StoppedEarly(why.to_string()),
            None => CellStatus::Ok,
        },
        Err(_) if interrupted() => CellStatus::Interrupted,
        Err(e) => CellStatus::Failed(e.to_string()),
    };
    Cell {
        workload: w.id.clone(),
        target: t.name.clone(),
        paper_name: t.paper_name.clone(),
        status,
        result: outcome.ok(),
        provision,
        wall_seconds: start.elapsed().as_secs_f64(),
    }
}

/// The run rules of a database cell.
fn db_rules(cfg: &StudyConfig, device_bytes: u64) -> database::Rules<'_> {
    database::Rules {
        trials: cfg.db.trials,
        warmup_seconds: cfg.db.warmup_seconds,
        run_seconds: cfg.db.run_seconds,
        seed: cfg.seed,
        shm_dir: &cfg.shm_dir,
        device_bytes,
    }
}

/// The run rules of a filemark, pgmeter or AIM7 cell: the study's trials and phases.
fn fs_rules(cfg: &StudyConfig, device_bytes: u64) -> fsbench::Rules<'_> {
    fsbench::Rules {
        trials: cfg.trials,
        warmup_seconds: cfg.warmup_seconds,
        run_seconds: cfg.run_seconds,
        ops_max: cfg.ops_max,
        seed: cfg.seed,
        shm_dir: &cfg.shm_dir,
        device_bytes,
    }
}

/// The Filebench run of a personality under the study's rules.
fn filebench_run(
    cfg: &StudyConfig,
    personality: &crate::filebench::PersonalityConfig,
) -> RunConfig {
    RunConfig {
        personality: personality.clone(),
        trials: cfg.trials,
        extra_trials: cfg.extra_trials,
        warmup_seconds: cfg.warmup_seconds,
        run_seconds: cfg.run_seconds,
        ops_max: cfg.ops_max,
        seed: cfg.seed,
        hold_placement: cfg.hold_placement,
    }
}

/// A Filebench personality on a fresh target; `provision` receives how it was made.
fn run_filebench_cell(
    cfg: &StudyConfig,
    personality: &crate::filebench::PersonalityConfig,
    t: &targets::TargetEntry,
    device_bytes: u64,
    provision: &mut Option<serde_json::Value>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<RunResult> {
    let run_cfg = filebench_run(cfg, personality);
    StudyTarget::create(t, &cfg.shm_dir, device_bytes, &run_cfg).and_then(|target| {
        *provision = Some(target.describe());
        let mut on_progress = |p: Progress<'_>| match p {
            Progress::Setup(msg) => progress.note(msg),
            Progress::Trial { index, total, tick } => {
                progress.tick(index, total, tick.ops_per_sec, tick.measuring)
            }
            Progress::TrialDone(_) => {}
        };
        target.run_and_close(&run_cfg, interrupted, &mut on_progress)
    })
}

#[cfg(test)]
pub(crate) mod tests;
