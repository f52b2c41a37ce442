//! `nvmfs study NAME`: reproduce a source study in one command.

use std::io::IsTerminal;
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use nvmfs_lab::kernel;
use nvmfs_lab::study::targets::Runner;
use nvmfs_lab::study::{
    self, env::Environment, filemap2021, nvmfs2013, Cell, CellStatus, Size, StudyConfig,
};

#[derive(clap::Args, Debug)]
#[command(
    about = "Reproduce a source study (nvm-2015: Filebench, TPC-C and YCSB; linux-2002: filemark, pgmeter and AIM7; on nvmfs and kernel file systems)",
    long_about = "Reproduce a source study in one command.\n\n\
        nvm-2015 runs \"An Empirical Study of File Systems on NVM\" (MSST 2015): the Filebench \
        part (Figs. 2-4: fileserver, webproxy at directory depths 0.7, 2.1 and 3.4, and \
        webserver with the paper's Table I parameters, plus varmail) and the applications \
        (Fig. 5: TPC-C; Figs. 6-11: YCSB A-F, throughput and latency per operation at a fixed \
        offered load), the databases on SQLite in-process (on nvmfs through its SQLite VFS), on \
        nvmfs in-process, on \
        nvmfs through FUSE (fuse:nvmfs) and on every kernel variant of the paper's Table III \
        that this machine can provision (ext2, ext3 ordered/writeback/journal, ext4 \
        default/nodelalloc, XFS default/high AG count, btrfs, tmpfs) on a RAM-backed loop \
        device. Kernel targets need root; without it they are skipped with a message and nvmfs \
        still runs. --target dir:PATH adds any mounted directory (a fresh subdirectory of it, \
        not remounted between trials).\n\n\
        linux-2002 runs \"Filesystem Performance and Scalability in Linux 2.4.17\" (Bryant et \
        al., 2002) as scaling curves: filemark's small-file and large-file workloads against \
        threads (Figs. 1-2), pgmeter's sequential read and write, File Server, 8K OLTP and Web \
        Server against outstanding I/Os per file (Figs. 3-5, 8-10, 12) and AIM7's disk subtests \
        against tasks (Fig. 11), on nvmfs, fuse:nvmfs, run:nvmfs (the benchmarks as unmodified \
        code sees nvmfs under `nvmfs run`) and the paper's file systems (ext2, ext3 \
        ordered and writeback, xfs, and reiserfs and jfs where the kernel has them, else reported \
        unavailable) plus ext4 and btrfs. Its trials are filemark's transaction phases, pgmeter's tests and \
        AIM7's whole sweeps; figures are line charts of absolute rates, ratios are to ext2.\n\n\
        Run rules: fresh mkfs per workload, remount before every trial, warm-up excluded, the \
        first trial discarded, mean and 95% Student-t interval of the rest. The results \
        directory gets config.json, environment.json, raw/*.json, trials.csv, results.json, \
        results.csv, report.md and SVG/PNG figures (bars normalised to the baseline, or \
        scaling curves).\n\n\
        file-mapping-2021 runs \"Rethinking File Mapping for Persistent Memory\" (Neal et al., \
        FAST'21) section 4 on every mapping nvmfs has (hashfs, extent, radix, cuckoo; level \
        hashing in 4.9 only): the CPU cycles (rdtscp) of the mapping operations alone, cold (one operation \
        after evicting the caches) and hot (100,000 averaged), for locality, fragmentation \
        (layout score 1.0 and 0.7), file size, I/O size (with the mapping's share of the read \
        path), space utilisation (80/90/95% full), 1-8 threads and a page-cached extent tree \
        (Figs. 5-11), and Filebench fileserver and webproxy with Table 2's parameters on an \
        image of each mapping (Fig. 12), and the same on level hashing used as-is (section 4.9). \
        --workload picks experiments (locality, fragmentation, file-size, io-size, utilisation, \
        concurrency, page-cache, filebench, level-hashing), \
        --target picks mappings; --trials sets the samples per measurement.\n\n\
        nvmfs-2013 runs \"NVMFS: A hybrid file system for improving random write in NAND-flash \
        SSD\" (2013) section IV: IOzone-like random writes, Postmark with appends, fio-style \
        random updates and Filebench fileserver at medium (60%) and high (90%) SSD utilisation \
        on nvmfs with its SSD tier (PM image and SSD file in --shm-dir) and on ext3, ext4, btrfs \
        (nilfs2 where the kernel has it) on a RAM-backed loop device traced through tracefs, \
        their page cache limited to the PM tier's size by a memory cgroup. It reports the SSD \
        write traffic, erases and erase cost of each write stream replayed on the page-level \
        and FAST FTL simulators, throughput, and nvmfs's segment cleaning (Figs. 6-11). \
        --workload picks workloads, --target targets, --trials trials per cell, --ops and \
        --seconds bound fileserver's trial.\n\n\
        Loop devices, mounts and images are removed on success, on error and on Ctrl-C (a second \
        Ctrl-C tears down at once and exits 130).",
    after_help = "Examples:\n  nvmfs study nvm-2015 --quick\n  \
        nvmfs study nvm-2015 --quick --target nvmfs --target ext4 --workload fileserver\n  \
        nvmfs study nvm-2015 --quick --target nvmfs --target fuse:nvmfs --target dir:/mnt/pmem\n  \
        nvmfs study nvm-2015 --full --out results/full\n  \
        nvmfs study linux-2002 --quick\n  \
        nvmfs study linux-2002 --quick --target nvmfs --target ext2 --workload aim7\n  \
        nvmfs study file-mapping-2021 --quick\n  \
        nvmfs study file-mapping-2021 --quick --workload locality --target hashfs --target radix\n  \
        nvmfs study nvmfs-2013 --quick --out /tmp/s2013\n  \
        nvmfs study nvmfs-2013 --quick --workload iozone --target nvmfs --target ext4"
)]
pub struct Args {
    /// The study: nvm-2015, linux-2002, file-mapping-2021 or nvmfs-2013
    #[arg(value_parser = ["nvm-2015", "linux-2002", "file-mapping-2021", "nvmfs-2013"])]
    pub(crate) name: String,
    /// About 15 minutes on 2 cores. nvm-2015: 1/50 of the paper's file counts, 4 trials of
    /// 1 s (Filebench: up to 4 more while the interval is wider than 10%); 10,000 YCSB
    /// records, a tenth of a TPC-C warehouse, 4 trials of 0.25 s phases.
    /// linux-2002: 2,000 filemark files at 1, 4, 16 threads; pgmeter on two 64 MiB files at
    /// 1, 4, 16 outstanding I/Os; AIM7 up to 16 tasks; 4 trials, pgmeter's of 0.6 s
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// The paper's sizes. nvm-2015: 100K-500K files (needs the memory for them), 5 trials of
    /// 30 s. linux-2002: 10,000 filemark files at 1 to 128 threads, pgmeter on 2 GiB files,
    /// AIM7 up to 256 tasks, 8 trials, pgmeter's of 30 s
    #[arg(long)]
    full: bool,
    /// Results directory [default: results/NAME-<UTC time>]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Only these targets (repeat): nvmfs, fuse:nvmfs, fuse-uring:nvmfs (FUSE over io_uring,
    /// only when named), fuse-wb:nvmfs (FUSE with the kernel's write-back cache, only when
    /// named), run:nvmfs (through the C library under
    /// nvmfs run, each workload in a child), ext2, ext3, ext3-writeback, ext3-journal, ext4,
    /// ext4-nodelalloc, xfs, xfs-ag, btrfs, tmpfs, (linux-2002) reiserfs, jfs, or dir:PATH (a
    /// fresh subdirectory of a mounted directory) [default: the study's targets that are
    /// available; nvm-2015: all but run:nvmfs, linux-2002: nvmfs, fuse:nvmfs, run:nvmfs, ext2,
    /// ext3, ext3-writeback, xfs, ext4, btrfs, reiserfs, jfs]
    #[arg(short, long = "target", value_name = "T")]
    pub(crate) targets: Vec<String>,
    /// Only these workloads (repeat). nvm-2015: fileserver, webproxy-d0.7, webproxy-d2.1,
    /// webproxy-d3.4, webserver, varmail, tpcc, ycsb-a ... ycsb-f. linux-2002:
    /// filemark-{small,large}-tN (N threads), pgmeter-{seqread,seqwrite,fileserver,oltp,
    /// webserver}-oN (N outstanding I/Os), aim7 [default: all]
    #[arg(short, long = "workload", value_name = "W")]
    pub(crate) workloads: Vec<String>,
    /// Trials per workload and target, the first discarded (linux-2002: filemark's phases,
    /// pgmeter's tests, AIM7's sweeps)
    #[arg(long, value_name = "N")]
    pub(crate) trials: Option<usize>,
    /// Filebench cells (nvm-2015, file-mapping-2021): at most N trials more while the kept
    /// trials' 95% interval is wider than 10% of their mean (seed 001's rule); 0 runs exactly
    /// --trials [default: as many as --trials]
    #[arg(long, value_name = "N")]
    pub(crate) extra_trials: Option<usize>,
    /// Measured seconds per trial (linux-2002: pgmeter's; filemark counts transactions and
    /// AIM7 runs its job lists)
    #[arg(long, value_name = "S")]
    pub(crate) seconds: Option<f64>,
    /// Also end each trial after N flowops (all threads together), whichever comes first
    /// (linux-2002: pgmeter's I/Os, filemark's transactions per phase)
    #[arg(long, value_name = "N")]
    pub(crate) ops: Option<u64>,
    /// Warm-up seconds per trial (not recorded)
    #[arg(long, value_name = "S")]
    pub(crate) warmup: Option<f64>,
    /// Normalise figures and ratios to this target [default: nvm-2015: ext4, linux-2002:
    /// ext2]
    #[arg(long, value_name = "T")]
    baseline: Option<String>,
    /// Directory (a tmpfs) for images and loop-device backing files
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub(crate) shm_dir: PathBuf,
}

