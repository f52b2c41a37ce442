//! The results directory of a study run: configuration, environment, raw
//! per-trial data, JSON (schema in docs/LAB.md), CSV, Markdown, and the
//! figures: bar charts normalised to a baseline, or line charts of absolute
//! rates for scaling figures ([`super::curves`]), like the papers' figures.

use super::curves;
use super::env::Environment;
use super::findings::{self, FindingCheck};
use super::targets::matches_name;
use super::workload::{StudyWorkload, WorkloadConfig};
use super::{Cell, CellStatus, StudyResult};
use crate::chart::{self, Bar, BarChart, Series};
use crate::stats::{compare, Summary};
use serde::Serialize;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

/// Identifies the JSON layout of `results.json`: `nvmfs-lab/study-<name>/v2`.
pub fn schema(study: &str) -> String {
    format!("nvmfs-lab/study-{study}/v2")
}

/// One row of the results table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub workload: String,
    pub target: String,
    pub paper_name: Option<String>,
    pub status: String,
    /// What `ops_per_sec` counts: `ops/s`, or `tpmC` for TPC-C.
    pub metric: String,
    pub ops_per_sec: Option<Summary>,
    pub mb_per_sec_mean: Option<f64>,
    /// Mean over kept trials of process user+system CPU seconds per 1000 ops.
    pub cpu_ms_per_kop: Option<f64>,
    /// This target's mean over the baseline's, and whether it is significant.
    pub vs_baseline: Option<f64>,
    pub vs_baseline_significant: Option<bool>,
    /// nvmfs's rows (in-process, fuse:nvmfs, run:nvmfs): ratio to the best kernel variant on
    /// this workload.
    pub vs_best_kernel: Option<f64>,
    pub best_kernel: Option<String>,
}

/// `results.json`.
#[derive(Debug, Serialize)]
pub struct ResultsFile<'a> {
    pub schema: String,
    pub study: &'static str,
    pub baseline: &'a str,
    pub environment: &'a Environment,
    pub config: &'a super::StudyConfig,
    pub workloads: &'a [StudyWorkload],
    pub targets: &'a [super::targets::TargetEntry],
    pub rows: &'a [Row],
    pub findings: &'a [FindingCheck],
    pub interrupted: bool,
    pub wall_seconds: f64,
}

/// What was written.
pub struct Written {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    pub notes: Vec<String>,
    pub rows: Vec<Row>,
    pub findings: Vec<FindingCheck>,
}

fn status_label(s: &CellStatus) -> String {
    match s {
        CellStatus::Ok => "ok".into(),
        CellStatus::StoppedEarly(why) => format!("stopped early: {why}"),
        CellStatus::Failed(e) => format!("failed: {e}"),
        CellStatus::Interrupted => "interrupted".into(),
    }
}

fn kept_mean(cell: &Cell, f: impl Fn(&crate::filebench::TrialResult) -> f64) -> Option<f64> {
    let r = cell.result.as_ref()?.filebench()?;
    let kept: Vec<f64> = r.trials.iter().filter(|t| !t.discarded).map(f).collect();
    (!kept.is_empty()).then(|| kept.iter().sum::<f64>() / kept.len() as f64)
}

/// Mean MB/s over the kept trials, whatever the benchmark measured it with.
fn mb_per_sec(cell: &Cell) -> Option<f64> {
    kept_mean(cell, |t| t.summary.mb_per_sec)
        .or_else(|| cell.result.as_ref()?.fsbench()?.mb_per_sec)
}

