//! The LevelDB backend against a BTreeMap model, on a kernel directory and on nvmfs.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use nvmfs::{FormatOptions, Fs, MountOptions};
use tempfile::TempDir;

use super::{LevelDbSettings, LevelDbStore};
use crate::ycsb::db::{KvSession, KvStore};

type Model = BTreeMap<String, Vec<Vec<u8>>>;

const FIELDS: usize = 4;

/// Small buffers and files, so that a test's few megabytes go through memtable flushes,
/// compactions and table reads rather than staying in the memtable.
fn small() -> LevelDbSettings {
    LevelDbSettings {
        max_file_size: 64 << 10,
        write_buffer_size: 64 << 10,
        block_cache_bytes: 64 << 10,
        ..LevelDbSettings::default()
    }
}

fn scratch() -> TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// A formatted, mounted image file in `dir`.
fn image(dir: &TempDir) -> Arc<Fs> {
    let path = dir.path().join("ycsb.img");
    let opts = FormatOptions {
        size_bytes: 64 << 20,
        inode_count: None,
        ..Default::default()
    };
    Fs::format(&path, &opts).unwrap();
    Arc::new(Fs::mount(&path, &MountOptions::default()).unwrap())
}

/// Unmounts (every other handle must be gone) and fscks the image.
fn unmount_and_check(fs: Arc<Fs>) {
    let fs = Arc::try_unwrap(fs).unwrap_or_else(|_| panic!("the mount is still shared"));
    let path = fs.image_path().unwrap().to_path_buf();
    fs.unmount().unwrap();
    let report = nvmfs::fsck::check_image(&path).unwrap();
    assert!(report.is_clean(), "fsck: {:?}", report.problems);
}

fn fields(rng: &mut fastrand::Rng) -> Vec<Vec<u8>> {
    (0..FIELDS)
        .map(|_| {
            let len = rng.usize(0..300);
            std::iter::repeat_with(|| rng.u8(..)).take(len).collect()
        })
        .collect()
}

fn random_key(rng: &mut fastrand::Rng) -> String {
    format!("user{}", rng.u64(..))
}

/// A key of the model near a random point (absent only if the model is empty).
fn some_key(rng: &mut fastrand::Rng, model: &Model) -> String {
    let probe = random_key(rng);
    let found = model.range(probe..).next().or_else(|| model.iter().next());
    found.map_or_else(|| random_key(rng), |(k, _)| k.clone())
}

/// The database holds exactly the model: a scan from the smallest key gives the model's
/// records in key order, and every key reads back its own record.
fn assert_holds(session: &mut impl KvSession, model: &Model) {
    let mut all = Vec::new();
    let n = session.scan("", usize::MAX, None, &mut all).unwrap();
    assert_eq!(n, model.len());
    let want: Vec<Vec<Vec<u8>>> = model.values().cloned().collect();
    assert!(all == want, "the full scan differs from the model");
    let mut out = Vec::new();
    for (k, r) in model {
        assert!(session.read(k, None, &mut out).unwrap(), "{k} missing");
        assert_eq!(&out, r, "{k}");
    }
}

/// Loads, then runs a random mix of every operation, checking each against the model.
fn exercise(session: &mut impl KvSession, seed: u64, load: usize, ops: usize) -> Model {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut model = Model::new();
    for _ in 0..load {
        let (k, f) = (random_key(&mut rng), fields(&mut rng));
        session.insert(&k, &f).unwrap();
        model.insert(k, f);
    }
    for step in 0..ops {
        one_op(session, &mut rng, &mut model, step);
    }
    model
}

