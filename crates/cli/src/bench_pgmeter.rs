//! `nvmfs bench pgmeter`: an Iometer access specification against preallocated test files,
//! one test per number of outstanding I/Os, on each target.

use std::io;

use clap::builder::PossibleValuesParser;
use nvmfs_lab::filebench::LabTarget;
use nvmfs_lab::kernel;
use nvmfs_lab::pgmeter::{self, AccessSpec, PgmeterConfig, PgmeterResult, Progress, PRESETS};
use nvmfs_lab::study::targets::{StudyTarget, TargetVisitor};
use nvmfs_lab::targets::api::MicroFs;

use crate::bench_lab::{self, Record, TargetArgs};
use crate::size::{format_size, parse_size};

/// Seed 001's outstanding I/O counts.
const OUTSTANDING: [usize; 4] = [1, 4, 16, 64];
const SPEC: &str = "file-server";
/// Seed 001's record size of the sequential tests on its small system.
const RECORD: u64 = 8 << 10;
const FILES: usize = 1;
const FILE_SIZE: u64 = 1 << 30;
const WARMUP: f64 = 2.0;
const SECONDS: f64 = 10.0;
const INTERVAL: f64 = 1.0;
const SEED: u64 = 1;

#[derive(clap::Args, Debug)]
#[command(
    about = "pgmeter: an Iometer access specification at several outstanding I/O counts",
    long_about = "Runs pgmeter, seed 001's file-I/O benchmark patterned after Intel's Iometer, on \
        each target in turn: --files test files of --file-size are preallocated (written in \
        full and synced) on the fresh target, then for each --outstanding count one test: the \
        file system remounted (nvmfs and the kernel variants; tmpfs and dir: targets cannot \
        be), a --warmup not recorded, then --seconds measured. The tests of a target share its \
        files, as pgmeter's test cases do.\n\n\
        An I/O draws a line of the access specification by its share, then read or write by \
        the line's read %, then random or sequential by its random %; random offsets are \
        uniform among aligned ones, sequential ones continue the stream. Each outstanding I/O \
        is a thread with its own handle issuing one synchronous I/O at a time (nvmfs has no \
        asynchronous interface), so a file has N I/Os in flight whenever its threads are all \
        in a call; with a sequential specification each is its own stream.\n\n\
        --spec picks Iometer's specification as seed 001 gives it: file-server (512 B to 64 KiB, \
        80% reads, all random), web-server (512 B to 512 KiB, all reads, all random), oltp-8k \
        (8 KiB, 67% reads, all random), seq-read or seq-write (--record-size records). \
        --spec-line gives one line of a custom specification (repeat it; the shares must add \
        up to 100): SIZE:ACCESS%:READ%:RANDOM%[:ALIGN], sizes in bytes or with K or M, ALIGN \
        512 unless given.\n\n\
        stdout gets a row per outstanding count and target: ops/s with its 95% interval over \
        the --interval statistics (how seed 001 computed pgmeter's intervals), MB/s (2^20) and \
        the I/O latency's p50 and p99. Progress goes to stderr; --json FILE gets everything: \
        reads and writes, latency percentiles of reads and writes, per line and per file \
        counts, every interval.",
    after_help = "Defaults: seed 001's small system (one 1 GiB file, 1, 4, 16 and 64 outstanding \
        I/Os), with shorter times than its 30 s warm-up, 5 minutes measured and 10 s intervals \
        (given in the last example).\n\n\
        Targets: nvmfs (the library in-process on a fresh image in --shm-dir), tmpfs (a fresh \
        directory in --shm-dir, through system calls), dir:PATH (a fresh subdirectory of PATH), \
        or a kernel variant of `nvmfs study` made fresh on a RAM-backed loop device (ext2, \
        ext3, ext3-writeback, ext3-journal, ext4, ext4-nodelalloc, xfs, xfs-ag, btrfs; needs \
        root). Default: nvmfs and tmpfs.\n\n\
        Exit status: 0 on success, 1 when a test failed or no target could run, 2 on bad input, \
        130 when interrupted.\n\n\
        Examples:\n  nvmfs bench pgmeter\n  \
        nvmfs bench pgmeter --spec oltp-8k --outstanding 1,16 -t nvmfs -t ext4\n  \
        nvmfs bench pgmeter --spec seq-read --record-size 64K --files 4 --file-size 2G\n  \
        nvmfs bench pgmeter --spec-line 4K:70:100:100 --spec-line 64K:30:0:0:64K --json pg.json\n  \
        nvmfs bench pgmeter --warmup 30 --seconds 300 --interval 10"
)]
pub struct Args {
    #[arg(long, value_name = "NAME", conflicts_with = "spec_line",
        value_parser = PossibleValuesParser::new(PRESETS),
        help = format!("Iometer's access specification [default: {SPEC}]"))]
    spec: Option<String>,
    /// One line of a custom access specification, SIZE:ACCESS%:READ%:RANDOM%[:ALIGN]
    /// (repeat for several)
    #[arg(long, value_name = "LINE")]
    spec_line: Vec<String>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = format!(
        "Record size of seq-read and seq-write [default: {}]", format_size(RECORD)))]
    record_size: Option<u64>,
    /// Outstanding I/Os per file, one test each, as a list (1,4,16) or repeated
    /// [default: 1,4,16,64]
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    outstanding: Vec<usize>,
    #[arg(long, value_name = "N", help = format!("Test files [default: {FILES}]"))]
    files: Option<usize>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = format!(
        "Size of each test file [default: {}]", format_size(FILE_SIZE)))]
    file_size: Option<u64>,
    #[arg(long, value_name = "S", help = format!(
        "Warm-up seconds of each test, not recorded [default: {WARMUP}]"))]
    warmup: Option<f64>,
    #[arg(long, value_name = "S", help = format!(
        "Measured seconds of each test [default: {SECONDS}]"))]
    seconds: Option<f64>,
    #[arg(long, value_name = "S", help = format!(
        "Length of pgmeter's interval statistics [default: {INTERVAL}]"))]
    interval: Option<f64>,
    /// Also end each test after N I/Os (all threads together), whichever comes first
    #[arg(long, value_name = "N")]
    ops: Option<u64>,
    #[arg(long, value_name = "N", help = format!(
        "Seed of the draws (the same on every target) [default: {SEED}]"))]
    seed: Option<u64>,
    #[command(flatten)]
    targets: TargetArgs,
}

