//! `nvmfs study nvmfs-2013`: seed 004 (NVMFS, 2013) section IV, nvmfs with its SSD tier
//! against kernel file systems, measured as SSD write traffic, simulated FTL erases, throughput
//! and segment cleaning (`nvmfs_lab::study::nvmfs2013`). The shared flags mean: --workload a
//! workload (iozone, postmark, fio, fileserver), --target a target (nvmfs, ext3, ext4, btrfs,
//! nilfs2), --trials trials per cell.

use std::path::PathBuf;

use nvmfs_lab::kernel;
use nvmfs_lab::study::env::Environment;
use nvmfs_lab::study::nvmfs2013::{self, experiments, report, Config, TARGETS, WORKLOADS};
use nvmfs_lab::study::Size;

use crate::study::Args;

fn config(args: &Args, size: Size, out: PathBuf) -> Result<Config, String> {
    let mut cfg = Config::for_size(size, out);
    for w in &args.workloads {
        if nvmfs2013::workload(w).is_none() {
            let known: Vec<&str> = WORKLOADS.iter().map(|w| w.id).collect();
            return Err(format!("unknown workload {w}; known: {}", known.join(", ")));
        }
    }
    for t in &args.targets {
        if !TARGETS.contains(&t.as_str()) {
            return Err(format!("unknown target {t}; known: {}", TARGETS.join(", ")));
        }
    }
    cfg.only_workloads = args.workloads.clone();
    cfg.only_targets = args.targets.clone();
    if let Some(t) = args.trials {
        if !(1..=100).contains(&t) {
            return Err(format!("--trials must be 1..=100, got {t}"));
        }
        cfg.trials = t;
    }
    if let Some(n) = args.ops {
        cfg.fileserver_ops = n;
    }
    if let Some(s) = args.seconds.filter(|s| s.is_finite() && *s > 0.0) {
        cfg.fileserver_seconds = s;
    }
    if !args.shm_dir.is_dir() {
        return Err(format!(
            "--shm-dir {}: not a directory",
            args.shm_dir.display()
        ));
    }
    cfg.shm_dir = args.shm_dir.clone();
    Ok(cfg)
}

/// Runs the study and writes its results directory; the exit code.
pub fn run(args: &Args, size: Size, out: PathBuf) -> u8 {
    let cfg = match config(args, size, out) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmfs study: {e}");
            return 2;
        }
    };
    if let Err(e) = kernel::install_interrupt_handler() {
        eprintln!("nvmfs study: warning: cannot install the interrupt handler: {e}");
    }
    let env = Environment {
        emulation: report::emulation(),
        ..Environment::capture(&cfg.shm_dir)
    };
    eprintln!(
        "nvmfs study {} ({}): results in {}",
        nvmfs2013::NAME,
        size.name(),
        cfg.out_dir.display()
    );
    let result = match experiments::run(&cfg, &kernel::interrupted, &mut |m| eprintln!("{m}")) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nvmfs study: {e}");
            return 1;
        }
    };
    let written = match report::write_all(&result, &env) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("nvmfs study: {e}");
            return 1;
        }
    };
    print!("{}", report::format_table(&result));
    for f in &written.findings {
        println!("finding: {}: {} ({})", f.statement, f.label(), f.measured);
    }
    for n in &written.notes {
        eprintln!("note: {n}");
    }
    eprintln!(
        "wrote {} files to {} in {:.0} s (report.md, results.json, results.csv, figures)",
        written.files.len(),
        written.dir.display(),
        result.wall_seconds
    );
    if result.interrupted {
        return 130;
    }
    let full = result.cells.iter().filter(|c| c.out_of_space).count();
    if full > 0 {
        eprintln!(
            "note: {full} cell(s) ran out of space: the file system cannot hold that level's \
             data on a device of this size (a result, see report.md)"
        );
    }
    let failed = result.cells.iter().filter(|c| c.failed()).count();
    if failed > 0 {
        eprintln!("nvmfs study: {failed} cell(s) not measured (see report.md)");
        return 1;
    }
    0
}