/// Table rows with ratios to the baseline and, for nvmfs, to the best kernel variant.
pub fn rows(result: &StudyResult) -> Vec<Row> {
    let base = &result.config.baseline;
    result
        .cells
        .iter()
        .map(|c| {
            let s = c.ops_per_sec();
            let b = result
                .cells
                .iter()
                .find(|x| x.workload == c.workload && matches_name(&x.target, base))
                .and_then(Cell::ops_per_sec);
            let cmp = s.zip(b).map(|(s, b)| compare(&s, &b));
            let best = best_kernel(result, &c.workload);
            let vs_best = super::targets::is_nvmfs(&c.target)
                .then(|| {
                    s.zip(best.as_ref().map(|b| b.1))
                        .map(|(s, b)| s.mean / b.mean)
                })
                .flatten();
            Row {
                workload: c.workload.clone(),
                target: c.target.clone(),
                paper_name: c.paper_name.clone(),
                status: status_label(&c.status),
                metric: c
                    .result
                    .as_ref()
                    .map_or("ops/s", |r| r.metric())
                    .to_string(),
                ops_per_sec: s,
                mb_per_sec_mean: mb_per_sec(c),
                cpu_ms_per_kop: kept_mean(c, |t| {
                    (t.cpu.user_seconds + t.cpu.system_seconds) * 1e6 / t.summary.ops.max(1) as f64
                }),
                vs_baseline: cmp.map(|x| x.ratio),
                vs_baseline_significant: cmp.map(|x| x.significant),
                vs_best_kernel: vs_best,
                best_kernel: (c.target == "nvmfs").then(|| best.map(|b| b.0)).flatten(),
            }
        })
        .collect()
}

/// A target name as part of a file name: `dir:/mnt/x` becomes `dir_mnt_x`,
/// `fuse:nvmfs` becomes `fuse_nvmfs`.
pub(crate) fn file_stem(target: &str) -> String {
    let mut out = String::with_capacity(target.len());
    for c in target.chars() {
        let keep = c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        if !(keep || out.ends_with('_')) {
            out.push('_');
        } else if keep {
            out.push(c);
        }
    }
    out
}

/// The fastest kernel variant (by mean) on `workload`.
pub fn best_kernel(result: &StudyResult, workload: &str) -> Option<(String, Summary)> {
    let c = findings::best_kernel_cell(&result.cells, workload)?;
    Some((c.target.clone(), c.ops_per_sec()?))
}

/// Writes everything into `result.config.out_dir` (created if needed).
pub fn write_all(result: &StudyResult, env: &Environment) -> io::Result<Written> {
    let dir = result.config.out_dir.clone();
    std::fs::create_dir_all(dir.join("raw"))
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
    let rows = rows(result);
    let checks = findings::check_all(&(result.study.findings)(), &result.cells);
    let mut w = Written {
        dir: dir.clone(),
        files: Vec::new(),
        notes: Vec::new(),
        rows,
        findings: checks,
    };
    put(&mut w, "config.json", json(&result.config))?;
    put(&mut w, "environment.json", json(env))?;
    for c in &result.cells {
        let name = format!("raw/{}--{}.json", c.workload, file_stem(&c.target));
        put(&mut w, &name, json(c))?;
    }
    put(&mut w, "trials.csv", trials_csv(result))?;
    let file = ResultsFile {
        schema: schema(result.study.name),
        study: result.study.name,
        baseline: &result.config.baseline,
        environment: env,
        config: &result.config,
        workloads: &result.workloads,
        targets: &result.targets,
        rows: &w.rows,
        findings: &w.findings,
        interrupted: result.interrupted,
        wall_seconds: result.wall_seconds,
    };
    let text = json(&file);
    put(&mut w, "results.json", text)?;
    let csv = results_csv(&w.rows);
    put(&mut w, "results.csv", csv)?;
    let charts = write_charts(result, &dir, &mut w.notes)?;
    w.files.extend(charts.iter().cloned());
    w.notes.extend(core_link_note(result));
    let md = markdown(result, env, &w.rows, &w.findings, &charts, &w.notes);
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

pub(crate) fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).expect("serialisable") + "\n"
}

/// A CPU link in whole nanoseconds, or empty.
fn whole_ns(v: Option<f64>) -> String {
    v.map_or_else(String::new, |ns| format!("{ns:.0}"))
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, |x| format!("{x:.4}"))
}

pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The spread of the CPU-to-CPU cache-line round trip measured after each Filebench trial,
/// when it moved enough to matter (the slowest above 1.5x the fastest).
fn core_link_note(result: &StudyResult) -> Option<String> {
    let trials: Vec<_> = result
        .cells
        .iter()
        .filter_map(|c| c.result.as_ref().and_then(|r| r.filebench()))
        .flat_map(|r| &r.trials)
        .collect();
    let links: Vec<f64> = trials.iter().filter_map(|t| t.cpu.core_link_ns).collect();
    let min = links.iter().copied().reduce(f64::min)?;
    let max = links.iter().copied().reduce(f64::max)?;
    let far = links.iter().filter(|&&ns| ns > 1.5 * min).count();
    let set_aside = trials.iter().filter(|t| t.set_aside.is_some()).count();
    (max > 1.5 * min).then(|| {
        format!(
            "the CPU-to-CPU cache-line round trip measured after each Filebench trial moved \
             between {min:.0} and {max:.0} ns ({far} of {} trials above 1.5x the fastest): \
             the host placed the CPUs differently during the run, and threads that share \
             cache lines (locks, counters, the fileset's pick state) run slower in those \
             trials; `core_link_ns` in trials.csv tells which. {set_aside} trials were set \
             aside and run again for a link more than {}x the nearest placement's \
             (`set_aside` in trials.csv)",
            links.len(),
            crate::filebench::placement::FACTOR
        )
    })
}

fn trials_csv(result: &StudyResult) -> String {
    let mut s = String::from(
        "workload,target,trial,discarded,remounted,seconds,ops,ops_per_sec,mb_per_sec,reads_per_sec,writes_per_sec,ms_per_op,cpu_user_s,cpu_system_s,machine_busy,core_link_ns,stopped_early,core_link_before_ns,set_aside\n",
    );
    for c in &result.cells {
        if let Some(d) = c.result.as_ref().and_then(|r| r.database()) {
            for t in &d.trials {
                let row = (t.index, t.discarded, t.remounted, t.seconds, t.ops, t.value);
                other_trial_csv(&mut s, c, row, None);
            }
            continue;
        }
        if let Some(b) = c.result.as_ref().and_then(|r| r.fsbench()) {
            for t in &b.trials {
                let row = (t.index, t.discarded, t.remounted, t.seconds, t.ops, t.value);
                other_trial_csv(&mut s, c, row, Some(t.mb_per_sec));
            }
            continue;
        }
        let Some(r) = c.result.as_ref().and_then(|r| r.filebench()) else {
            continue;
        };
        for t in &r.trials {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{:.4},{},{:.2},{:.3},{:.2},{:.2},{:.5},{:.4},{:.4},{},{},{},{},{}",
                c.workload,
                c.target,
                t.index,
                t.discarded,
                t.remounted,
                t.seconds,
                t.summary.ops,
                t.summary.ops_per_sec,
                t.summary.mb_per_sec,
                t.summary.reads_per_sec,
                t.summary.writes_per_sec,
                t.summary.ms_per_op,
                t.cpu.user_seconds,
                t.cpu.system_seconds,
                opt(t.cpu.machine_busy_fraction),
                whole_ns(t.cpu.core_link_ns),
                csv_field(t.stopped_early.as_deref().unwrap_or("")),
                whole_ns(t.cpu.core_link_before_ns),
                csv_field(t.set_aside.as_deref().unwrap_or("")),
            );
        }
    }
    s
}

/// A trial of a database, filemark, pgmeter or AIM7 cell in the columns of `trials.csv`:
/// (index, discarded, remounted, seconds, ops, value), the metric (ops/s, tpmC,
/// transactions/s, jobs/min) in `ops_per_sec`, MB/s when measured, the Filebench-only
/// columns empty.
fn other_trial_csv(
    s: &mut String,
    c: &Cell,
    (index, discarded, remounted, seconds, ops, value): (usize, bool, bool, f64, u64, f64),
    mb_per_sec: Option<f64>,
) {
    let _ = writeln!(
        s,
        "{},{},{},{},{},{:.4},{},{:.2},{},,,,,,,,,,",
        c.workload,
        c.target,
        index,
        discarded,
        remounted,
        seconds,
        ops,
        value,
        mb_per_sec.map_or(String::new(), |m| format!("{m:.3}")),
    );
}

