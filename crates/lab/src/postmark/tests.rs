//! Postmark against the original: generator vectors, operation traces and
//! counts recorded from 1.51's C source (compiled with gcc on x86-64, with a
//! line printed per create, read, append and delete), system calls recorded
//! with strace from Debian's binary; filemark's partitioning; bad configs.
//!
//! testdata/NAME.pmrc is a command file, NAME.trace what the traced original
//! printed running it in an empty directory: `C path size`, `R path size`,
//! `A path bytes`, `D path`, every run in order.

use super::config::{parse_bias, Action};
use super::engine::Instance;
use super::filemark::{self, FilemarkConfig};
use super::rng::Mt19937;
use super::*;
use crate::micro::measure::new_histogram;
use crate::targets::mem::{Call, MemFs};
use crate::targets::nvmfs::NvmfsTarget;
use crate::targets::sys::{DirTarget, ScratchDir};
use std::collections::{BTreeMap, BTreeSet};

const NEVER: &dyn Fn() -> bool = &|| false;

#[test]
fn generator_matches_the_reference_mt19937() {
    // init_genrand(5489): the published first outputs and the 10000th
    // (the C++ standard's check value for std::mt19937).
    let mut mt = Mt19937::init_genrand(5489);
    let first: Vec<u32> = (0..5).map(|_| mt.genrand()).collect();
    assert_eq!(
        first,
        [3499211612, 581869302, 3890346734, 3586334585, 545404204]
    );
    let mut mt = Mt19937::init_genrand(5489);
    let tenk = (0..10_000).map(|_| mt.genrand()).last();
    assert_eq!(tenk, Some(4123659995));
}

#[test]
fn generator_matches_postmark_sgenrand() {
    // Printed by 1.51's own sgenrand/genrand compiled with gcc on x86-64.
    let cases: [(u32, [u32; 6]); 4] = [
        (
            42,
            [
                4179544424, 615236124, 4165290828, 3119652344, 1623863471, 605280572,
            ],
        ),
        (
            7,
            [
                22671274, 109824311, 1824471040, 3737574225, 423047516, 4188341082,
            ],
        ),
        (
            1,
            [
                3556162021, 4012392791, 221657543, 586320575, 3355844478, 1469533884,
            ],
        ),
        (
            4357,
            [
                2867219139, 1585203162, 3113124129, 2953900839, 2463794868, 3482265796,
            ],
        ),
    ];
    for (seed, want) in cases {
        let mut mt = Mt19937::sgenrand(seed);
        let got: Vec<u32> = (0..6).map(|_| mt.genrand()).collect();
        assert_eq!(got, want, "seed {seed}");
    }
    // Across the second twist: draws 1001..1003.
    let mut mt = Mt19937::sgenrand(42);
    let got: Vec<u32> = (0..1003).map(|_| mt.genrand()).skip(1000).collect();
    assert_eq!(got, [4149047035, 2587490496, 1292025145]);
}

#[test]
fn rnd_is_a_remainder_and_draws_nothing_for_empty_ranges() {
    // 32 + RND(95) for seed 42: the first bytes of Postmark's source text.
    let mut mt = Mt19937::sgenrand(42);
    let text: Vec<u32> = (0..10).map(|_| 32 + mt.rnd(95)).collect();
    assert_eq!(text, [76, 101, 90, 101, 98, 74, 54, 83, 53, 126]);
    // RND(0) and RND(-5) are 0 and leave the sequence where it was.
    let (mut a, mut b) = (Mt19937::sgenrand(9), Mt19937::sgenrand(9));
    assert_eq!((a.rnd(0), a.rnd(-5)), (0, 0));
    assert_eq!(a.genrand(), b.genrand());
}

/// The trace the traced original prints, rebuilt from the calls our engine
/// made: a create or an open starts an entry, the transfers that follow on
/// the same file add up its bytes.
fn trace(calls: &[Call]) -> String {
    let mut out: Vec<(char, String, Option<usize>)> = Vec::new();
    for c in calls {
        let entry = match c.op {
            "create" => Some(('C', Some(0))),
            "open_read" => Some(('R', Some(0))),
            "open_append" => Some(('A', Some(0))),
            "unlink" => Some(('D', None)),
            _ => None,
        };
        match entry {
            Some((op, bytes)) => out.push((op, c.path.clone(), bytes)),
            None if matches!(c.op, "write" | "read" | "append") => {
                let last = out.last_mut().expect("a transfer follows an open");
                assert_eq!(last.1, c.path, "transfer on another file");
                *last.2.as_mut().expect("not after an unlink") += c.bytes;
            }
            None => {}
        }
    }
    let line = |(op, path, bytes): &(char, String, Option<usize>)| match bytes {
        Some(b) => format!("{op} {path} {b}\n"),
        None => format!("{op} {path}\n"),
    };
    out.iter().map(line).collect()
}

