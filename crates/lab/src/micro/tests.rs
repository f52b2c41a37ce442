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
    assert_eq!(TargetSpec::parse("run:nvmfs"), Ok(TargetSpec::Run));
    for bad in [
        "",
        "dir:",
        "dir",
        "NVMFS",
        "ext4",
        " tmpfs",
        "memcpy",
        "run:",
        "run",
        "run:tmpfs",
    ] {
        assert!(TargetSpec::parse(bad).is_err(), "{bad:?} should not parse");
    }
}

#[test]
fn target_spec_label_round_trips() {
    for s in ["nvmfs", "tmpfs", "dir:/mnt/x", "run:nvmfs"] {
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
            "mmap-load-1k",
            "mmap-store-1k",
            "create-16k",
            "create-16k-deep",
            "stat",
            "stat-deep",
            "open-read-16k",
            "open-read-16k-deep",
            "unlink",
            "unlink-deep"
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
    assert_eq!(sel(&[]).unwrap().len(), 15);
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
    assert_eq!(
        p.deep,
        Layout::Deep { depth: 6, width: 4 },
        "4^7 >= 10000 > 3^7"
    );
    // Three file sets and the trees' directories.
    let dirs = 3 * p.deep.dir_count(10_000) as u64;
    assert!(p.inode_count >= 3 * 10_000 + p.unlink_reserve as u64 + dirs);

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
        MicroConfig {
            tree_depth: 0,
            ..ok.clone()
        },
        MicroConfig {
            tree_depth: MAX_TREE_DEPTH + 1,
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
        ratio_to_limit: None,
        dir_depth: None,
        final_sync_s: None,
        threads: 1,
        sharing: None,
        scaling: None,
        core_link_ns: None,
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
    // Only seqread-1m has a limit: nvmfs takes 4x its time per op, the reference none.
    let limits: Vec<_> = rs.iter().map(|r| r.ratio_to_limit).collect();
    assert_eq!(limits, [None, None, None, Some(4.0), None]);
}

#[test]
fn the_limit_is_the_plain_store_not_the_store_with_a_lock_release() {
    // Even when the store + RMW row measures faster (noise), the ratio is to nt-store.
    let mut rs = vec![
        record("overwrite-4k", "nvmfs", TargetKind::Nvmfs, 100.0),
        record("overwrite-4k", "nt-store", TargetKind::Reference, 200.0),
        record("overwrite-4k", "nt-store+rmw", TargetKind::Reference, 300.0),
    ];
    fill_ratios(&mut rs);
    let limits: Vec<_> = rs.iter().map(|r| r.ratio_to_limit).collect();
    assert_eq!(limits, [Some(2.0), None, None]);
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
    rs.push(record("randread-4k", "nvmfs", TargetKind::Nvmfs, 1_000.0));
    rs.push(record(
        "randread-4k",
        "memcpy",
        TargetKind::Reference,
        1_500.0,
    ));
    fill_ratios(&mut rs);
    let table = format_table(&rs);
    let lines: Vec<_> = table.lines().collect();
    assert!(lines[0].starts_with("workload") && lines[0].ends_with("x limit"));
    let cols = |l: &str| -> Vec<String> { l.split_whitespace().map(String::from).collect() };
    assert!(lines[1].contains("2,000,000"), "{table}");
    assert_eq!(cols(lines[1])[5..], ["2.00x", "-"], "{table}");
    assert!(lines[2].contains("dir:/some/long/path"));
    assert_eq!(cols(lines[2])[5..], ["1.00x", "-"], "{table}");
    // nvmfs takes 1.5x the limit's time per op; the limit has no ratio of its own.
    assert_eq!(cols(lines[3])[5..], ["-", "1.50x"], "{table}");
    assert_eq!(cols(lines[4])[5..], ["-", "-"], "{table}");
    assert_eq!(lines[5], "notes:");
    assert_eq!(lines[6], "  - stat on dir:/some/long/path: no fsync");

    let v: serde_json::Value = serde_json::from_str(&to_json(&rs)).unwrap();
    let arr = v.as_array().expect("the file is a bare array");
    assert_eq!(arr.len(), 4);
    assert_eq!(arr[2]["ratio_to_limit"], 1.5);
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
        tree_depth: 3,
        image_size_bytes: 64 * MIB,
        shm_dir: shm.to_path_buf(),
        nvmfs_bin: None,
        references: true,
        threads: 1,
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

    // 15 workloads x 2 targets + seven references (two for overwrite-4k).
    assert_eq!(records.len(), 37);
    // Grouped by workload in run order, targets in configured order, each limit right
    // after the other records of its workload.
    let dir_label = format!("dir:{}", other.path().display());
    let mut expected = Vec::new();
    for name in all_workloads() {
        expected.push((name.to_string(), "tmpfs".to_string()));
        expected.push((name.to_string(), dir_label.clone()));
        let references: &[&str] = match *name {
            "seqread-1m" | "randread-4k" | "open-read-16k" | "open-read-16k-deep" => &["memcpy"],
            "overwrite-4k" => &["nt-store", "nt-store+rmw"],
            "seqwrite-1m" => &["nt-store"],
            _ => &[],
        };
        for l in references {
            expected.push((name.to_string(), l.to_string()));
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
        let mmap = r.workload.starts_with("mmap-");
        if r.kind == TargetKind::Kernel && !mmap {
            assert!(r.notes.iter().any(|n| n.contains("fsync")), "{r:?}");
        }
        if mmap {
            assert!(
                r.notes.iter().any(|n| n.contains("no msync per op")),
                "{r:?}"
            );
            assert_eq!(r.bytes_per_op, 1024);
        }
        assert_eq!(
            r.final_sync_s.is_some(),
            r.workload == "mmap-store-1k",
            "{r:?}"
        );
        let meta = ["create-16k", "stat", "open-read-16k", "unlink"];
        // The references read no directories.
        let want_depth = if r.kind == TargetKind::Reference {
            None
        } else if meta.contains(&r.workload.as_str()) {
            Some(0)
        } else if r.workload.ends_with("-deep") {
            Some(3)
        } else {
            None
        };
        assert_eq!(r.dir_depth, want_depth, "{r:?}");
        let limited = [
            "randread-4k",
            "overwrite-4k",
            "seqread-1m",
            "seqwrite-1m",
            "open-read-16k",
            "open-read-16k-deep",
        ];
        let has_limit = r.kind != TargetKind::Reference && limited.contains(&r.workload.as_str());
        assert_eq!(r.ratio_to_limit.is_some(), has_limit, "{r:?}");
        if r.workload.ends_with("-deep") && r.kind != TargetKind::Reference {
            assert!(
                r.notes.iter().any(|n| n.contains("3 directories deep")),
                "{r:?}"
            );
        }
    }
    // 40 files and 0.03 s: unlink runs out of files and says so.
    for name in ["unlink", "unlink-deep"] {
        let unlink = records.iter().find(|r| r.workload == name).unwrap();
        assert!(unlink.ops >= 40 && unlink.ops <= 44, "{unlink:?}");
        assert!(
            unlink.notes.iter().any(|n| n.contains("ran out")),
            "{unlink:?}"
        );
    }
    let v: serde_json::Value = serde_json::from_str(&to_json(&records)).unwrap();
    let store = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["workload"] == "mmap-store-1k")
        .unwrap();
    assert!(store["final_sync_s"].as_f64().unwrap() > 0.0, "{store}");
    assert!(store["dir_depth"].is_null());
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
    // 15 workloads and seven references.
    assert_eq!(records.len(), 22);
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

#[test]
fn deep_layout_shapes() {
    assert_eq!(Layout::deep(10_000, 6), Layout::Deep { depth: 6, width: 4 });
    assert_eq!(Layout::deep(40, 3), Layout::Deep { depth: 3, width: 3 });
    assert_eq!(Layout::deep(1, 6), Layout::Deep { depth: 6, width: 2 });
    // No overflow for deep trees of few files.
    assert_eq!(
        Layout::deep(5, 64),
        Layout::Deep {
            depth: 64,
            width: 2
        }
    );
    for (count, depth) in [(10_000, 6), (40, 3), (1, 1), (1_000, 2), (77, 8)] {
        let l = Layout::deep(count, depth);
        let Layout::Deep { width, .. } = l else {
            unreachable!()
        };
        let dirs = l.dirs(count);
        assert_eq!(dirs.len(), l.dir_count(count), "{l:?}");
        let known: std::collections::HashSet<&str> = dirs.iter().map(|d| d.as_str()).collect();
        for (k, d) in dirs.iter().enumerate() {
            // Parents come first.
            if let Some((parent, _)) = d.rsplit_once('/') {
                assert!(dirs[..k].iter().any(|p| p == parent), "{d} before {parent}");
            }
        }
        let mut per_dir: std::collections::HashMap<String, u64> = Default::default();
        let mut files = std::collections::HashSet::new();
        for i in 0..count {
            let f = l.file(i);
            assert_eq!(f.matches('/').count(), depth as usize, "{f}");
            assert!(f.ends_with(&format!("f{i:07}")));
            let (dir, _) = f.rsplit_once('/').unwrap();
            assert!(known.contains(dir), "{dir} not made");
            *per_dir.entry(dir.to_string()).or_default() += 1;
            assert!(files.insert(f));
        }
        // Every directory holds at most `width` entries (files or subdirectories).
        assert!(per_dir.values().all(|&n| n <= width), "{l:?}");
        for d in &dirs {
            let children = dirs
                .iter()
                .filter(|c| c.rsplit_once('/').map(|(p, _)| p) == Some(d.as_str()))
                .count() as u64;
            assert!(children <= width, "{d}");
        }
        // As narrow as the count allows: one width less would not hold the files.
        assert!(
            (width - 1).pow(depth + 1) < count as u64 || width == 2,
            "{l:?}"
        );
    }
    assert_eq!(Layout::Flat.file(12), "f0000012");
    assert!(Layout::Flat.dirs(10).is_empty());
    assert_eq!(Layout::Flat.depth(), 0);
}

/// Walks a kernel directory: (depth of each regular file below `root`, entries per directory).
fn walk(root: &Path, depth: usize, files: &mut Vec<usize>, widths: &mut Vec<usize>) {
    let entries: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    widths.push(entries.len());
    for e in entries {
        if e.file_type().unwrap().is_dir() {
            walk(&e.path(), depth + 1, files, widths);
        } else {
            files.push(depth);
        }
    }
}

/// The same walk on an nvmfs image.
fn walk_nvmfs(
    fs: &nvmfs::Fs,
    root: &str,
    depth: usize,
    files: &mut Vec<usize>,
    widths: &mut Vec<usize>,
) {
    let entries = fs.read_dir(root).unwrap();
    widths.push(entries.len());
    for e in entries {
        let path = format!("{root}/{}", e.file_name().to_str().unwrap());
        if e.file_type == nvmfs::FileType::Dir {
            walk_nvmfs(fs, &path, depth + 1, files, widths);
        } else {
            files.push(depth);
        }
    }
}

fn tree_params(depth: u32) -> Params {
    let mut cfg = tiny(vec![TargetSpec::Tmpfs], Path::new("/unused"));
    cfg.file_count = 50;
    cfg.tree_depth = depth;
    cfg.seconds = 0.01;
    Params::from_config(&cfg).unwrap()
}

#[test]
fn flat_and_deep_workloads_place_files_at_their_depth_on_disk() {
    let params = tree_params(4);
    let Layout::Deep { width, .. } = params.deep else {
        unreachable!()
    };
    assert_eq!(width, 3, "3^5 >= 50 > 2^5");

    let dir = tempfile::tempdir().unwrap();
    let fs = crate::targets::sys::SysFs::new(dir.path());
    let mut progress = |_: &str| {};
    let mut s = session::Session::new(&fs, &params, "t", TargetKind::Kernel, &mut progress);
    assert!(meta::stat(&mut s, Layout::Flat).unwrap().ops > 0);
    assert!(meta::open_read_16k(&mut s, params.deep).unwrap().ops > 0);
    let (mut flat, mut flat_w) = (Vec::new(), Vec::new());
    walk(&dir.path().join("files"), 0, &mut flat, &mut flat_w);
    assert_eq!(flat, vec![0; 50], "all files directly in files/");
    assert_eq!(flat_w, [50]);
    let (mut deep, mut deep_w) = (Vec::new(), Vec::new());
    walk(&dir.path().join("files-deep"), 0, &mut deep, &mut deep_w);
    assert_eq!(
        deep,
        vec![4; 50],
        "every file 4 directories below files-deep/"
    );
    assert!(deep_w.iter().all(|&n| n <= width as usize), "{deep_w:?}");

    // nvmfs builds the same tree.
    let shm = shm_tempdir();
    let target = crate::targets::nvmfs::NvmfsTarget::create(
        shm.path().join("img"),
        64 * MIB,
        params.inode_count,
    )
    .unwrap();
    let mut s = session::Session::new(&target, &params, "n", TargetKind::Nvmfs, &mut progress);
    assert!(meta::stat(&mut s, params.deep).unwrap().ops > 0);
    let (mut deep, mut deep_w) = (Vec::new(), Vec::new());
    walk_nvmfs(target.fs(), "/files-deep", 0, &mut deep, &mut deep_w);
    assert_eq!(deep, vec![4; 50]);
    assert!(deep_w.iter().all(|&n| n <= width as usize), "{deep_w:?}");
    // create-deep fills the tree it made and leaves it empty afterwards.
    meta::create_16k(&mut s, params.deep).unwrap();
    let (mut created, mut created_w) = (Vec::new(), Vec::new());
    walk_nvmfs(target.fs(), "/create-deep", 0, &mut created, &mut created_w);
    assert!(created.is_empty(), "{created:?}");
    assert_eq!(
        created_w.len(),
        1 + params.deep.dir_count(50),
        "the tree stays"
    );
    target.close().unwrap();
}

/// Stores through the mmap workload must reach the file as its read path sees it, at the
/// offsets the workload chose; loads must return the file's bytes at those offsets.
fn mmap_round_trip<F: crate::targets::api::MicroFs>(fs: &F) {
    use super::data::{mmap_workload, pattern, MMAP_IO, MMAP_STORE_SEED};
    use super::measure::Workload;
    use crate::targets::api::{MicroFile, MicroMap};
    let len = 64 * 1024;
    let name = fs.name("mapped");
    let mut model = pattern(len, 11);
    fs.create(&name).unwrap().write_all_at(&model, 0).unwrap();
    let file = fs.open_rw(&name).unwrap();

    let (mut load, _) = mmap_workload(fs, &file, false).unwrap();
    assert_eq!(load.map.len(), len as u64);
    for _ in 0..100 {
        assert!(load.prepare().unwrap());
        assert_eq!(load.offset % MMAP_IO as u64, 0);
        load.op().unwrap();
        let at = load.offset as usize;
        assert_eq!(load.buf, &model[at..at + MMAP_IO], "load at {at}");
    }
    drop(load);

    let (mut store, _) = mmap_workload(fs, &file, true).unwrap();
    let stored = pattern(MMAP_IO, MMAP_STORE_SEED);
    let mut offsets = std::collections::HashSet::new();
    for _ in 0..40 {
        store.prepare().unwrap();
        store.op().unwrap();
        let at = store.offset as usize;
        model[at..at + MMAP_IO].copy_from_slice(&stored);
        offsets.insert(at);
    }
    assert!(offsets.len() > 10, "random offsets: {offsets:?}");
    store.map.sync().unwrap();
    drop(store);
    let mut back = vec![0; len];
    fs.open_read(&name)
        .unwrap()
        .read_exact_at(&mut back, 0)
        .unwrap();
    assert!(back == model, "the read path sees exactly the stores");
    assert_ne!(back, pattern(len, 11));
}

#[test]
fn mmap_workloads_move_the_files_bytes_on_every_target() {
    let dir = shm_tempdir();
    mmap_round_trip(&crate::targets::sys::SysFs::new(dir.path()));
    let shm = shm_tempdir();
    let target =
        crate::targets::nvmfs::NvmfsTarget::create(shm.path().join("img"), 16 * MIB, 256).unwrap();
    mmap_round_trip(&target);
    target.close().unwrap();
}

/// A stand-in for the nvmfs binary: `run ... -- BIN ARGS` logs its arguments and runs BIN
/// ARGS (no preload); `bench micro ... --json F` writes one dir:/nvmfs record plus a memcpy
/// one, as the real child would, or fails when FAIL_CHILD is in its directory.
const FAKE_NVMFS: &str = r#"#!/bin/sh
dir=$(dirname "$0")
case "$1" in
run)
  echo "$@" > "$dir/run-args"
  while [ "$1" != "--" ]; do shift; done
  shift
  exec "$@" ;;
bench)
  if [ -e "$dir/FAIL_CHILD" ]; then echo "nvmfs bench: something broke" >&2; exit 3; fi
  json=
  while [ $# -gt 0 ]; do
    if [ "$1" = --json ]; then json=$2; fi
    shift
  done
  echo "[dir:/nvmfs] working in /nvmfs/nvmfs-bench-1" >&2
  echo "[dir:/nvmfs] randread-4k: 400 ops/s" >&2
  cat > "$json" <<EOF
[{"workload": "randread-4k", "target": "dir:/nvmfs", "kind": "kernel", "ops": 40,
  "elapsed_s": 0.1, "wall_s": 0.1, "ops_per_sec": 400.0, "bytes_per_op": 4096,
  "mib_per_sec": 1.5, "latency_ns": {"p50": 1, "p90": 2, "p99": 3, "p999": 4, "max": 5,
  "mean": 1.5}, "ratio_to_best_kernel": 1.0, "dir_depth": null, "final_sync_s": null,
  "notes": ["plain system calls without fsync; nvmfs operations are durable on return"]},
 {"workload": "seqread-1m", "target": "memcpy", "kind": "reference", "ops": 4,
  "elapsed_s": 0.1, "wall_s": 0.1, "ops_per_sec": 40.0, "bytes_per_op": 1048576,
  "mib_per_sec": 40.0, "latency_ns": {"p50": 1, "p90": 2, "p99": 3, "p999": 4, "max": 5,
  "mean": 1.5}, "ratio_to_best_kernel": null, "dir_depth": null, "final_sync_s": null,
  "notes": []}]
EOF
  echo "wrote 2 records to $json" >&2 ;;
esac
"#;

fn fake_nvmfs(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("nvmfs");
    std::fs::write(&bin, FAKE_NVMFS).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

#[test]
fn run_target_relabels_the_childs_records_and_cleans_up() {
    let shm = shm_tempdir();
    let bindir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(vec![TargetSpec::Run, TargetSpec::Tmpfs], shm.path());
    cfg.workloads = vec!["randread-4k".into()];
    cfg.nvmfs_bin = Some(fake_nvmfs(bindir.path()));
    let mut lines = Vec::new();
    let records = run(&cfg, &mut |s| lines.push(s.to_string())).unwrap();
    let got: Vec<_> = records
        .iter()
        .map(|r| (r.workload.as_str(), r.target.as_str(), r.kind))
        .collect();
    assert_eq!(
        got,
        [
            ("randread-4k", "run:nvmfs", TargetKind::Nvmfs),
            ("randread-4k", "tmpfs", TargetKind::Kernel),
            ("randread-4k", "memcpy", TargetKind::Reference)
        ]
    );
    let run = &records[0];
    assert_eq!(run.ops_per_sec, 400.0);
    assert_eq!(run.notes, [RUN_NOTE]);
    // Against tmpfs, measured in this run, not the child's own ratio.
    assert_eq!(
        run.ratio_to_best_kernel,
        Some(400.0 / records[1].ops_per_sec)
    );
    assert!(
        lines
            .iter()
            .any(|l| l == "[run:nvmfs] randread-4k: 400 ops/s"),
        "{lines:?}"
    );
    // The child ran under `run` with the image, the prefix and the workload flags.
    let args = std::fs::read_to_string(bindir.path().join("run-args")).unwrap();
    let image = shm
        .path()
        .join(format!("nvmfs-bench-{}-run.img", std::process::id()));
    for want in [
        format!("run --image {} --prefix /nvmfs -- ", image.display()),
        " bench micro --target dir:/nvmfs --seconds 0.03 --file-size 2097152 --files 40 \
            --depth 3 --image-size 67108864 --shm-dir "
            .to_string(),
        " --workload randread-4k".to_string(),
        " --no-references".to_string(),
    ] {
        assert!(args.contains(&want), "{args:?} lacks {want:?}");
    }
    assert_empty(shm.path());
}

#[test]
fn run_target_reports_a_failed_child_and_cleans_up() {
    let shm = shm_tempdir();
    let bindir = tempfile::tempdir().unwrap();
    let mut cfg = tiny(vec![TargetSpec::Run], shm.path());
    cfg.workloads = vec!["stat".into()];
    cfg.nvmfs_bin = Some(fake_nvmfs(bindir.path()));
    std::fs::write(bindir.path().join("FAIL_CHILD"), "").unwrap();
    let err = run(&cfg, &mut |_| {}).unwrap_err().to_string();
    assert!(
        err.contains("exit status: 3") && err.contains("nvmfs bench: something broke"),
        "{err}"
    );
    assert_empty(shm.path());

    cfg.nvmfs_bin = None;
    let err = run(&cfg, &mut |_| {}).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
    assert_empty(shm.path());
}

#[test]
fn threads_run_every_workload_disjoint_and_shared_and_clean_up() {
    let shm = shm_tempdir();
    let mut cfg = tiny(vec![TargetSpec::Nvmfs, TargetSpec::Tmpfs], shm.path());
    cfg.threads = 2;
    // Room for the threads' data files beside the one-thread run's.
    cfg.image_size_bytes += cfg.file_size_bytes;
    let records = run(&cfg, &mut |_| {}).unwrap();
    // 15 workloads x 2 targets x (1 thread, 2 disjoint, 2 shared) + seven references and
    // the 1 MiB copy's and store's limits with two threads.
    assert_eq!(records.len(), 15 * 2 * 3 + 9);
    for (workload, limit) in [("seqread-1m", "memcpy"), ("seqwrite-1m", "nt-store")] {
        let limits: Vec<_> = records
            .iter()
            .filter(|r| r.target == limit && r.workload == workload)
            .collect();
        assert_eq!(limits.len(), 2);
        assert_eq!(limits[1].sharing, Some(Sharing::Disjoint));
        assert_eq!(
            limits[1].scaling,
            Some(limits[1].ops_per_sec / limits[0].ops_per_sec)
        );
    }
    let two_thread_limit = |workload: &str| {
        records
            .iter()
            .find(|r| {
                r.kind == TargetKind::Reference
                    && r.workload == workload
                    && r.sharing == Some(Sharing::Disjoint)
            })
            .map(|r| r.ops_per_sec)
    };
    for name in all_workloads() {
        for target in ["nvmfs", "tmpfs"] {
            let runs: Vec<_> = records
                .iter()
                .filter(|r| r.workload == *name && r.target == target)
                .collect();
            let got: Vec<_> = runs.iter().map(|r| (r.threads, r.sharing)).collect();
            assert_eq!(
                got,
                [
                    (1, None),
                    (2, Some(Sharing::Disjoint)),
                    (2, Some(Sharing::Shared))
                ],
                "{name} on {target}"
            );
            let one = runs[0].ops_per_sec;
            assert_eq!(runs[0].scaling, None);
            assert_eq!(runs[0].core_link_ns, None, "one thread has no CPU link");
            for r in &runs[1..] {
                assert!(r.ops > 0, "{r:?}");
                // Measured beside every threaded run (None only when the probe's threads
                // could not run together, as on one CPU).
                assert!(r.core_link_ns.is_none_or(|ns| ns > 0.0), "{r:?}");
                assert_eq!(r.scaling, Some(r.ops_per_sec / one), "{r:?}");
                // Against tmpfs run the same way, never against its one-thread record.
                assert!(r.ratio_to_best_kernel.is_some(), "{r:?}");
                // Against the two-thread copy or store, the limits run with threads.
                let limit = two_thread_limit(name).filter(|_| r.sharing == Some(Sharing::Disjoint));
                assert_eq!(r.ratio_to_limit, limit.map(|l| l / r.ops_per_sec), "{r:?}");
            }
        }
    }
    let table = format_table(&records);
    assert!(
        table.lines().next().unwrap().contains("vs 1 thread")
            && table.lines().next().unwrap().contains("CPU link"),
        "{table}"
    );
    assert!(
        table.contains("2 disjoint") && table.contains("2 shared"),
        "{table}"
    );
    assert_empty(shm.path());
}

#[test]
fn tmpfs_threads_each_do_their_share_of_a_shared_unlink() {
    let shm = shm_tempdir();
    let mut cfg = tiny(vec![TargetSpec::Tmpfs], shm.path());
    cfg.threads = 2;
    cfg.workloads = vec!["unlink".into()];
    cfg.seconds = 2.0;
    let records = run(&cfg, &mut |_| {}).unwrap();
    // 40 files + a reserve of 4: each of two threads warms up on 2 and times 20.
    let shared = records
        .iter()
        .find(|r| r.sharing == Some(Sharing::Shared))
        .unwrap();
    assert_eq!(shared.ops, 40, "{shared:?}");
    let disjoint = records
        .iter()
        .find(|r| r.sharing == Some(Sharing::Disjoint))
        .unwrap();
    // Disjoint: each thread its own 20 files and a reserve of 2.
    assert_eq!(disjoint.ops, 40, "{disjoint:?}");
    assert_empty(shm.path());
}
