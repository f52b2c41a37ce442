//! Per-file extent tree (Neal et al., Fig. 1; ext4-like) with a per-file cursor.
//!
//! Node (one 4 KiB block): word 0 is the header, `magic u16 | count u16 | level u16 | 0 u16`
//! (level 0 = leaf); bytes 8..16 are zero; entries of 16 bytes follow, at most 255.
//! - Leaf entry: word 0 = `lblk u32 | len u31 | pending u1` (len >= 1), word 1 = first data
//!   block. Logical blocks [lblk, lblk + len) map data blocks [pblk, pblk + len).
//! - Index entry: word 0 = `first u32 | 0 u32`, word 1 = child node.
//!
//! Entries of a node are not kept sorted: a child covers from its `first` up to the next
//! larger `first` in the node (the smallest entry covers from the node's own lower bound), so
//! adding or removing an entry touches at most three words. Lookup scans a node (255 entries
//! at most); the per-file cursor (the last extent found) answers sequential lookups first.
//!
//! Crash consistency:
//! - A claim first splits every full node on its path (top-down, each split in its own
//!   transaction: the two halves are written to free blocks, then the parent's pointer and
//!   entry count, or the root word, are journaled), so the leaf has room. It then either
//!   extends an extent (one word) or adds a pending entry (entry, fence, count): a pending
//!   extent maps nothing until published, and recovery drops it. Only past what the inode may
//!   map (where recovery trims anyway) does a claim extend a published extent directly.
//! - Publishing clears the pending bit: one aligned word, staged in the caller's transaction
//!   (`publish_in`) or stored directly (`publish`).
//! - Unmapping rewrites each leaf it changes whole, in one transaction per leaf.

use std::io;

use parking_lot::Mutex;

use super::tree::{checked_root, root_off, root_word, split_root, Base, BlockTree, Reach};
use super::{Claim, MappingKind};
use crate::fs::mount::allowed_blocks;
use crate::journal::{Journal, Tx};
use crate::layout::inode::{Inode, INODE_SIZE};
use crate::layout::superblock::Geometry;
use crate::layout::{corrupted, Corrupted, BLOCK_SIZE};
use crate::media::Pm;

pub const MAGIC: u64 = 0xE7E1;
pub const ENTRIES_MAX: usize = 255;
const ENTRY_START: u64 = 16;
const PENDING: u64 = 1 << 63;
/// Longest extent (the length field has 31 bits).
const LEN_MAX: u64 = (1 << 31) - 1;
/// A root of level 5 indexes 255^5 extents, more than a file of 2^32 blocks can have.
pub const LEVELS_MAX: u64 = 6;
/// Logical blocks of the largest file.
const LBLK_END: u64 = 1 << 32;
const CURSOR_SHARDS: usize = 64;

/// A decoded entry: leaf (lblk, len, pblk, pending) or index (first, 0, child, false).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: u64,
    pub len: u64,
    pub ptr: u64,
    pub pending: bool,
}

impl Entry {
    fn decode(w0: u64, w1: u64) -> Entry {
        Entry {
            key: w0 & 0xffff_ffff,
            len: (w0 >> 32) & LEN_MAX,
            ptr: w1,
            pending: w0 & PENDING != 0,
        }
    }

    fn w0(&self) -> u64 {
        self.key | self.len << 32 | if self.pending { PENDING } else { 0 }
    }

    fn end(&self) -> u64 {
        self.key + self.len
    }
}

/// A node read from media, checked enough to be used safely.
struct Node {
    level: u64,
    entries: Vec<Entry>,
}

fn header(count: usize, level: u64) -> u64 {
    MAGIC | (count as u64) << 16 | level << 32
}

fn entry_off(b: &Base, node: u64, i: usize) -> u64 {
    b.off(node) + ENTRY_START + i as u64 * 16
}

fn encode(level: u64, entries: &[Entry]) -> Vec<u8> {
    assert!(entries.len() <= ENTRIES_MAX);
    let mut v = vec![0u8; BLOCK_SIZE as usize];
    v[..8].copy_from_slice(&header(entries.len(), level).to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        let o = ENTRY_START as usize + i * 16;
        v[o..o + 8].copy_from_slice(&e.w0().to_le_bytes());
        v[o + 8..o + 16].copy_from_slice(&e.ptr.to_le_bytes());
    }
    v
}

