//! `nvmfs fsck`: check an image (`-n`, the default) or repair it (`-y`, `-p`).

use std::fmt::Write as _;
use std::fs::File;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use nvmfs::fsck::{self, FsckReport, Problem, RepairReport, EXIT_OPERATIONAL};
use serde::Serialize;

use crate::output;

/// e2fsck's exit status for a usage or syntax error.
pub const EXIT_USAGE: u8 = 16;

#[derive(clap::Args, Debug)]
#[command(
    about = "Check an nvmfs image for consistency, and repair it (-y, -p)",
    long_about = "Check an nvmfs image for consistency, and repair it.\n\n\
        Verifies every on-media invariant: both superblocks, the journal, the inode table, the \
        HashFS block table (ownership, double mappings, probe chains), block counts, \
        directories (entries, names, link counts, `..` parents) and that every inode is \
        reachable from the root.\n\n\
        With -n (the default) the image is never written: the check runs on a private \
        copy-on-write view of it. If the image was not unmounted cleanly, it is first \
        recovered in that view as a mount would recover it, and what that recovery would do \
        is listed as `recovery:` lines (these are not problems).\n\n\
        With -y or -p the image is repaired in place, under its exclusive lock (a mounted \
        image is refused): a damaged superblock is rewritten from the other copy; journal \
        records are rolled back or cleared; damaged inodes are fixed or cleared; invalid, \
        stray, reserved and doubly mapped blocks are freed; bad directory entries are removed; \
        counts, link counts and `..` parents are recomputed; orphans are freed; detached \
        directories, directory cycles and files with links but no entry are reconnected to \
        /lost+found as `#<inode>`. On images with an allocator mapping (extent, radix, cuckoo, \
        level) the repair is that mapping's crash recovery (pending claims and mappings past \
        EOF dropped, bitmap and block counts rebuilt); a damaged mapping structure is refused \
        with nothing written. Every change is journaled and persisted; an interrupted \
        repair leaves the image marked unclean, and running it again finishes the job. A \
        second check after a successful repair finds nothing.\n\n\
        Output: one `<offset>: <problem>` line per problem found (offset in bytes from the \
        start of the image, in hex), the recovery notes, with -y/-p one `repaired <offset>: \
        <change>` line per change and a `left <offset>: <problem>` line per problem still \
        there, then a summary line.",
    after_help = "Exit status (as e2fsck):\n  \
        0   no problems found (nothing changed)\n  \
        1   problems found and corrected (-y, -p): the image was changed and is now consistent\n  \
        4   problems left uncorrected (-n; or -y/-p could not fix everything)\n  \
        8   operational error: cannot open, lock (image mounted) or map the image\n  \
        16  usage or syntax error"
)]
pub struct Args {
    /// Check only, change nothing (the default)
    #[arg(short = 'n')]
    pub check_only: bool,
    /// Repair, answering yes to every question
    #[arg(short = 'y', conflicts_with = "check_only")]
    pub yes: bool,
    /// Repair automatically (same as -y: every repair is safe to make unattended)
    #[arg(short = 'p', conflicts_with = "check_only")]
    pub preen: bool,
    /// Print the report as one JSON object: clean, problems [{what, offset}], recovery,
    /// inodes_in_use, blocks_in_use, directories; with -y/-p also modified, repairs
    /// [{what, offset}], remaining [{what, offset}] and unrepairable
    #[arg(long)]
    pub json: bool,
    /// The image file to check
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    image: String,
    clean: bool,
    problems: Vec<JsonProblem<'a>>,
    recovery: &'a [String],
    inodes_in_use: u64,
    blocks_in_use: u64,
    directories: u64,
    #[serde(flatten)]
    repair: Option<JsonRepair<'a>>,
}

#[derive(Serialize)]
struct JsonRepair<'a> {
    modified: bool,
    repairs: Vec<JsonProblem<'a>>,
    remaining: Vec<JsonProblem<'a>>,
    unrepairable: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonProblem<'a> {
    what: &'a str,
    offset: u64,
}

fn json_problems(v: &[Problem]) -> Vec<JsonProblem<'_>> {
    v.iter()
        .map(|p| JsonProblem {
            what: &p.what,
            offset: p.offset,
        })
        .collect()
}

pub fn run(args: &Args) -> u8 {
    let path = args.image.as_path();
    let repair = args.yes || args.preen;
    if let Err(msg) = precheck(path, !repair) {
        eprintln!("nvmfs fsck: {msg}");
        return exit(EXIT_OPERATIONAL);
    }
    if repair {
        return run_repair(args, path);
    }
    let report = match fsck::check_image(path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nvmfs fsck: {}", output::with_path(path, &e));
            return exit(EXIT_OPERATIONAL);
        }
    };
    let text = if args.json {
        json(path, &report, None)
    } else {
        text(path, &report)
    };
    if !output::print("fsck", &text) {
        return exit(EXIT_OPERATIONAL);
    }
    exit(report.exit_code())
}

