//! The study's database workloads: YCSB A-F and TPC-C on SQLite (seed 000's Figs. 5-11,
//! where the paper ran MongoDB and MySQL), with the run rules of the Filebench cells: a
//! fresh file system per workload, the database loaded once, then trials each on a freshly
//! remounted file system, the first discarded, 95% intervals over the rest.
//!
//! A YCSB trial has two phases, as the paper's two kinds of numbers: flat out for the
//! throughput that the bars and ratios compare, then at the workload's fixed offered load
//! (the paper's Figs. 6-11: latency per operation type at an input load every file system
//! sustains). A TPC-C trial reports tpmC, New-Orders committed per minute (Fig. 5).

use super::targets::{ImageSpec, Place, StudyTarget, TargetEntry};
use super::StudyProgress;
use crate::db::home::DbHome;
use crate::db::sqlite::{JournalMode, SqliteSettings, Synchronous};
use crate::stats::Summary;
use crate::tpcc::{self, Scale, TpccConfig};
use crate::ycsb::runner::{self, RunOptions};
use crate::ycsb::workload::CoreWorkload;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

/// A YCSB core workload as the study runs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct YcsbWorkload {
    /// `a`..`f`.
    pub letter: char,
    /// Records loaded (the paper: 16 million).
    pub records: u64,
    /// Client threads (the paper: 8 on 8 cores).
    pub threads: usize,
    /// The fixed offered load of the latency phase, ops/s (see [`YcsbWorkload::paper_load`]).
    pub fixed_load_ops_per_sec: f64,
    /// The paper's input load for this workload (Section IV.E).
    pub paper_load_ops_per_sec: f64,
    /// Longest scan (workload E): the paper's 100, not YCSB's default 1000.
    pub max_scan_length: u64,
    /// Journal mode, durability and mmap of the database.
    pub sqlite: SqliteSettings,
}

/// TPC-C as the study runs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TpccWorkload {
    pub warehouses: u32,
    /// Terminal threads (the paper: 8).
    pub terminals: usize,
    pub scale: Scale,
    pub sqlite: SqliteSettings,
}

/// What a database cell measured.
#[derive(Debug, Clone, Serialize)]
pub struct DbResult {
    /// The engine and its settings.
    pub engine: String,
    /// What `ops_per_sec` counts: `ops/s` (YCSB) or `tpmC` (TPC-C).
    pub metric: &'static str,
    /// Loading or populating the database.
    pub setup_seconds: f64,
    pub setup: serde_json::Value,
    pub trials: Vec<DbTrial>,
    /// The metric over the kept trials.
    pub ops_per_sec: Option<Summary>,
    /// Mean latency (ns) per operation type over the kept trials, from the fixed-load
    /// phase when there is one (YCSB), else from the trial (TPC-C).
    pub latency_mean_ns: BTreeMap<String, Summary>,
    pub stopped_early: Option<String>,
}

/// One trial of a database cell.
#[derive(Debug, Clone, Serialize)]
pub struct DbTrial {
    pub index: usize,
    pub discarded: bool,
    pub remounted: bool,
    pub seconds: f64,
    /// Operations (YCSB) or transactions (TPC-C) of the measured phase.
    pub ops: u64,
    /// The metric: ops/s or tpmC.
    pub value: f64,
    /// Latency per operation type of the measured phase.
    pub latency: BTreeMap<String, OpLatency>,
    /// YCSB's fixed-load phase.
    pub fixed_load: Option<FixedLoad>,
    /// The benchmark's own result record.
    pub detail: serde_json::Value,
}

/// The fixed-load phase of a YCSB trial.
#[derive(Debug, Clone, Serialize)]
pub struct FixedLoad {
    pub offered_ops_per_sec: f64,
    pub achieved_ops_per_sec: f64,
    pub latency: BTreeMap<String, OpLatency>,
}

/// Latency of one operation type, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OpLatency {
    pub count: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p95_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl DbResult {
    /// Mean latency of `op` over the kept trials.
    pub fn latency(&self, op: &str) -> Option<Summary> {
        self.latency_mean_ns.get(op).copied()
    }
}

/// Phase lengths and trial count of a cell.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    pub trials: usize,
    pub warmup_seconds: f64,
    pub run_seconds: f64,
    pub seed: u64,
    pub shm_dir: &'a Path,
    pub device_bytes: u64,
}

