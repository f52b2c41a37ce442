//! Global cuckoo hash table with ranged entries (Neal et al., FAST'21, §3.2.1): one table in
//! PM, sized at mkfs, maps (inode, logical block) of every file; data blocks come from the
//! shared bitmap allocator (`balloc`), as the paper's point is that only HashFS can do without
//! one.
//!
//! Ranged entries. The paper keeps one entry per block and stores in each the length of the
//! contiguous run from it and a reverse index, so a run of n blocks still costs n entries and
//! shrinking it rewrites all of them. Here a run costs one entry: logical blocks are grouped in
//! aligned chunks of `CHUNK` blocks, and a chunk has at most one RUN entry, keyed by (inode,
//! chunk), mapping the chunk-relative blocks [off, off + len) to the physical blocks
//! [pstart, pstart + len). Blocks of the chunk outside that run (fragmentation, writes out of
//! order) get BLOCK entries keyed by (inode, logical block). A lookup probes the RUN key and,
//! if the run does not cover the block, the BLOCK key: at most four buckets, and a
//! sequential file needs one entry per chunk. Keying by the aligned chunk is what makes a run
//! findable from any block inside it without knowing where the run starts.
//!
//! Cuckoo hashing. Every key has two candidate buckets (two independent hashes); a bucket is
//! one 64-byte line of four 16-byte slots. An insert takes a free slot of either bucket, or
//! searches breadth-first for a displacement path of at most `MAX_PATH` moves (each moved
//! entry goes to its other bucket), looking at no more than `MAX_VISIT` buckets. The table
//! has 1.25 slots per data block, so even with every block in its own entry it is at most 80%
//! full; an insert that still finds no path fails with ENOSPC ("cuckoo table full").
//!
//! Crash consistency (FORMAT.md §6b). The key word is the valid flag: a new entry's value is
//! stored before its key. A claim inserts its entry with the PENDING bit set in the value
//! (invisible to lookups); publishing clears the bit with one 8-byte store, so `publish_in`
//! is one staged word. Growing a run by the next contiguous block (`publish`) is one store of
//! the RUN value followed by freeing the pending BLOCK slot. Everything that moves or rewrites
//! several slots (displacement paths, splitting a run on a punched hole) is one undo-journal
//! transaction. Mount recovery after a crash drops pending entries and mappings past EOF, then
//! rebuilds the bitmap from the table.
//!
//! Concurrency. One mutex serialises every change to the table (claims, publishes, unmaps);
//! the per-inode locks of the file system keep two operations off one file as for the trees.
//! A displacement moves entries of other files, so lookups (lock-free) run under a seqlock:
//! every commit that moves or rewrites visible entries makes `seq` odd while it applies, and
//! a lookup that saw `seq` change retries. Pending entries are never displaced: `publish_in`
//! staged a write to a fixed slot that the caller commits later, outside the mutex. The mutex
//! is taken before a journal lane, and no thread holding a lane waits for it (`publish_in`
//! does not take it), so the two cannot deadlock.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::balloc::{self, BlockAlloc};
use super::hashfs::mix;
use super::tree::{Base, Census, Reach};
use super::{Claim, FileMap, MappingKind};
use crate::fs::mount::{allowed_blocks, RecoveryReport};
use crate::journal::{Journal, Tx};
use crate::layout::inode::{Inode, INODE_SIZE};
use crate::layout::superblock::Geometry;
use crate::layout::{corrupted, Corrupted, BLOCK_SIZE};
use crate::media::Pm;

/// Logical blocks per chunk (a RUN entry never crosses a chunk boundary).
pub const CHUNK: u64 = 64;
const SLOT_BYTES: u64 = 16;
const SLOTS_PER_BUCKET: u64 = 4;
/// Longest displacement path (moves per insert); bounds a transaction's size too.
const MAX_PATH: usize = 4;
/// Buckets a displacement search may look at.
const MAX_VISIT: usize = 512;
const KIND_BLOCK: u64 = 1;
const KIND_RUN: u64 = 2;
/// Inode numbers fit the 30 bits of a key.
pub const MAX_INODES: u64 = 1 << 30;
const PBLK_BITS: u32 = 40;
const PBLK_MASK: u64 = (1 << PBLK_BITS) - 1;
pub const PENDING: u64 = 1 << 63;
const SEED: [u64; 2] = [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344];

/// A decoded key word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    pub run: bool,
    pub ino: u32,
    /// The chunk number (RUN) or the logical block (BLOCK).
    pub x: u32,
}

impl Key {
    pub fn word(self) -> u64 {
        let kind = if self.run { KIND_RUN } else { KIND_BLOCK };
        kind << 62 | (self.ino as u64) << 32 | self.x as u64
    }

    /// None for a free slot or a word no entry can have.
    pub fn split(w: u64) -> Option<Key> {
        let run = match w >> 62 {
            KIND_BLOCK => false,
            KIND_RUN => true,
            _ => return None,
        };
        let ino = (w >> 32 & (MAX_INODES - 1)) as u32;
        Some(Key {
            run,
            ino,
            x: w as u32,
        })
    }

    /// First logical block this key's entry can map.
    fn base(self) -> u64 {
        if self.run {
            self.x as u64 * CHUNK
        } else {
            self.x as u64
        }
    }
}

/// The RUN key of the chunk holding `lblk`.
pub fn run_key(ino: u32, lblk: u64) -> u64 {
    Key {
        run: true,
        ino,
        x: (lblk / CHUNK) as u32,
    }
    .word()
}

pub fn block_key(ino: u32, lblk: u64) -> u64 {
    Key {
        run: false,
        ino,
        x: lblk as u32,
    }
    .word()
}

