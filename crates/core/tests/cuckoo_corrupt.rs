//! Damaged images of the cuckoo mapping: for each invariant of its table (entry in one of its
//! two buckets, well-formed key and value, blocks inside the data region, no key twice, no
//! block mapped by a run and an entry, no block mapped twice, bitmap = mapped blocks and the
//! table's own) a damage that fsck must report (exit 4), that repair fixes as crash recovery does (exit 1,
//! then clean) or refuses without writing,
//! and that mount and a full read survive without a panic; after an unclean shutdown, damage
//! recovery cannot fix makes mount refuse. Plus a seeded byte-flip sweep over the table.

use nvmfs::fsck::{check_pm, repair_pm, EXIT_CORRECTED, EXIT_UNCORRECTED};
use nvmfs::layout::superblock::Geometry;
use nvmfs::mapping::cuckoo::{block_key, run_key, Table};
use nvmfs::mapping::{balloc, open_view};
use nvmfs::media::Pm;
use nvmfs::testing::{get_u64, known_image_with, put_u64, read_tree, set_mount_state, Known};
use nvmfs::{Fs, MappingKind, MountOptions};

const KIND: MappingKind = MappingKind::Cuckoo;

fn known() -> Known {
    known_image_with(1 << 20, 64, KIND)
}

fn lookup(k: &Known, img: &[u8], path: &str, lblk: u32) -> u64 {
    open_view(KIND, &k.geo)
        .lookup(&Pm::from_bytes(img), k.ino(path), lblk)
        .unwrap_or_else(|| panic!("{path} block {lblk} not mapped"))
}

/// The slot of `path`'s RUN entry for chunk 0.
fn run_slot(k: &Known, img: &[u8], path: &str) -> u64 {
    Table::of(&k.geo)
        .find(&Pm::from_bytes(img), run_key(k.ino(path), 0))
        .expect("run entry")
        .0
}

fn free_slot(t: &Table, img: &[u8], bucket: u64) -> Option<u64> {
    (bucket * 4..bucket * 4 + 4).find(|&s| get_u64(img, t.key_off(s)) == 0)
}

/// Stores (`key`, `val`) in a free slot of one of the key's buckets.
fn add_entry(k: &Known, img: &mut [u8], key: u64, val: u64) {
    let t = Table::of(&k.geo);
    let s = t
        .buckets_of(key)
        .into_iter()
        .find_map(|b| free_slot(&t, img, b))
        .expect("a free slot");
    put_u64(img, t.val_off(s), val);
    put_u64(img, t.key_off(s), key);
}

fn flip_bit(geo: &Geometry, img: &mut [u8], b: u64) {
    let off = balloc::bitmap_off(geo) + b / 64 * 8;
    put_u64(img, off, get_u64(img, off) ^ 1 << (b % 64));
}

/// The value word of `path`'s run, rewritten by `f`.
fn edit_run(k: &Known, img: &mut [u8], path: &str, f: impl Fn(u64) -> u64) {
    let t = Table::of(&k.geo);
    let off = t.val_off(run_slot(k, img, path));
    let w = get_u64(img, off);
    put_u64(img, off, f(w));
}

type Damage = (&'static str, &'static str, fn(&Known, &mut Vec<u8>));

fn damages() -> Vec<Damage> {
    vec![
        (
            "entry outside its buckets",
            "neither of its buckets",
            |k, img| {
                let t = Table::of(&k.geo);
                let s = run_slot(k, img, "/big.bin");
                let key = get_u64(img, t.key_off(s));
                let home = t.buckets_of(key);
                let to = (0..t.slots())
                    .find(|&x| !home.contains(&(x / 4)) && get_u64(img, t.key_off(x)) == 0)
                    .unwrap();
                put_u64(img, t.key_off(to), key);
                let val = get_u64(img, t.val_off(s));
                put_u64(img, t.val_off(to), val);
                put_u64(img, t.key_off(s), 0);
            },
        ),
        (
            "run past the data region",
            "outside the data blocks",
            |k, img| {
                let last = k.geo.data_blocks - 3;
                edit_run(k, img, "/big.bin", |w| w & !((1 << 40) - 1) | last);
            },
        ),
        ("bad key word", "bad key word", |k, img| {
            let t = Table::of(&k.geo);
            let off = t.key_off(run_slot(k, img, "/big.bin"));
            let w = get_u64(img, off);
            put_u64(img, off, w | 3 << 62);
        }),
        ("run of length 0", "bad value word", |k, img| {
            edit_run(k, img, "/big.bin", |w| w & !(127 << 46));
        }),
        ("data block owned twice", "owned twice", |k, img| {
            let other = lookup(k, img, "/a.txt", 0);
            edit_run(k, img, "/big.bin", |w| w & !((1 << 40) - 1) | other);
        }),
        ("key twice", "twice", |k, img| {
            let t = Table::of(&k.geo);
            let s = run_slot(k, img, "/a.txt");
            let (key, val) = (get_u64(img, t.key_off(s)), get_u64(img, t.val_off(s)));
            let other = t.buckets_of(key).into_iter().find(|&b| b != s / 4).unwrap();
            let to = free_slot(&t, img, other).expect("free slot in the other bucket");
            put_u64(img, t.val_off(to), val);
            put_u64(img, t.key_off(to), key);
        }),
        (
            "block in a run and an entry",
            "mapped by a run and an entry",
            |k, img| {
                let free = k.geo.data_blocks - 1;
                flip_bit(&k.geo, img, free);
                add_entry(k, img, block_key(k.ino("/big.bin"), 3), 1 << 46 | free);
            },
        ),
        (
            "bitmap bit of a mapped block cleared",
            "bitmap",
            |k, img| {
                let b = lookup(k, img, "/big.bin", 3);
                flip_bit(&k.geo, img, b);
            },
        ),
        ("bitmap bit of a free block set", "bitmap", |k, img| {
            flip_bit(&k.geo, img, k.geo.data_blocks - 1);
        }),
        ("bitmap bit of the table cleared", "bitmap", |k, img| {
            flip_bit(&k.geo, img, 0);
        }),
        ("mapping past EOF", "past EOF", |k, img| {
            // Block 1 of the 13-byte /a.txt mapped to a free block (bitmap bit set to match).
            let free = k.geo.data_blocks - 1;
            flip_bit(&k.geo, img, free);
            add_entry(k, img, block_key(k.ino("/a.txt"), 1), 1 << 46 | free);
        }),
    ]
}

