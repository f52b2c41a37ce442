//! Data-path workloads: 4 KiB random and 1 MiB sequential I/O on one big
//! pre-written file, 1 KiB random loads and stores on a shared mapping of
//! it (fio's mmap engine), and 4 KiB appends.

use super::measure::{measure, Limits, Measured, Workload};
use super::session::Session;
use super::threads::Lane;
use crate::targets::api::{MicroFile, MicroFs, MicroMap};
use std::io;
use std::time::{Duration, Instant};

pub const BLOCK: usize = 4096;
pub const CHUNK: usize = 1 << 20;
/// The I/O size of seed 000's fio mmap runs (MongoDB's, in the study).
pub const MMAP_IO: usize = 1024;
/// Seed of the store buffer of mmap-store-1k (tests rebuild it).
pub const MMAP_STORE_SEED: u64 = 9;
/// Seed of randread-4k's and overwrite-4k's offset sequence (and their limits').
pub const RANDOM_OFFSET_SEED: u64 = 4096;
/// Seed of mmap-load/store-1k's offset sequence.
pub const MMAP_OFFSET_SEED: u64 = 1024;

/// Non-zero bytes, so no target can take a shortcut for zero-filled data.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

/// The shared data file, written (untimed) the first time a workload needs
/// it and then reused, so a 1 GiB file is written once per target.
pub(crate) fn data_file<'s, F: MicroFs>(s: &'s mut Session<'_, F>) -> io::Result<&'s F::Name> {
    if s.data_file.is_none() {
        let size = s.params.data_size;
        s.say(&format!("setup: writing {} MiB data file", size >> 20));
        let name = s.fs.name(&s.lane.scoped("data"));
        let file = s.fs.create(&name)?;
        let chunk = pattern(CHUNK, 1);
        for offset in (0..size).step_by(CHUNK) {
            file.write_all_at(&chunk, offset)?;
        }
        s.data_file = Some(name);
    }
    Ok(s.data_file.as_ref().expect("just written"))
}

/// Positional I/O of `buf.len()` bytes at an offset chosen by `next`.
struct Positional<File, Next> {
    file: File,
    buf: Vec<u8>,
    write: bool,
    offset: u64,
    next: Next,
}

impl<File: MicroFile, Next: FnMut() -> u64> Workload for Positional<File, Next> {
    fn prepare(&mut self) -> io::Result<bool> {
        self.offset = (self.next)();
        Ok(true)
    }

    fn op(&mut self) -> io::Result<()> {
        if self.write {
            self.file.write_all_at(&self.buf, self.offset)
        } else {
            self.file.read_exact_at(&mut self.buf, self.offset)
        }
    }
}

/// randread-4k / overwrite-4k: uniformly random 4 KiB-aligned offsets.
pub fn random_4k<F: MicroFs>(s: &mut Session<'_, F>, write: bool) -> io::Result<Measured> {
    let blocks = s.params.data_size / BLOCK as u64;
    let fs = s.fs;
    let file = fs.open_rw(data_file(s)?)?;
    // Fixed seed: every target sees the same offset sequence.
    let mut rng = fastrand::Rng::with_seed(s.lane.seed(RANDOM_OFFSET_SEED));
    let mut w = Positional {
        file,
        buf: pattern(BLOCK, 2),
        write,
        offset: 0,
        next: move || rng.u64(0..blocks) * BLOCK as u64,
    };
    measure(&mut w, &s.limits())
}

/// seqread-1m / seqwrite-1m: consecutive 1 MiB chunks, wrapping at the end.
pub fn sequential_1m<F: MicroFs>(s: &mut Session<'_, F>, write: bool) -> io::Result<Measured> {
    let chunks = s.params.data_size / CHUNK as u64;
    let fs = s.fs;
    let file = fs.open_rw(data_file(s)?)?;
    // Threads sharing the file start spread over it.
    let mut i = s.lane.share(chunks as usize).start as u64;
    let mut w = Positional {
        file,
        buf: pattern(CHUNK, 3),
        write,
        offset: 0,
        next: move || {
            let offset = i * CHUNK as u64;
            i = (i + 1) % chunks;
            offset
        },
    };
    measure(&mut w, &s.limits())
}

/// fio's mmap engine: one memcpy out of (load) or into (store) a shared
/// mapping of the whole file at a uniformly random 1 KiB-aligned offset
/// (fixed seed: every target sees the same sequence). No msync per op
/// (fio's default); see [`mmap_1k`] for the one at the end.
pub struct MmapIo<M> {
    pub map: M,
    pub buf: Vec<u8>,
    pub store: bool,
    /// The offset of the next op (set by `prepare`).
    pub offset: u64,
    rng: fastrand::Rng,
    slots: u64,
}

impl<M: MicroMap> Workload for MmapIo<M> {
    fn prepare(&mut self) -> io::Result<bool> {
        self.offset = self.rng.u64(0..self.slots) * MMAP_IO as u64;
        Ok(true)
    }

    fn op(&mut self) -> io::Result<()> {
        if self.store {
            self.map.store(self.offset, &self.buf)
        } else {
            self.map.load(self.offset, &mut self.buf)
        }
    }
}

