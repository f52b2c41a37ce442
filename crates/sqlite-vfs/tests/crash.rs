//! Crash consistency of SQLite on nvmfs.
//!
//! - Snapshot: the image bytes copied while a large transaction is half written (pages
//!   spilled to the database or the WAL), mounted as a fresh `Fs`: every committed
//!   transaction is there, nothing of the open one, and the database is intact.
//! - Every fence: the persistence tracer of crates/crashtest records every store, flush and
//!   fence of a commit (and of a WAL checkpoint); at every fence the images a power loss can
//!   leave are built, and each must pass fsck, mount, and hold an intact database with
//!   exactly the rows from before or from after the operation.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use common::*;
use nvmfs::fsck::check_pm;
use nvmfs::media::Pm;
use nvmfs::{Fs, MountOptions};
use nvmfs_crashtest::trace::{crash_points, Recorder};
use rusqlite::{Connection, OpenFlags};

type State = BTreeSet<(i64, i64, Vec<u8>)>;

fn state(db: &Connection) -> State {
    let mut st = db.prepare("SELECT tx, i, v FROM t").unwrap();
    let rows = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    rows
}

/// One committed transaction `tx` of `rows` rows (deterministic contents).
fn commit(db: &Connection, tx: i64, rows: i64) {
    db.execute_batch("BEGIN").unwrap();
    insert(db, tx, rows);
    db.execute_batch("COMMIT").unwrap();
}

fn insert(db: &Connection, tx: i64, rows: i64) {
    for i in 0..rows {
        let v = format!("tx {tx} row {i} ").repeat(1 + (i % 7) as usize);
        db.execute(
            "INSERT INTO t VALUES (?1, ?2, ?3)",
            rusqlite::params![tx, i, v.into_bytes()],
        )
        .unwrap();
    }
}

fn create(db: &Connection, mode: &str) {
    set_journal_mode(db, mode);
    db.execute_batch("CREATE TABLE t(tx INTEGER, i INTEGER, v BLOB, PRIMARY KEY (tx, i))")
        .unwrap();
}