/// A decoded value word: logical blocks base + [off, off + len) map [pstart, pstart + len).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Val {
    pub pstart: u64,
    pub off: u64,
    pub len: u64,
    pub pending: bool,
}

impl Val {
    pub fn word(self) -> u64 {
        (self.pending as u64) << 63 | self.len << 46 | self.off << 40 | self.pstart
    }

    pub fn split(w: u64) -> Val {
        Val {
            pstart: w & PBLK_MASK,
            off: w >> 40 & 63,
            len: w >> 46 & 127,
            pending: w & PENDING != 0,
        }
    }

    fn single(pblk: u64, off: u64) -> Val {
        Val {
            pstart: pblk,
            off,
            len: 1,
            pending: true,
        }
    }
}

/// Where the table is (FORMAT.md §6b): after the bitmap, running on into the first
/// `ext_blocks` data blocks, which the bitmap marks used for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Table {
    pub off: u64,
    pub buckets: u64,
    pub ext_blocks: u64,
}

impl Table {
    pub fn of(geo: &Geometry) -> Table {
        let off = (balloc::bitmap_off(geo) + balloc::bitmap_len(geo)).next_multiple_of(64);
        // 1.25 slots per data block: at most 80% full even if every block is its own entry.
        let slots = geo.data_blocks + geo.data_blocks / 4;
        let buckets = slots.div_ceil(SLOTS_PER_BUCKET).max(2);
        let end = off + buckets * SLOTS_PER_BUCKET * SLOT_BYTES;
        let ext_blocks = end.saturating_sub(geo.data_off(0)).div_ceil(BLOCK_SIZE);
        Table {
            off,
            buckets,
            ext_blocks,
        }
    }

    pub fn slots(&self) -> u64 {
        self.buckets * SLOTS_PER_BUCKET
    }

    pub fn key_off(&self, slot: u64) -> u64 {
        self.off + slot * SLOT_BYTES
    }

    pub fn val_off(&self, slot: u64) -> u64 {
        self.key_off(slot) + 8
    }

    /// The two candidate buckets of key word `k`.
    pub fn buckets_of(&self, k: u64) -> [u64; 2] {
        SEED.map(|s| mix(k ^ s) % self.buckets)
    }

    fn other_bucket(&self, k: u64, b: u64) -> u64 {
        let [b1, b2] = self.buckets_of(k);
        if b == b1 {
            b2
        } else {
            b1
        }
    }

    fn read(&self, pm: &Pm, slot: u64) -> (u64, u64) {
        (
            pm.load_u64(self.key_off(slot)),
            pm.load_u64(self.val_off(slot)),
        )
    }

    /// The slot holding key word `k` and its value.
    pub fn find(&self, pm: &Pm, k: u64) -> Option<(u64, u64)> {
        self.buckets_of(k)
            .into_iter()
            .flat_map(|b| b * SLOTS_PER_BUCKET..(b + 1) * SLOTS_PER_BUCKET)
            .find(|&s| pm.load_u64(self.key_off(s)) == k)
            .map(|s| (s, pm.load_u64(self.val_off(s))))
    }

    /// The published translation of (`ino`, `lblk`).
    fn translate(&self, pm: &Pm, ino: u32, lblk: u64) -> Option<u64> {
        let o = lblk % CHUNK;
        if let Some((_, w)) = self.find(pm, run_key(ino, lblk)) {
            let v = Val::split(w);
            if !v.pending && (v.off..v.off + v.len).contains(&o) {
                return Some(v.pstart + o - v.off);
            }
        }
        let (_, w) = self.find(pm, block_key(ino, lblk))?;
        (w & PENDING == 0).then_some(w & PBLK_MASK)
    }
}

/// Checks that `geo` can hold a cuckoo table (mkfs).
pub fn check_fits(geo: &Geometry) -> Result<(), String> {
    let t = Table::of(geo);
    if geo.inode_count > MAX_INODES {
        return Err(format!(
            "the cuckoo mapping keys at most {MAX_INODES} inodes"
        ));
    }
    if geo.data_blocks >= 1 << PBLK_BITS || t.ext_blocks * 2 >= geo.data_blocks {
        return Err(format!(
            "{} data blocks do not suit the cuckoo mapping's table ({} blocks of it in the data \
             region)",
            geo.data_blocks, t.ext_blocks
        ));
    }
    Ok(())
}

/// mkfs: marks the table's blocks in the data region used (the region is all zero: an empty
/// table and bitmap).
pub fn format(pm: &Pm, geo: &Geometry) {
    let t = Table::of(geo);
    let used: Vec<bool> = (0..geo.data_blocks).map(|b| b < t.ext_blocks).collect();
    balloc::rewrite(pm, geo, &used);
    pm.fence();
}

/// Makes `seq` odd for as long as it lives (see the module comment), even after a panic.
struct Moving<'a>(&'a AtomicU64);

impl<'a> Moving<'a> {
    fn new(seq: &'a AtomicU64) -> Moving<'a> {
        seq.fetch_add(1, Ordering::AcqRel);
        Moving(seq)
    }
}

impl Drop for Moving<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

pub struct Cuckoo {
    t: Table,
    base: Base,
    lock: Mutex<()>,
    seq: AtomicU64,
    /// Entries moved by displacement paths since mount (tests, lab).
    moved: AtomicU64,
}

/// ENOSPC that says why: `StorageFull` with a message (`errno_of` maps it to ENOSPC).
fn enospc(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::StorageFull,
        format!("cuckoo table full: {why}"),
    )
}

impl Cuckoo {
    pub fn new(geo: &Geometry, alloc: BlockAlloc) -> Cuckoo {
        Cuckoo {
            t: Table::of(geo),
            base: Base::new(geo, alloc),
            lock: Mutex::new(()),
            seq: AtomicU64::new(0),
            moved: AtomicU64::new(0),
        }
    }

