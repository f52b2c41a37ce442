//! Check and repair a patched copy of the clean base image (same input as `mount_image`).
//! Invariants asserted:
//! - an image the check finds clean mounts, and its tree reads without errors;
//! - unless the repair calls the image unrepairable, the repaired image checks clean (both
//!   in the repair's own report and in a fresh check), mounts, and reads without errors.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmfs::fsck::{check_pm, repair_pm};
use nvmfs::media::Pm;
use nvmfs_fuzz::{clean, mount, parse, patched, walk_and_unmount};

fuzz_target!(|data: &[u8]| {
    let img = patched(clean(), &parse(data));

    let before = check_pm(&Pm::from_bytes(&img));
    if before.is_clean() {
        let fs = mount(&img).unwrap_or_else(|| {
            panic!(
                "check found the image clean but mount refused it (recovery: {:?})",
                before.recovery
            )
        });
        let errors = walk_and_unmount(fs);
        assert!(
            errors.is_empty(),
            "check found the image clean, walk failed: {errors:?}"
        );
    }

    let pm = Pm::from_bytes(&img);
    let report = repair_pm(&pm);
    if let Some(why) = &report.unrepairable {
        assert!(!before.is_clean(), "clean image called unrepairable: {why}");
        return;
    }
    assert!(
        report.after.is_clean(),
        "repair left problems: {:?}\nbefore: {:?}\nrepairs: {:?}",
        report.after.problems,
        before.problems,
        report.repairs
    );
    let repaired = pm.snapshot();
    let again = check_pm(&Pm::from_bytes(&repaired));
    assert!(
        again.is_clean(),
        "fresh check of the repaired image: {:?}\nbefore: {:?}\nrepairs: {:?}",
        again.problems,
        before.problems,
        report.repairs
    );
    let fs = mount(&repaired).unwrap_or_else(|| {
        panic!(
            "repaired image (checks clean) does not mount; repairs: {:?}",
            report.repairs
        )
    });
    let errors = walk_and_unmount(fs);
    assert!(errors.is_empty(), "repaired image, walk failed: {errors:?}");
});
