//! The whole study at a tiny size: every experiment runs on every mapping, the outputs exist
//! and the rows are sane.

use super::experiments;
use super::report;
use super::*;
use crate::study::env::Environment;
use std::collections::BTreeMap;

/// A configuration that runs everything in a few seconds.
fn tiny(out: PathBuf) -> MapStudyConfig {
    let mut c = MapStudyConfig::for_size(Size::Quick, out);
    c.trials = 2;
    c.cold_reps = 1;
    c.hot_ops = 1_000;
    c.hot_appends = 64;
    c.big_file_bytes = MIB;
    c.small_files = vec![4 << 10, 64 << 10];
    c.io_sizes = vec![4 << 10, 64 << 10];
    c.fills = vec![0.8];
    c.util_image_bytes = 16 * MIB;
    c.util_file_bytes = 256 << 10;
    c.threads = vec![1, 2];
    c.thread_pairs = 64;
    c.evict_bytes = MIB as usize;
    c.filebench = FilebenchPhases {
        files: 100,
        threads: Some(4),
        trials: 2,
        extra_trials: 0,
        warmup_seconds: 0.0,
        run_seconds: 0.2,
        // Under the tests' load the CPU link says nothing about placement.
        hold_placement: false,
    };
    c
}

/// A scratch directory in /dev/shm (else the temp dir): the images stay out of /dev/shm's top
/// level, where the other study tests look for leftovers of this process.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

#[test]
fn tiny_study_writes_sane_results() {
    let _turn = crate::study::tests::provisioning_turn();
    let dir = tempfile::tempdir().unwrap();
    let shm = scratch();
    let mut cfg = tiny(dir.path().join("out"));
    cfg.shm_dir = shm.path().to_path_buf();
    let result = experiments::run(&cfg, &|| false, &mut |_| {}).unwrap();
    assert!(result.failures.is_empty(), "{:?}", result.failures);
    let left: Vec<_> = std::fs::read_dir(shm.path()).unwrap().collect();
    assert!(left.is_empty(), "images left behind: {left:?}");
    for r in &result.rows {
        // Cycles are always positive; a Filebench trial this short on a loaded machine may
        // finish no operation.
        let positive = r.metric != "ops/s";
        assert!(
            r.summary.mean > 0.0 || !positive && r.summary.mean == 0.0,
            "{r:?}"
        );
        let kept = if ["filebench", "level-hashing"].contains(&r.experiment) {
            cfg.filebench.trials - 1
        } else {
            cfg.trials
        };
        assert_eq!(r.samples.len(), kept, "{r:?}");
        if r.metric == "mapping share" {
            assert!(r.summary.mean < 1.5, "{r:?}");
        }
    }
    // One row per mapping for each measurement of every experiment.
    let mut per: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in &result.rows {
        let key = format!(
            "{} {} {} {} {}",
            r.experiment, r.param, r.op, r.cache, r.metric
        );
        per.entry(key).or_default().push(r.mapping.clone());
    }
    let all: Vec<String> = MappingKind::ALL.iter().map(|m| m.to_string()).collect();
    for (key, mappings) in &per {
        // Level hashing runs in 4.9 only, and only level hashing does.
        let files: Vec<String> = all.iter().filter(|m| *m != "level").cloned().collect();
        let expect: Vec<String> = if key.starts_with("page-cache") {
            vec!["extent".into(), "extent+page-cache".into()]
        } else if key.starts_with("fragmentation") && !key.contains("score 1.00") {
            files.iter().filter(|m| *m != "hashfs").cloned().collect()
        } else if key.starts_with("level-hashing") {
            vec!["level".into()]
        } else {
            files.clone()
        };
        assert_eq!(mappings, &expect, "{key}");
    }
    for e in &EXPERIMENTS {
        assert!(result.rows.iter().any(|r| r.experiment == e.id), "{}", e.id);
    }
    let env = Environment::capture(&cfg.shm_dir);
    let w = report::write_all(&result, &env).unwrap();
    for f in [
        "results.json",
        "results.csv",
        "trials.csv",
        "report.md",
        "config.json",
    ] {
        assert!(w.dir.join(f).is_file(), "{f}");
    }
    assert!(w
        .files
        .iter()
        .any(|f| f.extension().is_some_and(|e| e == "svg")));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(w.dir.join("results.json")).unwrap())
            .unwrap();
    assert_eq!(json["rows"].as_array().unwrap().len(), result.rows.len());
    let cuckoo = w
        .findings
        .iter()
        .find(|f| f.id == "hashfs-slower-than-cuckoo-at-95-full")
        .unwrap();
    assert!(cuckoo.checks[0].not_run || all.contains(&"cuckoo".to_string()));
    // 4.9 ran: its finding is checked (measured, not "not run") and its section shows level
    // hashing beside the file mappings' Filebench rows.
    let lh = w
        .findings
        .iter()
        .find(|f| f.id == "level-hashing-loses-to-hashfs")
        .unwrap();
    assert!(!lh.not_run, "{lh:?}");
    assert!(lh.checks.iter().all(|c| c.measured.is_some()), "{lh:?}");
    let md = std::fs::read_to_string(w.dir.join("report.md")).unwrap();
    assert!(md.contains("## Findings") && md.contains("level hashing"));
    let sec = md
        .split("\n## 4.9 ")
        .nth(1)
        .expect("a 4.9 section")
        .split("\n## ")
        .next()
        .unwrap();
    assert!(
        sec.contains("| hashfs |") || sec.contains("| hashfs | "),
        "{sec}"
    );
    assert!(sec.contains("level"), "{sec}");
    assert!(!md.contains("is cut") && !md.contains("no level-hashing"));
    assert!(w
        .files
        .iter()
        .any(|f| f.to_string_lossy().contains("fig12-level-hashing")));
}