fn results_csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "workload,target,paper_name,status,metric,n,ops_per_sec_mean,ci95_low,ci95_high,mb_per_sec,cpu_ms_per_kop,vs_baseline,significant,vs_best_kernel,best_kernel\n",
    );
    for r in rows {
        let o = r.ops_per_sec;
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.workload,
            r.target,
            r.paper_name.as_deref().unwrap_or(""),
            csv_field(&r.status),
            r.metric,
            o.map_or(0, |o| o.n),
            opt(o.map(|o| o.mean)),
            opt(o.map(|o| o.ci95_low).filter(|v| v.is_finite())),
            opt(o.map(|o| o.ci95_high).filter(|v| v.is_finite())),
            opt(r.mb_per_sec_mean),
            opt(r.cpu_ms_per_kop),
            opt(r.vs_baseline),
            r.vs_baseline_significant
                .map_or(String::new(), |b| b.to_string()),
            opt(r.vs_best_kernel),
            r.best_kernel.as_deref().unwrap_or(""),
        );
    }
    s
}

/// The figures: one per paper figure, groups = targets, series = workloads
/// of the figure, values normalised to the baseline's mean.
fn write_charts(
    result: &StudyResult,
    dir: &Path,
    notes: &mut Vec<String>,
) -> io::Result<Vec<PathBuf>> {
    let base = &result.config.baseline;
    let mut figures: Vec<&str> = result.workloads.iter().map(|w| w.figure).collect();
    figures.dedup();
    let targets: Vec<String> = {
        let mut t: Vec<String> = Vec::new();
        for c in &result.cells {
            if !t.contains(&c.target) {
                t.push(c.target.clone());
            }
        }
        t
    };
    let mut files = Vec::new();
    for fig in figures {
        if let Some(f) = curves::figure(result, fig) {
            if f.curves.is_empty() {
                notes.push(format!("{fig}: no curves (no cell measured a rate)"));
            } else {
                let note = format!(
                    "{} run; whiskers: 95% CI; absolute rates, not normalised",
                    result.config.size.name()
                );
                put_chart(
                    &curves::chart(&f, &note),
                    dir,
                    &curves::stem(&f),
                    &mut files,
                    notes,
                )?;
            }
            continue;
        }
        let wls: Vec<&StudyWorkload> = result
            .workloads
            .iter()
            .filter(|w| w.figure == fig)
            .collect();
        let series: Vec<Series> = wls
            .iter()
            .map(|w| Series {
                name: w.id.clone(),
                bars: targets
                    .iter()
                    .map(|t| normalised_bar(result, &w.id, t, base))
                    .collect(),
            })
            .collect();
        if series.iter().all(|s| s.bars.iter().all(Option::is_none)) {
            notes.push(format!("{fig}: no bars (the baseline {base} did not run)"));
            continue;
        }
        let stem = figure_stem(fig, &wls);
        let chart = BarChart {
            title: format!(
                "{} ({}): ops/s relative to {base}",
                if fig == "extra" { "not in the paper" } else { fig },
                wls.iter().map(|w| w.id.as_str()).collect::<Vec<_>>().join(", ")
            ),
            y_label: format!(
                "{} relative to {base} (= 1.0)",
                if fig == "Fig. 5" { "tpmC" } else { "ops/s" }
            ),
            groups: targets.clone(),
            series,
            reference_line: Some(1.0),
            note: Some(format!(
                "{} run, files scaled 1/{} of the paper; whiskers: 95% CI; missing bar: did not run",
                result.config.size.name(),
                result.config.size.divisor()
            )),
        };
        put_chart(&chart, dir, &stem, &mut files, notes)?;
        for w in wls
            .iter()
            .filter(|w| matches!(w.config, WorkloadConfig::Ycsb(_)))
        {
            if let Some(chart) = latency_chart(result, w, &targets) {
                put_chart(&chart, dir, &format!("{stem}-latency"), &mut files, notes)?;
            }
        }
    }
    Ok(files)
}

fn put_chart<C: chart::Chart>(
    chart: &C,
    dir: &Path,
    stem: &str,
    files: &mut Vec<PathBuf>,
    notes: &mut Vec<String>,
) -> io::Result<()> {
    let out = chart::write_chart(chart, dir, stem)?;
    files.push(out.svg.clone());
    match out.png {
        Ok(p) => files.push(p),
        Err(why) => notes.push(format!("{stem}.png not written: {why}")),
    }
    Ok(())
}

