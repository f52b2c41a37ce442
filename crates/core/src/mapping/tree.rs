//! What the per-file tree mappings (extent tree, radix tree) share: the root table, the block
//! allocator, the `FileMap` plumbing, mount recovery and the walk fsck uses.
//!
//! Root table (FORMAT.md §5): after the bitmap, 64-byte aligned, one 8-byte root word per
//! inode number: 0 for no tree, else `levels << 48 | node`, where `node` is the data-region
//! block of the root node and `levels` (1 = the root is a leaf) says how tall the tree is.
//! A root word is replaced with one atomic store, so growing or dropping a tree is atomic.

use std::io;

use super::balloc::{self, BlockAlloc};
use super::{Claim, FileMap, MappingKind};
use crate::fs::mount::{allowed_blocks, RecoveryReport};
use crate::journal::{Journal, Tx};
use crate::layout::inode::{Inode, INODE_SIZE};
use crate::layout::superblock::Geometry;
use crate::layout::{corrupted, Corrupted, BLOCK_SIZE};
use crate::media::Pm;

/// Bits of a root word below the level count.
const ROOT_NODE_MASK: u64 = (1 << 48) - 1;

/// Byte offset of the root table.
pub fn roots_off(geo: &Geometry) -> u64 {
    balloc::bitmap_off(geo) + balloc::bitmap_len(geo).next_multiple_of(64)
}

/// Byte offset of inode `ino`'s root word.
pub fn root_off(geo: &Geometry, ino: u32) -> u64 {
    roots_off(geo) + ino as u64 * 8
}

/// Checks that the bitmap and the root table fit the mapping region of `geo` (mkfs).
pub fn check_fits(geo: &Geometry) -> Result<(), String> {
    let need = roots_off(geo) + geo.inode_count * 8;
    let have = (geo.hash_start + geo.hash_blocks) * BLOCK_SIZE;
    if need > have {
        return Err(format!(
            "{} inodes leave no room for the tree mappings' root table ({} bytes needed, {} in \
             the mapping region); use fewer inodes or the hashfs mapping",
            geo.inode_count,
            need - balloc::bitmap_off(geo),
            have - balloc::bitmap_off(geo)
        ));
    }
    Ok(())
}

pub fn root_word(levels: u64, node: u64) -> u64 {
    levels << 48 | node
}

/// Splits a nonzero root word into (levels, node).
pub fn split_root(w: u64) -> (u64, u64) {
    (w >> 48, w & ROOT_NODE_MASK)
}

/// Splits a stored root word for a walk, refusing a level count outside 1..=`levels_max` or
/// a node outside the data region (`what` names the mapping in the error).
pub fn checked_root(
    root: u64,
    levels_max: u64,
    geo: &Geometry,
    what: &str,
) -> Result<(u64, u64), Corrupted> {
    let (levels, node) = split_root(root);
    if !(1..=levels_max).contains(&levels) || node >= geo.data_blocks {
        return Err(corrupted(
            format!("{what} root word {root:#x}: bad level count or node"),
            0,
        ));
    }
    Ok((levels, node))
}

/// What a walk reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// A node of the tree (counts as a used block).
    Node(u64),
    /// Logical block `lblk` maps data block `pblk`; `pending` for a claim not yet published.
    Data { lblk: u64, pblk: u64, pending: bool },
}

/// The geometry and allocator a tree works with.
pub struct Base {
    pub geo: Geometry,
    pub alloc: BlockAlloc,
    /// The last block claimed per inode (sharded by inode): (ino, lblk, pblk). A write claims
    /// all its blocks before publishing any, so the previous block of a run is not in the
    /// tree yet when the next is claimed; this hint keeps the run contiguous (ext4 keeps a
    /// per-inode allocation goal for the same reason).
    hints: Vec<parking_lot::Mutex<(u32, u64, u64)>>,
}

const HINT_SHARDS: usize = 64;

impl Base {
    pub fn new(geo: &Geometry, alloc: BlockAlloc) -> Base {
        Base {
            geo: geo.clone(),
            alloc,
            hints: (0..HINT_SHARDS)
                .map(|_| parking_lot::Mutex::new((0, 0, 0)))
                .collect(),
        }
    }