/// Reads node `p`, or says what is wrong with it.
fn read_node(pm: &Pm, geo: &Geometry, p: u64) -> Result<Node, Corrupted> {
    if p >= geo.data_blocks {
        return Err(corrupted(
            format!("extent node {p}: past the data region"),
            0,
        ));
    }
    let off = geo.data_off(p);
    let h = pm.load_u64(off);
    let count = ((h >> 16) & 0xffff) as usize;
    if h & 0xffff != MAGIC || count > ENTRIES_MAX || (h >> 32) >= LEVELS_MAX || h >> 48 != 0 {
        return Err(corrupted(
            format!("extent node {p}: bad header {h:#x}"),
            off,
        ));
    }
    let level = h >> 32;
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        let eo = off + ENTRY_START + i as u64 * 16;
        let e = Entry::decode(pm.load_u64(eo), pm.load_u64(eo + 8));
        // Every entry is checked as it is read, so no caller can index past the data region
        // or walk a range of 2^31 blocks a damaged length claims.
        let ok = if level == 0 {
            e.len > 0
                && e.end() <= LBLK_END
                && e.ptr
                    .checked_add(e.len)
                    .is_some_and(|end| end <= geo.data_blocks)
        } else {
            e.w0() >> 32 == 0 && e.ptr < geo.data_blocks
        };
        if !ok {
            return Err(corrupted(
                format!("extent node {p}: entry {i} {e:?} outside the data region or files"),
                eo,
            ));
        }
        entries.push(e);
    }
    Ok(Node { level, entries })
}

/// The entry of an index node whose child covers `lblk`.
fn child_for(entries: &[Entry], lblk: u64) -> Option<usize> {
    let below = (0..entries.len())
        .filter(|&i| entries[i].key <= lblk)
        .max_by_key(|&i| entries[i].key);
    below.or_else(|| (0..entries.len()).min_by_key(|&i| entries[i].key))
}

/// One step of a path from the root: the node, its contents, and its entry in the parent.
struct Step {
    node: u64,
    n: Node,
    in_parent: usize,
}

pub struct Extent {
    /// Per-file cursor: the last published extent a lookup found, as (ino, lblk, len, pblk);
    /// sharded by inode so lookups of different files do not contend.
    cursors: Vec<Mutex<(u32, u64, u64, u64)>>,
}

impl Default for Extent {
    fn default() -> Self {
        Self::new()
    }
}

impl Extent {
    pub fn new() -> Extent {
        Extent {
            cursors: (0..CURSOR_SHARDS)
                .map(|_| Mutex::new((0, 0, 0, 0)))
                .collect(),
        }
    }

    fn cursor(&self, ino: u32) -> &Mutex<(u32, u64, u64, u64)> {
        &self.cursors[ino as usize % CURSOR_SHARDS]
    }

    fn forget(&self, ino: u32) {
        let mut c = self.cursor(ino).lock();
        if c.0 == ino {
            *c = (0, 0, 0, 0);
        }
    }

    /// The path from the root of `ino` to the leaf that covers `lblk`.
    fn path(&self, b: &Base, pm: &Pm, ino: u32, lblk: u64) -> Result<Vec<Step>, Corrupted> {
        let root = b.root(pm, ino);
        let (levels, mut node) = split_root(root);
        if root == 0 || !(1..=LEVELS_MAX).contains(&levels) {
            return Err(corrupted(
                format!("extent root word {root:#x}"),
                root_off(&b.geo, ino),
            ));
        }
        let mut path: Vec<Step> = Vec::new();
        let mut in_parent = 0;
        for level in (0..levels).rev() {
            let n = read_node(pm, &b.geo, node)?;
            if n.level != level {
                return Err(corrupted(format!("extent node {node}: level"), b.off(node)));
            }
            let next = if level > 0 {
                let i = child_for(&n.entries, lblk)
                    .ok_or_else(|| corrupted(format!("extent node {node}: empty index"), 0))?;
                Some((i, n.entries[i].ptr))
            } else {
                None
            };
            path.push(Step { node, n, in_parent });
            if let Some((i, child)) = next {
                in_parent = i;
                node = child;
            }
        }
        Ok(path)
    }

