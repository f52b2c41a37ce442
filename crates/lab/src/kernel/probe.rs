//! What this machine can run: root, kernel support, mkfs programs, loop
//! devices, pmem devices.

use super::command::CommandLine;
use super::variant::Variant;
use serde::Serialize;
use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Whether a variant can run here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Availability {
    /// Everything it needs is present.
    Available,
    /// It cannot run; `reason` says why and, where there is one, what to
    /// install.
    Unavailable {
        /// One line, e.g. "mkfs.xfs not found: apt-get install xfsprogs".
        reason: String,
    },
}

impl Availability {
    /// Whether the variant can run.
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}

pub(crate) const NEEDS_ROOT: &str = "needs root to losetup and mount (run with sudo); skipped";

/// A family of file systems of the study that current kernels often lack.
pub(crate) struct OptionalFamily {
    pub fs_type: &'static str,
    pub mkfs: &'static str,
    /// The study's names of the variants of this family.
    pub paper_names: &'static [&'static str],
}

/// f2fs and nilfs2: in the catalogue only when kernel and mkfs support them.
pub(crate) const OPTIONAL_FAMILIES: &[OptionalFamily] = &[
    OptionalFamily {
        fs_type: "f2fs",
        mkfs: "mkfs.f2fs",
        paper_names: &["f2fs_2", "f2fs_4", "f2fs_6"],
    },
    OptionalFamily {
        fs_type: "nilfs2",
        mkfs: "mkfs.nilfs2",
        paper_names: &["nilfs"],
    },
];

/// Whether `v` can run here: as root, with kernel support for its type, its
/// mkfs program on PATH and loop devices for block-backed variants. The
/// first missing piece is the reason; none of the checks modifies anything
/// except that a missing file-system type is loaded with `modprobe` if
/// possible.
pub fn availability(v: &Variant) -> Availability {
    match first_problem(v) {
        None => Availability::Available,
        Some(reason) => Availability::Unavailable { reason },
    }
}

fn first_problem(v: &Variant) -> Option<String> {
    if !is_root() {
        return Some(NEEDS_ROOT.to_string());
    }
    if let Err(reason) = kernel_support(&v.fs_type) {
        return Some(reason);
    }
    let mut programs = vec!["mount", "umount"];
    if let Some(mkfs) = v.mkfs_args.first() {
        programs.extend([mkfs.as_str(), "losetup"]);
        if !Path::new("/dev/loop-control").exists() {
            return Some("no /dev/loop-control: the kernel has no loop device support".into());
        }
    }
    programs.into_iter().find_map(|p| program_problem(p).err())
}

/// Whether the process runs as root, which losetup and mount need.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Ok when `fs_type` is in /proc/filesystems, after trying `modprobe -q` if
/// it is not; otherwise why not.
pub(crate) fn kernel_support(fs_type: &str) -> Result<(), String> {
    if kernel_lists(fs_type) {
        return Ok(());
    }
    let tried = try_modprobe(fs_type);
    if kernel_lists(fs_type) {
        return Ok(());
    }
    Err(format!(
        "the running kernel ({}) has no {fs_type} support: not in /proc/filesystems and {tried}",
        kernel_release()
    ))
}

fn kernel_lists(fs_type: &str) -> bool {
    let list = fs::read_to_string("/proc/filesystems").unwrap_or_default();
    // Lines are "nodev\ttmpfs" or "\text4": the type is the last word.
    list.lines()
        .any(|l| l.split_whitespace().last() == Some(fs_type))
}

/// Loads a module quietly; returns what happened, for the reason text.
fn try_modprobe(fs_type: &str) -> String {
    if program_path("modprobe").is_none() {
        return "modprobe is not installed".to_string();
    }
    if !Path::new("/lib/modules").join(kernel_release()).is_dir() {
        return format!(
            "there are no modules for it (no /lib/modules/{})",
            kernel_release()
        );
    }
    match CommandLine::new("modprobe", &["-q", fs_type]).run() {
        Ok(_) => format!("`modprobe {fs_type}` did not add it"),
        Err(e) => e.to_string(),
    }
}

/// `uname -r`.
pub(crate) fn kernel_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Ok when `program` is on PATH; otherwise "<program> not found: apt-get
/// install <package>".
pub(crate) fn program_problem(program: &str) -> Result<(), String> {
    match program_path(program) {
        Some(_) => Ok(()),
        None => Err(format!(
            "{program} not found: apt-get install {}",
            package_of(program)
        )),
    }
}

/// The executable `program` would run: itself when it has a slash, else
/// the first executable file of that name in a PATH directory.
pub(crate) fn program_path(program: &str) -> Option<PathBuf> {
    let executable = |p: &Path| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

/// The Debian package that provides `program`.
fn package_of(program: &str) -> &'static str {
    match program {
        p if p.starts_with("mkfs.ext") || p == "mke2fs" => "e2fsprogs",
        "mkfs.xfs" => "xfsprogs",
        "mkfs.btrfs" => "btrfs-progs",
        "mkfs.f2fs" => "f2fs-tools",
        "mkfs.nilfs2" => "nilfs-tools",
        "modprobe" => "kmod",
        "losetup" | "mount" | "umount" => "mount",
        _ => "the package that provides it",
    }
}

/// Ok when the kernel supports the family and its mkfs is installed.
pub(crate) fn family_support(family: &OptionalFamily) -> Result<(), String> {
    kernel_support(family.fs_type)?;
    program_problem(family.mkfs)
}

/// Variants of the study this machine cannot run, as (the study's name,
/// reason); reported, never an error. f2fs (f2fs_2/4/6) and nilfs2 (nilfs)
/// appear here unless kernel and mkfs support them, in which case they are
/// in the [`catalogue`](super::catalogue) instead. The XIP variants ext2-xip
/// and ext3-xip are always here: their modern equivalent, `mount -o dax`,
/// needs a pmem device (/dev/pmemN), which a loop device cannot stand in
/// for, and this lab never reformats a real pmem device.
pub fn unavailable_variants() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for family in OPTIONAL_FAMILIES {
        if let Err(reason) = family_support(family) {
            out.extend(
                family
                    .paper_names
                    .iter()
                    .map(|n| (n.to_string(), reason.clone())),
            );
        }
    }
    let dax = dax_reason();
    out.extend(["ext2-xip", "ext3-xip"].map(|n| (n.to_string(), dax.clone())));
    out
}

fn dax_reason() -> String {
    match pmem_devices().first() {
        None => "XIP is now `mount -o dax`, which needs a pmem device (/dev/pmemN: an NVDIMM or \
                 memmap=nn!ss); there is none, and a loop device cannot do DAX"
            .to_string(),
        Some(dev) => format!(
            "XIP is now `mount -o dax`; {} exists but this lab only provisions loop devices and \
             will not reformat a pmem device: run mkfs.ext2/ext4 and mount -o dax on it by hand",
            dev.display()
        ),
    }
}

/// The /dev/pmem* block devices.
fn pmem_devices() -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir("/dev") else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("pmem"))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_block_device()))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}
