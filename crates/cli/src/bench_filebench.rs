//! `nvmfs bench filebench`: one filebench personality, every parameter a flag, on one or more
//! targets, with the lab's run rules (warm-up, several trials, the first discarded, 95%
//! intervals).

use std::path::{Path, PathBuf};

use clap::builder::PossibleValuesParser;
use nvmfs_lab::filebench::stats::format_filebench_trials;
use nvmfs_lab::filebench::{
    OltpConfig, Personality, PersonalityConfig, Progress, RunConfig, RunResult, SizeDist,
};
use nvmfs_lab::kernel;
use nvmfs_lab::study::targets::{self, StudyTarget};
use serde::Serialize;

use crate::bench_targets::{resolve_targets, Wanted};
use crate::output;
use crate::size::{format_size, parse_size};

const TRIALS: usize = 3;
const SECONDS: f64 = 5.0;
const WARMUP: f64 = 1.0;
const SEED: u64 = 1;

#[derive(clap::Args, Debug)]
#[command(
    about = "One filebench personality on nvmfs and kernel file systems, every parameter a flag",
    long_about = "Runs one filebench 1.5 personality (fileserver, webproxy, webserver, varmail, \
        oltp) on each target in turn, with the lab's run rules: the filesets are populated and \
        preallocated once per target, then --trials trials, each a --warmup not recorded and \
        --seconds measured (or --ops ops), the file system remounted before each (nvmfs and the \
        kernel variants; tmpfs and dir: targets cannot be). The first of several trials is \
        discarded; while the kept trials' 95% interval is wider than 10% of their mean, up to \
        --extra-trials more follow (seed 001's rule).\n\n\
        Every parameter of the personality's .f file is a flag; a flag left out keeps the \
        personality's default (listed per personality in each flag's help).\n\n\
        stdout gets, per target, filebench's per-flowop table and IO Summary over the kept \
        trials and their mean ops/s with its 95% interval; progress goes to stderr; --json FILE \
        gets everything, every trial's flowops included.",
    after_help = "Targets: nvmfs (the library in-process on a fresh image in --shm-dir), tmpfs (a \
        fresh directory in --shm-dir, through system calls), dir:PATH (a fresh subdirectory of \
        PATH), or a kernel variant of `nvmfs study` made fresh on a RAM-backed loop device \
        (ext2, ext3, ext3-writeback, ext3-journal, ext4, ext4-nodelalloc, xfs, xfs-ag, btrfs; \
        needs root). Default: nvmfs and tmpfs.\n\n\
        Exit status: 0 on success, 1 when a run failed or no target could run, 2 on bad input, \
        130 when interrupted.\n\n\
        Examples:\n  nvmfs bench filebench -p varmail\n  \
        nvmfs bench filebench -p oltp --threads 20 --ndbwriters 2 -t nvmfs -t ext4 --seconds 10\n  \
        nvmfs bench filebench -p fileserver --nfiles 2000 --dirwidth 20 --json fs.json"
)]
pub struct Args {
    /// The personality (workloads/<name>.f)
    #[arg(short, long, value_name = "NAME",
        value_parser = PossibleValuesParser::new(Personality::ALL.map(Personality::name)))]
    personality: String,
    /// Where to run, in order (repeat for several): nvmfs, tmpfs, dir:PATH or a kernel variant
    /// [default: nvmfs, tmpfs]
    #[arg(short, long = "target", value_name = "T")]
    targets: Vec<String>,
    #[arg(long, value_name = "N", help = per_personality("Files in the main fileset (nfiles)", |c| c.files.to_string()))]
    nfiles: Option<usize>,
    #[arg(long, value_name = "W", help = per_personality("Mean directory width (dirwidth / meandirwidth)", |c| c.dir_width.to_string()))]
    dirwidth: Option<f64>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = per_personality(
        "Mean file size of the main fileset (filesize / meanfilesize)", |c| format_size(c.mean_file_size_bytes)))]
    filesize: Option<u64>,
    #[arg(long, value_name = "D", value_parser = ["gamma", "exact"], help = per_personality(
        "File sizes: gamma (Gamma(sizegamma) around the mean, filebench before 1.5) or exact \
        (every file the mean, 1.5's plain size=)", |c| size_dist_name(c.size_dist).into()))]
    size_dist: Option<String>,
    #[arg(long, value_name = "N", help = per_personality(
        "Threads (nthreads; oltp: nshadows, the shadow readers)", |c| c.threads.to_string()))]
    threads: Option<usize>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = per_personality(
        "I/O size of reads and whole-file writes (iosize)", |c| format_size(c.iosize_bytes)))]
    iosize: Option<u64>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = per_personality(
        "Appends are uniform in [0, this - 1] bytes (meanappendsize / appendfilerand iosize; \
        oltp has no appends)", |c| format_size(c.append_size_bytes)))]
    appendsize: Option<u64>,
    #[arg(long, value_name = "PCT", help = per_personality(
        "Percentage of the main fileset's files that exist before the run (prealloc)",
        |c| c.prealloc_percent.to_string()))]
    prealloc: Option<u32>,
    #[arg(long, value_name = "N", help = per_personality(
        "Gamma shape x 1000 of directory depths and widths; 0 = plain means (dirgamma)",
        |c| ((c.dir_gamma * 1000.0).round() as u64).to_string()))]
    dirgamma: Option<u32>,
    #[arg(long, value_name = "N", help = per_personality(
        "Gamma shape x 1000 of file sizes with --size-dist gamma (filesizegamma)",
        |c| ((c.size_gamma * 1000.0).round() as u64).to_string()))]
    sizegamma: Option<u32>,
    #[command(flatten)]
    oltp: OltpArgs,
    #[arg(long, value_name = "N", help = format!("Trials per target, the first discarded when there are several [default: {TRIALS}]"))]
    trials: Option<usize>,
    /// At most N trials more while the kept trials' 95% interval is wider than 10% of their
    /// mean (seed 001's rule); 0 runs exactly --trials [default: as many as --trials]
    #[arg(long, value_name = "N")]
    extra_trials: Option<usize>,
    #[arg(long, value_name = "S", help = format!("Measured seconds per trial [default: {SECONDS}]"))]
    seconds: Option<f64>,
    #[arg(long, value_name = "S", help = format!("Warm-up seconds per trial, not recorded [default: {WARMUP}]"))]
    warmup: Option<f64>,
    /// Also end each trial after N ops as the IO summary counts them (all threads together),
    /// whichever comes first
    #[arg(long, value_name = "N")]
    ops: Option<u64>,
    #[arg(long, value_name = "N", help = format!("Seed of the tree, sizes and offsets (the same on every target) [default: {SEED}]"))]
    seed: Option<u64>,
    /// Keep every trial whatever the CPU placement. By default each counted trial first waits
    /// (up to 15 s) while the host has placed the two CPUs farther apart than the nearest
    /// placement seen in this run (a CPU link more than 3x the shortest measured), and a trial
    /// run there anyway is set aside and run again, at most as many times as there are trials.
    /// While every link measured so far is 150 ns or more (no near placement seen yet), the
    /// waits look for a shorter one, for at most 60 s in all (docs/LAB.md, "nvmfs's
    /// trial-to-trial spread")
    #[arg(long)]
    any_placement: bool,
    /// Also write the configuration and every target's results to FILE as JSON
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Directory (a tmpfs) for nvmfs images, the tmpfs target and loop-device backing files
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    shm_dir: PathBuf,
}

