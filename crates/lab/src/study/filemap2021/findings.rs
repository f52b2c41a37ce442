//! The claims of section 4 checked against a run: each finding names measurements (rows) and
//! what the paper says of them: one is faster than another (the measured ratio is the speedup,
//! beside the paper's), two do not differ, a share stays below a level, or the mappings rank
//! alike at every setting. "Significant" is the lab's run rule (95% intervals apart and at
//! least 10% between the means). A claim about a mapping this build does not have is "not
//! run", not failed.

use super::{param, MapRow, MapStudyConfig, MapStudyResult};
use crate::stats::compare;
use crate::study::findings::Verdict;
use nvmfs::MappingKind;
use serde::Serialize;

/// One measurement of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sel {
    pub experiment: &'static str,
    pub param: String,
    pub op: &'static str,
    pub cache: &'static str,
    pub mapping: &'static str,
    pub metric: &'static str,
}

impl Sel {
    pub fn matches(&self, r: &MapRow) -> bool {
        r.experiment == self.experiment
            && r.param == self.param
            && r.op == self.op
            && r.cache == self.cache
            && r.mapping == self.mapping
            && r.metric == self.metric
    }

    fn label(&self) -> String {
        format!(
            "{} {} {} {} ({})",
            self.mapping, self.experiment, self.cache, self.op, self.param
        )
    }

    /// The same measurement of another mapping.
    fn of(&self, mapping: &'static str) -> Sel {
        Sel {
            mapping,
            ..self.clone()
        }
    }
}

/// What a check claims.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "claim", rename_all = "snake_case")]
pub enum Claim {
    /// `a` is faster than `b` (fewer cycles, or more ops/s).
    Faster { a: Sel, b: Sel },
    /// `a` and `b` do not differ significantly.
    Alike { a: Sel, b: Sel },
    /// `a`'s mean stays below `level`.
    Below { a: Sel, level: f64 },
    /// The mappings rank alike by mean at every setting of one measurement.
    SameRanking {
        experiment: &'static str,
        op: &'static str,
        cache: &'static str,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub claim: Claim,
    /// The paper's number: a speedup for `Faster`/`Alike`, a level for `Below`.
    pub paper: Option<f64>,
}

/// One finding of the paper.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MapFinding {
    pub id: &'static str,
    pub statement: &'static str,
    pub paper_evidence: &'static str,
    pub checks: Vec<Check>,
    /// Why this machine or this file system may not show it.
    pub caveat: &'static str,
}

/// A check against the run.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    pub what: String,
    pub paper: Option<f64>,
    pub measured: Option<f64>,
    pub significant: Option<bool>,
    pub verdict: Verdict,
    /// A mapping it needs is not in this build.
    pub not_run: bool,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FindingResult {
    pub id: String,
    pub statement: String,
    pub paper_evidence: String,
    pub checks: Vec<CheckResult>,
    pub verdict: Verdict,
    /// Nothing was measured because a mapping it needs is not in this build.
    pub not_run: bool,
    pub caveat: String,
}

impl FindingResult {
    pub fn label(&self) -> &'static str {
        if self.not_run {
            "not run"
        } else {
            self.verdict.label()
        }
    }
}

fn sel(experiment: &'static str, param: String, op: &'static str, cache: &'static str) -> Sel {
    Sel {
        experiment,
        param,
        op,
        cache,
        mapping: "hashfs",
        metric: "cycles",
    }
}

fn faster(a: Sel, b: Sel, paper: Option<f64>) -> Check {
    Check {
        claim: Claim::Faster { a, b },
        paper,
    }
}

fn alike(a: Sel, b: Sel, paper: Option<f64>) -> Check {
    Check {
        claim: Claim::Alike { a, b },
        paper,
    }
}

