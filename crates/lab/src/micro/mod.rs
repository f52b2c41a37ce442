//! `bench micro`: the same microbenchmarks on nvmfs and on kernel file systems.
//!
//! Every selected workload runs on every target, one after the other (never
//! concurrently, so targets do not compete for the 2 cores). Each workload
//! has an untimed setup, an unrecorded warm-up, and a measured phase of
//! [`MicroConfig::seconds`] in which every op's latency goes into an HDR
//! histogram. Workloads are written once, generic over `MicroFs` (fs.rs), with
//! one implementation doing system calls on a directory and one calling the
//! nvmfs library in-process.

mod data;
pub(crate) mod measure;
mod meta;
mod reference;
mod report;
mod run;
mod session;
mod threads;

pub use measure::Percentiles;
pub use meta::Layout;
pub use report::{format_table, print_table, to_json, write_json, Record, TargetKind};
pub use run::{RUN_NOTE, RUN_PREFIX};
pub use threads::Sharing;

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Deepest tree of the -deep workloads (paths stay well under PATH_MAX).
pub const MAX_TREE_DEPTH: u32 = 64;
/// Most threads of `--threads`.
pub const MAX_THREADS: usize = 64;

/// What to benchmark and how big.
#[derive(Debug, Clone, PartialEq)]
pub struct MicroConfig {
    /// Targets in the order they run and are listed.
    pub targets: Vec<TargetSpec>,
    /// Workload names (see [`all_workloads`]); empty means all.
    pub workloads: Vec<String>,
    /// Length of the measured phase of each workload on each target.
    pub seconds: f64,
    /// Size of the pre-written file of randread/overwrite/seqread/seqwrite,
    /// also the size at which append-4k starts a new file. At least 1 MiB.
    pub file_size_bytes: u64,
    /// Files in the directory of create/stat/open-read/unlink (and in the
    /// tree of their -deep variants).
    pub file_count: usize,
    /// Directory levels above each file in the -deep metadata workloads
    /// (at least 1); the tree's width follows from `file_count`.
    pub tree_depth: u32,
    /// Size of the nvmfs image. It must hold the data file, the append file
    /// and three sets of `file_count` 16 KiB files at the same time.
    pub image_size_bytes: u64,
    /// Where the nvmfs image and the tmpfs directory are created (a tmpfs).
    pub shm_dir: PathBuf,
    /// The `nvmfs` binary that runs the `run:nvmfs` target (`nvmfs run`, and
    /// `nvmfs bench micro` under it); `None` makes that target fail.
    pub nvmfs_bin: Option<PathBuf>,
    /// Also measure the hardware limits (reference.rs); off in a `run:nvmfs` child.
    pub references: bool,
    /// Above 1: every workload also runs with this many threads, on disjoint files and on
    /// a shared file or directory (threads.rs).
    pub threads: usize,
}

impl Default for MicroConfig {
    /// Fits a 2-core, 24 GiB machine: with both default targets about
    /// 1 GiB (tmpfs) + 2.5 GiB (nvmfs image, written only in part) of
    /// /dev/shm at the peak, and roughly 30 s of run time.
    fn default() -> Self {
        MicroConfig {
            targets: vec![TargetSpec::Nvmfs, TargetSpec::Tmpfs],
            workloads: Vec::new(),
            seconds: 1.0,
            file_size_bytes: GIB,
            file_count: 10_000,
            tree_depth: 6,
            image_size_bytes: 2 * GIB + 512 * MIB,
            shm_dir: PathBuf::from("/dev/shm"),
            nvmfs_bin: None,
            references: true,
            threads: 1,
        }
    }
}

/// One benchmark target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// The nvmfs library in-process on a fresh image in `shm_dir`.
    Nvmfs,
    /// A fresh directory in `shm_dir`, through system calls.
    Tmpfs,
    /// A fresh subdirectory `nvmfs-bench-<pid>` of this directory, through
    /// system calls (e.g. ext4 on a RAM-backed loop device).
    Dir(PathBuf),
    /// nvmfs through the C library: a child `nvmfs bench micro --target
    /// dir:/nvmfs` under `nvmfs run` (the LD_PRELOAD library) on a fresh
    /// image in `shm_dir`, its records relabelled (micro/run.rs).
    Run,
}

