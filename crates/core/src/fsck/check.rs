//! The check: every invariant of docs/FORMAT.md §10, on a view of the image that may be
//! written (recovery runs on it). See the module comment of `fsck`.

use std::collections::HashSet;

use super::FsckReport;
use crate::fs::mount::{allowed_blocks, read_superblock, RecoveryReport};
use crate::journal::{self, LaneState};
use crate::layout::dentry::{self, Header, UNITS_PER_BLOCK, UNIT_SIZE};
use crate::layout::inode::{FileType, Inode, INODE_SIZE};
use crate::layout::state::{MountState, STATE_CLEAN, STATE_LEN};
use crate::layout::superblock::{Geometry, Superblock, REPLICA_BLOCK, ROOT_INO, STATE_BLOCK};
use crate::layout::{Corrupted, BLOCK_SIZE};
use crate::mapping::hashfs::{self, HashFs, RESERVED};
use crate::mapping::tree::{self, BlockTree, Census, Reach};
use crate::mapping::{balloc, cuckoo, extent, level, open_view, radix, FileMap, MappingKind};
use crate::media::Pm;

/// Checks the image in `pm`, which it may write (recovery runs on it).
pub fn check_pm(pm: &Pm) -> FsckReport {
    let mut r = FsckReport::default();
    if pm.len() < 3 * BLOCK_SIZE {
        return super::too_small(pm.len());
    }
    let Some(sb) = check_superblocks(pm, &mut r) else {
        return r;
    };
    let geo = sb.geo.clone();
    let state = MountState::decode(&pm.read_vec(STATE_BLOCK * BLOCK_SIZE, STATE_LEN));
    let unclean = state.as_ref().is_none_or(|s| s.state != STATE_CLEAN);
    if state.is_none() {
        r.recovery.push(
            "mount-state block damaged or torn (bad checksum or state): treating the image as \
             not unmounted cleanly; a read-write mount or a repair rewrites it"
                .into(),
        );
    }
    if unclean {
        r.recovery.push(
            "image was not unmounted cleanly: checking it as a mount would recover it".into(),
        );
    }
    // Mount rolls back armed records on every read-write mount, so fsck does too; on a clean
    // image there should be none.
    let rep = check_journal(pm, &geo, &mut r);
    let in_flight = rep.lanes_rolled_back + rep.torn_lanes_cleared;
    if in_flight > 0 && !unclean {
        r.problem(
            format!("{in_flight} armed journal record(s) on a cleanly unmounted image"),
            geo.lane_off(0),
        );
    } else if in_flight > 0 {
        r.recovery.push(format!(
            "journal: {} operation(s) in flight rolled back, {} torn record(s) discarded",
            rep.lanes_rolled_back, rep.torn_lanes_cleared
        ));
    }
    let inodes = check_inodes(pm, &geo, &mut r);
    let counts = match sb.mapping {
        MappingKind::HashFs => check_table(pm, &geo, &inodes, unclean, &mut r),
        MappingKind::Extent => {
            check_trees(&extent::Extent::new(), pm, &geo, &inodes, unclean, &mut r)
        }
        MappingKind::Radix => check_trees(&radix::Radix, pm, &geo, &inodes, unclean, &mut r),
        MappingKind::Cuckoo => {
            let mut census = |bad: &mut dyn FnMut(u32, Corrupted),
                              map: &mut dyn FnMut(u32, Reach)| {
                cuckoo::census(pm, &geo, bad, map)
            };
            let m = Mapped {
                kind: sb.mapping,
                noun: "table",
                stray: 0,
            };
            check_mapped(m, pm, &geo, &inodes, unclean, &mut r, &mut census)
        }
        MappingKind::Level => {
            let mut census = |bad: &mut dyn FnMut(u32, Corrupted),
                              map: &mut dyn FnMut(u32, Reach)| {
                level::census(pm, &geo, bad, map)
            };
            let m = Mapped {
                kind: sb.mapping,
                noun: "table",
                stray: 0,
            };
            check_mapped(m, pm, &geo, &inodes, unclean, &mut r, &mut census)
        }
    };
    check_block_counts(&geo, &inodes, &counts, unclean, &mut r);
    let map = open_view(sb.mapping, &geo);
    check_tree(pm, &geo, map.as_ref(), &inodes, unclean, &mut r);
    check_tier(pm, &sb, &inodes, unclean, &mut r);
    r
}

