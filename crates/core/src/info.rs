//! `nvmfs info`: geometry, use, and the shape of the file mapping (HashFS table, or the
//! trees and bitmap of a tree mapping), read from an image
//! without mounting it (safe on a mounted image: it takes no lock and writes nothing).

use std::io;
use std::path::Path;

use crate::fs::mount::read_superblock;
use crate::layout::inode::{FileType, Inode, INODE_SIZE};
use crate::layout::state::{MountState, STATE_CLEAN, STATE_LEN};
use crate::layout::superblock::{Geometry, STATE_BLOCK};
use crate::layout::BLOCK_SIZE;
use crate::mapping::hashfs::{self, HashFs, RESERVED, TOMBSTONE};
use crate::mapping::tree::{self, BlockTree, Reach};
use crate::mapping::{balloc, cuckoo, extent, level, radix, MappingKind};
use crate::media::{FlushKind, MediaMode, Pm};

/// Probe-length histogram buckets: 1, 2, 3-4, 5-8, 9-16, 17-64, >64 slots.
pub const PROBE_BUCKETS: [&str; 7] = ["1", "2", "3-4", "5-8", "9-16", "17-64", ">64"];

#[derive(Clone, Debug)]
pub struct Info {
    pub size_bytes: u64,
    pub media_mode: MediaMode,
    pub flush: FlushKind,
    pub version: u32,
    pub uuid: String,
    pub created_ns: u64,
    pub clean: bool,
    pub mount_count: u64,
    pub used_replica: bool,
    pub geo: Geometry,
    pub blocks_used: u64,
    pub inodes_used: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub others: u64,
    pub mapping: &'static str,
    pub load_factor: f64,
    pub tombstones: u64,
    pub reserved: u64,
    pub probe_mean: f64,
    pub probe_max: u64,
    pub probe_hist: [u64; 7],
    /// Tree mappings: blocks holding tree nodes (counted in `blocks_used` too).
    pub tree_nodes: u64,
    /// Tree mappings: data blocks mapped (the rest of `blocks_used` are nodes).
    pub tree_data_blocks: u64,
    /// The SSD tier (tiered images): what its PM structures say; the SSD is not read.
    pub tier: Option<TierSummary>,
}

/// The SSD tier of an image as its PM structures describe it.
#[derive(Clone, Debug)]
pub struct TierSummary {
    pub ssd_path: String,
    pub header_block: u64,
    pub table_blocks: u64,
    pub extents: u64,
    pub free_extents: u64,
    pub full_extents: u64,
    /// SSD blocks holding valid data (cold or clean).
    pub valid_blocks: u64,
    /// PM blocks of regular files with a valid SSD copy (clean) and without one (dirty).
    pub clean_blocks: u64,
    pub dirty_blocks: u64,
    pub marks: crate::layout::tier::Watermarks,
}

/// Reads the tier's header and table; an image whose tier header is damaged fails.
fn scan_tier(
    pm: &Pm,
    sb: &crate::layout::superblock::Superblock,
) -> io::Result<Option<TierSummary>> {
    use crate::layout::tier::BLOCKS_PER_EXTENT;
    let Some(hdr) = crate::tier::check::header(pm, sb).transpose()? else {
        return Ok(None);
    };
    let geo = &sb.geo;
    let mut keys = hashbrown::HashSet::new();
    let mut per_extent = vec![0u64; hdr.extents as usize];
    for b in 0..hdr.ssd_blocks() {
        let k = pm.load_u64(hdr.entry_off(b));
        if k != 0 {
            keys.insert(k);
            per_extent[(b / BLOCKS_PER_EXTENT) as usize] += 1;
        }
    }
    let (mut clean, mut dirty) = (0, 0);
    let mut regular: hashbrown::HashMap<u32, bool> = hashbrown::HashMap::new();
    for s in 0..geo.data_blocks {
        let v = pm.load_u64(geo.slot_off(s));
        let Some((ino, _)) = hashfs::split_key(v) else {
            continue;
        };
        let file = *regular
            .entry(ino)
            .or_insert_with(|| crate::tier::regular_inode(pm, geo, ino).is_some());
        match (file, keys.contains(&v)) {
            (false, _) => {}
            (true, true) => clean += 1,
            (true, false) => dirty += 1,
        }
    }
    Ok(Some(TierSummary {
        ssd_path: hdr.path.clone(),
        header_block: hdr.table_start - 1,
        table_blocks: hdr.table_blocks,
        extents: hdr.extents,
        free_extents: per_extent.iter().filter(|&&n| n == 0).count() as u64,
        full_extents: per_extent
            .iter()
            .filter(|&&n| n == BLOCKS_PER_EXTENT)
            .count() as u64,
        valid_blocks: per_extent.iter().sum(),
        clean_blocks: clean,
        dirty_blocks: dirty,
        marks: hdr.marks,
    }))
}

fn bucket(probe: u64) -> usize {
    match probe {
        0..=1 => 0,
        2 => 1,
        3..=4 => 2,
        5..=8 => 3,
        9..=16 => 4,
        17..=64 => 5,
        _ => 6,
    }
}

/// Reads `path` and summarises it.
pub fn inspect(path: &Path) -> io::Result<Info> {
    let f = std::fs::File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let len = f.metadata()?.len();
    if len < 3 * BLOCK_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: too small to be an nvmfs image", path.display()),
        ));
    }
    let pm = crate::fs::mount::stable_view(&f, path, len, || Pm::map_file(&f, path, len, false))?;
    inspect_pm(&pm)
}

