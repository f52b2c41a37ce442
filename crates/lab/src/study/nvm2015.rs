//! Seed 000, "An Empirical Study of File Systems on NVM" (MSST 2015): the Filebench
//! workloads (Table I; Figs. 2-4), the application workloads (TPC-C, YCSB A-F; Figs. 5-11)
//! and the findings a run can check.

use super::database::{self, TpccWorkload, YcsbWorkload};
use super::findings::{lat, r, Finding};
use super::workload::{FilebenchWorkload, Size, StudyWorkload, WorkloadConfig};
use super::{StudyDef, StudyResult};
use crate::filebench::{Personality, PersonalityConfig, SizeDist};
use crate::tpcc::Scale;
use std::fmt::Write as _;

/// The study as `nvmfs study nvm-2015` runs it.
pub const STUDY: StudyDef = StudyDef {
    name: "nvm-2015",
    title: "Filebench and databases on nvmfs and kernel file systems",
    config: super::StudyConfig::for_size,
    targets: &super::targets::CATALOGUE,
    emulation,
    workloads: all_workloads,
    findings,
    intro,
};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// Directory width that gives `depth` = ln(files)/ln(width) at the paper's
/// file count. Scaled runs keep the width (files per directory), which is
/// what the depth experiment is about, so their depth is lower.
fn width_for_depth(paper_files: usize, depth: f64) -> f64 {
    if depth < 1.0 {
        // Filebench's flat directory: every file in one directory.
        1_000_000.0
    } else {
        ((paper_files as f64).ln() / depth).exp().round()
    }
}

/// Table I, scaled by `size`, with 50 threads as in the paper. File sizes
/// are Gamma(1.5) as in the filebench of 2015 (before 1.5).
pub fn workloads(size: Size) -> Vec<StudyWorkload> {
    let div = size.divisor();
    let make = |id: &str, figure, p, files: usize, depth: Option<f64>, mean, append| {
        let mut c = PersonalityConfig::defaults(p);
        c.files = (files / div).max(100);
        c.mean_file_size_bytes = mean;
        c.append_size_bytes = append;
        c.iosize_bytes = MIB;
        c.threads = 50;
        c.size_dist = SizeDist::Gamma;
        if let Some(d) = depth {
            c.dir_width = width_for_depth(files, d);
        }
        StudyWorkload {
            id: id.to_string(),
            figure,
            config: WorkloadConfig::Filebench(FilebenchWorkload {
                paper_depth: depth,
                paper_files: files,
                personality: c,
            }),
        }
    };
    let wp = |id: &str, depth| {
        make(
            id,
            "Fig. 3",
            Personality::Webproxy,
            500_000,
            Some(depth),
            32 * KIB,
            32 * KIB,
        )
    };
    let mut fileserver = make(
        "fileserver",
        "Fig. 2",
        Personality::Fileserver,
        100_000,
        Some(3.8),
        128 * KIB,
        16 * KIB,
    );
    // The paper's 3.8 is filebench's default width of 20 at 100K files
    // (ln 100000 / ln 20 = 3.84); keep that width exactly.
    fileserver.personality_mut().expect("filebench").dir_width = 20.0;
    vec![
        fileserver,
        wp("webproxy-d0.7", 0.7),
        wp("webproxy-d2.1", 2.1),
        wp("webproxy-d3.4", 3.4),
        make(
            "webserver",
            "Fig. 4",
            Personality::Webserver,
            500_000,
            Some(2.5),
            32 * KIB,
            8 * KIB,
        ),
        // Not in the paper; the targets include it. Filebench defaults
        // (1,000 files of 16 KiB in one directory, fsync after appends), scaled
        // like the rest but never below the default's 1,000 files.
        {
            let mut w = make(
                "varmail",
                "extra",
                Personality::Varmail,
                1_000 * div,
                None,
                16 * KIB,
                16 * KIB,
            );
            w.personality_mut().expect("filebench").threads = 16;
            w
        },
    ]
}

/// The paper's YCSB input loads (Section IV.E), ops/s: A, B, C and (not stated; as A) F at
/// 20K, D at 15K, E at 5K.
pub fn ycsb_paper_load(letter: char) -> f64 {
    match letter {
        'd' => 15_000.0,
        'e' => 5_000.0,
        _ => 20_000.0,
    }
}

/// Client threads of the database workloads: the paper used 8 on 8 CPUs; here one per
/// core of this machine's 2, so the offered loads are the paper's scaled by 2/8.
const DB_THREADS: usize = 2;

