//! `nvmfs mkfs`: create (format) an image file.

use std::ffi::CString;
use std::fmt::Write as _;
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nvmfs::layout::superblock::{Geometry, Superblock, MAGIC, MIN_BLOCKS, REPLICA_BLOCK};
use nvmfs::layout::BLOCK_SIZE;
use nvmfs::mapping::MappingKind;
use nvmfs::{FormatOptions, Fs};

use crate::output;
use crate::size::{format_size, parse_size};

#[derive(clap::Args, Debug)]
#[command(
    about = "Create an nvmfs image file (format it)",
    long_about = "Create an nvmfs image file (format it).\n\n\
        IMAGE is created if it does not exist. An existing non-empty file (an nvmfs image or \
        anything else) is only overwritten with --force; an image in use by another process \
        (mounted, or being formatted) is never overwritten. The image file is SIZE bytes, \
        allocated up front (as persistent memory would be): put it on /dev/shm (tmpfs) to emulate persistent memory with DRAM, or on a \
        DAX file system for real persistent memory.",
    after_help = "Exit status: 0 on success, 1 on error.\n\n\
        Examples:\n  nvmfs mkfs /dev/shm/nvmfs.img\n  nvmfs mkfs --size 8G --inodes 1000000 /dev/shm/big.img\n  \
        nvmfs mkfs --mapping extent /dev/shm/extent.img\n  \
        nvmfs mkfs --mapping radix --layout-score 0.8 /dev/shm/radix.img\n  \
        nvmfs mkfs --size 256M --ssd /var/tmp/ssd.img --ssd-size 8G /dev/shm/tiered.img"
)]
pub struct Args {
    /// Image size: bytes, or with a binary unit K, M, G, T (KiB, ...); rounded down to whole
    /// 4 KiB blocks
    #[arg(short, long, value_name = "SIZE", default_value = "1G")]
    pub size: String,
    /// Number of inodes, i.e. the most files, directories and symlinks the image can hold
    /// [default: one per 16 KiB of image]
    #[arg(short = 'N', long, value_name = "N")]
    pub inodes: Option<u64>,
    /// File mapping: hashfs (global hash table that is also the allocator), extent (per-file
    /// extent tree), radix (per-file radix tree), cuckoo (global cuckoo hash of ranged
    /// entries), level (level hashing, one entry per block, resized in place); all but
    /// hashfs use a block bitmap
    #[arg(short, long, value_name = "MAPPING", default_value = "hashfs",
        value_parser = ["hashfs", "extent", "radix", "cuckoo", "level"])]
    pub mapping: String,
    /// Fragment new files to this layout score, 0..1 (the share of a file's blocks that
    /// follow the previous block physically; Neal et al.): extent and radix only
    #[arg(long, value_name = "S")]
    pub layout_score: Option<f64>,
    /// Add an SSD tier on this block device or file (created if missing): cold file data
    /// moves there in 512 KiB extents, hot data and all metadata stay in the image (hashfs only)
    #[arg(long, value_name = "PATH")]
    pub ssd: Option<PathBuf>,
    /// Bytes of the SSD to use (with a unit K, M, G, T) [default: its size]; a file is
    /// extended to it
    #[arg(long, value_name = "SIZE", requires = "ssd")]
    pub ssd_size: Option<String>,
    /// Overwrite IMAGE even if it already holds an nvmfs image or other data
    #[arg(short, long)]
    pub force: bool,
    /// The image file to create (or, with --force, overwrite)
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
}

pub fn run(args: &Args) -> u8 {
    match mkfs(args) {
        Ok(text) => {
            if output::print("mkfs", &text) {
                0
            } else {
                1
            }
        }
        Err(msg) => {
            eprintln!("nvmfs mkfs: {msg}");
            1
        }
    }
}

