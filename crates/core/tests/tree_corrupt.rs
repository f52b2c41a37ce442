//! Damaged images of the tree mappings (extent, radix): for each structure (superblock mapping
//! field, root table, tree nodes, bitmap) a damage that fsck must report (exit 4), that
//! repair fixes as crash recovery does (exit 1, then clean) or refuses without writing (a
//! damaged tree), and that mount and a
//! full read of the tree must survive without a panic. After an unclean shutdown, a damaged
//! tree makes mount refuse (recovery walks every tree). Plus a seeded byte-flip sweep over the
//! mapping region and the nodes: never a panic.

use nvmfs::fsck::{check_pm, repair_pm, EXIT_CORRECTED, EXIT_UNCORRECTED};
use nvmfs::layout::superblock::Geometry;
use nvmfs::layout::BLOCK_SIZE;
use nvmfs::mapping::tree::{root_off, split_root};
use nvmfs::mapping::{balloc, open_view};
use nvmfs::media::Pm;
use nvmfs::testing::{get_u64, known_image_with, put_u64, read_tree, set_mount_state, Known};
use nvmfs::{Fs, MappingKind, MountOptions};

const TREES: [MappingKind; 2] = [MappingKind::Extent, MappingKind::Radix];

fn known(kind: MappingKind) -> Known {
    known_image_with(1 << 20, 64, kind)
}

fn lookup(k: &Known, kind: MappingKind, img: &[u8], path: &str, lblk: u32) -> u64 {
    let pm = Pm::from_bytes(img);
    open_view(kind, &k.geo)
        .lookup(&pm, k.ino(path), lblk)
        .unwrap_or_else(|| panic!("{path} block {lblk} not mapped"))
}

fn root_node(k: &Known, img: &[u8], path: &str) -> u64 {
    split_root(get_u64(img, root_off(&k.geo, k.ino(path)))).1
}

fn flip_bit(geo: &Geometry, img: &mut [u8], b: u64) {
    let off = balloc::bitmap_off(geo) + b / 64 * 8;
    put_u64(img, off, get_u64(img, off) ^ 1 << (b % 64));
}

/// Damages: (name, what fsck must say (a substring), damage).
type Damage = (
    &'static str,
    &'static str,
    fn(MappingKind, &Known, &mut Vec<u8>),
);

fn damages() -> Vec<Damage> {
    vec![
        (
            "root word past the data region",
            "root word",
            |_, k, img| {
                let off = root_off(&k.geo, k.ino("/big.bin"));
                put_u64(img, off, 1 << 48 | (k.geo.data_blocks + 5));
            },
        ),
        ("root word with a bad level count", "level", |_, k, img| {
            let off = root_off(&k.geo, k.ino("/big.bin"));
            let w = get_u64(img, off);
            put_u64(img, off, w | 9 << 48);
        }),
        (
            "root word of a free inode",
            "root of free inode",
            |_, k, img| {
                let ino = nvmfs::testing::free_ino(img, &k.geo);
                let w = get_u64(img, root_off(&k.geo, k.ino("/a.txt")));
                put_u64(img, root_off(&k.geo, ino), w);
            },
        ),
        (
            "node entry past the data region",
            "data region",
            |kind, k, img| {
                let node = root_node(k, img, "/big.bin");
                let off = k.geo.data_off(node) + 16 + 8;
                // Extent: the first extent's data block; radix: a leaf entry (block + 1).
                let v = if kind == MappingKind::Extent {
                    k.geo.data_blocks
                } else {
                    k.geo.data_blocks + 1
                };
                put_u64(
                    img,
                    if kind == MappingKind::Extent {
                        off
                    } else {
                        off - 24
                    },
                    v,
                );
            },
        ),
        ("data block owned twice", "owned twice", |kind, k, img| {
            let other = lookup(k, kind, img, "/a.txt", 0);
            let node = root_node(k, img, "/big.bin");
            let off = k.geo.data_off(node);
            if kind == MappingKind::Extent {
                put_u64(img, off + 24, other);
            } else {
                put_u64(img, off, other + 1);
            }
        }),
        (
            "bitmap bit of a mapped block cleared",
            "bitmap",
            |kind, k, img| {
                let b = lookup(k, kind, img, "/big.bin", 3);
                flip_bit(&k.geo, img, b);
            },
        ),
        ("bitmap bit of a free block set", "bitmap", |_, k, img| {
            flip_bit(&k.geo, img, k.geo.data_blocks - 1);
        }),
        ("mapping past EOF", "past EOF", |kind, k, img| {
            // Block 1 of the 13-byte /a.txt mapped to a free block (bitmap bit set to match).
            let free = k.geo.data_blocks - 1;
            flip_bit(&k.geo, img, free);
            let off = k.geo.data_off(root_node(k, img, "/a.txt"));
            if kind == MappingKind::Extent {
                let h = get_u64(img, off);
                let count = (h >> 16) & 0xffff;
                put_u64(img, off, h + (1 << 16));
                put_u64(img, off + 16 + count * 16, 1 | 1 << 32);
                put_u64(img, off + 24 + count * 16, free);
            } else {
                put_u64(img, off + 8, free + 1);
            }
        }),
    ]
}