/// File name of a figure: the paper's figure number and what it shows.
fn figure_stem(fig: &str, wls: &[&StudyWorkload]) -> String {
    let first = wls.first().map_or("extra", |w| w.id.as_str());
    match (fig, fig.strip_prefix("Fig. ")) {
        ("Fig. 2", _) => "fig2-fileserver".to_string(),
        ("Fig. 3", _) => "fig3-webproxy".to_string(),
        ("Fig. 4", _) => "fig4-webserver".to_string(),
        (_, Some(n)) => format!("fig{n}-{first}"),
        _ => first.to_string(),
    }
}

/// The paper's Figs. 6-11: each YCSB operation's mean latency at the fixed offered load,
/// relative to nvmfs (the paper: to PMFS), so higher is worse.
fn latency_chart(result: &StudyResult, w: &StudyWorkload, targets: &[String]) -> Option<BarChart> {
    let lat = |target: &str, op: &str| {
        result
            .cells
            .iter()
            .find(|c| c.workload == w.id && c.target == target)
            .and_then(|c| c.result.as_ref()?.database()?.latency(op))
    };
    let reference = "nvmfs";
    let ops: Vec<String> = ["READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE"]
        .iter()
        .filter(|op| lat(reference, op).is_some())
        .map(|op| op.to_string())
        .collect();
    if ops.is_empty() {
        return None;
    }
    let series = ops
        .iter()
        .map(|op| {
            let base = lat(reference, op).map(|b| b.mean).filter(|m| *m > 0.0);
            Series {
                name: op.clone(),
                bars: targets
                    .iter()
                    .map(|t| {
                        let (s, b) = (lat(t, op)?, base?);
                        Some(relative_bar(&s, b))
                    })
                    .collect(),
            }
        })
        .collect();
    let offered = match &w.config {
        WorkloadConfig::Ycsb(y) => y.fixed_load_ops_per_sec,
        _ => 0.0,
    };
    Some(BarChart {
        title: format!(
            "{} ({}): mean latency per operation at {offered:.0} ops/s offered, relative to {reference}",
            w.figure, w.id
        ),
        y_label: format!("latency relative to {reference} (= 1.0; higher is worse)"),
        groups: targets.to_vec(),
        series,
        reference_line: Some(1.0),
        note: Some(format!(
            "{} run, SQLite (WAL, mapped) standing in for MongoDB; whiskers: 95% CI; missing bar: did not run",
            result.config.size.name()
        )),
    })
}

/// A summary as a bar relative to `base`, its interval clipped at 0.
fn relative_bar(s: &Summary, base: f64) -> Bar {
    let lo = if s.ci95_low.is_finite() {
        s.ci95_low.max(0.0)
    } else {
        s.mean
    };
    let hi = if s.ci95_high.is_finite() {
        s.ci95_high
    } else {
        s.mean
    };
    Bar {
        value: s.mean / base,
        ci_low: lo / base,
        ci_high: hi / base,
    }
}

fn normalised_bar(result: &StudyResult, workload: &str, target: &str, base: &str) -> Option<Bar> {
    let find = |t: &str| {
        result
            .cells
            .iter()
            .find(|c| c.workload == workload && matches_name(&c.target, t))
            .and_then(Cell::ops_per_sec)
    };
    let s = find(target)?;
    let b = find(base)?;
    (b.mean > 0.0).then(|| relative_bar(&s, b.mean))
}