/// Seed 000's application workloads (Figs. 5-11) on SQLite, scaled by `size`: YCSB with 1/1600
/// (quick), 1/160 (default) or 1/16 (full) of the paper's 16 million records, TPC-C with one
/// warehouse (the paper: 400), whose items and customers are cut to a tenth in a quick run.
pub fn database_workloads(size: Size) -> Vec<StudyWorkload> {
    let records = match size {
        Size::Quick => 10_000,
        Size::Default => 100_000,
        Size::Full => 1_000_000,
    };
    let load_scale = DB_THREADS as f64 / 8.0;
    let mut out = vec![StudyWorkload {
        id: "tpcc".into(),
        figure: "Fig. 5",
        config: WorkloadConfig::Tpcc(TpccWorkload {
            warehouses: if size == Size::Full { 4 } else { 1 },
            terminals: DB_THREADS,
            scale: match size {
                Size::Quick => Scale {
                    items: 10_000,
                    customers_per_district: 300,
                },
                _ => Scale::SPEC,
            },
            sqlite: database::tpcc_sqlite(),
        }),
    }];
    for (letter, figure) in [
        ('a', "Fig. 6"),
        ('b', "Fig. 7"),
        ('c', "Fig. 8"),
        ('d', "Fig. 9"),
        ('e', "Fig. 10"),
        ('f', "Fig. 11"),
    ] {
        out.push(StudyWorkload {
            id: format!("ycsb-{letter}"),
            figure,
            config: WorkloadConfig::Ycsb(YcsbWorkload {
                letter,
                records,
                threads: DB_THREADS,
                fixed_load_ops_per_sec: ycsb_paper_load(letter) * load_scale,
                paper_load_ops_per_sec: ycsb_paper_load(letter),
                max_scan_length: 100,
                engine: database::Engine::Sqlite(database::ycsb_sqlite(records)),
            }),
        });
    }
    out
}

/// Every workload of the study: Filebench (Figs. 2-4 and varmail), then the databases.
pub fn all_workloads(size: Size) -> Vec<StudyWorkload> {
    let mut w = workloads(size);
    w.extend(database_workloads(size));
    w
}

