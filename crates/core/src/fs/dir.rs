//! Directories: entries live on media in 64-byte units (layout/dentry.rs); lookups go through
//! a hash index in DRAM built from those units the first time a directory is used (as NOVA
//! rebuilds its DRAM indexes). Lookup, insert and remove are O(1) expected at any size; the
//! index costs about 33 bytes per entry. It holds a copy of each entry's header and, for names
//! of at most `NAME_INLINE` bytes, of its name, so such a lookup reads no media: a random
//! lookup in a large directory then misses the cache on the inode alone, not also on the
//! entry. Entries never move, so the unit number of an entry is a stable readdir cookie.

use std::sync::Arc;

use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};
use hashbrown::HashTable;
use parking_lot::{Mutex, RwLock};

use super::lookups::Changes;
use crate::layout::dentry::{self, Header, UNITS_MAX, UNITS_PER_BLOCK, UNIT_SIZE};
use crate::layout::inode::Inode;
use crate::layout::superblock::Geometry;
use crate::layout::{corrupted, Corrupted};
use crate::mapping::FileMap;
use crate::media::Pm;

/// The hash of a name in the DRAM index: a folded-multiply hash with a per-mount seed, so the
/// index cannot be degraded by names chosen to collide.
pub fn name_hash(seed: u64, name: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let fold = |a: u64, b: u64| {
        let m = (a as u128).wrapping_mul(b as u128);
        (m as u64) ^ ((m >> 64) as u64)
    };
    let mut h = seed ^ (name.len() as u64).wrapping_mul(K);
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        h = fold(h ^ u64::from_le_bytes(c.try_into().expect("8 bytes")), K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        h = fold(h ^ word_le(rest), K ^ 0x5555);
    }
    fold(h, K)
}

/// Up to 8 bytes of a name as a little-endian word, zero padded. Built byte by byte in a
/// register: a copy into a stack buffer (a call to memcpy) read back as one word stalls on
/// store forwarding, on every lookup.
pub(super) fn word_le(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .enumerate()
        .fold(0u64, |w, (i, &b)| w | (b as u64) << (8 * i))
}

/// Where a new entry goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InsertPlan {
    pub unit: u32,
    pub units: u32,
    /// The entry starts a new directory block (logical block number).
    pub new_block: Option<u32>,
    /// New high-water mark (== old when the entry reuses a free run).
    pub new_hw: u32,
    /// Where the units came from.
    source: Source,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    /// Free list `len-1`, with the unit count left over (pushed back as a smaller run).
    Free { list: usize, leftover: u32 },
    /// The high-water mark; `gap` units before `unit` were skipped at a block's end.
    HighWater { gap_start: u32, gap: u32 },
}

/// Name bytes an index slot holds; a longer name is compared on media.
const NAME_INLINE: usize = 16;

/// One entry as the index knows it: its first unit, the upper 32 bits of its name hash, and
/// copies of its header and (if short) its name. The copies follow the media under the
/// index's exclusive lock: inserts, removes and rename's in-place header stores
/// (`set_header`); another process's change drops the whole index (`Peers::dir_changed`).
#[derive(Clone, Copy)]
struct Slot {
    unit: u32,
    hh: u32,
    header: Header,
    name: [u8; NAME_INLINE],
}

/// A name as a slot holds it: zero padded if it fits, all zeros if it does not.
fn inline_name(name: &[u8]) -> [u8; NAME_INLINE] {
    let mut inline = [0; NAME_INLINE];
    if name.len() <= NAME_INLINE {
        inline[..name.len()].copy_from_slice(name);
    }
    inline
}

impl Slot {
    fn new(unit: u32, hh: u32, header: Header, name: &[u8]) -> Slot {
        Slot {
            unit,
            hh,
            header,
            name: inline_name(name),
        }
    }

    fn hash(&self) -> u64 {
        rehash(self.hh)
    }
}

/// The DRAM index of one directory.
pub struct DirIndex {
    /// Every entry, by name hash.
    table: HashTable<Slot>,
    /// Free runs of exactly i+1 units (start units).
    free: [Vec<u32>; UNITS_MAX as usize],
    /// High-water mark of units ever used (the inode's dir_units).
    pub hw: u32,
    /// Data block of each directory block.
    pub blocks: Vec<u64>,
}

