use super::report::{fill_ratios, format_ns, group_thousands};
use super::*;
use std::path::Path;

#[test]
fn target_spec_parse() {
    assert_eq!(TargetSpec::parse("nvmfs"), Ok(TargetSpec::Nvmfs));
    assert_eq!(TargetSpec::parse("tmpfs"), Ok(TargetSpec::Tmpfs));
    assert_eq!(
        TargetSpec::parse("dir:/mnt/ext4"),
        Ok(TargetSpec::Dir(PathBuf::from("/mnt/ext4")))
    );
    // Everything after the first "dir:" is the path, colons included.
    assert_eq!(
        TargetSpec::parse("dir:rel/a:b"),
        Ok(TargetSpec::Dir(PathBuf::from("rel/a:b")))
    );
    for bad in ["", "dir:", "dir", "NVMFS", "ext4", " tmpfs", "memcpy"] {
        assert!(TargetSpec::parse(bad).is_err(), "{bad:?} should not parse");
    }
}

#[test]
fn target_spec_label_round_trips() {
    for s in ["nvmfs", "tmpfs", "dir:/mnt/x"] {
        let t: TargetSpec = s.parse().unwrap();
        assert_eq!(t.to_string(), s);
    }
}

#[test]
fn workload_names_are_the_published_ones() {
    assert_eq!(
        all_workloads(),
        [
            "randread-4k",
            "overwrite-4k",
            "append-4k",
            "seqread-1m",
            "seqwrite-1m",
            "create-16k",
            "stat",
            "open-read-16k",
            "unlink"
        ]
    );
    for (i, w) in WORKLOADS.iter().enumerate() {
        assert_eq!(*w as usize, i, "WORKLOADS order matches the discriminants");
        assert_eq!(WorkloadId::parse(w.name()), Some(*w));
    }
}

