//! The repair (`nvmfs fsck -y`): rewrites the image in place until the check finds it clean.
//!
//! One pass, in this order:
//! 1. Superblocks: a damaged primary is rewritten from the replica, a damaged or different
//!    replica from the primary. Both bad, or a geometry larger than the image: unrepairable,
//!    nothing is written.
//! 2. The state block is marked "mounted" for the duration, so an interrupted repair leaves
//!    an image that the next mount or fsck treats as unclean.
//! 3. Journal: armed records are rolled back and torn ones cleared, as a mount does; a record
//!    pointing outside the image is cleared without being applied.
//! 4. Inodes: a record with an invalid type, an out-of-range size or a bad symlink length is
//!    cleared (freed; its entries and blocks go with it). Fields that can be recomputed are
//!    fixed instead: unknown flags, a directory's size, a special file's size, directory
//!    fields on a non-directory, an out-of-range preallocation end. The root is always kept
//!    as a directory.
//! 5. Hash table: reserved and invalid values and keys of free inodes become tombstones; of a
//!    key mapped twice the copy a lookup finds first is kept. Symlinks whose target block is
//!    gone are cleared.
//! 6. Directories (those with links, and those listed in them): the high-water mark is checked
//!    against the mapped blocks. When a block below it is missing or an entry lies past it, it
//!    is set to the end of the last entry, and missing blocks below that get an empty block
//!    (if they are fewer than the mapped ones; else the directory ends at its first hole).
//!    Damaged headers, invalid or duplicate names and entries to free inodes are removed; an
//!    entry's type is set to its inode's; stray words in continuation units are zeroed.
//! 7. Blocks past what their inode may map (EOF, preallocation, high-water mark) are freed.
//! 8. Tree: the root is unlisted, every other directory keeps one entry (the one its `..`
//!    names if possible), orphans (no links, no entries) are freed as a mount frees them, and
//!    directories not reachable from the root (detached trees, cycles) and files with links but
//!    no entry are reconnected to `/lost+found` (created if needed) as `#<ino>`.
//! 9. Counts: entry counts, link counts, `..` parents and block counts are recomputed.
//! 10. Probe chains: a free slot between a key's home and the key becomes a tombstone, so the
//!     key can be found again.
//!
//! If the check still finds something, the pass is repeated (at most 3 passes).
//!
//! Every change to the inode table, hash table and directory headers is applied through the
//! undo journal in batches (each batch atomic), new directory blocks are written to free space
//! before they are mapped, and everything is persisted and fenced through `Pm`. A crash during
//! a repair leaves an unclean image that another repair finishes.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{FsckReport, Problem, RepairReport};
use crate::fs::mount::{allowed_blocks, write_state};
use crate::fs::now_ns;
use crate::journal::{self, Journal, LaneState, Tx, HEADER_LEN};
use crate::layout::dentry::{self, Header, UNITS_PER_BLOCK, UNIT_SIZE};
use crate::layout::inode::{FileType, Inode, FILE_SIZE_MAX, INODE_SIZE, SYMLINK_MAX};
use crate::layout::state::{MountState, STATE_CLEAN, STATE_LEN, STATE_MOUNTED};
use crate::layout::superblock::{
    Geometry, Superblock, PRIMARY_BLOCK, REPLICA_BLOCK, ROOT_INO, STATE_BLOCK,
};
use crate::layout::BLOCK_SIZE;
use crate::mapping::hashfs::{self, HashFs, FREE, RESERVED, TOMBSTONE};
use crate::media::Pm;

/// Passes before giving up on an image the check still finds damaged.
const MAX_PASSES: usize = 3;

const LOST_FOUND: &[u8] = b"lost+found";

pub(super) fn run(pm: &Pm, report: &mut RepairReport, recheck: &mut dyn FnMut() -> FsckReport) {
    // The repairs below know HashFS's table; a tree mapping's region would be wrecked by them.
    // The mappings with a block allocator get what their crash recovery fixes, and no more.
    if let Ok((sb, _)) = crate::fs::mount::read_superblock(pm) {
        if sb.mapping != crate::mapping::MappingKind::HashFs {
            repair_allocator_mapping(pm, &sb, report, recheck);
            return;
        }
    }
    for _ in 0..MAX_PASSES {
        let before = report.repairs.len();
        if let Err(msg) = repair_once(pm, &mut report.repairs) {
            report.unrepairable = Some(msg);
            report.after = recheck();
            return;
        }
        report.after = recheck();
        let done = report.after.is_clean() && report.after.recovery.is_empty();
        if done || report.repairs.len() == before {
            return;
        }
    }
}