    /// Makes sure `ino` has a tree (an empty leaf as root).
    fn ensure_root(&self, b: &Base, pm: &Pm, ino: u32) -> io::Result<()> {
        if b.root(pm, ino) != 0 {
            return Ok(());
        }
        let n = b.new_node(pm, 0)?;
        pm.store_u64(b.off(n), header(0, 0));
        pm.persist(b.off(n), 8);
        pm.fence();
        b.set_root(pm, ino, root_word(1, n));
        Ok(())
    }

    /// Splits full node `path[k]` (whose parent, if any, has room) into two new nodes.
    fn split(
        &self,
        b: &Base,
        pm: &Pm,
        j: &Journal,
        ino: u32,
        path: &[Step],
        k: usize,
    ) -> io::Result<()> {
        let s = &path[k];
        let mut entries = s.n.entries.clone();
        entries.sort_by_key(|e| e.key);
        let (lo, hi) = entries.split_at(entries.len() / 2);
        let is_root = k == 0;
        if is_root && path.len() as u64 >= LEVELS_MAX {
            return Err(io::Error::other("extent tree at its maximum depth"));
        }
        let mut got = Vec::new();
        for _ in 0..if is_root { 3 } else { 2 } {
            match b.alloc.alloc_node(pm, s.node) {
                Ok(p) => got.push(p),
                Err(e) => {
                    got.iter().for_each(|&p| b.alloc.release(pm, p));
                    return Err(e);
                }
            }
        }
        let (a, c) = (got[0], got[1]);
        let mut tx = j.begin(pm);
        tx.fresh(b.off(a), &encode(s.n.level, lo));
        tx.fresh(b.off(c), &encode(s.n.level, hi));
        let right = Entry {
            key: hi[0].key,
            len: 0,
            ptr: c,
            pending: false,
        };
        if is_root {
            let r = got[2];
            let left = Entry {
                key: lo[0].key,
                len: 0,
                ptr: a,
                pending: false,
            };
            tx.fresh(b.off(r), &encode(s.n.level + 1, &[left, right]));
            tx.write_u64(root_off(&b.geo, ino), root_word(path.len() as u64 + 1, r));
        } else {
            let p = &path[k - 1];
            let count = p.n.entries.len();
            tx.write_u64(entry_off(b, p.node, s.in_parent) + 8, a);
            let eo = entry_off(b, p.node, count);
            let mut bytes = right.w0().to_le_bytes().to_vec();
            bytes.extend_from_slice(&c.to_le_bytes());
            tx.fresh(eo, &bytes);
            tx.write_u64(b.off(p.node), header(count + 1, p.n.level));
        }
        tx.commit();
        b.alloc.release(pm, s.node);
        Ok(())
    }

    /// The leaf for `lblk` with room for one more entry, splitting full nodes on the way.
    fn leaf_with_room(
        &self,
        b: &Base,
        pm: &Pm,
        j: &Journal,
        ino: u32,
        lblk: u64,
    ) -> io::Result<Step> {
        self.ensure_root(b, pm, ino)?;
        // Each split either ends the loop or adds a level; LEVELS_MAX levels bound it.
        for _ in 0..2 * LEVELS_MAX + 2 {
            let mut path = self.path(b, pm, ino, lblk)?;
            match path.iter().position(|s| s.n.entries.len() >= ENTRIES_MAX) {
                Some(k) => self.split(b, pm, j, ino, &path, k)?,
                None => return Ok(path.pop().expect("a path has a leaf")),
            }
        }
        Err(io::Error::other("extent tree: splits did not converge"))
    }

    /// The leaf entry covering `lblk`: (leaf node, index, entry).
    fn find(&self, b: &Base, pm: &Pm, ino: u32, lblk: u64) -> Option<(u64, usize, Entry)> {
        if b.root(pm, ino) == 0 {
            return None;
        }
        let leaf = self.path(b, pm, ino, lblk).ok()?.pop()?;
        let i = leaf
            .n
            .entries
            .iter()
            .position(|e| e.key <= lblk && lblk < e.end())?;
        Some((leaf.node, i, leaf.n.entries[i]))
    }

