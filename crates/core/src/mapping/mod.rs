//! File mapping: where logical block `lblk` of inode `ino` lives. The file system talks to
//! the mapping only through `FileMap`, so other mappings (extent tree, radix tree, cuckoo
//! hash) can be compared inside the same file system by the lab.

pub mod hashfs;

use std::io;

use crate::media::Pm;

/// A claimed block and the value its entry had before the claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub pblk: u64,
    pub prior: u64,
}

impl Claim {
    /// What an abandoned or rolled-back claim leaves in its entry. Never "free": while the
    /// entry was claimed, other keys may have been placed past it, and a free entry would end
    /// their probe chains early. A tombstone keeps them reachable (mount compaction turns
    /// chain-ending tombstones back into free entries).
    pub fn undo_value(&self) -> u64 {
        hashfs::TOMBSTONE
    }
}

/// A file-mapping structure that also hands out data blocks.
pub trait FileMap: Send + Sync {
    /// Short name for `info` and the lab ("hashfs").
    fn name(&self) -> &'static str;
    /// The data block holding (`ino`, `lblk`), if mapped.
    fn lookup(&self, pm: &Pm, ino: u32, lblk: u32) -> Option<u64>;
    /// True if `pblk` still maps (`ino`, `lblk`): validates a cached translation with one
    /// load instead of a probe sequence.
    fn still_maps(&self, pm: &Pm, pblk: u64, ino: u32, lblk: u32) -> bool;
    /// Hints that (`ino`, `lblk`) will be looked up soon (sequential access).
    fn prefetch(&self, pm: &Pm, ino: u32, lblk: u32);
    /// Takes `count` blocks off the free count, or fails with ENOSPC. Every claim is paid
    /// for by a reservation.
    fn reserve(&self, count: u64) -> io::Result<()>;
    /// Returns unused reservations.
    fn unreserve(&self, count: u64);
    /// Claims a free block for (`ino`, `lblk`), which must not be mapped. The claim keeps
    /// other allocators off the block; it becomes a mapping by `publish` or `publish_entry`
    /// in a transaction, or is dropped by `abandon`.
    fn claim(&self, pm: &Pm, ino: u32, lblk: u32) -> io::Result<Claim>;
    /// Gives a claimed block back (its reservation too).
    fn abandon(&self, pm: &Pm, claim: Claim);
    /// The in-place write that turns a claim into a mapping: (entry offset, new value).
    fn publish_entry(&self, claim: Claim, ino: u32, lblk: u32) -> (u64, u64);
    /// Publishes a claim directly: store and write-back, no fence (the caller fences).
    fn publish(&self, pm: &Pm, claim: Claim, ino: u32, lblk: u32) {
        let (off, v) = self.publish_entry(claim, ino, lblk);
        pm.store_u64(off, v);
        pm.persist(off, 8);
    }
    /// The in-place write that unmaps `pblk`: (entry offset, new value). The caller applies
    /// it (directly or in a transaction) and then calls `freed`.
    fn unmap_entry(&self, pblk: u64) -> (u64, u64);
    /// Accounts for a block unmapped by the caller.
    fn freed(&self, count: u64);
    /// Data blocks in use (mapped or claimed).
    fn used_blocks(&self) -> u64;
    /// Sets the used count after a recount (recovery from a crashed peer process).
    fn set_used(&self, used: u64);
    /// All data blocks.
    fn total_blocks(&self) -> u64;
}