/// The console table: one line per workload and target.
pub fn format_table(rows: &[Row], baseline: &str) -> String {
    // As wide as the longest workload id (linux-2002's `filemark-small-t128`), at least 14.
    let w = rows
        .iter()
        .map(|r| r.workload.chars().count())
        .fold(14, usize::max);
    let mut s = format!(
        "{:<w$} {:<16} {:>12} {:>10} {:>9} {:>8} {:>9}  {}\n",
        "workload", "target", "ops/s", "±95%", "MB/s", "vs base", "vs best", "status"
    );
    for r in rows {
        let (mean, ci) = r
            .ops_per_sec
            .map_or((String::from("-"), String::from("-")), |o| {
                (
                    format!("{:.0}", o.mean),
                    if o.ci95_half_width.is_finite() {
                        format!("{:.1}%", o.relative_ci() * 100.0)
                    } else {
                        "n/a".into()
                    },
                )
            });
        let _ = writeln!(
            s,
            "{:<w$} {:<16} {:>12} {:>10} {:>9} {:>8} {:>9}  {}",
            r.workload,
            r.target,
            mean,
            ci,
            r.mb_per_sec_mean.map_or("-".into(), |v| format!("{v:.0}")),
            r.vs_baseline.map_or("-".into(), |v| format!(
                "{v:.2}{}",
                if r.vs_baseline_significant == Some(true) {
                    "*"
                } else {
                    ""
                }
            )),
            r.vs_best_kernel
                .map_or(String::new(), |v| format!("{v:.2}x")),
            r.status,
        );
    }
    let _ = writeln!(
        s,
        "ops/s: each workload's rate (ops/s, tpmC, transactions/s or jobs/min, see report.md); vs base: mean rate over {baseline}'s (* = significant: 95% intervals apart and >= 10%); vs best: nvmfs over the fastest kernel variant"
    );
    s
}

/// What the other forms of nvmfs in the table are.
fn forms_note(s: &mut String, forms: &[&str]) {
    if forms.contains(&super::targets::RUN_NAME) {
        s.push_str(
            "\n`run:nvmfs` is the same benchmark code as on a kernel file system, system calls through \
             the C library, answered by nvmfs in the benchmark's process under `nvmfs run` (the \
             LD_PRELOAD library): what an unmodified program sees.",
        );
    }
    if forms.contains(&super::targets::FUSE_NAME) {
        s.push_str(
            " `fuse:nvmfs` is the same image served through the kernel's FUSE: every call a round \
             trip to a server thread.",
        );
    }
    if forms.contains(&super::targets::FUSE_URING_NAME) {
        s.push_str(
            " `fuse-uring:nvmfs` is that over FUSE over io_uring (`nvmfs mount -o io_uring`): one \
             ring per CPU, each request answered on the CPU that asked.",
        );
    }
    if forms.contains(&super::targets::FUSE_WB_NAME) {
        s.push_str(
            " `fuse-wb:nvmfs` is `fuse:nvmfs` with the kernel's write-back cache (`nvmfs mount -o \
             writeback_cache`): written data durable at fsync or close, as on the kernel file \
             systems, instead of on return.",
        );
    }
    if !forms.is_empty() {
        s.push('\n');
    }
}

