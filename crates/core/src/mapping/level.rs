//! Level hashing (Zuo et al., OSDI'18) used as-is as a global file mapping, for section 4.9 of
//! Neal et al. (FAST'21): one entry per block, keyed by (inode, logical block), in a
//! two-level hash table in PM; data blocks come from the shared bitmap allocator (`balloc`).
//!
//! The table. A level of capacity C has C buckets of four 16-byte slots (one 64-byte line);
//! a key's two candidate buckets in it are `h1 % (C/2)` in its first half and
//! `C/2 + h2 % (C/2)` in its second (two independent hashes). The top level has N buckets,
//! the bottom level N/2, so each bottom bucket is shared by the top buckets that map onto it.
//! An insert takes a free slot of the two top buckets, then of the two bottom buckets; failing
//! that it tries one-step movement (an entry of a candidate bucket moves to its other bucket in
//! the same level, top level first); failing that the table is resized.
//!
//! Resizing in place, inside a region of fixed size. Level hashing grows by allocating a new
//! top level of 2N buckets, rehashing the bottom level's entries into it and freeing the
//! bottom level: the old top level becomes the new bottom level without moving (its bucket
//! indices are the same function of the capacity). The image is fixed size, so the region is
//! reserved at mkfs for the largest table: the level of capacity C lives at buckets
//! [C, 2C) of the region, so every level that can ever exist has its own place and the region
//! has 2 * `N_max` buckets (bucket 0 is the header). The table starts with a small top level
//! (`N_max / 4`, at most 64 buckets), so a growing file system pays for each resize as level hashing
//! does; `N_max` is the smallest power of two that gives 1.25 slots per data block.
//!
//! Crash consistency (FORMAT.md §6c). No journal transaction is needed: every change is a
//! sequence of 8-byte stores that recovery can finish or undo.
//! - The key word is the slot's token: a new entry's value is stored (and written back)
//!   before its key. A claim inserts its entry with the PENDING bit in the value (invisible to
//!   lookups); publishing clears the bit with one store, so `publish_in` is one staged word.
//! - A removal clears the key word first.
//! - A move (one-step movement, rehashing) writes the entry into its new slot first, then
//!   clears the old one: a crash in between leaves the same key twice with the same value,
//!   which recovery folds into one.
//! - A resize first stores the header word with the RESIZING bit (the table then has three
//!   levels: 2N, N and the N/2 being drained, and lookups search all three); each bottom
//!   entry is moved as above; one store of the header word with the new top level ends it.
//!   Recovery finishes a resize a crash interrupted.
//!
//! Pending entries and transactions. `publish_in` stages a write to the slot of a pending
//! entry that the caller commits later, so that slot must stay put until then: one-step
//! movement never moves pending entries, and the resize drain skips pending entries that a
//! `publish_in` has pinned (a volatile set) until their transaction has committed; the table
//! stays in its three-level state meanwhile and the next change under the mutex drains again.
//!
//! Concurrency. One mutex serialises every change to the table (claims, publishes, unmaps);
//! lookups are lock-free under a seqlock (`seq` odd while entries move), as in `cuckoo`.
//! `publish_in` takes only the pin lock, so a thread holding a journal lane never waits for
//! the mutex; the mutex holder never takes a lane.

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

const SLOT_BYTES: u64 = 16;
const SLOTS_PER_BUCKET: u64 = 4;
const BUCKET_BYTES: u64 = SLOT_BYTES * SLOTS_PER_BUCKET;
/// Top-level buckets of a fresh table: a quarter of the largest, at most this many (and at
/// least 4), so every table resizes at least twice on its way to full.
pub const START_BUCKETS: u64 = 64;
const PBLK_BITS: u32 = 40;
const PBLK_MASK: u64 = (1 << PBLK_BITS) - 1;
pub const PENDING: u64 = 1 << 63;
/// Header word: bits 0-7 log2 of the top level's capacity, bit 8 RESIZING, bits 16-31 TAG.
const RESIZING: u64 = 1 << 8;
const TAG: u64 = 0x4c56 << 16;
const SEED: [u64; 2] = [0x4528_21e6_38d0_1377, 0xbe54_66cf_34e9_0c6c];

/// The key word of (`ino`, `lblk`); never 0 for an inode number >= 1.
pub fn key(ino: u32, lblk: u64) -> u64 {
    (ino as u64) << 32 | (lblk & 0xffff_ffff)
}

fn split_key(k: u64) -> (u32, u64) {
    ((k >> 32) as u32, k & 0xffff_ffff)
}

/// The two hashes of key word `k`.
fn hashes(k: u64) -> [u64; 2] {
    SEED.map(|s| mix(k ^ s))
}

/// Where the table is (FORMAT.md §6c): after the bitmap, running on into the first
/// `ext_blocks` data blocks, which the bitmap marks used for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Table {
    pub off: u64,
    /// Top-level capacity of the largest table (a power of two).
    pub max_buckets: u64,
    /// Top-level capacity of a fresh table.
    pub start_buckets: u64,
    pub ext_blocks: u64,
}

