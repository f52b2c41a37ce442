//! Formatting, mounting, recovery and unmounting.
//!
//! Mount order (read-write): superblock (primary, else replica) -> journal roll-back of armed
//! records -> inode-table scan (free pools, orphans) -> hash-table scan (used count, reserved
//! slots turned into tombstones; after an unclean shutdown also stray slots and per-inode
//! block counts) -> tombstone compaction -> orphans freed -> state block set to "mounted".

use std::hash::BuildHasher;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::dir::DirCache;
use super::locks::{OpenTable, Stripes};
use super::Peers;
use super::{corrupt_to_io, errno, now_ns, Fs, Inner};
use crate::alloc::InodeAlloc;
use crate::journal::{self, Journal, LaneState};
use crate::layout::inode::{FileType, Inode, INODE_SIZE};
use crate::layout::state::{MountState, STATE_CLEAN, STATE_LEN, STATE_MOUNTED};
use crate::layout::superblock::{
    Geometry, Superblock, PRIMARY_BLOCK, REPLICA_BLOCK, ROOT_INO, STATE_BLOCK,
};
use crate::layout::{corrupted, Corrupted, BLOCK_SIZE};
use crate::mapping::hashfs::{self, HashFs, SharedWord, UsedCount, RESERVED, TOMBSTONE};
use crate::mapping::tree::{self, TreeMap};
use crate::mapping::{extent, radix, FileMap, MappingKind};
use crate::media::Pm;

/// mkfs parameters.
#[derive(Clone, Debug)]
pub struct FormatOptions {
    /// Image size in bytes (rounded down to whole 4 KiB blocks).
    pub size_bytes: u64,
    /// Number of inodes; default one per 16 KiB of image.
    pub inode_count: Option<u64>,
    /// The file mapping (default HashFS).
    pub mapping: MappingKind,
    /// Tree mappings: the layout score (0..=1) the allocator aims at: the share of a file's
    /// blocks that follow the previous block physically. None: as contiguous as free space
    /// allows. Neal et al. compare mappings at several layout scores.
    pub layout_score: Option<f64>,
    /// An SSD tier under the PM image (docs/TIER.md): cold file data lives there.
    pub tier: Option<TierFormat>,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            size_bytes: 1 << 30,
            inode_count: None,
            mapping: MappingKind::HashFs,
            layout_score: None,
            tier: None,
        }
    }
}

/// The SSD tier of a new image (mkfs `--ssd PATH [--ssd-size N]`).
#[derive(Clone, Debug, PartialEq)]
pub struct TierFormat {
    /// The capacity device: a block device or a file (created if missing). None: a buffer in
    /// memory (in-memory images only).
    pub ssd: Option<PathBuf>,
    /// Bytes of it to use; default the device's or file's size. Rounded down to whole
    /// 512 KiB extents; the first extent holds the SSD's header.
    pub ssd_size: Option<u64>,
    /// Flush and cleaning thresholds (the seed's 80% / 50% / 85% / 8 by default).
    pub marks: crate::layout::tier::Watermarks,
}

impl TierFormat {
    /// A tier on `ssd` of `ssd_size` bytes with the default thresholds.
    pub fn new(ssd: Option<PathBuf>, ssd_size: Option<u64>) -> TierFormat {
        TierFormat {
            ssd,
            ssd_size,
            marks: Default::default(),
        }
    }
}

/// Mount parameters.
#[derive(Clone, Debug, Default)]
pub struct MountOptions {
    pub read_only: bool,
    /// The SSD of a tiered image, when not at the path recorded at mkfs.
    pub ssd: Option<PathBuf>,
}

/// What mount found and repaired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The image was not unmounted cleanly.
    pub unclean: bool,
    /// The primary superblock was damaged and the replica was used.
    pub used_replica: bool,
    pub lanes_rolled_back: u32,
    pub torn_lanes_cleared: u32,
    pub reserved_slots_cleared: u64,
    pub stray_blocks_freed: u64,
    pub block_counts_fixed: u64,
    pub orphans_freed: u64,
    pub tombstones_compacted: u64,
    /// Tiered images: SSD entries dropped (stale, or PM-resident after an unclean shutdown)
    /// and duplicate entries resolved.
    pub tier_stale_entries: u64,
    pub tier_duplicate_entries: u64,
}

fn uuid() -> [u8; 16] {
    let s = std::collections::hash_map::RandomState::new();
    let a = s.hash_one(now_ns());
    let b = s.hash_one(std::process::id());
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&a.to_le_bytes());
    u[8..].copy_from_slice(&b.to_le_bytes());
    u
}

