//! FUSE front end for nvmfs: [`NvmFuse`] implements `fuser::Filesystem` on top of the core's
//! inode API, and [`MountConfig`] parses the `-o` mount options. The `nvmfs mount` command
//! (crates/cli) daemonises, handles signals and unmounts; tests mount in-process with
//! [`session`].

mod adapter;
pub mod options;

use std::io;
use std::path::Path;

pub use adapter::{NvmFuse, Shutdown};
pub use fuser;
pub use options::{MountConfig, OptionError, OPTION_NAMES};

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
    let s = fuser::Session::new(adapter, mountpoint, &cfg.session_config(fsname))?;
    Ok((s, shutdown))
}
