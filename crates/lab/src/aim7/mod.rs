//! AIM Suite VII's disk subtests and its multiuser model, on any lab target.
//!
//! [`subtests`] holds the nine disk subtests of AIM7's `disk1.c` (disk_rr, disk_rw, disk_rd,
//! disk_wrt, disk_cp, sync_disk_rw, sync_disk_wrt, sync_disk_cp, sync_disk_update), each
//! doing that subtest's calls and sizes on a [`MicroFs`]; [`rand`] is AIM7's random number
//! generator; [`mix`] the workfile (weighted subtests) and each task's list of jobs;
//! [`subrun`] one subrun of N simultaneous tasks. [`run`] is AIM7's run: a sweep over task
//! counts, jobs/minute for each and the peak, the headline AIM7 result (seed 001 reports the
//! peak jobs/minute of each file system).
//!
//! As in AIM7's `multitask.c`, a **job** is one subtest run; each task runs a list of
//! `jobs_per_task` jobs (`LOADNUM`, 100) drawn from the mix by weight, in random order; a
//! subrun ends when every task has finished its list, and jobs/minute = jobs completed x 60 /
//! the subrun's seconds; jobs/min/task = jobs/minute / tasks.

pub mod mix;
pub mod rand;
pub mod subrun;
pub mod subtests;

pub use mix::{disk_mix, parse_mix, MixEntry};
pub use subrun::{SubrunResult, SubtestStats};
pub use subtests::{Moved, Subtest, Task};

use crate::targets::api::MicroFs;
use serde::Serialize;
use std::io;
use std::time::Duration;

/// The directory the tasks work in, relative to the target's root (AIM7's one disk
/// directory from its config file).
pub const DIR: &str = "aim7";

/// The most simultaneous tasks (threads) of a subrun.
pub const TASKS_MAX: usize = 4096;
/// The largest test file, KiB (4 GiB).
const FILE_KIB_MAX: u32 = 4 << 20;

/// An AIM7 run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Aim7Config {
    /// The workfile's weighted subtests.
    pub mix: Vec<MixEntry>,
    /// `FILESIZE`: the test file size in KiB (AIM7: "normally 1 megabyte").
    pub filesize_kib: u32,
    /// `POOLSIZE`: KiB shared by the tasks: each subrun's file size is FILESIZE + POOLSIZE /
    /// tasks. 0 keeps the file size fixed.
    pub poolsize_kib: u32,
    /// Jobs in each task's list (`LOADNUM`).
    pub jobs_per_task: u32,
    /// The task counts of the sweep, increasing.
    pub task_counts: Vec<usize>,
    /// None: each task runs its list once and the subrun ends with the last task (AIM7).
    /// Some: tasks run fresh lists until this many seconds have passed.
    pub period_seconds: Option<f64>,
    /// Added to each task's `aim_srand` seed (its number); 0 is AIM7's seeding.
    pub seed: u64,
}

impl Aim7Config {
    /// The disk mix with AIM7's defaults (1 MiB files, no pool, 100 jobs per task), task
    /// counts 1, 2, 4, ... up to `max_tasks`.
    pub fn new(max_tasks: usize) -> Self {
        Aim7Config {
            mix: disk_mix(),
            filesize_kib: 1024,
            poolsize_kib: 0,
            jobs_per_task: 100,
            task_counts: doubling(max_tasks),
            period_seconds: None,
            seed: 0,
        }
    }

    /// `disk_iteration_count` of a subrun with `tasks` tasks.
    pub fn file_kib(&self, tasks: usize) -> u32 {
        let share = u64::from(self.poolsize_kib) / tasks.max(1) as u64;
        (u64::from(self.filesize_kib) + share).min(u64::from(u32::MAX)) as u32
    }

    /// Checks the mix, the job count, the task counts (increasing, 1..=4096), every subrun's
    /// file size (2 KiB ..= 4 GiB) and the period, naming the bad value.
    pub fn validate(&self) -> Result<(), String> {
        mix::validate_mix(&self.mix)?;
        if !(1..=100_000).contains(&self.jobs_per_task) {
            return Err(format!(
                "jobs per task must be 1..=100000, got {}",
                self.jobs_per_task
            ));
        }
        self.validate_counts()?;
        for &tasks in &self.task_counts {
            let kib = self.file_kib(tasks);
            if !(subtests::MIN_BLOCKS..=FILE_KIB_MAX).contains(&kib) {
                return Err(format!(
                    "the file size with {tasks} tasks is {kib} KiB; it must be {}..={FILE_KIB_MAX}",
                    subtests::MIN_BLOCKS
                ));
            }
        }
        match self.period_seconds {
            Some(p) if !(p.is_finite() && p > 0.0 && p <= 86_400.0) => {
                Err(format!("period seconds must be > 0 and <= 86400, got {p}"))
            }
            _ => Ok(()),
        }
    }

