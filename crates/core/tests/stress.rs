//! Multi-threaded stress: threads create, write, read back, rename and remove files in their
//! own directories and in one shared directory; afterwards every surviving file has the
//! content its writer left and fsck is clean (also after a crash remount).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use nvmfs::{Fs, OpenOptions};

const THREADS: usize = 4;
const ROUNDS: usize = 400;

fn content(t: usize, i: usize) -> Vec<u8> {
    let len = 100 + (t * 7919 + i * 104_729) % 20_000;
    (0..len)
        .map(|k| (k as u8) ^ (t as u8) ^ (i as u8))
        .collect()
}

fn worker(fs: Fs, t: usize, shared_ok: Arc<AtomicU64>) {
    let own = format!("/t{t}");
    fs.create_dir(&own).unwrap();
    for i in 0..ROUNDS {
        let p = format!("{own}/f{i}");
        fs.write_file(&p, &content(t, i)).unwrap();
        assert_eq!(fs.read_file(&p).unwrap(), content(t, i));
        match i % 4 {
            0 => fs.remove_file(&p).unwrap(),
            1 => fs.rename_path(&p, format!("{own}/r{i}")).unwrap(),
            _ => {}
        }
        // Shared directory: names collide between threads on purpose.
        let s = format!("/shared/n{}", i % 50);
        match i % 3 {
            0 => {
                if OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&fs, &s)
                    .is_ok()
                {
                    shared_ok.fetch_add(1, Ordering::Relaxed);
                }
            }
            1 => {
                let _ = fs.remove_file(&s);
            }
            _ => {
                let _ = fs.rename_path(&s, format!("/shared/m{}", (i + t) % 50));
            }
        }
        if i % 50 == 0 {
            let _ = fs.read_dir("/shared").unwrap();
        }
    }
}

fn check_survivors(fs: &Fs) {
    for t in 0..THREADS {
        for i in 0..ROUNDS {
            let (f, r) = (format!("/t{t}/f{i}"), format!("/t{t}/r{i}"));
            match i % 4 {
                0 => assert!(fs.metadata(&f).is_err() && fs.metadata(&r).is_err()),
                1 => assert_eq!(fs.read_file(&r).unwrap(), content(t, i)),
                _ => assert_eq!(fs.read_file(&f).unwrap(), content(t, i)),
            }
        }
    }
}

#[test]
fn parallel_disjoint_and_shared_directories() {
    parallel_on(mem_fs(256, 16_384));
}

/// The same on the cuckoo mapping: one global table that every thread's writes change.
#[test]
fn parallel_disjoint_and_shared_directories_cuckoo() {
    parallel_on(mem_fs_with(256, 16_384, nvmfs::MappingKind::Cuckoo));
}

/// The same on level hashing: one global table that resizes while every thread writes.
#[test]
fn parallel_disjoint_and_shared_directories_level() {
    parallel_on(mem_fs_with(256, 16_384, nvmfs::MappingKind::Level));
}

fn parallel_on(fs: Fs) {
    fs.create_dir("/shared").unwrap();
    let ok = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let (fs, ok) = (fs.clone(), ok.clone());
            std::thread::spawn(move || worker(fs, t, ok))
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert!(ok.load(Ordering::Relaxed) > 0);
    check_survivors(&fs);
    assert_fsck_clean(&fs);
    let after = crash_remount(&fs);
    check_survivors(&after);
    assert_fsck_clean(&after);
}

#[test]
fn parallel_writers_of_one_file_and_readers() {
    let fs = mem_fs(64, 256);
    fs.write_file("/big", &vec![0u8; 1 << 20]).unwrap();
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&fs, "/big")
                    .unwrap();
                let mut buf = vec![0u8; 4096];
                for i in 0..500usize {
                    // Each thread owns every THREADS-th 4 KiB block.
                    let blk = (i * THREADS + t) % 256;
                    f.write_all_at(&[t as u8 + 1; 4096], blk as u64 * 4096)
                        .unwrap();
                    f.read_exact_at(&mut buf, blk as u64 * 4096).unwrap();
                    assert!(buf.iter().all(|&b| b == t as u8 + 1));
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(fs.metadata("/big").unwrap().len(), 1 << 20);
    assert_fsck_clean(&fs);
}

