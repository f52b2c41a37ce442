//! The study end to end, tiny: nvmfs and (as root) ext4 on a loop device,
//! the results directory, and cleanup after success and after a failure.

use super::*;
use crate::kernel;
use crate::targets::api::{MicroFile, MicroFs};

/// The leftover checks look at everything this process made, so every test of the crate
/// that provisions targets takes turns on this lock: the studies', the kernel module's, the
/// block-trace capture's (the file-mapping study's too: its timing would load the machine
/// under the others' timed phases).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes this process's turn to provision targets (a failed test poisons the lock; the
/// others still run).
pub(crate) fn provisioning_turn() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Quiet;

impl StudyProgress for Quiet {
    fn cell_started(&mut self, _: usize, _: usize, _: &str, _: &str) {}
    fn note(&mut self, _: &str) {}
    fn tick(&mut self, _: usize, _: usize, _: f64, _: bool) {}
    fn cell_done(&mut self, _: &Cell) {}
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn tiny_config(out: PathBuf, targets: &[&str], workloads: &[&str]) -> StudyConfig {
    let mut cfg = StudyConfig::for_size(Size::Quick, out);
    cfg.trials = 2;
    cfg.warmup_seconds = 0.05;
    // Bounded by operations so that a loaded machine still measures some.
    cfg.run_seconds = 60.0;
    cfg.ops_max = Some(2_000);
    // Under the tests' load the CPU link says nothing about placement.
    cfg.hold_placement = false;
    cfg.only_targets = targets.iter().map(|s| s.to_string()).collect();
    cfg.only_workloads = workloads.iter().map(|s| s.to_string()).collect();
    cfg
}

fn no_leftovers() {
    assert!(
        kernel::live_resources().is_empty(),
        "{:?}",
        kernel::live_resources()
    );
    // Only this process's mounts: a study running beside the tests has its own.
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let ours = format!("nvmfs-lab-mnt-{}-", std::process::id());
    assert!(!mounts.contains(&ours), "a lab mount is left: {mounts}");
    let shm: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("nvmfs-study-") || n.starts_with("nvmfs-lab-"))
                .filter(|n| n.contains(&format!("-{}", std::process::id())))
                .collect()
        })
        .unwrap_or_default();
    assert!(shm.is_empty(), "scratch files left in /dev/shm: {shm:?}");
}

#[test]
fn study_runs_and_writes_its_results_directory() {
    let _turn = provisioning_turn();
    let out = tempfile::tempdir().unwrap();
    let targets: &[&str] = if is_root() {
        &["nvmfs", "ext4"]
    } else {
        eprintln!("skipped part: not root, ext4 on a loop device not run");
        &["nvmfs", "tmpfs"]
    };
    let cfg = tiny_config(out.path().join("r"), targets, &["webserver", "varmail"]);
    let result = run_study(&nvm2015::STUDY, &cfg, &|| false, &mut Quiet).unwrap();
    assert_eq!(result.cells.len(), 4);
    for c in &result.cells {
        assert_eq!(c.status, CellStatus::Ok, "{} on {}", c.workload, c.target);
        let s = c.ops_per_sec().expect("one kept trial");
        assert!(s.mean > 0.0);
    }
    no_leftovers();
    let env = env::Environment::capture(&cfg.shm_dir);
    let w = report::write_all(&result, &env).unwrap();
    for name in [
        "config.json",
        "environment.json",
        "trials.csv",
        "results.json",
        "results.csv",
        "report.md",
        "fig4-webserver.svg",
    ] {
        let p = cfg.out_dir.join(name);
        assert!(p.is_file(), "{name} missing");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cfg.out_dir.join("results.json")).unwrap())
            .unwrap();
    assert_eq!(json["schema"], "nvmfs-lab/study-nvm-2015/v2");
    assert_eq!(json["rows"].as_array().unwrap().len(), 4);
    // trials.csv: a header and one row per trial (2 per cell).
    let csv = std::fs::read_to_string(cfg.out_dir.join("trials.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 4 * 2);
    assert_trials_csv_shape(&csv);
    let md = std::fs::read_to_string(cfg.out_dir.join("report.md")).unwrap();
    assert!(md.contains("## Findings of the paper, checked"));
    assert!(!w.findings.is_empty());
}

/// Every row of trials.csv has the header's columns, and `core_link_ns` is empty or a
/// positive number of nanoseconds.
fn assert_trials_csv_shape(csv: &str) {
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let link = header
        .iter()
        .position(|h| *h == "core_link_ns")
        .expect("a core_link_ns column");
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), header.len(), "{line}");
        assert!(
            f[link].is_empty() || f[link].parse::<f64>().is_ok_and(|ns| ns > 0.0),
            "{line}"
        );
    }
}