fn one_op(session: &mut impl KvSession, rng: &mut fastrand::Rng, model: &mut Model, step: usize) {
    let mut out = Vec::new();
    match rng.u32(0..10) {
        0..=2 => {
            let k = some_key(rng, model);
            let field = rng.bool().then(|| rng.usize(0..FIELDS));
            let found = session.read(&k, field, &mut out).unwrap();
            let want = model.get(&k).map(|r| match field {
                Some(i) => vec![r[i].clone()],
                None => r.clone(),
            });
            assert_eq!(found.then_some(out), want, "step {step}: read {k}");
        }
        3..=4 => {
            let k = if rng.u32(0..8) == 0 {
                random_key(rng)
            } else {
                some_key(rng, model)
            };
            let mut new = Vec::new();
            for i in 0..FIELDS {
                if rng.bool() {
                    new.push((i, fields(rng).remove(0)));
                }
            }
            let found = session.update(&k, &new).unwrap();
            assert_eq!(found, model.contains_key(&k), "step {step}: update {k}");
            if let Some(r) = model.get_mut(&k) {
                for (i, v) in new {
                    r[i] = v;
                }
            }
        }
        5..=6 => {
            let k = random_key(rng);
            let f = fields(rng);
            session.insert(&k, &f).unwrap();
            model.insert(k, f);
        }
        7 => {
            let k = if rng.bool() {
                random_key(rng)
            } else {
                some_key(rng, model)
            };
            let found = session.delete(&k).unwrap();
            assert_eq!(found, model.remove(&k).is_some(), "step {step}: delete {k}");
        }
        _ => {
            let start = random_key(rng);
            let count = rng.usize(0..30);
            let field = rng.bool().then(|| rng.usize(0..FIELDS));
            let mut got = Vec::new();
            let n = session.scan(&start, count, field, &mut got).unwrap();
            let want: Vec<Vec<Vec<u8>>> = model
                .range(start.clone()..)
                .take(count)
                .map(|(_, r)| match field {
                    Some(i) => vec![r[i].clone()],
                    None => r.clone(),
                })
                .collect();
            assert_eq!(n, want.len(), "step {step}: scan from {start}");
            assert!(
                got == want,
                "step {step}: scan from {start}: records differ"
            );
        }
    }
}

#[test]
fn every_operation_matches_the_model_on_a_kernel_directory() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ycsb");
    let store = LevelDbStore::on_dir(&db, &small()).unwrap();
    let mut s = store.session().unwrap();
    let model = exercise(&mut s, 1, 600, 3000);
    assert_holds(&mut s, &model);
    drop(s);
    store.close().unwrap();
    assert!(std::fs::read_dir(&db).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".ldb")));

    let store = LevelDbStore::on_dir(&db, &small()).unwrap();
    assert_holds(&mut store.session().unwrap(), &model);
    store.close().unwrap();
}

#[test]
fn every_operation_matches_the_model_on_nvmfs() {
    let dir = scratch();
    let fs = image(&dir);
    let db = Path::new("/ycsb/db");
    let store = LevelDbStore::on_nvmfs(fs.clone(), db, &small()).unwrap();
    let mut s = store.session().unwrap();
    let model = exercise(&mut s, 2, 600, 3000);
    assert_holds(&mut s, &model);
    drop(s);
    store.close().unwrap();
    let tables = fs.read_dir(db).unwrap();
    assert!(tables.iter().any(|e| e.name.ends_with(b".ldb")));

    let store = LevelDbStore::on_nvmfs(fs.clone(), db, &small()).unwrap();
    assert_holds(&mut store.session().unwrap(), &model);
    store.close().unwrap();
    unmount_and_check(fs);
}

