//! Runs a personality's threads on a target: one trial is a warm-up whose
//! operations are not recorded, then a measured phase bounded by time or by
//! operation count, ending early (with the reason) when a flowop finds no
//! file to pick.
//!
//! Each thread group of the workload gets its `instances` threads, each
//! looping over the group's flowops. Semaphores ([`super::sem`]) live for
//! one trial; the controller closes them when the trial stops, so that no
//! thread stays blocked in a semblock or sempost.

use super::fileset::{Fileset, PickKind, PickState};
use super::personality::{Flowop, Op, SetId, ThreadGroup, Workload, FD_SLOTS};
use super::sem::{Semaphore, Waited};
use super::stats::{FlowopStats, ThreadStats};
use crate::targets::api::{MicroFile, MicroFs};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// A fileset with its names resolved for one target and its pick state.
pub struct SetState<N> {
    pub fileset: Fileset,
    pub names: Vec<N>,
    pub picks: Mutex<PickState>,
}

impl<N> SetState<N> {
    pub fn new<F: MicroFs<Name = N>>(fs: &F, fileset: Fileset) -> Self {
        let names = fileset.files.iter().map(|f| fs.name(&f.path)).collect();
        let picks = Mutex::new(PickState::new(&fileset));
        SetState {
            fileset,
            names,
            picks,
        }
    }

    pub(super) fn picks(&self) -> std::sync::MutexGuard<'_, PickState> {
        // A thread that panicked while holding the lock left consistent
        // flags (every update is a single assignment), so keep going.
        self.picks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How long a trial runs.
#[derive(Debug, Clone, Copy)]
pub struct TrialLimits {
    pub warmup: Duration,
    pub run: Duration,
    /// Stop the measured phase after this many flowops (all threads).
    pub ops_max: Option<u64>,
}

/// Live numbers for a progress display.
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    pub measuring: bool,
    pub elapsed: Duration,
    pub ops_per_sec: f64,
}

/// A thread's op counter on a cache line of its own, so that counting is
/// not a shared write on every op (the controller only reads them).
#[repr(align(128))]
#[derive(Default)]
struct OpCounter(AtomicU64);

/// The semaphores of one trial: for each flowop index, one per thread of
/// its group if it is a semblock, none otherwise.
struct Semaphores(Vec<Vec<Semaphore>>);

impl Semaphores {
    fn new(workload: &Workload) -> Self {
        let mut sems: Vec<Vec<Semaphore>> = workload.flowops.iter().map(|_| Vec::new()).collect();
        for g in &workload.groups {
            for i in g.flowops.clone() {
                if let Op::SemBlock { highwater, .. } = workload.flowops[i].op {
                    sems[i] = (0..g.instances)
                        .map(|_| Semaphore::new(highwater))
                        .collect();
                }
            }
        }
        Semaphores(sems)
    }

    fn close_all(&self) {
        self.0.iter().flatten().for_each(Semaphore::close);
    }
}

/// State shared by the threads of one trial.
struct Shared<'a, N> {
    main: &'a SetState<N>,
    log: Option<&'a SetState<N>>,
    flowops: &'a [Flowop],
    sems: Semaphores,
    phase: AtomicU8,
    ops: Vec<OpCounter>,
    stopped_early: Mutex<Option<String>>,
    failed: Mutex<Option<io::Error>>,
    any_stop: AtomicBool,
}

impl<N> Shared<'_, N> {
    fn set(&self, id: SetId) -> &SetState<N> {
        match id {
            SetId::Main => self.main,
            SetId::Log => self.log.unwrap_or(self.main),
        }
    }

    /// Flowops done so far by all threads.
    fn ops_total(&self) -> u64 {
        self.ops.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
    }

    fn stop_early(&self, why: String) {
        let mut s = self.stopped_early.lock().unwrap_or_else(|e| e.into_inner());
        s.get_or_insert(why);
        self.any_stop.store(true, Ordering::Relaxed);
    }

    fn fail(&self, e: io::Error) {
        let mut f = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        f.get_or_insert(e);
        self.any_stop.store(true, Ordering::Relaxed);
    }
}

/// What one trial measured.
pub struct TrialOutcome {
    pub flowops: Vec<FlowopStats>,
    pub seconds: f64,
    pub stopped_early: Option<String>,
    pub cpu: CpuTimes,
}

