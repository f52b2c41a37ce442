//! The FUSE conformance tests of tests/mount.rs again, with `-o io_uring`: every request the
//! kernel routes to the rings goes through crate::uring and fuser's raw dispatcher. Each
//! mount must have served requests over the rings, or the test fails.
//!
//! Needs what tests/mount.rs needs plus FUSE over io_uring (Linux 6.14+). As root, a kernel
//! that has it switched off (`/sys/module/fuse/parameters/enable_uring` = N) gets it switched
//! on; without it each test prints why and passes.

const TRANSPORT: &str = "io_uring";

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

fn transport_unavailable() -> Option<String> {
    match fs::read_to_string(ENABLE_URING) {
        Err(_) => Some(format!("{ENABLE_URING} is missing: no FUSE over io_uring")),
        Ok(v) if v.trim() == "Y" => None,
        Ok(_) if is_root() => fs::write(ENABLE_URING, "Y")
            .err()
            .map(|e| format!("cannot switch on {ENABLE_URING}: {e}")),
        Ok(_) => Some(format!("{ENABLE_URING} is off and this is not root")),
    }
}

fn check_transport(shutdown: &nvmfs_fuse::Shutdown) {
    assert!(
        shutdown.io_uring_granted(),
        "FUSE_INIT did not grant io_uring"
    );
    assert!(
        shutdown.io_uring_requests() > 0,
        "no request was served over io_uring"
    );
}

include!("conformance/mount.rs");
