//! The SSD tier (docs/TIER.md): data larger than the PM tier reads back byte for byte, before
//! and after a remount (clean and crash); a seeded random stream of writes, reads, truncates,
//! fallocates and unlinks on a small PM tier matches a model; flushing, eviction, caching of
//! cold reads and segment cleaning all happen (their counters say so); fsck is clean after
//! every test that writes; a wrong SSD is refused.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// fsck of a live image's snapshot finds no problem and no block count to recompute (a
/// snapshot counts as unclean, which would otherwise hide wrong counts as recovery).
fn assert_fsck_clean(fs: &Fs) {
    common::assert_fsck_clean(fs);
    let r = nvmfs::fsck::check_pm(&Pm::from_bytes(&fs.snapshot()));
    assert!(
        !r.recovery.iter().any(|x| x.contains("block count")),
        "{:?}",
        r.recovery
    );
}

/// fsck of an unmounted image file: clean, nothing to recover.
fn assert_image_clean(img: &Path) {
    let r = nvmfs::fsck::check_image(img).unwrap();
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
    assert!(r.recovery.is_empty(), "{:?}", r.recovery);
}
use nvmfs::media::Pm;
use nvmfs::{FormatOptions, Fs, MountOptions, TierFormat};

const MIB: u64 = 1 << 20;
const ROOT: u64 = 1;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

fn tiered_opts(pm_mb: u64, ssd: Option<PathBuf>, ssd_mb: u64) -> FormatOptions {
    FormatOptions {
        size_bytes: pm_mb * MIB,
        inode_count: Some(1024),
        tier: Some(TierFormat::new(ssd, Some(ssd_mb * MIB))),
        ..Default::default()
    }
}

fn files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("pm.img"), dir.join("ssd.img"))
}

fn read_all(fs: &Fs, ino: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len + 100];
    let mut at = 0;
    while at < buf.len() {
        let n = fs.read(ino, at as u64, &mut buf[at..]).unwrap();
        if n == 0 {
            break;
        }
        at += n;
    }
    buf.truncate(at);
    buf
}

/// Writes `n` files of `size` bytes in 64 KiB chunks; returns (ino, contents) per file.
fn fill(fs: &Fs, rng: &mut Rng, n: usize, size: usize) -> Vec<(u64, Vec<u8>)> {
    (0..n)
        .map(|k| {
            let ino = fs
                .create(ROOT, format!("f{k}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            let data = rng.bytes(size);
            for (c, chunk) in data.chunks(64 << 10).enumerate() {
                assert_eq!(
                    fs.write(ino, (c * (64 << 10)) as u64, chunk).unwrap(),
                    chunk.len()
                );
            }
            (ino, data)
        })
        .collect()
}

fn check_files(fs: &Fs, want: &[(u64, Vec<u8>)]) {
    for (ino, data) in want {
        let got = read_all(fs, *ino, data.len());
        assert_eq!(got.len(), data.len(), "ino {ino}: length");
        if let Some(i) = (0..data.len()).find(|&i| got[i] != data[i]) {
            panic!("ino {ino}: byte {i} differs");
        }
    }
}

#[test]
fn data_larger_than_pm_reads_back_after_remounts() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (img, ssd) = files(dir.path());
    Fs::format(&img, &tiered_opts(16, Some(ssd.clone()), 96)).unwrap();
    let fs = Fs::mount(&img, &Default::default()).unwrap();
    let pm_data = fs.statfs().blocks;
    let mut rng = Rng(7);
    // 40 MiB of file data on a 16 MiB PM tier.
    let want = fill(&fs, &mut rng, 10, 4 * MIB as usize);
    let t = fs.tier_info().unwrap();
    assert!(t.stats.flushes > 0 && t.stats.evicted > 0, "{t:?}");
    assert!(t.ssd_valid_blocks * 4096 > 16 * MIB, "{t:?}");
    assert!(pm_data > t.pm_data_blocks, "statfs counts both tiers");
    check_files(&fs, &want);
    assert!(fs.tier_info().unwrap().stats.cold_reads > 0);
    assert_fsck_clean(&fs);
    fs.unmount().unwrap();

    let fs = Fs::mount(&img, &Default::default()).unwrap();
    assert!(!fs.recovery_report().unclean);
    check_files(&fs, &want);
    // After a crash: everything acknowledged is there, and recovery resolves PM-resident
    // blocks that also have an SSD copy in PM's favour.
    fs.drop_without_unmount();
    let fs = Fs::mount(&img, &Default::default()).unwrap();
    assert!(fs.recovery_report().unclean);
    check_files(&fs, &want);
    assert_fsck_clean(&fs);
    fs.unmount().unwrap();
    assert_image_clean(&img);
}

#[test]
fn overwrites_of_cold_and_clean_blocks_and_cleaning() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (img, ssd) = files(dir.path());
    // A small SSD that random overwrites push past the cleaning threshold.
    Fs::format(&img, &tiered_opts(8, Some(ssd.clone()), 24)).unwrap();
    let fs = Fs::mount(&img, &Default::default()).unwrap();
    let mut rng = Rng(11);
    let mut want = fill(&fs, &mut rng, 2, 7 * MIB as usize);
    for _ in 0..6000 {
        let f = rng.below(2) as usize;
        let (ino, data) = &mut want[f];
        let len = 1 + rng.below(9000) as usize;
        let off = rng.below((data.len() - len) as u64) as usize;
        let bytes = rng.bytes(len);
        fs.write(*ino, off as u64, &bytes).unwrap();
        data[off..off + len].copy_from_slice(&bytes);
    }
    check_files(&fs, &want);
    let t = fs.tier_info().unwrap();
    assert!(t.stats.cleaned_extents > 0, "no cleaning happened: {t:?}");
    assert!(t.stats.promoted > 0, "no cold read was cached: {t:?}");
    let eff = t.stats.cleaning_efficiency().unwrap();
    assert!((0.0..=1.0).contains(&eff), "{eff}");
    assert_fsck_clean(&fs);
    fs.unmount().unwrap();
    assert_image_clean(&img);
    let fs = Fs::mount(&img, &Default::default()).unwrap();
    check_files(&fs, &want);
    fs.unmount().unwrap();
    assert_image_clean(&img);
}

