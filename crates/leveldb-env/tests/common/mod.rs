//! Scratch images for the tests: sparse files in /dev/shm (or the temp directory), removed
//! with their directory.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use nvmfs::{FormatOptions, Fs, MountOptions};
use tempfile::TempDir;

pub struct Image {
    _dir: TempDir,
    pub path: PathBuf,
}

impl Image {
    /// A freshly formatted image of `mib` MiB.
    pub fn new(mib: u64) -> Image {
        let dir = scratch_dir();
        let path = dir.path().join("leveldb.img");
        let opts = FormatOptions {
            size_bytes: mib << 20,
            inode_count: None,
            ..Default::default()
        };
        Fs::format(&path, &opts).unwrap();
        Image { _dir: dir, path }
    }

    /// An image holding `bytes` (a snapshot), for recovery as after a crash.
    pub fn from_bytes(bytes: &[u8]) -> Image {
        let dir = scratch_dir();
        let path = dir.path().join("copy.img");
        std::fs::write(&path, bytes).unwrap();
        Image { _dir: dir, path }
    }

    pub fn mount(&self) -> Fs {
        Fs::mount(&self.path, &MountOptions::default()).unwrap()
    }
}

fn scratch_dir() -> TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// Unmounts `fs` (which fails if anything still holds the mount) and fscks the image.
pub fn unmount_and_check(fs: Fs, image: &Image) {
    fs.unmount().expect("every handle on the mount released");
    let report = nvmfs::fsck::check_image(&image.path).unwrap();
    assert!(report.is_clean(), "fsck: {:?}", report.problems);
}

/// Lets go of `env`, then unmounts its file system and fscks the image.
pub fn release_and_check(env: nvmfs_leveldb::NvmfsEnv, image: &Image) {
    let fs = env.fs().clone();
    drop(env);
    unmount_and_check(fs, image);
}