fn mkfs(args: &Args) -> Result<String, String> {
    let path = args.image.as_path();
    let shown = path.display();
    let size = parse_size(&args.size)?;
    let blocks = size / BLOCK_SIZE;
    if blocks < MIN_BLOCKS {
        return Err(format!(
            "size {} is too small: an nvmfs image needs at least {}",
            format_size(size),
            format_size(MIN_BLOCKS * BLOCK_SIZE)
        ));
    }
    if args.inodes == Some(0) {
        return Err("--inodes must be at least 1".into());
    }
    let mapping: MappingKind = args.mapping.parse()?;
    // The same layout Fs::format computes, checked first for a clear message.
    let geo = Geometry::compute(blocks, args.inodes).map_err(|e| {
        format!(
            "cannot lay out a {} image: {e}",
            format_size(blocks * BLOCK_SIZE)
        )
    })?;
    if mapping.uses_allocator() {
        nvmfs::mapping::tree::check_fits(&geo)
            .map_err(|e| format!("cannot lay out the {mapping} mapping: {e}"))?;
    }
    if let Some(s) = args.layout_score {
        if !mapping.uses_allocator() {
            return Err(format!(
                "--layout-score needs --mapping extent, radix, cuckoo or level (the {mapping} mapping has no \
                 block allocator to fragment)"
            ));
        }
        if !(0.0..=1.0).contains(&s) {
            return Err(format!("--layout-score {s}: must be between 0 and 1"));
        }
    }

    let existing = match std::fs::metadata(path) {
        Ok(md) => {
            if !md.is_file() {
                return Err(format!(
                    "{shown}: not a regular file (mkfs only writes image files)"
                ));
            }
            if md.len() > 0 && !args.force {
                return Err(refusal(path, &md));
            }
            Some(md)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    check_space(path, blocks * BLOCK_SIZE, existing.as_ref())?;

    let start = Instant::now();
    let opts = FormatOptions {
        size_bytes: size,
        inode_count: args.inodes,
        mapping,
        layout_score: args.layout_score,
        tier: match &args.ssd {
            Some(p) => Some(nvmfs::TierFormat::new(
                Some(p.clone()),
                args.ssd_size.as_deref().map(parse_size).transpose()?,
            )),
            None => None,
        },
    };
    if let Err(e) = Fs::format(path, &opts) {
        if existing.is_none() {
            // Do not leave behind an empty file this command created.
            let _ = std::fs::remove_file(path);
        }
        return Err(output::with_path(path, &e));
    }
    let took = start.elapsed();

    let sb = read_superblock(path)
        .map_err(|e| format!("formatted {shown} but cannot read it back: {e}"))?;
    let geo = &sb.geo;
    let mut s = String::new();
    let _ = writeln!(s, "Formatted {shown} in {}", output::format_duration(took));
    let total = geo.total_blocks * BLOCK_SIZE;
    let _ = write!(
        s,
        "  size:         {} ({} blocks of {})",
        format_size(total),
        geo.total_blocks,
        format_size(BLOCK_SIZE)
    );
    if total != size {
        let _ = write!(s, ", rounded down from {size} bytes");
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "  data blocks:  {} ({})",
        geo.data_blocks,
        format_size(geo.data_blocks * BLOCK_SIZE)
    );
    // Inode 0 is never used, as in statfs.
    let _ = writeln!(s, "  inodes:       {}", geo.inode_count - 1);
    let _ = writeln!(s, "  mapping:      {}", sb.mapping);
    if let Some(p) = sb.layout_score_permille {
        let _ = writeln!(s, "  layout score: {:.3}", p as f64 / 1000.0);
    }
    if let (Some(ssd), Some(start)) = (&args.ssd, sb.tier_start) {
        let extents = nvmfs::layout::tier::TierHeader::decode(
            &read_block(path, start)
                .map_err(|e| format!("formatted {shown} but cannot read its tier: {e}"))?,
            start,
            geo.total_blocks,
        )
        .map_err(|c| c.what)?
        .extents;
        let _ = writeln!(
            s,
            "  SSD tier:     {} ({} extents of 512 KiB, {}; block table {} blocks in the image)",
            ssd.display(),
            extents,
            format_size(extents * nvmfs::layout::tier::EXTENT_BYTES),
            geo.total_blocks - start - 1
        );
    }
    let _ = writeln!(s, "  uuid:         {}", output::uuid_string(&sb.uuid));
    Ok(s)
}

/// Why an existing non-empty file is not overwritten without --force.
fn refusal(path: &Path, md: &Metadata) -> String {
    let shown = path.display();
    let hint = "use --force to overwrite it";
    match read_head(path) {
        Ok(head) => {
            let magic = MAGIC.to_le_bytes();
            let replica = (REPLICA_BLOCK * BLOCK_SIZE) as usize;
            let at = |off: usize| head.len() >= off + 8 && head[off..off + 8] == magic;
            if at(0) || at(replica) {
                let detail = [0, replica]
                    .iter()
                    .filter(|&&off| head.len() >= off + BLOCK_SIZE as usize)
                    .find_map(|&off| Superblock::decode(&head[off..], off as u64).ok())
                    .map(|sb| {
                        format!(
                            " ({}, uuid {})",
                            format_size(sb.geo.total_blocks * BLOCK_SIZE),
                            output::uuid_string(&sb.uuid)
                        )
                    })
                    .unwrap_or_default();
                format!("{shown} already holds an nvmfs image{detail}; {hint}")
            } else {
                format!(
                    "{shown} already exists and holds {} of data; {hint}",
                    format_size(md.len())
                )
            }
        }
        Err(e) => format!("{shown} already exists and is not empty ({e}); {hint}"),
    }
}

/// The first two blocks of `path` (fewer if the file is shorter).
fn read_head(path: &Path) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(2 * BLOCK_SIZE as usize);
    File::open(path)?
        .take(2 * BLOCK_SIZE)
        .read_to_end(&mut head)?;
    Ok(head)
}

/// Block `n` of `path`.
fn read_block(path: &Path, n: u64) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut b = vec![0u8; BLOCK_SIZE as usize];
    File::open(path)?.read_exact_at(&mut b, n * BLOCK_SIZE)?;
    Ok(b)
}

fn read_superblock(path: &Path) -> io::Result<Superblock> {
    let head = read_head(path)?;
    Superblock::decode(&head, 0).map_err(|c| io::Error::new(io::ErrorKind::InvalidData, c.what))
}

/// Fs::format allocates the whole image up front; refuse early, before an existing file is
/// truncated, when its file system cannot hold it.
fn check_space(path: &Path, size: u64, existing: Option<&Metadata>) -> Result<(), String> {
    let dir = match existing {
        Some(_) => path.to_path_buf(),
        None => match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
    };
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return Ok(());
    };
    // SAFETY: statvfs with a valid C string and an out-struct it fills; geteuid is a getter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Ok(());
    }
    let root = unsafe { libc::geteuid() } == 0;
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    let (avail, frsize) = (
        if root { st.f_bfree } else { st.f_bavail } as u64,
        st.f_frsize as u64,
    );
    // The blocks of an overwritten file are freed by the format.
    let reclaimed = existing.map_or(0, |md| md.blocks() * 512);
    let free = avail.saturating_mul(frsize).saturating_add(reclaimed);
    if size > free {
        return Err(format!(
            "{}: an image of {} does not fit: its file system has {} free",
            path.display(),
            format_size(size),
            format_size(free)
        ));
    }
    Ok(())
}
