//! Checks the paper's findings against a run: each finding names ratios
//! between two variants on one workload, and the run rules decide whether
//! this run shows the same direction with a significant difference.

use super::targets::matches_name;
use super::Cell;
use crate::stats::{compare, Summary};
use serde::Serialize;

/// The denominator name that stands for the fastest kernel variant on the ratio's workload.
pub const BEST_KERNEL: &str = "best-kernel";

/// A ratio between two variants on one workload that the paper reports, or between one
/// variant at two loads (a scaling ratio).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PaperRatio {
    pub workload: &'static str,
    /// Numerator and denominator: lab variant names (`nvmfs` stands in for
    /// the paper's PMFS, the direct-access file system); `b` may be [`BEST_KERNEL`].
    pub a: &'static str,
    pub b: &'static str,
    /// The denominator's workload when it is not `workload` (a scaling ratio: a variant at
    /// a high load over itself at a low one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b_workload: Option<&'static str>,
    /// a / b in the paper (read from its text), if it gives one.
    pub paper: Option<f64>,
    /// Which way the finding says the ratio goes: above 1 or below 1. For ops/s above 1 is
    /// a faster; for a latency it is a slower.
    pub expect_above_one: bool,
    /// What is compared.
    pub metric: Metric,
}

/// The quantity a paper ratio compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// The cell's headline rate (ops/s, or tpmC for TPC-C), mean over kept trials.
    OpsPerSec,
    /// Mean latency of one YCSB operation type at the workload's fixed load.
    Latency(&'static str),
}

/// One finding of the paper and the ratios that test it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub id: &'static str,
    pub statement: &'static str,
    /// Where in the paper and what it measured.
    pub paper_evidence: &'static str,
    pub ratios: Vec<PaperRatio>,
    /// Why a run on this machine may not show it.
    pub caveat: &'static str,
    /// The paper says the variants do not differ: each ratio is reproduced when this run
    /// finds no significant difference, whichever way it leans.
    pub no_difference: bool,
}

/// An ops/s (or tpmC) ratio: `a`'s rate over `b`'s on `workload`.
pub fn r(
    workload: &'static str,
    a: &'static str,
    b: &'static str,
    paper: Option<f64>,
    faster: bool,
) -> PaperRatio {
    PaperRatio {
        workload,
        a,
        b,
        b_workload: None,
        paper,
        expect_above_one: faster,
        metric: Metric::OpsPerSec,
    }
}

/// A scaling ratio: `target`'s rate on `high` over its rate on `low` (the same benchmark
/// at a higher and a lower load); `grows` says the paper has it above 1.
pub fn scaling(
    high: &'static str,
    low: &'static str,
    target: &'static str,
    paper: Option<f64>,
    grows: bool,
) -> PaperRatio {
    PaperRatio {
        b_workload: Some(low),
        ..r(high, target, target, paper, grows)
    }
}

/// A latency ratio: `op`'s mean latency on `a` over that on `b` at the fixed load.
pub fn lat(
    workload: &'static str,
    op: &'static str,
    a: &'static str,
    b: &'static str,
    paper: Option<f64>,
    above_one: bool,
) -> PaperRatio {
    PaperRatio {
        workload,
        a,
        b,
        b_workload: None,
        paper,
        expect_above_one: above_one,
        metric: Metric::Latency(op),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Reproduced,
    Partly,
    NotReproduced,
    /// A variant it needs did not run here.
    NotMeasured,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::Partly => "partly reproduced",
            Verdict::NotReproduced => "not reproduced",
            Verdict::NotMeasured => "not measured",
        }
    }
}

/// One ratio, paper against this run.
#[derive(Debug, Clone, Serialize)]
pub struct RatioCheck {
    pub workload: String,
    pub metric: Metric,
    pub a: String,
    pub b: String,
    /// The denominator's workload, when not `workload`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b_workload: Option<String>,
    pub paper: Option<f64>,
    pub measured: Option<f64>,
    pub significant: Option<bool>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, Serialize)]
pub struct FindingCheck {
    pub id: String,
    pub statement: String,
    pub paper_evidence: String,
    pub ratios: Vec<RatioCheck>,
    pub verdict: Verdict,
    /// When not reproduced: the likely reason.
    pub likely_reason: Option<String>,
}

fn summary_of<'a>(
    cells: &'a [Cell],
    workload: &str,
    target: &str,
    metric: Metric,
) -> Option<(&'a str, Summary)> {
    let cell = if target == BEST_KERNEL {
        best_kernel_cell(cells, workload)?
    } else {
        cells
            .iter()
            .find(|c| c.workload == workload && matches_name(&c.target, target))?
    };
    let s = match metric {
        Metric::OpsPerSec => cell.ops_per_sec(),
        Metric::Latency(op) => cell
            .result
            .as_ref()
            .and_then(|r| r.database())
            .and_then(|d| d.latency(op)),
    }?;
    Some((cell.target.as_str(), s))
}

