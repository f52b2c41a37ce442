//! The results directory of the file-mapping study: config.json, environment.json,
//! results.json (every row with its samples, the findings), results.csv, trials.csv, one
//! grouped bar chart per figure and cache state (SVG and PNG, mappings as series, 95% whiskers)
//! and report.md, with each finding's measured ratio beside the paper's.

use super::findings::{self, FindingResult};
use super::{MapRow, MapStudyResult, EXPERIMENTS, NAME};
use crate::chart::{self, Bar, BarChart, Series};
use crate::study::env::Environment;
use crate::study::report::{csv_field, json, schema};
use serde::Serialize;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

/// What was written.
pub struct Written {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    pub findings: Vec<FindingResult>,
    /// Charts that could not be drawn, PNGs skipped.
    pub notes: Vec<String>,
}

#[derive(Serialize)]
struct ResultsFile<'a> {
    schema: String,
    study: &'static str,
    unit: &'static str,
    environment: &'a Environment,
    config: &'a super::MapStudyConfig,
    mappings: &'a [String],
    rows: &'a [MapRow],
    findings: &'a [FindingResult],
    notes: &'a [String],
    failures: &'a [(String, String)],
    interrupted: bool,
    wall_seconds: f64,
}

/// What the study does not reproduce, said in every report.
const NOT_RUN: &str = "\n## Not run\n\n\
- Section 4.8's YCSB on LevelDB (Fig. 13): not part of this study.\n";

/// How a run here differs from the paper's testbed.
pub fn emulation() -> Vec<String> {
    vec![
        "persistent memory is DRAM (an nvmfs image in a tmpfs), not Optane DC PMM: a cold tree level costs a DRAM miss".into(),
        "mappings run inside nvmfs (user space), not Strata; nvmfs's block allocator (bitmap, free-extent index, per-inode hints) is not Strata's".into(),
        "cold = one operation after writing every line of a 64 MiB buffer (twice the 32 MiB L3); hot = back-to-back operations averaged (reads: 100,000), the first sample dropped".into(),
        "cycles are rdtscp between lfences around the FileMap calls alone (lookup; reserve + claim + publish with their journal work), less the empty timer's cost".into(),
        "this machine has 2 cores shared with other jobs: 4 and 8 threads time-share them".into(),
        "HashFS has no allocator to fragment: the fragmentation experiment runs it at layout score 1.0 only".into(),
        "the page-cached extent tree (4.7) is a study-only DRAM copy of the extents in front of the PM tree; the PM extent tree stands in for Strata's baseline in Filebench (4.8)".into(),
        "section 4.9 runs level hashing (nvmfs's `level` mapping: Zuo et al.'s two levels, 4-slot buckets, one-step movement, in-place resizing from a 64-bucket top level inside a region reserved at mkfs) as-is on 4.8's Filebench workloads; it is in no other experiment".into(),
        "the global cuckoo hash joins every experiment once it is in MappingKind::ALL; until then its findings say \"not run\"".into(),
    ]
}

/// Writes the results directory.
pub fn write_all(result: &MapStudyResult, env: &Environment) -> io::Result<Written> {
    let dir = result.config.out_dir.clone();
    std::fs::create_dir_all(&dir)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
    let mut w = Written {
        dir: dir.clone(),
        files: Vec::new(),
        findings: findings::check_all(result),
        notes: Vec::new(),
    };
    put(&mut w, "config.json", json(&result.config))?;
    put(&mut w, "environment.json", json(env))?;
    let file = ResultsFile {
        schema: schema(NAME),
        study: NAME,
        unit: result.unit,
        environment: env,
        config: &result.config,
        mappings: &result.mappings,
        rows: &result.rows,
        findings: &w.findings,
        notes: &result.notes,
        failures: &result.failures,
        interrupted: result.interrupted,
        wall_seconds: result.wall_seconds,
    };
    let text = json(&file);
    put(&mut w, "results.json", text)?;
    put(&mut w, "results.csv", results_csv(&result.rows))?;
    put(&mut w, "trials.csv", trials_csv(&result.rows))?;
    let charts = write_charts(result, &dir, &mut w.notes)?;
    w.files.extend(charts.iter().map(|c| dir.join(c)));
    let md = markdown(result, env, &w.findings, &charts);
    put(&mut w, "report.md", md)?;
    Ok(w)
}