/// oltp's own parameters (workloads/oltp.f); refused for other personalities.
#[derive(clap::Args, Debug)]
struct OltpArgs {
    #[arg(long, value_name = "N", help = oltp_default("oltp: database writer threads (ndbwriters)", |o| o.db_writers.to_string()))]
    ndbwriters: Option<usize>,
    #[arg(long, value_name = "N", help = oltp_default("oltp: files of the log fileset (nlogfiles)", |o| o.log_files.to_string()))]
    nlogfiles: Option<usize>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = oltp_default("oltp: log file size (logfilesize)", |o| format_size(o.log_file_size_bytes)))]
    logfilesize: Option<u64>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = oltp_default("oltp: size of the log writer's random writes (lg-write iosize)", |o| format_size(o.log_iosize_bytes)))]
    log_iosize: Option<u64>,
    #[arg(long, value_name = "N", help = oltp_default("oltp: random writes per database writer loop (dbwrite-a iters)", |o| o.dbwr_iters.to_string()))]
    dbwr_iters: Option<u32>,
    #[arg(long, value_name = "N", help = oltp_default("oltp: database writer think time in stores (dbwr-hog value)", |o| o.dbwr_hog.to_string()))]
    dbwr_hog: Option<u64>,
    #[arg(long, value_name = "N", help = oltp_default("oltp: shadow think time in stores (usermode, shadowhog value)", |o| o.shadow_hog.to_string()))]
    usermode: Option<u64>,
    #[arg(long, value_name = "N", help = oltp_default("oltp: shadow reads per log write (lg-block value)", |o| o.lg_block_value.to_string()))]
    lg_block_value: Option<u64>,
    #[arg(long, value_name = "N", help = oltp_default("oltp: posts the shadows may run ahead of the log writer (lg-block highwater)", |o| o.lg_block_highwater.to_string()))]
    lg_block_highwater: Option<u64>,
    #[arg(long, value_name = "N", help = oltp_default("oltp: shadow reads per database writer loop (dbwr-block value)", |o| o.dbwr_block_value.to_string()))]
    dbwr_block_value: Option<u64>,
    #[arg(long, value_name = "N", help = oltp_default("oltp: posts the shadows may run ahead of a database writer (dbwr-block highwater)", |o| o.dbwr_block_highwater.to_string()))]
    dbwr_block_highwater: Option<u64>,
    /// oltp: plain writes instead of dsync (durable) ones for lg-write and dbwrite-a
    #[arg(long)]
    no_dsync: bool,
}