/// The access specification the flags name, checked.
fn spec(args: &Args) -> Result<AccessSpec, String> {
    if !args.spec_line.is_empty() {
        if args.record_size.is_some() {
            return Err("--record-size applies to --spec seq-read and seq-write only".into());
        }
        return AccessSpec::parse("custom", &args.spec_line.join(","))
            .map_err(|e| format!("--spec-line: {e}"));
    }
    let name = args.spec.as_deref().unwrap_or(SPEC);
    if args.record_size.is_some() && !name.starts_with("seq-") {
        return Err(format!(
            "--record-size applies to --spec seq-read and seq-write only, not {name}"
        ));
    }
    let spec = AccessSpec::preset(name, args.record_size.unwrap_or(RECORD))?;
    spec.validate().map_err(|e| format!("--record-size: {e}"))?;
    Ok(spec)
}

/// One configuration per outstanding count, each checked.
fn configs(args: &Args) -> Result<Vec<PgmeterConfig>, String> {
    let spec = spec(args)?;
    let counts = bench_lab::counts(&args.outstanding, &OUTSTANDING, "--outstanding")?;
    let base = PgmeterConfig {
        spec,
        files: args.files.unwrap_or(FILES),
        file_size_bytes: args.file_size.unwrap_or(FILE_SIZE),
        outstanding: counts[0],
        warmup_seconds: args.warmup.unwrap_or(WARMUP),
        run_seconds: args.seconds.unwrap_or(SECONDS),
        ops_max: args.ops,
        interval_seconds: args.interval.unwrap_or(INTERVAL),
        seed: args.seed.unwrap_or(SEED),
    };
    counts
        .into_iter()
        .map(|outstanding| {
            let c = PgmeterConfig {
                outstanding,
                ..base.clone()
            };
            c.validate().map_err(|e| flag_error(&e))?;
            Ok(c)
        })
        .collect()
}

/// The lab's message with the flag it is about.
fn flag_error(e: &str) -> String {
    let flags = [
        ("files must", "--files"),
        ("outstanding", "--outstanding"),
        ("files x outstanding", "--files/--outstanding"),
        ("file size", "--file-size"),
        ("an op limit", "--ops"),
        ("warm-up", "--warmup"),
        ("run seconds", "--seconds"),
        ("interval seconds", "--interval"),
    ];
    match flags.iter().rev().find(|(key, _)| e.starts_with(key)) {
        Some((_, flag)) => format!("{flag}: {e}"),
        None => e.to_string(),
    }
}

/// One test on a target, through [`TargetVisitor`].
struct RunPgmeter<'a>(&'a PgmeterConfig);

impl TargetVisitor for RunPgmeter<'_> {
    type Output = io::Result<PgmeterResult>;

    fn visit<T: LabTarget>(self, target: &mut T) -> Self::Output
    where
        <T::Fs as MicroFs>::Name: Send + Sync,
        <T::Fs as MicroFs>::File: Send,
    {
        let mut progress = |p: Progress<'_>| {
            if let Progress::Setup(msg) = p {
                eprintln!("  {msg}");
            }
        };
        pgmeter::run(target, self.0, &kernel::interrupted, &mut progress)
    }
}

