//! AIM7: each subtest's exact calls (seen through a probing target), each subtest and a
//! small sweep on a kernel directory and on nvmfs, and refused configurations.

use super::rand::AimRand;
use super::*;
use crate::filebench::LabTarget;
use crate::test_probe::{Event, How, ProbeFs};
use crate::test_targets;
use std::path::{Path, PathBuf};
use std::time::Duration;

const N: u32 = 8;
const K: u64 = 1024;

/// Runs one subtest with n = 8 on a probed directory (task 3, seed 11); returns the events,
/// the temp file's path and the bytes moved.
fn probe_one(subtest: Subtest) -> (Vec<Event>, PathBuf, PathBuf, Moved) {
    let (_t, root) = test_targets::dir("aim7-probe");
    let fs = ProbeFs::new(&root, Duration::ZERO);
    fs.mkdir(&fs.name(DIR)).unwrap();
    let common = fs.name(&format!("{DIR}/{}", subtests::COMMON_FILE));
    subtests::create_common(&fs, &common, N).unwrap();
    fs.probe.take();
    let mut task = Task::new(&fs, DIR, &common, 3, AimRand::new(11));
    let moved = task.run(subtest, N).unwrap();
    let temp = root.join(DIR).join("tmpb.0000300000");
    (fs.probe.take(), temp, common, moved)
}

fn open(handle: usize, path: &Path, how: How) -> Event {
    Event::Open {
        handle,
        path: path.to_path_buf(),
        how,
    }
}

fn rd(handle: usize, block: u64) -> Event {
    Event::Read {
        handle,
        offset: block * K,
        len: 1024,
    }
}

fn wr(handle: usize, block: u64) -> Event {
    Event::Write {
        handle,
        offset: block * K,
        len: 1024,
    }
}

fn unlink(path: &Path) -> Event {
    Event::Unlink {
        path: path.to_path_buf(),
    }
}

fn close(handle: usize) -> Event {
    Event::Close { handle }
}

/// `count` blocks of `aim_rand() % span` from task seed 11.
fn blocks(count: u32, span: u32) -> Vec<u64> {
    let mut r = AimRand::new(11);
    (0..count).map(|_| u64::from(r.below(span))).collect()
}

/// `count` sequential block writes (or reads) on `h`.
fn seq(h: usize, count: u64, f: fn(usize, u64) -> Event) -> Vec<Event> {
    (0..count).map(|b| f(h, b)).collect()
}

/// Handles are numbered from 1 by the probe; create_common used handle 1.
#[test]
fn disk_rr_and_disk_rw_write_then_go_random_on_an_unlinked_file() {
    let (ev, temp, _, moved) = probe_one(Subtest::DiskRr);
    let mut want = vec![open(2, &temp, How::Create)];
    want.extend(seq(2, 8, wr));
    want.extend([close(2), open(3, &temp, How::Read), unlink(&temp)]);
    want.extend(blocks(8, 8).into_iter().map(|b| rd(3, b)));
    want.push(close(3));
    assert_eq!(ev, want);
    assert_eq!((moved.read_bytes, moved.write_bytes), (8 * K, 8 * K));

    let (ev, temp, _, moved) = probe_one(Subtest::DiskRw);
    let mut want = vec![open(2, &temp, How::Create)];
    want.extend(seq(2, 8, wr));
    want.extend([close(2), open(3, &temp, How::ReadWrite), unlink(&temp)]);
    want.extend(blocks(8, 8).into_iter().map(|b| wr(3, b)));
    want.push(close(3));
    assert_eq!(ev, want);
    assert_eq!((moved.read_bytes, moved.write_bytes), (0, 16 * K));
}

#[test]
fn sync_disk_rw_rewrites_half_the_blocks_with_o_sync_then_unlinks() {
    let (ev, temp, _, moved) = probe_one(Subtest::SyncDiskRw);
    let mut want = vec![open(2, &temp, How::Create)];
    want.extend(seq(2, 4, wr));
    want.extend([close(2), open(3, &temp, How::Sync { create: false })]);
    want.extend(blocks(4, 4).into_iter().map(|b| wr(3, b)));
    want.extend([unlink(&temp), close(3)]);
    assert_eq!(ev, want);
    assert_eq!(moved.write_bytes, 8 * K);
}

#[test]
fn disk_rd_reads_the_common_file_from_the_start() {
    let (ev, _, common, moved) = probe_one(Subtest::DiskRd);
    let mut want = vec![open(2, &common, How::Read)];
    want.extend(seq(2, 8, rd));
    want.push(close(2));
    assert_eq!(ev, want);
    assert_eq!((moved.read_bytes, moved.write_bytes), (8 * K, 0));
}

#[test]
fn disk_wrt_and_sync_disk_wrt_write_sequentially() {
    let (ev, temp, _, _) = probe_one(Subtest::DiskWrt);
    let mut want = vec![open(2, &temp, How::Create), unlink(&temp)];
    want.extend(seq(2, 8, wr));
    want.push(close(2));
    assert_eq!(ev, want);

    let (ev, temp, _, moved) = probe_one(Subtest::SyncDiskWrt);
    let mut want = vec![open(2, &temp, How::Sync { create: true })];
    want.extend(seq(2, 4, wr));
    want.extend([unlink(&temp), close(2)]);
    assert_eq!(ev, want);
    assert_eq!(moved.write_bytes, 4 * K);
}