/// `nvmfs study-cell JOB`: what the study's run:nvmfs target runs under `nvmfs run`.
#[derive(clap::Args, Debug)]
pub struct CellArgs {
    /// The job file the study wrote
    job: PathBuf,
}

/// Runs one cell of a study for the parent study (progress as JSON lines on stdout).
pub fn run_cell(args: &CellArgs) -> u8 {
    if let Err(e) = kernel::install_interrupt_handler() {
        eprintln!("nvmfs study-cell: warning: cannot install the interrupt handler: {e}");
    }
    match study::run_nvmfs::serve(&args.job, &kernel::interrupted) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("nvmfs study-cell: {e}");
            1
        }
    }
}

/// How this program starts `nvmfs run` for the run:nvmfs target: itself, when the preload
/// library is there.
fn runner() -> Runner {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return Runner::Unavailable(format!("cannot find this program's path: {e}")),
    };
    match crate::run::find_library(Some(&exe)) {
        Ok(_) => Runner::Binary(exe),
        Err(why) => Runner::Unavailable(why),
    }
}

/// Progress on stderr: a bar on a terminal, one line per result otherwise.
struct Progress {
    bar: Option<ProgressBar>,
    label: String,
}

impl Progress {
    fn new(total_hint: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(total_hint);
            b.set_style(
                ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            b
        });
        Progress {
            bar,
            label: String::new(),
        }
    }

    fn line(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{msg}")),
            None => eprintln!("{msg}"),
        }
    }
}

