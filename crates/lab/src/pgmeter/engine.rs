//! pgmeter's test: I/Os drawn from an access specification against preallocated test files,
//! with a number of outstanding I/Os per file, a warm-up and a measured phase by time.
//!
//! **Outstanding I/Os are threads.** Iometer keeps N asynchronous I/Os queued per target;
//! here each of the N is a thread of its own that issues one synchronous I/O at a time
//! (`pread`/`pwrite` on kernel targets, the library's `read_at`/`write_at` on nvmfs, which
//! has no asynchronous interface), so a file never has more than N I/Os in flight and has N
//! whenever every thread is inside its call. Each thread opens its own handle to its file, as
//! separate processes would (on nvmfs this also keeps the per-handle translation cache
//! uncontended), and is its own stream ([`super::stream`]): with a sequential specification a
//! file is read or written by N sequential streams, one per outstanding I/O.

use super::spec::{Access, AccessSpec};
use super::stream::Stream;
use crate::filebench::engine::Tick;
use crate::filebench::stats::Latency;
use crate::micro::measure::new_histogram;
use crate::stats::Summary;
use crate::targets::api::{MicroFile, MicroFs};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The directory the test files are in, relative to the target's root.
pub const DIR: &str = "pgmeter";

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// Bounds that keep a run's threads and memory finite.
const FILES_MAX: usize = 1024;
const OUTSTANDING_MAX: usize = 1024;
const THREADS_MAX: usize = 4096;
const SECONDS_MAX: f64 = 86_400.0;

/// One pgmeter test case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PgmeterConfig {
    pub spec: AccessSpec,
    /// Test files (pgmeter's files, one per disk in seed 001).
    pub files: usize,
    /// Size of each test file; each is preallocated (written in full) before the test.
    pub file_size_bytes: u64,
    /// Outstanding I/Os per file, each a thread (seed 001: 1, 4, 16, 64).
    pub outstanding: usize,
    /// Warm-up at the start of the test: the full workload runs, nothing is recorded.
    pub warmup_seconds: f64,
    /// Length of the measured phase.
    pub run_seconds: f64,
    /// Optional bound on the measured phase's I/Os (all threads together): it ends at
    /// whichever of the time and this count comes first (checked every millisecond).
    pub ops_max: Option<u64>,
    /// Length of the interval statistics pgmeter records (ops/s and MB/s per interval).
    pub interval_seconds: f64,
    pub seed: u64,
}

impl PgmeterConfig {
    /// `spec` with seed 001's small-system settings: one 1 GiB file, one outstanding I/O,
    /// 30 s warm-up, 5 minutes measured, 10 s intervals.
    pub fn new(spec: AccessSpec) -> Self {
        PgmeterConfig {
            spec,
            files: 1,
            file_size_bytes: 1 << 30,
            outstanding: 1,
            warmup_seconds: 30.0,
            run_seconds: 300.0,
            ops_max: None,
            interval_seconds: 10.0,
            seed: 1,
        }
    }

    /// Threads of the test: files x outstanding I/Os.
    pub fn threads(&self) -> usize {
        self.files.saturating_mul(self.outstanding)
    }

    /// Checks the spec, the counts and sizes (each file holds the largest transfer) and the
    /// times, naming the bad value.
    pub fn validate(&self) -> Result<(), String> {
        self.spec.validate()?;
        if !(1..=FILES_MAX).contains(&self.files) {
            return Err(format!("files must be 1..={FILES_MAX}, got {}", self.files));
        }
        if !(1..=OUTSTANDING_MAX).contains(&self.outstanding) {
            return Err(format!(
                "outstanding I/Os per file must be 1..={OUTSTANDING_MAX}, got {}",
                self.outstanding
            ));
        }
        if self.threads() > THREADS_MAX {
            return Err(format!(
                "files x outstanding = {} threads, more than {THREADS_MAX}",
                self.threads()
            ));
        }
        let biggest = self.spec.max_transfer_bytes();
        if self.file_size_bytes < biggest {
            return Err(format!(
                "file size {} is smaller than the largest transfer of {} ({biggest} bytes)",
                self.file_size_bytes, self.spec.name
            ));
        }
        if self.ops_max == Some(0) {
            return Err("an op limit must be at least 1".into());
        }
        self.validate_times()
    }