/// Runs every `run` of a command file on a fresh in-memory target with the
/// given directories made first; returns the results and the trace.
fn run_file(text: &str, dirs: &[&str]) -> (Vec<PostmarkResult>, String) {
    let file = parse_command_file(text).unwrap();
    assert!(file.quits);
    let mut results = Vec::new();
    let mut traced = String::new();
    for cfg in &file.runs {
        let fs = MemFs::default();
        for d in dirs {
            fs.mkdir(&d.to_string()).unwrap();
        }
        results.push(run(&fs, cfg, NEVER).unwrap());
        traced.push_str(&trace(&fs.calls()));
        let (files, left) = fs.entries();
        assert!(files.is_empty(), "files left: {files:?}");
        let want: Vec<String> = dirs.iter().map(|d| d.to_string()).collect();
        assert_eq!(left, want, "only the directories made before remain");
    }
    (results, traced)
}

macro_rules! testdata {
    ($name:literal) => {
        (
            include_str!(concat!("testdata/", $name, ".pmrc")),
            include_str!(concat!("testdata/", $name, ".trace")),
        )
    };
}

#[test]
fn every_operation_matches_the_original() {
    let cases = [
        (testdata!("small"), &[][..]),
        (testdata!("full-table"), &[][..]),
        (testdata!("out-of-files"), &[][..]),
        (testdata!("no-create"), &[][..]),
        (testdata!("locations"), &["a", "c"][..]),
    ];
    for ((pmrc, want), dirs) in cases {
        let (_, got) = run_file(pmrc, dirs);
        assert_eq!(got, want, "{pmrc}");
    }
}

#[test]
fn counts_equal_the_original_report() {
    // The original's terse report for small.pmrc (1 s total, so its rates are
    // the counts): 53 created (20 + 33), 35 read, 25 appended, 53 deleted
    // (26 alone, 27 mixed), 246615 bytes read, 330851 written.
    let (pmrc, _) = testdata!("small");
    let (r, _) = run_file(pmrc, &[]);
    let want = FileCounts {
        created: 53,
        created_alone: 20,
        created_mixed: 33,
        read: 35,
        appended: 25,
        deleted: 53,
        deleted_alone: 26,
        deleted_mixed: 27,
    };
    assert_eq!(r[0].files, want);
    assert_eq!((r[0].bytes_read, r[0].bytes_written), (246615, 330851));
    assert_eq!((r[0].transactions, r[0].out_of_files), (60, false));
    // full-table.pmrc: the 10-slot table fills, later creates do nothing.
    let (pmrc, _) = testdata!("full-table");
    let (r, _) = run_file(pmrc, &[]);
    assert_eq!(
        (
            r[0].files.created,
            r[0].files.created_mixed,
            r[0].files.read
        ),
        (15, 10, 7)
    );
    assert_eq!((r[0].files.appended, r[0].files.deleted_alone), (32, 10));
    assert_eq!((r[0].bytes_read, r[0].bytes_written), (1925, 3918));
    // out-of-files.pmrc: stops at the fourth transaction.
    let (pmrc, _) = testdata!("out-of-files");
    let (r, _) = run_file(pmrc, &[]);
    assert!(r[0].out_of_files);
    assert_eq!((r[0].transactions, r[0].files.deleted_mixed), (3, 3));
}

