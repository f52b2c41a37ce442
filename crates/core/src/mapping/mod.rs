//! File mapping: where logical block `lblk` of inode `ino` lives. The file system talks to
//! the mapping only through `FileMap`, so the mappings of Neal et al. (FAST'21) can be compared
//! inside the same file system. The mapping is chosen at mkfs and recorded in the superblock
//! (`MappingKind`):
//! - `hashfs`: one global hash table that is also the block allocator (`hashfs`);
//! - `extent`: a per-file extent tree with a per-file cursor (`extent`);
//! - `radix`: a per-file radix tree of block pointers (`radix`);
//! - `cuckoo`: one global cuckoo hash table of ranged entries (`cuckoo`);
//! - `level`: level hashing (Zuo et al., OSDI'18) as-is, one entry per block, resizing in
//!   place (`level`; Neal et al. §4.9).
//!
//! The tree mappings take their data and node blocks from one block allocator (`balloc`: a
//! bitmap in PM and a volatile free-extent index) and keep each file's root in a root table
//! (`tree`); the cuckoo and level hashing tables take its data blocks from the same allocator.
//!
//! The seam. Turning a claimed block into a mapping is either one aligned 8-byte store
//! (HashFS's key, the radix tree's leaf pointer, the extent tree's "pending" flag) or, for
//! structural changes (extent-tree splits, root growth, removals), several words that the
//! mapping commits in its own journal transaction. `publish_in` stages the publish into the
//! caller's transaction so it commits atomically with the inode; `claim`, `abandon`,
//! `publish` and `unmap_range` may run their own transactions, so they are never called while
//! the calling thread has one open (a journal lane is one per thread).

pub mod balloc;
pub mod cuckoo;
pub mod extent;
pub mod hashfs;
pub mod level;
pub mod radix;
pub mod tree;

use std::io;

use crate::journal::{Journal, Tx};
use crate::layout::superblock::Geometry;
use crate::media::Pm;

/// The file mapping of an image (superblock field `mapping`, FORMAT.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MappingKind {
    #[default]
    HashFs,
    Extent,
    Radix,
    Cuckoo,
    Level,
}

impl MappingKind {
    pub const ALL: [MappingKind; 5] = [
        MappingKind::HashFs,
        MappingKind::Extent,
        MappingKind::Radix,
        MappingKind::Cuckoo,
        MappingKind::Level,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MappingKind::HashFs => "hashfs",
            MappingKind::Extent => "extent",
            MappingKind::Radix => "radix",
            MappingKind::Cuckoo => "cuckoo",
            MappingKind::Level => "level",
        }
    }

    /// The on-media code (superblock field `mapping`).
    pub fn code(self) -> u32 {
        match self {
            MappingKind::HashFs => 0,
            MappingKind::Extent => 1,
            MappingKind::Radix => 2,
            MappingKind::Cuckoo => 3,
            MappingKind::Level => 4,
        }
    }

    pub fn from_code(code: u32) -> Option<MappingKind> {
        MappingKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// Checks that the mapping's structures fit geometry `geo` (mkfs, superblock decode).
    pub fn check_fits(self, geo: &Geometry) -> Result<(), String> {
        match self {
            MappingKind::HashFs => Ok(()),
            MappingKind::Extent | MappingKind::Radix => tree::check_fits(geo),
            MappingKind::Cuckoo => cuckoo::check_fits(geo),
            MappingKind::Level => level::check_fits(geo),
        }
    }

    /// True for the mappings whose blocks come from the block allocator.
    pub fn uses_allocator(self) -> bool {
        self != MappingKind::HashFs
    }
}

impl std::str::FromStr for MappingKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        MappingKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!("unknown mapping {s:?} (expected hashfs, extent, radix, cuckoo or level)")
            })
    }
}

impl std::fmt::Display for MappingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A claimed block and the value its entry had before the claim (HashFS: free or tombstone;
/// the tree mappings: 0; cuckoo and level: the slot of its pending entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub pblk: u64,
    pub prior: u64,
}

