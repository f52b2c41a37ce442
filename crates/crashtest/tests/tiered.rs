//! ACE seq-1 on tiered images (an SSD tier under PM, files starting cold): every crash image
//! of every operation, with the SSD as written up to the crash, recovers to the state before
//! or after the operation, fsck clean. In CI; `nvmfs crashtest --tier` runs the same.

use nvmfs_crashtest::oracle::RecoveryDepth;
use nvmfs_crashtest::tiered;
use nvmfs_crashtest::trace::Tear;

#[test]
fn ace_seq1_on_tiered_images() {
    let ops = tiered::seq1();
    assert!(ops.len() >= 60, "{} operations", ops.len());
    let (mut fences, mut images, mut violations) = (0, 0, Vec::new());
    std::thread::scope(|s| {
        let chunks: Vec<_> = ops.chunks(ops.len().div_ceil(2)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|c| {
                s.spawn(move || {
                    c.iter()
                        .map(|op| {
                            let o = tiered::check(
                                std::slice::from_ref(op),
                                RecoveryDepth::FirstPerOperation,
                                Tear::Lines,
                            );
                            (format!("{op:?}"), o)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (op, o) in h.join().unwrap() {
                fences += o.fences;
                images += o.images;
                violations.extend(o.violations.into_iter().map(|v| format!("{op}: {v}")));
            }
        }
    });
    eprintln!(
        "tiered seq-1: {} operations, {fences} fences, {images} images, {} violations",
        ops.len(),
        violations.len()
    );
    assert!(violations.is_empty(), "{violations:#?}");
    assert!(images > fences, "{images} images at {fences} fences");
}