/// The levels of the table as the header word says: insert levels (top, bottom) and, while a
/// resize is draining it, the old bottom level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Levels {
    pub top: u64,
    pub bottom: u64,
    pub draining: Option<u64>,
}

impl Levels {
    /// Capacities of the live levels, the one a lookup should search first first.
    pub fn all(&self) -> impl Iterator<Item = u64> {
        [Some(self.top), Some(self.bottom), self.draining]
            .into_iter()
            .flatten()
    }
}

impl Table {
    pub fn of(geo: &Geometry) -> Table {
        let off = (balloc::bitmap_off(geo) + balloc::bitmap_len(geo)).next_multiple_of(64);
        // 1.25 slots per data block at the largest size: top N + bottom N/2 = 6N slots.
        let want = (geo.data_blocks + geo.data_blocks / 4).div_ceil(6);
        let max_buckets = want.next_power_of_two().max(4);
        let end = off + 2 * max_buckets * BUCKET_BYTES;
        let ext_blocks = end.saturating_sub(geo.data_off(0)).div_ceil(BLOCK_SIZE);
        Table {
            off,
            max_buckets,
            start_buckets: (max_buckets / 4).clamp(4, START_BUCKETS),
            ext_blocks,
        }
    }

    /// Buckets in the region (header bucket included).
    pub fn region_buckets(&self) -> u64 {
        2 * self.max_buckets
    }

    pub fn header_off(&self) -> u64 {
        self.off
    }

    /// The header word of a table whose top level has `top` buckets.
    pub fn header_word(top: u64, resizing: bool) -> u64 {
        TAG | top.trailing_zeros() as u64 | if resizing { RESIZING } else { 0 }
    }

    /// Decodes a header word: None if it is damaged.
    pub fn decode(&self, h: u64) -> Option<Levels> {
        if h & !(0xff | RESIZING | TAG) != 0 || h & TAG != TAG {
            return None;
        }
        let log = h & 0xff;
        if log >= 40 {
            return None;
        }
        let top = 1u64 << log;
        if top < self.start_buckets || top > self.max_buckets {
            return None;
        }
        if h & RESIZING == 0 {
            return Some(Levels {
                top,
                bottom: top / 2,
                draining: None,
            });
        }
        (top < self.max_buckets).then_some(Levels {
            top: top * 2,
            bottom: top,
            draining: Some(top / 2),
        })
    }

    pub fn levels(&self, pm: &Pm) -> Option<Levels> {
        self.decode(pm.load_u64(self.header_off()))
    }

    /// First slot of region bucket `b`.
    pub fn slot_of(b: u64) -> u64 {
        b * SLOTS_PER_BUCKET
    }

    pub fn key_off(&self, slot: u64) -> u64 {
        self.off + slot * SLOT_BYTES
    }

    pub fn val_off(&self, slot: u64) -> u64 {
        self.key_off(slot) + 8
    }

    /// The two candidate region buckets of key word `k` in the level of capacity `cap`.
    pub fn buckets_in(k: u64, cap: u64) -> [u64; 2] {
        let [h1, h2] = hashes(k);
        let half = cap / 2;
        [cap + h1 % half, cap + half + h2 % half]
    }

    /// The level capacity whose region buckets hold `b` (levels live at [C, 2C)).
    pub fn level_of_bucket(b: u64) -> u64 {
        if b == 0 {
            0
        } else {
            1 << (63 - b.leading_zeros())
        }
    }

    fn read(&self, pm: &Pm, slot: u64) -> (u64, u64) {
        (
            pm.load_u64(self.key_off(slot)),
            pm.load_u64(self.val_off(slot)),
        )
    }

    /// The slot holding key word `k` in the live levels, and its value.
    pub fn find(&self, pm: &Pm, lv: &Levels, k: u64) -> Option<(u64, u64)> {
        for cap in lv.all() {
            for b in Self::buckets_in(k, cap) {
                for s in Self::slot_of(b)..Self::slot_of(b + 1) {
                    if pm.load_u64(self.key_off(s)) == k {
                        return Some((s, pm.load_u64(self.val_off(s))));
                    }
                }
            }
        }
        None
    }

    /// The published translation of (`ino`, `lblk`).
    fn translate(&self, pm: &Pm, ino: u32, lblk: u64) -> Option<u64> {
        let lv = self.levels(pm)?;
        // A key may briefly be in two slots while it moves; both hold the same value.
        let (_, w) = self.find(pm, &lv, key(ino, lblk))?;
        (w & PENDING == 0).then_some(w & PBLK_MASK)
    }
}

/// Checks that `geo` can hold a level hashing table (mkfs).
pub fn check_fits(geo: &Geometry) -> Result<(), String> {
    let t = Table::of(geo);
    if geo.data_blocks >= 1 << PBLK_BITS || t.ext_blocks * 2 >= geo.data_blocks {
        return Err(format!(
            "{} data blocks do not suit the level hashing mapping's table ({} blocks of it in \
             the data region)",
            geo.data_blocks, t.ext_blocks
        ));
    }
    Ok(())
}