/// The paper's findings, at this configuration's settings.
pub fn findings(cfg: &MapStudyConfig) -> Vec<MapFinding> {
    let big = param::file(cfg.big_file_bytes);
    let small = param::file(cfg.small_files.first().copied().unwrap_or(4096));
    let cold = |op| sel("locality", big.clone(), op, "cold");
    let frag = |s: f64, m, op| sel("fragmentation", param::score(s), op, "cold").of(m);
    let size = |p: &str, m, op| sel("file-size", p.to_string(), op, "cold").of(m);
    let mib = sel("io-size", param::io(1 << 20), "rand-read", "cold");
    let full95 = sel("utilisation", param::fill(0.95), "rand-read", "cold");
    let pc = |op| sel("page-cache", big.clone(), op, "hot").of("extent");
    let fb = |w| Sel {
        metric: "ops/s",
        ..sel("filebench", "Table 2".into(), w, "-")
    };
    let lh = |w| Sel {
        experiment: "level-hashing",
        ..fb(w).of("level")
    };
    let fs = cfg.fragmented_score;
    vec![
        MapFinding {
            id: "global-mapping-faster-cold",
            statement: "Cold, a global hash maps a block up to 15x faster than per-file trees",
            paper_evidence: "Fig. 5: cold reads and appends on a 1 GB file; global file mapping up to 15x faster than per-file mapping (fewer than two PM accesses against a walk per tree level)",
            checks: vec![
                faster(cold("rand-read"), cold("rand-read").of("extent"), Some(15.0)),
                faster(cold("rand-read"), cold("rand-read").of("radix"), None),
                faster(cold("seq-read"), cold("seq-read").of("radix"), None),
                faster(cold("rand-read").of("cuckoo"), cold("rand-read").of("extent"), None),
            ],
            caveat: "nvmfs's tree mappings are shallow (a radix tree of 512-way nodes, an extent tree with a per-file cursor), and PM here is DRAM, so a tree level costs a DRAM miss, not a PM one",
        },
        MapFinding {
            id: "hashfs-faster-cold-inserts",
            statement: "HashFS inserts 14-20x faster cold than every other mapping (it is its own allocator)",
            paper_evidence: "Fig. 5: cold appends; HashFS 14-20x faster than all others; cuckoo inserts on par with the trees (the block allocator's misses)",
            checks: vec![
                faster(cold("append"), cold("append").of("extent"), Some(17.0)),
                faster(cold("append"), cold("append").of("radix"), Some(17.0)),
                faster(cold("append"), cold("append").of("cuckoo"), Some(17.0)),
            ],
            caveat: "nvmfs's block allocator is a bitmap with a volatile free-extent index and per-inode hints, not Strata's red-black tree behind a mutex",
        },
        MapFinding {
            id: "extent-suffers-fragmentation",
            statement: "Extent trees suffer with fragmentation (layout score 0.7 against 1.0); radix trees and hashes do not",
            paper_evidence: "Fig. 6: cold operations on a 1 GB file; the only major difference is the extent tree's",
            checks: vec![
                faster(frag(1.0, "extent", "rand-read"), frag(fs, "extent", "rand-read"), None),
                faster(frag(1.0, "extent", "seq-read"), frag(fs, "extent", "seq-read"), None),
                alike(frag(1.0, "radix", "rand-read"), frag(fs, "radix", "rand-read"), Some(1.0)),
            ],
            caveat: "single cold lookups vary by 10-50% on a shared 2-core machine, and a contiguous extent file is one extent the cursor answers; HashFS runs at 1.0 only (no block allocator to fragment: mkfs refuses --layout-score for it)",
        },
        MapFinding {
            id: "per-file-grows-with-file-size",
            statement: "Per-file trees grow with the file (34% on random reads from small to large); hashes do not",
            paper_evidence: "Fig. 7: 4 KB, 4 MB and 4 GB files, cold; trees up to 34% slower on random reads of the large file, hash tables flat",
            checks: vec![
                faster(size(&small, "extent", "rand-read"), size(&big, "extent", "rand-read"), Some(1.34)),
                faster(size(&small, "radix", "rand-read"), size(&big, "radix", "rand-read"), Some(1.34)),
                alike(size(&small, "hashfs", "rand-read"), size(&big, "hashfs", "rand-read"), Some(1.0)),
            ],
            caveat: "the largest file here is the large file of the run, not the paper's 4 GB",
        },
        MapFinding {
            id: "radix-best-at-1mib-but-mapping-is-small",
            statement: "At 1 MiB reads radix trees map fastest, but mapping is about 3% of the read path",
            paper_evidence: "Fig. 8: 4 KB, 64 KB and 1 MB reads; at 1 MB the radix tree is best for sequential and random reads and takes 3% of the read path",
            checks: vec![
                faster(mib.of("radix"), mib.clone(), None),
                faster(mib.of("radix"), mib.of("extent"), None),
                Check {
                    claim: Claim::Below {
                        a: Sel {
                            metric: "mapping share",
                            ..mib.of("radix")
                        },
                        level: 0.10,
                    },
                    paper: Some(0.03),
                },
            ],
            caveat: "nvmfs's FileMap looks blocks up one at a time (no ranged lookup), so a tree's shared leaf helps only through the cache",
        },
        MapFinding {
            id: "hashfs-slower-than-cuckoo-at-95-full",
            statement: "At 95% full HashFS reads 12-14% slower than the global cuckoo hash, but both stay ahead of the trees",
            paper_evidence: "Fig. 9: 80-95% full; at 95% HashFS 12-14% more read latency than cuckoo hashing; both global mappings beat the per-file ones",
            checks: vec![
                faster(full95.of("cuckoo"), full95.clone(), Some(1.13)),
                faster(full95.clone(), full95.of("extent"), None),
                faster(full95.clone(), full95.of("radix"), None),
            ],
            caveat: "the cuckoo hash is a colleague's branch: its checks run once it is merged into MappingKind::ALL",
        },
        MapFinding {
            id: "ranking-unchanged-with-threads",
            statement: "Mapping cost grows a little with threads, and the ranking of the mappings does not change (no two mappings swap places significantly)",
            paper_evidence: "Fig. 10: 1-8 threads reading and appending one file; up to 13% slower (extent trees), same order at every count",
            checks: vec![
                Check {
                    claim: Claim::SameRanking {
                        experiment: "concurrency",
                        op: "rand-read",
                        cache: "hot",
                    },
                    paper: None,
                },
                Check {
                    claim: Claim::SameRanking {
                        experiment: "concurrency",
                        op: "append",
                        cache: "hot",
                    },
                    paper: None,
                },
            ],
            caveat: "this machine has 2 cores: 4 and 8 threads time-share them",
        },
        MapFinding {
            id: "page-caching-does-not-pay",
            statement: "Caching the extent tree in DRAM (Strata's page cache) does not pay",
            paper_evidence: "Fig. 11: 1,000,000 operations on a 1 GB file; the page-cached extent tree slower for reads (allocation not amortised) and inserts (cache upkeep)",
            checks: vec![
                faster(pc("rand-read"), pc("rand-read").of("extent+page-cache"), None),
                faster(pc("append"), pc("append").of("extent+page-cache"), None),
            ],
            caveat: "the page-cached variant is a DRAM map of extents in front of the PM tree (study-only), not a kernel page cache",
        },
        MapFinding {
            id: "filebench-hashfs-helps-fileserver-only",
            statement: "HashFS +26% on fileserver; on webproxy all mappings within 2%",
            paper_evidence: "Fig. 12: Table 2's fileserver (write-heavy) and webproxy (read-heavy); HashFS 26% above the baseline on fileserver, all within 2% on webproxy",
            checks: vec![
                faster(fb("fileserver"), fb("fileserver").of("extent"), Some(1.26)),
                alike(fb("webproxy"), fb("webproxy").of("extent"), Some(1.0)),
                alike(fb("webproxy").of("radix"), fb("webproxy").of("extent"), Some(1.0)),
            ],
            caveat: "the paper's baseline is Strata's page-cached extent tree; here the PM extent tree stands in for it, and the whole file system (not only its mapping) differs from Strata",
        },
        MapFinding {
            id: "level-hashing-loses-to-hashfs",
            statement: "HashFS outperforms level hashing in all cases; on fileserver level hashing underperforms even the page-cached/extent baseline",
            paper_evidence: "§4.9, Fig. 12: level hashing (Zuo et al., OSDI'18) used as-is as the file mapping; HashFS ahead on both workloads; on fileserver (the most write-heavy) level hashing below Strata's baseline; level hashing pays for resizing that the global tables sized at mkfs never need",
            checks: vec![
                faster(fb("fileserver"), lh("fileserver"), None),
                faster(fb("webproxy"), lh("webproxy"), None),
                faster(fb("fileserver").of("extent"), lh("fileserver"), None),
            ],
            caveat: "Filebench here runs the whole nvmfs data path, where a mapping's cost is a small share of each operation on a 2-core machine; level hashing's resizes happen early (the table starts at 64 top-level buckets) and a quick run's trials are short; the PM extent tree stands in for Strata's page-cached baseline",
        },
    ]
}