    fn validate_times(&self) -> Result<(), String> {
        let ok = |v: f64| v.is_finite() && (0.0..=SECONDS_MAX).contains(&v);
        if !ok(self.warmup_seconds) {
            return Err(format!(
                "warm-up seconds must be 0..={SECONDS_MAX}, got {}",
                self.warmup_seconds
            ));
        }
        for (what, v) in [
            ("run", self.run_seconds),
            ("interval", self.interval_seconds),
        ] {
            if !ok(v) || v == 0.0 {
                return Err(format!(
                    "{what} seconds must be > 0 and <= {SECONDS_MAX}, got {v}"
                ));
            }
        }
        Ok(())
    }
}

/// The test file `index`, relative to the target's root.
pub fn file_path(index: usize) -> String {
    format!("{DIR}/file{index:04}")
}

/// What preallocation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Prepared {
    /// Files written in full now.
    pub created: usize,
    /// Files already there at the right size, kept (pgmeter tests an existing file, so
    /// several test cases can share the files of a first one).
    pub reused: usize,
    pub seconds: f64,
}

/// Creates the test files that are not there yet at their size, writing each in full with
/// 1 MiB writes (non-zero bytes, so that no file system can keep them sparse), then syncs it.
pub fn prepare<F: MicroFs>(
    fs: &F,
    cfg: &PgmeterConfig,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<Prepared> {
    cfg.validate().map_err(invalid)?;
    let t0 = Instant::now();
    match fs.mkdir(&fs.name(DIR)) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            return Err(io::Error::new(e.kind(), format!("mkdir {DIR}: {e}")))
        }
        _ => {}
    }
    let mut out = Prepared::default();
    for i in 0..cfg.files {
        if interrupted() {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
        }
        let path = file_path(i);
        let name = fs.name(&path);
        if fs.stat(&name).ok() == Some(cfg.file_size_bytes) {
            out.reused += 1;
            continue;
        }
        fill(fs, &name, cfg.file_size_bytes, interrupted)
            .map_err(|e| io::Error::new(e.kind(), format!("preallocating {path}: {e}")))?;
        out.created += 1;
    }
    out.seconds = t0.elapsed().as_secs_f64();
    Ok(out)
}

fn fill<F: MicroFs>(
    fs: &F,
    name: &F::Name,
    size: u64,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<()> {
    let file = fs.create(name)?;
    let chunk = pattern(1 << 20);
    let mut off = 0u64;
    while off < size {
        if interrupted() {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
        }
        let n = (size - off).min(chunk.len() as u64) as usize;
        file.write_all_at(&chunk[..n], off)?;
        off += n as u64;
    }
    file.sync()
}

/// Non-zero bytes for writes.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 | 0x80).collect()
}

fn invalid(e: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

/// Counts of one line of the specification.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LineStats {
    pub transfer_bytes: u64,
    pub reads: u64,
    pub writes: u64,
    pub random: u64,
    pub sequential: u64,
}

/// One test file's share of the work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileStats {
    pub path: String,
    /// Threads (outstanding I/Os) that served it.
    pub streams: usize,
    pub ops: u64,
    pub bytes: u64,
}

/// One of pgmeter's interval statistics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IntervalStats {
    /// End of the interval, seconds into the measured phase.
    pub end_seconds: f64,
    pub ops_per_sec: f64,
    pub mb_per_sec: f64,
}

/// What one test measured.
#[derive(Debug, Clone, Serialize)]
pub struct PgmeterResult {
    pub spec: String,
    pub files: usize,
    pub outstanding: usize,
    pub threads: usize,
    pub file_size_bytes: u64,
    pub prepared: Prepared,
    /// Whether the file system was remounted (caches dropped) before the test.
    pub remounted: bool,
    /// Length of the measured phase.
    pub seconds: f64,
    pub ops: u64,
    pub ops_per_sec: f64,
    /// MB = 2^20 bytes.
    pub mb_per_sec: f64,
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Latency of every I/O, then of reads and of writes alone.
    pub latency_ns: Latency,
    pub read_latency_ns: Latency,
    pub write_latency_ns: Latency,
    /// Per line of the specification, in its order.
    pub lines: Vec<LineStats>,
    pub per_file: Vec<FileStats>,
    /// The complete intervals of the measured phase.
    pub intervals: Vec<IntervalStats>,
    /// ops/s over the intervals: mean and 95% interval (how seed 001 gives pgmeter's CIs).
    pub interval_ops_per_sec: Option<Summary>,
    /// Why the test ended before its time (interrupted), if it did.
    pub stopped_early: Option<String>,
}

