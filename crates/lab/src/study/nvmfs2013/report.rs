//! The results directory of the nvmfs-2013 study: config.json, environment.json,
//! results.json (every cell with its trials, FTL replays, tier counters, the findings),
//! results.csv, figures like the seed's Figs. 6-11 (SVG and PNG) and report.md, with each
//! finding's measured ratios beside the paper's.

use super::findings::{self, FindingResult};
use super::{Cell, Config, StudyResult, LEVELS, NAME, TARGETS, WORKLOADS};
use crate::chart::{self, Bar, BarChart, Series};
use crate::ftl::FtlKind;
use crate::stats::Summary;
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
    environment: &'a Environment,
    config: &'a Config,
    cells: &'a [Cell],
    unavailable_targets: &'a [(String, String)],
    findings: &'a [FindingResult],
    notes: &'a [String],
    interrupted: bool,
    wall_seconds: f64,
}

/// How a run here differs from the paper's testbed.
pub fn emulation() -> Vec<String> {
    vec![
        "NVRAM is DRAM: nvmfs's PM image is a file in a tmpfs".into(),
        "the SSD is RAM too: nvmfs's SSD is a file in a tmpfs, the kernel file systems run on a loop device backed by a tmpfs file; no SSD has a write cost here, so throughput does not show the SSD's erases or garbage collection, only each file system's own work".into(),
        "erases and erase cost come from replaying each SSD write stream on the lab's FTL simulator (page-level mapping with greedy GC, FAST), 4 KiB pages, 256 KiB blocks, 10% over-provisioning, a NAND the size of each target's own device (the seed: one 24 GB NAND)".into(),
        "the kernel file systems' DRAM page cache equal to nvmfs's NVRAM (the seed's 4 GB) is a memory cgroup limited to the PM tier's size plus a slack for the workload's own memory and kernel objects".into(),
        "everything is scaled down (the seed: a 64 GB Intel X25-E, 4 GB NVRAM and page cache, data sets not stated)".into(),
        "nvmfs runs in-process (library calls); the kernel file systems through system calls".into(),
    ]
}

pub fn write_all(result: &StudyResult, env: &Environment) -> io::Result<Written> {
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
        environment: env,
        config: &result.config,
        cells: &result.cells,
        unavailable_targets: &result.unavailable_targets,
        findings: &w.findings,
        notes: &result.notes,
        interrupted: result.interrupted,
        wall_seconds: result.wall_seconds,
    };
    let text = json(&file);
    put(&mut w, "results.json", text)?;
    put(&mut w, "results.csv", results_csv(&result.cells))?;
    let charts = write_charts(result, &dir, &mut w.notes)?;
    w.files.extend(charts.iter().map(|c| dir.join(&c.0)));
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

fn results_csv(cells: &[Cell]) -> String {
    let mut s = String::from(
        "workload,level,target,ssd_bytes,utilisation,ops_per_sec,ci95_low,ci95_high,\
         write_sectors,fast_erases,fast_erase_cost_us,page_erases,page_erase_cost_us,\
         cleaned_extents,moved_blocks,unavailable\n",
    );
    for c in cells {
        let t = c.throughput_summary;
        let f = |k: FtlKind| c.ftl(k).map(|r| (r.counters.erases, r.erase_cost_us));
        let opt = |v: Option<String>| v.unwrap_or_default();
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            c.workload,
            c.level,
            c.target,
            c.ssd_bytes,
            opt(c.mean_utilisation().map(|u| format!("{u:.4}"))),
            opt(t.map(|t| format!("{:.2}", t.mean))),
            opt(t.map(|t| format!("{:.2}", t.ci95_low))),
            opt(t.map(|t| format!("{:.2}", t.ci95_high))),
            opt(c.sectors().map(|v| v.to_string())),
            opt(f(FtlKind::Fast).map(|v| v.0.to_string())),
            opt(f(FtlKind::Fast).map(|v| format!("{:.0}", v.1))),
            opt(f(FtlKind::Page).map(|v| v.0.to_string())),
            opt(f(FtlKind::Page).map(|v| format!("{:.0}", v.1))),
            opt(first_tier(c).map(|t| t.cleaned_extents.to_string())),
            opt(first_tier(c).map(|t| t.moved_blocks.to_string())),
            csv_field(c.unavailable.as_deref().unwrap_or(""))
        );
    }
    s
}