/// Every finding against `result`.
pub fn check_all(result: &MapStudyResult) -> Vec<FindingResult> {
    findings(&result.config)
        .iter()
        .map(|f| check_finding(result, f))
        .collect()
}

fn check_finding(result: &MapStudyResult, f: &MapFinding) -> FindingResult {
    let checks: Vec<CheckResult> = f.checks.iter().map(|c| check(result, c)).collect();
    let measured: Vec<Verdict> = checks
        .iter()
        .map(|c| c.verdict)
        .filter(|v| *v != Verdict::NotMeasured)
        .collect();
    let ok = measured
        .iter()
        .filter(|v| **v == Verdict::Reproduced)
        .count();
    let verdict = match (measured.len(), ok) {
        (0, _) => Verdict::NotMeasured,
        (n, k) if k == n => Verdict::Reproduced,
        (_, 0) => Verdict::NotReproduced,
        _ => Verdict::Partly,
    };
    FindingResult {
        id: f.id.to_string(),
        statement: f.statement.to_string(),
        paper_evidence: f.paper_evidence.to_string(),
        not_run: measured.is_empty() && checks.iter().any(|c| c.not_run),
        checks,
        verdict,
        caveat: f.caveat.to_string(),
    }
}

/// Whether `name` is a mapping of this build (or a study-only variant of one).
fn built(name: &str) -> bool {
    let base = name.split('+').next().unwrap_or(name);
    MappingKind::ALL.iter().any(|m| m.name() == base)
}

