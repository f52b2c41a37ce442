use super::experiments::{self, extent_aligned, tier_records, EXTENT};
use super::findings::check_all;
use super::*;
use crate::ftl::trace::{Op, Record};
use crate::study::findings::Verdict;
use std::io;

fn write(sector: u64, sectors: u32) -> Record {
    Record {
        time_ns: 0,
        op: Op::Write,
        sector,
        sectors,
    }
}

#[test]
fn fillers_bring_each_target_to_its_level() {
    let c = Config::for_size(Size::Quick, "/tmp/x".into());
    // The lab's kernel provisioning refuses smaller devices.
    assert!(c.device_bytes >= crate::kernel::MIN_DEVICE_BYTES);
    assert_eq!(c.device_bytes % EXTENT, 0);
    for l in LEVELS {
        let k = c.filler_bytes(&l, false);
        let u = (k + c.data_bytes) as f64 / c.device_bytes as f64;
        assert!(
            (u - l.target).abs() < 0.01,
            "{} kernel utilisation {u}",
            l.name
        );
        let n = c.filler_bytes(&l, true);
        let on_ssd = n + c.data_bytes - c.pm_bytes / 2;
        let u = on_ssd as f64 / (c.device_bytes - EXTENT) as f64;
        assert!(
            (u - l.target).abs() < 0.01,
            "{} nvmfs utilisation {u}",
            l.name
        );
        assert_eq!(k % (1 << 20), 0);
    }
    assert!(c.filler_bytes(&LEVELS[1], false) > c.filler_bytes(&LEVELS[0], false));
}

#[test]
fn the_marker_splits_a_kernel_trace() {
    let dev = 512u64 << 20;
    let mark = Record {
        op: Op::Read,
        ..write(dev / 512 - 40, 40)
    };
    let recs = vec![write(0, 8), mark, write(8, 8), write(16, 8)];
    assert_eq!(experiments::after_mark(&recs, dev).unwrap(), 2);
    // Without the marker there is no telling the filler from the workload.
    assert!(experiments::after_mark(&recs[2..], dev).is_err());
}

#[test]
fn tier_writes_become_sector_records() {
    let w = [
        nvmfs::tier::SsdWrite {
            offset: EXTENT,
            len: EXTENT,
        },
        nvmfs::tier::SsdWrite {
            offset: 3 * EXTENT,
            len: 8192,
        },
    ];
    let r = tier_records(&w);
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].sector, r[0].sectors), (1024, 1024));
    assert_eq!((r[1].sector, r[1].sectors), (3072, 16));
    assert!(r.iter().all(|x| x.op == Op::Write));
    assert!(extent_aligned(&r));
}

#[test]
fn extent_alignment_rejects_what_the_tier_never_writes() {
    assert!(extent_aligned(&[write(1024, 1024), write(2048, 8)]));
    // Starts inside an extent.
    assert!(!extent_aligned(&[write(1024 + 8, 8)]));
    // Crosses into the next extent.
    assert!(!extent_aligned(&[write(1024, 1032)]));
    // Reads are not writes.
    let read = Record {
        op: Op::Read,
        ..write(7, 8)
    };
    assert!(extent_aligned(&[read]));
}

fn cell(workload: &'static str, level: &'static str, target: &str, sectors: u64) -> Cell {
    Cell {
        workload,
        level,
        target: target.into(),
        ssd_bytes: 64 << 20,
        filler_bytes: 0,
        unavailable: None,
        out_of_space: false,
        throughput: vec![100.0, 101.0, 99.0],
        throughput_summary: crate::stats::Summary::of(&[100.0, 101.0, 99.0]),
        write_sectors: vec![sectors],
        write_requests: vec![1],
        utilisation: vec![0.6],
        ftl: Vec::new(),
        tier: Vec::new(),
        cache_budget: None,
        extent_aligned: None,
    }
}

fn result(cells: Vec<Cell>) -> StudyResult {
    StudyResult {
        config: Config::for_size(Size::Quick, "/tmp/x".into()),
        cells,
        unavailable_targets: vec![("nilfs2".into(), "no kernel support".into())],
        notes: Vec::new(),
        interrupted: false,
        wall_seconds: 1.0,
    }
}

#[test]
fn traffic_finding_compares_every_cell() {
    let r = result(vec![
        cell("iozone", "medium", "nvmfs", 100),
        cell("iozone", "medium", "ext4", 400),
        cell("fio", "medium", "nvmfs", 100),
        cell("fio", "medium", "ext4", 200),
    ]);
    let f = &check_all(&r)[0];
    assert_eq!(f.verdict, Verdict::Reproduced);
    assert_eq!(f.ratios.len(), 2);
    assert!((f.ratios[0].value - 0.25).abs() < 1e-9);
    let r = result(vec![
        cell("iozone", "medium", "nvmfs", 100),
        cell("iozone", "medium", "ext4", 400),
        cell("fio", "medium", "nvmfs", 300),
        cell("fio", "medium", "ext4", 200),
    ]);
    let f = &check_all(&r)[0];
    assert_eq!(f.verdict, Verdict::Partly);
    assert!(!f.ratios[1].agrees);
    // nilfs2 is never measured here: its finding says so and why.
    let n = &check_all(&r)[3];
    assert_eq!(n.verdict, Verdict::NotMeasured);
    assert!(n.measured.contains("no kernel support"), "{}", n.measured);
}

