//! SQLite on the nvmfs VFS: every journal mode, the database as an ordinary nvmfs file,
//! temporary files, paths, registration and error paths.

mod common;

use std::io::ErrorKind;

use common::*;
use rusqlite::{params, ErrorCode, OpenFlags};

/// Creates `t`, inserts 10 transactions of 100 rows and checks them.
fn fill_and_check(db: &rusqlite::Connection) {
    db.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        .unwrap();
    for tx in 0..10 {
        db.execute_batch("BEGIN").unwrap();
        for i in 0..100 {
            let id = tx * 100 + i;
            db.execute(
                "INSERT INTO t VALUES (?1, ?2)",
                params![id, format!("row {id:05} ").repeat(8)],
            )
            .unwrap();
        }
        db.execute_batch("COMMIT").unwrap();
    }
    assert_eq!(count(db, "t"), 1000);
    let sum: i64 = db
        .query_row("SELECT sum(id) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(sum, 999 * 1000 / 2);
    let v: String = db
        .query_row("SELECT v FROM t WHERE id = 777", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, "row 00777 ".repeat(8));
    assert_integrity(db);
}

#[test]
fn every_journal_mode_round_trips() {
    let img = Image::new("modes", 32);
    for mode in ["DELETE", "TRUNCATE", "PERSIST", "WAL", "MEMORY"] {
        let path = format!("/data/{mode}.db");
        let db = img.open(&path);
        set_journal_mode(&db, mode);
        fill_and_check(&db);
        // A rollback inside a transaction restores the pages from the journal.
        db.execute_batch("BEGIN; DELETE FROM t; INSERT INTO t VALUES (5000, 'x'); ROLLBACK")
            .unwrap();
        assert_eq!(count(&db, "t"), 1000);
        if mode == "WAL" {
            assert!(img.fs.metadata(format!("{path}-wal")).is_ok());
        }
        drop(db);
        // Reopened: everything is still there.
        let db = img.open(&path);
        assert_eq!(count(&db, "t"), 1000);
        assert_integrity(&db);
        drop(db);
        let names: Vec<String> = img
            .fs
            .read_dir("/data")
            .unwrap()
            .iter()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        match mode {
            // The last connection checkpoints and removes the WAL; DELETE removes the journal.
            "WAL" | "DELETE" | "MEMORY" => assert!(
                !names.iter().any(|n| n.starts_with(&format!("{mode}.db-"))),
                "{names:?}"
            ),
            // TRUNCATE leaves an empty journal, PERSIST one with a zeroed header.
            _ => assert!(names.contains(&format!("{mode}.db-journal")), "{names:?}"),
        }
    }
    img.finish();
}

#[test]
fn the_database_is_an_ordinary_nvmfs_file() {
    let img = Image::new("file", 32);
    let db = img.open("/data/app.db");
    fill_and_check(&db);
    let (pages, page_size): (i64, i64) = db
        .query_row(
            "SELECT page_count, page_size FROM pragma_page_count, pragma_page_size",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let bytes = img.fs.read_file("/data/app.db").unwrap();
    assert!(bytes.starts_with(b"SQLite format 3\0"));
    assert_eq!(bytes.len() as i64, pages * page_size);
    // The page count in the header (offset 28, big-endian) matches.
    assert_eq!(
        u32::from_be_bytes(bytes[28..32].try_into().unwrap()) as i64,
        pages
    );
    drop(db);
    img.finish();
}

#[test]
fn temporary_files_are_in_the_image_and_unlinked() {
    let img = Image::new("temp", 32);
    let db = img.open("/data/t.db");
    db.execute_batch(
        "PRAGMA temp_store=FILE; CREATE TEMP TABLE scratch(x, y); PRAGMA temp.cache_size=20",
    )
    .unwrap();
    db.execute_batch("BEGIN").unwrap();
    for i in 0..5000 {
        db.execute("INSERT INTO scratch VALUES (?1, randomblob(200))", [i])
            .unwrap();
    }
    db.execute_batch("COMMIT").unwrap();
    assert_eq!(count(&db, "temp.scratch"), 5000);
    // The temporary database (and its journal) are open through this VFS, but unlinked at
    // open: no name in the image refers to them.
    let stats = nvmfs_sqlite::stats(&img.vfs).unwrap();
    assert!(stats.open_files >= 2, "{stats:?}");
    let root: Vec<_> = img.fs.read_dir("/").unwrap();
    assert!(root
        .iter()
        .all(|e| !e.file_name().to_string_lossy().starts_with(".sqlite-tmp")));
    let blocks_in_use = img.fs.statfs().blocks - img.fs.statfs().blocks_free;
    drop(db);
    // Closing frees the temporary files' blocks.
    let after = img.fs.statfs().blocks - img.fs.statfs().blocks_free;
    assert!(after + 200 < blocks_in_use, "{after} vs {blocks_in_use}");
    assert_eq!(nvmfs_sqlite::stats(&img.vfs).unwrap().open_files, 0);
    img.finish();
}

#[test]
fn paths_are_absolute_in_the_image_and_symlinks_resolved() {
    let img = Image::new("paths", 32);
    let db = img.open("rel.db");
    db.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1)")
        .unwrap();
    drop(db);
    assert!(!img.fs.metadata("/rel.db").unwrap().is_empty());

    img.fs.symlink_path("/data", "/link").unwrap();
    let db = img.open("/link/./sub/../s.db");
    let file: String = db
        .query_row(
            "SELECT file FROM pragma_database_list WHERE name = 'main'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(file, "/data/s.db");
    db.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x)")
        .unwrap();
    // The WAL sits next to the real file.
    assert!(img.fs.metadata("/data/s.db-wal").is_ok());
    drop(db);
    // SQLITE_OPEN_NOFOLLOW refuses a path through a symlink.
    let flags = OpenFlags::default() | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let e = nvmfs_sqlite::open(&img.vfs, "/link/s.db", flags).unwrap_err();
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::CannotOpen), "{e}");
    img.finish();
}