    /// The block after the one claimed for (`ino`, `lblk - 1`), if that was the last claim.
    pub fn hinted_goal(&self, ino: u32, lblk: u64) -> Option<u64> {
        let h = *self.hints[ino as usize % HINT_SHARDS].lock();
        (h.0 == ino && h.1 + 1 == lblk).then_some(h.2 + 1)
    }

    pub fn note_claim(&self, ino: u32, lblk: u64, pblk: u64) {
        *self.hints[ino as usize % HINT_SHARDS].lock() = (ino, lblk, pblk);
    }

    pub fn root(&self, pm: &Pm, ino: u32) -> u64 {
        pm.load_u64(root_off(&self.geo, ino))
    }

    /// Byte offset of data-region block `b`.
    pub fn off(&self, b: u64) -> u64 {
        self.geo.data_off(b)
    }

    /// True if `b` is a data-region block (anything read from media is checked before use).
    pub fn valid(&self, b: u64) -> bool {
        b < self.geo.data_blocks
    }

    /// A zeroed node, written back but not fenced: the caller fences before linking it.
    pub fn new_node(&self, pm: &Pm, goal: u64) -> io::Result<u64> {
        let b = self.alloc.alloc_node(pm, goal)?;
        pm.write(self.off(b), &[0u8; BLOCK_SIZE as usize]);
        pm.persist(self.off(b), BLOCK_SIZE as usize);
        Ok(b)
    }

    /// Stores a root word directly: written back and fenced.
    pub fn set_root(&self, pm: &Pm, ino: u32, w: u64) {
        let off = root_off(&self.geo, ino);
        pm.store_u64(off, w);
        pm.persist(off, 8);
        pm.fence();
    }
}

/// One per-file tree structure; `TreeMap` turns it into a `FileMap`. The per-inode lock the
/// file system holds around every mutation of a file (stripe lock, directory lock) is what
/// keeps two operations off one tree; lookups of a file run under its read lock.
pub trait BlockTree: Send + Sync + 'static {
    const KIND: MappingKind;
    fn lookup(&self, b: &Base, pm: &Pm, ino: u32, lblk: u32) -> Option<u64>;
    fn claim(&self, b: &Base, pm: &Pm, j: &Journal, ino: u32, lblk: u32) -> io::Result<Claim>;
    fn abandon(&self, b: &Base, pm: &Pm, j: &Journal, c: Claim, ino: u32, lblk: u32);
    fn publish_in(&self, b: &Base, tx: &mut Tx<'_>, c: Claim, ino: u32, lblk: u32);
    fn publish(&self, b: &Base, pm: &Pm, c: Claim, ino: u32, lblk: u32);
    /// Unmaps [from, to); durable on return; returns the data blocks to release (the nodes it
    /// dropped are released already).
    fn unmap(
        &self,
        b: &Base,
        pm: &Pm,
        j: &Journal,
        ino: u32,
        from: u64,
        to: u64,
    ) -> io::Result<Vec<u64>>;
    /// Validates the tree of root word `root` and reports every node and mapping to `visit`,
    /// which returns false for a block already seen (its subtree is then not walked again).
    fn walk(
        &self,
        pm: &Pm,
        geo: &Geometry,
        root: u64,
        visit: &mut dyn FnMut(Reach) -> bool,
    ) -> Result<(), Corrupted>;
    /// Recovery: drops unpublished claims and mappings at or past `allowed` without
    /// allocating; returns the data blocks dropped. Nothing is released (the bitmap is
    /// rebuilt afterwards).
    fn trim(&self, b: &Base, pm: &Pm, j: &Journal, ino: u32, allowed: u64) -> u64;
}

pub struct TreeMap<T: BlockTree> {
    pub tree: T,
    pub base: Base,
}

impl<T: BlockTree> TreeMap<T> {
    /// A mounted mapping with the allocator `alloc`.
    pub fn new(tree: T, geo: &Geometry, alloc: BlockAlloc) -> Self {
        TreeMap {
            tree,
            base: Base::new(geo, alloc),
        }
    }