/// Repair of an image whose mapping takes its blocks from the bitmap allocator (extent,
/// radix, cuckoo, level): superblocks and journal as for HashFS, then the mapping's own crash
/// recovery, which drops pending claims, mappings past EOF and of free inodes, rewrites the
/// bitmap and recomputes block counts. A damaged mapping structure (recovery, tried first on a
/// scratch copy, fails: what a mount refuses) is refused before anything is written; damage
/// the recovery does not touch (inodes, directories) is left and reported.
fn repair_allocator_mapping(
    pm: &Pm,
    sb: &Superblock,
    report: &mut RepairReport,
    recheck: &mut dyn FnMut() -> FsckReport,
) {
    let kind = sb.mapping;
    let geo = &sb.geo;
    // Recovery on a scratch copy first: a structure it cannot recover (what a mount refuses)
    // is refused here before anything is written.
    let scratch = Pm::from_bytes(&pm.snapshot());
    fix_journal(&scratch, geo, &mut Vec::new());
    let bad = recover_mapping(kind, &scratch, geo, &mut Default::default()).err();
    drop(scratch);
    if let Some(e) = bad {
        report.unrepairable = Some(format!(
            "the {kind} mapping is damaged ({} at byte {:#x}): repair of a {kind} structure is not \
             implemented, nothing written (a mount refuses it too; restore the image from a copy)",
            e.what, e.offset
        ));
        report.after = report.before.clone();
        return;
    }
    let log = &mut report.repairs;
    let geo = match fix_superblocks(pm, log) {
        Ok(g) => g,
        Err(msg) => {
            report.unrepairable = Some(msg);
            report.after = report.before.clone();
            return;
        }
    };
    let state_off = STATE_BLOCK * BLOCK_SIZE;
    let state = MountState::decode(&pm.read_vec(state_off, STATE_LEN));
    let mut st = state.clone().unwrap_or_default();
    st.state = STATE_MOUNTED;
    write_state(pm, &st);
    fix_journal(pm, &geo, log);
    let mut rep = crate::fs::mount::RecoveryReport::default();
    let done = recover_mapping(kind, pm, &geo, &mut rep);
    if let Err(e) = done {
        // The same recovery succeeded on the scratch copy; only a changed image gets here.
        report.unrepairable = Some(format!("{kind} mapping recovery failed: {e}"));
        report.after = recheck();
        return;
    }
    st.state = STATE_CLEAN;
    write_state(pm, &st);
    let off = crate::mapping::balloc::bitmap_off(&geo);
    let before = &report.before;
    let found = before
        .problems
        .iter()
        .map(|p| (p.what.as_str(), p.offset))
        .chain(before.recovery.iter().map(|w| (w.as_str(), off)));
    for (what, at) in found {
        let fixed_by_recovery = ["bitmap", "past EOF", "in flight", "block count"]
            .iter()
            .any(|w| what.contains(w));
        if fixed_by_recovery {
            note(log, format!("{kind} mapping recovery: {what}"), at);
        }
    }
    note(
        log,
        format!(
            "{kind} mapping recovery: {} stray block(s) freed, {} block count(s) fixed, bitmap \
             rewritten from the mapping",
            rep.stray_blocks_freed, rep.block_counts_fixed
        ),
        off,
    );
    if !matches!(state, Some(ref s) if s.state == STATE_CLEAN) {
        note(
            log,
            "image was not unmounted cleanly: recovered and marked clean",
            state_off,
        );
    }
    report.after = recheck();
    if !report.after.is_clean() {
        report.unrepairable = Some(format!(
            "repair of {kind} images fixes what its crash recovery fixes (pending claims, \
             mappings past EOF or of free inodes, the bitmap, block counts); the other damage \
             reported is not repaired"
        ));
    }
}

/// The crash recovery of an allocator mapping, as after an unclean shutdown.
fn recover_mapping(
    kind: crate::mapping::MappingKind,
    pm: &Pm,
    geo: &Geometry,
    rep: &mut crate::fs::mount::RecoveryReport,
) -> Result<(), crate::layout::Corrupted> {
    use crate::mapping::{cuckoo, extent, level, radix, tree, MappingKind};
    match kind {
        MappingKind::Extent => tree::recover(&extent::Extent::new(), pm, geo, true, rep).map(drop),
        MappingKind::Radix => tree::recover(&radix::Radix, pm, geo, true, rep).map(drop),
        MappingKind::Cuckoo => cuckoo::recover(pm, geo, true, rep).map(drop),
        MappingKind::Level => level::recover(pm, geo, true, rep).map(drop),
        MappingKind::HashFs => unreachable!("HashFS is repaired by repair_once"),
    }
}

fn note(log: &mut Vec<Problem>, what: impl Into<String>, offset: u64) {
    log.push(Problem {
        what: what.into(),
        offset,
    });
}

fn repair_once(pm: &Pm, log: &mut Vec<Problem>) -> Result<(), String> {
    let geo = fix_superblocks(pm, log)?;
    let state_off = STATE_BLOCK * BLOCK_SIZE;
    let state = MountState::decode(&pm.read_vec(state_off, STATE_LEN));
    let mut st = state.clone().unwrap_or_default();
    st.state = STATE_MOUNTED;
    write_state(pm, &st);
    fix_journal(pm, &geo, log);
    let journal = Journal::new(&geo);
    let mut r = Repair::load(pm, &geo, log);
    r.fix_table();
    r.scan_dirs();
    r.drop_strays();
    let reconnect = r.fix_tree();
    r.reconnect(&reconnect);
    r.fix_counts();
    r.fix_chains();
    r.apply(&journal);
    fix_tier(pm, &geo, log)?;
    st.state = STATE_CLEAN;
    write_state(pm, &st);
    match state {
        None => note(
            log,
            "mount-state block damaged: rewritten as clean",
            state_off,
        ),
        Some(s) if s.state != STATE_CLEAN => note(
            log,
            "image was not unmounted cleanly: recovered and marked clean",
            state_off,
        ),
        Some(_) => {}
    }
    Ok(())
}

/// Drops the SSD tier's table entries that fsck reports (stale, or the older of two for one
/// key), as mount's recovery would. A damaged tier header cannot be rebuilt (its extent count
/// and UUID are nowhere else in the image).
fn fix_tier(pm: &Pm, geo: &Geometry, log: &mut Vec<Problem>) -> Result<(), String> {
    use crate::tier::check;
    let Ok((sb, _)) = crate::fs::mount::read_superblock(pm) else {
        return Ok(());
    };
    let hdr = match check::header(pm, &sb) {
        None => return Ok(()),
        Some(Ok(h)) => h,
        Some(Err(c)) => {
            return Err(format!(
                "{c}: the SSD tier's header cannot be rebuilt; its cold data is unreachable"
            ))
        }
    };
    let inodes: Vec<Option<Inode>> = (0..geo.inode_count)
        .map(|ino| {
            let off = geo.inode_off(ino);
            let i = Inode::decode_raw(&pm.read_array::<{ INODE_SIZE as usize }>(off));
            (ino > 0 && !i.is_free() && i.validate(off, geo.inode_count).is_ok()).then_some(i)
        })
        .collect();
    let (bad, _) = check::bad_entries(pm, &hdr, &inodes);
    for e in &bad {
        pm.store_u64(e.offset, 0);
        pm.persist(e.offset, 8);
        note(
            log,
            format!("SSD tier entry of SSD block {} dropped: {}", e.block, e.why),
            e.offset,
        );
    }
    pm.fence();
    Ok(())
}