    /// A lookup-only view.
    pub fn view(geo: &Geometry) -> Cuckoo {
        Self::new(geo, BlockAlloc::empty(geo))
    }

    pub fn table(&self) -> Table {
        self.t
    }

    /// Entries moved by displacement paths since mount.
    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    /// A physical block to aim a claim for (`ino`, `lblk`) at: after the previous claim,
    /// after the run of its chunk, or after the block mapped before it.
    fn goal(&self, pm: &Pm, ino: u32, lblk: u64, run: Option<Val>) -> u64 {
        if let Some(g) = self.base.hinted_goal(ino, lblk) {
            return g;
        }
        if let Some(v) = run.filter(|v| v.off + v.len == lblk % CHUNK) {
            return v.pstart + v.len;
        }
        lblk.checked_sub(1)
            .and_then(|p| self.t.translate(pm, ino, p))
            .map_or(self.t.ext_blocks, |p| p + 1)
    }

    /// The pending slot of claim `c` for (`ino`, `lblk`) and its value, if it is one.
    fn pending_slot(&self, pm: &Pm, c: Claim, ino: u32, lblk: u64) -> Option<(u64, u64, Val)> {
        let s = c.prior;
        if s >= self.t.slots() {
            return None;
        }
        let (k, w) = self.t.read(pm, s);
        let v = Val::split(w);
        let want = if v.len == 1 && v.off == 0 && k == block_key(ino, lblk) {
            true
        } else {
            k == run_key(ino, lblk) && v.off == lblk % CHUNK
        };
        (want && v.pending && v.pstart == c.pblk).then_some((s, k, v))
    }

    fn clear_slot(&self, pm: &Pm, s: u64) {
        pm.store_u64(self.t.key_off(s), 0);
        pm.store_u64(self.t.val_off(s), 0);
        pm.persist(self.t.key_off(s), SLOT_BYTES as usize);
    }

    /// Grows the published run of `lblk`'s chunk by claim `c` if `c` is its next block in
    /// both address spaces; then the claim's pending BLOCK slot `s` is dropped.
    fn try_grow(&self, pm: &Pm, c: Claim, ino: u32, lblk: u64, s: u64) -> bool {
        let Some((rs, rw)) = self.t.find(pm, run_key(ino, lblk)) else {
            return false;
        };
        let r = Val::split(rw);
        if r.pending || r.off + r.len != lblk % CHUNK || r.pstart + r.len != c.pblk {
            return false;
        }
        let _m = Moving::new(&self.seq);
        // Grow first: a crash before the slot is cleared leaves a pending entry that recovery
        // drops, never a block mapped twice.
        let grown = Val {
            len: r.len + 1,
            ..r
        };
        pm.store_u64(self.t.val_off(rs), grown.word());
        pm.persist(self.t.val_off(rs), 8);
        self.clear_slot(pm, s);
        true
    }

    /// The published entries of `ino` overlapping [from, to): (slot, key, value).
    fn entries_in(&self, pm: &Pm, ino: u32, from: u64, to: u64) -> Vec<(u64, Key, Val)> {
        let mut out = Vec::new();
        let mut take = |s: u64, k: u64, w: u64| {
            let Some(key) = Key::split(k).filter(|key| key.ino == ino) else {
                return;
            };
            let v = Val::split(w);
            let (a, b) = (key.base() + v.off, key.base() + v.off + v.len);
            if !v.pending && a < to && from < b {
                out.push((s, key, v));
            }
        };
        if to - from <= self.t.slots() / 32 {
            for c in from / CHUNK..=(to - 1) / CHUNK {
                // Blocks the chunk's run maps have no BLOCK entry: no probe for them.
                let mut run = 0..0;
                if let Some((s, w)) = self.t.find(pm, run_key(ino, c * CHUNK)) {
                    let v = Val::split(w);
                    if !v.pending {
                        run = c * CHUNK + v.off..c * CHUNK + v.off + v.len;
                    }
                    take(s, run_key(ino, c * CHUNK), w);
                }
                for l in from.max(c * CHUNK)..to.min((c + 1) * CHUNK) {
                    if run.contains(&l) {
                        continue;
                    }
                    if let Some((s, w)) = self.t.find(pm, block_key(ino, l)) {
                        take(s, block_key(ino, l), w);
                    }
                }
            }
        } else {
            for s in 0..self.t.slots() {
                let (k, w) = self.t.read(pm, s);
                take(s, k, w);
            }
        }
        out
    }

    /// Unmaps [from, to) from entry (`s`, `key`, `v`) in `b`; pushes the blocks freed.
    fn cut(
        &self,
        b: &mut Batch<'_>,
        (s, key, v): (u64, Key, Val),
        from: u64,
        to: u64,
        freed: &mut Vec<u64>,
    ) -> io::Result<()> {
        let a = key.base() + v.off;
        let (lo, hi) = (from.max(a), to.min(a + v.len));
        freed.extend((lo..hi).map(|l| v.pstart + l - a));
        let left = Val { len: lo - a, ..v };
        let right = Val {
            pstart: v.pstart + hi - a,
            off: v.off + hi - a,
            len: a + v.len - hi,
            ..v
        };
        match (left.len > 0, right.len > 0) {
            (false, false) => b.write(s, 0, 0),
            (true, false) => b.write(s, key.word(), left.word()),
            (false, true) => b.write(s, key.word(), right.word()),
            (true, true) => {
                // A hole punched inside the run: the longer side stays the run, the shorter
                // (at most CHUNK / 2 blocks) becomes BLOCK entries.
                let (keep, spill) = if left.len >= right.len {
                    (left, right)
                } else {
                    (right, left)
                };
                b.write(s, key.word(), keep.word());
                for i in 0..spill.len {
                    let l = key.base() + spill.off + i;
                    let e = Val::single(spill.pstart + i, 0);
                    let e = Val {
                        pending: false,
                        ..e
                    };
                    b.insert(block_key(key.ino, l), e.word())
                        .ok_or_else(|| enospc("no room to split a run around a hole"))?;
                }
            }
        }
        Ok(())
    }
}