    /// A lookup-only view.
    pub fn view(tree: T, geo: &Geometry) -> Self {
        Self::new(tree, geo, BlockAlloc::empty(geo))
    }
}

impl<T: BlockTree> FileMap for TreeMap<T> {
    fn kind(&self) -> MappingKind {
        T::KIND
    }

    fn lookup(&self, pm: &Pm, ino: u32, lblk: u32) -> Option<u64> {
        if (ino as u64) >= self.base.geo.inode_count {
            return None;
        }
        self.tree.lookup(&self.base, pm, ino, lblk)
    }

    fn reserve(&self, count: u64) -> io::Result<()> {
        self.base.alloc.reserve(count)
    }

    fn unreserve(&self, count: u64) {
        self.base.alloc.unreserve(count)
    }

    fn claim(&self, pm: &Pm, journal: &Journal, ino: u32, lblk: u32) -> io::Result<Claim> {
        self.tree.claim(&self.base, pm, journal, ino, lblk)
    }

    fn abandon(&self, pm: &Pm, journal: &Journal, claim: Claim, ino: u32, lblk: u32) {
        self.tree.abandon(&self.base, pm, journal, claim, ino, lblk)
    }

    fn publish_in(&self, tx: &mut Tx<'_>, claim: Claim, ino: u32, lblk: u32) {
        self.tree.publish_in(&self.base, tx, claim, ino, lblk)
    }

    fn publish(&self, pm: &Pm, _journal: &Journal, claim: Claim, ino: u32, lblk: u32) {
        self.tree.publish(&self.base, pm, claim, ino, lblk)
    }

    fn unmap_range(
        &self,
        pm: &Pm,
        journal: &Journal,
        ino: u32,
        from: u64,
        to: u64,
    ) -> io::Result<u64> {
        let data = self.tree.unmap(&self.base, pm, journal, ino, from, to)?;
        // `unmap` made the unmapping durable: the blocks can go to other files now.
        for &p in &data {
            self.base.alloc.release(pm, p);
        }
        Ok(data.len() as u64)
    }

    /// `unmap_range` already released the blocks (after its own fence).
    fn freed(&self, _count: u64) {}

    fn used_blocks(&self) -> u64 {
        self.base.alloc.used()
    }

    fn set_used(&self, used: u64) {
        self.base.alloc.set_used(used)
    }

    fn total_blocks(&self) -> u64 {
        self.base.alloc.total()
    }
}

/// Per-inode data-block counts and the used-block flags of every tree, from a validating
/// walk of each root word (fsck and recovery). `on_bad` hears of every damaged tree and
/// block owned twice, with the inode it was found in.
pub struct Census {
    pub used: Vec<bool>,
    pub counts: Vec<u64>,
}

pub fn census<T: BlockTree>(
    tree: &T,
    pm: &Pm,
    geo: &Geometry,
    on_bad: &mut dyn FnMut(u32, Corrupted),
    on_map: &mut dyn FnMut(u32, Reach),
) -> Census {
    let mut c = Census {
        used: vec![false; geo.data_blocks as usize],
        counts: vec![0; geo.inode_count as usize],
    };
    for ino in 1..geo.inode_count as u32 {
        let root = pm.load_u64(root_off(geo, ino));
        if root == 0 {
            continue;
        }
        let mut twice = Vec::new();
        let res = tree.walk(pm, geo, root, &mut |r| {
            let p = match r {
                Reach::Node(p) => p,
                Reach::Data { pblk, .. } => pblk,
            };
            if std::mem::replace(&mut c.used[p as usize], true) {
                twice.push(p);
                return false;
            }
            if let Reach::Data { pending: false, .. } = r {
                c.counts[ino as usize] += 1;
            }
            on_map(ino, r);
            true
        });
        for p in twice {
            on_bad(
                ino,
                corrupted(format!("block {p} owned twice"), geo.data_off(p)),
            );
        }
        if let Err(e) = res {
            on_bad(ino, e);
        }
    }
    c
}

