//! `nvmfs bench filemark`: seed 001's multithreaded Postmark, one run per thread count on
//! a fresh target, transactions/s over the kept phases.

use std::io;

use nvmfs_lab::filebench::LabTarget;
use nvmfs_lab::kernel;
use nvmfs_lab::postmark::config::parse_buffering;
use nvmfs_lab::postmark::filemark::{self, FilemarkConfig, FilemarkResult};
use nvmfs_lab::study::targets::{ImageSpec, StudyTarget, TargetVisitor};
use nvmfs_lab::targets::api::MicroFs;
use serde::Serialize;

use crate::bench_lab::{self, Record, TargetArgs};
use crate::bench_postmark::file_bytes;

/// Seed 001 ran filemark with 1, 8, 64 and 128 threads.
const THREADS: [usize; 4] = [1, 8, 64, 128];

#[derive(clap::Args, Debug)]
#[command(
    about = "filemark, seed 001's multithreaded Postmark, over thread counts on each target",
    long_about = "Runs filemark, seed 001's multithreaded Postmark: N threads, each an independent \
        Postmark 1.51 instance in its own directory with its own subdirectories, file table and \
        generator (seed + thread number), the files and transactions split so that the totals \
        are the configured ones; biases in percent. One creation phase, then --phases \
        transaction phases of --transactions transactions (all threads together), each after \
        --warmup-transactions uncounted ones and followed by a remount of the file system \
        (nvmfs and the kernel variants; tmpfs and dir: targets cannot be). A phase's rate is \
        all threads' transactions over the phase's wall time; the first phase is discarded when there are several.\n\n\
        One run per --threads count on each target, each on a fresh target (seed 001 remade \
        the file system rather than deleting the files; --delete deletes them at the end \
        too).\n\n\
        --preset picks seed 001's workload: small (512 B to 9.77 KB files, 512 B I/O) or \
        large (4 to 16 KB files, 4 KB I/O), both 10,000 files in 10 subdirectories, bias \
        read 75%, create 50%, 12 phases. Every other flag overrides the preset (each flag's \
        help lists both presets' values).\n\n\
        stdout gets a row per thread count and target: transactions/s (mean and 95% interval \
        over the kept phases), the kept phases, the creation phase's files/s and how many \
        threads ran out of files (every file they made was deleted; they then stop for the \
        phase). Progress goes to stderr; --json FILE gets every phase of every run, per \
        thread.",
    after_help = "Targets: nvmfs (the library in-process on a fresh image in --shm-dir), tmpfs (a \
        fresh directory in --shm-dir, through system calls), dir:PATH (a fresh subdirectory of \
        PATH), or a kernel variant of `nvmfs study` made fresh on a RAM-backed loop device \
        (ext2, ext3, ext3-writeback, ext3-journal, ext4, ext4-nodelalloc, xfs, xfs-ag, btrfs; \
        needs root). Default: nvmfs and tmpfs.\n\n\
        Exit status: 0 on success, 1 when a run failed or no target could run, 2 on bad input, \
        130 when interrupted.\n\n\
        Examples:\n  nvmfs bench filemark\n  \
        nvmfs bench filemark --preset large --threads 1,2,4,8 -t nvmfs -t ext4\n  \
        nvmfs bench filemark --threads 8 --phases 3 --transactions 20000 --json fm.json"
)]
pub struct Args {
    /// Seed 001's workload the other flags start from
    #[arg(long, value_enum, default_value_t = Preset::Small)]
    preset: Preset,
    /// Thread counts, one run each, as a list (1,2,4,8) or repeated [default: 1,8,64,128]
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    threads: Vec<usize>,
    #[arg(long, value_name = "N", help = per_preset(
        "Files created in the creation phase, all threads together", |c| c.files.to_string()))]
    number: Option<u32>,
    #[arg(long, value_name = "N", help = per_preset(
        "Transactions per phase, all threads together", |c| c.transactions.to_string()))]
    transactions: Option<u32>,
    #[arg(long, value_name = "N", help = per_preset(
        "Uncounted transactions at the start of each phase, all threads together",
        |c| c.warmup_transactions.to_string()))]
    warmup_transactions: Option<u32>,
    #[arg(long, value_name = "N", help = per_preset(
        "Transaction phases after the creation phase", |c| c.phases.to_string()))]
    phases: Option<u32>,
    #[arg(long, value_name = "SIZE", value_parser = file_bytes, help = per_preset(
        "Smallest file created", |c| c.size_low.to_string()))]
    size_low: Option<u32>,
    #[arg(long, value_name = "SIZE", value_parser = file_bytes, help = per_preset(
        "Files are created below this size and appends grow them up to it",
        |c| c.size_high.to_string()))]
    size_high: Option<u32>,
    #[arg(long, value_name = "N", help = per_preset(
        "Subdirectories in each thread's directory; 0 and 1 mean none",
        |c| c.subdirectories.to_string()))]
    subdirectories: Option<u32>,
    #[arg(long, value_name = "SIZE", value_parser = file_bytes, help = per_preset(
        "Bytes per read call", |c| c.read_block_size.to_string()))]
    read_block: Option<u32>,
    #[arg(long, value_name = "SIZE", value_parser = file_bytes, help = per_preset(
        "Bytes per write call", |c| c.write_block_size.to_string()))]
    write_block: Option<u32>,
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set, value_parser = parse_buffering,
        help = per_preset("true: stdio streams (emulated), false: open, read, write",
        |c| c.buffering.to_string()))]
    buffering: Option<bool>,
    #[arg(long, value_name = "PCT", allow_negative_numbers = true, value_parser = percent_bias,
        help = per_preset("Chance in percent (0..100) of a read rather than an append; -1 \
        leaves both out", |c| bias_text(c.bias_read)))]
    bias_read: Option<Bias>,
    #[arg(long, value_name = "PCT", allow_negative_numbers = true, value_parser = percent_bias,
        help = per_preset("Chance in percent (0..100) of a create rather than a delete; -1 \
        leaves both out", |c| bias_text(c.bias_create)))]
    bias_create: Option<Bias>,
    #[arg(long, value_name = "N", help = per_preset(
        "Seed of thread 0's generator; thread i uses seed + i", |c| c.seed.to_string()))]
    seed: Option<u32>,
    /// Delete the files and directories after the last phase (seed 001 did not)
    #[arg(long)]
    delete: bool,
    #[command(flatten)]
    targets: TargetArgs,
}