#[test]
fn rates_are_the_reports_ratios() {
    let (pmrc, _) = testdata!("small");
    let (r, _) = run_file(pmrc, &[]);
    let r = &r[0];
    let s = &r.seconds;
    assert!(s.creation > 0.0 && s.transactions > 0.0 && s.deletion > 0.0);
    let total = s.creation + s.transactions + s.deletion;
    assert!((s.total - total).abs() < 1e-6 * total.max(1.0) + 1e-6);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    assert!(close(r.rates.transactions, 60.0 / s.transactions));
    assert!(close(r.rates.created, 53.0 / s.total));
    assert!(close(r.rates.created_alone, 20.0 / s.creation));
    assert!(close(r.rates.deleted_alone, 26.0 / s.deletion));
    assert!(close(r.rates.deleted_mixed, 27.0 / s.transactions));
    assert!(close(r.rates.bytes_written, 330851.0 / s.total));
    assert!(r.transaction_latency_ns.max >= r.transaction_latency_ns.p50);
    assert!(r.transaction_latency_ns.p50 > 0);
}

/// (op, bytes) of the data-path calls the engine made, fstat included.
fn io_calls(calls: &[Call]) -> Vec<(&'static str, usize)> {
    let ops = [
        "create",
        "open_read",
        "open_append",
        "fstat",
        "write",
        "read",
        "append",
        "unlink",
    ];
    calls
        .iter()
        .filter(|c| ops.contains(&c.op))
        .map(|c| (c.op, c.bytes))
        .collect()
}

#[test]
fn stdio_emulation_makes_glibcs_calls() {
    // strace of Debian's postmark: one file, ten reads of it. Buffered with
    // 5000-byte blocks of a 12000-byte file: write 4096, 4096, 3808 (the
    // first block goes out directly, the rest through the buffer), read the
    // same; with 4096-byte blocks of 10000 bytes: 4096, 4096, 1808 both ways;
    // unbuffered 512-byte reads of 1100 bytes: 512, 512, 76.
    type Case = (u32, u32, bool, &'static [usize], &'static [usize]);
    let cases: [Case; 3] = [
        (12000, 5000, true, &[4096, 4096, 3808], &[4096, 4096, 3808]),
        (10000, 4096, true, &[4096, 4096, 1808], &[4096, 4096, 1808]),
        (1100, 512, false, &[512, 512, 76], &[512, 512, 76]),
    ];
    for (size, block, buffered, writes, reads) in cases {
        let cfg = PostmarkConfig {
            number: 1,
            transactions: 10,
            size_low: size,
            size_high: size,
            read_block_size: block,
            write_block_size: block,
            buffering: buffered,
            bias_read: Some(10),
            bias_create: None,
            ..PostmarkConfig::default()
        };
        let fs = MemFs::default();
        run(&fs, &cfg, NEVER).unwrap();
        let fstat: &[(&str, usize)] = if buffered { &[("fstat", 0)] } else { &[] };
        let mut want = vec![("create", 0)];
        want.extend_from_slice(fstat);
        want.extend(writes.iter().map(|&n| ("write", n)));
        for _ in 0..10 {
            want.push(("open_read", 0));
            want.extend_from_slice(fstat);
            want.extend(reads.iter().map(|&n| ("read", n)));
        }
        want.push(("unlink", 0));
        assert_eq!(io_calls(&fs.calls()), want, "{size} bytes by {block}");
    }
}

#[test]
fn buffered_appends_flush_whole_buffers() {
    // A 512-byte block stream of 9000 bytes: eight blocks fill the buffer,
    // which goes out when the ninth arrives; fclose writes the rest.
    let cfg = PostmarkConfig {
        number: 1,
        transactions: 10,
        size_low: 1,
        size_high: 9001,
        bias_read: Some(0),
        bias_create: None,
        seed: 3,
        ..PostmarkConfig::default()
    };
    let fs = MemFs::default();
    run(&fs, &cfg, NEVER).unwrap();
    let calls = fs.calls();
    let appends: Vec<usize> = calls
        .iter()
        .filter(|c| c.op == "append")
        .map(|c| c.bytes)
        .collect();
    assert!(!appends.is_empty());
    // Every call is a whole buffer but the last of each stream, and the data
    // adds up to the trace's appended bytes.
    let t = trace(&calls);
    let appended: usize = t
        .lines()
        .filter(|l| l.starts_with('A'))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(appends.iter().sum::<usize>(), appended);
    assert!(appends.iter().all(|&n| n <= 4096));
}