/// Help text with each personality's default.
fn per_personality(text: &str, value: impl Fn(&PersonalityConfig) -> String) -> String {
    let defaults: Vec<String> = Personality::ALL
        .iter()
        .map(|&p| format!("{} {}", p.name(), value(&PersonalityConfig::defaults(p))))
        .collect();
    format!("{text} [default: {}]", defaults.join(", "))
}

fn oltp_default(text: &str, value: impl Fn(&OltpConfig) -> String) -> String {
    format!("{text} [default: {}]", value(&OltpConfig::default()))
}

fn size_dist_name(d: SizeDist) -> &'static str {
    match d {
        SizeDist::Gamma => "gamma",
        SizeDist::Exact => "exact",
    }
}

/// The personality's defaults with the given flags applied.
fn personality_config(args: &Args) -> Result<PersonalityConfig, String> {
    let p = Personality::parse(&args.personality)?;
    let mut c = PersonalityConfig::defaults(p);
    set(&mut c.files, args.nfiles);
    set(&mut c.dir_width, args.dirwidth);
    set(&mut c.mean_file_size_bytes, args.filesize);
    if let Some(d) = &args.size_dist {
        c.size_dist = if d == "exact" {
            SizeDist::Exact
        } else {
            SizeDist::Gamma
        };
    }
    set(&mut c.threads, args.threads);
    set(&mut c.iosize_bytes, args.iosize);
    set(&mut c.append_size_bytes, args.appendsize);
    set(&mut c.prealloc_percent, args.prealloc);
    set(
        &mut c.dir_gamma,
        args.dirgamma.map(|g| f64::from(g) / 1000.0),
    );
    set(
        &mut c.size_gamma,
        args.sizegamma.map(|g| f64::from(g) / 1000.0),
    );
    apply_oltp(&mut c, &args.oltp)?;
    c.validate()?;
    Ok(c)
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

fn apply_oltp(c: &mut PersonalityConfig, a: &OltpArgs) -> Result<(), String> {
    let given = a.ndbwriters.is_some()
        || a.nlogfiles.is_some()
        || a.logfilesize.is_some()
        || a.log_iosize.is_some()
        || a.dbwr_iters.is_some()
        || a.dbwr_hog.is_some()
        || a.usermode.is_some()
        || a.lg_block_value.is_some()
        || a.lg_block_highwater.is_some()
        || a.dbwr_block_value.is_some()
        || a.dbwr_block_highwater.is_some()
        || a.no_dsync;
    if c.personality != Personality::Oltp {
        return match given {
            true => Err(format!(
                "the oltp flags (--ndbwriters, --usermode, ...) do not apply to {}",
                c.personality.name()
            )),
            false => Ok(()),
        };
    }
    let mut o = c.oltp();
    set(&mut o.db_writers, a.ndbwriters);
    set(&mut o.log_files, a.nlogfiles);
    set(&mut o.log_file_size_bytes, a.logfilesize);
    set(&mut o.log_iosize_bytes, a.log_iosize);
    set(&mut o.dbwr_iters, a.dbwr_iters);
    set(&mut o.dbwr_hog, a.dbwr_hog);
    set(&mut o.shadow_hog, a.usermode);
    set(&mut o.lg_block_value, a.lg_block_value);
    set(&mut o.lg_block_highwater, a.lg_block_highwater);
    set(&mut o.dbwr_block_value, a.dbwr_block_value);
    set(&mut o.dbwr_block_highwater, a.dbwr_block_highwater);
    o.dsync = !a.no_dsync;
    c.oltp = Some(o);
    Ok(())
}

fn run_config(args: &Args) -> Result<RunConfig, String> {
    if args.ops == Some(0) {
        return Err("--ops must be at least 1".into());
    }
    let cfg = RunConfig {
        personality: personality_config(args)?,
        trials: args.trials.unwrap_or(TRIALS),
        extra_trials: args.extra_trials.or(args.trials).unwrap_or(TRIALS),
        warmup_seconds: args.warmup.unwrap_or(WARMUP),
        run_seconds: args.seconds.unwrap_or(SECONDS),
        ops_max: args.ops,
        seed: args.seed.unwrap_or(SEED),
        hold_placement: !args.any_placement,
    };
    if !cfg.run_seconds.is_finite() || cfg.run_seconds <= 0.0 {
        return Err(format!("--seconds must be > 0, got {}", cfg.run_seconds));
    }
    cfg.validate()?;
    if !args.shm_dir.is_dir() {
        return Err(format!(
            "--shm-dir {}: not a directory",
            args.shm_dir.display()
        ));
    }
    Ok(cfg)
}

/// One target's outcome, for the JSON file.
#[derive(Serialize)]
struct TargetRun {
    target: String,
    /// ok, stopped early, skipped (unavailable), failed, interrupted.
    status: String,
    provision: Option<serde_json::Value>,
    result: Option<RunResult>,
}

#[derive(Serialize)]
struct Report<'a> {
    schema: &'static str,
    config: &'a RunConfig,
    runs: &'a [TargetRun],
    interrupted: bool,
}