/// Seed 001's two filemark workloads.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Preset {
    /// 512 B to 9.77 KB files, 512 B reads and writes
    Small,
    /// 4 to 16 KB files, 4 KB reads and writes
    Large,
}

impl Preset {
    fn config(self, threads: u32) -> FilemarkConfig {
        match self {
            Preset::Small => FilemarkConfig::small_file(threads),
            Preset::Large => FilemarkConfig::large_file(threads),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Preset::Small => "small",
            Preset::Large => "large",
        }
    }
}

/// A bias in percent: `None` is -1.
#[derive(Debug, Clone, Copy)]
struct Bias(Option<u32>);

fn percent_bias(text: &str) -> Result<Bias, String> {
    match text.parse::<i32>() {
        Ok(-1) => Ok(Bias(None)),
        Ok(v @ 0..=100) => Ok(Bias(Some(v as u32))),
        _ => Err(format!(
            "invalid bias '{text}': 0..100 (percent) or -1 to disable"
        )),
    }
}

fn bias_text(b: Option<u32>) -> String {
    b.map_or("-1".into(), |v| v.to_string())
}

/// Help text with both presets' values.
fn per_preset(text: &str, value: impl Fn(&FilemarkConfig) -> String) -> String {
    format!(
        "{text} [default: small {}, large {}]",
        value(&Preset::Small.config(1)),
        value(&Preset::Large.config(1))
    )
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// The preset with the flags applied, one configuration per thread count, each checked.
fn configs(args: &Args) -> Result<Vec<FilemarkConfig>, String> {
    let threads = bench_lab::counts(&args.threads, &THREADS, "--threads")?;
    threads
        .into_iter()
        .map(|t| {
            let t = u32::try_from(t).map_err(|_| format!("--threads {t}: too many"))?;
            let mut c = args.preset.config(t);
            set(&mut c.files, args.number);
            set(&mut c.transactions, args.transactions);
            set(&mut c.warmup_transactions, args.warmup_transactions);
            set(&mut c.phases, args.phases);
            set(&mut c.size_low, args.size_low);
            set(&mut c.size_high, args.size_high);
            set(&mut c.subdirectories, args.subdirectories);
            set(&mut c.read_block_size, args.read_block);
            set(&mut c.write_block_size, args.write_block);
            set(&mut c.buffering, args.buffering);
            set(&mut c.bias_read, args.bias_read.map(|b| b.0));
            set(&mut c.bias_create, args.bias_create.map(|b| b.0));
            set(&mut c.seed, args.seed);
            c.delete = args.delete;
            c.validate().map_err(|e| format!("with {t} threads: {e}"))?;
            Ok(c)
        })
        .collect()
}

/// An image for the file tables' worst case (every slot, twice the files, holding a file of
/// the largest size) and the threads' directories.
fn image(cfgs: &[FilemarkConfig]) -> ImageSpec {
    let c = cfgs
        .iter()
        .max_by_key(|c| c.threads)
        .expect("a thread count");
    let slots = 2 * u64::from(c.files);
    let file = u64::from(c.size_high).div_ceil(4096) * 4096;
    let dirs = u64::from(c.threads) * (u64::from(c.subdirectories) + 1);
    bench_lab::image_for(slots.saturating_mul(file), slots + dirs)
}

/// One run's result with its thread count, for the JSON file.
#[derive(Serialize)]
struct FilemarkRun {
    threads: u32,
    #[serde(flatten)]
    result: FilemarkResult,
}

/// One filemark run on a target, through [`TargetVisitor`].
struct RunFilemark<'a>(&'a FilemarkConfig);