#[test]
fn every_damage_is_reported_and_survived() {
    for kind in TREES {
        let k = known(kind);
        assert!(
            check_pm(&Pm::from_bytes(&k.image)).is_clean(),
            "{kind}: known image"
        );
        for (name, says, damage) in damages() {
            let mut img = k.image.clone();
            damage(kind, &k, &mut img);
            let r = check_pm(&Pm::from_bytes(&img));
            assert_eq!(
                r.exit_code(),
                EXIT_UNCORRECTED,
                "{kind} {name}: {:?}",
                r.problems
            );
            assert!(
                r.problems.iter().any(|p| p.what.contains(says)),
                "{kind} {name}: expected {says:?} in {:?}",
                r.problems
            );
            // Repair fixes what crash recovery fixes; a damaged tree it refuses, writing
            // nothing.
            let repairable = says == "bitmap" || says == "past EOF" || says == "root of free inode";
            let pm = Pm::from_bytes(&img);
            let rep = repair_pm(&pm);
            if repairable {
                assert_eq!(rep.exit_code(), EXIT_CORRECTED, "{kind} {name}: {rep:?}");
                assert!(check_pm(&pm).is_clean(), "{kind} {name}: after repair");
            } else {
                assert_eq!(rep.exit_code(), EXIT_UNCORRECTED, "{kind} {name}");
                assert_eq!(pm.snapshot(), img, "{kind} {name}: repair wrote");
                assert!(rep.unrepairable.unwrap().contains("not implemented"));
            }
            // A clean image mounts without walking the trees; reading everything must not
            // panic (damaged mappings read as holes or fail).
            if let Ok(fs) = Fs::mount_pm(Pm::from_bytes(&img), &MountOptions::default(), None, None)
            {
                let _ = read_tree(&fs);
            }
            // After an unclean shutdown recovery walks every tree: a damaged one refuses the
            // mount (damage recovery itself would fix, such as the bitmap, mounts).
            let mut unclean = img.clone();
            set_mount_state(&mut unclean, nvmfs::layout::state::STATE_MOUNTED);
            let m = Fs::mount_pm(
                Pm::from_bytes(&unclean),
                &MountOptions::default(),
                None,
                None,
            );
            assert_eq!(
                m.is_ok(),
                repairable,
                "{kind} {name}: unclean mount {:?}",
                m.err()
            );
            if let Ok(fs) = m {
                let snap = fs.snapshot();
                drop(fs);
                assert!(
                    check_pm(&Pm::from_bytes(&snap)).is_clean(),
                    "{kind} {name}: after recovery"
                );
            }
        }
    }
}