/// Slot writes staged over the table as it is in PM, so that several inserts (each maybe a
/// displacement path) see each other before anything is stored; committed as one journal
/// transaction.
struct Batch<'a> {
    c: &'a Cuckoo,
    pm: &'a Pm,
    /// (slot, key, value) in the order first written.
    over: Vec<(u64, u64, u64)>,
}

/// A node of the displacement search: a bucket, and how it was reached (the slot of the
/// parent bucket whose entry would move into it).
#[derive(Clone, Copy)]
struct Step {
    bucket: u64,
    parent: usize,
    via: u64,
    depth: usize,
}

const ROOT: usize = usize::MAX;

impl<'a> Batch<'a> {
    fn new(c: &'a Cuckoo, pm: &'a Pm) -> Batch<'a> {
        Batch {
            c,
            pm,
            over: Vec::new(),
        }
    }

    fn read(&self, s: u64) -> (u64, u64) {
        match self.over.iter().find(|o| o.0 == s) {
            Some(&(_, k, v)) => (k, v),
            None => self.c.t.read(self.pm, s),
        }
    }

    fn write(&mut self, s: u64, k: u64, v: u64) {
        match self.over.iter_mut().find(|o| o.0 == s) {
            Some(o) => *o = (s, k, v),
            None => self.over.push((s, k, v)),
        }
    }

    fn free_slot(&self, b: u64) -> Option<u64> {
        (b * SLOTS_PER_BUCKET..(b + 1) * SLOTS_PER_BUCKET).find(|&s| self.read(s).0 == 0)
    }

    /// Places (`k`, `v`) and returns its slot, displacing at most `MAX_PATH` entries; None if
    /// no path was found (nothing staged then).
    fn insert(&mut self, k: u64, v: u64) -> Option<u64> {
        let roots = self.c.t.buckets_of(k);
        for b in roots {
            if let Some(s) = self.free_slot(b) {
                self.write(s, k, v);
                return Some(s);
            }
        }
        let mut steps: Vec<Step> = roots
            .iter()
            .map(|&bucket| Step {
                bucket,
                parent: ROOT,
                via: 0,
                depth: 0,
            })
            .collect();
        let mut at = 0;
        while at < steps.len() && steps.len() < MAX_VISIT {
            let st = steps[at];
            at += 1;
            if st.depth == MAX_PATH {
                continue;
            }
            for s in st.bucket * SLOTS_PER_BUCKET..(st.bucket + 1) * SLOTS_PER_BUCKET {
                let (ek, ev) = self.read(s);
                // Pending entries stay put: a caller's transaction may hold a write to them.
                if ev & PENDING != 0 {
                    continue;
                }
                let alt = self.c.t.other_bucket(ek, st.bucket);
                if steps.iter().any(|x| x.bucket == alt) {
                    continue;
                }
                steps.push(Step {
                    bucket: alt,
                    parent: at - 1,
                    via: s,
                    depth: st.depth + 1,
                });
                if let Some(f) = self.free_slot(alt) {
                    return Some(self.shift(&steps, steps.len() - 1, f, k, v));
                }
            }
        }
        None
    }

    /// Moves the entries along the path ending at step `leaf` one step on (the last into
    /// free slot `f`) and puts (`k`, `v`) in the slot the first one left.
    fn shift(&mut self, steps: &[Step], mut leaf: usize, f: u64, k: u64, v: u64) -> u64 {
        let mut dst = f;
        while steps[leaf].parent != ROOT {
            let src = steps[leaf].via;
            let (ek, ev) = self.read(src);
            self.write(dst, ek, ev);
            self.c.moved.fetch_add(1, Ordering::Relaxed);
            dst = src;
            leaf = steps[leaf].parent;
        }
        self.write(dst, k, v);
        dst
    }

    /// Stores the staged slots: a new entry in a free slot as value then key; anything more
    /// as one journal transaction, under the seqlock.
    fn commit(self, journal: &Journal) -> io::Result<()> {
        let (pm, t) = (self.pm, &self.c.t);
        match self.over[..] {
            [] => {}
            [(s, k, v)] if t.read(pm, s).0 == 0 => {
                pm.store_u64(t.val_off(s), v);
                pm.persist(t.val_off(s), 8);
                pm.store_u64(t.key_off(s), k);
                pm.persist(t.key_off(s), 8);
            }
            _ => {
                // Each slot costs a 16-byte undo entry and 16 old bytes.
                let need = crate::journal::HEADER_LEN + self.over.len() * 32;
                let lane = self.c.base.geo.lane_blocks as u64 * BLOCK_SIZE;
                if need as u64 > lane {
                    return Err(enospc("change too large for one journal transaction"));
                }
                let mut tx = journal.begin(pm);
                for &(s, k, v) in &self.over {
                    let mut b = [0u8; 16];
                    b[..8].copy_from_slice(&k.to_le_bytes());
                    b[8..].copy_from_slice(&v.to_le_bytes());
                    tx.write(t.key_off(s), &b);
                }
                let _m = Moving::new(&self.c.seq);
                tx.commit();
            }
        }
        Ok(())
    }
}