/// The kernel variant with the highest mean rate on `workload`.
pub(super) fn best_kernel_cell<'a>(cells: &'a [Cell], workload: &str) -> Option<&'a Cell> {
    cells
        .iter()
        .filter(|c| c.workload == workload && super::targets::is_kernel_variant(&c.target))
        .filter_map(|c| c.ops_per_sec().map(|s| (c, s.mean)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, _)| c)
}

fn check_ratio(cells: &[Cell], r: &PaperRatio, no_difference: bool) -> RatioCheck {
    let a = summary_of(cells, r.workload, r.a, r.metric);
    let b = summary_of(cells, r.b_workload.unwrap_or(r.workload), r.b, r.metric);
    let (measured, significant, verdict) = match (a, b) {
        (Some((_, sa)), Some((_, sb))) => {
            let c = compare(&sa, &sb);
            let right_way = if r.expect_above_one {
                c.ratio > 1.0
            } else {
                c.ratio < 1.0
            };
            let v = if no_difference {
                if c.significant {
                    Verdict::NotReproduced
                } else {
                    Verdict::Reproduced
                }
            } else if c.significant && right_way {
                Verdict::Reproduced
            } else {
                Verdict::NotReproduced
            };
            (Some(c.ratio), Some(c.significant), v)
        }
        _ => (None, None, Verdict::NotMeasured),
    };
    RatioCheck {
        workload: r.workload.to_string(),
        metric: r.metric,
        a: a.map_or(r.a, |x| x.0).to_string(),
        b: b.map_or(r.b, |x| x.0).to_string(),
        b_workload: r.b_workload.map(str::to_string),
        paper: r.paper,
        measured,
        significant,
        verdict,
    }
}

fn overall(ratios: &[RatioCheck]) -> Verdict {
    let measured: Vec<Verdict> = ratios
        .iter()
        .map(|r| r.verdict)
        .filter(|v| *v != Verdict::NotMeasured)
        .collect();
    let ok = measured
        .iter()
        .filter(|v| **v == Verdict::Reproduced)
        .count();
    match (measured.len(), ok) {
        (0, _) => Verdict::NotMeasured,
        (n, k) if k == n => Verdict::Reproduced,
        (_, 0) => Verdict::NotReproduced,
        _ => Verdict::Partly,
    }
}

/// Every finding of a study against `cells`.
pub fn check_all(findings: &[Finding], cells: &[Cell]) -> Vec<FindingCheck> {
    findings.iter().map(|f| check_one(cells, f)).collect()
}

