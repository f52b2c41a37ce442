//! The concurrent crash test: 2-4 ACE operations run at once, each on a thread of its own
//! (so each on a journal lane and an inode group of its own), interleaved deterministically
//! by switching threads at every fence, and every crash image checked against every
//! combination of before and after of the operations in flight.
//!
//! **Scheduling.** The tracer ([`Sched`]) is also the scheduler. One thread at a time holds
//! the turn; every store, flush and fence is recorded by the thread holding it (a thread
//! without it waits inside the hook, before its event is recorded). At each fence the
//! thread hands the turn to the next live thread (round robin) and waits for it to come
//! back, so the operations interleave fence by fence: thread 0 arms its journal record,
//! thread 1 arms its own, and so on, and a crash at the second fence finds two lanes armed.
//! A thread that holds the turn but makes no progress for [`STALL`] is waiting for a lock
//! another (parked) thread holds: the turn passes to the next parked thread (a "steal"),
//! which runs up to its next fence; the recorded trace stays one serial order either way.
//!
//! **Persistence.** The trace keeps the thread of every event and is replayed with
//! [`Replay`](crate::trace::Replay): a fence makes durable only what its own thread wrote
//! back (x86 `sfence` orders the issuing CPU's `clwb`s), and a store is a lost store if it
//! is not durable when its own operation returns.
//!
//! **Oracle.** The operations of a workload are chosen so that they change disjoint sets of
//! names (run alone on the populated image, the sets of paths whose entry changes do not
//! meet; a create changes its parent directory's entry, so two creates in one directory are
//! never chosen together). The state after any subset of them is then the state before with
//! each chosen operation's names taken from the state after all of them. At a crash point an
//! operation that returned must be after, one not begun before, and one in flight either
//! (with its [`Loose`] exceptions), each independently of the others: every combination is
//! accepted and nothing else. After the run every operation must have succeeded, changed no
//! name outside its set, and left its names as it does alone (ignoring inode numbers and
//! times), so a race that breaks an operation is caught even where no crash is involved.

use std::cell::Cell;
use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use nvmfs::fsck::check_pm;
use nvmfs::media::trace::PersistTrace;
use nvmfs::media::Pm;
use nvmfs::{Fs, MappingKind, MountOptions};

use crate::ace::{self, Op};
use crate::oracle::{self, Loose, RecoveryDepth, Tree};
use crate::trace::{Event, Recorder, Replay, Tear};

/// How long the thread holding the turn may make no progress before the turn passes on.
pub const STALL: Duration = Duration::from_millis(20);

thread_local! {
    /// The index of this worker thread in the running workload.
    static ME: Cell<Option<usize>> = const { Cell::new(None) };
}

#[derive(Default)]
struct State {
    on: bool,
    /// The thread whose turn it is.
    turn: Option<usize>,
    /// Threads whose operation has not returned.
    live: Vec<bool>,
    /// Threads waiting for the turn (inside the hook or before they start).
    parked: Vec<bool>,
    events: Vec<(usize, Event)>,
    /// Bumped by every event and every handoff (the stall detector watches it).
    progress: u64,
    switches: usize,
    steals: usize,
}

/// What a scheduled run left: each operation's result, the trace (thread, event), and how
/// often the turn passed at a fence and because its holder waited for a lock.
struct Run {
    results: Vec<std::io::Result<()>>,
    events: Vec<(usize, Event)>,
    switches: usize,
    steals: usize,
}

/// The tracer that schedules the workload's threads (see the module documentation).
#[derive(Default)]
pub struct Sched {
    st: Mutex<State>,
    cv: Condvar,
}

impl Sched {
    fn wait_turn<'a>(&'a self, mut st: MutexGuard<'a, State>, me: usize) -> MutexGuard<'a, State> {
        st.parked[me] = true;
        while st.on && st.turn != Some(me) {
            st = self.cv.wait(st).unwrap();
        }
        st.parked[me] = false;
        st
    }

    /// The next live thread after `me` (round robin), `me` itself if it is the only one.
    fn next_live(st: &State, me: usize) -> Option<usize> {
        let n = st.live.len();
        (1..=n).map(|d| (me + d) % n).find(|&j| st.live[j])
    }

    fn record(&self, e: Event) {
        let Some(me) = ME.get() else { return };
        let st = self.st.lock().unwrap();
        if !st.on {
            return;
        }
        let mut st = self.wait_turn(st, me);
        let fence = matches!(e, Event::Fence);
        st.events.push((me, e));
        st.progress += 1;
        if fence {
            let next = Self::next_live(&st, me);
            if next != Some(me) {
                st.turn = next;
                st.switches += 1;
                st.progress += 1;
                self.cv.notify_all();
                drop(self.wait_turn(st, me));
            }
        }
    }