fn put(w: &mut Written, name: &str, text: String) -> io::Result<()> {
    let path = w.dir.join(name);
    std::fs::write(&path, text)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())))?;
    w.files.push(path);
    Ok(())
}

fn results_csv(rows: &[MapRow]) -> String {
    let mut s = String::from(
        "experiment,figure,param,op,cache,mapping,metric,n,mean,stddev,ci95_low,ci95_high\n",
    );
    for r in rows {
        let m = &r.summary;
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.4},{:.4},{:.4},{:.4}",
            r.experiment,
            csv_field(r.figure),
            csv_field(&r.param),
            r.op,
            r.cache,
            r.mapping,
            csv_field(r.metric),
            m.n,
            m.mean,
            m.stddev,
            m.ci95_low,
            m.ci95_high
        );
    }
    s
}

fn trials_csv(rows: &[MapRow]) -> String {
    let mut s = String::from("experiment,param,op,cache,mapping,metric,trial,value\n");
    for r in rows {
        for (i, v) in r.samples.iter().enumerate() {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{i},{v:.4}",
                r.experiment,
                csv_field(&r.param),
                r.op,
                r.cache,
                r.mapping,
                csv_field(r.metric)
            );
        }
    }
    s
}

/// The (cache, metric) pairs of an experiment's rows, in order of appearance: one chart and
/// one table each.
fn panels<'a>(rows: &[&'a MapRow]) -> Vec<(&'a str, &'a str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in rows {
        if !out.contains(&(r.cache, r.metric)) {
            out.push((r.cache, r.metric));
        }
    }
    out
}

