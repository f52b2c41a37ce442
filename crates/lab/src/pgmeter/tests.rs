//! pgmeter: the presets' definitions and draws, validation, what the threads really issue
//! (seen through a probing target), and tiny runs of every preset on a kernel directory and
//! on nvmfs.

use super::*;
use crate::test_probe::{Event, How, Probe, ProbeFs};
use crate::test_targets;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn presets_are_seed_001s_tables() {
    let fs = AccessSpec::file_server();
    let sizes: Vec<(u64, u32)> = fs
        .lines
        .iter()
        .map(|l| (l.transfer_bytes, l.access_percent))
        .collect();
    assert_eq!(
        sizes,
        [
            (512, 10),
            (1024, 5),
            (2048, 5),
            (4096, 60),
            (8192, 2),
            (16384, 4),
            (32768, 4),
            (65536, 10)
        ]
    );
    assert!(fs
        .lines
        .iter()
        .all(|l| l.read_percent == 80 && l.random_percent == 100));
    let ws = AccessSpec::web_server();
    let shares: Vec<u32> = ws.lines.iter().map(|l| l.access_percent).collect();
    assert_eq!(shares, [22, 15, 8, 23, 15, 2, 6, 7, 1, 1]);
    assert_eq!(ws.max_transfer_bytes(), 524_288);
    assert!(ws
        .lines
        .iter()
        .all(|l| l.read_percent == 100 && l.random_percent == 100));
    let oltp = AccessSpec::oltp_8k();
    assert_eq!(oltp.lines, [AccessLine::new(100, 8192, 67, 100)]);
    let sr = AccessSpec::sequential_read(65536);
    assert_eq!(
        (sr.lines[0].read_percent, sr.lines[0].random_percent),
        (100, 0)
    );
    assert_eq!(AccessSpec::sequential_write(8192).lines[0].read_percent, 0);
    for name in PRESETS {
        let spec = AccessSpec::preset(name, 8192).unwrap();
        assert_eq!(spec.name, name);
        spec.validate().unwrap();
    }
    assert!(AccessSpec::preset("oltp-4k", 8192)
        .unwrap_err()
        .contains("file-server"));
}

/// Shares of lines, reads and randoms over many draws (fixed seed), in percent.
fn draw_shares(spec: &AccessSpec, draws: u32) -> (Vec<f64>, f64, f64) {
    let mut rng = fastrand::Rng::with_seed(42);
    let mut lines = vec![0u32; spec.lines.len()];
    let (mut reads, mut randoms) = (0u32, 0u32);
    for _ in 0..draws {
        let a = spec.draw(&mut rng);
        lines[a.line] += 1;
        reads += u32::from(a.read);
        randoms += u32::from(a.random);
    }
    let pct = |n: u32| 100.0 * f64::from(n) / f64::from(draws);
    (
        lines.into_iter().map(pct).collect(),
        pct(reads),
        pct(randoms),
    )
}

#[test]
fn draws_follow_the_size_mix_and_read_share() {
    for (spec, read) in [
        (AccessSpec::file_server(), 80.0),
        (AccessSpec::web_server(), 100.0),
        (AccessSpec::oltp_8k(), 67.0),
    ] {
        let (lines, reads, randoms) = draw_shares(&spec, 200_000);
        for (got, l) in lines.iter().zip(&spec.lines) {
            // Binomial standard error at 200,000 draws is at most 0.12 points.
            let want = f64::from(l.access_percent);
            assert!(
                (got - want).abs() < 0.5,
                "{} {} B: {got:.2}% vs {want}%",
                spec.name,
                l.transfer_bytes
            );
        }
        assert!(
            (reads - read).abs() < 0.5,
            "{}: reads {reads:.2}%",
            spec.name
        );
        assert_eq!(randoms, 100.0, "{}", spec.name);
    }
    let (_, reads, randoms) = draw_shares(&AccessSpec::sequential_write(8192), 10_000);
    assert_eq!((reads, randoms), (0.0, 0.0));
}