#[test]
fn disk_cp_and_sync_disk_cp_copy_the_common_file_block_by_block() {
    let (ev, temp, common, moved) = probe_one(Subtest::DiskCp);
    let mut want = vec![
        open(2, &common, How::Read),
        open(3, &temp, How::Create),
        unlink(&temp),
    ];
    want.extend((0..8).flat_map(|b| [rd(2, b), wr(3, b)]));
    // The copy is dropped (closed) first, then the source.
    want.extend([close(3), close(2)]);
    assert_eq!(ev, want);
    assert_eq!((moved.read_bytes, moved.write_bytes), (8 * K, 8 * K));

    let (ev, temp, common, _) = probe_one(Subtest::SyncDiskCp);
    let mut want = vec![
        open(2, &common, How::Read),
        open(3, &temp, How::Sync { create: true }),
    ];
    want.extend((0..4).flat_map(|b| [rd(2, b), wr(3, b)]));
    want.extend([unlink(&temp), close(3), close(2)]);
    assert_eq!(ev, want);
}

#[test]
fn sync_disk_update_writes_the_block_after_the_one_it_read() {
    let (ev, temp, _, moved) = probe_one(Subtest::SyncDiskUpdate);
    let mut want = vec![open(2, &temp, How::Create)];
    want.extend(seq(2, 8, wr));
    want.extend([close(2), open(3, &temp, How::Sync { create: false })]);
    want.extend(
        blocks(4, 8)
            .into_iter()
            .flat_map(|b| [rd(3, b), wr(3, b + 1)]),
    );
    want.extend([unlink(&temp), close(3)]);
    assert_eq!(ev, want);
    assert_eq!((moved.read_bytes, moved.write_bytes), (4 * K, 12 * K));
}

#[test]
fn a_file_too_small_for_the_sync_subtests_is_refused() {
    let (t, _) = test_targets::dir("aim7-small");
    let fs = t.fs();
    let common = fs.name("c");
    let mut task = Task::new(fs, ".", &common, 0, AimRand::new(0));
    let e = task.run(Subtest::SyncDiskRw, 1).unwrap_err();
    assert!(e.to_string().contains("at least 2"), "{e}");
}

/// Every subtest once on `fs`, each leaving nothing but `tmpa.common` behind.
fn every_subtest<F: MicroFs>(fs: &F, listing: &dyn Fn() -> Vec<String>) {
    let _ = fs.mkdir(&fs.name(DIR));
    let common = fs.name(&format!("{DIR}/{}", subtests::COMMON_FILE));
    subtests::create_common(fs, &common, 16).unwrap();
    let mut task = Task::new(fs, DIR, &common, 0, AimRand::new(0));
    for s in Subtest::ALL {
        let moved = task.run(s, 16).unwrap();
        assert!(
            moved.read_bytes + moved.write_bytes >= 8 * K,
            "{}",
            s.name()
        );
        assert_eq!(listing(), [subtests::COMMON_FILE], "{}", s.name());
    }
}

