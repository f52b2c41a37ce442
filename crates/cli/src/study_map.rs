//! `nvmfs study file-mapping-2021`: the file-mapping study (Neal et al., FAST'21, section 4),
//! which measures mapping operations in cycles per mapping rather than workloads per target,
//! so it has its own configuration and report (`nvmfs_lab::study::filemap2021`). The shared
//! flags mean: --workload an experiment, --target a mapping, --trials samples per measurement
//! (and Filebench trials), --seconds and --warmup the Filebench phases.

use std::path::PathBuf;

use nvmfs::MappingKind;
use nvmfs_lab::kernel;
use nvmfs_lab::study::env::Environment;
use nvmfs_lab::study::filemap2021::{self, experiments, report, MapStudyConfig, EXPERIMENTS};
use nvmfs_lab::study::Size;

use crate::study::Args;

fn config(args: &Args, size: Size, out: PathBuf) -> Result<MapStudyConfig, String> {
    let mut cfg = MapStudyConfig::for_size(size, out);
    for w in &args.workloads {
        if filemap2021::experiment(w).is_none() {
            let known: Vec<&str> = EXPERIMENTS.iter().map(|e| e.id).collect();
            return Err(format!(
                "unknown experiment {w}; known: {}",
                known.join(", ")
            ));
        }
    }
    for t in &args.targets {
        t.parse::<MappingKind>()?;
    }
    cfg.only_experiments = args.workloads.clone();
    cfg.only_mappings = args.targets.clone();
    if let Some(t) = args.trials {
        if !(2..=100).contains(&t) {
            return Err(format!("--trials must be 2..=100, got {t}"));
        }
        cfg.trials = t;
        cfg.filebench.trials = t;
        cfg.filebench.extra_trials = t;
    }
    // Checked in `study::run`, before this config.
    cfg.filebench.extra_trials = args.extra_trials.unwrap_or(cfg.filebench.extra_trials);
    if let Some(s) = args.seconds.filter(|s| s.is_finite() && *s > 0.0) {
        cfg.filebench.run_seconds = s;
    }
    if let Some(s) = args.warmup.filter(|s| s.is_finite() && *s >= 0.0) {
        cfg.filebench.warmup_seconds = s;
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
        filemap2021::NAME,
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
        println!("finding: {}: {}", f.statement, f.label());
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
    if !result.failures.is_empty() {
        eprintln!(
            "nvmfs study: {} experiment run(s) failed (see report.md)",
            result.failures.len()
        );
        return 1;
    }
    0
}
