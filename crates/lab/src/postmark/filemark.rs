//! filemark (seed 001, section 3.2): Postmark on N threads, one creation
//! phase, then repeated transaction phases each followed by a remount.
//!
//! filemark's source is not public; what seed 001 states is followed, the
//! rest is our choice, marked (ours):
//! - N threads, each an independent Postmark instance ([`super::engine`]) in
//!   its own directory `t{i}` with its own subdirectory set (the configured
//!   number of subdirectories, in each thread's directory) and its own file
//!   table; files and transactions are split so the totals stay the
//!   configured ones (thread i gets `total / N`, plus one for the first
//!   `total % N` threads);
//! - thread i seeds its generator with `seed + i` (ours: "independent");
//! - biases to the nearest 1%: `RND(100) < bias` instead of Postmark's
//!   `RND(10)`;
//! - one creation phase, then the transaction phases, each starting with its
//!   own warm-up (here a number of transactions, not counted; seed 001 used
//!   30 s before 2-minute phases) and ending with an unmount and mount of the
//!   target; each phase continues the threads' file sets and generators;
//! - times from a monotonic clock (filemark moved to `gettimeofday`);
//! - the deletion phase is optional (seed 001 skipped it and remade the file
//!   system);
//! - the transaction rate of a phase is all threads' transactions over the
//!   phase's wall time. filemark added up each thread's rate over its own time,
//!   which equals that while every thread has a CPU but overstates throughput
//!   when threads outnumber CPUs and run one after another (13x was seen with
//!   short phases on 2 cores); that sum is kept beside it. As in seed 001's run
//!   rules the first phase is discarded from the summary when there are several.
//!
//! Seed 001's two workloads are [`FilemarkConfig::small_file`] and
//! [`FilemarkConfig::large_file`].

use super::engine::{Bias, Counts, Instance, Params};
use super::report::per_second;
use crate::filebench::stats::Latency;
use crate::filebench::LabTarget;
use crate::micro::measure::new_histogram;
use crate::stats::Summary;
use crate::targets::api::MicroFs;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Most threads (seed 001 ran 1, 8, 64 and 128).
pub const MAX_THREADS: u32 = 1024;
/// Most transaction phases.
pub const MAX_PHASES: u32 = 1000;

/// A filemark run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilemarkConfig {
    pub threads: u32,
    /// Files in all threads together.
    pub files: u32,
    /// Transactions per phase, all threads together.
    pub transactions: u32,
    /// Uncounted transactions at the start of each phase, all threads together.
    pub warmup_transactions: u32,
    /// Transaction phases after the creation phase.
    pub phases: u32,
    pub size_low: u32,
    pub size_high: u32,
    /// Subdirectories in each thread's directory (used when more than one).
    pub subdirectories: u32,
    pub read_block_size: u32,
    pub write_block_size: u32,
    /// Emulated stdio buffering, as Postmark's `set buffering true`.
    pub buffering: bool,
    /// Percent chance of read over append; `None` skips that half.
    pub bias_read: Option<u32>,
    /// Percent chance of create over delete; `None` skips that half.
    pub bias_create: Option<u32>,
    /// Thread i uses `seed + i`.
    pub seed: u32,
    /// Delete the files and directories at the end.
    pub delete: bool,
}

impl FilemarkConfig {
    /// Seed 001's small-file workload (512 B to 9.77 KB files, 512 B I/O) on
    /// its small system (10,000 files, 10 subdirectories), with 12 phases and
    /// bias read 75%, bias create 50%. Phases are counted in transactions
    /// (ours): 5 per file, a quarter of that as warm-up (seed 001: 2 minutes
    /// after 30 s).
    pub fn small_file(threads: u32) -> Self {
        FilemarkConfig {
            threads,
            files: 10_000,
            transactions: 50_000,
            warmup_transactions: 12_500,
            phases: 12,
            size_low: 512,
            size_high: 10_000,
            subdirectories: 10,
            read_block_size: 512,
            write_block_size: 512,
            buffering: true,
            bias_read: Some(75),
            bias_create: Some(50),
            seed: 42,
            delete: false,
        }
    }

