//! The persistence tracer: records every store, flush and fence of a region and replays them
//! under the x86 persistence model to produce the images a power loss could leave.
//!
//! Model: a cached store is durable once its line was flushed and a fence followed; a
//! non-temporal store is durable at the next fence; a store still in flight may or may not
//! have persisted; stores to one line persist in order (a prefix of them); aligned 8-byte
//! stores are atomic (stores are recorded split at line boundaries, never below 8 bytes
//! apart from the tails of unaligned copies).
//!
//! [`Tear::Lines`] (the default) treats each recorded store's piece of a line as one unit: a
//! line keeps a prefix of its pieces, so a 64-byte copy into one line persists whole or not
//! at all. [`Tear::Words`] drops that assumption, since a copy is many store instructions whose
//! order inside a line is not architectural (fast-string `rep movs` stores may persist in any
//! order): a line keeps a prefix of its pieces and then any subset of the next piece's
//! aligned words, 8 bytes for cached stores and 16 for non-temporal ones (`movntdq`). The
//! combinations explode (2^8 per cached piece), so on top of the line-level images each
//! crash point gets `samples` seeded random images: in half of them one random line is torn
//! (a random prefix of its pieces, then a random subset of the next piece's words) and every
//! other in-flight line persists wholly or not at all; in the other half every in-flight line
//! is cut that way independently.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use nvmfs::media::trace::PersistTrace;
use nvmfs::media::CACHE_LINE;

