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
    if p == Personality::Oltp {
        pc = tiny_oltp();
    }
    RunConfig {
        personality: pc,
        trials: 3,
        extra_trials: 0,
        warmup_seconds: 0.02,
        // Bounded by operations, not time: on a loaded machine (CI runs the
        // test binaries in parallel on 2 cores) a short timed trial can
        // see its threads descheduled for the whole measured phase.
        run_seconds: 60.0,
        ops_max: Some(600),
        seed: 11,
        // Under the tests' load the CPU link says nothing about placement.
        hold_placement: false,
    }
}

/// oltp with oltp.f's structure at a size that loops many times in 600 ops:
/// 4 data files of 256 KiB, 4 shadows, 2 database writers doing 10 writes
/// per loop, and semaphore values that let the writers run every few dozen
/// reads.
fn tiny_oltp() -> PersonalityConfig {
    let mut pc = PersonalityConfig::defaults(Personality::Oltp);
    pc.files = 4;
    pc.threads = 4;
    pc.mean_file_size_bytes = 256 * 1024;
    pc.oltp = Some(OltpConfig {
        db_writers: 2,
        log_file_size_bytes: 1 << 20,
        log_iosize_bytes: 64 * 1024,
        dbwr_iters: 10,
        dbwr_hog: 100,
        shadow_hog: 1_000,
        lg_block_value: 32,
        lg_block_highwater: 10,
        dbwr_block_value: 10,
        dbwr_block_highwater: 20,
        ..OltpConfig::default()
    });
    pc
}

/// Process id and a random number: a file left by a killed run (whose pid may come again)
/// never collides with this run's scratch names.
fn unique() -> String {
    format!("{}-{:016x}", std::process::id(), fastrand::u64(..))
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
    let workload = cfg.personality.workload();
    let flowops = &workload.flowops;
    // Over all trials every flowop of every loop ran.
    for (i, f) in flowops.iter().enumerate() {
        let ops: u64 = result.trials.iter().map(|t| t.flowops[i].ops).sum();
        assert!(ops > 0, "{name}: {} never ran", f.name);
    }
    for t in &result.trials {
        assert_eq!(t.flowops.len(), flowops.len());
        // Each thread runs its group's loop in order and records from the
        // phase switch to the stop, so within a group the loop counts
        // (ops / iters) differ by at most one partial loop at each end per
        // thread.
        for g in &workload.groups {
            let loops = || {
                g.flowops
                    .clone()
                    .map(|i| t.flowops[i].ops / u64::from(flowops[i].iters))
            };
            let (min, max) = (loops().min().unwrap(), loops().max().unwrap());
            assert!(
                max - min <= g.instances as u64 * 2,
                "{name} {}: {min}..{max}",
                g.name
            );
        }
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
        let image = shm_dir().join(format!("nvmfs-fb-test-{}-{}.img", unique(), p.name()));
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
        let dir = shm_dir().join(format!("nvmfs-fb-test-{}-{}", unique(), p.name()));
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
    let dir = shm_dir().join(format!("nvmfs-fb-test-{}-append", unique()));
    let mut t = DirTarget::new(ScratchDir::create(dir).unwrap());
    let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
    let fl = &r.trials[0].flowops;
    let app = fl.iter().find(|f| f.name == "appendfilerand1").unwrap();
    // Mean of uniform [0, 999] is 499.5.
    let mean = app.bytes as f64 / app.ops as f64;
    assert!(app.ops > 200, "{} appends", app.ops);
    assert!((mean - 499.5).abs() < 60.0, "mean append {mean}");
}

/// webserver's log is rewritten to its preallocated size before every trial after the first
/// (filebench makes its filesets anew per run): when `run` says the filesets are restored,
/// the file has that size, though every trial appended to it.
#[test]
fn the_log_starts_every_trial_at_its_preallocated_size() {
    let cfg = tiny(Personality::Webserver);
    let dir = shm_dir().join(format!("nvmfs-fb-test-{}-log", unique()));
    let mut t = DirTarget::new(ScratchDir::create(dir.clone()).unwrap());
    let spec = cfg.personality.log_fileset().expect("webserver has a log");
    let log = Fileset::build(&spec, cfg.seed ^ 0x106).unwrap();
    let f = log
        .files
        .iter()
        .find(|f| f.prealloc)
        .expect("a preallocated log");
    let path = dir.join(&f.path);
    let size = || std::fs::metadata(&path).unwrap().len();
    let mut at_rewrites = Vec::new();
    let r = run(&mut t, &cfg, &|| false, &mut |p| {
        if matches!(p, Progress::Setup(m) if m == FILESETS_RESTORED) {
            at_rewrites.push(size());
        }
    })
    .unwrap();
    let appended = |t: &TrialResult| {
        let app = t.flowops.iter().find(|f| f.name == "appendlog").unwrap();
        app.bytes
    };
    assert!(r.trials.iter().all(|t| appended(t) > 0));
    assert_eq!(at_rewrites, [f.size_bytes, f.size_bytes]);
    assert!(size() >= f.size_bytes + appended(r.trials.last().unwrap()));
}

/// Every regular file under `dir` with its size, by path relative to `dir`.
fn files_under(dir: &std::path::Path) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                todo.push(e.path());
            } else {
                let rel = e
                    .path()
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, meta.len());
            }
        }
    }
    out
}