#[test]
fn every_subtest_runs_on_a_kernel_directory_and_on_nvmfs() {
    let (t, root) = test_targets::dir("aim7-each");
    every_subtest(t.fs(), &|| {
        std::fs::read_dir(root.join(DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    });
    let (t, image) = test_targets::nvmfs("aim7-each", 64 << 20);
    every_subtest(&t, &|| {
        let entries = t.fs().read_dir(format!("/{DIR}")).unwrap();
        entries
            .into_iter()
            .map(|e| String::from_utf8(e.name).unwrap())
            .collect()
    });
    test_targets::close_fsck_clean(t, &image);
}

fn tiny() -> Aim7Config {
    Aim7Config {
        filesize_kib: 16,
        jobs_per_task: 18,
        task_counts: vec![1, 2, 4],
        ..Aim7Config::new(4)
    }
}

fn check_sweep(r: &Aim7Result, cfg: &Aim7Config) {
    assert_eq!(r.subruns.len(), cfg.task_counts.len());
    assert!(r.stopped_early.is_none());
    for (s, &tasks) in r.subruns.iter().zip(&cfg.task_counts) {
        assert_eq!(s.tasks, tasks);
        // 18 jobs over 9 equal subtests: twice each per task.
        assert_eq!(s.jobs_per_task, 18);
        assert_eq!(s.jobs, 18 * tasks as u64);
        for st in &s.subtests {
            assert_eq!(st.runs, 2 * tasks as u64, "{:?}", st.subtest);
            assert!(st.mean_ms > 0.0 && st.max_ms >= st.mean_ms);
        }
        assert!(s.jobs_per_minute > 0.0);
        let per_task = s.jobs_per_minute / tasks as f64;
        assert!((s.jobs_per_minute_per_task - per_task).abs() < 1e-9);
        assert!((s.jobs as f64 * 60.0 / s.seconds - s.jobs_per_minute).abs() < 1e-6);
        assert!(s.jti <= 100);
        assert!(s.read_bytes > 0 && s.write_bytes > 0);
    }
    let best = r
        .subruns
        .iter()
        .map(|s| s.jobs_per_minute)
        .fold(0.0, f64::max);
    let peak = r.peak.expect("a peak");
    assert_eq!(peak.jobs_per_minute, best);
    let at = r.subruns.iter().find(|s| s.tasks == peak.tasks).unwrap();
    assert_eq!(at.jobs_per_minute, best);
}

#[test]
fn a_sweep_runs_on_a_kernel_directory() {
    let (t, root) = test_targets::dir("aim7-sweep");
    let cfg = tiny();
    let mut setups = 0;
    let r = run(t.fs(), &cfg, &|| false, &mut |p| {
        setups += matches!(p, Progress::Setup(_)) as usize
    })
    .unwrap();
    check_sweep(&r, &cfg);
    // The file size does not change with the task count: tmpa.common is written once, and
    // removed at the end.
    assert_eq!(setups, 1);
    assert_eq!(std::fs::read_dir(root.join(DIR)).unwrap().count(), 0);
}

#[test]
fn a_sweep_runs_on_nvmfs() {
    let (t, image) = test_targets::nvmfs("aim7-sweep", 64 << 20);
    let cfg = tiny();
    let r = run(&t, &cfg, &|| false, &mut |_| {}).unwrap();
    check_sweep(&r, &cfg);
    assert!(t.fs().read_dir(format!("/{DIR}")).unwrap().is_empty());
    test_targets::close_fsck_clean(t, &image);
}

#[test]
fn a_pool_shrinks_the_files_as_tasks_grow() {
    let (t, _) = test_targets::dir("aim7-pool");
    let cfg = Aim7Config {
        filesize_kib: 4,
        poolsize_kib: 32,
        jobs_per_task: 9,
        ..tiny()
    };
    let mut setups = 0;
    let r = run(t.fs(), &cfg, &|| false, &mut |p| {
        setups += matches!(p, Progress::Setup(_)) as usize
    })
    .unwrap();
    let sizes: Vec<u32> = r.subruns.iter().map(|s| s.file_kib).collect();
    // FILESIZE + POOLSIZE / tasks.
    assert_eq!(sizes, [36, 20, 12]);
    assert_eq!(setups, 3);
}

#[test]
fn with_a_period_tasks_keep_running_lists() {
    let (t, _) = test_targets::dir("aim7-period");
    let cfg = Aim7Config {
        jobs_per_task: 9,
        task_counts: vec![2],
        period_seconds: Some(0.5),
        ..tiny()
    };
    let r = run(t.fs(), &cfg, &|| false, &mut |_| {}).unwrap();
    let s = &r.subruns[0];
    assert!(s.seconds >= 0.5, "{}", s.seconds);
    assert!(s.jobs > 0);
    assert!(s.stopped_early.is_none());
    assert_eq!(r.peak.unwrap().tasks, 2);
}

#[test]
fn an_interrupted_sweep_stops_and_says_so() {
    let (t, _) = test_targets::dir("aim7-int");
    let cfg = Aim7Config {
        period_seconds: Some(60.0),
        ..tiny()
    };
    let start = std::time::Instant::now();
    let r = run(
        t.fs(),
        &cfg,
        &|| start.elapsed() > Duration::from_millis(100),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(r.subruns.len(), 1);
    assert_eq!(r.stopped_early.as_deref(), Some("interrupted"));
    // A subrun cut short is no peak.
    assert!(r.peak.is_none());
}

#[test]
fn task_counts_double_up_to_the_max() {
    assert_eq!(doubling(12), [1, 2, 4, 8, 12]);
    assert_eq!(doubling(8), [1, 2, 4, 8]);
    assert_eq!(doubling(1), [1]);
    assert!(doubling(0).is_empty());
}

/// A change that makes a valid config invalid.
type Change = fn(&mut Aim7Config);

#[test]
fn bad_configs_are_refused() {
    tiny().validate().unwrap();
    let cases: [(Change, &str); 8] = [
        (|c| c.task_counts = vec![], "no task counts"),
        (|c| c.task_counts = vec![0, 1], "1..="),
        (|c| c.task_counts = vec![2, 2], "increase"),
        (|c| c.task_counts = vec![TASKS_MAX + 1], "1..="),
        (|c| c.filesize_kib = 1, "file size"),
        (|c| c.jobs_per_task = 0, "jobs per task"),
        (|c| c.mix.clear(), "entries"),
        (|c| c.period_seconds = Some(f64::NAN), "period"),
    ];
    for (change, want) in cases {
        let mut c = tiny();
        change(&mut c);
        let e = c.validate().unwrap_err();
        assert!(e.contains(want), "{e}");
        let (t, _) = test_targets::dir("aim7-bad");
        let err = run(t.fs(), &c, &|| false, &mut |_| {}).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    }
}