#[test]
fn file_contents_are_the_source_texts_prefixes() {
    // Every write call copies from the start of the source text: a file is
    // source[..size] followed by source[..n] for each append of n bytes.
    let (pmrc, _) = testdata!("small");
    let cfg = &parse_command_file(pmrc).unwrap().runs[0];
    let fs = MemFs::default();
    let mut pm = Instance::new(cfg.params());
    pm.make_subdirectories(&fs).unwrap();
    pm.create_files(&fs, NEVER).unwrap();
    let mut h = new_histogram();
    pm.transactions(&fs, 60, NEVER, &mut h).unwrap();
    let mut want: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for line in trace(&fs.calls()).lines() {
        let w: Vec<&str> = line.split(' ').collect();
        let n = |i: usize| w[i].parse::<usize>().unwrap();
        match w[0] {
            "C" => drop(want.insert(w[1].into(), pm.source()[..n(2)].to_vec())),
            "A" => want.get_mut(w[1]).unwrap().extend(&pm.source()[..n(2)]),
            "D" => drop(want.remove(w[1])),
            _ => {}
        }
    }
    assert_eq!(want.len(), pm.files());
    for (path, data) in &want {
        assert_eq!(fs.contents(path).as_ref(), Some(data), "{path}");
    }
}

#[test]
fn command_files_set_every_parameter() {
    let text = "\
# a comment, then every set command
set size 100 2000
set number 7
set seed 9
set transactions 30
set location /mnt/a 3
set location +/mnt/b
set subdirectories 4
set read 1024
set write 2048
set buffering false
set bias read -1
set bias create 8
set report terse
show
run out.txt
set number 8
run
quit
set number 9
";
    let f = parse_command_file(text).unwrap();
    assert!(f.quits);
    assert_eq!(f.runs.len(), 2);
    let want = PostmarkConfig {
        number: 7,
        transactions: 30,
        size_low: 100,
        size_high: 2000,
        subdirectories: 4,
        read_block_size: 1024,
        write_block_size: 2048,
        buffering: false,
        bias_read: None,
        bias_create: Some(8),
        seed: 9,
        locations: vec![
            Location {
                path: "/mnt/a".into(),
                weight: 3,
            },
            Location {
                path: "/mnt/b".into(),
                weight: 1,
            },
        ],
        report: ReportFormat::Terse,
    };
    assert_eq!(f.runs[0], want);
    assert_eq!(f.runs[1].number, 8);
    assert_eq!(f.config.number, 8, "nothing after quit is read");
    // One size is a fixed size; '-' removes a location.
    let f = parse_command_file(
        "set size 700\nset location x\nset location +y 2\nset location -x\nrun\n",
    )
    .unwrap();
    assert_eq!((f.runs[0].size_low, f.runs[0].size_high), (700, 700));
    assert_eq!(f.runs[0].locations.len(), 1);
    assert!(!f.quits);
    assert_eq!(
        PostmarkConfig::default().apply("quit"),
        Ok(Some(Action::Quit))
    );
}

#[test]
fn bad_command_lines_are_refused_with_their_line() {
    let bad = [
        ("set number 10x", "invalid number of files '10x'"),
        ("set number 0", "invalid number of files '0'"),
        ("set size 500 100", "below the low bound"),
        ("set size", "'set size' needs a value"),
        ("set size 1 2 3", "takes LOW [HIGH]"),
        ("set transactions 5", "below 10"),
        ("set bias read 11", "invalid bias '11'"),
        ("set bias create -2", "invalid bias '-2'"),
        ("set buffering yes", "true or false"),
        ("set report short", "verbose or terse"),
        ("set location /a b", "invalid location weight 'b'"),
        ("set location -/nowhere", "not in the list"),
        ("set readers 4", "unknown command 'set readers 4'"),
        ("exit", "unknown command"),
        ("load other.pmrc", "'load' is not supported"),
        ("!ls", "shell escapes"),
    ];
    for (line, want) in bad {
        let err = parse_command_file(&format!("set seed 3\n\n{line}\nrun\n")).unwrap_err();
        assert_eq!(err.line, 3, "{line}");
        assert!(err.message.contains(want), "{line}: {err}");
    }
    assert_eq!(parse_bias("-1"), Ok(None));
}