/// mkfs: writes the header of an empty table with its starting size and marks the table's
/// blocks in the data region used (the region is all zero on entry).
pub fn format(pm: &Pm, geo: &Geometry) {
    let t = Table::of(geo);
    let used: Vec<bool> = (0..geo.data_blocks).map(|b| b < t.ext_blocks).collect();
    balloc::rewrite(pm, geo, &used);
    pm.store_u64(t.header_off(), Table::header_word(t.start_buckets, false));
    pm.persist(t.header_off(), 8);
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

/// ENOSPC that says why: `StorageFull` with a message (`errno_of` maps it to ENOSPC).
fn enospc(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::StorageFull,
        format!("level hashing table full: {why}"),
    )
}

/// Counters since mount (tests, lab).
#[derive(Default)]
pub struct Stats {
    pub resizes: AtomicU64,
    pub rehashed: AtomicU64,
    pub moved: AtomicU64,
}

pub struct Level {
    t: Table,
    base: Base,
    lock: Mutex<()>,
    /// Key words of pending entries a `publish_in` has staged a write to.
    pins: Mutex<hashbrown::HashSet<u64>>,
    seq: AtomicU64,
    pub stats: Stats,
}

/// Writes entry (`k`, `v`) into free slot `s`: value first, key (the token) last.
fn put(pm: &Pm, t: &Table, s: u64, k: u64, v: u64) {
    pm.store_u64(t.val_off(s), v);
    pm.persist(t.val_off(s), 8);
    pm.store_u64(t.key_off(s), k);
    pm.persist(t.key_off(s), 8);
}

/// Clears slot `s`: key first.
fn clear(pm: &Pm, t: &Table, s: u64) {
    pm.store_u64(t.key_off(s), 0);
    pm.store_u64(t.val_off(s), 0);
    pm.persist(t.key_off(s), SLOT_BYTES as usize);
}

fn free_slot(pm: &Pm, t: &Table, b: u64) -> Option<u64> {
    (Table::slot_of(b)..Table::slot_of(b + 1)).find(|&s| pm.load_u64(t.key_off(s)) == 0)
}

/// Moves the entry of slot `src` to free slot `dst`: the copy first, then the original goes.
fn relocate(pm: &Pm, t: &Table, src: u64, dst: u64) {
    let (k, v) = t.read(pm, src);
    put(pm, t, dst, k, v);
    // The copy is durable before the original goes (they are in different lines).
    pm.fence();
    clear(pm, t, src);
}

/// One-step movement in the level of capacity `cap`: frees a slot in bucket `b` by moving one
/// of its (published) entries to that entry's other bucket. Returns the freed slot.
fn one_step(pm: &Pm, t: &Table, cap: u64, b: u64) -> Option<u64> {
    for s in Table::slot_of(b)..Table::slot_of(b + 1) {
        let (k, v) = t.read(pm, s);
        if k == 0 || v & PENDING != 0 {
            continue;
        }
        let [b1, b2] = Table::buckets_in(k, cap);
        let alt = if b == b1 { b2 } else { b1 };
        if let Some(d) = free_slot(pm, t, alt) {
            relocate(pm, t, s, d);
            return Some(s);
        }
    }
    None
}

/// Places (`k`, `v`) in the levels `caps` (in order): a free candidate slot, else one-step
/// movement. The caller holds the mutex and the seqlock for movements.
fn place(pm: &Pm, t: &Table, caps: &[u64], k: u64, v: u64, moved: &AtomicU64) -> Option<u64> {
    for &cap in caps {
        for b in Table::buckets_in(k, cap) {
            if let Some(s) = free_slot(pm, t, b) {
                put(pm, t, s, k, v);
                return Some(s);
            }
        }
    }
    for &cap in caps {
        for b in Table::buckets_in(k, cap) {
            if let Some(s) = one_step(pm, t, cap, b) {
                moved.fetch_add(1, Ordering::Relaxed);
                put(pm, t, s, k, v);
                return Some(s);
            }
        }
    }
    None
}

/// Moves every entry of the draining level into the new top level (or, if both of its
/// buckets there are full even after one-step movement, into the new bottom level); then
/// ends the resize with one header store. Entries `skip` says to leave stay, and so does the
/// resize. Returns true if the resize ended. Also recovery's way to finish a resize.
fn drain(pm: &Pm, t: &Table, lv: Levels, skip: &dyn Fn(u64, u64) -> bool, stats: &Stats) -> bool {
    let Some(old) = lv.draining else {
        return true;
    };
    let mut done = true;
    for b in old..2 * old {
        for s in Table::slot_of(b)..Table::slot_of(b + 1) {
            let (k, v) = t.read(pm, s);
            if k == 0 {
                continue;
            }
            if skip(k, v) {
                done = false;
                continue;
            }
            // A crash between a move's copy and its clear left the copy: drop the original.
            let copy = [lv.top, lv.bottom]
                .into_iter()
                .flat_map(|cap| Table::buckets_in(k, cap))
                .flat_map(|b| Table::slot_of(b)..Table::slot_of(b + 1))
                .find(|&c| t.read(pm, c) == (k, v));
            if copy.is_some() {
                clear(pm, t, s);
                continue;
            }
            match place(pm, t, &[lv.top, lv.bottom], k, v, &stats.moved) {
                Some(_) => {
                    pm.fence();
                    clear(pm, t, s);
                    stats.rehashed.fetch_add(1, Ordering::Relaxed);
                }
                None => done = false,
            }
        }
    }
    if done {
        pm.fence();
        pm.store_u64(t.header_off(), Table::header_word(lv.top, false));
        pm.persist(t.header_off(), 8);
        pm.fence();
    }
    done
}

