//! Cross-check: the real Postmark (Debian's `/usr/bin/postmark`, 1.53, whose
//! banner says 1.51 and whose benchmark is 1.51's) and ours run the same
//! command file; every count of its report must be ours, on a kernel
//! directory and on nvmfs. Skipped, with a message, where the program is not
//! installed (CI installs it).

use nvmfs_lab::postmark::{self, parse_command_file, PostmarkResult};
use nvmfs_lab::targets::nvmfs::NvmfsTarget;
use nvmfs_lab::targets::sys::SysFs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const POSTMARK: &str = "/usr/bin/postmark";

/// What the real program reported.
#[derive(Debug, PartialEq, Eq)]
struct Report {
    transactions: u64,
    created: u64,
    created_alone: u64,
    created_mixed: u64,
    read: u64,
    appended: u64,
    deleted: u64,
    deleted_alone: u64,
    deleted_mixed: u64,
    bytes_read: u64,
    bytes_written: u64,
}

impl Report {
    fn of(r: &PostmarkResult) -> Report {
        let f = &r.files;
        Report {
            transactions: r.transactions,
            created: f.created,
            created_alone: f.created_alone,
            created_mixed: f.created_mixed,
            read: f.read,
            appended: f.appended,
            deleted: f.deleted,
            deleted_alone: f.deleted_alone,
            deleted_mixed: f.deleted_mixed,
            bytes_read: r.bytes_read,
            bytes_written: r.bytes_written,
        }
    }
}

/// The first whole number in `line` after `after`.
fn number_after(line: &str, after: &str) -> Option<u64> {
    let rest = &line[line.find(after)? + after.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// The verbose report's "Files:" section, in its order: created, creation
/// alone, mixed, read, appended, deleted, deletion alone, mixed.
fn verbose_files(out: &str) -> Vec<u64> {
    let mut v = Vec::new();
    for line in out.lines() {
        let t = line.trim();
        let word = |w: &str| {
            let mut it = t.split_whitespace();
            let n = it.next()?.parse::<u64>().ok()?;
            (it.next() == Some(w)).then_some(n)
        };
        let n = word("created")
            .or_else(|| number_after(t, "Creation alone:"))
            .or_else(|| number_after(t, "Mixed with transactions:"))
            .or_else(|| word("read"))
            .or_else(|| word("appended"))
            .or_else(|| word("deleted"))
            .or_else(|| number_after(t, "Deletion alone:"));
        v.extend(n);
    }
    v
}

/// The terse report: 13 numbers, the first the total seconds (at least 1).
fn terse_line(out: &str) -> Vec<f64> {
    out.lines()
        .map(|l| {
            l.split_whitespace()
                .map(str::parse::<f64>)
                .collect::<Result<Vec<_>, _>>()
        })
        .find_map(|r| r.ok().filter(|v| v.len() == 13))
        .expect("a terse report line")
}

/// Runs the real program on `text` in `dir`; its standard output.
fn run_postmark(dir: &Path, text: &str) -> String {
    let cfg = dir.join("pm.cfg");
    std::fs::write(&cfg, text).unwrap();
    let out = Command::new(POSTMARK)
        .arg(&cfg)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("postmark runs");
    assert!(out.status.success(), "postmark: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The real program's report of a terse and a verbose run of one config.
fn real_report(out: &str) -> Report {
    let terse = terse_line(out);
    let files = verbose_files(out);
    assert_eq!(files.len(), 8, "verbose counts in {out}");
    // The terse report gives transactions and bytes per second of whole
    // seconds (at least 1): times those seconds they are the counts.
    let (total, t_secs) = (terse[0], terse[1]);
    let count = |rate: f64, secs: f64| (rate * secs).round() as u64;
    Report {
        transactions: count(terse[2], t_secs),
        created: files[0],
        created_alone: files[1],
        created_mixed: files[2],
        read: files[3],
        appended: files[4],
        deleted: files[5],
        deleted_alone: files[6],
        deleted_mixed: files[7],
        bytes_read: count(terse[11], total),
        bytes_written: count(terse[12], total),
    }
}

fn scratch_image() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let tag = format!("{}-{:016x}", std::process::id(), fastrand::u64(..));
    dir.join(format!("nvmfs-pm-crosscheck-{tag}.img"))
}

#[test]
fn postmark_and_ours_count_the_same() {
    if !Path::new(POSTMARK).exists() {
        eprintln!("skipping the Postmark cross-check: {POSTMARK} is not installed (apt-get install postmark)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let text = format!(
        "set location {}\nset number 200\nset transactions 500\nset subdirectories 5\n\
         set seed 7\nset report terse\nrun\nset report verbose\nrun\nquit\n",
        work.display()
    );
    let real = real_report(&run_postmark(tmp.path(), &text));
    assert_eq!(
        std::fs::read_dir(&work).unwrap().count(),
        0,
        "postmark cleaned up"
    );
    assert_eq!(real.transactions, 500);

    let file = parse_command_file(&text).unwrap();
    assert_eq!(file.runs.len(), 2);
    let cfg = &file.runs[0];
    let on_dir = postmark::run(&SysFs::new(&work), cfg, &|| false).unwrap();
    assert_eq!(Report::of(&on_dir), real, "kernel directory");
    assert_eq!(
        std::fs::read_dir(&work).unwrap().count(),
        0,
        "ours cleaned up"
    );

    let image = scratch_image();
    let nv = NvmfsTarget::create(image.clone(), 128 << 20, 4096).unwrap();
    let on_nvmfs = postmark::run(&nv, cfg, &|| false).unwrap();
    nv.close().unwrap();
    assert!(!image.exists());
    assert_eq!(Report::of(&on_nvmfs), real, "nvmfs");
}

#[test]
fn report_parsers_read_postmarks_output() {
    // Output of Debian's postmark for the config above (seed 7).
    let out = "\
1 1 500.00 457.00 200.00 257.00 273.00 227.00 457.00 214.00 243.00 1704805.00 2884985.00
Creating subdirectories...Done
Time:
\t1 seconds total
\t1 seconds of transactions (500 per second)

Files:
\t457 created (457 per second)
\t\tCreation alone: 200 files (200 per second)
\t\tMixed with transactions: 257 files (257 per second)
\t273 read (273 per second)
\t227 appended (227 per second)
\t457 deleted (457 per second)
\t\tDeletion alone: 214 files (214 per second)
\t\tMixed with transactions: 243 files (243 per second)

Data:
\t1.63 megabytes read (1.63 megabytes per second)
\t2.75 megabytes written (2.75 megabytes per second)
";
    let r = real_report(out);
    assert_eq!(
        r,
        Report {
            transactions: 500,
            created: 457,
            created_alone: 200,
            created_mixed: 257,
            read: 273,
            appended: 227,
            deleted: 457,
            deleted_alone: 214,
            deleted_mixed: 243,
            bytes_read: 1704805,
            bytes_written: 2884985,
        }
    );
}