pub fn run(args: &Args) -> u8 {
    let prepared = run_config(args).and_then(|cfg| {
        let device = targets::device_size_for(std::iter::once(&cfg.personality));
        let wanted = resolve_targets(&args.targets, &args.shm_dir, device)?;
        Ok((cfg, wanted, device))
    });
    let (cfg, wanted, device) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nvmfs bench filebench: {e}");
            return 2;
        }
    };
    if let Some(path) = &args.json {
        if let Err(e) = super::bench::check_writable(path) {
            eprintln!("nvmfs bench filebench: --json {}: {e}", path.display());
            return 2;
        }
    }
    if let Err(e) = kernel::install_interrupt_handler() {
        eprintln!("nvmfs bench filebench: warning: {e}");
    }
    describe(&cfg);
    let mut runs = Vec::new();
    for (i, w) in wanted.iter().enumerate() {
        if kernel::interrupted() {
            break;
        }
        eprintln!(
            "[{}/{}] {} on {}",
            i + 1,
            wanted.len(),
            cfg.personality.personality.name(),
            w.label()
        );
        let run = run_target(w, &cfg, &args.shm_dir, device);
        if !output::print("bench", &format_run(&run, &cfg)) {
            return 1;
        }
        runs.push(run);
    }
    finish(args, &cfg, &runs)
}

/// Writes the JSON file and picks the exit status.
fn finish(args: &Args, cfg: &RunConfig, runs: &[TargetRun]) -> u8 {
    let interrupted = kernel::interrupted();
    let report = Report {
        schema: "nvmfs-lab/bench-filebench/v1",
        config: cfg,
        runs,
        interrupted,
    };
    let outcomes = runs
        .iter()
        .map(|r| (r.status.starts_with("failed"), r.result.is_some()));
    crate::bench_targets::finish_report(
        "filebench",
        args.json.as_ref(),
        &report,
        interrupted,
        outcomes,
    )
}

/// The run's settings on stderr, so that a saved table says what it measured.
fn describe(cfg: &RunConfig) {
    let c = &cfg.personality;
    let limit = match cfg.ops_max {
        Some(n) => format!(" or {n} ops"),
        None => String::new(),
    };
    eprintln!(
        "{}: {} files of {} ({} sizes), {} threads, iosize {}; {} trial(s) of {} s warm-up + {} s{limit}, seed {}",
        c.personality.name(),
        c.files,
        format_size(c.mean_file_size_bytes),
        size_dist_name(c.size_dist),
        c.workload().threads(),
        format_size(c.iosize_bytes),
        cfg.trials,
        cfg.warmup_seconds,
        cfg.run_seconds,
        cfg.seed
    );
}