fn first_tier(c: &Cell) -> Option<&super::TierCounters> {
    c.tier.first()
}

/// A bar from a summary (whiskers clamped at zero).
fn bar_of(s: &Summary, scale: f64) -> Bar {
    let v = (s.mean / scale).max(0.0);
    if s.n < 2 {
        return Bar::exact(v);
    }
    Bar {
        value: v,
        ci_low: (s.ci95_low / scale).clamp(0.0, v),
        ci_high: (s.ci95_high / scale).max(v),
    }
}

/// (file name, caption) of each chart written.
type Charts = Vec<(String, String)>;

fn workload_groups() -> Vec<String> {
    WORKLOADS.iter().map(|w| w.id.to_string()).collect()
}

fn chart_by_target(
    result: &StudyResult,
    level: &str,
    value: &dyn Fn(&Cell) -> Option<Bar>,
) -> Vec<Series> {
    result
        .measured_targets()
        .into_iter()
        .map(|t| Series {
            bars: WORKLOADS
                .iter()
                .map(|w| {
                    result
                        .cell(w.id, level, &t)
                        .filter(|c| c.measured())
                        .and_then(value)
                })
                .collect(),
            name: t,
        })
        .collect()
}

fn write_charts(result: &StudyResult, dir: &Path, notes: &mut Vec<String>) -> io::Result<Charts> {
    let mut out: Charts = Vec::new();
    if result.measured_targets().is_empty() {
        return Ok(out);
    }
    let mut emit = |chart: BarChart, stem: String, out: &mut Charts| -> io::Result<()> {
        if chart
            .series
            .iter()
            .all(|s| s.bars.iter().all(Option::is_none))
        {
            return Ok(());
        }
        let files = chart::write_chart(&chart, dir, &stem)?;
        if let Err(why) = &files.png {
            notes.push(format!("{stem}.png not drawn: {why}"));
        }
        out.push((format!("{stem}.svg"), chart.title.clone()));
        Ok(())
    };
    for l in LEVELS {
        let sectors = |c: &Cell| {
            let v: Vec<f64> = c.write_sectors.iter().map(|&s| s as f64).collect();
            Summary::of(&v).map(|s| bar_of(&s, 1e3))
        };
        let chart = BarChart {
            title: format!("Fig. 6: SSD write traffic, {} utilisation", l.name),
            y_label: "thousands of 512 B sectors written".into(),
            groups: workload_groups(),
            series: chart_by_target(result, l.name, &sectors),
            reference_line: None,
            note: Some("mean of the trials, 95% interval".into()),
        };
        emit(chart, format!("fig6-traffic-{}", l.name), &mut out)?;
        for k in FtlKind::ALL {
            let erases = |c: &Cell| c.ftl(k).map(|r| Bar::exact(r.counters.erases as f64));
            let chart = BarChart {
                title: format!("Fig. 7: erases, {} FTL, {} utilisation", k.name(), l.name),
                y_label: "block erases".into(),
                groups: workload_groups(),
                series: chart_by_target(result, l.name, &erases),
                reference_line: None,
                note: Some("first trial's SSD writes replayed on a fresh NAND".into()),
            };
            emit(
                chart,
                format!("fig7-erases-{}-{}", k.name(), l.name),
                &mut out,
            )?;
            let cost = |c: &Cell| c.ftl(k).map(|r| Bar::exact(r.erase_cost_us / 1e3));
            let chart = BarChart {
                title: format!(
                    "Fig. 7: erase cost, {} FTL, {} utilisation",
                    k.name(),
                    l.name
                ),
                y_label: "erase cost, ms of NAND time".into(),
                groups: workload_groups(),
                series: chart_by_target(result, l.name, &cost),
                reference_line: None,
                note: Some("copies x (25 + 200) us + erases x 1500 us".into()),
            };
            emit(
                chart,
                format!("fig7-cost-{}-{}", k.name(), l.name),
                &mut out,
            )?;
        }
        // Throughput relative to nvmfs at the medium level, per workload (their ops differ).
        let base = |w: &str| {
            result
                .cell(w, "medium", "nvmfs")
                .and_then(|c| c.throughput_summary)
                .map(|s| s.mean)
                .filter(|m| *m > 0.0)
        };
        let thr = |c: &Cell| {
            let b = base(c.workload)?;
            c.throughput_summary.map(|s| bar_of(&s, b))
        };
        let fig = if l.name == "medium" {
            "Fig. 8"
        } else {
            "Fig. 9"
        };
        let chart = BarChart {
            title: format!("{fig}: throughput, {} utilisation", l.name),
            y_label: "ops/s relative to nvmfs at medium (= 1.0)".into(),
            groups: workload_groups(),
            series: chart_by_target(result, l.name, &thr),
            reference_line: Some(1.0),
            note: Some(
                "RAM-backed SSD: no SSD write cost; mean and 95% interval of the trials".into(),
            ),
        };
        emit(
            chart,
            format!(
                "fig{}-throughput-{}",
                if l.name == "medium" { 8 } else { 9 },
                l.name
            ),
            &mut out,
        )?;
    }
    let nvmfs_series = |value: &dyn Fn(&Cell) -> Option<Bar>| -> Vec<Series> {
        LEVELS
            .iter()
            .map(|l| Series {
                name: format!("nvmfs {}", l.name),
                bars: WORKLOADS
                    .iter()
                    .map(|w| {
                        result
                            .cell(w.id, l.name, "nvmfs")
                            .filter(|c| c.measured())
                            .and_then(value)
                    })
                    .collect(),
            })
            .collect()
    };
    let recycled = |c: &Cell| {
        let v: Vec<f64> = c.tier.iter().map(|t| t.recycled_blocks as f64).collect();
        Summary::of(&v).map(|s| bar_of(&s, 1.0))
    };
    let chart = BarChart {
        title: "Fig. 10: blocks recycled by segment cleaning (nilfs2 unavailable)".into(),
        y_label: "4 KiB blocks recycled".into(),
        groups: workload_groups(),
        series: nvmfs_series(&recycled),
        reference_line: None,
        note: Some("mean of the trials, 95% interval".into()),
    };
    emit(chart, "fig10-recycled".into(), &mut out)?;
    let eff = |c: &Cell| {
        let v: Vec<f64> = c
            .tier
            .iter()
            .filter_map(|t| t.cleaning_efficiency)
            .collect();
        Summary::of(&v).map(|s| bar_of(&s, 1.0))
    };
    let chart = BarChart {
        title: "Fig. 11: cleaning efficiency (nilfs2 unavailable)".into(),
        y_label: "1 - moved valid / recycled".into(),
        groups: workload_groups(),
        series: nvmfs_series(&eff),
        reference_line: None,
        note: Some("n/a: no cleaning ran in that cell".into()),
    };
    emit(chart, "fig11-efficiency".into(), &mut out)?;
    Ok(out)
}