/// A thread's live counters on a cache line of its own (only it writes them).
#[repr(align(128))]
#[derive(Default)]
struct Counter {
    ops: AtomicU64,
    bytes: AtomicU64,
}

struct Shared {
    phase: AtomicU8,
    counters: Vec<Counter>,
    failed: Mutex<Option<io::Error>>,
    any_failed: AtomicBool,
}

impl Shared {
    fn totals(&self) -> (u64, u64) {
        self.counters.iter().fold((0, 0), |(o, b), c| {
            (
                o + c.ops.load(Ordering::Relaxed),
                b + c.bytes.load(Ordering::Relaxed),
            )
        })
    }

    fn fail(&self, e: io::Error) {
        let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(e);
        self.any_failed.store(true, Ordering::Relaxed);
    }
}

/// One thread's numbers of the measured phase.
struct ThreadStats {
    all: Histogram<u64>,
    read: Histogram<u64>,
    write: Histogram<u64>,
    lines: Vec<LineStats>,
    read_bytes: u64,
    write_bytes: u64,
}

impl ThreadStats {
    fn new(spec: &AccessSpec) -> Self {
        ThreadStats {
            all: new_histogram(),
            read: new_histogram(),
            write: new_histogram(),
            lines: spec
                .lines
                .iter()
                .map(|l| LineStats {
                    transfer_bytes: l.transfer_bytes,
                    ..LineStats::default()
                })
                .collect(),
            read_bytes: 0,
            write_bytes: 0,
        }
    }

    fn record(&mut self, a: Access, bytes: u64, ns: u64) {
        let ns = ns.max(1);
        self.all.saturating_record(ns);
        let line = &mut self.lines[a.line];
        if a.read {
            self.read.saturating_record(ns);
            line.reads += 1;
            self.read_bytes += bytes;
        } else {
            self.write.saturating_record(ns);
            line.writes += 1;
            self.write_bytes += bytes;
        }
        if a.random {
            line.random += 1;
        } else {
            line.sequential += 1;
        }
    }

    fn ops(&self) -> u64 {
        self.all.len()
    }

    fn add(&mut self, other: &ThreadStats) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.all.add(&other.all);
        let _ = self.read.add(&other.read);
        let _ = self.write.add(&other.write);
        for (a, b) in self.lines.iter_mut().zip(&other.lines) {
            a.reads += b.reads;
            a.writes += b.writes;
            a.random += b.random;
            a.sequential += b.sequential;
        }
        self.read_bytes += other.read_bytes;
        self.write_bytes += other.write_bytes;
    }
}

/// One emulated outstanding I/O.
struct Worker<'a, H> {
    file: H,
    spec: &'a AccessSpec,
    shared: &'a Shared,
    index: usize,
    stream: Stream,
    rng: fastrand::Rng,
    buf: Vec<u8>,
    stats: ThreadStats,
}