impl TargetVisitor for RunFilemark<'_> {
    type Output = io::Result<FilemarkRun>;

    fn visit<T: LabTarget>(self, target: &mut T) -> Self::Output
    where
        <T::Fs as MicroFs>::Name: Send + Sync,
        <T::Fs as MicroFs>::File: Send,
    {
        let result = filemark::run(target, self.0, &kernel::interrupted)?;
        Ok(FilemarkRun {
            threads: self.0.threads,
            result,
        })
    }
}

pub fn run(args: &Args) -> u8 {
    let prepared = configs(args).and_then(|cfgs| {
        let (bench, wanted) = args.targets.resolve("filemark", image(&cfgs))?;
        Ok((cfgs, bench, wanted))
    });
    let (cfgs, bench, wanted) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nvmfs bench filemark: {e}");
            return 2;
        }
    };
    describe(args.preset, &cfgs);
    let json = args.targets.json.as_ref();
    if let Err(code) = bench_lab::begin("filemark", json, Some(&header())) {
        return code;
    }
    // Each thread count on a fresh target, as the study runs them.
    let jobs: Vec<_> = cfgs
        .iter()
        .map(|c| bench_lab::Job {
            label: format!("filemark-{}, {} thread(s)", args.preset.name(), c.threads),
            cases: std::slice::from_ref(c),
        })
        .collect();
    let mut run_one = |t: &mut StudyTarget, c: &FilemarkConfig| t.visit(RunFilemark(c));
    let stopped = |r: &FilemarkRun| r.result.stopped_early.clone();
    let rows = |r: &Record<FilemarkRun>, c: &FilemarkConfig| format_row(r, c.threads);
    let records = match bench_lab::run_jobs(&bench, &wanted, &jobs, &mut run_one, &stopped, &rows) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let config = json_config(args.preset, &cfgs);
    bench_lab::finish(
        "filemark",
        "nvmfs-lab/bench-filemark/v1",
        args.targets.json.as_ref(),
        &config,
        &records,
    )
}

/// The configuration for the JSON file: the preset, the thread counts and the settings
/// they share.
fn json_config(preset: Preset, cfgs: &[FilemarkConfig]) -> serde_json::Value {
    let mut v = serde_json::to_value(&cfgs[0]).expect("serialisable");
    if let Some(o) = v.as_object_mut() {
        o.remove("threads");
        o.insert("preset".into(), preset.name().into());
        let counts: Vec<u32> = cfgs.iter().map(|c| c.threads).collect();
        o.insert("thread_counts".into(), counts.into());
    }
    v
}

/// The run's settings on stderr, so that a saved table says what it measured.
fn describe(preset: Preset, cfgs: &[FilemarkConfig]) {
    let c = &cfgs[0];
    let counts: Vec<String> = cfgs.iter().map(|c| c.threads.to_string()).collect();
    eprintln!(
        "filemark-{}: {} files of {}..{} bytes in {} subdirectories per thread, {} phase(s) of \
         {} transactions after {} warm-up ones, read/write blocks {}/{}, {}, bias read {}% \
         create {}%, seed {}; threads {}",
        preset.name(),
        c.files,
        c.size_low,
        c.size_high,
        c.subdirectories,
        c.phases,
        c.transactions,
        c.warmup_transactions,
        c.read_block_size,
        c.write_block_size,
        if c.buffering {
            "buffered"
        } else {
            "unbuffered"
        },
        bias_text(c.bias_read),
        bias_text(c.bias_create),
        c.seed,
        counts.join(",")
    );
}

fn header() -> String {
    format!(
        "{:<16} {:>7} {:>14} {:>10} {:>5} {:>11} {:>12}  {}\n",
        "target",
        "threads",
        "transactions/s",
        "± 95% CI",
        "kept",
        "created/s",
        "out of files",
        "status"
    )
}

