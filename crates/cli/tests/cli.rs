//! Runs the built `nvmfs` binary: mkfs -> info -> fsck, damaged and missing images, and
//! mkfs refusing to overwrite.

use std::path::Path;
use std::process::{Command, Output};

fn nvmfs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvmfs"))
        .args(args)
        .output()
        .expect("run nvmfs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn mkfs_16m(image: &Path) {
    let out = nvmfs(&["mkfs", "--size", "16M", image.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "mkfs: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("16 MiB") && stdout.contains("inodes"),
        "{stdout}"
    );
}

#[test]
fn mkfs_mapping_shows_in_info_and_fsck_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    for mapping in ["extent", "radix", "cuckoo", "level"] {
        let image = dir.path().join(format!("{mapping}.img"));
        let img = image.to_str().unwrap();
        let out = nvmfs(&["mkfs", "--size", "16M", "--mapping", mapping, img]);
        assert_eq!(out.status.code(), Some(0), "mkfs: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains(&format!("mapping:      {mapping}")));
        let out = nvmfs(&["info", img, "--json"]);
        assert_eq!(out.status.code(), Some(0), "info: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["mapping"]["name"], mapping);
        assert_eq!(
            v["mapping"]["tree_data_blocks"], 0,
            "a fresh image maps nothing"
        );
        // The cuckoo table's blocks in the data region show where tree nodes would.
        let (nodes, label) = match mapping {
            "cuckoo" | "level" => (v["mapping"]["tree_node_blocks"].as_u64().unwrap(), "table:"),
            _ => (0, "tree nodes"),
        };
        assert_eq!(v["mapping"]["tree_node_blocks"], nodes);
        assert!(
            !["cuckoo", "level"].contains(&mapping) || nodes > 0,
            "table blocks"
        );
        let out = nvmfs(&["info", img]);
        assert!(text(&out.stdout).contains(label), "{}", text(&out.stdout));
        let out = nvmfs(&["fsck", "-n", img]);
        assert_eq!(out.status.code(), Some(0), "fsck: {}", text(&out.stdout));
    }
    let out = nvmfs(&[
        "mkfs",
        "--mapping",
        "btree",
        dir.path().join("x.img").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("hashfs"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn mkfs_info_fsck_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("test.img");
    let img = image.to_str().unwrap();
    mkfs_16m(&image);
    assert_eq!(std::fs::metadata(&image).unwrap().len(), 16 << 20);

    let out = nvmfs(&["info", img, "--json"]);
    assert_eq!(out.status.code(), Some(0), "info: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("info --json is JSON");
    assert_eq!(v["size_bytes"], 16u64 << 20);
    assert_eq!(v["fs_size_bytes"], 16u64 << 20);
    assert_eq!(v["block_size_bytes"], 4096);
    assert_eq!(v["clean"], true);
    assert_eq!(v["usage"]["directories"], 1);
    assert_eq!(v["usage"]["inodes_used"], 1);
    assert_eq!(v["mapping"]["probe_histogram"].as_array().unwrap().len(), 7);
    let data = &v["regions"]["data"];
    assert_eq!(
        data["start_block"].as_u64().unwrap() + data["blocks"].as_u64().unwrap(),
        v["total_blocks"].as_u64().unwrap()
    );

    let out = nvmfs(&["info", img]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("hash table"));

    let out = nvmfs(&["fsck", img]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "fsck: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains(": clean, 1 inodes"),
        "{}",
        text(&out.stdout)
    );

    let out = nvmfs(&["fsck", "-n", "--json", img]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("fsck --json is JSON");
    assert_eq!(v["clean"], true);
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);
    assert_eq!(v["directories"], 1);
}

#[test]
fn fsck_of_zeroed_superblocks_exits_4() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("zeroed.img");
    let img = image.to_str().unwrap();
    mkfs_16m(&image);
    // Both superblocks: the primary (block 0) and the replica (block 1).
    let mut bytes = std::fs::read(&image).unwrap();
    bytes[..8192].fill(0);
    std::fs::write(&image, &bytes).unwrap();

    let out = nvmfs(&["fsck", img]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("0x0: "), "{stdout}");
    assert!(stdout.contains("problem(s) found"), "{stdout}");

    let out = nvmfs(&["fsck", "--json", img]);
    assert_eq!(out.status.code(), Some(4));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["clean"], false);
    assert_eq!(v["problems"][0]["offset"], 0);

    let out = nvmfs(&["info", img]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("nvmfs info: "),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn fsck_operational_errors_exit_8() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.img");
    let out = nvmfs(&["fsck", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(8));
    assert!(
        text(&out.stderr).starts_with("nvmfs fsck: "),
        "{}",
        text(&out.stderr)
    );

    // A directory is not an image.
    let out = nvmfs(&["fsck", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(8));

    // Repair of a missing image, and of a mounted one (refused: the lock is held).
    let out = nvmfs(&["fsck", "-y", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(8));
    let image = dir.path().join("ok.img");
    mkfs_16m(&image);
    let fs = nvmfs::Fs::mount(&image, &nvmfs::MountOptions::default()).unwrap();
    let out = nvmfs(&["fsck", "-y", image.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(8), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("nvmfs fsck: ") && stderr.contains("in use"),
        "{stderr}"
    );
    fs.unmount().unwrap();
    // A clean image: nothing to do.
    let out = nvmfs(&["fsck", "-p", image.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains(": clean, 1 inodes"));

    // -n and -y together is a usage error.
    let out = nvmfs(&["fsck", "-n", "-y", image.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(16));

    // Usage errors get e2fsck's 16.
    let out = nvmfs(&["fsck"]);
    assert_eq!(out.status.code(), Some(16));
}

#[test]
fn mkfs_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("keep.img");
    let img = image.to_str().unwrap();
    mkfs_16m(&image);
    let before = std::fs::read(&image).unwrap();

    let out = nvmfs(&["mkfs", "--size", "16M", img]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("nvmfs mkfs: "), "{stderr}");
    assert!(
        stderr.contains(img) && stderr.contains("nvmfs image") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&image).unwrap(),
        before,
        "refused mkfs must not touch the image"
    );

    // Any other data is protected too.
    let other = dir.path().join("notes.txt");
    std::fs::write(&other, "precious").unwrap();
    let out = nvmfs(&["mkfs", "--size", "16M", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read(&other).unwrap(), b"precious");

    // --force overwrites: a new file system with a new uuid.
    let uuid = |p: &str| {
        let out = nvmfs(&["info", "--json", p]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["uuid"].as_str().unwrap().to_string()
    };
    let old = uuid(img);
    let out = nvmfs(&["mkfs", "--size", "16M", "--force", img]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_ne!(uuid(img), old);
}

#[test]
fn mkfs_rejects_bad_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("bad.img");
    let img = image.to_str().unwrap();
    for size in ["12X", "1.5G", "1MB", "100K", ""] {
        let out = nvmfs(&["mkfs", "--size", size, img]);
        assert_eq!(out.status.code(), Some(1), "size {size:?}");
        assert!(
            text(&out.stderr).starts_with("nvmfs mkfs: "),
            "{}",
            text(&out.stderr)
        );
        assert!(!image.exists(), "a failed mkfs leaves no file");
    }
}

#[test]
fn fsck_and_info_of_an_image_left_mounted() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("mounted.img");
    let img = image.to_str().unwrap();
    mkfs_16m(&image);
    let fs = nvmfs::Fs::mount(&image, &nvmfs::MountOptions::default()).unwrap();
    fs.create_dir("/d").unwrap();

    let out = nvmfs(&["info", "--json", img]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["clean"], false);
    assert_eq!(v["mount_count"], 1);
    assert_eq!(v["usage"]["directories"], 2);

    // Still mounted (by this process): fsck warns, checks the snapshot as recovered.
    let out = nvmfs(&["fsck", img]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stderr.contains("in use"), "{stderr}");
    assert!(stdout.contains("recovery: "), "{stdout}");
    assert!(stdout.contains("clean, 2 inodes"), "{stdout}");

    // Never formatted while in use, even with --force.
    let out = nvmfs(&["mkfs", "--size", "16M", "--force", img]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("in use by another process"),
        "{}",
        text(&out.stderr)
    );

    fs.unmount().unwrap();
    let out = nvmfs(&["fsck", img]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("recovery: "));
}

#[test]
fn help_describes_commands() {
    let out = nvmfs(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for cmd in ["mkfs", "fsck", "info", "bench"] {
        assert!(help.contains(cmd), "{help}");
    }
    let out = nvmfs(&["fsck", "--help"]);
    let help = text(&out.stdout);
    assert!(
        help.contains("Exit status") && help.contains("operational error"),
        "{help}"
    );

    // No subcommand: help on stderr, usage error.
    let out = nvmfs(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("Usage: nvmfs"));
}

#[test]
fn fsck_repairs_the_damaged_image_corpus() {
    use nvmfs::testing::corrupt::corpus;
    use nvmfs::testing::known_image;
    let dir = tempfile::tempdir().unwrap();
    let known = known_image();
    for case in corpus() {
        let image = dir.path().join(format!("{}.img", case.name));
        let img_path = image.to_str().unwrap();
        let mut img = known.image.clone();
        (case.damage)(&known, &mut img);
        std::fs::write(&image, &img).unwrap();
        let out = nvmfs(&["fsck", "-n", img_path]);
        assert_eq!(
            out.status.code(),
            Some(case.check),
            "{}: fsck -n: {}{}",
            case.name,
            text(&out.stdout),
            text(&out.stderr)
        );
        let out = nvmfs(&["fsck", "-y", img_path]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(
            out.status.code(),
            Some(case.repair),
            "{}: fsck -y: {stdout}{stderr}",
            case.name
        );
        if case.repair == 1 {
            assert!(stdout.contains("repaired 0x"), "{}: {stdout}", case.name);
            assert!(stdout.contains("change(s) made; now clean"), "{stdout}");
            for flag in ["-n", "-p"] {
                let out = nvmfs(&["fsck", flag, img_path]);
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{}: fsck {flag} after repair: {}",
                    case.name,
                    text(&out.stdout)
                );
            }
        } else {
            assert!(stderr.contains("cannot repair"), "{}: {stderr}", case.name);
            assert!(stdout.contains("left uncorrected"), "{stdout}");
        }
    }
}

#[test]
fn fsck_repair_json() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("replica.img");
    let img = image.to_str().unwrap();
    mkfs_16m(&image);
    let mut bytes = std::fs::read(&image).unwrap();
    bytes[4096 + 40] ^= 1; // the replica superblock
    std::fs::write(&image, &bytes).unwrap();
    let out = nvmfs(&["fsck", "-y", "--json", img]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["clean"], true);
    assert_eq!(v["modified"], true);
    assert_eq!(v["problems"][0]["offset"], 4096);
    assert_eq!(v["repairs"][0]["offset"], 4096);
    assert_eq!(v["remaining"].as_array().unwrap().len(), 0);
    assert!(v["unrepairable"].is_null());
    let out = nvmfs(&["fsck", "-y", "--json", img]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["modified"], false);
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);
}

#[test]
fn bench_filebench_tiny_varmail_on_nvmfs_writes_table_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fb.json");
    let out = nvmfs(&[
        "bench",
        "filebench",
        "-p",
        "varmail",
        "--nfiles",
        "50",
        "--threads",
        "2",
        "--ops",
        "500",
        "--warmup",
        "0",
        "--seconds",
        "30",
        "-t",
        "nvmfs",
        // Under the tests' load the CPU link says nothing about placement: no trial set aside.
        "--any-placement",
        // Nor does the trials' spread: exactly the three trials.
        "--extra-trials",
        "0",
        "--shm-dir",
        dir.path().to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("== varmail on nvmfs: ok"), "{stdout}");
    assert!(stdout.contains("deletefile1"), "{stdout}");
    assert!(stdout.contains("IO Summary: "), "{stdout}");
    assert!(stdout.contains("(95% CI, 2 kept trials)"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["schema"], "nvmfs-lab/bench-filebench/v1");
    assert_eq!(v["config"]["personality"]["files"], 50);
    assert_eq!(v["config"]["personality"]["threads"], 2);
    assert_eq!(v["config"]["extra_trials"], 0);
    let run = &v["runs"][0];
    assert_eq!(run["target"], "nvmfs");
    assert_eq!(run["status"], "ok");
    let trials = run["result"]["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 3);
    assert_eq!(trials[0]["discarded"], true);
    for t in &trials[1..] {
        let ops = t["summary"]["ops"].as_u64().unwrap();
        assert!(ops >= 500, "{ops} ops");
        assert_eq!(t["flowops"].as_array().unwrap().len(), 13);
    }
    assert_eq!(run["result"]["ops_per_sec"]["n"], 2);
    // The image was removed.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "fb.json")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn bench_filebench_bad_input_is_a_clear_error() {
    let out = nvmfs(&["bench", "filebench", "-p", "oltp", "--nfiles", "100"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("nfiles") && err.contains("at most 64"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let out = nvmfs(&["bench", "filebench", "-p", "nosuch"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("oltp"), "{}", text(&out.stderr));
    let out = nvmfs(&["bench", "filebench", "-p", "varmail", "--iosize", "lots"]);
    assert_eq!(out.status.code(), Some(2));
    let out = nvmfs(&["bench", "filebench", "-p", "varmail", "-t", "ext9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("ext9"), "{}", text(&out.stderr));
    let out = nvmfs(&["bench", "filebench", "-p", "webserver", "--usermode", "5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("oltp flags"));
    let out = nvmfs(&[
        "bench",
        "filebench",
        "-p",
        "varmail",
        "--extra-trials",
        "101",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("extra trials must be 0..=100"));
}

#[test]
fn study_extra_trials_is_refused_where_there_are_no_filebench_cells() {
    for study in ["linux-2002", "nvmfs-2013"] {
        let out = nvmfs(&["study", study, "--quick", "--extra-trials", "1"]);
        assert_eq!(out.status.code(), Some(2), "{study}");
        let err = text(&out.stderr);
        assert!(err.contains("has no Filebench cells"), "{study}: {err}");
    }
    let out = nvmfs(&["study", "nvm-2015", "--quick", "--extra-trials", "101"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--extra-trials must be 0..=100"));
}

/// Runs `nvmfs bench ARGS -t nvmfs -t tmpfs --trials 2 --warmup 0` with a scratch shm dir
/// and returns stdout and the JSON file, after checking that the scratch files are gone.
fn bench_db_on_nvmfs_and_tmpfs(args: &[&str]) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let json = dir.path().join("out.json");
    let mut argv = vec!["bench"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&[
        "--trials", "2", "--warmup", "0", "-t", "nvmfs", "-t", "tmpfs",
    ]);
    argv.extend_from_slice(&["--shm-dir", dir.path().to_str().unwrap()]);
    argv.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let out = nvmfs(&argv);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "out.json")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    (stdout, v)
}

/// The two records of a database bench: nvmfs then tmpfs, each ok with a kept trial's
/// metric above zero and its database checks passed.
fn check_db_records(v: &serde_json::Value, workload: &str, metric: &str) {
    let records = v["records"].as_array().unwrap();
    let targets: Vec<&str> = records
        .iter()
        .map(|r| r["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["nvmfs", "tmpfs"]);
    for r in records {
        assert_eq!(r["workload"], workload);
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["metric"], metric);
        assert_eq!(r["ops_per_sec"]["n"], 1, "one kept trial of two");
        assert!(r["ops_per_sec"]["mean"].as_f64().unwrap() > 0.0, "{r}");
        let trials = r["result"]["trials"].as_array().unwrap();
        assert_eq!(trials.len(), 2);
        assert_eq!(trials[0]["discarded"], true);
        assert!(!r["result"]["checks"].as_array().unwrap().is_empty(), "{r}");
    }
}

#[test]
fn bench_ycsb_tiny_on_nvmfs_and_tmpfs_writes_tables_and_json() {
    let (stdout, v) = bench_db_on_nvmfs_and_tmpfs(&[
        "ycsb",
        "--workload",
        "a",
        "--records",
        "500",
        "--seconds",
        "0.2",
    ]);
    assert!(stdout.contains("== ycsb-a on nvmfs: ok"), "{stdout}");
    assert!(stdout.contains("== ycsb-a on tmpfs: ok"), "{stdout}");
    assert!(
        stdout.contains("p99 µs") && stdout.contains("UPDATE"),
        "{stdout}"
    );
    assert_eq!(v["schema"], "nvmfs-lab/bench-ycsb/v1");
    assert_eq!(v["config"]["records"], 500);
    assert_eq!(v["config"]["database"]["engine"], "sqlite");
    check_db_records(&v, "ycsb-a", "ops/s");
    for r in v["records"].as_array().unwrap() {
        let read = &r["latency"]["READ"];
        assert!(read["count"].as_u64().unwrap() > 0, "{r}");
        assert!(read["p50_ns"].as_u64().unwrap() <= read["max_ns"].as_u64().unwrap());
    }
}

#[test]
fn bench_tpcc_tiny_on_nvmfs_and_tmpfs_writes_tables_and_json() {
    let (stdout, v) = bench_db_on_nvmfs_and_tmpfs(&[
        "tpcc",
        "--items",
        "1000",
        "--customers",
        "30",
        "--seconds",
        "0.3",
    ]);
    assert!(stdout.contains("== tpcc on nvmfs: ok"), "{stdout}");
    assert!(
        stdout.contains("tpmC: ") && stdout.contains("total tpm: "),
        "{stdout}"
    );
    assert_eq!(v["schema"], "nvmfs-lab/bench-tpcc/v1");
    assert_eq!(v["config"]["scale"]["items"], 1000);
    check_db_records(&v, "tpcc", "tpmC");
    for r in v["records"].as_array().unwrap() {
        assert!(
            r["latency"]["New-Order"]["count"].as_u64().unwrap() > 0,
            "{r}"
        );
        assert!(
            r["total_tpm"]["mean"].as_f64().unwrap() > r["ops_per_sec"]["mean"].as_f64().unwrap()
        );
    }
}

#[test]
fn bench_ycsb_and_tpcc_bad_input_is_a_clear_error() {
    let cases: [(&[&str], &str); 6] = [
        (&["ycsb", "--workload", "g"], "possible values"),
        (
            &["ycsb", "-w", "a", "--records", "0"],
            "--records must be at least 1",
        ),
        (
            &["ycsb", "-w", "a", "--threads", "0"],
            "--threads must be at least 1",
        ),
        (
            &["ycsb", "-w", "a", "--block-cache", "16M"],
            "do not apply to --db sqlite",
        ),
        (
            &["ycsb", "-w", "a", "--journal-mode", "often"],
            "unknown journal mode",
        ),
        (&["tpcc", "--customers", "5"], "not in 10..=3000"),
    ];
    for (args, expected) in cases {
        let mut argv = vec!["bench"];
        argv.extend_from_slice(args);
        let out = nvmfs(&argv);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// Runs `nvmfs bench ARGS -t nvmfs -t tmpfs` with a scratch shm dir and returns stdout and
/// the JSON file, after checking the exit status and that the scratch files are gone.
fn bench_lab_on_nvmfs_and_tmpfs(args: &[&str]) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let json = dir.path().join("out.json");
    let mut argv = vec!["bench"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["-t", "nvmfs", "-t", "tmpfs"]);
    argv.extend_from_slice(&["--shm-dir", dir.path().to_str().unwrap()]);
    argv.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let out = nvmfs(&argv);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "out.json")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(v["interrupted"], false);
    (stdout, v)
}

/// The records' (target, status) pairs, each expected "ok".
fn ok_targets(v: &serde_json::Value) -> Vec<String> {
    v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["status"], "ok", "{r}");
            r["target"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn bench_postmark_tiny_on_nvmfs_and_tmpfs_prints_postmarks_report_and_json() {
    let (stdout, v) = bench_lab_on_nvmfs_and_tmpfs(&[
        "postmark",
        "--number",
        "50",
        "--transactions",
        "100",
        "--subdirectories",
        "3",
        "--seed",
        "7",
    ]);
    assert!(stdout.contains("== postmark on nvmfs: ok"), "{stdout}");
    assert!(stdout.contains("== postmark on tmpfs: ok"), "{stdout}");
    assert!(
        stdout.contains("seconds of transactions") && stdout.contains("Creation alone: 50 files"),
        "{stdout}"
    );
    assert_eq!(v["schema"], "nvmfs-lab/bench-postmark/v1");
    assert_eq!(v["config"]["number"], 50);
    assert_eq!(ok_targets(&v), ["nvmfs", "tmpfs"]);
    let records = v["records"].as_array().unwrap();
    for r in records {
        let res = &r["result"];
        assert_eq!(res["transactions"], 100);
        assert_eq!(res["files"]["created"], res["files"]["deleted"], "{r}");
        assert_eq!(res["files"]["created_alone"], 50);
    }
    // The same seed: the same files and operations on both targets.
    assert_eq!(records[0]["result"]["files"], records[1]["result"]["files"]);
    assert_eq!(
        records[0]["result"]["bytes_written"],
        records[1]["result"]["bytes_written"]
    );
}

#[test]
fn bench_postmark_reads_a_command_file_and_flags_override_it() {
    let cfg = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        cfg.path(),
        "set number 30\nset transactions 1000\nset location +/pm/a\n\
         set location +/pm/b 2\nset report terse\nrun\nquit\n",
    )
    .unwrap();
    let path = cfg.path().to_str().unwrap();
    let (stdout, v) =
        bench_lab_on_nvmfs_and_tmpfs(&["postmark", "--config", path, "--transactions", "60"]);
    // Terse: a line of 13 numbers after each target's heading.
    let terse: Vec<&str> = stdout
        .lines()
        .filter(|l| l.split_whitespace().count() == 13)
        .collect();
    assert_eq!(terse.len(), 2, "{stdout}");
    assert_eq!(v["config"]["config_file"], path);
    assert_eq!(v["config"]["transactions"], 60);
    assert_eq!(v["config"]["locations"].as_array().unwrap().len(), 2);
    assert_eq!(ok_targets(&v), ["nvmfs", "tmpfs"]);
    for r in v["records"].as_array().unwrap() {
        assert_eq!(r["result"]["transactions"], 60, "{r}");
    }
}

#[test]
fn bench_filemark_tiny_sweeps_thread_counts_on_fresh_targets() {
    let (stdout, v) = bench_lab_on_nvmfs_and_tmpfs(&[
        "filemark",
        "--threads",
        "1,2",
        "--number",
        "40",
        "--transactions",
        "200",
        "--warmup-transactions",
        "20",
        "--phases",
        "2",
    ]);
    assert!(
        stdout.starts_with("target") && stdout.contains("transactions/s"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 5, "{stdout}");
    assert_eq!(v["schema"], "nvmfs-lab/bench-filemark/v1");
    assert_eq!(v["config"]["thread_counts"], serde_json::json!([1, 2]));
    assert_eq!(v["config"]["preset"], "small");
    assert_eq!(ok_targets(&v), ["nvmfs", "nvmfs", "tmpfs", "tmpfs"]);
    for (r, threads) in v["records"].as_array().unwrap().iter().zip([1, 2, 1, 2]) {
        let res = &r["result"];
        assert_eq!(res["threads"], threads, "{r}");
        assert_eq!(res["creation"]["counts"]["created"], 40);
        let phases = res["transaction_phases"].as_array().unwrap();
        assert_eq!(phases.len(), 2);
        // nvmfs is remounted after each phase; a tmpfs directory cannot be.
        assert_eq!(phases[0]["remounted"], r["target"] == "nvmfs", "{r}");
        assert_eq!(
            res["transactions_per_second"]["n"], 1,
            "first phase discarded"
        );
    }
}

#[test]
fn bench_pgmeter_tiny_runs_each_outstanding_count_on_shared_files() {
    let (stdout, v) = bench_lab_on_nvmfs_and_tmpfs(&[
        "pgmeter",
        "--spec",
        "oltp-8k",
        "--file-size",
        "1M",
        "--outstanding",
        "1,2",
        "--warmup",
        "0",
        "--seconds",
        "0.2",
        "--interval",
        "0.05",
    ]);
    assert!(
        stdout.contains("p99 µs") && stdout.contains("MB/s"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 5, "{stdout}");
    assert_eq!(v["schema"], "nvmfs-lab/bench-pgmeter/v1");
    assert_eq!(v["config"]["outstanding_counts"], serde_json::json!([1, 2]));
    assert_eq!(ok_targets(&v), ["nvmfs", "nvmfs", "tmpfs", "tmpfs"]);
    for (r, n) in v["records"].as_array().unwrap().iter().zip([1, 2, 1, 2]) {
        let res = &r["result"];
        assert_eq!(res["outstanding"], n);
        assert_eq!(res["spec"], "oltp-8k");
        assert!(res["ops"].as_u64().unwrap() > 0, "{r}");
        assert!(res["reads"].as_u64().unwrap() > 0 && res["writes"].as_u64().unwrap() > 0);
        // The second test of a target keeps the first one's file.
        assert_eq!(res["prepared"]["reused"], if n == 1 { 0 } else { 1 }, "{r}");
    }
}

#[test]
fn bench_aim7_tiny_sweeps_task_counts_and_marks_the_peak() {
    let (stdout, v) = bench_lab_on_nvmfs_and_tmpfs(&[
        "aim7",
        "--tasks",
        "1,2",
        "--filesize",
        "16K",
        "--jobs-per-task",
        "9",
    ]);
    assert!(stdout.contains("jobs/min/task"), "{stdout}");
    assert_eq!(stdout.lines().count(), 5, "{stdout}");
    assert_eq!(
        stdout.matches(" * ").count(),
        2,
        "a peak per target: {stdout}"
    );
    assert_eq!(v["schema"], "nvmfs-lab/bench-aim7/v1");
    assert_eq!(v["config"]["task_counts"], serde_json::json!([1, 2]));
    assert_eq!(ok_targets(&v), ["nvmfs", "tmpfs"]);
    for r in v["records"].as_array().unwrap() {
        let subruns = r["result"]["subruns"].as_array().unwrap();
        let jobs: Vec<u64> = subruns
            .iter()
            .map(|s| s["jobs"].as_u64().unwrap())
            .collect();
        // One job of each of the nine subtests per task.
        assert_eq!(jobs, [9, 18], "{r}");
        assert!(subruns.iter().all(|s| s["seconds"].as_f64().unwrap() > 0.0));
        assert!(r["result"]["peak"]["jobs_per_minute"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn bench_postmark_filemark_pgmeter_aim7_bad_input_is_a_clear_error() {
    let cases: [(&[&str], &str); 9] = [
        (&["postmark", "--bias-read", "11"], "0..10"),
        (&["postmark", "--number", "0"], "number (files) must be"),
        (
            &["postmark", "--config", "/nonexistent/pm.cfg"],
            "/nonexistent/pm.cfg",
        ),
        (
            &["filemark", "--threads", "8", "--number", "4"],
            "cannot be split",
        ),
        (&["filemark", "--bias-create", "101"], "0..100"),
        (&["pgmeter", "--spec-line", "4K:50:100:100"], "add up to 50"),
        (&["pgmeter", "--file-size", "4K"], "--file-size"),
        (&["aim7", "--tasks", "4,2"], "must increase"),
        (&["aim7", "--mix", "disk_zz"], "unknown AIM7 disk subtest"),
    ];
    for (args, expected) in cases {
        let mut argv = vec!["bench"];
        argv.extend_from_slice(args);
        let out = nvmfs(&argv);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = nvmfs(&["bench", "aim7", "-t", "ext9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("ext9"), "{}", text(&out.stderr));
}

#[test]
fn bench_ftl_replays_a_trace_on_both_ftls_and_names_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("seq.trace");
    // A 1 MiB device rewritten once in 256 KiB requests: FAST switches every block.
    let mut body = String::from("# nvmfs-trace 1\n# device_bytes 1048576\n");
    for pass in 0..2 {
        for i in 0..4u64 {
            body += &format!("{} W {} 512\n", pass * 10 + i, i * 512);
        }
    }
    std::fs::write(&trace, &body).unwrap();
    let json = dir.path().join("ftl.json");
    let out = nvmfs(&[
        "bench",
        "ftl",
        "--trace",
        trace.to_str().unwrap(),
        "--op",
        "0.5",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("4096 sectors in 8 requests"), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("JSON");
    assert_eq!(v["schema"], "nvmfs-lab/bench-ftl/v1");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["ftl"], "fast");
    assert_eq!(results[0]["counters"]["switch_merges"], 4);
    assert_eq!(results[0]["counters"]["page_copies"], 0);
    assert_eq!(results[1]["ftl"], "page");
    assert_eq!(results[1]["counters"]["host_page_writes"], 512);

    let bad = dir.path().join("bad.trace");
    std::fs::write(&bad, "# nvmfs-trace 1\n0 W 0 8\n1 W zero 8\n").unwrap();
    let out = nvmfs(&["bench", "ftl", "--trace", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("line 3: bad sector \"zero\""), "{err}");

    let out = nvmfs(&[
        "bench",
        "ftl",
        "--trace",
        trace.to_str().unwrap(),
        "--ftl",
        "bast",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = nvmfs(&[
        "bench",
        "ftl",
        "--trace",
        trace.to_str().unwrap(),
        "--size",
        "512K",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("over-provisioned"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn trace_import_converts_blkparse_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bp.txt");
    std::fs::write(
        &input,
        "  7,0  3  1  0.000000000  697  Q   W 0 + 64 [dd]\n\
         \x20 7,0  3  4  0.000005021  697  D   W 0 + 64 [dd]\n\
         \x20 7,0  1  7  1.5  811  D  WS 64 + 8 [dd]\n\
         Total (7,0):\n",
    )
    .unwrap();
    let out_trace = dir.path().join("bp.trace");
    let out = nvmfs(&[
        "trace",
        "import",
        "--blkparse",
        input.to_str().unwrap(),
        "--device-bytes",
        "1M",
        "-o",
        out_trace.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let trace = std::fs::read_to_string(&out_trace).unwrap();
    assert!(
        trace.starts_with("# nvmfs-trace 1\n# device_bytes 1048576\n"),
        "{trace}"
    );
    assert!(trace.ends_with("0 W 0 64\n1499994979 W 64 8\n"), "{trace}");

    std::fs::write(&input, "  7,0  3  4  0.5  697  D   W 0 + x [dd]\n").unwrap();
    let out = nvmfs(&[
        "trace",
        "import",
        "--blkparse",
        input.to_str().unwrap(),
        "-o",
        out_trace.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("line 1: bad request"),
        "{}",
        text(&out.stderr)
    );
}

/// The kill test on a tiered image: children killed mid-workload while their files spill to
/// the SSD tier, every acknowledged operation there after recovery, fsck clean.
#[test]
fn crashtest_kill_on_a_tiered_image() {
    let out = nvmfs(&["crashtest", "--tier", "--kill", "4", "--seed", "7"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("4 kill cycles (tiered:") && text.contains(", 0 violations"),
        "{text}"
    );
}

/// --tier refuses what it cannot run.
#[test]
fn crashtest_tier_refusals() {
    for args in [
        &["crashtest", "--tier", "--mutations"][..],
        &["crashtest", "--tier", "--concurrent", "1"][..],
        &[
            "crashtest",
            "--tier",
            "--mapping",
            "extent",
            "--ace",
            "seq1",
        ][..],
    ] {
        let out = nvmfs(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

/// mkfs --ssd makes a tiered image: info shows the tier, fsck is clean; bad tier options are
/// refused with a message.
#[test]
fn mkfs_ssd_makes_a_tiered_image() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("t.img");
    let ssd = dir.path().join("t.ssd");
    let (img, s) = (image.to_str().unwrap(), ssd.to_str().unwrap());
    let out = nvmfs(&[
        "mkfs",
        "--size",
        "16M",
        "--ssd",
        s,
        "--ssd-size",
        "64M",
        img,
    ]);
    assert_eq!(out.status.code(), Some(0), "mkfs: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("SSD tier:     "),
        "{}",
        text(&out.stdout)
    );
    let out = nvmfs(&["info", img, "--json"]);
    assert_eq!(out.status.code(), Some(0), "info: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tier"]["extents"], 127);
    assert_eq!(v["tier"]["ssd"], s);
    assert_eq!(nvmfs(&["fsck", img]).status.code(), Some(0));
    let out = nvmfs(&[
        "mkfs",
        "-f",
        "--size",
        "16M",
        "--mapping",
        "radix",
        "--ssd",
        s,
        img,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("needs the hashfs mapping"),
        "{}",
        text(&out.stderr)
    );
    let out = nvmfs(&[
        "mkfs",
        "-f",
        "--size",
        "16M",
        "--ssd",
        s,
        "--ssd-size",
        "512K",
        img,
    ]);
    assert!(
        text(&out.stderr).contains("too small"),
        "{}",
        text(&out.stderr)
    );
}

/// `bench micro` says on nvmfs's records, and only there, that they ran without write-backs
/// when `NVMFS_NO_FLUSH=1`; with 0 no record says it.
#[test]
fn bench_micro_notes_no_flush_on_nvmfs_records_only() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    let notes_with = |value: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_nvmfs"))
            .env("NVMFS_NO_FLUSH", value)
            .args(["bench", "micro", "-t", "nvmfs", "-t"])
            .arg(format!("dir:{}", dir.path().display()))
            .args(["-w", "stat", "--seconds", "0.05", "--files", "100"])
            .args(["--image-size", "64M", "--no-references", "--json"])
            .arg(&json)
            .output()
            .expect("run nvmfs");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let said = |target: &str| {
            let recs = v.as_array().unwrap();
            assert!(
                recs.iter().any(|r| r["target"] == target),
                "no {target} record"
            );
            recs.iter().any(|r| {
                r["target"] == target
                    && r["notes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|n| n.as_str().unwrap().starts_with("NVMFS_NO_FLUSH=1"))
            })
        };
        (
            said("nvmfs"),
            said(&format!("dir:{}", dir.path().display())),
        )
    };
    assert_eq!(notes_with("1"), (true, false));
    assert_eq!(notes_with("0"), (false, false));
}

/// `NVMFS_NO_FLUSH=1` is shown by info and leaves a working image; any other value but 0 or
/// empty is refused before the command runs.
#[test]
fn no_flush_environment_is_shown_and_bad_values_refused() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("nf.img");
    let img = image.to_str().unwrap();
    let with = |value: &str, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nvmfs"))
            .env("NVMFS_NO_FLUSH", value)
            .args(args)
            .output()
            .expect("run nvmfs")
    };
    let out = with("1", &["mkfs", "--size", "16M", img]);
    assert_eq!(out.status.code(), Some(0), "mkfs: {}", text(&out.stderr));
    let out = with("1", &["info", img, "--json"]);
    assert_eq!(out.status.code(), Some(0), "info: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let flush = v["flush_instruction"].as_str().unwrap();
    assert!(flush.starts_with("none (NVMFS_NO_FLUSH=1"), "{flush}");
    let out = with("0", &["info", img, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!v["flush_instruction"]
        .as_str()
        .unwrap()
        .contains("NVMFS_NO_FLUSH"));
    let out = with("1", &["fsck", img]);
    assert_eq!(out.status.code(), Some(0), "fsck: {}", text(&out.stdout));
    for bad in ["yes", "2", " 1"] {
        let out = with(bad, &["info", img]);
        assert_eq!(out.status.code(), Some(2), "NVMFS_NO_FLUSH={bad:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("NVMFS_NO_FLUSH") && err.contains("use 1"),
            "{err}"
        );
    }
}