/// The findings of Section IV (and the summary) that Figs. 2-4 support.
pub fn findings() -> Vec<Finding> {
    vec![
        Finding {
            id: "direct-access-beats-page-cache",
            statement: "Direct access (XIP, no page cache) beats buffered file systems",
            paper_evidence: "Fig. 2: PMFS outperformed ext2-buf, ext3-buf, ext4-buf and xfs-buf-4 by 1.3x, 2x, 1.5x and 2.2x on fileserver; Fig. 4: buffered configurations 60-70% below PMFS on webserver",
            ratios: vec![
                r("fileserver", "nvmfs", "ext2", Some(1.3), true),
                r("fileserver", "nvmfs", "ext3", Some(2.0), true),
                r("fileserver", "nvmfs", "ext4", Some(1.5), true),
                r("fileserver", "nvmfs", "xfs", Some(2.2), true),
                r("webserver", "nvmfs", "ext4", Some(1.0 / 0.35), true),
            ],
            caveat: "nvmfs stands in for PMFS; the kernel file systems here sit on a loop device with direct I/O over tmpfs, not a 2015 ramdisk driver",
            no_difference: false,
        },
        Finding {
            id: "ext2-collapses-on-flat-directory",
            statement: "ext2 collapses on one flat directory of many files; hashed directories (ext3/ext4) do not, and ext2 recovers with depth",
            paper_evidence: "Fig. 3: at depth 0.7 (500K files in one directory) ext3-xip was 100x ext2-buf; at depths 2.1 and 3.4 ext2 variants beat ext3",
            ratios: vec![
                r("webproxy-d0.7", "ext2", "ext3", Some(0.01 * 1.15), false),
                r("webproxy-d3.4", "ext2", "ext3", None, true),
            ],
            caveat: "the flat directory holds 1/50 (quick) or 1/10 (default) of the paper's 500K files, so ext2's linear scans are that much shorter; run --full for the paper's size",
            no_difference: false,
        },
        Finding {
            id: "nvmfs-hashed-directories-hold-up-flat",
            statement: "A PM file system with hashed directories avoids PMFS's collapse on the flat directory",
            paper_evidence: "Fig. 3: PMFS was 41-45x below ext3-xip at depth 0.7 (linear directories, one allocation lock)",
            ratios: vec![r("webproxy-d0.7", "nvmfs", "ext3", Some(1.0 / 43.0 * 1.15), true)],
            caveat: "the paper's ratio is PMFS's; nvmfs is expected to go the other way",
            no_difference: false,
        },
        Finding {
            id: "delalloc-hurts-many-small-files",
            statement: "Delayed allocation hurts workloads that allocate many small files",
            paper_evidence: "Fig. 3: ext4-no-del was 1.6x ext4-buf on webproxy at depth 0.7 (500K files of 32K)",
            ratios: vec![r("webproxy-d0.7", "ext4-nodelalloc", "ext4", Some(1.6), true)],
            caveat: "ext4's delayed allocation has changed a lot since Linux 3.11, and with few files per trial fewer allocations are pending",
            no_difference: false,
        },
        Finding {
            id: "delalloc-helps-fileserver",
            statement: "Delayed allocation helps when a workload allocates data for fewer, larger files",
            paper_evidence: "Fig. 2: with nodelalloc the ext3-ext4 gap fell from 34% to 23% on fileserver (ext4-buf about 1.09x ext4-no-del)",
            ratios: vec![r("fileserver", "ext4", "ext4-nodelalloc", Some(1.34 / 1.23), true)],
            caveat: "a 9% effect: inside the noise of short trials on a shared 2-core machine",
            no_difference: false,
        },
        Finding {
            id: "more-xfs-ags-help-fileserver",
            statement: "More XFS allocation groups help allocation-heavy workloads",
            paper_evidence: "Fig. 2: 464 AGs instead of 4 improved fileserver by 31%; Fig. 3: webproxy by 13-35%",
            ratios: vec![
                r("fileserver", "xfs-ag", "xfs", Some(1.31), true),
                r("webproxy-d2.1", "xfs-ag", "xfs", Some(1.24), true),
            ],
            caveat: "AG parallelism needs parallel allocators; this machine has 2 cores (the paper 8), and a small device caps the AG count",
            no_difference: false,
        },
        Finding {
            id: "data-journaling-is-expensive",
            statement: "Journaling data (ext3 data=journal) is expensive on fast media",
            paper_evidence: "Fig. 2: ext3-data was 5x below PMFS and 2.5x below ext3-buf on fileserver (kjournald used 50% of CPU)",
            ratios: vec![
                r("fileserver", "ext3-journal", "ext3", Some(0.4), false),
                r("fileserver", "nvmfs", "ext3-journal", Some(5.0), true),
            ],
            caveat: "",
            no_difference: false,
        },
        Finding {
            id: "read-mostly-narrows-differences",
            statement: "On a read-mostly workload buffered configurations are within 10-16% of each other, and delayed allocation makes no difference",
            paper_evidence: "Fig. 4: ext2/3/4 buffered and ext3-data close to each other; ext4-buf and ext4-no-del close",
            ratios: vec![
                r("webserver", "ext4-nodelalloc", "ext4", Some(1.0), true),
                r("webserver", "ext2", "ext4", Some(1.0), true),
            ],
            caveat: "checked as 'no significant difference' rather than a direction",
            no_difference: true,
        },
        Finding {
            id: "direct-access-ahead-on-tpcc",
            statement: "On TPC-C direct access is 13-22% ahead of buffered file systems and about 32% ahead of data journaling",
            paper_evidence: "Fig. 5 (MySQL, 400 warehouses): XIP file systems within 5% of each other and 13-22% above the ext2, ext3, ext4 and XFS variants; 32% above ext3-data",
            ratios: vec![
                r("tpcc", "nvmfs", "ext2", Some(1.18), true),
                r("tpcc", "nvmfs", "ext3", Some(1.18), true),
                r("tpcc", "nvmfs", "ext4", Some(1.18), true),
                r("tpcc", "nvmfs", "xfs", Some(1.18), true),
                r("tpcc", "nvmfs", "ext3-journal", Some(1.32), true),
            ],
            caveat: "SQLite stands in for MySQL/InnoDB (one writer at a time, WAL synced at every commit), with one warehouse instead of 400; the paper's client latency included a 12-15 us network hop, which narrowed its differences",
            no_difference: false,
        },
        Finding {
            id: "ycsb-updates-slow-reads-on-buffered",
            statement: "On YCSB A and B buffered configurations see 27-36% more READ latency than direct access at a fixed load, and 19-20% more UPDATE latency on A",
            paper_evidence: "Figs. 6-7 (MongoDB, memory-mapped data files): READ latency of ext2/3/4-buf and xfs-buf 27-36% above PMFS on A; UPDATE 19-20% above",
            ratios: vec![
                lat("ycsb-a", "READ", "ext2", "nvmfs", Some(1.31), true),
                lat("ycsb-a", "READ", "ext3", "nvmfs", Some(1.31), true),
                lat("ycsb-a", "READ", "ext4", "nvmfs", Some(1.31), true),
                lat("ycsb-a", "READ", "xfs", "nvmfs", Some(1.31), true),
                lat("ycsb-a", "UPDATE", "ext4", "nvmfs", Some(1.2), true),
                lat("ycsb-b", "READ", "ext4", "nvmfs", None, true),
            ],
            caveat: "SQLite with a mapped database stands in for MongoDB; its READ path is a B-tree walk over the mapping, and its updates go to a WAL through write(2) rather than stores into the mapping",
            no_difference: false,
        },
        Finding {
            id: "ycsb-read-only-alike",
            statement: "On YCSB C (100% reads) file systems are within 8% of each other",
            paper_evidence: "Fig. 8: at most 8% between a few buffered configurations and PMFS; the fio mmap 1 KiB load benchmark showed the same (page faults amortised)",
            ratios: vec![
                lat("ycsb-c", "READ", "ext4", "nvmfs", Some(1.0), true),
                lat("ycsb-c", "READ", "ext2", "nvmfs", Some(1.0), true),
                lat("ycsb-c", "READ", "xfs", "nvmfs", Some(1.0), true),
            ],
            caveat: "checked as 'no significant difference'",
            no_difference: true,
        },
        Finding {
            id: "ycsb-d-alike",
            statement: "On YCSB D (95% reads of the latest records, 5% inserts) all file systems are alike",
            paper_evidence: "Fig. 9: XIP and buffered file systems had similar READ and INSERT latencies at 15K ops/s; only ext3-data was 34% worse on INSERT",
            ratios: vec![
                lat("ycsb-d", "READ", "ext4", "nvmfs", Some(1.0), true),
                lat("ycsb-d", "INSERT", "ext4", "nvmfs", Some(1.0), true),
                lat("ycsb-d", "READ", "ext2", "nvmfs", Some(1.0), true),
            ],
            caveat: "checked as 'no significant difference'; inserts into SQLite's WAL are appends through write(2) on the kernel file systems, as MongoDB's journal writes were",
            no_difference: true,
        },
        Finding {
            id: "ycsb-d-data-journal-inserts",
            statement: "Data journaling (ext3 data=journal) makes YCSB D's inserts slower",
            paper_evidence: "Fig. 9: ext3-data 34% worse on INSERT than the other file systems",
            ratios: vec![
                lat("ycsb-d", "INSERT", "ext3-journal", "nvmfs", Some(1.34), true),
                lat("ycsb-d", "INSERT", "ext3-journal", "ext3", Some(1.34), true),
            ],
            caveat: "with synchronous=NORMAL SQLite syncs its WAL only at checkpoints, so the journal's extra copy is paid rarely",
            no_difference: false,
        },
        Finding {
            id: "ycsb-e-scans-favour-direct-access",
            statement: "On YCSB E range scans are 2.27-2.42x slower on file systems without direct access",
            paper_evidence: "Fig. 10: SCAN latency 2.27-2.42x PMFS's on every non-XIP configuration (62x more page faults than READ)",
            ratios: vec![
                lat("ycsb-e", "SCAN", "ext4", "nvmfs", Some(2.35), true),
                lat("ycsb-e", "SCAN", "ext2", "nvmfs", Some(2.35), true),
                lat("ycsb-e", "SCAN", "xfs", "nvmfs", Some(2.35), true),
            ],
            caveat: "SQLite's scans read the mapping through a cursor; once mapped, the kernel's pages fault only on first touch",
            no_difference: false,
        },
    ]
}

