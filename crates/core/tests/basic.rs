//! End-to-end behaviour of the std::fs-like API.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};

use common::*;
use nvmfs::{FileType, OpenOptions, SetTime};

fn errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().expect("errno")
}

#[test]
fn files_dirs_and_links() {
    let fs = mem_fs(32, 1024);
    fs.create_dir("/a").unwrap();
    fs.create_dir_all("/a/b/c").unwrap();
    fs.write_file("/a/b/c/f", b"hello world").unwrap();
    assert_eq!(fs.read_file("/a/b/c/f").unwrap(), b"hello world");
    assert_eq!(fs.metadata("/a/b/c/f").unwrap().len(), 11);
    assert_eq!(fs.metadata("/a").unwrap().nlink, 3);
    assert_eq!(errno(fs.create_dir("/a")), libc::EEXIST);
    assert_eq!(errno(fs.remove_dir("/a")), libc::ENOTEMPTY);
    assert_eq!(errno(fs.read_file("/nope")), libc::ENOENT);
    assert_eq!(errno(fs.read_file("/a/b/c/f/x")), libc::ENOTDIR);
    fs.hard_link("/a/b/c/f", "/g").unwrap();
    assert_eq!(fs.metadata("/g").unwrap().nlink, 2);
    fs.symlink_path("a/b/c/f", "/s").unwrap();
    assert_eq!(fs.read_file("/s").unwrap(), b"hello world");
    assert!(fs.symlink_metadata("/s").unwrap().is_symlink());
    let long = "x/".repeat(100) + "end";
    fs.symlink_path(&long, "/long").unwrap();
    assert_eq!(fs.read_link("/long").unwrap().to_str().unwrap(), long);
    fs.rename_path("/g", "/a/moved").unwrap();
    assert_eq!(fs.read_file("/a/moved").unwrap(), b"hello world");
    fs.remove_file("/a/b/c/f").unwrap();
    assert_eq!(fs.metadata("/a/moved").unwrap().nlink, 1);
    let names: Vec<_> = fs
        .read_dir("/")
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert_fsck_clean(&fs);
    let fs2 = crash_remount(&fs);
    assert_eq!(fs2.read_file("/a/moved").unwrap(), b"hello world");
    assert_fsck_clean(&fs2);
}

#[test]
fn file_io_sparse_truncate_append() {
    let fs = mem_fs(64, 256);
    let mut f = create_rw(&fs, "/f");
    f.write_all(&[1u8; 10_000]).unwrap();
    f.seek(SeekFrom::Start(100_000)).unwrap();
    f.write_all(b"tail").unwrap();
    assert_eq!(f.metadata().unwrap().len(), 100_004);
    let mut buf = vec![9u8; 100_004];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf[..10_000].iter().all(|&b| b == 1));
    assert!(buf[10_000..100_000].iter().all(|&b| b == 0));
    assert_eq!(&buf[100_000..], b"tail");
    assert_eq!(f.metadata().unwrap().blocks, 4);
    f.set_len(5000).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 2);
    f.set_len(20_000).unwrap();
    let mut buf = vec![9u8; 20_000];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf[..5000].iter().all(|&b| b == 1));
    assert!(
        buf[5000..].iter().all(|&b| b == 0),
        "extended region must read as zeros"
    );
    drop(f);
    let mut a = OpenOptions::new().append(true).open(&fs, "/f").unwrap();
    a.write_all(b"xyz").unwrap();
    let mut all = Vec::new();
    OpenOptions::new()
        .read(true)
        .open(&fs, "/f")
        .unwrap()
        .read_to_end(&mut all)
        .unwrap();
    assert_eq!(all.len(), 20_003);
    assert_eq!(&all[20_000..], b"xyz");
    assert_fsck_clean(&fs);
}

#[test]
fn unlink_while_open_keeps_data_until_close() {
    let fs = mem_fs(16, 128);
    fs.write_file("/f", &[7u8; 9000]).unwrap();
    let used = fs.statfs().blocks_free;
    let f = OpenOptions::new().read(true).open(&fs, "/f").unwrap();
    fs.remove_file("/f").unwrap();
    assert_eq!(errno(fs.metadata("/f")), libc::ENOENT);
    let mut buf = [0u8; 9000];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf.iter().all(|&b| b == 7));
    assert_eq!(fs.statfs().blocks_free, used);
    // A crash now leaves an orphan that the next mount frees.
    let crashed = crash_remount(&fs);
    assert_eq!(crashed.recovery_report().orphans_freed, 1);
    assert_eq!(crashed.statfs().blocks_free, used + 3);
    drop(f);
    assert_eq!(fs.statfs().blocks_free, used + 3);
    assert_fsck_clean(&fs);
}

