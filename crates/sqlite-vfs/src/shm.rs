//! WAL shared memory (the wal-index) in process memory: xShmMap / xShmLock / xShmUnmap for
//! the connections of this process on one database.
//!
//! The unix VFS keeps the wal-index in a `-shm` file so that processes share it. This VFS is
//! for one process (the image is mounted by one process), so plain heap memory is enough, and
//! nothing of it needs to survive: the regions start zeroed, which SQLite reads as "no valid
//! wal-index header" and answers by rebuilding the index from the WAL file (`walIndexRecover`),
//! exactly as after the unix VFS truncates a stale `-shm` file. The memory goes when the last
//! connection unmaps it.
//!
//! Locks follow `unixShmLock`: 8 slots, each free, shared by a count of connections, or held
//! exclusively by one.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

use libsqlite3_sys as ffi;

const NLOCK: usize = ffi::SQLITE_SHM_NLOCK as usize;

/// One zeroed, 8-byte aligned region whose address SQLite keeps until the last unmap. It is
/// never touched through a Rust reference: SQLite reads and writes it with its own atomics.
struct Region {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Region {
    fn new(size: usize) -> Option<Region> {
        let layout = Layout::from_size_align(size, 8).ok()?;
        // SAFETY: `size` > 0 (checked by the caller).
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        Some(Region { ptr, layout })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: the region is plain memory owned by the node; who may touch which bytes is decided by
// SQLite's WAL protocol through the locks below.
unsafe impl Send for Region {}

/// The shared memory of one database (inode) and its lock slots.
#[derive(Default)]
pub(crate) struct ShmNode {
    regions: Vec<Region>,
    region_size: usize,
    /// Per slot: > 0 shared by that many connections, -1 exclusive, 0 free.
    slots: [i32; NLOCK],
    /// Connections that have mapped it.
    users: usize,
}

/// One connection's view: the slots it holds.
#[derive(Debug, Default)]
pub(crate) struct ShmHandle {
    shared: u16,
    exclusive: u16,
}

/// Why a shm call failed, as SQLite result codes.
pub(crate) type ShmResult<T> = Result<T, i32>;

impl ShmNode {
    /// Registers a new connection (its first xShmMap).
    pub fn attach(&mut self) -> ShmHandle {
        self.users += 1;
        ShmHandle::default()
    }

    /// The address of region `index` of `size` bytes, allocating it (and those before it,
    /// zeroed) when `extend`; `None` if it does not exist and `extend` is false.
    pub fn map(&mut self, index: usize, size: usize, extend: bool) -> ShmResult<Option<*mut u8>> {
        if size == 0 || !size.is_multiple_of(8) {
            return Err(ffi::SQLITE_IOERR_SHMSIZE);
        }
        if self.regions.is_empty() {
            self.region_size = size;
        } else if self.region_size != size {
            return Err(ffi::SQLITE_IOERR_SHMSIZE);
        }
        if index >= self.regions.len() {
            if !extend {
                return Ok(None);
            }
            while self.regions.len() <= index {
                let r = Region::new(size).ok_or(ffi::SQLITE_IOERR_SHMMAP)?;
                self.regions.push(r);
            }
        }
        Ok(Some(self.regions[index].ptr.as_ptr()))
    }

    /// xShmLock: `flags` is SQLITE_SHM_LOCK or UNLOCK with SHARED or EXCLUSIVE, for slots
    /// `[ofst, ofst + n)`. Shared locks cover one slot. `Err(SQLITE_BUSY)` when another
    /// connection holds a conflicting lock.
    pub fn lock(&mut self, h: &mut ShmHandle, ofst: i32, n: i32, flags: i32) -> ShmResult<()> {
        let (lock, unlock) = (
            flags & ffi::SQLITE_SHM_LOCK != 0,
            flags & ffi::SQLITE_SHM_UNLOCK != 0,
        );
        let (shared, excl) = (
            flags & ffi::SQLITE_SHM_SHARED != 0,
            flags & ffi::SQLITE_SHM_EXCLUSIVE != 0,
        );
        let valid_range = ofst >= 0 && n >= 1 && ofst + n <= NLOCK as i32;
        if !valid_range || lock == unlock || shared == excl || (shared && n != 1) {
            return Err(ffi::SQLITE_IOERR_SHMLOCK);
        }
        let range = ofst as usize..(ofst + n) as usize;
        let mask = (((1u32 << n) - 1) << ofst) as u16;
        if unlock {
            self.release(h, mask);
            return Ok(());
        }
        if shared {
            let slot = &mut self.slots[ofst as usize];
            if h.shared & mask == 0 {
                if *slot < 0 {
                    return Err(ffi::SQLITE_BUSY);
                }
                *slot += 1;
                h.shared |= mask;
            }
            return Ok(());
        }
        // Exclusive: every slot must be free, also of this connection's own shared locks
        // (SQLite never asks for one it holds).
        if self.slots[range.clone()].iter().any(|&s| s != 0) {
            return Err(ffi::SQLITE_BUSY);
        }
        self.slots[range].iter_mut().for_each(|s| *s = -1);
        h.exclusive |= mask;
        Ok(())
    }

    /// Releases the slots of `mask` that `h` holds.
    fn release(&mut self, h: &mut ShmHandle, mask: u16) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let bit = 1u16 << i;
            if mask & bit == 0 {
                continue;
            }
            if h.exclusive & bit != 0 {
                *slot = 0;
            } else if h.shared & bit != 0 {
                *slot = (*slot - 1).max(0);
            }
        }
        h.shared &= !mask;
        h.exclusive &= !mask;
    }