fn absent(what: String, paper: Option<f64>, sels: &[&Sel]) -> CheckResult {
    let missing: Vec<&str> = sels
        .iter()
        .map(|s| s.mapping)
        .filter(|m| !built(m))
        .collect();
    CheckResult {
        what,
        paper,
        measured: None,
        significant: None,
        verdict: Verdict::NotMeasured,
        not_run: !missing.is_empty(),
        detail: if missing.is_empty() {
            "a measurement it needs did not run (filtered out or failed)".into()
        } else {
            format!("not run: no {} mapping in this build", missing.join(", "))
        },
    }
}

fn check(result: &MapStudyResult, c: &Check) -> CheckResult {
    match &c.claim {
        Claim::Faster { a, b } | Claim::Alike { a, b } => {
            let alike = matches!(c.claim, Claim::Alike { .. });
            let what = format!("{} vs {}", a.label(), b.mapping_or_param(a));
            let (Some(ra), Some(rb)) = (result.find(a), result.find(b)) else {
                return absent(what, c.paper, &[a, b]);
            };
            let cmp = compare(&ra.summary, &rb.summary);
            let speedup = if a.metric == "ops/s" {
                cmp.ratio
            } else {
                1.0 / cmp.ratio
            };
            let verdict = match (alike, cmp.significant, speedup > 1.0) {
                (true, false, _) | (false, true, true) => Verdict::Reproduced,
                _ => Verdict::NotReproduced,
            };
            CheckResult {
                what,
                paper: c.paper,
                measured: Some(speedup),
                significant: Some(cmp.significant),
                verdict,
                not_run: false,
                detail: format!("{:.0} against {:.0}", ra.summary.mean, rb.summary.mean),
            }
        }
        Claim::Below { a, level } => {
            let what = format!("{} {} below {level}", a.label(), a.metric);
            let Some(ra) = result.find(a) else {
                return absent(what, c.paper, &[a]);
            };
            CheckResult {
                what,
                paper: c.paper,
                measured: Some(ra.summary.mean),
                significant: None,
                verdict: if ra.summary.mean < *level {
                    Verdict::Reproduced
                } else {
                    Verdict::NotReproduced
                },
                not_run: false,
                detail: format!(
                    "95% interval {:.3}-{:.3}",
                    ra.summary.ci95_low, ra.summary.ci95_high
                ),
            }
        }
        Claim::SameRanking {
            experiment,
            op,
            cache,
        } => same_ranking(result, experiment, op, cache, c.paper),
    }
}