fn check_one(cells: &[Cell], f: &Finding) -> FindingCheck {
    let none = f.no_difference;
    let ratios: Vec<RatioCheck> = f
        .ratios
        .iter()
        .map(|r| check_ratio(cells, r, none))
        .collect();
    let verdict = overall(&ratios);
    let likely_reason = match verdict {
        Verdict::Reproduced => None,
        Verdict::NotMeasured => {
            Some("a variant it compares did not run (unavailable or filtered out)".into())
        }
        _ => Some(f.caveat.to_string()).filter(|c| !c.is_empty()),
    };
    FindingCheck {
        id: f.id.to_string(),
        statement: f.statement.to_string(),
        paper_evidence: f.paper_evidence.to_string(),
        ratios,
        verdict,
        likely_reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filebench::RunResult;
    use crate::study::CellStatus;

    fn cell(workload: &str, target: &str, samples: &[f64]) -> Cell {
        let s = Summary::of(samples).unwrap();
        let r = RunResult {
            fileset: crate::filebench::fileset::TreeStats {
                files: 0,
                dirs: 0,
                leaf_dirs: 0,
                mean_depth_configured: 0.0,
                mean_depth_actual: 0.0,
                max_files_per_dir: 0,
                mean_file_size_bytes: 0.0,
                total_bytes: 0,
                prealloc_files: 0,
                prealloc_bytes: 0,
            },
            setup_seconds: 0.0,
            trials: Vec::new(),
            ops_per_sec: Some(s),
            stopped_early: None,
        };
        Cell {
            workload: workload.into(),
            target: target.into(),
            paper_name: None,
            status: CellStatus::Ok,
            result: Some(crate::study::CellResult::Filebench(r)),
            provision: None,
            wall_seconds: 0.0,
        }
    }

    #[test]
    fn verdicts_follow_direction_and_significance() {
        let cells = vec![
            cell("fileserver", "nvmfs", &[300.0, 301.0, 299.0]),
            cell("fileserver", "ext2", &[100.0, 101.0, 99.0]),
            cell("fileserver", "ext3", &[100.0, 150.0, 400.0]),
            cell("fileserver", "xfs-ag126", &[130.0, 131.0, 129.0]),
            cell("fileserver", "xfs", &[100.0, 101.0, 99.0]),
        ];
        let checks = check_all(&crate::study::nvm2015::findings(), &cells);
        let direct = checks
            .iter()
            .find(|c| c.id == "direct-access-beats-page-cache")
            .unwrap();
        // nvmfs vs ext2: 3x, tight: reproduced. vs ext3: wide interval: not.
        assert_eq!(direct.ratios[0].verdict, Verdict::Reproduced);
        assert!((direct.ratios[0].measured.unwrap() - 3.0).abs() < 1e-9);
        assert_eq!(direct.ratios[1].verdict, Verdict::NotReproduced);
        assert_eq!(
            direct.ratios[2].verdict,
            Verdict::NotMeasured,
            "no ext4 cell"
        );
        assert_eq!(direct.verdict, Verdict::Partly);
        assert!(direct.likely_reason.is_some());
        // xfs-ag matches the variant whatever its AG count.
        let ag = checks
            .iter()
            .find(|c| c.id == "more-xfs-ags-help-fileserver")
            .unwrap();
        assert_eq!(ag.ratios[0].a, "xfs-ag126");
        assert_eq!(ag.ratios[0].verdict, Verdict::Reproduced);
        // A finding with nothing measured says so.
        let flat = checks
            .iter()
            .find(|c| c.id == "ext2-collapses-on-flat-directory")
            .unwrap();
        assert_eq!(flat.verdict, Verdict::NotMeasured);
    }

    #[test]
    fn scaling_and_best_kernel_ratios() {
        let cells = vec![
            cell("filemark-small-t1", "ext2", &[100.0, 101.0, 99.0]),
            cell("filemark-small-t16", "ext2", &[150.0, 151.0, 149.0]),
            cell("filemark-small-t16", "ext3", &[100.0, 101.0, 99.0]),
            cell("filemark-small-t1", "jfs", &[50.0, 51.0, 49.0]),
            cell("filemark-small-t16", "jfs", &[50.0, 52.0, 48.0]),
            cell("aim7", "nvmfs", &[900.0, 905.0, 895.0]),
            cell("aim7", "fuse:nvmfs", &[5000.0, 5001.0, 4999.0]),
            cell("aim7", "ext2", &[300.0, 301.0, 299.0]),
            cell("aim7", "xfs", &[450.0, 451.0, 449.0]),
        ];
        let checks = check_all(&crate::study::linux2002::findings(), &cells);
        let by = |id: &str| checks.iter().find(|c| c.id == id).unwrap();
        // ext2 at 16 threads over ext2 at 1: 1.5, the scaling ratio names both workloads.
        let ext3 = by("ext3-journal-limits-thread-scaling");
        let s = &ext3.ratios[2];
        assert_eq!(s.b_workload.as_deref(), Some("filemark-small-t1"));
        assert!((s.measured.unwrap() - 1.5).abs() < 1e-9);
        assert_eq!(s.verdict, Verdict::Reproduced);
        assert_eq!(ext3.ratios[0].verdict, Verdict::Reproduced);
        assert_eq!(ext3.ratios[1].verdict, Verdict::NotMeasured);
        // jfs flat with threads: the paper's "does not grow" is the direction below 1, and
        // a flat curve is not a significant drop.
        let jfs = by("jfs-trails-on-filemark");
        assert_eq!(jfs.ratios[1].verdict, Verdict::NotReproduced);
        assert_eq!(jfs.ratios[0].verdict, Verdict::Reproduced);
        // The best kernel variant is xfs: fuse:nvmfs and nvmfs are not kernel variants.
        let best = by("nvmfs-vs-best-kernel-aim7");
        assert_eq!(best.ratios[0].b, "xfs");
        assert!((best.ratios[0].measured.unwrap() - 2.0).abs() < 1e-9);
        assert_eq!(best.verdict, Verdict::Reproduced);
        // Nothing on this workload: the best kernel variant is not measured either.
        let pg = by("nvmfs-vs-best-kernel-pgmeter");
        assert_eq!(pg.verdict, Verdict::NotMeasured);
        assert_eq!(pg.ratios[0].b, BEST_KERNEL);
    }
}