pub fn run(args: &Args) -> u8 {
    let prepared = configs(args).and_then(|cfgs| {
        let c = &cfgs[0];
        let data = (c.files as u64).saturating_mul(c.file_size_bytes);
        let image = bench_lab::image_for(data, c.files as u64 + 1);
        let (bench, wanted) = args.targets.resolve("pgmeter", image)?;
        Ok((cfgs, bench, wanted))
    });
    let (cfgs, bench, wanted) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nvmfs bench pgmeter: {e}");
            return 2;
        }
    };
    describe(&cfgs);
    let json = args.targets.json.as_ref();
    if let Err(code) = bench_lab::begin("pgmeter", json, Some(&header())) {
        return code;
    }
    // Every outstanding count on one target, as the study runs them.
    let jobs = [bench_lab::Job {
        label: format!("pgmeter {}", cfgs[0].spec.name),
        cases: &cfgs[..],
    }];
    let mut run_one = |t: &mut StudyTarget, c: &PgmeterConfig| {
        let r = t.visit(RunPgmeter(c));
        if let Ok(r) = &r {
            eprintln!(
                "  {} outstanding: {:.0} ops/s, {:.1} MB/s",
                r.outstanding, r.ops_per_sec, r.mb_per_sec
            );
        }
        r
    };
    let stopped = |r: &PgmeterResult| r.stopped_early.clone();
    let rows = |r: &Record<PgmeterResult>, c: &PgmeterConfig| format_row(r, c.outstanding);
    let records = match bench_lab::run_jobs(&bench, &wanted, &jobs, &mut run_one, &stopped, &rows) {
        Ok(r) => r,
        Err(code) => return code,
    };
    bench_lab::finish(
        "pgmeter",
        "nvmfs-lab/bench-pgmeter/v1",
        args.targets.json.as_ref(),
        &json_config(&cfgs),
        &records,
    )
}

/// The configuration for the JSON file: the outstanding counts in place of the first one.
fn json_config(cfgs: &[PgmeterConfig]) -> serde_json::Value {
    let mut v = serde_json::to_value(&cfgs[0]).expect("serialisable");
    if let Some(o) = v.as_object_mut() {
        o.remove("outstanding");
        let counts: Vec<usize> = cfgs.iter().map(|c| c.outstanding).collect();
        o.insert("outstanding_counts".into(), counts.into());
    }
    v
}

/// The run's settings on stderr, so that a saved table says what it measured.
fn describe(cfgs: &[PgmeterConfig]) {
    let c = &cfgs[0];
    let lines: Vec<String> = c
        .spec
        .lines
        .iter()
        .map(|l| {
            format!(
                "{}:{}:{}:{}:{}",
                format_size(l.transfer_bytes),
                l.access_percent,
                l.read_percent,
                l.random_percent,
                format_size(l.align_bytes)
            )
        })
        .collect();
    let counts: Vec<String> = cfgs.iter().map(|c| c.outstanding.to_string()).collect();
    let limit = c
        .ops_max
        .map(|n| format!(" or {n} I/Os"))
        .unwrap_or_default();
    eprintln!(
        "pgmeter {} ({}): {} file(s) of {}, outstanding {}; {} s warm-up + {} s{limit}, {} s \
         intervals, seed {}",
        c.spec.name,
        lines.join(", "),
        c.files,
        format_size(c.file_size_bytes),
        counts.join(","),
        c.warmup_seconds,
        c.run_seconds,
        c.interval_seconds,
        c.seed
    );
}

fn header() -> String {
    format!(
        "{:<16} {:>11} {:>12} {:>10} {:>10} {:>10} {:>10}  {}\n",
        "target", "outstanding", "ops/s", "± 95% CI", "MB/s", "p50 µs", "p99 µs", "status"
    )
}