    /// Every leaf of `ino`'s tree (node, contents); nodes that fail validation are skipped.
    fn leaves(&self, b: &Base, pm: &Pm, ino: u32) -> Vec<(u64, Node)> {
        let mut out = Vec::new();
        let root = b.root(pm, ino);
        let (levels, node) = split_root(root);
        if root == 0 || !(1..=LEVELS_MAX).contains(&levels) {
            return out;
        }
        let mut stack = vec![node];
        let mut budget = b.geo.data_blocks;
        while let Some(p) = stack.pop() {
            // A damaged tree may loop; no tree has more nodes than the data region.
            budget = match budget.checked_sub(1) {
                Some(x) => x,
                None => break,
            };
            let Ok(n) = read_node(pm, &b.geo, p) else {
                continue;
            };
            if n.level == 0 {
                out.push((p, n));
            } else {
                stack.extend(n.entries.iter().map(|e| e.ptr));
            }
        }
        out
    }

    /// Every node of `ino`'s tree and every data block it maps.
    fn everything(&self, b: &Base, pm: &Pm, ino: u32) -> (Vec<u64>, Vec<u64>) {
        let (mut nodes, mut data) = (Vec::new(), Vec::new());
        let root = b.root(pm, ino);
        if root == 0 {
            return (nodes, data);
        }
        let mut seen = std::collections::HashSet::new();
        let _ = self.walk(pm, &b.geo, root, &mut |r| {
            match r {
                Reach::Node(p) => {
                    if !seen.insert(p) {
                        return false;
                    }
                    nodes.push(p)
                }
                Reach::Data { pblk, .. } => {
                    if !seen.insert(pblk) {
                        return false;
                    }
                    data.push(pblk)
                }
            }
            true
        });
        (nodes, data)
    }

    /// Cuts [from, to) out of one leaf's entries (and pending entries with `drop_pending`);
    /// returns the new entries and the data blocks cut.
    fn cut(entries: &[Entry], from: u64, to: u64, drop_pending: bool) -> (Vec<Entry>, Vec<u64>) {
        let (mut out, mut freed) = (Vec::new(), Vec::new());
        for e in entries {
            if drop_pending && e.pending {
                freed.extend(e.ptr..e.ptr + e.len);
                continue;
            }
            let (s, t) = (e.key.max(from), e.end().min(to));
            if s >= t {
                out.push(*e);
                continue;
            }
            freed.extend(e.ptr + (s - e.key)..e.ptr + (t - e.key));
            if e.key < s {
                out.push(Entry {
                    len: s - e.key,
                    ..*e
                });
            }
            if t < e.end() {
                out.push(Entry {
                    key: t,
                    len: e.end() - t,
                    ptr: e.ptr + (t - e.key),
                    ..*e
                });
            }
        }
        (out, freed)
    }

    /// Cuts [from, to) out of every leaf, one transaction per changed leaf. A leaf that would
    /// overflow (an extent cut in the middle) is split first (`grow_ok`), or the cut stops.
    fn cut_range(
        &self,
        b: &Base,
        pm: &Pm,
        j: &Journal,
        ino: u32,
        range: (u64, u64),
        drop_pending: bool,
    ) -> io::Result<Vec<u64>> {
        let (from, to) = range;
        let mut freed = Vec::new();
        // Each round either finishes or splits one leaf, which ends the next round's overflow.
        for _ in 0..2 * LEVELS_MAX + 2 {
            let mut overflow = None;
            for (node, n) in self.leaves(b, pm, ino) {
                let (out, cut) = Self::cut(&n.entries, from, to, drop_pending);
                if cut.is_empty() {
                    continue;
                }
                if out.len() > ENTRIES_MAX {
                    overflow = n.entries.iter().find(|e| e.key < from).map(|e| e.key);
                    continue;
                }
                let mut tx = j.begin(pm);
                tx.write(b.off(node), &encode(0, &out));
                tx.commit();
                freed.extend(cut);
            }
            match overflow {
                None => return Ok(freed),
                Some(lblk) => {
                    let path = self.path(b, pm, ino, lblk)?;
                    let k = path.len() - 1;
                    let parents_full = path.iter().position(|s| s.n.entries.len() >= ENTRIES_MAX);
                    self.split(b, pm, j, ino, &path, parents_full.unwrap_or(k).min(k))?;
                }
            }
        }
        Err(io::Error::other("extent tree: unmap did not converge"))
    }