/// Mount recovery of a tree mapping. After an unclean shutdown: drops the trees of free
/// inodes, unpublished claims and mappings past what each inode may map, then rebuilds the
/// bitmap from what the trees reach and fixes block counts. Returns the allocator.
pub fn recover<T: BlockTree>(
    tree: &T,
    pm: &Pm,
    geo: &Geometry,
    unclean: bool,
    report: &mut RecoveryReport,
) -> Result<BlockAlloc, Corrupted> {
    if unclean {
        let base = Base::new(geo, BlockAlloc::empty(geo));
        let journal = Journal::new(geo);
        for ino in 1..geo.inode_count as u32 {
            if base.root(pm, ino) == 0 {
                continue;
            }
            let i = Inode::decode_raw(
                &pm.read_array::<{ INODE_SIZE as usize }>(geo.inode_off(ino as u64)),
            );
            if i.is_free() {
                base.set_root(pm, ino, 0);
                report.stray_blocks_freed += 1;
                continue;
            }
            report.stray_blocks_freed += tree.trim(&base, pm, &journal, ino, allowed_blocks(&i));
        }
        let mut bad = None;
        let c = census(
            tree,
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{extent::Extent, radix::Radix};
    use super::*;

    const BLOCKS: u64 = 8192;
    const INO: u32 = 5;

    struct Rig {
        pm: Pm,
        geo: Geometry,
        journal: Journal,
        map: Box<dyn FileMap>,
        model: BTreeMap<u64, u64>,
    }

    fn rig(kind: MappingKind) -> Rig {
        let geo = Geometry::compute(BLOCKS, Some(64)).unwrap();
        check_fits(&geo).unwrap();
        let pm = Pm::in_memory(BLOCKS * BLOCK_SIZE);
        let alloc = BlockAlloc::load(&pm, &geo);
        let map: Box<dyn FileMap> = match kind {
            MappingKind::Extent => Box::new(TreeMap::new(Extent::new(), &geo, alloc)),
            MappingKind::Radix => Box::new(TreeMap::new(Radix, &geo, alloc)),
            MappingKind::HashFs | MappingKind::Cuckoo | MappingKind::Level => {
                unreachable!("tree mappings only")
            }
        };
        Rig {
            journal: Journal::new(&geo),
            pm,
            geo,
            map,
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
            self.pm.fence();
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

        /// Every lookup agrees with the model, the tree validates, and the bitmap is exactly
        /// the blocks the tree reaches.
        fn check<T: BlockTree>(&self, t: &T) {
            for (&l, &p) in &self.model {
                assert_eq!(
                    self.map.lookup(&self.pm, INO, l as u32),
                    Some(p),
                    "lblk {l}"
                );
            }
            let mut mapped = BTreeMap::new();
            let c = census(
                t,
                &self.pm,
                &self.geo,
                &mut |_, e| panic!("tree damaged: {e}"),
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
                    "bitmap bit {b}"
                );
            }
            let used = c.used.iter().filter(|&&u| u).count() as u64;
            assert_eq!(self.map.used_blocks(), used);
        }
    }

    fn both(f: impl Fn(MappingKind, &dyn Fn(&Rig))) {
        f(MappingKind::Extent, &|r| r.check(&Extent::new()));
        f(MappingKind::Radix, &|r| r.check(&Radix));
    }

    #[test]
    fn insert_lookup_remove() {
        both(|kind, check| {
            let mut r = rig(kind);
            for l in 0..100 {
                r.map(l);
            }
            check(&r);
            assert_eq!(r.map.lookup(&r.pm, INO, 100), None);
            assert_eq!(r.map.lookup(&r.pm, INO + 1, 0), None);
            r.unmap(10, 20);
            check(&r);
            assert_eq!(r.map.lookup(&r.pm, INO, 15), None);
            r.map(15);
            r.map_in_tx(&[12, 13, 200]);
            check(&r);
        });
    }

    #[test]
    fn sequential_blocks_are_contiguous_and_one_extent() {
        both(|kind, check| {
            let mut r = rig(kind);
            let first = r.map(0);
            for l in 1..300 {
                assert_eq!(r.map(l), first + l, "lblk {l}");
            }
            check(&r);
        });
        let mut r = rig(MappingKind::Extent);
        for l in 0..300 {
            r.map(l);
        }
        let mut nodes = 0;
        census(
            &Extent::new(),
            &r.pm,
            &r.geo,
            &mut |_, e| panic!("{e}"),
            &mut |_, x| nodes += matches!(x, Reach::Node(_)) as u32,
        );
        assert_eq!(
            nodes, 1,
            "300 contiguous blocks fit one extent in the root leaf"
        );
    }

    #[test]
    fn growth_to_deep_trees() {
        // Every other block: one extent each, so the extent tree splits leaves and its root;
        // the radix tree grows to 2 levels.
        both(|kind, check| {
            let mut r = rig(kind);
            for l in (0..1500u64).map(|i| i * 2) {
                r.map(l);
            }
            check(&r);
            r.unmap(1000, 2000);
            check(&r);
            r.map_in_tx(&[1001, 1003, 1005]);
            check(&r);
            let levels = split_root(r.pm.load_u64(root_off(&r.geo, INO))).0;
            assert_eq!(
                levels, 2,
                "{kind}: 1500 extents / 3000 blocks need two levels"
            );
        });
    }

    #[test]
    fn large_sparse_offsets() {
        both(|kind, check| {
            let mut r = rig(kind);
            for l in [0u64, 511, 512, 262_143, 262_144, 1 << 27, (1 << 32) - 1] {
                r.map(l);
                check(&r);
            }
            assert_eq!(r.map.lookup(&r.pm, INO, u32::MAX - 1), None);
            r.unmap(1 << 20, 1 << 32);
            check(&r);
        });
        // The radix tree is 4 levels tall for the last logical block.
        let r = {
            let mut r = rig(MappingKind::Radix);
            r.map((1 << 32) - 1);
            r
        };
        assert_eq!(split_root(r.pm.load_u64(root_off(&r.geo, INO))).0, 4);
    }

    #[test]
    fn truncate_and_punch() {
        both(|kind, check| {
            let mut r = rig(kind);
            for l in 0..600 {
                r.map(l);
            }
            // Punch the middle of one extent (the extent tree splits it).
            r.unmap(100, 110);
            check(&r);
            // Truncate.
            r.unmap(300, u64::MAX);
            check(&r);
            // Free everything: the tree and its nodes go too.
            r.unmap(0, u64::MAX);
            check(&r);
            assert_eq!(r.pm.load_u64(root_off(&r.geo, INO)), 0);
            assert_eq!(r.map.used_blocks(), 0);
        });
    }

    #[test]
    fn abandon_gives_blocks_back() {
        both(|kind, check| {
            let mut r = rig(kind);
            r.map(0);
            r.map.reserve(3).unwrap();
            let cs: Vec<_> = (1..4)
                .map(|l| (r.map.claim(&r.pm, &r.journal, INO, l).unwrap(), l))
                .collect();
            for (c, l) in cs.into_iter().rev() {
                r.map.abandon(&r.pm, &r.journal, c, INO, l);
            }
            check(&r);
        });
    }

    #[test]
    fn recovery_drops_claims_and_rebuilds_the_bitmap() {
        both(|kind, check| {
            let mut r = rig(kind);
            for l in 0..40 {
                r.map(l);
            }
            r.map.reserve(1).unwrap();
            // A claim that never published, as a crash leaves it.
            r.map.claim(&r.pm, &r.journal, INO, 40).unwrap();
            let mut report = RecoveryReport::default();
            // Inode INO is free on this image: recovery drops its whole tree.
            let a = match kind {
                MappingKind::Extent => recover(&Extent::new(), &r.pm, &r.geo, true, &mut report),
                _ => recover(&Radix, &r.pm, &r.geo, true, &mut report),
            }
            .unwrap();
            assert_eq!(a.used(), 0);
            r.model.clear();
            r.map = match kind {
                MappingKind::Extent => Box::new(TreeMap::new(Extent::new(), &r.geo, a)),
                _ => Box::new(TreeMap::new(Radix, &r.geo, a)),
            };
            check(&r);
        });
    }
}
