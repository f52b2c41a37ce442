//! Per-file radix tree of block pointers (Neal et al., Fig. 2; PMFS and NOVA keep such block
//! trees): every node is one 4 KiB block of 512 little-endian u64 entries, 0 for nothing, else
//! `block + 1`. A tree of `levels` levels covers logical blocks [0, 512^levels); the entries
//! of level 1 point at data blocks, those above at nodes. Logical block `l` takes entry
//! `(l >> 9 * (level - 1)) & 511` at each level.
//!
//! Crash consistency without the journal: every change is one aligned 8-byte store. A claim
//! builds the missing path first (a zeroed node is made durable, then one pointer links it:
//! an empty subtree maps nothing, so a crash anywhere leaves a valid tree); publishing is one
//! leaf-entry store; unmapping clears leaf entries or whole subtree pointers. A tree grows
//! taller by a new root whose entry 0 is the old root, swapped in with the root word.

use std::io;

use super::tree::{checked_root, root_word, split_root, Base, BlockTree, Reach};
use super::{Claim, MappingKind};
use crate::journal::{Journal, Tx};
use crate::layout::superblock::Geometry;
use crate::layout::{corrupted, Corrupted};
use crate::media::Pm;

pub const FANOUT_BITS: u32 = 9;
pub const FANOUT: u64 = 1 << FANOUT_BITS;
/// 512^4 = 2^36 logical blocks covers the largest file (2^32 blocks).
pub const LEVELS_MAX: u64 = 4;

pub struct Radix;

/// Logical blocks one entry of a level-`level` node covers.
fn span(level: u64) -> u64 {
    1 << (FANOUT_BITS as u64 * (level - 1))
}

/// Logical blocks a tree of `levels` levels covers.
fn capacity(levels: u64) -> u64 {
    span(levels) * FANOUT
}

fn entry_off(b: &Base, node: u64, idx: u64) -> u64 {
    b.off(node) + idx * 8
}

fn index(lblk: u64, level: u64) -> u64 {
    (lblk / span(level)) % FANOUT
}

impl Radix {
    /// Offset of the level-1 entry for `lblk` if its path exists.
    fn leaf_entry(&self, b: &Base, pm: &Pm, ino: u32, lblk: u64) -> Option<u64> {
        let root = b.root(pm, ino);
        if root == 0 {
            return None;
        }
        let (levels, mut node) = split_root(root);
        if !(1..=LEVELS_MAX).contains(&levels) || lblk >= capacity(levels) || !b.valid(node) {
            return None;
        }
        for level in (2..=levels).rev() {
            let v = pm.load_u64(entry_off(b, node, index(lblk, level)));
            if v == 0 || !b.valid(v - 1) {
                return None;
            }
            node = v - 1;
        }
        Some(entry_off(b, node, index(lblk, 1)))
    }

    /// Grows the tree of `ino` until it covers `lblk`; returns (levels, root node).
    fn grow(&self, b: &Base, pm: &Pm, ino: u32, lblk: u64) -> io::Result<(u64, u64)> {
        let mut root = b.root(pm, ino);
        if root == 0 {
            let n = b.new_node(pm, 0)?;
            pm.fence();
            root = root_word(1, n);
            b.set_root(pm, ino, root);
        }
        let (mut levels, mut node) = split_root(root);
        if !(1..=LEVELS_MAX).contains(&levels) || !b.valid(node) {
            let off = super::tree::root_off(&b.geo, ino);
            return Err(corrupted(format!("radix root word {root:#x}"), off).into());
        }
        while lblk >= capacity(levels) {
            let n = b.new_node(pm, node)?;
            pm.store_u64(entry_off(b, n, 0), node + 1);
            pm.persist(entry_off(b, n, 0), 8);
            pm.fence();
            levels += 1;
            node = n;
            b.set_root(pm, ino, root_word(levels, node));
        }
        Ok((levels, node))
    }

    /// Builds the path to `lblk`'s leaf entry; returns its offset.
    fn build_path(&self, b: &Base, pm: &Pm, ino: u32, lblk: u64) -> io::Result<u64> {
        let (levels, mut node) = self.grow(b, pm, ino, lblk)?;
        for level in (2..=levels).rev() {
            let off = entry_off(b, node, index(lblk, level));
            let v = pm.load_u64(off);
            node = if v == 0 {
                let n = b.new_node(pm, node)?;
                pm.fence();
                pm.store_u64(off, n + 1);
                pm.persist(off, 8);
                pm.fence();
                n
            } else {
                v - 1
            };
        }
        Ok(entry_off(b, node, index(lblk, 1)))
    }

    /// Clears what `node` (at `level`, covering from `first`) maps in [from, to): leaf
    /// entries, and whole subtrees inside the range. Stores are written back, not fenced.
    #[allow(clippy::too_many_arguments)]
    fn clear(
        &self,
        b: &Base,
        pm: &Pm,
        node: u64,
        level: u64,
        first: u64,
        range: (u64, u64),
        out: &mut Dropped,
    ) {
        let (from, to) = range;
        for idx in 0..FANOUT {
            let lo = first + idx * span(level);
            let hi = lo + span(level);
            if hi <= from || lo >= to {
                continue;
            }
            let off = entry_off(b, node, idx);
            let v = pm.load_u64(off);
            if v == 0 || !b.valid(v - 1) {
                continue;
            }
            if level == 1 {
                out.data.push(v - 1);
            } else if from <= lo && hi <= to {
                self.collect(b, pm, v - 1, level - 1, out);
            } else {
                self.clear(b, pm, v - 1, level - 1, lo, range, out);
                continue;
            }
            pm.store_u64(off, 0);
            pm.persist(off, 8);
        }
    }