#[derive(Clone, Debug)]
pub enum Event {
    Store {
        off: u64,
        data: Vec<u8>,
        nt: bool,
    },
    Flush {
        line: u64,
    },
    Fence,
    OpBegin(&'static str),
    OpEnd,
    /// A write to the SSD of a tiered image: durable when it returns (`pwrite` + `fdatasync`).
    SsdWrite {
        off: u64,
        data: Vec<u8>,
    },
}

/// Records events while `on`.
#[derive(Default)]
pub struct Recorder {
    events: Mutex<Vec<Event>>,
    on: std::sync::atomic::AtomicBool,
}

impl Recorder {
    pub fn start(&self) {
        self.events.lock().unwrap().clear();
        self.on.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn stop(&self) -> Vec<Event> {
        self.on.store(false, std::sync::atomic::Ordering::SeqCst);
        std::mem::take(&mut *self.events.lock().unwrap())
    }

    /// A copy of the events recorded so far (recording goes on).
    pub fn peek(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    fn push(&self, e: Event) {
        if self.on.load(std::sync::atomic::Ordering::Relaxed) {
            self.events.lock().unwrap().push(e);
        }
    }

    /// Marks the start of a workload operation (the file system marks its own too).
    pub fn op_begin(&self, name: &'static str) {
        self.push(Event::OpBegin(name));
    }

    pub fn op_end(&self) {
        self.push(Event::OpEnd);
    }
}

impl nvmfs::tier::ssd::SsdTrace for Recorder {
    fn ssd_write(&self, off: u64, data: &[u8]) {
        self.push(Event::SsdWrite {
            off,
            data: data.to_vec(),
        });
    }
}

impl PersistTrace for Recorder {
    fn store(&self, off: u64, data: &[u8]) {
        self.push(Event::Store {
            off,
            data: data.to_vec(),
            nt: false,
        });
    }
    fn store_nt(&self, off: u64, data: &[u8]) {
        self.push(Event::Store {
            off,
            data: data.to_vec(),
            nt: true,
        });
    }
    fn flush(&self, line: u64) {
        self.push(Event::Flush { line });
    }
    fn fence(&self) {
        self.push(Event::Fence);
    }
}

/// One store's piece inside one cache line.
#[derive(Clone, Debug)]
struct Piece {
    off: u64,
    data: Vec<u8>,
    /// The threads (bit per thread, see [`Replay`]) that wrote the line back after this
    /// store (for a non-temporal store: the storing thread): durable at such a thread's
    /// next fence.
    flushed: u64,
    /// A non-temporal store: torn at 16 bytes instead of 8 under [`Tear::Words`].
    nt: bool,
    /// The thread that stored it.
    owner: usize,
}

/// How finely in-flight stores may persist (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tear {
    /// Each recorded store's piece of a line persists whole (a prefix of pieces per line).
    #[default]
    Lines,
    /// Also tear pieces at 8-byte words (16 for non-temporal stores): `samples` seeded
    /// random images per crash point on top of the line-level ones.
    Words { samples: usize },
}

/// A point where power could fail: the durable image and what was in flight. Its images are
/// built one at a time by [`CrashPoint::for_each_image`].
pub struct CrashPoint {
    /// Index of the workload operation in flight (0-based).
    pub op: usize,
    /// Index of the fence inside the whole trace.
    pub fence: usize,
    durable: Vec<u8>,
    /// Pending pieces of each in-flight line, in store order.
    lines: Vec<Vec<Piece>>,
    tear: Tear,
}

/// How many in-flight lines are enumerated exhaustively (all 2^n subsets).
const EXHAUSTIVE_LINES: usize = 6;
/// Above that: each line alone and all but each line, the first/middle/last line torn off,
/// and this many seeded pairs.
const SAMPLED_PAIRS: usize = 24;
/// Up to this many lines in flight, each line alone and all but each line are tried...
const EACH_LINE_MAX: usize = 256;
/// ...above it, only this many of them, chosen by a seeded shuffle.
const EACH_LINE_SAMPLE: usize = 64;

impl CrashPoint {
    /// How many prefix choices of each line this point tries (before deduplication).
    fn choices(&self) -> Vec<Vec<usize>> {
        let n = self.lines.len();
        let all: Vec<usize> = self.lines.iter().map(|ps| ps.len()).collect();
        let mut out = vec![vec![0; n], all.clone()];
        let with = |set: &[usize], base: &[usize], to_all: bool| {
            let mut c = base.to_vec();
            for &i in set {
                c[i] = if to_all { all[i] } else { 0 };
            }
            c
        };
        if n <= EXHAUSTIVE_LINES {
            for mask in 1u32..(1 << n) - 1 {
                out.push(
                    (0..n)
                        .map(|i| if mask & (1 << i) != 0 { all[i] } else { 0 })
                        .collect(),
                );
            }
        } else {
            let none = vec![0; n];
            // Each line alone and all but each line; past EACH_LINE_MAX lines in flight (a
            // write of megabytes) only a seeded sample of them, or the images explode.
            let each: Vec<usize> = if n <= EACH_LINE_MAX {
                (0..n).collect()
            } else {
                let mut v: Vec<usize> = (0..n).collect();
                fastrand::Rng::with_seed(self.fence as u64 ^ 0x11ce).shuffle(&mut v);
                v.truncate(EACH_LINE_SAMPLE);
                v.sort_unstable();
                v
            };
            for i in each {
                out.push(with(&[i], &none, true));
                out.push(with(&[i], &all, false));
            }
            let mut rng = fastrand::Rng::with_seed(self.fence as u64);
            for _ in 0..SAMPLED_PAIRS {
                let (i, j) = (rng.usize(0..n), rng.usize(0..n));
                out.push(with(&[i, j], &none, true));
                out.push(with(&[i, j], &all, false));
            }
            // Torn multi-line writes: a prefix or suffix of the lines made it.
            for cut in [1, n / 2, n - 1] {
                out.push((0..n).map(|i| if i < cut { all[i] } else { 0 }).collect());
                out.push((0..n).map(|i| if i >= cut { all[i] } else { 0 }).collect());
            }
        }
        // In-line prefixes: every proper prefix of each line, the others at none and at all.
        for i in 0..n {
            for k in 1..all[i] {
                for base in [vec![0; n], all.clone()] {
                    let mut c = base;
                    c[i] = k;
                    out.push(c);
                }
            }
        }
        out
    }