/// The SSD tier's header and block table (invariants 37-39). Stale entries are what a crash
/// between an unlink or truncate and its dropping of entries leaves: recovery on an unclean
/// image, damage on a clean one.
fn check_tier(
    pm: &Pm,
    sb: &crate::layout::superblock::Superblock,
    inodes: &[Option<Inode>],
    unclean: bool,
    r: &mut FsckReport,
) {
    use crate::tier::check;
    let hdr = match check::header(pm, sb) {
        None => return,
        Some(Ok(h)) => h,
        Some(Err(c)) => {
            r.problem(c.what, c.offset);
            return;
        }
    };
    let (bad, _) = check::bad_entries(pm, &hdr, inodes);
    if unclean && !bad.is_empty() {
        r.recovery.push(format!(
            "SSD tier: {} stale or duplicate block-table entr(ies) dropped",
            bad.len()
        ));
        return;
    }
    for e in bad {
        r.problem(
            format!("SSD tier entry of SSD block {}: {}", e.block, e.why),
            e.offset,
        );
    }
}

/// Rolls back armed records and clears torn ones, lane by lane, as a mount would. A record
/// with an undo entry outside `[itable_start, total_blocks)` blocks or past its payload is
/// reported and cleared, not applied; the other lanes are still examined.
fn check_journal(pm: &Pm, geo: &Geometry, r: &mut FsckReport) -> RecoveryReport {
    let mut rep = RecoveryReport::default();
    for lane in 0..geo.journal_lanes {
        match journal::read_lane(pm, geo, lane, geo.total_blocks * BLOCK_SIZE) {
            Ok((LaneState::Idle, _)) => {}
            Ok((LaneState::Armed { .. }, entries)) => {
                journal::roll_back(pm, geo, lane, &entries);
                rep.lanes_rolled_back += 1;
            }
            Ok((LaneState::Torn, _)) => {
                journal::clear_lane(pm, geo, lane);
                rep.torn_lanes_cleared += 1;
            }
            Err(c) => {
                r.problem(c.what, c.offset);
                journal::clear_lane(pm, geo, lane);
            }
        }
    }
    rep
}

fn check_superblocks(pm: &Pm, r: &mut FsckReport) -> Option<Superblock> {
    let (sb, used_replica) = match read_superblock(pm) {
        Ok(x) => x,
        Err(e) => {
            r.problem(format!("superblock and replica both unusable: {e}"), 0);
            return None;
        }
    };
    if used_replica {
        r.problem("primary superblock damaged (the replica is intact)", 0);
    } else {
        let replica = Superblock::decode(
            &pm.read_vec(REPLICA_BLOCK * BLOCK_SIZE, BLOCK_SIZE as usize),
            REPLICA_BLOCK * BLOCK_SIZE,
        );
        if replica.as_ref() != Ok(&sb) {
            r.problem(
                "superblock replica damaged or different from the primary",
                REPLICA_BLOCK * BLOCK_SIZE,
            );
        }
    }
    if sb.geo.total_blocks * BLOCK_SIZE > pm.len() {
        r.problem(
            format!(
                "superblock: geometry needs {} bytes, image has {}",
                sb.geo.total_blocks * BLOCK_SIZE,
                pm.len()
            ),
            0,
        );
        return None;
    }
    Some(sb)
}

