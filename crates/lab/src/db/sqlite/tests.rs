//! `usertable` on SQLite against a model (a BTreeMap), in rollback and WAL modes and
//! from two threads at once.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::io;

use super::*;
use crate::ycsb::db::{KvSession, KvStore};

const FIELDS: usize = 4;

type Model = BTreeMap<String, Vec<Vec<u8>>>;

fn settings(mode: JournalMode) -> SqliteSettings {
    SqliteSettings {
        journal_mode: mode,
        // Small pages and cache so the tiny table still spans several pages and spills.
        page_size: 1024,
        cache_size: 16,
        ..SqliteSettings::default()
    }
}

fn value(rng: &mut fastrand::Rng) -> Vec<u8> {
    let len = rng.usize(0..40);
    (0..len).map(|_| rng.u8(..)).collect()
}

fn record(rng: &mut fastrand::Rng) -> Vec<Vec<u8>> {
    (0..FIELDS).map(|_| value(rng)).collect()
}

fn key(prefix: &str, rng: &mut fastrand::Rng, space: u32) -> String {
    format!("{prefix}user{:06}", rng.u32(0..space))
}

/// The model's answer to a scan: up to `count` records from `start`, projected.
fn model_scan(model: &Model, start: &str, count: usize, field: Option<usize>) -> Vec<Vec<Vec<u8>>> {
    model
        .range(start.to_string()..)
        .take(count)
        .map(|(_, r)| project(r, field))
        .collect()
}

fn project(r: &[Vec<u8>], field: Option<usize>) -> Vec<Vec<u8>> {
    match field {
        None => r.to_vec(),
        Some(i) => vec![r[i].clone()],
    }
}

fn maybe_field(rng: &mut fastrand::Rng) -> Option<usize> {
    rng.bool().then(|| rng.usize(0..FIELDS))
}

/// One random operation of each kind in turn, checked against the model. Keys are drawn
/// from `prefix`'s space only, so threads with distinct prefixes do not interfere, but
/// scans read across prefixes and are checked only within the session's own range.
fn random_op(
    s: &mut SqliteSession,
    model: &mut Model,
    rng: &mut fastrand::Rng,
    prefix: &str,
    step: usize,
) -> io::Result<()> {
    let k = key(prefix, rng, 400);
    match step % 5 {
        0 => {
            let r = record(rng);
            let got = s.insert(&k, &r);
            match model.entry(k) {
                Entry::Occupied(_) => {
                    assert_eq!(got.unwrap_err().kind(), io::ErrorKind::AlreadyExists)
                }
                Entry::Vacant(slot) => {
                    got?;
                    slot.insert(r);
                }
            }
        }
        1 => {
            let field = maybe_field(rng);
            let mut out = Vec::new();
            let found = s.read(&k, field, &mut out)?;
            match model.get(&k) {
                Some(r) => assert!(found && out == project(r, field), "read {k}"),
                None => assert!(!found && out.is_empty(), "read absent {k}"),
            }
        }
        2 => {
            let n = rng.usize(1..=FIELDS);
            let mut fields: Vec<usize> = (0..FIELDS).collect();
            rng.shuffle(&mut fields);
            let changes: Vec<(usize, Vec<u8>)> =
                fields[..n].iter().map(|&i| (i, value(rng))).collect();
            let updated = s.update(&k, &changes)?;
            assert_eq!(updated, model.contains_key(&k), "update {k}");
            if let Some(r) = model.get_mut(&k) {
                for (i, v) in changes {
                    r[i] = v;
                }
            }
        }
        3 => {
            let (count, field) = (rng.usize(0..25), maybe_field(rng));
            let mut out = Vec::new();
            let n = s.scan(&k, count, field, &mut out)?;
            assert_eq!(n, out.len());
            // Records of other prefixes sort after this prefix's; compare our own part.
            let ours = model_scan(model, &k, count, field);
            assert_eq!(&out[..ours.len()], &ours[..], "scan {k} {count}");
        }
        _ => {
            let deleted = s.delete(&k)?;
            assert_eq!(deleted, model.remove(&k).is_some(), "delete {k}");
        }
    }
    Ok(())
}

/// Loads 200 records then runs `ops` random operations, keeping `model` in step.
fn exercise(store: &SqliteStore, prefix: &str, seed: u64, ops: usize) -> io::Result<Model> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut s = store.session()?;
    let mut model = Model::new();
    while model.len() < 200 {
        let (k, r) = (key(prefix, &mut rng, 400), record(&mut rng));
        if let Entry::Vacant(slot) = model.entry(k) {
            s.insert(slot.key(), &r)?;
            slot.insert(r);
        }
    }
    for step in 0..ops {
        random_op(&mut s, &mut model, &mut rng, prefix, step)?;
    }
    Ok(model)
}

