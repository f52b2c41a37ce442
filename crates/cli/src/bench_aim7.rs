//! `nvmfs bench aim7`: AIM7's disk subtests over a sweep of task counts on each target,
//! jobs/minute per task count and the peak.

use std::io;

use nvmfs_lab::aim7::{self, parse_mix, Aim7Config, Aim7Result, MixEntry, Progress};
use nvmfs_lab::filebench::LabTarget;
use nvmfs_lab::kernel;
use nvmfs_lab::study::targets::{ImageSpec, StudyTarget, TargetVisitor};
use nvmfs_lab::targets::api::MicroFs;

use crate::bench_lab::{self, Record, TargetArgs};
use crate::size::{format_size, parse_size};

/// The sweep's largest task count by default: 1, 2, 4, 8, 16.
const MAX_TASKS: usize = 16;

#[derive(clap::Args, Debug)]
#[command(
    about = "AIM7's disk subtests over task counts: jobs/minute and its peak, per target",
    long_about = "Runs AIM Suite VII's multiuser disk workload on each target in turn, the target \
        made fresh: for each --tasks count a subrun, in which that many tasks (threads) start \
        together, each running a list of --jobs-per-task jobs drawn from the --mix by weight \
        in random order (AIM7's multitask.c), and the subrun ends with the last task. A job is \
        one run of a disk subtest of AIM7's disk1.c, with its calls and sizes: 1 KiB blocks, \
        --filesize (plus --poolsize / tasks) per file, O_SYNC opens for the sync_ subtests \
        (nvmfs writes are durable on return, so there a plain open). Before each subrun the \
        shared tmpa.common is written at that subrun's size (once when it does not change) \
        and sync() runs, as AIM7's sync;sync;sync. --period makes the tasks run fresh lists \
        until the period is over, so that a subrun takes a fixed time.\n\n\
        --mix takes AIM7 workfile lines as NAME[=WEIGHT],...: disk_rr, disk_rw, disk_rd, \
        disk_wrt, disk_cp, sync_disk_rw, sync_disk_wrt, sync_disk_cp, sync_disk_update (weight 1 \
        when left out).\n\n\
        stdout gets, per target, AIM7's table: per task count the file size, jobs done, \
        seconds, jobs/minute (jobs x 60 / seconds), jobs/minute/task and the job timing index \
        (JTI: 100 x (1 - the variation of the tasks' times)), the peak jobs/minute marked with \
        a *. Progress goes to stderr; --json FILE gets everything, every subtest's run count and \
        mean and max time per subrun included.",
    after_help = "Targets: nvmfs (the library in-process on a fresh image in --shm-dir), tmpfs (a \
        fresh directory in --shm-dir, through system calls), dir:PATH (a fresh subdirectory of \
        PATH), or a kernel variant of `nvmfs study` made fresh on a RAM-backed loop device \
        (ext2, ext3, ext3-writeback, ext3-journal, ext4, ext4-nodelalloc, xfs, xfs-ag, btrfs; \
        needs root). Default: nvmfs and tmpfs.\n\n\
        Exit status: 0 on success, 1 when a run failed or no target could run, 2 on bad input, \
        130 when interrupted.\n\n\
        Examples:\n  nvmfs bench aim7\n  \
        nvmfs bench aim7 --tasks 1,2,4,8,16,32,64 -t nvmfs -t ext4\n  \
        nvmfs bench aim7 --mix sync_disk_update=2,disk_rr --filesize 4M --jobs-per-task 20\n  \
        nvmfs bench aim7 --tasks 8 --period 30 --json aim7.json"
)]
pub struct Args {
    /// The workfile: NAME[=WEIGHT],... [default: the nine disk subtests, weight 1 each]
    #[arg(long, value_name = "MIX", value_parser = mix)]
    mix: Option<Mix>,
    /// Task counts of the sweep, increasing, as a list (1,2,4) or repeated
    /// [default: 1,2,4,8,16]
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    tasks: Vec<usize>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = default_of(
        "Size of each test file, whole KiB (FILESIZE)", |c| format_size(kib(c.filesize_kib))))]
    filesize: Option<u64>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = default_of(
        "Bytes shared by the tasks: each subrun's files are --filesize + this / tasks \
        (POOLSIZE)", |c| format_size(kib(c.poolsize_kib))))]
    poolsize: Option<u64>,
    #[arg(long, value_name = "N", help = default_of(
        "Jobs in each task's list (LOADNUM)", |c| c.jobs_per_task.to_string()))]
    jobs_per_task: Option<u32>,
    /// Run fresh lists until this many seconds have passed in each subrun [default: each
    /// task runs its list once, as AIM7]
    #[arg(long, value_name = "S")]
    period: Option<f64>,
    #[arg(long, value_name = "N", help = default_of(
        "Added to each task's seed (its number; 0 is AIM7's seeding)", |c| c.seed.to_string()))]
    seed: Option<u64>,
    #[command(flatten)]
    targets: TargetArgs,
}