#[test]
fn bad_configs_are_refused() {
    let base = PostmarkConfig::default();
    let loc = |path: &str, weight| Location {
        path: path.into(),
        weight,
    };
    let bad = [
        (
            PostmarkConfig {
                number: 0,
                ..base.clone()
            },
            "number (files)",
        ),
        (
            PostmarkConfig {
                transactions: 0,
                ..base.clone()
            },
            "transactions",
        ),
        (
            PostmarkConfig {
                size_low: 0,
                ..base.clone()
            },
            "size low",
        ),
        (
            PostmarkConfig {
                size_low: 9,
                size_high: 8,
                ..base.clone()
            },
            "size high",
        ),
        (
            PostmarkConfig {
                size_high: 1 << 30,
                ..base.clone()
            },
            "size high",
        ),
        (
            PostmarkConfig {
                read_block_size: 0,
                ..base.clone()
            },
            "read block",
        ),
        (
            PostmarkConfig {
                write_block_size: 0,
                ..base.clone()
            },
            "write block",
        ),
        (
            PostmarkConfig {
                bias_read: Some(11),
                ..base.clone()
            },
            "bias read",
        ),
        (
            PostmarkConfig {
                bias_create: Some(11),
                ..base.clone()
            },
            "bias create",
        ),
        (
            PostmarkConfig {
                seed: 0,
                ..base.clone()
            },
            "seed",
        ),
        (
            PostmarkConfig {
                locations: vec![loc("a", 1), loc("a", 2)],
                ..base.clone()
            },
            "listed twice",
        ),
        (
            PostmarkConfig {
                locations: vec![loc("../x", 1)],
                ..base.clone()
            },
            "'..'",
        ),
        (
            PostmarkConfig {
                locations: vec![loc("x", 0)],
                ..base.clone()
            },
            "weight",
        ),
    ];
    for (cfg, want) in bad {
        let err = cfg.validate().unwrap_err();
        assert!(err.contains(want), "{want}: {err}");
        let fs = MemFs::default();
        let e = run(&fs, &cfg, NEVER).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(fs.calls().is_empty(), "nothing touched");
    }
    assert_eq!(base.validate(), Ok(()));
}

#[test]
fn an_interrupt_stops_the_run() {
    let fs = MemFs::default();
    let e = run(&fs, &PostmarkConfig::default(), &|| true).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Interrupted);
}

fn shm_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn unique(tag: &str) -> std::path::PathBuf {
    let name = format!(
        "nvmfs-pm-{}-{:016x}-{tag}",
        std::process::id(),
        fastrand::u64(..)
    );
    shm_dir().join(name)
}

#[test]
fn small_run_counts_on_a_directory_and_on_nvmfs() {
    let (pmrc, _) = testdata!("small");
    let cfg = &parse_command_file(pmrc).unwrap().runs[0];
    let dir = DirTarget::new(ScratchDir::create(unique("dir")).unwrap());
    let on_dir = run(crate::filebench::LabTarget::fs(&dir), cfg, NEVER).unwrap();
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "all removed"
    );
    let nv = NvmfsTarget::create(unique("img"), 64 << 20, 1024).unwrap();
    let on_nvmfs = run(&nv, cfg, NEVER).unwrap();
    assert_eq!(nv.fs().read_dir("/").unwrap().len(), 0, "all removed");
    nv.close().unwrap();
    for r in [&on_dir, &on_nvmfs] {
        assert_eq!(
            (r.files.created, r.files.read, r.files.appended),
            (53, 35, 25)
        );
        assert_eq!((r.bytes_read, r.bytes_written), (246615, 330851));
    }
}

fn tiny_filemark(threads: u32) -> FilemarkConfig {
    FilemarkConfig {
        files: 103,
        transactions: 210,
        warmup_transactions: 21,
        phases: 3,
        subdirectories: 3,
        delete: true,
        ..FilemarkConfig::small_file(threads)
    }
}

