//! `PRAGMA mmap_size`: SQLite reads pages through xFetch, straight out of the image, and
//! gets the same results as through xRead; a shrinking VACUUM under live maps still works.

mod common;

use common::*;
use rusqlite::Connection;

type Rows = Vec<(i64, Vec<u8>)>;

fn all_rows(db: &Connection) -> Rows {
    let mut st = db.prepare("SELECT id, v FROM t ORDER BY id").unwrap();
    let rows = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    rows
}

fn fetches(img: &Image) -> u64 {
    nvmfs_sqlite::stats(&img.vfs).unwrap().fetches
}

fn fill(db: &Connection, rows: i64) {
    db.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    db.execute_batch("BEGIN").unwrap();
    for i in 0..rows {
        db.execute("INSERT INTO t VALUES (?1, randomblob(120 + ?1 % 200))", [i])
            .unwrap();
    }
    db.execute_batch("COMMIT").unwrap();
}

fn set_mmap(db: &Connection, bytes: i64) {
    let got: i64 = db
        .query_row(&format!("PRAGMA mmap_size={bytes}"), [], |r| r.get(0))
        .unwrap();
    assert_eq!(got, bytes);
}

fn mmap_reads_match(mode: &str) {
    let img = Image::new(&format!("mmap-{mode}"), 64);
    let path = "/data/m.db";
    let db = img.open(path);
    set_journal_mode(&db, mode);
    fill(&db, 20_000);
    db.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
    let reference = all_rows(&db);
    assert_eq!(fetches(&img), 0, "no fetch without mmap_size");
    let pages: i64 = db.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    drop(db);

    let db = img.open(path);
    set_mmap(&db, 256 << 20);
    let before = fetches(&img);
    assert_eq!(all_rows(&db), reference);
    let fetched = fetches(&img) - before;
    // Nearly every page of the table was read in place (page 1 never is).
    assert!(
        fetched as i64 >= pages * 9 / 10,
        "{fetched} fetches for {pages} pages"
    );
    assert_integrity(&db);

    // Another connection changes and shrinks the file under this one's maps.
    let other = img.open(path);
    set_mmap(&other, 256 << 20);
    assert_eq!(all_rows(&other), reference);
    other
        .execute_batch("DELETE FROM t WHERE id % 4 != 0; UPDATE t SET v = x'00ff' WHERE id = 0")
        .unwrap();
    other.execute_batch("VACUUM").unwrap();
    other
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    let pages_after: i64 = other
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    assert!(pages_after < pages / 2, "{pages_after} of {pages}");
    let size = img.fs.metadata(path).unwrap().len() as i64;
    let page_size: i64 = other
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    assert_eq!(size, pages_after * page_size, "the file shrank");
    let mut expect: Rows = reference
        .into_iter()
        .filter(|(id, _)| id % 4 == 0)
        .collect();
    expect[0].1 = vec![0, 0xff];
    let before = fetches(&img);
    assert_eq!(all_rows(&db), expect);
    assert!(fetches(&img) > before);
    assert_integrity(&db);
    drop(other);
    drop(db);
    img.finish();
}

#[test]
fn mmap_reads_through_fetch_rollback_journal() {
    mmap_reads_match("DELETE");
}

#[test]
fn mmap_reads_through_fetch_wal() {
    mmap_reads_match("WAL");
}
