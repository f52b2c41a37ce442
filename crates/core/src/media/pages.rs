//! Which page size maps an image. Every access to the region goes through the CPU's TLB; with
//! 4 KiB pages a random 4 KiB access to a large image usually misses it and pays a page walk,
//! with 2 MiB pages one entry covers 512 blocks. Linux maps a tmpfs file with 2 MiB pages
//! (PMDs) only when the tmpfs mount allows huge pages (`huge=always` or `huge=within_size`;
//! `huge=advise` only for mappings that ask with madvise) and the mapping is 2 MiB aligned,
//! which the kernel arranges for such files. /dev/shm is mounted without huge pages on most
//! systems, so nvmfs reports what it got rather than assuming.

use std::path::Path;

/// The `huge=` policy of the tmpfs mount holding `path` ("never" when the mount does not say),
/// or None when `path` is not on tmpfs or /proc/self/mountinfo cannot be read.
pub fn tmpfs_huge_policy(path: &Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo
        .lines()
        .filter_map(parse_mountinfo_line)
        .filter(|m| path.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.len())?;
    (mount.fs_type == "tmpfs").then(|| huge_option(&mount.super_options))
}

/// The fields of a /proc/self/mountinfo line that nvmfs needs (here, and the FUSE mount's
/// write-back device in crates/fuse).
pub struct MountLine {
    /// `major:minor` of the mounted file system (also the name of its bdi in sysfs).
    pub device: String,
    pub mount_point: String,
    pub fs_type: String,
    pub super_options: String,
}

/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`: the
/// device is field 3, the mount point field 5, and after the ` - ` separator come the type,
/// the source and the super block's options. Octal escapes (`\040` for a space) are decoded
/// in the mount point.
pub fn parse_mountinfo_line(line: &str) -> Option<MountLine> {
    let (head, tail) = line.split_once(" - ")?;
    let device = head.split(' ').nth(2)?.to_string();
    let mount_point = unescape(head.split(' ').nth(4)?);
    let mut t = tail.split(' ');
    let fs_type = t.next()?.to_string();
    let _source = t.next()?;
    let super_options = t.next().unwrap_or("").to_string();
    Some(MountLine {
        device,
        mount_point,
        fs_type,
        super_options,
    })
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of `huge=` in a tmpfs option list; "never" when absent (tmpfs's default).
fn huge_option(options: &str) -> String {
    options
        .split(',')
        .find_map(|o| o.strip_prefix("huge="))
        .unwrap_or("never")
        .to_string()
}

/// Bytes of the mapping that starts at `start` mapped with 2 MiB pages (smaps'
/// `ShmemPmdMapped` and `FilePmdMapped`), or None when /proc/self/smaps has no such mapping.
pub fn pmd_mapped_bytes(start: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    pmd_mapped_in(&smaps, start)
}

fn pmd_mapped_in(smaps: &str, start: usize) -> Option<u64> {
    let mut in_ours = false;
    let mut found = false;
    let mut kib = 0u64;
    for line in smaps.lines() {
        if let Some(range) = vma_start(line) {
            in_ours = range == start;
            found |= in_ours;
            continue;
        }
        if !in_ours {
            continue;
        }
        for field in ["ShmemPmdMapped:", "FilePmdMapped:"] {
            if let Some(v) = line.strip_prefix(field) {
                kib += v
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
        }
    }
    found.then_some(kib * 1024)
}

/// The start address of a VMA header line (`7f12a0000000-7f12e0000000 rw-s ...`).
fn vma_start(line: &str) -> Option<usize> {
    let (range, _) = line.split_once(' ')?;
    let (start, end) = range.split_once('-')?;
    if start.is_empty() || end.is_empty() || !start.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    usize::from_str_radix(start, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_mount_point_type_and_huge_policy() {
        let l = "30 25 0:27 / /dev/shm rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,size=24684092k,inode64";
        let m = parse_mountinfo_line(l).unwrap();
        assert_eq!(
            (m.mount_point.as_str(), m.fs_type.as_str()),
            ("/dev/shm", "tmpfs")
        );
        assert_eq!(huge_option(&m.super_options), "never");
        assert_eq!(m.device, "0:27");
        let l = r"99 25 0:60 / /mnt/huge\040pm rw,relatime - tmpfs none rw,size=8388608k,huge=within_size";
        let m = parse_mountinfo_line(l).unwrap();
        assert_eq!(m.mount_point, "/mnt/huge pm");
        assert_eq!(huge_option(&m.super_options), "within_size");
        assert!(parse_mountinfo_line("garbage").is_none());
    }

    #[test]
    fn smaps_pmd_counts_come_from_the_mapping_asked_for() {
        let smaps = "\
7f0000000000-7f0040000000 rw-s 00000000 00:1b 12 /dev/shm/a.img
Size:            1048576 kB
ShmemPmdMapped:   524288 kB
FilePmdMapped:         0 kB
7f0040000000-7f0040001000 r--p 00000000 00:00 0
ShmemPmdMapped:     2048 kB
";
        assert_eq!(pmd_mapped_in(smaps, 0x7f00_0000_0000), Some(512 << 20));
        assert_eq!(pmd_mapped_in(smaps, 0x7f00_4000_0000), Some(2 << 20));
        assert_eq!(pmd_mapped_in(smaps, 0x1000), None);
    }

    #[test]
    fn tmpfs_mounts_have_a_policy_and_others_none() {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let lines: Vec<MountLine> = mountinfo.lines().filter_map(parse_mountinfo_line).collect();
        if let Some(shm) = lines.iter().find(|m| m.mount_point == "/dev/shm") {
            let want = (shm.fs_type == "tmpfs").then(|| huge_option(&shm.super_options));
            assert_eq!(tmpfs_huge_policy(Path::new("/dev/shm")), want);
        }
        if lines.iter().any(|m| m.mount_point == "/proc") {
            assert_eq!(tmpfs_huge_policy(Path::new("/proc/self")), None);
        }
        // No mapping starts at address 1.
        assert_eq!(pmd_mapped_bytes(1), None);
    }
}