/// A seeded stream of operations on several files, in memory, PM tier of 4 MiB: each read
/// compared with the model, every file compared in full every 500 operations.
#[test]
fn random_operations_match_a_model() {
    // TIER_SEEDS=N TIER_OPS=M for a longer run.
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    for seed in 1..=env("TIER_SEEDS", 3) {
        model_run(seed, env("TIER_OPS", 3000));
    }
}

fn model_run(seed: u64, ops: u64) {
    let fs = Fs::format_in_memory(&tiered_opts(4, None, 20)).unwrap();
    let mut rng = Rng(seed);
    let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut names: HashMap<u64, String> = HashMap::new();
    const FLEN: u64 = 3 * MIB;
    for n in 0..ops {
        if model.len() < 4 || rng.below(50) == 0 {
            let name = format!("s{seed}n{n}");
            let ino = fs.create(ROOT, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
            model.insert(ino, Vec::new());
            names.insert(ino, name);
            continue;
        }
        let mut inos: Vec<u64> = model.keys().copied().collect();
        inos.sort();
        let ino = inos[rng.below(inos.len() as u64) as usize];
        let data = model.get_mut(&ino).unwrap();
        let ctx = |what: &str| format!("seed {seed} op {n} ino {ino}: {what}");
        match rng.below(100) {
            0..=44 => {
                let off = rng.below(FLEN - 1);
                let len = (1 + rng.below(128 << 10)).min(FLEN - off) as usize;
                let bytes = rng.bytes(len);
                let wrote = fs
                    .write(ino, off, &bytes)
                    .unwrap_or_else(|e| panic!("{}: {e}", ctx("write")));
                assert_eq!(wrote, len, "{}", ctx("short write"));
                let end = off as usize + len;
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[off as usize..end].copy_from_slice(&bytes);
            }
            45..=74 => {
                let off = rng.below(data.len() as u64 + 4096);
                let len = 1 + rng.below(200 << 10) as usize;
                let mut buf = vec![0xa5; len];
                let got = fs
                    .read(ino, off, &mut buf)
                    .unwrap_or_else(|e| panic!("{}: {e}", ctx("read")));
                let want = data.len().saturating_sub(off as usize).min(len);
                assert_eq!(got, want, "{}", ctx("read length"));
                let o = (off as usize).min(data.len());
                assert!(buf[..got] == data[o..o + got], "{}", ctx("read bytes"));
            }
            75..=84 => {
                let size = rng.below(FLEN);
                fs.setattr(
                    ino,
                    &nvmfs::SetAttr {
                        size: Some(size),
                        ..Default::default()
                    },
                )
                .unwrap_or_else(|e| panic!("{}: {e}", ctx("truncate")));
                data.resize(size as usize, 0);
            }
            85..=91 => {
                let off = rng.below(FLEN - 1);
                let len = (1 + rng.below(256 << 10)).min(FLEN - off);
                if rng.below(2) == 0 {
                    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                    fs.fallocate(ino, mode, off, len)
                        .unwrap_or_else(|e| panic!("{}: {e}", ctx("punch")));
                    let end = ((off + len) as usize).min(data.len());
                    if (off as usize) < end {
                        data[off as usize..end].fill(0);
                    }
                } else {
                    fs.fallocate(ino, 0, off, len)
                        .unwrap_or_else(|e| panic!("{}: {e}", ctx("fallocate")));
                    let end = (off + len) as usize;
                    if data.len() < end {
                        data.resize(end, 0);
                    }
                }
            }
            92..=94 if model.len() > 4 => {
                fs.unlink(ROOT, names[&ino].as_bytes())
                    .unwrap_or_else(|e| panic!("{}: {e}", ctx("unlink")));
                model.remove(&ino);
            }
            _ => {}
        }
        if n % 500 == 499 {
            for (&ino, data) in &model {
                assert!(
                    read_all(&fs, ino, data.len()) == *data,
                    "seed {seed} op {n}: ino {ino} differs from the model"
                );
            }
            assert_fsck_clean(&fs);
        }
    }
    let t = fs.tier_info().unwrap();
    eprintln!("seed {seed}: {:?}", t.stats);
    assert!(
        t.stats.flushes > 0 && t.stats.evicted > 0 && t.stats.cold_reads > 0,
        "seed {seed}: the stream did not exercise the tier: {t:?}"
    );
}

#[test]
fn a_wrong_or_missing_ssd_is_refused() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (img, ssd) = files(dir.path());
    let (img2, ssd2) = (dir.path().join("pm2.img"), dir.path().join("ssd2.img"));
    Fs::format(&img, &tiered_opts(8, Some(ssd.clone()), 8)).unwrap();
    Fs::format(&img2, &tiered_opts(8, Some(ssd2.clone()), 8)).unwrap();
    let wrong = MountOptions {
        ssd: Some(ssd2.clone()),
        ..Default::default()
    };
    let e = Fs::mount(&img, &wrong)
        .err()
        .expect("mount with another image's SSD");
    assert!(e.to_string().contains("another image"), "{e}");
    std::fs::remove_file(&ssd).unwrap();
    let e = Fs::mount(&img, &Default::default())
        .err()
        .expect("mount without its SSD");
    assert!(e.to_string().contains("ssd.img"), "{e}");
    // A tier needs HashFS, and at least one data extent.
    let mut o = tiered_opts(8, Some(ssd.clone()), 8);
    o.mapping = nvmfs::MappingKind::Extent;
    assert!(Fs::format(&img, &o).is_err());
    let o = tiered_opts(8, Some(ssd.clone()), 0);
    let e = Fs::format(&img, &o).unwrap_err();
    assert!(e.to_string().contains("too small"), "{e}");
}

