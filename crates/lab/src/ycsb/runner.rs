//! YCSB's `Client` and `ClientThread`: the load phase ([`load`]) and the run phase ([`run`]),
//! each over N threads sharing one [`Workload`], at maximum throughput or at a fixed offered
//! load.
//!
//! As in YCSB, a phase's operations are dealt out evenly: each thread does
//! `count / threads` (the first `count % threads` one more), and there are never more threads
//! than operations. The load phase does `insert_count` inserts from `insert_start`, the
//! threads taking key numbers from one shared counter (YCSB uses `insertstart`/`insertcount`
//! to split a load across client processes, not threads). With a target, each thread gets
//! `target / threads` ops/s and schedules operation `k` at `start + k * tick`, sleeping until
//! then (YCSB's `throttleNanos`), so a late operation is followed by a burst that catches up;
//! threads at or below 1000 ops/s first wait a random fraction of one tick so they do not
//! all fire together. Latency is measured from each operation's actual start (YCSB's default
//! `measurement.interval=op`), not from its scheduled one.
//!
//! A phase ends when its operations are done, at the time limit (YCSB's `maxexecutiontime`),
//! when `interrupted()` returns true, or at the first database error. The first three return
//! the measurements so far; an error stops every thread and is returned.

use super::client::{Client, Workload};
use super::db::{KvSession, KvStore};
use super::measure::{Measurements, OpStats};
use super::workload::CoreWorkload;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// Most client threads accepted.
pub const THREADS_MAX: usize = 1024;
/// How often the coordinating thread checks `interrupted()` and reports progress.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Longest single sleep of a throttled thread, so it notices a stop request promptly.
const SLEEP_SLICE: Duration = Duration::from_millis(10);

/// How a phase is driven (YCSB's command-line options rather than workload properties).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunOptions {
    /// `-threads`.
    pub threads: usize,
    /// `-target`: offered load in ops/s, all threads together; `None` runs flat out.
    pub target_ops_per_sec: Option<f64>,
    /// `maxexecutiontime`: the phase stops after this long even if operations remain.
    pub max_execution_time: Option<Duration>,
    /// Seeds the client threads' random numbers. One thread on a deterministic store
    /// repeats a run exactly; with more, the interleaving of the shared counters varies.
    pub seed: u64,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            threads: 1,
            target_ops_per_sec: None,
            max_execution_time: None,
            seed: 0,
        }
    }
}

impl RunOptions {
    /// Checks the thread count and target.
    pub fn validate(&self) -> io::Result<()> {
        if self.threads == 0 || self.threads > THREADS_MAX {
            return Err(invalid(format!(
                "thread count {} is not in 1..={THREADS_MAX}",
                self.threads
            )));
        }
        if let Some(target) = self.target_ops_per_sec {
            if !target.is_finite() || target <= 0.0 {
                return Err(invalid(format!(
                    "target {target} ops/s is not a positive number"
                )));
            }
        }
        Ok(())
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Which phase a result is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// `-load`: insert the records.
    Load,
    /// `-t`: the operation mix.
    Run,
}

/// The outcome of one phase, for reports.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseResult {
    pub phase: Phase,
    /// The store's [`KvStore::describe`].
    pub store: String,
    pub workload: CoreWorkload,
    /// Threads actually used (never more than operations).
    pub threads: usize,
    pub target_ops_per_sec: Option<f64>,
    pub max_execution_time_secs: Option<f64>,
    pub seed: u64,
    /// From the start of the threads to the end of the last one, session opening included
    /// (as YCSB's runtime includes `DB.init`).
    pub runtime_ns: u64,
    /// Operations done, all threads (a read-modify-write counts once).
    pub operations: u64,
    pub ops_per_sec: f64,
    /// Ended by `interrupted()`.
    pub interrupted: bool,
    /// Ended by the time limit.
    pub timed_out: bool,
    /// Per YCSB series (`READ`, `READ-FAILED`, `READ-MODIFY-WRITE`, ...), non-empty ones only.
    /// Latencies run from each operation's actual start (YCSB's default), not its scheduled
    /// start under a target.
    pub per_op: BTreeMap<String, OpStats>,
}

impl PhaseResult {
    /// The count of one series, 0 when absent.
    pub fn count(&self, series: &str) -> u64 {
        self.per_op.get(series).map_or(0, |s| s.count)
    }
}

