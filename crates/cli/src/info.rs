//! `nvmfs info`: geometry, state, usage and HashFS statistics of an image.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use nvmfs::info::{self, Info, PROBE_BUCKETS};
use nvmfs::layout::inode::INODE_SIZE;
use nvmfs::layout::BLOCK_SIZE;
use serde::Serialize;

use crate::output::{self, percent};
use crate::size::format_size;

#[derive(clap::Args, Debug)]
#[command(
    about = "Show the geometry, state and usage of an nvmfs image",
    long_about = "Show the geometry, state and usage of an nvmfs image.\n\n\
        Prints the size and the on-media regions (superblocks, mount state, journal lanes, \
        inode table, HashFS hash table, data region) with their start block and size; the \
        media mode and cache-line flush instruction this machine would use; version, UUID and \
        creation time; whether the image was unmounted cleanly and how often it was mounted; \
        block and inode usage; and the shape of the HashFS table (load factor, tombstones, \
        reserved slots, probe lengths). The image is only read, takes no lock and may be \
        mounted by another process (figures are then a snapshot).",
    after_help = "Exit status: 0 on success, 1 on error (e.g. not an nvmfs image)."
)]
pub struct Args {
    /// Print one JSON object (snake_case keys, units in the key names) instead of text
    #[arg(long)]
    pub json: bool,
    /// The image file to inspect
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
}

pub fn run(args: &Args) -> u8 {
    let info = match info::inspect(&args.image) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("nvmfs info: {}", output::with_path(&args.image, &e));
            return 1;
        }
    };
    let summary = Summary::new(&args.image, &info);
    let text = if args.json {
        match serde_json::to_string_pretty(&summary) {
            Ok(mut s) => {
                s.push('\n');
                s
            }
            Err(e) => {
                eprintln!("nvmfs info: {e}");
                return 1;
            }
        }
    } else {
        summary.text()
    };
    if output::print("info", &text) {
        0
    } else {
        1
    }
}

/// Everything `info` reports; serialized as is for --json.
#[derive(Serialize)]
struct Summary {
    image: String,
    /// Length of the image file.
    size_bytes: u64,
    /// What the file system uses of it (whole blocks).
    fs_size_bytes: u64,
    block_size_bytes: u64,
    total_blocks: u64,
    version: u32,
    uuid: String,
    created_ns: u64,
    created_utc: String,
    media_mode: String,
    media_mode_description: &'static str,
    /// The `huge=` policy of the tmpfs holding the image (never, always, within_size, advise),
    /// which decides whether mounts map it with 2 MiB pages; null when not on tmpfs.
    tmpfs_huge_pages: Option<String>,
    flush_instruction: &'static str,
    clean: bool,
    mount_count: u64,
    used_replica_superblock: bool,
    regions: Regions,
    usage: Usage,
    mapping: Mapping,
    /// The SSD tier (images made with `mkfs --ssd`); null for a PM-only image.
    tier: Option<Tier>,
}

#[derive(Serialize)]
struct Tier {
    ssd: String,
    region: Region,
    extents: u64,
    extent_bytes: u64,
    free_extents: u64,
    full_extents: u64,
    ssd_valid_blocks: u64,
    ssd_utilisation_percent: f64,
    pm_clean_blocks: u64,
    pm_dirty_blocks: u64,
    dirty_high_percent: f64,
    dirty_low_percent: f64,
    clean_at_percent: f64,
    free_extents_min: u32,
}

#[derive(Serialize)]
struct Region {
    start_block: u64,
    blocks: u64,
    size_bytes: u64,
}

impl Region {
    fn new(start_block: u64, blocks: u64) -> Self {
        Region {
            start_block,
            blocks,
            size_bytes: blocks * BLOCK_SIZE,
        }
    }
}

#[derive(Serialize)]
struct Regions {
    superblock: Region,
    superblock_replica: Region,
    mount_state: Region,
    journal: JournalRegion,
    inode_table: InodeRegion,
    hash_table: HashRegion,
    data: Region,
}

#[derive(Serialize)]
struct JournalRegion {
    #[serde(flatten)]
    region: Region,
    lanes: u32,
    blocks_per_lane: u32,
}