#[test]
fn unknown_mapping_code_is_refused() {
    for kind in [
        MappingKind::Extent,
        MappingKind::Radix,
        MappingKind::Cuckoo,
        MappingKind::Level,
    ] {
        let mut img = known(kind).image;
        for block in 0..2 {
            let off = block * BLOCK_SIZE + 148;
            let w = get_u64(&img, off);
            put_u64(&mut img, off, w & !0xffff_ffff | 9);
            nvmfs::testing::reseal_superblock(&mut img, block);
        }
        let e = Fs::mount_pm(Pm::from_bytes(&img), &MountOptions::default(), None, None)
            .err()
            .expect("mount refuses");
        assert!(e.to_string().contains("mapping"), "{e}");
        assert_eq!(
            check_pm(&Pm::from_bytes(&img)).exit_code(),
            EXIT_UNCORRECTED
        );
    }
}

#[test]
fn byte_flips_in_trees_never_panic() {
    for kind in TREES {
        let k = known(kind);
        let region = (k.geo.hash_start * BLOCK_SIZE, k.geo.data_start * BLOCK_SIZE);
        let nodes: Vec<u64> = ["/big.bin", "/a.txt", "/dir1", "/long-link"]
            .iter()
            .map(|p| k.geo.data_off(root_node(&k, &k.image, p)))
            .collect();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..300 {
            let mut img = k.image.clone();
            for _ in 0..1 + round % 4 {
                let off = if next(2) == 0 {
                    region.0 + next((region.1 - region.0).min(1024))
                } else {
                    nodes[next(nodes.len() as u64) as usize] + next(64)
                };
                img[off as usize] ^= 1 << next(8);
            }
            let _ = check_pm(&Pm::from_bytes(&img));
            for state in [
                nvmfs::layout::state::STATE_CLEAN,
                nvmfs::layout::state::STATE_MOUNTED,
            ] {
                set_mount_state(&mut img, state);
                if let Ok(fs) =
                    Fs::mount_pm(Pm::from_bytes(&img), &MountOptions::default(), None, None)
                {
                    let _ = read_tree(&fs);
                    let _ = fs.write_file("/new", &[7u8; 9000]);
                    let _ = fs.remove_file("/big.bin");
                }
            }
        }
    }
}

#[test]
fn enospc_on_tree_mappings_loses_nothing_and_space_comes_back() {
    for kind in [
        MappingKind::Extent,
        MappingKind::Radix,
        MappingKind::Cuckoo,
        MappingKind::Level,
    ] {
        let fs = Fs::format_in_memory(&nvmfs::FormatOptions {
            size_bytes: 2 << 20,
            inode_count: Some(128),
            mapping: kind,
            layout_score: None,
            tier: None,
        })
        .unwrap();
        let mut written = Vec::new();
        for i in 0.. {
            let data = nvmfs::testing::pattern(20_000 + i * 97, i as u64);
            match fs.write_file(format!("/f{i}"), &data) {
                Ok(()) => written.push((i, data)),
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{kind}: {e}");
                    break;
                }
            }
        }
        assert!(
            written.len() > 10,
            "{kind}: only {} files fit",
            written.len()
        );
        for (i, data) in &written {
            assert_eq!(
                &fs.read_file(format!("/f{i}")).unwrap(),
                data,
                "{kind} /f{i}"
            );
        }
        let snap = fs.snapshot();
        assert!(
            check_pm(&Pm::from_bytes(&snap)).is_clean(),
            "{kind}: full image"
        );
        for (i, _) in &written {
            fs.remove_file(format!("/f{i}")).unwrap();
        }
        // The file whose write hit ENOSPC was created and keeps what fit.
        fs.remove_file(format!("/f{}", written.len())).unwrap();
        // Everything but the root directory's blocks and its tree node is free again.
        let st = fs.statfs();
        assert!(st.blocks_free + 4 >= st.blocks, "{kind}: {st:?}");
        assert_eq!(st.inodes_free + 1, st.inodes, "{kind}");
        let data = nvmfs::testing::pattern(300_000, 9);
        fs.write_file("/again", &data).unwrap();
        assert_eq!(fs.read_file("/again").unwrap(), data);
        assert!(
            check_pm(&Pm::from_bytes(&fs.snapshot())).is_clean(),
            "{kind}: after reuse"
        );
    }
}
