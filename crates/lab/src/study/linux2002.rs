//! Seed 001, "Filesystem Performance and Scalability in Linux 2.4.17" (Bryant et al., 2002):
//! filemark's small-file and large-file workloads against threads (Figs. 1, 2, 6, 7), pgmeter's
//! access specifications against outstanding I/Os per file (Figs. 3-5, 8-10, 12) and AIM7's
//! task sweep (Fig. 11), on the file systems it compared (Ext2, Ext3 ordered and writeback,
//! XFS, ReiserFS and JFS when this kernel has them) plus ext4, btrfs and nvmfs, and the findings of
//! its conclusions a run can check.

use super::findings::{r, scaling, Finding, BEST_KERNEL};
use super::fsbench::{Aim7Workload, FilemarkWorkload, PgmeterWorkload};
use super::targets::{ExtraVariant, TargetPlan};
use super::workload::{Size, StudyWorkload, WorkloadConfig};
use super::{StudyConfig, StudyDef, StudyResult};
use crate::aim7::Aim7Config;
use crate::kernel::Variant;
use crate::pgmeter::AccessSpec;
use crate::postmark::FilemarkConfig;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The study as `nvmfs study linux-2002` runs it.
pub const STUDY: StudyDef = StudyDef {
    name: "linux-2002",
    title: "Filemark, pgmeter and AIM7 on nvmfs and Linux file systems",
    config,
    targets: &TARGETS,
    emulation,
    workloads,
    findings,
    intro,
};

/// The paper's file systems (Section 2), ext4 (ext3's successor) and btrfs (today's
/// copy-on-write design): Ext2, Ext3 in its two journaling modes the paper reports, XFS, and
/// ReiserFS (notail) and JFS when this kernel has them; nvmfs (in-process, through FUSE and under `nvmfs run`) was not in the paper.
pub const TARGETS: TargetPlan = TargetPlan {
    nvmfs_paper_name: None,
    kernel: Some(&[
        ("ext2", Some("Ext2")),
        ("ext3", Some("Ext3 ordered")),
        ("ext3-writeback", Some("Ext3 writeback")),
        ("xfs", Some("XFS")),
        ("ext4", None),
        ("btrfs", None),
    ]),
    extra: extra_file_systems,
    run: true,
};

/// ReiserFS and JFS: not in the lab's catalogue (seed 000 did not run them), run when this
/// kernel has them.
pub fn extra_file_systems() -> Vec<ExtraVariant> {
    vec![
        ExtraVariant {
            variant: Variant {
                name: "reiserfs".into(),
                paper_name: Some("ReiserFS".into()),
                fs_type: "reiserfs".into(),
                mkfs_args: vec!["mkfs.reiserfs".into(), "-q".into(), "-f".into()],
                mount_options: "notail".into(),
                description: "ReiserFS 3.6 mounted notail, as the paper ran it".into(),
            },
            history: "ReiserFS was deprecated in Linux 5.18 and removed in 6.13",
        },
        ExtraVariant {
            variant: Variant {
                name: "jfs".into(),
                paper_name: Some("JFS".into()),
                fs_type: "jfs".into(),
                mkfs_args: vec!["mkfs.jfs".into(), "-q".into()],
                mount_options: String::new(),
                description: "JFS defaults (4 KiB blocks)".into(),
            },
            history:
                "JFS is in mainline Linux but optional, and kernels are often built without it",
        },
    ]
}

/// Trials (filemark's transaction phases, pgmeter's tests, AIM7's sweeps), pgmeter's phase
/// lengths and the baseline: Ext2, to which the paper normalised its AIM7 results.
pub fn config(size: Size, out_dir: PathBuf) -> StudyConfig {
    let (trials, warmup, run) = match size {
        Size::Quick => (4, 0.1, 0.5),
        Size::Default => (5, 1.0, 4.0),
        // The paper: 12 filemark phases; pgmeter 30 s of warm-up and 5 minutes.
        Size::Full => (8, 5.0, 30.0),
    };
    StudyConfig {
        trials,
        warmup_seconds: warmup,
        run_seconds: run,
        baseline: "ext2".into(),
        seed: 2002,
        ..StudyConfig::for_size(size, out_dir)
    }
}