/// How a run here differs from the paper's testbed.
fn emulation() -> Vec<String> {
    vec![
        "Persistent memory is emulated with DRAM: the nvmfs image and the kernel file systems' loop-device backing files live in the shm dir (tmpfs).".into(),
        "Kernel file systems run on a loop device with direct I/O over a tmpfs file (the paper used a 58 GB ramdisk on Linux 3.11). Their data is cached in the page cache as on any block device; nvmfs keeps no page cache.".into(),
        "nvmfs flushes and fences every update (durable on return); the kernel targets are not asked to sync except by varmail's fsync.".into(),
        "nvmfs stands in for the paper's PMFS (direct access, in-place updates, fine-grained journaling). The paper's XIP variants (ext2-xip, ext3-xip) need DAX on a pmem device, which a loop device cannot provide.".into(),
        "The paper's machine had 8 CPUs; this run uses the CPUs listed here with 50 filebench threads as in the paper.".into(),
    ]
}

/// The opening paragraphs of report.md: what was run and how.
fn intro(result: &StudyResult) -> String {
    let cfg = &result.config;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Reproduces \"An Empirical Study of File Systems on NVM\" (MSST 2015): its Filebench figures (Figs. 2-4) and its application figures (Figs. 5-11). \
         `{}` run: file counts are 1/{} of the paper's Table I, everything else (file sizes, directory widths, \
         I/O sizes, 50 threads, flowop order) as in the paper. {} trials per workload and target, the first \
         discarded{}{}; {} s warm-up and {} s measured each; kernel file systems are made fresh for every workload \
         and remounted before every trial. Total time {:.0} s{}.\n",
        cfg.size.name(),
        cfg.size.divisor(),
        cfg.trials,
        match cfg.extra_trials {
            0 => String::new(),
            n => format!(
                ", and a Filebench cell runs up to {n} more while its kept trials' 95% interval is wider than \
                 10% of their mean (seed 001's rule; results.csv's n counts the kept trials)"
            ),
        },
        if cfg.hold_placement {
            "; each counted trial waits (up to 15 s) while the host has placed the two CPUs farther apart than \
             the nearest placement seen, and one run there anyway is set aside and run again (at most as many \
             as the trials); while no near placement has been seen, the waits look for one, for at most 60 s \
             in all (docs/LAB.md)"
        } else {
            ""
        },
        cfg.warmup_seconds,
        cfg.run_seconds,
        result.wall_seconds,
        if result.interrupted { " (interrupted: partial results)" } else { "" }
    );
    if result.workloads.iter().any(|w| w.personality().is_none()) {
        let _ = writeln!(
            s,
            "The application workloads (Figs. 5-11) run on SQLite, in-process on every target: on nvmfs through \
             the nvmfs SQLite VFS (no system call on the data path; the mapped database read in place), on the \
             others as plain files. TPC-C stands in for the paper's MySQL run (WAL synced at every commit, as \
             MySQL fsyncs its log); YCSB for its MongoDB run (WAL synced at checkpoints, the database mapped, \
             as MongoDB's journal and memory-mapped files). The database is loaded once per workload and target; \
             {} trials follow, each after a remount, the first discarded; a YCSB trial runs {} s flat out (the \
             ops/s compared) and then {} s at the workload's fixed offered load (the latencies of Figs. 6-11); a \
             TPC-C trial runs {} s (tpmC).\n",
            cfg.db.trials,
            cfg.db.run_seconds,
            cfg.db.run_seconds,
            cfg.db.run_seconds * 2.0
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_one_parameters_scale_files_but_keep_everything_else() {
        let full = workloads(Size::Full);
        let quick = workloads(Size::Quick);
        assert_eq!(full.len(), quick.len());
        let fs = full[0].personality().unwrap();
        assert_eq!((fs.files, fs.threads), (100_000, 50));
        assert_eq!(fs.mean_file_size_bytes, 128 * KIB);
        assert_eq!(fs.append_size_bytes, 16 * KIB);
        // Depth 3.8 at 100K files is filebench's default width of 20.
        assert_eq!(fs.dir_width, 20.0);
        let wp07 = full[1].personality().unwrap();
        assert_eq!((wp07.files, wp07.mean_file_size_bytes), (500_000, 32 * KIB));
        assert_eq!(wp07.dir_width, 1_000_000.0);
        let d21 = full[2].personality().unwrap().main_fileset().mean_depth();
        let d34 = full[3].personality().unwrap().main_fileset().mean_depth();
        assert!(
            (d21 - 2.1).abs() < 0.01 && (d34 - 3.4).abs() < 0.01,
            "{d21} {d34}"
        );
        let ws = full[4].personality().unwrap();
        assert!((ws.main_fileset().mean_depth() - 2.5).abs() < 0.01);
        assert_eq!(ws.append_size_bytes, 8 * KIB);
        for (q, f) in quick.iter().zip(&full).filter(|(q, _)| q.figure != "extra") {
            let (q, f) = (q.personality().unwrap(), f.personality().unwrap());
            assert_eq!(q.files * 50, f.files);
            assert_eq!(q.dir_width, f.dir_width);
            assert_eq!(q.mean_file_size_bytes, f.mean_file_size_bytes);
            assert_eq!(q.threads, f.threads);
            q.validate().unwrap();
        }
    }

    #[test]
    fn findings_name_workloads_that_exist() {
        let ids: Vec<String> = all_workloads(Size::Quick)
            .into_iter()
            .map(|w| w.id)
            .collect();
        for f in findings() {
            assert!(!f.ratios.is_empty(), "{}", f.id);
            for r in &f.ratios {
                assert!(
                    ids.iter().any(|i| i == r.workload),
                    "{} {}",
                    f.id,
                    r.workload
                );
            }
        }
    }
}
