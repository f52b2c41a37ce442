//! `nvmfs study file-mapping-2021`: seed 002, Neal et al., "Rethinking File Mapping for
//! Persistent Memory" (FAST'21), section 4, on nvmfs's own mappings (every
//! [`MappingKind::ALL`]: HashFS, the extent tree, the radix tree, the cuckoo hash, and level
//! hashing, which runs only in section 4.9 as the paper has it).
//!
//! Unlike the Filebench studies, most of this one is not a throughput per target but the CPU
//! cycles of one mapping operation, cold or hot, per mapping ([`crate::mapbench`]). So it has
//! its own run ([`experiments`]: Figs. 5-11 on fresh images in a tmpfs, Fig. 12 through the
//! lab's Filebench engine on an image of each mapping), its own rows ([`MapRow`]), and its own
//! claim checks ([`findings`]), while it reuses the lab's statistics (95% Student-t intervals,
//! the "significant" rule), charts and report conventions ([`report`]).

pub mod experiments;
pub mod findings;
pub mod report;

use super::Size;
use crate::stats::Summary;
use nvmfs::MappingKind;
use serde::Serialize;
use std::path::PathBuf;

/// The name `nvmfs study` takes.
pub const NAME: &str = "file-mapping-2021";

const MIB: u64 = 1 << 20;

/// One experiment of section 4: a figure of the paper.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Experiment {
    /// What `--workload` takes, e.g. `locality`.
    pub id: &'static str,
    pub section: &'static str,
    pub figure: &'static str,
    pub title: &'static str,
}

/// Every experiment, in the order they run. Section 4.9 runs level hashing (`level`, used
/// as-is) through the same Filebench workloads as 4.8; it is the only experiment on `level`.
pub const EXPERIMENTS: [Experiment; 9] = [
    Experiment {
        id: "locality",
        section: "4.1",
        figure: "Fig. 5",
        title: "Locality: single-block reads and appends on a large file",
    },
    Experiment {
        id: "fragmentation",
        section: "4.2",
        figure: "Fig. 6",
        title: "Fragmentation: layout score 1.0 against 0.7 (cold)",
    },
    Experiment {
        id: "file-size",
        section: "4.3",
        figure: "Fig. 7",
        title: "File size (cold)",
    },
    Experiment {
        id: "io-size",
        section: "4.4",
        figure: "Fig. 8",
        title: "I/O size: mapping cycles and their share of the read path (cold)",
    },
    Experiment {
        id: "utilisation",
        section: "4.5",
        figure: "Fig. 9",
        title: "Space utilisation (cold)",
    },
    Experiment {
        id: "concurrency",
        section: "4.6",
        figure: "Fig. 10",
        title: "Concurrency: threads reading and appending one file (hot)",
    },
    Experiment {
        id: "page-cache",
        section: "4.7",
        figure: "Fig. 11",
        title: "Page-cached extent tree against the PM extent tree (hot)",
    },
    Experiment {
        id: "filebench",
        section: "4.8",
        figure: "Fig. 12",
        title: "Filebench fileserver and webproxy (Table 2)",
    },
    Experiment {
        id: "level-hashing",
        section: "4.9",
        figure: "Fig. 12",
        title: "Level hashing as-is against the file mappings on Filebench (Table 2)",
    },
];

/// The mapping of section 4.9 only: level hashing is a general-purpose PM hash table the paper
/// drops into Filebench as-is, not one of the file mappings of 4.1-4.8.
pub const LEVEL: MappingKind = MappingKind::Level;

/// The experiment called `id`.
pub fn experiment(id: &str) -> Option<&'static Experiment> {
    EXPERIMENTS.iter().find(|e| e.id == id)
}

/// The Filebench part's trials (Fig. 12), the first discarded.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FilebenchPhases {
    /// Files per fileset (Table 2: 1,000).
    pub files: usize,
    /// Threads; None: Filebench's defaults (fileserver 50, webproxy 100).
    pub threads: Option<usize>,
    pub trials: usize,
    /// At most this many trials more while the interval is wider than 10% of the mean
    /// (seed 001's rule, `stats::wants_another_trial`).
    pub extra_trials: usize,
    pub warmup_seconds: f64,
    pub run_seconds: f64,
    /// Trials run at a farther CPU placement than the nearest seen are set aside and run
    /// again (filebench/placement.rs).
    pub hold_placement: bool,
}

/// Everything a run of the study needs.
#[derive(Debug, Clone, Serialize)]
pub struct MapStudyConfig {
    pub size: Size,
    /// Samples per measurement (the paper: 10).
    pub trials: usize,
    /// Cold operations whose median is one sample, each after evicting the caches.
    pub cold_reps: usize,
    /// Hot reads per sample (the paper: 100,000), in 5 runs whose median is the sample.
    pub hot_ops: u32,
    /// Hot appends per sample (each maps a new 4 KiB block, trimmed afterwards).
    pub hot_appends: u32,
    /// The large file of 4.1, 4.4, 4.6 and 4.7 (the paper: 1 GB), the largest of 4.3.
    pub big_file_bytes: u64,
    /// The smaller files of 4.3 (the paper: 4 KB, 4 MB; its 4 GB is the large file here).
    pub small_files: Vec<u64>,
    /// 4.4's read sizes.
    pub io_sizes: Vec<u64>,
    /// 4.5's image fullness levels and image size (the paper: 128 GB) and measured file.
    pub fills: Vec<f64>,
    pub util_image_bytes: u64,
    pub util_file_bytes: u64,
    /// 4.6's thread counts and (read, append) pairs per thread per sample.
    pub threads: Vec<usize>,
    pub thread_pairs: u32,
    /// The tree mappings' layout score outside 4.2 (the paper: 0.85, "an average file
    /// system"), and 4.2's fragmented one.
    pub layout_score: f64,
    pub fragmented_score: f64,
    pub filebench: FilebenchPhases,
    /// Only these experiments (ids); empty = all.
    pub only_experiments: Vec<String>,
    /// Only these mappings (names); empty = all of [`MappingKind::ALL`].
    pub only_mappings: Vec<String>,
    pub evict_bytes: usize,
    pub shm_dir: PathBuf,
    pub out_dir: PathBuf,
    pub seed: u64,
}

