//! Inode allocation from per-group pools: the inode table is cut into groups, each with its
//! own free list and lock, and a thread allocates from the group its thread slot picks. There
//! is no global lock on the create/delete path (seed 000: PMFS's single locked free list was
//! its bottleneck with many files). A free inode is one whose record has mode 0; the pools
//! are rebuilt from the inode table at mount.

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use crate::journal::thread_slot;

/// Inodes per group.
pub const GROUP_INODES: u64 = 4096;

pub struct InodeAlloc {
    /// Each group on its own cache lines: threads allocating from different groups share
    /// none.
    groups: Vec<CachePadded<Mutex<Vec<u32>>>>,
    /// Set once the pools have been filled from the inode table. A shared mount that joins
    /// a running image starts without (`unscanned`) and scans at its first allocation, so a
    /// process that never creates a file never reads the whole table.
    scanned: std::sync::OnceLock<()>,
}

impl InodeAlloc {
    /// Builds the pools from the set of free inode numbers (ascending).
    pub fn new(inode_count: u64, free_inodes: impl Iterator<Item = u32>) -> InodeAlloc {
        let ngroups = inode_count.div_ceil(GROUP_INODES) as usize;
        let mut lists: Vec<Vec<u32>> = vec![Vec::new(); ngroups];
        for ino in free_inodes {
            lists[(ino as u64 / GROUP_INODES) as usize].push(ino);
        }
        // Pop from the end hands out the lowest numbers first.
        for l in &mut lists {
            l.reverse();
        }
        let scanned = std::sync::OnceLock::new();
        let _ = scanned.set(());
        InodeAlloc {
            groups: lists
                .into_iter()
                .map(|l| CachePadded::new(Mutex::new(l)))
                .collect(),
            scanned,
        }
    }

    /// Empty pools to be filled by `fill_once` before the first allocation.
    pub fn unscanned(inode_count: u64) -> InodeAlloc {
        let mut a = InodeAlloc::new(inode_count, std::iter::empty());
        a.scanned.take();
        a
    }

    pub fn is_scanned(&self) -> bool {
        self.scanned.get().is_some()
    }

    /// Fills unscanned pools from `scan` (once; concurrent callers wait for it).
    pub fn fill_once(&self, scan: impl FnOnce() -> Vec<u32>) {
        self.scanned
            .get_or_init(|| self.rebuild(scan().into_iter()));
    }

    /// Takes a free inode number, preferring this thread's group.
    pub fn alloc(&self) -> Option<u32> {
        let n = self.groups.len();
        let first = thread_slot() % n;
        for i in 0..n {
            if let Some(ino) = self.groups[(first + i) % n].lock().pop() {
                return Some(ino);
            }
        }
        None
    }

    /// Replaces the pools with `free_inodes` (ascending). Only while no number handed out by
    /// this pool is still on its way to media: shared mounts call it when the image has been
    /// theirs alone since their last operation finished.
    pub fn rebuild(&self, free_inodes: impl Iterator<Item = u32>) {
        let fresh = InodeAlloc::new(self.groups.len() as u64 * GROUP_INODES, free_inodes);
        for (g, f) in self.groups.iter().zip(fresh.groups) {
            *g.lock() = CachePadded::into_inner(f).into_inner();
        }
    }

    /// Returns an inode number whose record is now free on media.
    pub fn free(&self, ino: u32) {
        self.groups[(ino as u64 / GROUP_INODES) as usize]
            .lock()
            .push(ino);
    }

    /// The numbers in all pools (statfs, `info`). Counted group by group, so that allocating
    /// and freeing write no counter that all threads share.
    pub fn free_count(&self) -> u64 {
        self.groups.iter().map(|g| g.lock().len() as u64).sum()
    }

    /// Whether the pools hold fewer than `n` numbers, counting only until they reach `n`
    /// (a shared mount checks at every change of owner; one group usually settles it).
    pub fn fewer_than(&self, n: u64) -> bool {
        let mut seen = 0;
        for g in &self.groups {
            seen += g.lock().len() as u64;
            if seen >= n {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_each_free_inode_once() {
        let a = InodeAlloc::new(10_000, 2..10_000u32);
        let mut got = std::collections::HashSet::new();
        while let Some(i) = a.alloc() {
            assert!(got.insert(i));
        }
        assert_eq!(got.len(), 9998);
        assert_eq!(a.free_count(), 0);
        a.free(5000);
        assert_eq!(a.alloc(), Some(5000));
    }

    #[test]
    fn counts_span_groups() {
        // Six numbers in group 0, four in group 1.
        let a = InodeAlloc::new(3 * GROUP_INODES, 4090..4100u32);
        assert_eq!(a.free_count(), 10);
        assert!(!a.fewer_than(10));
        assert!(a.fewer_than(11));
        let got = a.alloc().unwrap();
        assert_eq!(a.free_count(), 9);
        assert!(a.fewer_than(10));
        assert!(!a.fewer_than(9));
        a.free(got);
        assert_eq!(a.free_count(), 10);
    }

    #[test]
    fn parallel_alloc_is_disjoint() {
        let a = std::sync::Arc::new(InodeAlloc::new(20_000, 1..20_000u32));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let a = a.clone();
                std::thread::spawn(move || {
                    (0..3000).map(|_| a.alloc().unwrap()).collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<u32> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 12_000);
    }
}
