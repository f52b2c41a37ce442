//! `nvmfs bench tpcc`: TPC-C on SQLite on one or more targets, with the lab's run rules
//! (populate once, warm-up, several trials on a remounted file system, the first
//! discarded, 95% intervals).

use nvmfs_lab::kernel;
use nvmfs_lab::stats::Summary;
use nvmfs_lab::study::database::{self, DbResult, TpccWorkload};
use nvmfs_lab::study::StudyProgress;
use nvmfs_lab::tpcc::Scale;
use serde::Serialize;

use crate::bench_db::{self, with_default, Bench, Record, RunArgs, RunSettings, SqliteArgs};
use crate::bench_ycsb::sqlite_line;

const WAREHOUSES: u32 = 1;
const TERMINALS: usize = 2;

#[derive(clap::Args, Debug)]
#[command(
    about = "TPC-C on SQLite, on nvmfs and kernel file systems",
    long_about = "Runs TPC-C (Standard Specification 5.11: the nine tables populated as clause \
        4.3, the five transactions in the mix of clause 5.2.3) on SQLite on each target in \
        turn, with the lab's run rules: the target made fresh, --warehouses warehouses \
        populated once, then --trials trials, each a --warmup not recorded and --seconds \
        measured, the database reopened and the file system remounted before each (nvmfs and \
        the kernel variants; tmpfs and dir: targets cannot be). The first of several trials is \
        discarded. The --terminals terminal threads run closed loops without keying or think \
        times, so tpmC measures throughput and does not compare with audited results. After \
        the last trial TPC-C's consistency conditions 1-4 (clause 3.3.2) and SQLite's PRAGMA \
        integrity_check must pass.\n\n\
        --items and --customers shrink the population below the specification's (100000 \
        items and stock rows per warehouse, 3000 customers and orders per district) for quick \
        runs; the records say so.\n\n\
        stdout gets, per target, tpmC (New-Orders committed per minute) of the kept trials \
        with its 95% interval, the transactions of every type per minute, and per transaction \
        type over the kept trials: the count summed, the mean over every transaction, the \
        largest max, and the last kept trial's p50, p95 and p99 (percentiles of separate \
        trials do not combine). Progress goes to stderr; --json FILE gets everything, every \
        trial's TPC-C result included.",
    after_help = "Defaults: SQLite as the study runs it for TPC-C (WAL, synchronous FULL so every \
        commit syncs the log, no mmap, 4096-byte pages).\n\n\
        Targets: nvmfs (the library in-process on a fresh image in --shm-dir, SQLite through \
        nvmfs's VFS), tmpfs (a fresh directory in --shm-dir, through system calls), dir:PATH (a \
        fresh subdirectory of PATH), or a kernel variant of `nvmfs study` made fresh on a \
        RAM-backed loop device (ext2, ext3, ext3-writeback, ext3-journal, ext4, \
        ext4-nodelalloc, xfs, xfs-ag, btrfs; needs root). Default: nvmfs and tmpfs.\n\n\
        Exit status: 0 on success, 1 when a run failed or no target could run, 2 on bad input, \
        130 when interrupted.\n\n\
        Examples:\n  nvmfs bench tpcc\n  \
        nvmfs bench tpcc --warehouses 2 --terminals 4 -t nvmfs -t ext4 --seconds 30\n  \
        nvmfs bench tpcc --items 1000 --customers 30 --seconds 2 --json tpcc.json\n  \
        nvmfs bench tpcc --synchronous normal --journal-mode delete",
    mut_arg("journal_mode", |a| with_default(a, "wal")),
    mut_arg("synchronous", |a| with_default(a, "full")),
    mut_arg("mmap_size", |a| with_default(a, "0"))
)]
pub struct Args {
    #[arg(long, value_name = "N", help = format!("Warehouses (W) [default: {WAREHOUSES}]"))]
    warehouses: Option<u32>,
    #[arg(long, value_name = "N", help = format!(
        "Terminal threads; terminal i serves warehouse i mod W + 1 [default: {TERMINALS}]"))]
    terminals: Option<usize>,
    #[arg(long, value_name = "N", help = format!(
        "Rows of ITEM, and of STOCK per warehouse, 1..=100000 [default: {}]", Scale::SPEC.items))]
    items: Option<u32>,
    #[arg(long, value_name = "N", help = format!(
        "Customers (and orders) per district, 10..=3000 [default: {}]",
        Scale::SPEC.customers_per_district))]
    customers: Option<u32>,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    sqlite: SqliteArgs,
}

/// The workload the flags describe, checked.
fn workload(args: &Args) -> Result<TpccWorkload, String> {
    let terminals = args.terminals.unwrap_or(TERMINALS);
    if terminals == 0 {
        return Err("--terminals must be at least 1".into());
    }
    let w = TpccWorkload {
        warehouses: args.warehouses.unwrap_or(WAREHOUSES),
        terminals,
        scale: Scale {
            items: args.items.unwrap_or(Scale::SPEC.items),
            customers_per_district: args.customers.unwrap_or(Scale::SPEC.customers_per_district),
        },
        sqlite: args.sqlite.apply(database::tpcc_sqlite())?,
    };
    w.scale
        .validate()
        .map_err(|e| format!("--items/--customers: {e}"))?;
    database::tpcc_config(&w, 1, 1.0)
        .validate()
        .map_err(|e| format!("--warehouses/--terminals: {e}"))?;
    Ok(w)
}

