//! Recovery, more operations, a clean unmount and remount, more operations, a power loss at
//! every fence of all of it: 0 violations, and the histories really start from images that
//! recovery repaired and reach crash points after the unmount.

use nvmfs_crashtest::recovered::{run, workloads};
use nvmfs_crashtest::trace::Tear;
use nvmfs_crashtest::MappingKind;

fn sample(count: u64, seed: u64, mapping: MappingKind) {
    let list = workloads(count, seed, mapping, Tear::Lines);
    let start = std::time::Instant::now();
    let s = run(&list, 2, &|_| {});
    eprintln!(
        "{mapping}: {} workloads ({} from repaired images), {} steps, {} fences, {} crash images \
         ({} after the clean unmount), {} violations ({:.1} s)",
        s.workloads,
        s.repaired,
        s.steps,
        s.fences,
        s.images,
        s.images_after_unmount,
        s.violations.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        s.violations.is_empty(),
        "{} violations, first: {:#?}",
        s.violations.len(),
        &s.violations[..s.violations.len().min(5)]
    );
    assert!(s.repaired * 2 > s.workloads, "{s:?}");
    assert!(s.images_after_unmount > s.workloads, "{s:?}");
    // Recovery, 1-3 operations, unmount, remount, 1-3 operations.
    assert!(s.steps >= 5 * s.workloads, "{s:?}");
}

#[test]
fn after_recovery_hashfs() {
    sample(20, 1, MappingKind::HashFs);
}

#[test]
fn after_recovery_other_mappings() {
    for (k, m) in [MappingKind::Extent, MappingKind::Radix, MappingKind::Cuckoo]
        .into_iter()
        .enumerate()
    {
        sample(6, 101 + 100 * k as u64, m);
    }
}
