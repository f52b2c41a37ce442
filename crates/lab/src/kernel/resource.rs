//! The resources provisioning creates on the system, and how each is
//! undone: mount point directories, backing files, loop devices, mounts.

use super::command::{CommandError, CommandLine};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

/// Normal umount attempts on EBUSY before falling back to a lazy umount.
/// Short-lived references (a benchmark thread closing its files, a `sync`)
/// go away within a few hundred milliseconds.
pub(crate) const UMOUNT_TRIES: u32 = 5;
const UMOUNT_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long `losetup -d` may take to really release the backing file: the
/// kernel defers the detach while someone (udev, a lazily unmounted file
/// system) still holds the device open.
const DETACH_WAIT: Duration = Duration::from_secs(2);

/// One thing created on the system that must be undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resource {
    /// An empty directory we created (a mount point).
    Dir(PathBuf),
    /// A file we created (a loop device's backing file).
    File(PathBuf),
    /// A loop device we attached to `backing`.
    Loop { device: PathBuf, backing: PathBuf },
    /// A file system we mounted on this directory.
    Mount(PathBuf),
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resource::Dir(p) => write!(f, "directory {}", p.display()),
            Resource::File(p) => write!(f, "file {}", p.display()),
            Resource::Loop { device, backing } => {
                write!(
                    f,
                    "loop device {} on {}",
                    device.display(),
                    backing.display()
                )
            }
            Resource::Mount(p) => write!(f, "mount on {}", p.display()),
        }
    }
}

impl Resource {
    /// Undoes the resource; something already gone counts as undone.
    /// `urgent` (the second Ctrl-C) skips the umount retries.
    pub(crate) fn undo(&self, urgent: bool) -> Result<(), UndoError> {
        let result = match self {
            Resource::Dir(p) => ignore_not_found(fs::remove_dir(p)).map_err(UndoError::from),
            Resource::File(p) => ignore_not_found(fs::remove_file(p)).map_err(UndoError::from),
            Resource::Loop { device, backing } => detach(device, backing),
            Resource::Mount(p) => {
                unmount(p, if urgent { 1 } else { UMOUNT_TRIES }, true).map_err(UndoError::from)
            }
        };
        result.map_err(|e| UndoError {
            message: format!("cannot remove {self}: {}", e.message),
            deferred: e.deferred,
        })
    }
}

/// Why a resource could not be undone.
#[derive(Debug)]
pub(crate) struct UndoError {
    pub message: String,
    /// The kernel finishes the undo by itself once the last user goes: a
    /// loop device whose detach waits for a lazily unmounted file system
    /// that still has open files. Nothing is left for us to do.
    pub deferred: bool,
}

impl From<io::Error> for UndoError {
    fn from(e: io::Error) -> Self {
        UndoError {
            message: e.to_string(),
            deferred: false,
        }
    }
}

impl fmt::Display for UndoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

fn ignore_not_found(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// `umount`, retried while busy, then, if `lazy_fallback`, `umount -l`
/// (detach now, free when the last user goes) as the last resort.
pub(crate) fn unmount(dir: &Path, tries: u32, lazy_fallback: bool) -> io::Result<()> {
    let dir_arg = dir.to_string_lossy();
    let mut last = None;
    for attempt in 0..tries {
        if attempt > 0 {
            thread::sleep(UMOUNT_RETRY_PAUSE);
        }
        match CommandLine::new("umount", &[&dir_arg]).run() {
            Ok(_) => return Ok(()),
            Err(_) if !is_mounted(dir) => return Ok(()),
            Err(e) => {
                let busy = CommandError::of(&e).is_some_and(CommandError::is_busy);
                last = Some(e);
                if !busy {
                    break;
                }
            }
        }
    }
    let last = last.unwrap_or_else(|| io::Error::other("umount was not tried"));
    if !lazy_fallback {
        return Err(last);
    }
    match CommandLine::new("umount", &["-l", &dir_arg]).run() {
        Ok(_) => Ok(()),
        Err(lazy) => Err(io::Error::other(format!("{last}; then {lazy}"))),
    }
}

/// Whether something is mounted on `dir` (per /proc/self/mounts).
pub(crate) fn is_mounted(dir: &Path) -> bool {
    mount_entry(dir).is_some()
}

/// The /proc/self/mounts line (source, type, options...) of the last mount
/// on `dir`, an absolute path.
pub(crate) fn mount_entry(dir: &Path) -> Option<String> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    let dir = dir.to_str()?;
    mounts
        .lines()
        .rev()
        .find(|l| {
            l.split_whitespace()
                .nth(1)
                .map(unescape_mount_field)
                .as_deref()
                == Some(dir)
        })
        .map(str::to_string)
}

/// Undoes the octal escapes /proc/self/mounts uses for space, tab, newline
/// and backslash in paths.
fn unescape_mount_field(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// `losetup -d`, but only while the device is still attached to our file:
/// once detached, the device may already belong to someone else.
fn detach(device: &Path, backing: &Path) -> Result<(), UndoError> {
    if !backs(device, backing) {
        return Ok(());
    }
    let result = CommandLine::new("losetup", &["-d", &device.to_string_lossy()]).run();
    let deadline = Instant::now() + DETACH_WAIT;
    while backs(device, backing) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    match (result, backs(device, backing)) {
        (_, false) => Ok(()),
        (Err(e), true) => Err(e.into()),
        (Ok(_), true) => Err(UndoError {
            message: format!(
                "still attached {} s after losetup -d: something holds it open (a lazily \
                 unmounted file system with open files?); the kernel detaches it when that goes",
                DETACH_WAIT.as_secs()
            ),
            deferred: sys_loop_flag(device, "autoclear"),
        }),
    }
}

/// Whether loop `device` is attached to `backing`, per
/// /sys/block/loopN/loop/backing_file (which says "path (deleted)" once the
/// file was removed).
pub(crate) fn backs(device: &Path, backing: &Path) -> bool {
    let Some(name) = device.file_name() else {
        return false;
    };
    let sys = Path::new("/sys/block").join(name).join("loop/backing_file");
    let Ok(current) = fs::read_to_string(sys) else {
        return false;
    };
    let current = current.trim_end_matches('\n');
    let current = current.strip_suffix(" (deleted)").unwrap_or(current);
    Path::new(current) == backing
}

/// The loop devices attached to `backing`.
pub(crate) fn loops_backed_by(backing: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("loop"))
        .map(|e| Path::new("/dev").join(e.file_name()))
        .filter(|device| backs(device, backing))
        .collect()
}

/// Whether loop `device` does direct I/O on its backing file, per sysfs.
pub(crate) fn loop_direct_io(device: &Path) -> bool {
    sys_loop_flag(device, "dio")
}

/// Whether /sys/block/loopN/loop/<flag> is 1.
fn sys_loop_flag(device: &Path, flag: &str) -> bool {
    let Some(name) = device.file_name() else {
        return false;
    };
    let sys = Path::new("/sys/block").join(name).join("loop").join(flag);
    fs::read_to_string(sys).is_ok_and(|s| s.trim() == "1")
}