/// Distinct values in order of appearance.
fn distinct(it: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in it {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// A panel's bar groups (setting and operation) and series (mappings).
struct Panel<'a> {
    groups: Vec<(String, String)>,
    series: Vec<String>,
    rows: Vec<&'a MapRow>,
}

impl<'a> Panel<'a> {
    fn of(rows: &[&'a MapRow], cache: &str, metric: &str) -> Panel<'a> {
        let rows: Vec<&MapRow> = rows
            .iter()
            .copied()
            .filter(|r| r.cache == cache && r.metric == metric)
            .collect();
        let groups = distinct(rows.iter().map(|r| format!("{}\u{0}{}", r.param, r.op)))
            .into_iter()
            .map(|g| {
                let (p, o) = g.split_once('\u{0}').expect("joined above");
                (p.to_string(), o.to_string())
            })
            .collect();
        let series = distinct(rows.iter().map(|r| r.mapping.clone()));
        Panel {
            groups,
            series,
            rows,
        }
    }

    fn get(&self, group: &(String, String), mapping: &str) -> Option<&'a MapRow> {
        self.rows
            .iter()
            .copied()
            .find(|r| r.param == group.0 && r.op == group.1 && r.mapping == mapping)
    }

    fn group_label(&self, g: &(String, String)) -> String {
        let one_param = self.groups.iter().all(|x| x.0 == self.groups[0].0);
        let one_op = self.groups.iter().all(|x| x.1 == self.groups[0].1);
        match (one_param, one_op) {
            (true, false) => g.1.clone(),
            (false, true) => g.0.clone(),
            _ => format!("{} {}", g.0, g.1),
        }
    }
}

fn bar(r: &MapRow) -> Bar {
    let s = &r.summary;
    let (lo, hi) = if s.ci95_half_width.is_finite() {
        (s.ci95_low.max(0.0), s.ci95_high.max(0.0))
    } else {
        (s.mean, s.mean)
    };
    Bar {
        value: s.mean.max(0.0),
        ci_low: lo.min(s.mean.max(0.0)),
        ci_high: hi.max(s.mean.max(0.0)),
    }
}

fn chart_of(e: &super::Experiment, p: &Panel, cache: &str, metric: &str, unit: &str) -> BarChart {
    let y = match metric {
        "cycles" => format!("{unit} per mapping operation"),
        "read-path cycles" => format!("{unit} per read (whole path)"),
        m => m.to_string(),
    };
    BarChart {
        title: format!("{}: {} ({cache}, {metric})", e.figure, e.title),
        y_label: y,
        groups: p.groups.iter().map(|g| p.group_label(g)).collect(),
        series: p
            .series
            .iter()
            .map(|m| Series {
                name: m.clone(),
                bars: p.groups.iter().map(|g| p.get(g, m).map(bar)).collect(),
            })
            .collect(),
        reference_line: None,
        note: Some("mean of the samples, whiskers: 95% Student-t interval".into()),
    }
}

fn stem(e: &super::Experiment, cache: &str, metric: &str) -> String {
    let fig: String = e.figure.chars().filter(char::is_ascii_digit).collect();
    let cache = if cache == "-" { "" } else { cache };
    let m = metric.replace([' ', '/'], "-");
    format!("fig{fig:0>2}-{}-{cache}-{m}", e.id).replace("--", "-")
}

/// Whether row `r` belongs in experiment `e`'s tables and charts: 4.9 shows level hashing
/// beside 4.8's Filebench rows of the file mappings (Fig. 12's extra bars).
fn shown_in(r: &MapRow, e: &super::Experiment) -> bool {
    r.experiment == e.id || e.id == "level-hashing" && r.experiment == "filebench"
}

/// One chart per experiment and (cache, metric); returns the file names written.
fn write_charts(
    result: &MapStudyResult,
    dir: &Path,
    notes: &mut Vec<String>,
) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for e in &EXPERIMENTS {
        let rows: Vec<&MapRow> = result.rows.iter().filter(|r| shown_in(r, e)).collect();
        if !rows.iter().any(|r| r.experiment == e.id) {
            continue;
        }
        for (cache, metric) in panels(&rows) {
            let p = Panel::of(&rows, cache, metric);
            let c = chart_of(e, &p, cache, metric, result.unit);
            let name = stem(e, cache, metric);
            match chart::write_chart(&c, dir, &name) {
                Ok(files) => {
                    out.push(format!("{name}.svg"));
                    match files.png {
                        Ok(_) => out.push(format!("{name}.png")),
                        Err(why) => notes.push(format!("{name}.png not drawn: {why}")),
                    }
                }
                Err(e) => notes.push(format!("{name}: {e}")),
            }
        }
    }
    Ok(out)
}

fn cell(r: Option<&MapRow>) -> String {
    match r {
        None => "n/a".into(),
        Some(r) => {
            let s = &r.summary;
            let v = if r.metric == "mapping share" {
                format!("{:.1}%", s.mean * 100.0)
            } else {
                format!("{:.0}", s.mean)
            };
            if s.ci95_half_width.is_finite() && s.mean != 0.0 {
                format!("{v} ± {:.0}%", s.relative_ci() * 100.0)
            } else {
                v
            }
        }
    }
}

/// The experiment's tables in Markdown: one per (cache, metric).
pub fn experiment_tables(result: &MapStudyResult, e: &super::Experiment) -> String {
    let rows: Vec<&MapRow> = result.rows.iter().filter(|r| shown_in(r, e)).collect();
    let mut s = String::new();
    for (cache, metric) in panels(&rows) {
        let p = Panel::of(&rows, cache, metric);
        let _ = writeln!(s, "\n{cache}, {metric}:\n");
        let _ = writeln!(s, "| setting | op | {} |", p.series.join(" | "));
        let _ = writeln!(s, "|---|---|{}", "---:|".repeat(p.series.len()));
        for g in &p.groups {
            let cells: Vec<String> = p.series.iter().map(|m| cell(p.get(g, m))).collect();
            let _ = writeln!(s, "| {} | {} | {} |", g.0, g.1, cells.join(" | "));
        }
    }
    s
}

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.2}"))
}