/// What a lookup found.
#[derive(Clone, Copy, Debug)]
pub struct Found {
    pub unit: u32,
    pub header: Header,
}

#[inline]
fn h32(h: u64) -> u32 {
    (h >> 32) as u32
}

#[inline]
fn rehash(h: u32) -> u64 {
    (h as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl DirIndex {
    /// Builds the index of directory `ino` from its blocks.
    pub fn load(
        pm: &Pm,
        geo: &Geometry,
        map: &dyn FileMap,
        ino: u32,
        inode: &Inode,
        seed: u64,
    ) -> Result<DirIndex, Corrupted> {
        let nblocks = inode.dir_units.div_ceil(UNITS_PER_BLOCK);
        let mut idx = DirIndex {
            table: HashTable::new(),
            free: Default::default(),
            hw: inode.dir_units,
            blocks: Vec::new(),
        };
        let mut name = Vec::new();
        for lblk in 0..nblocks {
            let Some(pblk) = map.lookup(pm, ino, lblk) else {
                return Err(corrupted(
                    format!("directory {ino}: block {lblk} not mapped"),
                    geo.inode_off(ino as u64),
                ));
            };
            idx.blocks.push(pblk);
            let base = lblk * UNITS_PER_BLOCK;
            let limit = (inode.dir_units - base).min(UNITS_PER_BLOCK);
            let mut u = 0;
            let mut run_start = None;
            while u < limit {
                let unit = base + u;
                let off = idx.unit_off(geo, unit);
                match Header::decode(pm.load_u64(off), u, off, geo.inode_count)? {
                    Some(h) => {
                        if u + h.units as u32 > limit {
                            return Err(corrupted("directory entry past the high-water mark", off));
                        }
                        if let Some(s) = run_start.take() {
                            idx.push_free_run(s, unit - s);
                        }
                        read_name(pm, off, &h, &mut name);
                        let hh = h32(name_hash(seed, &name));
                        idx.table.insert_unique(
                            rehash(hh),
                            Slot::new(unit, hh, h, &name),
                            Slot::hash,
                        );
                        u += h.units as u32;
                    }
                    None => {
                        run_start.get_or_insert(unit);
                        u += 1;
                    }
                }
            }
            if let Some(s) = run_start {
                idx.push_free_run(s, base + limit - s);
            }
        }
        Ok(idx)
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Byte offset of unit `unit`.
    #[inline]
    pub fn unit_off(&self, geo: &Geometry, unit: u32) -> u64 {
        geo.data_off(self.blocks[(unit / UNITS_PER_BLOCK) as usize])
            + (unit % UNITS_PER_BLOCK) as u64 * UNIT_SIZE
    }

    /// Finds `name` (hash `h`). A name of at most `NAME_INLINE` bytes is answered from the
    /// index alone; a longer one is compared with the entry's name on media.
    pub fn find(&self, pm: &Pm, geo: &Geometry, name: &[u8], h: u64) -> Option<Found> {
        let hh = h32(h);
        // Padded as the slots hold it, so a short name compares as one fixed-size array.
        let inline = inline_name(name);
        let e = self.table.find(rehash(hh), |e| {
            e.hh == hh
                && e.header.name_len as usize == name.len()
                && if name.len() <= NAME_INLINE {
                    e.name == inline
                } else {
                    name_matches(pm, self.unit_off(geo, e.unit), name)
                }
        })?;
        Some(Found {
            unit: e.unit,
            header: e.header,
        })
    }

    /// Chooses units for an entry of `units` units without changing the index.
    pub fn plan_insert(&self, units: u32) -> InsertPlan {
        for list in (units as usize - 1)..UNITS_MAX as usize {
            if let Some(&unit) = self.free[list].last() {
                let leftover = list as u32 + 1 - units;
                return InsertPlan {
                    unit,
                    units,
                    new_block: None,
                    new_hw: self.hw,
                    source: Source::Free { list, leftover },
                };
            }
        }
        let in_block = self.hw % UNITS_PER_BLOCK;
        let (gap_start, gap) = if in_block != 0 && in_block + units > UNITS_PER_BLOCK {
            (self.hw, UNITS_PER_BLOCK - in_block)
        } else {
            (self.hw, 0)
        };
        let unit = self.hw + gap;
        let new_block = unit
            .is_multiple_of(UNITS_PER_BLOCK)
            .then_some(unit / UNITS_PER_BLOCK);
        InsertPlan {
            unit,
            units,
            new_block,
            new_hw: unit + units,
            source: Source::HighWater { gap_start, gap },
        }
    }

    /// Records a committed insert of the entry `header`, `name` (hash `h`).
    pub fn apply_insert(
        &mut self,
        plan: &InsertPlan,
        h: u64,
        header: &Header,
        name: &[u8],
        new_block_pblk: Option<u64>,
    ) {
        match plan.source {
            Source::Free { list, leftover } => {
                self.free[list].pop();
                if leftover > 0 {
                    self.push_free_run(plan.unit + plan.units, leftover);
                }
            }
            Source::HighWater { gap_start, gap } => {
                if gap > 0 {
                    self.push_free_run(gap_start, gap);
                }
                self.hw = plan.new_hw;
            }
        }
        if let Some(p) = new_block_pblk {
            self.blocks.push(p);
        }
        let hh = h32(h);
        self.table.insert_unique(
            rehash(hh),
            Slot::new(plan.unit, hh, *header, name),
            Slot::hash,
        );
    }

    /// Records a committed removal of the entry at `unit`.
    pub fn apply_remove(&mut self, unit: u32, units: u32, h: u64) {
        let hh = h32(h);
        if let Ok(e) = self.table.find_entry(rehash(hh), |e| e.unit == unit) {
            e.remove();
        }
        self.push_free_run(unit, units);
    }

    /// Records a committed in-place store of the header of the entry at `unit` (hash `h`):
    /// rename's replace and exchange give an existing name another inode.
    pub fn set_header(&mut self, unit: u32, h: u64, header: Header) {
        let hh = h32(h);
        if let Some(e) = self.table.find_mut(rehash(hh), |e| e.unit == unit) {
            e.header = header;
        }
    }

    fn push_free_run(&mut self, mut start: u32, mut len: u32) {
        while len > 0 {
            let take = len.min(UNITS_MAX);
            self.free[take as usize - 1].push(start);
            start += take;
            len -= take;
        }
    }

    /// Calls `f(unit, header, name)` for every entry at or after `start` in unit order, until
    /// `f` returns false.
    pub fn scan(
        &self,
        pm: &Pm,
        geo: &Geometry,
        start: u32,
        mut f: impl FnMut(u32, &Header, &[u8]) -> bool,
    ) {
        let mut u = start;
        let mut name = Vec::new();
        while u < self.hw {
            let off = self.unit_off(geo, u);
            match Header::decode(pm.load_u64(off), u % UNITS_PER_BLOCK, off, geo.inode_count) {
                Ok(Some(h)) => {
                    read_name(pm, off, &h, &mut name);
                    if !f(u, &h, &name) {
                        return;
                    }
                    u += h.units as u32;
                }
                // Free, continuation or (already reported by load) damaged unit.
                _ => u += 1,
            }
        }
    }
}

/// The name bytes of the entry at `off`, unit by unit. Only the name parts are read: the
/// first word of each unit is a header that a concurrent remove or rename may store to
/// (atomically) while this runs under the index's read lock, so no copy covers it.
fn name_pieces(off: u64, name_len: usize) -> impl Iterator<Item = (u64, usize)> {
    (0..name_len.div_ceil(dentry::NAME_PER_UNIT)).map(move |i| {
        let at = i * dentry::NAME_PER_UNIT;
        (
            off + i as u64 * UNIT_SIZE + 8,
            dentry::NAME_PER_UNIT.min(name_len - at),
        )
    })
}

fn read_name(pm: &Pm, off: u64, h: &Header, name: &mut Vec<u8>) {
    name.clear();
    let mut buf = [0u8; dentry::NAME_PER_UNIT];
    for (at, len) in name_pieces(off, h.name_len as usize) {
        pm.read(at, &mut buf[..len]);
        name.extend_from_slice(&buf[..len]);
    }
}

/// Whether the entry at `off`, whose name has `name.len()` bytes, is `name`.
fn name_matches(pm: &Pm, off: u64, name: &[u8]) -> bool {
    if name.len() <= dentry::NAME_PER_UNIT {
        // Most names fit the first unit, right after its header word.
        return pm.bytes_eq(off + 8, name);
    }
    name_pieces(off, name.len())
        .zip(name.chunks(dentry::NAME_PER_UNIT))
        .all(|((at, _), c)| pm.bytes_eq(at, c))
}

/// A directory's DRAM state: the index (built on first use) and the inode generation it
/// belongs to, so a stale handle on a removed-and-reused inode is noticed.
///
/// Two locks, so that lookups do not wait for another thread's journal transaction:
/// `modify` serialises the operations that change the directory's entries (create, link,
/// remove, rename) for their whole length, while `index` is taken exclusively only for the
/// moments a committed change is applied to the DRAM index (and to build it). A modifier
/// plans and commits under a shared `index` lock, next to concurrent lookups; since it
/// holds `modify`, nobody else changes the index in between.
pub struct DirState {
    pub generation: u32,
    pub modify: Mutex<()>,
    pub index: RwLock<Option<DirIndex>>,
}

impl DirState {
    fn new(generation: u32) -> Arc<Self> {
        Arc::new(DirState {
            generation,
            modify: Mutex::new(()),
            index: RwLock::new(None),
        })
    }
}

const SHARDS: usize = 64;

/// Directory states by inode number, sharded so lookups in different directories do not
/// meet on one lock; a shard is read-locked by lookups and write-locked only to add or drop
/// a directory, so lookups in one busy directory share it.
///
/// Each shard is a `ShardedLock`: a reader locks only its own thread's lock, so two threads
/// walking the same directories (the root, above all) do not bounce one lock word between
/// their cores on every path component; adding or dropping a directory locks them all.
pub struct DirCache {
    shards: Vec<ShardedLock<Shard>>,
    /// The change counters of the per-thread lookup cache (lookups.rs).
    pub changes: Changes,
}

type Shard = hashbrown::HashMap<u32, Arc<DirState>>;

impl Default for DirCache {
    fn default() -> Self {
        DirCache {
            shards: (0..SHARDS)
                .map(|_| ShardedLock::new(hashbrown::HashMap::new()))
                .collect(),
            changes: Changes::default(),
        }
    }
}

impl DirCache {
    /// The cached state of directory `ino`, if any. It may be stale: the caller checks its
    /// generation against the inode.
    pub fn peek(&self, ino: u32) -> Option<Arc<DirState>> {
        self.read(ino).get(&ino).cloned()
    }

    // A panic while a shard was locked left it as consistent as any map after a panicked
    // insert or remove: the poison flag is ignored.
    fn read(&self, ino: u32) -> ShardedLockReadGuard<'_, Shard> {
        self.shards[ino as usize % SHARDS]
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self, ino: u32) -> ShardedLockWriteGuard<'_, Shard> {
        self.shards[ino as usize % SHARDS]
            .write()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The state of directory `ino` with inode generation `generation`, created if absent or
    /// stale.
    pub fn get(&self, ino: u32, generation: u32) -> Arc<DirState> {
        if let Some(ds) = self.peek(ino).filter(|d| d.generation == generation) {
            return ds;
        }
        let mut shard = self.write(ino);
        let e = shard
            .entry(ino)
            .or_insert_with(|| DirState::new(generation));
        if e.generation != generation {
            self.changes.bump(ino);
            *e = DirState::new(generation);
        }
        e.clone()
    }

    pub fn remove(&self, ino: u32) {
        self.changes.bump(ino);
        self.write(ino).remove(&ino);
    }

    /// Forgets every directory (their indexes are rebuilt from media on next use).
    pub fn clear(&self) {
        self.changes.bump_all();
        for s in &self.shards {
            s.write().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }

    /// Bytes of DRAM held by the indexes (approximate), for `info`.
    pub fn dram_bytes(&self) -> u64 {
        let mut total = 0u64;
        for s in &self.shards {
            for d in s.read().unwrap_or_else(|p| p.into_inner()).values() {
                total += 64;
                if let Some(idx) = d.index.read().as_ref() {
                    total += idx.table.capacity() as u64 * (size_of::<Slot>() as u64 + 1)
                        + idx.blocks.capacity() as u64 * 8;
                    total += idx
                        .free
                        .iter()
                        .map(|f| f.capacity() as u64 * 4)
                        .sum::<u64>();
                }
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::inode::FileType;

    fn hdr(units: u8) -> Header {
        Header {
            units,
            ..Header::new(5, 1, FileType::File)
        }
    }

    #[test]
    fn plan_skips_block_end_and_reuses_free_runs() {
        let mut idx = DirIndex {
            table: HashTable::new(),
            free: Default::default(),
            hw: 0,
            blocks: vec![],
        };
        let p = idx.plan_insert(1);
        assert_eq!((p.unit, p.new_block, p.new_hw), (0, Some(0), 1));
        idx.apply_insert(&p, 1, &hdr(1), b"a", Some(10));
        idx.hw = 62;
        let p = idx.plan_insert(3);
        assert_eq!((p.unit, p.new_block, p.new_hw), (64, Some(1), 67));
        idx.apply_insert(&p, 2, &hdr(3), b"b", Some(11));
        // The two units skipped at the end of block 0 are reused by a 2-unit entry.
        let p = idx.plan_insert(2);
        assert_eq!((p.unit, p.new_block, p.new_hw), (62, None, 67));
        idx.apply_insert(&p, 3, &hdr(2), b"c", None);
        idx.apply_remove(64, 3, 2);
        let p = idx.plan_insert(1);
        assert_eq!(p.unit, 64);
        idx.apply_insert(&p, 4, &hdr(1), b"d", None);
        let p = idx.plan_insert(2);
        assert_eq!(p.unit, 65);
    }

    /// Names whose hashes agree are told apart by the bytes the index holds, and a header
    /// stored in place (rename over a name) is what the next lookup answers.
    #[test]
    fn short_names_are_answered_from_the_index() {
        let geo = Geometry::compute(256, None).unwrap();
        let pm = Pm::in_memory(256 * crate::layout::BLOCK_SIZE);
        let mut idx = DirIndex {
            table: HashTable::new(),
            free: Default::default(),
            hw: 0,
            blocks: vec![],
        };
        for (ino, name) in [(10, b"alpha"), (11, b"bravo")] {
            let p = idx.plan_insert(1);
            let h = Header::new(ino, name.len(), FileType::File);
            idx.apply_insert(&p, 42 << 32, &h, name, p.new_block.map(|_| 3));
        }
        let ino = |name: &[u8]| idx.find(&pm, &geo, name, 42 << 32).map(|f| f.header.ino);
        assert_eq!((ino(b"alpha"), ino(b"bravo")), (Some(10), Some(11)));
        assert_eq!(ino(b"charl"), None);
        assert_eq!(ino(b"alph"), None);
        let unit = idx.find(&pm, &geo, b"bravo", 42 << 32).unwrap().unit;
        idx.set_header(unit, 42 << 32, Header::new(12, 5, FileType::Dir));
        let f = idx.find(&pm, &geo, b"bravo", 42 << 32).unwrap();
        assert_eq!((f.header.ino, f.header.ftype), (12, FileType::Dir));
    }

    #[test]
    fn hash_is_seeded_and_spreads() {
        assert_ne!(name_hash(1, b"abc"), name_hash(2, b"abc"));
        assert_ne!(name_hash(1, b"abc"), name_hash(1, b"abd"));
        assert_ne!(name_hash(1, b"a\0"), name_hash(1, b"a"));
        let mut tops = std::collections::HashSet::new();
        for i in 0..10_000 {
            tops.insert(name_hash(7, format!("file{i}").as_bytes()) >> 32);
        }
        assert!(tops.len() > 9_990);
    }
}