/// A workfile from `--mix`.
#[derive(Debug, Clone)]
struct Mix(Vec<MixEntry>);

fn mix(text: &str) -> Result<Mix, String> {
    parse_mix(text).map(Mix)
}

fn default_of(text: &str, value: impl Fn(&Aim7Config) -> String) -> String {
    format!("{text} [default: {}]", value(&Aim7Config::new(MAX_TASKS)))
}

fn kib(k: u32) -> u64 {
    u64::from(k) << 10
}

/// Bytes as whole KiB; `what` names the flag in errors.
fn to_kib(bytes: u64, what: &str) -> Result<u32, String> {
    if !bytes.is_multiple_of(1024) {
        return Err(format!("{what} {bytes}: not a whole number of KiB"));
    }
    u32::try_from(bytes / 1024).map_err(|_| format!("{what} {bytes}: too large"))
}

/// AIM7's defaults with the flags applied, checked.
fn config(args: &Args) -> Result<Aim7Config, String> {
    let mut c = Aim7Config::new(MAX_TASKS);
    if let Some(mix) = &args.mix {
        c.mix.clone_from(&mix.0);
    }
    if !args.tasks.is_empty() {
        c.task_counts.clone_from(&args.tasks);
    }
    if let Some(b) = args.filesize {
        c.filesize_kib = to_kib(b, "--filesize")?;
    }
    if let Some(b) = args.poolsize {
        c.poolsize_kib = to_kib(b, "--poolsize")?;
    }
    if let Some(j) = args.jobs_per_task {
        c.jobs_per_task = j;
    }
    c.period_seconds = args.period;
    if let Some(s) = args.seed {
        c.seed = s;
    }
    c.validate().map_err(|e| flag_error(&e))?;
    Ok(c)
}

/// The lab's message with the flag it is about.
fn flag_error(e: &str) -> String {
    let flags = [
        ("the mix", "--mix"),
        ("jobs per task", "--jobs-per-task"),
        ("task counts", "--tasks"),
        ("no task counts", "--tasks"),
        ("the file size", "--filesize/--poolsize"),
        ("period", "--period"),
    ];
    match flags.iter().find(|(key, _)| e.starts_with(key)) {
        Some((_, flag)) => format!("{flag}: {e}"),
        // A weight: the mix line names its subtest.
        None => format!("--mix: {e}"),
    }
}

/// An image for every task's temp file at the largest subrun size (twice over: a
/// sync_disk_update file grows by a block, an unlinked file keeps its blocks until closed)
/// and tmpa.common.
fn image(c: &Aim7Config) -> ImageSpec {
    let tasks = c.task_counts.iter().copied().max().unwrap_or(1) as u64;
    let largest = c
        .task_counts
        .iter()
        .map(|&t| c.file_kib(t))
        .max()
        .unwrap_or(0);
    let file = (u64::from(largest) + 1) * 1024;
    let data = (2 * tasks + 1).saturating_mul(file.div_ceil(4096) * 4096);
    bench_lab::image_for(data, 2 * tasks + 2)
}

