//! ACE seq-1 in full, a seeded sample of seq-2 and of random sequences: 0 violations.

use nvmfs_crashtest::{run, workloads_for, MappingKind, Suite};

fn check(suite: Suite, sample: Option<(usize, u64)>) -> nvmfs_crashtest::Summary {
    check_on(suite, sample, MappingKind::HashFs)
}

fn check_on(
    suite: Suite,
    sample: Option<(usize, u64)>,
    mapping: MappingKind,
) -> nvmfs_crashtest::Summary {
    let mut list = workloads_for(&suite, mapping);
    if let Some((n, seed)) = sample {
        let mut rng = fastrand::Rng::with_seed(seed);
        rng.shuffle(&mut list);
        list.truncate(n);
    }
    let s = run(&list, 2, &|_, _| {});
    assert!(s.images > 0);
    assert!(
        s.violations.is_empty(),
        "{} violations, first: {:#?}",
        s.violations.len(),
        &s.violations[..s.violations.len().min(5)]
    );
    eprintln!(
        "{mapping} {suite:?}: {} workloads, {} fences, {} crash images, 0 violations",
        s.workloads, s.fences, s.images
    );
    s
}

#[test]
fn every_ace_operation_applies() {
    let bad: Vec<_> = nvmfs_crashtest::ace::seq1()
        .into_iter()
        .filter(|op| !nvmfs_crashtest::ace::valid(std::slice::from_ref(op)))
        .collect();
    assert!(
        bad.is_empty(),
        "seq-1 operations that fail or change nothing: {bad:?}"
    );
    let pairs = nvmfs_crashtest::ace::seq2();
    assert!(pairs.iter().all(|w| w.len() == 2));
    eprintln!("seq-2: {} valid pairs", pairs.len());
    for seed in 1..20 {
        let ops = nvmfs_crashtest::ace::random(seed, 20);
        assert!(
            !ops.is_empty() && nvmfs_crashtest::ace::valid(&ops),
            "seed {seed}"
        );
    }
}

/// Validity is decided on the mapping the workloads run on: every seq-1 operation applies on
/// each mapping, and the random sequences drawn for a mapping are valid there.
#[test]
fn validity_is_decided_per_mapping() {
    use nvmfs_crashtest::ace::{random_on, seq1, valid_on};
    for mapping in MappingKind::ALL {
        let bad: Vec<_> = seq1()
            .into_iter()
            .filter(|op| !valid_on(std::slice::from_ref(op), mapping))
            .collect();
        assert!(
            bad.is_empty(),
            "{mapping}: seq-1 operations that do not apply: {bad:?}"
        );
        for seed in 1..8 {
            let ops = random_on(seed, 20, mapping);
            assert!(
                !ops.is_empty() && valid_on(&ops, mapping),
                "{mapping} seed {seed}"
            );
        }
        // Workloads of a suite are drawn for their mapping.
        let list = workloads_for(&Suite::Random { count: 3, seed: 1 }, mapping);
        for (w, seed) in list.iter().zip(1..) {
            assert_eq!(w.ops, random_on(seed, 20, mapping));
        }
    }
    // A pair that does not apply is refused: removing a directory twice.
    let rm = nvmfs_crashtest::ace::Op::Rmdir("/D");
    for mapping in MappingKind::ALL {
        assert!(!valid_on(&[rm.clone(), rm.clone()], mapping));
    }
}

#[test]
fn ace_seq1_all() {
    let s = check(Suite::Seq1, None);
    assert_eq!(s.workloads, nvmfs_crashtest::ace::seq1().len());
}

#[test]
fn ace_seq1_all_extent_tree() {
    let s = check_on(Suite::Seq1, None, MappingKind::Extent);
    assert_eq!(s.workloads, nvmfs_crashtest::ace::seq1().len());
}

#[test]
fn ace_seq1_all_radix_tree() {
    let s = check_on(Suite::Seq1, None, MappingKind::Radix);
    assert_eq!(s.workloads, nvmfs_crashtest::ace::seq1().len());
}

/// A seeded sample of 24 seq-1 workloads on every mapping with stores also torn at 8-byte
/// words (16 for non-temporal stores), 8 random word-torn images per fence; `nvmfs crashtest
/// --tear words --ace seq1` runs all of them with 32.
#[test]
fn ace_seq1_torn_words_every_mapping() {
    for (k, mapping) in MappingKind::ALL.into_iter().enumerate() {
        let mut list = nvmfs_crashtest::with_tear(
            workloads_for(&Suite::Seq1, mapping),
            nvmfs_crashtest::trace::Tear::Words { samples: 8 },
        );
        fastrand::Rng::with_seed(2026 + k as u64).shuffle(&mut list);
        list.truncate(24);
        let s = run(&list, 2, &|_, _| {});
        assert!(
            s.violations.is_empty(),
            "{} violations, first: {:#?}",
            s.violations.len(),
            &s.violations[..s.violations.len().min(5)]
        );
        eprintln!(
            "{mapping} seq-1 sample, torn words: {} workloads, {} fences, {} crash images, 0 violations",
            s.workloads, s.fences, s.images
        );
    }
}

#[test]
fn ace_seq1_all_cuckoo_table() {
    let s = check_on(Suite::Seq1, None, MappingKind::Cuckoo);
    assert_eq!(s.workloads, nvmfs_crashtest::ace::seq1().len());
}