impl Level {
    pub fn new(geo: &Geometry, alloc: BlockAlloc) -> Level {
        Level {
            t: Table::of(geo),
            base: Base::new(geo, alloc),
            lock: Mutex::new(()),
            pins: Mutex::new(hashbrown::HashSet::new()),
            seq: AtomicU64::new(0),
            stats: Stats::default(),
        }
    }

    /// A lookup-only view.
    pub fn view(geo: &Geometry) -> Level {
        Self::new(geo, BlockAlloc::empty(geo))
    }

    pub fn table(&self) -> Table {
        self.t
    }

    /// Resizes since mount.
    pub fn resizes(&self) -> u64 {
        self.stats.resizes.load(Ordering::Relaxed)
    }

    /// The live levels, if the header is intact.
    pub fn levels(&self, pm: &Pm) -> Option<Levels> {
        self.t.levels(pm)
    }

    fn levels_or_err(&self, pm: &Pm) -> io::Result<Levels> {
        self.t.levels(pm).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "level hashing header damaged")
        })
    }

    /// Drains a resize in progress, leaving pinned pending entries. Caller holds the mutex.
    fn try_drain(&self, pm: &Pm, lv: Levels) -> Levels {
        if lv.draining.is_none() {
            return lv;
        }
        let pins = self.pins.lock();
        let _m = Moving::new(&self.seq);
        let done = drain(
            pm,
            &self.t,
            lv,
            &|k, v| v & PENDING != 0 && pins.contains(&k),
            &self.stats,
        );
        if done {
            Levels {
                top: lv.top,
                bottom: lv.top / 2,
                draining: None,
            }
        } else {
            lv
        }
    }

    /// Inserts (`k`, `v`): level hashing's insert, resizing when it finds no slot.
    fn insert(&self, pm: &Pm, k: u64, v: u64) -> io::Result<u64> {
        let mut lv = self.levels_or_err(pm)?;
        loop {
            lv = self.try_drain(pm, lv);
            {
                let _m = Moving::new(&self.seq);
                if let Some(s) = place(pm, &self.t, &[lv.top, lv.bottom], k, v, &self.stats.moved) {
                    return Ok(s);
                }
            }
            if lv.draining.is_some() {
                return Err(enospc("a resize waits for a transaction in flight"));
            }
            if lv.top >= self.t.max_buckets {
                return Err(enospc("no slot at the largest size"));
            }
            // Resize: the new top level (2N) joins; the bottom level drains into it.
            let _m = Moving::new(&self.seq);
            pm.fence();
            pm.store_u64(self.t.header_off(), Table::header_word(lv.top, true));
            pm.persist(self.t.header_off(), 8);
            pm.fence();
            self.stats.resizes.fetch_add(1, Ordering::Relaxed);
            lv = Levels {
                top: lv.top * 2,
                bottom: lv.top,
                draining: Some(lv.bottom),
            };
        }
    }

    /// The slot of claim `c`'s pending entry for (`ino`, `lblk`), if it is still pending.
    fn pending_slot(&self, pm: &Pm, c: Claim, ino: u32, lblk: u64) -> Option<(u64, u64)> {
        let k = key(ino, lblk);
        let want = c.pblk | PENDING;
        if c.prior < self.t.region_buckets() * SLOTS_PER_BUCKET
            && self.t.read(pm, c.prior) == (k, want)
        {
            return Some((c.prior, want));
        }
        let lv = self.t.levels(pm)?;
        self.t.find(pm, &lv, k).filter(|&(_, w)| w == want)
    }

    fn goal(&self, pm: &Pm, ino: u32, lblk: u64) -> u64 {
        if let Some(g) = self.base.hinted_goal(ino, lblk) {
            return g;
        }
        lblk.checked_sub(1)
            .and_then(|p| self.t.translate(pm, ino, p))
            .map_or(self.t.ext_blocks, |p| p + 1)
    }

    /// The published entries of `ino` in [from, to): (slot, lblk, pblk).
    fn entries_in(&self, pm: &Pm, lv: &Levels, ino: u32, from: u64, to: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if to - from <= self.t.max_buckets / 8 {
            for l in from..to {
                if let Some((s, w)) = self.t.find(pm, lv, key(ino, l)) {
                    if w & PENDING == 0 {
                        out.push((s, w & PBLK_MASK));
                    }
                }
            }
        } else {
            for cap in lv.all() {
                for s in Table::slot_of(cap)..Table::slot_of(2 * cap) {
                    let (k, w) = self.t.read(pm, s);
                    let (i, l) = split_key(k);
                    if k != 0 && i == ino && (from..to).contains(&l) && w & PENDING == 0 {
                        out.push((s, w & PBLK_MASK));
                    }
                }
            }
        }
        out
    }
}