fn fix_superblocks(pm: &Pm, log: &mut Vec<Problem>) -> Result<Geometry, String> {
    let bs = BLOCK_SIZE as usize;
    let (p_off, r_off) = (PRIMARY_BLOCK * BLOCK_SIZE, REPLICA_BLOCK * BLOCK_SIZE);
    let primary = Superblock::decode(&pm.read_vec(p_off, bs), p_off);
    let replica = Superblock::decode(&pm.read_vec(r_off, bs), r_off);
    let (sb, src, dst) = match (&primary, &replica) {
        (Ok(p), r) => (p.clone(), p_off, (r.as_ref() != Ok(p)).then_some(r_off)),
        (Err(_), Ok(r)) => (r.clone(), r_off, Some(p_off)),
        (Err(e), Err(_)) => {
            return Err(format!(
                "both superblocks are damaged ({e}); the geometry cannot be recovered: \
                 restore the image from a copy or format it again"
            ))
        }
    };
    let need = sb.geo.total_blocks * BLOCK_SIZE;
    if need > pm.len() {
        return Err(format!(
            "superblock: the geometry needs {need} bytes but the image has {}; \
             it was truncated or belongs to a larger file",
            pm.len()
        ));
    }
    if !sb.writable() {
        return Err(
            "superblock: read-only-compatible features this build does not know; not repairing"
                .into(),
        );
    }
    if let Some(dst) = dst {
        let bytes = pm.read_vec(src, bs);
        pm.write(dst, &bytes);
        pm.persist(dst, bs);
        pm.fence();
        let what = if dst == p_off {
            "primary superblock damaged: rewritten from the replica"
        } else {
            "superblock replica damaged or different: rewritten from the primary"
        };
        note(log, what, dst);
    }
    Ok(sb.geo)
}

fn fix_journal(pm: &Pm, geo: &Geometry, log: &mut Vec<Problem>) {
    for lane in 0..geo.journal_lanes {
        let off = geo.lane_off(lane);
        match journal::read_lane(pm, geo, lane, geo.total_blocks * BLOCK_SIZE) {
            Ok((LaneState::Idle, _)) => {}
            Ok((LaneState::Armed { entries }, undo)) => {
                journal::roll_back(pm, geo, lane, &undo);
                note(
                    log,
                    format!("journal lane {lane}: operation in flight rolled back ({entries} undo entries)"),
                    off,
                );
            }
            Ok((LaneState::Torn, _)) => {
                journal::clear_lane(pm, geo, lane);
                note(
                    log,
                    format!("journal lane {lane}: torn record cleared"),
                    off,
                );
            }
            Err(c) => {
                journal::clear_lane(pm, geo, lane);
                note(
                    log,
                    format!(
                        "journal lane {lane}: record with an invalid undo entry (at byte {}: \
                         outside the inode table..end of image, or past the record) cleared \
                         without being applied",
                        c.offset
                    ),
                    off,
                );
            }
        }
    }
}

/// A directory entry found (or added) by the repair.
struct Ent {
    dir: u32,
    unit: u32,
    off: u64,
    ino: u32,
    units: u32,
    name: Vec<u8>,
    live: bool,
}

/// The image as the repair wants it, built from the media and written back by `apply`.
struct Repair<'a> {
    pm: &'a Pm,
    geo: &'a Geometry,
    table: HashFs,
    log: &'a mut Vec<Problem>,
    /// Wanted inode records (None: free).
    inodes: Vec<Option<Inode>>,
    /// Link count on media before the repair.
    raw_nlink: Vec<u32>,
    /// Free on media before the repair.
    raw_free: Vec<bool>,
    /// The hash table on media, and as wanted.
    orig: Vec<u64>,
    tab: Vec<u64>,
    /// Mapped blocks of each inode: logical block -> slot (one each).
    maps: HashMap<u32, BTreeMap<u32, u64>>,
    /// Directory header words to store (offset -> value).
    words: BTreeMap<u64, u64>,
    /// New directory blocks (slot -> contents), written to free space before being mapped.
    new_blocks: BTreeMap<u64, Vec<u8>>,
    /// Name units of new entries in existing blocks (offset of unit byte 8 -> bytes).
    fresh: Vec<(u64, Vec<u8>)>,
    ents: Vec<Ent>,
    /// Directories entries are being added to (root, lost+found).
    targets: HashMap<u32, Target>,
}

/// Used units and names of a directory the repair adds entries to.
struct Target {
    used: Vec<bool>,
    names: HashSet<Vec<u8>>,
    /// Every unit below it is used.
    cursor: u32,
}

