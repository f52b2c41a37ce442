//! `File::map_direct` / `DirectMap`: DAX-style loads and stores on the media, the safety rule
//! (no block under a live map is freed) and msync-like durability.

mod common;

use nvmfs::testing::pattern;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use common::*;
use nvmfs::fsck::check_pm;
use nvmfs::media::trace::PersistTrace;
use nvmfs::media::Pm;
use nvmfs::{File, FormatOptions, Fs, MountOptions, OpenOptions};

const BS: u64 = 4096;

fn errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().expect("errno")
}

fn read_all(f: &File) -> Vec<u8> {
    let mut v = vec![0; f.metadata().unwrap().len() as usize];
    f.read_exact_at(&mut v, 0).unwrap();
    v
}

#[test]
fn loads_see_writes_and_reads_see_stores() {
    let fs = mem_fs(16, 256);
    let f = create_rw(&fs, "/f");
    let len = 3 * BS as usize + 100;
    let mut model = pattern(len, 1);
    f.write_all_at(&model, 0).unwrap();
    let mut m = f.map_direct().unwrap();
    assert_eq!(m.len(), len as u64);
    assert!(m.is_writable());
    assert_eq!(m.ino(), f.ino());

    // Loads, also across block boundaries and up to the last byte.
    for (off, n) in [
        (0, 10),
        (4090, 20),
        (BS - 1, BS as usize + 2),
        (0, len),
        (len as u64 - 7, 7),
    ] {
        let mut buf = vec![0; n];
        m.load(off, &mut buf).unwrap();
        assert_eq!(
            buf,
            &model[off as usize..off as usize + n],
            "load {off}+{n}"
        );
    }
    m.load(len as u64, &mut []).unwrap();
    assert_eq!(errno(m.load(len as u64 - 3, &mut [0; 4])), libc::EFAULT);
    assert_eq!(errno(m.load(u64::MAX, &mut [0; 4])), libc::EFAULT);
    assert_eq!(errno(m.store(len as u64, &[1])), libc::EFAULT);

    // Stores are visible to read_at at once, and nothing else changes.
    let mtime = f.metadata().unwrap().mtime_ns;
    let data = pattern(5000, 2);
    m.store(4000, &data).unwrap();
    model[4000..9000].copy_from_slice(&data);
    assert_eq!(read_all(&f), model);
    assert_eq!(
        m.dirty_bytes(),
        (9024 - 3968) as u64,
        "lines 62..140 of the file"
    );
    assert_eq!(
        f.metadata().unwrap().mtime_ns,
        mtime,
        "no time change before sync"
    );

    // write_at inside the mapped range is seen by loads.
    let w = pattern(300, 3);
    f.write_all_at(&w, 8100).unwrap();
    model[8100..8400].copy_from_slice(&w);
    let mut buf = vec![0; len];
    m.load(0, &mut buf).unwrap();
    assert_eq!(buf, model);

    // sync writes back, stamps mtime/ctime (POSIX: between a store and the next msync).
    m.sync().unwrap();
    assert_eq!(m.dirty_bytes(), 0);
    let after = f.metadata().unwrap();
    assert!(after.mtime_ns > mtime && after.ctime_ns == after.mtime_ns);
    assert_eq!(after.len(), len as u64);
    drop(m);
    assert_eq!(read_all(&f), model);
    assert_fsck_clean(&fs);
    assert_eq!(read_all(&create_rw(&crash_remount(&fs), "/f")), model);
}