fn markdown(
    result: &StudyResult,
    env: &Environment,
    rows: &[Row],
    checks: &[FindingCheck],
    charts: &[PathBuf],
    notes: &[String],
) -> String {
    let cfg = &result.config;
    let mut s = String::new();
    let _ = writeln!(s, "# {}: {}\n", result.study.name, result.study.title);
    s.push_str(&(result.study.intro)(result));
    let _ = writeln!(s, "## nvmfs against the best kernel variant\n");
    // The other forms of nvmfs get a ratio column each when they ran.
    let forms: Vec<&str> = [
        super::targets::RUN_NAME,
        super::targets::FUSE_NAME,
        super::targets::FUSE_URING_NAME,
        super::targets::FUSE_WB_NAME,
    ]
    .into_iter()
    .filter(|f| rows.iter().any(|r| r.target == *f))
    .collect();
    let _ = writeln!(
        s,
        "| workload | metric | nvmfs | best kernel | its rate | nvmfs / best |{}",
        forms
            .iter()
            .map(|f| format!(" {f} / best |"))
            .collect::<String>()
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|{}", "---|".repeat(forms.len()));
    let ratio = |target: &str, workload: &str| {
        rows.iter()
            .find(|r| r.workload == workload && r.target == target)
            .and_then(|r| r.vs_best_kernel)
            .map_or("-".into(), |v| format!("{v:.2}x"))
    };
    for w in &result.workloads {
        let nv = rows
            .iter()
            .find(|r| r.workload == w.id && r.target == "nvmfs");
        let best = best_kernel(result, &w.id);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |{}",
            w.id,
            nv.map_or("ops/s", |r| &r.metric),
            nv.and_then(|r| r.ops_per_sec)
                .map_or("-".into(), |o| fmt_ci(&o)),
            best.as_ref().map_or("-", |b| b.0.as_str()),
            best.as_ref().map_or("-".into(), |b| fmt_ci(&b.1)),
            ratio("nvmfs", &w.id),
            forms
                .iter()
                .map(|f| format!(" {} |", ratio(f, &w.id)))
                .collect::<String>(),
        );
    }
    forms_note(&mut s, &forms);
    curve_tables(&mut s, result);
    database_latency_section(&mut s, result);
    let _ = writeln!(s, "\n## Findings of the paper, checked\n");
    for f in checks {
        let _ = writeln!(s, "### {} — **{}**\n", f.statement, f.verdict.label());
        let _ = writeln!(s, "Paper: {}.\n", f.paper_evidence);
        let _ = writeln!(
            s,
            "| workload | ratio | paper | this run | significant | verdict |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for r in &f.ratios {
            let what = match r.metric {
                findings::Metric::OpsPerSec => String::new(),
                findings::Metric::Latency(op) => format!(" {op} latency"),
            };
            let workload = match &r.b_workload {
                Some(b) => format!("{} / {b}", r.workload),
                None => r.workload.clone(),
            };
            let _ = writeln!(
                s,
                "| {} | {}{what} / {} | {} | {} | {} | {} |",
                workload,
                r.a,
                r.b,
                r.paper.map_or("-".into(), |v| format!("{v:.2}")),
                r.measured.map_or("-".into(), |v| format!("{v:.2}")),
                r.significant.map_or("-", |b| if b { "yes" } else { "no" }),
                r.verdict.label()
            );
        }
        if let Some(why) = &f.likely_reason {
            let _ = writeln!(s, "\nLikely reason: {why}.");
        }
        s.push('\n');
    }
    let _ = writeln!(s, "## Figures\n");
    for c in charts
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
    {
        let name = c
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let _ = writeln!(s, "![{name}]({name})\n");
    }
    let _ = writeln!(s, "## All results\n");
    let _ = writeln!(
        s,
        "| workload | target | paper name | rate (95% CI) | MB/s | CPU ms/kop | vs {} | status |",
        cfg.baseline
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.target,
            r.paper_name.as_deref().unwrap_or(""),
            r.ops_per_sec
                .map_or("-".into(), |o| format!("{} {}", fmt_ci(&o), r.metric)),
            r.mb_per_sec_mean.map_or("-".into(), |v| format!("{v:.0}")),
            r.cpu_ms_per_kop.map_or("-".into(), |v| format!("{v:.2}")),
            r.vs_baseline.map_or("-".into(), |v| format!(
                "{v:.2}{}",
                if r.vs_baseline_significant == Some(true) {
                    " (sig.)"
                } else {
                    ""
                }
            )),
            r.status
        );
    }
    let _ = writeln!(s, "\n## Targets not run\n");
    for t in result.targets.iter().filter(|t| t.unavailable.is_some()) {
        let _ = writeln!(
            s,
            "- **{}**: {}",
            t.name,
            t.unavailable.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(s, "\n## Environment and emulation\n");
    let _ = writeln!(
        s,
        "Linux {}, {} × {}, {:.1} GiB RAM; images in a {} directory{}; nvmfs flushes with {}.\n",
        env.kernel_release,
        env.cpus,
        env.cpu_model,
        env.memory_bytes as f64 / (1u64 << 30) as f64,
        env.shm_dir_fs,
        env.shm_dir_huge_pages
            .as_deref()
            .map_or(String::new(), |h| format!(
                " (tmpfs huge={h}: {} pages)",
                if matches!(h, "always" | "within_size") {
                    "2 MiB"
                } else {
                    "4 KiB"
                }
            )),
        env.nvmfs_flush
    );
    for e in &env.emulation {
        let _ = writeln!(s, "- {e}");
    }
    for n in notes {
        let _ = writeln!(s, "- {n}");
    }
    let _ = writeln!(
        s,
        "\nmkfs and mount command lines of every kernel target are in `raw/*.json` (`provision`); per-trial numbers in `trials.csv`; the JSON schema is described in docs/LAB.md of the nvmfs repository."
    );
    s
}

/// The scaling figures as tables (none for studies without them).
fn curve_tables(s: &mut String, result: &StudyResult) {
    let mut figures: Vec<&'static str> = result.workloads.iter().map(|w| w.figure).collect();
    figures.dedup();
    let tables: Vec<String> = figures
        .into_iter()
        .filter_map(|fig| curves::figure(result, fig))
        .filter(|f| !f.curves.is_empty())
        .map(|f| curves::table(&f))
        .collect();
    if tables.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n## Scaling curves\n\nMean over the kept trials ± the 95% interval's half-width, per load and target (the figures' points).\n"
    );
    for t in tables {
        s.push_str(&t);
        s.push('\n');
    }
}

