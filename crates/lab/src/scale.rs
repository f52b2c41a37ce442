//! `nvmfs bench scale`: how nvmfs behaves with many files. It formats a large image, fills
//! one directory with many files and another with a thousand, then measures:
//! - path lookup (stat) in the large directory against the small one, and against the same
//!   number of files spread over directories of the small size (hashed directories keep the
//!   per-lookup work constant; the small directory also stays in the CPU caches, the spread
//!   tree does not, so the second ratio isolates directory size from cache effects);
//! - DRAM the mounted file system holds (live heap of this process, and page tables
//!   for the mapping, measured from /proc/self/status) after a clean remount and a lookup in
//!   the large directory (which builds its index);
//! - the time a clean mount takes, and the time the first lookup in the large directory takes.

use std::io;
use std::path::PathBuf;
use std::time::Instant;

use nvmfs::{FormatOptions, Fs, MountOptions};
use serde::Serialize;

#[derive(Clone, Debug)]
pub struct ScaleConfig {
    pub image_size_bytes: u64,
    pub files: u64,
    pub small_files: u64,
    pub lookups: u64,
    pub shm_dir: PathBuf,
}

impl Default for ScaleConfig {
    fn default() -> Self {
        ScaleConfig {
            image_size_bytes: 8 << 30,
            files: 1_000_000,
            small_files: 1000,
            lookups: 500_000,
            shm_dir: "/dev/shm".into(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ScaleReport {
    pub image_size_bytes: u64,
    pub files: u64,
    pub small_files: u64,
    pub create_per_sec: f64,
    pub lookup_ns_large_dir: f64,
    pub lookup_ns_small_dir: f64,
    pub lookup_ratio_large_to_small: f64,
    pub lookup_ns_spread: f64,
    pub lookup_ratio_large_to_spread: f64,
    pub mount_s: f64,
    pub first_lookup_large_dir_s: f64,
    pub dram_heap_bytes: u64,
    pub dram_page_table_bytes: u64,
    pub dram_index_bytes: u64,
    pub dram_fraction_of_image: f64,
}

fn name(i: u64) -> String {
    format!("file-{i:08}")
}

/// (live heap bytes, page-table bytes) of this process. The heap figure is what the
/// allocator has handed out and not taken back (mallinfo2), so memory freed earlier and
/// kept by the allocator does not hide or inflate what the mounted file system holds.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let pte = status
        .lines()
        .find(|l| l.starts_with("VmPTE:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024);
    (heap_in_use(), pte)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd) as u64
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_in_use() -> u64 {
    0
}

/// Mean nanoseconds per metadata lookup of random names among `count` in `dir` (or, with
/// `spread_dirs` > 0, in a random one of that many subdirectories of `dir`).
fn lookup_ns(fs: &Fs, dir: &str, count: u64, spread_dirs: u64, lookups: u64) -> io::Result<f64> {
    let mut rng = fastrand::Rng::with_seed(7);
    let paths: Vec<String> = (0..lookups.min(200_000))
        .map(|_| match spread_dirs {
            0 => format!("{dir}/{}", name(rng.u64(0..count))),
            n => format!("{dir}/d{:05}/{}", rng.u64(0..n), name(rng.u64(0..count))),
        })
        .collect();
    let rounds = lookups.div_ceil(paths.len() as u64);
    let start = Instant::now();
    for _ in 0..rounds {
        for p in &paths {
            std::hint::black_box(fs.metadata(p)?);
        }
    }
    Ok(start.elapsed().as_nanos() as f64 / (rounds * paths.len() as u64) as f64)
}

fn fill(fs: &Fs, dir: &str, count: u64, progress: &mut dyn FnMut(&str)) -> io::Result<f64> {
    fs.create_dir(dir)?;
    let parent = fs.metadata(dir)?.ino;
    let start = Instant::now();
    for i in 0..count {
        fs.create(parent, name(i).as_bytes(), 0o644, 0, 0)?;
        if i > 0 && i % 200_000 == 0 {
            progress(&format!("scale: {i} files created in {dir}"));
        }
    }
    Ok(count as f64 / start.elapsed().as_secs_f64())
}

pub fn run(cfg: &ScaleConfig, progress: &mut dyn FnMut(&str)) -> io::Result<ScaleReport> {
    let image = cfg
        .shm_dir
        .join(format!("nvmfs-scale-{}.img", std::process::id()));
    let _claim = crate::targets::sys::ScratchFile::claim(image.clone())?;
    progress(&format!(
        "scale: formatting {} GiB image at {}",
        cfg.image_size_bytes >> 30,
        image.display()
    ));
    let inodes = 2 * cfg.files + 2 * cfg.small_files + cfg.files / cfg.small_files.max(1) + 1024;
    Fs::format(
        &image,
        &FormatOptions {
            size_bytes: cfg.image_size_bytes,
            inode_count: Some(inodes),
            ..Default::default()
        },
    )?;
    let fs = Fs::mount(&image, &MountOptions::default())?;
    let create_per_sec = fill(&fs, "/large", cfg.files, progress)?;
    fill(&fs, "/small", cfg.small_files, progress)?;
    let spread_dirs = cfg.files.div_ceil(cfg.small_files);
    fs.create_dir("/spread")?;
    for d in 0..spread_dirs {
        fill(
            &fs,
            &format!("/spread/d{d:05}"),
            cfg.small_files,
            &mut |_| {},
        )?;
    }
    progress(&format!(
        "scale: {} files created in {spread_dirs} directories under /spread",
        spread_dirs * cfg.small_files
    ));
    fs.unmount()?;

    let (anon_before, pte_before) = memory();
    let t = Instant::now();
    let fs = Fs::mount(&image, &MountOptions::default())?;
    let mount_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    fs.metadata(format!("/large/{}", name(0)))?;
    let first_lookup_large_dir_s = t.elapsed().as_secs_f64();
    let (anon_after, pte_after) = memory();
    progress("scale: measuring lookups");
    let small = lookup_ns(&fs, "/small", cfg.small_files, 0, cfg.lookups)?;
    let large = lookup_ns(&fs, "/large", cfg.files, 0, cfg.lookups)?;
    let spread = lookup_ns(&fs, "/spread", cfg.small_files, spread_dirs, cfg.lookups)?;
    let dram_heap_bytes = anon_after.saturating_sub(anon_before);
    let report = ScaleReport {
        image_size_bytes: cfg.image_size_bytes,
        files: cfg.files,
        small_files: cfg.small_files,
        create_per_sec,
        lookup_ns_large_dir: large,
        lookup_ns_small_dir: small,
        lookup_ratio_large_to_small: large / small,
        lookup_ns_spread: spread,
        lookup_ratio_large_to_spread: large / spread,
        mount_s,
        first_lookup_large_dir_s,
        dram_heap_bytes,
        dram_page_table_bytes: pte_after.saturating_sub(pte_before),
        dram_index_bytes: fs.dram_bytes(),
        dram_fraction_of_image: (dram_heap_bytes + pte_after.saturating_sub(pte_before)) as f64
            / cfg.image_size_bytes as f64,
    };
    fs.unmount()?;
    Ok(report)
}

pub fn format_report(r: &ScaleReport) -> String {
    format!(
        "image {} MiB, {} files in one directory, {} in another, {} more spread over directories of {}\n\
         create (library, empty files)   {:>12.0} /s\n\
         lookup+stat, large directory    {:>12.0} ns\n\
         lookup+stat, small directory    {:>12.0} ns\n\
         ratio large/small               {:>12.2}\n\
         lookup+stat, spread directories {:>12.0} ns\n\
         ratio large/spread              {:>12.2}\n\
         clean mount                     {:>12.3} s\n\
         first lookup in large dir       {:>12.3} s (builds its DRAM index)\n\
         DRAM: heap held by the mount    {:>12} bytes\n\
         DRAM: page tables               {:>12} bytes (heap + tables: {:.3}% of the image)\n\
         DRAM: directory indexes (est.)  {:>12} bytes",
        r.image_size_bytes >> 20,
        r.files,
        r.small_files,
        r.files,
        r.small_files,
        r.create_per_sec,
        r.lookup_ns_large_dir,
        r.lookup_ns_small_dir,
        r.lookup_ratio_large_to_small,
        r.lookup_ns_spread,
        r.lookup_ratio_large_to_spread,
        r.mount_s,
        r.first_lookup_large_dir_s,
        r.dram_heap_bytes,
        r.dram_page_table_bytes,
        r.dram_fraction_of_image * 100.0,
        r.dram_index_bytes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_scale_run_reports_sane_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ScaleConfig {
            image_size_bytes: 64 << 20,
            files: 3000,
            small_files: 100,
            lookups: 5000,
            shm_dir: dir.path().into(),
        };
        let r = run(&cfg, &mut |_| {}).unwrap();
        assert!(r.lookup_ns_large_dir > 0.0 && r.lookup_ns_small_dir > 0.0);
        assert!(r.create_per_sec > 0.0 && r.mount_s > 0.0);
        assert!(
            r.dram_index_bytes > 3000 * 8,
            "index of 3000 entries: {}",
            r.dram_index_bytes
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "image left behind"
        );
    }
}