    /// Seed 001's large-file workload: 4 to 16 KB files and 4 KB I/O, the
    /// rest as [`Self::small_file`].
    pub fn large_file(threads: u32) -> Self {
        FilemarkConfig {
            size_low: 4096,
            size_high: 16_384,
            read_block_size: 4096,
            write_block_size: 4096,
            ..Self::small_file(threads)
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let range = |what: &str, v: u32, min: u32, max: u32| {
            if (min..=max).contains(&v) {
                Ok(())
            } else {
                Err(format!("{what} must be {min}..={max}, got {v}"))
            }
        };
        range("threads", self.threads, 1, MAX_THREADS)?;
        range("phases", self.phases, 1, MAX_PHASES)?;
        if self.files < self.threads {
            return Err(format!(
                "{} files cannot be split over {} threads: each needs at least one",
                self.files, self.threads
            ));
        }
        for (what, bias) in [
            ("bias read", self.bias_read),
            ("bias create", self.bias_create),
        ] {
            if let Some(b) = bias {
                range(what, b, 0, 100)?;
            }
        }
        let last_seed = u64::from(self.seed) + u64::from(self.threads) - 1;
        if last_seed > u64::from(super::config::MAX_INT) {
            return Err(format!(
                "seed {} + {} threads overflows",
                self.seed, self.threads
            ));
        }
        // Everything else has Postmark's limits.
        self.instance_config().validate()
    }

    /// The Postmark settings every thread shares (with the totals).
    fn instance_config(&self) -> super::PostmarkConfig {
        super::PostmarkConfig {
            number: self.files,
            transactions: self.transactions,
            size_low: self.size_low,
            size_high: self.size_high,
            subdirectories: self.subdirectories,
            read_block_size: self.read_block_size,
            write_block_size: self.write_block_size,
            buffering: self.buffering,
            bias_read: None,
            bias_create: None,
            seed: self.seed,
            locations: Vec::new(),
            report: super::ReportFormat::Verbose,
        }
    }

    /// Thread `t`'s share of `total`: the first `total % threads` get one more.
    pub fn share(&self, total: u32, t: u32) -> u32 {
        total / self.threads + u32::from(t < total % self.threads)
    }

    /// Thread `t`'s instance.
    pub fn params(&self, t: u32) -> Params {
        let bias = |b: Option<u32>| b.map(|value| Bias { value, scale: 100 });
        Params {
            number: self.share(self.files, t),
            bias_read: bias(self.bias_read),
            bias_create: bias(self.bias_create),
            seed: self.seed + t,
            base: thread_dir(t),
            ..self.instance_config().params()
        }
    }
}

/// Thread `t`'s directory under the target root.
pub fn thread_dir(t: u32) -> String {
    format!("t{t}")
}

/// One thread's part of a phase.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadPhase {
    pub thread: u32,
    pub seconds: f64,
    /// Transactions done (0 outside transaction phases).
    pub transactions: u64,
    pub counts: Counts,
    /// Files in the thread's table at the end of the phase.
    pub files: usize,
    /// The thread ran out of files (every one it created was deleted).
    pub out_of_files: bool,
}

/// What a phase did, all threads together.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseResult {
    pub threads: Vec<ThreadPhase>,
    pub counts: Counts,
    pub transactions: u64,
    /// Operations per second of the phase's wall time, all threads together:
    /// files created (creation), transactions, or files deleted (deletion).
    pub per_second: f64,
    /// filemark's own figure: the sum over threads of each one's operations per second of
    /// its own time (overstates throughput when threads outnumber CPUs).
    pub sum_of_thread_rates: f64,
    /// From the start to the last thread's end.
    pub wall_seconds: f64,
    /// Per transaction, all threads (empty outside transaction phases).
    pub latency_ns: Latency,
    /// Whether the target was remounted after the phase.
    pub remounted: bool,
    /// The phase ended before its threads were done.
    pub interrupted: bool,
}

/// A filemark run's results.
#[derive(Debug, Clone, Serialize)]
pub struct FilemarkResult {
    /// Files per thread at the start.
    pub files_per_thread: Vec<u32>,
    /// Transactions per thread and phase.
    pub transactions_per_thread: Vec<u32>,
    pub creation: PhaseResult,
    pub transaction_phases: Vec<PhaseResult>,
    pub deletion: Option<PhaseResult>,
    /// Transactions/s over the kept phases (the first discarded when there
    /// are several, seed 001's rule); `None` if none completed.
    pub transactions_per_second: Option<Summary>,
    pub stopped_early: Option<String>,
}

/// Which operations a phase's rate counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Creation,
    Transactions,
    Deletion,
}

/// What one thread's part of a phase did, timed by [`timed`].
struct Outcome {
    seconds: f64,
    counts: Counts,
    step: Step,
}