/// filemark's thread counts (the paper: 1, 8, 64, 128). Every size has 1 and 16, the
/// loads the findings compare.
pub fn filemark_threads(size: Size) -> &'static [u32] {
    match size {
        Size::Quick => &[1, 4, 16],
        Size::Default => &[1, 4, 16, 64],
        Size::Full => &[1, 8, 16, 64, 128],
    }
}

/// pgmeter's outstanding I/Os per file (the paper: 1, 4, 16, 64).
pub fn pgmeter_outstanding(size: Size) -> &'static [usize] {
    match size {
        Size::Quick => &[1, 4, 16],
        Size::Default | Size::Full => &[1, 4, 16, 64],
    }
}

/// The paper's filemark file count on its small system (Figs. 1-2).
const PAPER_FILES: u32 = 10_000;

/// filemark at every thread count, small files (Fig. 1) then large (Fig. 2): the paper's
/// small-system parameters (10,000 files in 10 subdirectories, bias read 75%, bias create
/// 50%), a fifth of the files in a quick run; 5 transactions per file in a phase (10 in a
/// full run). The study runs no warm-up transactions (see [`super::fsbench`]).
fn filemark_workloads(size: Size) -> Vec<StudyWorkload> {
    let (files, per_file) = match size {
        Size::Quick => (PAPER_FILES / 5, 5),
        Size::Default => (PAPER_FILES, 5),
        Size::Full => (PAPER_FILES, 10),
    };
    let mut out = Vec::new();
    for (kind, figure, make) in [
        (
            "small",
            "Fig. 1",
            FilemarkConfig::small_file as fn(u32) -> FilemarkConfig,
        ),
        ("large", "Fig. 2", FilemarkConfig::large_file),
    ] {
        for &threads in filemark_threads(size) {
            let transactions = files * per_file;
            let config = FilemarkConfig {
                files,
                transactions,
                warmup_transactions: 0,
                ..make(threads)
            };
            out.push(StudyWorkload {
                id: format!("filemark-{kind}-t{threads}"),
                figure,
                config: WorkloadConfig::Filemark(FilemarkWorkload {
                    config,
                    paper_files: PAPER_FILES,
                }),
            });
        }
    }
    out
}

/// The record size of pgmeter's sequential tests on the paper's multiprocessors.
const SEQ_RECORD: u64 = 64 << 10;
/// pgmeter's test files: one per core of a 2-core machine (the paper: one per disk and
/// CPU, 1, 4 and 28 files).
const PGMETER_FILES: usize = 2;