#[derive(Serialize)]
struct InodeRegion {
    #[serde(flatten)]
    region: Region,
    inode_slots: u64,
    inode_size_bytes: u64,
}

#[derive(Serialize)]
struct HashRegion {
    #[serde(flatten)]
    region: Region,
    /// One 8-byte entry per data block.
    entries: u64,
}

#[derive(Serialize)]
struct Usage {
    blocks_total: u64,
    blocks_used: u64,
    blocks_free: u64,
    blocks_used_percent: f64,
    bytes_used: u64,
    bytes_free: u64,
    /// Usable inodes (inode 0 is never used).
    inodes_total: u64,
    inodes_used: u64,
    inodes_free: u64,
    inodes_used_percent: f64,
    files: u64,
    directories: u64,
    symlinks: u64,
    others: u64,
}

#[derive(Serialize)]
struct Mapping {
    name: &'static str,
    /// Used slots over data blocks (0..1).
    load_factor: f64,
    tombstones: u64,
    reserved_slots: u64,
    probe_length_mean_slots: f64,
    probe_length_max_slots: u64,
    probe_histogram: Vec<Bucket>,
    /// Tree mappings (extent, radix): blocks holding tree nodes; cuckoo, level: data blocks holding
    /// the end of its table.
    tree_node_blocks: u64,
    /// Tree mappings: data blocks the trees map.
    tree_data_blocks: u64,
}

#[derive(Serialize)]
struct Bucket {
    /// Probe length in slots: "1", "2", "3-4", ..., ">64".
    slots: &'static str,
    blocks: u64,
}

/// What a tmpfs `huge=` policy means for the image's mapping.
fn pages_line(policy: &str) -> String {
    match policy {
        "always" | "within_size" => format!(
            "2 MiB where the file's pages are huge (its tmpfs has huge={policy}): fewer TLB misses"
        ),
        "advise" => "4 KiB unless a mapping asks for huge pages (tmpfs huge=advise)".into(),
        _ => format!(
            "4 KiB (its tmpfs has huge={policy}); an image on a tmpfs mounted with \
             -o huge=within_size gets 2 MiB pages and fewer TLB misses"
        ),
    }
}