impl<'a> Repair<'a> {
    fn load(pm: &'a Pm, geo: &'a Geometry, log: &'a mut Vec<Problem>) -> Repair<'a> {
        let n = geo.inode_count as usize;
        let slots = geo.data_blocks as usize;
        let orig: Vec<u64> = (0..slots as u64)
            .map(|s| pm.load_u64(geo.slot_off(s)))
            .collect();
        let mut r = Repair {
            pm,
            geo,
            table: HashFs::new(geo, 0),
            log,
            inodes: vec![None; n],
            raw_nlink: vec![0; n],
            raw_free: vec![true; n],
            tab: orig.clone(),
            orig,
            maps: HashMap::new(),
            words: BTreeMap::new(),
            new_blocks: BTreeMap::new(),
            fresh: Vec::new(),
            ents: Vec::new(),
            targets: HashMap::new(),
        };
        for ino in 1..n {
            let off = geo.inode_off(ino as u64);
            let raw = Inode::decode_raw(&pm.read_array::<{ INODE_SIZE as usize }>(off));
            r.raw_free[ino] = raw.is_free();
            r.raw_nlink[ino] = raw.nlink;
            r.inodes[ino] = if ino as u64 == ROOT_INO {
                Some(r.salvage_root(raw, off))
            } else if raw.is_free() {
                None
            } else {
                r.salvage(ino as u32, raw, off)
            };
        }
        r
    }

    fn note(&mut self, what: impl Into<String>, offset: u64) {
        note(self.log, what, offset);
    }

    fn ino_off(&self, ino: u32) -> u64 {
        self.geo.inode_off(ino as u64)
    }

    fn inode(&self, ino: u32) -> Option<&Inode> {
        self.inodes.get(ino as usize).and_then(|i| i.as_ref())
    }

    fn is_dir(&self, ino: u32) -> bool {
        self.inode(ino).is_some_and(|i| i.is_dir())
    }

    /// The root is always kept, as a directory that is its own parent.
    fn salvage_root(&mut self, mut i: Inode, off: u64) -> Inode {
        if i.validate(off, self.geo.inode_count).is_ok()
            && i.is_dir()
            && i.parent == ROOT_INO as u32
        {
            return i;
        }
        if !i.is_dir() {
            let perm = if i.is_free() { 0o755 } else { i.mode & 0o7777 };
            i.mode = libc::S_IFDIR | perm;
        }
        i.flags = 0;
        i.size = 0;
        i.falloc_end = 0;
        i.parent = ROOT_INO as u32;
        self.note(
            "root inode damaged: made a directory that is its own parent (entries kept)",
            off,
        );
        i
    }

    /// Fixes what can be recomputed; None (clear) when the record's data cannot be trusted.
    fn salvage(&mut self, ino: u32, mut i: Inode, off: u64) -> Option<Inode> {
        let Some(ft) = i.file_type() else {
            self.note(
                format!(
                    "inode {ino}: invalid file type (mode {:#o}): cleared",
                    i.mode
                ),
                off,
            );
            return None;
        };
        if let Err(e) = i.validate(off, self.geo.inode_count) {
            let why = e
                .what
                .strip_prefix("inode: ")
                .unwrap_or(&e.what)
                .to_string();
            let clear = match ft {
                FileType::File => i.size > FILE_SIZE_MAX,
                FileType::Symlink => i.size == 0 || i.size > SYMLINK_MAX as u64,
                _ => false,
            };
            if clear {
                self.note(format!("inode {ino}: {why}: cleared"), off);
                return None;
            }
            i.flags = 0;
            if i.falloc_end > FILE_SIZE_MAX / BLOCK_SIZE {
                i.falloc_end = 0;
            }
            match ft {
                FileType::File => {}
                FileType::Symlink => i.falloc_end = 0,
                // Parent and entry counts are set from the tree below.
                FileType::Dir => {
                    i.size = 0;
                    i.falloc_end = 0;
                }
                _ => {
                    i.size = 0;
                    i.falloc_end = 0;
                    i.blocks = 0;
                }
            }
            self.note(format!("inode {ino}: {why}: fields fixed"), off);
        }
        if ft != FileType::Dir {
            i.dir_units = 0;
            i.dir_entries = 0;
        }
        Some(i)
    }

    /// Frees inode `ino` and its blocks.
    fn clear(&mut self, ino: u32) {
        self.inodes[ino as usize] = None;
        if let Some(m) = self.maps.remove(&ino) {
            for (_, s) in m {
                self.tab[s as usize] = TOMBSTONE;
            }
        }
    }

    /// Hash table: invalid and reserved values, keys of free inodes, keys mapped twice; then
    /// symlinks that lost their target block.
    fn fix_table(&mut self) {
        let (mut reserved, mut orphaned) = (0u64, 0u64);
        for s in 0..self.tab.len() {
            let v = self.tab[s];
            if v == FREE || v == TOMBSTONE {
                continue;
            }
            let off = self.geo.slot_off(s as u64);
            if v == RESERVED {
                self.tab[s] = TOMBSTONE;
                reserved += 1;
                continue;
            }
            let Some((ino, lblk)) = hashfs::split_key(v) else {
                self.tab[s] = TOMBSTONE;
                self.note(format!("hash slot {s}: invalid value {v:#x}: freed"), off);
                continue;
            };
            if self.inode(ino).is_none() {
                self.tab[s] = TOMBSTONE;
                orphaned += 1;
                continue;
            }
            let Some(other) = self.maps.get(&ino).and_then(|m| m.get(&lblk)).copied() else {
                self.maps.entry(ino).or_default().insert(lblk, s as u64);
                continue;
            };
            // Mapped twice: keep the copy a lookup meets first.
            let (keep, drop) =
                if self.table.probe_distance(v, other) <= self.table.probe_distance(v, s as u64) {
                    (other, s as u64)
                } else {
                    (s as u64, other)
                };
            self.maps.entry(ino).or_default().insert(lblk, keep);
            self.tab[drop as usize] = TOMBSTONE;
            self.note(
                format!(
                    "hash slot {drop}: inode {ino} block {lblk} mapped twice (kept slot {keep}): freed"
                ),
                self.geo.slot_off(drop),
            );
        }
        let table_off = self.geo.slot_off(0);
        if reserved > 0 {
            self.note(
                format!("{reserved} hash slot(s) left reserved: freed"),
                table_off,
            );
        }
        if orphaned > 0 {
            self.note(
                format!("{orphaned} block(s) mapped to free or cleared inodes: freed"),
                table_off,
            );
        }
        self.drop_unmapped_symlinks();
    }

    /// Clears symlinks whose target block is gone. Orphans are left alone: a crash inside
    /// `free_inode` leaves them half freed, and they are freed as orphans below.
    fn drop_unmapped_symlinks(&mut self) {
        for ino in 1..self.inodes.len() as u32 {
            let Some(i) = self.inode(ino) else { continue };
            if i.file_type() == Some(FileType::Symlink)
                && allowed_blocks(i) == 1
                && self.raw_nlink[ino as usize] != 0
                && !self.maps.get(&ino).is_some_and(|m| m.contains_key(&0))
            {
                self.clear(ino);
                self.note(
                    format!("symlink {ino}: target block not mapped: cleared"),
                    self.ino_off(ino),
                );
            }
        }
    }

    /// Checks a directory's high-water mark against its blocks. When a block below it is
    /// missing or an entry lies past it, the mark is set to the end of the last entry in any
    /// of its mapped blocks, and missing blocks below that get an empty block (if they are
    /// fewer than the mapped ones; otherwise the directory ends at its first missing block).
    fn fix_dir_extent(&mut self, d: u32) {
        let units = self.inode(d).expect("in use").dir_units;
        let max_lblk = u32::MAX / UNITS_PER_BLOCK;
        let blocks: Vec<(u32, u64)> = self
            .maps
            .get(&d)
            .map(|m| m.range(..max_lblk).map(|(&l, &s)| (l, s)).collect())
            .unwrap_or_default();
        // End of the last entry of each mapped block (blocks in order), and how many blocks
        // from 0 are mapped.
        let mut ends: Vec<(u32, u32)> = Vec::new();
        let mut prefix = 0u32;
        for &(lblk, slot) in &blocks {
            if lblk == prefix {
                prefix += 1;
            }
            let base = self.geo.data_off(slot);
            let mut u = 0;
            while u < UNITS_PER_BLOCK {
                let off = base + u as u64 * UNIT_SIZE;
                match Header::decode(self.pm.load_u64(off), u, off, self.geo.inode_count) {
                    Ok(Some(h)) => {
                        u += h.units as u32;
                        ends.push((lblk, lblk * UNITS_PER_BLOCK + u));
                    }
                    _ => u += 1,
                }
            }
        }
        // The end of the last entry in blocks below `lblk`.
        let end_before = |lblk: u32| {
            ends.iter()
                .rev()
                .find(|&&(l, _)| l < lblk)
                .map_or(0, |&(_, e)| e)
        };
        let last_end = end_before(max_lblk);
        if units.div_ceil(UNITS_PER_BLOCK) <= prefix && last_end <= units {
            return;
        }
        let why = if last_end > units {
            "entries past it"
        } else {
            "blocks below it not mapped"
        };
        let need = last_end.div_ceil(UNITS_PER_BLOCK);
        let mapped = blocks.iter().filter(|&&(l, _)| l < need).count() as u32;
        let mut new = last_end;
        if need - mapped > mapped {
            new = end_before(prefix);
        } else {
            for lblk in prefix..need {
                if self.maps.get(&d).is_some_and(|m| m.contains_key(&lblk)) {
                    continue;
                }
                let Some(s) = self.alloc_slot(hashfs::key(d, lblk)) else {
                    // No space: the directory ends before this block.
                    new = end_before(lblk);
                    break;
                };
                self.maps.entry(d).or_default().insert(lblk, s);
                self.new_blocks.insert(s, vec![0u8; BLOCK_SIZE as usize]);
                self.note(
                    format!("directory {d}: block {lblk} missing: replaced by an empty block"),
                    self.geo.slot_off(s),
                );
            }
        }
        self.inodes[d as usize].as_mut().expect("in use").dir_units = new;
        self.note(
            format!("directory {d}: high-water mark {units} units but {why}: set to {new}"),
            self.ino_off(d),
        );
    }

    /// Frees blocks past what their inode may map.
    fn drop_strays(&mut self) {
        let owners: Vec<u32> = self.maps.keys().copied().collect();
        for ino in owners {
            let allowed = allowed_blocks(self.inode(ino).expect("in use"));
            let Ok(from) = u32::try_from(allowed) else {
                continue;
            };
            let m = self.maps.get_mut(&ino).expect("present");
            let stray: Vec<(u32, u64)> = m.range(from..).map(|(&l, &s)| (l, s)).collect();
            for &(l, s) in &stray {
                m.remove(&l);
                self.tab[s as usize] = TOMBSTONE;
            }
            if !stray.is_empty() {
                self.note(
                    format!(
                        "inode {ino}: {} block(s) past what it may map: freed",
                        stray.len()
                    ),
                    self.ino_off(ino),
                );
            }
        }
    }

    /// Reads the entries of every directory that has links or is listed (orphan directories
    /// may be half freed and are not read); removes the bad ones, fixes entry types.
    fn scan_dirs(&mut self) {
        let n = self.inodes.len();
        let mut done = vec![false; n];
        let mut todo: Vec<u32> = (1..n as u32)
            .filter(|&d| self.is_dir(d) && (d as u64 == ROOT_INO || self.raw_nlink[d as usize] > 0))
            .collect();
        while !todo.is_empty() {
            for &d in &todo {
                done[d as usize] = true;
                self.fix_dir_extent(d);
                self.scan_dir(d);
            }
            todo = self
                .ents
                .iter()
                .filter(|e| e.live && !done[e.ino as usize] && self.is_dir(e.ino))
                .map(|e| e.ino)
                .collect();
            todo.sort_unstable();
            todo.dedup();
        }
    }

    fn scan_dir(&mut self, d: u32) {
        let n = self.geo.inode_count;
        let mut name = Vec::new();
        let hw = self.inode(d).expect("in use").dir_units;
        let mut names: HashSet<Vec<u8>> = HashSet::new();
        for lblk in 0..hw.div_ceil(UNITS_PER_BLOCK) {
            let Some(slot) = self.maps.get(&d).and_then(|m| m.get(&lblk)).copied() else {
                break;
            };
            let base = self.geo.data_off(slot);
            let limit = (hw - lblk * UNITS_PER_BLOCK).min(UNITS_PER_BLOCK);
            let mut u = 0;
            while u < limit {
                let off = base + u as u64 * UNIT_SIZE;
                let h = match Header::decode(self.pm.load_u64(off), u, off, n) {
                    Ok(None) => {
                        u += 1;
                        continue;
                    }
                    Ok(Some(h)) => h,
                    Err(c) => {
                        self.words.insert(off, 0);
                        self.note(format!("directory {d}: {}: cleared", c.what), off);
                        u += 1;
                        continue;
                    }
                };
                let units = h.units as u32;
                dentry::name_from_units(
                    &self.pm.read_vec(off, units as usize * UNIT_SIZE as usize),
                    h.name_len as usize,
                    &mut name,
                );
                let unit = lblk * UNITS_PER_BLOCK + u;
                self.ents.push(Ent {
                    dir: d,
                    unit,
                    off,
                    ino: h.ino,
                    units,
                    name: name.clone(),
                    live: true,
                });
                let k = self.ents.len() - 1;
                for j in 1..units as u64 {
                    let w = off + j * UNIT_SIZE;
                    if self.pm.load_u64(w) != 0 {
                        self.words.insert(w, 0);
                        self.note(
                            format!(
                                "directory {d}: entry {:?}: continuation unit {j} zeroed",
                                String::from_utf8_lossy(&name)
                            ),
                            w,
                        );
                    }
                }
                u += units;
                let why = if u > limit {
                    Some("runs past the high-water mark".to_string())
                } else if dentry::validate_name(&name).is_err() {
                    Some("invalid name".to_string())
                } else if names.contains(&name) {
                    Some("duplicate name".to_string())
                } else if self.inode(h.ino).is_none() {
                    Some(format!("points at free inode {}", h.ino))
                } else {
                    None
                };
                if let Some(why) = why {
                    self.remove_ent(k, &why);
                    continue;
                }
                names.insert(name.clone());
                let ft = self
                    .inode(h.ino)
                    .and_then(|i| i.file_type())
                    .expect("valid");
                if ft != h.ftype {
                    self.words.insert(off, Header { ftype: ft, ..h }.encode());
                    self.note(
                        format!(
                            "directory {d}: entry {:?}: type set to that of inode {}",
                            String::from_utf8_lossy(&name),
                            h.ino
                        ),
                        off,
                    );
                }
            }
        }
    }

    /// Removes entry `k` (header and any non-zero continuation word).
    fn remove_ent(&mut self, k: usize, why: &str) {
        let e = &mut self.ents[k];
        e.live = false;
        let (off, units, dir) = (e.off, e.units, e.dir);
        let shown = String::from_utf8_lossy(&e.name).into_owned();
        self.words.insert(off, 0);
        for j in 1..units as u64 {
            let w = off + j * UNIT_SIZE;
            if self.pm.load_u64(w) != 0 {
                self.words.insert(w, 0);
            }
        }
        self.note(
            format!("directory {dir}: entry {shown:?} {why}: removed"),
            off,
        );
    }

    /// Live entry indices by target inode.
    fn listings(&self) -> HashMap<u32, Vec<usize>> {
        let mut m: HashMap<u32, Vec<usize>> = HashMap::new();
        for (k, e) in self.ents.iter().enumerate() {
            if e.live {
                m.entry(e.ino).or_default().push(k);
            }
        }
        m
    }

    /// Listings, orphans, reachability. Returns the inodes to reconnect to lost+found.
    fn fix_tree(&mut self) -> Vec<u32> {
        let n = self.inodes.len();
        let mut listed = self.listings();
        if let Some(v) = listed.remove(&(ROOT_INO as u32)) {
            for k in v {
                self.remove_ent(k, "lists the root directory");
            }
        }
        // Each directory keeps one entry: the one in its `..` if there is one.
        let mut listing: HashMap<u32, usize> = HashMap::new();
        let mut targets: Vec<u32> = listed.keys().copied().collect();
        targets.sort_unstable();
        for c in targets {
            let v = &listed[&c];
            if !self.is_dir(c) {
                continue;
            }
            let parent = self.inode(c).expect("in use").parent;
            let keep = v
                .iter()
                .position(|&k| self.ents[k].dir == parent)
                .unwrap_or(0);
            let extra: Vec<usize> = v
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != keep)
                .map(|(_, &k)| k)
                .collect();
            listing.insert(c, v[keep]);
            for k in extra {
                self.remove_ent(k, &format!("is an extra link to directory {c}"));
            }
        }
        let listed = self.listings();
        let mut kids = vec![0u32; n];
        for e in self.ents.iter().filter(|e| e.live) {
            kids[e.dir as usize] += 1;
        }
        // Orphans: in use, no links and no entry. Freed as a mount frees them, except a
        // directory that still holds entries.
        let mut reconnect = Vec::new();
        let mut orphans = 0;
        for ino in 2..n as u32 {
            let Some(i) = self.inode(ino) else { continue };
            if listed.contains_key(&ino) || self.raw_nlink[ino as usize] != 0 {
                continue;
            }
            if i.is_dir() && kids[ino as usize] > 0 {
                continue;
            }
            self.clear(ino);
            orphans += 1;
        }
        if orphans > 0 {
            self.note(
                format!("{orphans} orphan inode(s) (no links, no entry): freed"),
                self.ino_off(ROOT_INO as u32),
            );
        }
        // Reachability from the root.
        let mut children: HashMap<u32, Vec<usize>> = HashMap::new();
        for (k, e) in self.ents.iter().enumerate() {
            if e.live {
                children.entry(e.dir).or_default().push(k);
            }
        }
        let mut reached = vec![false; n];
        self.mark(ROOT_INO as u32, &children, &mut reached);
        for x in 2..n as u32 {
            if reached[x as usize] || !self.is_dir(x) {
                continue;
            }
            // Walk up to the top of the detached tree, or to where it loops.
            let mut seen = HashSet::new();
            let mut cur = x;
            let top = loop {
                seen.insert(cur);
                let Some(&k) = listing.get(&cur).filter(|&&k| self.ents[k].live) else {
                    break cur;
                };
                let p = self.ents[k].dir;
                if seen.contains(&p) || reached[p as usize] || !self.is_dir(p) {
                    break cur;
                }
                cur = p;
            };
            if let Some(&k) = listing.get(&top).filter(|&&k| self.ents[k].live) {
                self.remove_ent(k, "closes a directory cycle");
            }
            reconnect.push(top);
            self.mark(top, &children, &mut reached);
        }
        let listed = self.listings();
        for ino in 2..n as u32 {
            let Some(i) = self.inode(ino) else { continue };
            if !i.is_dir() && !listed.contains_key(&ino) && self.raw_nlink[ino as usize] > 0 {
                reconnect.push(ino);
            }
        }
        reconnect
    }