/// One row: the kept phases' transactions/s, the creation rate, the threads that ran out.
fn format_row(r: &Record<FilemarkRun>, threads: u32) -> String {
    let res = r.result.as_ref().map(|f| &f.result);
    let summary = res.and_then(|f| f.transactions_per_second.as_ref());
    let (mean, ci) = bench_lab::summary_cells(summary);
    let kept = summary.map_or("-".to_string(), |s| s.n.to_string());
    let created = res.map_or("-".to_string(), |f| format!("{:.1}", f.creation.per_second));
    let out = res.map_or("-".to_string(), |f| out_of_files(f).to_string());
    format!(
        "{:<16} {:>7} {:>14} {:>10} {:>5} {:>11} {:>12}  {}\n",
        r.target, threads, mean, ci, kept, created, out, r.status
    )
}

/// Threads that ran out of files in some phase.
fn out_of_files(f: &FilemarkResult) -> usize {
    let mut out = vec![false; f.files_per_thread.len()];
    for t in f.transaction_phases.iter().flat_map(|p| &p.threads) {
        if let Some(o) = out.get_mut(t.thread as usize) {
            *o |= t.out_of_files;
        }
    }
    out.iter().filter(|&&o| o).count()
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

    fn configs_of(argv: &[&str]) -> Result<Vec<FilemarkConfig>, String> {
        configs(&parse(argv)?)
    }

    #[test]
    fn defaults_are_seed_001s_small_workload_over_its_thread_counts() {
        let c = configs_of(&[]).unwrap();
        let threads: Vec<u32> = c.iter().map(|c| c.threads).collect();
        assert_eq!(threads, [1, 8, 64, 128]);
        assert_eq!(c[2], FilemarkConfig::small_file(64));
        let c = configs_of(&["--preset", "large", "--threads", "2"]).unwrap();
        assert_eq!(c, [FilemarkConfig::large_file(2)]);
    }

    #[test]
    fn thread_lists_and_flags_override_the_preset() {
        let c = configs_of(&[
            "--threads",
            "1,2",
            "--threads",
            "4",
            "--number",
            "100",
            "--transactions",
            "300",
            "--warmup-transactions",
            "0",
            "--phases",
            "2",
            "--size-low",
            "1K",
            "--size-high",
            "2K",
            "--subdirectories",
            "0",
            "--read-block",
            "4K",
            "--write-block",
            "100",
            "--buffering",
            "false",
            "--bias-read",
            "-1",
            "--bias-create",
            "90",
            "--seed",
            "5",
            "--delete",
        ])
        .unwrap();
        assert_eq!(c.iter().map(|c| c.threads).collect::<Vec<_>>(), [1, 2, 4]);
        let want = FilemarkConfig {
            threads: 4,
            files: 100,
            transactions: 300,
            warmup_transactions: 0,
            phases: 2,
            size_low: 1024,
            size_high: 2048,
            subdirectories: 0,
            read_block_size: 4096,
            write_block_size: 100,
            buffering: false,
            bias_read: None,
            bias_create: Some(90),
            seed: 5,
            delete: true,
        };
        assert_eq!(c[2], want);
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let err = parse(&["--preset", "medium"]).err().unwrap();
        assert!(err.contains("small") && err.contains("large"), "{err}");
        let err = parse(&["--bias-read", "101"]).err().unwrap();
        assert!(err.contains("0..100"), "{err}");
        let err = parse(&["--threads", "1,x"]).err().unwrap();
        assert!(err.contains("'x'"), "{err}");
        let err = configs_of(&["--threads", "0"]).unwrap_err();
        assert!(err.contains("--threads"), "{err}");
        let err = configs_of(&["--threads", "2000"]).unwrap_err();
        assert!(err.contains("threads must be 1..=1024"), "{err}");
        let err = configs_of(&["--threads", "8", "--number", "4"]).unwrap_err();
        assert!(
            err.contains("4 files cannot be split over 8 threads"),
            "{err}"
        );
        let err = configs_of(&["--phases", "0"]).unwrap_err();
        assert!(err.contains("phases must be 1..="), "{err}");
    }

    #[test]
    fn the_json_config_lists_the_thread_counts_once() {
        let c = configs_of(&["--threads", "1,4", "--number", "40"]).unwrap();
        let v = json_config(Preset::Large, &c);
        assert_eq!(v["thread_counts"], serde_json::json!([1, 4]));
        assert_eq!(v["preset"], "large");
        assert_eq!(v["files"], 40);
        assert!(v.get("threads").is_none());
    }
}