impl TargetSpec {
    /// Parses `nvmfs`, `tmpfs`, `run:nvmfs` or `dir:PATH`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "nvmfs" => Ok(TargetSpec::Nvmfs),
            "tmpfs" => Ok(TargetSpec::Tmpfs),
            "run:nvmfs" => Ok(TargetSpec::Run),
            _ => match s.strip_prefix("dir:") {
                Some("") => Err("dir: target needs a path, e.g. dir:/mnt/ext4".to_string()),
                Some(path) => Ok(TargetSpec::Dir(PathBuf::from(path))),
                None => Err(format!(
                    "unknown target {s:?}: expected nvmfs, tmpfs, run:nvmfs or dir:PATH"
                )),
            },
        }
    }

    /// The name used in the table and the JSON records.
    pub fn label(&self) -> String {
        match self {
            TargetSpec::Nvmfs => "nvmfs".to_string(),
            TargetSpec::Tmpfs => "tmpfs".to_string(),
            TargetSpec::Dir(p) => format!("dir:{}", p.display()),
            TargetSpec::Run => "run:nvmfs".to_string(),
        }
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

impl std::str::FromStr for TargetSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        TargetSpec::parse(s)
    }
}

/// The workloads, in the order they run and are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WorkloadId {
    RandRead4k,
    Overwrite4k,
    Append4k,
    SeqRead1m,
    SeqWrite1m,
    MmapLoad1k,
    MmapStore1k,
    Create16k,
    Create16kDeep,
    Stat,
    StatDeep,
    OpenRead16k,
    OpenRead16kDeep,
    Unlink,
    UnlinkDeep,
}

const WORKLOADS: [WorkloadId; 15] = [
    WorkloadId::RandRead4k,
    WorkloadId::Overwrite4k,
    WorkloadId::Append4k,
    WorkloadId::SeqRead1m,
    WorkloadId::SeqWrite1m,
    WorkloadId::MmapLoad1k,
    WorkloadId::MmapStore1k,
    WorkloadId::Create16k,
    WorkloadId::Create16kDeep,
    WorkloadId::Stat,
    WorkloadId::StatDeep,
    WorkloadId::OpenRead16k,
    WorkloadId::OpenRead16kDeep,
    WorkloadId::Unlink,
    WorkloadId::UnlinkDeep,
];

const WORKLOAD_NAMES: [&str; 15] = [
    "randread-4k",
    "overwrite-4k",
    "append-4k",
    "seqread-1m",
    "seqwrite-1m",
    "mmap-load-1k",
    "mmap-store-1k",
    "create-16k",
    "create-16k-deep",
    "stat",
    "stat-deep",
    "open-read-16k",
    "open-read-16k-deep",
    "unlink",
    "unlink-deep",
];

impl WorkloadId {
    fn name(self) -> &'static str {
        WORKLOAD_NAMES[self as usize]
    }

    fn parse(s: &str) -> Option<Self> {
        WORKLOAD_NAMES
            .iter()
            .position(|n| *n == s)
            .map(|i| WORKLOADS[i])
    }

    /// Bytes moved per op, for throughput (0 for metadata workloads).
    fn bytes_per_op(self) -> u64 {
        use WorkloadId::*;
        match self {
            RandRead4k | Overwrite4k | Append4k => 4096,
            SeqRead1m | SeqWrite1m => MIB,
            MmapLoad1k | MmapStore1k => 1024,
            Create16k | OpenRead16k | Create16kDeep | OpenRead16kDeep => 16 * 1024,
            Stat | Unlink | StatDeep | UnlinkDeep => 0,
        }
    }

    /// The file layout of a metadata workload (`None` for data workloads).
    fn layout(self, p: &Params) -> Option<meta::Layout> {
        use WorkloadId::*;
        match self {
            Create16k | Stat | OpenRead16k | Unlink => Some(meta::Layout::Flat),
            Create16kDeep | StatDeep | OpenRead16kDeep | UnlinkDeep => Some(p.deep),
            _ => None,
        }
    }

    /// Loads and stores through a shared mapping: their stores are not
    /// durable per op on any target (fio's mmap engine does no msync per op).
    fn is_mmap(self) -> bool {
        matches!(self, WorkloadId::MmapLoad1k | WorkloadId::MmapStore1k)
    }
}

/// Names of all workloads, in run order.
pub fn all_workloads() -> &'static [&'static str] {
    &WORKLOAD_NAMES
}

/// Sizes and durations derived from a validated [`MicroConfig`].
#[derive(Debug, Clone)]
struct Params {
    workloads: Vec<WorkloadId>,
    limits: measure::Limits,
    /// Data file size, a multiple of 1 MiB.
    data_size: u64,
    file_count: usize,
    /// The tree of the -deep metadata workloads (`file_count` files).
    deep: meta::Layout,
    /// Extra files for unlink's warm-up, so the measured phase still has
    /// `file_count` files to remove.
    unlink_reserve: usize,
    /// Inode count for formatting nvmfs: every live file with a margin.
    inode_count: u64,
    /// `MicroConfig::threads`.
    threads: usize,
}