    fn mark(&self, from: u32, children: &HashMap<u32, Vec<usize>>, reached: &mut [bool]) {
        let mut stack = vec![from];
        reached[from as usize] = true;
        while let Some(d) = stack.pop() {
            for &k in children.get(&d).map(|v| v.as_slice()).unwrap_or(&[]) {
                let e = &self.ents[k];
                if e.live && !reached[e.ino as usize] {
                    reached[e.ino as usize] = true;
                    if self.is_dir(e.ino) {
                        stack.push(e.ino);
                    }
                }
            }
        }
    }

    /// Links every inode in `list` into /lost+found as `#<ino>`.
    fn reconnect(&mut self, list: &[u32]) {
        if list.is_empty() {
            return;
        }
        let Some(lf) = self.lost_found() else {
            let what = format!(
                "{} inode(s) not reachable from the root cannot be reconnected: \
                 no free inode or block for lost+found",
                list.len()
            );
            self.note(what, self.ino_off(ROOT_INO as u32));
            return;
        };
        let lf_name = String::from_utf8_lossy(&self.name_of(lf)).into_owned();
        for &ino in list {
            let mut name = format!("#{ino}").into_bytes();
            let mut k = 1;
            while self.has_name(lf, &name) {
                name = format!("#{ino}.{k}").into_bytes();
                k += 1;
            }
            let ft = self.inode(ino).and_then(|i| i.file_type()).expect("valid");
            if !self.insert_entry(lf, &name, ino, ft) {
                self.note(
                    format!("inode {ino}: cannot be reconnected: no free block for lost+found"),
                    self.ino_off(ino),
                );
                continue;
            }
            self.note(
                format!(
                    "inode {ino}: not reachable from the root: reconnected as /{lf_name}/{}",
                    String::from_utf8_lossy(&name)
                ),
                self.ino_off(ino),
            );
        }
    }