impl Summary {
    fn new(path: &Path, i: &Info) -> Self {
        let g = &i.geo;
        let describe = i.media_mode.describe();
        let inodes_total = g.inode_count.saturating_sub(1);
        let blocks_free = g.data_blocks.saturating_sub(i.blocks_used);
        Summary {
            image: path.display().to_string(),
            size_bytes: i.size_bytes,
            fs_size_bytes: g.total_blocks * BLOCK_SIZE,
            block_size_bytes: BLOCK_SIZE,
            total_blocks: g.total_blocks,
            version: i.version,
            uuid: output::dashed_uuid(&i.uuid),
            created_ns: i.created_ns,
            created_utc: output::iso8601_utc(i.created_ns),
            media_mode: describe
                .split_whitespace()
                .next()
                .unwrap_or(describe)
                .to_string(),
            media_mode_description: describe,
            tmpfs_huge_pages: nvmfs::media::pages::tmpfs_huge_policy(path),
            flush_instruction: i.flush.name(),
            clean: i.clean,
            mount_count: i.mount_count,
            used_replica_superblock: i.used_replica,
            regions: Regions {
                superblock: Region::new(0, 1),
                superblock_replica: Region::new(1, 1),
                mount_state: Region::new(2, g.journal_start.saturating_sub(2)),
                journal: JournalRegion {
                    region: Region::new(g.journal_start, g.itable_start - g.journal_start),
                    lanes: g.journal_lanes,
                    blocks_per_lane: g.lane_blocks,
                },
                inode_table: InodeRegion {
                    region: Region::new(g.itable_start, g.hash_start - g.itable_start),
                    inode_slots: g.inode_count,
                    inode_size_bytes: INODE_SIZE,
                },
                hash_table: HashRegion {
                    region: Region::new(g.hash_start, g.hash_blocks),
                    entries: g.data_blocks,
                },
                data: Region::new(g.data_start, g.data_blocks),
            },
            usage: Usage {
                blocks_total: g.data_blocks,
                blocks_used: i.blocks_used,
                blocks_free,
                blocks_used_percent: round2(percent(i.blocks_used, g.data_blocks)),
                bytes_used: i.blocks_used * BLOCK_SIZE,
                bytes_free: blocks_free * BLOCK_SIZE,
                inodes_total,
                inodes_used: i.inodes_used,
                inodes_free: inodes_total.saturating_sub(i.inodes_used),
                inodes_used_percent: round2(percent(i.inodes_used, inodes_total)),
                files: i.files,
                directories: i.dirs,
                symlinks: i.symlinks,
                others: i.others,
            },
            mapping: Mapping {
                name: i.mapping,
                load_factor: i.load_factor,
                tombstones: i.tombstones,
                reserved_slots: i.reserved,
                probe_length_mean_slots: i.probe_mean,
                probe_length_max_slots: i.probe_max,
                probe_histogram: PROBE_BUCKETS
                    .iter()
                    .zip(i.probe_hist)
                    .map(|(&slots, blocks)| Bucket { slots, blocks })
                    .collect(),
                tree_node_blocks: i.tree_nodes,
                tree_data_blocks: i.tree_data_blocks,
            },
            tier: i.tier.as_ref().map(|t| {
                let blocks = t.extents * nvmfs::layout::tier::BLOCKS_PER_EXTENT;
                Tier {
                    ssd: t.ssd_path.clone(),
                    region: Region::new(t.header_block, 1 + t.table_blocks),
                    extents: t.extents,
                    extent_bytes: nvmfs::layout::tier::EXTENT_BYTES,
                    free_extents: t.free_extents,
                    full_extents: t.full_extents,
                    ssd_valid_blocks: t.valid_blocks,
                    ssd_utilisation_percent: round2(percent(t.valid_blocks, blocks)),
                    pm_clean_blocks: t.clean_blocks,
                    pm_dirty_blocks: t.dirty_blocks,
                    dirty_high_percent: t.marks.dirty_high as f64 / 10.0,
                    dirty_low_percent: t.marks.dirty_low as f64 / 10.0,
                    clean_at_percent: t.marks.clean_at as f64 / 10.0,
                    free_extents_min: t.marks.free_extents_min,
                }
            }),
        }
    }