fn run_repair(args: &Args, path: &Path) -> u8 {
    let report = match fsck::repair_image(path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nvmfs fsck: {}", output::with_path(path, &e));
            return exit(EXIT_OPERATIONAL);
        }
    };
    if let Some(why) = &report.unrepairable {
        eprintln!("nvmfs fsck: {}: cannot repair: {why}", path.display());
    }
    let text = if args.json {
        json(path, &report.after, Some(&report))
    } else {
        repair_text(path, &report)
    };
    if !output::print("fsck", &text) {
        return exit(EXIT_OPERATIONAL);
    }
    exit(report.exit_code())
}

fn exit(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(EXIT_OPERATIONAL as u8)
}

/// Refuses what cannot be an image (opening a FIFO would block). For a check, warns when
/// another process has the image mounted read-write: the check then reads a copy that may
/// be in the middle of an update. (A repair takes the exclusive lock itself and refuses.)
fn precheck(path: &Path, warn_if_busy: bool) -> Result<(), String> {
    let shown = path.display();
    let md = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    let ft = md.file_type();
    if !ft.is_file() && !ft.is_block_device() {
        return Err(format!("{shown}: not a regular file or block device"));
    }
    if !warn_if_busy {
        return Ok(());
    }
    let f = File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    // Mounting read-write takes an exclusive flock; probe it without waiting, and drop the
    // shared lock (with the file) at once.
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            eprintln!(
                "nvmfs fsck: warning: {shown} is in use by another process (mounted read-write?); \
                 checking a copy of it, which may be in the middle of an update"
            );
        }
    }
    Ok(())
}

fn problems_and_notes(s: &mut String, r: &FsckReport) {
    for p in &r.problems {
        let _ = writeln!(s, "{:#x}: {}", p.offset, p.what);
    }
    for note in &r.recovery {
        let _ = writeln!(s, "recovery: {note}");
    }
}

fn summary(r: &FsckReport) -> String {
    format!(
        "clean, {} inodes, {} blocks, {} directories",
        r.inodes_in_use, r.blocks_in_use, r.directories
    )
}

fn text(path: &Path, r: &FsckReport) -> String {
    let mut s = String::new();
    problems_and_notes(&mut s, r);
    let shown = path.display();
    if r.is_clean() {
        let _ = writeln!(s, "{shown}: {}", summary(r));
    } else {
        let _ = writeln!(s, "{shown}: {} problem(s) found", r.problems.len());
    }
    s
}

fn repair_text(path: &Path, r: &RepairReport) -> String {
    let mut s = String::new();
    problems_and_notes(&mut s, &r.before);
    for p in &r.repairs {
        let _ = writeln!(s, "repaired {:#x}: {}", p.offset, p.what);
    }
    for p in &r.after.problems {
        let _ = writeln!(s, "left {:#x}: {}", p.offset, p.what);
    }
    let shown = path.display();
    let found = r.before.problems.len();
    if !r.after.is_clean() || r.unrepairable.is_some() {
        let _ = writeln!(
            s,
            "{shown}: {found} problem(s) found, {} change(s) made, {} problem(s) left uncorrected",
            r.repairs.len(),
            r.after.problems.len()
        );
    } else if r.modified() {
        let _ = writeln!(
            s,
            "{shown}: {found} problem(s) found, {} change(s) made; now {}",
            r.repairs.len(),
            summary(&r.after)
        );
    } else {
        let _ = writeln!(s, "{shown}: {}", summary(&r.after));
    }
    s
}

/// `r` is the final check (the only one without -y/-p); with a repair report, `problems` and
/// `recovery` are what was found before repairing.
fn json(path: &Path, r: &FsckReport, rep: Option<&RepairReport>) -> String {
    let found = rep.map_or(r, |x| &x.before);
    let j = JsonReport {
        image: path.display().to_string(),
        clean: r.is_clean() && rep.is_none_or(|x| x.unrepairable.is_none()),
        problems: json_problems(&found.problems),
        recovery: &found.recovery,
        inodes_in_use: r.inodes_in_use,
        blocks_in_use: r.blocks_in_use,
        directories: r.directories,
        repair: rep.map(|x| JsonRepair {
            modified: x.modified(),
            repairs: json_problems(&x.repairs),
            remaining: json_problems(&x.after.problems),
            unrepairable: x.unrepairable.as_deref(),
        }),
    };
    let mut s =
        serde_json::to_string_pretty(&j).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}