#[test]
fn ace_seq1_all_level_hashing() {
    let s = check_on(Suite::Seq1, None, MappingKind::Level);
    assert_eq!(s.workloads, nvmfs_crashtest::ace::seq1().len());
}

#[test]
fn ace_seq2_sample_tree_mappings() {
    for m in [MappingKind::Extent, MappingKind::Radix, MappingKind::Cuckoo] {
        eprintln!(
            "{m}: {} valid seq-2 pairs",
            nvmfs_crashtest::ace::seq2_on(m).len()
        );
    }
    check_on(Suite::Seq2, Some((30, 2026)), MappingKind::Extent);
    check_on(Suite::Seq2, Some((30, 2026)), MappingKind::Radix);
    check_on(Suite::Seq2, Some((30, 2026)), MappingKind::Cuckoo);
}

/// Random sequences on each tree mapping; `TREE_RANDOM=N` runs N per mapping (default 40).
#[test]
fn random_sequences_sample_tree_mappings() {
    let count = std::env::var("TREE_RANDOM").map_or(40, |v| v.parse().expect("TREE_RANDOM"));
    check_on(
        Suite::Random { count, seed: 101 },
        None,
        MappingKind::Extent,
    );
    check_on(Suite::Random { count, seed: 201 }, None, MappingKind::Radix);
    check_on(
        Suite::Random { count, seed: 301 },
        None,
        MappingKind::Cuckoo,
    );
}

/// 270 single-block extents after holes: the extent tree splits its root leaf (255 entries)
/// and the radix tree's file passes 512 blocks (a second level, at the 256th write) while
/// crash images are checked at every fence of the last 30 writes (the first 240 build the
/// file unchecked). `TREE_GROWTH_FULL=1` checks all 270 (about 8 minutes on 2 CPUs).
#[test]
fn tree_growth_under_crashes() {
    let checked = if std::env::var_os("TREE_GROWTH_FULL").is_some() {
        270
    } else {
        30
    };
    let list = vec![
        nvmfs_crashtest::tree_growth(MappingKind::Extent, 270, checked),
        nvmfs_crashtest::tree_growth(MappingKind::Radix, 270, checked),
        nvmfs_crashtest::tree_growth(MappingKind::Cuckoo, 270, checked),
        nvmfs_crashtest::cuckoo_fill(180),
    ];
    let s = run(&list, 2, &|_, _| {});
    assert!(
        s.violations.is_empty(),
        "{} violations, first: {:#?}",
        s.violations.len(),
        &s.violations[..s.violations.len().min(5)]
    );
    eprintln!(
        "tree growth: {} workloads, {} fences, {} crash images, 0 violations",
        s.workloads, s.fences, s.images
    );
}

/// Level hashing filled past its starting size under the crash checker: one-step movements
/// and one in-place resize (the header store that starts it, every entry the drain moves, the
/// header store that ends it) crash-checked at every fence.
#[test]
fn level_resize_under_crashes() {
    let s = run(&[nvmfs_crashtest::level_fill(120)], 2, &|_, _| {});
    assert!(
        s.violations.is_empty(),
        "{} violations, first: {:#?}",
        s.violations.len(),
        &s.violations[..s.violations.len().min(5)]
    );
    eprintln!(
        "level fill: {} fences, {} crash images, 0 violations",
        s.fences, s.images
    );
}

#[test]
fn ace_seq2_sample() {
    check(Suite::Seq2, Some((60, 2026)));
}

#[test]
fn random_sequences_sample() {
    check(Suite::Random { count: 12, seed: 1 }, None);
}

/// Bigger images (`nvmfs crashtest --big`): more than 200 hole fills in one write, fallocate
/// and direct map; fallocate of 300 blocks past EOF and a punch of 250; a directory of 100
/// long names (several blocks) with unlinks, renames and appends; ENOSPC: fill the image,
/// a fallocate and an append that must fail cleanly, free and reuse. By default only the
/// 276-hole overwrite and the ENOSPC workload on HashFS (about a minute); `BIG_ALL=1` runs
/// all six, `BIG_MAPPINGS=1` also on the tree mappings.
#[test]
fn big_images() {
    let all = std::env::var_os("BIG_ALL").is_some();
    let mappings = std::env::var_os("BIG_MAPPINGS").is_some();
    for mapping in MappingKind::ALL {
        if mapping != MappingKind::HashFs && !mappings {
            continue;
        }
        let mut list = workloads_for(&Suite::Big, mapping);
        if !all {
            list.retain(|w| w.id.ends_with("--only 0") || w.id.ends_with("--only 5"));
        }
        let t0 = std::time::Instant::now();
        let s = run(&list, 2, &|i, o| {
            eprintln!(
                "  {}: {} fences, {} images, {} violations, at {:.0} s",
                list[i].id,
                o.fences,
                o.images,
                o.violations.len(),
                t0.elapsed().as_secs_f64()
            )
        });
        assert!(
            s.violations.is_empty(),
            "{} violations, first: {:#?}",
            s.violations.len(),
            &s.violations[..s.violations.len().min(5)]
        );
        eprintln!(
            "{mapping} big images: {} workloads, {} fences, {} crash images, 0 violations",
            s.workloads, s.fences, s.images
        );
    }
}
