//! Scaling curves: the figures of a study whose workloads are one benchmark at several loads
//! (filemark's threads, pgmeter's outstanding I/Os per file) or whose cells measured a sweep
//! themselves (AIM7's task counts). The report draws them as seed 001 drew its figures, a
//! rate against the load with one line per target, and tabulates them.

use super::StudyResult;
use crate::chart::{Line, LineChart, Point, PALETTE};
use crate::stats::Summary;
use std::fmt::Write as _;

/// One figure's curves.
#[derive(Debug, Clone)]
pub struct CurveFigure {
    pub figure: &'static str,
    /// What it shows: the workload ids without their load suffix, e.g. `filemark-small`.
    pub family: String,
    /// What x counts, e.g. `threads`.
    pub x_label: String,
    /// What y counts, e.g. `transactions/s`.
    pub metric: String,
    /// One per target that measured at least one point, in the order the targets ran.
    pub curves: Vec<Curve>,
}

/// A target's points, x increasing.
#[derive(Debug, Clone)]
pub struct Curve {
    pub target: String,
    pub points: Vec<(f64, Summary)>,
}

/// The curves of `figure` when it is a scaling figure: every workload of it has a load,
/// or it has one workload whose cells measured sweeps. `None` otherwise (a bar figure).
pub fn figure(result: &StudyResult, figure: &'static str) -> Option<CurveFigure> {
    let wls: Vec<_> = result
        .workloads
        .iter()
        .filter(|w| w.figure == figure)
        .collect();
    let first = wls.first()?;
    let mut family: Vec<String> = wls.iter().map(|w| family_of(&w.id)).collect();
    family.dedup();
    let targets = targets_in_order(result);
    let (x_label, curves) = if wls.iter().all(|w| w.config.load().is_some()) {
        let label = first.config.load()?.label.to_string();
        let curves = targets
            .into_iter()
            .map(|target| {
                let mut points: Vec<(f64, Summary)> = wls
                    .iter()
                    .filter_map(|w| {
                        let c = result
                            .cells
                            .iter()
                            .find(|c| c.workload == w.id && c.target == target)?;
                        Some((w.config.load()?.x, c.ops_per_sec()?))
                    })
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                points.dedup_by(|a, b| a.0 == b.0);
                Curve { target, points }
            })
            .collect::<Vec<_>>();
        (label, curves)
    } else if wls.len() == 1 {
        swept(result, &first.id, targets)?
    } else {
        return None;
    };
    let metric = result
        .cells
        .iter()
        .filter(|c| wls.iter().any(|w| w.id == c.workload))
        .find_map(|c| c.result.as_ref().map(|r| r.metric().to_string()))
        .unwrap_or_else(|| "ops/s".into());
    Some(CurveFigure {
        figure,
        family: family.join(", "),
        x_label,
        metric,
        curves: curves
            .into_iter()
            .filter(|c| !c.points.is_empty())
            .collect(),
    })
}

/// The curves the cells of `workload` measured themselves; `None` when none did.
fn swept(
    result: &StudyResult,
    workload: &str,
    targets: Vec<String>,
) -> Option<(String, Vec<Curve>)> {
    let mut label = None;
    let curves = targets
        .into_iter()
        .map(|target| {
            let sweep = result
                .cells
                .iter()
                .find(|c| c.workload == workload && c.target == target)
                .and_then(|c| c.result.as_ref()?.fsbench()?.sweep());
            if let Some(s) = sweep {
                label = Some(s.x_label.clone());
            }
            let points = sweep.map_or_else(Vec::new, |s| {
                s.points.iter().map(|p| (p.x, p.value)).collect()
            });
            Curve { target, points }
        })
        .collect();
    Some((label?, curves))
}

/// Targets in the order their first cell ran.
fn targets_in_order(result: &StudyResult) -> Vec<String> {
    let mut t: Vec<String> = Vec::new();
    for c in &result.cells {
        if !t.contains(&c.target) {
            t.push(c.target.clone());
        }
    }
    t
}

/// A workload id without its load suffix: `filemark-small-t16` is `filemark-small`,
/// `pgmeter-oltp-o4` is `pgmeter-oltp`; ids without one stay as they are.
pub fn family_of(id: &str) -> String {
    match id.rsplit_once('-') {
        Some((head, tail))
            if tail.len() > 1
                && tail.starts_with(|c: char| c.is_ascii_alphabetic())
                && tail[1..].chars().all(|c| c.is_ascii_digit()) =>
        {
            head.to_string()
        }
        _ => id.to_string(),
    }
}