#[test]
fn a_failing_workload_is_reported_and_cleaned_up() {
    if !is_root() {
        eprintln!("skipped: needs root to provision ext4");
        return;
    }
    let _turn = provisioning_turn();
    // fileserver files of 64 MiB mean on the smallest device: the creates
    // and appends fill it and a flowop fails with ENOSPC.
    let out = tempfile::tempdir().unwrap();
    let mut cfg = tiny_config(out.path().join("r"), &["ext4"], &["fileserver"]);
    cfg.run_seconds = 2.0;
    cfg.ops_max = None;
    let mut w = nvm2015::workloads(Size::Quick).remove(0);
    let p = w.personality_mut().unwrap();
    p.mean_file_size_bytes = 64 << 20;
    p.files = 40;
    p.prealloc_percent = 50;
    let t = targets::discover(kernel::MIN_DEVICE_BYTES, &["ext4".into()]).unwrap();
    let cell = run_cell(
        &cfg,
        &w,
        &t[0],
        kernel::MIN_DEVICE_BYTES,
        &|| false,
        &mut Quiet,
    );
    match &cell.status {
        CellStatus::Failed(e) => assert!(
            e.contains("No space left") || e.contains("space"),
            "unexpected failure: {e}"
        ),
        other => panic!("expected ENOSPC, got {other:?}"),
    }
    no_leftovers();
}

#[test]
fn fuse_and_dir_targets_run_and_leave_nothing() {
    let _turn = provisioning_turn();
    let out = tempfile::tempdir().unwrap();
    let user_dir = tempfile::tempdir().unwrap();
    let dir_target = format!("dir:{}", user_dir.path().display());
    let fuse_ok = crate::targets::fuse::unavailable().is_none();
    if !fuse_ok {
        eprintln!("skipped part: FUSE cannot mount here, fuse:nvmfs not run");
    }
    let mut wanted = vec![dir_target.as_str()];
    if fuse_ok {
        wanted.push(targets::FUSE_NAME);
        wanted.push(targets::FUSE_WB_NAME);
    }
    if fuse_ok && switch_uring_on() {
        wanted.push(targets::FUSE_URING_NAME);
    } else {
        eprintln!("skipped part: no FUSE over io_uring here, fuse-uring:nvmfs not run");
    }
    let cfg = tiny_config(out.path().join("r"), &wanted, &["varmail"]);
    let result = run_study(&nvm2015::STUDY, &cfg, &|| false, &mut Quiet).unwrap();
    assert_eq!(result.cells.len(), wanted.len());
    for c in &result.cells {
        assert_eq!(c.status, CellStatus::Ok, "{} on {}", c.workload, c.target);
        let r = c.result.as_ref().unwrap().filebench().unwrap();
        // FUSE is remounted between trials; a directory the lab did not mount is not.
        let remounted = r.trials.iter().any(|t| t.remounted);
        let fuse = [
            targets::FUSE_NAME,
            targets::FUSE_URING_NAME,
            targets::FUSE_WB_NAME,
        ]
        .contains(&c.target.as_str());
        assert_eq!(remounted, fuse, "{}", c.target);
    }
    // None is a kernel variant nvmfs is compared with.
    assert!(!targets::is_kernel_variant(&dir_target));
    assert!(!targets::is_kernel_variant(targets::FUSE_NAME));
    assert!(!targets::is_kernel_variant(targets::FUSE_URING_NAME));
    assert!(targets::is_kernel_variant("xfs-ag126"));
    // The scratch subdirectory went, the user's directory stayed.
    assert_eq!(std::fs::read_dir(user_dir.path()).unwrap().count(), 0);
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        !mounts.contains("nvmfs-study-"),
        "a FUSE mount is left: {mounts}"
    );
    no_leftovers();
    let env = env::Environment::capture(&cfg.shm_dir);
    report::write_all(&result, &env).unwrap();
    let raw = format!("raw/varmail--{}.json", report::file_stem(&dir_target));
    assert!(cfg.out_dir.join(&raw).is_file(), "{raw} missing");
}

