//! The catalogue of kernel file-system variants: Table III of the study,
//! as far as a current kernel and a loop device can reproduce it.

use super::probe::{self, OPTIONAL_FAMILIES};
use super::MIB;
use serde::Serialize;

/// The study's allocation-group count for `xfs-buf-464`: ext4's block-group
/// count on its 58 GiB ramdisk (58 GiB / 128 MiB per group = 464).
pub const PAPER_XFS_AGCOUNT: u64 = 464;

/// Smallest allocation group `xfs-agN` uses. The internal log must fit in
/// one AG, and xfsprogs since 5.15 (6.1 here) refuses logs under 64 MiB on
/// file systems of 300 MB or more; an AG also holds a few header blocks.
/// Checked with mkfs.xfs 6.1: 512 MiB takes 7 AGs (73 MiB) but not 8
/// (64 MiB, "Log size must be at least 64MB"), 2 GiB takes 31 but not 32.
/// xfs's own AG minimum, 16 MiB, is never the binding limit.
pub const XFS_MIN_AG_BYTES: u64 = 65 * MIB;

/// One file-system variant to benchmark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Variant {
    /// Unique name used by the lab, e.g. `ext4`, `ext4-nodelalloc`, `xfs-ag7`.
    pub name: String,
    /// The study's abbreviation (`ext2-buf`, `ext3-data`, `xfs-buf-464`, ...);
    /// `None` for variants the study did not run (ext3-writeback, btrfs,
    /// tmpfs).
    pub paper_name: Option<String>,
    /// Kernel file-system type given to `mount -t`.
    pub fs_type: String,
    /// The mkfs command line, program first; the device is appended at run
    /// time. Empty for tmpfs, which has no block device.
    pub mkfs_args: Vec<String>,
    /// The `mount -o` value; empty for the defaults. For tmpfs it holds
    /// `size=`.
    pub mount_options: String,
    /// One line: what it is and which variant of the study it stands for.
    pub description: String,
}

impl Variant {
    /// Whether the variant lives on a (loop) block device; only tmpfs does
    /// not.
    pub fn is_block_backed(&self) -> bool {
        !self.mkfs_args.is_empty()
    }
}

/// Every variant this machine may run on a device of `device_size_bytes`,
/// in the study's order: ext2, ext3 (ordered, writeback, journal), ext4
/// (default, nodelalloc), xfs (default, high AG count), btrfs, tmpfs; then
/// f2fs (2, 4, 6 active logs) and nilfs2 when both the kernel and the mkfs
/// program support them (see [`unavailable_variants`](super::unavailable_variants)
/// otherwise). Listing a variant does not mean it can run: see
/// [`availability`](super::availability).
pub fn catalogue(device_size_bytes: u64) -> Vec<Variant> {
    let mut all: Vec<Variant> = EXT_AND_XFS.iter().map(Fixed::variant).collect();
    all.push(xfs_high(device_size_bytes));
    all.push(BTRFS.variant());
    all.push(tmpfs(device_size_bytes));
    for family in OPTIONAL_FAMILIES {
        if probe::family_support(family).is_ok() {
            all.extend(optional_variants(family.fs_type));
        }
    }
    all
}

/// The AG count of `xfs-agN` on a device of `device_size_bytes`: the
/// study's 464, or as many AGs as fit at [`XFS_MIN_AG_BYTES`] each (at
/// least 1, so that tiny sizes still give a well-formed, if refused, entry).
pub fn xfs_high_agcount(device_size_bytes: u64) -> u64 {
    (device_size_bytes / XFS_MIN_AG_BYTES).clamp(1, PAPER_XFS_AGCOUNT)
}

/// A variant whose options do not depend on the device size.
struct Fixed {
    name: &'static str,
    paper_name: Option<&'static str>,
    fs_type: &'static str,
    /// The mkfs program and its flags (the device comes last).
    mkfs: &'static str,
    mkfs_flags: &'static [&'static str],
    mount_options: &'static str,
    description: &'static str,
}

impl Fixed {
    fn variant(&self) -> Variant {
        variant(
            self.name,
            self.paper_name,
            self.fs_type,
            argv(self.mkfs, self.mkfs_flags),
            self.mount_options,
            self.description.to_string(),
        )
    }
}

fn variant(
    name: &str,
    paper_name: Option<&str>,
    fs_type: &str,
    mkfs_args: Vec<String>,
    mount_options: &str,
    description: String,
) -> Variant {
    Variant {
        name: name.to_string(),
        paper_name: paper_name.map(str::to_string),
        fs_type: fs_type.to_string(),
        mkfs_args,
        mount_options: mount_options.to_string(),
        description,
    }
}

/// A command line: `program` then `flags`.
fn argv(program: &str, flags: &[&str]) -> Vec<String> {
    std::iter::once(program)
        .chain(flags.iter().copied())
        .map(str::to_string)
        .collect()
}

/// mkfs.ext2/3/4 flags: 4 KiB blocks as in the study, and the inode tables
/// and journal zeroed by mkfs rather than lazily by the ext4lazyinit thread
/// after mounting, which would write in the background of the first
/// measurements. (Current kernels mount ext2 and ext3 with the ext4
/// driver.)
const EXT_FLAGS: &[&str] = &[
    "-F",
    "-q",
    "-b",
    "4096",
    "-E",
    "lazy_itable_init=0,lazy_journal_init=0",
];

