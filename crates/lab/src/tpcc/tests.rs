//! TPC-C end to end on tiny scaled databases: population counts, runs with the mix in
//! proportion, the consistency conditions after the run, and the database's own
//! bookkeeping matching the driver's counts.

use std::cell::Cell;
use std::io;
use std::path::Path;
use std::time::Duration;

use super::check;
use super::txn::TxnKind;
use super::*;
use crate::db::sqlite::{integrity_check, scratch_dir, JournalMode};

const TINY: Scale = Scale {
    items: 1000,
    customers_per_district: 30,
};

fn config(warehouses: u32, mode: JournalMode) -> TpccConfig {
    TpccConfig {
        warehouses,
        terminals: Some(1),
        duration: None,
        max_transactions: Some(400),
        seed: 42,
        scale: TINY,
        sqlite: SqliteSettings {
            journal_mode: mode,
            ..SqliteSettings::default()
        },
    }
}

fn count(path: &Path, cfg: &TpccConfig, sql: &str) -> u64 {
    let conn = cfg.sqlite.open(path).unwrap();
    conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as u64
}

fn assert_consistent(path: &Path, cfg: &TpccConfig) {
    let conn = cfg.sqlite.open(path).unwrap();
    let report = check::consistency(&conn).unwrap();
    assert!(report.ok(), "{report:#?}");
    assert_eq!(report.checks.len(), 4);
    integrity_check(&conn).unwrap();
}

fn counts(result: &TpccResult) -> [u64; 5] {
    std::array::from_fn(|i| result.per_type[i].count)
}

#[test]
fn population_has_the_scaled_cardinalities() {
    let dir = scratch_dir();
    let path = dir.path().join("tpcc.db");
    let cfg = config(1, JournalMode::Delete);
    let report = populate(&path, &cfg).unwrap();
    assert!(report.scaled);
    let conn = cfg.sqlite.open(&path).unwrap();
    let checked = check::population(&conn).unwrap();
    assert!(checked.ok(), "{checked:#?}");
    assert_eq!(checked.checks.len(), 10);
    // The report's counters agree with the tables.
    for (table, rows) in &report.rows {
        assert_eq!(
            count(&path, &cfg, &format!("SELECT count(*) FROM {table}")),
            *rows,
            "{table}"
        );
    }
    let expect = [
        ("warehouse", 1),
        ("district", 10),
        ("customer", 300),
        ("history", 300),
        ("new_order", 90),
        ("orders", 300),
        ("item", 1000),
        ("stock", 1000),
    ];
    for (table, n) in expect {
        assert!(
            report.rows.contains(&(table.to_string(), n)),
            "{table}: {:?}",
            report.rows
        );
    }
    // Undelivered orders are the last 30% of each district (orders 22..=30 of 30).
    assert_eq!(count(&path, &cfg, "SELECT min(no_o_id) FROM new_order"), 22);
    let with_original = count(
        &path,
        &cfg,
        "SELECT count(*) FROM item WHERE i_data LIKE '%ORIGINAL%'",
    );
    assert!(
        (50..=150).contains(&with_original),
        "{with_original} of 1000 items hold ORIGINAL"
    );
    drop(conn);
    assert_consistent(&path, &cfg);
    assert_eq!(
        populate(&path, &cfg).unwrap_err().kind(),
        io::ErrorKind::AlreadyExists
    );
}

#[test]
fn single_terminal_run_follows_the_deck_exactly() {
    let dir = scratch_dir();
    let path = dir.path().join("tpcc.db");
    let cfg = config(1, JournalMode::Delete);
    populate(&path, &cfg).unwrap();
    let result = run(&path, &cfg, &|| false).unwrap();
    assert_eq!(result.transactions, 400);
    assert_eq!(counts(&result), [180, 172, 16, 16, 16]);
    assert!(!result.interrupted && result.tpmc > 0.0 && result.total_tpm >= result.tpmc);
    assert_eq!(result.busy_retries, 0, "one terminal never waits");
    assert_bookkeeping(&path, &cfg, &result);
    assert_consistent(&path, &cfg);
}

/// The database's rows grew exactly by what the driver says committed.
fn assert_bookkeeping(path: &Path, cfg: &TpccConfig, result: &TpccResult) {
    let per = |k: TxnKind| &result.per_type[k.index()];
    let districts = u64::from(cfg.warehouses * DISTRICTS);
    let loaded_orders = districts * u64::from(TINY.orders_per_district());
    let new_orders = per(TxnKind::NewOrder).count - per(TxnKind::NewOrder).rollbacks;
    assert_eq!(result.rollbacks, per(TxnKind::NewOrder).rollbacks);
    assert_eq!(
        count(path, cfg, "SELECT count(*) FROM orders"),
        loaded_orders + new_orders
    );
    let next_ids = count(path, cfg, "SELECT sum(d_next_o_id - 1) FROM district");
    assert_eq!(next_ids, loaded_orders + new_orders);
    let customers = districts * u64::from(TINY.customers_per_district);
    let payments = per(TxnKind::Payment).count;
    assert_eq!(
        count(path, cfg, "SELECT count(*) FROM history"),
        customers + payments
    );
    let delivered =
        per(TxnKind::Delivery).count * u64::from(DISTRICTS) - result.delivery_skipped_districts;
    let loaded_new = districts * u64::from(TINY.new_orders_per_district());
    assert_eq!(
        count(path, cfg, "SELECT count(*) FROM new_order"),
        loaded_new + new_orders - delivered
    );
}