/// fileserver creates, deletes and appends; before every trial after the first the files on
/// disk are again exactly the preallocated ones at their sizes, so no trial inherits the last
/// one's unmatched creates (which used to use up the absent files) or grown files.
#[test]
fn every_trial_starts_from_the_populated_fileset() {
    let mut cfg = tiny(Personality::Fileserver);
    cfg.trials = 4;
    let dir = shm_dir().join(format!("nvmfs-fb-test-{}-restore", unique()));
    let mut t = DirTarget::new(ScratchDir::create(dir.clone()).unwrap());
    let set = Fileset::build(&cfg.personality.main_fileset(), cfg.seed).unwrap();
    let want: std::collections::BTreeMap<String, u64> = set
        .files
        .iter()
        .filter(|f| f.prealloc)
        .map(|f| (f.path.trim_start_matches('/').to_string(), f.size_bytes))
        .collect();
    assert!(want.len() < set.files.len(), "some files start absent");
    let mut restores = 0;
    let mut changed_by_trial = 0;
    let r = run(&mut t, &cfg, &|| false, &mut |p| match p {
        Progress::Setup(m) if m == FILESETS_RESTORED => {
            restores += 1;
            let got = files_under(&dir);
            let differ: Vec<_> = got
                .iter()
                .filter(|(k, v)| want.get(*k) != Some(v))
                .chain(want.iter().filter(|(k, _)| !got.contains_key(*k)))
                .take(5)
                .collect();
            assert!(differ.is_empty(), "after restore {restores}: {differ:?}");
        }
        Progress::TrialDone(_) => changed_by_trial += (files_under(&dir) != want) as usize,
        _ => {}
    })
    .unwrap();
    assert!(r.stopped_early.is_none(), "{:?}", r.stopped_early);
    assert_eq!((r.trials.len(), restores), (4, 3));
    assert!(changed_by_trial > 0, "the trials changed the fileset");
}