impl MapStudyConfig {
    /// The settings of `--quick` (about 5 minutes here), `--full` (the paper's 1 GB file and
    /// 10 trials) or neither.
    pub fn for_size(size: Size, out_dir: PathBuf) -> Self {
        let (trials, cold_reps, big, util, appends, pairs) = match size {
            Size::Quick => (10, 21, 128 * MIB, 256 * MIB, 16_384, 4_096),
            Size::Default => (10, 21, 512 * MIB, 1024 * MIB, 50_000, 8_192),
            Size::Full => (10, 31, 1024 * MIB, 4096 * MIB, 100_000, 16_384),
        };
        let filebench = match size {
            Size::Quick => (4, 0.3, 2.0),
            Size::Default => (4, 1.0, 5.0),
            Size::Full => (5, 5.0, 30.0),
        };
        MapStudyConfig {
            size,
            trials,
            cold_reps,
            hot_ops: 100_000,
            hot_appends: appends,
            big_file_bytes: big,
            small_files: vec![4 << 10, 4 * MIB],
            io_sizes: vec![4 << 10, 64 << 10, MIB],
            fills: vec![0.80, 0.90, 0.95],
            util_image_bytes: util,
            util_file_bytes: 4 * MIB,
            threads: vec![1, 2, 4, 8],
            thread_pairs: pairs,
            layout_score: 0.85,
            fragmented_score: 0.7,
            filebench: FilebenchPhases {
                files: 1_000,
                threads: None,
                trials: filebench.0,
                extra_trials: filebench.0,
                warmup_seconds: filebench.1,
                run_seconds: filebench.2,
                hold_placement: true,
            },
            only_experiments: Vec::new(),
            only_mappings: Vec::new(),
            evict_bytes: crate::mapbench::clock::EVICT_BYTES,
            shm_dir: PathBuf::from("/dev/shm"),
            out_dir,
            seed: 2021,
        }
    }

    /// The file mappings of 4.1-4.8 this run measures (level hashing runs in 4.9 only).
    pub fn file_mappings(&self) -> Vec<MappingKind> {
        self.mappings()
            .into_iter()
            .filter(|&m| m != LEVEL)
            .collect()
    }

    /// The mappings this run measures, in [`MappingKind::ALL`]'s order.
    pub fn mappings(&self) -> Vec<MappingKind> {
        MappingKind::ALL
            .into_iter()
            .filter(|m| {
                self.only_mappings.is_empty() || self.only_mappings.contains(&m.to_string())
            })
            .collect()
    }

    /// Whether experiment `id` runs.
    pub fn runs(&self, id: &str) -> bool {
        self.only_experiments.is_empty() || self.only_experiments.iter().any(|e| e == id)
    }

    /// The files of 4.3, smallest first: the small files, then the large one.
    pub fn file_sizes(&self) -> Vec<u64> {
        let mut v = self.small_files.clone();
        v.push(self.big_file_bytes);
        v
    }
}

/// One measurement: a mapping's samples for one operation at one setting of an experiment.
#[derive(Debug, Clone, Serialize)]
pub struct MapRow {
    pub experiment: &'static str,
    pub figure: &'static str,
    /// The experiment's setting, e.g. `score 0.7`, `4 MiB file`, `64 KiB io`, `95% full`.
    pub param: String,
    /// `seq-read`, `rand-read`, `append`, or a Filebench personality.
    pub op: String,
    /// `cold`, `hot`, or `-` (Filebench).
    pub cache: &'static str,
    /// A mapping name, or a study-only variant (`extent+page-cache`).
    pub mapping: String,
    /// `cycles` (of the mapping operation), `read-path cycles`, `mapping share` or `ops/s`.
    pub metric: &'static str,
    pub summary: Summary,
    pub samples: Vec<f64>,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct MapStudyResult {
    pub config: MapStudyConfig,
    pub mappings: Vec<String>,
    pub rows: Vec<MapRow>,
    /// What the run noticed (a fullness level it could not reach, an experiment it skipped).
    pub notes: Vec<String>,
    /// Experiments that failed, with why.
    pub failures: Vec<(String, String)>,
    pub interrupted: bool,
    pub wall_seconds: f64,
    /// What the counter counted: `cycles` or `ns`.
    pub unit: &'static str,
}

impl MapStudyResult {
    /// The row of one measurement.
    pub fn find(&self, sel: &findings::Sel) -> Option<&MapRow> {
        self.rows.iter().find(|r| sel.matches(r))
    }
}

/// A size for labels: `4 KiB`, `64 KiB`, `4 MiB`, `1 GiB`.
pub fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= MIB && b % MIB == 0 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b >> 10),
    }
}

/// The parameter labels the experiments and findings share.
pub mod param {
    use super::size_label;

    pub fn score(s: f64) -> String {
        format!("score {s:.2}")
    }
    pub fn file(bytes: u64) -> String {
        format!("{} file", size_label(bytes))
    }
    pub fn io(bytes: u64) -> String {
        format!("{} io", size_label(bytes))
    }
    pub fn fill(f: f64) -> String {
        format!("{:.0}% full", f * 100.0)
    }
    pub fn threads(n: usize) -> String {
        format!("{n} threads")
    }
}

#[cfg(test)]
mod tests;