    /// Calls `f` with every distinct image this point can leave (not seen before in `seen`).
    pub fn for_each_image(&self, seen: &mut HashSet<u64>, mut f: impl FnMut(&[u8])) {
        let mut img = self.durable.clone();
        let mut emit = |img: &mut Vec<u8>| {
            if seen.insert(hash(img)) {
                f(img);
            }
            // Undo: restore the touched bytes from the durable image.
            for ps in &self.lines {
                for p in ps {
                    let r = p.off as usize..p.off as usize + p.data.len();
                    img[r.clone()].copy_from_slice(&self.durable[r]);
                }
            }
        };
        for c in self.choices() {
            for (ps, &k) in self.lines.iter().zip(&c) {
                for p in &ps[..k] {
                    apply(&mut img, p);
                }
            }
            emit(&mut img);
        }
        let Tear::Words { samples } = self.tear else {
            return;
        };
        if self.lines.is_empty() {
            return;
        }
        let mut rng = fastrand::Rng::with_seed(self.fence as u64 ^ 0x7ea2_0000);
        for s in 0..samples {
            let one = (s % 2 == 0).then(|| rng.usize(0..self.lines.len()));
            for (l, ps) in self.lines.iter().enumerate() {
                if one.is_some_and(|o| o != l) {
                    if rng.bool() {
                        ps.iter().for_each(|p| apply(&mut img, p));
                    }
                    continue;
                }
                let k = rng.usize(0..ps.len());
                for p in &ps[..k] {
                    apply(&mut img, p);
                }
                apply_words(&mut img, &ps[k], &mut rng);
            }
            emit(&mut img);
        }
    }
}

/// Applies a random subset of the aligned words of `p` (8 bytes, 16 if non-temporal).
fn apply_words(img: &mut [u8], p: &Piece, rng: &mut fastrand::Rng) {
    let word = if p.nt { 16 } else { 8 };
    let end = p.off + p.data.len() as u64;
    let mut at = p.off;
    while at < end {
        let next = ((at / word + 1) * word).min(end);
        if rng.bool() {
            let r = (at - p.off) as usize..(next - p.off) as usize;
            img[at as usize..next as usize].copy_from_slice(&p.data[r]);
        }
        at = next;
    }
}

/// Replays `events` from `base` and returns the crash points (one per fence inside an
/// operation), plus the stores left unflushed or unfenced at the end of an operation.
pub fn crash_points(base: &[u8], events: &[Event]) -> (Vec<CrashPoint>, Vec<String>) {
    crash_points_with(base, events, Tear::Lines)
}

/// [`crash_points`] under the tearing model `tear`.
pub fn crash_points_with(
    base: &[u8],
    events: &[Event],
    tear: Tear,
) -> (Vec<CrashPoint>, Vec<String>) {
    let mut r = Replay::new(base, tear);
    let mut points = Vec::new();
    let mut lost = Vec::new();
    let mut op = 0usize;
    let mut in_op = false;
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::Store { off, data, nt } => r.store(0, *off, data, *nt),
            Event::Flush { line } => r.flush(0, *line),
            Event::Fence => {
                if in_op {
                    points.push(r.point(op, i));
                }
                r.fence(0);
            }
            // The SSD's own image is kept by the tiered check (`tiered.rs`).
            Event::SsdWrite { .. } => {}
            Event::OpBegin(_) => in_op = true,
            Event::OpEnd => {
                for line in r.pending_lines_of(None) {
                    lost.push(format!(
                        "operation {op}: store to line {line:#x} not durable at return"
                    ));
                }
                in_op = false;
                op += 1;
            }
        }
    }
    (points, lost)
}

/// The persistence state of a region while a trace is replayed: the durable image and the
/// stores in flight per cache line. Events carry the thread that issued them (0..64; a
/// single-threaded trace uses 0): a flush writes back the whole line, whoever stored into it,
/// but only a fence of the flushing thread orders that write-back (x86: `sfence` orders the
/// issuing CPU's `clwb`s); a non-temporal store is durable at its own thread's next fence.
pub struct Replay {
    durable: Vec<u8>,
    pending: BTreeMap<u64, Vec<Piece>>,
    tear: Tear,
}