impl study::StudyProgress for Progress {
    fn cell_started(&mut self, index: usize, total: usize, workload: &str, target: &str) {
        self.label = format!("{workload} on {target}");
        match &self.bar {
            Some(b) => {
                b.set_length(total as u64);
                b.set_position(index as u64);
                b.set_message(format!("{}: setting up", self.label));
            }
            None => eprintln!("[{}/{total}] {}", index + 1, self.label),
        }
    }

    fn note(&mut self, msg: &str) {
        match &self.bar {
            Some(b) => b.set_message(format!("{}: {msg}", self.label)),
            None => eprintln!("  {msg}"),
        }
    }

    fn tick(&mut self, trial: usize, trials: usize, ops_per_sec: f64, measuring: bool) {
        if let Some(b) = &self.bar {
            b.set_message(format!(
                "{}: trial {}/{trials} {} {:.0} ops/s",
                self.label,
                trial + 1,
                if measuring { "measuring" } else { "warm-up" },
                ops_per_sec
            ));
        }
    }

    fn cell_done(&mut self, cell: &Cell) {
        let what = match (&cell.status, cell.ops_per_sec()) {
            (CellStatus::Failed(e), _) => format!("FAILED: {e}"),
            (CellStatus::Interrupted, _) => "interrupted".into(),
            (st, Some(s)) => {
                let ci = if s.ci95_half_width.is_finite() {
                    format!(" ± {:.1}%", s.relative_ci() * 100.0)
                } else {
                    String::new()
                };
                let early = match st {
                    CellStatus::StoppedEarly(why) => format!(" (stopped early: {why})"),
                    _ => String::new(),
                };
                let metric = cell.result.as_ref().map_or("ops/s", |r| r.metric());
                format!("{:.0} {metric}{ci}{early}", s.mean)
            }
            (CellStatus::StoppedEarly(why), None) => format!("stopped early: {why}"),
            (_, None) => "no result".into(),
        };
        self.line(&format!(
            "  {} on {}: {what} ({:.1} s)",
            cell.workload, cell.target, cell.wall_seconds
        ));
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }
}

fn size_of(args: &Args) -> Size {
    if args.quick {
        Size::Quick
    } else if args.full {
        Size::Full
    } else {
        Size::Default
    }
}

fn out_dir(args: &Args) -> PathBuf {
    args.out.clone().unwrap_or_else(|| {
        PathBuf::from("results").join(format!(
            "{}-{}",
            args.name,
            study::env::utc_stamp(study::env::unix_now())
        ))
    })
}

