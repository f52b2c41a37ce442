//! `nvmfs bench postmark`: one Postmark 1.51 run per target, every parameter a flag or
//! read from Postmark's own command file, printing Postmark's report.

use std::io;
use std::path::PathBuf;

use nvmfs_lab::filebench::LabTarget;
use nvmfs_lab::kernel;
use nvmfs_lab::postmark::config::{parse_bias, parse_buffering, parse_report};
use nvmfs_lab::postmark::{
    self, format_report, parse_command_file, PostmarkConfig, PostmarkResult, ReportFormat,
};
use nvmfs_lab::study::targets::{ImageSpec, TargetVisitor};
use nvmfs_lab::targets::api::MicroFs;
use serde::Serialize;

use crate::bench_lab::{self, Record, TargetArgs};
use crate::size::{format_size, parse_size};

#[derive(clap::Args, Debug)]
#[command(
    about = "Postmark 1.51 on nvmfs and kernel file systems, every parameter a flag",
    long_about = "Runs Postmark 1.51 (Katcher 1997) once on each target in turn, the target made \
        fresh: --number files of --size-low..--size-high bytes are created (in --subdirectories \
        subdirectories when more than one), then --transactions transactions each read or \
        append a file (--bias-read) and create or delete one (--bias-create), then every file \
        is deleted. The same --seed gives the same files, sizes and operations as the real \
        program, on every target. Postmark has no warm-up and no trials: one run per target.\n\n\
        --config FILE reads Postmark's own command file (set number 1000, set size 500 10000, \
        set location ..., run, quit); flags given on the command line override its settings. \
        The file may hold one `run` (its settings are used) or none (the settings at its end \
        are). One location is the target itself; several become directories under the \
        target's root.\n\n\
        stdout gets, per target, Postmark's report (--report verbose or terse) from our clock: \
        seconds to the millisecond and rates as decimals where Postmark prints whole seconds \
        and integers. Progress goes to stderr; --json FILE gets everything, the counts, phase \
        times, rates and each transaction's latency percentiles included.",
    after_help = "Targets: nvmfs (the library in-process on a fresh image in --shm-dir), tmpfs (a \
        fresh directory in --shm-dir, through system calls), dir:PATH (a fresh subdirectory of \
        PATH), or a kernel variant of `nvmfs study` made fresh on a RAM-backed loop device \
        (ext2, ext3, ext3-writeback, ext3-journal, ext4, ext4-nodelalloc, xfs, xfs-ag, btrfs; \
        needs root). Default: nvmfs and tmpfs.\n\n\
        Exit status: 0 on success (also when a run ran out of files, which Postmark reports \
        as \"out of files!\"), 1 when a run failed or no target could run, 2 on bad input, 130 \
        when interrupted.\n\n\
        Examples:\n  nvmfs bench postmark\n  \
        nvmfs bench postmark --number 10000 --transactions 50000 --subdirectories 10 -t nvmfs -t ext4\n  \
        nvmfs bench postmark --config pm.cfg --seed 7 --report terse\n  \
        nvmfs bench postmark --buffering false --bias-read -1 --json pm.json"
)]
pub struct Args {
    /// Postmark's command file (the lines of `postmark FILE`); flags override its settings
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    params: PostmarkArgs,
    #[command(flatten)]
    targets: TargetArgs,
}