/// Readers look up, open and read files in one directory while writers link fully written
/// files into it, unlink them, and create and remove empty files and subdirectories there.
/// Lookups run next to the writers' transactions (they share the directory's index lock), so
/// this checks that a lookup never returns a half-made or freed file: every file opened by
/// name has exactly the content of that name, also when it is unlinked while open, and a
/// lookup below a subdirectory being removed gives ENOENT, never another error.
#[test]
fn lookups_race_creates_and_unlinks_in_one_directory() {
    const NAMES: usize = 24;
    const WRITERS: usize = 2;
    const READERS: usize = 3;
    let fs = mem_fs(128, 4096);
    fs.create_dir("/flat").unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                fs.create_dir(format!("/w{w}")).unwrap();
                for i in 0..600usize {
                    let k = (i * 7 + w * 5) % NAMES;
                    let staged = format!("/w{w}/d{k}");
                    fs.write_file(&staged, &content(0, k)).unwrap();
                    // link() and unlink() race the other writer on the same names.
                    let _ = fs.hard_link(&staged, format!("/flat/d{k}"));
                    fs.remove_file(&staged).unwrap();
                    let _ = fs.remove_file(format!("/flat/d{}", (k + 11) % NAMES));
                    let _ = OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&fs, format!("/flat/e{k}"));
                    let _ = fs.remove_file(format!("/flat/e{}", (k + 3) % NAMES));
                    match i % 3 {
                        0 => drop(fs.create_dir(format!("/flat/s{k}"))),
                        1 => drop(fs.write_file(format!("/flat/s{k}/x"), b"x")),
                        _ => {
                            let _ = fs.remove_file(format!("/flat/s{k}/x"));
                            let _ = fs.remove_dir(format!("/flat/s{k}"));
                        }
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (fs, stop, opened) = (fs.clone(), stop.clone(), opened.clone());
            std::thread::spawn(move || {
                let mut i = r;
                while !stop.load(Ordering::Relaxed) {
                    let k = i % NAMES;
                    i += 1;
                    if let Ok(f) = OpenOptions::new()
                        .read(true)
                        .open(&fs, format!("/flat/d{k}"))
                    {
                        // Give a writer the chance to unlink it while it is open.
                        std::thread::yield_now();
                        let want = content(0, k);
                        let mut buf = vec![0u8; want.len() + 1];
                        let n = f.read_at(&mut buf, 0).unwrap();
                        assert_eq!(&buf[..n], &want[..], "/flat/d{k}");
                        opened.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Ok(m) = fs.metadata(format!("/flat/e{k}")) {
                        assert_eq!(m.len(), 0, "/flat/e{k}");
                    }
                    match fs.read_file(format!("/flat/s{k}/x")) {
                        Ok(x) => assert_eq!(x, b"x"),
                        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}"),
                    }
                    if i % 64 == 0 {
                        for e in fs.read_dir("/flat").unwrap() {
                            let n = e.file_name().to_string_lossy().into_owned();
                            assert!(n.starts_with(['d', 'e', 's']), "{n:?} in /flat");
                        }
                    }
                }
            })
        })
        .collect();
    for h in writers {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for h in readers {
        h.join().unwrap();
    }
    assert!(
        opened.load(Ordering::Relaxed) > 0,
        "no file was ever opened"
    );
    for k in 0..NAMES {
        if let Ok(d) = fs.read_file(format!("/flat/d{k}")) {
            assert_eq!(d, content(0, k));
        }
    }
    assert_fsck_clean(&fs);
    let after = crash_remount(&fs);
    assert_fsck_clean(&after);
}

