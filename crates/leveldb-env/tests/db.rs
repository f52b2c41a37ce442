//! rusty-leveldb databases on NvmfsEnv: the operations, reopening, compaction and recovery
//! from an image copied mid-run, each image fsck-clean at the end.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{release_and_check, Image};
use nvmfs_leveldb::NvmfsEnv;
use rusty_leveldb::{LdbIterator, Options, StatusCode, DB};

const DIR: &str = "/db";

fn open(env: &NvmfsEnv, opts: Options) -> DB {
    env.open_db(Path::new(DIR), opts).unwrap()
}

/// Keys in no particular order, so that the tables of level 0 overlap and compactions merge.
fn key(i: u64) -> Vec<u8> {
    let mut x = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    format!("k{:016x}", x ^ (x >> 31)).into_bytes()
}

fn value(i: u64, len: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

fn get(db: &mut DB, k: &[u8]) -> Option<Vec<u8>> {
    db.get(k).map(|b| b.to_vec())
}

/// Every record in key order.
fn contents(db: &mut DB) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = db.new_iter().unwrap();
    let mut out = Vec::new();
    while let Some(kv) = it.next() {
        out.push(kv);
    }
    out
}

fn file_names(env: &NvmfsEnv) -> Vec<String> {
    let mut names: Vec<String> = env
        .fs()
        .read_dir(DIR)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn put_get_delete_and_iterate() {
    let image = Image::new(32);
    let env = NvmfsEnv::new(image.mount());
    let mut db = open(&env, Options::default());
    let mut model = BTreeMap::new();
    for i in 0..300 {
        db.put(&key(i), &value(i, 50)).unwrap();
        model.insert(key(i), value(i, 50));
    }
    for i in (0..300).step_by(3) {
        db.delete(&key(i)).unwrap();
        model.remove(&key(i));
    }
    db.put(&key(1), b"replaced").unwrap();
    model.insert(key(1), b"replaced".to_vec());

    for i in 0..300 {
        assert_eq!(
            get(&mut db, &key(i)),
            model.get(&key(i)).cloned(),
            "key {i}"
        );
    }
    let want: Vec<_> = model.clone().into_iter().collect();
    assert_eq!(contents(&mut db), want);

    // A seek lands on the first key at or after the target.
    let (target, _) = want[want.len() / 2].clone();
    let mut probe = target.clone();
    probe.pop();
    let mut it = db.new_iter().unwrap();
    it.seek(&probe);
    let (k, _) = it.current().unwrap();
    assert_eq!(&k[..], &target[..]);
    drop(it); // its tables hold files open

    db.close().unwrap();
    drop(db);
    release_and_check(env, &image);
}

#[test]
fn reopening_finds_the_data_after_close_and_after_drop() {
    let image = Image::new(32);
    let env = NvmfsEnv::new(image.mount());
    let mut db = open(&env, Options::default());
    for i in 0..1000 {
        db.put(&key(i), &value(i, 100)).unwrap();
    }
    // The directory is locked while open.
    let second = env.open_db(Path::new(DIR), Options::default()).err();
    assert_eq!(second.map(|s| s.code), Some(StatusCode::LockError));
    db.close().unwrap();
    drop(db);

    let mut db = open(&env, Options::default());
    for i in 0..1000 {
        assert_eq!(get(&mut db, &key(i)), Some(value(i, 100)), "key {i}");
    }
    for i in 1000..1500 {
        db.put(&key(i), &value(i, 100)).unwrap();
    }
    drop(db); // without close: Drop flushes the log and unlocks

    let mut db = open(&env, Options::default());
    assert_eq!(contents(&mut db).len(), 1500);
    for i in 0..1500 {
        assert_eq!(get(&mut db, &key(i)), Some(value(i, 100)), "key {i}");
    }
    drop(db);
    release_and_check(env, &image);
}

#[test]
fn names_the_host_would_rewrite_are_refused() {
    let image = Image::new(16);
    let env = NvmfsEnv::new(image.mount());
    for name in ["db", "./db", "/a/../db"] {
        let err = env.open_db(Path::new(name), Options::default()).err();
        assert_eq!(
            err.map(|s| s.code),
            Some(StatusCode::InvalidArgument),
            "{name}"
        );
    }
    // A host path through a symlink: /proc/self always is one.
    let err = env
        .open_db(Path::new("/proc/self"), Options::default())
        .err();
    assert_eq!(err.map(|s| s.code), Some(StatusCode::InvalidArgument));
    release_and_check(env, &image);
}

#[test]
fn a_larger_load_is_compacted_into_tables() {
    let image = Image::new(64);
    let env = NvmfsEnv::new(image.mount());
    let opts = || Options {
        write_buffer_size: 64 << 10,
        max_file_size: 128 << 10,
        ..Options::default()
    };
    let mut db = open(&env, opts());
    let n = 20_000;
    for i in 0..n {
        db.put(&key(i), &value(i, 100)).unwrap();
    }
    for i in 0..n {
        assert_eq!(get(&mut db, &key(i)), Some(value(i, 100)), "key {i}");
    }
    // After deletions the check goes through the iterator: rusty-leveldb 4.0.2's DB::get
    // takes a deletion marker that a table returns for a lookup as the answer even when it
    // belongs to a later key, and reports a key that lives in an older table as absent
    // (the same on its disk and memory environments; the iterator merges correctly).
    for i in (0..n).step_by(7) {
        db.delete(&key(i)).unwrap();
    }
    let present = |i: u64| (!i.is_multiple_of(7)).then(|| value(i, 100));
    db.close().unwrap();
    drop(db);

    let tables = file_names(&env)
        .iter()
        .filter(|n| n.ends_with(".ldb"))
        .count();
    assert!(tables > 1, "tables: {:?}", file_names(&env));
    let log = String::from_utf8_lossy(&env.fs().read_file("/db/LOG").unwrap()).into_owned();
    assert!(log.contains("Compacted "), "no compaction in the info log");
    assert!(!log.contains("failed"), "{log}");

    let mut db = open(&env, opts());
    let all = contents(&mut db);
    let want: Vec<_> = (0..n)
        .filter_map(|i| present(i).map(|v| (key(i), v)))
        .collect::<BTreeMap<_, _>>()
        .into_iter()
        .collect();
    assert_eq!(all.len(), want.len());
    assert!(all == want, "contents differ after reopening");
    drop(db);
    release_and_check(env, &image);
}

#[test]
fn a_copy_of_the_image_taken_mid_run_has_everything_flushed() {
    // rusty-leveldb defaults to reusing the last log at open (LevelDB does not): it then
    // appends behind a record torn by the crash, and its log reader stops at that record on
    // the next open, dropping everything written after recovery. LevelDB's default, a new
    // log per open, does not have the problem.
    let opts = || Options {
        reuse_logs: false,
        ..Options::default()
    };
    let image = Image::new(32);
    let env = NvmfsEnv::new(image.mount());
    let mut db = open(&env, opts());
    let flushed = 2000;
    for i in 0..flushed {
        db.put(&key(i), &value(i, 100)).unwrap();
    }
    db.flush().unwrap();
    // More writes, some of them still in the log writer's buffer when the copy is taken.
    let total = 3000;
    for i in flushed..total {
        db.put(&key(i), &value(i, 100)).unwrap();
    }
    let copy = Image::from_bytes(&env.fs().snapshot());
    db.close().unwrap();
    drop(db);
    release_and_check(env, &image);

    let env = NvmfsEnv::new(copy.mount());
    assert!(
        env.fs().recovery_report().unclean,
        "the copy was taken while mounted"
    );
    let mut db = open(&env, opts());
    for i in 0..flushed {
        assert_eq!(
            get(&mut db, &key(i)),
            Some(value(i, 100)),
            "flushed key {i}"
        );
    }
    // The log is a prefix: what came through is the first writes after the flush, intact.
    let survived = (flushed..total)
        .take_while(|&i| get(&mut db, &key(i)).is_some())
        .count() as u64;
    for i in flushed..total {
        let want = (i < flushed + survived).then(|| value(i, 100));
        assert_eq!(get(&mut db, &key(i)), want, "unflushed key {i}");
    }
    // The recovered database keeps working across another reopen.
    for i in total..total + 500 {
        db.put(&key(i), &value(i, 100)).unwrap();
    }
    db.close().unwrap();
    drop(db);
    let mut db = open(&env, opts());
    assert_eq!(
        contents(&mut db).len() as u64,
        flushed + survived + 500,
        "after a second reopen"
    );
    drop(db);
    release_and_check(env, &copy);
}