/// Postmark's parameters, each named after its `set` command.
#[derive(clap::Args, Debug)]
struct PostmarkArgs {
    #[arg(long, value_name = "N", help = default_of(
        "Files created before the transactions (set number)", |c| c.number.to_string()))]
    number: Option<u32>,
    #[arg(long, value_name = "N", help = default_of(
        "Transactions (set transactions)", |c| c.transactions.to_string()))]
    transactions: Option<u32>,
    #[arg(long, value_name = "SIZE", value_parser = file_bytes, help = default_of(
        "Smallest file created (set size LOW HIGH)", |c| c.size_low.to_string()))]
    size_low: Option<u32>,
    #[arg(long, value_name = "SIZE", value_parser = file_bytes, help = default_of(
        "Files are created below this size and appends grow them up to it (set size LOW HIGH)",
        |c| c.size_high.to_string()))]
    size_high: Option<u32>,
    #[arg(long, value_name = "N", help = default_of(
        "Subdirectories the files are spread over; 0 and 1 mean none (set subdirectories)",
        |c| c.subdirectories.to_string()))]
    subdirectories: Option<u32>,
    #[arg(long, value_name = "SIZE", value_parser = file_bytes, help = default_of(
        "Bytes per read call (set read)", |c| c.read_block_size.to_string()))]
    read_block: Option<u32>,
    #[arg(long, value_name = "SIZE", value_parser = file_bytes, help = default_of(
        "Bytes per write call (set write)", |c| c.write_block_size.to_string()))]
    write_block: Option<u32>,
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set, value_parser = parse_buffering,
        help = default_of("true: stdio streams (fopen, fread, fwrite; emulated), false: open, \
        read, write (set buffering)", |c| c.buffering.to_string()))]
    buffering: Option<bool>,
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = bias, help = default_of(
        "Chance in tenths (0..10) of a read rather than an append; -1 leaves both out \
        (set bias read)", |c| bias_text(c.bias_read)))]
    bias_read: Option<Bias>,
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = bias, help = default_of(
        "Chance in tenths (0..10) of a create rather than a delete; -1 leaves both out \
        (set bias create)", |c| bias_text(c.bias_create)))]
    bias_create: Option<Bias>,
    #[arg(long, value_name = "N", help = default_of(
        "Seed of Postmark's generator (set seed)", |c| c.seed.to_string()))]
    seed: Option<u32>,
    #[arg(long, value_name = "FORMAT", value_parser = parse_report, help = default_of(
        "Report printed: verbose or terse, one line of 13 numbers (set report)",
        |c| report_name(c.report).into()))]
    report: Option<ReportFormat>,
}

/// A bias as `set bias` takes it: `None` is -1.
#[derive(Debug, Clone, Copy)]
struct Bias(Option<u32>);

fn bias(text: &str) -> Result<Bias, String> {
    parse_bias(text).map(Bias)
}

fn bias_text(b: Option<u32>) -> String {
    b.map_or("-1".into(), |v| v.to_string())
}

fn report_name(r: ReportFormat) -> &'static str {
    match r {
        ReportFormat::Verbose => "verbose",
        ReportFormat::Terse => "terse",
    }
}

/// A byte count that fits Postmark's `int` sizes.
pub fn file_bytes(text: &str) -> Result<u32, String> {
    let b = parse_size(text)?;
    u32::try_from(b).map_err(|_| format!("{text}: too large (at most {} bytes)", u32::MAX))
}

fn default_of(text: &str, value: impl Fn(&PostmarkConfig) -> String) -> String {
    format!("{text} [default: {}]", value(&PostmarkConfig::default()))
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

impl PostmarkArgs {
    /// `c` with the given flags applied.
    fn apply(&self, c: &mut PostmarkConfig) {
        set(&mut c.number, self.number);
        set(&mut c.transactions, self.transactions);
        set(&mut c.size_low, self.size_low);
        set(&mut c.size_high, self.size_high);
        set(&mut c.subdirectories, self.subdirectories);
        set(&mut c.read_block_size, self.read_block);
        set(&mut c.write_block_size, self.write_block);
        set(&mut c.buffering, self.buffering);
        set(&mut c.bias_read, self.bias_read.map(|b| b.0));
        set(&mut c.bias_create, self.bias_create.map(|b| b.0));
        set(&mut c.seed, self.seed);
        set(&mut c.report, self.report);
    }
}

/// The configuration: Postmark's defaults, or the command file's, with the flags applied,
/// checked.
fn config(args: &Args) -> Result<PostmarkConfig, String> {
    let mut c = match &args.config {
        Some(path) => from_file(path)?,
        None => PostmarkConfig::default(),
    };
    args.params.apply(&mut c);
    c.validate()?;
    Ok(c)
}

/// The settings of a command file's one `run`, or its settings at the end when it has none.
fn from_file(path: &std::path::Path) -> Result<PostmarkConfig, String> {
    let name = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--config {name}: {e}"))?;
    let file = parse_command_file(&text).map_err(|e| format!("--config {name}: {e}"))?;
    match file.runs.len() {
        0 => Ok(file.config),
        1 => Ok(file.runs[0].clone()),
        n => Err(format!(
            "--config {name}: {n} `run` lines; this command runs one configuration per target \
             (split the file, one run each)"
        )),
    }
}

/// An image for the file table's worst case: every slot (twice the files) holding a file of
/// the largest size.
fn image(c: &PostmarkConfig) -> ImageSpec {
    let slots = 2 * u64::from(c.number);
    let file = u64::from(c.size_high).div_ceil(4096) * 4096;
    let dirs = u64::from(c.subdirectories + 1) * (c.locations.len() as u64 + 1);
    bench_lab::image_for(slots.saturating_mul(file), slots + dirs)
}

/// The configuration, for the JSON file.
#[derive(Serialize)]
struct Config<'a> {
    /// The command file read, if any.
    config_file: Option<&'a PathBuf>,
    #[serde(flatten)]
    postmark: &'a PostmarkConfig,
}