/// Lays out an image of `blocks` blocks for `opts` with an SSD tier of `extents` data
/// extents (0: none), or says why it cannot be made. The tier region (header and block
/// table) takes the end of the image.
fn plan(blocks: u64, opts: &FormatOptions, extents: u64) -> io::Result<Geometry> {
    let invalid = |e| io::Error::new(io::ErrorKind::InvalidInput, e);
    let tier_blocks = if extents > 0 {
        let t = 1 + crate::layout::tier::table_blocks(extents);
        if opts.mapping != MappingKind::HashFs {
            return Err(invalid(format!(
                "an SSD tier needs the hashfs mapping, not {}",
                opts.mapping
            )));
        }
        if t * 2 > blocks {
            return Err(invalid(format!(
                "the SSD tier's block table ({} KiB for {} MiB of SSD) would take more than half of the {} MiB image",
                t * 4,
                extents / 2,
                blocks / 256
            )));
        }
        t
    } else {
        0
    };
    let mut geo = Geometry::compute(blocks - tier_blocks, opts.inode_count).map_err(invalid)?;
    geo.total_blocks = blocks;
    opts.mapping.check_fits(&geo).map_err(invalid)?;
    layout_permille(opts).map_err(invalid)?;
    Ok(geo)
}

/// Opens (or creates) the SSD of a new tiered image and counts its data extents.
fn open_new_ssd(t: &TierFormat) -> io::Result<(crate::tier::ssd::Ssd, u64)> {
    use crate::tier::ssd::Ssd;
    let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
    let ssd = match &t.ssd {
        Some(p) => Ssd::open(p, t.ssd_size)?,
        None => Ssd::memory(
            t.ssd_size
                .ok_or_else(|| invalid("an SSD in memory needs a size".into()))?,
        ),
    };
    let bytes = t.ssd_size.unwrap_or(ssd.len);
    if bytes > ssd.len {
        return Err(invalid(format!(
            "--ssd-size {bytes} is larger than the SSD ({} bytes)",
            ssd.len
        )));
    }
    Ok((ssd, ssd_data_extents(bytes)?))
}

/// The data extents a tier uses on `bytes` of SSD: all after the header extent, at most
/// `MAX_EXTENTS`; at least one, or the SSD is too small.
fn ssd_data_extents(bytes: u64) -> io::Result<u64> {
    use crate::layout::tier::{EXTENT_BYTES, MAX_EXTENTS};
    match (bytes / EXTENT_BYTES).saturating_sub(1).min(MAX_EXTENTS) {
        0 => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "SSD of {bytes} bytes is too small: the tier needs at least 1 MiB (a header extent and one data extent of 512 KiB)"
            ),
        )),
        n => Ok(n),
    }
}

/// The layout score of `opts` in thousandths, or why it cannot be used.
fn layout_permille(opts: &FormatOptions) -> Result<Option<u32>, String> {
    let Some(s) = opts.layout_score else {
        return Ok(None);
    };
    if !opts.mapping.uses_allocator() {
        return Err(format!(
            "a layout score needs a mapping with a block allocator (extent, radix, cuckoo or level), not {}",
            opts.mapping
        ));
    }
    if !(0.0..=1.0).contains(&s) {
        return Err(format!("layout score {s} is not between 0 and 1"));
    }
    Ok(Some((s * 1000.0).round() as u32))
}

/// Writes a fresh file system into `pm` (all zero on entry). An all-zero mapping region is an
/// empty table for every mapping: HashFS's free slots, or the tree mappings' empty bitmap and
/// root table, the cuckoo and level mappings' empty tables (whose blocks in the data region are marked
/// used in the bitmap here).
fn write_fresh(
    pm: &Pm,
    geo: &Geometry,
    opts: &FormatOptions,
    tier: Option<(&crate::tier::ssd::Ssd, u64)>,
) -> io::Result<()> {
    if opts.mapping == MappingKind::Cuckoo {
        crate::mapping::cuckoo::format(pm, geo);
    }
    if opts.mapping == MappingKind::Level {
        crate::mapping::level::format(pm, geo);
    }
    let id = uuid();
    let mut sb = Superblock::new(geo.clone(), id, now_ns() as u64).with_mapping(opts.mapping);
    sb.layout_score_permille = layout_permille(opts).expect("checked by plan");
    if let (Some((ssd, extents)), Some(t)) = (tier, &opts.tier) {
        let start = geo.total_blocks - 1 - crate::layout::tier::table_blocks(extents);
        let path = t
            .ssd
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        if path.len() > crate::layout::tier::PATH_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "SSD path longer than {} bytes",
                    crate::layout::tier::PATH_MAX
                ),
            ));
        }
        t.marks
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let hdr = crate::tier::new_header(extents, start, id, t.marks, path);
        crate::tier::Tier::format(pm, start, &hdr, ssd)?;
        sb = sb.with_tier(start);
    }
    let sb = sb.encode();
    pm.write(PRIMARY_BLOCK * BLOCK_SIZE, &sb);
    pm.write(REPLICA_BLOCK * BLOCK_SIZE, &sb);
    pm.write(STATE_BLOCK * BLOCK_SIZE, &MountState::default().encode());
    let now = now_ns();
    // SAFETY of ids: plain getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let root = Inode {
        mode: libc::S_IFDIR | 0o755,
        nlink: 2,
        uid,
        gid,
        atime_ns: now,
        mtime_ns: now,
        ctime_ns: now,
        generation: 1,
        parent: ROOT_INO as u32,
        ..Default::default()
    };
    pm.write(geo.inode_off(ROOT_INO), &root.encode());
    pm.persist(0, (STATE_BLOCK * BLOCK_SIZE) as usize + STATE_LEN);
    pm.persist(geo.inode_off(ROOT_INO), INODE_SIZE as usize);
    pm.fence();
    Ok(())
}

