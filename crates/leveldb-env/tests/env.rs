//! NvmfsEnv's operations one by one, as rusty-leveldb's own env tests exercise the disk env.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use common::{release_and_check, unmount_and_check, Image};
use nvmfs::{FormatOptions, Fs};
use nvmfs_leveldb::NvmfsEnv;
use rusty_leveldb::env::Env;
use rusty_leveldb::StatusCode;

fn p(s: &str) -> &Path {
    Path::new(s)
}

fn read_all(env: &NvmfsEnv, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    env.open_sequential_file(p(path))
        .unwrap()
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[test]
fn files_are_written_read_renamed_and_deleted() {
    let image = Image::new(16);
    let env = NvmfsEnv::new(image.mount());

    let mut w = env.open_writable_file(p("/f")).unwrap();
    w.write_all(b"123xyz").unwrap();
    w.flush().unwrap();
    // Straight through: the size is visible before the writer is dropped.
    assert_eq!(env.size_of(p("/f")).unwrap(), 6);
    drop(w);

    let mut a = env.open_appendable_file(p("/f")).unwrap();
    a.write_all(b"-tail").unwrap();
    drop(a);
    assert_eq!(read_all(&env, "/f"), b"123xyz-tail");

    // A writable file starts again from nothing.
    let mut w = env.open_writable_file(p("/f")).unwrap();
    w.write_all(b"abcdefgh").unwrap();
    drop(w);
    let r = env.open_random_access_file(p("/f")).unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(r.read_at(2, &mut buf).unwrap(), 4);
    assert_eq!(&buf, b"cdef");
    assert_eq!(r.read_at(6, &mut buf).unwrap(), 2, "short only at the end");
    assert_eq!(&buf[..2], b"gh");
    assert_eq!(r.read_at(100, &mut buf).unwrap(), 0);
    drop(r);

    env.rename(p("/f"), p("/g")).unwrap();
    assert!(!env.exists(p("/f")).unwrap());
    assert_eq!(env.size_of(p("/g")).unwrap(), 8);
    env.delete(p("/g")).unwrap();
    assert!(!env.exists(p("/g")).unwrap());

    release_and_check(env, &image);
}

#[test]
fn large_random_reads_span_blocks() {
    let image = Image::new(16);
    let env = NvmfsEnv::new(image.mount());
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut w = env.open_writable_file(p("/big")).unwrap();
    for chunk in data.chunks(3000) {
        w.write_all(chunk).unwrap();
    }
    drop(w);
    let r = env.open_random_access_file(p("/big")).unwrap();
    let mut buf = vec![0u8; 20_000];
    assert_eq!(r.read_at(4093, &mut buf).unwrap(), buf.len());
    assert_eq!(buf, data[4093..24_093]);
    drop(r);
    release_and_check(env, &image);
}

#[test]
fn missing_files_are_not_found() {
    let image = Image::new(16);
    let env = NvmfsEnv::new(image.mount());
    let codes = [
        env.open_sequential_file(p("/nope")).err().map(|s| s.code),
        env.open_random_access_file(p("/nope"))
            .err()
            .map(|s| s.code),
        env.size_of(p("/nope")).err().map(|s| s.code),
        env.delete(p("/nope")).err().map(|s| s.code),
        env.rename(p("/nope"), p("/other")).err().map(|s| s.code),
        env.children(p("/nope")).err().map(|s| s.code),
        env.open_writable_file(p("/nodir/f")).err().map(|s| s.code),
    ];
    for (i, code) in codes.into_iter().enumerate() {
        assert_eq!(code, Some(StatusCode::NotFound), "case {i}");
    }
    // exists answers "no" for a missing parent, or a parent that is a file.
    assert!(!env.exists(p("/nodir/f")).unwrap());
    env.open_writable_file(p("/file")).unwrap();
    assert!(!env.exists(p("/file/f")).unwrap());
    let e = env.delete(p("/file/f")).unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgument, "{}", e.err);
    assert!(e.err.contains("/file/f"), "{}", e.err);
    release_and_check(env, &image);
}