#[test]
fn two_client_threads_share_the_store() {
    let dir = scratch();
    let fs = image(&dir);
    let store = LevelDbStore::on_nvmfs(fs.clone(), Path::new("/db"), &small()).unwrap();
    let models: Vec<Model> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..2u64)
            .map(|t| {
                let store = &store;
                scope.spawn(move || {
                    // Sessions are made in their own thread, as YCSB's clients do.
                    let mut s = store.session().unwrap();
                    let mut rng = fastrand::Rng::with_seed(10 + t);
                    let mut model = Model::new();
                    for i in 0..400 {
                        let k = format!("user{t}-{}", rng.u64(..));
                        let f = fields(&mut rng);
                        s.insert(&k, &f).unwrap();
                        model.insert(k, f);
                        if i % 4 == 3 {
                            one_op_on_own_keys(&mut s, &mut rng, &mut model);
                        }
                    }
                    model
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let union: Model = models.into_iter().flatten().collect();
    assert_holds(&mut store.session().unwrap(), &union);
    store.close().unwrap();
    unmount_and_check(fs);
}

/// An update or a delete of one of this thread's keys (the other thread's keys differ).
fn one_op_on_own_keys(s: &mut impl KvSession, rng: &mut fastrand::Rng, model: &mut Model) {
    let k = some_key(rng, model);
    if rng.bool() {
        let v = fields(rng).remove(1);
        assert!(s.update(&k, &[(1, v.clone())]).unwrap());
        model.get_mut(&k).unwrap()[1] = v;
    } else {
        assert!(s.delete(&k).unwrap());
        model.remove(&k);
    }
}

#[test]
fn reads_after_deletions_find_every_live_key() {
    // Enough records for several levels of tables, then tombstones among them: the case in
    // which rusty-leveldb's own get reports live keys as absent.
    let dir = tempfile::tempdir().unwrap();
    let store = LevelDbStore::on_dir(&dir.path().join("db"), &small()).unwrap();
    let mut s = store.session().unwrap();
    let key = |i: u64| format!("user{}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let n = 12_000;
    for i in 0..n {
        s.insert(&key(i), &[vec![b'v'; 100]]).unwrap();
    }
    for i in (0..n).step_by(7) {
        assert!(s.delete(&key(i)).unwrap());
    }
    let mut out = Vec::new();
    let missing: Vec<u64> = (0..n)
        .filter(|i| !i.is_multiple_of(7))
        .filter(|&i| !s.read(&key(i), None, &mut out).unwrap())
        .collect();
    assert!(missing.is_empty(), "live keys read as absent: {missing:?}");
    for i in (0..n).step_by(7).take(50) {
        assert!(!s.read(&key(i), None, &mut out).unwrap());
    }
    drop(s);
    store.close().unwrap();
}

#[test]
fn synced_writes_are_in_the_image_at_once() {
    for sync in [false, true] {
        let dir = scratch();
        let fs = image(&dir);
        let settings = LevelDbSettings {
            sync_writes: sync,
            ..LevelDbSettings::default()
        };
        let store = LevelDbStore::on_nvmfs(fs.clone(), Path::new("/db"), &settings).unwrap();
        let mut s = store.session().unwrap();
        s.insert("user1", &[b"one".to_vec()]).unwrap();
        // The image as a crash would leave it, with the store still open.
        let copy_path = dir.path().join("copy.img");
        std::fs::write(&copy_path, fs.snapshot()).unwrap();
        drop(s);
        store.close().unwrap();
        unmount_and_check(fs);

        let copy = Arc::new(Fs::mount(&copy_path, &MountOptions::default()).unwrap());
        let store = LevelDbStore::on_nvmfs(copy.clone(), Path::new("/db"), &settings).unwrap();
        let mut out = Vec::new();
        let found = store
            .session()
            .unwrap()
            .read("user1", None, &mut out)
            .unwrap();
        // Unsynced, the record is still in LevelDB's log buffer when the copy is taken.
        assert_eq!(found, sync, "sync_writes {sync}");
        store.close().unwrap();
        unmount_and_check(copy);
    }
}

#[test]
fn bad_requests_are_refused_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = LevelDbStore::on_dir(&dir.path().join("db"), &small()).unwrap();
    let mut s = store.session().unwrap();
    s.insert("user1", &[b"a".to_vec(), b"b".to_vec()]).unwrap();
    let mut out = Vec::new();
    let e = s.read("user1", Some(2), &mut out).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    let e = s
        .update("user1", &[(0, b"x".to_vec()), (5, b"y".to_vec())])
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    assert!(s.read("user1", None, &mut out).unwrap());
    assert_eq!(
        out,
        vec![b"a".to_vec(), b"b".to_vec()],
        "a refused update changes nothing"
    );
    assert!(!s.update("user2", &[(0, b"x".to_vec())]).unwrap());
    assert!(!s.delete("user2").unwrap());
    let mut records = Vec::new();
    assert_eq!(s.scan("user", 0, None, &mut records).unwrap(), 0);

    // A session outlives its store only to report that the store is gone.
    store.close().unwrap();
    let e = s.insert("user3", &[]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");

    let tiny = LevelDbSettings {
        write_buffer_size: 100,
        ..LevelDbSettings::default()
    };
    let e = LevelDbStore::on_dir(&dir.path().join("db2"), &tiny)
        .err()
        .unwrap();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("write_buffer_size"), "{e}");

    let fs = Arc::new(
        Fs::format_in_memory(&FormatOptions {
            size_bytes: 16 << 20,
            inode_count: None,
            ..Default::default()
        })
        .unwrap(),
    );
    let e = LevelDbStore::on_nvmfs(fs, Path::new("db"), &small())
        .err()
        .unwrap();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
}

#[test]
fn a_second_store_on_one_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = LevelDbStore::on_dir(&db, &small()).unwrap();
    let e = LevelDbStore::on_dir(&db, &small()).err().unwrap();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
    store.close().unwrap();
}

#[test]
fn describe_names_the_engine_the_place_and_the_settings() {
    let dir = tempfile::tempdir().unwrap();
    let store = LevelDbStore::on_dir(&dir.path().join("db"), &LevelDbSettings::default()).unwrap();
    let d = store.describe();
    for part in [
        "rusty-leveldb",
        "max_file_size 128 MiB",
        "write_buffer_size 4 MiB",
        "block cache 8 MiB",
        "compression off",
        "sync writes off",
        "one database thread",
    ] {
        assert!(d.contains(part), "{part:?} missing from {d:?}");
    }
    assert!(d.contains(&dir.path().display().to_string()), "{d}");
    store.close().unwrap();
}