pub(crate) fn open_image(path: &Path, writable: bool) -> io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(writable)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let ft = f.metadata()?.file_type();
    // Block and DAX character devices need their size from an ioctl and are not supported
    // yet: images are regular files (on tmpfs, a DAX mount, or any file system).
    if !ft.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a regular file", path.display()),
        ));
    }
    Ok(f)
}

fn image_len(f: &std::fs::File) -> io::Result<u64> {
    Ok(f.metadata()?.len())
}

impl Fs {
    /// Creates (or overwrites) an image file at `path` and formats it.
    pub fn format(path: impl AsRef<Path>, opts: &FormatOptions) -> io::Result<()> {
        let path = path.as_ref();
        let blocks = opts.size_bytes / BLOCK_SIZE;
        let ssd = opts.tier.as_ref().map(open_new_ssd).transpose()?;
        let geo = plan(blocks, opts, ssd.as_ref().map_or(0, |s| s.1))?;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        lock_image(&f, path, true)?;
        // Truncating to zero first makes every byte of the new image read as zero.
        f.set_len(0)?;
        check_room(&f, path, blocks * BLOCK_SIZE)?;
        f.set_len(blocks * BLOCK_SIZE)?;
        preallocate(&f, blocks * BLOCK_SIZE)?;
        let pm = Pm::map_file(&f, path, blocks * BLOCK_SIZE, true)?;
        write_fresh(&pm, &geo, opts, ssd.as_ref().map(|(s, e)| (s, *e)))?;
        pm.sync_backing()?;
        unlock_image(&f);
        Ok(())
    }