/// Valid in-use inodes by number (None: free or damaged, the latter reported).
fn check_inodes(pm: &Pm, geo: &Geometry, r: &mut FsckReport) -> Vec<Option<Inode>> {
    let mut v = vec![None; geo.inode_count as usize];
    for ino in 1..geo.inode_count {
        let off = geo.inode_off(ino);
        let raw = Inode::decode_raw(&pm.read_array::<{ INODE_SIZE as usize }>(off));
        if raw.is_free() {
            continue;
        }
        match raw.validate(off, geo.inode_count) {
            Ok(()) => {
                r.inodes_in_use += 1;
                v[ino as usize] = Some(raw);
            }
            Err(c) => r.problem(format!("inode {ino}: {}", c.what), off),
        }
    }
    match &v[ROOT_INO as usize] {
        Some(root) if root.is_dir() && root.parent == ROOT_INO as u32 => {}
        _ => r.problem(
            "root inode is not a directory that is its own parent",
            geo.inode_off(ROOT_INO),
        ),
    }
    v
}

/// Walks the hash table; returns mapped-block counts per inode.
fn check_table(
    pm: &Pm,
    geo: &Geometry,
    inodes: &[Option<Inode>],
    unclean: bool,
    r: &mut FsckReport,
) -> Vec<u64> {
    let table = HashFs::new(geo, 0);
    let mut counts = vec![0u64; inodes.len()];
    let mut seen: HashSet<u64> = HashSet::new();
    let (mut stray, mut reserved) = (0u64, 0u64);
    let n = geo.data_blocks;
    // Distance back to the nearest free slot, for the probe-chain check.
    let last_free = (0..n)
        .rev()
        .find(|&s| pm.load_u64(geo.slot_off(s)) == hashfs::FREE);
    let mut run_start = last_free.map(|f| f as i64 - n as i64);
    for s in 0..n {
        let off = geo.slot_off(s);
        let v = pm.load_u64(off);
        if v == hashfs::FREE {
            run_start = Some(s as i64);
            continue;
        }
        if v == RESERVED {
            reserved += 1;
            continue;
        }
        let Some((ino, lblk)) = hashfs::split_key(v) else {
            if v != hashfs::TOMBSTONE {
                r.problem(format!("hash slot {s}: invalid value {v:#x}"), off);
            }
            continue;
        };
        let owner = inodes.get(ino as usize).and_then(|i| i.as_ref());
        let allowed = owner.is_some_and(|i| (lblk as u64) < allowed_blocks(i));
        if !allowed {
            if owner.is_none() && !unclean {
                r.problem(
                    format!("hash slot {s}: block mapped to free or damaged inode {ino}"),
                    off,
                );
            } else if !unclean {
                r.problem(
                    format!("hash slot {s}: inode {ino} block {lblk} past what the inode may map"),
                    off,
                );
            }
            stray += 1;
            continue;
        }
        if !seen.insert(v) {
            r.problem(
                format!("hash slot {s}: inode {ino} block {lblk} mapped twice"),
                off,
            );
            continue;
        }
        if let Some(start) = run_start {
            if table.probe_distance(v, s) as i64 >= s as i64 - start {
                r.problem(
                    format!(
                        "hash slot {s}: inode {ino} block {lblk} unreachable from its hash home"
                    ),
                    off,
                );
            }
        }
        counts[ino as usize] += 1;
        r.blocks_in_use += 1;
    }
    if reserved > 0 {
        if unclean {
            r.recovery.push(format!(
                "{reserved} hash slot(s) reserved by operations in flight will be freed"
            ));
        } else {
            r.problem(
                format!("{reserved} hash slot(s) left reserved on a cleanly unmounted image"),
                geo.slot_off(0),
            );
        }
    }
    if unclean && stray > 0 {
        r.recovery.push(format!(
            "{stray} block(s) past EOF or of freed inodes will be freed"
        ));
    }
    counts
}