#[test]
fn fsck_reads_a_tiered_image() {
    let fs = Fs::format_in_memory(&tiered_opts(4, None, 16)).unwrap();
    let mut rng = Rng(3);
    let _ = fill(&fs, &mut rng, 3, 2 * MIB as usize);
    let snap = Pm::from_bytes(&fs.snapshot());
    let r = nvmfs::fsck::check_pm(&snap);
    assert!(r.problems.is_empty(), "{:#?}", r.problems);
}

/// The tier header and the first valid entry of an image's SSD block table.
fn first_entry(pm: &Pm) -> (nvmfs::layout::tier::TierHeader, u64) {
    use nvmfs::layout::superblock::Superblock;
    use nvmfs::layout::tier::TierHeader;
    let sb = Superblock::decode(&pm.read_vec(0, 4096), 0).unwrap();
    let start = sb.tier_start.expect("a tiered image");
    let hdr =
        TierHeader::decode(&pm.read_vec(start * 4096, 4096), start, sb.geo.total_blocks).unwrap();
    let b = (0..hdr.ssd_blocks())
        .find(|&b| pm.load_u64(hdr.entry_off(b)) != 0)
        .expect("a valid entry");
    (hdr, b)
}

/// Each kind of damage to the tier's PM structures is found by fsck on a cleanly unmounted
/// image, repaired by `fsck -y`, and never panics a mount.
#[test]
fn fsck_finds_and_repairs_tier_damage() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (img, ssd) = files(dir.path());
    Fs::format(&img, &tiered_opts(8, Some(ssd.clone()), 32)).unwrap();
    let fs = Fs::mount(&img, &Default::default()).unwrap();
    let mut rng = Rng(5);
    let _ = fill(&fs, &mut rng, 3, 4 * MIB as usize);
    fs.unmount().unwrap();
    let clean = std::fs::read(&img).unwrap();
    assert!(nvmfs::fsck::check_pm(&Pm::from_bytes(&clean)).is_clean());
    type Damage = fn(&Pm, &nvmfs::layout::tier::TierHeader, u64);
    let cases: [(&str, Damage); 4] = [
        ("generation", |pm, h, b| {
            let w = pm.load_u64(h.entry_off(b) + 8);
            pm.store_u64(h.entry_off(b) + 8, w ^ 1);
        }),
        ("not in use", |pm, h, b| {
            let k = pm.load_u64(h.entry_off(b));
            pm.store_u64(h.entry_off(b), (k & 0xffff_ffff) | 900 << 32);
        }),
        ("past its end", |pm, h, b| {
            let k = pm.load_u64(h.entry_off(b));
            pm.store_u64(h.entry_off(b), (k & !0xffff_ffff) | 0xfff_fff0);
        }),
        ("another valid entry", |pm, h, b| {
            // Copy the entry into a free slot of the table.
            let free = (0..h.ssd_blocks())
                .find(|&x| pm.load_u64(h.entry_off(x)) == 0)
                .unwrap();
            pm.store_u64(h.entry_off(free) + 8, pm.load_u64(h.entry_off(b) + 8));
            pm.store_u64(h.entry_off(free), pm.load_u64(h.entry_off(b)));
        }),
    ];
    for (what, damage) in cases {
        let pm = Pm::from_bytes(&clean);
        let (hdr, b) = first_entry(&pm);
        damage(&pm, &hdr, b);
        let r = nvmfs::fsck::check_pm(&pm);
        assert!(
            r.problems.iter().any(|p| p.what.contains(what)),
            "{what}: {:#?}",
            r.problems
        );
        let rep = nvmfs::fsck::repair_pm(&pm);
        assert!(rep.unrepairable.is_none(), "{what}: {:?}", rep.unrepairable);
        assert!(rep.after.is_clean(), "{what}: {:#?}", rep.after.problems);
    }
    // A damaged tier header: reported, not repairable, and a mount refuses the image.
    let pm = Pm::from_bytes(&clean);
    let (hdr, _) = first_entry(&pm);
    let hoff = (hdr.table_start - 1) * 4096;
    pm.store_u64(hoff + 8, pm.load_u64(hoff + 8) + 1);
    let r = nvmfs::fsck::check_pm(&pm);
    assert!(
        r.problems.iter().any(|p| p.what.contains("tier header")),
        "{:#?}",
        r.problems
    );
    assert!(nvmfs::fsck::repair_pm(&pm).unrepairable.is_some());
    std::fs::write(&img, pm.snapshot()).unwrap();
    let e = Fs::mount(&img, &Default::default())
        .err()
        .expect("mount refused");
    assert!(e.to_string().contains("tier header"), "{e}");
}

