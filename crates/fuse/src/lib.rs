//! FUSE front end for nvmfs: [`NvmFuse`] implements `fuser::Filesystem` on top of the core's
//! inode API, and [`MountConfig`] parses the `-o` mount options. The `nvmfs mount` command
//! (crates/cli) daemonises, handles signals and unmounts; tests mount in-process with
//! [`session`].

mod adapter;
pub mod bdi;
pub mod options;
mod uring;

use std::io;
use std::os::fd::AsFd;
use std::path::Path;

use log::{info, warn};

pub use adapter::{NvmFuse, Shutdown};
pub use fuser;
pub use options::{MountConfig, OptionError, OPTION_NAMES};
pub use uring::possible_cpus;

/// Mounts `fs` on `mountpoint` and completes the FUSE handshake: when this returns the mount
/// is live (requests wait until the session runs). `fsname` is the default source name shown
/// in /proc/mounts. Run the session with `Session::run` (blocking) or `Session::spawn`.
pub fn session(
    fs: nvmfs::Fs,
    mountpoint: &Path,
    cfg: &MountConfig,
    fsname: &str,
) -> io::Result<(fuser::Session<NvmFuse>, Shutdown)> {
    let (adapter, shutdown) = NvmFuse::new(fs, cfg);
    // Before mounting: once mounted, resolving the path would ask the server, which does not
    // run yet. Only the write-back cache needs it.
    let canonical = cfg.writeback_cache.then(|| mountpoint.canonicalize());
    let mut s = fuser::Session::new(adapter, mountpoint, &cfg.session_config(fsname))?;
    if let Some(canonical) = canonical {
        match canonical.and_then(|p| bdi::lift_dirty_limit(&p)) {
            Ok(b) => info!(
                "writeback_cache: this mount may use the whole dirty-page allowance, as a block \
                 device's does (bdi {b}: strict_limit 0, max_ratio 100)"
            ),
            Err(e) => warn!(
                "writeback_cache: could not lift FUSE's limit of 1% of the dirty-page allowance \
                 for this mount ({e}; needs root): large buffered writes will stall in the \
                 kernel's write-back throttling"
            ),
        }
    }
    if cfg.io_uring {
        if shutdown.io_uring_granted() {
            let fd = s.as_fd().try_clone_to_owned()?;
            let counts = shutdown.clone();
            info!(
                "io_uring: serving FUSE requests on {} rings (one per CPU)",
                uring::possible_cpus()
            );
            s.set_extra_transport(Box::new(move |d| {
                uring::start(fd, d, adapter::MAX_IO as usize + 4096, counts)
            }));
        } else {
            warn!("{}", io_uring_refused());
        }
    }
    Ok((s, shutdown))
}

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Why FUSE over io_uring cannot be used here, or None when the kernel has it switched on.
pub fn io_uring_unavailable() -> Option<String> {
    let why = match std::fs::read_to_string(ENABLE_URING) {
        Ok(v) if v.trim() == "Y" => return None,
        Ok(_) => format!("it is off (as root: echo Y > {ENABLE_URING})"),
        Err(_) => "this kernel has no FUSE over io_uring (Linux 6.14+)".to_string(),
    };
    Some(format!(
        "io_uring: FUSE over io_uring is not available: {why}; requests are read from /dev/fuse"
    ))
}

/// Why `-o io_uring` fell back to /dev/fuse reads (when the session's
/// [`Shutdown::io_uring_granted`] is false).
pub fn io_uring_refused() -> String {
    io_uring_unavailable().unwrap_or_else(|| {
        "io_uring: FUSE over io_uring is not available: the kernel did not offer it; requests \
         are read from /dev/fuse"
            .to_string()
    })
}