impl Sel {
    /// How `self` differs from `a` in a label: its mapping, or its setting.
    fn mapping_or_param(&self, a: &Sel) -> String {
        if self.mapping != a.mapping {
            self.mapping.to_string()
        } else {
            self.param.clone()
        }
    }
}

/// The rows of one measurement at each of its settings, in order, each sorted fastest first.
fn rankings<'a>(
    result: &'a MapStudyResult,
    experiment: &str,
    op: &str,
    cache: &str,
) -> Vec<(String, Vec<&'a MapRow>)> {
    let rows: Vec<&MapRow> = result
        .rows
        .iter()
        .filter(|r| r.experiment == experiment && r.op == op && r.cache == cache)
        .collect();
    let mut params: Vec<&str> = Vec::new();
    for r in &rows {
        if !params.contains(&r.param.as_str()) {
            params.push(&r.param);
        }
    }
    params
        .into_iter()
        .map(|p| {
            let mut at: Vec<&MapRow> = rows.iter().copied().filter(|r| r.param == p).collect();
            at.sort_by(|x, y| x.summary.mean.total_cmp(&y.summary.mean));
            (p.to_string(), at)
        })
        .collect()
}

/// Pairs (faster, slower) of mappings significantly apart at one setting.
fn significant_order(at: &[&MapRow]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, x) in at.iter().enumerate() {
        for y in &at[i + 1..] {
            if compare(&x.summary, &y.summary).significant {
                out.push((x.mapping.clone(), y.mapping.clone()));
            }
        }
    }
    out
}

/// The ranking is unchanged when no two mappings swap places significantly between settings
/// (mappings within each other's noise may trade places).
fn same_ranking(
    result: &MapStudyResult,
    experiment: &str,
    op: &str,
    cache: &str,
    paper: Option<f64>,
) -> CheckResult {
    let what = format!("ranking of {experiment} {cache} {op} at every setting");
    let ranks = rankings(result, experiment, op, cache);
    let complete = ranks.len() >= 2 && ranks.iter().all(|(_, r)| r.len() >= 2);
    if !complete {
        let probe = sel(
            experiment_static(experiment),
            String::new(),
            "rand-read",
            "hot",
        );
        return absent(what, paper, &[&probe]);
    }
    let orders: Vec<Vec<(String, String)>> =
        ranks.iter().map(|(_, at)| significant_order(at)).collect();
    let swapped = orders.iter().any(|a| {
        orders
            .iter()
            .any(|b| a.iter().any(|(f, s)| b.contains(&(s.clone(), f.clone()))))
    });
    let detail = ranks
        .iter()
        .map(|(p, at)| {
            let names: Vec<&str> = at.iter().map(|r| r.mapping.as_str()).collect();
            format!("{p}: {}", names.join(" < "))
        })
        .collect::<Vec<_>>()
        .join("; ");
    CheckResult {
        what,
        paper,
        measured: None,
        significant: None,
        verdict: if swapped {
            Verdict::NotReproduced
        } else {
            Verdict::Reproduced
        },
        not_run: false,
        detail,
    }
}