#[test]
fn filemark_splits_files_and_transactions_exactly() {
    let cfg = tiny_filemark(4);
    let mut fs = MemFs::default();
    let r = filemark::run(&mut fs, &cfg, NEVER).unwrap();
    assert_eq!(r.files_per_thread, [26, 26, 26, 25]);
    assert_eq!(r.transactions_per_thread, [53, 53, 52, 52]);
    assert_eq!(r.creation.counts.created, 103);
    let per_thread: Vec<u64> = r
        .creation
        .threads
        .iter()
        .map(|t| t.counts.created)
        .collect();
    assert_eq!(per_thread, [26, 26, 26, 25]);
    assert_eq!(r.transaction_phases.len(), 3);
    for p in &r.transaction_phases {
        assert!(p.remounted);
        assert_eq!(p.transactions, 210, "no thread ran out of files");
        let each: Vec<u64> = p.threads.iter().map(|t| t.transactions).collect();
        assert_eq!(each, [53, 53, 52, 52]);
        let sum: f64 = p
            .threads
            .iter()
            .map(|t| t.transactions as f64 / t.seconds)
            .sum();
        assert!((p.sum_of_thread_rates - sum).abs() <= 1e-9 * sum);
        let overall = 210.0 / p.wall_seconds;
        assert!((p.per_second - overall).abs() <= 1e-9 * overall);
        assert_eq!(p.counts.read + p.counts.appended, 210, "bias read never -1");
    }
    assert_eq!(fs.remounts(), 4, "after the creation and each phase");
    assert_eq!(
        r.transactions_per_second.unwrap().n,
        2,
        "first phase discarded"
    );
    let d = r.deletion.as_ref().unwrap();
    let last = &r.transaction_phases[2].threads;
    let left: Vec<u64> = last.iter().map(|t| t.files as u64).collect();
    let deleted: Vec<u64> = d.threads.iter().map(|t| t.counts.deleted).collect();
    assert_eq!(deleted, left, "each thread deletes the files it had left");
    assert!(d.threads.iter().all(|t| t.files == 0));
    let (files, dirs) = fs.entries();
    assert!(files.is_empty() && dirs.is_empty(), "{files:?} {dirs:?}");
}

#[test]
fn filemark_threads_keep_to_their_own_directories() {
    let cfg = tiny_filemark(5);
    let mut fs = MemFs::default();
    filemark::run(&mut fs, &cfg, NEVER).unwrap();
    let mut dirs_of: std::collections::HashMap<std::thread::ThreadId, BTreeSet<String>> =
        std::collections::HashMap::new();
    let data_ops = [
        "create",
        "open_read",
        "open_append",
        "unlink",
        "write",
        "read",
        "append",
    ];
    for c in fs.calls().iter().filter(|c| data_ops.contains(&c.op)) {
        let top = c.path.split('/').next().unwrap().to_string();
        dirs_of.entry(c.thread).or_default().insert(top);
    }
    // Five worker threads per phase (new ones each phase), each in one
    // directory; together all five directories.
    let mut all = BTreeSet::new();
    for dirs in dirs_of.values() {
        assert_eq!(dirs.len(), 1, "{dirs:?}");
        all.extend(dirs.iter().cloned());
    }
    let want: BTreeSet<String> = (0..5).map(filemark::thread_dir).collect();
    assert_eq!(all, want);
}

#[test]
fn filemark_biases_are_percent() {
    // bias read 75%: RND(100) < 75. Over 5000 transactions on one thread, a
    // 10%-step reading (RND(10) < 75 always true) would read every time.
    let cfg = FilemarkConfig {
        files: 200,
        transactions: 5000,
        warmup_transactions: 0,
        phases: 1,
        bias_create: Some(50),
        ..FilemarkConfig::small_file(1)
    };
    let mut fs = MemFs::default();
    let r = filemark::run(&mut fs, &cfg, NEVER).unwrap();
    let c = r.transaction_phases[0].counts;
    let reads = c.read as f64 / (c.read + c.appended) as f64;
    assert!((0.72..0.78).contains(&reads), "{reads}");
    let creates = c.created as f64 / (c.created + c.deleted) as f64;
    assert!((0.46..0.54).contains(&creates), "{creates}");
}

#[test]
fn filemark_presets_are_seed_001s() {
    let s = FilemarkConfig::small_file(8);
    assert_eq!(
        (s.size_low, s.size_high, s.read_block_size),
        (512, 10_000, 512)
    );
    assert_eq!((s.bias_read, s.bias_create), (Some(75), Some(50)));
    assert_eq!((s.files, s.subdirectories, s.threads), (10_000, 10, 8));
    let l = FilemarkConfig::large_file(128);
    assert_eq!((l.size_low, l.size_high), (4096, 16_384));
    assert_eq!((l.read_block_size, l.write_block_size), (4096, 4096));
    for t in [1, 8, 64, 128] {
        assert_eq!(FilemarkConfig::small_file(t).validate(), Ok(()));
        assert_eq!(FilemarkConfig::large_file(t).validate(), Ok(()));
    }
}