/// Inserts the workload's records (`insert_count` from `insert_start`) into `store`.
/// `interrupted` is polled on the calling thread; `progress` receives the operations done so
/// far, every [`POLL_INTERVAL`] and at the end.
pub fn load<S: KvStore>(
    store: &S,
    workload: &CoreWorkload,
    options: &RunOptions,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(u64),
) -> io::Result<PhaseResult> {
    run_phase(
        store,
        workload,
        options,
        Phase::Load,
        Hooks {
            interrupted,
            progress,
        },
    )
}

/// Runs the workload's operation mix (`operation_count` operations, or until the time limit
/// or an interrupt when it is 0) against a store that holds the loaded records.
pub fn run<S: KvStore>(
    store: &S,
    workload: &CoreWorkload,
    options: &RunOptions,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(u64),
) -> io::Result<PhaseResult> {
    run_phase(
        store,
        workload,
        options,
        Phase::Run,
        Hooks {
            interrupted,
            progress,
        },
    )
}

struct Hooks<'a> {
    interrupted: &'a dyn Fn() -> bool,
    progress: &'a mut dyn FnMut(u64),
}

/// What one client thread is to do.
#[derive(Debug, Clone, Copy)]
struct ThreadPlan {
    phase: Phase,
    /// Operations to do; 0 is no limit.
    ops: u64,
    /// Interval between scheduled operations under a target, in nanoseconds.
    tick_ns: Option<u64>,
    seed: u64,
}

/// State the client threads and the coordinating thread share.
struct Control {
    stop: AtomicBool,
    ops_done: AtomicU64,
    /// Woken when a client thread ends.
    coordinator: Thread,
}

/// Asks the client threads to stop when dropped (during unwinding).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// What a client thread hands back.
struct ThreadOutcome {
    measurements: Measurements,
    ops: u64,
    end: Instant,
}

fn run_phase<S: KvStore>(
    store: &S,
    props: &CoreWorkload,
    options: &RunOptions,
    phase: Phase,
    hooks: Hooks<'_>,
) -> io::Result<PhaseResult> {
    options.validate()?;
    let workload = Workload::new(props)?;
    let plans = plan_threads(props, options, phase);
    let control = Control {
        stop: AtomicBool::new(false),
        ops_done: AtomicU64::new(0),
        coordinator: thread::current(),
    };
    let start = Instant::now();
    let (outcomes, ended) = thread::scope(|scope| {
        let handles: Vec<_> = plans
            .iter()
            .map(|plan| {
                let (workload, control) = (&workload, &control);
                scope.spawn(move || client_thread(store, workload, *plan, control))
            })
            .collect();
        // Should a hook panic, the scope still waits for the threads: stop them first.
        let stop_on_unwind = StopOnDrop(&control.stop);
        let ended = supervise(&handles, &control, options, start, hooks);
        std::mem::forget(stop_on_unwind);
        let outcomes: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect();
        (outcomes, ended)
    });
    let outcomes = outcomes.into_iter().collect::<io::Result<Vec<_>>>()?;
    let (measurements, operations, runtime) = combine(&outcomes, start);
    let secs = runtime.as_secs_f64();
    Ok(PhaseResult {
        phase,
        store: store.describe(),
        workload: props.clone(),
        threads: plans.len(),
        target_ops_per_sec: options.target_ops_per_sec,
        max_execution_time_secs: options.max_execution_time.map(|t| t.as_secs_f64()),
        seed: options.seed,
        runtime_ns: u64::try_from(runtime.as_nanos()).unwrap_or(u64::MAX),
        operations,
        ops_per_sec: if secs > 0.0 {
            operations as f64 / secs
        } else {
            0.0
        },
        interrupted: ended.0,
        timed_out: ended.1,
        per_op: measurements.summaries(),
    })
}

/// YCSB's `Client.initDb`: the per-thread operation counts and the per-thread throttle.
fn plan_threads(props: &CoreWorkload, options: &RunOptions, phase: Phase) -> Vec<ThreadPlan> {
    let total = match phase {
        Phase::Load => props.effective_insert_count(),
        Phase::Run => props.operation_count,
    };
    let mut threads = options.threads as u64;
    if total > 0 {
        threads = threads.min(total);
    }
    // YCSB: (long) (1e6 / (target / threads / 1000)) ns per operation.
    let tick_ns = options
        .target_ops_per_sec
        .map(|target| (1e9 * threads as f64 / target) as u64);
    let mut seeds = fastrand::Rng::with_seed(options.seed);
    (0..threads)
        .map(|i| ThreadPlan {
            phase,
            ops: total / threads + u64::from(i < total % threads),
            tick_ns,
            seed: seeds.u64(..),
        })
        .collect()
}