impl Params {
    fn from_config(cfg: &MicroConfig) -> io::Result<Self> {
        let invalid = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
        if cfg.targets.is_empty() {
            return Err(invalid("no targets given".into()));
        }
        if !(cfg.seconds.is_finite() && cfg.seconds > 0.0) {
            return Err(invalid(format!("seconds must be > 0, got {}", cfg.seconds)));
        }
        if cfg.file_size_bytes < MIB {
            return Err(invalid(format!(
                "file size must be at least 1 MiB, got {} bytes",
                cfg.file_size_bytes
            )));
        }
        if cfg.file_count == 0 {
            return Err(invalid("file count must be at least 1".into()));
        }
        if !(1..=MAX_THREADS).contains(&cfg.threads) {
            return Err(invalid(format!(
                "threads must be 1..={MAX_THREADS}, got {}",
                cfg.threads
            )));
        }
        if !(1..=MAX_TREE_DEPTH).contains(&cfg.tree_depth) {
            return Err(invalid(format!(
                "tree depth must be 1..={MAX_TREE_DEPTH}, got {}",
                cfg.tree_depth
            )));
        }
        let workloads = select_workloads(&cfg.workloads).map_err(invalid)?;
        let seconds = Duration::from_secs_f64(cfg.seconds);
        // A tenth of the run, but at least a few ms and at most 250 ms.
        let warmup = (seconds / 10).clamp(Duration::from_millis(5), Duration::from_millis(250));
        let unlink_reserve = (cfg.file_count / 10).max(1);
        let deep = meta::Layout::deep(cfg.file_count, cfg.tree_depth);
        let unlink_deep = meta::Layout::deep(cfg.file_count + unlink_reserve, cfg.tree_depth);
        // Peak live inodes: the flat and deep stat/open-read sets plus one
        // unlink set (create's files are removed before unlink runs), every
        // tree's directories (they stay), plus slack.
        let dirs = 2 * deep.dir_count(cfg.file_count)
            + unlink_deep.dir_count(cfg.file_count + unlink_reserve);
        let mut live = 3 * cfg.file_count as u64 + unlink_reserve as u64 + dirs as u64 + 64;
        if cfg.threads > 1 {
            // The disjoint threads' flat and deep sets (as many files again as the
            // one-thread sets) and the directory trees of the threaded create, stat and
            // unlink runs (under two trees' worth each for disjoint and shared).
            live += 2 * cfg.file_count as u64 + 2 * dirs as u64;
        }
        Ok(Params {
            workloads,
            limits: measure::Limits {
                warmup,
                warmup_max_ops: u64::MAX,
                run: seconds,
                start: None,
            },
            data_size: cfg.file_size_bytes / MIB * MIB,
            file_count: cfg.file_count,
            deep,
            unlink_reserve,
            inode_count: (live + live / 2).next_power_of_two().max(4096),
            threads: cfg.threads,
        })
    }

    /// The sizes one thread of an `n`-thread run works with: on disjoint files each has 1/n
    /// of the data file and of the file sets, so the run moves as much as the one-thread
    /// run; on shared ones they split the one-thread run's (threads.rs).
    fn for_threads(&self, n: usize, sharing: Sharing) -> Params {
        let mut p = self.clone();
        if sharing == Sharing::Disjoint {
            p.data_size = (self.data_size / n as u64 / MIB).max(1) * MIB;
            p.file_count = (self.file_count / n).max(1);
            p.unlink_reserve = (self.unlink_reserve / n).max(1);
            if let meta::Layout::Deep { depth, .. } = self.deep {
                p.deep = meta::Layout::deep(p.file_count, depth);
            }
        }
        p
    }
}

/// Validates names and returns them deduplicated in run order.
fn select_workloads(names: &[String]) -> Result<Vec<WorkloadId>, String> {
    if names.is_empty() {
        return Ok(WORKLOADS.to_vec());
    }
    let mut wanted = Vec::new();
    for n in names {
        match WorkloadId::parse(n) {
            Some(w) => wanted.push(w),
            None => {
                return Err(format!(
                    "unknown workload {n:?}; known: {}",
                    WORKLOAD_NAMES.join(", ")
                ))
            }
        }
    }
    Ok(WORKLOADS
        .iter()
        .copied()
        .filter(|w| wanted.contains(w))
        .collect())
}

/// Runs the benchmark. Progress lines go to `progress`; records come back
/// sorted by workload, then target (references last), with ratios filled in.
/// All scratch files and images are removed before returning, also on error.
pub fn run(cfg: &MicroConfig, progress: &mut dyn FnMut(&str)) -> io::Result<Vec<Record>> {
    let params = Params::from_config(cfg)?;
    let mut records = Vec::new();
    for spec in &cfg.targets {
        records.extend(session::run_target(cfg, &params, spec, progress)?);
    }
    records.extend(reference::all(cfg, &params, progress)?);
    // Stable sort: targets keep their configured order within a workload.
    records.sort_by_key(|r| WorkloadId::parse(&r.workload).map_or(usize::MAX, |w| w as usize));
    report::fill_ratios(&mut records);
    Ok(records)
}

#[cfg(test)]
mod tests;