    /// Runs `ops[i]` on thread i, interleaved.
    fn run(&self, fs: &Fs, ops: &[Op]) -> Run {
        let n = ops.len();
        {
            let mut st = self.st.lock().unwrap();
            *st = State {
                on: true,
                turn: Some(0),
                live: vec![true; n],
                parked: vec![false; n],
                ..State::default()
            };
        }
        let results = std::thread::scope(|s| {
            let handles: Vec<_> =
                ops.iter()
                    .enumerate()
                    .map(|(i, op)| {
                        s.spawn(move || {
                            ME.set(Some(i));
                            {
                                let st = self.st.lock().unwrap();
                                let mut st = self.wait_turn(st, i);
                                st.events.push((i, Event::OpBegin("op")));
                                st.progress += 1;
                            }
                            // A panic must still end the thread's turn, or the others wait
                            // for ever; it becomes the operation's error.
                            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                op.run(fs)
                            }))
                            .unwrap_or_else(|_| Err(std::io::Error::other("operation panicked")));
                            let st = self.st.lock().unwrap();
                            let mut st = self.wait_turn(st, i);
                            st.events.push((i, Event::OpEnd));
                            st.live[i] = false;
                            st.turn = Self::next_live(&st, i);
                            st.progress += 1;
                            self.cv.notify_all();
                            drop(st);
                            ME.set(None);
                            r
                        })
                    })
                    .collect();
            self.watch();
            handles
                .into_iter()
                .map(|h| h.join().expect("workload thread panicked"))
                .collect()
        });
        let mut st = self.st.lock().unwrap();
        st.on = false;
        Run {
            results,
            events: std::mem::take(&mut st.events),
            switches: st.switches,
            steals: st.steals,
        }
    }

    /// The stall detector: while threads live, passes the turn on when its holder makes no
    /// progress for [`STALL`] (it waits for a lock a parked thread holds).
    fn watch(&self) {
        let mut st = self.st.lock().unwrap();
        let mut seen = st.progress;
        let mut since = Instant::now();
        while st.live.iter().any(|&l| l) {
            st = self.cv.wait_timeout(st, STALL / 4).unwrap().0;
            if st.progress != seen {
                seen = st.progress;
                since = Instant::now();
                continue;
            }
            if since.elapsed() < STALL {
                continue;
            }
            let Some(holder) = st.turn else { continue };
            if st.parked[holder] {
                continue;
            }
            let n = st.live.len();
            if let Some(j) = (1..n)
                .map(|d| (holder + d) % n)
                .find(|&j| st.live[j] && st.parked[j])
            {
                st.turn = Some(j);
                st.steals += 1;
                st.progress += 1;
                seen = st.progress;
                since = Instant::now();
                self.cv.notify_all();
            }
        }
    }
}

impl PersistTrace for Sched {
    fn store(&self, off: u64, data: &[u8]) {
        self.record(Event::Store {
            off,
            data: data.to_vec(),
            nt: false,
        });
    }
    fn store_nt(&self, off: u64, data: &[u8]) {
        self.record(Event::Store {
            off,
            data: data.to_vec(),
            nt: true,
        });
    }
    fn flush(&self, line: u64) {
        self.record(Event::Flush { line });
    }
    fn fence(&self) {
        self.record(Event::Fence);
    }
}

/// The operations a concurrent workload draws from: seq-1 without those made of several
/// file-system calls (unlink while open, direct store), whose intermediate states the
/// concurrent run does not capture.
pub fn pool() -> Vec<Op> {
    ace::seq1()
        .into_iter()
        .filter(|op| !matches!(op, Op::UnlinkOpen(_) | Op::DirectStore(..)))
        .collect()
}

/// The names whose entry `before` and `after` differ in (added, removed or changed).
pub fn changed(before: &Tree, after: &Tree) -> BTreeSet<String> {
    before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect()
}

/// Each pool operation's changed names, run alone on the populated image formatted with
/// `mapping` (empty if it fails there); computed once per process and mapping.
fn footprints(mapping: MappingKind) -> &'static Vec<BTreeSet<String>> {
    static F: [OnceLock<Vec<BTreeSet<String>>>; MappingKind::ALL.len()] =
        [const { OnceLock::new() }; MappingKind::ALL.len()];
    let slot = MappingKind::ALL
        .iter()
        .position(|&m| m == mapping)
        .expect("a known mapping");
    F[slot].get_or_init(|| {
        pool()
            .iter()
            .map(|op| alone(op, mapping).map_or_else(BTreeSet::new, |(b, a)| changed(&b, &a)))
            .collect()
    })
}

