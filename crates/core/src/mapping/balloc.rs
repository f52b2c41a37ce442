//! The block allocator of the tree mappings: a bitmap in PM (bit `b` set = data-region block
//! `b` holds file data or a mapping node) and a volatile index of free extents built from it
//! at mount. HashFS does without one (its table is the allocator); the extent and radix trees
//! of Neal et al. need one, and its cost is part of what the lab compares.
//!
//! Crash consistency. A bit is set (written back, not fenced) when a block is handed out and
//! cleared when a block is released, after the unmapping that freed it is durable. The trees
//! are the truth: after an unclean shutdown, mount rebuilds the bitmap from the blocks the
//! trees reach (`tree::recover`), so a bit set for a block a crash left unreachable (a claim
//! or node that never got linked) is cleared then. On a clean image the bitmap equals the set
//! of reachable blocks exactly (fsck checks it).

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::layout::superblock::Geometry;
use crate::layout::BLOCK_SIZE;
use crate::media::Pm;

/// Byte length of the bitmap of `geo` (whole 8-byte words).
pub fn bitmap_len(geo: &Geometry) -> u64 {
    geo.data_blocks.div_ceil(64) * 8
}

/// Byte offset of the bitmap: the start of the mapping region (FORMAT.md §5).
pub fn bitmap_off(geo: &Geometry) -> u64 {
    geo.hash_start * BLOCK_SIZE
}

/// True if block `b`'s bit is set in the image.
pub fn bit(pm: &Pm, geo: &Geometry, b: u64) -> bool {
    pm.load_u64(bitmap_off(geo) + b / 64 * 8) >> (b % 64) & 1 == 1
}

pub struct BlockAlloc {
    bitmap_off: u64,
    blocks: u64,
    /// Free extents: start -> length, never adjacent (merged on release).
    free: Mutex<BTreeMap<u64, u64>>,
    /// Blocks allocated or reserved.
    used: AtomicU64,
    /// Thousandths of allocations that ignore their goal (1000 - layout score; 0: none).
    scatter_permille: AtomicU64,
    /// xorshift64 state for `scatter_permille` (seeded, so a run is repeatable).
    rng: AtomicU64,
}

impl BlockAlloc {
    /// An allocator over the bitmap of `pm` as it is on media.
    pub fn load(pm: &Pm, geo: &Geometry) -> BlockAlloc {
        let mut free = BTreeMap::new();
        let mut run: Option<(u64, u64)> = None;
        let mut used = 0;
        for b in 0..geo.data_blocks {
            if bit(pm, geo, b) {
                used += 1;
                if let Some((s, l)) = run.take() {
                    free.insert(s, l);
                }
            } else {
                run = Some(run.map_or((b, 1), |(s, l)| (s, l + 1)));
            }
        }
        if let Some((s, l)) = run {
            free.insert(s, l);
        }
        BlockAlloc {
            bitmap_off: bitmap_off(geo),
            blocks: geo.data_blocks,
            free: Mutex::new(free),
            used: AtomicU64::new(used),
            scatter_permille: AtomicU64::new(0),
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
        }
    }

    /// An allocator that allocates nothing (lookup-only views).
    pub fn empty(geo: &Geometry) -> BlockAlloc {
        BlockAlloc {
            bitmap_off: bitmap_off(geo),
            blocks: geo.data_blocks,
            free: Mutex::new(BTreeMap::new()),
            used: AtomicU64::new(geo.data_blocks),
            scatter_permille: AtomicU64::new(0),
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
        }
    }

    /// Aims at a layout score (thousandths): that share of allocations honours its goal,
    /// the rest go to a random free block, so files come out that fragmented (the layout
    /// score of Neal et al.: the share of a file's blocks that follow the previous one).
    /// None: every allocation honours its goal.
    pub fn aim_layout_score(&self, permille: Option<u32>) {
        let scatter = permille.map_or(0, |p| 1000 - p.min(1000) as u64);
        self.scatter_permille.store(scatter, Ordering::Relaxed);
    }

    /// The next pseudo-random number (xorshift64; races only mix the sequence).
    fn random(&self) -> u64 {
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        x
    }