/// As root, switches the kernel's FUSE over io_uring on (the lab itself never does) and says
/// whether it is on.
fn switch_uring_on() -> bool {
    const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } == 0 && std::path::Path::new(PARAM).exists() {
        let _ = std::fs::write(PARAM, "Y");
    }
    nvmfs_fuse::io_uring_unavailable().is_none()
}

/// The FUSE forms other than the default one run only when named, and say how they mount.
#[test]
fn the_io_uring_and_writeback_fuse_targets_run_only_when_named() {
    let all = targets::discover(kernel::MIN_DEVICE_BYTES, &[]).unwrap();
    assert!(all.iter().any(|t| t.name == targets::FUSE_NAME));
    for (name, says) in [
        (targets::FUSE_URING_NAME, "io_uring"),
        (targets::FUSE_WB_NAME, "durable at fsync or close"),
    ] {
        assert!(!all.iter().any(|t| t.name == name), "{name}");
        let one = targets::discover(kernel::MIN_DEVICE_BYTES, &[name.to_string()]).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].name, name);
        assert!(one[0].description.contains(says), "{}", one[0].description);
        assert!(targets::is_nvmfs(name));
        assert!(!targets::is_kernel_variant(name));
    }
}

#[test]
fn bad_dir_targets_are_named() {
    let e = targets::discover(kernel::MIN_DEVICE_BYTES, &["dir:".into()]).unwrap_err();
    assert!(e.to_string().contains("needs a path"), "{e}");
    let e = targets::discover(kernel::MIN_DEVICE_BYTES, &["dir:/no/such/dir".into()]).unwrap_err();
    assert!(e.to_string().contains("/no/such/dir"), "{e}");
    let e = targets::discover(kernel::MIN_DEVICE_BYTES, &["fuse:other".into()]).unwrap_err();
    assert!(e.to_string().contains("unknown target"), "{e}");
}

#[test]
fn target_names_become_safe_file_names() {
    assert_eq!(report::file_stem("dir:/mnt/pmem 0"), "dir_mnt_pmem_0");
    assert_eq!(report::file_stem("fuse:nvmfs"), "fuse_nvmfs");
    assert_eq!(report::file_stem("xfs-ag126"), "xfs-ag126");
}

/// Tiny YCSB and TPC-C workloads: the study's own, shrunk.
fn tiny_database_workloads() -> Vec<workload::StudyWorkload> {
    let mut out = Vec::new();
    for mut w in nvm2015::database_workloads(Size::Quick) {
        match &mut w.config {
            workload::WorkloadConfig::Ycsb(y) if matches!(y.letter, 'a' | 'e') => {
                y.records = 500;
                y.fixed_load_ops_per_sec = 2_000.0;
            }
            workload::WorkloadConfig::Tpcc(t) => {
                t.scale = crate::tpcc::Scale {
                    items: 1_000,
                    customers_per_district: 30,
                };
            }
            _ => continue,
        }
        out.push(w);
    }
    out
}

