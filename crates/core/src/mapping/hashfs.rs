//! HashFS (Neal et al., FAST'21): one global linear-probing hash table keyed by
//! (inode, logical block). The index of the slot holding a key is the physical data block, so
//! mapping a block and allocating it are one operation: a compare-and-swap on an 8-byte slot.
//!
//! Slot values: 0 free (ends a probe chain), 1 tombstone (free, but chains continue past it),
//! 2 reserved (claimed by an operation in flight; never meant to be durable), and otherwise
//! the key `ino << 32 | lblk` (ino >= 1, so keys are >= 2^32).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use super::{Claim, FileMap, MappingKind};
use crate::journal::{Journal, Tx};
use crate::layout::superblock::Geometry;
use crate::media::Pm;

pub const FREE: u64 = 0;
pub const TOMBSTONE: u64 = 1;
pub const RESERVED: u64 = 2;
/// What an abandoned or rolled-back claim leaves in its slot. Never "free": while the slot
/// was claimed, other keys may have been placed past it, and a free slot would end their
/// probe chains early. A tombstone keeps them reachable (mount compaction turns chain-ending
/// tombstones back into free slots).
const UNDO: u64 = TOMBSTONE;
/// Logical blocks that share a home group (see `home`).
const RUN: u64 = 16;
/// Passes over the table a reserved claim makes before it gives up (see `claim`).
const CLAIM_PASSES: usize = 64;
/// One slot in this many is never allocated. Linear probing's misses (every claim, and
/// every lookup of a block not yet written) run to the next free slot, about
/// 1 / (1 - load)^2 / 2 slots: ~1,250 at 98% full, but the whole table once the last slots
/// go (an image filled by Filebench's webserver log slowed from 3 M to 50 K ops/s, each
/// append scanning for one of the few free slots left). So a full image ends at 98% with
/// ENOSPC; `total_blocks` (what statfs reports) is that share.
const KEPT_FREE_ONE_IN: u64 = 50;

#[inline]
pub fn key(ino: u32, lblk: u32) -> u64 {
    (ino as u64) << 32 | lblk as u64
}

/// Splits a slot value into (ino, lblk); `None` for free, tombstone and reserved slots.
#[inline]
pub fn split_key(v: u64) -> Option<(u32, u32)> {
    (v >> 32 != 0).then_some(((v >> 32) as u32, v as u32))
}

/// splitmix64's finaliser: every key bit affects every hash bit, so the home groups of a
/// file's runs land in unrelated places and the table stays evenly loaded.
#[inline]
pub(crate) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

pub struct HashFs {
    table_off: u64,
    slots: u64,
    /// Slots that may be in use at once (`KEPT_FREE_ONE_IN`).
    usable: u64,
    used: UsedCount,
}

/// The number of slots in use (keys and claims in flight): this mount's own counter, or a
/// word in memory shared by every process attached to the image (`nvmfs::shared`), so a
/// reservation in one process sees the blocks taken by the others. A mount's own counter
/// sits on cache lines of its own: every allocation and free writes it, and the table's
/// bounds, which every block lookup reads, must not share its line.
pub enum UsedCount {
    Own(CachePadded<AtomicU64>),
    Shared(SharedWord),
}

/// An `AtomicU64` in a shared mapping, kept alive by `_keep`.
pub struct SharedWord {
    ptr: std::ptr::NonNull<AtomicU64>,
    _keep: std::sync::Arc<dyn Send + Sync>,
}

// SAFETY: the word is an atomic in a mapping that `_keep` holds for the word's life.
unsafe impl Send for SharedWord {}
// SAFETY: as above; only atomic operations reach it.
unsafe impl Sync for SharedWord {}

impl SharedWord {
    /// # Safety
    /// `ptr` must be 8-byte aligned and stay mapped, readable and writable as long as `keep`
    /// lives; every access to it must be atomic.
    pub unsafe fn new(ptr: *mut u64, keep: std::sync::Arc<dyn Send + Sync>) -> SharedWord {
        SharedWord {
            ptr: std::ptr::NonNull::new(ptr.cast()).expect("non-null shared word"),
            _keep: keep,
        }
    }
}

impl std::ops::Deref for UsedCount {
    type Target = AtomicU64;
    fn deref(&self) -> &AtomicU64 {
        match self {
            UsedCount::Own(a) => a,
            // SAFETY: see SharedWord::new.
            UsedCount::Shared(w) => unsafe { w.ptr.as_ref() },
        }
    }
}

