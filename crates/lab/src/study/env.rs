//! The environment of a run, for the report: what machine, what kernel,
//! what was emulated.

use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    pub kernel_release: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_bytes: u64,
    /// File-system type of the directory holding images and devices.
    pub shm_dir_fs: String,
    /// The `huge=` policy of that tmpfs (whether nvmfs images there are mapped with 2 MiB
    /// pages); None when it is not tmpfs.
    pub shm_dir_huge_pages: Option<String>,
    /// The cache-line write-back instruction nvmfs uses here.
    pub nvmfs_flush: &'static str,
    pub root: bool,
    /// Unix time the run started.
    pub started_unix: u64,
    pub nvmfs_version: &'static str,
    /// What the run emulates and how it differs from the paper's testbed.
    pub emulation: Vec<String>,
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The `/proc/mounts` type of the longest mount point containing `dir`.
fn fs_type_of(dir: &Path) -> String {
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return "unknown".into();
    };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, mp, ty) = (f.next()?, f.next()?, f.next()?);
            dir.starts_with(mp).then(|| (mp.len(), ty.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "unknown".into(), |(_, ty)| ty)
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Environment {
    /// The machine as it is now, without any study's emulation notes.
    pub fn capture(shm_dir: &Path) -> Self {
        let started_unix = unix_now();
        Environment {
            kernel_release: read_trim("/proc/sys/kernel/osrelease"),
            cpu_model: cpu_model(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes: memory_bytes(),
            shm_dir_fs: fs_type_of(shm_dir),
            shm_dir_huge_pages: nvmfs::media::pages::tmpfs_huge_policy(shm_dir),
            nvmfs_flush: nvmfs::media::FlushKind::selected().name(),
            // SAFETY: geteuid has no preconditions.
            root: unsafe { libc::geteuid() } == 0,
            started_unix,
            nvmfs_version: env!("CARGO_PKG_VERSION"),
            emulation: Vec::new(),
        }
    }

    /// The machine, with how a run of `study` here differs from its paper's testbed.
    pub fn capture_for(study: &super::StudyDef, shm_dir: &Path) -> Self {
        Environment {
            emulation: (study.emulation)(),
            ..Self::capture(shm_dir)
        }
    }
}

/// `YYYY-MM-DDTHH-MM-SSZ` (UTC) for directory names, without a date crate.
pub fn utc_stamp(unix: u64) -> String {
    let (y, m, d) = civil_from_days((unix / 86_400) as i64);
    let secs = unix % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}-{:02}-{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's civil-from-days).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0), "1970-01-01T00-00-00Z");
        assert_eq!(utc_stamp(951_782_400), "2000-02-29T00-00-00Z");
        assert_eq!(utc_stamp(1_795_000_000), "2026-11-18T11-06-40Z");
    }

    #[test]
    fn environment_has_the_basics() {
        let e = Environment::capture(Path::new("/"));
        assert!(e.cpus >= 1);
        assert!(e.memory_bytes > 0);
        assert_ne!(e.kernel_release, "unknown");
    }
}