    pub fn total(&self) -> u64 {
        self.blocks
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    pub fn set_used(&self, used: u64) {
        self.used.store(used, Ordering::Release);
    }

    /// Takes `count` blocks off the free count, or fails with ENOSPC.
    pub fn reserve(&self, count: u64) -> io::Result<()> {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let Some(new) = cur.checked_add(count).filter(|n| *n <= self.blocks) else {
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

    pub fn unreserve(&self, count: u64) {
        self.used.fetch_sub(count, Ordering::AcqRel);
    }

    /// Hands out a free block for a reservation already taken, preferring `goal` and then
    /// the first free block after it (so a file growing block by block gets a contiguous run),
    /// and sets its bit (written back, not fenced).
    pub fn alloc(&self, pm: &Pm, goal: u64) -> io::Result<u64> {
        let scatter = self.scatter_permille.load(Ordering::Relaxed);
        let goal = if scatter > 0 && self.random() % 1000 < scatter {
            self.random() % self.blocks
        } else {
            goal
        };
        let mut free = self.free.lock();
        let pick = free
            .range(..=goal)
            .next_back()
            .filter(|(&s, &l)| goal < s + l)
            .map(|_| goal)
            .or_else(|| free.range(goal..).next().map(|(&s, _)| s))
            .or_else(|| free.iter().next().map(|(&s, _)| s));
        // A reservation guarantees a free block; reaching here means the count is wrong.
        let b = pick.ok_or_else(|| io::Error::other("no free block despite a reservation"))?;
        take(&mut free, b);
        self.set_bit(pm, b, true);
        Ok(b)
    }

    /// Reserves and allocates one block (a mapping node).
    pub fn alloc_node(&self, pm: &Pm, goal: u64) -> io::Result<u64> {
        self.reserve(1)?;
        self.alloc(pm, goal).inspect_err(|_| self.unreserve(1))
    }

    /// Gives back a block just allocated by `alloc` but not used, keeping its reservation
    /// (the caller returns that with `unreserve`).
    pub fn unalloc(&self, pm: &Pm, b: u64) {
        self.release(pm, b);
        self.used.fetch_add(1, Ordering::AcqRel);
    }

    /// Returns block `b` to the free pool and clears its bit (written back, not fenced). The
    /// caller has made every pointer to `b` durably gone first. A block outside the data
    /// region or already free is left alone: only damaged media (a tree pointing where the
    /// bitmap says free, which fsck reports) leads here, and that must not panic.
    pub fn release(&self, pm: &Pm, b: u64) {
        if b >= self.blocks {
            return;
        }
        let mut free = self.free.lock();
        let before = free.range(..=b).next_back().map(|(&s, &l)| (s, l));
        if before.is_some_and(|(s, l)| b < s + l) {
            return;
        }
        self.set_bit(pm, b, false);
        let (mut start, mut len) = (b, 1);
        if let Some((s, l)) = before.filter(|&(s, l)| s + l == b) {
            start = s;
            len += l;
            free.remove(&s);
        }
        if let Some(l) = free.remove(&(b + 1)) {
            len += l;
        }
        free.insert(start, len);
        drop(free);
        self.used.fetch_sub(1, Ordering::AcqRel);
    }

    fn set_bit(&self, pm: &Pm, b: u64, on: bool) {
        let off = self.bitmap_off + b / 64 * 8;
        let w = pm.load_u64(off);
        let m = 1u64 << (b % 64);
        pm.store_u64(off, if on { w | m } else { w & !m });
        pm.persist(off, 8);
    }
}

/// Removes block `b` from the free extent that holds it.
fn take(free: &mut BTreeMap<u64, u64>, b: u64) {
    let (&s, &l) = free.range(..=b).next_back().expect("b is in a free extent");
    free.remove(&s);
    if b > s {
        free.insert(s, b - s);
    }
    if b + 1 < s + l {
        free.insert(b + 1, s + l - b - 1);
    }
}

/// Writes the bitmap of `used` (one flag per data block) where it differs from media, written
/// back and not fenced; returns how many words changed (mount recovery).
pub fn rewrite(pm: &Pm, geo: &Geometry, used: &[bool]) -> u64 {
    let mut changed = 0;
    for (w, chunk) in used.chunks(64).enumerate() {
        let want = chunk
            .iter()
            .enumerate()
            .fold(0u64, |acc, (i, &u)| acc | (u as u64) << i);
        let off = bitmap_off(geo) + w as u64 * 8;
        if pm.load_u64(off) != want {
            pm.store_u64(off, want);
            pm.persist(off, 8);
            changed += 1;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (Pm, Geometry, BlockAlloc) {
        let geo = Geometry::compute(600, Some(64)).unwrap();
        let pm = Pm::in_memory(600 * BLOCK_SIZE);
        let a = BlockAlloc::load(&pm, &geo);
        (pm, geo, a)
    }

    #[test]
    fn contiguous_from_goal_and_every_block_once() {
        let (pm, geo, a) = setup();
        let n = geo.data_blocks;
        a.reserve(n).unwrap();
        let mut got = Vec::new();
        let mut goal = 10;
        for _ in 0..n {
            let b = a.alloc(&pm, goal).unwrap();
            got.push(b);
            goal = b + 1;
        }
        assert_eq!(&got[..3], &[10, 11, 12]);
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len() as u64, n);
        assert_eq!(a.reserve(1).unwrap_err().raw_os_error(), Some(libc::ENOSPC));
        assert!((0..n).all(|b| bit(&pm, &geo, b)));
    }

    #[test]
    fn release_merges_and_bitmap_reloads() {
        let (pm, geo, a) = setup();
        a.reserve(5).unwrap();
        let bs: Vec<u64> = (0..5).map(|_| a.alloc(&pm, 0).unwrap()).collect();
        assert_eq!(bs, vec![0, 1, 2, 3, 4]);
        a.release(&pm, 1);
        a.release(&pm, 3);
        a.release(&pm, 2);
        assert_eq!(a.used(), 2);
        let again = BlockAlloc::load(&pm, &geo);
        assert_eq!(again.used(), 2);
        again.reserve(1).unwrap();
        assert_eq!(again.alloc(&pm, 1).unwrap(), 1);
        assert_eq!(again.free.lock().get(&2), Some(&2));
    }
}
