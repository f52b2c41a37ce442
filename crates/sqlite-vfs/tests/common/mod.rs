//! Test support: a fresh nvmfs image in /dev/shm with a VFS registered on it, checked by fsck
//! and removed at the end.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use nvmfs::fsck::check_image;
use nvmfs::{FormatOptions, Fs, MountOptions};
use rusqlite::{Connection, OpenFlags};

/// A mounted image file with a registered VFS.
pub struct Image {
    pub fs: Fs,
    pub vfs: String,
    path: tempfile::TempPath,
}

/// A VFS name no other test of this process uses.
pub fn unique_name(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("nvmfs-{tag}-{}", N.fetch_add(1, Ordering::Relaxed))
}

fn scratch_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

impl Image {
    /// Formats a `mib` MiB image, mounts it, creates /data and registers a VFS on it.
    pub fn new(tag: &str, mib: u64) -> Image {
        let path = tempfile::Builder::new()
            .prefix("nvmfs-sqlite-")
            .suffix(".img")
            .tempfile_in(scratch_dir())
            .unwrap()
            .into_temp_path();
        let opts = FormatOptions {
            size_bytes: mib << 20,
            inode_count: None,
            ..Default::default()
        };
        Fs::format(&path, &opts).unwrap();
        let fs = Fs::mount(&path, &MountOptions::default()).unwrap();
        fs.create_dir("/data").unwrap();
        let vfs = unique_name(tag);
        nvmfs_sqlite::register(fs.clone(), &vfs).unwrap();
        Image { fs, vfs, path }
    }

    pub fn open(&self, db: &str) -> Connection {
        self.try_open(db).unwrap()
    }

    pub fn try_open(&self, db: &str) -> rusqlite::Result<Connection> {
        nvmfs_sqlite::open(&self.vfs, db, OpenFlags::default())
    }

    /// Unregisters the VFS, unmounts, and checks the image with fsck (must be clean).
    pub fn finish(self) {
        nvmfs_sqlite::unregister(&self.vfs).unwrap();
        self.fs.unmount().unwrap();
        let r = check_image(&self.path).unwrap();
        assert!(r.is_clean(), "fsck: {:#?}", r.problems);
    }
}

/// `PRAGMA integrity_check` must say "ok".
pub fn assert_integrity(db: &Connection) {
    let r: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(r, "ok");
}

pub fn count(db: &Connection, table: &str) -> i64 {
    db.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

pub fn set_journal_mode(db: &Connection, mode: &str) {
    let got: String = db
        .query_row(&format!("PRAGMA journal_mode={mode}"), [], |r| r.get(0))
        .unwrap();
    assert_eq!(got, mode.to_lowercase());
}
