//! `nvmfs study NAME`: reproduce a source study in one command.

use std::io::IsTerminal;
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use nvmfs_lab::kernel;
use nvmfs_lab::study::{self, env::Environment, Cell, CellStatus, Size, StudyConfig};

#[derive(clap::Args, Debug)]
#[command(
    about = "Reproduce a source study (nvm-2015: Filebench, TPC-C and YCSB on nvmfs and kernel file systems)",
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
        Run rules: fresh mkfs per workload, remount before every trial, warm-up excluded, the \
        first trial discarded, mean and 95% Student-t interval of the rest. The results \
        directory gets config.json, environment.json, raw/*.json, trials.csv, results.json, \
        results.csv, report.md and SVG/PNG figures normalised to the baseline.\n\n\
        Loop devices, mounts and images are removed on success, on error and on Ctrl-C (a second \
        Ctrl-C tears down at once and exits 130).",
    after_help = "Examples:\n  nvmfs study nvm-2015 --quick\n  \
        nvmfs study nvm-2015 --quick --target nvmfs --target ext4 --workload fileserver\n  \
        nvmfs study nvm-2015 --quick --target nvmfs --target fuse:nvmfs --target dir:/mnt/pmem\n  \
        nvmfs study nvm-2015 --full --out results/full"
)]
pub struct Args {
    /// The study: nvm-2015
    #[arg(value_parser = ["nvm-2015"])]
    name: String,
    /// 1/50 of the paper's file counts, 4 trials of 1 s; 10,000 YCSB records, a tenth of a
    /// TPC-C warehouse, 4 trials of 0.25 s phases (about 15 minutes on 2 cores)
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// The paper's file counts (100K-500K files; needs the memory for them), 5 trials of 30 s
    #[arg(long)]
    full: bool,
    /// Results directory [default: results/nvm-2015-<UTC time>]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Only these targets (repeat): nvmfs, fuse:nvmfs, ext2, ext3, ext3-writeback,
    /// ext3-journal, ext4, ext4-nodelalloc, xfs, xfs-ag, btrfs, tmpfs, or dir:PATH (a fresh
    /// subdirectory of a mounted directory) [default: all available except dir:]
    #[arg(short, long = "target", value_name = "T")]
    targets: Vec<String>,
    /// Only these workloads (repeat): fileserver, webproxy-d0.7, webproxy-d2.1,
    /// webproxy-d3.4, webserver, varmail, tpcc, ycsb-a ... ycsb-f [default: all]
    #[arg(short, long = "workload", value_name = "W")]
    workloads: Vec<String>,
    /// Trials per workload and target, the first discarded
    #[arg(long, value_name = "N")]
    trials: Option<usize>,
    /// Measured seconds per trial
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,
    /// Also end each trial after N flowops (all threads together), whichever comes first
    #[arg(long, value_name = "N")]
    ops: Option<u64>,
    /// Warm-up seconds per trial (not recorded)
    #[arg(long, value_name = "S")]
    warmup: Option<f64>,
    /// Normalise figures and ratios to this target
    #[arg(long, value_name = "T", default_value = "ext4")]
    baseline: String,
    /// Directory (a tmpfs) for images and loop-device backing files
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    shm_dir: PathBuf,
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

fn config(args: &Args) -> Result<StudyConfig, String> {
    let size = if args.quick {
        Size::Quick
    } else if args.full {
        Size::Full
    } else {
        Size::Default
    };
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("results").join(format!(
            "{}-{}",
            args.name,
            study::env::utc_stamp(study::env::unix_now())
        ))
    });
    let mut cfg = StudyConfig::for_size(size, out);
    cfg.only_targets = args.targets.clone();
    cfg.only_workloads = args.workloads.clone();
    cfg.baseline = args.baseline.clone();
    cfg.shm_dir = args.shm_dir.clone();
    // --trials, --seconds and --warmup set the database workloads' phases too.
    if let Some(t) = args.trials {
        cfg.trials = t;
        cfg.db.trials = t;
    }
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

pub fn run(args: &Args) -> u8 {
    let cfg = match config(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmfs study: {e}");
            return 2;
        }
    };
    if let Err(e) = kernel::install_interrupt_handler() {
        eprintln!("nvmfs study: warning: cannot install the interrupt handler: {e}");
    }
    let env = Environment::capture(&cfg.shm_dir);
    if !env.root {
        eprintln!("nvmfs study: not running as root: kernel file systems are skipped (run with sudo to include them); nvmfs still runs");
    }
    eprintln!(
        "nvmfs study nvm-2015 ({}): results in {}",
        cfg.size.name(),
        cfg.out_dir.display()
    );
    let mut progress = Progress::new(1);
    let Some(def) = study::find(&args.name) else {
        eprintln!("nvmfs study: unknown study {}", args.name);
        return 2;
    };
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