/// The sweep on a target, through [`TargetVisitor`].
struct RunAim7<'a>(&'a Aim7Config);

impl TargetVisitor for RunAim7<'_> {
    type Output = io::Result<Aim7Result>;

    fn visit<T: LabTarget>(self, target: &mut T) -> Self::Output
    where
        <T::Fs as MicroFs>::Name: Send + Sync,
        <T::Fs as MicroFs>::File: Send,
    {
        let mut progress = |p: Progress<'_>| match p {
            Progress::Setup(msg) => eprintln!("  {msg}"),
            Progress::Subrun(s) => eprintln!(
                "  {} task(s): {} jobs in {:.2} s, {:.1} jobs/min",
                s.tasks, s.jobs, s.seconds, s.jobs_per_minute
            ),
        };
        aim7::run(target.fs(), self.0, &kernel::interrupted, &mut progress)
    }
}

pub fn run(args: &Args) -> u8 {
    let prepared = config(args).and_then(|c| {
        let (bench, wanted) = args.targets.resolve("aim7", image(&c))?;
        Ok((c, bench, wanted))
    });
    let (cfg, bench, wanted) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nvmfs bench aim7: {e}");
            return 2;
        }
    };
    describe(&cfg);
    let json = args.targets.json.as_ref();
    if let Err(code) = bench_lab::begin("aim7", json, Some(&header())) {
        return code;
    }
    let jobs = [bench_lab::Job {
        label: "aim7".into(),
        cases: std::slice::from_ref(&cfg),
    }];
    let mut run_one = |t: &mut StudyTarget, c: &Aim7Config| t.visit(RunAim7(c));
    let stopped = |r: &Aim7Result| r.stopped_early.clone();
    let rows = |r: &Record<Aim7Result>, _: &Aim7Config| format_rows(r);
    let records = match bench_lab::run_jobs(&bench, &wanted, &jobs, &mut run_one, &stopped, &rows) {
        Ok(r) => r,
        Err(code) => return code,
    };
    bench_lab::finish(
        "aim7",
        "nvmfs-lab/bench-aim7/v1",
        args.targets.json.as_ref(),
        &cfg,
        &records,
    )
}

/// The run's settings on stderr, so that a saved table says what it measured.
fn describe(c: &Aim7Config) {
    let mix: Vec<String> = c
        .mix
        .iter()
        .map(|e| format!("{}={}", e.subtest.name(), e.weight))
        .collect();
    let tasks: Vec<String> = c.task_counts.iter().map(|t| t.to_string()).collect();
    let period = c
        .period_seconds
        .map(|p| format!(", {p} s periods"))
        .unwrap_or_default();
    eprintln!(
        "aim7: mix {}; files {} + {} / tasks, {} jobs per task{period}, seed {}; tasks {}",
        mix.join(","),
        format_size(kib(c.filesize_kib)),
        format_size(kib(c.poolsize_kib)),
        c.jobs_per_task,
        c.seed,
        tasks.join(",")
    );
}

const ROW: usize = 8;

fn header() -> String {
    let cells = [
        "tasks",
        "file KiB",
        "jobs",
        "seconds",
        "jobs/min",
        "jobs/min/task",
        "JTI",
        "peak",
    ];
    row("target", &cells.map(String::from), "status")
}

fn row(target: &str, cells: &[String; ROW], status: &str) -> String {
    format!(
        "{target:<16} {:>6} {:>9} {:>9} {:>9} {:>12} {:>14} {:>4} {:>4}  {status}\n",
        cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], cells[6], cells[7]
    )
}

