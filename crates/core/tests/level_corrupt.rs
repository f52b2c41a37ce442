//! Damaged images of the level hashing mapping: for each invariant of its table (a header that
//! decodes, entries only in the live levels and in one of their two buckets there, well-formed
//! key and value, blocks inside the data region, no key in two slots, no block mapped twice,
//! bitmap = mapped blocks and the table's own, nothing pending or moving on a clean image) a
//! damage that fsck must report (exit 4), that repair refuses without writing, and that mount
//! and a full read survive without a panic; after an unclean shutdown, damage recovery cannot
//! fix makes mount refuse, and what it can fix leaves a clean image. Plus a seeded byte-flip
//! sweep over the table.

use nvmfs::fsck::{check_pm, repair_pm, EXIT_CORRECTED, EXIT_UNCORRECTED};
use nvmfs::layout::superblock::Geometry;
use nvmfs::mapping::level::{key, Table, PENDING};
use nvmfs::mapping::{balloc, open_view};
use nvmfs::media::Pm;
use nvmfs::testing::{get_u64, known_image_with, put_u64, read_tree, set_mount_state, Known};
use nvmfs::{Fs, MappingKind, MountOptions};

const KIND: MappingKind = MappingKind::Level;

fn known() -> Known {
    known_image_with(1 << 20, 64, KIND)
}

fn lookup(k: &Known, img: &[u8], path: &str, lblk: u32) -> u64 {
    open_view(KIND, &k.geo)
        .lookup(&Pm::from_bytes(img), k.ino(path), lblk)
        .unwrap_or_else(|| panic!("{path} block {lblk} not mapped"))
}

/// The slot of `path`'s entry for logical block `lblk`.
fn slot(k: &Known, img: &[u8], path: &str, lblk: u64) -> u64 {
    let t = Table::of(&k.geo);
    let pm = Pm::from_bytes(img);
    let lv = t.levels(&pm).expect("header");
    t.find(&pm, &lv, key(k.ino(path), lblk)).expect("entry").0
}

fn free_slot(t: &Table, img: &[u8], bucket: u64) -> Option<u64> {
    (Table::slot_of(bucket)..Table::slot_of(bucket + 1)).find(|&s| get_u64(img, t.key_off(s)) == 0)
}

/// Stores (`key`, `val`) in a free slot of one of the key's top-level buckets.
fn add_entry(k: &Known, img: &mut [u8], key: u64, val: u64) {
    let t = Table::of(&k.geo);
    let top = t.levels(&Pm::from_bytes(img)).unwrap().top;
    let s = Table::buckets_in(key, top)
        .into_iter()
        .find_map(|b| free_slot(&t, img, b))
        .expect("a free slot");
    put_u64(img, t.val_off(s), val);
    put_u64(img, t.key_off(s), key);
}

/// Moves the entry in slot `s` to the first free slot of bucket `to`.
fn move_entry(t: &Table, img: &mut [u8], s: u64, to: u64) {
    let d = free_slot(t, img, to).expect("a free slot");
    let (k, v) = (get_u64(img, t.key_off(s)), get_u64(img, t.val_off(s)));
    put_u64(img, t.key_off(d), k);
    put_u64(img, t.val_off(d), v);
    put_u64(img, t.key_off(s), 0);
    put_u64(img, t.val_off(s), 0);
}

fn flip_bit(geo: &Geometry, img: &mut [u8], b: u64) {
    let off = balloc::bitmap_off(geo) + b / 64 * 8;
    put_u64(img, off, get_u64(img, off) ^ 1 << (b % 64));
}

fn edit_val(k: &Known, img: &mut [u8], path: &str, lblk: u64, f: impl Fn(u64) -> u64) {
    let t = Table::of(&k.geo);
    let off = t.val_off(slot(k, img, path, lblk));
    let w = get_u64(img, off);
    put_u64(img, off, f(w));
}

type Damage = (&'static str, &'static str, fn(&Known, &mut Vec<u8>));

const MASK: u64 = (1 << 40) - 1;