#[test]
fn workload_selection_dedups_and_uses_run_order() {
    let sel = |v: &[&str]| select_workloads(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!(sel(&[]).unwrap().len(), 9);
    assert_eq!(
        sel(&["unlink", "stat", "unlink"]).unwrap(),
        vec![WorkloadId::Stat, WorkloadId::Unlink]
    );
    let err = sel(&["stat", "randread"]).unwrap_err();
    assert!(
        err.contains("randread") && err.contains("randread-4k"),
        "{err}"
    );
}

#[test]
fn config_validation() {
    let ok = MicroConfig::default();
    let p = Params::from_config(&ok).unwrap();
    assert_eq!(p.data_size, 1 << 30);
    assert_eq!(p.limits.run, Duration::from_secs(1));
    assert_eq!(p.limits.warmup, Duration::from_millis(100));
    assert!(p.inode_count >= 2 * 10_000 + p.unlink_reserve as u64);

    let bad = [
        MicroConfig {
            seconds: 0.0,
            ..ok.clone()
        },
        MicroConfig {
            seconds: f64::NAN,
            ..ok.clone()
        },
        MicroConfig {
            file_size_bytes: MIB - 1,
            ..ok.clone()
        },
        MicroConfig {
            file_count: 0,
            ..ok.clone()
        },
        MicroConfig {
            targets: vec![],
            ..ok.clone()
        },
        MicroConfig {
            workloads: vec!["nope".into()],
            ..ok.clone()
        },
    ];
    for cfg in bad {
        let err = Params::from_config(&cfg).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{cfg:?}");
    }
    // Sizes are rounded down to whole 1 MiB chunks.
    let odd = MicroConfig {
        file_size_bytes: 3 * MIB + 5,
        ..ok
    };
    assert_eq!(Params::from_config(&odd).unwrap().data_size, 3 * MIB);
}

#[test]
fn number_formatting() {
    assert_eq!(group_thousands(0), "0");
    assert_eq!(group_thousands(999), "999");
    assert_eq!(group_thousands(1_000), "1,000");
    assert_eq!(group_thousands(12_345), "12,345");
    assert_eq!(group_thousands(100_000), "100,000");
    assert_eq!(group_thousands(1_234_567), "1,234,567");
    assert_eq!(group_thousands(u64::MAX), "18,446,744,073,709,551,615");
    assert_eq!(format_ns(812), "812ns");
    assert_eq!(format_ns(1_940), "1.94µs");
    assert_eq!(format_ns(25_500), "25.5µs");
    assert_eq!(format_ns(250_400), "250µs");
    assert_eq!(format_ns(3_210_000), "3.21ms");
    assert_eq!(format_ns(2_000_000_000), "2.00s");
}

fn record(workload: &str, target: &str, kind: TargetKind, ops_per_sec: f64) -> Record {
    Record {
        workload: workload.into(),
        target: target.into(),
        kind,
        ops: 10,
        elapsed_s: 1.0,
        wall_s: 1.0,
        ops_per_sec,
        bytes_per_op: 0,
        mib_per_sec: 0.0,
        latency_ns: Percentiles::default(),
        ratio_to_best_kernel: None,
        notes: vec![],
    }
}

#[test]
fn ratios_are_against_the_best_kernel_target_per_workload() {
    let mut rs = vec![
        record("stat", "nvmfs", TargetKind::Nvmfs, 300.0),
        record("stat", "tmpfs", TargetKind::Kernel, 100.0),
        record("stat", "dir:/x", TargetKind::Kernel, 150.0),
        record("seqread-1m", "nvmfs", TargetKind::Nvmfs, 10.0),
        record("seqread-1m", "memcpy", TargetKind::Reference, 40.0),
    ];
    fill_ratios(&mut rs);
    let ratios: Vec<_> = rs.iter().map(|r| r.ratio_to_best_kernel).collect();
    assert_eq!(
        ratios,
        [Some(2.0), Some(100.0 / 150.0), Some(1.0), None, None]
    );
}

#[test]
fn table_and_json_shapes() {
    let mut rs = vec![
        record("stat", "nvmfs", TargetKind::Nvmfs, 2_000_000.0),
        record(
            "stat",
            "dir:/some/long/path",
            TargetKind::Kernel,
            1_000_000.0,
        ),
    ];
    rs[1].notes.push("no fsync".into());
    fill_ratios(&mut rs);
    let table = format_table(&rs);
    let lines: Vec<_> = table.lines().collect();
    assert!(lines[0].starts_with("workload"));
    assert!(
        lines[1].contains("2,000,000") && lines[1].ends_with("2.00x"),
        "{table}"
    );
    assert!(lines[2].contains("dir:/some/long/path") && lines[2].ends_with("1.00x"));
    assert_eq!(lines[3], "notes:");
    assert_eq!(lines[4], "  - stat on dir:/some/long/path: no fsync");

    let v: serde_json::Value = serde_json::from_str(&to_json(&rs)).unwrap();
    let arr = v.as_array().expect("the file is a bare array");
    assert_eq!(arr.len(), 2);
    for key in [
        "workload",
        "target",
        "ops_per_sec",
        "ops",
        "elapsed_s",
        "kind",
    ] {
        assert!(arr[0].get(key).is_some(), "missing {key}");
    }
    for key in ["p50", "p99", "p999", "max"] {
        assert!(
            arr[0]["latency_ns"].get(key).is_some(),
            "missing latency {key}"
        );
    }
    assert_eq!(arr[0]["kind"], "nvmfs");
    assert_eq!(arr[1]["ratio_to_best_kernel"], 1.0);
}

/// Tiny sizes: the whole suite in well under a second per target.
fn tiny(targets: Vec<TargetSpec>, shm: &Path) -> MicroConfig {
    MicroConfig {
        targets,
        workloads: vec![],
        seconds: 0.03,
        file_size_bytes: 2 * MIB,
        file_count: 40,
        image_size_bytes: 64 * MIB,
        shm_dir: shm.to_path_buf(),
    }
}

fn assert_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A scratch directory on /dev/shm when there is one (the real tmpfs case).
fn shm_tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

#[test]
fn every_workload_runs_on_kernel_targets_and_cleans_up() {
    let shm = shm_tempdir();
    let other = tempfile::tempdir().unwrap();
    let cfg = tiny(
        vec![
            TargetSpec::Tmpfs,
            TargetSpec::Dir(other.path().to_path_buf()),
        ],
        shm.path(),
    );
    let mut lines = Vec::new();
    let records = run(&cfg, &mut |s| lines.push(s.to_string())).unwrap();

    // 9 workloads x 2 targets + memcpy.
    assert_eq!(records.len(), 19);
    // Grouped by workload in run order, targets in configured order, memcpy
    // right after the other seqread-1m records.
    let dir_label = format!("dir:{}", other.path().display());
    let mut expected = Vec::new();
    for name in all_workloads() {
        expected.push((name.to_string(), "tmpfs".to_string()));
        expected.push((name.to_string(), dir_label.clone()));
        if *name == "seqread-1m" {
            expected.push((name.to_string(), "memcpy".to_string()));
        }
    }
    let got: Vec<_> = records
        .iter()
        .map(|r| (r.workload.clone(), r.target.clone()))
        .collect();
    assert_eq!(got, expected);
    for r in &records {
        assert!(r.ops > 0, "{r:?}");
        assert!(r.ops_per_sec > 0.0 && r.elapsed_s > 0.0, "{r:?}");
        assert!(
            r.latency_ns.p50 > 0 && r.latency_ns.p50 <= r.latency_ns.max,
            "{r:?}"
        );
        assert!(r.ratio_to_best_kernel.is_some(), "{r:?}");
        if r.kind == TargetKind::Kernel {
            assert!(r.notes.iter().any(|n| n.contains("fsync")), "{r:?}");
        }
    }
    // 40 files and 0.03 s: unlink runs out of files and says so.
    let unlink = records.iter().find(|r| r.workload == "unlink").unwrap();
    assert!(unlink.ops >= 40 && unlink.ops <= 44, "{unlink:?}");
    assert!(
        unlink.notes.iter().any(|n| n.contains("ran out")),
        "{unlink:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("[tmpfs] randread-4k:")),
        "{lines:?}"
    );

    assert_empty(shm.path());
    assert_empty(other.path());
}

#[test]
fn selected_workloads_only() {
    let shm = shm_tempdir();
    let mut cfg = tiny(vec![TargetSpec::Tmpfs], shm.path());
    cfg.workloads = vec!["stat".into(), "append-4k".into()];
    let records = run(&cfg, &mut |_| {}).unwrap();
    let got: Vec<_> = records.iter().map(|r| r.workload.as_str()).collect();
    assert_eq!(got, ["append-4k", "stat"], "no memcpy without seqread-1m");
    assert_empty(shm.path());
}

#[test]
fn append_restarts_its_file_when_full() {
    let shm = shm_tempdir();
    let mut cfg = tiny(vec![TargetSpec::Tmpfs], shm.path());
    cfg.workloads = vec!["append-4k".into(), "create-16k".into()];
    cfg.file_size_bytes = MIB; // 256 appends per file
    cfg.file_count = 5;
    cfg.seconds = 0.1;
    let records = run(&cfg, &mut |_| {}).unwrap();
    assert!(
        records[0].ops > 256 && records[0].notes[0].contains("restarted"),
        "{:?}",
        records[0]
    );
    assert!(
        records[1].ops > 5 && records[1].notes[0].contains("emptied"),
        "{:?}",
        records[1]
    );
    assert_empty(shm.path());
}

#[test]
fn scratch_data_is_removed_when_a_later_target_fails() {
    let shm = shm_tempdir();
    let missing = shm.path().join("does-not-exist");
    let mut cfg = tiny(
        vec![TargetSpec::Tmpfs, TargetSpec::Dir(missing)],
        shm.path(),
    );
    cfg.workloads = vec!["stat".into()];
    let err = run(&cfg, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("does-not-exist"), "{err}");
    assert_empty(shm.path());
}

#[test]
fn every_workload_runs_on_nvmfs_and_the_image_is_removed() {
    let shm = shm_tempdir();
    let cfg = tiny(vec![TargetSpec::Nvmfs], shm.path());
    let records = run(&cfg, &mut |_| {}).unwrap();
    assert_eq!(records.len(), 10);
    for r in &records {
        assert!(r.ops > 0, "{r:?}");
        if r.target == "nvmfs" {
            assert_eq!(r.kind, TargetKind::Nvmfs);
            assert!(r.notes.iter().all(|n| !n.contains("fsync")));
            assert_eq!(r.ratio_to_best_kernel, None, "no kernel target ran");
        }
    }
    assert_empty(shm.path());
}

#[test]
fn nvmfs_image_is_removed_even_when_it_is_too_small() {
    let shm = shm_tempdir();
    let mut cfg = tiny(vec![TargetSpec::Nvmfs], shm.path());
    // The data file and the append file alone need 4 MiB plus metadata.
    cfg.image_size_bytes = 4 * MIB;
    cfg.workloads = vec!["randread-4k".into(), "append-4k".into()];
    // Success or ENOSPC, both are fine here; leftovers are not.
    let _ = run(&cfg, &mut |_| {});
    assert_empty(shm.path());
}
