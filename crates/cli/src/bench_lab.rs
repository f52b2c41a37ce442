//! What `nvmfs bench postmark`, `filemark`, `pgmeter` and `aim7` share: the target flags,
//! running a command's cases on a fresh target (one record per case), and the JSON file
//! with the exit status.

use std::io;
use std::path::PathBuf;

use nvmfs_lab::kernel;
use nvmfs_lab::stats::Summary;
use nvmfs_lab::study::targets::{ImageSpec, StudyTarget};
use serde::Serialize;

use crate::bench_targets::{resolve_targets, Wanted};
use crate::output;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Where to run and where results go.
#[derive(clap::Args, Debug)]
pub struct TargetArgs {
    /// Where to run, in order (repeat for several): nvmfs, tmpfs, dir:PATH or a kernel variant
    /// [default: nvmfs, tmpfs]
    #[arg(short, long = "target", value_name = "T")]
    targets: Vec<String>,
    /// Also write the configuration and every target's results to FILE as JSON
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Directory (a tmpfs) for nvmfs images, the tmpfs target and loop-device backing files
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub shm_dir: PathBuf,
}

/// A command's run over its targets: how big a fresh target is.
pub struct Bench {
    /// `postmark`, `filemark`, ..., for messages and scratch names.
    pub command: &'static str,
    pub image: ImageSpec,
    /// Size of a kernel variant's loop device.
    pub device_bytes: u64,
    pub shm_dir: PathBuf,
}

impl TargetArgs {
    /// The targets, checked, and the sizes of fresh ones for a workload needing `image`.
    pub fn resolve(
        &self,
        command: &'static str,
        image: ImageSpec,
    ) -> Result<(Bench, Vec<Wanted>), String> {
        if !self.shm_dir.is_dir() {
            return Err(format!(
                "--shm-dir {}: not a directory",
                self.shm_dir.display()
            ));
        }
        // Sparse, so only written blocks use memory; 8 GiB at least, as the study's.
        let device_bytes = (image.bytes.div_ceil(GIB) * GIB).max(8 * GIB);
        let wanted = resolve_targets(&self.targets, &self.shm_dir, device_bytes)?;
        let bench = Bench {
            command,
            image,
            device_bytes,
            shm_dir: self.shm_dir.clone(),
        };
        Ok((bench, wanted))
    }
}

/// An nvmfs image for `data_bytes` of files and `files` files and directories at once:
/// room for the data (each file at least a 4 KiB block) plus 256 MiB, and half as many
/// inodes again as files.
pub fn image_for(data_bytes: u64, files: u64) -> ImageSpec {
    // Saturating: an impossible size fails when the image is made, with the system's error.
    let bytes = data_bytes
        .saturating_add(256 * MIB)
        .div_ceil(64 * MIB)
        .saturating_mul(64 * MIB);
    let inodes = (files.saturating_add(4096).saturating_mul(3) / 2)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX);
    ImageSpec { bytes, inodes }
}

/// One case's outcome on one target, for the table and the JSON file.
#[derive(Serialize)]
pub struct Record<R> {
    pub target: String,
    /// ok, stopped early: why, skipped: why (unavailable), failed: why, interrupted.
    pub status: String,
    pub provision: Option<serde_json::Value>,
    pub result: Option<R>,
}

impl<R> Record<R> {
    fn new(target: &str, status: String, provision: Option<&serde_json::Value>) -> Self {
        Record {
            target: target.to_string(),
            status,
            provision: provision.cloned(),
            result: None,
        }
    }
}

/// Makes `w` fresh, runs each case on it in turn and closes it: one record per case run
/// (every case skipped, or failed, when the target cannot be made). `stopped` says why a
/// result ended early, if it did. Nothing more runs once interrupted.
pub fn run_cases<C, R>(
    bench: &Bench,
    w: &Wanted,
    cases: &[C],
    run_case: &mut dyn FnMut(&mut StudyTarget, &C) -> io::Result<R>,
    stopped: &dyn Fn(&R) -> Option<String>,
) -> Vec<Record<R>> {
    let label = w.label();
    if let Some(why) = w.unavailable() {
        eprintln!("  {label}: unavailable: {why}");
        return cases
            .iter()
            .map(|_| Record::new(label, format!("skipped: {why}"), None))
            .collect();
    }
    let scratch = format!("nvmfs-bench-{}-{}", bench.command, std::process::id());
    let made = w.make(&scratch, |t| {
        StudyTarget::create_sized(t, &bench.shm_dir, bench.device_bytes, bench.image)
    });
    let mut target = match made {
        Ok(t) => t,
        Err(e) => {
            eprintln!("  {label}: cannot make the target: {e}");
            let s = status::<R>(&Err(e), stopped);
            return cases
                .iter()
                .map(|_| Record::new(label, s.clone(), None))
                .collect();
        }
    };
    let provision = target.describe();
    let mut records = Vec::new();
    for case in cases {
        if kernel::interrupted() {
            break;
        }
        let outcome = run_case(&mut target, case);
        let mut r = Record::new(label, status(&outcome, stopped), Some(&provision));
        r.result = outcome.ok();
        records.push(r);
    }
    if let Err(e) = target.close() {
        eprintln!("  {label}: closing the target: {e}");
        if let Some(last) = records.last_mut().filter(|r| r.status == "ok") {
            last.status = format!("failed: closing the target: {e}");
        }
    }
    records
}

/// Cases run on one fresh target, and the progress line's name for them
/// (`postmark`, `filemark-small, 8 thread(s)`).
pub struct Job<'a, C> {
    pub label: String,
    pub cases: &'a [C],
}

