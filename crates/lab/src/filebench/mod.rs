//! Filebench personalities on any lab target, with the study run rules.
//!
//! [`fileset`] builds filebench's directory tree and file sizes,
//! [`personality`] holds the thread groups and flowop loops of fileserver,
//! webproxy, webserver, varmail and oltp, [`engine`] runs the threads of one
//! trial, [`sem`] gives oltp's semblock/sempost semaphores, and [`stats`]
//! reports per-flowop numbers the way filebench does. [`run`] ties
//! them together: populate and preallocate once, then several trials, each
//! on a freshly remounted file system (cold caches), the first discarded.

pub mod engine;
pub mod fileset;
mod gamma;
mod index_set;
pub mod personality;
pub mod placement;
pub mod sem;
pub mod stats;

pub use fileset::{Fileset, FilesetSpec, SizeDist, TreeStats};
pub use personality::{OltpConfig, Personality, PersonalityConfig};

use crate::stats::Summary;
use crate::targets::api::{MicroFile, MicroFs};
use engine::{CpuTimes, SetState, Tick, TrialLimits};
use serde::{Deserialize, Serialize};
use stats::{FlowopStats, IoSummary};
use std::io;
use std::time::{Duration, Instant};

/// A file system the lab can run trials on and remount between them.
pub trait LabTarget {
    type Fs: MicroFs + Sync;
    fn fs(&self) -> &Self::Fs;
    /// Drops caches by unmounting and mounting again. `Ok(false)` when the
    /// target cannot be remounted without losing its files (tmpfs, a
    /// directory the lab did not mount).
    fn remount(&mut self) -> io::Result<bool>;
}

/// How a personality is run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunConfig {
    pub personality: PersonalityConfig,
    /// Trials including the first, which is discarded when there are two or more.
    pub trials: usize,
    /// At most this many trials more while the kept trials' 95% interval is wider than 10%
    /// of their mean (seed 001's rule, [`crate::stats::wants_another_trial`]).
    pub extra_trials: usize,
    /// Warm-up at the start of each trial, not recorded.
    pub warmup_seconds: f64,
    /// Length of each trial's measured phase.
    pub run_seconds: f64,
    /// Optional bound on ops per trial (all threads together), counted as
    /// the IO summary counts them (semaphore and hog flowops do not count).
    pub ops_max: Option<u64>,
    pub seed: u64,
    /// Sets aside (and runs again) trials the host ran at a farther CPU placement than the
    /// nearest one seen (placement.rs).
    pub hold_placement: bool,
}

impl RunConfig {
    pub fn validate(&self) -> Result<(), String> {
        self.personality.validate()?;
        if self.trials == 0 || self.trials > 100 {
            return Err(format!("trials must be 1..=100, got {}", self.trials));
        }
        if self.extra_trials > 100 {
            return Err(format!(
                "extra trials must be 0..=100, got {}",
                self.extra_trials
            ));
        }
        for (what, v) in [("warm-up", self.warmup_seconds), ("run", self.run_seconds)] {
            if !(v.is_finite() && (0.0..=86_400.0).contains(&v)) {
                return Err(format!("{what} seconds must be 0..86400, got {v}"));
            }
        }
        if self.run_seconds == 0.0 && self.ops_max.is_none() {
            return Err("a trial needs run seconds > 0 or an op limit".into());
        }
        Ok(())
    }
}

/// One trial's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrialResult {
    pub index: usize,
    /// Not counted: the first of several trials (run rule), or one set aside.
    pub discarded: bool,
    /// Why the trial was set aside and run again (placement.rs), if it was.
    #[serde(default)]
    pub set_aside: Option<String>,
    /// Whether the file system was remounted (caches dropped) before it.
    pub remounted: bool,
    pub seconds: f64,
    pub summary: IoSummary,
    pub flowops: Vec<FlowopStats>,
    pub cpu: CpuTimes,
    /// Why the trial ended before its time or op limit, if it did.
    pub stopped_early: Option<String>,
}

/// A personality's run on one target.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    pub fileset: TreeStats,
    /// Directory creation and preallocation.
    pub setup_seconds: f64,
    pub trials: Vec<TrialResult>,
    /// ops/s over the kept trials: mean and 95% interval.
    pub ops_per_sec: Option<Summary>,
    pub stopped_early: Option<String>,
}