/// pgmeter's five access specifications at every outstanding-I/O count, two files of
/// 64 MiB (quick), 256 MiB (default) or the paper's 2 GiB (full).
fn pgmeter_workloads(size: Size) -> Vec<StudyWorkload> {
    let file_size = match size {
        Size::Quick => 64 << 20,
        Size::Default => 256 << 20,
        Size::Full => 2 << 30,
    };
    let specs: [(&str, &'static str, AccessSpec); 5] = [
        (
            "seqread",
            "Figs. 3, 8",
            AccessSpec::sequential_read(SEQ_RECORD),
        ),
        (
            "seqwrite",
            "Fig. 9",
            AccessSpec::sequential_write(SEQ_RECORD),
        ),
        ("fileserver", "Figs. 4, 10", AccessSpec::file_server()),
        ("oltp", "Fig. 5", AccessSpec::oltp_8k()),
        ("webserver", "Fig. 12", AccessSpec::web_server()),
    ];
    let mut out = Vec::new();
    for (name, figure, spec) in specs {
        for &outstanding in pgmeter_outstanding(size) {
            out.push(StudyWorkload {
                id: format!("pgmeter-{name}-o{outstanding}"),
                figure,
                config: WorkloadConfig::Pgmeter(PgmeterWorkload {
                    spec: spec.clone(),
                    files: PGMETER_FILES,
                    file_size_bytes: file_size,
                    outstanding,
                }),
            });
        }
    }
    out
}

/// AIM7's disk mix (AIM7's defaults: 1 MiB files, lists of 100 jobs) over 1, 2, 4, ...
/// tasks: up to 8 with subruns of 1 s (quick), 32 of 2 s (default), 256 of 10 s (full). The
/// paper went to 500 processes and more; each of its subruns lasted until every task's list
/// was done (see [`super::fsbench`] for the time bound).
fn aim7_workload(size: Size) -> StudyWorkload {
    let (max_tasks, period) = match size {
        Size::Quick => (8, 1.0),
        Size::Default => (32, 2.0),
        Size::Full => (256, 10.0),
    };
    StudyWorkload {
        id: "aim7".into(),
        figure: "Fig. 11",
        config: WorkloadConfig::Aim7(Aim7Workload {
            config: Aim7Config {
                period_seconds: Some(period),
                ..Aim7Config::new(max_tasks)
            },
        }),
    }
}

/// Every workload: filemark, pgmeter, then AIM7.
pub fn workloads(size: Size) -> Vec<StudyWorkload> {
    let mut w = filemark_workloads(size);
    w.extend(pgmeter_workloads(size));
    w.push(aim7_workload(size));
    w
}

const SMALL_SYSTEM: &str = "the paper's conclusions are from disk-bound runs (one IDE disk on the small system, 4 to 120 disks on the others) on Linux 2.4.17; here every file system sits on RAM and Linux's current drivers, so what differs is the CPU cost of each file system's code paths";

/// The findings of the paper's Section 7 (and of Section 6 that lead to them), plus nvmfs
/// against the best kernel file system on each benchmark.
pub fn findings() -> Vec<Finding> {
    let mut f = vec![
        Finding {
            id: "ext2-beats-ext3",
            statement: "Ext2 performs better than Ext3",
            paper_evidence: "Conclusion 1; Fig. 1: Ext2 above Ext3 on the small system's small-file filemark; Fig. 11: Ext3 at about 65% of Ext2 on AIM7",
            ratios: vec![
                r("filemark-small-t1", "ext2", "ext3", None, true),
                r("filemark-large-t1", "ext2", "ext3", None, true),
                r("aim7", "ext2", "ext3", Some(1.0 / 0.65), true),
            ],
            caveat: "current kernels mount ext2 with the ext4 driver, so the two differ by the journal alone, and a journal on RAM costs CPU, not disk seeks",
            no_difference: false,
        },
        Finding {
            id: "ext3-journal-modes-alike",
            statement: "Ext3 with data=writeback performs the same as with data=ordered in most cases",
            paper_evidence: "Conclusion 1; Figs. 1-7: the two Ext3 modes mostly overlap",
            ratios: vec![
                r("filemark-small-t1", "ext3-writeback", "ext3", Some(1.0), true),
                r("pgmeter-fileserver-o1", "ext3-writeback", "ext3", Some(1.0), true),
                r("pgmeter-oltp-o1", "ext3-writeback", "ext3", Some(1.0), true),
            ],
            caveat: "checked as 'no significant difference'",
            no_difference: true,
        },
        Finding {
            id: "reiserfs-best-for-small-files",
            statement: "For small files and file-system-operation-intensive workloads ReiserFS is often the best",
            paper_evidence: "Conclusion 2; Fig. 1: ReiserFS scales with threads and is significantly above Ext2 and Ext3 on the small-file filemark",
            ratios: vec![
                r("filemark-small-t16", "reiserfs", "ext2", None, true),
                r("filemark-small-t16", "reiserfs", "ext3", None, true),
            ],
            caveat: "ReiserFS runs only on kernels that still have it (removed in Linux 6.13)",
            no_difference: false,
        },
        Finding {
            id: "pgmeter-alike-on-small-system",
            statement: "For file-I/O-intensive workloads (pgmeter) all file systems are equivalent on a small system",
            paper_evidence: "Conclusion 3; Section 6.1: on the uniprocessor every file system drove its one disk at about 2200 I/Os per second, so all pgmeter tests overlapped",
            ratios: vec![
                r("pgmeter-fileserver-o1", "xfs", "ext2", Some(1.0), true),
                r("pgmeter-fileserver-o1", "ext3", "ext2", Some(1.0), true),
                r("pgmeter-webserver-o1", "xfs", "ext2", Some(1.0), true),
                r("pgmeter-oltp-o1", "xfs", "ext2", Some(1.0), true),
            ],
            caveat: "checked as 'no significant difference'; the paper's equivalence came from a saturated disk, and a RAM-backed device never saturates, so CPU path lengths show",
            no_difference: true,
        },
        Finding {
            id: "xfs-behind-on-filemark",
            statement: "XFS (and JFS) are poor choices for filemark-like workloads on small systems",
            paper_evidence: "Conclusion 4; Figs. 1-2: XFS and JFS in the lower group at every thread count on the small system",
            ratios: vec![
                r("filemark-small-t1", "ext2", "xfs", None, true),
                r("filemark-large-t1", "ext2", "xfs", None, true),
                r("filemark-small-t1", "ext3", "xfs", None, true),
            ],
            caveat: SMALL_SYSTEM,
            no_difference: false,
        },
        Finding {
            id: "xfs-good-at-sequential-reads",
            statement: "On small SMP systems XFS (and JFS) are good choices for sequential reads",
            paper_evidence: "Conclusion 5; Fig. 3: XFS and JFS ahead on the 4-CPU system's 64 KB sequential reads, more so as outstanding I/Os grow",
            ratios: vec![
                r("pgmeter-seqread-o16", "xfs", "ext2", None, true),
                r("pgmeter-seqread-o16", "xfs", "ext3", None, true),
            ],
            caveat: "sequential reads of a file cached in RAM are memory copies on every file system; XFS's extents and read-ahead paid off on disks",
            no_difference: false,
        },
        Finding {
            id: "jfs-trails-on-filemark",
            statement: "JFS has difficulty scaling with threads on filemark",
            paper_evidence: "Conclusion 6; Figs. 1, 6: JFS improves little with threads and trails the other file systems",
            ratios: vec![
                r("filemark-small-t16", "ext2", "jfs", None, true),
                scaling("filemark-small-t16", "filemark-small-t1", "jfs", None, false),
            ],
            caveat: "JFS runs only on kernels built with it",
            no_difference: false,
        },
        Finding {
            id: "ext3-journal-limits-thread-scaling",
            statement: "Ext3's journal keeps its filemark throughput from growing with threads, as Ext2's does",
            paper_evidence: "Section 6.2, trend 2; Figs. 6-7: Ext3 in the second group at 64 and 128 threads, level with Ext2 at 1 and 8",
            ratios: vec![
                r("filemark-small-t16", "ext2", "ext3", None, true),
                r("filemark-large-t16", "ext2", "ext3", None, true),
                scaling("filemark-small-t16", "filemark-small-t1", "ext2", None, true),
            ],
            caveat: "this machine has 2 cores: 16 threads can at most double 1 thread's rate, and the 2.4 kernel's Big Kernel Lock that serialised Ext3's journal is gone",
            no_difference: false,
        },
        Finding {
            id: "xfs-best-at-high-load",
            statement: "XFS performs best under heavy I/O load",
            paper_evidence: "Conclusion 7; Figs. 8, 9: XFS significantly ahead on 64 KB sequential reads and writes on the 28-CPU system; Fig. 12: ahead with 112 files of web-server load, where the others were CPU-bound on spinlocks",
            ratios: vec![
                r("pgmeter-seqread-o16", "xfs", "ext3", None, true),
                r("pgmeter-seqwrite-o16", "xfs", "ext3", None, true),
                r("pgmeter-webserver-o16", "xfs", "ext2", None, true),
                r("pgmeter-webserver-o16", "xfs", "ext3", None, true),
            ],
            caveat: "the paper's advantage came from XFS's lower spinlock contention on 28 CPUs (Table 1); 2 cores cannot contend like 28, and the Big Kernel Lock is gone",
            no_difference: false,
        },
        Finding {
            id: "others-beat-xfs-at-lower-load",
            statement: "When the system is not so busy, other file systems beat XFS on random, variable-size I/O",
            paper_evidence: "Section 6.3, trend 2; Fig. 10: on File Server, Ext3 writeback and ReiserFS best, Ext3 ordered next, XFS last",
            ratios: vec![
                r("pgmeter-fileserver-o1", "ext3-writeback", "xfs", None, true),
                r("pgmeter-fileserver-o1", "ext3", "xfs", None, true),
                r("pgmeter-fileserver-o1", "reiserfs", "xfs", None, true),
            ],
            caveat: SMALL_SYSTEM,
            no_difference: false,
        },
        Finding {
            id: "aim7-ext2-and-xfs-lead",
            statement: "On AIM7 Ext2 and XFS lead, and Ext3 and ReiserFS run at about 65% of Ext2",
            paper_evidence: "Fig. 11: Ext2 and XFS equivalent up to 16 CPUs, XFS's peak 14% above Ext2's at 28; Ext3 and ReiserFS at about 65% of Ext2 and flat (Big Kernel Lock: 85-88% of CPU cycles)",
            ratios: vec![
                r("aim7", "xfs", "ext2", Some(1.14), true),
                r("aim7", "ext3", "ext2", Some(0.65), false),
                r("aim7", "reiserfs", "ext2", Some(0.65), false),
            ],
            caveat: "the paper's AIM7 gaps were lock contention on 2 to 28 CPUs under the Big Kernel Lock; here 2 cores, no BKL, and only AIM7's disk subtests run (the paper's shared mix also computes, forks and pipes)",
            no_difference: false,
        },
    ];
    f.extend(nvmfs_findings());
    f
}

/// nvmfs (not in the paper) against the fastest kernel file system of each workload.
fn nvmfs_findings() -> Vec<Finding> {
    let best = |w| r(w, "nvmfs", BEST_KERNEL, None, true);
    const CAVEAT: &str = "a ratio counts only when the 95% intervals are apart (few kept trials give wide ones); nvmfs makes every operation durable before it returns (flushes and fences), while the kernel file systems write into the page cache and sync only when asked (AIM7's O_SYNC subtests)";
    vec![
        Finding {
            id: "nvmfs-vs-best-kernel-filemark",
            statement: "nvmfs is faster than the best kernel file system on filemark",
            paper_evidence: "not in the paper: nvmfs against the fastest of this run's kernel file systems at each point",
            ratios: vec![
                best("filemark-small-t1"),
                best("filemark-small-t16"),
                best("filemark-large-t1"),
                best("filemark-large-t16"),
            ],
            caveat: CAVEAT,
            no_difference: false,
        },
        Finding {
            id: "nvmfs-vs-best-kernel-pgmeter",
            statement: "nvmfs is faster than the best kernel file system on pgmeter",
            paper_evidence: "not in the paper: nvmfs against the fastest of this run's kernel file systems at each point",
            ratios: vec![
                best("pgmeter-seqread-o16"),
                best("pgmeter-seqwrite-o16"),
                best("pgmeter-fileserver-o1"),
                best("pgmeter-fileserver-o16"),
                best("pgmeter-oltp-o16"),
                best("pgmeter-webserver-o16"),
            ],
            caveat: CAVEAT,
            no_difference: false,
        },
        Finding {
            id: "nvmfs-vs-best-kernel-aim7",
            statement: "nvmfs is faster than the best kernel file system on AIM7's disk subtests",
            paper_evidence: "not in the paper: nvmfs's peak jobs/minute against the best kernel file system's",
            ratios: vec![best("aim7")],
            caveat: CAVEAT,
            no_difference: false,
        },
    ]
}

/// How a run here differs from the paper's testbeds.
fn emulation() -> Vec<String> {
    vec![
        "Disks are emulated with DRAM: the kernel file systems run on loop devices with direct I/O over tmpfs files in the shm dir, nvmfs on an image there. The paper's IDE, SCSI and Fibre Channel disks (1 to 120) are gone, so no run is disk-bound, and file sets cannot be larger than memory as the paper's pgmeter rule asked.".into(),
        "A current Linux instead of 2.4.17: ext2 and ext3 are mounted by the ext4 driver, the Big Kernel Lock and the global runqueue lock the paper measured (Table 1) are gone, XFS's logbufs=8 is now its default and osyncisdsync no longer exists (the paper mounted XFS with both).".into(),
        "nvmfs (not in the paper) flushes and fences every update (durable on return); the kernel file systems write into the page cache and sync only for AIM7's O_SYNC subtests.".into(),
        "pgmeter's outstanding I/Os are threads each issuing one synchronous I/O at a time; filemark's threads and AIM7's tasks are threads of this process (AIM7 forks processes). AIM7 runs its disk subtests only, not the paper's shared multiuser mix.".into(),
        "The paper's systems had 1, 4 and 28 CPUs; this run uses the CPUs listed here.".into(),
    ]
}

/// The opening paragraphs of report.md: what ran, how, and what this machine can show.
fn intro(result: &StudyResult) -> String {
    let cfg = &result.config;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Reproduces \"Filesystem Performance and Scalability in Linux 2.4.17\" (Bryant et al., 2002): \
         filemark (Figs. 1-2, 6-7) against threads, pgmeter (Figs. 3-5, 8-10, 12) against outstanding \
         I/Os per file, and AIM7 (Fig. 11) against tasks, each a line per file system as in the paper. \
         `{}` run: {} trials per cell, the first discarded (filemark: transaction phases after one creation \
         phase, each ending with a remount; pgmeter: tests of {} s after {} s of warm-up, each after a \
         remount; AIM7: whole task sweeps, each after a remount, the headline the peak of the mean curve). \
         Every cell gets a freshly made file system. Total time {:.0} s{}.\n",
        cfg.size.name(),
        cfg.trials,
        cfg.run_seconds,
        cfg.warmup_seconds,
        result.wall_seconds,
        if result.interrupted { " (interrupted: partial results)" } else { "" }
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _ = writeln!(
        s,
        "**Scaling on {cpus} CPUs.** The paper's scaling results come from a uniprocessor, a 4-CPU and a \
         28-CPU ccNUMA machine with up to 120 disks. A {cpus}-CPU machine with RAM-backed devices can show \
         how each file system's per-operation CPU cost and its locking behave from one thread to a few \
         per CPU: past {cpus} threads (or tasks, or outstanding I/Os) more load cannot add throughput, so \
         a curve that keeps rising shows latency being hidden, and one that falls shows contention or \
         cache thrashing. It cannot show the paper's multiprocessor effects: throughput growing with CPUs \
         (Fig. 11's x axis is CPUs, here it is tasks on a fixed {cpus}), the spinlock contention behind \
         XFS's lead on 28 CPUs (Table 1; the Big Kernel Lock no longer exists), or anything disk-bound \
         (the small system's equivalent pgmeter results, the seek patterns that made XFS's extents pay). \
         Read high thread counts as oversubscription, not as a larger machine.\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(size: Size) -> Vec<String> {
        workloads(size).into_iter().map(|w| w.id).collect()
    }

    #[test]
    fn workloads_are_the_papers_benchmarks_at_every_load() {
        for size in [Size::Quick, Size::Default, Size::Full] {
            let all = workloads(size);
            let ids = ids(size);
            let mut unique = ids.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), ids.len(), "unique ids");
            let threads = filemark_threads(size);
            let outstanding = pgmeter_outstanding(size);
            assert_eq!(all.len(), 2 * threads.len() + 5 * outstanding.len() + 1);
            for w in &all {
                match &w.config {
                    WorkloadConfig::Filemark(f) => {
                        let c = &f.config;
                        assert!(w.id.ends_with(&format!("-t{}", c.threads)), "{}", w.id);
                        assert_eq!((c.bias_read, c.bias_create), (Some(75), Some(50)));
                        assert_eq!(c.subdirectories, 10);
                        let (low, high, io) = if w.id.contains("small") {
                            (512, 10_000, 512)
                        } else {
                            (4096, 16_384, 4096)
                        };
                        assert_eq!(
                            (c.size_low, c.size_high, c.read_block_size),
                            (low, high, io)
                        );
                        c.validate().unwrap();
                    }
                    WorkloadConfig::Pgmeter(p) => {
                        assert!(w.id.ends_with(&format!("-o{}", p.outstanding)), "{}", w.id);
                        assert_eq!(p.files, PGMETER_FILES);
                        p.spec.validate().unwrap();
                    }
                    WorkloadConfig::Aim7(a) => {
                        assert_eq!(w.id, "aim7");
                        a.config.validate().unwrap();
                        assert_eq!(a.config.task_counts[0], 1);
                    }
                    other => panic!("unexpected workload {other:?}"),
                }
            }
        }
        // The paper's loads in a full run, fewer in a quick one.
        assert_eq!(filemark_threads(Size::Full).first(), Some(&1));
        assert_eq!(filemark_threads(Size::Full).last(), Some(&128));
        assert!(filemark_threads(Size::Quick).len() < filemark_threads(Size::Full).len());
        let full = workloads(Size::Full);
        let WorkloadConfig::Filemark(f) = &full[0].config else {
            panic!("filemark first")
        };
        assert_eq!(f.config.files, PAPER_FILES);
        let WorkloadConfig::Pgmeter(p) = &full
            .iter()
            .find(|w| w.id.starts_with("pgmeter"))
            .unwrap()
            .config
        else {
            panic!("pgmeter")
        };
        assert_eq!(p.file_size_bytes, 2 << 30);
    }

    #[test]
    fn findings_name_workloads_of_every_size() {
        for size in [Size::Quick, Size::Default, Size::Full] {
            let ids = ids(size);
            for f in findings() {
                assert!(!f.ratios.is_empty(), "{}", f.id);
                for r in &f.ratios {
                    for w in std::iter::once(r.workload).chain(r.b_workload) {
                        assert!(ids.iter().any(|i| i == w), "{} names {w} ({size:?})", f.id);
                    }
                }
            }
        }
    }

    #[test]
    fn findings_name_the_studys_targets() {
        let names: Vec<String> = TARGETS
            .kernel
            .unwrap()
            .iter()
            .map(|(n, _)| n.to_string())
            .chain(extra_file_systems().into_iter().map(|x| x.variant.name))
            .chain(["nvmfs".to_string(), BEST_KERNEL.to_string()])
            .collect();
        for f in findings() {
            for r in &f.ratios {
                for t in [r.a, r.b] {
                    assert!(names.iter().any(|n| n == t), "{}: {t}", f.id);
                }
            }
        }
    }

    #[test]
    fn quick_config_is_small_and_baseline_is_ext2() {
        let q = config(Size::Quick, PathBuf::from("/tmp/x"));
        assert_eq!(q.baseline, "ext2");
        assert!(q.trials >= 3, "at least two kept trials");
        let f = config(Size::Full, PathBuf::from("/tmp/x"));
        assert!(f.run_seconds > q.run_seconds && f.trials > q.trials);
    }
}