#[test]
fn bad_specifications_are_refused() {
    let mut s = AccessSpec::file_server();
    s.lines[0].access_percent = 11;
    assert!(s.validate().unwrap_err().contains("add up to 101"));
    let mut s = AccessSpec::oltp_8k();
    s.lines[0].transfer_bytes = 0;
    assert!(s.validate().unwrap_err().contains("transfer size 0"));
    let mut s = AccessSpec::oltp_8k();
    s.lines[0].read_percent = 101;
    assert!(s.validate().unwrap_err().contains("read percentage 101"));
    let mut s = AccessSpec::oltp_8k();
    s.lines[0].align_bytes = 0;
    assert!(s.validate().unwrap_err().contains("alignment 0"));
    let empty = AccessSpec {
        name: "none".into(),
        lines: vec![],
    };
    assert!(empty.validate().unwrap_err().contains("no lines"));
}

#[test]
fn specifications_parse_from_text() {
    let s = AccessSpec::parse("mine", "4K:60:80:100, 64k:40:0:0:4K").unwrap();
    assert_eq!(s.lines[0], AccessLine::new(60, 4096, 80, 100));
    assert_eq!(s.lines[1].transfer_bytes, 65536);
    assert_eq!(s.lines[1].align_bytes, 4096);
    assert!(AccessSpec::parse("x", "4K:60:80:100")
        .unwrap_err()
        .contains("add up to 60"));
    assert!(AccessSpec::parse("x", "4K:100:80")
        .unwrap_err()
        .contains("SIZE:ACCESS%"));
    assert!(AccessSpec::parse("x", "4Q:100:80:0")
        .unwrap_err()
        .contains("not a number of bytes"));
    assert!(AccessSpec::parse("x", "4K:all:80:0")
        .unwrap_err()
        .contains("access percentage"));
}

/// A change that makes a valid config invalid.
type Change = fn(&mut PgmeterConfig);

#[test]
fn bad_configs_are_refused() {
    let ok = PgmeterConfig::new(AccessSpec::web_server());
    ok.validate().unwrap();
    let cases: [(Change, &str); 7] = [
        (
            |c| c.file_size_bytes = 256 << 10,
            "smaller than the largest transfer",
        ),
        (|c| c.outstanding = 0, "outstanding"),
        (|c| c.files = 0, "files"),
        (
            |c| {
                c.files = 100;
                c.outstanding = 64
            },
            "threads",
        ),
        (|c| c.run_seconds = 0.0, "run seconds"),
        (|c| c.warmup_seconds = f64::NAN, "warm-up"),
        (|c| c.interval_seconds = -1.0, "interval"),
    ];
    for (change, want) in cases {
        let mut c = ok.clone();
        change(&mut c);
        let e = c.validate().unwrap_err();
        assert!(e.contains(want), "{e}");
    }
}

fn tiny(spec: AccessSpec, files: usize, outstanding: usize) -> PgmeterConfig {
    PgmeterConfig {
        spec,
        files,
        file_size_bytes: 1 << 20,
        outstanding,
        warmup_seconds: 0.02,
        // Bounded by I/Os, not time: on a loaded machine (CI runs the test binaries in
        // parallel on 2 cores) a short timed test can see its threads descheduled throughout.
        run_seconds: 30.0,
        ops_max: Some(400),
        interval_seconds: 0.05,
        seed: 5,
    }
}

fn check(r: &PgmeterResult, cfg: &PgmeterConfig) {
    let name = &cfg.spec.name;
    assert!(r.ops > 0, "{name}: no I/O");
    assert_eq!(r.reads + r.writes, r.ops, "{name}");
    assert_eq!(r.threads, cfg.files * cfg.outstanding);
    let line_ops: u64 = r.lines.iter().map(|l| l.reads + l.writes).sum();
    assert_eq!(line_ops, r.ops, "{name}");
    let line_bytes: u64 = r
        .lines
        .iter()
        .map(|l| (l.reads + l.writes) * l.transfer_bytes)
        .sum();
    assert_eq!(line_bytes, r.read_bytes + r.write_bytes, "{name}");
    assert!(r.ops >= 400 && r.seconds < 30.0, "{name}: {} ops", r.ops);
    assert_eq!(r.per_file.len(), cfg.files);
    // (A file may be idle: its threads can miss a short test on a loaded machine.)
    assert!(r.per_file.iter().all(|f| f.streams == cfg.outstanding));
    assert_eq!(r.per_file.iter().map(|f| f.ops).sum::<u64>(), r.ops);
    let read_share = |s: &AccessSpec| s.lines[0].read_percent;
    match read_share(&cfg.spec) {
        100 => assert_eq!(r.writes, 0, "{name}"),
        0 => assert_eq!(r.reads, 0, "{name}"),
        _ => {}
    }
    let l = r.latency_ns;
    assert!(l.p50 <= l.p95 && l.p95 <= l.p99 && l.p99 <= l.max && l.max > 0);
    assert!(r.ops_per_sec > 0.0 && r.mb_per_sec > 0.0);
    assert_eq!(!r.intervals.is_empty(), r.interval_ops_per_sec.is_some());
    assert!(r.stopped_early.is_none());
}