    fn walk_node(
        &self,
        pm: &Pm,
        geo: &Geometry,
        node: u64,
        level: u64,
        range: (u64, u64),
        visit: &mut dyn FnMut(Reach) -> bool,
    ) -> Result<(), Corrupted> {
        let n = read_node(pm, geo, node)?;
        let off = geo.data_off(node);
        let bad = |what: String| Err(corrupted(format!("extent node {node}: {what}"), off));
        if n.level != level {
            return bad(format!("level {} where {level} belongs", n.level));
        }
        let mut sorted = n.entries.clone();
        sorted.sort_by_key(|e| e.key);
        for (i, e) in sorted.iter().enumerate() {
            let lo = if i == 0 { range.0 } else { e.key };
            let hi = sorted.get(i + 1).map_or(range.1, |x| x.key);
            if level == 0 {
                if e.len == 0
                    || e.key < range.0
                    || e.end() > range.1
                    || e.ptr + e.len > geo.data_blocks
                {
                    return bad(format!("extent {e:?} outside its range or the data region"));
                }
                if sorted.get(i + 1).is_some_and(|x| x.key < e.end()) {
                    return bad(format!(
                        "extents overlap at logical block {}",
                        e.key + e.len - 1
                    ));
                }
                for k in 0..e.len {
                    visit(Reach::Data {
                        lblk: e.key + k,
                        pblk: e.ptr + k,
                        pending: e.pending,
                    });
                }
                continue;
            }
            if e.w0() >> 32 != 0
                || (i > 0 && (e.key <= sorted[i - 1].key || e.key < range.0))
                || e.ptr >= geo.data_blocks
            {
                return bad(format!("index entry {e:?}"));
            }
            if visit(Reach::Node(e.ptr)) {
                self.walk_node(pm, geo, e.ptr, level - 1, (lo, hi), visit)?;
            }
        }
        Ok(())
    }
}

impl BlockTree for Extent {
    const KIND: MappingKind = MappingKind::Extent;

    fn lookup(&self, b: &Base, pm: &Pm, ino: u32, lblk: u32) -> Option<u64> {
        let l = lblk as u64;
        {
            let c = self.cursor(ino).lock();
            if c.0 == ino && c.1 <= l && l < c.1 + c.2 {
                return Some(c.3 + (l - c.1));
            }
        }
        let (_, _, e) = self.find(b, pm, ino, l)?;
        if e.pending || e.ptr + e.len > b.geo.data_blocks {
            return None;
        }
        *self.cursor(ino).lock() = (ino, e.key, e.len, e.ptr);
        Some(e.ptr + (l - e.key))
    }

    fn claim(&self, b: &Base, pm: &Pm, j: &Journal, ino: u32, lblk: u32) -> io::Result<Claim> {
        let l = lblk as u64;
        let leaf = self.leaf_with_room(b, pm, j, ino, l)?;
        let inode = Inode::decode_raw(
            &pm.read_array::<{ INODE_SIZE as usize }>(b.geo.inode_off(ino as u64)),
        );
        // Blocks below `limit` become visible when published and must stay invisible until
        // then; blocks past it are invisible until the inode's size or count moves (and
        // recovery trims them), so they may join a published extent at once.
        let limit = allowed_blocks(&inode);
        let prev = leaf
            .n
            .entries
            .iter()
            .position(|e| e.end() == l && e.len < LEN_MAX);
        let goal = prev.map_or(leaf.node + 1, |i| {
            let e = leaf.n.entries[i];
            e.ptr + e.len
        });
        let pblk = b.alloc.alloc(pm, goal)?;
        if let Some(i) = prev.filter(|_| pblk == goal) {
            let e = leaf.n.entries[i];
            if (e.pending && (e.key < limit) == (l < limit)) || (!e.pending && l >= limit) {
                let off = entry_off(b, leaf.node, i);
                pm.store_u64(
                    off,
                    Entry {
                        len: e.len + 1,
                        ..e
                    }
                    .w0(),
                );
                pm.persist(off, 8);
                pm.fence();
                return Ok(Claim { pblk, prior: 0 });
            }
        }
        let count = leaf.n.entries.len();
        let e = Entry {
            key: l,
            len: 1,
            ptr: pblk,
            pending: true,
        };
        let off = entry_off(b, leaf.node, count);
        pm.store_u64(off, e.w0());
        pm.store_u64(off + 8, e.ptr);
        pm.persist(off, 16);
        pm.fence();
        pm.store_u64(b.off(leaf.node), header(count + 1, 0));
        pm.persist(b.off(leaf.node), 8);
        pm.fence();
        Ok(Claim { pblk, prior: 0 })
    }