/// The trees before and after `op` run alone on the populated image.
fn alone(op: &Op, mapping: MappingKind) -> Option<(Tree, Tree)> {
    let fs = ace::scratch_on(mapping).ok()?;
    let before = oracle::tree(&fs);
    op.run(&fs).ok()?;
    Some((before, oracle::tree(&fs)))
}

/// The operations of workload `seed`: 2 to 4 pool operations that each change something
/// and change disjoint sets of names on a `mapping` image, in a seeded order.
pub fn pick(seed: u64, mapping: MappingKind) -> Vec<Op> {
    let ops = pool();
    let feet = footprints(mapping);
    let mut rng = fastrand::Rng::with_seed(seed);
    let want = rng.usize(2..=4);
    let mut order: Vec<usize> = (0..ops.len()).collect();
    rng.shuffle(&mut order);
    let mut chosen: Vec<usize> = Vec::new();
    for i in order {
        if chosen.len() == want {
            break;
        }
        if !feet[i].is_empty() && chosen.iter().all(|&c| feet[c].is_disjoint(&feet[i])) {
            chosen.push(i);
        }
    }
    chosen.into_iter().map(|i| ops[i].clone()).collect()
}

/// One concurrent workload and the command that reruns it.
#[derive(Clone, Debug)]
pub struct Workload {
    pub id: String,
    pub ops: Vec<Op>,
    pub mapping: MappingKind,
    pub tear: Tear,
    pub depth: RecoveryDepth,
}

/// `count` workloads, seeds `seed..seed + count`, on `mapping` images.
pub fn workloads(count: u64, seed: u64, mapping: MappingKind, tear: Tear) -> Vec<Workload> {
    (seed..seed + count)
        .map(|s| {
            let mut id = format!("--concurrent 1 --seed {s}");
            if mapping != MappingKind::HashFs {
                id = format!("--mapping {mapping} {id}");
            }
            if let Tear::Words { samples } = tear {
                id = format!("--tear words --tear-samples {samples} {id}");
            }
            Workload {
                id,
                ops: pick(s, mapping),
                mapping,
                tear,
                depth: RecoveryDepth::FirstPerOperation,
            }
        })
        .collect()
}

/// What one concurrent workload's check found.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub fences: usize,
    pub images: usize,
    /// Crash images whose recovery rolled back two or more journal lanes.
    pub multi_lane_images: usize,
    /// Crash points with two or more operations in flight.
    pub overlapping_points: usize,
    pub switches: usize,
    pub steals: usize,
    pub violations: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    NotStarted,
    InFlight,
    Done,
}

/// What the crash trees are compared with.
struct Expect<'a> {
    before: &'a Tree,
    after: &'a Tree,
    /// Each operation's names.
    names: Vec<BTreeSet<String>>,
    all: BTreeSet<String>,
    looses: Vec<Loose>,
}

fn restrict(t: &Tree, keys: &BTreeSet<String>) -> Tree {
    t.iter()
        .filter(|(k, _)| keys.contains(*k))
        .map(|(k, e)| (k.clone(), e.clone()))
        .collect()
}

impl Expect<'_> {
    /// `Ok` if `t` is before outside every operation's names and, per operation, after if
    /// it returned, before if it had not begun, either if in flight.
    fn check(&self, t: &Tree, status: &[Status]) -> Result<(), String> {
        for (k, e) in t.iter().filter(|(k, _)| !self.all.contains(*k)) {
            match self.before.get(k) {
                Some(b) if b == e => {}
                Some(b) => {
                    return Err(format!(
                        "{k} (no operation's) is {}, expected {}",
                        e.show(),
                        b.show()
                    ))
                }
                None => return Err(format!("{k} extra (no operation's): {}", e.show())),
            }
        }
        if let Some(k) = self
            .before
            .keys()
            .find(|k| !self.all.contains(*k) && !t.contains_key(*k))
        {
            return Err(format!("{k} (no operation's) missing"));
        }
        for (i, names) in self.names.iter().enumerate() {
            let (tk, bk, ak) = (
                restrict(t, names),
                restrict(self.before, names),
                restrict(self.after, names),
            );
            let exact = Loose::default();
            let r = match status[i] {
                Status::Done => oracle::matches(&tk, &ak, &bk, &ak, &exact)
                    .map_err(|a| format!("operation {i} returned, not after: {a}")),
                Status::NotStarted => oracle::matches(&tk, &bk, &bk, &ak, &exact)
                    .map_err(|b| format!("operation {i} not begun, not before: {b}")),
                Status::InFlight => {
                    let l = &self.looses[i];
                    match (
                        oracle::matches(&tk, &bk, &bk, &ak, l),
                        oracle::matches(&tk, &ak, &bk, &ak, l),
                    ) {
                        (Err(b), Err(a)) => Err(format!(
                            "operation {i} in flight, neither before ({b}) nor after ({a})"
                        )),
                        _ => Ok(()),
                    }
                }
            };
            r?;
        }
        Ok(())
    }
}