/// The start of a command's run, once its arguments are good: checks `--json` is writable,
/// installs the interrupt handler and prints the table's header (`None` when the command
/// prints only records). `Err` holds the exit status.
pub fn begin(command: &str, json: Option<&PathBuf>, header: Option<&str>) -> Result<(), u8> {
    crate::bench_db::start(command, json)?;
    match header {
        Some(h) if !output::print("bench", h) => Err(1),
        _ => Ok(()),
    }
}

/// Runs every job on every wanted target in turn, each job on a fresh target (`run_cases`),
/// and prints each record's table rows (`rows`) as it comes. `Err(1)` when stdout is gone.
pub fn run_jobs<C, R>(
    bench: &Bench,
    wanted: &[Wanted],
    jobs: &[Job<'_, C>],
    run_case: &mut dyn FnMut(&mut StudyTarget, &C) -> io::Result<R>,
    stopped: &dyn Fn(&R) -> Option<String>,
    rows: &dyn Fn(&Record<R>, &C) -> String,
) -> Result<Vec<Record<R>>, u8> {
    let total = wanted.len() * jobs.len();
    let mut records = Vec::new();
    let mut started = 0;
    for w in wanted {
        for job in jobs {
            if kernel::interrupted() {
                return Ok(records);
            }
            started += 1;
            eprintln!("[{started}/{total}] {} on {}", job.label, w.label());
            let done = run_cases(bench, w, job.cases, run_case, stopped);
            for (r, c) in done.into_iter().zip(job.cases) {
                if !output::print("bench", &rows(&r, c)) {
                    return Err(1);
                }
                records.push(r);
            }
        }
    }
    Ok(records)
}

fn status<R>(outcome: &io::Result<R>, stopped: &dyn Fn(&R) -> Option<String>) -> String {
    match outcome {
        Ok(r) => match stopped(r) {
            Some(why) if why.starts_with("interrupted") => "interrupted".to_string(),
            Some(why) => format!("stopped early: {why}"),
            None => "ok".to_string(),
        },
        Err(_) if kernel::interrupted() => "interrupted".to_string(),
        Err(e) => format!("failed: {e}"),
    }
}

/// `mean ± half-width` columns of a summary: `-` when there is none, no interval for one
/// sample.
pub fn summary_cells(s: Option<&Summary>) -> (String, String) {
    match s {
        Some(m) if m.ci95_half_width.is_finite() => (
            format!("{:.1}", m.mean),
            format!("{:.1}", m.ci95_half_width),
        ),
        Some(m) => (format!("{:.1}", m.mean), "-".to_string()),
        None => ("-".to_string(), "-".to_string()),
    }
}

/// The JSON file's contents.
#[derive(Serialize)]
struct Report<'a, C: Serialize, R: Serialize> {
    schema: &'static str,
    config: &'a C,
    records: &'a [Record<R>],
    interrupted: bool,
}

/// Writes the JSON file and picks the exit status: 130 when interrupted, 1 when a case
/// failed or none could run, else 0.
pub fn finish<C: Serialize, R: Serialize>(
    command: &str,
    schema: &'static str,
    json: Option<&PathBuf>,
    config: &C,
    records: &[Record<R>],
) -> u8 {
    let interrupted = kernel::interrupted();
    let report = Report {
        schema,
        config,
        records,
        interrupted,
    };
    let runs = records
        .iter()
        .map(|r| (r.status.starts_with("failed"), r.result.is_some()));
    crate::bench_targets::finish_report(command, json, &report, interrupted, runs)
}

/// Parses a list flag's values (`1,2,4` or repeated), each at least 1; `what` names the
/// flag in errors.
pub fn counts(values: &[usize], default: &[usize], what: &str) -> Result<Vec<usize>, String> {
    let v = if values.is_empty() {
        default.to_vec()
    } else {
        values.to_vec()
    };
    if v.contains(&0) {
        return Err(format!("{what}: every count must be at least 1"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_hold_the_data_and_the_files() {
        let i = image_for(0, 0);
        assert_eq!((i.bytes, i.inodes), (256 * MIB, 8192));
        let i = image_for(100 * MIB, 10_000);
        assert_eq!(i.bytes, 384 * MIB);
        assert_eq!(i.inodes, 32768);
        assert!(image_for(u64::MAX, u64::MAX).bytes > 0);
    }

    #[test]
    fn a_failed_or_stopped_case_says_why() {
        let stopped = |r: &u32| (*r == 7).then(|| "out of files".to_string());
        assert_eq!(status(&Ok(1u32), &stopped), "ok");
        assert_eq!(status(&Ok(7u32), &stopped), "stopped early: out of files");
        let e = io::Error::other("disk on fire");
        assert_eq!(status::<u32>(&Err(e), &stopped), "failed: disk on fire");
    }

    #[test]
    fn summaries_without_an_interval_show_a_dash() {
        assert_eq!(summary_cells(None), ("-".into(), "-".into()));
        let one = Summary::of(&[5.0]);
        assert_eq!(summary_cells(one.as_ref()), ("5.0".into(), "-".into()));
        let two = Summary::of(&[4.0, 6.0]);
        assert_eq!(summary_cells(two.as_ref()).0, "5.0");
        assert_ne!(summary_cells(two.as_ref()).1, "-");
    }

    #[test]
    fn count_lists_default_and_refuse_zero() {
        assert_eq!(counts(&[], &[1, 4], "--x").unwrap(), [1, 4]);
        assert_eq!(counts(&[2, 3], &[1], "--x").unwrap(), [2, 3]);
        assert!(counts(&[0], &[1], "--x").unwrap_err().contains("--x"));
    }
}