impl Replay {
    pub fn new(base: &[u8], tear: Tear) -> Replay {
        Replay {
            durable: base.to_vec(),
            pending: BTreeMap::new(),
            tear,
        }
    }

    fn bit(thread: usize) -> u64 {
        assert!(thread < 64, "thread {thread}: at most 64 threads");
        1 << thread
    }

    /// A store by `thread`.
    pub fn store(&mut self, thread: usize, off: u64, data: &[u8], nt: bool) {
        let flushed = if nt { Self::bit(thread) } else { 0 };
        let mut at = 0usize;
        while at < data.len() {
            let pos = off + at as u64;
            let line = pos & !(CACHE_LINE - 1);
            let take = ((line + CACHE_LINE - pos) as usize).min(data.len() - at);
            self.pending.entry(line).or_default().push(Piece {
                off: pos,
                data: data[at..at + take].to_vec(),
                flushed,
                nt,
                owner: thread,
            });
            at += take;
        }
    }

    /// A write-back of `line` by `thread`: every store in the line so far goes with it.
    pub fn flush(&mut self, thread: usize, line: u64) {
        if let Some(ps) = self.pending.get_mut(&line) {
            ps.iter_mut().for_each(|p| p.flushed |= Self::bit(thread));
        }
    }

    /// A fence by `thread`: the pieces it wrote back (in order per line) become durable;
    /// the others stay in flight.
    pub fn fence(&mut self, thread: usize) {
        let bit = Self::bit(thread);
        for ps in self.pending.values_mut() {
            // Stores to a line persist in order: only the written-back prefix is guaranteed.
            let n = ps.iter().take_while(|p| p.flushed & bit != 0).count();
            for p in ps.drain(..n) {
                apply(&mut self.durable, &p);
            }
        }
        self.pending.retain(|_, ps| !ps.is_empty());
    }

    /// The crash point here (before the fence being replayed), tagged `op` and `fence`.
    pub fn point(&self, op: usize, fence: usize) -> CrashPoint {
        CrashPoint {
            op,
            fence,
            durable: self.durable.clone(),
            lines: self
                .pending
                .values()
                .filter(|ps| !ps.is_empty())
                .cloned()
                .collect(),
            tear: self.tear,
        }
    }

    /// The lines holding stores of `thread` (of any thread if `None`) not durable yet.
    pub fn pending_lines_of(&self, thread: Option<usize>) -> Vec<u64> {
        self.pending
            .iter()
            .filter(|(_, ps)| ps.iter().any(|p| thread.is_none_or(|t| p.owner == t)))
            .map(|(&line, _)| line)
            .collect()
    }
}

fn apply(img: &mut [u8], p: &Piece) {
    img[p.off as usize..p.off as usize + p.data.len()].copy_from_slice(&p.data);
}