/// One row: ops/s (the interval statistics' interval), MB/s, latency p50 and p99.
fn format_row(r: &Record<PgmeterResult>, outstanding: usize) -> String {
    let dash = || "-".to_string();
    let (ops, ci, mb, p50, p99) = match &r.result {
        Some(p) => {
            let ci = bench_lab::summary_cells(p.interval_ops_per_sec.as_ref()).1;
            let us = |ns: u64| format!("{:.1}", ns as f64 / 1e3);
            (
                format!("{:.1}", p.ops_per_sec),
                ci,
                format!("{:.1}", p.mb_per_sec),
                us(p.latency_ns.p50),
                us(p.latency_ns.p99),
            )
        }
        None => (dash(), dash(), dash(), dash(), dash()),
    };
    format!(
        "{:<16} {:>11} {:>12} {:>10} {:>10} {:>10} {:>10}  {}\n",
        r.target, outstanding, ops, ci, mb, p50, p99, r.status
    )
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

    fn configs_of(argv: &[&str]) -> Result<Vec<PgmeterConfig>, String> {
        configs(&parse(argv)?)
    }

    #[test]
    fn defaults_are_seed_001s_small_system_with_short_times() {
        let c = configs_of(&[]).unwrap();
        let counts: Vec<usize> = c.iter().map(|c| c.outstanding).collect();
        assert_eq!(counts, [1, 4, 16, 64]);
        assert_eq!(c[0].spec, AccessSpec::file_server());
        assert_eq!((c[0].files, c[0].file_size_bytes), (1, 1 << 30));
        assert_eq!(
            (c[0].warmup_seconds, c[0].run_seconds, c[0].interval_seconds),
            (2.0, 10.0, 1.0)
        );
        assert_eq!((c[0].ops_max, c[0].seed), (None, 1));
    }

    #[test]
    fn flags_set_the_spec_and_the_test() {
        let c = configs_of(&[
            "--spec",
            "seq-write",
            "--record-size",
            "64K",
            "--outstanding",
            "2,8",
            "--files",
            "3",
            "--file-size",
            "1M",
            "--warmup",
            "0",
            "--seconds",
            "0.5",
            "--interval",
            "0.1",
            "--ops",
            "1000",
            "--seed",
            "9",
        ])
        .unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].outstanding, 8);
        assert_eq!(c[0].spec, AccessSpec::sequential_write(64 << 10));
        assert_eq!((c[0].files, c[0].file_size_bytes), (3, 1 << 20));
        assert_eq!((c[0].run_seconds, c[0].interval_seconds), (0.5, 0.1));
        assert_eq!((c[0].ops_max, c[0].seed), (Some(1000), 9));
        let c = configs_of(&[
            "--spec-line",
            "4K:70:100:100",
            "--spec-line",
            "64K:30:0:0:64K",
            "--outstanding",
            "1",
        ])
        .unwrap();
        let s = &c[0].spec;
        assert_eq!((s.name.as_str(), s.lines.len()), ("custom", 2));
        assert_eq!(
            (s.lines[1].transfer_bytes, s.lines[1].align_bytes),
            (65536, 65536)
        );
        assert_eq!(s.lines[0].align_bytes, 512);
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let err = parse(&["--spec", "mail-server"]).err().unwrap();
        assert!(err.contains("possible values"), "{err}");
        let err = parse(&["--spec", "oltp-8k", "--spec-line", "4K:100:0:0"])
            .err()
            .unwrap();
        assert!(err.contains("cannot be used with"), "{err}");
        let err = configs_of(&["--spec-line", "4K:60:100:100"]).unwrap_err();
        assert!(err.contains("add up to 60, not 100"), "{err}");
        let err = configs_of(&["--spec-line", "4K:100:100"]).unwrap_err();
        assert!(err.contains("SIZE:ACCESS%:READ%:RANDOM%"), "{err}");
        let err = configs_of(&["--spec", "oltp-8k", "--record-size", "4K"]).unwrap_err();
        assert!(err.contains("--record-size applies"), "{err}");
        let err = configs_of(&["--spec", "seq-read", "--record-size", "0"]).unwrap_err();
        assert!(
            err.contains("--record-size") && err.contains("transfer size 0"),
            "{err}"
        );
        let err = configs_of(&["--outstanding", "1,0"]).unwrap_err();
        assert!(err.contains("--outstanding"), "{err}");
        let err = configs_of(&["--outstanding", "2000"]).unwrap_err();
        assert!(
            err.contains("--outstanding: outstanding I/Os per file must be"),
            "{err}"
        );
        let err = configs_of(&["--files", "0"]).unwrap_err();
        assert!(err.starts_with("--files: "), "{err}");
        let err = configs_of(&["--file-size", "4K"]).unwrap_err();
        assert!(
            err.starts_with("--file-size: file size 4096 is smaller"),
            "{err}"
        );
        let err = configs_of(&["--seconds", "0"]).unwrap_err();
        assert!(err.starts_with("--seconds: "), "{err}");
        let err = configs_of(&["--warmup", "-1"]).err().unwrap();
        assert!(err.contains("-1"), "{err}");
        let err = configs_of(&["--interval", "inf"]).unwrap_err();
        assert!(err.starts_with("--interval: "), "{err}");
        let err = configs_of(&["--ops", "0"]).unwrap_err();
        assert!(err.starts_with("--ops: "), "{err}");
    }

    #[test]
    fn the_json_config_lists_the_outstanding_counts() {
        let c = configs_of(&["--outstanding", "1,4"]).unwrap();
        let v = json_config(&c);
        assert_eq!(v["outstanding_counts"], serde_json::json!([1, 4]));
        assert_eq!(v["spec"]["name"], "file-server");
        assert!(v.get("outstanding").is_none());
    }
}