/// One Postmark run on a target, through [`TargetVisitor`].
struct RunPostmark<'a>(&'a PostmarkConfig);

impl TargetVisitor for RunPostmark<'_> {
    type Output = io::Result<PostmarkResult>;

    fn visit<T: LabTarget>(self, target: &mut T) -> Self::Output
    where
        <T::Fs as MicroFs>::Name: Send + Sync,
        <T::Fs as MicroFs>::File: Send,
    {
        postmark::make_locations(target.fs(), self.0)?;
        postmark::run(target.fs(), self.0, &kernel::interrupted)
    }
}

pub fn run(args: &Args) -> u8 {
    let prepared = config(args).and_then(|c| {
        let (bench, wanted) = args.targets.resolve("postmark", image(&c))?;
        Ok((c, bench, wanted))
    });
    let (cfg, bench, wanted) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nvmfs bench postmark: {e}");
            return 2;
        }
    };
    let json = args.targets.json.as_ref();
    if let Err(code) = bench_lab::begin("postmark", json, None) {
        return code;
    }
    describe(&cfg);
    let jobs = [bench_lab::Job {
        label: "postmark".into(),
        cases: std::slice::from_ref(&cfg),
    }];
    let mut run_one = |t: &mut nvmfs_lab::study::targets::StudyTarget, c: &PostmarkConfig| {
        t.visit(RunPostmark(c))
    };
    let out_of_files = |r: &PostmarkResult| r.out_of_files.then(|| "out of files".into());
    let rows = |r: &Record<PostmarkResult>, c: &PostmarkConfig| format_record(r, c.report);
    let records =
        match bench_lab::run_jobs(&bench, &wanted, &jobs, &mut run_one, &out_of_files, &rows) {
            Ok(r) => r,
            Err(code) => return code,
        };
    let config = Config {
        config_file: args.config.as_ref(),
        postmark: &cfg,
    };
    bench_lab::finish(
        "postmark",
        "nvmfs-lab/bench-postmark/v1",
        args.targets.json.as_ref(),
        &config,
        &records,
    )
}

/// The run's settings on stderr, so that a saved report says what it measured.
fn describe(c: &PostmarkConfig) {
    let subdirs = match c.subdirectories {
        0 | 1 => "no subdirectories".to_string(),
        n => format!("{n} subdirectories"),
    };
    let locations = match c.locations.len() {
        0 | 1 => String::new(),
        n => format!(", {n} locations"),
    };
    eprintln!(
        "postmark: {} files of {}..{} bytes, {} transactions, {subdirs}{locations}, read/write \
         blocks {}/{}, {}, bias read {} create {}, seed {}",
        c.number,
        c.size_low,
        c.size_high,
        c.transactions,
        format_size(u64::from(c.read_block_size)),
        format_size(u64::from(c.write_block_size)),
        if c.buffering {
            "buffered"
        } else {
            "unbuffered"
        },
        bias_text(c.bias_read),
        bias_text(c.bias_create),
        c.seed
    );
}