#[test]
fn database_cells_run_check_their_databases_and_report_latency() {
    let _turn = provisioning_turn();
    let out = tempfile::tempdir().unwrap();
    let kernel = if is_root() { "ext4" } else { "tmpfs" };
    let mut cfg = tiny_config(out.path().join("r"), &["nvmfs", kernel], &[]);
    cfg.baseline = kernel.to_string();
    cfg.db = DbPhases {
        trials: 2,
        warmup_seconds: 0.0,
        run_seconds: 0.2,
    };
    let workloads = tiny_database_workloads();
    assert_eq!(workloads.len(), 3, "tpcc, ycsb-a, ycsb-e");
    let targets = targets::discover(kernel::MIN_DEVICE_BYTES, &cfg.only_targets).unwrap();
    let mut cells = Vec::new();
    for w in &workloads {
        for t in &targets {
            let c = run_cell(&cfg, w, t, kernel::MIN_DEVICE_BYTES, &|| false, &mut Quiet);
            assert_eq!(c.status, CellStatus::Ok, "{} on {}", c.workload, c.target);
            let d = c.result.as_ref().unwrap().database().unwrap();
            assert!(d.ops_per_sec.unwrap().mean > 0.0);
            assert_eq!(d.trials.len(), 2);
            assert!(d.trials[0].discarded && !d.trials[1].discarded);
            assert_eq!(d.trials[1].remounted, t.name != "tmpfs", "{}", t.name);
            assert!(
                d.checks.iter().any(|c| c.contains("integrity_check: ok")),
                "{:?}",
                d.checks
            );
            if w.id == "tpcc" {
                assert_eq!(d.metric, "tpmC");
                assert!(d.checks.iter().any(|c| c.contains("consistency")));
                assert!(d.latency("New-Order").is_some(), "{:?}", d.latency_mean_ns);
            } else {
                let fixed = d.trials[1].fixed_load.as_ref().expect("fixed-load phase");
                assert_eq!(fixed.offered_ops_per_sec, 2_000.0);
                // The offered load is far below what either target sustains.
                assert!(fixed.achieved_ops_per_sec > 1_000.0, "{fixed:?}");
                let ops: &[&str] = if w.id == "ycsb-a" {
                    &["READ", "UPDATE"]
                } else {
                    &["SCAN", "INSERT"]
                };
                for op in ops {
                    assert!(d.latency(op).is_some(), "{op} on {}", t.name);
                }
            }
            cells.push(c);
        }
    }
    no_leftovers();
    let result = StudyResult {
        study: &nvm2015::STUDY,
        config: cfg.clone(),
        workloads,
        targets,
        cells,
        interrupted: false,
        wall_seconds: 0.0,
    };
    let env = env::Environment::capture(&cfg.shm_dir);
    report::write_all(&result, &env).unwrap();
    for name in [
        "fig5-tpcc.svg",
        "fig6-ycsb-a-latency.svg",
        "fig10-ycsb-e-latency.svg",
    ] {
        assert!(cfg.out_dir.join(name).is_file(), "{name} missing");
    }
    let md = std::fs::read_to_string(cfg.out_dir.join("report.md")).unwrap();
    assert!(md.contains("YCSB latency at a fixed offered load"), "{md}");
    let trials = std::fs::read_to_string(cfg.out_dir.join("trials.csv")).unwrap();
    assert_eq!(trials.lines().count(), 1 + 3 * 2 * 2);
    assert_trials_csv_shape(&trials);
}

/// Seed 001's cell kinds, shrunk: filemark at two thread counts, pgmeter at two outstanding
/// I/O counts, a two-point AIM7 sweep.
fn tiny_fsbench_workloads() -> Vec<workload::StudyWorkload> {
    let keep = [
        "filemark-small-t1",
        "filemark-small-t4",
        "pgmeter-oltp-o1",
        "pgmeter-oltp-o4",
        "aim7",
    ];
    let mut out = Vec::new();
    for mut w in linux2002::workloads(Size::Quick) {
        if !keep.contains(&w.id.as_str()) {
            continue;
        }
        match &mut w.config {
            workload::WorkloadConfig::Filemark(f) => {
                f.config.files = 200;
                f.config.transactions = 400;
            }
            workload::WorkloadConfig::Pgmeter(p) => p.file_size_bytes = 4 << 20,
            workload::WorkloadConfig::Aim7(a) => {
                a.config.task_counts = vec![1, 2];
                a.config.period_seconds = Some(0.1);
            }
            _ => unreachable!("linux-2002 has no other kinds"),
        }
        out.push(w);
    }
    out
}