/// Walks every tree of a tree mapping (validating each node), the bitmap against what the
/// trees reach, and who owns each mapping; returns mapped-block counts per inode.
fn check_trees<T: BlockTree>(
    t: &T,
    pm: &Pm,
    geo: &Geometry,
    inodes: &[Option<Inode>],
    unclean: bool,
    r: &mut FsckReport,
) -> Vec<u64> {
    let mut stray = 0u64;
    for ino in 1..geo.inode_count as u32 {
        let off = tree::root_off(geo, ino);
        let free =
            Inode::decode_raw(&pm.read_array::<{ INODE_SIZE as usize }>(geo.inode_off(ino as u64)))
                .is_free();
        if free && pm.load_u64(off) != 0 {
            if unclean {
                stray += 1;
            } else {
                r.problem(
                    format!("{} root of free inode {ino} is not empty", T::KIND),
                    off,
                );
            }
        }
    }
    let mut census = |bad: &mut dyn FnMut(u32, Corrupted), map: &mut dyn FnMut(u32, Reach)| {
        tree::census(t, pm, geo, bad, map)
    };
    let m = Mapped {
        kind: T::KIND,
        noun: "tree",
        stray,
    };
    check_mapped(m, pm, geo, inodes, unclean, r, &mut census)
}

/// Which mapping `check_mapped` checks, and the strays found before the census.
struct Mapped {
    kind: MappingKind,
    noun: &'static str,
    stray: u64,
}

type CensusFn<'a> =
    dyn FnMut(&mut dyn FnMut(u32, Corrupted), &mut dyn FnMut(u32, Reach)) -> Census + 'a;

/// What the allocator mappings share: damage reports from the census, pending claims and
/// mappings past EOF, and the bitmap against the blocks the mapping reaches.
fn check_mapped(
    m: Mapped,
    pm: &Pm,
    geo: &Geometry,
    inodes: &[Option<Inode>],
    unclean: bool,
    r: &mut FsckReport,
    census: &mut CensusFn<'_>,
) -> Vec<u64> {
    let (mut stray, mut pending, mut bad) = (m.stray, 0u64, Vec::new());
    let c = census(&mut |ino, e| bad.push((ino, e)), &mut |ino, reach| {
        let Reach::Data {
            lblk, pending: p, ..
        } = reach
        else {
            return;
        };
        let owner = inodes[ino as usize].as_ref();
        if p {
            pending += 1;
        } else if owner.is_none_or(|i| lblk >= allowed_blocks(i)) {
            stray += 1;
        }
    });
    for (ino, e) in bad {
        r.problem(
            format!("{} {} of inode {ino}: {}", m.kind, m.noun, e.what),
            e.offset,
        );
    }
    let recovery = |what: String, r: &mut FsckReport| {
        if unclean {
            r.recovery.push(what);
        } else {
            r.problem(what, balloc::bitmap_off(geo));
        }
    };
    if pending > 0 {
        recovery(
            format!("{pending} block(s) claimed by operations in flight"),
            r,
        );
    }
    if stray > 0 {
        recovery(format!("{stray} mapping(s) past EOF or of freed inodes"), r);
    }
    let differ = (0..geo.data_blocks)
        .filter(|&b| balloc::bit(pm, geo, b) != c.used[b as usize])
        .count();
    if differ > 0 {
        recovery(
            format!(
                "block bitmap differs from the blocks the {} reaches in {differ} block(s)",
                m.kind
            ),
            r,
        );
    }
    r.blocks_in_use += c.used.iter().filter(|&&u| u).count() as u64;
    c.counts
}

fn check_block_counts(
    geo: &Geometry,
    inodes: &[Option<Inode>],
    counts: &[u64],
    unclean: bool,
    r: &mut FsckReport,
) {
    let mut fixed = 0;
    for (ino, i) in inodes.iter().enumerate() {
        let Some(i) = i else { continue };
        if i.blocks != counts[ino] {
            if unclean {
                fixed += 1;
            } else {
                r.problem(
                    format!(
                        "inode {ino}: block count {} but {} blocks mapped",
                        i.blocks, counts[ino]
                    ),
                    geo.inode_off(ino as u64),
                );
            }
        }
    }
    if fixed > 0 {
        r.recovery
            .push(format!("{fixed} inode block count(s) will be recomputed"));
    }
}