    /// Mounts the image at `path`, running recovery if it was not unmounted cleanly.
    pub fn mount(path: impl AsRef<Path>, opts: &MountOptions) -> io::Result<Fs> {
        let path = path.as_ref();
        let f = open_image(path, !opts.read_only)?;
        lock_image(&f, path, !opts.read_only)?;
        let len = image_len(&f)?;
        if len < 3 * BLOCK_SIZE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: too small to be an nvmfs image ({len} bytes)",
                    path.display()
                ),
            ));
        }
        let pm = Pm::map_file(&f, path, len, !opts.read_only)?;
        Self::mount_pm(pm, opts, Some(path.to_path_buf()), Some(f))
    }

    /// Formats an in-memory image (tests, scratch use) and mounts it.
    pub fn format_in_memory(opts: &FormatOptions) -> io::Result<Fs> {
        let blocks = opts.size_bytes / BLOCK_SIZE;
        let ssd = opts.tier.as_ref().map(open_new_ssd).transpose()?;
        let geo = plan(blocks, opts, ssd.as_ref().map_or(0, |s| s.1))?;
        let pm = Pm::in_memory(blocks * BLOCK_SIZE);
        write_fresh(&pm, &geo, opts, ssd.as_ref().map(|(s, e)| (s, *e)))?;
        Self::mount_with_ssd(
            pm,
            &MountOptions::default(),
            None,
            None,
            None,
            ssd.map(|s| s.0),
        )
    }

    /// Formats the zeroed region `pm` (which may carry a persistence tracer) and mounts it.
    pub fn format_pm(pm: Pm) -> io::Result<Fs> {
        Self::format_pm_with(pm, MappingKind::HashFs)
    }

    /// Formats the zeroed region `pm` with `mapping` and mounts it.
    pub fn format_pm_with(pm: Pm, mapping: MappingKind) -> io::Result<Fs> {
        let opts = FormatOptions {
            size_bytes: pm.len(),
            mapping,
            ..Default::default()
        };
        let geo = plan(pm.len() / BLOCK_SIZE, &opts, 0)?;
        write_fresh(&pm, &geo, &opts, None)?;
        Self::mount_pm(pm, &MountOptions::default(), None, None)
    }

    /// Formats the zeroed region `pm` (which may carry a persistence tracer) as a tiered
    /// image on `ssd` (in memory, maybe traced) with `tier`'s thresholds, and mounts it.
    pub fn format_pm_tiered(
        pm: Pm,
        tier: &TierFormat,
        ssd: crate::tier::ssd::Ssd,
    ) -> io::Result<Fs> {
        let opts = FormatOptions {
            size_bytes: pm.len(),
            tier: Some(tier.clone()),
            ..Default::default()
        };
        let extents = ssd_data_extents(ssd.len)?;
        let geo = plan(pm.len() / BLOCK_SIZE, &opts, extents)?;
        write_fresh(&pm, &geo, &opts, Some((&ssd, extents)))?;
        Self::mount_pm_with_ssd(pm, &MountOptions::default(), ssd)
    }

    /// Mounts the tiered image in `pm` on `ssd` (tests, crash images).
    pub fn mount_pm_with_ssd(
        pm: Pm,
        opts: &MountOptions,
        ssd: crate::tier::ssd::Ssd,
    ) -> io::Result<Fs> {
        Self::mount_with_ssd(pm, opts, None, None, None, Some(ssd))
    }

    /// Mounts an image already in `pm` (tests, crash images).
    pub fn mount_pm(
        pm: Pm,
        opts: &MountOptions,
        path: Option<PathBuf>,
        image: Option<std::fs::File>,
    ) -> io::Result<Fs> {
        Self::mount_region(pm, opts, path, image, None)
    }

    /// Mounts `pm` as a plain mount (`shared` = None) or as one process of a shared mount.
    /// The first process of a shared mount recovers the image as a plain mount does; the
    /// others join it as it is, while it runs (the coordination in `nvmfs::shared` gives
    /// them the image to themselves meanwhile).
    pub(crate) fn mount_region(
        pm: Pm,
        opts: &MountOptions,
        path: Option<PathBuf>,
        image: Option<std::fs::File>,
        shared: Option<SharedParts>,
    ) -> io::Result<Fs> {
        Self::mount_with_ssd(pm, opts, path, image, shared, None)
    }

    /// `mount_region`, with the SSD of a tiered image already open (in-memory images);
    /// otherwise a tiered image's SSD is opened at `opts.ssd` or the path its header records.
    fn mount_with_ssd(
        pm: Pm,
        opts: &MountOptions,
        path: Option<PathBuf>,
        image: Option<std::fs::File>,
        shared: Option<SharedParts>,
        ssd: Option<crate::tier::ssd::Ssd>,
    ) -> io::Result<Fs> {
        check_region_len(&pm)?;
        let (sb, used_replica) = read_superblock(&pm)?;
        let geo = sb.geo.clone();
        if geo.total_blocks * BLOCK_SIZE > pm.len() {
            return Err(corrupt_to_io(corrupted(
                format!(
                    "superblock: image is {} bytes but the geometry needs {}",
                    pm.len(),
                    geo.total_blocks * BLOCK_SIZE
                ),
                0,
            )));
        }
        if !opts.read_only && !sb.writable() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "image has read-only-compatible features this build lacks; mount read-only",
            ));
        }
        if shared.is_some() && sb.mapping != MappingKind::HashFs {
            // The block allocator's free index is private to a process; only HashFS keeps
            // all of its allocation state in the image and one shared counter.
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "image uses the {} mapping: shared (multi-process) mounts need hashfs",
                    sb.mapping
                ),
            ));
        }
        if shared.is_some() && sb.tier_start.is_some() {
            // The LRU lists and the SSD index are private to a process.
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "image has an SSD tier: shared (multi-process) mounts of tiered images are not supported",
            ));
        }
        if let Some(parts) = shared.as_ref().filter(|p| !p.first) {
            let inner = Inner::assemble(
                pm,
                geo.clone(),
                sb,
                Box::new(HashFs::with_count(
                    &geo,
                    UsedCount::Shared(parts.used.clone_word()),
                )),
                InodeAlloc::unscanned(geo.inode_count),
                opts,
                path,
                image,
                Some(parts.peers.clone()),
            );
            return Ok(Fs {
                inner: Arc::new(inner),
            });
        }
        let state = MountState::decode(&pm.read_vec(STATE_BLOCK * BLOCK_SIZE, STATE_LEN));
        let unclean = state.as_ref().is_none_or(|s| s.state != STATE_CLEAN);
        let mut report = RecoveryReport {
            unclean,
            used_replica,
            ..Default::default()
        };
        if opts.read_only && unclean {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "image was not unmounted cleanly and needs recovery: mount it read-write or run `nvmfs fsck`",
            ));
        }
        if !opts.read_only {
            replay_journal(&pm, &geo, &mut report).map_err(corrupt_to_io)?;
        }
        let scan = scan_inodes(&pm, &geo).map_err(corrupt_to_io)?;
        let map = if sb.mapping == MappingKind::HashFs {
            open_hashfs(&pm, &geo, opts, unclean, shared.as_ref(), &mut report)
        } else {
            let recover = unclean && !opts.read_only;
            open_tree(&pm, &geo, &sb, recover, &mut report).map_err(corrupt_to_io)?
        };
        let mut inner = Inner::assemble(
            pm,
            geo.clone(),
            sb,
            map,
            InodeAlloc::new(geo.inode_count, scan.free.iter().copied()),
            opts,
            path,
            image,
            shared.as_ref().map(|p| p.peers.clone()),
        );
        if let Some(start) = inner.sb.tier_start {
            let ssd = match ssd {
                Some(s) => s,
                None => open_ssd(&inner.pm, start, inner.geo.total_blocks, opts)?,
            };
            let (tier, rec) = crate::tier::Tier::open(
                &inner.pm,
                &inner.geo,
                start,
                ssd,
                unclean && !opts.read_only,
                !opts.read_only,
            )?;
            report.tier_stale_entries = rec.stale_entries;
            report.tier_duplicate_entries = rec.duplicate_entries;
            inner.tier = Some(tier);
        }
        if !inner.read_only {
            report.orphans_freed = inner.free_unheld_orphans(&scan.orphans)?;
            let mut st = state.unwrap_or_default();
            st.state = STATE_MOUNTED;
            st.mount_count += 1;
            st.last_mount_ns = now_ns() as u64;
            write_state(&inner.pm, &st);
        }
        inner.recovery = report;
        Ok(Fs {
            inner: Arc::new(inner),
        })
    }

    /// A copy of the whole region (tests: crash images, fsck of a live file system).
    pub fn snapshot(&self) -> Vec<u8> {
        self.inner.pm.snapshot()
    }

    /// Lets go of this handle the way a crashed process would: the image stays marked
    /// mounted, so the next mount runs recovery (crash tests). Other handles keep working.
    pub fn drop_without_unmount(self) {
        self.inner.unmounted.store(true, Ordering::Release);
    }

    /// Whether `other` is a handle on this same mount (a clone of it), not merely on the same
    /// image: process-wide tables kept per mount (a lock table, say) key on this.
    pub fn same_mount(&self, other: &Fs) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The image file, if mounted from one.
    pub fn image_path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// How durable the mapped image is (`shm`, `dax`, `file` or `memory`; GUARANTEES.md §1).
    pub fn media_mode(&self) -> crate::media::MediaMode {
        self.inner.pm.mode()
    }

    /// Bytes of the image this mount maps with 2 MiB pages (media/pages.rs); None when it is
    /// not a file mapping or the kernel does not say.
    pub fn huge_mapped_bytes(&self) -> Option<u64> {
        self.inner.pm.huge_mapped_bytes()
    }

    /// The superblock in use.
    pub fn superblock(&self) -> &Superblock {
        &self.inner.sb
    }

    /// DRAM held beyond the mapping: directory indexes, open-file table, free-inode pools
    /// (approximate, for `info` and the DRAM target of the benchmark).
    pub fn dram_bytes(&self) -> u64 {
        let i = &self.inner;
        i.dirs.dram_bytes() + i.open.open_count() as u64 * 16 + i.inodes.free_count() * 4
    }

    /// What the mount found and repaired.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    /// Unmounts: the image is marked clean when the last handle (this one, its clones and any
    /// open files) is gone. Fails with EBUSY, leaving the remaining handles working, if
    /// others are still alive.
    pub fn unmount(self) -> io::Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner.close(),
            Err(_) => Err(errno(libc::EBUSY)),
        }
    }
}