impl<H: MicroFile> Worker<'_, H> {
    /// Issues I/Os until told to stop or an I/O fails.
    fn run(mut self) -> ThreadStats {
        loop {
            let phase = self.shared.phase.load(Ordering::Relaxed);
            if phase == STOP || self.shared.any_failed.load(Ordering::Relaxed) {
                break;
            }
            if let Err(e) = self.one(phase == MEASURE) {
                self.shared.fail(e);
                break;
            }
        }
        self.stats
    }

    fn one(&mut self, measuring: bool) -> io::Result<()> {
        let a = self.spec.draw(&mut self.rng);
        let line = &self.spec.lines[a.line];
        let bytes = line.transfer_bytes;
        let off = self
            .stream
            .place(&mut self.rng, bytes, line.align_bytes, a.random);
        let buf = &mut self.buf[..bytes as usize];
        let t0 = Instant::now();
        let r = if a.read {
            self.file.read_exact_at(buf, off)
        } else {
            self.file.write_all_at(buf, off)
        };
        let ns = t0.elapsed().as_nanos() as u64;
        let what = if a.read { "read" } else { "write" };
        r.map_err(|e| io::Error::new(e.kind(), format!("{what} of {bytes} at {off}: {e}")))?;
        if measuring {
            self.stats.record(a, bytes, ns);
            let c = &self.shared.counters[self.index];
            // Single writer: a plain load and store, no read-modify-write.
            c.ops
                .store(c.ops.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            c.bytes
                .store(c.bytes.load(Ordering::Relaxed) + bytes, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Runs the test on files made by [`prepare`]: warm-up, then the measured phase.
pub fn measure<F>(
    fs: &F,
    cfg: &PgmeterConfig,
    interrupted: &dyn Fn() -> bool,
    tick: &mut dyn FnMut(Tick),
) -> io::Result<PgmeterResult>
where
    F: MicroFs,
    F::File: Send,
{
    cfg.validate().map_err(invalid)?;
    let handles = open_handles(fs, cfg)?;
    let shared = Shared {
        phase: AtomicU8::new(WARMUP),
        counters: (0..handles.len()).map(|_| Counter::default()).collect(),
        failed: Mutex::new(None),
        any_failed: AtomicBool::new(false),
    };
    let (per_thread, control) = std::thread::scope(|s| {
        let joins: Vec<_> = handles
            .into_iter()
            .enumerate()
            .map(|(t, file)| {
                let w = worker(cfg, &shared, t, file);
                s.spawn(move || w.run())
            })
            .collect();
        let control = control(cfg, &shared, interrupted, tick);
        shared.phase.store(STOP, Ordering::SeqCst);
        let stats: Vec<_> = joins.into_iter().map(|j| j.join()).collect();
        (stats, control)
    });
    if let Some(e) = shared
        .failed
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
    {
        return Err(e);
    }
    let per_thread = per_thread
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| io::Error::other("a pgmeter thread panicked"))?;
    Ok(summarise(cfg, per_thread, control))
}

/// One handle per thread, thread `t` on file `t / outstanding`, opened before any I/O.
fn open_handles<F: MicroFs>(fs: &F, cfg: &PgmeterConfig) -> io::Result<Vec<F::File>> {
    (0..cfg.threads())
        .map(|t| {
            let path = file_path(t / cfg.outstanding);
            let file = fs
                .open_rw(&fs.name(&path))
                .map_err(|e| io::Error::new(e.kind(), format!("open {path}: {e}")))?;
            match file.size()? {
                n if n >= cfg.file_size_bytes => Ok(file),
                n => Err(invalid(format!(
                    "{path} holds {n} bytes, not {} (run prepare first)",
                    cfg.file_size_bytes
                ))),
            }
        })
        .collect()
}

fn worker<'a, H>(cfg: &'a PgmeterConfig, shared: &'a Shared, t: usize, file: H) -> Worker<'a, H> {
    let k = t % cfg.outstanding;
    let buf = pattern(cfg.spec.max_transfer_bytes() as usize);
    Worker {
        file,
        spec: &cfg.spec,
        shared,
        index: t,
        stream: Stream::new(cfg.file_size_bytes, k, cfg.outstanding),
        rng: fastrand::Rng::with_seed(
            cfg.seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        ),
        buf,
        stats: ThreadStats::new(&cfg.spec),
    }
}

/// What the controlling thread saw of the measured phase.
struct Control {
    seconds: f64,
    intervals: Vec<IntervalStats>,
    stopped_early: Option<String>,
}

/// Warm-up, then the measured phase with its intervals, until the time is up, the run is
/// interrupted or a thread fails.
fn control(
    cfg: &PgmeterConfig,
    shared: &Shared,
    interrupted: &dyn Fn() -> bool,
    tick: &mut dyn FnMut(Tick),
) -> Control {
    // An op limit is checked at every poll: often, so that a fast test does not overshoot it
    // by thousands of I/Os.
    let poll = Duration::from_millis(if cfg.ops_max.is_some() { 1 } else { 20 });
    let stop_now = || shared.any_failed.load(Ordering::Relaxed) || interrupted();
    let ops_done = || cfg.ops_max.is_some_and(|m| shared.totals().0 >= m);
    let start = Instant::now();
    let warmup = Duration::from_secs_f64(cfg.warmup_seconds);
    while start.elapsed() < warmup && !stop_now() {
        std::thread::sleep(poll.min(warmup.saturating_sub(start.elapsed())));
    }
    let run = Duration::from_secs_f64(cfg.run_seconds);
    let every = Duration::from_secs_f64(cfg.interval_seconds);
    let t0 = Instant::now();
    shared.phase.store(MEASURE, Ordering::SeqCst);
    let mut iv = Intervals::new(t0, every);
    while t0.elapsed() < run && !stop_now() && !ops_done() {
        let wait = run.saturating_sub(t0.elapsed()).min(iv.until_next());
        std::thread::sleep(poll.min(wait).max(Duration::from_millis(1)));
        iv.sample(shared, tick);
    }
    // However late the controller ran, an interval that is complete is counted.
    iv.sample(shared, tick);
    let seconds = t0.elapsed().as_secs_f64();
    Control {
        seconds,
        intervals: iv.done,
        stopped_early: interrupted().then(|| "interrupted".to_string()),
    }
}

/// pgmeter's interval statistics, and the progress ticks, sampled from the live counters.
struct Intervals {
    t0: Instant,
    every: Duration,
    /// Start of the current interval and the totals then.
    since: (Instant, u64, u64),
    last_tick: Instant,
    done: Vec<IntervalStats>,
}

impl Intervals {
    fn new(t0: Instant, every: Duration) -> Self {
        Intervals {
            t0,
            every,
            since: (t0, 0, 0),
            last_tick: t0,
            done: Vec::new(),
        }
    }

    fn until_next(&self) -> Duration {
        (self.since.0 + self.every).saturating_duration_since(Instant::now())
    }

    /// Closes the current interval when its time has come, and ticks about four times a
    /// second. Only whole intervals count: the measured phase's last samples come at its end,
    /// so a last part shorter than an interval is left out. A sample that comes late (the
    /// controller was not scheduled) closes a longer interval, its rate over its real length.
    fn sample(&mut self, shared: &Shared, tick: &mut dyn FnMut(Tick)) {
        let now = Instant::now();
        let (ops, bytes) = shared.totals();
        let dt = (now - self.since.0).as_secs_f64();
        if now >= self.since.0 + self.every {
            self.done.push(IntervalStats {
                end_seconds: (now - self.t0).as_secs_f64(),
                ops_per_sec: (ops - self.since.1) as f64 / dt,
                mb_per_sec: (bytes - self.since.2) as f64 / (1u64 << 20) as f64 / dt,
            });
            self.since = (now, ops, bytes);
        }
        if now - self.last_tick >= Duration::from_millis(250) {
            self.last_tick = now;
            let secs = (now - self.t0).as_secs_f64().max(1e-9);
            tick(Tick {
                measuring: true,
                elapsed: now - self.t0,
                ops_per_sec: ops as f64 / secs,
            });
        }
    }
}

fn summarise(cfg: &PgmeterConfig, per_thread: Vec<ThreadStats>, c: Control) -> PgmeterResult {
    let per_file = (0..cfg.files)
        .map(|f| {
            let mine = &per_thread[f * cfg.outstanding..(f + 1) * cfg.outstanding];
            FileStats {
                path: file_path(f),
                streams: mine.len(),
                ops: mine.iter().map(ThreadStats::ops).sum(),
                bytes: mine.iter().map(|t| t.read_bytes + t.write_bytes).sum(),
            }
        })
        .collect();
    let mut total = ThreadStats::new(&cfg.spec);
    per_thread.iter().for_each(|t| total.add(t));
    let secs = c.seconds.max(1e-9);
    let ops = total.ops();
    let rates: Vec<f64> = c.intervals.iter().map(|i| i.ops_per_sec).collect();
    PgmeterResult {
        spec: cfg.spec.name.clone(),
        files: cfg.files,
        outstanding: cfg.outstanding,
        threads: cfg.threads(),
        file_size_bytes: cfg.file_size_bytes,
        prepared: Prepared::default(),
        remounted: false,
        seconds: c.seconds,
        ops,
        ops_per_sec: ops as f64 / secs,
        mb_per_sec: (total.read_bytes + total.write_bytes) as f64 / (1u64 << 20) as f64 / secs,
        reads: total.read.len(),
        writes: total.write.len(),
        read_bytes: total.read_bytes,
        write_bytes: total.write_bytes,
        latency_ns: Latency::of(&total.all),
        read_latency_ns: Latency::of(&total.read),
        write_latency_ns: Latency::of(&total.write),
        lines: total.lines,
        per_file,
        interval_ops_per_sec: Summary::of(&rates),
        intervals: c.intervals,
        stopped_early: c.stopped_early,
    }
}
