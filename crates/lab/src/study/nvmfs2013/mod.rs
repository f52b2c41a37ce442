//! `nvmfs study nvmfs-2013`: seed 004, "NVMFS: A hybrid file system for improving random
//! write in NAND-flash SSD" (2013), section IV, on nvmfs with its SSD tier (PM image and SSD
//! both in a tmpfs) against kernel file systems on a RAM-backed loop device.
//!
//! Per workload (IOzone-like random writes, Postmark with appends, fio-style random updates,
//! Filebench fileserver), SSD utilisation level (medium, high) and target, each trial is a
//! fresh file system: the block writes that reach its SSD are recorded (nvmfs's tier trace;
//! the kernel's block requests through tracefs), timed as a throughput, and the first trial's
//! trace is replayed on the lab's page-level and FAST FTL simulators ([`crate::ftl`]). The run
//! is [`experiments`], the claim checks [`findings`], the results directory [`report`].

pub mod experiments;
pub mod findings;
pub mod report;

use super::Size;
use crate::ftl::replay::FtlReport;
use crate::stats::Summary;
use serde::Serialize;
use std::path::PathBuf;

/// The name `nvmfs study` takes.
pub const NAME: &str = "nvmfs-2013";

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;

/// One of section IV's workloads.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Workload {
    /// What `--workload` takes.
    pub id: &'static str,
    pub title: &'static str,
    /// What one operation of its throughput is.
    pub op: &'static str,
}

pub const WORKLOADS: [Workload; 4] = [
    Workload {
        id: "iozone",
        title: "IOzone-like: one large file written sequentially, then random 4 KiB writes",
        op: "random 4 KiB writes",
    },
    Workload {
        id: "postmark",
        title: "Postmark: creation and transactions (reads and 4 KiB appends)",
        op: "transactions",
    },
    Workload {
        id: "fio",
        title: "fio-style: random 4 KiB updates to randomly opened files among thousands",
        op: "updates (open, write, close)",
    },
    Workload {
        id: "fileserver",
        title: "Filebench fileserver (4 KiB I/O)",
        op: "flowops",
    },
];

/// The workload called `id`.
pub fn workload(id: &str) -> Option<&'static Workload> {
    WORKLOADS.iter().find(|w| w.id == id)
}

/// A disk utilisation level of section IV-D.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Level {
    /// `medium` or `high`.
    pub name: &'static str,
    /// The share of the SSD the data set is sized to fill.
    pub target: f64,
}

pub const LEVELS: [Level; 2] = [
    Level {
        name: "medium",
        target: 0.60,
    },
    Level {
        name: "high",
        target: 0.88,
    },
];

/// Every target the study knows, in report order: nvmfs first, then the paper's kernel file
/// systems (ext3, btrfs, nilfs2) and ext4.
pub const TARGETS: [&str; 5] = ["nvmfs", "ext3", "ext4", "btrfs", "nilfs2"];

/// Everything a run of the study needs.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub size: Size,
    /// nvmfs's PM image; the kernel file systems' page-cache budget (the seed gives them a DRAM
    /// page cache as large as NVMFS's NVRAM).
    pub pm_bytes: u64,
    /// Each workload's data set.
    pub data_bytes: u64,
    /// The kernel targets' device and nvmfs's SSD (the same size); a filler file written
    /// before the traced workload brings it to each level's utilisation.
    pub device_bytes: u64,
    /// Trials per cell (each on a fresh file system); all kept, the traffic and FTL figures
    /// come from the first.
    pub trials: usize,
    /// IOzone: random 4 KiB writes after the sequential write, as a multiple of the file's
    /// blocks.
    pub iozone_rewrites: f64,
    /// Postmark: file sizes (appends grow a file up to `size_high`) and transactions per
    /// file.
    pub postmark_size_low: u32,
    pub postmark_size_high: u32,
    pub postmark_transactions_per_file: u32,
    /// fio: the file size (files = data / this) and updates as a multiple of all blocks.
    pub fio_file_bytes: u64,
    pub fio_updates: f64,
    /// Filebench fileserver: ops per trial (its threads together) and a time cap.
    pub fileserver_ops: u64,
    pub fileserver_seconds: f64,
    pub fileserver_threads: usize,
    /// Extra memory above `pm_bytes` in the kernel targets' memory cgroup, for the workload's
    /// own allocations and kernel objects (inodes, dentries) that the limit also charges.
    pub cgroup_slack_bytes: u64,
    /// Apply the page-cache budget (a memory cgroup) to the kernel targets.
    pub cache_budget: bool,
    pub only_workloads: Vec<String>,
    pub only_targets: Vec<String>,
    pub only_levels: Vec<String>,
    pub shm_dir: PathBuf,
    pub out_dir: PathBuf,
    pub seed: u64,
}