#[test]
fn writable_map_allocates_holes_read_only_map_refuses_them() {
    let fs = mem_fs(16, 256);
    let f = create_rw(&fs, "/sparse");
    f.set_len(6 * BS).unwrap();
    f.write_all_at(b"middle", 2 * BS + 10).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 1);
    let ro = OpenOptions::new().read(true).open(&fs, "/sparse").unwrap();
    assert_eq!(
        errno(ro.map_direct()),
        libc::EINVAL,
        "holes, read-only handle"
    );

    let m = f.map_direct().unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 6, "every hole allocated");
    assert_eq!(f.metadata().unwrap().len(), 6 * BS, "size unchanged");
    let mut buf = vec![1u8; (6 * BS) as usize];
    m.load(0, &mut buf).unwrap();
    let mut want = vec![0u8; (6 * BS) as usize];
    want[(2 * BS + 10) as usize..(2 * BS + 16) as usize].copy_from_slice(b"middle");
    assert_eq!(buf, want, "holes read as zeros");
    drop(m);
    assert_fsck_clean(&fs);

    // No holes left: a read-only handle maps, but the map refuses stores.
    let mut rm = ro.map_direct().unwrap();
    assert!(!rm.is_writable());
    assert_eq!(errno(rm.store(0, b"x")), libc::EBADF);
    rm.sync().unwrap();
    drop(rm);

    // Not readable, a directory, an empty file.
    let wo = OpenOptions::new().write(true).open(&fs, "/sparse").unwrap();
    assert_eq!(errno(wo.map_direct()), libc::EACCES);
    fs.create_dir("/d").unwrap();
    let d = OpenOptions::new().read(true).open(&fs, "/d").unwrap();
    assert_eq!(errno(d.map_direct()), libc::EISDIR);
    let e = create_rw(&fs, "/empty").map_direct().unwrap();
    assert!(e.is_empty());
    assert_eq!(errno(e.load(0, &mut [0])), libc::EFAULT);
}

#[test]
fn truncate_and_punch_under_a_map_are_refused() {
    let fs = mem_fs(16, 256);
    let f = create_rw(&fs, "/f");
    let len = 4 * BS + 1;
    f.write_all_at(&pattern(len as usize, 4), 0).unwrap();
    let m = f.map_direct().unwrap();
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;

    assert_eq!(errno(f.set_len(len - 1)), libc::EBUSY);
    assert_eq!(errno(f.set_len(0)), libc::EBUSY);
    assert_eq!(errno(f.allocate(punch, 0, BS)), libc::EBUSY);
    assert_eq!(errno(f.allocate(punch, len - 1, 10 * BS)), libc::EBUSY);
    let trunc = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&fs, "/f");
    assert_eq!(errno(trunc.map(|f| f.ino())), libc::EBUSY, "open(O_TRUNC)");
    assert_eq!(f.metadata().unwrap().len(), len, "nothing changed");

    // Growing, preallocating and shrinking back to the mapped length are fine.
    f.set_len(10 * BS).unwrap();
    f.allocate(libc::FALLOC_FL_KEEP_SIZE, 0, 20 * BS).unwrap();
    f.allocate(punch, 6 * BS, 2 * BS).unwrap();
    f.set_len(len).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 5);

    // Two maps: the longer one rules; dropping it leaves the shorter one's limit.
    f.set_len(8 * BS).unwrap();
    let long = f.map_direct().unwrap();
    assert_eq!(errno(f.set_len(6 * BS)), libc::EBUSY);
    drop(long);
    f.set_len(6 * BS).unwrap();
    assert_eq!(errno(f.set_len(len - 1)), libc::EBUSY);
    drop(m);
    f.set_len(10).unwrap();
    f.allocate(punch, 0, BS).unwrap();
    assert_eq!(f.metadata().unwrap().blocks, 0);
    assert_fsck_clean(&fs);
}

#[test]
fn unlink_of_a_mapped_file_is_deferred_to_the_last_reference() {
    let fs = mem_fs(8, 256);
    let f = create_rw(&fs, "/f");
    let free0 = fs.statfs().blocks_free;
    let data = pattern(16 * BS as usize, 5);
    f.write_all_at(&data, 0).unwrap();
    let mut m = f.map_direct().unwrap();
    drop(f);
    fs.remove_file("/f").unwrap();
    assert!(fs.metadata("/f").is_err());
    assert_eq!(
        fs.statfs().blocks_free,
        free0 - 16,
        "blocks kept for the map"
    );

    // Fill the rest of the image: no new file may get the mapped blocks.
    let g = create_rw(&fs, "/g");
    let mut off = 0;
    while g.write_at(&[0xee; 4096], off).is_ok() {
        off += BS;
    }
    let mut buf = vec![0; data.len()];
    m.load(0, &mut buf).unwrap();
    assert_eq!(buf, data);
    m.store(100, b"still mine").unwrap();
    m.sync().unwrap();
    assert_fsck_clean(&fs);

    // A crash now leaves an orphan that recovery frees.
    let crashed = crash_remount(&fs);
    assert_eq!(crashed.recovery_report().orphans_freed, 1);
    assert_fsck_clean(&crashed);

    drop(g);
    fs.remove_file("/g").unwrap();
    assert_eq!(fs.statfs().blocks_free, free0 - 16);
    drop(m);
    assert_eq!(fs.statfs().blocks_free, free0, "freed with the map");
    assert_fsck_clean(&fs);
}