#[test]
fn rename_cases() {
    let fs = mem_fs(16, 256);
    fs.create_dir_all("/d1/sub").unwrap();
    fs.create_dir("/d2").unwrap();
    fs.write_file("/d1/f", b"1").unwrap();
    fs.write_file("/d2/f", b"2").unwrap();
    // Replace across directories.
    fs.rename_path("/d1/f", "/d2/f").unwrap();
    assert_eq!(fs.read_file("/d2/f").unwrap(), b"1");
    assert_eq!(errno(fs.metadata("/d1/f")), libc::ENOENT);
    // Directory into its own subtree.
    assert_eq!(errno(fs.rename_path("/d1", "/d1/sub/x")), libc::EINVAL);
    // Directory move updates link counts and '..'.
    fs.rename_path("/d1/sub", "/d2/sub").unwrap();
    assert_eq!(fs.metadata("/d1").unwrap().nlink, 2);
    assert_eq!(fs.metadata("/d2").unwrap().nlink, 3);
    assert_eq!(
        fs.metadata("/d2/sub/..").unwrap().ino,
        fs.metadata("/d2").unwrap().ino
    );
    // File over directory and back.
    assert_eq!(errno(fs.rename_path("/d2/f", "/d2/sub")), libc::EISDIR);
    assert_eq!(errno(fs.rename_path("/d2/sub", "/d2/f")), libc::ENOTDIR);
    // Over an empty directory.
    fs.create_dir("/d1/empty").unwrap();
    fs.rename_path("/d2/sub", "/d1/empty").unwrap();
    assert!(fs.metadata("/d1/empty").unwrap().is_dir());
    assert_eq!(fs.metadata("/d1").unwrap().nlink, 3);
    // Exchange.
    let d1 = fs.metadata("/d1").unwrap().ino;
    let root = 1;
    fs.rename(
        root,
        b"d1",
        root,
        b"d2",
        nvmfs::RenameFlags {
            exchange: true,
            noreplace: false,
        },
    )
    .unwrap();
    assert_eq!(fs.metadata("/d2").unwrap().ino, d1);
    assert_eq!(
        fs.rename(
            root,
            b"d1",
            root,
            b"d2",
            nvmfs::RenameFlags {
                exchange: false,
                noreplace: true
            }
        )
        .unwrap_err()
        .raw_os_error(),
        Some(libc::EEXIST)
    );
    assert_eq!(fs.lookup_ino(root, b"d2").unwrap().1, FileType::Dir);
    assert_fsck_clean(&fs);
    assert_fsck_clean(&crash_remount(&fs));
}

#[test]
fn names_and_limits() {
    let fs = mem_fs(16, 1024);
    let long = "n".repeat(255);
    fs.write_file(format!("/{long}"), b"x").unwrap();
    assert_eq!(fs.read_file(format!("/{long}")).unwrap(), b"x");
    assert_eq!(
        errno(fs.write_file(format!("/{long}n"), b"x")),
        libc::ENAMETOOLONG
    );
    assert_eq!(errno(fs.remove_dir("/")), libc::EEXIST);
    for i in 0..500 {
        fs.write_file(format!("/name-{i}-{}", "z".repeat(i % 200)), b"")
            .unwrap();
    }
    assert_eq!(fs.read_dir("/").unwrap().len(), 501);
    for i in (0..500).step_by(2) {
        fs.remove_file(format!("/name-{i}-{}", "z".repeat(i % 200)))
            .unwrap();
    }
    assert_eq!(fs.read_dir("/").unwrap().len(), 251);
    assert_fsck_clean(&fs);
    let again = crash_remount(&fs);
    assert_eq!(again.read_dir("/").unwrap().len(), 251);
}