#[test]
fn a_full_kernel_file_system_is_a_result_and_other_errors_fail() {
    let enospc = io::Error::from_raw_os_error(libc::ENOSPC);
    // Postmark's and Filebench's errors name the operation but keep the kind.
    let wrapped = io::Error::new(enospc.kind(), format!("write s9/1246: {enospc}"));
    assert!(experiments::ran_out_of_space("btrfs", &enospc));
    assert!(experiments::ran_out_of_space("btrfs", &wrapped));
    assert!(!experiments::ran_out_of_space("nvmfs", &enospc));
    let eio = io::Error::from_raw_os_error(libc::EIO);
    assert!(!experiments::ran_out_of_space("btrfs", &eio));
    let mut full = cell("iozone", "high", "btrfs", 0);
    full.write_sectors.clear();
    full.unavailable = Some(format!("trial 1: {wrapped}"));
    full.out_of_space = true;
    let mut broken = full.clone();
    broken.target = "ext4".into();
    broken.out_of_space = false;
    assert!(!full.failed() && broken.failed());
    let table = report::format_table(&result(vec![full, broken]));
    assert!(
        table.contains("btrfs   out of space at this level: trial 1: write s9/1246"),
        "{table}"
    );
    assert!(table.contains("ext4    not measured: trial 1"), "{table}");
}

#[test]
fn cleaning_finding_needs_a_significant_drop_at_high() {
    let tier = |cleaned| TierCounters {
        flushes: 1,
        flushed_blocks: 1,
        cleaned_extents: cleaned,
        recycled_blocks: cleaned * 128,
        moved_blocks: 0,
        cleaning_efficiency: None,
        ssd_utilisation: 0.5,
    };
    let mut m = cell("iozone", "medium", "nvmfs", 1);
    m.tier = vec![tier(0)];
    let mut h = cell("iozone", "high", "nvmfs", 1);
    h.tier = vec![tier(5)];
    h.throughput_summary = crate::stats::Summary::of(&[50.0, 51.0, 49.0]);
    let f = &check_all(&result(vec![m.clone(), h.clone()]))[2];
    assert_eq!(f.verdict, Verdict::Reproduced, "{f:?}");
    // No drop: the claim fails.
    h.throughput_summary = m.throughput_summary;
    let f = &check_all(&result(vec![m, h]))[2];
    assert_eq!(f.verdict, Verdict::NotReproduced);
}