/// Keeps the image a power loss would leave: a cached store reaches it only when its line was
/// written back and a fence followed; a non-temporal store at the next fence.
struct Durable {
    state: Mutex<DurableState>,
}

struct DurableState {
    cur: Vec<u8>,
    durable: Vec<u8>,
    flushed: HashSet<u64>,
    nt: Vec<(u64, usize)>,
}

impl Durable {
    fn new(size: usize) -> Self {
        Durable {
            state: Mutex::new(DurableState {
                cur: vec![0; size],
                durable: vec![0; size],
                flushed: HashSet::new(),
                nt: Vec::new(),
            }),
        }
    }

    fn image(&self) -> Vec<u8> {
        self.state.lock().unwrap().durable.clone()
    }
}

impl PersistTrace for Durable {
    fn store(&self, off: u64, data: &[u8]) {
        let s = &mut *self.state.lock().unwrap();
        s.cur[off as usize..off as usize + data.len()].copy_from_slice(data);
    }
    fn store_nt(&self, off: u64, data: &[u8]) {
        let s = &mut *self.state.lock().unwrap();
        s.cur[off as usize..off as usize + data.len()].copy_from_slice(data);
        s.nt.push((off, data.len()));
    }
    fn flush(&self, line: u64) {
        self.state.lock().unwrap().flushed.insert(line);
    }
    fn fence(&self) {
        let s = &mut *self.state.lock().unwrap();
        let lines: Vec<(u64, usize)> = s.flushed.drain().map(|l| (l, 64)).collect();
        let nt = std::mem::take(&mut s.nt);
        for (off, len) in lines.into_iter().chain(nt) {
            let r = off as usize..off as usize + len;
            let (cur, durable) = (&s.cur, &mut s.durable);
            durable[r.clone()].copy_from_slice(&cur[r]);
        }
    }
}

fn mount_image(img: &[u8]) -> Fs {
    let r = check_pm(&Pm::from_bytes(img));
    assert!(r.is_clean(), "fsck: {:?}", r.problems);
    Fs::mount_pm(Pm::from_bytes(img), &MountOptions::default(), None, None).unwrap()
}

#[test]
fn stores_are_durable_after_sync_and_not_before() {
    let size = 4 << 20;
    let tracer = Arc::new(Durable::new(size));
    let mut pm = Pm::in_memory(size as u64);
    pm.set_trace(Some(tracer.clone()));
    let fs = Fs::format_pm(pm).unwrap();
    let f = create_rw(&fs, "/f");
    let old = pattern(8 * BS as usize, 6);
    f.write_all_at(&old, 0).unwrap();
    let mut m = f.map_direct().unwrap();
    let new = pattern(3000, 7);
    m.store(2 * BS - 1000, &new).unwrap();

    // Power loss before sync: the stores were never written back.
    let crashed = mount_image(&tracer.image());
    assert_eq!(crashed.read_file("/f").unwrap(), old);

    m.sync().unwrap();
    let mut want = old.clone();
    want[(2 * BS - 1000) as usize..(2 * BS + 2000) as usize].copy_from_slice(&new);
    let crashed = mount_image(&tracer.image());
    assert_eq!(crashed.read_file("/f").unwrap(), want);
    assert_eq!(
        crashed.metadata("/f").unwrap().mtime_ns,
        f.metadata().unwrap().mtime_ns,
        "the sync's time stamp is durable too"
    );
}