impl HashFs {
    /// A table over the geometry's data region; `used` is counted by the mount-time scan.
    pub fn new(geo: &Geometry, used: u64) -> HashFs {
        Self::with_count(geo, UsedCount::Own(CachePadded::new(AtomicU64::new(used))))
    }

    /// A table whose used-slot count lives in `used` (shared mounts).
    pub fn with_count(geo: &Geometry, used: UsedCount) -> HashFs {
        HashFs {
            table_off: geo.slot_off(0),
            slots: geo.data_blocks,
            usable: geo.data_blocks - geo.data_blocks / KEPT_FREE_ONE_IN,
            used,
        }
    }

    /// The slot where probing for key `k` starts. The 16 logical blocks of an aligned run of
    /// a file hash to one group of 16 slots, in order, so sequential I/O meets consecutive
    /// data blocks (64 KiB runs the hardware prefetcher can follow) while every lookup is
    /// still one hash and one probe sequence.
    #[inline]
    pub fn home(&self, k: u64) -> u64 {
        let groups = self.slots / RUN;
        if groups == 0 {
            return ((mix(k) as u128 * self.slots as u128) >> 64) as u64;
        }
        // Multiply-shift range reduction instead of a division.
        let group = ((mix(k & !(RUN - 1)) as u128 * groups as u128) >> 64) as u64;
        group * RUN + (k & (RUN - 1))
    }

    #[inline]
    pub fn slot_off(&self, slot: u64) -> u64 {
        self.table_off + slot * 8
    }

    #[inline]
    fn next(&self, slot: u64) -> u64 {
        if slot + 1 == self.slots {
            0
        } else {
            slot + 1
        }
    }

    /// Distance from a key's home slot to `slot` (probe length - 1).
    pub fn probe_distance(&self, k: u64, slot: u64) -> u64 {
        let h = self.home(k);
        if slot >= h {
            slot - h
        } else {
            slot + self.slots - h
        }
    }
}

impl FileMap for HashFs {
    fn kind(&self) -> MappingKind {
        MappingKind::HashFs
    }

    #[inline]
    fn lookup(&self, pm: &Pm, ino: u32, lblk: u32) -> Option<u64> {
        let k = key(ino, lblk);
        let mut slot = self.home(k);
        // At most one pass over the table: a full table has no free slot to stop at.
        for _ in 0..self.slots {
            match pm.load_u64(self.slot_off(slot)) {
                FREE => return None,
                v if v == k => return Some(slot),
                _ => slot = self.next(slot),
            }
        }
        None
    }

    #[inline]
    fn still_maps(&self, pm: &Pm, pblk: u64, ino: u32, lblk: u32) -> bool {
        pblk < self.slots && pm.load_u64(self.slot_off(pblk)) == key(ino, lblk)
    }

    #[inline]
    fn prefetch(&self, pm: &Pm, ino: u32, lblk: u32) {
        pm.prefetch(self.slot_off(self.home(key(ino, lblk))));
    }