/// Runs a YCSB workload on a fresh `t`.
pub fn run_ycsb_cell(
    w: &YcsbWorkload,
    t: &TargetEntry,
    rules: &Rules<'_>,
    provision: &mut Option<serde_json::Value>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<DbResult> {
    let core = ycsb_core(w)?;
    let image = ImageSpec {
        bytes: image_bytes(w.records * 1100),
        inodes: 4096,
    };
    let mut target = StudyTarget::create_sized(t, rules.shm_dir, rules.device_bytes, image)?;
    *provision = Some(target.describe());
    let result = ycsb_on(&mut target, w, &core, rules, interrupted, progress);
    let closed = target.close();
    let r = result?;
    closed?;
    Ok(r)
}

/// The YCSB properties of a study workload.
pub fn ycsb_core(w: &YcsbWorkload) -> io::Result<CoreWorkload> {
    let mut core = CoreWorkload::preset(w.letter)?;
    core.record_count = w.records;
    core.max_scan_length = w.max_scan_length;
    // Phases are bounded by time, not by an operation count.
    core.operation_count = 0;
    core.validate()?;
    Ok(core)
}

fn ycsb_on(
    target: &mut StudyTarget,
    w: &YcsbWorkload,
    core: &CoreWorkload,
    rules: &Rules<'_>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<DbResult> {
    progress.note(&format!("loading {} records", w.records));
    let t0 = Instant::now();
    let (engine, load) = {
        let db = home_of(target).sqlite("ycsb.db", &w.sqlite)?;
        let store = db.usertable(core.field_count)?;
        let opts = run_options(w.threads, None, None, rules.seed);
        let load = runner::load(&store, core, &opts, interrupted, &mut |_| {})?;
        let engine = crate::ycsb::db::KvStore::describe(&store);
        drop(store);
        db.close()?;
        (engine, load)
    };
    let setup_seconds = t0.elapsed().as_secs_f64();
    let mut trials = Vec::new();
    let mut stopped_early = None;
    // Every phase continues the key space where the last one left it (D and E insert), as
    // if it were YCSB's run phase after a load of that many records.
    let mut core = core.clone();
    let fields = core.field_count;
    let mut phase = |store: &crate::db::sqlite::SqliteStore,
                     target_ops: Option<f64>,
                     secs: f64,
                     seed: u64|
     -> io::Result<runner::PhaseResult> {
        let opts = run_options(w.threads, target_ops, Some(secs), seed);
        let r = runner::run(store, &core, &opts, interrupted, &mut |_| {})?;
        core.record_count += r.count("INSERT");
        Ok(r)
    };
    for index in 0..rules.trials {
        if interrupted() {
            stopped_early = Some("interrupted".to_string());
            break;
        }
        let remounted = index > 0 && target.remount()?;
        let db = home_of(target).sqlite("ycsb.db", &w.sqlite)?;
        let store = db.usertable(fields)?;
        let seed = rules.seed ^ (index as u64 + 1);
        if rules.warmup_seconds > 0.0 {
            phase(&store, None, rules.warmup_seconds, seed ^ 0x57)?;
        }
        let max = phase(&store, None, rules.run_seconds, seed)?;
        progress.tick(index, rules.trials, max.ops_per_sec, true);
        let fixed = phase(
            &store,
            Some(w.fixed_load_ops_per_sec),
            rules.run_seconds,
            seed ^ 0xf1,
        )?;
        drop(store);
        db.close()?;
        trials.push(DbTrial {
            index,
            discarded: rules.trials > 1 && index == 0,
            remounted,
            seconds: max.runtime_ns as f64 / 1e9,
            ops: max.operations,
            value: max.ops_per_sec,
            latency: ycsb_latency(&max.per_op),
            fixed_load: Some(FixedLoad {
                offered_ops_per_sec: w.fixed_load_ops_per_sec,
                achieved_ops_per_sec: fixed.ops_per_sec,
                latency: ycsb_latency(&fixed.per_op),
            }),
            detail: serde_json::json!({ "max": max, "fixed_load": fixed }),
        });
        if max.interrupted || fixed.interrupted {
            stopped_early = Some("interrupted".to_string());
            break;
        }
    }
    Ok(finish(
        engine,
        "ops/s",
        setup_seconds,
        serde_json::to_value(&load).unwrap_or_default(),
        trials,
        stopped_early,
    ))
}

fn run_options(threads: usize, target: Option<f64>, secs: Option<f64>, seed: u64) -> RunOptions {
    RunOptions {
        threads,
        target_ops_per_sec: target,
        max_execution_time: secs.map(Duration::from_secs_f64),
        seed,
    }
}

fn ycsb_latency(
    per_op: &BTreeMap<String, crate::ycsb::measure::OpStats>,
) -> BTreeMap<String, OpLatency> {
    per_op
        .iter()
        .map(|(k, s)| {
            (
                k.clone(),
                OpLatency {
                    count: s.count,
                    mean_ns: s.latency_ns_mean,
                    p50_ns: s.latency_ns_p50,
                    p95_ns: s.latency_ns_p95,
                    p99_ns: s.latency_ns_p99,
                    max_ns: s.latency_ns_max,
                },
            )
        })
        .collect()
}

/// Runs TPC-C on a fresh `t`.
pub fn run_tpcc_cell(
    w: &TpccWorkload,
    t: &TargetEntry,
    rules: &Rules<'_>,
    provision: &mut Option<serde_json::Value>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<DbResult> {
    // One TPC-C phase as long as a YCSB trial's two.
    let rules = &Rules {
        run_seconds: rules.run_seconds * 2.0,
        ..*rules
    };
    let image = ImageSpec {
        bytes: image_bytes(tpcc_bytes(w)),
        inodes: 4096,
    };
    let mut target = StudyTarget::create_sized(t, rules.shm_dir, rules.device_bytes, image)?;
    *provision = Some(target.describe());
    let result = tpcc_on(&mut target, w, rules, interrupted, progress);
    let closed = target.close();
    let r = result?;
    closed?;
    Ok(r)
}

/// The TPC-C configuration of a study workload for one phase.
pub fn tpcc_config(w: &TpccWorkload, seed: u64, secs: f64) -> TpccConfig {
    TpccConfig {
        warehouses: w.warehouses,
        terminals: Some(w.terminals),
        duration: Some(Duration::from_secs_f64(secs)),
        max_transactions: None,
        seed,
        scale: w.scale,
        sqlite: w.sqlite.clone(),
    }
}

fn tpcc_on(
    target: &mut StudyTarget,
    w: &TpccWorkload,
    rules: &Rules<'_>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<DbResult> {
    progress.note(&format!("populating {} warehouse(s)", w.warehouses));
    let t0 = Instant::now();
    let (engine, setup) = {
        let db = home_of(target).sqlite("tpcc.db", &w.sqlite)?;
        let cfg = TpccConfig {
            sqlite: db.settings.clone(),
            ..tpcc_config(w, rules.seed, rules.run_seconds)
        };
        let report = tpcc::populate(&db.path, &cfg)?;
        let engine = db.settings.describe();
        db.close()?;
        (engine, serde_json::to_value(&report).unwrap_or_default())
    };
    let setup_seconds = t0.elapsed().as_secs_f64();
    let mut trials = Vec::new();
    let mut stopped_early = None;
    for index in 0..rules.trials {
        if interrupted() {
            stopped_early = Some("interrupted".to_string());
            break;
        }
        let remounted = index > 0 && target.remount()?;
        let db = home_of(target).sqlite("tpcc.db", &w.sqlite)?;
        let seed = rules.seed ^ (index as u64 + 1);
        if rules.warmup_seconds > 0.0 {
            let cfg = TpccConfig {
                sqlite: db.settings.clone(),
                ..tpcc_config(w, seed ^ 0x57, rules.warmup_seconds)
            };
            tpcc::run(&db.path, &cfg, interrupted)?;
        }
        let cfg = TpccConfig {
            sqlite: db.settings.clone(),
            ..tpcc_config(w, seed, rules.run_seconds)
        };
        let r = tpcc::run(&db.path, &cfg, interrupted)?;
        db.close()?;
        progress.tick(index, rules.trials, r.tpmc, true);
        let latency = r
            .per_type
            .iter()
            .map(|t| {
                (
                    t.name.to_string(),
                    OpLatency {
                        count: t.count,
                        mean_ns: t.latency.mean_us * 1e3,
                        p50_ns: t.latency.p50_us * 1000,
                        p95_ns: t.latency.p95_us * 1000,
                        p99_ns: t.latency.p99_us * 1000,
                        max_ns: t.latency.max_us * 1000,
                    },
                )
            })
            .collect();
        let interrupted_now = r.interrupted;
        trials.push(DbTrial {
            index,
            discarded: rules.trials > 1 && index == 0,
            remounted,
            seconds: r.elapsed_secs,
            ops: r.transactions,
            value: r.tpmc,
            latency,
            fixed_load: None,
            detail: serde_json::to_value(&r).unwrap_or_default(),
        });
        if interrupted_now {
            stopped_early = Some("interrupted".to_string());
            break;
        }
    }
    Ok(finish(
        engine,
        "tpmC",
        setup_seconds,
        setup,
        trials,
        stopped_early,
    ))
}

/// The database's home on a target.
fn home_of(target: &StudyTarget) -> DbHome {
    match target.place() {
        Place::Nvmfs(fs) => DbHome::Nvmfs(fs.clone()),
        Place::Dir(d) => DbHome::Dir(d.to_path_buf()),
    }
}

/// Summaries over the kept trials.
fn finish(
    engine: String,
    metric: &'static str,
    setup_seconds: f64,
    setup: serde_json::Value,
    trials: Vec<DbTrial>,
    stopped_early: Option<String>,
) -> DbResult {
    let kept: Vec<&DbTrial> = trials.iter().filter(|t| !t.discarded).collect();
    let values: Vec<f64> = kept.iter().map(|t| t.value).collect();
    let mut by_op: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for t in &kept {
        let lat = t.fixed_load.as_ref().map_or(&t.latency, |f| &f.latency);
        for (op, l) in lat {
            by_op.entry(op.clone()).or_default().push(l.mean_ns);
        }
    }
    DbResult {
        engine,
        metric,
        setup_seconds,
        setup,
        ops_per_sec: Summary::of(&values),
        latency_mean_ns: by_op
            .into_iter()
            .filter_map(|(op, v)| Summary::of(&v).map(|s| (op, s)))
            .collect(),
        trials,
        stopped_early,
    }
}

const MIB: u64 = 1 << 20;

/// An nvmfs image with room for `data` bytes of database three times over (journal or WAL,
/// growth during the run) and 256 MiB more, in 64 MiB steps.
fn image_bytes(data: u64) -> u64 {
    (data * 3 + 256 * MIB).div_ceil(64 * MIB) * 64 * MIB
}

/// Rough size of a TPC-C database: ~96 MB per warehouse at the specification's scale
/// (measured with SQLite here), in proportion to stock and customer rows when scaled.
fn tpcc_bytes(w: &TpccWorkload) -> u64 {
    let frac = (w.scale.items as f64 / Scale::SPEC.items as f64)
        .max(w.scale.customers_per_district as f64 / Scale::SPEC.customers_per_district as f64);
    (w.warehouses as f64 * 100.0 * MIB as f64 * frac) as u64
}

/// SQLite for YCSB, standing in for the paper's MongoDB: WAL (MongoDB writes a journal)
/// with synchronous=NORMAL (the WAL is synced at checkpoints, not at every commit, as
/// MongoDB syncs its journal every 100-120 ms rather than per operation), and the database
/// mapped (mmap_size) so READ and SCAN are memory loads from the mapping, as MongoDB's
/// memory-mapped data files: on nvmfs straight out of the image (xFetch), on the kernel
/// file systems through their page cache.
pub fn ycsb_sqlite(records: u64) -> SqliteSettings {
    SqliteSettings {
        journal_mode: JournalMode::Wal,
        synchronous: Synchronous::Normal,
        mmap_size: (records * 1100 * 2).max(64 * MIB),
        ..SqliteSettings::default()
    }
}

/// SQLite for TPC-C, standing in for the paper's MySQL/InnoDB: WAL with synchronous=FULL,
/// so every commit syncs the log, as MySQL fsyncs its log at every commit.
pub fn tpcc_sqlite() -> SqliteSettings {
    SqliteSettings {
        journal_mode: JournalMode::Wal,
        synchronous: Synchronous::Full,
        ..SqliteSettings::default()
    }
}