/// Directory entries, link counts, parents and reachability.
fn check_tree(
    pm: &Pm,
    geo: &Geometry,
    table: &dyn FileMap,
    inodes: &[Option<Inode>],
    unclean: bool,
    r: &mut FsckReport,
) {
    let mut refs = vec![0u32; inodes.len()];
    let mut children: Vec<Vec<u32>> = vec![Vec::new(); inodes.len()];
    for (ino, i) in inodes.iter().enumerate() {
        let Some(i) = i else { continue };
        // An orphan (no links) may be half freed by a crash inside free_inode: its blocks can
        // be gone already. Mount finishes freeing it; its contents are not checked. (The root
        // is never an orphan: a root link count of 0 is damage, reported below.)
        if i.nlink == 0 && ino as u64 != ROOT_INO {
            continue;
        }
        if i.file_type() == Some(FileType::Symlink)
            && allowed_blocks(i) == 1
            && table.lookup(pm, ino as u32, 0).is_none()
        {
            r.problem(
                format!("symlink {ino}: target block not mapped"),
                geo.inode_off(ino as u64),
            );
        }
        if !i.is_dir() {
            continue;
        }
        r.directories += 1;
        let kids = check_dir(pm, geo, table, ino as u32, i, inodes, r);
        for &c in &kids {
            refs[c as usize] += 1;
        }
        children[ino] = kids;
    }
    check_links(geo, inodes, &refs, &children, unclean, r);
    check_reachable(geo, inodes, &children, r);
}

fn check_dir(
    pm: &Pm,
    geo: &Geometry,
    table: &dyn FileMap,
    ino: u32,
    i: &Inode,
    inodes: &[Option<Inode>],
    r: &mut FsckReport,
) -> Vec<u32> {
    let mut kids = Vec::new();
    let mut names: HashSet<Vec<u8>> = HashSet::new();
    let mut name = Vec::new();
    for lblk in 0..i.dir_units.div_ceil(UNITS_PER_BLOCK) {
        let Some(pblk) = table.lookup(pm, ino, lblk) else {
            // A mount cannot load the directory past this point (and a damaged high-water
            // mark can claim billions of blocks): one report, then stop.
            r.problem(
                format!(
                    "directory {ino}: block {lblk} not mapped (high-water mark {} units)",
                    i.dir_units
                ),
                geo.inode_off(ino as u64),
            );
            break;
        };
        let base = geo.data_off(pblk);
        let limit = (i.dir_units - lblk * UNITS_PER_BLOCK).min(UNITS_PER_BLOCK);
        let mut u = 0;
        while u < limit {
            let off = base + u as u64 * UNIT_SIZE;
            let h = match Header::decode(pm.load_u64(off), u, off, geo.inode_count) {
                Ok(Some(h)) if u + h.units as u32 <= limit => h,
                Ok(Some(_)) => {
                    r.problem(
                        format!("directory {ino}: entry past the high-water mark"),
                        off,
                    );
                    break;
                }
                Ok(None) => {
                    u += 1;
                    continue;
                }
                Err(c) => {
                    r.problem(format!("directory {ino}: {}", c.what), off);
                    u += 1;
                    continue;
                }
            };
            dentry::name_from_units(
                &pm.read_vec(off, h.units as usize * UNIT_SIZE as usize),
                h.name_len as usize,
                &mut name,
            );
            u += h.units as u32;
            // Every unit starts with a header or zero: a stray word in a continuation unit
            // would be read as a header once the entry is removed.
            for j in 1..h.units as u64 {
                if pm.load_u64(off + j * UNIT_SIZE) != 0 {
                    r.problem(
                        format!(
                            "directory {ino}: entry {:?}: continuation unit {j} does not start \
                             with zero",
                            String::from_utf8_lossy(&name)
                        ),
                        off + j * UNIT_SIZE,
                    );
                }
            }
            if dentry::validate_name(&name).is_err() {
                r.problem(
                    format!(
                        "directory {ino}: invalid name {:?}",
                        String::from_utf8_lossy(&name)
                    ),
                    off,
                );
                continue;
            }
            if !names.insert(name.clone()) {
                r.problem(
                    format!(
                        "directory {ino}: duplicate name {:?}",
                        String::from_utf8_lossy(&name)
                    ),
                    off,
                );
                continue;
            }
            match &inodes[h.ino as usize] {
                None => r.problem(
                    format!(
                        "directory {ino}: entry {:?} points at free inode {}",
                        String::from_utf8_lossy(&name),
                        h.ino
                    ),
                    off,
                ),
                Some(c) if c.file_type() != Some(h.ftype) => r.problem(
                    format!(
                        "directory {ino}: entry {:?} type differs from inode {}",
                        String::from_utf8_lossy(&name),
                        h.ino
                    ),
                    off,
                ),
                Some(c) => {
                    if c.is_dir() && c.parent != ino {
                        r.problem(
                            format!(
                                "directory {}: parent is {} but it is listed in {ino}",
                                h.ino, c.parent
                            ),
                            geo.inode_off(h.ino as u64),
                        );
                    }
                    kids.push(h.ino);
                }
            }
        }
    }
    if kids.len() as u32 != i.dir_entries {
        r.problem(
            format!(
                "directory {ino}: entry count {} but {} entries found",
                i.dir_entries,
                kids.len()
            ),
            geo.inode_off(ino as u64),
        );
    }
    kids
}