/// The configuration, for the JSON file.
#[derive(Serialize)]
struct Config<'a> {
    workload: &'static str,
    #[serde(flatten)]
    tpcc: &'a TpccWorkload,
    #[serde(flatten)]
    run: RunSettings,
}

pub fn run(args: &Args) -> u8 {
    let prepared = workload(args).and_then(|w| {
        let settings = args.run.settings()?;
        let image = database::tpcc_image(&w);
        let device = bench_db::device_bytes(image);
        let wanted = args.run.targets(device)?;
        Ok((w, settings, image, device, wanted))
    });
    let (w, settings, image, device, wanted) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("nvmfs bench tpcc: {e}");
            return 2;
        }
    };
    if let Err(code) = bench_db::start("tpcc", args.run.json.as_ref()) {
        return code;
    }
    let config = Config {
        workload: "tpcc",
        tpcc: &w,
        run: settings,
    };
    describe(&config);
    let bench = Bench {
        command: "tpcc",
        workload: "tpcc".to_string(),
        metric: "tpmC",
        image,
        rules: args.run.rules(&settings, device),
    };
    let run_on = |target, progress: &mut dyn StudyProgress| {
        database::run_tpcc_on(target, &w, &bench.rules, &kernel::interrupted, progress)
    };
    match bench_db::run_all(&bench, &wanted, &run_on, &complete_record) {
        Ok(records) => bench_db::finish(
            "tpcc",
            "nvmfs-lab/bench-tpcc/v1",
            args.run.json.as_ref(),
            &config,
            &records,
        ),
        Err(code) => code,
    }
}

/// Transactions of every type per minute over the kept trials.
fn total_tpm(r: &DbResult) -> Option<Summary> {
    let per_minute: Vec<f64> = r
        .trials
        .iter()
        .filter(|t| !t.discarded && t.seconds > 0.0)
        .map(|t| t.ops as f64 * 60.0 / t.seconds)
        .collect();
    Summary::of(&per_minute)
}

/// The run's settings on stderr, so that a saved table says what it measured.
fn describe(c: &Config<'_>) {
    let w = c.tpcc;
    let scale = if w.scale.is_spec() {
        "the specification's scale".to_string()
    } else {
        format!(
            "scaled to {} items, {} customers per district",
            w.scale.items, w.scale.customers_per_district
        )
    };
    eprintln!(
        "tpcc: {} warehouse(s), {} terminals, {scale}, on {}; {} trial(s) of {} s warm-up + {} s, seed {}",
        w.warehouses,
        w.terminals,
        sqlite_line(&w.sqlite),
        c.run.trials,
        c.run.warmup_seconds,
        c.run.run_seconds,
        c.run.seed
    );
}

/// Adds the total tpm to the record and formats its table.
fn complete_record(r: &mut Record) -> String {
    r.total_tpm = r.result.as_ref().and_then(total_tpm);
    let mut lines = String::new();
    if let Some(result) = &r.result {
        lines += &format!("populate: {:.2} s\n", result.setup_seconds);
    }
    lines += &bench_db::format_summary("tpmC", r.ops_per_sec);
    lines += &bench_db::format_summary("total tpm", r.total_tpm);
    bench_db::format_record(r, &lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use nvmfs_lab::db::sqlite::{JournalMode, Synchronous};

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn workload_of(argv: &[&str]) -> Result<TpccWorkload, String> {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())?;
        workload(&cli.args)
    }

    #[test]
    fn defaults_are_one_warehouse_at_the_specification_scale_on_wal_full() {
        let w = workload_of(&[]).unwrap();
        assert_eq!((w.warehouses, w.terminals), (1, 2));
        assert!(w.scale.is_spec());
        assert_eq!(w.sqlite, database::tpcc_sqlite());
    }

    #[test]
    fn flags_set_the_scale_and_sqlite() {
        let w = workload_of(&[
            "--warehouses",
            "2",
            "--terminals",
            "4",
            "--items",
            "1000",
            "--customers",
            "30",
            "--synchronous",
            "normal",
            "--journal-mode",
            "TRUNCATE",
        ])
        .unwrap();
        assert_eq!((w.warehouses, w.terminals), (2, 4));
        assert_eq!((w.scale.items, w.scale.customers_per_district), (1000, 30));
        assert_eq!(
            (w.sqlite.synchronous, w.sqlite.journal_mode),
            (Synchronous::Normal, JournalMode::Truncate)
        );
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let err = workload_of(&["--terminals", "0"]).unwrap_err();
        assert!(err.contains("--terminals must be at least 1"), "{err}");
        let err = workload_of(&["--warehouses", "0"]).unwrap_err();
        assert!(err.contains("warehouses 0 not in 1..="), "{err}");
        let err = workload_of(&["--items", "200000"]).unwrap_err();
        assert!(
            err.contains("--items") && err.contains("items 200000 not in 1..=100000"),
            "{err}"
        );
        let err = workload_of(&["--customers", "5"]).unwrap_err();
        assert!(
            err.contains("--customers") && err.contains("5 not in 10..=3000"),
            "{err}"
        );
        let err = workload_of(&["--synchronous", "sometimes"]).unwrap_err();
        assert!(err.contains("unknown synchronous setting"), "{err}");
        let err = workload_of(&["--max-file-size", "1M"]).unwrap_err();
        assert!(err.contains("--max-file-size"), "{err}");
    }
}
