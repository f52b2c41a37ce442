//! Helpers shared by the integration tests.
#![allow(dead_code)]

use nvmfs::fsck::check_pm;
use nvmfs::media::Pm;
use nvmfs::{FormatOptions, Fs};

/// Opens `path` for reading and writing, creating it.
pub fn create_rw(fs: &Fs, path: &str) -> nvmfs::File {
    nvmfs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(fs, path)
        .unwrap()
}

pub fn mem_fs(size_mb: u64, inodes: u64) -> Fs {
    mem_fs_with(size_mb, inodes, Default::default())
}

#[allow(dead_code)]
pub fn mem_fs_with(size_mb: u64, inodes: u64, mapping: nvmfs::MappingKind) -> Fs {
    Fs::format_in_memory(&FormatOptions {
        size_bytes: size_mb << 20,
        inode_count: Some(inodes),
        mapping,
        ..Default::default()
    })
    .unwrap()
}

/// Runs fsck on a snapshot of a mounted file system and fails the test on any problem.
pub fn assert_fsck_clean(fs: &Fs) {
    let snap = Pm::from_bytes(&fs.snapshot());
    let r = check_pm(&snap);
    assert!(r.problems.is_empty(), "fsck problems: {:#?}", r.problems);
}

/// Remounts a snapshot as after a crash (no clean unmount).
pub fn crash_remount(fs: &Fs) -> Fs {
    let pm = Pm::from_bytes(&fs.snapshot());
    Fs::mount_pm(pm, &Default::default(), None, None).unwrap()
}