fn mib(b: u64) -> String {
    if b < 1 << 20 {
        format!("{} KiB", b >> 10)
    } else {
        format!("{:.1} MiB", b as f64 / 1048576.0)
    }
}

fn markdown(
    result: &StudyResult,
    env: &Environment,
    findings: &[FindingResult],
    charts: &Charts,
) -> String {
    let c = &result.config;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# nvmfs study {NAME}: NVMFS (2013), section IV\n\n\
         Seed 004, \"NVMFS: A hybrid file system for improving random write in NAND-flash \
         SSD\": nvmfs with its SSD tier against kernel file systems on the seed's workloads, \
         at medium and high SSD utilisation. Size `{}`, {} trial(s) per cell, run in {:.0} s \
         on {} ({} CPUs, kernel {}).{}\n",
        c.size.name(),
        c.trials,
        result.wall_seconds,
        env.cpu_model,
        env.cpus,
        env.kernel_release,
        if result.interrupted {
            " **Interrupted: the results are partial.**"
        } else {
            ""
        }
    );
    s += "## Findings\n\n| finding | figure | paper | measured (nvmfs / other) | verdict |\n|---|---|---|---|---|\n";
    for f in findings {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            f.statement,
            f.figure,
            f.paper,
            f.measured,
            f.label()
        );
    }
    s += "\nThe seed's figures are plots whose values its text does not give, so the paper \
          column is the direction each claim states. A claim is reproduced when every cell \
          agrees, partly when some do.\n\n";
    s += "## Setup (scaled down)\n\n";
    let _ = writeln!(
        s,
        "- nvmfs: PM image {} (NVRAM), SSD a {} file in {}; dirty watermarks 80%/50% of the \
         PM data blocks, cleaning at 85% SSD utilisation with fewer than 8 free extents.\n\
         - kernel file systems: a {} loop device on a tmpfs file, traced through tracefs; page \
         cache limited to {} + {} slack (memory cgroup) during the workload; `syncfs` ends each \
         timed phase; the unmount's writeback is traced too.\n\
         - utilisation: a filler file written first (1 MiB writes, then synced) brings the \
         device to the level with the data set: kernel medium {} / high {}, nvmfs medium {} / \
         high {} (nvmfs's counts the half of the PM tier the flusher keeps dirty as off the \
         SSD, so its own SSD utilisation reaches the level). The filler's writes are not in \
         the traffic; the FTL replays run the filler first and count only what the workload \
         added (counters of the whole stream less those of the filler alone). A marker read \
         (40 sectors at the device's end, O_DIRECT) separates them in the kernel traces.\n\
         - data set per workload: {}. IOzone: one file of it, then {}x its blocks in random \
         4 KiB writes. Postmark: {} files of {}-{} bytes (appends grow them to the top), 4 KiB \
         reads and appends, {} transactions per file, 10 subdirectories, no deletion phase. \
         fio: {} files of {}, {}x their blocks in random 4 KiB updates, each opening its file. \
         Filebench fileserver: files of 128 KiB mean (Gamma), 80% preallocated, 4 KiB I/O, {} \
         threads, {} ops.\n\
         - NAND for the replays: 4 KiB pages, 256 KiB blocks, 10% over-provisioned, covering \
         the {} device; erase cost = copies x (25 + 200) us + erases x 1500 us.\n",
        mib(c.pm_bytes),
        mib(c.device_bytes),
        c.shm_dir.display(),
        mib(c.device_bytes),
        mib(c.pm_bytes),
        mib(c.cgroup_slack_bytes),
        mib(c.filler_bytes(&LEVELS[0], false)),
        mib(c.filler_bytes(&LEVELS[1], false)),
        mib(c.filler_bytes(&LEVELS[0], true)),
        mib(c.filler_bytes(&LEVELS[1], true)),
        mib(c.data_bytes),
        c.iozone_rewrites,
        c.data_bytes / u64::from(c.postmark_size_high),
        c.postmark_size_low,
        c.postmark_size_high,
        c.postmark_transactions_per_file,
        c.data_bytes / c.fio_file_bytes,
        mib(c.fio_file_bytes),
        c.fio_updates,
        c.fileserver_threads,
        c.fileserver_ops,
        mib(c.device_bytes),
    );
    s += "**Throughput caveat:** the SSD here is RAM (a tmpfs file, or a loop device on one), \
          which has no write cost: no flash program, erase or garbage collection slows any \
          target down. The throughput figures show each file system's own work only; the \
          SSD's side is in the traffic and erase figures.\n\n";
    s += "How this differs from the seed's testbed:\n\n";
    for e in &env.emulation {
        let _ = writeln!(s, "- {e}");
    }
    s += "\n## Targets not run\n\n";
    if result.unavailable_targets.is_empty() {
        s += "none\n";
    }
    for (t, why) in &result.unavailable_targets {
        let _ = writeln!(s, "- {t}: {why}");
    }
    s += "\n## Results\n\n| workload | level | target | SSD | utilisation | ops/s (95% CI) | sectors written | FAST erases | FAST cost ms | page erases | page cost ms | cleaned extents | efficiency |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for cell in &result.cells {
        if let Some(why) = cell.not_measured() {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |||||||||",
                cell.workload,
                cell.level,
                cell.target,
                mib(cell.filler_bytes),
                why.replace('|', "/")
            );
            continue;
        }
        let f = |k: FtlKind| {
            cell.ftl(k).map_or(("-".into(), "-".into()), |r| {
                (
                    r.counters.erases.to_string(),
                    format!("{:.1}", r.erase_cost_us / 1e3),
                )
            })
        };
        let (fe, fc) = f(FtlKind::Fast);
        let (pe, pc) = f(FtlKind::Page);
        let tier = first_tier(cell);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {fe} | {fc} | {pe} | {pc} | {} | {} |",
            cell.workload,
            cell.level,
            cell.target,
            mib(cell.filler_bytes),
            cell.mean_utilisation()
                .map_or("-".into(), |u| format!("{:.0}%", u * 100.0)),
            cell.throughput_summary.map_or("-".into(), |t| format!(
                "{:.0} ({:.0}-{:.0})",
                t.mean, t.ci95_low, t.ci95_high
            )),
            cell.sectors().map_or("-".into(), |v| v.to_string()),
            tier.map_or("-".into(), |t| t.cleaned_extents.to_string()),
            tier.and_then(|t| t.cleaning_efficiency)
                .map_or("-".into(), |e| format!("{e:.3}")),
        );
    }
    s += "\nUtilisation: nvmfs's valid SSD blocks over its SSD blocks; the kernel file \
          systems' used blocks (statvfs), both at the end of the workload. Traffic, erases \
          and cleaning columns are the first trial's.\n";
    s += "\n## Ratios nvmfs / other, per cell\n\n| finding | workload | level | against | metric | ratio | agrees |\n|---|---|---|---|---|---|---|\n";
    for f in findings {
        for r in &f.ratios {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.3} | {} |",
                f.id,
                r.workload,
                r.level,
                r.against,
                r.metric,
                r.value,
                if r.agrees { "yes" } else { "no" }
            );
        }
    }
    s += "\n## Page-cache budget of the kernel file systems\n\n";
    let budgets: Vec<String> = result
        .cells
        .iter()
        .filter_map(|c| {
            c.cache_budget
                .as_ref()
                .map(|b| format!("- {} {} {}: {b}", c.workload, c.level, c.target))
        })
        .collect();
    if budgets.is_empty() {
        s += "no kernel file system ran\n";
    } else {
        s += &budgets.join("\n");
        s.push('\n');
    }
    s += "\n## Figures\n\n";
    for (file, title) in charts {
        let _ = writeln!(s, "![{title}]({file})\n");
    }
    if !result.notes.is_empty() {
        s += "\n## Notes\n\n";
        for n in &result.notes {
            let _ = writeln!(s, "- {n}");
        }
    }
    let _ = writeln!(
        s,
        "\nTargets, in order: {}. Files: config.json, environment.json, results.json, \
         results.csv, the figures above.",
        TARGETS.join(", ")
    );
    s
}

/// A one-line-per-cell summary for the terminal.
pub fn format_table(result: &StudyResult) -> String {
    let mut s = format!(
        "{:<11} {:<7} {:<7} {:>10} {:>12} {:>8} {:>8} {:>6}\n",
        "workload", "level", "target", "ops/s", "sectors", "FAST er", "page er", "util"
    );
    for c in &result.cells {
        if let Some(why) = c.not_measured() {
            let _ = writeln!(s, "{:<11} {:<7} {:<7} {why}", c.workload, c.level, c.target);
            continue;
        }
        let e = |k| c.ftl(k).map_or(0, |r| r.counters.erases);
        let _ = writeln!(
            s,
            "{:<11} {:<7} {:<7} {:>10.0} {:>12} {:>8} {:>8} {:>5.0}%",
            c.workload,
            c.level,
            c.target,
            c.throughput_summary.map_or(0.0, |t| t.mean),
            c.sectors().unwrap_or(0),
            e(FtlKind::Fast),
            e(FtlKind::Page),
            c.mean_utilisation().unwrap_or(0.0) * 100.0
        );
    }
    s
}
