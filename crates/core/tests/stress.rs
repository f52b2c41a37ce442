//! Multi-threaded stress: threads create, write, read back, rename and remove files in their
//! own directories and in one shared directory; afterwards every surviving file has the
//! content its writer left and fsck is clean (also after a crash remount).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use nvmfs::{Fs, OpenOptions};

const THREADS: usize = 4;
const ROUNDS: usize = 400;

fn content(t: usize, i: usize) -> Vec<u8> {
    let len = 100 + (t * 7919 + i * 104_729) % 20_000;
    (0..len)
        .map(|k| (k as u8) ^ (t as u8) ^ (i as u8))
        .collect()
}

fn worker(fs: Fs, t: usize, shared_ok: Arc<AtomicU64>) {
    let own = format!("/t{t}");
    fs.create_dir(&own).unwrap();
    for i in 0..ROUNDS {
        let p = format!("{own}/f{i}");
        fs.write_file(&p, &content(t, i)).unwrap();
        assert_eq!(fs.read_file(&p).unwrap(), content(t, i));
        match i % 4 {
            0 => fs.remove_file(&p).unwrap(),
            1 => fs.rename_path(&p, format!("{own}/r{i}")).unwrap(),
            _ => {}
        }
        // Shared directory: names collide between threads on purpose.
        let s = format!("/shared/n{}", i % 50);
        match i % 3 {
            0 => {
                if OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&fs, &s)
                    .is_ok()
                {
                    shared_ok.fetch_add(1, Ordering::Relaxed);
                }
            }
            1 => {
                let _ = fs.remove_file(&s);
            }
            _ => {
                let _ = fs.rename_path(&s, format!("/shared/m{}", (i + t) % 50));
            }
        }
        if i % 50 == 0 {
            let _ = fs.read_dir("/shared").unwrap();
        }
    }
}

fn check_survivors(fs: &Fs) {
    for t in 0..THREADS {
        for i in 0..ROUNDS {
            let (f, r) = (format!("/t{t}/f{i}"), format!("/t{t}/r{i}"));
            match i % 4 {
                0 => assert!(fs.metadata(&f).is_err() && fs.metadata(&r).is_err()),
                1 => assert_eq!(fs.read_file(&r).unwrap(), content(t, i)),
                _ => assert_eq!(fs.read_file(&f).unwrap(), content(t, i)),
            }
        }
    }
}

#[test]
fn parallel_disjoint_and_shared_directories() {
    let fs = mem_fs(256, 16_384);
    fs.create_dir("/shared").unwrap();
    let ok = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let (fs, ok) = (fs.clone(), ok.clone());
            std::thread::spawn(move || worker(fs, t, ok))
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert!(ok.load(Ordering::Relaxed) > 0);
    check_survivors(&fs);
    assert_fsck_clean(&fs);
    let after = crash_remount(&fs);
    check_survivors(&after);
    assert_fsck_clean(&after);
}

#[test]
fn parallel_writers_of_one_file_and_readers() {
    let fs = mem_fs(64, 256);
    fs.write_file("/big", &vec![0u8; 1 << 20]).unwrap();
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&fs, "/big")
                    .unwrap();
                let mut buf = vec![0u8; 4096];
                for i in 0..500usize {
                    // Each thread owns every THREADS-th 4 KiB block.
                    let blk = (i * THREADS + t) % 256;
                    f.write_all_at(&[t as u8 + 1; 4096], blk as u64 * 4096)
                        .unwrap();
                    f.read_exact_at(&mut buf, blk as u64 * 4096).unwrap();
                    assert!(buf.iter().all(|&b| b == t as u8 + 1));
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(fs.metadata("/big").unwrap().len(), 1 << 20);
    assert_fsck_clean(&fs);
}