/// Checks what every fsbench cell of the tiny run must show.
fn check_fsbench_cell(c: &Cell, w: &workload::StudyWorkload) {
    assert_eq!(c.status, CellStatus::Ok, "{} on {}", c.workload, c.target);
    let b = c
        .result
        .as_ref()
        .unwrap()
        .fsbench()
        .expect("an fsbench result");
    assert_eq!(b.trials.len(), 2, "{} on {}", c.workload, c.target);
    assert!(b.trials[0].discarded && !b.trials[1].discarded);
    assert_eq!(b.trials[1].remounted, c.target != "tmpfs", "{}", c.target);
    let s = b.ops_per_sec.expect("a kept trial");
    assert!(s.mean > 0.0 && s.n == 1, "{s:?}");
    match &w.config {
        workload::WorkloadConfig::Filemark(_) => {
            assert_eq!(b.metric, "transactions/s");
            for t in &b.trials {
                assert_eq!(t.ops, 400);
                assert!((t.value - t.ops as f64 / t.seconds).abs() < 1e-6 * t.value);
            }
            assert_eq!(s.mean, b.trials[1].value);
        }
        workload::WorkloadConfig::Pgmeter(_) => {
            assert_eq!(b.metric, "ops/s");
            assert!(b.trials.iter().all(|t| t.ops > 0 && t.mb_per_sec > 0.0));
            assert!(b.setup_seconds > 0.0, "preallocation timed");
        }
        workload::WorkloadConfig::Aim7(_) => {
            assert_eq!(b.metric, "jobs/min");
            let sweep = b.sweep().expect("AIM7's curve");
            let xs: Vec<f64> = sweep.points.iter().map(|p| p.x).collect();
            assert_eq!(xs, [1.0, 2.0]);
            let peak = sweep.points.iter().find(|p| Some(p.x) == sweep.peak_x);
            assert_eq!(peak.map(|p| p.value.mean), Some(s.mean));
            assert!(sweep.points.iter().all(|p| p.value.mean <= s.mean));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn linux2002_cells_run_and_write_scaling_figures() {
    let _turn = provisioning_turn();
    let out = tempfile::tempdir().unwrap();
    let kernel = if is_root() { "ext4" } else { "tmpfs" };
    let mut cfg = linux2002::config(Size::Quick, out.path().join("r"));
    cfg.trials = 2;
    cfg.warmup_seconds = 0.02;
    cfg.run_seconds = 0.1;
    cfg.only_targets = vec!["nvmfs".into(), kernel.into()];
    let workloads = tiny_fsbench_workloads();
    assert_eq!(workloads.len(), 5);
    let device = targets::device_size_bytes(&workloads);
    let targets =
        targets::discover_for(&linux2002::TARGETS, device, &cfg.only_targets, &cfg.runner).unwrap();
    assert_eq!(targets.len(), 2, "{targets:?}");
    let mut cells = Vec::new();
    for w in &workloads {
        for t in &targets {
            let c = run_cell(&cfg, w, t, device, &|| false, &mut Quiet);
            check_fsbench_cell(&c, w);
            cells.push(c);
        }
    }
    no_leftovers();
    let result = StudyResult {
        study: &linux2002::STUDY,
        config: cfg.clone(),
        workloads,
        targets,
        cells,
        interrupted: false,
        wall_seconds: 0.0,
    };
    let env = env::Environment::capture_for(&linux2002::STUDY, &cfg.shm_dir);
    assert!(env.emulation.iter().any(|e| e.contains("2.4.17")));
    let w = report::write_all(&result, &env).unwrap();
    for name in [
        "fig1-filemark-small.svg",
        "fig5-pgmeter-oltp.svg",
        "fig11-aim7.svg",
        "raw/aim7--nvmfs.json",
    ] {
        assert!(cfg.out_dir.join(name).is_file(), "{name} missing");
    }
    let svg = std::fs::read_to_string(cfg.out_dir.join("fig11-aim7.svg")).unwrap();
    assert!(svg.contains("<circle"), "a line chart's markers");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cfg.out_dir.join("results.json")).unwrap())
            .unwrap();
    assert_eq!(json["schema"], "nvmfs-lab/study-linux-2002/v2");
    assert_eq!(json["rows"].as_array().unwrap().len(), 10);
    assert_eq!(json["baseline"], "ext2");
    let checks = json["findings"].as_array().unwrap();
    assert_eq!(checks.len(), linux2002::findings().len());
    let trials = std::fs::read_to_string(cfg.out_dir.join("trials.csv")).unwrap();
    assert_eq!(trials.lines().count(), 1 + 5 * 2 * 2);
    let md = std::fs::read_to_string(cfg.out_dir.join("report.md")).unwrap();
    for part in [
        "## Scaling curves",
        "### Fig. 1: filemark-small (transactions/s)",
        "| tasks | nvmfs |",
        "**Scaling on",
    ] {
        assert!(md.contains(part), "{part} missing from report.md");
    }
    // nvmfs is compared with the kernel target on every workload.
    let best = w
        .rows
        .iter()
        .filter(|r| r.target == "nvmfs")
        .filter(|r| r.best_kernel.as_deref() == Some(kernel))
        .count();
    assert_eq!(best, 5);
}

#[test]
fn linux2002_targets_are_the_papers_file_systems() {
    let plan = &linux2002::TARGETS;
    let all = targets::discover_for(
        plan,
        kernel::MIN_DEVICE_BYTES,
        &[],
        &targets::Runner::Absent,
    )
    .unwrap();
    let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
    for wanted in [
        "nvmfs",
        "fuse:nvmfs",
        "ext2",
        "ext3",
        "ext3-writeback",
        "xfs",
        "ext4",
        "btrfs",
        "reiserfs",
        "jfs",
    ] {
        assert!(names.contains(&wanted), "{wanted} missing from {names:?}");
    }
    for not_in_paper in ["ext3-journal", "ext4-nodelalloc", "tmpfs", "ext2-xip"] {
        assert!(!names.contains(&not_in_paper), "{not_in_paper} listed");
    }
    let by = |n: &str| all.iter().find(|t| t.name == n).unwrap();
    assert_eq!(by("nvmfs").paper_name, None);
    assert_eq!(by("ext2").paper_name.as_deref(), Some("Ext2"));
    assert_eq!(
        by("ext3-writeback").paper_name.as_deref(),
        Some("Ext3 writeback")
    );
    assert_eq!(by("ext4").paper_name, None);
    // ReiserFS and JFS: unavailable with the reason when this kernel lacks them.
    for (name, fs) in [("reiserfs", "reiserfs"), ("jfs", "jfs")] {
        if !targets::kernel_lists(fs) {
            let why = by(name).unavailable.as_deref().unwrap_or("");
            assert!(
                why.contains("/proc/filesystems") || why.contains("root"),
                "{why}"
            );
        }
    }
    // A catalogue variant outside the plan runs when asked for by name.
    let asked = targets::discover_for(
        plan,
        kernel::MIN_DEVICE_BYTES,
        &["tmpfs".into()],
        &targets::Runner::Absent,
    )
    .unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (asked[0].name.as_str(), asked[0].paper_name.as_deref()),
        ("tmpfs", None)
    );
    let e = targets::discover_for(
        plan,
        kernel::MIN_DEVICE_BYTES,
        &["zfs".into()],
        &targets::Runner::Absent,
    )
    .unwrap_err();
    assert!(e.to_string().contains("reiserfs"), "{e}");
    // nvm-2015's plan is the whole catalogue, with seed 000's names.
    let seed0 = targets::discover(kernel::MIN_DEVICE_BYTES, &[]).unwrap();
    let nv = seed0.iter().find(|t| t.name == "nvmfs").unwrap();
    assert_eq!(nv.paper_name.as_deref(), Some("pmfs"));
    assert!(seed0.iter().any(|t| t.name == "ext3-journal"));
    assert!(seed0.iter().any(|t| t.name == "ext2-xip"));
    assert!(!seed0.iter().any(|t| t.name == "reiserfs"));
}