impl Config {
    /// The settings of `--quick` (about 5 minutes here), neither, or `--full`.
    pub fn for_size(size: Size, out_dir: PathBuf) -> Config {
        // The lab provisions kernel file systems on 512 MiB devices at the least
        // (kernel::MIN_SIZE_BYTES); a filler file brings each to the level's utilisation.
        let (pm, data, device, trials, fs_ops) = match size {
            Size::Quick => (16 * MIB, 64 * MIB, 512 * MIB, 3, 4_000),
            Size::Default => (64 * MIB, 256 * MIB, 1024 * MIB, 5, 10_000),
            Size::Full => (256 * MIB, 1024 * MIB, 4096 * MIB, 5, 40_000),
        };
        Config {
            size,
            pm_bytes: pm,
            data_bytes: data,
            device_bytes: device,
            trials,
            iozone_rewrites: 2.0,
            postmark_size_low: 16 * KIB as u32,
            postmark_size_high: 64 * KIB as u32,
            postmark_transactions_per_file: 4,
            fio_file_bytes: 56 * KIB,
            fio_updates: 2.0,
            fileserver_ops: fs_ops,
            fileserver_seconds: 20.0,
            fileserver_threads: 16,
            cgroup_slack_bytes: 8 * MIB,
            cache_budget: true,
            only_workloads: Vec::new(),
            only_targets: Vec::new(),
            only_levels: Vec::new(),
            shm_dir: PathBuf::from("/dev/shm"),
            out_dir,
            seed: 2013,
        }
    }

    pub fn runs_workload(&self, id: &str) -> bool {
        self.only_workloads.is_empty() || self.only_workloads.iter().any(|w| w == id)
    }
    pub fn runs_target(&self, t: &str) -> bool {
        self.only_targets.is_empty() || self.only_targets.iter().any(|w| w == t)
    }
    pub fn runs_level(&self, l: &str) -> bool {
        self.only_levels.is_empty() || self.only_levels.iter().any(|w| w == l)
    }

    /// The filler written (untraced, unmeasured) before the workload so that the data set
    /// brings the SSD to `level`: for the kernel targets the level's share of the device less
    /// the data set; for nvmfs the level's share of the SSD's data extents less what the data
    /// set leaves on the SSD (all but the half of the PM tier the flusher keeps dirty), so
    /// that nvmfs's own SSD utilisation reaches the level. Whole MiB.
    pub fn filler_bytes(&self, level: &Level, nvmfs: bool) -> u64 {
        let (space, data) = if nvmfs {
            (
                self.device_bytes - 512 * KIB,
                self.data_bytes.saturating_sub(self.pm_bytes / 2),
            )
        } else {
            (self.device_bytes, self.data_bytes)
        };
        let want = (space as f64 * level.target) as u64;
        want.saturating_sub(data) / MIB * MIB
    }
}

