//! Several connections of one process on one database: concurrent writers on threads (WAL
//! and rollback journal), and SQLITE_BUSY exactly where the unix VFS gives it.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use rusqlite::Connection;

const THREADS: i64 = 4;
const ROWS: i64 = 150;

fn concurrent_inserts(mode: &str) {
    let img = Image::new(&format!("conc-{mode}"), 32);
    let path = "/data/conc.db";
    let db = img.open(path);
    set_journal_mode(&db, mode);
    db.execute_batch("CREATE TABLE t(thread INTEGER, i INTEGER, pad BLOB, PRIMARY KEY(thread, i))")
        .unwrap();
    let done = AtomicBool::new(false);
    // The writers start only once the reader has read: 600 small transactions can otherwise
    // all commit before the reader's connection is open, and the reader would check nothing.
    let reading = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (img, reading) = (&img, &reading);
                s.spawn(move || {
                    let db = img.open(path);
                    db.busy_timeout(Duration::from_secs(20)).unwrap();
                    while !reading.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    for i in 0..ROWS {
                        db.execute_batch("BEGIN IMMEDIATE").unwrap();
                        db.execute("INSERT INTO t VALUES (?1, ?2, randomblob(300))", [t, i])
                            .unwrap();
                        db.execute_batch("COMMIT").unwrap();
                    }
                })
            })
            .collect();
        // A reader meanwhile: the count only grows, and every read sees a consistent table.
        let reader = s.spawn(|| {
            let db = img.open(path);
            db.busy_timeout(Duration::from_secs(20)).unwrap();
            let (mut last, mut reads) = (0, 0);
            while !done.load(Ordering::Acquire) {
                let n = count(&db, "t");
                assert!(n >= last, "count went back from {last} to {n}");
                last = n;
                reads += 1;
                reading.store(true, Ordering::Release);
            }
            reads
        });
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
        assert!(reader.join().unwrap() > 0);
    });
    assert_eq!(count(&db, "t"), THREADS * ROWS);
    for t in 0..THREADS {
        let (n, max): (i64, i64) = db
            .query_row(
                "SELECT count(*), max(i) FROM t WHERE thread = ?1",
                [t],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((n, max), (ROWS, ROWS - 1));
    }
    assert_integrity(&db);
    drop(db);
    img.finish();
}

#[test]
fn concurrent_writers_wal() {
    concurrent_inserts("WAL");
}

#[test]
fn concurrent_writers_rollback_journal() {
    concurrent_inserts("DELETE");
}

/// Runs `sql` on `db`: the first column of the first row, "done" for no rows, or the error.
fn step(db: &Connection, sql: &str) -> String {
    let r = db.prepare(sql).and_then(|mut st| {
        let mut rows = st.query([])?;
        Ok(match rows.next()? {
            Some(row) => format!("{:?}", row.get_ref(0)?),
            None => "done".into(),
        })
    });
    r.unwrap_or_else(|e| format!("{:?}", e.sqlite_error_code()))
}

/// Three connections (A, B, C) on one database take turns; returns what each step gave.
fn lock_scenario(open: &dyn Fn() -> Connection, wal: bool) -> Vec<String> {
    let setup = open();
    set_journal_mode(&setup, if wal { "WAL" } else { "DELETE" });
    setup
        .execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1)")
        .unwrap();
    let conns = [open(), open(), open()];
    for c in &conns {
        c.busy_timeout(Duration::ZERO).unwrap();
    }
    let steps: &[(usize, &str)] = &[
        (0, "BEGIN IMMEDIATE"),
        (1, "BEGIN IMMEDIATE"),
        (1, "SELECT count(*) FROM t"),
        (1, "BEGIN"),
        (1, "SELECT count(*) FROM t"),
        (0, "INSERT INTO t VALUES (2)"),
        (0, "COMMIT"),
        (2, "SELECT count(*) FROM t"),
        (1, "SELECT count(*) FROM t"),
        (1, "COMMIT"),
        (0, "COMMIT"),
        (2, "SELECT count(*) FROM t"),
        (1, "BEGIN"),
        (1, "SELECT count(*) FROM t"),
        (2, "PRAGMA wal_checkpoint(TRUNCATE)"),
        (0, "BEGIN EXCLUSIVE"),
        (1, "COMMIT"),
        (0, "BEGIN EXCLUSIVE"),
        (2, "SELECT count(*) FROM t"),
        (0, "COMMIT"),
        (2, "PRAGMA wal_checkpoint(TRUNCATE)"),
    ];
    steps
        .iter()
        .map(|&(c, sql)| format!("{} {sql}: {}", ["A", "B", "C"][c], step(&conns[c], sql)))
        .collect()
}

fn busy_like_unix(wal: bool) {
    let dir = tempfile::tempdir().unwrap();
    let unix_path = dir.path().join("unix.db");
    let unix = lock_scenario(&|| Connection::open(&unix_path).unwrap(), wal);
    let img = Image::new("busy", 32);
    let ours = lock_scenario(&|| img.open("/data/busy.db"), wal);
    assert_eq!(ours, unix);
    // The scenario does meet SQLITE_BUSY (so the comparison says something): in WAL mode a
    // second writer and a checkpoint blocked by a reader (busy column 1); in rollback mode
    // also a commit blocked by a reader and a reader blocked by the pending writer.
    let busy = ours
        .iter()
        .filter(|s| s.ends_with("Some(DatabaseBusy)"))
        .count();
    if wal {
        assert!(busy >= 1, "{ours:#?}");
        assert!(ours.contains(&"C PRAGMA wal_checkpoint(TRUNCATE): Integer(1)".to_string()));
    } else {
        assert!(busy >= 4, "{ours:#?}");
    }
    img.finish();
}

#[test]
fn busy_where_the_unix_vfs_is_busy_rollback() {
    busy_like_unix(false);
}

#[test]
fn busy_where_the_unix_vfs_is_busy_wal() {
    busy_like_unix(true);
}