#[test]
fn run_nvmfs_is_listed_by_plan_and_available_with_a_runner() {
    use targets::{Runner, RUN_NAME};
    let dev = kernel::MIN_DEVICE_BYTES;
    let run = |plan, only: &[String], runner: &Runner| {
        targets::discover_for(plan, dev, only, runner)
            .unwrap()
            .into_iter()
            .find(|t| t.name == RUN_NAME)
    };
    let bin = Runner::Binary(PathBuf::from("/usr/bin/nvmfs"));
    // linux-2002 runs it by default; available only with a binary to start.
    let t = run(&linux2002::TARGETS, &[], &bin).expect("listed");
    assert!(t.is_run() && t.unavailable.is_none(), "{t:?}");
    let t = run(&linux2002::TARGETS, &[], &Runner::Absent).expect("listed");
    assert!(t.unavailable.unwrap().contains("nvmfs run"));
    let why = Runner::Unavailable("no libnvmfs_preload.so".into());
    let t = run(&linux2002::TARGETS, &[], &why).expect("listed");
    assert_eq!(t.unavailable.as_deref(), Some("no libnvmfs_preload.so"));
    // nvm-2015 only when named.
    assert!(run(&targets::CATALOGUE, &[], &bin).is_none());
    assert!(run(&targets::CATALOGUE, &[RUN_NAME.into()], &bin).is_some());
    assert!(run(&linux2002::TARGETS, &["ext2".into()], &bin).is_none());
    // It is nvmfs, never the best kernel variant.
    assert!(targets::is_nvmfs(RUN_NAME) && !targets::is_kernel_variant(RUN_NAME));
    // This process cannot host it: a cell must go to a child.
    let t = run(&targets::CATALOGUE, &[RUN_NAME.into()], &bin).unwrap();
    let spec = targets::ImageSpec {
        bytes: 64 << 20,
        inodes: 1024,
    };
    let e = targets::StudyTarget::create_sized(&t, std::path::Path::new("/dev/shm"), 0, spec)
        .err()
        .unwrap();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
}