#[test]
fn error_paths_are_errors_not_panics() {
    let img = Image::new("errors", 32);
    // A missing directory.
    let e = img.try_open("/no/such/dir/x.db").unwrap_err();
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::CannotOpen), "{e}");
    // A directory.
    let e = img.try_open("/data").unwrap_err();
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::CannotOpen), "{e}");
    // A missing file without CREATE.
    let e = nvmfs_sqlite::open(&img.vfs, "/data/none.db", OpenFlags::SQLITE_OPEN_READ_WRITE)
        .unwrap_err();
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::CannotOpen), "{e}");
    // Not a database.
    img.fs.write_file("/data/junk.db", &[0x5a; 8192]).unwrap();
    let db = img.open("/data/junk.db");
    let e = db.execute_batch("SELECT * FROM sqlite_master").unwrap_err();
    assert_eq!(e.sqlite_error_code(), Some(ErrorCode::NotADatabase), "{e}");
    drop(db);
    // An unknown VFS name.
    assert!(nvmfs_sqlite::open("no-such-vfs", "/x.db", OpenFlags::default()).is_err());
    img.finish();
}

#[test]
fn registration_rules() {
    let img = Image::new("reg", 32);
    let again = nvmfs_sqlite::register(img.fs.clone(), &img.vfs).unwrap_err();
    assert_eq!(again.kind(), ErrorKind::AlreadyExists);
    // The same mount under a second name.
    let other = unique_name("other");
    let e = nvmfs_sqlite::register(img.fs.clone(), &other).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    // A name SQLite already has.
    let fs2 = nvmfs::Fs::format_in_memory(&nvmfs::FormatOptions {
        size_bytes: 4 << 20,
        inode_count: None,
        ..Default::default()
    })
    .unwrap();
    let e = nvmfs_sqlite::register(fs2.clone(), "unix").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    for bad in ["", "a\0b"] {
        let e = nvmfs_sqlite::register(fs2.clone(), bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
    // Busy while a connection is open, fine afterwards; unknown afterwards.
    let db = img.open("/data/r.db");
    db.execute_batch("CREATE TABLE t(x)").unwrap();
    let e = nvmfs_sqlite::unregister(&img.vfs).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ResourceBusy, "{e}");
    // The registration holds a clone of the Fs.
    assert!(img.fs.clone().unmount().is_err());
    drop(db);
    nvmfs_sqlite::unregister(&img.vfs).unwrap();
    assert_eq!(
        nvmfs_sqlite::unregister(&img.vfs).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(nvmfs_sqlite::stats(&img.vfs).is_none());
    assert!(img.try_open("/data/r.db").is_err());
    // The name can serve another mount now, and this mount another name.
    nvmfs_sqlite::register(fs2.clone(), &img.vfs).unwrap();
    let db = img.open("/r2.db");
    db.execute_batch("CREATE TABLE t(x)").unwrap();
    drop(db);
    assert!(fs2.metadata("/r2.db").is_ok());
    nvmfs_sqlite::unregister(&img.vfs).unwrap();
    nvmfs_sqlite::register(img.fs.clone(), &img.vfs).unwrap();
    let db = img.open("/data/r.db");
    assert_eq!(count(&db, "t"), 0);
    drop(db);
    img.finish();
}