fn damages() -> Vec<Damage> {
    vec![
        ("header damaged", "header", |k, img| {
            let t = Table::of(&k.geo);
            put_u64(img, t.header_off(), 0x1234);
        }),
        (
            "entry outside its buckets",
            "neither of its buckets",
            |k, img| {
                let t = Table::of(&k.geo);
                let s = slot(k, img, "/big.bin", 2);
                let kw = get_u64(img, t.key_off(s));
                let cap = Table::level_of_bucket(s / 4);
                let home = Table::buckets_in(kw, cap);
                let to = (cap..2 * cap)
                    .find(|b| !home.contains(b) && free_slot(&t, img, *b).is_some())
                    .unwrap();
                move_entry(&t, img, s, to);
            },
        ),
        (
            "entry outside the live levels",
            "outside the live levels",
            |k, img| {
                let t = Table::of(&k.geo);
                let s = slot(k, img, "/big.bin", 2);
                // Bucket 1 belongs to no level that can be live.
                move_entry(&t, img, s, 1);
            },
        ),
        (
            "entry in a level above the top",
            "outside the live levels",
            |k, img| {
                let t = Table::of(&k.geo);
                let lv = t.levels(&Pm::from_bytes(img)).unwrap();
                assert!(lv.top < t.max_buckets, "room for a bigger level");
                let s = slot(k, img, "/big.bin", 2);
                move_entry(&t, img, s, 2 * lv.top);
            },
        ),
        ("inode out of range", "out of range", |k, img| {
            let free = k.geo.data_blocks - 1;
            flip_bit(&k.geo, img, free);
            add_entry(k, img, key(k.geo.inode_count as u32 + 3, 0), free);
        }),
        ("bad value word", "bad value word", |k, img| {
            edit_val(k, img, "/big.bin", 3, |w| w | 1 << 50);
        }),
        (
            "block past the data region",
            "outside the data blocks",
            |k, img| {
                let end = k.geo.data_blocks + 5;
                edit_val(k, img, "/big.bin", 3, |w| w & !MASK | end);
            },
        ),
        (
            "block inside the table",
            "outside the data blocks",
            |k, img| {
                edit_val(k, img, "/big.bin", 3, |w| w & !MASK);
            },
        ),
        ("data block owned twice", "owned twice", |k, img| {
            let other = lookup(k, img, "/a.txt", 0);
            edit_val(k, img, "/big.bin", 3, |w| w & !MASK | other);
        }),
        ("key in two slots", "two slots", |k, img| {
            let t = Table::of(&k.geo);
            let s = slot(k, img, "/a.txt", 0);
            let (kw, val) = (get_u64(img, t.key_off(s)), get_u64(img, t.val_off(s)));
            let cap = Table::level_of_bucket(s / 4);
            let other = Table::buckets_in(kw, cap)
                .into_iter()
                .find(|&b| b != s / 4)
                .unwrap();
            let to = free_slot(&t, img, other).expect("free slot in the other bucket");
            let free = k.geo.data_blocks - 1;
            flip_bit(&k.geo, img, free);
            put_u64(img, t.val_off(to), val & !MASK | free);
            put_u64(img, t.key_off(to), kw);
        }),
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
            add_entry(k, img, key(k.ino("/a.txt"), 1), free);
        }),
        ("pending claim on a clean image", "in flight", |k, img| {
            let free = k.geo.data_blocks - 1;
            flip_bit(&k.geo, img, free);
            add_entry(k, img, key(k.ino("/big.bin"), 900), free | PENDING);
        }),
        (
            "a move half done on a clean image",
            "in flight",
            |k, img| {
                let t = Table::of(&k.geo);
                let s = slot(k, img, "/a.txt", 0);
                let (kw, val) = (get_u64(img, t.key_off(s)), get_u64(img, t.val_off(s)));
                let cap = Table::level_of_bucket(s / 4);
                let other = Table::buckets_in(kw, cap)
                    .into_iter()
                    .find(|&b| b != s / 4)
                    .unwrap();
                let to = free_slot(&t, img, other).expect("free slot in the other bucket");
                put_u64(img, t.val_off(to), val);
                put_u64(img, t.key_off(to), kw);
            },
        ),
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
        let repairable = ["bitmap", "past EOF", "in flight"].contains(&says);
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
    let slots = t.region_buckets() * 4;
    let (start, len) = (
        balloc::bitmap_off(&k.geo),
        t.key_off(slots) - balloc::bitmap_off(&k.geo),
    );
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let used: Vec<u64> = (0..slots)
        .filter(|&s| get_u64(&k.image, t.key_off(s)) != 0)
        .collect();
    assert!(used.len() > 20, "the known image fills the table");
    for round in 0..300 {
        let mut img = k.image.clone();
        for _ in 0..1 + round % 4 {
            let off = match next(3) {
                0 => start + next(len),
                1 => t.header_off() + next(8),
                _ => t.key_off(used[next(used.len() as u64) as usize]) + next(16),
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

/// What the crash workload `level_fill(N)` does (`N` sparse one-byte appends on a 1 MiB
/// image): the table resizes in place at least once, every block reads back, fsck is clean.
#[test]
fn sparse_appends_on_a_small_image_resize_the_table() {
    const N: u64 = 120;
    let fs = Fs::format_in_memory(&nvmfs::FormatOptions {
        size_bytes: 1 << 20,
        mapping: KIND,
        ..Default::default()
    })
    .unwrap();
    fs.write_file("/bar", b"").unwrap();
    let f = nvmfs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fs, "/bar")
        .unwrap();
    for i in 1..=N {
        f.write_at(&[i as u8], i * 4097).unwrap();
    }
    let snap = fs.snapshot();
    let pm = Pm::from_bytes(&snap);
    let sb = nvmfs::layout::superblock::Superblock::decode(&snap[..4096], 0).unwrap();
    let t = Table::of(&sb.geo);
    let lv = t.levels(&pm).unwrap();
    assert!(
        lv.top > t.start_buckets,
        "no resize: top {} start {}",
        lv.top,
        t.start_buckets
    );
    for i in 1..=N {
        let mut b = [0u8; 1];
        f.read_at(&mut b, i * 4097).unwrap();
        assert_eq!(b[0], i as u8);
    }
    assert!(check_pm(&pm).is_clean());
}