/// The coordinating thread's loop: polls `interrupted()`, enforces the time limit and reports
/// progress until every client thread has ended. Returns (interrupted, timed out).
fn supervise<T>(
    handles: &[thread::ScopedJoinHandle<'_, T>],
    control: &Control,
    options: &RunOptions,
    start: Instant,
    hooks: Hooks<'_>,
) -> (bool, bool) {
    let (mut interrupted, mut timed_out) = (false, false);
    let deadline = options.max_execution_time.map(|t| start + t);
    while !handles.iter().all(|h| h.is_finished()) {
        if !interrupted && (hooks.interrupted)() {
            interrupted = true;
            control.stop.store(true, Ordering::SeqCst);
        }
        let now = Instant::now();
        if !timed_out && deadline.is_some_and(|d| now >= d) {
            timed_out = true;
            control.stop.store(true, Ordering::SeqCst);
        }
        (hooks.progress)(control.ops_done.load(Ordering::Relaxed));
        let mut wait = POLL_INTERVAL;
        if let Some(deadline) = deadline.filter(|_| !timed_out) {
            wait = wait.min(deadline.saturating_duration_since(now));
        }
        // Client threads unpark us as they end, so the last one is not waited for.
        thread::park_timeout(wait);
    }
    (hooks.progress)(control.ops_done.load(Ordering::Relaxed));
    (interrupted, timed_out)
}

/// One client thread; on an error it asks the others to stop. Always wakes the coordinator.
fn client_thread<S: KvStore>(
    store: &S,
    workload: &Workload,
    plan: ThreadPlan,
    control: &Control,
) -> io::Result<ThreadOutcome> {
    let outcome = client_loop(store, workload, plan, control);
    if outcome.is_err() {
        control.stop.store(true, Ordering::SeqCst);
    }
    control.coordinator.unpark();
    outcome
}

/// YCSB's `ClientThread.run`: open a session, then operations until the count is done or a
/// stop is requested, throttled to the thread's share of the target.
fn client_loop<S: KvStore>(
    store: &S,
    workload: &Workload,
    plan: ThreadPlan,
    control: &Control,
) -> io::Result<ThreadOutcome> {
    let mut session = store
        .session()
        .map_err(|e| io::Error::new(e.kind(), format!("opening a session: {e}")))?;
    let mut client = workload.client(plan.seed);
    let mut measurements = Measurements::new();
    // YCSB: only when the thread's target is at most one operation per millisecond.
    if let Some(tick_ns) = plan.tick_ns.filter(|t| *t >= 1_000_000) {
        let jitter = Duration::from_nanos(client.rng().u64(0..tick_ns));
        sleep_until(Instant::now() + jitter, &control.stop);
    }
    let start = Instant::now();
    let mut done: u64 = 0;
    while (plan.ops == 0 || done < plan.ops) && !control.stop.load(Ordering::Relaxed) {
        one_operation(&mut client, &mut session, plan.phase, &mut measurements)?;
        done += 1;
        control.ops_done.fetch_add(1, Ordering::Relaxed);
        if let Some(tick_ns) = plan.tick_ns {
            // Absolute deadlines: oversleeping one tick does not delay the ones after it.
            let due = Duration::from_nanos(tick_ns.saturating_mul(done));
            sleep_until(start + due, &control.stop);
        }
    }
    Ok(ThreadOutcome {
        measurements,
        ops: done,
        end: Instant::now(),
    })
}

fn one_operation<S: KvSession>(
    client: &mut Client<'_>,
    session: &mut S,
    phase: Phase,
    measurements: &mut Measurements,
) -> io::Result<()> {
    match phase {
        Phase::Load => client.do_insert(session, measurements),
        Phase::Run => client.do_transaction(session, measurements).map(|_| ()),
    }
}

/// Sleeps until `deadline` or a stop request, whichever is first.
fn sleep_until(deadline: Instant, stop: &AtomicBool) {
    loop {
        let now = Instant::now();
        if now >= deadline || stop.load(Ordering::Relaxed) {
            return;
        }
        thread::sleep((deadline - now).min(SLEEP_SLICE));
    }
}

/// The threads' measurements merged, their operations summed, and the phase's runtime (from
/// `start` to the end of the last thread).
fn combine(outcomes: &[ThreadOutcome], start: Instant) -> (Measurements, u64, Duration) {
    let mut measurements = Measurements::new();
    for o in outcomes {
        measurements.merge(&o.measurements);
    }
    let operations = outcomes.iter().map(|o| o.ops).sum();
    let end = outcomes.iter().map(|o| o.end).max().unwrap_or(start);
    (
        measurements,
        operations,
        end.saturating_duration_since(start),
    )
}
