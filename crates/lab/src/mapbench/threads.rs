//! Section 4.6: several threads read and append one file at once (every thread reads a random
//! block, then appends one), with a per-file reader-writer lock as the file system's data path
//! takes (reads shared, appends exclusive; the probe takes none itself). Each operation is
//! timed inside the lock, so what grows with threads is the mapping's own cost under sharing
//! (cache-line traffic, its internal locks), not the wait for the lock. A thread's cost is the
//! median of its operations (with more threads than cores, a timed operation now and then
//! spans a preemption), and the result the mean over threads.

use super::clock::{self, time_one};
use super::ops::median;
use nvmfs::ProbeFile;
use std::hint::black_box;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::RwLock;

/// Cycles per read and per append: the mean over threads of each thread's median.
#[derive(Debug, Clone, Copy)]
pub struct Shared {
    pub read: f64,
    pub append: f64,
}

/// `threads` threads each doing `pairs` (read, append) pairs on `file`, whose blocks
/// 0..`blocks` are mapped; the appended blocks are trimmed afterwards.
pub fn run(
    file: ProbeFile<'_>,
    blocks: u32,
    threads: usize,
    pairs: u32,
    seed: u64,
) -> io::Result<Shared> {
    let lock = RwLock::new(());
    let next = AtomicU32::new(blocks);
    let ovh = clock::overhead();
    let per_thread: Vec<io::Result<(f64, f64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (lock, next) = (&lock, &next);
                s.spawn(move || {
                    let mut rng = fastrand::Rng::with_seed(seed ^ ((t as u64 + 1) * 0x9E37));
                    one_thread(file, blocks, pairs, ovh, lock, next, &mut rng)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("mapping thread panicked"))
            .collect()
    });
    file.trim(blocks, next.load(Ordering::Relaxed))?;
    let (mut reads, mut appends) = (0.0, 0.0);
    for r in per_thread {
        let (a, b) = r?;
        reads += a;
        appends += b;
    }
    let n = threads.max(1) as f64;
    Ok(Shared {
        read: reads / n,
        append: appends / n,
    })
}

/// One thread's pairs: the median cycles of its reads and of its appends.
fn one_thread(
    file: ProbeFile<'_>,
    blocks: u32,
    pairs: u32,
    ovh: u64,
    lock: &RwLock<()>,
    next: &AtomicU32,
    rng: &mut fastrand::Rng,
) -> io::Result<(f64, f64)> {
    let mut reads = Vec::with_capacity(pairs as usize);
    let mut appends = Vec::with_capacity(pairs as usize);
    for _ in 0..pairs {
        let l = rng.u32(0..blocks);
        {
            let _g = lock.read().unwrap_or_else(|e| e.into_inner());
            reads.push(time_one(ovh, || black_box(file.lookup(l))).0 as f64);
        }
        let _g = lock.write().unwrap_or_else(|e| e.into_inner());
        let lblk = next.fetch_add(1, Ordering::Relaxed);
        let (dt, r) = time_one(ovh, || file.append(lblk));
        r?;
        appends.push(dt as f64);
    }
    Ok((median(&mut reads), median(&mut appends)))
}