/// The experiment id as the static string of [`super::EXPERIMENTS`].
fn experiment_static(id: &str) -> &'static str {
    super::experiment(id).map_or("concurrency", |e| e.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::Size;

    #[test]
    fn findings_name_experiments_and_settings_that_exist() {
        let cfg = MapStudyConfig::for_size(Size::Quick, "x".into());
        let ids: Vec<&str> = super::super::EXPERIMENTS.iter().map(|e| e.id).collect();
        for f in findings(&cfg) {
            for c in &f.checks {
                let exp = match &c.claim {
                    Claim::Faster { a, .. } | Claim::Alike { a, .. } | Claim::Below { a, .. } => {
                        a.experiment
                    }
                    Claim::SameRanking { experiment, .. } => experiment,
                };
                assert!(ids.contains(&exp), "{} {exp}", f.id);
            }
        }
        assert!(built("extent+page-cache") && built("hashfs") && built("cuckoo"));
        assert!(built("level"), "4.9 runs on the level hashing mapping");
        assert!(!built("btree"));
        let lh = findings(&cfg)
            .into_iter()
            .find(|f| f.id == "level-hashing-loses-to-hashfs")
            .expect("the 4.9 finding");
        for c in &lh.checks {
            let Claim::Faster { a, b } = &c.claim else {
                panic!("4.9 claims are speedups")
            };
            assert_eq!((a.experiment, b.experiment), ("filebench", "level-hashing"));
            assert_eq!(b.mapping, "level");
        }
    }

    fn row(param: &str, mapping: &str, samples: &[f64]) -> MapRow {
        MapRow {
            experiment: "concurrency",
            figure: "Fig. 10",
            param: param.into(),
            op: "rand-read".into(),
            cache: "hot",
            mapping: mapping.into(),
            metric: "cycles",
            summary: crate::stats::Summary::of(samples).unwrap(),
            samples: samples.to_vec(),
        }
    }

    fn result(rows: Vec<MapRow>) -> MapStudyResult {
        MapStudyResult {
            config: MapStudyConfig::for_size(Size::Quick, "x".into()),
            mappings: vec!["hashfs".into(), "extent".into(), "radix".into()],
            rows,
            notes: Vec::new(),
            failures: Vec::new(),
            interrupted: false,
            wall_seconds: 0.0,
            unit: "cycles",
        }
    }

    #[test]
    fn a_ranking_changes_only_when_two_mappings_swap_significantly() {
        // hashfs and radix trade places within their noise; extent stays last.
        let mut rows = vec![
            row("1 threads", "hashfs", &[30.0, 31.0, 29.0]),
            row("1 threads", "radix", &[29.0, 30.0, 28.0]),
            row("1 threads", "extent", &[900.0, 910.0, 890.0]),
            row("2 threads", "hashfs", &[29.0, 30.0, 28.0]),
            row("2 threads", "radix", &[30.0, 31.0, 29.0]),
            row("2 threads", "extent", &[950.0, 960.0, 940.0]),
        ];
        let same = same_ranking(
            &result(rows.clone()),
            "concurrency",
            "rand-read",
            "hot",
            None,
        );
        assert_eq!(same.verdict, Verdict::Reproduced, "{}", same.detail);
        assert!(same
            .detail
            .starts_with("1 threads: radix < hashfs < extent; 2 threads"));
        // extent becomes significantly faster than hashfs at 2 threads.
        rows[5] = row("2 threads", "extent", &[10.0, 10.5, 9.5]);
        let swapped = same_ranking(&result(rows), "concurrency", "rand-read", "hot", None);
        assert_eq!(swapped.verdict, Verdict::NotReproduced);
        // Nothing measured: not run only when a mapping is missing from the build.
        let none = same_ranking(&result(Vec::new()), "concurrency", "rand-read", "hot", None);
        assert_eq!(none.verdict, Verdict::NotMeasured);
        assert!(!none.not_run);
    }
}