#[test]
fn many_terminals_in_wal_keep_the_mix_and_consistency() {
    let dir = scratch_dir();
    let path = dir.path().join("tpcc.db");
    let cfg = TpccConfig {
        terminals: None,
        max_transactions: Some(600),
        ..config(2, JournalMode::Wal)
    };
    populate(&path, &cfg).unwrap();
    let result = run(&path, &cfg, &|| false).unwrap();
    assert_eq!(result.terminals, 20);
    assert_eq!(result.transactions, 600);
    let spec = [45.0, 43.0, 4.0, 4.0, 4.0];
    for (t, want) in result.per_type.iter().zip(spec) {
        assert!(
            (t.percent - want).abs() < 5.0,
            "{}: {:.1}% (want {want}%)",
            t.name,
            t.percent
        );
        if t.count > 0 {
            assert!(t.latency.p50_us <= t.latency.p95_us && t.latency.p99_us <= t.latency.max_us);
        }
    }
    assert_bookkeeping(&path, &cfg, &result);
    assert_consistent(&path, &cfg);
    let json = serde_json::to_string(&result).unwrap();
    assert!(json.contains("\"tpmc\"") && json.contains("New-Order"));
}

#[test]
fn run_stops_when_interrupted_or_out_of_time() {
    let dir = scratch_dir();
    let path = dir.path().join("tpcc.db");
    let cfg = TpccConfig {
        terminals: Some(2),
        duration: Some(Duration::from_secs(3600)),
        max_transactions: None,
        ..config(1, JournalMode::Truncate)
    };
    populate(&path, &cfg).unwrap();
    let polls = Cell::new(0);
    let result = run(&path, &cfg, &|| {
        polls.set(polls.get() + 1);
        polls.get() > 5
    })
    .unwrap();
    assert!(result.interrupted && result.elapsed_secs < 60.0);
    assert_consistent(&path, &cfg);
    let timed = TpccConfig {
        duration: Some(Duration::from_millis(200)),
        ..cfg.clone()
    };
    let result = run(&path, &timed, &|| false).unwrap();
    assert!(
        !result.interrupted && (0.15..5.0).contains(&result.elapsed_secs),
        "{}",
        result.elapsed_secs
    );
    assert_consistent(&path, &cfg);
}

#[test]
fn bad_configurations_and_databases_are_refused() {
    let dir = scratch_dir();
    let path = dir.path().join("tpcc.db");
    let cfg = config(1, JournalMode::Delete);
    let invalid = io::ErrorKind::InvalidInput;
    let bad = |c: TpccConfig| populate(&path, &c).unwrap_err().kind();
    assert_eq!(
        bad(TpccConfig {
            warehouses: 0,
            ..cfg.clone()
        }),
        invalid
    );
    assert_eq!(
        bad(TpccConfig {
            terminals: Some(0),
            ..cfg.clone()
        }),
        invalid
    );
    let small = Scale {
        items: 1000,
        customers_per_district: 5,
    };
    assert_eq!(
        bad(TpccConfig {
            scale: small,
            ..cfg.clone()
        }),
        invalid
    );
    let big = Scale {
        items: 200_000,
        customers_per_district: 30,
    };
    assert_eq!(
        bad(TpccConfig {
            scale: big,
            ..cfg.clone()
        }),
        invalid
    );
    let no_limit = TpccConfig {
        duration: None,
        max_transactions: None,
        ..cfg.clone()
    };
    assert_eq!(
        run(&path, &no_limit, &|| false).unwrap_err().kind(),
        invalid
    );
    // An empty database is not a TPC-C database.
    assert_eq!(
        run(&path, &cfg, &|| false).unwrap_err().kind(),
        io::ErrorKind::InvalidData
    );
    populate(&path, &cfg).unwrap();
    let other = TpccConfig {
        warehouses: 2,
        ..cfg.clone()
    };
    assert_eq!(run(&path, &other, &|| false).unwrap_err().kind(), invalid);
    let other = TpccConfig {
        scale: Scale { items: 500, ..TINY },
        ..cfg.clone()
    };
    assert_eq!(run(&path, &other, &|| false).unwrap_err().kind(), invalid);
}