fn hash(b: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images(p: &CrashPoint) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        p.for_each_image(&mut HashSet::new(), |i| v.push(i.to_vec()));
        v
    }

    #[test]
    fn model_keeps_flushed_and_fenced_only() {
        let base = vec![0u8; 256];
        let ev = vec![
            Event::OpBegin("x"),
            Event::Store {
                off: 0,
                data: vec![1; 8],
                nt: false,
            },
            Event::Store {
                off: 64,
                data: vec![2; 8],
                nt: false,
            },
            Event::Flush { line: 0 },
            Event::Fence,
            Event::Store {
                off: 128,
                data: vec![3; 8],
                nt: true,
            },
            Event::Fence,
            Event::OpEnd,
        ];
        let (points, lost) = crash_points(&base, &ev);
        assert_eq!(points.len(), 2);
        // First fence: lines 0 and 64 in flight -> 4 distinct images.
        assert_eq!(images(&points[0]).len(), 4);
        // Line 64 was never flushed: reported.
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert!(lost[0].contains("0x40"));
        // Second fence: line 0 is durable in every image.
        assert!(images(&points[1]).iter().all(|img| img[0] == 1));
    }

    #[test]
    fn stores_in_a_line_persist_as_prefixes() {
        let base = vec![0u8; 64];
        let ev = vec![
            Event::OpBegin("x"),
            Event::Store {
                off: 0,
                data: vec![1; 8],
                nt: false,
            },
            Event::Store {
                off: 8,
                data: vec![2; 8],
                nt: false,
            },
            Event::Flush { line: 0 },
            Event::Fence,
            Event::OpEnd,
        ];
        let (points, _) = crash_points(&base, &ev);
        let imgs = &images(&points[0]);
        // none, first only, both; never the second without the first.
        assert_eq!(imgs.len(), 3);
        assert!(!imgs.iter().any(|i| i[0] == 0 && i[8] == 2));
    }

    #[test]
    fn words_mode_tears_a_store_at_words_lines_mode_does_not() {
        let base = vec![0u8; 128];
        let ev = |nt| {
            vec![
                Event::OpBegin("x"),
                Event::Store {
                    off: 0,
                    data: vec![0xff; 64],
                    nt,
                },
                Event::Flush { line: 0 },
                Event::Fence,
                Event::OpEnd,
            ]
        };
        let (points, _) = crash_points_with(&base, &ev(false), Tear::Lines);
        assert_eq!(images(&points[0]).len(), 2, "whole line or nothing");
        let (points, _) = crash_points_with(&base, &ev(false), Tear::Words { samples: 64 });
        let imgs = images(&points[0]);
        assert!(imgs.len() > 10, "{} images", imgs.len());
        for img in &imgs {
            for w in img[..64].chunks(8) {
                assert!(
                    w == [0; 8] || w == [0xff; 8],
                    "word torn below 8 bytes: {w:?}"
                );
            }
        }
        // Not only prefixes: some image has a later word without an earlier one.
        assert!(imgs.iter().any(|i| i[0] == 0 && i[8..64].contains(&0xff)));
        // Non-temporal stores tear at 16 bytes.
        let (points, _) = crash_points_with(&base, &ev(true), Tear::Words { samples: 64 });
        let imgs = images(&points[0]);
        assert!(imgs.len() > 4, "{} images", imgs.len());
        for img in &imgs {
            for w in img[..64].chunks(16) {
                assert!(
                    w == [0; 16] || w == [0xff; 16],
                    "torn below 16 bytes: {w:?}"
                );
            }
        }
    }

    #[test]
    fn a_fence_orders_only_its_own_threads_write_backs() {
        let mut r = Replay::new(&[0u8; 128], Tear::Lines);
        // Thread 1 stores and writes back line 0; thread 2 stores line 64 and fences.
        r.store(1, 0, &[1; 8], false);
        r.flush(1, 0);
        r.store(2, 64, &[2; 8], false);
        r.flush(2, 64);
        r.fence(2);
        // Line 64 is durable, line 0 still in flight (thread 1 has not fenced).
        assert_eq!(r.pending_lines_of(None), vec![0]);
        assert_eq!(r.pending_lines_of(Some(1)), vec![0]);
        assert!(r.pending_lines_of(Some(2)).is_empty());
        let imgs = images(&r.point(0, 0));
        assert_eq!(imgs.len(), 2);
        assert!(imgs.iter().all(|i| i[64] == 2));
        // A write-back by thread 2 covers thread 1's store in the same line.
        r.store(1, 8, &[3; 8], false);
        r.flush(2, 0);
        r.fence(2);
        assert!(r.pending_lines_of(None).is_empty());
        // A non-temporal store is durable at its own thread's fence only.
        r.store(1, 96, &[4; 16], true);
        r.fence(2);
        assert_eq!(r.pending_lines_of(Some(1)), vec![64]);
        r.fence(1);
        assert!(r.pending_lines_of(None).is_empty());
    }
}