/// The child's cell comes back whole, a one-trial interval's infinite half-width and a NaN
/// included (JSON would turn them into null and fail to read them back).
#[test]
fn a_cell_round_trips_through_cbor() {
    let summary = crate::stats::Summary::of(&[5.0]).unwrap();
    assert!(summary.ci95_half_width.is_infinite(), "{summary:?}");
    let cell = Cell {
        workload: "aim7".into(),
        target: "dir:/nvmfs".into(),
        paper_name: None,
        status: CellStatus::StoppedEarly("full".into()),
        result: Some(CellResult::FsBench(fsbench::BenchResult {
            program: fsbench::Program::Aim7,
            metric: "jobs/min".into(),
            setup_seconds: 0.0,
            setup: serde_json::Value::Null,
            trials: Vec::new(),
            ops_per_sec: Some(summary),
            mb_per_sec: Some(f64::NAN),
            sweep: None,
            stopped_early: Some("full".into()),
        })),
        provision: Some(serde_json::json!({"directory": "/nvmfs/x"})),
        wall_seconds: 1.5,
    };
    let mut bytes = Vec::new();
    ciborium::into_writer(&cell, &mut bytes).unwrap();
    let back: Cell = ciborium::from_reader(bytes.as_slice()).unwrap();
    assert_eq!(back.status, cell.status);
    assert_eq!(back.provision, cell.provision);
    let s = back.ops_per_sec().unwrap();
    assert_eq!(s.mean, 5.0);
    assert_eq!(s.ci95_half_width, f64::INFINITY);
    let mb = back.result.as_ref().and_then(|r| r.fsbench()?.mb_per_sec);
    assert!(mb.is_some_and(f64::is_nan), "{mb:?}");
    assert!(serde_json::from_slice::<Cell>(&serde_json::to_vec(&cell).unwrap()).is_err());
}

#[test]
fn studies_are_found_by_name() {
    assert_eq!(find("nvm-2015").map(|s| s.name), Some("nvm-2015"));
    assert_eq!(find("linux-2002").map(|s| s.name), Some("linux-2002"));
    assert!(find("nope").is_none());
    let names: Vec<&str> = STUDIES.iter().map(|s| s.name).collect();
    assert_eq!(names, ["nvm-2015", "linux-2002"]);
}

/// Writes a file through `visit` and reports whether the target could be remounted and
/// whether the file survived it.
struct WriteRemountRead;

impl targets::TargetVisitor for WriteRemountRead {
    type Output = std::io::Result<(bool, u64)>;

    fn visit<T: crate::filebench::LabTarget>(self, target: &mut T) -> Self::Output
    where
        <T::Fs as MicroFs>::Name: Send + Sync,
        <T::Fs as MicroFs>::File: Send,
    {
        let fs = target.fs();
        let f = fs.create(&fs.name("visited"))?;
        f.write_all_at(b"12345", 0)?;
        drop(f);
        let remounted = target.remount()?;
        let fs = target.fs();
        Ok((remounted, fs.stat(&fs.name("visited"))?))
    }
}

#[test]
fn visit_reaches_each_kind_of_target_as_a_lab_target() {
    let _turn = provisioning_turn();
    let parent = tempfile::tempdir().unwrap();
    let mut dir = targets::StudyTarget::dir(parent.path(), "visited-dir").unwrap();
    assert_eq!(dir.visit(WriteRemountRead).unwrap(), (false, 5));
    dir.close().unwrap();
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    let entry = targets::discover(kernel::MIN_DEVICE_BYTES, &["nvmfs".into()])
        .unwrap()
        .remove(0);
    let image = targets::ImageSpec {
        bytes: 64 << 20,
        inodes: 4096,
    };
    let mut nv = targets::StudyTarget::create_sized(&entry, parent.path(), 0, image).unwrap();
    assert_eq!(nv.visit(WriteRemountRead).unwrap(), (true, 5));
    nv.close().unwrap();
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
}