    /// Adds every block of the subtree at `node` to `out`.
    fn collect(&self, b: &Base, pm: &Pm, node: u64, level: u64, out: &mut Dropped) {
        out.nodes.push(node);
        for idx in 0..FANOUT {
            let v = pm.load_u64(entry_off(b, node, idx));
            if v == 0 || !b.valid(v - 1) {
                continue;
            }
            if level == 1 {
                out.data.push(v - 1);
            } else {
                self.collect(b, pm, v - 1, level - 1, out);
            }
        }
    }

    /// Clears [from, to) of `ino`'s tree (not fenced); a range from 0 that covers the whole
    /// tree drops it with the root word.
    fn clear_range(&self, b: &Base, pm: &Pm, ino: u32, from: u64, to: u64) -> Dropped {
        let mut out = Dropped::default();
        let root = b.root(pm, ino);
        let (levels, node) = split_root(root);
        if root == 0 || !(1..=LEVELS_MAX).contains(&levels) || !b.valid(node) {
            return out;
        }
        if from == 0 && to >= capacity(levels) {
            self.collect(b, pm, node, levels, &mut out);
            let off = super::tree::root_off(&b.geo, ino);
            pm.store_u64(off, 0);
            pm.persist(off, 8);
        } else {
            self.clear(b, pm, node, levels, 0, (from, to), &mut out);
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn walk_node(
        &self,
        pm: &Pm,
        geo: &Geometry,
        node: u64,
        level: u64,
        first: u64,
        visit: &mut dyn FnMut(Reach) -> bool,
    ) -> Result<(), Corrupted> {
        let base_off = geo.data_off(node);
        for idx in 0..FANOUT {
            let off = base_off + idx * 8;
            let v = pm.load_u64(off);
            if v == 0 {
                continue;
            }
            let p = v - 1;
            if p >= geo.data_blocks {
                return Err(corrupted(
                    format!("radix node {node}: entry {idx} points past the data region ({v:#x})"),
                    off,
                ));
            }
            let lblk = first + idx * span(level);
            if lblk >= 1 << 32 {
                return Err(corrupted(
                    format!("radix node {node}: entry {idx} maps past the largest file"),
                    off,
                ));
            }
            if level == 1 {
                visit(Reach::Data {
                    lblk,
                    pblk: p,
                    pending: false,
                });
            } else if visit(Reach::Node(p)) {
                self.walk_node(pm, geo, p, level - 1, lblk, visit)?;
            }
        }
        Ok(())
    }
}

/// Blocks a clear dropped: data blocks and nodes.
#[derive(Default)]
struct Dropped {
    data: Vec<u64>,
    nodes: Vec<u64>,
}

impl BlockTree for Radix {
    const KIND: MappingKind = MappingKind::Radix;

    fn lookup(&self, b: &Base, pm: &Pm, ino: u32, lblk: u32) -> Option<u64> {
        let off = self.leaf_entry(b, pm, ino, lblk as u64)?;
        let v = pm.load_u64(off);
        (v != 0 && b.valid(v - 1)).then(|| v - 1)
    }

    fn claim(&self, b: &Base, pm: &Pm, _j: &Journal, ino: u32, lblk: u32) -> io::Result<Claim> {
        let entry = self.build_path(b, pm, ino, lblk as u64)?;
        // Next to the previous block of the file, so sequential writes get contiguous runs.
        let goal = b.hinted_goal(ino, lblk as u64).unwrap_or_else(|| {
            lblk.checked_sub(1)
                .and_then(|l| self.lookup(b, pm, ino, l))
                .map_or((entry - b.off(0)) / crate::layout::BLOCK_SIZE + 1, |p| {
                    p + 1
                })
        });
        let pblk = b.alloc.alloc(pm, goal)?;
        b.note_claim(ino, lblk as u64, pblk);
        Ok(Claim { pblk, prior: 0 })
    }

    fn abandon(&self, b: &Base, pm: &Pm, _j: &Journal, c: Claim, _ino: u32, _lblk: u32) {
        // Nothing points at a claimed block yet; the nodes built for it stay (empty).
        b.alloc.release(pm, c.pblk);
    }

    fn publish_in(&self, b: &Base, tx: &mut Tx<'_>, c: Claim, ino: u32, lblk: u32) {
        let off = self
            .leaf_entry(b, tx.pm(), ino, lblk as u64)
            .expect("claim built the path");
        tx.write_u64(off, c.pblk + 1);
    }

    fn publish(&self, b: &Base, pm: &Pm, c: Claim, ino: u32, lblk: u32) {
        let off = self
            .leaf_entry(b, pm, ino, lblk as u64)
            .expect("claim built the path");
        pm.store_u64(off, c.pblk + 1);
        pm.persist(off, 8);
    }

    fn unmap(
        &self,
        b: &Base,
        pm: &Pm,
        _j: &Journal,
        ino: u32,
        from: u64,
        to: u64,
    ) -> io::Result<Vec<u64>> {
        let out = self.clear_range(b, pm, ino, from, to);
        pm.fence();
        for &n in &out.nodes {
            b.alloc.release(pm, n);
        }
        Ok(out.data)
    }

    fn walk(
        &self,
        pm: &Pm,
        geo: &Geometry,
        root: u64,
        visit: &mut dyn FnMut(Reach) -> bool,
    ) -> Result<(), Corrupted> {
        let (levels, node) = checked_root(root, LEVELS_MAX, geo, "radix")?;
        if visit(Reach::Node(node)) {
            self.walk_node(pm, geo, node, levels, 0, visit)?;
        }
        Ok(())
    }

    fn trim(&self, b: &Base, pm: &Pm, _j: &Journal, ino: u32, allowed: u64) -> u64 {
        self.clear_range(b, pm, ino, allowed, u64::MAX).data.len() as u64
    }
}
