//! Crash-consistency checking for nvmfs, the way Chipmunk and Vinter check PM file systems:
//! record every persistent store, flush and fence of a workload ([`trace`]), build the images
//! a power loss could leave at every fence, and check each with recovery, fsck and a
//! comparison against the states before and after the operation in flight ([`oracle`]).

pub mod ace;
pub mod concurrent;
pub mod kill;
pub mod oracle;
pub mod recovered;
pub mod tiered;
pub mod trace;

use ace::Op;
pub use nvmfs::MappingKind;
use oracle::Outcome;

/// Which workloads to run.
#[derive(Clone, Debug)]
pub enum Suite {
    Seq1,
    Seq2,
    /// `count` random sequences of up to 20 operations, seeds `seed..seed+count`.
    Random {
        count: u64,
        seed: u64,
    },
    /// Bigger images (`ace::big`): more than 200 hole fills in one operation, a directory of
    /// several blocks, ENOSPC and the abandon paths.
    Big,
}

/// A workload with the command that reruns it alone.
pub struct Workload {
    pub id: String,
    pub ops: Vec<Op>,
    pub depth: oracle::RecoveryDepth,
    /// The file mapping the image is formatted with.
    pub mapping: MappingKind,
    /// Size of the image the workload runs on.
    pub image_bytes: u64,
    /// How finely the tracer tears in-flight stores.
    pub tear: trace::Tear,
    /// On a tiered image (an SSD tier under PM, files starting cold; `tiered`).
    pub tier: bool,
    /// Operations run after the image is populated and before recording starts: they build
    /// the starting state and are not crash-checked (not on tiered images).
    pub setup: Vec<Op>,
}

/// The workloads of `suite` on HashFS images.
pub fn workloads(suite: &Suite) -> Vec<Workload> {
    workloads_for(suite, MappingKind::HashFs)
}

/// The workloads of `suite` on images formatted with `mapping`.
pub fn workloads_for(suite: &Suite, mapping: MappingKind) -> Vec<Workload> {
    let mut list = suite_workloads(suite, mapping);
    for w in &mut list {
        w.mapping = mapping;
        if mapping != MappingKind::HashFs {
            w.id = format!("--mapping {mapping} {}", w.id);
        }
    }
    list
}

/// Sets the tearing model of every workload of `list` (and its rerun command).
pub fn with_tear(mut list: Vec<Workload>, tear: trace::Tear) -> Vec<Workload> {
    for w in &mut list {
        w.tear = tear;
        if let trace::Tear::Words { samples } = tear {
            w.id = format!("--tear words --tear-samples {samples} {}", w.id);
        }
    }
    list
}

/// Runs every workload of `list` on a tiered image instead (HashFS only; workloads with a
/// direct map, which tiered images refuse, are left out).
pub fn with_tier(list: Vec<Workload>) -> Vec<Workload> {
    list.into_iter()
        .filter(|w| !w.ops.iter().any(|op| matches!(op, Op::DirectStore(..))))
        .map(|mut w| {
            w.tier = true;
            w.id = format!("--tier {}", w.id);
            w
        })
        .collect()
}

/// The workloads of `suite`, the operations' validity (seq-2 pairs, random draws) decided on
/// `mapping` images.
fn suite_workloads(suite: &Suite, mapping: MappingKind) -> Vec<Workload> {
    match suite {
        Suite::Seq1 => ace::seq1()
            .into_iter()
            .enumerate()
            .map(|(i, op)| Workload {
                id: format!("--ace seq1 --only {i}"),
                ops: vec![op],
                depth: oracle::RecoveryDepth::Every,
                mapping: MappingKind::HashFs,
                image_bytes: oracle::IMAGE_BYTES,
                tear: trace::Tear::Lines,
                tier: false,
                setup: Vec::new(),
            })
            .collect(),
        Suite::Seq2 => ace::seq2_on(mapping)
            .into_iter()
            .enumerate()
            .map(|(i, ops)| Workload {
                id: format!("--ace seq2 --only {i}"),
                ops,
                depth: oracle::RecoveryDepth::Every,
                mapping: MappingKind::HashFs,
                image_bytes: oracle::IMAGE_BYTES,
                tear: trace::Tear::Lines,
                tier: false,
                setup: Vec::new(),
            })
            .collect(),
        Suite::Random { count, seed } => (*seed..seed + count)
            .map(|s| Workload {
                id: format!("--random 1 --seed {s}"),
                ops: ace::random_on(s, 20, mapping),
                depth: oracle::RecoveryDepth::FirstPerOperation,
                mapping: MappingKind::HashFs,
                image_bytes: oracle::IMAGE_BYTES,
                tear: trace::Tear::Lines,
                tier: false,
                setup: Vec::new(),
            })
            .collect(),
        Suite::Big => ace::big()
            .into_iter()
            .enumerate()
            .map(|(i, (_, image_bytes, ops))| Workload {
                id: format!("--big --only {i}"),
                ops,
                depth: oracle::RecoveryDepth::FirstPerOperation,
                mapping: MappingKind::HashFs,
                image_bytes,
                tear: trace::Tear::Lines,
                tier: false,
                setup: Vec::new(),
            })
            .collect(),
    }
}