pub fn inspect_pm(pm: &Pm) -> io::Result<Info> {
    crate::fs::mount::check_region_len(pm)?;
    let (sb, used_replica) = read_superblock(pm)?;
    let geo = sb.geo.clone();
    if geo.total_blocks * BLOCK_SIZE > pm.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "image is shorter than its superblock says",
        ));
    }
    let state = MountState::decode(&pm.read_vec(STATE_BLOCK * BLOCK_SIZE, STATE_LEN));
    let mut info = Info {
        size_bytes: pm.len(),
        media_mode: pm.mode(),
        flush: pm.flush_kind(),
        version: sb.version,
        uuid: sb.uuid.iter().map(|b| format!("{b:02x}")).collect(),
        created_ns: sb.created_ns,
        clean: state.as_ref().is_some_and(|s| s.state == STATE_CLEAN),
        mount_count: state.map_or(0, |s| s.mount_count),
        used_replica,
        blocks_used: 0,
        inodes_used: 0,
        files: 0,
        dirs: 0,
        symlinks: 0,
        others: 0,
        mapping: sb.mapping.name(),
        load_factor: 0.0,
        tombstones: 0,
        reserved: 0,
        probe_mean: 0.0,
        probe_max: 0,
        probe_hist: [0; 7],
        tree_nodes: 0,
        tree_data_blocks: 0,
        tier: scan_tier(pm, &sb)?,
        geo: geo.clone(),
    };
    count_inodes(pm, &geo, &mut info);
    match sb.mapping {
        MappingKind::HashFs => scan_table(pm, &geo, &mut info),
        MappingKind::Extent => scan_trees(&extent::Extent::new(), pm, &geo, &mut info),
        MappingKind::Radix => scan_trees(&radix::Radix, pm, &geo, &mut info),
        MappingKind::Cuckoo => scan_cuckoo(pm, &geo, &mut info),
        MappingKind::Level => scan_level(pm, &geo, &mut info),
    }
    Ok(info)
}

fn count_inodes(pm: &Pm, geo: &Geometry, info: &mut Info) {
    for ino in 1..geo.inode_count {
        let i = Inode::decode_raw(&pm.read_array::<{ INODE_SIZE as usize }>(geo.inode_off(ino)));
        if i.is_free() {
            continue;
        }
        info.inodes_used += 1;
        match i.file_type() {
            Some(FileType::File) => info.files += 1,
            Some(FileType::Dir) => info.dirs += 1,
            Some(FileType::Symlink) => info.symlinks += 1,
            _ => info.others += 1,
        }
    }
}

/// Counts nodes and mapped blocks of every tree; damaged trees count as far as they validate
/// (`fsck` says what is wrong). Blocks used are the bitmap's.
fn scan_trees<T: BlockTree>(t: &T, pm: &Pm, geo: &Geometry, info: &mut Info) {
    tree::census(t, pm, geo, &mut |_, _| {}, &mut |_, r| match r {
        Reach::Node(_) => info.tree_nodes += 1,
        Reach::Data { .. } => info.tree_data_blocks += 1,
    });
    info.blocks_used = (0..geo.data_blocks)
        .filter(|&b| balloc::bit(pm, geo, b))
        .count() as u64;
    info.load_factor = info.blocks_used as f64 / geo.data_blocks as f64;
}

/// Counts mapped blocks; the table's blocks in the data region count as its nodes.
fn scan_cuckoo(pm: &Pm, geo: &Geometry, info: &mut Info) {
    cuckoo::census(pm, geo, &mut |_, _| {}, &mut |_, r| {
        if let Reach::Data { .. } = r {
            info.tree_data_blocks += 1
        }
    });
    info.tree_nodes = cuckoo::Table::of(geo).ext_blocks;
    info.blocks_used = (0..geo.data_blocks)
        .filter(|&b| balloc::bit(pm, geo, b))
        .count() as u64;
    info.load_factor = info.blocks_used as f64 / geo.data_blocks as f64;
}

/// Counts mapped blocks; the table's region in the data region counts as its nodes.
fn scan_level(pm: &Pm, geo: &Geometry, info: &mut Info) {
    level::census(pm, geo, &mut |_, _| {}, &mut |_, r| {
        if let Reach::Data { pending: false, .. } = r {
            info.tree_data_blocks += 1
        }
    });
    info.tree_nodes = level::Table::of(geo).ext_blocks;
    info.blocks_used = (0..geo.data_blocks)
        .filter(|&b| balloc::bit(pm, geo, b))
        .count() as u64;
    info.load_factor = info.blocks_used as f64 / geo.data_blocks as f64;
}

fn scan_table(pm: &Pm, geo: &Geometry, info: &mut Info) {
    let table = HashFs::new(geo, 0);
    let mut probe_sum = 0u64;
    for s in 0..geo.data_blocks {
        let v = pm.load_u64(geo.slot_off(s));
        match v {
            hashfs::FREE => {}
            TOMBSTONE => info.tombstones += 1,
            RESERVED => info.reserved += 1,
            k => {
                info.blocks_used += 1;
                let probe = table.probe_distance(k, s) + 1;
                probe_sum += probe;
                info.probe_max = info.probe_max.max(probe);
                info.probe_hist[bucket(probe)] += 1;
            }
        }
    }
    info.load_factor = info.blocks_used as f64 / geo.data_blocks as f64;
    if info.blocks_used > 0 {
        info.probe_mean = probe_sum as f64 / info.blocks_used as f64;
    }
}