/// The file name of a figure: its numbers and what it shows, e.g. `fig3-8-pgmeter-seqread`
/// for "Figs. 3, 8".
pub fn stem(f: &CurveFigure) -> String {
    let numbers: Vec<&str> = f
        .figure
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .collect();
    let family = f.family.replace(", ", "-");
    if numbers.is_empty() {
        family
    } else {
        format!("fig{}-{family}", numbers.join("-"))
    }
}

/// The figure as a line chart; the x axis is logarithmic when the loads span a factor of
/// 4 or more (doubling loads evenly spaced), the y axis when the rates span more than a
/// factor of 10 (nvmfs in-process against FUSE, say), so that every curve stays readable.
/// Targets beyond the palette are left out and named in the caption.
pub fn chart(f: &CurveFigure, note: &str) -> LineChart {
    let points = || f.curves.iter().flat_map(|c| c.points.iter());
    let (x_lo, x_hi) = span(points().map(|p| p.0));
    let (y_lo, y_hi) = span(points().map(|p| p.1.mean));
    let log_y = y_hi / y_lo > 10.0;
    let mut note = note.to_string();
    if log_y {
        note.push_str("; logarithmic y axis");
    }
    let left_out: Vec<&str> = f
        .curves
        .iter()
        .skip(PALETTE.len())
        .map(|c| c.target.as_str())
        .collect();
    if !left_out.is_empty() {
        let _ = write!(
            note,
            "; not drawn (too many lines): {}",
            left_out.join(", ")
        );
    }
    LineChart {
        title: format!("{}: {}, {} by {}", f.figure, f.family, f.metric, f.x_label),
        x_label: f.x_label.to_string(),
        y_label: f.metric.to_string(),
        log_x: points().all(|p| p.0 > 0.0) && x_hi / x_lo >= 4.0,
        log_y,
        lines: f
            .curves
            .iter()
            .take(PALETTE.len())
            .map(|c| Line {
                name: c.target.clone(),
                points: c.points.iter().map(|&(x, s)| point(x, &s)).collect(),
            })
            .collect(),
        note: Some(note),
    }
}

/// The lowest value above 0 and the highest value (infinity and 0 when there are none, so
/// that their ratio is 0).
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values
        .filter(|v| *v > 0.0)
        .fold((f64::INFINITY, 0.0), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// A summary as a point, its interval clipped at 0 (and the mean alone when there is no
/// interval, as with a single kept trial).
fn point(x: f64, s: &Summary) -> Point {
    let finite = |v: f64| if v.is_finite() { v } else { s.mean };
    Point {
        x,
        y: s.mean,
        ci_low: finite(s.ci95_low).max(0.0).min(s.mean),
        ci_high: finite(s.ci95_high).max(s.mean),
    }
}

/// The figure as a Markdown table: a row per load, a column per target, mean ± half-width.
pub fn table(f: &CurveFigure) -> String {
    let mut xs: Vec<f64> = f
        .curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let mut s = format!("### {}: {} ({})\n\n", f.figure, f.family, f.metric);
    let names: Vec<&str> = f.curves.iter().map(|c| c.target.as_str()).collect();
    let _ = writeln!(s, "| {} | {} |", f.x_label, names.join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(names.len()));
    for x in xs {
        let cells: Vec<String> = f
            .curves
            .iter()
            .map(|c| {
                c.points
                    .iter()
                    .find(|p| p.0 == x)
                    .map_or("-".into(), |(_, s)| fmt_summary(s))
            })
            .collect();
        let _ = writeln!(s, "| {x} | {} |", cells.join(" | "));
    }
    s
}

fn fmt_summary(o: &Summary) -> String {
    if o.ci95_half_width.is_finite() {
        format!("{:.0} ± {:.0}", o.mean, o.ci95_half_width)
    } else {
        format!("{:.0}", o.mean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_drop_the_load_suffix_only() {
        assert_eq!(family_of("filemark-small-t16"), "filemark-small");
        assert_eq!(family_of("pgmeter-oltp-o4"), "pgmeter-oltp");
        assert_eq!(family_of("aim7"), "aim7");
        assert_eq!(family_of("webproxy-d0.7"), "webproxy-d0.7");
        assert_eq!(family_of("ycsb-a"), "ycsb-a");
    }

    #[test]
    fn stems_carry_the_figure_numbers() {
        let f = CurveFigure {
            figure: "Figs. 3, 8",
            family: "pgmeter-seqread".into(),
            x_label: "outstanding I/Os per file".into(),
            metric: "ops/s".into(),
            curves: Vec::new(),
        };
        assert_eq!(stem(&f), "fig3-8-pgmeter-seqread");
        let g = CurveFigure {
            figure: "extra",
            ..f
        };
        assert_eq!(stem(&g), "pgmeter-seqread");
    }
}
