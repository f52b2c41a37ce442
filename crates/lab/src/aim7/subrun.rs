//! One AIM7 subrun: N tasks started together, each running its list of jobs, timed from the
//! start until the last task is done (`runtap`).
//!
//! Tasks are threads rather than AIM7's forked processes. Each seeds its random numbers
//! with its number (`aim_srand(user)`, plus the run's seed), so the job orders and blocks
//! repeat from run to run. With a period (not AIM7's rule), a task that finishes its list
//! starts a fresh one until the period is over; a job already running is finished.

use super::mix::next_job;
use super::rand::AimRand;
use super::subtests::{Moved, Subtest, Task};
use crate::targets::api::MicroFs;
use serde::Serialize;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// A subtest's runs in one subrun (AIM7 logs each job's time).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubtestStats {
    pub subtest: Subtest,
    pub runs: u64,
    pub mean_ms: f64,
    pub max_ms: f64,
}

/// One line of AIM7's table: a subrun at one task count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubrunResult {
    pub tasks: usize,
    /// The test file size of this subrun, KiB (`disk_iteration_count`).
    pub file_kib: u32,
    /// Jobs in each task's list (the `wlist` total for `jobs_per_task`).
    pub jobs_per_task: u32,
    /// Jobs completed by all tasks.
    pub jobs: u64,
    /// From the start to the end of the last task ("real").
    pub seconds: f64,
    /// Completed jobs x 60 / seconds.
    pub jobs_per_minute: f64,
    /// jobs/min / tasks.
    pub jobs_per_minute_per_task: f64,
    /// Job timing index: 100 x (1 - coefficient of variation of the tasks' times), 0..=100.
    pub jti: u32,
    /// User + system CPU of the process during the subrun.
    pub cpu_seconds: f64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Per subtest of the mix, in the mix's order.
    pub subtests: Vec<SubtestStats>,
    /// Why the subrun ended before its tasks finished, if it did.
    pub stopped_early: Option<String>,
}

/// What one subrun needs.
pub struct Plan<'a, N> {
    pub dir: &'a str,
    pub common: &'a N,
    pub mix: &'a [Subtest],
    /// Jobs per line in each task's list.
    pub counts: &'a [u32],
    pub tasks: usize,
    /// `disk_iteration_count`.
    pub n: u32,
    pub period: Option<Duration>,
    pub seed: u64,
}

/// What one task did.
struct TaskOutcome {
    /// When the task passed the start barrier.
    started: Instant,
    finished: Instant,
    jobs: u64,
    moved: Moved,
    /// (runs, total ns, max ns) per line of the mix.
    per_line: Vec<(u64, u64, u64)>,
}

struct Shared {
    stop: AtomicBool,
    done: AtomicUsize,
    failed: Mutex<Option<io::Error>>,
}

/// Runs one subrun on `fs`.
pub fn run<F>(
    fs: &F,
    plan: &Plan<'_, F::Name>,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<SubrunResult>
where
    F: MicroFs + Sync,
    F::Name: Sync,
{
    let shared = Shared {
        stop: AtomicBool::new(false),
        done: AtomicUsize::new(0),
        failed: Mutex::new(None),
    };
    let gun = Barrier::new(plan.tasks + 1);
    let cpu0 = cpu_seconds();
    let (t0, outcomes, stopped) = std::thread::scope(|s| {
        let joins: Vec<_> = (0..plan.tasks)
            .map(|user| {
                let (shared, gun) = (&shared, &gun);
                s.spawn(move || task_main(fs, plan, user, shared, gun))
            })
            .collect();
        gun.wait();
        let t0 = Instant::now();
        let stopped = watch(plan, &shared, t0, interrupted);
        let outcomes: Vec<_> = joins.into_iter().map(|j| j.join()).collect();
        (t0, outcomes, stopped)
    });
    let cpu = cpu_seconds() - cpu0;
    if let Some(e) = shared
        .failed
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
    {
        return Err(e);
    }
    let outcomes = outcomes
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| io::Error::other("an AIM7 task panicked"))?;
    Ok(summarise(plan, t0, &outcomes, cpu, stopped))
}

