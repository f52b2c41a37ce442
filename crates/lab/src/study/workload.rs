//! What a study runs: its workloads (one bar group of a figure each: a benchmark and its
//! parameters) and how big a run is.

use super::database::{TpccWorkload, YcsbWorkload};
use super::fsbench::{self, Aim7Workload, FilemarkWorkload, PgmeterWorkload};
use crate::filebench::PersonalityConfig;
use serde::{Deserialize, Serialize};

/// How big a run is relative to the paper's own sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// 1/50 of the paper's file counts; under 15 minutes on 2 cores.
    Quick,
    /// 1/10 of the paper's file counts.
    Default,
    /// The paper's file counts (100K and 500K files).
    Full,
}

impl Size {
    /// Divisor of the paper's file counts.
    pub fn divisor(self) -> usize {
        match self {
            Size::Quick => 50,
            Size::Default => 10,
            Size::Full => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Size::Quick => "quick",
            Size::Default => "default",
            Size::Full => "full",
        }
    }
}

/// One bar group of the paper's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyWorkload {
    /// e.g. `webproxy-d0.7`.
    pub id: String,
    /// The figure it belongs to (`Fig. 2`, `Fig. 3`, `Fig. 4`, or `extra`).
    pub figure: &'static str,
    /// What runs: the benchmark and its parameters.
    pub config: WorkloadConfig,
}

/// The benchmark of a study workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "benchmark", rename_all = "snake_case")]
pub enum WorkloadConfig {
    Filebench(FilebenchWorkload),
    /// A YCSB core workload on SQLite (the paper: MongoDB, Figs. 6-11).
    Ycsb(YcsbWorkload),
    /// TPC-C on SQLite (the paper: MySQL, Fig. 5).
    Tpcc(TpccWorkload),
    /// filemark, seed 001's multithreaded Postmark.
    Filemark(FilemarkWorkload),
    /// A pgmeter (Iometer) test case.
    Pgmeter(PgmeterWorkload),
    /// An AIM7 sweep over task counts.
    Aim7(Aim7Workload),
}

/// The load a workload runs at, when it is one point of a scaling curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Load {
    /// What x counts, e.g. `threads`.
    pub label: &'static str,
    pub x: f64,
}

impl WorkloadConfig {
    /// filemark's threads or pgmeter's outstanding I/Os per file: the x of the paper's
    /// scaling figures. None for the others (an AIM7 cell measures its own curve).
    pub fn load(&self) -> Option<Load> {
        match self {
            WorkloadConfig::Filemark(w) => Some(Load {
                label: "threads",
                x: f64::from(w.config.threads),
            }),
            WorkloadConfig::Pgmeter(w) => Some(Load {
                label: "outstanding I/Os per file",
                x: w.outstanding as f64,
            }),
            _ => None,
        }
    }
}

/// A Filebench personality as the paper's Table I sets it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FilebenchWorkload {
    /// The paper's directory depth for this workload.
    pub paper_depth: Option<f64>,
    /// The paper's file count.
    pub paper_files: usize,
    pub personality: PersonalityConfig,
}

impl StudyWorkload {
    /// The Filebench personality, when the workload is one.
    pub fn personality(&self) -> Option<&PersonalityConfig> {
        match &self.config {
            WorkloadConfig::Filebench(f) => Some(&f.personality),
            _ => None,
        }
    }

    /// Bytes the workload keeps on its file system at most, for sizing the kernel devices
    /// (0 for Filebench, whose filesets size them, and the databases).
    pub fn footprint_bytes(&self) -> u64 {
        fsbench::footprint_bytes(&self.config)
    }

    /// [`StudyWorkload::personality`], mutable (tests and scaled runs adjust it).
    pub fn personality_mut(&mut self) -> Option<&mut PersonalityConfig> {
        match &mut self.config {
            WorkloadConfig::Filebench(f) => Some(&mut f.personality),
            _ => None,
        }
    }
}