/// CPU used during the measured phase.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct CpuTimes {
    /// User and system time of this process (all its threads).
    pub user_seconds: f64,
    pub system_seconds: f64,
    /// Busy fraction of all CPUs of the machine (from /proc/stat), which
    /// includes kernel threads such as journal and writeback workers.
    pub machine_busy_fraction: Option<f64>,
    /// A cache line's round trip between two CPUs, measured just after the trial
    /// (`core_link`): where the host placed the virtual CPUs, which moves shared-line costs.
    #[serde(default)]
    pub core_link_ns: Option<f64>,
    /// The same, measured just before the trial's threads started (after the remount).
    #[serde(default)]
    pub core_link_before_ns: Option<f64>,
}

/// Runs one trial of `workload`: every thread of every group.
#[allow(clippy::too_many_arguments)]
pub fn run_trial<F>(
    fs: &F,
    main: &SetState<F::Name>,
    log: Option<&SetState<F::Name>>,
    workload: &Workload,
    limits: TrialLimits,
    seed: u64,
    interrupted: &dyn Fn() -> bool,
    tick: &mut dyn FnMut(Tick),
) -> io::Result<TrialOutcome>
where
    F: MicroFs + Sync,
    F::Name: Sync,
    F::File: Send,
{
    let flowops = &workload.flowops[..];
    // (group, instance within it) of every thread.
    let threads: Vec<(&ThreadGroup, usize)> = workload
        .groups
        .iter()
        .flat_map(|g| (0..g.instances).map(move |k| (g, k)))
        .collect();
    let shared = Shared {
        main,
        log,
        flowops,
        sems: Semaphores::new(workload),
        phase: AtomicU8::new(WARMUP),
        ops: (0..threads.len()).map(|_| OpCounter::default()).collect(),
        stopped_early: Mutex::new(None),
        failed: Mutex::new(None),
        any_stop: AtomicBool::new(false),
    };
    let (per_thread, seconds, mut cpu) = std::thread::scope(|s| {
        let handles: Vec<_> = threads
            .iter()
            .enumerate()
            .map(|(t, &(group, instance))| {
                let shared = &shared;
                let me = ThreadId {
                    index: t,
                    group,
                    instance,
                };
                s.spawn(move || thread_main(fs, shared, me, seed ^ (t as u64).wrapping_mul(0x9E37)))
            })
            .collect();
        let (seconds, cpu) = control(&shared, limits, interrupted, tick);
        let per_thread: Vec<ThreadStats> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| ThreadStats::new(flowops.len())))
            .collect();
        (per_thread, seconds, cpu)
    });
    // After the threads are gone, so that nothing else competes for the two CPUs.
    cpu.core_link_ns = crate::core_link::round_trip_ns();
    if let Some(e) = shared
        .failed
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
    {
        return Err(e);
    }
    let mut stopped = shared
        .stopped_early
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    if stopped.is_none() && interrupted() {
        stopped = Some("interrupted (Ctrl-C)".into());
    }
    Ok(TrialOutcome {
        flowops: FlowopStats::merge(flowops, per_thread),
        seconds,
        stopped_early: stopped,
        cpu,
    })
}

/// The controlling thread: warm-up, then the measured phase, then stop.
fn control<N>(
    shared: &Shared<'_, N>,
    limits: TrialLimits,
    interrupted: &dyn Fn() -> bool,
    tick: &mut dyn FnMut(Tick),
) -> (f64, CpuTimes) {
    // An op limit is checked at every poll: poll often enough that a fast
    // workload does not overshoot it by tens of thousands of ops.
    let poll = if limits.ops_max.is_some() {
        Duration::from_millis(1)
    } else {
        Duration::from_millis(50)
    };
    let start = Instant::now();
    let mut last = (start, 0u64);
    let mut report = |measuring: bool, since: Instant, last: &mut (Instant, u64)| {
        let now = Instant::now();
        let ops = shared.ops_total();
        let dt = (now - last.0).as_secs_f64();
        if dt >= 0.2 {
            let rate = (ops - last.1) as f64 / dt;
            *last = (now, ops);
            tick(Tick {
                measuring,
                elapsed: now - since,
                ops_per_sec: rate,
            });
        }
    };
    let stop_now = || shared.any_stop.load(Ordering::Relaxed) || interrupted();
    while start.elapsed() < limits.warmup && !stop_now() {
        std::thread::sleep(poll.min(limits.warmup));
        report(false, start, &mut last);
    }
    let cpu0 = CpuSample::now();
    let t0 = Instant::now();
    let ops0 = shared.ops_total();
    shared.phase.store(MEASURE, Ordering::SeqCst);
    loop {
        let elapsed = t0.elapsed();
        let done_ops = shared.ops_total() - ops0;
        if elapsed >= limits.run || limits.ops_max.is_some_and(|m| done_ops >= m) || stop_now() {
            break;
        }
        std::thread::sleep(
            poll.min(limits.run.saturating_sub(elapsed))
                .max(Duration::from_millis(1)),
        );
        report(true, t0, &mut last);
    }
    shared.phase.store(STOP, Ordering::SeqCst);
    // Threads blocked in a semblock or sempost would never see the phase.
    shared.sems.close_all();
    let seconds = t0.elapsed().as_secs_f64();
    let cpu = cpu0.until_now();
    (seconds, cpu)
}