fn config(def: &study::StudyDef, args: &Args) -> Result<StudyConfig, String> {
    let mut cfg = (def.config)(size_of(args), out_dir(args));
    cfg.only_targets = args.targets.clone();
    cfg.only_workloads = args.workloads.clone();
    if let Some(b) = &args.baseline {
        cfg.baseline = b.clone();
    }
    cfg.shm_dir = args.shm_dir.clone();
    cfg.runner = runner();
    // --trials, --seconds and --warmup set the database workloads' phases too.
    if let Some(t) = args.trials {
        cfg.trials = t;
        cfg.extra_trials = t;
        cfg.db.trials = t;
    }
    // Checked in `run`, before any study's config.
    cfg.extra_trials = args.extra_trials.unwrap_or(cfg.extra_trials);
    if let Some(s) = args.seconds {
        cfg.run_seconds = s;
        cfg.db.run_seconds = s;
    }
    if let Some(n) = args.ops {
        if n == 0 {
            return Err("--ops must be at least 1".into());
        }
        cfg.ops_max = Some(n);
    }
    if let Some(s) = args.warmup {
        cfg.warmup_seconds = s;
        cfg.db.warmup_seconds = s;
    }
    if cfg.trials == 0 || cfg.trials > 100 {
        return Err(format!("--trials must be 1..=100, got {}", cfg.trials));
    }
    if !(cfg.run_seconds.is_finite() && cfg.run_seconds > 0.0) {
        return Err(format!("--seconds must be > 0, got {}", cfg.run_seconds));
    }
    if !(cfg.warmup_seconds.is_finite() && cfg.warmup_seconds >= 0.0) {
        return Err(format!("--warmup must be >= 0, got {}", cfg.warmup_seconds));
    }
    if !args.shm_dir.is_dir() {
        return Err(format!(
            "--shm-dir {}: not a directory",
            args.shm_dir.display()
        ));
    }
    Ok(cfg)
}

/// Refuses `--extra-trials` over 100, or for the studies without Filebench cells.
fn check_extra_trials(args: &Args) -> Result<(), String> {
    let Some(n) = args.extra_trials else {
        return Ok(());
    };
    if args.name != study::nvm2015::STUDY.name && args.name != filemap2021::NAME {
        return Err(format!(
            "--extra-trials: {} has no Filebench cells (nvm-2015 and {} have)",
            args.name,
            filemap2021::NAME
        ));
    }
    if n > 100 {
        return Err(format!("--extra-trials must be 0..=100, got {n}"));
    }
    Ok(())
}

pub fn run(args: &Args) -> u8 {
    // Checked here for every study; the configs take the value as it is.
    if let Err(e) = check_extra_trials(args) {
        eprintln!("nvmfs study: {e}");
        return 2;
    }
    if args.name == filemap2021::NAME {
        return crate::study_map::run(args, size_of(args), out_dir(args));
    }
    if args.name == nvmfs2013::NAME {
        return crate::study_nvmfs2013::run(args, size_of(args), out_dir(args));
    }
    let Some(def) = study::find(&args.name) else {
        eprintln!("nvmfs study: unknown study {}", args.name);
        return 2;
    };
    let cfg = match config(def, args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmfs study: {e}");
            return 2;
        }
    };
    if let Err(e) = kernel::install_interrupt_handler() {
        eprintln!("nvmfs study: warning: cannot install the interrupt handler: {e}");
    }
    let env = Environment::capture_for(def, &cfg.shm_dir);
    if !env.root {
        eprintln!("nvmfs study: not running as root: kernel file systems are skipped (run with sudo to include them); nvmfs still runs");
    }
    eprintln!(
        "nvmfs study {} ({}): results in {}",
        def.name,
        cfg.size.name(),
        cfg.out_dir.display()
    );
    let mut progress = Progress::new(1);
    let result = match study::run_study(def, &cfg, &kernel::interrupted, &mut progress) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nvmfs study: {e}");
            return 1;
        }
    };
    if let Some(b) = &progress.bar {
        b.finish_and_clear();
    }
    let written = match study::report::write_all(&result, &env) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("nvmfs study: {e}");
            return 1;
        }
    };
    print!(
        "{}",
        study::report::format_table(&written.rows, &cfg.baseline)
    );
    for f in &written.findings {
        println!("finding: {}: {}", f.statement, f.verdict.label());
    }
    for n in &written.notes {
        eprintln!("note: {n}");
    }
    eprintln!(
        "wrote {} files to {} (report.md, results.json, results.csv, figures)",
        written.files.len(),
        written.dir.display()
    );
    if result.interrupted {
        return 130;
    }
    let failed = result
        .cells
        .iter()
        .filter(|c| matches!(c.status, CellStatus::Failed(_)))
        .count();
    if failed > 0 {
        eprintln!("nvmfs study: {failed} workload run(s) failed (see report.md)");
        return 1;
    }
    0
}