#[test]
fn intervals_cover_a_timed_test() {
    let (t, _path) = test_targets::dir("pgmeter-iv");
    let cfg = PgmeterConfig {
        run_seconds: 0.3,
        ops_max: None,
        interval_seconds: 0.1,
        ..tiny(AccessSpec::oltp_8k(), 1, 1)
    };
    let r = run_on(
        crate::filebench::LabTarget::fs(&t),
        &cfg,
        &|| false,
        &mut |_| {},
    )
    .unwrap();
    assert!(r.seconds >= 0.3);
    // Whole intervals only: 3 when the controller kept time, fewer and longer when it was
    // not scheduled for a while.
    assert!((1..=3).contains(&r.intervals.len()), "{:?}", r.intervals);
    let mut last = 0.0;
    for iv in &r.intervals {
        assert!(iv.end_seconds >= last + 0.1 - 1e-9 && iv.end_seconds <= r.seconds + 1e-9);
        last = iv.end_seconds;
    }
    let s = r.interval_ops_per_sec.expect("a summary");
    assert_eq!(s.n, r.intervals.len());
    assert!(s.mean > 0.0);
}

fn every_preset() -> Vec<AccessSpec> {
    PRESETS
        .iter()
        .map(|p| AccessSpec::preset(p, 8192).unwrap())
        .collect()
}

#[test]
fn every_preset_runs_on_a_kernel_directory() {
    let (mut t, path) = test_targets::dir("pgmeter");
    for spec in every_preset() {
        let cfg = tiny(spec, 2, 2);
        let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
        check(&r, &cfg);
        assert!(!r.remounted);
    }
    // The files of the first test were kept for the others.
    let again = tiny(AccessSpec::oltp_8k(), 2, 1);
    let r = run(&mut t, &again, &|| false, &mut |_| {}).unwrap();
    assert_eq!((r.prepared.created, r.prepared.reused), (0, 2));
    drop(t);
    assert!(!path.exists());
}

#[test]
fn every_preset_runs_on_nvmfs() {
    let (mut t, image) = test_targets::nvmfs("pgmeter", 64 << 20);
    for spec in every_preset() {
        let cfg = tiny(spec, 2, 2);
        let r = run(&mut t, &cfg, &|| false, &mut |_| {}).unwrap();
        check(&r, &cfg);
        assert!(r.remounted);
    }
    test_targets::close_fsck_clean(t, &image);
}