/// Which thread of which group a worker is.
#[derive(Clone, Copy)]
struct ThreadId<'w> {
    /// Position among all threads of the trial (its op counter).
    index: usize,
    group: &'w ThreadGroup,
    /// Instance within the group (its semaphore of a semblock flowop).
    instance: usize,
}

/// One worker: loops over its group's flowops until told to stop.
fn thread_main<F>(fs: &F, shared: &Shared<'_, F::Name>, me: ThreadId<'_>, seed: u64) -> ThreadStats
where
    F: MicroFs,
{
    let mut w = Worker {
        fs,
        shared,
        instance: me.instance,
        fds: std::array::from_fn(|_| None),
        rotating: [Rotating::default(), Rotating::default()],
        rng: fastrand::Rng::with_seed(seed),
        buf: Vec::new(),
        hog_cell: 0,
        stats: ThreadStats::new(shared.flowops.len()),
    };
    'outer: loop {
        for i in me.group.flowops.clone() {
            let flowop = &shared.flowops[i];
            for _ in 0..flowop.iters {
                if !w.run_once(i, flowop, me.index) {
                    break 'outer;
                }
            }
        }
    }
    w.close_all();
    w.stats
}

/// An open file of a thread: which entry of which set.
struct OpenFile<T> {
    file: T,
    set: SetId,
    entry: usize,
}

/// A thread's `opennext` file slots for one fileset (filebench's rotating
/// fds): each read or write uses the next slot, opening a round-robin pick
/// of the set into it on first use and keeping it open for the whole run,
/// so that every thread ends up holding one handle per file of the set.
struct Rotating<T> {
    slots: Vec<Option<OpenFile<T>>>,
    next: usize,
}

impl<T> Default for Rotating<T> {
    fn default() -> Self {
        Rotating {
            slots: Vec::new(),
            next: 0,
        }
    }
}

struct Worker<'a, 's, F: MicroFs> {
    fs: &'a F,
    shared: &'a Shared<'s, F::Name>,
    /// Instance within the thread's group.
    instance: usize,
    fds: [Option<OpenFile<F::File>>; FD_SLOTS],
    /// Indexed by [`SetId`] as usize.
    rotating: [Rotating<F::File>; 2],
    rng: fastrand::Rng,
    buf: Vec<u8>,
    /// The memory `hog` stores to.
    hog_cell: u8,
    stats: ThreadStats,
}

impl<F: MicroFs> Worker<'_, '_, F> {
    /// Runs flowop `i` once, counting and recording it. Returns false when
    /// the thread must end its loop.
    fn run_once(&mut self, i: usize, flowop: &Flowop, thread: usize) -> bool {
        let shared = self.shared;
        let phase = shared.phase.load(Ordering::Relaxed);
        if phase == STOP || shared.any_stop.load(Ordering::Relaxed) {
            return false;
        }
        let t0 = Instant::now();
        match self.run(i, flowop) {
            Ok(Some(bytes)) => {
                let ns = t0.elapsed().as_nanos() as u64;
                // The op limit and the live rate count what the IO summary counts.
                if flowop.op.kind().is_io() {
                    let counter = &shared.ops[thread].0;
                    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                }
                if phase == MEASURE {
                    self.stats.record(i, ns, bytes);
                }
                true
            }
            Ok(None) => false,
            Err(e) => {
                shared.fail(io::Error::new(
                    e.kind(),
                    format!("flowop {} failed: {e}", flowop.name),
                ));
                false
            }
        }
    }