    fn has_name(&mut self, dir: u32, name: &[u8]) -> bool {
        self.target(dir).names.contains(name)
    }

    /// The used units and names of `dir`, collected on first use.
    fn target(&mut self, dir: u32) -> &mut Target {
        if !self.targets.contains_key(&dir) {
            let hw = self.inode(dir).expect("in use").dir_units;
            let mut t = Target {
                used: vec![false; hw as usize],
                names: HashSet::new(),
                cursor: 0,
            };
            for e in self.ents.iter().filter(|e| e.live && e.dir == dir) {
                for u in e.unit..(e.unit + e.units).min(hw) {
                    t.used[u as usize] = true;
                }
                t.names.insert(e.name.clone());
            }
            self.targets.insert(dir, t);
        }
        self.targets.get_mut(&dir).expect("present")
    }

    fn name_of(&self, ino: u32) -> Vec<u8> {
        self.ents
            .iter()
            .find(|e| e.live && e.ino == ino)
            .map(|e| e.name.clone())
            .unwrap_or_default()
    }

    /// The lost+found directory under the root, created if there is none.
    fn lost_found(&mut self) -> Option<u32> {
        let root = ROOT_INO as u32;
        let existing = self
            .ents
            .iter()
            .find(|e| e.live && e.dir == root && e.name == LOST_FOUND)
            .map(|e| e.ino);
        if let Some(ino) = existing.filter(|&i| self.is_dir(i)) {
            return Some(ino);
        }
        let mut name = LOST_FOUND.to_vec();
        let mut k = 1;
        while self.has_name(root, &name) {
            name = format!("lost+found.{k}").into_bytes();
            k += 1;
        }
        let n = self.inodes.len() as u32;
        let ino = (2..n)
            .find(|&i| self.raw_free[i as usize] && self.inodes[i as usize].is_none())
            .or_else(|| (2..n).find(|&i| self.inodes[i as usize].is_none()))?;
        let off = self.ino_off(ino);
        let old = Inode::decode_raw(&self.pm.read_array::<{ INODE_SIZE as usize }>(off));
        let now = now_ns();
        // SAFETY: plain getters.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        self.inodes[ino as usize] = Some(Inode {
            mode: libc::S_IFDIR | 0o700,
            nlink: 2,
            uid,
            gid,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            generation: old.generation.wrapping_add(1).max(1),
            parent: root,
            ..Default::default()
        });
        if !self.insert_entry(root, &name, ino, FileType::Dir) {
            self.inodes[ino as usize] = None;
            return None;
        }
        self.note(
            format!("created /{} (inode {ino})", String::from_utf8_lossy(&name)),
            off,
        );
        Some(ino)
    }

    /// Adds entry `name` -> `ino` to directory `dir`: in a free run below its high-water
    /// mark, after it in its last block, or in a new block.
    fn insert_entry(&mut self, dir: u32, name: &[u8], ino: u32, ft: FileType) -> bool {
        let units = dentry::units_for(name.len());
        let hw = self.inode(dir).expect("in use").dir_units;
        let t = self.target(dir);
        while t.cursor < hw && t.used[t.cursor as usize] {
            t.cursor += 1;
        }
        let free_run = (t.cursor..hw.saturating_sub(units - 1)).find(|&u| {
            u % UNITS_PER_BLOCK + units <= UNITS_PER_BLOCK
                && (u..u + units).all(|x| !t.used[x as usize])
        });
        let (unit, new_hw) = match free_run {
            Some(u) => (u, hw),
            None => {
                let in_block = hw % UNITS_PER_BLOCK;
                let start = if in_block != 0 && in_block + units > UNITS_PER_BLOCK {
                    hw + (UNITS_PER_BLOCK - in_block)
                } else {
                    hw
                };
                (start, start + units)
            }
        };
        let lblk = unit / UNITS_PER_BLOCK;
        let at = (unit % UNITS_PER_BLOCK) as usize * UNIT_SIZE as usize;
        let mut bytes = Vec::new();
        let header = Header::new(ino, name.len(), ft);
        dentry::encode_units(&header, name, &mut bytes);
        let slot = match self.maps.get(&dir).and_then(|m| m.get(&lblk)).copied() {
            Some(s) => s,
            None => {
                let Some(s) = self.alloc_slot(hashfs::key(dir, lblk)) else {
                    return false;
                };
                self.maps.entry(dir).or_default().insert(lblk, s);
                self.new_blocks.insert(s, vec![0u8; BLOCK_SIZE as usize]);
                let base = self.geo.data_off(s);
                let stale: Vec<u64> = self
                    .words
                    .range(base..base + BLOCK_SIZE)
                    .map(|(&o, _)| o)
                    .collect();
                for o in stale {
                    self.words.remove(&o);
                }
                s
            }
        };
        let off = self.geo.data_off(slot) + at as u64;
        if let Some(block) = self.new_blocks.get_mut(&slot) {
            block[at..at + bytes.len()].copy_from_slice(&bytes);
        } else {
            self.fresh.push((off + 8, bytes[8..].to_vec()));
            self.words.insert(off, header.encode());
        }
        self.ents.push(Ent {
            dir,
            unit,
            off,
            ino,
            units,
            name: name.to_vec(),
            live: true,
        });
        let t = self.target(dir);
        t.used.resize(new_hw.max(hw) as usize, false);
        for u in unit..unit + units {
            t.used[u as usize] = true;
        }
        t.names.insert(name.to_vec());
        let d = self.inodes[dir as usize].as_mut().expect("in use");
        d.dir_units = new_hw;
        true
    }

    /// A free slot for `key`: the first free or tombstone slot from its home.
    fn alloc_slot(&mut self, key: u64) -> Option<u64> {
        let n = self.tab.len() as u64;
        let mut s = self.table.home(key);
        for _ in 0..n {
            let v = self.tab[s as usize];
            if v == FREE || v == TOMBSTONE {
                self.tab[s as usize] = key;
                return Some(s);
            }
            s = if s + 1 == n { 0 } else { s + 1 };
        }
        None
    }

    /// Entry counts, link counts, parents and block counts from what is now in place.
    fn fix_counts(&mut self) {
        let n = self.inodes.len();
        let mut refs = vec![0u32; n];
        let mut entries = vec![0u32; n];
        let mut subdirs = vec![0u32; n];
        let mut parent = vec![0u32; n];
        for e in self.ents.iter().filter(|e| e.live) {
            refs[e.ino as usize] += 1;
            entries[e.dir as usize] += 1;
            if self.is_dir(e.ino) {
                subdirs[e.dir as usize] += 1;
                parent[e.ino as usize] = e.dir;
            }
        }
        for ino in 1..n {
            let blocks = self.maps.get(&(ino as u32)).map_or(0, |m| m.len() as u64);
            let Some(i) = self.inodes[ino].as_mut() else {
                continue;
            };
            i.blocks = blocks;
            if i.is_dir() {
                i.dir_entries = entries[ino];
                i.nlink = 2 + subdirs[ino];
                if ino as u64 == ROOT_INO {
                    i.parent = ROOT_INO as u32;
                } else if parent[ino] != 0 {
                    i.parent = parent[ino];
                }
            } else {
                i.nlink = refs[ino];
            }
        }
    }

    /// Turns free slots inside probe chains into tombstones, so every key is found again.
    fn fix_chains(&mut self) {
        let n = self.tab.len();
        let Some(last_free) = (0..n).rev().find(|&s| self.tab[s] == FREE) else {
            return;
        };
        let mut run_start = last_free as i64 - n as i64;
        let mut lost = Vec::new();
        for s in 0..n {
            let v = self.tab[s];
            if v == FREE {
                run_start = s as i64;
                continue;
            }
            if hashfs::split_key(v).is_some()
                && self.table.probe_distance(v, s as u64) as i64 >= s as i64 - run_start
            {
                lost.push(s);
            }
        }
        let mut filled = 0;
        for &s in &lost {
            let mut t = self.table.home(self.tab[s]) as usize;
            while t != s {
                if self.tab[t] == FREE {
                    self.tab[t] = TOMBSTONE;
                    filled += 1;
                }
                t = if t + 1 == n { 0 } else { t + 1 };
            }
        }
        if !lost.is_empty() {
            self.note(
                format!(
                    "hash table: {} mapping(s) unreachable from their home: {filled} free slot(s) \
                     in their probe chains made tombstones",
                    lost.len()
                ),
                self.geo.slot_off(0),
            );
        }
    }

    /// Writes everything that differs from the media.
    fn apply(&mut self, journal: &Journal) {
        let pm = self.pm;
        let mut w = Writer {
            pm,
            journal,
            tx: None,
            staged: 0,
            cap: self.geo.lane_blocks as usize * BLOCK_SIZE as usize - HEADER_LEN,
        };
        for (&s, block) in &self.new_blocks {
            w.fresh(self.geo.data_off(s), block);
        }
        for (off, bytes) in &self.fresh {
            w.fresh(*off, bytes);
        }
        for s in 0..self.tab.len() {
            if self.tab[s] != self.orig[s] {
                w.write(self.geo.slot_off(s as u64), &self.tab[s].to_le_bytes());
            }
        }
        for (&off, &v) in &self.words {
            if pm.load_u64(off) != v {
                w.write(off, &v.to_le_bytes());
            }
        }
        for ino in 1..self.inodes.len() as u32 {
            let off = self.geo.inode_off(ino as u64);
            let old = Inode::decode_raw(&pm.read_array::<{ INODE_SIZE as usize }>(off));
            match &self.inodes[ino as usize] {
                None if !old.is_free() => {
                    // Mode and link count share the first word: storing 0 frees the record.
                    w.write(off, &0u64.to_le_bytes());
                }
                Some(i) if pm.read_array::<{ INODE_SIZE as usize }>(off) != i.encode()[..] => {
                    if !old.is_free() {
                        let what = describe_change(ino, &old, i);
                        if !what.is_empty() {
                            note(self.log, what, off);
                        }
                    }
                    w.write(off, &i.encode());
                }
                _ => {}
            }
        }
        w.finish();
    }
}

