//! Scratch targets for the workloads' tests: nvmfs images and kernel directories in /dev/shm
//! (the temp dir when there is none), named so that runs never collide, removed when dropped.
//! The prefix is not `nvmfs-lab-` or `nvmfs-study-`: the study's tests, running in the same
//! process, count files with those prefixes as leftovers.

use crate::targets::nvmfs::NvmfsTarget;
use crate::targets::sys::{DirTarget, ScratchDir};
use std::path::PathBuf;

/// Process id and a random number: a file left by a killed run (whose pid may come again)
/// never collides with this run's scratch names.
fn unique() -> String {
    format!("{}-{:016x}", std::process::id(), fastrand::u64(..))
}

fn shm_dir() -> PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A fresh nvmfs image of `size_bytes` (sparse) and its path.
pub fn nvmfs(tag: &str, size_bytes: u64) -> (NvmfsTarget, PathBuf) {
    let image = shm_dir().join(format!("nvmfs-wltest-{tag}-{}.img", unique()));
    let t = NvmfsTarget::create(image.clone(), size_bytes, 4096).expect("make nvmfs image");
    (t, image)
}

/// A fresh scratch directory on a kernel file system and its path.
pub fn dir(tag: &str) -> (DirTarget, PathBuf) {
    let path = shm_dir().join(format!("nvmfs-wltest-{tag}-{}", unique()));
    let t = DirTarget::new(ScratchDir::create(path.clone()).expect("make scratch dir"));
    (t, path)
}

/// Unmounts cleanly, checks a copy of the image with fsck (which must find nothing), then
/// closes the target, which deletes the image.
pub fn close_fsck_clean(mut t: NvmfsTarget, image: &std::path::Path) {
    t.remount().expect("remount");
    let copy = image.with_extension("copy");
    std::fs::copy(image, &copy).expect("copy image");
    let report = nvmfs::fsck::check_image(&copy);
    std::fs::remove_file(&copy).expect("remove copy");
    let report = report.expect("fsck runs");
    assert!(report.is_clean(), "{report:?}");
    t.close().expect("close");
    assert!(!image.exists(), "image removed");
}