    /// Runs one flowop. `Ok(Some(bytes))` when it ran, `Ok(None)` when the
    /// thread must stop: the run stops early (the reason is recorded in
    /// `shared`) or the trial is ending (a semaphore was closed).
    fn run(&mut self, i: usize, flowop: &Flowop) -> io::Result<Option<u64>> {
        let set = self.shared.set(flowop.set);
        match flowop.op {
            Op::CreateFile { fd } => self.create(set, flowop.set, fd),
            Op::OpenFile { fd } => self.open(set, flowop.set, fd),
            Op::CloseFile { fd } => {
                self.close(fd);
                Ok(Some(0))
            }
            Op::WriteWholeFile { fd, iosize } => self.write_whole(fd, iosize),
            Op::ReadWholeFile { fd, iosize } => self.read_whole(fd, iosize),
            Op::AppendFileRand { fd, iosize } => self.append_rand(set, flowop.set, fd, iosize),
            Op::Fsync { fd } => {
                self.file(fd)?.file.sync()?;
                Ok(Some(0))
            }
            Op::DeleteFile => self.delete(set),
            Op::StatFile => self.stat(set),
            Op::ReadRandom { iosize } => self.read_random(flowop.set, iosize),
            Op::WriteRandom { iosize, dsync } => self.write_random(flowop.set, iosize, dsync),
            Op::Hog { value } => {
                self.hog(value);
                Ok(Some(0))
            }
            Op::SemBlock { value, .. } => {
                let sem = &self.shared.sems.0[i][self.instance];
                Ok(sem_outcome(sem.block(value)))
            }
            Op::SemPost {
                target,
                value,
                blocking,
            } => {
                for sem in &self.shared.sems.0[target] {
                    if sem_outcome(sem.post(value, blocking)).is_none() {
                        return Ok(None);
                    }
                }
                Ok(Some(0))
            }
        }
    }

    /// Picks like `fileset_pick`: when every suitable entry is busy for the
    /// moment (another thread is between its pick and its release), waits
    /// for one to become idle; when none exists at all, stops the run early.
    fn pick(&self, set: &SetState<F::Name>, kind: PickKind) -> Option<usize> {
        loop {
            let mut p = set.picks();
            if let Some(i) = p.pick(kind) {
                return Some(i);
            }
            if !p.only_busy(kind) {
                let why = p.why_none(kind);
                drop(p);
                self.shared
                    .stop_early(format!("{}: {why}", set.fileset.spec.name));
                return None;
            }
            drop(p);
            if self.shared.phase.load(Ordering::Relaxed) == STOP
                || self.shared.any_stop.load(Ordering::Relaxed)
            {
                return None;
            }
            std::thread::yield_now();
        }
    }

    fn create(&mut self, set: &SetState<F::Name>, id: SetId, fd: usize) -> io::Result<Option<u64>> {
        self.open_into(set, id, fd, PickKind::Absent)
    }

    fn open(&mut self, set: &SetState<F::Name>, id: SetId, fd: usize) -> io::Result<Option<u64>> {
        self.open_into(set, id, fd, PickKind::Existing)
    }

    /// createfile (an absent entry, O_CREAT) or openfile (an existing one)
    /// into slot `fd`. The entry exists from the moment the create returns,
    /// as in filebench, and stays busy only until then.
    fn open_into(
        &mut self,
        set: &SetState<F::Name>,
        id: SetId,
        fd: usize,
        kind: PickKind,
    ) -> io::Result<Option<u64>> {
        self.close(fd);
        let Some(i) = self.pick(set, kind) else {
            return Ok(None);
        };
        let creating = kind == PickKind::Absent;
        let opened = if creating {
            self.fs.create(&set.names[i])
        } else {
            self.fs.open_rw(&set.names[i])
        };
        match opened {
            Ok(file) => {
                set.picks().release(i, true, 1);
                self.fds[fd] = Some(OpenFile {
                    file,
                    set: id,
                    entry: i,
                });
                Ok(Some(0))
            }
            Err(e) => {
                set.picks().release(i, !creating, 0);
                Err(e)
            }
        }
    }