impl FileMap for Cuckoo {
    fn kind(&self) -> MappingKind {
        MappingKind::Cuckoo
    }

    fn lookup(&self, pm: &Pm, ino: u32, lblk: u32) -> Option<u64> {
        if (ino as u64) >= self.base.geo.inode_count {
            return None;
        }
        loop {
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let r = self.t.translate(pm, ino, lblk as u64);
            std::sync::atomic::fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s {
                // Damaged media must not send a caller outside the data region.
                return r.filter(|&p| p >= self.t.ext_blocks && self.base.valid(p));
            }
        }
    }

    fn reserve(&self, count: u64) -> io::Result<()> {
        self.base.alloc.reserve(count)
    }

    fn unreserve(&self, count: u64) {
        self.base.alloc.unreserve(count)
    }

    /// Allocates the block and inserts its entry, pending: a new RUN entry if the chunk has
    /// none, else a BLOCK entry (which `publish` may fold into the run).
    fn claim(&self, pm: &Pm, journal: &Journal, ino: u32, lblk: u32) -> io::Result<Claim> {
        let l = lblk as u64;
        let _g = self.lock.lock();
        let run = self.t.find(pm, run_key(ino, l)).map(|(_, w)| Val::split(w));
        let pblk = self.base.alloc.alloc(pm, self.goal(pm, ino, l, run))?;
        let (k, v) = match run {
            None => (run_key(ino, l), Val::single(pblk, l % CHUNK)),
            Some(_) => (block_key(ino, l), Val::single(pblk, 0)),
        };
        let mut b = Batch::new(self, pm);
        let placed = b
            .insert(k, v.word())
            .ok_or_else(|| enospc("no displacement path for a new entry"))
            .and_then(|s| b.commit(journal).map(|_| s));
        match placed {
            Ok(s) => {
                self.base.note_claim(ino, l, pblk);
                Ok(Claim { pblk, prior: s })
            }
            Err(e) => {
                self.base.alloc.unalloc(pm, pblk);
                Err(e)
            }
        }
    }

    fn abandon(&self, pm: &Pm, _journal: &Journal, c: Claim, ino: u32, lblk: u32) {
        let _g = self.lock.lock();
        if let Some((s, _, _)) = self.pending_slot(pm, c, ino, lblk as u64) {
            // Under the seqlock: a lookup that matched the key must not take the cleared
            // value for a mapping of block 0.
            let m = Moving::new(&self.seq);
            self.clear_slot(pm, s);
            drop(m);
            pm.fence();
            self.base.alloc.release(pm, c.pblk);
        }
    }

    /// One staged word: the pending bit off. The slot cannot move before the caller commits
    /// (pending entries are never displaced).
    fn publish_in(&self, tx: &mut Tx<'_>, c: Claim, ino: u32, lblk: u32) {
        if let Some((s, _, v)) = self.pending_slot(tx.pm(), c, ino, lblk as u64) {
            let v = Val {
                pending: false,
                ..v
            };
            tx.write_u64(self.t.val_off(s), v.word());
        }
    }

    fn publish(&self, pm: &Pm, _journal: &Journal, c: Claim, ino: u32, lblk: u32) {
        let l = lblk as u64;
        let _g = self.lock.lock();
        let Some((s, k, v)) = self.pending_slot(pm, c, ino, l) else {
            return;
        };
        if k == block_key(ino, l) && self.try_grow(pm, c, ino, l, s) {
            return;
        }
        pm.store_u64(
            self.t.val_off(s),
            Val {
                pending: false,
                ..v
            }
            .word(),
        );
        pm.persist(self.t.val_off(s), 8);
    }

    /// One batch (transaction if several slots change) per entry; only a hole punched inside
    /// a run changes more than one slot, and then it is the only entry cut (the hole lies in
    /// one chunk), so an ENOSPC changes nothing.
    fn unmap_range(
        &self,
        pm: &Pm,
        journal: &Journal,
        ino: u32,
        from: u64,
        to: u64,
    ) -> io::Result<u64> {
        let to = to.min(1 << 32);
        if from >= to {
            return Ok(0);
        }
        let mut freed = Vec::new();
        {
            let _g = self.lock.lock();
            for e in self.entries_in(pm, ino, from, to) {
                let mut b = Batch::new(self, pm);
                let mut mine = Vec::new();
                self.cut(&mut b, e, from, to, &mut mine)?;
                b.commit_change(journal)?;
                freed.extend(mine);
            }
            pm.fence();
        }
        for &p in &freed {
            self.base.alloc.release(pm, p);
        }
        Ok(freed.len() as u64)
    }

    /// `unmap_range` already released the blocks (after its own fence).
    fn freed(&self, _count: u64) {}

    /// Probes only [0, `allowed`) when that is small (see `entries_in`).
    fn unmap_all(&self, pm: &Pm, journal: &Journal, ino: u32, allowed: u64) -> io::Result<u64> {
        self.unmap_range(pm, journal, ino, 0, allowed)
    }

    /// The table's own blocks are neither used nor counted (they were never file space).
    fn used_blocks(&self) -> u64 {
        self.base.alloc.used().saturating_sub(self.t.ext_blocks)
    }

    fn set_used(&self, used: u64) {
        self.base.alloc.set_used(used + self.t.ext_blocks)
    }

    fn total_blocks(&self) -> u64 {
        self.base.alloc.total().saturating_sub(self.t.ext_blocks)
    }
}