    /// xShmUnmap: drops the connection's locks (SQLite has released them already; a
    /// connection closed in the middle of something must not leave slots held) and, for the
    /// last user, the memory.
    pub fn detach(&mut self, mut h: ShmHandle) {
        self.release(&mut h, u16::MAX);
        self.users = self.users.saturating_sub(1);
        if self.users == 0 {
            self.regions.clear();
            self.region_size = 0;
            self.slots = [0; NLOCK];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK_SH: i32 = ffi::SQLITE_SHM_LOCK | ffi::SQLITE_SHM_SHARED;
    const LOCK_EX: i32 = ffi::SQLITE_SHM_LOCK | ffi::SQLITE_SHM_EXCLUSIVE;
    const UNLOCK_SH: i32 = ffi::SQLITE_SHM_UNLOCK | ffi::SQLITE_SHM_SHARED;
    const UNLOCK_EX: i32 = ffi::SQLITE_SHM_UNLOCK | ffi::SQLITE_SHM_EXCLUSIVE;

    #[test]
    fn regions_are_zeroed_shared_and_stable() {
        let mut n = ShmNode::default();
        let _a = n.attach();
        assert_eq!(n.map(0, 32768, false), Ok(None));
        let p1 = n.map(1, 32768, true).unwrap().unwrap();
        let p0 = n.map(0, 32768, false).unwrap().unwrap();
        // SAFETY: regions are 32 KiB, alive while the node has users.
        unsafe {
            assert!(std::slice::from_raw_parts(p1, 32768)
                .iter()
                .all(|&b| b == 0));
            *p0 = 7;
        }
        let p2 = n.map(2, 32768, true).unwrap().unwrap();
        assert_ne!(p2, p0);
        assert_eq!(n.map(0, 32768, false).unwrap().unwrap(), p0);
        assert_eq!(unsafe { *p0 }, 7);
        assert_eq!(n.map(0, 4096, true), Err(ffi::SQLITE_IOERR_SHMSIZE));
    }

    #[test]
    fn shared_and_exclusive_slots_conflict_as_in_unix() {
        let mut n = ShmNode::default();
        let (mut a, mut b) = (n.attach(), n.attach());
        n.lock(&mut a, 3, 1, LOCK_SH).unwrap();
        n.lock(&mut b, 3, 1, LOCK_SH).unwrap();
        assert_eq!(n.lock(&mut b, 0, 8, LOCK_EX), Err(ffi::SQLITE_BUSY));
        n.lock(&mut b, 0, 1, LOCK_EX).unwrap();
        assert_eq!(n.lock(&mut a, 0, 1, LOCK_EX), Err(ffi::SQLITE_BUSY));
        assert_eq!(n.lock(&mut a, 0, 1, LOCK_SH), Err(ffi::SQLITE_BUSY));
        n.lock(&mut b, 0, 1, UNLOCK_EX).unwrap();
        n.lock(&mut a, 3, 1, UNLOCK_SH).unwrap();
        // b still shares slot 3.
        assert_eq!(n.lock(&mut a, 3, 1, LOCK_EX), Err(ffi::SQLITE_BUSY));
        n.lock(&mut b, 3, 1, UNLOCK_SH).unwrap();
        n.lock(&mut a, 1, 7, LOCK_EX).unwrap();
        assert_eq!(n.lock(&mut b, 5, 1, LOCK_SH), Err(ffi::SQLITE_BUSY));
    }

    #[test]
    fn bad_requests_and_detach() {
        let mut n = ShmNode::default();
        let (mut a, mut b) = (n.attach(), n.attach());
        for (ofst, k, flags) in [
            (0, 2, LOCK_SH),
            (7, 2, LOCK_EX),
            (-1, 1, LOCK_EX),
            (0, 1, 0),
        ] {
            assert_eq!(
                n.lock(&mut a, ofst, k, flags),
                Err(ffi::SQLITE_IOERR_SHMLOCK)
            );
        }
        n.lock(&mut a, 0, 3, LOCK_EX).unwrap();
        n.map(0, 32768, true).unwrap();
        n.detach(a);
        // The slots of a detached connection are free again; the memory stays for b.
        n.lock(&mut b, 0, 3, LOCK_EX).unwrap();
        assert!(n.map(0, 32768, false).unwrap().is_some());
        n.detach(b);
        assert_eq!(n.map(0, 32768, false), Ok(None));
    }
}