/// Entries compared without inode numbers and times (the concurrent run against an
/// operation run alone).
fn shape(t: &Tree) -> Vec<(String, oracle::Entry)> {
    t.iter()
        .map(|(k, e)| {
            let mut e = e.clone();
            e.ino = 0;
            e.atime = 0;
            e.mtime = 0;
            e.ctime = 0;
            (k.clone(), e)
        })
        .collect()
}

/// Runs `w`'s operations concurrently on a traced image and checks every crash image.
pub fn check(w: &Workload) -> Outcome {
    let mut out = Outcome::default();
    let sched = Arc::new(Sched::default());
    let mut pm = Pm::in_memory(oracle::IMAGE_BYTES);
    pm.set_trace(Some(sched.clone()));
    let fs = match Fs::format_pm_with(pm, w.mapping).and_then(|fs| ace::populate(&fs).map(|_| fs)) {
        Ok(fs) => fs,
        Err(e) => {
            out.violations.push(format!("setup failed: {e}"));
            return out;
        }
    };
    if w.ops.len() < 2 {
        out.violations.push(format!(
            "{} operations: a concurrent workload needs 2",
            w.ops.len()
        ));
        return out;
    }
    let base = fs.snapshot();
    let before = oracle::tree(&fs);
    let Run {
        results,
        events,
        switches,
        steals,
    } = sched.run(&fs, &w.ops);
    out.switches = switches;
    out.steals = steals;
    let after = oracle::tree(&fs);
    drop(fs);

    // Each operation's names, from a run alone; the concurrent run must have done what
    // each does alone, and nothing else.
    let mut names = Vec::new();
    for (i, (op, r)) in w.ops.iter().zip(&results).enumerate() {
        if let Err(e) = r {
            out.violations
                .push(format!("operation {i} ({op:?}) failed: {e}"));
            continue;
        }
        let Some((b, a)) = alone(op, w.mapping) else {
            out.violations
                .push(format!("operation {i} ({op:?}) fails alone"));
            continue;
        };
        let n = changed(&b, &a);
        if n.is_empty() {
            out.violations
                .push(format!("operation {i} ({op:?}) changes nothing"));
        }
        if shape(&restrict(&after, &n)) != shape(&restrict(&a, &n)) {
            out.violations.push(format!(
                "operation {i} ({op:?}): its names differ from a run alone (inode numbers and times aside)"
            ));
        }
        names.push(n);
    }
    if !out.violations.is_empty() {
        return out;
    }
    for i in 0..names.len() {
        for j in i + 1..names.len() {
            if !names[i].is_disjoint(&names[j]) {
                out.violations.push(format!(
                    "operations {i} and {j} change common names: not a valid concurrent workload"
                ));
                return out;
            }
        }
    }
    let all: BTreeSet<String> = names.iter().flatten().cloned().collect();
    if let Some(k) = changed(&before, &after).difference(&all).next() {
        out.violations
            .push(format!("{k} changed by no operation's run alone"));
        return out;
    }
    let bsteps = std::slice::from_ref(&before);
    let expect = Expect {
        before: &before,
        after: &after,
        looses: w.ops.iter().map(|op| op.loose(0, bsteps)).collect(),
        names,
        all,
    };

    // Replay: a crash point at every fence, with each operation's status there.
    let n = w.ops.len();
    let mut replay = Replay::new(&base, w.tear);
    let mut status = vec![Status::NotStarted; n];
    let mut points = Vec::new();
    for (i, (t, e)) in events.iter().enumerate() {
        match e {
            Event::Store { off, data, nt } => replay.store(*t, *off, data, *nt),
            Event::Flush { line } => replay.flush(*t, *line),
            Event::Fence => {
                points.push((replay.point(points.len(), i), status.clone()));
                replay.fence(*t);
            }
            // Concurrent workloads run on PM-only images.
            Event::SsdWrite { .. } => {}
            Event::OpBegin(_) => status[*t] = Status::InFlight,
            Event::OpEnd => {
                for line in replay.pending_lines_of(Some(*t)) {
                    out.violations.push(format!(
                        "operation {t} ({:?}): store to line {line:#x} not durable at return",
                        w.ops[*t]
                    ));
                }
                status[*t] = Status::Done;
            }
        }
    }
    out.fences = points.len();
    let mut seen = HashSet::new();
    let mut recovery_checked = false;
    for (p, st) in &points {
        if st.iter().filter(|&&s| s == Status::InFlight).count() >= 2 {
            out.overlapping_points += 1;
        }
        let mut k = 0;
        p.for_each_image(&mut seen, |img| {
            out.images += 1;
            let deep = w.depth == RecoveryDepth::Every || !recovery_checked;
            match check_image(img, &expect, st, deep, &mut recovery_checked) {
                Ok(lanes) => out.multi_lane_images += usize::from(lanes >= 2),
                Err(v) => out.violations.push(format!(
                    "fence {} (trace event {}), image {k}, operations {}: {v}",
                    p.op,
                    p.fence,
                    show_status(st)
                )),
            }
            k += 1;
        });
    }
    out
}

