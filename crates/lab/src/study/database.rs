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
use crate::db::home::{DbHome, SqliteDb};
use crate::db::leveldb::{LevelDbSettings, LevelDbStore};
use crate::db::sqlite::{integrity_check, JournalMode, SqliteSettings, SqliteStore, Synchronous};
use crate::stats::Summary;
use crate::tpcc::{self, Scale, TpccConfig};
use crate::ycsb::db::KvStore;
use crate::ycsb::runner::{self, RunOptions};
use crate::ycsb::workload::CoreWorkload;
use serde::{Deserialize, Serialize};
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
    /// The database and its settings.
    pub engine: Engine,
}

/// The database a YCSB workload runs on.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "engine", rename_all = "snake_case")]
pub enum Engine {
    /// SQLite's `usertable` (journal mode, durability, mmap).
    Sqlite(SqliteSettings),
    /// LevelDB (rusty-leveldb), seed 002's YCSB database.
    Leveldb(LevelDbSettings),
}

/// An open YCSB database on a target, whatever the engine.
enum OpenStore {
    Sqlite(SqliteDb, SqliteStore),
    Leveldb(LevelDbStore),
}

impl OpenStore {
    fn open(home: &DbHome, engine: &Engine, fields: usize) -> io::Result<Self> {
        Ok(match engine {
            Engine::Sqlite(s) => {
                let db = home.sqlite("ycsb.db", s)?;
                let store = db.usertable(fields)?;
                OpenStore::Sqlite(db, store)
            }
            Engine::Leveldb(s) => OpenStore::Leveldb(home.leveldb("ycsb.leveldb", s)?),
        })
    }

    fn phase(
        &self,
        core: &CoreWorkload,
        opts: &RunOptions,
        load: bool,
        interrupted: &dyn Fn() -> bool,
    ) -> io::Result<runner::PhaseResult> {
        let each = &mut |_| {};
        match (self, load) {
            (OpenStore::Sqlite(_, s), true) => runner::load(s, core, opts, interrupted, each),
            (OpenStore::Sqlite(_, s), false) => runner::run(s, core, opts, interrupted, each),
            (OpenStore::Leveldb(s), true) => runner::load(s, core, opts, interrupted, each),
            (OpenStore::Leveldb(s), false) => runner::run(s, core, opts, interrupted, each),
        }
    }

    /// The database's own consistency check: SQLite's `PRAGMA integrity_check`; LevelDB
    /// has none beyond its checksums, which every read verifies.
    fn check(&self) -> io::Result<Vec<String>> {
        match self {
            OpenStore::Sqlite(db, _) => {
                let conn = db.settings.open(&db.path)?;
                integrity_check(&conn)?;
                Ok(vec!["SQLite PRAGMA integrity_check: ok".to_string()])
            }
            OpenStore::Leveldb(_) => Ok(Vec::new()),
        }
    }

    fn describe(&self) -> String {
        match self {
            OpenStore::Sqlite(_, s) => s.describe(),
            OpenStore::Leveldb(s) => s.describe(),
        }
    }

    /// Closes the database (SQLite: after an integrity check; LevelDB: its thread).
    fn close(self) -> io::Result<()> {
        match self {
            OpenStore::Sqlite(db, store) => {
                drop(store);
                db.close()
            }
            OpenStore::Leveldb(s) => s.close(),
        }
    }
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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DbResult {
    /// The engine and its settings.
    pub engine: String,
    /// What `ops_per_sec` counts: `ops/s` (YCSB) or `tpmC` (TPC-C).
    pub metric: String,
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
    /// The database's own checks after the last trial, each passed (a failed one fails
    /// the cell).
    pub checks: Vec<String>,
}

/// One trial of a database cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FixedLoad {
    pub offered_ops_per_sec: f64,
    pub achieved_ops_per_sec: f64,
    pub latency: BTreeMap<String, OpLatency>,
}

/// Latency of one operation type, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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

