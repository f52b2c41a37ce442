//! `FormatOptions::layout_score` (mkfs --layout-score): files written sequentially on a tree
//! mapping come out with about the asked share of blocks that follow the previous block.

use nvmfs::layout::BLOCK_SIZE;
use nvmfs::mapping::open_view;
use nvmfs::media::Pm;
use nvmfs::{FormatOptions, Fs, MappingKind};

/// Writes a 2000-block file in 64 KiB appends and measures its layout score.
fn measured(mapping: MappingKind, score: Option<f64>) -> f64 {
    let fs = Fs::format_in_memory(&FormatOptions {
        size_bytes: 32 << 20,
        inode_count: Some(64),
        mapping,
        layout_score: score,
        tier: None,
    })
    .unwrap();
    let chunk = vec![5u8; 64 << 10];
    let f = nvmfs::OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/f")
        .unwrap();
    for i in 0..125u64 {
        f.write_all_at(&chunk, i * chunk.len() as u64).unwrap();
    }
    drop(f);
    let ino = fs.metadata("/f").unwrap().ino as u32;
    let pm = Pm::from_bytes(&fs.snapshot());
    let geo = fs.superblock().geo.clone();
    let map = open_view(mapping, &geo);
    let blocks = 125 * chunk.len() as u64 / BLOCK_SIZE;
    let p: Vec<u64> = (0..blocks as u32)
        .map(|l| map.lookup(&pm, ino, l).unwrap())
        .collect();
    let follow = p.windows(2).filter(|w| w[1] == w[0] + 1).count();
    follow as f64 / (p.len() - 1) as f64
}

#[test]
fn layout_score_is_met() {
    for mapping in [
        MappingKind::Extent,
        MappingKind::Radix,
        MappingKind::Cuckoo,
        MappingKind::Level,
    ] {
        let natural = measured(mapping, None);
        assert!(natural > 0.98, "{mapping}: natural layout {natural}");
        for want in [0.25, 0.6, 0.9] {
            let got = measured(mapping, Some(want));
            assert!(
                (got - want).abs() < 0.06,
                "{mapping}: asked {want}, got {got}"
            );
        }
    }
}

#[test]
fn layout_score_is_refused_for_hashfs_and_out_of_range() {
    let opts = |mapping, s| FormatOptions {
        size_bytes: 4 << 20,
        inode_count: None,
        mapping,
        layout_score: Some(s),
        tier: None,
    };
    let e = Fs::format_in_memory(&opts(MappingKind::HashFs, 0.5))
        .err()
        .unwrap();
    assert!(e.to_string().contains("block allocator"), "{e}");
    let e = Fs::format_in_memory(&opts(MappingKind::Radix, 1.5))
        .err()
        .unwrap();
    assert!(e.to_string().contains("between 0 and 1"), "{e}");
    // The score is recorded in the superblock and read back by a mount.
    let fs = Fs::format_in_memory(&opts(MappingKind::Extent, 0.6)).unwrap();
    let again = Fs::mount_pm(
        Pm::from_bytes(&fs.snapshot()),
        &Default::default(),
        None,
        None,
    )
    .unwrap();
    assert_eq!(again.superblock().layout_score_permille, Some(600));
    assert!(nvmfs::fsck::check_pm(&Pm::from_bytes(&again.snapshot())).is_clean());
}