/// AIM7's table of a target: a row per subrun, the peak marked; one row with the status
/// when nothing ran.
fn format_rows(r: &Record<Aim7Result>) -> String {
    let Some(res) = r.result.as_ref().filter(|res| !res.subruns.is_empty()) else {
        return row(&r.target, &std::array::from_fn(|_| "-".into()), &r.status);
    };
    let peak = res.peak.map(|p| p.tasks);
    res.subruns
        .iter()
        .map(|s| {
            let status = match &s.stopped_early {
                Some(why) => format!("stopped early: {why}"),
                None => r.status.clone(),
            };
            let cells = [
                s.tasks.to_string(),
                s.file_kib.to_string(),
                s.jobs.to_string(),
                format!("{:.3}", s.seconds),
                format!("{:.1}", s.jobs_per_minute),
                format!("{:.1}", s.jobs_per_minute_per_task),
                s.jti.to_string(),
                if peak == Some(s.tasks) { "*" } else { "" }.to_string(),
            ];
            row(&r.target, &cells, &status)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use nvmfs_lab::aim7::{disk_mix, Subtest};

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Result<Args, String> {
        Cli::try_parse_from(std::iter::once("x").chain(argv.iter().copied()))
            .map(|c| c.args)
            .map_err(|e| e.to_string())
    }

    fn config_of(argv: &[&str]) -> Result<Aim7Config, String> {
        config(&parse(argv)?)
    }

    #[test]
    fn defaults_are_the_disk_mix_doubling_to_16_tasks() {
        let c = config_of(&[]).unwrap();
        assert_eq!(c, Aim7Config::new(16));
        assert_eq!(c.task_counts, [1, 2, 4, 8, 16]);
        assert_eq!(c.mix, disk_mix());
    }

    #[test]
    fn flags_set_the_sweep() {
        let c = config_of(&[
            "--mix",
            "disk_rr=2,sync_disk_update",
            "--tasks",
            "1,3",
            "--tasks",
            "5",
            "--filesize",
            "64K",
            "--poolsize",
            "1M",
            "--jobs-per-task",
            "7",
            "--period",
            "0.5",
            "--seed",
            "3",
        ])
        .unwrap();
        assert_eq!(c.mix.len(), 2);
        assert_eq!((c.mix[0].subtest, c.mix[0].weight), (Subtest::DiskRr, 2));
        assert_eq!(c.task_counts, [1, 3, 5]);
        assert_eq!((c.filesize_kib, c.poolsize_kib), (64, 1024));
        assert_eq!(
            (c.jobs_per_task, c.period_seconds, c.seed),
            (7, Some(0.5), 3)
        );
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let err = parse(&["--mix", "disk_zz"]).err().unwrap();
        assert!(err.contains("unknown AIM7 disk subtest"), "{err}");
        let err = config_of(&["--mix", "disk_rr=0"]).unwrap_err();
        assert!(err.starts_with("--mix: disk_rr: weight 0"), "{err}");
        let err = config_of(&["--tasks", "4,2"]).unwrap_err();
        assert!(
            err.starts_with("--tasks: task counts must increase"),
            "{err}"
        );
        let err = config_of(&["--tasks", "0"]).unwrap_err();
        assert!(err.starts_with("--tasks: "), "{err}");
        let err = config_of(&["--filesize", "1500"]).unwrap_err();
        assert!(err.contains("not a whole number of KiB"), "{err}");
        let err = config_of(&["--filesize", "1K"]).unwrap_err();
        assert!(
            err.starts_with("--filesize/--poolsize: the file size"),
            "{err}"
        );
        let err = config_of(&["--jobs-per-task", "0"]).unwrap_err();
        assert!(err.starts_with("--jobs-per-task: "), "{err}");
        let err = config_of(&["--period", "0"]).unwrap_err();
        assert!(err.starts_with("--period: "), "{err}");
    }

    #[test]
    fn the_image_holds_every_tasks_file() {
        let c = config_of(&["--tasks", "1,64", "--filesize", "4M"]).unwrap();
        assert!(image(&c).bytes >= 129 * (4 << 20), "{}", image(&c).bytes);
    }
}