impl Batch<'_> {
    /// Commits a change to existing entries: a single slot rewritten in place is one store
    /// (value, or key for a removal) under the seqlock, anything more a transaction.
    fn commit_change(self, journal: &Journal) -> io::Result<()> {
        let (pm, t) = (self.pm, &self.c.t);
        if let [(s, k, v)] = self.over[..] {
            let (ok, _) = t.read(pm, s);
            if ok != 0 && (k == 0 || k == ok) {
                let _m = Moving::new(&self.c.seq);
                if k == 0 {
                    self.c.clear_slot(pm, s);
                } else {
                    pm.store_u64(t.val_off(s), v);
                    pm.persist(t.val_off(s), 8);
                }
                return Ok(());
            }
        }
        self.commit(journal)
    }
}

/// Every entry of the table, checked (fsck, recovery, `info`): per-inode data-block counts
/// and the used-block flags (the table's own blocks included). `on_bad` hears of every
/// damaged entry, entry outside its buckets, duplicate key, overlapping range and block
/// mapped twice.
pub fn census(
    pm: &Pm,
    geo: &Geometry,
    on_bad: &mut dyn FnMut(u32, Corrupted),
    on_map: &mut dyn FnMut(u32, Reach),
) -> Census {
    let t = Table::of(geo);
    let mut c = Census {
        used: (0..geo.data_blocks).map(|b| b < t.ext_blocks).collect(),
        counts: vec![0; geo.inode_count as usize],
    };
    let mut keys = hashbrown::HashSet::new();
    let mut entries = Vec::new();
    for s in 0..t.slots() {
        let (k, w) = t.read(pm, s);
        if k == 0 {
            continue;
        }
        let off = t.key_off(s);
        match check_entry(&t, geo, s, k, w) {
            Err(what) => {
                let ino = Key::split(k).map_or(0, |key| key.ino);
                on_bad(ino, corrupted(format!("cuckoo slot {s}: {what}"), off));
            }
            Ok((key, _)) if !keys.insert(k) => on_bad(
                key.ino,
                corrupted(format!("cuckoo slot {s}: key {k:#x} twice"), off),
            ),
            Ok((key, v)) => entries.push((key, v, off)),
        }
    }
    let runs: hashbrown::HashMap<(u32, u32), Val> = entries
        .iter()
        .filter(|(key, v, _)| key.run && !v.pending)
        .map(|&(key, v, _)| ((key.ino, key.x), v))
        .collect();
    // Published entries first, so that a pending one can be told from a conflict.
    entries.sort_by_key(|e| e.1.pending);
    for (key, v, off) in entries {
        let l = key.base() + v.off;
        let run = runs
            .get(&(key.ino, (l / CHUNK) as u32))
            .filter(|r| !key.run && (r.off..r.off + r.len).contains(&(l % CHUNK)));
        match run {
            // `publish` grew the run by this claim and a crash came before the claim's
            // pending slot was cleared: recovery drops the slot.
            Some(r) if v.pending && r.pstart + (l % CHUNK - r.off) == v.pstart => {
                on_map(
                    key.ino,
                    Reach::Data {
                        lblk: l,
                        pblk: v.pstart,
                        pending: true,
                    },
                );
            }
            Some(_) => on_bad(
                key.ino,
                corrupted(
                    format!(
                        "cuckoo: block {l} of inode {} mapped by a run and an entry",
                        key.ino
                    ),
                    off,
                ),
            ),
            None => count_entry(geo, &mut c, key, v, on_bad, on_map),
        }
    }
    c
}

/// Validates one stored entry: why not, or its decoded key and value.
fn check_entry(t: &Table, geo: &Geometry, s: u64, k: u64, w: u64) -> Result<(Key, Val), String> {
    let key = Key::split(k).ok_or_else(|| format!("bad key word {k:#x}"))?;
    if key.ino == 0 || key.ino as u64 >= geo.inode_count {
        return Err(format!("inode {} out of range", key.ino));
    }
    if !t.buckets_of(k).contains(&(s / SLOTS_PER_BUCKET)) {
        return Err(format!("key {k:#x} is in neither of its buckets"));
    }
    let v = Val::split(w);
    let shape = if key.run {
        v.len >= 1 && v.off + v.len <= CHUNK && key.x as u64 <= u32::MAX as u64 / CHUNK
    } else {
        v.len == 1 && v.off == 0
    };
    if !shape || w >> 53 & 0x3ff != 0 {
        return Err(format!("bad value word {w:#x}"));
    }
    if v.pstart < t.ext_blocks || v.pstart + v.len > geo.data_blocks {
        return Err(format!(
            "blocks {}+{} outside the data blocks",
            v.pstart, v.len
        ));
    }
    Ok((key, v))
}

fn count_entry(
    geo: &Geometry,
    c: &mut Census,
    key: Key,
    v: Val,
    on_bad: &mut dyn FnMut(u32, Corrupted),
    on_map: &mut dyn FnMut(u32, Reach),
) {
    for i in 0..v.len {
        let p = v.pstart + i;
        if std::mem::replace(&mut c.used[p as usize], true) {
            on_bad(
                key.ino,
                corrupted(format!("block {p} owned twice"), geo.data_off(p)),
            );
            continue;
        }
        if !v.pending {
            c.counts[key.ino as usize] += 1;
        }
        let lblk = key.base() + v.off + i;
        on_map(
            key.ino,
            Reach::Data {
                lblk,
                pblk: p,
                pending: v.pending,
            },
        );
    }
}