/// Threads creating, appending, reading back and removing files on a PM tier far smaller than
/// their data: every read matches what its thread wrote, no operation fails, fsck is clean.
#[test]
fn concurrent_writers_on_a_small_pm_tier() {
    let mut opts = tiered_opts(8, None, 256);
    opts.inode_count = Some(32 * 1024);
    let fs = Fs::format_in_memory(&opts).unwrap();
    std::thread::scope(|s| {
        for t in 0..16u64 {
            let fs = fs.clone();
            s.spawn(move || {
                let mut rng = Rng(100 + t);
                let dir = fs
                    .mkdir(ROOT, format!("t{t}").as_bytes(), 0o755, 0, 0)
                    .unwrap()
                    .ino;
                let mut live: Vec<(String, u64, Vec<u8>)> = Vec::new();
                for n in 0..1000 {
                    match rng.below(10) {
                        0..=3 => {
                            let name = format!("f{n}");
                            let ino = fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
                            live.push((name, ino, Vec::new()));
                        }
                        4..=6 if !live.is_empty() => {
                            let k = rng.below(live.len() as u64) as usize;
                            let (_, ino, data) = &mut live[k];
                            let len = 1 + rng.below(64 << 10) as usize;
                            let bytes = rng.bytes(len);
                            let at = data.len() as u64;
                            assert_eq!(fs.write(*ino, at, &bytes).unwrap(), bytes.len());
                            data.extend_from_slice(&bytes);
                        }
                        7..=8 if !live.is_empty() => {
                            let k = rng.below(live.len() as u64) as usize;
                            let (_, ino, data) = &live[k];
                            assert!(
                                read_all(&fs, *ino, data.len()) == *data,
                                "thread {t} op {n}"
                            );
                        }
                        9 if !live.is_empty() => {
                            let k = rng.below(live.len() as u64) as usize;
                            let (name, _, _) = live.swap_remove(k);
                            fs.unlink(dir, name.as_bytes()).unwrap();
                        }
                        _ => {}
                    }
                }
            });
        }
    });
    assert_fsck_clean(&fs);
    let t = fs.tier_info().unwrap();
    assert!(t.stats.evicted > 0 && t.stats.flushes > 0, "{t:?}");
}