/// A file-mapping structure that also hands out data blocks.
pub trait FileMap: Send + Sync {
    fn kind(&self) -> MappingKind;
    /// Short name for `info` and the lab ("hashfs").
    fn name(&self) -> &'static str {
        self.kind().name()
    }
    /// The data block holding (`ino`, `lblk`), if mapped.
    fn lookup(&self, pm: &Pm, ino: u32, lblk: u32) -> Option<u64>;
    /// True if `pblk` still maps (`ino`, `lblk`): validates a cached translation (HashFS: one
    /// load instead of a probe sequence).
    fn still_maps(&self, pm: &Pm, pblk: u64, ino: u32, lblk: u32) -> bool {
        self.lookup(pm, ino, lblk) == Some(pblk)
    }
    /// Hints that (`ino`, `lblk`) will be looked up soon (sequential access).
    fn prefetch(&self, _pm: &Pm, _ino: u32, _lblk: u32) {}
    /// Takes `count` blocks off the free count, or fails with ENOSPC. Every claim is paid
    /// for by a reservation.
    fn reserve(&self, count: u64) -> io::Result<()>;
    /// Returns unused reservations.
    fn unreserve(&self, count: u64);
    /// Claims a free block for (`ino`, `lblk`), which must not be mapped. The claim keeps
    /// other allocators off the block; it becomes a mapping by `publish` or `publish_in`, or
    /// is dropped by `abandon`. May run its own transaction (tree growth).
    fn claim(&self, pm: &Pm, journal: &Journal, ino: u32, lblk: u32) -> io::Result<Claim>;
    /// Gives a claimed, unpublished block back (its reservation too).
    fn abandon(&self, pm: &Pm, journal: &Journal, claim: Claim, ino: u32, lblk: u32);
    /// Stages the publish of `claim` in `tx`: it becomes a mapping when `tx` commits, and
    /// rolls back with it.
    fn publish_in(&self, tx: &mut Tx<'_>, claim: Claim, ino: u32, lblk: u32);
    /// Publishes a claim now, outside any transaction: written back, maybe not fenced (the
    /// caller fences before exposing the block through the inode's size).
    fn publish(&self, pm: &Pm, journal: &Journal, claim: Claim, ino: u32, lblk: u32);
    /// Unmaps the blocks of `ino` in logical blocks [`from`, `to`) and returns how many data
    /// blocks it unmapped. The caller fences and then calls `freed` with that number. Fails
    /// (ENOSPC, nothing changed) only when removing a middle part of an extent needs a node
    /// the allocator cannot give.
    fn unmap_range(
        &self,
        pm: &Pm,
        journal: &Journal,
        ino: u32,
        from: u64,
        to: u64,
    ) -> io::Result<u64>;
    /// Unmaps every block of `ino`, which maps nothing at or past `allowed`, and drops its
    /// mapping structure (a freed inode leaves nothing behind).
    fn unmap_all(&self, pm: &Pm, journal: &Journal, ino: u32, _allowed: u64) -> io::Result<u64> {
        self.unmap_range(pm, journal, ino, 0, u64::MAX)
    }
    /// Accounts for `count` blocks unmapped by `unmap_range`, after the caller's fence.
    fn freed(&self, count: u64);
    /// Blocks in use (mapped, claimed, or holding mapping nodes).
    fn used_blocks(&self) -> u64;
    /// Sets the used count after a recount (recovery from a crashed peer process).
    fn set_used(&self, used: u64);
    /// All data blocks.
    fn total_blocks(&self) -> u64;
}

/// A lookup-only view of the mapping of an image (fsck, `info`, test helpers): nothing is
/// allocated through it.
pub fn open_view(kind: MappingKind, geo: &Geometry) -> Box<dyn FileMap> {
    match kind {
        MappingKind::HashFs => Box::new(hashfs::HashFs::new(geo, 0)),
        MappingKind::Extent => Box::new(tree::TreeMap::view(extent::Extent::new(), geo)),
        MappingKind::Radix => Box::new(tree::TreeMap::view(radix::Radix, geo)),
        MappingKind::Cuckoo => Box::new(cuckoo::Cuckoo::view(geo)),
        MappingKind::Level => Box::new(level::Level::view(geo)),
    }
}