/// `== postmark on T: status` and Postmark's report.
fn format_record(r: &Record<PostmarkResult>, report: ReportFormat) -> String {
    let mut s = format!("== postmark on {}: {}\n", r.target, r.status);
    if let Some(result) = &r.result {
        s += &format_report(result, report);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

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

    fn config_of(argv: &[&str]) -> Result<PostmarkConfig, String> {
        config(&parse(argv)?)
    }

    #[test]
    fn defaults_are_postmarks() {
        assert_eq!(config_of(&[]).unwrap(), PostmarkConfig::default());
    }

    #[test]
    fn every_parameter_is_a_flag() {
        let c = config_of(&[
            "--number",
            "100",
            "--transactions",
            "7",
            "--size-low",
            "1K",
            "--size-high",
            "4096",
            "--subdirectories",
            "3",
            "--read-block",
            "100",
            "--write-block",
            "200",
            "--buffering",
            "false",
            "--bias-read",
            "-1",
            "--bias-create",
            "10",
            "--seed",
            "9",
            "--report",
            "terse",
        ])
        .unwrap();
        let want = PostmarkConfig {
            number: 100,
            transactions: 7,
            size_low: 1024,
            size_high: 4096,
            subdirectories: 3,
            read_block_size: 100,
            write_block_size: 200,
            buffering: false,
            bias_read: None,
            bias_create: Some(10),
            seed: 9,
            locations: Vec::new(),
            report: ReportFormat::Terse,
        };
        assert_eq!(c, want);
    }

    #[test]
    fn flags_override_the_command_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pm.cfg");
        std::fs::write(
            &file,
            "set number 50\nset seed 3\nset location +a\nset location +b 2\nrun\nquit\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let c = config_of(&["--config", path, "--seed", "11"]).unwrap();
        assert_eq!((c.number, c.seed, c.locations.len()), (50, 11, 2));
        // A file without `run`: its settings at the end.
        std::fs::write(&file, "set transactions 20\n").unwrap();
        assert_eq!(config_of(&["--config", path]).unwrap().transactions, 20);
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let err = parse(&["--bias-read", "11"]).err().unwrap();
        assert!(err.contains("0..10"), "{err}");
        let err = parse(&["--buffering", "yes"]).err().unwrap();
        assert!(err.contains("true or false"), "{err}");
        let err = parse(&["--report", "short"]).err().unwrap();
        assert!(err.contains("verbose or terse"), "{err}");
        let err = parse(&["--size-high", "5G"]).err().unwrap();
        assert!(err.contains("too large"), "{err}");
        let err = config_of(&["--number", "0"]).unwrap_err();
        assert!(err.contains("number (files) must be 1..="), "{err}");
        let err = config_of(&["--size-low", "2000", "--size-high", "1000"]).unwrap_err();
        assert!(err.contains("size high must be 2000..="), "{err}");
        let err = config_of(&["--config", "/nonexistent/pm.cfg"]).unwrap_err();
        assert!(err.contains("/nonexistent/pm.cfg"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pm.cfg");
        std::fs::write(&file, "set number 10\nset size 5 x\n").unwrap();
        let err = config_of(&["--config", file.to_str().unwrap()]).unwrap_err();
        assert!(err.contains("line 2") && err.contains("'x'"), "{err}");
        std::fs::write(&file, "run\nset seed 2\nrun\n").unwrap();
        let err = config_of(&["--config", file.to_str().unwrap()]).unwrap_err();
        assert!(err.contains("2 `run` lines"), "{err}");
    }

    #[test]
    fn the_image_holds_a_full_file_table() {
        let c = PostmarkConfig::default();
        let i = image(&c);
        // 1000 slots of 12 KiB, plus room.
        assert!(i.bytes >= 1000 * 12 * 1024 + (256 << 20), "{}", i.bytes);
        assert!(i.inodes >= 1000);
    }
}