/// Opens the SSD of a tiered image: `opts.ssd`, else the path its tier header records.
fn open_ssd(
    pm: &Pm,
    start: u64,
    total_blocks: u64,
    opts: &MountOptions,
) -> io::Result<crate::tier::ssd::Ssd> {
    let path = match &opts.ssd {
        Some(p) => p.clone(),
        None => {
            let hdr = crate::layout::tier::TierHeader::decode(
                &pm.read_vec(start * BLOCK_SIZE, BLOCK_SIZE as usize),
                start,
                total_blocks,
            )?;
            if hdr.path.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "image has an SSD tier made in memory: name its SSD to mount it",
                ));
            }
            PathBuf::from(hdr.path)
        }
    };
    crate::tier::ssd::Ssd::open(&path, None)
}

/// Refuses an image larger than the free space of the file system that holds it, before any
/// of it is allocated: on a tmpfs such as /dev/shm, preallocation would otherwise take the
/// machine's memory page by page until it fails (or the OOM killer picks a process).
fn check_room(f: &std::fs::File, path: &Path, len: u64) -> io::Result<()> {
    if !f.metadata()?.is_file() {
        return Ok(());
    }
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: fstatvfs on our own descriptor fills the struct it is given.
    if unsafe { libc::fstatvfs(f.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Ok(()); // no answer: let the allocation itself decide
    }
    // SAFETY: initialised by the successful call above.
    let st = unsafe { st.assume_init() };
    // The field types differ between targets (u32 on some 32-bit ones).
    #[allow(clippy::unnecessary_cast)]
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    if len > free {
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "{}: an image of {} bytes does not fit: the file system holding it has {} bytes free",
                path.display(),
                len,
                free
            ),
        ));
    }
    Ok(())
}