impl FileMap for Level {
    fn kind(&self) -> MappingKind {
        MappingKind::Level
    }

    fn lookup(&self, pm: &Pm, ino: u32, lblk: u32) -> Option<u64> {
        if ino == 0 || (ino as u64) >= self.base.geo.inode_count {
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

    /// Allocates the block and inserts its entry, pending.
    fn claim(&self, pm: &Pm, _journal: &Journal, ino: u32, lblk: u32) -> io::Result<Claim> {
        let l = lblk as u64;
        let _g = self.lock.lock();
        let pblk = self.base.alloc.alloc(pm, self.goal(pm, ino, l))?;
        match self.insert(pm, key(ino, l), pblk | PENDING) {
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
        let mut pins = self.pins.lock();
        pins.remove(&key(ino, lblk as u64));
        if let Some((s, _)) = self.pending_slot(pm, c, ino, lblk as u64) {
            let m = Moving::new(&self.seq);
            clear(pm, &self.t, s);
            drop(m);
            drop(pins);
            pm.fence();
            self.base.alloc.release(pm, c.pblk);
        }
    }

    /// One staged word: the pending bit off. The pin keeps the resize drain off the slot
    /// until the caller has committed.
    fn publish_in(&self, tx: &mut Tx<'_>, c: Claim, ino: u32, lblk: u32) {
        let l = lblk as u64;
        let mut pins = self.pins.lock();
        if let Some((s, _)) = self.pending_slot(tx.pm(), c, ino, l) {
            pins.insert(key(ino, l));
            tx.write_u64(self.t.val_off(s), c.pblk);
        }
    }

    fn publish(&self, pm: &Pm, _journal: &Journal, c: Claim, ino: u32, lblk: u32) {
        let l = lblk as u64;
        let _g = self.lock.lock();
        let _p = self.pins.lock();
        if let Some((s, _)) = self.pending_slot(pm, c, ino, l) {
            pm.store_u64(self.t.val_off(s), c.pblk);
            pm.persist(self.t.val_off(s), 8);
        }
    }

    fn unmap_range(
        &self,
        pm: &Pm,
        _journal: &Journal,
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
            let lv = self.levels_or_err(pm)?;
            let found = self.entries_in(pm, &lv, ino, from, to);
            let mut pins = self.pins.lock();
            // Pins of published entries are spent; drop those of this range (and, now and
            // then, every spent one).
            if !pins.is_empty() {
                let t = &self.t;
                pins.retain(|&k| {
                    let (i, l) = split_key(k);
                    let gone = i == ino && (from..to).contains(&l);
                    !gone && t.find(pm, &lv, k).is_some_and(|(_, w)| w & PENDING != 0)
                });
            }
            drop(pins);
            let _m = Moving::new(&self.seq);
            for (s, p) in found {
                clear(pm, &self.t, s);
                freed.push(p);
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

/// Every entry of the table, checked (fsck, recovery, `info`): per-inode data-block counts
/// and the used-block flags (the table's own blocks included). `on_bad` hears of a damaged
/// header, damaged entries, entries outside their buckets or outside the live levels,
/// duplicate keys and blocks mapped twice. A key in two slots with one value (a move a crash
/// interrupted) is reported to `on_map` as pending: recovery folds it.
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
    let h = pm.load_u64(t.header_off());
    let Some(lv) = t.decode(h) else {
        on_bad(
            0,
            corrupted(
                format!("level hashing header {h:#x} damaged"),
                t.header_off(),
            ),
        );
        return c;
    };
    let live = |b: u64| lv.all().any(|cap| cap == Table::level_of_bucket(b));
    let mut seen: hashbrown::HashMap<u64, u64> = hashbrown::HashMap::new();
    for b in 1..t.region_buckets() {
        for s in Table::slot_of(b)..Table::slot_of(b + 1) {
            let (k, w) = t.read(pm, s);
            if k == 0 {
                continue;
            }
            let off = t.key_off(s);
            let (ino, lblk) = split_key(k);
            let mut bad = |what: String| {
                on_bad(ino, corrupted(format!("level slot {s}: {what}"), off));
            };
            if !live(b) {
                bad(format!("entry {k:#x} outside the live levels"));
                continue;
            }
            if ino == 0 || ino as u64 >= geo.inode_count {
                bad(format!("inode {ino} out of range"));
                continue;
            }
            if !Table::buckets_in(k, Table::level_of_bucket(b)).contains(&b) {
                bad(format!("key {k:#x} is in neither of its buckets"));
                continue;
            }
            let p = w & PBLK_MASK;
            if w & !(PBLK_MASK | PENDING) != 0 {
                bad(format!("bad value word {w:#x}"));
                continue;
            }
            if p < t.ext_blocks || p >= geo.data_blocks {
                bad(format!("block {p} outside the data blocks"));
                continue;
            }
            let pending = w & PENDING != 0;
            match seen.insert(k, w) {
                Some(first) if first == w => {
                    // A move in flight: the copy is counted once.
                    on_map(
                        ino,
                        Reach::Data {
                            lblk,
                            pblk: p,
                            pending: true,
                        },
                    );
                    continue;
                }
                Some(_) => {
                    bad(format!("key {k:#x} in two slots"));
                    continue;
                }
                None => {}
            }
            if std::mem::replace(&mut c.used[p as usize], true) {
                on_bad(
                    ino,
                    corrupted(format!("block {p} owned twice"), geo.data_off(p)),
                );
                continue;
            }
            if !pending {
                c.counts[ino as usize] += 1;
            }
            on_map(
                ino,
                Reach::Data {
                    lblk,
                    pblk: p,
                    pending,
                },
            );
        }
    }
    c
}

/// Mount recovery. After an unclean shutdown: folds keys left twice by an interrupted move,
/// drops pending entries (claims never published), entries of free inodes and mappings past
/// what each inode may map, finishes an interrupted resize, then rebuilds the bitmap from the
/// table and fixes block counts. Returns the allocator.
pub fn recover(
    pm: &Pm,
    geo: &Geometry,
    unclean: bool,
    report: &mut RecoveryReport,
) -> Result<BlockAlloc, Corrupted> {
    let t = Table::of(geo);
    let Some(lv) = t.levels(pm) else {
        return Err(corrupted(
            "level hashing header damaged".to_string(),
            t.header_off(),
        ));
    };
    if unclean {
        let mut seen = hashbrown::HashMap::new();
        for cap in lv.all() {
            for s in Table::slot_of(cap)..Table::slot_of(2 * cap) {
                let (k, w) = t.read(pm, s);
                if k == 0 {
                    if w != 0 {
                        // A rolled-back publish on a slot the drain had already emptied.
                        clear(pm, &t, s);
                    }
                    continue;
                }
                if seen.get(&k) == Some(&w) {
                    clear(pm, &t, s);
                    continue;
                }
                seen.insert(k, w);
                report.stray_blocks_freed += trim_slot(pm, geo, &t, s);
            }
        }
        drain(pm, &t, lv, &|_, _| false, &Stats::default());
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

/// Recovery of one slot: clears a pending entry, one of a free inode or one past the inode's
/// end; returns the blocks dropped. Damaged entries are left for the census.
fn trim_slot(pm: &Pm, geo: &Geometry, t: &Table, s: u64) -> u64 {
    let (k, w) = t.read(pm, s);
    let (ino, lblk) = split_key(k);
    if ino == 0 || ino as u64 >= geo.inode_count {
        return 0;
    }
    let i = Inode::decode_raw(&pm.read_array::<{ INODE_SIZE as usize }>(geo.inode_off(ino as u64)));
    if w & PENDING != 0 || i.is_free() || lblk >= allowed_blocks(&i) {
        clear(pm, t, s);
        return 1;
    }
    0
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
        map: Level,
        model: BTreeMap<(u32, u64), u64>,
    }

    fn rig() -> Rig {
        let geo = Geometry::compute(BLOCKS, Some(64)).unwrap();
        check_fits(&geo).unwrap();
        let pm = Pm::in_memory(BLOCKS * BLOCK_SIZE);
        format(&pm, &geo);
        let alloc = BlockAlloc::load(&pm, &geo);
        Rig {
            journal: Journal::new(&geo),
            map: Level::new(&geo, alloc),
            pm,
            geo,
            model: BTreeMap::new(),
        }
    }

    impl Rig {
        fn map(&mut self, ino: u32, lblk: u64) -> u64 {
            self.map.reserve(1).unwrap();
            let c = self
                .map
                .claim(&self.pm, &self.journal, ino, lblk as u32)
                .unwrap();
            self.map
                .publish(&self.pm, &self.journal, c, ino, lblk as u32);
            self.model.insert((ino, lblk), c.pblk);
            c.pblk
        }

        fn unmap(&mut self, ino: u32, from: u64, to: u64) {
            let n = self
                .map
                .unmap_range(&self.pm, &self.journal, ino, from, to)
                .unwrap();
            let gone: Vec<_> = self
                .model
                .range((ino, from)..(ino, to))
                .map(|(&k, _)| k)
                .collect();
            assert_eq!(n, gone.len() as u64, "unmapped count for [{from}, {to})");
            for k in gone {
                self.model.remove(&k);
            }
        }

        fn check(&self) {
            for (&(ino, l), &p) in &self.model {
                assert_eq!(
                    self.map.lookup(&self.pm, ino, l as u32),
                    Some(p),
                    "{ino}:{l}"
                );
            }
            let mut mapped = BTreeMap::new();
            let c = census(
                &self.pm,
                &self.geo,
                &mut |_, e| panic!("table damaged: {e}"),
                &mut |ino, r| {
                    if let Reach::Data {
                        lblk,
                        pblk,
                        pending,
                    } = r
                    {
                        assert!(!pending);
                        mapped.insert((ino, lblk), pblk);
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

        fn top(&self) -> u64 {
            self.map.levels(&self.pm).unwrap().top
        }
    }

    #[test]
    fn levels_live_at_their_capacity() {
        let t = Table::of(&Geometry::compute(BLOCKS, Some(64)).unwrap());
        assert!(t.max_buckets.is_power_of_two());
        assert!(t.max_buckets * 6 >= BLOCKS + BLOCKS / 4);
        for cap in [4u64, 64, 1024] {
            for k in [1u64 << 32, key(7, 99), key(u32::MAX, 1 << 31)] {
                let [a, b] = Table::buckets_in(k, cap);
                assert!((cap..cap + cap / 2).contains(&a), "{a} in first half");
                assert!((cap + cap / 2..2 * cap).contains(&b), "{b} in second half");
                assert_eq!(Table::level_of_bucket(a), cap);
                assert_eq!(Table::level_of_bucket(b), cap);
            }
        }
        // The old top level is the new bottom level in place: same buckets for every key.
        let h = Table::header_word(64, false);
        assert_eq!(t.decode(h).unwrap().bottom, 32);
        let r = t.decode(Table::header_word(64, true)).unwrap();
        assert_eq!((r.top, r.bottom, r.draining), (128, 64, Some(32)));
        assert_eq!(t.decode(h | 1 << 40), None);
        assert_eq!(t.decode(0), None);
    }

    #[test]
    fn grows_by_resizing_and_keeps_every_entry() {
        let mut r = rig();
        assert_eq!(r.top(), r.map.table().start_buckets);
        let free = r.geo.data_blocks - r.map.table().ext_blocks;
        // Many files, one entry per block, to 90% of the data blocks.
        let n = free * 9 / 10;
        for i in 0..n {
            r.map(1 + (i % 40) as u32, i / 40 * 3);
        }
        r.check();
        assert_eq!(r.top(), r.map.table().max_buckets);
        let grow = (r.map.table().max_buckets / r.map.table().start_buckets).trailing_zeros();
        assert_eq!(r.map.resizes(), grow as u64);
        assert!(r.map.stats.rehashed.load(Ordering::Relaxed) > 0);
        for ino in 1..=40 {
            r.unmap(ino, 0, u64::MAX);
        }
        r.check();
        assert_eq!(r.map.used_blocks(), 0);
    }

    #[test]
    fn punches_truncates_and_sparse_offsets() {
        let mut r = rig();
        for l in 0..300 {
            r.map(INO, l);
        }
        let first = r.model[&(INO, 0)];
        assert_eq!(r.model[&(INO, 299)], first + 299, "contiguous allocation");
        r.unmap(INO, 10, 20);
        r.check();
        r.unmap(INO, 250, u64::MAX);
        r.check();
        for l in [1u64 << 20, (1 << 32) - 1] {
            r.map(INO, l);
        }
        r.check();
        r.unmap(INO, 1 << 19, 1 << 32);
        r.check();
        assert_eq!(r.map.lookup(&r.pm, INO, 300), None);
        assert_eq!(r.map.lookup(&r.pm, INO + 1, 0), None);
    }

    #[test]
    fn abandon_publish_in_and_recovery() {
        let mut r = rig();
        for l in 0..40 {
            r.map(INO, l);
        }
        r.map.reserve(3).unwrap();
        let cs: Vec<_> = (40..43)
            .map(|l| (r.map.claim(&r.pm, &r.journal, INO, l).unwrap(), l))
            .collect();
        for &(_, l) in &cs {
            assert_eq!(r.map.lookup(&r.pm, INO, l), None, "pending is invisible");
        }
        for (c, l) in cs.into_iter().rev() {
            r.map.abandon(&r.pm, &r.journal, c, INO, l);
        }
        r.check();
        r.map.reserve(2).unwrap();
        let a = r.map.claim(&r.pm, &r.journal, INO, 50).unwrap();
        let b = r.map.claim(&r.pm, &r.journal, INO, 51).unwrap();
        let mut tx = r.journal.begin(&r.pm);
        r.map.publish_in(&mut tx, a, INO, 50);
        assert_eq!(r.map.lookup(&r.pm, INO, 50), None, "staged, not committed");
        tx.commit();
        r.model.insert((INO, 50), a.pblk);
        r.check_but_pending(1);
        let _ = b;
        // Inode INO is free on this image: recovery drops all its entries and the claim.
        let al = recover(&r.pm, &r.geo, true, &mut RecoveryReport::default()).unwrap();
        r.model.clear();
        r.map = Level::new(&r.geo, al);
        r.check();
    }

    impl Rig {
        /// `check` on a table with `n` pending claims (census sees them, lookups do not).
        fn check_but_pending(&self, n: u64) {
            let mut pending = 0;
            census(
                &self.pm,
                &self.geo,
                &mut |_, e| panic!("{e}"),
                &mut |_, r| {
                    if let Reach::Data { pending: true, .. } = r {
                        pending += 1;
                    }
                },
            );
            assert_eq!(pending, n);
            for (&(ino, l), &p) in &self.model {
                assert_eq!(self.map.lookup(&self.pm, ino, l as u32), Some(p));
            }
        }
    }

    /// A pending entry a transaction has a staged write to stays in the draining level until
    /// the transaction commits; the resize then finishes and the entry is found.
    #[test]
    fn pinned_entry_holds_the_drain_until_committed() {
        let mut r = rig();
        let start = r.top();
        // Fill until the first resize is due, keeping one claim pending and pinned in the
        // bottom level.
        let mut pinned = None;
        let mut i = 0u64;
        while r.top() == start && r.map.levels(&r.pm).unwrap().draining.is_none() {
            let (ino, l) = (1 + (i % 30) as u32, i / 30);
            i += 1;
            r.map.reserve(1).unwrap();
            let c = r.map.claim(&r.pm, &r.journal, ino, l as u32).unwrap();
            let in_bottom = Table::level_of_bucket(c.prior / SLOTS_PER_BUCKET) == start / 2;
            if pinned.is_none() && in_bottom {
                let mut tx = r.journal.begin(&r.pm);
                r.map.publish_in(&mut tx, c, ino, l as u32);
                pinned = Some((tx, c, ino, l));
                continue;
            }
            r.map.publish(&r.pm, &r.journal, c, ino, l as u32);
            r.model.insert((ino, l), c.pblk);
        }
        let (tx, c, ino, l) = pinned.expect("a claim landed in the bottom level");
        let lv = r.map.levels(&r.pm).unwrap();
        assert_eq!(
            lv.draining,
            Some(start / 2),
            "drain waits for the pinned entry"
        );
        let s = r.map.pending_slot(&r.pm, c, ino, l).unwrap().0;
        assert_eq!(Table::level_of_bucket(s / SLOTS_PER_BUCKET), start / 2);
        tx.commit();
        r.model.insert((ino, l), c.pblk);
        assert_eq!(r.map.lookup(&r.pm, ino, l as u32), Some(c.pblk));
        // The next change drains the rest and ends the resize.
        r.map(31, 0);
        let lv = r.map.levels(&r.pm).unwrap();
        assert_eq!((lv.top, lv.draining), (start * 2, None));
        r.check();
    }

    /// Crash states of a move: the key in both slots (one value) is folded by recovery; a
    /// resize interrupted after its header store is finished by recovery.
    #[test]
    fn recovery_folds_moves_and_finishes_resizes() {
        let mut r = rig();
        // Keep inode INO in use so recovery keeps its mappings.
        let i = Inode {
            mode: libc::S_IFREG | 0o644,
            nlink: 1,
            size: 1 << 30,
            ..Inode::default()
        };
        r.pm.write(r.geo.inode_off(INO as u64), &i.encode());
        for l in 0..100 {
            r.map(INO, l * 7);
        }
        let t = r.map.table();
        let lv = r.map.levels(&r.pm).unwrap();
        // A copy of an entry in a free slot of its other bucket, as a crash mid-move leaves.
        let k = key(INO, 7);
        let (s, w) = t.find(&r.pm, &lv, k).unwrap();
        let cap = Table::level_of_bucket(s / SLOTS_PER_BUCKET);
        let other = Table::buckets_in(k, cap)
            .into_iter()
            .find(|&b| b != s / SLOTS_PER_BUCKET)
            .unwrap();
        let d = free_slot(&r.pm, &t, other).expect("a free slot");
        put(&r.pm, &t, d, k, w);
        // And a resize that stored its header and moved nothing yet.
        r.pm.store_u64(t.header_off(), Table::header_word(lv.top, true));
        let mut pending = 0;
        census(&r.pm, &r.geo, &mut |_, e| panic!("{e}"), &mut |_, x| {
            if let Reach::Data { pending: true, .. } = x {
                pending += 1;
            }
        });
        assert_eq!(pending, 1, "the copy is a move in flight");
        let al = recover(&r.pm, &r.geo, true, &mut RecoveryReport::default()).unwrap();
        r.map = Level::new(&r.geo, al);
        let lv2 = r.map.levels(&r.pm).unwrap();
        assert_eq!((lv2.top, lv2.draining), (lv.top * 2, None));
        r.check();
    }

    #[test]
    fn full_table_is_enospc() {
        let r = rig();
        let t = r.map.table();
        // Header at the largest size; both candidate buckets of the new key (and every
        // bucket their entries could move to) full of pending entries, which never move.
        r.pm.store_u64(t.header_off(), Table::header_word(t.max_buckets, false));
        let k = key(INO, 0);
        let mut n = 0u64;
        for cap in [t.max_buckets, t.max_buckets / 2] {
            for b in Table::buckets_in(k, cap) {
                for s in Table::slot_of(b)..Table::slot_of(b + 1) {
                    put(&r.pm, &t, s, key(60, n), t.ext_blocks | PENDING);
                    n += 1;
                }
            }
        }
        let used = r.map.used_blocks();
        r.map.reserve(1).unwrap();
        let e = r.map.claim(&r.pm, &r.journal, INO, 0).unwrap_err();
        r.map.unreserve(1);
        assert_eq!(crate::fs::errno_of(&e), libc::ENOSPC);
        assert!(e.to_string().contains("level hashing table full"), "{e}");
        assert_eq!(r.map.used_blocks(), used);
    }

    /// Lookups racing inserts, one-step movements and resizes never miss or mistranslate.
    #[test]
    fn lookups_race_resizes() {
        let r = rig();
        let free = r.geo.data_blocks - r.map.table().ext_blocks;
        let per = free * 70 / 100 / 4;
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
        assert!(r.map.resizes() > 0, "no resize happened");
    }
}