fn findings_md(findings: &[FindingResult]) -> String {
    let mut s = String::from("\n## Findings\n\nMeasured ratios are speedups (the slower one's cost over the faster one's; ops/s for Filebench) beside the paper's; \"significant\" is the run rule (95% intervals apart, means at least 10% apart).\n");
    for f in findings {
        let _ = writeln!(
            s,
            "\n### {} — {}\n\n{}\n",
            f.statement,
            f.label(),
            f.paper_evidence
        );
        let _ = writeln!(
            s,
            "| check | paper | measured | significant | verdict | detail |"
        );
        let _ = writeln!(s, "|---|---:|---:|---|---|---|");
        for c in &f.checks {
            let verdict = if c.not_run {
                "not run"
            } else {
                c.verdict.label()
            };
            let sig = c.significant.map_or("-", |b| if b { "yes" } else { "no" });
            let _ = writeln!(
                s,
                "| {} | {} | {} | {sig} | {verdict} | {} |",
                c.what,
                ratio(c.paper),
                ratio(c.measured),
                c.detail
            );
        }
        if f.verdict != crate::study::findings::Verdict::Reproduced && !f.caveat.is_empty() {
            let _ = writeln!(s, "\nLikely reason: {}.", f.caveat);
        }
    }
    s
}

fn markdown(
    result: &MapStudyResult,
    env: &Environment,
    findings: &[FindingResult],
    charts: &[String],
) -> String {
    let c = &result.config;
    let mut s = format!(
        "# {NAME}: Rethinking File Mapping for Persistent Memory (Neal et al., FAST'21), section 4\n\n\
         Mappings: {}. Size: {}, {} samples per measurement ({} cold operations each; hot: {} reads or {} appends), \
         large file {}, wall time {:.0} s{}. Unit: {} (rdtscp).\n\n\
         Machine: {} ({} CPUs), kernel {}, images in {} ({}).\n\n## How this run differs from the paper\n\n",
        result.mappings.join(", "),
        c.size.name(),
        c.trials,
        c.cold_reps,
        c.hot_ops,
        c.hot_appends,
        super::size_label(c.big_file_bytes),
        result.wall_seconds,
        if result.interrupted { " (interrupted)" } else { "" },
        result.unit,
        env.cpu_model,
        env.cpus,
        env.kernel_release,
        c.shm_dir.display(),
        env.shm_dir_fs,
    );
    for e in &env.emulation {
        let _ = writeln!(s, "- {e}");
    }
    for e in &EXPERIMENTS {
        if !result.rows.iter().any(|r| r.experiment == e.id) {
            continue;
        }
        let _ = writeln!(s, "\n## {} {} ({})", e.section, e.title, e.figure);
        s.push_str(&experiment_tables(result, e));
        let stem = format!(
            "fig{:0>2}-{}",
            e.figure
                .chars()
                .filter(char::is_ascii_digit)
                .collect::<String>(),
            e.id
        );
        for f in charts
            .iter()
            .filter(|f| f.starts_with(&stem) && f.ends_with(".svg"))
        {
            let _ = writeln!(s, "\n![{f}]({f})");
        }
    }
    s.push_str(&findings_md(findings));
    s.push_str(NOT_RUN);
    if !result.notes.is_empty() || !result.failures.is_empty() {
        s.push_str("\n## Notes\n\n");
        for n in &result.notes {
            let _ = writeln!(s, "- {n}");
        }
        for (what, why) in &result.failures {
            let _ = writeln!(s, "- FAILED {what}: {why}");
        }
    }
    s
}

/// The per-experiment table for the terminal: every row's mean and interval.
pub fn format_table(result: &MapStudyResult) -> String {
    let mut s = String::new();
    for e in &EXPERIMENTS {
        if result.rows.iter().any(|r| r.experiment == e.id) {
            let _ = writeln!(s, "\n{} {} ({})", e.section, e.title, e.figure);
            s.push_str(&experiment_tables(result, e));
        }
    }
    s
}