#[test]
fn an_interrupted_test_says_so() {
    let (t, _path) = test_targets::dir("pgmeter-int");
    let cfg = tiny(AccessSpec::oltp_8k(), 1, 1);
    let start = std::time::Instant::now();
    let r = run_on(
        crate::filebench::LabTarget::fs(&t),
        &PgmeterConfig {
            run_seconds: 60.0,
            ops_max: None,
            ..cfg
        },
        &|| start.elapsed() > Duration::from_millis(100),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(r.stopped_early.as_deref(), Some("interrupted"));
    assert!(r.seconds < 30.0);
}

/// Runs `cfg` on a fresh probed directory holding each file's first I/Os until `rendezvous`
/// are in flight; returns the result and the events of the test (preallocation's dropped).
fn probed_run(cfg: &PgmeterConfig, rendezvous: Option<usize>) -> (PgmeterResult, Arc<Probe>) {
    let (_t, path) = test_targets::dir("pgmeter-probe");
    engine::prepare(&ProbeFs::new(&path, Duration::ZERO), cfg, &|| false).unwrap();
    let fs = ProbeFs::with_rendezvous(&path, Duration::ZERO, rendezvous);
    let r = engine::measure(&fs, cfg, &|| false, &mut |_| {}).unwrap();
    (r, fs.probe.clone())
}

/// The handles the engine opened, by path.
fn handles(events: &[Event]) -> HashMap<PathBuf, Vec<usize>> {
    let mut out: HashMap<PathBuf, Vec<usize>> = HashMap::new();
    for e in events {
        if let Event::Open { handle, path, how } = e {
            assert_eq!(*how, How::ReadWrite);
            out.entry(path.clone()).or_default().push(*handle);
        }
    }
    out
}

/// (handle, offset, len) of every read and write.
fn ios(events: &[Event]) -> Vec<(usize, u64, usize)> {
    events
        .iter()
        .filter_map(|e| match *e {
            Event::Read {
                handle,
                offset,
                len,
            }
            | Event::Write {
                handle,
                offset,
                len,
            } => Some((handle, offset, len)),
            _ => None,
        })
        .collect()
}

#[test]
fn outstanding_ios_are_threads_per_file() {
    for (files, outstanding) in [(2, 1), (2, 4), (1, 16), (1, 64)] {
        let cfg = PgmeterConfig {
            warmup_seconds: 0.0,
            ops_max: None,
            ..tiny(AccessSpec::oltp_8k(), files, outstanding)
        };
        let (_t, path) = test_targets::dir("pgmeter-oio");
        engine::prepare(&ProbeFs::new(&path, Duration::ZERO), &cfg, &|| false).unwrap();
        // Each file's first calls wait until `outstanding` are in flight together (10 s at
        // most, so fewer concurrent threads fail the count below). The test stops once every
        // file has been there, however slowly a loaded machine gets its threads going.
        let fs = ProbeFs::with_rendezvous(&path, Duration::ZERO, Some(outstanding));
        let probe = fs.probe.clone();
        let all_met = || {
            let m = probe.in_flight.lock().unwrap();
            m.len() == files && m.values().all(|v| v.1 >= outstanding)
        };
        let r = engine::measure(&fs, &cfg, &all_met, &mut |_| {}).unwrap();
        assert_eq!(r.threads, files * outstanding);
        let handles = handles(&probe.take());
        let in_flight = probe.in_flight.lock().unwrap();
        assert_eq!(handles.len(), files);
        for (path, hs) in &handles {
            assert_eq!(hs.len(), outstanding, "{}", path.display());
            assert_eq!(in_flight[path].1, outstanding, "{}", path.display());
        }
    }
}

#[test]
fn sequential_streams_issue_consecutive_offsets() {
    let mut cfg = tiny(AccessSpec::sequential_read(8192), 1, 2);
    cfg.file_size_bytes = 256 << 10;
    // Both streams' first reads meet, so both are in the log.
    let (r, probe) = probed_run(&cfg, Some(2));
    assert!(r.ops > 0);
    let mut by_handle: HashMap<usize, Vec<u64>> = HashMap::new();
    for (handle, offset, len) in ios(&probe.take()) {
        assert_eq!(len, 8192);
        by_handle.entry(handle).or_default().push(offset);
    }
    assert_eq!(by_handle.len(), 2);
    let mut firsts: Vec<u64> = by_handle.values().map(|o| o[0]).collect();
    firsts.sort();
    // The two streams start at the start and the middle of the file.
    assert_eq!(firsts, [0, 128 << 10]);
    assert!(by_handle.values().any(|o| o.len() > 1));
    for offs in by_handle.values() {
        for w in offs.windows(2) {
            let next = w[0] + 8192;
            let want = if next == cfg.file_size_bytes { 0 } else { next };
            assert_eq!(w[1], want, "{offs:?}");
        }
    }
}

#[test]
fn random_offsets_are_aligned_and_inside_the_file() {
    let mut cfg = tiny(AccessSpec::file_server(), 1, 2);
    cfg.file_size_bytes = 256 << 10;
    let (_, probe) = probed_run(&cfg, None);
    let calls = ios(&probe.take());
    assert!(calls.len() > 10);
    let sizes: Vec<u64> = cfg.spec.lines.iter().map(|l| l.transfer_bytes).collect();
    for (_, offset, len) in calls {
        assert_eq!(offset % 512, 0, "{offset}");
        assert!(offset + len as u64 <= cfg.file_size_bytes, "{offset} {len}");
        assert!(sizes.contains(&(len as u64)), "{len}");
    }
}