/// Gives the image all its memory (or disk space) now, as real persistent memory has: no
/// allocation on first write, no ENOSPC from the host file system later.
fn preallocate(f: &std::fs::File, len: u64) -> io::Result<()> {
    // SAFETY: posix_fallocate on our own descriptor.
    match unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) } {
        0 => Ok(()),
        // Not every file system supports it; the image still works, sparse.
        libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        e => Err(io::Error::new(
            io::Error::from_raw_os_error(e).kind(),
            format!(
                "cannot allocate the image: {}",
                io::Error::from_raw_os_error(e)
            ),
        )),
    }
}

/// Releases the image's lock now rather than at close. The lock belongs to the open file
/// description, which a child process forked meanwhile by another thread of this process
/// shares until its exec closes it: without this, a mount right after a format or an unmount
/// in the same process could find the image "in use" for that moment.
pub(crate) fn unlock_image(f: &std::fs::File) {
    // SAFETY: flock on our own open descriptor; failure leaves the release to close.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
}

pub(crate) fn lock_image(f: &std::fs::File, path: &Path, exclusive: bool) -> io::Result<()> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // SAFETY: flock on our own open descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "{}: image is in use by another process (mounted, being formatted, or used by `nvmfs run` programs)",
                    path.display()
                ),
            ));
        }
        return Err(e);
    }
    Ok(())
}

/// A view of an image file for a reader that does not mount it (`fsck -n`, `info`), which
/// stays what it was while the reader looks at it. A mapping alone would not: `mkfs --force`
/// can truncate the file under it (the reader dies of SIGBUS), and a read-write mount changes
/// the pages it has not touched yet (a private mapping copies a page only when written).
///
/// With the image's shared lock (taken on `f`, held until `f` is closed), nobody can format
/// the image or mount it read-write meanwhile, so `map` is stable. When the exclusive lock is
/// held elsewhere (a read-write mount, a format, a repair), the bytes are copied into memory
/// with `pread` instead, which a truncation can only cut short (an error), never fault.
pub(crate) fn stable_view(
    f: &std::fs::File,
    path: &Path,
    len: u64,
    map: impl FnOnce() -> io::Result<Pm>,
) -> io::Result<Pm> {
    let view = match lock_image(f, path, false) {
        Ok(()) => map()?,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => copy_image(f, path, len)?,
        Err(e) => return Err(e),
    };
    crate::hook::at(crate::hook::Point::ViewTaken);
    Ok(view)
}

/// The first `len` bytes of `f`, read into memory.
fn copy_image(f: &std::fs::File, path: &Path, len: u64) -> io::Result<Pm> {
    use std::os::unix::fs::FileExt;
    const CHUNK: usize = 1 << 20;
    let pm = Pm::in_memory(len);
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0;
    while off < len {
        let want = CHUNK.min((len - off) as usize);
        let n = f.read_at(&mut buf[..want], off)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{}: image shrank while being read", path.display()),
            ));
        }
        pm.write(off, &buf[..n]);
        off += n as u64;
    }
    Ok(pm)
}

/// Refuses a region too short to hold the superblocks and the state block.
pub(crate) fn check_region_len(pm: &Pm) -> io::Result<()> {
    if pm.len() < (STATE_BLOCK + 1) * BLOCK_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("too small to be an nvmfs image ({} bytes)", pm.len()),
        ));
    }
    Ok(())
}

/// Reads the primary superblock, falling back to the replica. Returns (superblock, used the
/// replica). When both are bad the primary's error is reported.
pub(crate) fn read_superblock(pm: &Pm) -> io::Result<(Superblock, bool)> {
    let primary = Superblock::decode(
        &pm.read_vec(PRIMARY_BLOCK * BLOCK_SIZE, BLOCK_SIZE as usize),
        0,
    );
    match primary {
        Ok(sb) => Ok((sb, false)),
        Err(e) => match Superblock::decode(
            &pm.read_vec(REPLICA_BLOCK * BLOCK_SIZE, BLOCK_SIZE as usize),
            BLOCK_SIZE,
        ) {
            Ok(sb) => Ok((sb, true)),
            Err(_) => Err(corrupt_to_io(e)),
        },
    }
}

pub(crate) fn write_state(pm: &Pm, st: &MountState) {
    let off = STATE_BLOCK * BLOCK_SIZE;
    pm.write(off, &st.encode());
    pm.persist(off, STATE_LEN);
    pm.fence();
}

/// Rolls back every armed journal record.
pub(crate) fn replay_journal(
    pm: &Pm,
    geo: &Geometry,
    report: &mut RecoveryReport,
) -> Result<(), Corrupted> {
    for lane in 0..geo.journal_lanes {
        match journal::read_lane(pm, geo, lane, geo.total_blocks * BLOCK_SIZE)? {
            (LaneState::Idle, _) => {}
            (LaneState::Armed { .. }, entries) => {
                journal::roll_back(pm, geo, lane, &entries);
                report.lanes_rolled_back += 1;
            }
            (LaneState::Torn, _) => {
                journal::clear_lane(pm, geo, lane);
                report.torn_lanes_cleared += 1;
            }
        }
    }
    Ok(())
}