    fn close(&mut self, fd: usize) {
        if let Some(of) = self.fds[fd].take() {
            drop(of.file);
            self.shared.set(of.set).picks().closed(of.entry);
        }
    }

    fn close_all(&mut self) {
        for fd in 0..FD_SLOTS {
            self.close(fd);
        }
        for (set, rot) in [SetId::Main, SetId::Log]
            .into_iter()
            .zip(&mut self.rotating)
        {
            for of in rot.slots.iter_mut().filter_map(Option::take) {
                drop(of.file);
                self.shared.set(set).picks().closed(of.entry);
            }
        }
    }

    fn file(&self, fd: usize) -> io::Result<&OpenFile<F::File>> {
        self.fds[fd].as_ref().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("fd {fd} is not open"))
        })
    }

    fn buffer(&mut self, len: usize) -> &mut [u8] {
        if self.buf.len() < len {
            // Non-zero bytes so that no file system can shortcut zeroes.
            self.buf.resize(len, 0xA5);
        }
        &mut self.buf[..len]
    }

    fn write_whole(&mut self, fd: usize, iosize: u64) -> io::Result<Option<u64>> {
        let of = self.file(fd)?;
        let size = self.shared.set(of.set).fileset.files[of.entry].size_bytes;
        let chunk = iosize.min(size).max(1);
        self.buffer(chunk as usize);
        let of = self.fds[fd].as_ref().expect("checked above");
        let mut off = 0;
        while off < size {
            let n = chunk.min(size - off) as usize;
            of.file.write_all_at(&self.buf[..n], off)?;
            off += n as u64;
        }
        Ok(Some(size))
    }

    fn read_whole(&mut self, fd: usize, iosize: u64) -> io::Result<Option<u64>> {
        self.file(fd)?;
        self.buffer(iosize as usize);
        let of = self.fds[fd].as_ref().expect("checked above");
        let mut off = 0u64;
        loop {
            let n = of.file.read_at(&mut self.buf[..iosize as usize], off)?;
            if n == 0 {
                break;
            }
            off += n as u64;
        }
        Ok(Some(off))
    }

    fn append_rand(
        &mut self,
        set: &SetState<F::Name>,
        id: SetId,
        fd: usize,
        iosize: u64,
    ) -> io::Result<Option<u64>> {
        if self.fds[fd].is_none() {
            // Filebench opens a flowop's file on first use and keeps it.
            if self.open(set, id, fd)?.is_none() {
                return Ok(None);
            }
        }
        let len = self.rng.u64(0..iosize) as usize;
        if len == 0 {
            return Ok(Some(0));
        }
        self.buffer(len);
        let of = self.fds[fd].as_ref().expect("opened above");
        let end = of.file.size()?;
        of.file.write_all_at(&self.buf[..len], end)?;
        Ok(Some(len as u64))
    }

    /// The slot of the thread's next `opennext` file of `id`, opened if it is
    /// the slot's first use (the open is part of this op, as in filebench).
    fn next_rotating(&mut self, id: SetId) -> io::Result<Option<usize>> {
        let set = self.shared.set(id);
        let rot = &mut self.rotating[id as usize];
        if rot.slots.is_empty() {
            rot.slots.resize_with(set.fileset.files.len(), || None);
        }
        let slot = rot.next;
        rot.next = (slot + 1) % rot.slots.len();
        if rot.slots[slot].is_none() {
            let Some(i) = self.pick(set, PickKind::Existing) else {
                return Ok(None);
            };
            match self.fs.open_rw(&set.names[i]) {
                Ok(file) => {
                    set.picks().release(i, true, 1);
                    self.rotating[id as usize].slots[slot] = Some(OpenFile {
                        file,
                        set: id,
                        entry: i,
                    });
                }
                Err(e) => {
                    set.picks().release(i, true, 0);
                    return Err(e);
                }
            }
        }
        Ok(Some(slot))
    }

    /// A random offset for `random` reads and writes: uniform in
    /// [0, size - iosize], rounded down to a multiple of iosize
    /// (`fb_random64(size, iosize)`). The working set is the file's size.
    fn random_offset(&mut self, id: SetId, slot: usize, iosize: u64) -> io::Result<u64> {
        let of = self.rotating[id as usize].slots[slot]
            .as_ref()
            .expect("opened by next_rotating");
        let size = self.shared.set(id).fileset.files[of.entry].size_bytes;
        if size < iosize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("file size {size} smaller than IO size {iosize}"),
            ));
        }
        let r = (self.rng.f64() * (size - iosize) as f64) as u64;
        Ok(r / iosize * iosize)
    }

    /// The next file of `id`'s rotation and a random offset in it, with the
    /// I/O buffer sized; `None` when the set has no file open.
    fn next_random(&mut self, id: SetId, iosize: u64) -> io::Result<Option<(usize, u64)>> {
        let Some(slot) = self.next_rotating(id)? else {
            return Ok(None);
        };
        let off = self.random_offset(id, slot, iosize)?;
        self.buffer(iosize as usize);
        Ok(Some((slot, off)))
    }

    fn read_random(&mut self, id: SetId, iosize: u64) -> io::Result<Option<u64>> {
        let Some((slot, off)) = self.next_random(id, iosize)? else {
            return Ok(None);
        };
        let of = self.rotating[id as usize].slots[slot]
            .as_ref()
            .expect("open");
        let n = of.file.read_at(&mut self.buf[..iosize as usize], off)?;
        Ok(Some(n as u64))
    }

    fn write_random(&mut self, id: SetId, iosize: u64, dsync: bool) -> io::Result<Option<u64>> {
        let Some((slot, off)) = self.next_random(id, iosize)? else {
            return Ok(None);
        };
        let of = self.rotating[id as usize].slots[slot]
            .as_ref()
            .expect("open");
        of.file.write_all_at(&self.buf[..iosize as usize], off)?;
        if dsync {
            // O_DSYNC: durable before the write returns.
            of.file.sync()?;
        }
        Ok(Some(iosize))
    }

    /// `hog`: `value` stores to the thread's memory. black_box keeps the
    /// compiler from folding the loop into one store.
    fn hog(&mut self, value: u64) {
        for _ in 0..value {
            *std::hint::black_box(&mut self.hog_cell) = 1;
        }
    }

    fn delete(&mut self, set: &SetState<F::Name>) -> io::Result<Option<u64>> {
        let Some(i) = self.pick(set, PickKind::ExistingClosed) else {
            return Ok(None);
        };
        let r = self.fs.unlink(&set.names[i]);
        set.picks().release(i, r.is_err(), 0);
        r.map(|()| Some(0))
    }

    fn stat(&mut self, set: &SetState<F::Name>) -> io::Result<Option<u64>> {
        let Some(i) = self.pick(set, PickKind::Existing) else {
            return Ok(None);
        };
        let r = self.fs.stat(&set.names[i]);
        set.picks().release(i, true, 0);
        r.map(|_| Some(0))
    }
}