#[test]
fn store_and_sync_survive_unmount_and_mount_of_an_image_file() {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let img = dir.path().join("img");
    Fs::format(
        &img,
        &FormatOptions {
            size_bytes: 8 << 20,
            inode_count: Some(256),
            ..Default::default()
        },
    )
    .unwrap();
    let fs = Fs::mount(&img, &MountOptions::default()).unwrap();
    let f = create_rw(&fs, "/f");
    let mut want = pattern(5 * BS as usize, 8);
    f.write_all_at(&want, 0).unwrap();
    let mut m = f.map_direct().unwrap();
    let s = pattern(1024, 9);
    m.store(3 * BS + 512, &s).unwrap();
    want[(3 * BS + 512) as usize..(3 * BS + 1536) as usize].copy_from_slice(&s);
    m.sync().unwrap();
    drop(f);
    assert_eq!(
        errno(fs.clone().unmount()),
        libc::EBUSY,
        "the map holds the mount"
    );
    drop(m);
    fs.unmount().unwrap();

    let fs = Fs::mount(
        &img,
        &MountOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let f = OpenOptions::new().read(true).open(&fs, "/f").unwrap();
    let mut m = f.map_direct().unwrap();
    let mut buf = vec![0; want.len()];
    m.load(0, &mut buf).unwrap();
    assert_eq!(buf, want);
    assert_eq!(errno(m.store(0, b"x")), libc::EBADF);
    drop((m, f));
    fs.unmount().unwrap();
    let r = nvmfs::fsck::check_image(&img).unwrap();
    assert!(r.is_clean(), "{:?}", r.problems);
}

/// Random store / load / write_at / read_at / set_len / sync / new map against a Vec model.
#[test]
fn random_mix_against_a_model() {
    for seed in 1..=6u64 {
        let fs = mem_fs(16, 256);
        let f = create_rw(&fs, "/f");
        let mut model = pattern(3 * BS as usize + 333, seed);
        f.write_all_at(&model, 0).unwrap();
        let mut maps = vec![f.map_direct().unwrap()];
        let mut x = seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n.max(1)
        };
        for step in 0..400 {
            let k = rnd(maps.len() as u64) as usize;
            let mlen = maps[k].len();
            let off = rnd(mlen + 1);
            let n = rnd((mlen - off).min(6000) + 1) as usize;
            match rnd(8) {
                0 | 1 => {
                    let d = pattern(n, seed * 1000 + step);
                    maps[k].store(off, &d).unwrap();
                    model[off as usize..off as usize + n].copy_from_slice(&d);
                }
                2 | 3 => {
                    let mut buf = vec![0; n];
                    maps[k].load(off, &mut buf).unwrap();
                    assert_eq!(
                        buf,
                        &model[off as usize..off as usize + n],
                        "seed {seed} step {step}"
                    );
                }
                4 => {
                    // write_at anywhere, also past the maps (the file grows).
                    let at = rnd(model.len() as u64 + 5000);
                    let d = pattern(n.max(1), seed * 2000 + step);
                    f.write_all_at(&d, at).unwrap();
                    let end = at as usize + d.len();
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[at as usize..end].copy_from_slice(&d);
                }
                5 => {
                    let at = rnd(model.len() as u64);
                    let mut buf = vec![0; n];
                    let got = f.read_at(&mut buf, at).unwrap();
                    let want = &model[at as usize..(at as usize + n).min(model.len())];
                    assert_eq!(&buf[..got], want, "seed {seed} step {step}");
                }
                6 => {
                    // Truncate: refused below the longest map, done otherwise.
                    let longest = maps.iter().map(|m| m.len()).max().unwrap();
                    let to = rnd(model.len() as u64 + 8000);
                    let r = f.set_len(to);
                    if to < longest && to < model.len() as u64 {
                        assert_eq!(errno(r), libc::EBUSY);
                    } else {
                        r.unwrap();
                        model.resize(to as usize, 0);
                    }
                }
                _ => {
                    if rnd(3) == 0 && maps.len() < 4 {
                        maps.push(f.map_direct().unwrap());
                    } else if maps.len() > 1 {
                        maps.swap_remove(k);
                    } else {
                        maps[k].sync().unwrap();
                    }
                }
            }
        }
        for m in &mut maps {
            m.sync().unwrap();
        }
        drop(maps);
        assert_eq!(read_all(&f), model, "seed {seed}");
        assert_fsck_clean(&fs);
    }
}