pub(crate) struct InodeScan {
    pub free: Vec<u32>,
    pub orphans: Vec<u32>,
}

/// Walks the inode table: free numbers, orphans (in use with no links), and validation of
/// every in-use record so no operation ever acts on a damaged one.
pub(crate) fn scan_inodes(pm: &Pm, geo: &Geometry) -> Result<InodeScan, Corrupted> {
    let mut scan = InodeScan {
        free: Vec::new(),
        orphans: Vec::new(),
    };
    let root_off = geo.inode_off(ROOT_INO);
    let root = Inode::decode_raw(&pm.read_array::<{ INODE_SIZE as usize }>(root_off));
    if !root.is_dir() || root.parent != ROOT_INO as u32 || root.nlink < 2 {
        return Err(corrupted("inode: root directory", root_off));
    }
    for ino in 1..geo.inode_count {
        let off = geo.inode_off(ino);
        let mode = u32::from_le_bytes(pm.read_array::<4>(off));
        if mode == 0 {
            scan.free.push(ino as u32);
            continue;
        }
        let i = Inode::decode(
            &pm.read_array::<{ INODE_SIZE as usize }>(off),
            off,
            geo.inode_count,
        )?;
        if i.nlink == 0 {
            scan.orphans.push(ino as u32);
        }
    }
    Ok(scan)
}

/// The HashFS table of a mount: its used count, after the repairs an unclean shutdown needs.
fn open_hashfs(
    pm: &Pm,
    geo: &Geometry,
    opts: &MountOptions,
    unclean: bool,
    shared: Option<&SharedParts>,
    report: &mut RecoveryReport,
) -> Box<dyn FileMap> {
    let used = if opts.read_only {
        count_used(pm, geo)
    } else {
        repair_table(pm, geo, unclean, report)
    };
    if !opts.read_only {
        report.tombstones_compacted = hashfs::compact_tombstones(pm, geo);
    }
    Box::new(match shared {
        Some(parts) => {
            let count = UsedCount::Shared(parts.used.clone_word());
            count.store(used, Ordering::Release);
            HashFs::with_count(geo, count)
        }
        None => HashFs::new(geo, used),
    })
}

/// A tree mapping and its allocator, recovered first after an unclean shutdown.
fn open_tree(
    pm: &Pm,
    geo: &Geometry,
    sb: &Superblock,
    recover: bool,
    report: &mut RecoveryReport,
) -> Result<Box<dyn FileMap>, Corrupted> {
    let scatter = |a: crate::mapping::balloc::BlockAlloc| {
        a.aim_layout_score(sb.layout_score_permille);
        a
    };
    Ok(match sb.mapping {
        MappingKind::Extent => {
            let t = extent::Extent::new();
            let alloc = scatter(tree::recover(&t, pm, geo, recover, report)?);
            Box::new(TreeMap::new(t, geo, alloc))
        }
        MappingKind::Radix => {
            let t = radix::Radix;
            let alloc = scatter(tree::recover(&t, pm, geo, recover, report)?);
            Box::new(TreeMap::new(t, geo, alloc))
        }
        MappingKind::Cuckoo => {
            use crate::mapping::cuckoo;
            let alloc = scatter(cuckoo::recover(pm, geo, recover, report)?);
            Box::new(cuckoo::Cuckoo::new(geo, alloc))
        }
        MappingKind::Level => {
            use crate::mapping::level;
            let alloc = scatter(level::recover(pm, geo, recover, report)?);
            Box::new(level::Level::new(geo, alloc))
        }
        MappingKind::HashFs => unreachable!("HashFS is opened by open_hashfs"),
    })
}

fn count_used(pm: &Pm, geo: &Geometry) -> u64 {
    (0..geo.data_blocks)
        .filter(|&s| pm.load_u64(geo.slot_off(s)) > TOMBSTONE)
        .count() as u64
}

/// Logical-block end of what inode `i` may map.
pub(crate) fn allowed_blocks(i: &Inode) -> u64 {
    match i.file_type() {
        Some(FileType::Dir) => i.dir_units.div_ceil(crate::layout::dentry::UNITS_PER_BLOCK) as u64,
        Some(FileType::Symlink) => (i.size as usize > crate::layout::inode::INLINE_LEN) as u64,
        Some(FileType::File) => i.map_end(),
        _ => 0,
    }
}