#[test]
fn enospc_loses_nothing() {
    let fs = mem_fs(4, 64);
    let mut n = 0;
    let chunk = vec![5u8; 64 * 1024];
    let err = loop {
        match fs.write_file(format!("/f{n}"), &chunk) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    for i in 0..n {
        assert_eq!(fs.read_file(format!("/f{i}")).unwrap(), chunk);
    }
    assert_eq!(fs.statfs().blocks_free, 0);
    assert_fsck_clean(&fs);
    // Space comes back.
    fs.remove_file("/f0").unwrap();
    fs.write_file("/again", &[1; 4096]).unwrap();
    assert_fsck_clean(&fs);
}

/// The start of the current tick of the kernel's coarse real-time clock.
fn tick_start_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Overwrites stamp mtime and ctime once per clock tick (docs/GUARANTEES.md §9, "Time stamp
/// granularity"): a burst of overwrites shares a few stamps, every stamp is at least the tick
/// the write ran in, and a time set into the future is replaced by the next write.
#[test]
fn overwrite_times_are_exact_to_one_tick() {
    let fs = mem_fs(64, 256);
    let mut f = create_rw(&fs, "/f");
    f.write_all(&[1u8; 8192]).unwrap();
    let mut stamps = std::collections::BTreeSet::new();
    for k in 0..200u64 {
        let tick = tick_start_ns();
        f.write_at(&[k as u8; 4096], (k % 2) * 4096).unwrap();
        let md = f.metadata().unwrap();
        assert!(md.mtime_ns >= tick, "mtime older than the write's tick");
        assert!(md.ctime_ns >= tick, "ctime older than the write's tick");
        stamps.insert(md.mtime_ns);
    }
    assert!(
        stamps.len() <= 100,
        "{} distinct mtimes for 200 quick overwrites: every overwrite stamped",
        stamps.len()
    );
    let future = 4_000_000_000_000_000_000i64;
    fs.set_times("/f", None, Some(SetTime::At(future))).unwrap();
    let tick = tick_start_ns();
    f.write_at(b"x", 0).unwrap();
    let md = f.metadata().unwrap();
    assert!(
        (tick..future).contains(&md.mtime_ns),
        "a future mtime survived an overwrite: {}",
        md.mtime_ns
    );
    assert_eq!(fs.read_file("/f").unwrap()[0], b'x');
    assert_fsck_clean(&fs);
}

/// Path walks reuse this thread's earlier answers for directories (fs/lookups.rs): every way
/// a directory name can come to mean something else must be seen, on this thread and after
/// a change made by another thread.
#[test]
fn a_walk_never_follows_a_directory_name_that_changed() {
    let fs = mem_fs(32, 1024);
    fs.create_dir_all("/a/x").unwrap();
    fs.write_file("/a/x/f", b"1").unwrap();
    assert_eq!(fs.read_file("/a/x/f").unwrap(), b"1");
    // Renamed away and a new directory under the old name.
    fs.rename_path("/a/x", "/a/y").unwrap();
    assert_eq!(errno(fs.read_file("/a/x/f")), libc::ENOENT);
    fs.create_dir("/a/x").unwrap();
    fs.write_file("/a/x/f", b"2").unwrap();
    assert_eq!(fs.read_file("/a/x/f").unwrap(), b"2");
    assert_eq!(fs.read_file("/a/y/f").unwrap(), b"1");
    // Removed and made again (the number is reused with a new generation).
    fs.remove_file("/a/x/f").unwrap();
    fs.remove_dir("/a/x").unwrap();
    assert_eq!(errno(fs.metadata("/a/x")), libc::ENOENT);
    fs.create_dir("/a/x").unwrap();
    assert_eq!(errno(fs.read_file("/a/x/f")), libc::ENOENT);
    // A directory renamed over another (the victim's name now means the moved one).
    fs.write_file("/a/y/g", b"3").unwrap();
    fs.rename_path("/a/y", "/a/x").unwrap();
    assert_eq!(fs.read_file("/a/x/g").unwrap(), b"3");
    assert_eq!(errno(fs.metadata("/a/y")), libc::ENOENT);
    // The parent itself moved: its old path is gone, the child follows it.
    fs.rename_path("/a", "/b").unwrap();
    assert_eq!(errno(fs.read_file("/a/x/g")), libc::ENOENT);
    assert_eq!(fs.read_file("/b/x/g").unwrap(), b"3");
    // A change made by another thread after this one cached the walk.
    assert_eq!(fs.read_file("/b/x/g").unwrap(), b"3");
    let other = fs.clone();
    std::thread::spawn(move || {
        other.rename_path("/b/x", "/b/z").unwrap();
        other.create_dir("/b/x").unwrap();
        other.write_file("/b/x/g", b"4").unwrap();
    })
    .join()
    .unwrap();
    assert_eq!(fs.read_file("/b/x/g").unwrap(), b"4");
    assert_eq!(fs.read_file("/b/z/g").unwrap(), b"3");
}