fn show_status(st: &[Status]) -> String {
    st.iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{i} {}",
                match s {
                    Status::NotStarted => "not begun",
                    Status::InFlight => "in flight",
                    Status::Done => "returned",
                }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The checks of one crash image: fsck clean, mounts with recovery, the tree fits `expect`
/// for `status`, fsck clean after recovery, and (if `deep` and recovery repaired something)
/// every crash during recovery recovers to the same tree. Returns the number of journal
/// lanes recovery rolled back.
fn check_image(
    img: &[u8],
    expect: &Expect,
    status: &[Status],
    deep: bool,
    recovery_checked: &mut bool,
) -> Result<u32, String> {
    let r = check_pm(&Pm::from_bytes(img));
    if !r.is_clean() {
        return Err(format!("fsck before mount: {:?}", r.problems));
    }
    let rec = Arc::new(Recorder::default());
    let mut pm = Pm::from_bytes(img);
    pm.set_trace(Some(rec.clone()));
    rec.start();
    rec.op_begin("recovery");
    let mounted = Fs::mount_pm(pm, &MountOptions::default(), None, None);
    rec.op_end();
    let recovery_events = rec.stop();
    let fs = mounted.map_err(|e| format!("mount failed: {e}"))?;
    let t = oracle::tree(&fs);
    expect.check(&t, status)?;
    let r = check_pm(&Pm::from_bytes(&fs.snapshot()));
    if !r.is_clean() {
        return Err(format!("fsck after recovery: {:?}", r.problems));
    }
    let lanes = fs.recovery_report().lanes_rolled_back;
    if deep && oracle::repaired(fs.recovery_report()) {
        *recovery_checked = true;
        if let Some(v) = oracle::check_recovery_crashes(img, &recovery_events, &t) {
            return Err(v);
        }
    }
    Ok(lanes)
}

/// Totals of a concurrent run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Summary {
    pub workloads: usize,
    pub operations: usize,
    pub fences: usize,
    pub images: usize,
    pub multi_lane_images: usize,
    pub overlapping_points: usize,
    pub switches: usize,
    pub steals: usize,
    pub violations: Vec<String>,
}

/// Checks `list` on `threads` checker threads (each workload runs its own operation
/// threads), calling `progress` after each workload.
pub fn run(list: &[Workload], threads: usize, progress: &(dyn Fn(usize) + Sync)) -> Summary {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let total = Mutex::new(Summary {
        workloads: list.len(),
        operations: list.iter().map(|w| w.ops.len()).sum(),
        ..Default::default()
    });
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(w) = list.get(i) else { break };
                let o = check(w);
                progress(i);
                let mut t = total.lock().unwrap();
                t.fences += o.fences;
                t.images += o.images;
                t.multi_lane_images += o.multi_lane_images;
                t.overlapping_points += o.overlapping_points;
                t.switches += o.switches;
                t.steals += o.steals;
                t.violations.extend(
                    o.violations
                        .iter()
                        .map(|v| format!("[nvmfs crashtest {}] {:?}: {v}", w.id, w.ops)),
                );
            });
        }
    });
    total.into_inner().unwrap()
}
