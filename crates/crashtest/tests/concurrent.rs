//! The concurrent crash test, sampled: 2-4 operations on their own threads and journal
//! lanes, switched at every fence, every crash image checked against every combination of
//! before/after of the operations in flight. 0 violations, and the interleaving really
//! happened: crash points with several operations in flight, images with several lanes
//! rolled back.

use nvmfs_crashtest::concurrent::{self, run, workloads};
use nvmfs_crashtest::trace::Tear;
use nvmfs_crashtest::MappingKind;

fn sample(count: u64, seed: u64, mapping: MappingKind) -> concurrent::Summary {
    let list = workloads(count, seed, mapping, Tear::Lines);
    let start = std::time::Instant::now();
    let s = run(&list, 2, &|_| {});
    eprintln!(
        "{mapping}: {} workloads, {} operations, {} fences, {} crash images, {} with 2+ lanes rolled back, \
         {} points with 2+ operations in flight, {} switches, {} steals, {} violations ({:.1} s)",
        s.workloads,
        s.operations,
        s.fences,
        s.images,
        s.multi_lane_images,
        s.overlapping_points,
        s.switches,
        s.steals,
        s.violations.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        s.violations.is_empty(),
        "{} violations, first: {:#?}",
        s.violations.len(),
        &s.violations[..s.violations.len().min(5)]
    );
    s
}

#[test]
fn concurrent_sample_hashfs() {
    let n: u64 = std::env::var("CONCURRENT_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let s = sample(n, 1, MappingKind::HashFs);
    assert_eq!(s.workloads as u64, n);
    assert!(s.operations >= 2 * s.workloads);
    assert!(s.overlapping_points > s.workloads, "{s:?}");
    assert!(
        s.multi_lane_images > 0,
        "no image with two lanes armed: {s:?}"
    );
}

#[test]
fn concurrent_sample_tree_mappings() {
    for (k, mapping) in [MappingKind::Extent, MappingKind::Radix, MappingKind::Cuckoo]
        .into_iter()
        .enumerate()
    {
        let s = sample(15, 1001 + 100 * k as u64, mapping);
        assert!(s.overlapping_points > 0 && s.multi_lane_images > 0, "{s:?}");
    }
}

#[test]
fn workloads_are_concurrent_and_disjoint() {
    for mapping in MappingKind::ALL {
        for seed in 1..200 {
            let ops = concurrent::pick(seed, mapping);
            assert!(
                (2..=4).contains(&ops.len()),
                "{mapping} seed {seed}: {ops:?}"
            );
        }
    }
    // Seeds give different workloads, and 4 operations occur.
    let picks: Vec<_> = (1..50)
        .map(|s| concurrent::pick(s, MappingKind::HashFs))
        .collect();
    assert!(picks.iter().any(|p| p.len() == 4));
    assert!(picks.windows(2).any(|w| w[0] != w[1]));
}
