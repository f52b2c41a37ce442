//! Every personality, tiny, on nvmfs and on a kernel file system (a
//! scratch directory in /dev/shm or the temp dir).

use super::*;
use crate::targets::nvmfs::NvmfsTarget;
use crate::targets::sys::{DirTarget, ScratchDir};

fn tiny(p: Personality) -> RunConfig {
    let mut pc = PersonalityConfig::defaults(p);
    pc.files = 200;
    pc.threads = 4;
    pc.mean_file_size_bytes = 8 * 1024;
    if p == Personality::Fileserver {
        pc.dir_width = 5.0;
    }
    RunConfig {
        personality: pc,
        trials: 3,
        warmup_seconds: 0.02,
        // Bounded by operations, not time: on a loaded machine (CI runs the
        // test binaries in parallel on 2 cores) a short timed trial can
        // see its threads descheduled for the whole measured phase.
        run_seconds: 60.0,
        ops_max: Some(600),
        seed: 11,
    }
}

fn shm_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn check(result: &RunResult, cfg: &RunConfig, remounted: bool) {
    let name = cfg.personality.personality.name();
    assert_eq!(result.trials.len(), 3, "{name}: {:?}", result.stopped_early);
    assert!(result.trials[0].discarded && !result.trials[1].discarded);
    assert!(result.trials.iter().all(|t| t.remounted == remounted));
    let s = result.ops_per_sec.expect("two kept trials");
    assert_eq!(s.n, 2);
    assert!(s.mean > 0.0);
    let flowops = cfg.personality.flowops();
    // Over all trials every flowop of the loop ran.
    for (i, f) in flowops.iter().enumerate() {
        let ops: u64 = result.trials.iter().map(|t| t.flowops[i].ops).sum();
        assert!(ops > 0, "{name}: {} never ran", f.name);
    }
    for t in &result.trials {
        assert_eq!(t.flowops.len(), flowops.len());
        // Each thread runs the loop in order and records from the phase
        // switch to the stop, so counts differ by at most one partial loop
        // at each end per thread.
        let max = t.flowops.iter().map(|f| f.ops).max().unwrap();
        let min = t.flowops.iter().map(|f| f.ops).min().unwrap();
        assert!(
            max - min <= cfg.personality.threads as u64 * 2,
            "{name}: {min}..{max}"
        );
        assert!(t.summary.ops_per_sec > 0.0);
        assert!(t.cpu.user_seconds + t.cpu.system_seconds > 0.0);
        for f in &t.flowops {
            // With the machine loaded a short trial can miss a flowop, but
            // one that ran has its bytes and latencies.
            assert_eq!(f.ops == 0, f.latency_ns.max == 0, "{name} {}", f.name);
            assert!(f.latency_ns.p50 <= f.latency_ns.p99 && f.latency_ns.p99 <= f.latency_ns.max);
        }
    }
}

#[test]
fn every_personality_runs_on_nvmfs() {
    for p in Personality::ALL {
        let cfg = tiny(p);
        let image = shm_dir().join(format!(
            "nvmfs-fb-test-{}-{}.img",
            std::process::id(),
            p.name()
        ));
        let mut t = NvmfsTarget::create(image.clone(), 1 << 30, 4096).unwrap();
        let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
        check(&r, &cfg, true);
        // Fifty threads of creates, appends and deletes leave a consistent
        // image: fsck finds nothing after a clean unmount.
        let copy = image.with_extension("copy");
        t.remount().unwrap();
        std::fs::copy(&image, &copy).unwrap();
        let report = nvmfs::fsck::check_image(&copy).unwrap();
        std::fs::remove_file(&copy).unwrap();
        assert!(report.is_clean(), "{}: {report:?}", p.name());
        t.close().unwrap();
        assert!(!image.exists(), "image removed");
    }
}

#[test]
fn every_personality_runs_on_a_kernel_file_system() {
    for p in Personality::ALL {
        let cfg = tiny(p);
        let dir = shm_dir().join(format!("nvmfs-fb-test-{}-{}", std::process::id(), p.name()));
        let mut t = DirTarget::new(ScratchDir::create(dir.clone()).unwrap());
        let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
        check(&r, &cfg, false);
        drop(t);
        assert!(!dir.exists());
    }
}

#[test]
fn appends_are_uniform_below_iosize_and_reads_cover_whole_files() {
    let mut cfg = tiny(Personality::Webproxy);
    cfg.personality.append_size_bytes = 1000;
    cfg.trials = 1;
    cfg.ops_max = Some(8_000);
    let dir = shm_dir().join(format!("nvmfs-fb-test-{}-append", std::process::id()));
    let mut t = DirTarget::new(ScratchDir::create(dir).unwrap());
    let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
    let fl = &r.trials[0].flowops;
    let app = fl.iter().find(|f| f.name == "appendfilerand1").unwrap();
    // Mean of uniform [0, 999] is 499.5.
    let mean = app.bytes as f64 / app.ops as f64;
    assert!(app.ops > 200, "{} appends", app.ops);
    assert!((mean - 499.5).abs() < 60.0, "mean append {mean}");
}

#[test]
fn running_out_of_files_stops_early_with_the_reason() {
    // fileserver with 0% preallocated and 2 files: creates run out at once.
    let mut cfg = tiny(Personality::Fileserver);
    cfg.personality.files = 2;
    cfg.personality.prealloc_percent = 100;
    cfg.trials = 2;
    let dir = shm_dir().join(format!("nvmfs-fb-test-{}-early", std::process::id()));
    let mut t = DirTarget::new(ScratchDir::create(dir).unwrap());
    let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
    let why = r.stopped_early.expect("stopped early");
    assert!(why.contains("no absent file to create"), "{why}");
    assert_eq!(r.trials.len(), 1, "no further trials after an early stop");
}

#[test]
fn op_limit_bounds_a_trial() {
    let mut cfg = tiny(Personality::Webserver);
    cfg.run_seconds = 30.0;
    cfg.ops_max = Some(2_000);
    cfg.trials = 1;
    let dir = shm_dir().join(format!("nvmfs-fb-test-{}-opsmax", std::process::id()));
    let mut t = DirTarget::new(ScratchDir::create(dir).unwrap());
    let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
    let tr = &r.trials[0];
    assert!(
        tr.seconds < 10.0,
        "stopped by the op limit, took {}",
        tr.seconds
    );
    assert!(
        tr.summary.ops >= 2_000 && tr.summary.ops < 200_000,
        "{}",
        tr.summary.ops
    );
}