#[test]
fn as_ptr_points_at_the_file_bytes_in_the_media() {
    let fs = mem_fs(16, 256);
    let f = create_rw(&fs, "/f");
    let len = 2 * BS as usize + 300;
    let data = pattern(len, 7);
    f.write_all_at(&data, 0).unwrap();
    let m = f.map_direct().unwrap();
    // SAFETY (of the reads below): the map is alive and nothing writes the file meanwhile.
    let read = |off: u64, n: usize| {
        m.as_ptr(off, n)
            .map(|p| unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
    };
    assert_eq!(read(0, 10).unwrap(), &data[..10]);
    assert_eq!(
        read(BS, BS as usize).unwrap(),
        &data[BS as usize..2 * BS as usize]
    );
    assert_eq!(read(len as u64 - 5, 5).unwrap(), &data[len - 5..]);
    // Outside [0, len) or empty: none.
    assert!(m.as_ptr(len as u64 - 5, 6).is_none());
    assert!(m.as_ptr(0, 0).is_none());
    // Across a block boundary: a pointer only when the blocks are physically consecutive.
    let offs = m.block_offsets();
    match read(BS - 8, 16) {
        Some(v) => {
            assert_eq!(offs[1], offs[0] + BS);
            assert_eq!(v, &data[BS as usize - 8..BS as usize + 8]);
        }
        None => assert_ne!(offs[1], offs[0] + BS),
    }
    // A write through the file is visible through the pointer (same media bytes).
    let p = m.as_ptr(100, 4).unwrap();
    f.write_all_at(b"wxyz", 100).unwrap();
    assert_eq!(unsafe { std::slice::from_raw_parts(p, 4) }, b"wxyz");
}

/// Two maps of one file store over the same bytes (across block boundaries) while a third
/// thread reads them with `read_at` and a fourth overwrites another range with `write_at`,
/// until the reader is done: every read sees one store whole (stores take the range words,
/// reads check them), and the overwrites of the other range run alongside. Without the words
/// in `store`, 2,029-3,258 of the 4,000 reads mixed two stores in three runs.
#[test]
fn reads_see_each_store_whole_while_maps_store_side_by_side() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let fs = mem_fs(32, 256);
    let f = create_rw(&fs, "/f");
    f.write_all_at(&vec![0u8; 1 << 20], 0).unwrap();
    let (off, len) = (BS - 1000, 60_000usize);
    let (mixed, done) = (AtomicU64::new(0), AtomicBool::new(false));
    std::thread::scope(|s| {
        for t in 1..=2u8 {
            let mut m = f.map_direct().unwrap();
            let done = &done;
            s.spawn(move || {
                let mut i = 0u8;
                while !done.load(Ordering::Relaxed) {
                    m.store(off, &vec![t.wrapping_mul(16).wrapping_add(i) | 1; len])
                        .unwrap();
                    i = i.wrapping_add(1);
                }
            });
        }
        s.spawn(|| {
            let mut i = 0u8;
            while !done.load(Ordering::Relaxed) {
                f.write_all_at(&[i; 4096], 512 << 10).unwrap();
                i = i.wrapping_add(1);
            }
        });
        s.spawn(|| {
            let mut buf = vec![0u8; len];
            for _ in 0..4000 {
                f.read_exact_at(&mut buf, off).unwrap();
                if buf.iter().any(|&b| b != buf[0]) {
                    mixed.fetch_add(1, Ordering::Relaxed);
                }
            }
            done.store(true, Ordering::Relaxed);
        });
    });
    assert_eq!(
        mixed.load(Ordering::Relaxed),
        0,
        "reads saw half-done stores"
    );
    let all = read_all(&f);
    let r = &all[off as usize..off as usize + len];
    assert!(r.iter().all(|&b| b == r[0]), "two stores mixed");
    assert_fsck_clean(&fs);
}