/// Waits for the tasks, telling them to stop when the run is interrupted or the period is
/// over; returns why the subrun stopped early, if it did.
fn watch<N>(
    plan: &Plan<'_, N>,
    shared: &Shared,
    t0: Instant,
    interrupted: &dyn Fn() -> bool,
) -> Option<String> {
    let mut why = None;
    while shared.done.load(Ordering::Acquire) < plan.tasks {
        if why.is_none() && interrupted() {
            why = Some("interrupted".to_string());
            shared.stop.store(true, Ordering::Relaxed);
        }
        if plan.period.is_some_and(|p| t0.elapsed() >= p) {
            shared.stop.store(true, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    why
}

/// One task: waits for the gun, then runs its list (lists, with a period) of jobs.
fn task_main<F: MicroFs>(
    fs: &F,
    plan: &Plan<'_, F::Name>,
    user: usize,
    shared: &Shared,
    gun: &Barrier,
) -> TaskOutcome {
    // Counted done however the task ends (a panic too), or `watch` would wait forever.
    let _done = Done(&shared.done);
    let rng = AimRand::new(plan.seed.wrapping_add(user as u64));
    let mut task = Task::new(fs, plan.dir, plan.common, user, rng);
    let mut out = TaskOutcome {
        started: Instant::now(),
        finished: Instant::now(),
        jobs: 0,
        moved: Moved::default(),
        per_line: vec![(0, 0, 0); plan.mix.len()],
    };
    gun.wait();
    out.started = Instant::now();
    'lists: loop {
        let mut left = plan.counts.to_vec();
        while let Some(k) = next_job(&mut left, &mut task.rng) {
            if shared.stop.load(Ordering::Relaxed) {
                break 'lists;
            }
            if let Err(e) = one_job(&mut task, plan, k, &mut out) {
                let mut f = shared.failed.lock().unwrap_or_else(|p| p.into_inner());
                f.get_or_insert(e);
                shared.stop.store(true, Ordering::Relaxed);
                break 'lists;
            }
        }
        if plan.period.is_none() || shared.stop.load(Ordering::Relaxed) {
            break;
        }
    }
    out.finished = Instant::now();
    out
}

/// Adds one to the count of finished tasks when dropped.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

fn one_job<F: MicroFs>(
    task: &mut Task<'_, F>,
    plan: &Plan<'_, F::Name>,
    k: usize,
    out: &mut TaskOutcome,
) -> io::Result<()> {
    let t = Instant::now();
    let moved = task.run(plan.mix[k], plan.n)?;
    let ns = t.elapsed().as_nanos() as u64;
    let line = &mut out.per_line[k];
    line.0 += 1;
    line.1 += ns;
    line.2 = line.2.max(ns);
    out.jobs += 1;
    out.moved.add(moved);
    Ok(())
}

/// The subrun's start: the first of the controller's clock reading and the tasks' own
/// (released by the same barrier, short tasks can be done before the controller runs
/// again), so that no task's time is cut short.
fn start(t0: Instant, outcomes: &[TaskOutcome]) -> Instant {
    outcomes.iter().map(|o| o.started).fold(t0, Instant::min)
}

fn summarise<N>(
    plan: &Plan<'_, N>,
    t0: Instant,
    outcomes: &[TaskOutcome],
    cpu_seconds: f64,
    stopped_early: Option<String>,
) -> SubrunResult {
    let t0 = start(t0, outcomes);
    let elapsed: Vec<f64> = outcomes
        .iter()
        .map(|o| o.finished.saturating_duration_since(t0).as_secs_f64())
        .collect();
    let seconds = elapsed.iter().copied().fold(0.0, f64::max).max(1e-9);
    let jobs: u64 = outcomes.iter().map(|o| o.jobs).sum();
    let mut moved = Moved::default();
    outcomes.iter().for_each(|o| moved.add(o.moved));
    let jobs_per_minute = jobs as f64 * 60.0 / seconds;
    SubrunResult {
        tasks: plan.tasks,
        file_kib: plan.n,
        jobs_per_task: plan.counts.iter().sum(),
        jobs,
        seconds,
        jobs_per_minute,
        jobs_per_minute_per_task: jobs_per_minute / plan.tasks as f64,
        jti: jti(&elapsed),
        cpu_seconds,
        read_bytes: moved.read_bytes,
        write_bytes: moved.write_bytes,
        subtests: subtest_stats(plan.mix, outcomes),
        stopped_early,
    }
}

fn subtest_stats(mix: &[Subtest], outcomes: &[TaskOutcome]) -> Vec<SubtestStats> {
    mix.iter()
        .enumerate()
        .map(|(k, &subtest)| {
            let (runs, total, max) = outcomes.iter().fold((0, 0, 0), |a, o| {
                let l = o.per_line[k];
                (a.0 + l.0, a.1 + l.1, a.2.max(l.2))
            });
            SubtestStats {
                subtest,
                runs,
                mean_ms: if runs > 0 {
                    total as f64 / runs as f64 / 1e6
                } else {
                    0.0
                },
                max_ms: max as f64 / 1e6,
            }
        })
        .collect()
}

/// AIM7's job timing index of the tasks' elapsed times: 100 with one task, otherwise
/// (1 - population standard deviation / mean) x 100, kept within 0..=100.
pub fn jti(elapsed: &[f64]) -> u32 {
    let n = elapsed.len() as f64;
    if elapsed.len() <= 1 {
        return 100;
    }
    let sum: f64 = elapsed.iter().sum();
    if sum <= 0.0 {
        return 100;
    }
    let sumsq: f64 = elapsed.iter().map(|e| e * e).sum();
    let std = ((sumsq - sum * sum / n) / n).max(0.0).sqrt();
    let cov = std / (sum / n);
    ((1.0 - cov) * 100.0).clamp(0.0, 100.0) as u32
}

/// User + system CPU seconds of this process so far.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes a plain struct we own; zeroed is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_done_before_the_controller_looks_keep_their_time() {
        // Released by the barrier, the tasks ran 5 ms and finished before the controller
        // read its clock: the subrun is timed from the tasks' start.
        let started = Instant::now();
        let finished = started + Duration::from_millis(5);
        let t0 = finished + Duration::from_millis(1);
        let task = |finished| TaskOutcome {
            started,
            finished,
            jobs: 10,
            moved: Moved::default(),
            per_line: vec![(10, 0, 0)],
        };
        let outcomes = [task(finished), task(finished - Duration::from_millis(1))];
        assert_eq!(start(t0, &outcomes), started);
        let plan = Plan {
            dir: "d",
            common: &(),
            mix: &[Subtest::DiskRr],
            counts: &[10],
            tasks: 2,
            n: 2,
            period: None,
            seed: 0,
        };
        let r = summarise(&plan, t0, &outcomes, 0.0, None);
        assert!((r.seconds - 0.005).abs() < 1e-9, "{}", r.seconds);
        assert!((r.jobs_per_minute - 20.0 * 60.0 / 0.005).abs() < 1e-3);
        assert!(r.jti < 100);
    }

    #[test]
    fn job_timing_index() {
        assert_eq!(jti(&[3.0]), 100);
        assert_eq!(jti(&[2.0, 2.0, 2.0]), 100);
        // mean 2, population std 1: cov 0.5.
        assert_eq!(jti(&[1.0, 3.0]), 50);
        // cov 1.5 would be negative: held at 0.
        assert_eq!(jti(&[0.0, 0.0, 0.0, 4.0]), 0);
    }
}