/// Mount recovery. After an unclean shutdown: drops pending entries (claims never
/// published), entries of free inodes and mappings past what each inode may map, then
/// rebuilds the bitmap from the table and fixes block counts. Returns the allocator.
pub fn recover(
    pm: &Pm,
    geo: &Geometry,
    unclean: bool,
    report: &mut RecoveryReport,
) -> Result<BlockAlloc, Corrupted> {
    if unclean {
        let t = Table::of(geo);
        for s in 0..t.slots() {
            report.stray_blocks_freed += trim_slot(pm, geo, &t, s);
        }
        let mut bad = None;
        let c = census(
            pm,
            geo,
            &mut |_, e| {
                bad.get_or_insert(e);
            },
            &mut |_, _| {},
        );
        if let Some(e) = bad {
            return Err(e);
        }
        balloc::rewrite(pm, geo, &c.used);
        let counts = c
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (i as u32, n))
            .collect();
        crate::fs::mount::fix_block_counts(pm, geo, &counts, report);
        pm.fence();
    }
    Ok(BlockAlloc::load(pm, geo))
}

/// Recovery of one slot: clears a pending entry or one of a free inode, trims a run past the
/// inode's end; returns the blocks dropped. Damaged entries are left for the census.
fn trim_slot(pm: &Pm, geo: &Geometry, t: &Table, s: u64) -> u64 {
    let (k, w) = t.read(pm, s);
    let Some(key) = Key::split(k).filter(|key| (1..geo.inode_count).contains(&(key.ino as u64)))
    else {
        return 0;
    };
    let v = Val::split(w);
    let i =
        Inode::decode_raw(&pm.read_array::<{ INODE_SIZE as usize }>(geo.inode_off(key.ino as u64)));
    let keep = if v.pending || i.is_free() {
        0
    } else {
        allowed_blocks(&i)
            .saturating_sub(key.base() + v.off)
            .min(v.len)
    };
    if keep == v.len {
        return 0;
    }
    if keep == 0 {
        pm.store_u64(t.key_off(s), 0);
        pm.store_u64(t.val_off(s), 0);
    } else {
        pm.store_u64(t.val_off(s), Val { len: keep, ..v }.word());
    }
    pm.persist(t.key_off(s), SLOT_BYTES as usize);
    v.len - keep
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const BLOCKS: u64 = 8192;
    const INO: u32 = 5;

    struct Rig {
        pm: Pm,
        geo: Geometry,
        journal: Journal,
        map: Cuckoo,
        model: BTreeMap<u64, u64>,
    }

    fn rig() -> Rig {
        let geo = Geometry::compute(BLOCKS, Some(64)).unwrap();
        check_fits(&geo).unwrap();
        let pm = Pm::in_memory(BLOCKS * BLOCK_SIZE);
        format(&pm, &geo);
        let alloc = BlockAlloc::load(&pm, &geo);
        Rig {
            journal: Journal::new(&geo),
            map: Cuckoo::new(&geo, alloc),
            pm,
            geo,
            model: BTreeMap::new(),
        }
    }

    impl Rig {
        fn map(&mut self, lblk: u64) -> u64 {
            self.map.reserve(1).unwrap();
            let c = self
                .map
                .claim(&self.pm, &self.journal, INO, lblk as u32)
                .unwrap();
            self.map
                .publish(&self.pm, &self.journal, c, INO, lblk as u32);
            self.model.insert(lblk, c.pblk);
            c.pblk
        }

        fn map_in_tx(&mut self, lblks: &[u64]) {
            let claims: Vec<_> = lblks
                .iter()
                .map(|&l| {
                    self.map.reserve(1).unwrap();
                    (
                        self.map
                            .claim(&self.pm, &self.journal, INO, l as u32)
                            .unwrap(),
                        l,
                    )
                })
                .collect();
            let mut tx = self.journal.begin(&self.pm);
            for &(c, l) in &claims {
                self.map.publish_in(&mut tx, c, INO, l as u32);
            }
            tx.commit();
            for (c, l) in claims {
                self.model.insert(l, c.pblk);
            }
        }

        fn unmap(&mut self, from: u64, to: u64) {
            let n = self
                .map
                .unmap_range(&self.pm, &self.journal, INO, from, to)
                .unwrap();
            let gone: Vec<u64> = self.model.range(from..to).map(|(&l, _)| l).collect();
            assert_eq!(n, gone.len() as u64, "unmapped count for [{from}, {to})");
            for l in gone {
                self.model.remove(&l);
            }
        }

        fn entries(&self) -> u64 {
            let t = self.map.table();
            (0..t.slots())
                .filter(|&s| t.read(&self.pm, s).0 != 0)
                .count() as u64
        }

        fn check(&self) {
            for (&l, &p) in &self.model {
                assert_eq!(
                    self.map.lookup(&self.pm, INO, l as u32),
                    Some(p),
                    "lblk {l}"
                );
            }
            let mut mapped = BTreeMap::new();
            let c = census(
                &self.pm,
                &self.geo,
                &mut |_, e| panic!("table damaged: {e}"),
                &mut |_, r| {
                    if let Reach::Data {
                        lblk,
                        pblk,
                        pending,
                    } = r
                    {
                        assert!(!pending);
                        mapped.insert(lblk, pblk);
                    }
                },
            );
            assert_eq!(mapped, self.model);
            for b in 0..self.geo.data_blocks {
                assert_eq!(
                    balloc::bit(&self.pm, &self.geo, b),
                    c.used[b as usize],
                    "bit {b}"
                );
            }
            let used = c.used.iter().filter(|&&u| u).count() as u64;
            assert_eq!(self.map.used_blocks(), used - self.map.table().ext_blocks);
        }
    }

    #[test]
    fn sequential_file_is_one_entry_per_chunk() {
        let mut r = rig();
        let first = r.map(0);
        for l in 1..300 {
            assert_eq!(r.map(l), first + l, "lblk {l}");
        }
        r.check();
        assert_eq!(r.entries(), 300u64.div_ceil(CHUNK));
        assert_eq!(r.map.lookup(&r.pm, INO, 300), None);
        assert_eq!(r.map.lookup(&r.pm, INO + 1, 0), None);
    }

    #[test]
    fn holes_punches_and_truncates() {
        let mut r = rig();
        for l in 0..200 {
            r.map(l);
        }
        r.unmap(10, 20);
        r.check();
        r.unmap(100, 101);
        r.check();
        r.unmap(70, 128);
        r.check();
        r.map(15);
        r.map_in_tx(&[12, 13, 100, 5000]);
        r.check();
        r.unmap(150, u64::MAX);
        r.check();
        r.unmap(0, u64::MAX);
        r.check();
        assert_eq!(r.entries(), 0);
        assert_eq!(r.map.used_blocks(), 0);
    }

    #[test]
    fn fragmented_files_fill_past_95_percent() {
        let mut r = rig();
        let free = r.geo.data_blocks - r.map.table().ext_blocks;
        // Every other block of a file, then the rest: no two neighbours contiguous.
        let n = free * 96 / 100;
        for l in (0..n).map(|i| i * 2) {
            r.map(l);
        }
        r.unmap(0, 2);
        r.check();
        assert!(r.entries() > n / 2);
        assert!(r.map.moved() > 0, "no displacement happened");
    }

    #[test]
    fn large_sparse_offsets() {
        let mut r = rig();
        for l in [0u64, 63, 64, 262_143, 1 << 27, (1 << 32) - 1] {
            r.map(l);
            r.check();
        }
        r.unmap(1 << 20, 1 << 32);
        r.check();
    }

    #[test]
    fn abandon_and_recovery_drop_claims() {
        let mut r = rig();
        for l in 0..40 {
            r.map(l);
        }
        r.map.reserve(3).unwrap();
        let cs: Vec<_> = (40..43)
            .map(|l| (r.map.claim(&r.pm, &r.journal, INO, l).unwrap(), l))
            .collect();
        for (c, l) in cs.into_iter().rev() {
            r.map.abandon(&r.pm, &r.journal, c, INO, l);
        }
        r.check();
        r.map.reserve(1).unwrap();
        r.map.claim(&r.pm, &r.journal, INO, 40).unwrap();
        // Inode INO is free on this image: recovery drops all its entries.
        let a = recover(&r.pm, &r.geo, true, &mut RecoveryReport::default()).unwrap();
        r.model.clear();
        r.map = Cuckoo::new(&r.geo, a);
        r.check();
        assert_eq!(r.entries(), 0);
    }

    /// Threads map one entry per block (no two blocks contiguous) into a table filling up to
    /// ~65%, so inserts displace other threads' entries while those threads look theirs up:
    /// the seqlock must never let a lookup miss or mistranslate.
    #[test]
    fn lookups_race_displacements() {
        let r = rig();
        let free = r.geo.data_blocks - r.map.table().ext_blocks;
        let per = free * 65 / 100 / 4;
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let r = &r;
                s.spawn(move || {
                    let ino = 10 + t;
                    let mut mine = Vec::new();
                    for i in 0..per {
                        let l = (i * 2) as u32;
                        r.map.reserve(1).unwrap();
                        let c = r.map.claim(&r.pm, &r.journal, ino, l).unwrap();
                        r.map.publish(&r.pm, &r.journal, c, ino, l);
                        mine.push((l, c.pblk));
                        for &(l, p) in mine.iter().rev().step_by(97).take(8) {
                            assert_eq!(r.map.lookup(&r.pm, ino, l), Some(p), "t{t} lblk {l}");
                        }
                    }
                    for (l, p) in mine {
                        assert_eq!(r.map.lookup(&r.pm, ino, l), Some(p));
                    }
                });
            }
        });
        census(&r.pm, &r.geo, &mut |_, e| panic!("{e}"), &mut |_, _| {});
        assert!(r.map.moved() > 0, "no displacement happened");
    }

    /// With both buckets of a new key full of entries that cannot move, the claim fails with
    /// ENOSPC and a reason, and gives its block back.
    #[test]
    fn no_displacement_path_is_enospc() {
        let r = rig();
        let t = r.map.table();
        let k = run_key(INO, 0);
        for b in t.buckets_of(k) {
            for s in b * SLOTS_PER_BUCKET..(b + 1) * SLOTS_PER_BUCKET {
                r.pm.store_u64(t.val_off(s), Val::single(t.ext_blocks, 0).word());
                r.pm.store_u64(t.key_off(s), block_key(60, s));
            }
        }
        let used = r.map.used_blocks();
        r.map.reserve(1).unwrap();
        let e = r.map.claim(&r.pm, &r.journal, INO, 0).unwrap_err();
        r.map.unreserve(1);
        assert_eq!(crate::fs::errno_of(&e), libc::ENOSPC);
        assert!(e.to_string().contains("cuckoo table full"), "{e}");
        assert_eq!(r.map.used_blocks(), used);
    }

    #[test]
    fn displacement_keeps_every_entry() {
        let r = rig();
        // Many files of one block each: a nearly full table of single entries.
        let t = r.map.table();
        let files = (t.slots() * 3 / 4).min(r.geo.data_blocks - t.ext_blocks - 1);
        let mut placed = Vec::new();
        for i in 0..files {
            let (ino, l) = (1 + (i % 60) as u32, (i / 60) as u32 * CHUNK as u32);
            r.map.reserve(1).unwrap();
            let c = r.map.claim(&r.pm, &r.journal, ino, l).unwrap();
            r.map.publish(&r.pm, &r.journal, c, ino, l);
            placed.push((ino, l, c.pblk));
        }
        for (ino, l, p) in placed {
            assert_eq!(r.map.lookup(&r.pm, ino, l), Some(p));
        }
        census(&r.pm, &r.geo, &mut |_, e| panic!("{e}"), &mut |_, _| {});
    }
}