#[test]
fn bad_filemark_configs_are_refused() {
    let base = tiny_filemark(4);
    let bad = [
        (
            FilemarkConfig {
                threads: 0,
                ..base.clone()
            },
            "threads",
        ),
        (
            FilemarkConfig {
                threads: 2000,
                ..base.clone()
            },
            "threads",
        ),
        (
            FilemarkConfig {
                files: 3,
                ..base.clone()
            },
            "cannot be split",
        ),
        (
            FilemarkConfig {
                phases: 0,
                ..base.clone()
            },
            "phases",
        ),
        (
            FilemarkConfig {
                bias_read: Some(101),
                ..base.clone()
            },
            "bias read",
        ),
        (
            FilemarkConfig {
                size_low: 0,
                ..base.clone()
            },
            "size low",
        ),
        (
            FilemarkConfig {
                seed: i32::MAX as u32,
                ..base.clone()
            },
            "overflows",
        ),
    ];
    for (cfg, want) in bad {
        let err = cfg.validate().unwrap_err();
        assert!(err.contains(want), "{want}: {err}");
        let mut fs = MemFs::default();
        let e = filemark::run(&mut fs, &cfg, NEVER).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }
}

#[test]
fn filemark_interrupt_ends_the_run_with_the_phases_so_far() {
    // Reads and appends only: no thread can run out of files before the
    // interrupt.
    let cfg = FilemarkConfig {
        transactions: 20_000_000,
        phases: 2,
        bias_create: None,
        ..tiny_filemark(2)
    };
    let mut fs = MemFs::default();
    let t0 = std::time::Instant::now();
    let r = filemark::run(&mut fs, &cfg, &|| t0.elapsed().as_millis() > 50).unwrap();
    assert_eq!(r.stopped_early.as_deref(), Some("interrupted"));
    assert_eq!(r.transaction_phases.len(), 1);
    assert!(r.transaction_phases[0].interrupted);
    assert!(r.deletion.is_none());
}

#[test]
fn filemark_runs_on_nvmfs_and_leaves_a_clean_image() {
    let cfg = tiny_filemark(4);
    let image = unique("fm.img");
    let mut t = NvmfsTarget::create(image.clone(), 64 << 20, 2048).unwrap();
    let r = filemark::run(&mut t, &cfg, NEVER).unwrap();
    assert!(r
        .transaction_phases
        .iter()
        .all(|p| p.remounted && p.transactions == 210));
    assert_eq!(t.fs().read_dir("/").unwrap().len(), 0);
    let copy = image.with_extension("copy");
    t.remount().unwrap();
    std::fs::copy(&image, &copy).unwrap();
    let report = nvmfs::fsck::check_image(&copy).unwrap();
    std::fs::remove_file(&copy).unwrap();
    assert!(report.is_clean(), "{report:?}");
    t.close().unwrap();
}

#[test]
fn filemark_runs_on_a_kernel_directory() {
    let cfg = FilemarkConfig {
        buffering: false,
        ..tiny_filemark(3)
    };
    let mut t = DirTarget::new(ScratchDir::create(unique("fmdir")).unwrap());
    let r = filemark::run(&mut t, &cfg, NEVER).unwrap();
    assert_eq!(r.creation.counts.created, 103);
    assert!(r.transaction_phases.iter().all(|p| !p.remounted));
    assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0);
}

#[test]
fn configs_and_results_serialise() {
    let (pmrc, _) = testdata!("locations");
    let cfg = parse_command_file(pmrc).unwrap().runs[0].clone();
    let json = serde_json::to_string(&cfg).unwrap();
    assert_eq!(serde_json::from_str::<PostmarkConfig>(&json).unwrap(), cfg);
    let fm = FilemarkConfig::large_file(64);
    let json = serde_json::to_string(&fm).unwrap();
    assert_eq!(serde_json::from_str::<FilemarkConfig>(&json).unwrap(), fm);
    let (r, _) = run_file(testdata!("small").0, &[]);
    let v = serde_json::to_value(&r[0]).unwrap();
    assert_eq!(v["files"]["created_mixed"], 33);
    assert_eq!(v["bytes_written"], 330851);
    let mut fs = MemFs::default();
    let r = filemark::run(&mut fs, &tiny_filemark(2), NEVER).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["creation"]["counts"]["created"], 103);
}