/// The study's ext2, ext3, ext4 and default xfs variants, plus ext3
/// writeback, in the study's order.
const EXT_AND_XFS: &[Fixed] = &[
    Fixed {
        name: "ext2",
        paper_name: Some("ext2-buf"),
        fs_type: "ext2",
        mkfs: "mkfs.ext2",
        mkfs_flags: EXT_FLAGS,
        mount_options: "",
        description: "ext2, no journal (the study's ext2-buf)",
    },
    Fixed {
        name: "ext3",
        paper_name: Some("ext3-buf"),
        fs_type: "ext3",
        mkfs: "mkfs.ext3",
        mkfs_flags: EXT_FLAGS,
        mount_options: "data=ordered",
        description: "ext3, ordered journaling, the default (the study's ext3-buf)",
    },
    Fixed {
        name: "ext3-writeback",
        paper_name: None,
        fs_type: "ext3",
        mkfs: "mkfs.ext3",
        mkfs_flags: EXT_FLAGS,
        mount_options: "data=writeback",
        description: "ext3, writeback journaling (not in the study, which left writeback \
                      journaling to xfs)",
    },
    Fixed {
        name: "ext3-journal",
        paper_name: Some("ext3-data"),
        fs_type: "ext3",
        mkfs: "mkfs.ext3",
        mkfs_flags: EXT_FLAGS,
        mount_options: "data=journal",
        description: "ext3, data journaling: file data goes through the journal too (the \
                      study's ext3-data)",
    },
    Fixed {
        name: "ext4",
        paper_name: Some("ext4-buf"),
        fs_type: "ext4",
        mkfs: "mkfs.ext4",
        mkfs_flags: EXT_FLAGS,
        mount_options: "",
        description: "ext4 defaults: extents, delayed allocation (the study's ext4-buf)",
    },
    Fixed {
        name: "ext4-nodelalloc",
        paper_name: Some("ext4-no-del"),
        fs_type: "ext4",
        mkfs: "mkfs.ext4",
        mkfs_flags: EXT_FLAGS,
        mount_options: "nodelalloc",
        description: "ext4 without delayed allocation: blocks are allocated at write time \
                      (the study's ext4-no-del)",
    },
    Fixed {
        name: "xfs",
        paper_name: Some("xfs-buf-4"),
        fs_type: "xfs",
        mkfs: "mkfs.xfs",
        mkfs_flags: &["-f", "-q"],
        mount_options: "",
        description: "xfs defaults: 4 allocation groups on devices under 4 TiB (the study's \
                      xfs-buf-4)",
    },
];

const BTRFS: Fixed = Fixed {
    name: "btrfs",
    paper_name: None,
    fs_type: "btrfs",
    mkfs: "mkfs.btrfs",
    mkfs_flags: &["-f", "-q"],
    mount_options: "",
    description: "btrfs defaults: copy-on-write, checksums (not in the study)",
};

/// The study's xfs-buf-464, with as many AGs as the device allows.
fn xfs_high(device_size_bytes: u64) -> Variant {
    let n = xfs_high_agcount(device_size_bytes);
    let description = format!(
        "xfs with {n} allocation groups (the study's xfs-buf-464: 464 AGs, ext4's block-group \
         count on its 58 GiB ramdisk; here min(464, size / 65 MiB) because each AG must hold \
         xfs's 64 MiB minimum log)"
    );
    let agcount = format!("agcount={n}");
    let mkfs = argv("mkfs.xfs", &["-f", "-q", "-d", &agcount]);
    variant(
        &format!("xfs-ag{n}"),
        Some("xfs-buf-464"),
        "xfs",
        mkfs,
        "",
        description,
    )
}

fn tmpfs(device_size_bytes: u64) -> Variant {
    variant(
        "tmpfs",
        None,
        "tmpfs",
        Vec::new(),
        &format!("size={device_size_bytes}"),
        "tmpfs: page cache only, no block device (not in the study; the in-memory upper bound)"
            .to_string(),
    )
}

/// f2fs with 2, 4 and 6 active logs (the study's f2fs_2/4/6) or nilfs2
/// (its nilfs), offered only when [`probe::family_support`] says so.
fn optional_variants(fs_type: &str) -> Vec<Variant> {
    match fs_type {
        "f2fs" => [2, 4, 6].into_iter().map(f2fs).collect(),
        "nilfs2" => vec![NILFS2.variant()],
        _ => Vec::new(),
    }
}

fn f2fs(active_logs: u32) -> Variant {
    let name = format!("f2fs-{active_logs}");
    let paper_name = format!("f2fs_{active_logs}");
    let description = format!(
        "f2fs, log-structured for flash, {active_logs} active logs (the study's {paper_name})"
    );
    let mkfs = argv("mkfs.f2fs", &["-f", "-q"]);
    let options = format!("active_logs={active_logs}");
    variant(
        &name,
        Some(&paper_name),
        "f2fs",
        mkfs,
        &options,
        description,
    )
}

const NILFS2: Fixed = Fixed {
    name: "nilfs2",
    paper_name: Some("nilfs"),
    fs_type: "nilfs2",
    mkfs: "mkfs.nilfs2",
    mkfs_flags: &["-f", "-q", "-b", "4096"],
    mount_options: "",
    description: "nilfs2 defaults: log-structured with continuous snapshots (the study's nilfs)",
};
