//! `nvmfs fsck`: check an image (check only; repair is not implemented yet).

use std::fmt::Write as _;
use std::fs::File;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use nvmfs::fsck::{self, FsckReport, EXIT_CLEAN, EXIT_OPERATIONAL, EXIT_UNCORRECTED};
use serde::Serialize;

use crate::output;

/// e2fsck's exit status for a usage or syntax error.
pub const EXIT_USAGE: u8 = 16;

#[derive(clap::Args, Debug)]
#[command(
    about = "Check an nvmfs image for consistency (check only)",
    long_about = "Check an nvmfs image for consistency.\n\n\
        Verifies every on-media invariant: both superblocks, the inode table, the HashFS block \
        table (ownership, double mappings, probe chains), block counts, directories (entries, \
        names, link counts, `..` parents) and that every inode is reachable from the root. \
        The image is never written: the check runs on a private copy-on-write view of it. If \
        the image was not unmounted cleanly, it is first recovered in that view as a mount would \
        recover it, and what that recovery would do is listed as `recovery:` lines (these are \
        not problems).\n\n\
        Output: one `<offset>: <problem>` line per problem (offset in bytes from the start of \
        the image, in hex), the recovery notes, then a summary line.",
    after_help = "Exit status (as e2fsck):\n  \
        0   no problems found\n  \
        4   problems found and left uncorrected\n  \
        8   operational error (cannot open or map the image), or repair requested\n  \
        16  usage or syntax error"
)]
pub struct Args {
    /// Check only, change nothing (the default)
    #[arg(short = 'n')]
    pub check_only: bool,
    /// Repair, answering yes to every question (not implemented yet: exits 8)
    #[arg(short = 'y', conflicts_with = "check_only")]
    pub yes: bool,
    /// Repair automatically what is safe to repair (not implemented yet: exits 8)
    #[arg(short = 'p', conflicts_with = "check_only")]
    pub preen: bool,
    /// Print the report as one JSON object: clean, problems [{what, offset}], recovery,
    /// inodes_in_use, blocks_in_use, directories
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
}

#[derive(Serialize)]
struct JsonProblem<'a> {
    what: &'a str,
    offset: u64,
}

pub fn run(args: &Args) -> u8 {
    if args.yes || args.preen {
        let flag = if args.yes { "-y" } else { "-p" };
        eprintln!(
            "nvmfs fsck: repair ({flag}) is not implemented yet; run `nvmfs fsck -n` to check only"
        );
        return exit(EXIT_OPERATIONAL);
    }
    let path = args.image.as_path();
    if let Err(msg) = precheck(path) {
        eprintln!("nvmfs fsck: {msg}");
        return exit(EXIT_OPERATIONAL);
    }
    let report = match fsck::check_image(path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nvmfs fsck: {}", output::with_path(path, &e));
            return exit(EXIT_OPERATIONAL);
        }
    };
    let text = if args.json {
        json(path, &report)
    } else {
        text(path, &report)
    };
    if !output::print("fsck", &text) {
        return exit(EXIT_OPERATIONAL);
    }
    exit(if report.is_clean() {
        EXIT_CLEAN
    } else {
        EXIT_UNCORRECTED
    })
}

fn exit(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(EXIT_OPERATIONAL as u8)
}

/// Refuses what cannot be an image (opening a FIFO would block), and warns when another
/// process has the image mounted read-write: the check then sees a snapshot that may be in
/// the middle of an update.
fn precheck(path: &Path) -> Result<(), String> {
    let shown = path.display();
    let md = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    let ft = md.file_type();
    if !ft.is_file() && !ft.is_block_device() {
        return Err(format!("{shown}: not a regular file or block device"));
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
                 checking a snapshot that may be in the middle of an update"
            );
        }
    }
    Ok(())
}

fn text(path: &Path, r: &FsckReport) -> String {
    let mut s = String::new();
    for p in &r.problems {
        let _ = writeln!(s, "{:#x}: {}", p.offset, p.what);
    }
    for note in &r.recovery {
        let _ = writeln!(s, "recovery: {note}");
    }
    let shown = path.display();
    if r.is_clean() {
        let _ = writeln!(
            s,
            "{shown}: clean, {} inodes, {} blocks, {} directories",
            r.inodes_in_use, r.blocks_in_use, r.directories
        );
    } else {
        let _ = writeln!(s, "{shown}: {} problem(s) found", r.problems.len());
    }
    s
}

fn json(path: &Path, r: &FsckReport) -> String {
    let j = JsonReport {
        image: path.display().to_string(),
        clean: r.is_clean(),
        problems: r
            .problems
            .iter()
            .map(|p| JsonProblem {
                what: &p.what,
                offset: p.offset,
            })
            .collect(),
        recovery: &r.recovery,
        inodes_in_use: r.inodes_in_use,
        blocks_in_use: r.blocks_in_use,
        directories: r.directories,
    };
    let mut s =
        serde_json::to_string_pretty(&j).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}