/// Mounts `image` as after a crash, opens `db` through a new VFS and returns its rows after
/// checking the database's integrity; fsck of the image after SQLite's recovery is clean.
/// `vfs` names the VFS registered for the time of the check (a name can serve one mount at a
/// time, and is reused image after image).
fn recover(image: &[u8], db: &str, vfs: &str) -> Result<State, String> {
    let fs = Fs::mount_pm(Pm::from_bytes(image), &MountOptions::default(), None, None)
        .map_err(|e| format!("mount: {e}"))?;
    nvmfs_sqlite::register(fs.clone(), vfs).unwrap();
    let result = (|| {
        let conn = nvmfs_sqlite::open(vfs, db, OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map_err(|e| format!("open: {e}"))?;
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(|e| format!("integrity_check: {e}"))?;
        if check != "ok" {
            return Err(format!("integrity_check: {check}"));
        }
        Ok(state(&conn))
    })();
    nvmfs_sqlite::unregister(vfs).unwrap();
    let r = check_pm(&Pm::from_bytes(&fs.snapshot()));
    if !r.is_clean() {
        return Err(format!("fsck after recovery: {:?}", r.problems));
    }
    result
}

fn snapshot_mid_transaction(mode: &str) {
    let img = Image::new(&format!("snap-{mode}"), 32);
    let db = img.open("/data/c.db");
    create(&db, mode);
    for tx in 0..20 {
        commit(&db, tx, 50);
    }
    let committed = state(&db);
    // A transaction too large for a 10-page cache: its pages go to the database file
    // (rollback journal) or the WAL before it commits.
    db.execute_batch("PRAGMA cache_size=10; BEGIN").unwrap();
    insert(&db, 20, 3000);
    db.execute("UPDATE t SET v = x'00' WHERE tx < 10", [])
        .unwrap();
    let journal = if mode == "WAL" { "-wal" } else { "-journal" };
    assert!(!img
        .fs
        .metadata(format!("/data/c.db{journal}"))
        .unwrap()
        .is_empty());
    let snap = img.fs.snapshot();
    db.execute_batch("COMMIT").unwrap();
    drop(db);

    let vfs = unique_name("recover");
    assert_eq!(recover(&snap, "/data/c.db", &vfs).unwrap(), committed);
    img.finish();
}

#[test]
fn snapshot_during_a_transaction_rollback_journal() {
    snapshot_mid_transaction("DELETE");
}

#[test]
fn snapshot_during_a_transaction_wal() {
    snapshot_mid_transaction("WAL");
}

/// Smallest image that holds the test database comfortably (crash images are copied often).
const TRACED_IMAGE: u64 = 1 << 20;

/// Runs `ops` on a traced in-memory image after `setup`, and checks every crash image of
/// every fence inside them. Returns (fences, images).
fn every_fence(mode: &str, ops: &[&dyn Fn(&Connection)]) -> (usize, usize) {
    let rec = Arc::new(Recorder::default());
    let mut pm = Pm::in_memory(TRACED_IMAGE);
    pm.set_trace(Some(rec.clone()));
    let fs = Fs::format_pm(pm).unwrap();
    fs.create_dir("/data").unwrap();
    let vfs = unique_name(&format!("traced-{mode}"));
    nvmfs_sqlite::register(fs.clone(), &vfs).unwrap();
    let db = nvmfs_sqlite::open(&vfs, "/data/c.db", OpenFlags::default()).unwrap();
    create(&db, mode);
    for tx in 0..5 {
        commit(&db, tx, 20);
    }
    let base = fs.snapshot();
    let mut states = vec![state(&db)];
    rec.start();
    for op in ops {
        rec.op_begin("sqlite");
        op(&db);
        rec.op_end();
        states.push(state(&db));
    }
    let events = rec.stop();
    drop(db);
    nvmfs_sqlite::unregister(&vfs).unwrap();
    fs.drop_without_unmount();

    let (points, lost) = crash_points(&base, &events);
    assert!(
        lost.is_empty(),
        "stores not durable when an operation returned: {lost:?}"
    );
    let mut seen = HashSet::new();
    let recover_vfs = unique_name("recover");
    let mut images = 0;
    let mut failures = Vec::new();
    // Images of an operation that changes rows, recovered to the state before / after it.
    let mut outcomes = [0usize; 2];
    for p in &points {
        let (before, after) = (&states[p.op], &states[p.op + 1]);
        p.for_each_image(&mut seen, |img| {
            images += 1;
            let r = check_pm(&Pm::from_bytes(img));
            let verdict = if !r.is_clean() {
                Err(format!("fsck before mount: {:?}", r.problems))
            } else {
                recover(img, "/data/c.db", &recover_vfs).and_then(|s| {
                    if before != after {
                        outcomes[(&s == after) as usize] += 1;
                    }
                    (&s == before || &s == after)
                        .then_some(())
                        .ok_or_else(|| format!("{} rows: neither before nor after", s.len()))
                })
            };
            if let Err(e) = verdict {
                failures.push(format!("operation {}, fence {}: {e}", p.op, p.fence));
            }
        });
    }
    eprintln!(
        "{mode}: {} fences, {images} crash images checked",
        points.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {images} images: {:#?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // The fences span the commit point: some images roll back, some keep the commit.
    assert!(
        outcomes[0] > 0 && outcomes[1] > 0,
        "before/after: {outcomes:?}"
    );
    (points.len(), images)
}

/// A small transaction: inserts, an update and a delete, committed.
fn small_transaction(db: &Connection) {
    db.execute_batch("BEGIN").unwrap();
    insert(db, 100, 5);
    db.execute_batch("UPDATE t SET v = x'ff' WHERE tx = 1; DELETE FROM t WHERE tx = 2; COMMIT")
        .unwrap();
}

#[test]
fn every_fence_of_a_commit_rollback_journal() {
    let (fences, images) = every_fence("DELETE", &[&small_transaction]);
    assert!(
        fences > 10 && images > fences,
        "{fences} fences, {images} images"
    );
}

#[test]
fn every_fence_of_a_commit_and_checkpoint_wal() {
    let checkpoint = |db: &Connection| {
        db.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
    };
    let (fences, images) = every_fence("WAL", &[&small_transaction, &checkpoint]);
    assert!(
        fences > 10 && images > fences,
        "{fences} fences, {images} images"
    );
}