/// Every record of the table, read with one scan, equals the model.
fn assert_table_is(store: &SqliteStore, model: &Model) {
    let mut s = store.session().unwrap();
    let mut out = Vec::new();
    s.scan("", usize::MAX, None, &mut out).unwrap();
    let want: Vec<Vec<Vec<u8>>> = model.values().cloned().collect();
    assert_eq!(out, want);
    integrity_check(s.connection()).unwrap();
}

fn single_thread(mode: JournalMode) {
    let dir = scratch_dir();
    let path = dir.path().join("ycsb.db");
    let store = SqliteStore::open(&path, settings(mode), FIELDS).unwrap();
    let model = exercise(&store, "", 1, 3000).unwrap();
    assert_table_is(&store, &model);
    let s = store.session().unwrap();
    let mode_now: String = s
        .connection()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode_now, mode.as_str());
    // Reopening checks the stored table's shape.
    assert!(SqliteStore::open(&path, settings(mode), FIELDS).is_ok());
    let err = SqliteStore::open(&path, settings(mode), FIELDS + 1).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
}

#[test]
fn usertable_matches_model_rollback_journal() {
    single_thread(JournalMode::Delete);
}

#[test]
fn usertable_matches_model_wal() {
    single_thread(JournalMode::Wal);
}

fn two_threads(mode: JournalMode) {
    let dir = scratch_dir();
    let store = SqliteStore::open(&dir.path().join("ycsb.db"), settings(mode), FIELDS).unwrap();
    let models: Vec<Model> = std::thread::scope(|scope| {
        let handles: Vec<_> = ["a", "b"]
            .into_iter()
            .zip([7, 8])
            .map(|(prefix, seed)| {
                let store = &store;
                scope.spawn(move || exercise(store, prefix, seed, 1500))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    let all: Model = models.into_iter().flatten().collect();
    assert_table_is(&store, &all);
}

#[test]
fn usertable_two_threads_rollback_journal() {
    two_threads(JournalMode::Truncate);
}

#[test]
fn usertable_two_threads_wal() {
    two_threads(JournalMode::Wal);
}

#[test]
fn bad_inputs_are_errors() {
    let dir = scratch_dir();
    let path = dir.path().join("ycsb.db");
    let bad_page = SqliteSettings {
        page_size: 1000,
        ..SqliteSettings::default()
    };
    assert_eq!(
        SqliteStore::open(&path, bad_page, FIELDS)
            .unwrap_err()
            .kind(),
        io::ErrorKind::InvalidInput
    );
    assert!(SqliteStore::open(&path, SqliteSettings::default(), 0).is_err());
    let store = SqliteStore::open(&path, settings(JournalMode::Persist), FIELDS).unwrap();
    let mut s = store.session().unwrap();
    let invalid = io::ErrorKind::InvalidInput;
    assert_eq!(s.insert("k", &[vec![1]]).unwrap_err().kind(), invalid);
    assert_eq!(
        s.read("k", Some(FIELDS), &mut Vec::new())
            .unwrap_err()
            .kind(),
        invalid
    );
    assert_eq!(
        s.update("k", &[(FIELDS, vec![])]).unwrap_err().kind(),
        invalid
    );
    assert_eq!(
        s.update("k", &[(0, vec![]), (FIELDS, vec![])])
            .unwrap_err()
            .kind(),
        invalid
    );
    assert_eq!(s.update("k", &[]).unwrap_err().kind(), invalid);
    assert_eq!(
        s.scan("k", 3, Some(FIELDS), &mut Vec::new())
            .unwrap_err()
            .kind(),
        invalid
    );
    let other_vfs = SqliteSettings {
        vfs: Some("no-such-vfs".into()),
        ..SqliteSettings::default()
    };
    assert!(other_vfs.open(&dir.path().join("x.db")).is_err());
    // A database created with 1024-byte pages refuses to open as 4096.
    assert_eq!(
        SqliteSettings::default().open(&path).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

#[test]
fn describe_names_version_and_settings() {
    let d = settings(JournalMode::Wal).describe();
    assert!(d.contains(rusqlite::version()), "{d}");
    assert!(
        d.contains("journal_mode=WAL") && d.contains("synchronous=FULL"),
        "{d}"
    );
    assert_eq!("wal".parse::<JournalMode>(), Ok(JournalMode::Wal));
    assert_eq!("normal".parse::<Synchronous>(), Ok(Synchronous::Normal));
    assert!("memory".parse::<JournalMode>().is_err());
}