/// Numbers reused under a path: a churner cycles `a/x` (content `A`) -> removed with `a` ->
/// `b/x` (content `B`), which takes the numbers `a` and `a/x` just freed (the pools hand the
/// last freed number out first). Actors keep working on the name `a/x` only, directly and
/// through a symlink: chmod, open and read, hard link, stat. None may ever reach a `B` file:
/// by content (what an open or a link reads), by mode (`b/x` keeps 0o644 until the churner
/// checks it) and by generation (no stat of `a/x` returns a `B` file's number and generation).
/// Deterministic versions of each interleaving are in `crates/core/src/fs/races.rs`.
#[test]
fn names_never_reach_a_file_that_reused_their_number() {
    use std::collections::HashSet;
    use std::sync::Mutex;
    const CYCLES: usize = 2000;
    const ACTORS: usize = 3;
    let fs = mem_fs(64, 4096);
    fs.symlink_path("/a/x", "/s").unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let b_files = Arc::new(Mutex::new(HashSet::new()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let churner = {
        let (fs, b_files) = (fs.clone(), b_files.clone());
        std::thread::spawn(move || {
            for _ in 0..CYCLES {
                fs.create_dir("/a").unwrap();
                fs.write_file("/a/x", b"A").unwrap();
                std::thread::yield_now();
                fs.remove_file("/a/x").unwrap();
                fs.remove_dir("/a").unwrap();
                fs.create_dir("/b").unwrap();
                fs.write_file("/b/x", b"B").unwrap();
                let m = fs.metadata("/b/x").unwrap();
                b_files.lock().unwrap().insert((m.ino, m.generation));
                std::thread::yield_now();
                assert_eq!(
                    fs.metadata("/b/x").unwrap().perm,
                    0o644,
                    "chmod reached b/x"
                );
                assert_eq!(fs.read_file("/b/x").unwrap(), b"B", "b/x");
                fs.remove_file("/b/x").unwrap();
                fs.remove_dir("/b").unwrap();
            }
        })
    };
    let actors: Vec<_> = (0..ACTORS)
        .map(|t| {
            let (fs, stop, seen) = (fs.clone(), stop.clone(), seen.clone());
            std::thread::spawn(move || {
                let link = format!("/l{t}");
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let path = if i.is_multiple_of(2) { "/a/x" } else { "/s" };
                    match i % 4 {
                        0 => drop(fs.set_permissions(path, 0o600)),
                        1 => {
                            if let Ok(f) = OpenOptions::new().read(true).open(&fs, path) {
                                let mut buf = [0u8; 4];
                                let n = f.read_at(&mut buf, 0).unwrap();
                                assert!(n == 0 || &buf[..n] == b"A", "open {path} read a B file");
                            }
                        }
                        2 => {
                            if fs.hard_link(path, &link).is_ok() {
                                let got = fs.read_file(&link).unwrap();
                                assert!(got.is_empty() || got == b"A", "link {path} reached B");
                                fs.remove_file(&link).unwrap();
                            }
                        }
                        _ => {
                            if let Ok(m) = fs.metadata(path) {
                                seen.lock().unwrap().push((m.ino, m.generation));
                            }
                        }
                    }
                }
            })
        })
        .collect();
    churner.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    for a in actors {
        a.join().unwrap();
    }
    let b_files = b_files.lock().unwrap();
    for s in seen.lock().unwrap().iter() {
        assert!(!b_files.contains(s), "a stat of a/x returned b/x {s:?}");
    }
    assert_fsck_clean(&fs);
}

/// Writers of one file overwrite the same ranges at the same time (in place, under the
/// stripe's shared lock and the ranges' words) while readers read them: every read sees one
/// write whole, never a mix, and afterwards each range holds one writer's bytes. The ranges
/// do not overlap each other; they cross blocks and 256 KiB range words (the 1 MiB one covers
/// four, the unaligned one two). Without the words' checks, reads of the 1 MiB range mixed two
/// writers' bytes (16-79 of about 600 reads in each of three runs).
#[test]
fn overlapping_overwrites_and_reads_of_one_file_are_each_whole() {
    let fs = mem_fs(64, 256);
    fs.write_file("/big", &vec![0u8; 3 << 20]).unwrap();
    let ranges: [(u64, usize); 3] = [(0, 1 << 20), ((1280 << 10) - 100, 5000), (2 << 20, 4096)];
    let mixed = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (fs, mixed) = (&fs, &mixed);
            s.spawn(move || {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(fs, "/big")
                    .unwrap();
                let mut buf = vec![0u8; 1 << 20];
                for i in 0..300usize {
                    let (off, len) = ranges[i % ranges.len()];
                    if t % 2 == 0 {
                        f.write_all_at(&vec![(t + i) as u8 | 1; len], off).unwrap();
                    } else {
                        f.read_exact_at(&mut buf[..len], off).unwrap();
                        if buf[..len].iter().any(|&b| b != buf[0]) {
                            mixed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    assert_eq!(
        mixed.load(Ordering::Relaxed),
        0,
        "reads saw half-done writes"
    );
    let data = fs.read_file("/big").unwrap();
    for (off, len) in ranges {
        let r = &data[off as usize..off as usize + len];
        assert!(r.iter().all(|&b| b == r[0]), "range at {off} mixes writers");
    }
    assert_eq!(data.len(), 3 << 20);
    assert_fsck_clean(&fs);
}