/// What a thread's step reports besides its counts.
#[derive(Default)]
struct Step {
    transactions: u64,
    out_of_files: bool,
    stopped: bool,
    latency: Option<Histogram<u64>>,
}

/// Runs filemark on `target`: per-thread directories, the creation phase, the
/// transaction phases with a remount after each, then the deletion if asked.
/// `interrupted` is polled while phases run; it ends the current phase and
/// the run, which returns the phases so far.
pub fn run<T: LabTarget>(
    target: &mut T,
    cfg: &FilemarkConfig,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<FilemarkResult>
where
    <T::Fs as MicroFs>::Name: Send,
{
    cfg.validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut threads: Vec<Instance<_>> = (0..cfg.threads)
        .map(|t| Instance::new(cfg.params(t)))
        .collect();
    make_directories(target.fs(), &threads)?;
    let share = |total: u32| (0..cfg.threads).map(|t| cfg.share(total, t)).collect();
    let mut result = FilemarkResult {
        files_per_thread: share(cfg.files),
        transactions_per_thread: share(cfg.transactions),
        creation: creation_phase(target.fs(), &mut threads, interrupted)?,
        transaction_phases: Vec::new(),
        deletion: None,
        transactions_per_second: None,
        stopped_early: None,
    };
    if result.creation.interrupted {
        result.stopped_early = Some("interrupted".into());
        return Ok(result);
    }
    result.creation.remounted = target.remount()?;
    for _ in 0..cfg.phases {
        let mut p = transaction_phase(target.fs(), &mut threads, cfg, interrupted)?;
        if p.interrupted {
            result.stopped_early = Some("interrupted".into());
            result.transaction_phases.push(p);
            break;
        }
        p.remounted = target.remount()?;
        result.transaction_phases.push(p);
    }
    result.transactions_per_second = summary(&result.transaction_phases);
    if cfg.delete && result.stopped_early.is_none() {
        result.deletion = Some(deletion_phase(target.fs(), &mut threads, interrupted)?);
    }
    Ok(result)
}

/// Each thread's directory and its subdirectories.
fn make_directories<F: MicroFs>(fs: &F, threads: &[Instance<F::Name>]) -> io::Result<()> {
    for (t, pm) in (0u32..).zip(threads) {
        let dir = thread_dir(t);
        fs.mkdir(&fs.name(&dir))
            .map_err(|e| io::Error::new(e.kind(), format!("mkdir {dir}: {e}")))?;
        pm.make_subdirectories(fs)?;
    }
    Ok(())
}

/// Every thread creates its files.
fn creation_phase<F: MicroFs + Sync>(
    fs: &F,
    threads: &mut [Instance<F::Name>],
    interrupted: &dyn Fn() -> bool,
) -> io::Result<PhaseResult>
where
    F::Name: Send,
{
    let work = |fs: &F, pm: &mut Instance<F::Name>, stop: &dyn Fn() -> bool, _| {
        timed(pm, |pm| {
            let stopped = !pm.create_files(fs, stop)?;
            Ok(Step {
                stopped,
                ..Step::default()
            })
        })
    };
    in_parallel(fs, threads, interrupted, Kind::Creation, work)
}

/// A transaction phase: each thread's warm-up share untimed, then its
/// measured share.
fn transaction_phase<F: MicroFs + Sync>(
    fs: &F,
    threads: &mut [Instance<F::Name>],
    cfg: &FilemarkConfig,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<PhaseResult>
where
    F::Name: Send,
{
    let work = |fs: &F, pm: &mut Instance<F::Name>, stop: &dyn Fn() -> bool, t: u32| {
        let warm = u64::from(cfg.share(cfg.warmup_transactions, t));
        let w = pm.transactions(fs, warm, stop, &mut new_histogram())?;
        let n = if w.out_of_files || w.stopped {
            0
        } else {
            u64::from(cfg.share(cfg.transactions, t))
        };
        timed(pm, |pm| {
            let mut h = new_histogram();
            let r = pm.transactions(fs, n, stop, &mut h)?;
            Ok(Step {
                transactions: r.done,
                out_of_files: r.out_of_files || w.out_of_files,
                stopped: r.stopped || w.stopped,
                latency: Some(h),
            })
        })
    };
    in_parallel(fs, threads, interrupted, Kind::Transactions, work)
}

/// Deletes every thread's files (in parallel), then the subdirectories and
/// the threads' directories.
fn deletion_phase<F: MicroFs + Sync>(
    fs: &F,
    threads: &mut [Instance<F::Name>],
    interrupted: &dyn Fn() -> bool,
) -> io::Result<PhaseResult>
where
    F::Name: Send,
{
    let work = |fs: &F, pm: &mut Instance<F::Name>, _: &dyn Fn() -> bool, _| {
        timed(pm, |pm| pm.delete_files(fs).map(|_| Step::default()))
    };
    let p = in_parallel(fs, threads, interrupted, Kind::Deletion, work)?;
    for (t, pm) in (0u32..).zip(threads.iter()) {
        pm.remove_subdirectories(fs)?;
        let dir = thread_dir(t);
        fs.rmdir(&fs.name(&dir))
            .map_err(|e| io::Error::new(e.kind(), format!("rmdir {dir}: {e}")))?;
    }
    Ok(p)
}

/// Times `f` on `pm` and takes the counts it added.
fn timed<N>(
    pm: &mut Instance<N>,
    f: impl FnOnce(&mut Instance<N>) -> io::Result<Step>,
) -> io::Result<Outcome> {
    let before = pm.counts();
    let start = Instant::now();
    let step = f(pm)?;
    Ok(Outcome {
        seconds: start.elapsed().as_secs_f64(),
        counts: pm.counts().since(&before),
        step,
    })
}

/// Runs `work` on one scoped thread per instance, all released together by a
/// barrier, while this thread polls `interrupted` and raises the threads'
/// stop flag.
fn in_parallel<F, W>(
    fs: &F,
    threads: &mut [Instance<F::Name>],
    interrupted: &dyn Fn() -> bool,
    kind: Kind,
    work: W,
) -> io::Result<PhaseResult>
where
    F: MicroFs + Sync,
    F::Name: Send,
    W: Fn(&F, &mut Instance<F::Name>, &dyn Fn() -> bool, u32) -> io::Result<Outcome> + Sync,
{
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads.len());
    let t0 = Instant::now();
    let outcomes: Vec<io::Result<Outcome>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0u32..)
            .zip(threads.iter_mut())
            .map(|(t, pm)| {
                let (stop, barrier, work) = (&stop, &barrier, &work);
                s.spawn(move || {
                    barrier.wait();
                    work(fs, pm, &|| stop.load(Ordering::Relaxed), t)
                })
            })
            .collect();
        while !handles.iter().all(|h| h.is_finished()) {
            if interrupted() {
                stop.store(true, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let wall = t0.elapsed().as_secs_f64();
    let outcomes = outcomes.into_iter().collect::<io::Result<Vec<_>>>()?;
    Ok(summarise(kind, outcomes, threads, wall))
}

/// Adds up the threads' outcomes.
fn summarise<N>(
    kind: Kind,
    outcomes: Vec<Outcome>,
    threads: &[Instance<N>],
    wall: f64,
) -> PhaseResult {
    let mut latency = new_histogram();
    let mut counts = Counts::default();
    let (mut transactions, mut rate, mut interrupted) = (0, 0.0, false);
    let mut total_ops = 0;
    let mut rows = Vec::with_capacity(outcomes.len());
    for ((t, o), pm) in (0u32..).zip(outcomes).zip(threads) {
        if let Some(h) = &o.step.latency {
            // Same bounds on both sides: adding cannot fail.
            let _ = latency.add(h);
        }
        counts = counts.add(&o.counts);
        transactions += o.step.transactions;
        interrupted |= o.step.stopped;
        let ops = match kind {
            Kind::Creation => o.counts.created,
            Kind::Transactions => o.step.transactions,
            Kind::Deletion => o.counts.deleted,
        };
        rate += per_second(ops, o.seconds);
        total_ops += ops;
        rows.push(ThreadPhase {
            thread: t,
            seconds: o.seconds,
            transactions: o.step.transactions,
            counts: o.counts,
            files: pm.files(),
            out_of_files: o.step.out_of_files,
        });
    }
    PhaseResult {
        threads: rows,
        counts,
        transactions,
        per_second: per_second(total_ops, wall),
        sum_of_thread_rates: rate,
        wall_seconds: wall,
        latency_ns: Latency::of(&latency),
        remounted: false,
        interrupted,
    }
}

/// Transactions/s of the phases kept by seed 001's rule.
fn summary(phases: &[PhaseResult]) -> Option<Summary> {
    let skip = usize::from(phases.len() > 1);
    let kept: Vec<f64> = phases.iter().skip(skip).map(|p| p.per_second).collect();
    Summary::of(&kept)
}