/// A tiny run end to end: nvmfs (and ext4 when this machine can trace it), two workloads,
/// both levels; the report and JSON exist and nvmfs's SSD writes are whole extents' starts.
#[test]
fn tiny_run_end_to_end() {
    let _turn = crate::study::tests::provisioning_turn();
    let out = std::env::temp_dir().join(format!("nvmfs-2013-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut cfg = Config::for_size(Size::Quick, out.clone());
    cfg.pm_bytes = 8 << 20;
    cfg.data_bytes = 24 << 20;
    cfg.device_bytes = 512 << 20;
    cfg.trials = 2;
    cfg.fio_file_bytes = 32 << 10;
    cfg.only_workloads = vec!["iozone".into(), "fio".into()];
    let kernel = crate::ftl::capture::kernel_unavailable("ext4", cfg.device_bytes);
    cfg.only_targets = match &kernel {
        None => vec!["nvmfs".into(), "ext4".into()],
        Some(why) => {
            eprintln!("ext4 skipped: {why}");
            vec!["nvmfs".into()]
        }
    };
    // The test harness runs other tests in this process: no memory cgroup around it.
    cfg.cache_budget = false;
    let r = experiments::run(&cfg, &|| false, &mut |m| eprintln!("{m}")).unwrap();
    let env = crate::study::env::Environment {
        emulation: report::emulation(),
        ..crate::study::env::Environment::capture(&cfg.shm_dir)
    };
    let w = report::write_all(&r, &env).unwrap();
    assert!(out.join("report.md").is_file());
    assert!(out.join("results.json").is_file());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["cells"].as_array().unwrap().len(), r.cells.len());
    for c in r.cells.iter().filter(|c| c.target == "nvmfs") {
        assert!(c.measured(), "{c:?}");
        assert_eq!(c.extent_aligned, Some(true), "{} {}", c.workload, c.level);
        // The data set is three times the PM tier: the tier must have flushed.
        assert!(c.sectors().unwrap() > 0);
        assert_eq!(c.ftl.len(), 2);
        assert_eq!(c.throughput.len(), 2);
    }
    if kernel.is_none() {
        for c in r.cells.iter().filter(|c| c.target == "ext4") {
            assert!(c.measured(), "{c:?}");
            // ext4 wrote at least the data set once.
            assert!(c.sectors().unwrap() >= cfg.data_bytes / 512, "{c:?}");
        }
        assert_eq!(w.findings[0].ratios.len(), 4);
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Findings") && md.contains("nilfs2"));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn erase_ratios_skip_cells_where_neither_erased_and_flag_only_nvmfs() {
    let setup = crate::ftl::replay::Setup::new(experiments::geometry(8 << 20).unwrap());
    let report = |recs: &[Record]| {
        crate::ftl::replay::replay_records(recs, crate::ftl::FtlKind::Page, &setup).unwrap()
    };
    // Overwriting the same 4 KiB page far past the NAND's size forces GC erases; one write
    // does not.
    let many: Vec<Record> = (0..20_000).map(|_| write(0, 8)).collect();
    let busy = report(&many);
    let idle = report(&[write(0, 8)]);
    assert!(busy.counters.erases > 0);
    assert_eq!(idle.counters.erases, 0);
    let with = |target: &str, r: &crate::ftl::replay::FtlReport| {
        let mut c = cell("iozone", "high", target, 1);
        c.ftl = vec![r.clone()];
        c
    };
    // Neither erased: no ratio at all.
    let f = &check_all(&result(vec![with("nvmfs", &idle), with("ext4", &idle)]))[1];
    assert!(f.ratios.is_empty());
    assert_eq!(f.verdict, Verdict::NotMeasured);
    // Only nvmfs erased: an infinite ratio that disagrees.
    let f = &check_all(&result(vec![with("nvmfs", &busy), with("ext4", &idle)]))[1];
    assert_eq!(f.ratios.len(), 2);
    assert!(f.ratios.iter().all(|r| r.value.is_infinite() && !r.agrees));
    assert!(f.measured.contains("only nvmfs erased"), "{}", f.measured);
    assert_eq!(f.verdict, Verdict::NotReproduced);
    // Only ext4 erased: nvmfs has fewer, a ratio of 0 the summary counts apart.
    let f = &check_all(&result(vec![with("nvmfs", &idle), with("ext4", &busy)]))[1];
    assert_eq!(f.verdict, Verdict::Reproduced);
    assert!(f.measured.contains("1 cell(s) at 0"), "{}", f.measured);
}

/// The page-cache budget moves the process into a limited child cgroup and back, and removes
/// it. A generous limit: other tests of this process run meanwhile.
#[test]
fn budget_enters_a_limited_cgroup_and_leaves_it() {
    // The whole process enters the cgroup: no test that provisions (shm images, loop
    // devices) may run meanwhile.
    let _turn = crate::study::tests::provisioning_turn();
    let b = match experiments::budget::Budget::enter(1 << 30) {
        Ok(b) => b,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let inside = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    assert!(inside.contains("/nvmfs-lab-"), "{inside}");
    let note = b.leave();
    assert!(note.contains("limit 1024 MiB"), "{note}");
    let after = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    assert!(!after.contains("/nvmfs-lab-"), "{after}");
    // The process's own memory does not count against the budget: 320 MiB of it inside a
    // 256 MiB budget (touched 8 MiB at a time, slower than the watcher follows). Without the
    // watcher the cgroup would OOM-kill this test process. Fresh anonymous mappings, not the
    // heap: the allocator could hand back pages faulted (and charged to the old cgroup)
    // before this process entered, by this test or by another running beside it.
    const CHUNK: usize = 8 << 20;
    let b = experiments::budget::Budget::enter(256 << 20).unwrap();
    let mut chunks = Vec::new();
    for _ in 0..40 {
        // SAFETY: a new private anonymous mapping, filled below and unmapped at the end.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                CHUNK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the whole mapping is ours and writable.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0x5A, CHUNK) };
        chunks.push(p);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: reading inside each mapping.
    let sum: usize = chunks
        .iter()
        .map(|&p| unsafe { *(p as *const u8).add(4096) } as usize)
        .sum();
    assert_eq!(sum, 40 * 0x5A);
    // The watcher samples every millisecond; let it see the last chunk even on a busy host.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let note = b.leave();
    for p in chunks {
        // SAFETY: unmapping what was mapped above, no longer used.
        unsafe { libc::munmap(p, CHUNK) };
    }
    let anon_peak: f64 = note
        .split("anonymous memory (peak ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no anonymous peak in {note}"));
    assert!(anon_peak >= 300.0, "{note}");
    let after = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    assert!(!after.contains("/nvmfs-lab-"), "{after}");
}