/// What the runner reports while it works.
pub enum Progress<'a> {
    Setup(&'a str),
    Trial {
        index: usize,
        total: usize,
        tick: Tick,
    },
    TrialDone(&'a TrialResult),
}

/// What `run` reports before each trial after the first, once it has put the filesets back
/// the way populating left them.
pub const FILESETS_RESTORED: &str = "filesets restored to their populated state";

/// Populates the filesets on `target`, then runs the trials.
pub fn run<T: LabTarget>(
    target: &mut T,
    cfg: &RunConfig,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> io::Result<RunResult>
where
    <T::Fs as MicroFs>::Name: Sync,
    <T::Fs as MicroFs>::File: Send,
{
    cfg.validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let p = &cfg.personality;
    let main_set = Fileset::build(&p.main_fileset(), cfg.seed)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let log_set = match p.log_fileset() {
        Some(spec) => Some(
            Fileset::build(&spec, cfg.seed ^ 0x106)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
        ),
        None => None,
    };
    let tree = main_set.stats();
    let t0 = Instant::now();
    progress(Progress::Setup(&format!(
        "populating {} files in {} directories ({:.0} MiB preallocated)",
        tree.files,
        tree.dirs,
        tree.prealloc_bytes as f64 / 1048576.0
    )));
    populate(target.fs(), &main_set, interrupted)?;
    if let Some(log) = &log_set {
        populate(target.fs(), log, interrupted)?;
    }
    let setup_seconds = t0.elapsed().as_secs_f64();
    let main = SetState::new(target.fs(), main_set);
    let log = log_set.map(|s| SetState::new(target.fs(), s));
    let workload = p.workload();
    engine::raise_open_file_limit();
    let limits = TrialLimits {
        warmup: Duration::from_secs_f64(cfg.warmup_seconds),
        run: if cfg.run_seconds > 0.0 {
            Duration::from_secs_f64(cfg.run_seconds)
        } else {
            Duration::MAX
        },
        ops_max: cfg.ops_max,
    };
    let mut trials = Vec::new();
    let most = cfg.trials + cfg.extra_trials;
    let mut guard = placement::PlacementGuard::new(cfg.hold_placement, cfg.trials);
    let mut counted = 0;
    let mut index = 0;
    while counted < cfg.trials || wants_another_trial(&trials, counted, most) {
        if interrupted() {
            break;
        }
        if index > 0 {
            // filebench populates its filesets anew at every run, so every run starts from
            // the same files. Kept from trial to trial they would drift: each trial ends with
            // up to one create per thread not yet matched by its delete (fileserver at 1/50
            // scale ran out of absent files after a dozen trials), and appends grow files
            // and logs by every trial's writes (gigabytes a trial on nvmfs).
            restore(target.fs(), &main, interrupted)?;
            if let Some(log) = &log {
                restore(target.fs(), log, interrupted)?;
            }
            progress(Progress::Setup(FILESETS_RESTORED));
        }
        let remounted = target.remount()?;
        let first = counted == 0 && cfg.trials > 1;
        let link_before = guard.link_before(!first, &mut |m| progress(Progress::Setup(m)));
        let mut out = engine::run_trial(
            target.fs(),
            &main,
            log.as_ref(),
            &workload,
            limits,
            cfg.seed.wrapping_add(index as u64 * 7919),
            interrupted,
            &mut |tick| {
                progress(Progress::Trial {
                    index,
                    total: cfg.trials.max(counted + 1),
                    tick,
                })
            },
        )?;
        out.cpu.core_link_before_ns = link_before;
        let set_aside = (!first)
            .then(|| guard.judge(crate::core_link::best_ns(), link_before, &out.cpu))
            .flatten();
        if set_aside.is_none() {
            counted += 1;
        }
        let trial = TrialResult {
            index,
            discarded: first || set_aside.is_some(),
            set_aside,
            remounted,
            seconds: out.seconds,
            summary: IoSummary::of(&out.flowops, out.seconds),
            flowops: out.flowops,
            cpu: out.cpu,
            stopped_early: out.stopped_early,
        };
        progress(Progress::TrialDone(&trial));
        let stop = trial.stopped_early.is_some();
        trials.push(trial);
        index += 1;
        if stop {
            break;
        }
    }
    Ok(finish(tree, setup_seconds, trials))
}

/// Seed 001's rule over the trials so far: another while the kept ones' interval is too wide.
fn wants_another_trial(trials: &[TrialResult], counted: usize, most: usize) -> bool {
    crate::stats::wants_another_trial(&kept_ops_per_sec(trials), counted, most)
}

/// ops/s of the trials that count: not discarded, not stopped early.
pub fn kept_ops_per_sec(trials: &[TrialResult]) -> Vec<f64> {
    trials
        .iter()
        .filter(|t| !t.discarded && t.stopped_early.is_none())
        .map(|t| t.summary.ops_per_sec)
        .collect()
}

fn finish(fileset: TreeStats, setup_seconds: f64, trials: Vec<TrialResult>) -> RunResult {
    let kept = kept_ops_per_sec(&trials);
    let stopped_early = trials.iter().find_map(|t| t.stopped_early.clone());
    RunResult {
        fileset,
        setup_seconds,
        ops_per_sec: Summary::of(&kept),
        trials,
        stopped_early,
    }
}

/// Creates the directories, then the preallocated files filled to their
/// size with 1 MiB writes, as `fileset_create` does.
pub fn populate<F: MicroFs>(
    fs: &F,
    set: &Fileset,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<()> {
    for d in &set.dirs {
        fs.mkdir(&fs.name(d)).map_err(failed("mkdir", d))?;
    }
    write_files(fs, set, interrupted)
}

/// Creates (or truncates) every preallocated file of `set` and writes it to its size.
fn write_files<F: MicroFs>(
    fs: &F,
    set: &Fileset,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<()> {
    let chunk = prealloc_chunk();
    for f in set.files.iter().filter(|f| f.prealloc) {
        check_interrupted(interrupted)?;
        write_file(fs, &fs.name(&f.path), f, &chunk)?;
    }
    Ok(())
}

/// Puts `set` back as `write_files` left it after a trial changed it: files the trial
/// created are removed, preallocated files it deleted or resized are written anew at their
/// size, and every entry is idle and closed again. Untouched files are left as they are.
fn restore<F: MicroFs>(
    fs: &F,
    set: &SetState<F::Name>,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<()> {
    let chunk = prealloc_chunk();
    let mut picks = set.picks();
    for (i, f) in set.fileset.files.iter().enumerate() {
        check_interrupted(interrupted)?;
        let name = &set.names[i];
        let exists = picks.exists(i);
        if !f.prealloc {
            if exists {
                fs.unlink(name).map_err(failed("unlink", &f.path))?;
            }
        } else if !exists || fs.stat(name).map_err(failed("stat", &f.path))? != f.size_bytes {
            write_file(fs, name, f, &chunk)?;
        }
    }
    *picks = fileset::PickState::new(&set.fileset);
    Ok(())
}

/// An error of `op` on `path` that names both, keeping the kind.
fn failed<'a>(op: &'a str, path: &'a str) -> impl FnOnce(io::Error) -> io::Error + 'a {
    move |e| io::Error::new(e.kind(), format!("{op} {path}: {e}"))
}

fn prealloc_chunk() -> Vec<u8> {
    vec![0x5Au8; 1 << 20]
}

fn check_interrupted(interrupted: &dyn Fn() -> bool) -> io::Result<()> {
    if interrupted() {
        return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
    }
    Ok(())
}

/// Creates (or truncates) `f`, named `name`, and writes it to its size in `chunk`-sized
/// writes.
fn write_file<F: MicroFs>(
    fs: &F,
    name: &F::Name,
    f: &fileset::FileEntry,
    chunk: &[u8],
) -> io::Result<()> {
    let file = fs.create(name).map_err(failed("create", &f.path))?;
    let mut off = 0u64;
    while off < f.size_bytes {
        let n = (f.size_bytes - off).min(chunk.len() as u64) as usize;
        file.write_all_at(&chunk[..n], off)
            .map_err(failed("write", &f.path))?;
        off += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