fn check_links(
    geo: &Geometry,
    inodes: &[Option<Inode>],
    refs: &[u32],
    children: &[Vec<u32>],
    unclean: bool,
    r: &mut FsckReport,
) {
    let mut orphans = 0;
    for (ino, i) in inodes.iter().enumerate() {
        let Some(i) = i else { continue };
        let off = geo.inode_off(ino as u64);
        let subdirs = children[ino]
            .iter()
            .filter(|&&c| inodes[c as usize].as_ref().is_some_and(|c| c.is_dir()))
            .count() as u32;
        if ino as u64 == ROOT_INO {
            if refs[ino] != 0 {
                r.problem("root directory is listed in a directory", off);
            }
            if i.nlink != 2 + subdirs {
                r.problem(
                    format!(
                        "directory {ino}: link count {} but {subdirs} subdirectories",
                        i.nlink
                    ),
                    off,
                );
            }
            continue;
        }
        if i.nlink == 0 && refs[ino] == 0 {
            orphans += 1;
            continue;
        }
        if i.is_dir() {
            if i.nlink != 2 + subdirs {
                r.problem(
                    format!(
                        "directory {ino}: link count {} but {subdirs} subdirectories",
                        i.nlink
                    ),
                    off,
                );
            }
            if refs[ino] != 1 {
                r.problem(format!("directory {ino}: listed {} times", refs[ino]), off);
            }
        } else if i.nlink != refs[ino] {
            r.problem(
                format!(
                    "inode {ino}: link count {} but {} directory entries",
                    i.nlink, refs[ino]
                ),
                off,
            );
        }
    }
    if orphans > 0 {
        let what = if unclean {
            "will be freed at mount"
        } else {
            "are open-but-unlinked files of a live mount, or leaked"
        };
        r.recovery
            .push(format!("{orphans} orphan inode(s) (no links) {what}"));
    }
}

fn check_reachable(
    geo: &Geometry,
    inodes: &[Option<Inode>],
    children: &[Vec<u32>],
    r: &mut FsckReport,
) {
    let mut reached = vec![false; inodes.len()];
    let mut stack = vec![ROOT_INO as u32];
    reached[ROOT_INO as usize] = true;
    while let Some(d) = stack.pop() {
        for &c in &children[d as usize] {
            if !reached[c as usize] {
                reached[c as usize] = true;
                stack.push(c);
            }
        }
    }
    for (ino, i) in inodes.iter().enumerate() {
        if let Some(i) = i {
            if !reached[ino] && i.nlink > 0 {
                r.problem(format!("inode {ino}: not reachable from the root (detached tree or directory cycle)"), geo.inode_off(ino as u64));
            }
        }
    }
}