    fn reserve(&self, count: u64) -> io::Result<()> {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let new = cur.checked_add(count).filter(|n| *n <= self.usable);
            let Some(new) = new else {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            };
            match self
                .used
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    fn unreserve(&self, count: u64) {
        self.used.fetch_sub(count, Ordering::AcqRel);
    }

    fn claim(&self, pm: &Pm, _journal: &Journal, ino: u32, lblk: u32) -> io::Result<Claim> {
        // A reservation guarantees a free slot at every moment, not one ahead of this scan: in
        // a nearly full table (a tiered image keeps PM full) the free slots ahead may be
        // taken by other reserved claims while slots behind the scan are freed. So a pass
        // that finds none starts again.
        for _ in 0..CLAIM_PASSES {
            let mut slot = self.home(key(ino, lblk));
            for _ in 0..self.slots {
                let off = self.slot_off(slot);
                let v = pm.load_u64(off);
                if (v == FREE || v == TOMBSTONE) && pm.cas_u64(off, v, RESERVED).is_ok() {
                    return Ok(Claim {
                        pblk: slot,
                        prior: v,
                    });
                }
                slot = self.next(slot);
            }
        }
        // Every pass found the table full: the count is wrong.
        Err(io::Error::other("hash table full despite a reservation"))
    }

    fn abandon(&self, pm: &Pm, _journal: &Journal, claim: Claim, _ino: u32, _lblk: u32) {
        pm.store_u64(self.slot_off(claim.pblk), UNDO);
        self.unreserve(1);
    }

    fn publish_in(&self, tx: &mut Tx<'_>, claim: Claim, ino: u32, lblk: u32) {
        // The slot holds RESERVED now; the undo value is what an abandoned claim leaves.
        let off = self.slot_off(claim.pblk);
        tx.write_with_old(off, &UNDO.to_le_bytes(), &key(ino, lblk).to_le_bytes());
    }

    fn publish(&self, pm: &Pm, _journal: &Journal, claim: Claim, ino: u32, lblk: u32) {
        let off = self.slot_off(claim.pblk);
        pm.store_u64(off, key(ino, lblk));
        pm.persist(off, 8);
    }

    fn unmap_range(
        &self,
        pm: &Pm,
        _journal: &Journal,
        ino: u32,
        from: u64,
        to: u64,
    ) -> io::Result<u64> {
        let mut freed = 0;
        let mut unmap = |pblk: u64| {
            let off = self.slot_off(pblk);
            pm.store_u64(off, TOMBSTONE);
            pm.persist(off, 8);
            freed += 1;
        };
        // For a large range one pass over the table beats a probe per logical block: probes
        // for holes are misses, and a miss walks to the next free slot, which in a nearly
        // full (or tombstone-heavy) table can be far away.
        if to.saturating_sub(from) > self.slots / 32 {
            for s in 0..self.slots {
                if let Some((i, l)) = split_key(pm.load_u64(self.slot_off(s))) {
                    if i == ino && (l as u64) >= from && (l as u64) < to {
                        unmap(s);
                    }
                }
            }
        } else {
            for lblk in from..to.min(1 << 32) {
                if let Some(p) = self.lookup(pm, ino, lblk as u32) {
                    unmap(p);
                }
            }
        }
        Ok(freed)
    }

    /// Probes only [0, `allowed`): the table holds nothing else for `ino`, and a probe per
    /// block beats a pass over the whole table for a small file.
    fn unmap_all(&self, pm: &Pm, journal: &Journal, ino: u32, allowed: u64) -> io::Result<u64> {
        self.unmap_range(pm, journal, ino, 0, allowed)
    }

    fn freed(&self, count: u64) {
        self.used.fetch_sub(count, Ordering::AcqRel);
    }

    fn used_blocks(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn set_used(&self, used: u64) {
        self.used.store(used, Ordering::Release);
    }

    fn total_blocks(&self) -> u64 {
        self.usable
    }
}

/// Turns every tombstone that ends a chain (followed by a free slot) into a free slot, so
/// misses stop early. Single-threaded: runs at mount, before any operation.
pub fn compact_tombstones(pm: &Pm, geo: &Geometry) -> u64 {
    let n = geo.data_blocks;
    let off = |s: u64| geo.slot_off(s);
    // Start just before a free slot and walk backwards around the ring once.
    let Some(start) = (0..n).find(|&s| pm.load_u64(off(s)) == FREE) else {
        return 0;
    };
    let mut converted = 0;
    let mut next_free = true;
    let mut s = start;
    for _ in 0..n {
        s = if s == 0 { n - 1 } else { s - 1 };
        let v = pm.load_u64(off(s));
        if v == TOMBSTONE && next_free {
            pm.store_u64(off(s), FREE);
            pm.persist(off(s), 8);
            converted += 1;
            continue;
        }
        next_free = v == FREE;
    }
    pm.fence();
    converted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::BLOCK_SIZE;

    fn setup(blocks: u64) -> (Pm, Geometry, HashFs) {
        let geo = Geometry::compute(blocks, Some(64)).unwrap();
        let pm = Pm::in_memory(blocks * BLOCK_SIZE);
        let h = HashFs::new(&geo, 0);
        (pm, geo, h)
    }

    fn map(h: &HashFs, pm: &Pm, ino: u32, lblk: u32) -> u64 {
        let geo = Geometry::compute(pm.len() / BLOCK_SIZE, Some(64)).unwrap();
        let j = Journal::new(&geo);
        h.reserve(1).unwrap();
        let c = h.claim(pm, &j, ino, lblk).unwrap();
        h.publish(pm, &j, c, ino, lblk);
        c.pblk
    }

    #[test]
    fn map_lookup_unmap() {
        let (pm, _geo, h) = setup(200);
        let mut placed = std::collections::HashMap::new();
        for lblk in 0..50 {
            let p = map(&h, &pm, 3, lblk);
            assert!(placed.insert(p, lblk).is_none(), "block handed out twice");
        }
        for (&p, &lblk) in &placed {
            assert_eq!(h.lookup(&pm, 3, lblk), Some(p));
        }
        assert_eq!(h.lookup(&pm, 4, 0), None);
        let j = Journal::new(&_geo);
        assert_eq!(h.unmap_range(&pm, &j, 3, 10, 11).unwrap(), 1);
        h.freed(1);
        assert_eq!(h.lookup(&pm, 3, 10), None);
        // Chains through the tombstone still resolve.
        for (&p, &lblk) in placed.iter().filter(|(_, &l)| l != 10) {
            assert_eq!(h.lookup(&pm, 3, lblk), Some(p));
        }
        assert_eq!(h.used_blocks(), 49);
    }

    #[test]
    fn a_table_fills_to_its_usable_share_then_gives_enospc() {
        let (pm, geo, h) = setup(1000);
        let usable = geo.data_blocks - geo.data_blocks / KEPT_FREE_ONE_IN;
        assert!(usable < geo.data_blocks);
        assert_eq!(h.total_blocks(), usable);
        let mut seen = vec![false; geo.data_blocks as usize];
        for lblk in 0..usable as u32 {
            let p = map(&h, &pm, 1, lblk);
            assert!(!seen[p as usize]);
            seen[p as usize] = true;
        }
        assert_eq!(h.reserve(1).unwrap_err().raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(h.used_blocks(), usable);
        for lblk in 0..usable as u32 {
            assert!(h.lookup(&pm, 1, lblk).is_some());
        }
        assert_eq!(h.lookup(&pm, 2, 0), None);
        // A block freed is a block to allocate again.
        h.freed(1);
        h.reserve(1).unwrap();
    }

    #[test]
    fn compaction_keeps_every_mapping() {
        let (pm, geo, h) = setup(300);
        for lblk in 0..200 {
            map(&h, &pm, 7, lblk);
        }
        for lblk in (0..200).step_by(3) {
            let p = h.lookup(&pm, 7, lblk).unwrap();
            pm.store_u64(geo.slot_off(p), TOMBSTONE);
        }
        compact_tombstones(&pm, &geo);
        for lblk in 0..200 {
            assert_eq!(
                h.lookup(&pm, 7, lblk).is_some(),
                lblk % 3 != 0,
                "lblk {lblk}"
            );
        }
    }
}

#[cfg(test)]
mod race_tests {
    use super::*;
    use crate::layout::BLOCK_SIZE;

    /// A nearly full table whose slots are freed and claimed by several threads at once (a
    /// tiered image keeps PM full and evicts while others write): every claim that holds a
    /// reservation finds a slot, even when the free ones wander over the table as others free
    /// and take them.
    #[test]
    fn reserved_claims_succeed_in_a_churning_full_table() {
        const THREADS: u32 = 4;
        // Each thread holds at most 2 blocks at once, so 16 free slots never run out for good.
        const FREE: u64 = 16;
        // Long scans (a big table, few free slots) make the window wide.
        let geo = Geometry::compute(20_000, Some(64)).unwrap();
        let pm = Pm::in_memory(20_000 * BLOCK_SIZE);
        let h = HashFs::new(&geo, 0);
        let j = Journal::new(&geo);
        let n = geo.data_blocks;
        // Past the share `reserve` allows (as on an image filled by a build without it):
        // claimed directly, and the count then set so that each thread may hold two.
        for lblk in 0..(n - FREE) as u32 {
            let c = h.claim(&pm, &j, 1, lblk).unwrap();
            h.publish(&pm, &j, c, 1, lblk);
        }
        let start = h.usable - 2 * THREADS as u64;
        h.set_used(start);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (h, pm, j) = (&h, &pm, &j);
                s.spawn(move || {
                    let ino = 2 + t;
                    let mut held = None;
                    for lblk in 0..1_000u32 {
                        while h.reserve(1).is_err() {
                            std::thread::yield_now();
                        }
                        let c = h.claim(pm, j, ino, lblk).expect("a reserved claim");
                        h.publish(pm, j, c, ino, lblk);
                        // Free the previous block only now: free slots wander over the table.
                        if let Some(old) = held.replace(lblk as u64) {
                            assert_eq!(h.unmap_range(pm, j, ino, old, old + 1).unwrap(), 1);
                            h.freed(1);
                        }
                    }
                    let old = held.unwrap();
                    assert_eq!(h.unmap_range(pm, j, ino, old, old + 1).unwrap(), 1);
                    h.freed(1);
                });
            }
        });
        assert_eq!(h.used_blocks(), start);
    }
}
