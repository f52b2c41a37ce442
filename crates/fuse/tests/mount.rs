//! The FUSE adapter through the kernel: each test formats an image, mounts it in this process
//! (fuser background session), works on the mount point with std::fs and libc, unmounts,
//! checks the image with fsck and remounts it to check what persisted. Requests are read from
//! /dev/fuse here; tests/mount_uring.rs runs the same tests over FUSE over io_uring.
//!
//! Needs /dev/fuse, and root or fusermount3; without them each test prints why and passes.
//! The daemon, signal and kill -9 tests of `nvmfs mount` are in crates/cli/tests/mount.rs.

const TRANSPORT: &str = "";

fn transport_unavailable() -> Option<String> {
    None
}

fn check_transport(shutdown: &nvmfs_fuse::Shutdown) {
    assert_eq!(
        shutdown.io_uring_requests(),
        0,
        "served over io_uring without -o io_uring"
    );
}

include!("conformance/mount.rs");