/// Counts used slots. After an unclean shutdown also frees slots left reserved, slots mapping
/// blocks no inode may own (past EOF of a write that did not finish, or of a freed inode),
/// and fixes per-inode block counts.
pub(crate) fn repair_table(
    pm: &Pm,
    geo: &Geometry,
    unclean: bool,
    report: &mut RecoveryReport,
) -> u64 {
    let mut used = 0;
    let mut counts: hashbrown::HashMap<u32, u64> = hashbrown::HashMap::new();
    for s in 0..geo.data_blocks {
        let off = geo.slot_off(s);
        let v = pm.load_u64(off);
        if v == RESERVED {
            // A tombstone, not a free slot: keys placed past it must stay reachable.
            pm.store_u64(off, TOMBSTONE);
            pm.persist(off, 8);
            report.reserved_slots_cleared += 1;
            continue;
        }
        let Some((ino, lblk)) = hashfs::split_key(v) else {
            continue;
        };
        if unclean {
            let owner_ok = (ino as u64) < geo.inode_count && {
                let i = Inode::decode_raw(
                    &pm.read_array::<{ INODE_SIZE as usize }>(geo.inode_off(ino as u64)),
                );
                !i.is_free() && (lblk as u64) < allowed_blocks(&i)
            };
            if !owner_ok {
                pm.store_u64(off, TOMBSTONE);
                pm.persist(off, 8);
                report.stray_blocks_freed += 1;
                continue;
            }
            *counts.entry(ino).or_insert(0) += 1;
        }
        used += 1;
    }
    if unclean {
        fix_block_counts(pm, geo, &counts, report);
    }
    pm.fence();
    used
}

pub(crate) fn fix_block_counts(
    pm: &Pm,
    geo: &Geometry,
    counts: &hashbrown::HashMap<u32, u64>,
    report: &mut RecoveryReport,
) {
    use crate::layout::inode::O_BLOCKS;
    for ino in 1..geo.inode_count {
        let off = geo.inode_off(ino);
        let i = Inode::decode_raw(&pm.read_array::<{ INODE_SIZE as usize }>(off));
        if i.is_free() {
            continue;
        }
        let want = counts.get(&(ino as u32)).copied().unwrap_or(0);
        if i.blocks != want {
            pm.store_u64(off + O_BLOCKS as u64, want);
            pm.persist(off + O_BLOCKS as u64, 8);
            report.block_counts_fixed += 1;
        }
    }
}

/// What a shared mount brings to `Fs::mount_region` (see `nvmfs::shared`).
pub(crate) struct SharedParts {
    pub peers: Arc<dyn Peers>,
    /// The used-slot count every attached process shares.
    pub used: SharedCount,
    /// No other process is attached: recover the image as a plain mount would.
    pub first: bool,
}

/// A shared used-slot word that can be handed to several tables (each mount gets a clone).
#[derive(Clone)]
pub(crate) struct SharedCount {
    pub ptr: *mut u64,
    pub keep: Arc<dyn Send + Sync>,
}

impl SharedCount {
    fn clone_word(&self) -> SharedWord {
        // SAFETY: the creator of a SharedCount (shared/coord.rs) points it at an aligned word
        // of the coordination mapping, which `keep` holds.
        unsafe { SharedWord::new(self.ptr, self.keep.clone()) }
    }
}

/// The numbers of free inode records (mode 0), ascending, without validating the rest: the
/// pools of a shared mount that joins a running image.
pub(crate) fn free_inodes(pm: &Pm, geo: &Geometry) -> Vec<u32> {
    (1..geo.inode_count)
        .filter(|&ino| pm.load_u64(geo.inode_off(ino)) as u32 == 0)
        .map(|ino| ino as u32)
        .collect()
}

impl Inner {
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        pm: Pm,
        geo: Geometry,
        sb: Superblock,
        map: Box<dyn FileMap>,
        inodes: InodeAlloc,
        opts: &MountOptions,
        path: Option<PathBuf>,
        image: Option<std::fs::File>,
        peers: Option<Arc<dyn Peers>>,
    ) -> Inner {
        Inner {
            map,
            journal: Journal::new(&geo),
            inodes,
            stripes: Stripes::default(),
            dirs: DirCache::default(),
            open: OpenTable::default(),
            rename_lock: Mutex::new(()),
            read_only: opts.read_only,
            hash_seed: std::collections::hash_map::RandomState::new().hash_one(0u64),
            path,
            recovery: RecoveryReport::default(),
            _image: image,
            // A shared mount never marks the image clean on its own: the last process to
            // detach does (`write_clean`).
            unmounted: AtomicBool::new(peers.is_some()),
            peers,
            tier: None,
            pm,
            geo,
            sb,
        }
    }

    /// Marks the image clean. Called once, when the last handle goes.
    pub(crate) fn close(&self) -> io::Result<()> {
        if self.read_only || self.unmounted.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.write_clean()
    }

    /// Writes the mapping back and marks the image clean (unmount; the last process of a
    /// shared mount).
    pub(crate) fn write_clean(&self) -> io::Result<()> {
        self.pm.sync_backing()?;
        let mut st = MountState::decode(&self.pm.read_vec(STATE_BLOCK * BLOCK_SIZE, STATE_LEN))
            .unwrap_or_default();
        st.state = STATE_CLEAN;
        st.last_unmount_ns = now_ns() as u64;
        write_state(&self.pm, &st);
        self.pm.sync_backing()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.close();
        if let Some(f) = &self._image {
            unlock_image(f);
        }
    }
}