/// Grows one file to `extents` single-block extents, one sparse write each, on an image large
/// enough: the extent tree splits its root leaf after 255 extents, and the radix tree grows a
/// level after 512 blocks. Only the last `checked` writes are crash-checked (the first ones
/// build the file as setup), so that a check of the split and the new level does not also
/// pay for every write before them.
pub fn tree_growth(mapping: MappingKind, extents: usize, checked: usize) -> Workload {
    let ops = vec![Op::Sparse("/bar", 8192, 1); extents];
    let (setup, ops) = ops.split_at(extents - checked.min(extents));
    Workload {
        id: format!(
            "tree growth: {extents} sparse appends on {mapping}, the last {checked} checked"
        ),
        ops: ops.to_vec(),
        depth: oracle::RecoveryDepth::FirstPerOperation,
        mapping,
        image_bytes: 4 << 20,
        tear: trace::Tear::Lines,
        tier: false,
        setup: setup.to_vec(),
    }
}

/// Fills most of a small image's cuckoo table with single-block entries (one sparse write
/// each, every operation crash-checked), so inserts displace entries under the crash checker.
pub fn cuckoo_fill(entries: usize) -> Workload {
    Workload {
        id: format!("cuckoo fill: {entries} sparse appends on a 1 MiB image"),
        ops: vec![Op::Sparse("/bar", 4096, 1); entries],
        depth: oracle::RecoveryDepth::FirstPerOperation,
        mapping: MappingKind::Cuckoo,
        image_bytes: 1 << 20,
        tear: trace::Tear::Lines,
        tier: false,
        setup: Vec::new(),
    }
}

/// Fills a small image's level hashing table with single-block entries (one sparse write
/// each, every operation crash-checked) past its starting size, so one-step movements and
/// in-place resizes (header store, bottom level drained into the new top) happen under the
/// crash checker.
pub fn level_fill(entries: usize) -> Workload {
    Workload {
        id: format!("level fill: {entries} sparse appends on a 1 MiB image"),
        ops: vec![Op::Sparse("/bar", 4096, 1); entries],
        depth: oracle::RecoveryDepth::FirstPerOperation,
        mapping: MappingKind::Level,
        image_bytes: 1 << 20,
        tear: trace::Tear::Lines,
        tier: false,
        setup: Vec::new(),
    }
}

/// Totals of a run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Summary {
    pub workloads: usize,
    pub fences: usize,
    pub images: usize,
    pub violations: Vec<String>,
}

/// Checks `list` on `threads` threads, calling `progress` after each workload.
pub fn run(
    list: &[Workload],
    threads: usize,
    progress: &(dyn Fn(usize, &Outcome) + Sync),
) -> Summary {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let total = std::sync::Mutex::new(Summary {
        workloads: list.len(),
        ..Default::default()
    });
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(w) = list.get(i) else { break };
                let o = if w.tier {
                    assert!(w.setup.is_empty(), "setup operations on a tiered image");
                    tiered::check(&w.ops, w.depth, w.tear)
                } else {
                    oracle::check_workload_after(
                        &w.setup,
                        &w.ops,
                        w.depth,
                        w.mapping,
                        w.image_bytes,
                        w.tear,
                    )
                };
                progress(i, &o);
                let mut t = total.lock().unwrap();
                t.fences += o.fences;
                t.images += o.images;
                t.violations.extend(
                    o.violations
                        .iter()
                        .map(|v| format!("[nvmfs crashtest {}] {v}", w.id)),
                );
            });
        }
    });
    total.into_inner().unwrap()
}

/// The result of skipping one flush or fence call site.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MutationResult {
    pub site: String,
    /// A workload noticed (its first violation).
    pub caught_by: Option<String>,
}

/// The mutation check: finds every persist/fence call site the workloads run, then reruns
/// the workloads with each site skipped in turn and reports which skips were noticed.
pub fn mutation_check(
    list: &[Workload],
    progress: &dyn Fn(&MutationResult),
) -> Vec<MutationResult> {
    use nvmfs::media::mutation;
    mutation::record();
    for w in list {
        oracle::check_workload_on(&w.ops, w.depth, w.mapping, w.image_bytes);
    }
    let sites = mutation::recorded();
    mutation::skip(None);
    let mut out = Vec::new();
    for site in sites {
        mutation::skip(Some(site.clone()));
        let caught_by = list.iter().find_map(|w| {
            let o = oracle::check_workload_on(&w.ops, w.depth, w.mapping, w.image_bytes);
            o.violations
                .first()
                .map(|v| format!("[nvmfs crashtest {}] {v}", w.id))
        });
        mutation::skip(None);
        let r = MutationResult {
            site: site.to_string(),
            caught_by,
        };
        progress(&r);
        out.push(r);
    }
    out
}