#[test]
fn every_damage_is_reported_and_survived() {
    let k = known();
    assert!(
        check_pm(&Pm::from_bytes(&k.image)).is_clean(),
        "known image"
    );
    for (name, says, damage) in damages() {
        let mut img = k.image.clone();
        damage(&k, &mut img);
        let r = check_pm(&Pm::from_bytes(&img));
        assert_eq!(r.exit_code(), EXIT_UNCORRECTED, "{name}: {:?}", r.problems);
        assert!(
            r.problems.iter().any(|p| p.what.contains(says)),
            "{name}: expected {says:?} in {:?}",
            r.problems
        );
        // Repair fixes what crash recovery fixes; a damaged table it refuses, writing nothing.
        let repairable = says == "bitmap" || says == "past EOF";
        let pm = Pm::from_bytes(&img);
        let rep = repair_pm(&pm);
        if repairable {
            assert_eq!(rep.exit_code(), EXIT_CORRECTED, "{name}: {rep:?}");
            assert!(check_pm(&pm).is_clean(), "{name}: after repair");
        } else {
            assert_eq!(rep.exit_code(), EXIT_UNCORRECTED, "{name}");
            assert_eq!(pm.snapshot(), img, "{name}: repair wrote");
            assert!(rep.unrepairable.unwrap().contains("not implemented"));
        }
        if let Ok(fs) = Fs::mount_pm(Pm::from_bytes(&img), &MountOptions::default(), None, None) {
            let _ = read_tree(&fs);
        }
        let mut unclean = img.clone();
        set_mount_state(&mut unclean, nvmfs::layout::state::STATE_MOUNTED);
        let m = Fs::mount_pm(
            Pm::from_bytes(&unclean),
            &MountOptions::default(),
            None,
            None,
        );
        assert_eq!(m.is_ok(), repairable, "{name}: unclean mount {:?}", m.err());
        if let Ok(fs) = m {
            let snap = fs.snapshot();
            drop(fs);
            assert!(
                check_pm(&Pm::from_bytes(&snap)).is_clean(),
                "{name}: after recovery"
            );
        }
    }
}

#[test]
fn byte_flips_in_the_table_never_panic() {
    let k = known();
    let t = Table::of(&k.geo);
    let (start, len) = (
        balloc::bitmap_off(&k.geo),
        t.key_off(t.slots()) - balloc::bitmap_off(&k.geo),
    );
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let used: Vec<u64> = (0..t.slots())
        .filter(|&s| get_u64(&k.image, t.key_off(s)) != 0)
        .collect();
    for round in 0..300 {
        let mut img = k.image.clone();
        for _ in 0..1 + round % 4 {
            let off = if next(2) == 0 {
                start + next(len)
            } else {
                t.key_off(used[next(used.len() as u64) as usize]) + next(16)
            };
            img[off as usize] ^= 1 << next(8);
        }
        let _ = check_pm(&Pm::from_bytes(&img));
        for state in [
            nvmfs::layout::state::STATE_CLEAN,
            nvmfs::layout::state::STATE_MOUNTED,
        ] {
            set_mount_state(&mut img, state);
            if let Ok(fs) = Fs::mount_pm(Pm::from_bytes(&img), &MountOptions::default(), None, None)
            {
                let _ = read_tree(&fs);
                let _ = fs.write_file("/new", &[7u8; 9000]);
                let _ = fs.remove_file("/big.bin");
            }
        }
    }
}