/// The fields of an inode record a repair changed, for the log.
fn describe_change(ino: u32, old: &Inode, new: &Inode) -> String {
    let mut parts = Vec::new();
    let mut field = |name: &str, a: u64, b: u64| {
        if a != b {
            parts.push(format!("{name} {a} -> {b}"));
        }
    };
    field("link count", old.nlink as u64, new.nlink as u64);
    field("block count", old.blocks, new.blocks);
    field(
        "entry count",
        old.dir_entries as u64,
        new.dir_entries as u64,
    );
    field(
        "high-water mark",
        old.dir_units as u64,
        new.dir_units as u64,
    );
    field("parent", old.parent as u64, new.parent as u64);
    field("size", old.size, new.size);
    field("preallocation end", old.falloc_end, new.falloc_end);
    field("flags", old.flags as u64, new.flags as u64);
    if old.mode != new.mode {
        parts.push(format!("mode {:#o} -> {:#o}", old.mode, new.mode));
    }
    if parts.is_empty() {
        return String::new();
    }
    format!("inode {ino}: {}", parts.join(", "))
}

/// Applies writes through the undo journal, committing a transaction whenever the next write
/// would overflow the lane.
struct Writer<'a> {
    pm: &'a Pm,
    journal: &'a Journal,
    tx: Option<Tx<'a>>,
    staged: usize,
    cap: usize,
}

impl<'a> Writer<'a> {
    fn tx(&mut self, cost: usize) -> &mut Tx<'a> {
        if self.tx.is_some() && self.staged + cost > self.cap {
            self.finish();
        }
        if self.tx.is_none() {
            self.tx = Some(self.journal.begin(self.pm));
            self.staged = 0;
        }
        self.staged += cost;
        self.tx.as_mut().expect("open")
    }

    /// A write to free space: persisted before the transaction that publishes it is armed.
    fn fresh(&mut self, off: u64, data: &[u8]) {
        self.tx(0).fresh(off, data);
    }

    /// An in-place write, logged.
    fn write(&mut self, off: u64, data: &[u8]) {
        let cost = 16 + data.len().next_multiple_of(8);
        self.tx(cost).write(off, data);
    }

    fn finish(&mut self) {
        if let Some(tx) = self.tx.take() {
            tx.commit();
        }
    }
}