#[test]
fn directories_are_made_listed_and_removed_with_their_contents() {
    let image = Image::new(16);
    let env = NvmfsEnv::new(image.mount());
    env.mkdir(p("/a/b/c")).unwrap();
    env.mkdir(p("/a/b/c")).unwrap(); // as create_dir_all: an existing directory is fine
    for name in ["/a/b/f1", "/a/b/f2", "/a/b/c/f3"] {
        env.open_writable_file(p(name)).unwrap();
    }
    let mut names = env.children(p("/a/b")).unwrap();
    names.sort();
    let want: Vec<PathBuf> = ["c", "f1", "f2"].iter().map(PathBuf::from).collect();
    assert_eq!(names, want);

    env.rmdir(p("/a/b")).unwrap();
    assert!(!env.exists(p("/a/b")).unwrap());
    assert!(env.children(p("/a")).unwrap().is_empty());
    assert_eq!(env.rmdir(p("/a/b")).unwrap_err().code, StatusCode::NotFound);
    release_and_check(env, &image);
}

#[test]
fn a_lock_is_held_once_per_mount() {
    let image = Image::new(16);
    let fs = image.mount();
    let env = NvmfsEnv::new(fs.clone());
    env.mkdir(p("/db")).unwrap();

    let l = env.lock(p("/db/LOCK")).unwrap();
    assert!(env.exists(p("/db/LOCK")).unwrap());
    // The same file: again, by another spelling, from another env on the same mount.
    for (e, path) in [
        (&env, "/db/LOCK"),
        (&env, "db//LOCK"),
        (&NvmfsEnv::new(fs.clone()), "/db/./LOCK"),
    ] {
        let err = e.lock(p(path)).err().expect("second lock refused");
        assert_eq!(err.code, StatusCode::LockError, "{path}: {}", err.err);
    }

    // The same path on another mount is another file.
    let other = NvmfsEnv::new(
        Fs::format_in_memory(&FormatOptions {
            size_bytes: 8 << 20,
            inode_count: None,
            ..Default::default()
        })
        .unwrap(),
    );
    other.mkdir(p("/db")).unwrap();
    // A lock is released only through its own mount.
    let stolen = rusty_leveldb::env::FileLock { id: l.id.clone() };
    assert_eq!(
        other.unlock(stolen).unwrap_err().code,
        StatusCode::LockError
    );
    let ol = other.lock(p("/db/LOCK")).unwrap();
    other.unlock(ol).unwrap();

    let id = l.id.clone();
    env.unlock(l).unwrap();
    let again = rusty_leveldb::env::FileLock { id };
    assert_eq!(env.unlock(again).unwrap_err().code, StatusCode::LockError);
    let l = env.lock(p("/db/LOCK")).unwrap();
    env.unlock(l).unwrap();

    drop(env);
    unmount_and_check(fs, &image);
}

#[test]
fn the_logger_appends_lines() {
    let image = Image::new(16);
    let env = NvmfsEnv::new(image.mount());
    for word in ["one", "two"] {
        let mut logger = env.new_logger(p("/LOG")).unwrap();
        logger.log(word);
    }
    assert_eq!(read_all(&env, "/LOG"), b"one\ntwo\n");
    release_and_check(env, &image);
}

#[test]
fn the_clock_runs_and_sleep_waits() {
    let image = Image::new(16);
    let env = NvmfsEnv::new(image.mount());
    let t0 = env.micros();
    let start = Instant::now();
    env.sleep_for(20_000);
    assert!(start.elapsed().as_micros() >= 20_000);
    assert!(env.micros() >= t0 + 20_000);
    // 2020-01-01 in microseconds: the clock is the Unix epoch's.
    assert!(t0 > 1_577_836_800_000_000);
    release_and_check(env, &image);
}
