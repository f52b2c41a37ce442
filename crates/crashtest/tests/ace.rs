//! ACE seq-1 in full, a seeded sample of seq-2 and of random sequences: 0 violations.

use nvmfs_crashtest::{run, workloads, Suite};

fn check(suite: Suite, sample: Option<(usize, u64)>) -> nvmfs_crashtest::Summary {
    let mut list = workloads(&suite);
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
        "{suite:?}: {} workloads, {} fences, {} crash images, 0 violations",
        s.workloads, s.fences, s.images
    );
    s
}

#[test]
fn ace_seq1_all() {
    let s = check(Suite::Seq1, None);
    assert_eq!(s.workloads, nvmfs_crashtest::ace::seq1().len());
}

#[test]
fn ace_seq2_sample() {
    check(Suite::Seq2, Some((60, 2026)));
}

#[test]
fn random_sequences_sample() {
    check(Suite::Random { count: 12, seed: 1 }, None);
}
