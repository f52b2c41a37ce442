//! `nvmfs fsck`: checks every invariant of docs/FORMAT.md, and repairs what it finds.
//!
//! The check (`check_image`, `check_pm`) works on a private copy-on-write view of the image,
//! first doing what a mount would do after a crash (journal roll-back, stray and reserved
//! slots, orphans, block counts) and reporting that as recovery, then checking the result
//! strictly:
//! - superblock and replica agree; geometry fits the image;
//! - every in-use inode is valid;
//! - every mapped block belongs to an in-use inode, inside what it may map, once, and can be
//!   found from its hash home (no free slot inside its probe chain);
//! - block counts match the mappings;
//! - directory blocks are mapped, entries are valid, names unique, targets in use with the
//!   right type; entry counts, `..` parents and link counts agree;
//! - every inode is reachable from the root (no cycles, no detached trees).
//!
//! The repair (`repair_image`, `repair_pm`) works on the image itself, under the image's
//! exclusive lock, and leaves an image the check finds clean (see `repair` for what it does
//! to each kind of damage).

mod check;
mod repair;

use std::io;
use std::path::Path;

use crate::layout::BLOCK_SIZE;
use crate::media::Pm;

pub use check::check_pm;

/// e2fsck-compatible exit codes.
pub const EXIT_CLEAN: i32 = 0;
pub const EXIT_CORRECTED: i32 = 1;
pub const EXIT_UNCORRECTED: i32 = 4;
pub const EXIT_OPERATIONAL: i32 = 8;

/// One inconsistency (or, in a repair report, one change): which structure, what, where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub what: String,
    pub offset: u64,
}

#[derive(Clone, Debug, Default)]
pub struct FsckReport {
    pub problems: Vec<Problem>,
    /// What a mount would repair after an unclean shutdown (not errors).
    pub recovery: Vec<String>,
    pub inodes_in_use: u64,
    pub blocks_in_use: u64,
    pub directories: u64,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// The exit code of a check-only run: clean (0) or problems left uncorrected (4).
    pub fn exit_code(&self) -> i32 {
        if self.is_clean() {
            EXIT_CLEAN
        } else {
            EXIT_UNCORRECTED
        }
    }

    pub(crate) fn problem(&mut self, what: impl Into<String>, offset: u64) {
        self.problems.push(Problem {
            what: what.into(),
            offset,
        });
    }
}

/// What a repair run found, changed and left.
#[derive(Clone, Debug, Default)]
pub struct RepairReport {
    /// The check of the image before anything was changed.
    pub before: FsckReport,
    /// Every change made to the image, in order (`what` says what was done).
    pub repairs: Vec<Problem>,
    /// The check of the image after the repair.
    pub after: FsckReport,
    /// Why the image could not be repaired at all (both superblocks damaged, geometry larger
    /// than the image); nothing was written.
    pub unrepairable: Option<String>,
}

impl RepairReport {
    /// True if the image was written.
    pub fn modified(&self) -> bool {
        !self.repairs.is_empty()
    }

    /// e2fsck's exit code: 0 nothing to do, 1 errors corrected (the image was changed and is
    /// now clean), 4 errors left uncorrected.
    pub fn exit_code(&self) -> i32 {
        if self.unrepairable.is_some() || !self.after.is_clean() {
            EXIT_UNCORRECTED
        } else if self.modified() {
            EXIT_CORRECTED
        } else {
            EXIT_CLEAN
        }
    }
}

/// Checks the image at `path`: a mapping under the image's shared lock, or a copy while a
/// read-write mount holds it (`stable_view`). Err only for operational failures (cannot open,
/// map or read).
pub fn check_image(path: &Path) -> io::Result<FsckReport> {
    let f = std::fs::File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let len = f.metadata()?.len();
    if len < 3 * BLOCK_SIZE {
        return Ok(too_small(len));
    }
    let pm = crate::fs::mount::stable_view(&f, path, len, || Pm::map_private(&f, len))?;
    Ok(check_pm(&pm))
}

fn too_small(len: u64) -> FsckReport {
    let mut r = FsckReport::default();
    r.problem(
        format!("image too small to hold a superblock ({len} bytes)"),
        0,
    );
    r
}

/// Repairs the image file at `path` in place. The image's exclusive lock is held throughout,
/// so a mounted image (read-write or read-only) is refused with `WouldBlock`. Err only for
/// operational failures (cannot open, lock, map or sync); an image that cannot be repaired
/// is an `Ok` report with `unrepairable` set.
pub fn repair_image(path: &Path) -> io::Result<RepairReport> {
    let f = crate::fs::mount::open_image(path, true)?;
    crate::fs::mount::lock_image(&f, path, true).map_err(|e| {
        if e.kind() == io::ErrorKind::WouldBlock {
            io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "{}: image is in use by another process (mounted, being formatted, or used by `nvmfs run` programs); \
                     unmount it before repairing",
                    path.display()
                ),
            )
        } else {
            e
        }
    })?;
    let len = f.metadata()?.len();
    if len < 3 * BLOCK_SIZE {
        let before = too_small(len);
        return Ok(RepairReport {
            after: before.clone(),
            before,
            repairs: Vec::new(),
            unrepairable: Some(format!(
                "image too small to hold a superblock ({len} bytes)"
            )),
        });
    }
    let before = check_pm(&Pm::map_private(&f, len)?);
    if before.is_clean() && before.recovery.is_empty() {
        return Ok(RepairReport {
            after: before.clone(),
            before,
            ..Default::default()
        });
    }
    let pm = Pm::map_file(&f, path, len, true)?;
    let mut report = RepairReport {
        before,
        ..Default::default()
    };
    let mut sync_err = None;
    repair::run(&pm, &mut report, &mut || {
        if let Err(e) = pm.sync_backing() {
            sync_err.get_or_insert(e);
        }
        Pm::map_private(&f, len)
            .map(|p| check_pm(&p))
            .unwrap_or_else(|e| {
                let mut r = FsckReport::default();
                r.problem(format!("cannot map the repaired image: {e}"), 0);
                r
            })
    });
    pm.sync_backing()?;
    if let Some(e) = sync_err {
        return Err(e);
    }
    Ok(report)
}

/// Repairs the image in `pm` in place (tests, in-memory images). Same rules as
/// `repair_image`, without the lock.
pub fn repair_pm(pm: &Pm) -> RepairReport {
    if pm.len() < 3 * BLOCK_SIZE {
        let before = too_small(pm.len());
        return RepairReport {
            after: before.clone(),
            before,
            repairs: Vec::new(),
            unrepairable: Some(format!(
                "image too small to hold a superblock ({} bytes)",
                pm.len()
            )),
        };
    }
    let recheck = || check_pm(&Pm::from_bytes(&pm.snapshot()));
    let before = recheck();
    let mut report = RepairReport {
        after: before.clone(),
        before,
        ..Default::default()
    };
    if report.before.is_clean() && report.before.recovery.is_empty() {
        return report;
    }
    repair::run(pm, &mut report, &mut || recheck());
    report
}