/// The counts of small.pmrc's run (see `counts_equal_the_original_report`) with round
/// phase times, so that every rate of the report is known.
fn known_result() -> PostmarkResult {
    let files = FileCounts {
        created: 53,
        created_alone: 20,
        created_mixed: 33,
        read: 35,
        appended: 25,
        deleted: 53,
        deleted_alone: 26,
        deleted_mixed: 27,
    };
    let seconds = PhaseSeconds {
        subdirectories_created: 0.0,
        creation: 0.5,
        transactions: 2.0,
        deletion: 0.25,
        subdirectories_deleted: 0.0,
        total: 2.75,
    };
    let bytes = (2 << 20, 330851);
    PostmarkResult {
        transactions: 60,
        out_of_files: false,
        files,
        bytes_read: bytes.0,
        bytes_written: bytes.1,
        seconds,
        rates: Rates::of(60, &files, bytes, &seconds),
        transaction_latency_ns: Default::default(),
    }
}

#[test]
fn verbose_report_has_postmarks_lines() {
    let want = "\
Time:
\t2.750 seconds total
\t2.000 seconds of transactions (30.00 per second)

Files:
\t53 created (19.27 per second)
\t\tCreation alone: 20 files (40.00 per second)
\t\tMixed with transactions: 33 files (16.50 per second)
\t35 read (17.50 per second)
\t25 appended (12.50 per second)
\t53 deleted (19.27 per second)
\t\tDeletion alone: 26 files (104.00 per second)
\t\tMixed with transactions: 27 files (13.50 per second)

Data:
\t2.00 megabytes read (744.73 kilobytes per second)
\t323.10 kilobytes written (117.49 kilobytes per second)
";
    assert_eq!(format_verbose(&known_result()), want);
    assert_eq!(format_report(&known_result(), ReportFormat::Verbose), want);
}

#[test]
fn terse_report_is_one_line_of_thirteen_numbers() {
    let line = format_terse(&known_result());
    assert_eq!(
        line,
        "2.750 2.000 30.00 19.27 40.00 16.50 17.50 12.50 19.27 104.00 13.50 762600.73 120309.45\n"
    );
    let mut r = known_result();
    r.out_of_files = true;
    let text = format_report(&r, ReportFormat::Terse);
    assert!(text.starts_with("out of files!\n"), "{text}");
    assert!(text.ends_with(&line), "{text}");
}

#[test]
fn scalef_picks_postmarks_units() {
    use super::report::scalef;
    assert_eq!(scalef(0.0), "0.000000 bytes");
    assert_eq!(scalef(512.0), "0.50 kilobytes");
    // Exactly one megabyte is not above one: kilobytes.
    assert_eq!(scalef(1048576.0), "1024.00 kilobytes");
    assert_eq!(scalef(3.0 * 1048576.0), "3.00 megabytes");
}

#[test]
fn several_locations_are_made_with_their_parents() {
    let mut cfg = PostmarkConfig::default();
    let loc = |path: &str, weight| Location {
        path: path.into(),
        weight,
    };
    // One location is the target itself: nothing to make.
    cfg.locations = vec![loc("/mnt/one", 1)];
    let fs = MemFs::default();
    make_locations(&fs, &cfg).unwrap();
    assert_eq!(fs.entries(), (vec![], vec![]));
    cfg.locations = vec![loc("/x/y", 1), loc("x/z", 2), loc("w", 1)];
    cfg.number = 20;
    cfg.transactions = 50;
    fs.mkdir(&"x".to_string()).unwrap();
    make_locations(&fs, &cfg).unwrap();
    let dirs: Vec<String> = ["w", "x", "x/y", "x/z"].map(String::from).into();
    assert_eq!(fs.entries(), (vec![], dirs.clone()));
    // The run spreads its files over them and leaves only the directories.
    let r = run(&fs, &cfg, NEVER).unwrap();
    assert_eq!(r.files.created, r.files.deleted);
    assert_eq!(fs.entries(), (vec![], dirs));
    let created: BTreeSet<String> = fs
        .calls()
        .iter()
        .filter(|c| c.op == "create")
        .map(|c| c.path.rsplit_once('/').map_or("", |p| p.0).to_string())
        .collect();
    assert_eq!(created, ["w", "x/y", "x/z"].map(String::from).into());
}