#[test]
fn running_out_of_files_stops_early_with_the_reason() {
    // fileserver with 0% preallocated and 2 files: creates run out at once.
    let mut cfg = tiny(Personality::Fileserver);
    cfg.personality.files = 2;
    cfg.personality.prealloc_percent = 100;
    cfg.trials = 2;
    let dir = shm_dir().join(format!("nvmfs-fb-test-{}-early", unique()));
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
    let dir = shm_dir().join(format!("nvmfs-fb-test-{}-opsmax", unique()));
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

fn scratch(tag: &str) -> DirTarget {
    let dir = shm_dir().join(format!("nvmfs-fb-test-{}-{tag}", unique()));
    DirTarget::new(ScratchDir::create(dir).unwrap())
}

fn ops_of(t: &TrialResult, name: &str) -> u64 {
    t.flowops.iter().find(|f| f.name == name).unwrap().ops
}

#[test]
fn oltp_op_limit_stops_threads_blocked_on_semaphores() {
    // The writers wait for 2^30 posts, far more than this trial does, so at
    // the op limit they are blocked in their semblock (and the shadows, past
    // the highwater mark, in their sempost). The trial must still end (the
    // semaphores are closed) and not count the unfinished waits.
    let mut pc = tiny_oltp();
    pc.oltp = Some(OltpConfig {
        db_writers: 2,
        log_file_size_bytes: 1 << 20,
        log_iosize_bytes: 64 * 1024,
        lg_block_value: 1 << 30,
        dbwr_block_value: 1 << 30,
        ..OltpConfig::default()
    });
    let cfg = RunConfig {
        personality: pc,
        trials: 1,
        extra_trials: 0,
        warmup_seconds: 0.0,
        run_seconds: 60.0,
        ops_max: Some(300),
        seed: 5,
        hold_placement: false,
    };
    let mut t = scratch("oltp-stop");
    let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
    let tr = &r.trials[0];
    assert!(r.stopped_early.is_none(), "{:?}", r.stopped_early);
    assert!(tr.seconds < 20.0, "took {} s", tr.seconds);
    assert_eq!(ops_of(tr, "lg-block"), 0, "2^30 posts never arrived");
    assert_eq!(ops_of(tr, "dbwr-block"), 0, "2^30 posts never arrived");
    // The shadows stopped at the highwater mark: 1000 posts to the log
    // writer's semaphore (a read ends each loop before the post).
    let reads = ops_of(tr, "shadowread");
    assert!(reads <= 1000 + 4, "{reads} reads");
    // Before blocking, each writer did at most its first loop's writes.
    assert!(ops_of(tr, "dbwrite-a") <= 2 * 100);
    assert!(ops_of(tr, "lg-write") <= 1);
    assert!(tr.summary.ops >= 300, "{}", tr.summary.ops);
}

#[test]
fn oltp_semaphores_pace_writers_by_reads() {
    // highwater 0: a shadow's blocking post waits until the writer's
    // semblock has made room, and the writer passes its semblock only after
    // `value` posts. So each database writer does `iters` writes per
    // `value` reads and the log writer one write per `lg value` reads,
    // whatever the relative speeds of the threads.
    let mut pc = tiny_oltp();
    pc.threads = 3;
    pc.oltp = Some(OltpConfig {
        db_writers: 1,
        dbwr_iters: 5,
        dbwr_block_value: 10,
        dbwr_block_highwater: 0,
        lg_block_value: 32,
        lg_block_highwater: 0,
        ..tiny_oltp().oltp()
    });
    let cfg = RunConfig {
        personality: pc,
        trials: 1,
        extra_trials: 0,
        warmup_seconds: 0.0,
        run_seconds: 60.0,
        ops_max: Some(3_000),
        seed: 9,
        hold_placement: false,
    };
    let mut t = scratch("oltp-pace");
    let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
    let tr = &r.trials[0];
    let reads = ops_of(tr, "shadowread");
    let writes = ops_of(tr, "dbwrite-a");
    let log = ops_of(tr, "lg-write");
    assert!(reads > 1_000, "{reads} reads");
    // Loop boundaries allow one loop of slack on each side.
    let want = reads as f64 * 5.0 / 10.0;
    assert!(
        (writes as f64 - want).abs() <= 5.0 * 3.0 + 10.0,
        "{writes} writes for {reads} reads"
    );
    let want_log = reads as f64 / 32.0;
    assert!(
        (log as f64 - want_log).abs() <= 3.0,
        "{log} log writes for {reads} reads"
    );
    // Every read is 2 KiB at a 2 KiB-aligned offset inside the file.
    let rd = tr.flowops.iter().find(|f| f.name == "shadowread").unwrap();
    assert_eq!(rd.bytes, reads * 2048);
    assert_eq!(
        tr.summary.ops,
        reads + writes + log,
        "semaphores and hog are not in the IO summary"
    );
}

/// With the placement rule on, a run still counts exactly its trials: set-aside trials (any
/// the probe judged far) come on top, each discarded and with its reason, at most one per
/// trial, and the summary is over the counted ones only.
#[test]
fn set_aside_trials_are_run_again_and_not_counted() {
    let dir = shm_dir().join(format!("nvmfs-fb-test-{}-placement", unique()));
    let mut target = DirTarget::new(ScratchDir::create(dir.clone()).unwrap());
    let mut cfg = tiny(Personality::Webserver);
    cfg.hold_placement = true;
    let r = run(&mut target, &cfg, &|| false, &mut |_| {}).unwrap();
    let counted = r.trials.iter().filter(|t| !t.discarded).count();
    assert_eq!(counted, cfg.trials - 1, "{:?}", r.trials);
    let aside: Vec<_> = r.trials.iter().filter(|t| t.set_aside.is_some()).collect();
    assert!(aside.iter().all(|t| t.discarded), "{aside:?}");
    assert_eq!(r.trials.len(), cfg.trials + aside.len());
    assert!(aside.len() <= cfg.trials);
    assert!(r.trials[0].discarded && r.trials[0].set_aside.is_none());
    assert_eq!(r.ops_per_sec.as_ref().map(|s| s.n), Some(counted));
    let indexes: Vec<_> = r.trials.iter().map(|t| t.index).collect();
    assert_eq!(indexes, (0..r.trials.len()).collect::<Vec<_>>());
    drop(target);
    assert!(!dir.exists());
}

/// Seed 001's rule: after its trials, a run goes on while its kept trials' 95% interval is
/// wider than 10% of their mean, up to `extra_trials` more, and stops as soon as it is not.
/// Tiny op-bounded trials under the tests' load vary a lot, so runs here often take extras.
#[test]
fn extra_trials_run_while_the_interval_is_wide_and_stop_when_it_narrows() {
    let mut cfg = tiny(Personality::Webserver);
    cfg.extra_trials = 4;
    let mut t = scratch("extra-trials");
    let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
    let kept: Vec<f64> = r
        .trials
        .iter()
        .filter(|t| !t.discarded)
        .map(|t| t.summary.ops_per_sec)
        .collect();
    let least = cfg.trials - 1;
    assert!(
        (least..=least + cfg.extra_trials).contains(&kept.len()),
        "{} kept",
        kept.len()
    );
    let wide = |n: usize| Summary::of(&kept[..n]).unwrap().relative_ci() > crate::stats::CI_TARGET;
    // Every extra trial was run because the interval before it was wide...
    for n in least..kept.len() {
        assert!(
            wide(n),
            "trial {} ran after {n} kept ones within 10%: {kept:?}",
            n + 1
        );
    }
    // ...and the run stopped at the limit or with the interval within 10%.
    assert!(
        kept.len() == least + cfg.extra_trials || !wide(kept.len()),
        "{kept:?}"
    );
    assert_eq!(r.ops_per_sec.map(|s| s.n), Some(kept.len()));
}

#[test]
fn no_extra_trials_runs_exactly_the_trials() {
    let cfg = tiny(Personality::Webserver);
    assert_eq!(cfg.extra_trials, 0);
    let mut t = scratch("no-extra-trials");
    let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
    assert_eq!(r.trials.len(), cfg.trials);
}