    fn text(&self) -> String {
        let mut s = String::new();
        let u = &self.usage;
        let m = &self.mapping;
        let r = &self.regions;
        let _ = writeln!(s, "image:          {}", self.image);
        let _ = write!(
            s,
            "size:           {} ({} blocks of {})",
            format_size(self.fs_size_bytes),
            self.total_blocks,
            format_size(self.block_size_bytes)
        );
        if self.size_bytes != self.fs_size_bytes {
            let _ = write!(s, "; the file is {} bytes", self.size_bytes);
        }
        s.push('\n');
        let _ = writeln!(s, "version:        {}", self.version);
        let _ = writeln!(s, "uuid:           {}", self.uuid);
        let _ = writeln!(s, "created:        {}", self.created_utc);
        let _ = writeln!(s, "media:          {}", self.media_mode_description);
        if let Some(p) = &self.tmpfs_huge_pages {
            let _ = writeln!(s, "pages:          {}", pages_line(p));
        }
        let _ = writeln!(s, "flush:          {}", self.flush_instruction);
        let state = if self.clean {
            "clean (unmounted)"
        } else {
            "not clean: mounted now, or not unmounted cleanly (recovered at the next mount)"
        };
        let _ = writeln!(s, "state:          {state}");
        let _ = writeln!(s, "mount count:    {}", self.mount_count);
        let sb = if self.used_replica_superblock {
            "replica (the primary is damaged: run `nvmfs fsck`)"
        } else {
            "primary"
        };
        let _ = writeln!(s, "superblock:     {sb}");

        let _ = writeln!(s, "\nregions:          start block      blocks  size");
        let mut region = |name: &str, reg: &Region, extra: String| {
            let _ = writeln!(
                s,
                "  {name:<14} {:>13} {:>11}  {}{extra}",
                reg.start_block,
                reg.blocks,
                format_size(reg.size_bytes)
            );
        };
        region("superblock", &r.superblock, String::new());
        region("replica", &r.superblock_replica, String::new());
        region("mount state", &r.mount_state, String::new());
        region(
            "journal",
            &r.journal.region,
            format!(
                " ({} lanes of {} blocks)",
                r.journal.lanes, r.journal.blocks_per_lane
            ),
        );
        region(
            "inode table",
            &r.inode_table.region,
            format!(
                " ({} inodes of {} B)",
                r.inode_table.inode_slots, r.inode_table.inode_size_bytes
            ),
        );
        if m.name == "hashfs" {
            region(
                "hash table",
                &r.hash_table.region,
                format!(" ({} entries)", r.hash_table.entries),
            );
        } else {
            // The same blocks hold the tree mappings' bitmap and root table (FORMAT.md §6a),
            // or the bitmap and the start of the cuckoo (§6b) or level hashing (§6c) table.
            let what = if m.name == "cuckoo" || m.name == "level" {
                "bitmap+table"
            } else {
                "bitmap+roots"
            };
            region(
                what,
                &r.hash_table.region,
                format!(" ({} bitmap bits)", r.hash_table.entries),
            );
        }
        region("data", &r.data, String::new());

        let _ = writeln!(s, "\nusage:");
        let _ = writeln!(
            s,
            "  blocks:       {} used ({:.1}%, {}), {} free ({}), {} total",
            u.blocks_used,
            u.blocks_used_percent,
            format_size(u.bytes_used),
            u.blocks_free,
            format_size(u.bytes_free),
            u.blocks_total
        );
        let _ = writeln!(
            s,
            "  inodes:       {} used ({:.1}%), {} free, {} total",
            u.inodes_used, u.inodes_used_percent, u.inodes_free, u.inodes_total
        );
        let _ = writeln!(
            s,
            "  kinds:        {} files, {} directories, {} symlinks, {} others",
            u.files, u.directories, u.symlinks, u.others
        );

        if let Some(t) = &self.tier {
            let _ = writeln!(s, "\nSSD tier:       {}", t.ssd);
            let _ = writeln!(
                s,
                "  size:         {} extents of {} ({}), {} free, {} full",
                t.extents,
                format_size(t.extent_bytes),
                format_size(t.extents * t.extent_bytes),
                t.free_extents,
                t.full_extents
            );
            let _ = writeln!(
                s,
                "  utilisation:  {:.1}% ({} valid blocks)",
                t.ssd_utilisation_percent, t.ssd_valid_blocks
            );
            let _ = writeln!(
                s,
                "  PM blocks:    {} dirty, {} clean (also on the SSD)",
                t.pm_dirty_blocks, t.pm_clean_blocks
            );
            let _ = writeln!(
                s,
                "  watermarks:   flush above {}% dirty down to {}%; clean above {}% with under {} free extents",
                t.dirty_high_percent, t.dirty_low_percent, t.clean_at_percent, t.free_extents_min
            );
        }
        let _ = writeln!(s, "\nmapping:        {}", m.name);
        if m.name != "hashfs" {
            let _ = writeln!(s, "  blocks used:  {:.2}% (bitmap)", m.load_factor * 100.0);
            if m.name == "cuckoo" || m.name == "level" {
                let _ = writeln!(s, "  table:        {} data blocks", m.tree_node_blocks);
            } else {
                let _ = writeln!(s, "  tree nodes:   {} blocks", m.tree_node_blocks);
            }
            let _ = writeln!(s, "  mapped data:  {} blocks", m.tree_data_blocks);
            return s;
        }
        let _ = writeln!(s, "  load factor:  {:.2}%", m.load_factor * 100.0);
        let _ = writeln!(s, "  tombstones:   {}", m.tombstones);
        let _ = writeln!(s, "  reserved:     {} slots", m.reserved_slots);
        let _ = writeln!(
            s,
            "  probe length: mean {:.2}, max {} slots",
            m.probe_length_mean_slots, m.probe_length_max_slots
        );
        let _ = writeln!(s, "  probe length histogram (slots: blocks):");
        for b in &m.probe_histogram {
            let _ = writeln!(
                s,
                "    {:>5}: {:>12}  {:5.1}%",
                b.slots,
                b.blocks,
                percent(b.blocks, u.blocks_used)
            );
        }
        s
    }
}

/// Two decimals are plenty for a percentage in JSON.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