/// Runs a YCSB workload on a fresh `t`, each trial flat out and then at the workload's
/// fixed offered load (the study's two phases).
pub fn run_ycsb_cell(
    w: &YcsbWorkload,
    t: &TargetEntry,
    rules: &Rules<'_>,
    provision: &mut Option<serde_json::Value>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<DbResult> {
    let target = StudyTarget::create_sized(t, rules.shm_dir, rules.device_bytes, ycsb_image(w))?;
    *provision = Some(target.describe());
    let phases = [None, Some(w.fixed_load_ops_per_sec)];
    run_ycsb_on(target, w, &phases, rules, interrupted, progress)
}

/// The nvmfs image for a YCSB workload.
pub fn ycsb_image(w: &YcsbWorkload) -> ImageSpec {
    ImageSpec {
        bytes: image_bytes(w.records * 1100),
        inodes: 4096,
    }
}

/// Loads the records on `target`, then runs the trials, each a sequence of phases at the
/// given offered loads (`None`: flat out); the first phase's ops/s is the trial's value, and
/// the last phase with an offered load gives the fixed-load latencies. Closes the target.
pub fn run_ycsb_on(
    target: StudyTarget,
    w: &YcsbWorkload,
    phases: &[Option<f64>],
    rules: &Rules<'_>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<DbResult> {
    closing(target, |t| {
        ycsb_on(t, w, phases, rules, interrupted, progress)
    })
}

/// Runs `f` on `target`, then closes the target whatever happened; `f`'s error comes
/// first, then a closing error.
pub(super) fn closing<R>(
    mut target: StudyTarget,
    f: impl FnOnce(&mut StudyTarget) -> io::Result<R>,
) -> io::Result<R> {
    let r = f(&mut target);
    let closed = target.close();
    let r = r?;
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
    phases: &[Option<f64>],
    rules: &Rules<'_>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<DbResult> {
    if phases.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a YCSB trial needs at least one phase",
        ));
    }
    let mut core = ycsb_core(w)?;
    let fields = core.field_count;
    progress.note(&format!("loading {} records", w.records));
    let t0 = Instant::now();
    let (engine, load) = {
        let store = OpenStore::open(&home_of(target), &w.engine, fields)?;
        let opts = run_options(w.threads, None, None, rules.seed);
        let load = store.phase(&core, &opts, true, interrupted);
        let engine = store.describe();
        let closed = store.close();
        (engine, load.and_then(|l| closed.map(|()| l))?)
    };
    let setup_seconds = t0.elapsed().as_secs_f64();
    let mut trials = Vec::new();
    let mut stopped_early = None;
    // Every phase continues the key space where the last one left it (D and E insert), as
    // if it were YCSB's run phase after a load of that many records.
    let mut phase = |store: &OpenStore, target_ops: Option<f64>, secs: f64, seed: u64| {
        let opts = run_options(w.threads, target_ops, Some(secs), seed);
        let r = store.phase(&core, &opts, false, interrupted)?;
        core.record_count += r.count("INSERT");
        io::Result::Ok(r)
    };
    for index in 0..rules.trials {
        if interrupted() {
            stopped_early = Some("interrupted".to_string());
            break;
        }
        let remounted = index > 0 && target.remount()?;
        let store = OpenStore::open(&home_of(target), &w.engine, fields)?;
        let seed = rules.seed ^ (index as u64 + 1);
        let ran = (|| {
            if rules.warmup_seconds > 0.0 {
                phase(&store, phases[0], rules.warmup_seconds, seed ^ 0x57)?;
            }
            let mut done = Vec::new();
            for (i, offered) in phases.iter().enumerate() {
                done.push((
                    *offered,
                    phase(&store, *offered, rules.run_seconds, seed ^ (i as u64) << 8)?,
                ));
            }
            io::Result::Ok(done)
        })();
        let closed = store.close();
        let done = ran?;
        closed?;
        let first = &done[0].1;
        progress.tick(index, rules.trials, first.ops_per_sec, true);
        let fixed = done.iter().rev().find_map(|(offered, r)| {
            offered.map(|o| FixedLoad {
                offered_ops_per_sec: o,
                achieved_ops_per_sec: r.ops_per_sec,
                latency: ycsb_latency(&r.per_op),
            })
        });
        let was_interrupted = done.iter().any(|(_, r)| r.interrupted);
        let detail: Vec<&runner::PhaseResult> = done.iter().map(|(_, r)| r).collect();
        trials.push(DbTrial {
            index,
            discarded: rules.trials > 1 && index == 0,
            remounted,
            seconds: first.runtime_ns as f64 / 1e9,
            ops: first.operations,
            value: first.ops_per_sec,
            latency: ycsb_latency(&first.per_op),
            fixed_load: fixed,
            detail: serde_json::to_value(detail).unwrap_or_default(),
        });
        if was_interrupted {
            stopped_early = Some("interrupted".to_string());
            break;
        }
    }
    let store = OpenStore::open(&home_of(target), &w.engine, fields)?;
    let checked = store.check();
    store.close()?;
    let mut r = finish(
        engine,
        "ops/s",
        setup_seconds,
        serde_json::to_value(&load).unwrap_or_default(),
        trials,
        stopped_early,
    );
    r.checks = checked?;
    Ok(r)
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
    let target = StudyTarget::create_sized(t, rules.shm_dir, rules.device_bytes, tpcc_image(w))?;
    *provision = Some(target.describe());
    run_tpcc_on(target, w, rules, interrupted, progress)
}

/// The nvmfs image for a TPC-C workload.
pub fn tpcc_image(w: &TpccWorkload) -> ImageSpec {
    ImageSpec {
        bytes: image_bytes(tpcc_bytes(w)),
        inodes: 4096,
    }
}

/// Populates TPC-C on `target`, then runs the trials of `rules.run_seconds` each. Closes
/// the target.
pub fn run_tpcc_on(
    target: StudyTarget,
    w: &TpccWorkload,
    rules: &Rules<'_>,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn StudyProgress,
) -> io::Result<DbResult> {
    closing(target, |t| tpcc_on(t, w, rules, interrupted, progress))
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
    let db = home_of(target).sqlite("tpcc.db", &w.sqlite)?;
    let checked = tpcc_checks(&db);
    db.close()?;
    let mut r = finish(engine, "tpmC", setup_seconds, setup, trials, stopped_early);
    r.checks = checked?;
    Ok(r)
}

/// TPC-C's consistency conditions 1-4 (clause 3.3.2) and SQLite's integrity check.
fn tpcc_checks(db: &SqliteDb) -> io::Result<Vec<String>> {
    let conn = db.settings.open(&db.path)?;
    let report = tpcc::check::consistency(&conn)?;
    if !report.ok() {
        let failed: Vec<String> = report
            .failures()
            .map(|c| format!("{}: {}", c.name, c.detail))
            .collect();
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("TPC-C consistency conditions failed: {}", failed.join("; ")),
        ));
    }
    integrity_check(&conn)?;
    Ok(vec![
        "TPC-C consistency conditions 1-4 (clause 3.3.2): ok".to_string(),
        "SQLite PRAGMA integrity_check: ok".to_string(),
    ])
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
        metric: metric.to_string(),
        setup_seconds,
        setup,
        ops_per_sec: Summary::of(&values),
        latency_mean_ns: by_op
            .into_iter()
            .filter_map(|(op, v)| Summary::of(&v).map(|s| (op, s)))
            .collect(),
        trials,
        stopped_early,
        checks: Vec::new(),
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