    fn abandon(&self, b: &Base, pm: &Pm, j: &Journal, c: Claim, ino: u32, lblk: u32) {
        self.forget(ino);
        let l = lblk as u64;
        let Some((leaf, i, e)) = self
            .find(b, pm, ino, l)
            .filter(|x| x.2.ptr + (l - x.2.key) == c.pblk)
        else {
            return;
        };
        let off = entry_off(b, leaf, i);
        if e.len > 1 && l + 1 == e.end() {
            // The newest block of a run (callers abandon newest first): invisible either way.
            pm.store_u64(
                off,
                Entry {
                    len: e.len - 1,
                    ..e
                }
                .w0(),
            );
            pm.persist(off, 8);
            pm.fence();
        } else {
            let Ok(n) = read_node(pm, &b.geo, leaf) else {
                return;
            };
            let (out, _) = Self::cut(&n.entries, l, l + 1, false);
            if out.len() > ENTRIES_MAX {
                // A block inside a pending run with no room to split it: it stays in the run,
                // which recovery drops after a crash; unreachable with newest-first abandons.
                return;
            }
            let mut tx = j.begin(pm);
            tx.write(b.off(leaf), &encode(0, &out));
            tx.commit();
        }
        b.alloc.release(pm, c.pblk);
    }

    fn publish_in(&self, b: &Base, tx: &mut Tx<'_>, _c: Claim, ino: u32, lblk: u32) {
        let (leaf, i, e) = self
            .find(b, tx.pm(), ino, lblk as u64)
            .expect("claimed block is in the tree");
        if e.pending {
            tx.write_u64(
                entry_off(b, leaf, i),
                Entry {
                    pending: false,
                    ..e
                }
                .w0(),
            );
        }
    }

    fn publish(&self, b: &Base, pm: &Pm, _c: Claim, ino: u32, lblk: u32) {
        let (leaf, i, e) = self
            .find(b, pm, ino, lblk as u64)
            .expect("claimed block is in the tree");
        if e.pending {
            let off = entry_off(b, leaf, i);
            pm.store_u64(
                off,
                Entry {
                    pending: false,
                    ..e
                }
                .w0(),
            );
            pm.persist(off, 8);
        }
    }

    fn unmap(
        &self,
        b: &Base,
        pm: &Pm,
        j: &Journal,
        ino: u32,
        from: u64,
        to: u64,
    ) -> io::Result<Vec<u64>> {
        self.forget(ino);
        if b.root(pm, ino) == 0 || from >= to {
            return Ok(Vec::new());
        }
        if from == 0 && to >= LBLK_END {
            let (nodes, data) = self.everything(b, pm, ino);
            b.set_root(pm, ino, 0);
            nodes.iter().for_each(|&n| b.alloc.release(pm, n));
            return Ok(data);
        }
        self.cut_range(b, pm, j, ino, (from, to), false)
    }

    fn walk(
        &self,
        pm: &Pm,
        geo: &Geometry,
        root: u64,
        visit: &mut dyn FnMut(Reach) -> bool,
    ) -> Result<(), Corrupted> {
        let (levels, node) = checked_root(root, LEVELS_MAX, geo, "extent")?;
        if visit(Reach::Node(node)) {
            self.walk_node(pm, geo, node, levels - 1, (0, LBLK_END), visit)?;
        }
        Ok(())
    }

    fn trim(&self, b: &Base, pm: &Pm, j: &Journal, ino: u32, allowed: u64) -> u64 {
        self.forget(ino);
        if allowed == 0 {
            let (_, data) = self.everything(b, pm, ino);
            b.set_root(pm, ino, 0);
            return data.len() as u64;
        }
        // Cutting a tail and dropping pending entries never adds an entry: no allocation.
        self.cut_range(b, pm, j, ino, (allowed, u64::MAX), true)
            .map_or(0, |v| v.len() as u64)
    }
}