/// The mmap workload on `file` (open read-write), ready to measure; also
/// returns how long making the map took (untimed setup: mmap on kernel
/// targets, block resolution and hole allocation on nvmfs).
pub fn mmap_workload<F: MicroFs>(
    fs: &F,
    file: &F::File,
    store: bool,
) -> io::Result<(MmapIo<F::Map>, Duration)> {
    let t = Instant::now();
    let map = fs.map(file)?;
    let took = t.elapsed();
    let slots = map.len() / MMAP_IO as u64;
    if slots == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "mmap workloads need a file of at least 1 KiB",
        ));
    }
    Ok((
        MmapIo {
            map,
            buf: pattern(MMAP_IO, MMAP_STORE_SEED),
            store,
            offset: 0,
            rng: fastrand::Rng::with_seed(MMAP_OFFSET_SEED),
            slots,
        },
        took,
    ))
}

/// mmap-load-1k / mmap-store-1k: uniformly random 1 KiB-aligned loads or
/// stores on a MAP_SHARED mapping of the whole data file. After a store
/// run, one msync(MS_SYNC) makes the stores (warm-up included) durable; it
/// is timed on its own and returned, not counted in the ops.
pub fn mmap_1k<F: MicroFs>(
    s: &mut Session<'_, F>,
    store: bool,
) -> io::Result<(Measured, Vec<String>, Option<Duration>)> {
    let fs = s.fs;
    let file = fs.open_rw(data_file(s)?)?;
    let (mut w, map_time) = mmap_workload(fs, &file, store)?;
    w.rng = fastrand::Rng::with_seed(s.lane.seed(MMAP_OFFSET_SEED));
    let m = measure(&mut w, &s.limits())?;
    let mut notes = vec![format!(
        "map of {} MiB made in {} before the run (untimed)",
        w.map.len() >> 20,
        super::report::format_ns(map_time.as_nanos() as u64)
    )];
    let sync = if store {
        let t = Instant::now();
        w.map.sync()?;
        let took = t.elapsed();
        notes.push(format!(
            "msync(MS_SYNC) after the measured phase: {} (not in ops/s)",
            super::report::format_ns(took.as_nanos() as u64)
        ));
        Some(took)
    } else {
        None
    };
    Ok((m, notes, sync))
}

/// 4 KiB appends to one file. The file is bounded (memory is), so when it
/// reaches `cap` it is deleted and started anew, outside the clock; a file
/// shared by threads is not (`restart` false): each thread stops at its `cap`.
struct Append<'a, F: MicroFs> {
    fs: &'a F,
    name: F::Name,
    file: Option<F::File>,
    len: u64,
    cap: u64,
    buf: Vec<u8>,
    restart: bool,
    restarts: u64,
}

impl<F: MicroFs> Append<'_, F> {
    fn restart(&mut self) -> io::Result<()> {
        self.file = None; // close before unlinking
        self.fs.unlink(&self.name)?;
        self.file = Some(self.fs.open_append(&self.name)?);
        self.len = 0;
        self.restarts += 1;
        Ok(())
    }
}

impl<F: MicroFs> Workload for Append<'_, F> {
    fn prepare(&mut self) -> io::Result<bool> {
        if self.len + self.buf.len() as u64 > self.cap {
            if !self.restart {
                return Ok(false);
            }
            self.restart()?;
        }
        Ok(true)
    }

    fn op(&mut self) -> io::Result<()> {
        let file = self.file.as_mut().expect("open between restarts");
        file.append(&self.buf)?;
        self.len += self.buf.len() as u64;
        Ok(())
    }
}

/// The file the threads of a shared append-4k run append to (threads.rs makes it before
/// they start and removes it after).
pub fn make_shared_append<F: MicroFs>(fs: &F, lane: &Lane) -> io::Result<()> {
    fs.open_append(&fs.name(&lane.scoped("append"))).map(drop)
}

/// append-4k on a fresh file, removed afterwards; or, by the threads of a shared run, on
/// one file, each thread appending 1/N of the data file's size.
pub fn append_4k<F: MicroFs>(s: &mut Session<'_, F>) -> io::Result<(Measured, Vec<String>)> {
    let name = s.fs.name(&s.lane.scoped("append"));
    let shared = s.lane.is_shared();
    let mut w = Append {
        fs: s.fs,
        file: Some(s.fs.open_append(&name)?),
        name,
        len: 0,
        cap: match shared {
            true => s.params.data_size / s.lane.count as u64,
            false => s.params.data_size,
        },
        buf: pattern(BLOCK, 4),
        restart: !shared,
        restarts: 0,
    };
    // A shared file is not restarted: the warm-up may use a tenth of the thread's part.
    let limits = match shared {
        true => Limits {
            warmup_max_ops: w.cap / BLOCK as u64 / 10,
            ..s.limits()
        },
        false => s.limits(),
    };
    let m = measure(&mut w, &limits)?;
    w.file = None;
    if !shared {
        s.fs.unlink(&w.name)?;
    }
    let mut notes = Vec::new();
    if shared && m.exhausted {
        notes.push(format!(
            "each thread stopped after appending {} MiB to the shared file",
            w.cap >> 20
        ));
    }
    if w.restarts > 0 {
        notes.push(format!(
            "file restarted {} times at {} MiB (unlink + create untimed)",
            w.restarts,
            w.cap >> 20
        ));
    }
    Ok((m, notes))
}