/// Makes the target fresh, runs the trials, removes the target.
fn run_target(w: &Wanted, cfg: &RunConfig, shm_dir: &Path, device: u64) -> TargetRun {
    let label = w.label().to_string();
    if let Some(why) = w.unavailable() {
        eprintln!("  {label}: unavailable: {why}");
        return TargetRun {
            target: label,
            status: format!("skipped: {why}"),
            provision: None,
            result: None,
        };
    }
    let made = w.make(
        &format!("nvmfs-bench-filebench-{}", std::process::id()),
        |t| StudyTarget::create(t, shm_dir, device, cfg),
    );
    let mut provision = None;
    let outcome = made.and_then(|target| {
        provision = Some(target.describe());
        target.run_and_close(cfg, &kernel::interrupted, &mut on_progress)
    });
    let status = match &outcome {
        Ok(r) => match &r.stopped_early {
            Some(why) if why.starts_with("interrupted") => "interrupted".to_string(),
            Some(why) => format!("stopped early: {why}"),
            None => "ok".to_string(),
        },
        Err(_) if kernel::interrupted() => "interrupted".to_string(),
        Err(e) => format!("failed: {e}"),
    };
    TargetRun {
        target: label,
        status,
        provision,
        result: outcome.ok(),
    }
}

fn on_progress(p: Progress<'_>) {
    match p {
        Progress::Setup(msg) => eprintln!("  {msg}"),
        Progress::Trial { .. } => {}
        Progress::TrialDone(t) => eprintln!(
            "  trial {}: {:.0} ops/s in {:.2} s{}{}{}",
            t.index + 1,
            t.summary.ops_per_sec,
            t.seconds,
            t.cpu
                .core_link_ns
                .map(|ns| format!(", CPU link {ns:.0} ns"))
                .unwrap_or_default(),
            match (&t.set_aside, t.discarded) {
                (Some(why), _) => format!(" (set aside: {why})"),
                (None, true) => " (discarded)".to_string(),
                (None, false) => String::new(),
            },
            t.stopped_early
                .as_deref()
                .map(|w| format!(" (stopped early: {w})"))
                .unwrap_or_default()
        ),
    }
}

/// Filebench's table and IO Summary over the kept trials, then their mean ops/s.
fn format_run(run: &TargetRun, cfg: &RunConfig) -> String {
    let mut s = format!(
        "== {} on {}: {}\n",
        cfg.personality.personality.name(),
        run.target,
        run.status
    );
    let Some(r) = &run.result else {
        return s;
    };
    let kept: Vec<_> = r
        .trials
        .iter()
        .filter(|t| !t.discarded && t.stopped_early.is_none())
        .collect();
    // With no complete kept trial, show what there is (it says why it stopped).
    let shown: Vec<_> = if kept.is_empty() {
        r.trials.iter().collect()
    } else {
        kept
    };
    let trials: Vec<_> = shown.iter().map(|t| (&t.flowops[..], t.seconds)).collect();
    s += &format_filebench_trials(&trials);
    s += &match r.ops_per_sec {
        Some(m) if m.ci95_half_width.is_finite() => format!(
            "ops/s: {:.1} ± {:.1} (95% CI, {} kept trials)\n",
            m.mean, m.ci95_half_width, m.n
        ),
        Some(m) => format!("ops/s: {:.1} (1 kept trial, no interval)\n", m.mean),
        None => "ops/s: no complete kept trial\n".to_string(),
    };
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

    fn parse(argv: &[&str]) -> Args {
        Cli::try_parse_from(std::iter::once("x").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn flags_override_the_personality_defaults() {
        let a = parse(&[
            "-p",
            "varmail",
            "--nfiles",
            "50",
            "--threads",
            "2",
            "--filesize",
            "4K",
            "--size-dist",
            "exact",
            "--dirgamma",
            "0",
            "--prealloc",
            "60",
        ]);
        let c = personality_config(&a).unwrap();
        assert_eq!((c.files, c.threads, c.mean_file_size_bytes), (50, 2, 4096));
        assert_eq!(
            (c.size_dist, c.dir_gamma, c.prealloc_percent),
            (SizeDist::Exact, 0.0, 60)
        );
        // Untouched: varmail's own.
        assert_eq!(c.dir_width, 1_000_000.0);
        assert_eq!(c.append_size_bytes, 16 * 1024);
    }

    #[test]
    fn oltp_flags_only_for_oltp() {
        let a = parse(&[
            "-p",
            "oltp",
            "--ndbwriters",
            "3",
            "--usermode",
            "0",
            "--no-dsync",
        ]);
        let o = personality_config(&a).unwrap().oltp();
        assert_eq!((o.db_writers, o.shadow_hog, o.dsync), (3, 0, false));
        let a = parse(&["-p", "varmail", "--ndbwriters", "3"]);
        assert!(personality_config(&a).unwrap_err().contains("oltp flags"));
        let a = parse(&["-p", "oltp", "--nfiles", "100"]);
        assert!(personality_config(&a).unwrap_err().contains("nfiles"));
    }
}