/// Figs. 6-11 as tables: each YCSB operation's mean latency at the fixed offered load.
fn database_latency_section(s: &mut String, result: &StudyResult) {
    let ycsb: Vec<&StudyWorkload> = result
        .workloads
        .iter()
        .filter(|w| matches!(w.config, WorkloadConfig::Ycsb(_)))
        .collect();
    if ycsb.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n## YCSB latency at a fixed offered load (Figs. 6-11)\n"
    );
    let _ = writeln!(
        s,
        "Mean latency per operation over the kept trials, in microseconds, and in brackets relative to nvmfs \
         (higher is worse), as the paper normalises to PMFS. The offered load is the paper's input load scaled \
         by this machine's client threads over the paper's 8. The paper explains its YCSB results with fio's \
         random 1 KiB loads and stores on a mapped file (loads alike everywhere; stores 2.4-2.5x slower on \
         buffered file systems): `nvmfs bench micro --workload mmap-load-1k --workload mmap-store-1k` measures \
         the same on nvmfs, tmpfs and any mounted directory (`--target dir:PATH`).\n"
    );
    for w in ycsb {
        let offered = match &w.config {
            WorkloadConfig::Ycsb(y) => y.fixed_load_ops_per_sec,
            _ => continue,
        };
        let cells: Vec<(&Cell, &super::database::DbResult)> = result
            .cells
            .iter()
            .filter(|c| c.workload == w.id)
            .filter_map(|c| Some((c, c.result.as_ref()?.database()?)))
            .collect();
        let ops: Vec<&str> = ["READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE"]
            .into_iter()
            .filter(|op| cells.iter().any(|(_, d)| d.latency(op).is_some()))
            .collect();
        let nvmfs = cells.iter().find(|(c, _)| c.target == "nvmfs").map(|x| x.1);
        let _ = writeln!(
            s,
            "### {} ({}), {offered:.0} ops/s offered\n",
            w.id, w.figure
        );
        let _ = writeln!(s, "| target | achieved ops/s | {} |", ops.join(" | "));
        let _ = writeln!(s, "|---|---|{}", "---|".repeat(ops.len()));
        for (c, d) in &cells {
            let achieved: Vec<f64> = d
                .trials
                .iter()
                .filter(|t| !t.discarded)
                .filter_map(|t| t.fixed_load.as_ref().map(|f| f.achieved_ops_per_sec))
                .collect();
            let achieved = Summary::of(&achieved).map_or("-".into(), |a| format!("{:.0}", a.mean));
            let lats: Vec<String> = ops
                .iter()
                .map(
                    |op| match (d.latency(op), nvmfs.and_then(|n| n.latency(op))) {
                        (Some(l), Some(n)) if n.mean > 0.0 => {
                            format!("{:.1} ({:.2})", l.mean / 1e3, l.mean / n.mean)
                        }
                        (Some(l), _) => format!("{:.1}", l.mean / 1e3),
                        (None, _) => "-".into(),
                    },
                )
                .collect();
            let _ = writeln!(s, "| {} | {achieved} | {} |", c.target, lats.join(" | "));
        }
        s.push('\n');
    }
}

fn fmt_ci(o: &Summary) -> String {
    if o.ci95_half_width.is_finite() {
        format!("{:.0} ± {:.0}", o.mean, o.ci95_half_width)
    } else {
        format!("{:.0}", o.mean)
    }
}