/// What was measured in one cell (workload, level, target).
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub workload: &'static str,
    pub level: &'static str,
    pub target: String,
    /// The device (kernel) or SSD (nvmfs) size.
    pub ssd_bytes: u64,
    /// The untraced filler written first to reach the level.
    pub filler_bytes: u64,
    /// Why the cell was not measured (an unavailable target, a failure, no space).
    pub unavailable: Option<String>,
    /// A kernel file system ran out of space (ENOSPC) filling to the level or running the
    /// workload: it cannot hold this level's data on a device of this size (btrfs's metadata
    /// copies and copy-on-write need room the others do not). A result about the file
    /// system, so it does not fail the run as other unmeasured cells do. Never set for nvmfs,
    /// whose sizes the study computes: an ENOSPC there is a failure.
    pub out_of_space: bool,
    /// Per trial: operations per second of the workload's timed phase.
    pub throughput: Vec<f64>,
    pub throughput_summary: Option<Summary>,
    /// Per trial: sectors (512 B) written to the SSD (Fig. 6).
    pub write_sectors: Vec<u64>,
    pub write_requests: Vec<u64>,
    /// Per trial: the SSD utilisation at the end of the workload (nvmfs: valid SSD blocks;
    /// kernel: used blocks of the file system, statvfs).
    pub utilisation: Vec<f64>,
    /// The first trial's trace on each FTL (Fig. 7).
    pub ftl: Vec<FtlReport>,
    /// nvmfs only, per trial: segment cleaning (Figs. 10-11).
    pub tier: Vec<TierCounters>,
    /// How the kernel targets' page cache was limited, or why it was not.
    pub cache_budget: Option<String>,
    /// nvmfs only: every write of the first trial started an extent and stayed in it.
    pub extent_aligned: Option<bool>,
}

/// nvmfs's tier counters of one trial.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TierCounters {
    pub flushes: u64,
    pub flushed_blocks: u64,
    pub cleaned_extents: u64,
    /// Blocks recycled by cleaning (128 per extent).
    pub recycled_blocks: u64,
    pub moved_blocks: u64,
    pub cleaning_efficiency: Option<f64>,
    pub ssd_utilisation: f64,
}

impl Cell {
    pub fn measured(&self) -> bool {
        self.unavailable.is_none() && !self.write_sectors.is_empty()
    }
    /// Not measured for a reason that fails the run (not [`Cell::out_of_space`]).
    pub fn failed(&self) -> bool {
        self.unavailable.is_some() && !self.out_of_space
    }
    /// What the tables say instead of numbers when the cell was not measured.
    pub fn not_measured(&self) -> Option<String> {
        let why = self.unavailable.as_ref()?;
        Some(if self.out_of_space {
            format!("out of space at this level: {why}")
        } else {
            format!("not measured: {why}")
        })
    }
    /// The first trial's write traffic in sectors.
    pub fn sectors(&self) -> Option<u64> {
        self.write_sectors.first().copied()
    }
    /// The first trial's replay on `ftl`.
    pub fn ftl(&self, ftl: crate::ftl::FtlKind) -> Option<&FtlReport> {
        self.ftl.iter().find(|r| r.ftl == ftl)
    }
    /// Mean utilisation over the trials.
    pub fn mean_utilisation(&self) -> Option<f64> {
        (!self.utilisation.is_empty())
            .then(|| self.utilisation.iter().sum::<f64>() / self.utilisation.len() as f64)
    }
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct StudyResult {
    pub config: Config,
    pub cells: Vec<Cell>,
    /// Targets not run at all, with why (nilfs2 where the kernel lacks it).
    pub unavailable_targets: Vec<(String, String)>,
    pub notes: Vec<String>,
    pub interrupted: bool,
    pub wall_seconds: f64,
}

impl StudyResult {
    pub fn cell(&self, workload: &str, level: &str, target: &str) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.workload == workload && c.level == level && c.target == target)
    }

    /// The targets measured in at least one cell, in [`TARGETS`] order.
    pub fn measured_targets(&self) -> Vec<String> {
        TARGETS
            .iter()
            .filter(|t| self.cells.iter().any(|c| c.target == **t && c.measured()))
            .map(|t| t.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests;
