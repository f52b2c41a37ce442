//! The write-back limits of a FUSE mount under `-o writeback_cache`.
//!
//! The kernel gives every FUSE mount its own write-back device (a "bdi", named by the mount's
//! device number in /sys/class/bdi) with `strict_limit` set and `max_ratio` 1: the mount may
//! hold at most 1% of the machine's dirty-page allowance, so that a stuck or hostile server
//! cannot pin the page cache. For nvmfs, a trusted server in the same machine, that limit is
//! what decides the speed of buffered writes: a program writing 1 MiB at a time stalls in
//! `balance_dirty_pages` every few writes (measured: 0.15x of ext4's rate, p99 12 ms). With
//! the limit lifted to what a block device's mount gets (`strict_limit` 0, `max_ratio` 100)
//! the same writes ran at 0.79x of ext4 (docs/LAB.md, "FUSE"). Changing the bdi needs root.

use nvmfs::media::pages::parse_mountinfo_line;
use std::io;
use std::path::Path;

/// Lifts the dirty-page limit of the FUSE mount on `mountpoint` to a block device's; returns
/// the bdi's name.
pub fn lift_dirty_limit(mountpoint: &Path) -> io::Result<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let bdi = mount_device(&info, mountpoint).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} is not a FUSE mount in /proc/self/mountinfo",
                mountpoint.display()
            ),
        )
    })?;
    let dir = Path::new("/sys/class/bdi").join(&bdi);
    // strict_limit first: with it cleared, max_ratio caps the mount's share of the global
    // dirty limit instead of a limit of its own.
    std::fs::write(dir.join("strict_limit"), "0")?;
    std::fs::write(dir.join("max_ratio"), "100")?;
    Ok(bdi)
}

/// The device number (`major:minor`, the bdi's name) of the last FUSE mount on `mountpoint`
/// in `mountinfo` (the newest mount on a path is the one programs see).
pub fn mount_device(mountinfo: &str, mountpoint: &Path) -> Option<String> {
    let want = mountpoint.to_string_lossy();
    mountinfo
        .lines()
        .rev()
        .filter_map(parse_mountinfo_line)
        .find(|m| m.mount_point == want && (m.fs_type == "fuse" || m.fs_type.starts_with("fuse.")))
        .map(|m| m.device)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/root rw
61 22 0:39 / /mnt/fw rw,nosuid,nodev,relatime shared:30 - fuse.nvmfs /dev/shm/fw.img rw,user_id=0
62 22 7:0 / /mnt/e4 rw,relatime shared:31 - ext4 /dev/loop0 rw
63 22 0:41 / /mnt/with\\040space rw shared:32 - fuse.nvmfs img rw,user_id=0
64 22 0:42 / /mnt/fw rw shared:33 - fuse.nvmfs /dev/shm/other.img rw,user_id=0
";

    #[test]
    fn finds_the_last_fuse_mount_on_the_path() {
        // Mounted over: the newest mount on a path is the one a program sees.
        assert_eq!(
            mount_device(INFO, Path::new("/mnt/fw")).as_deref(),
            Some("0:42")
        );
        assert_eq!(
            mount_device(INFO, Path::new("/mnt/with space")).as_deref(),
            Some("0:41")
        );
    }

    #[test]
    fn other_file_systems_and_other_paths_are_not_it() {
        assert_eq!(mount_device(INFO, Path::new("/mnt/e4")), None);
        assert_eq!(mount_device(INFO, Path::new("/mnt")), None);
        assert_eq!(mount_device(INFO, Path::new("/mnt/with\\040space")), None);
        assert_eq!(mount_device("garbage\n\n- -", Path::new("/")), None);
    }
}