/// A semaphore wait as a flowop result: a timeout carries on (filebench
/// ignores semtimedop's EAGAIN), a closed semaphore ends the thread's loop.
fn sem_outcome(w: Waited) -> Option<u64> {
    match w {
        Waited::Done | Waited::TimedOut => Some(0),
        Waited::Closed => None,
    }
}

/// Raises the soft limit on open files to the hard limit: oltp keeps
/// threads x files handles open (2,111 by default), more than the usual
/// soft limit of 1,024 on kernel targets.
pub fn raise_open_file_limit() {
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Process CPU times and the machine's /proc/stat counters at one instant.
struct CpuSample {
    user: f64,
    system: f64,
    machine: Option<(u64, u64)>,
}

impl CpuSample {
    fn now() -> Self {
        let (user, system) = rusage_self();
        CpuSample {
            user,
            system,
            machine: proc_stat_busy_total(),
        }
    }

    fn until_now(&self) -> CpuTimes {
        let later = CpuSample::now();
        let busy = match (self.machine, later.machine) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                Some((b1.saturating_sub(b0)) as f64 / (t1 - t0) as f64)
            }
            _ => None,
        };
        CpuTimes {
            user_seconds: later.user - self.user,
            system_seconds: later.system - self.system,
            machine_busy_fraction: busy,
            core_link_ns: None,
            core_link_before_ns: None,
        }
    }
}

fn rusage_self() -> (f64, f64) {
    // SAFETY: getrusage writes a plain struct we own; zeroed is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// (busy, total) jiffies of all CPUs; idle and iowait are not busy.
fn proc_stat_busy_total() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v[4];
    Some((total - idle, total))
}