    fn validate_counts(&self) -> Result<(), String> {
        if self.task_counts.is_empty() {
            return Err("no task counts to run".into());
        }
        if let Some(&t) = self
            .task_counts
            .iter()
            .find(|&&t| !(1..=TASKS_MAX).contains(&t))
        {
            return Err(format!("task counts must be 1..={TASKS_MAX}, got {t}"));
        }
        if self.task_counts.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!("task counts must increase: {:?}", self.task_counts));
        }
        Ok(())
    }
}

/// 1, 2, 4, ... while below `max`, then `max` itself (nothing for 0).
pub fn doubling(max: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |&n| n.checked_mul(2))
        .take_while(|&n| n < max)
        .collect();
    if max > 0 {
        v.push(max);
    }
    v
}

/// The best subrun of a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Peak {
    pub tasks: usize,
    pub jobs_per_minute: f64,
    pub jobs_per_minute_per_task: f64,
}

/// An AIM7 run's table and its peak.
#[derive(Debug, Clone, Serialize)]
pub struct Aim7Result {
    pub subruns: Vec<SubrunResult>,
    /// The highest jobs/minute of the subruns that ran to the end (AIM7's headline).
    pub peak: Option<Peak>,
    pub stopped_early: Option<String>,
}

/// What [`run`] reports while it works.
pub enum Progress<'a> {
    Setup(&'a str),
    Subrun(&'a SubrunResult),
}

/// Runs the sweep on `fs`: for each task count, `tmpa.common` made at that subrun's file
/// size (once when it does not change), `sync()` (AIM7 runs `sync;sync;sync` before each
/// subrun), then the subrun. `tmpa.common` is removed at the end.
pub fn run<F>(
    fs: &F,
    cfg: &Aim7Config,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> io::Result<Aim7Result>
where
    F: MicroFs + Sync,
    F::Name: Sync,
{
    cfg.validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    match fs.mkdir(&fs.name(DIR)) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            return Err(io::Error::new(e.kind(), format!("mkdir {DIR}: {e}")))
        }
        _ => {}
    }
    let common = fs.name(&format!("{DIR}/{}", subtests::COMMON_FILE));
    let result = sweep(fs, cfg, &common, interrupted, progress);
    let removed = fs.unlink(&common);
    let result = result?;
    match removed {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io::Error::new(
            e.kind(),
            format!("removing {}: {e}", subtests::COMMON_FILE),
        )),
        _ => Ok(result),
    }
}

fn sweep<F>(
    fs: &F,
    cfg: &Aim7Config,
    common: &F::Name,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> io::Result<Aim7Result>
where
    F: MicroFs + Sync,
    F::Name: Sync,
{
    let mix: Vec<Subtest> = cfg.mix.iter().map(|e| e.subtest).collect();
    let counts = mix::job_counts(&cfg.mix, cfg.jobs_per_task);
    let mut made_kib = None;
    let mut subruns = Vec::new();
    let mut stopped_early = None;
    for &tasks in &cfg.task_counts {
        if interrupted() {
            stopped_early = Some("interrupted".to_string());
            break;
        }
        let n = cfg.file_kib(tasks);
        if made_kib != Some(n) {
            progress(Progress::Setup(&format!(
                "writing {} of {n} KiB",
                subtests::COMMON_FILE
            )));
            subtests::create_common(fs, common, n)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", subtests::COMMON_FILE)))?;
            made_kib = Some(n);
        }
        // SAFETY: sync(2) takes no arguments and cannot fail.
        unsafe { libc::sync() };
        let plan = subrun::Plan {
            dir: DIR,
            common,
            mix: &mix,
            counts: &counts,
            tasks,
            n,
            period: cfg.period_seconds.map(Duration::from_secs_f64),
            seed: cfg.seed,
        };
        let r = subrun::run(fs, &plan, interrupted)?;
        progress(Progress::Subrun(&r));
        stopped_early.clone_from(&r.stopped_early);
        subruns.push(r);
        if stopped_early.is_some() {
            break;
        }
    }
    Ok(finish(subruns, stopped_early))
}

fn finish(subruns: Vec<SubrunResult>, stopped_early: Option<String>) -> Aim7Result {
    let peak = subruns
        .iter()
        .filter(|s| s.stopped_early.is_none())
        .fold(None::<&SubrunResult>, |best, s| match best {
            Some(b) if b.jobs_per_minute >= s.jobs_per_minute => Some(b),
            _ => Some(s),
        })
        .map(|s| Peak {
            tasks: s.tasks,
            jobs_per_minute: s.jobs_per_minute,
            jobs_per_minute_per_task: s.jobs_per_minute_per_task,
        });
    Aim7Result {
        subruns,
        peak,
        stopped_early,
    }
}

#[cfg(test)]
mod tests;
