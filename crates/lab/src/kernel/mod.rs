//! Kernel file systems on RAM-backed block devices, for benchmarks.
//!
//! The variants are those of Table III of "An Empirical Study of File
//! Systems on NVM" (2015), which ran them on a 58 GiB ramdisk: ext2, ext3
//! (ordered, data journaling), ext4 (default, no delayed allocation), xfs
//! (4 and 464 allocation groups), f2fs, nilfs2 and the XIP variants of ext2
//! and ext3; plus ext3 writeback, btrfs and tmpfs, which it did not run.
//!
//! * [`catalogue`] lists the variants in the study's order with their mkfs
//!   and mount options; [`availability`] says whether one can run here and
//!   [`unavailable_variants`] which of the study's cannot, and why.
//! * [`Provisioned::create`] makes one on a loop device whose backing file
//!   lives on a tmpfs (/dev/shm), with direct I/O so that data is not
//!   cached twice, and mounts it; [`Provisioned::remount`] empties its
//!   caches between trials; dropping it removes everything again.
//! * [`install_interrupt_handler`] makes Ctrl-C stop a benchmark cleanly
//!   (first signal: [`interrupted`] turns true) or at once (second signal:
//!   every mount, loop device and file is removed, exit status 130).
//!
//! Provisioning needs root (losetup, mount). Devices must be at least
//! [`MIN_DEVICE_BYTES`]. On current kernels the ext4 driver mounts ext2
//! and ext3 too, so their numbers are not those of the 2015 drivers.

mod cleanup;
mod command;
mod probe;
mod provision;
mod resource;
mod variant;

#[cfg(test)]
mod tests;

pub use cleanup::{install_interrupt_handler, interrupted, live_resources, INTERRUPT_EXIT_STATUS};
// For targets that mount without a loop device (FUSE): their mounts join the
// same registry, so Ctrl-C and the leftover checks cover them too.
pub(crate) use cleanup::{register, unregister};
pub use probe::{availability, unavailable_variants, Availability};
pub use provision::{ProvisionInfo, Provisioned};
pub(crate) use resource::Resource;
pub use variant::{catalogue, xfs_high_agcount, Variant, PAPER_XFS_AGCOUNT, XFS_MIN_AG_BYTES};

const MIB: u64 = 1 << 20;

/// Smallest device [`Provisioned::create`] accepts: mkfs.xfs (xfsprogs 5.15
/// and later) refuses file systems under 300 MB, and one size for every
/// variant keeps their results comparable.
pub const MIN_DEVICE_BYTES: u64 = 512 * MIB;

/// Detaches whatever is mounted on `dir` at once (umount2 with MNT_DETACH):
/// for an error path, where waiting for a busy mount could hang.
pub(crate) fn unmount_lazily(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
