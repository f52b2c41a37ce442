//! The hardware limits beside the data workloads: what the same access costs with no file
//! system at all.
//! - seqread-1m: `memcpy`, 1 MiB copies out of a DRAM buffer;
//! - seqwrite-1m: `nt-store`, 1 MiB non-temporal stores + sfence into a file of the shm
//!   directory, mapped as nvmfs maps its image;
//! - both also with `--threads N`, each thread on its own buffer: the bandwidth N disjoint
//!   threads share;
//! - randread-4k: `memcpy`, 4 KiB copies from random 4 KiB offsets of a file of the data
//!   file's size in the shm directory, mapped as nvmfs maps its image (same page size);
//! - overwrite-4k: `nt-store`, 4 KiB non-temporal stores + sfence at those offsets of that
//!   mapping: how nvmfs makes data durable without a flush; and beside it `nt-store+rmw`, the
//!   same followed by one atomic read-modify-write, as any writer that releases a lock after
//!   its stores pays (on x86 the RMW waits for the stores to reach memory; the sfence alone
//!   need not). It is shown, not used as the limit;
//! - open-read-16k(-deep): `memcpy`, 16 KiB copies from random 16 KiB offsets of a mapping as
//!   large as the file set (`--files` x 16 KiB): the read alone, without open or close.
//!
//! The 4 KiB ones use the data workloads' offset seed, so they touch the same blocks.

use super::data::{pattern, BLOCK, CHUNK, RANDOM_OFFSET_SEED};
use super::measure::{measure, Limits, Measured, Workload};
use super::meta::FILE_16K;
use super::report::{Record, TargetKind};
use super::{MicroConfig, Params, Sharing, WorkloadId};
use nvmfs::media::Pm;
use std::hint::black_box;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

/// Larger than any CPU cache, so the copy streams from DRAM like a read of
/// a big file does; capped so the reference costs little memory.
const MAX_SOURCE: u64 = 256 << 20;

/// Copies consecutive 1 MiB chunks of `src` into `dst`, wrapping around.
struct Memcpy {
    src: Vec<u8>,
    dst: Vec<u8>,
    offset: usize,
}

impl Workload for Memcpy {
    fn prepare(&mut self) -> io::Result<bool> {
        self.offset += CHUNK;
        if self.offset + CHUNK > self.src.len() {
            self.offset = 0;
        }
        Ok(true)
    }

    fn op(&mut self) -> io::Result<()> {
        self.dst
            .copy_from_slice(&self.src[self.offset..self.offset + CHUNK]);
        black_box(&mut self.dst);
        Ok(())
    }
}

/// Stores consecutive 1 MiB chunks into a mapping with non-temporal stores + sfence, wrapping
/// around: how nvmfs writes a file's data durably.
struct NtStore<'a> {
    pm: &'a Pm,
    len: u64,
    buf: Vec<u8>,
    offset: u64,
}

impl Workload for NtStore<'_> {
    fn prepare(&mut self) -> io::Result<bool> {
        self.offset += CHUNK as u64;
        if self.offset + CHUNK as u64 > self.len {
            self.offset = 0;
        }
        Ok(true)
    }

    fn op(&mut self) -> io::Result<()> {
        self.pm.write_nt(self.offset, &self.buf);
        self.pm.fence();
        Ok(())
    }
}

/// Runs the workloads `make` builds (one per thread, built on that thread outside the
/// clock) at once, released together with more than one; their measurements merged.
fn run_together<W: Workload>(
    n: usize,
    params: &Params,
    make: impl Fn(usize) -> W + Sync,
) -> io::Result<Measured> {
    let limits = Limits {
        start: (n > 1).then(|| Arc::new(Barrier::new(n))),
        ..params.limits.clone()
    };
    let make = &make;
    let parts = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let limits = limits.clone();
                scope.spawn(move || measure(&mut make(k), &limits))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a reference thread panicked"))
            .collect::<io::Result<Vec<Measured>>>()
    })?;
    Ok(Measured::merge(&parts))
}

/// seqread-1m's (a copy out of a DRAM buffer) or seqwrite-1m's (non-temporal stores into a
/// mapping of the shm directory, mapped as nvmfs maps its image) reference with `n` threads
/// at once, each on its own buffer. With more than one, the memory bandwidth that
/// `--threads` disjoint readers or writers share, and so the most their scaling can reach.
fn sequential_1m(
    cfg: &MicroConfig,
    params: &Params,
    w: WorkloadId,
    n: usize,
    progress: &mut dyn FnMut(&str),
) -> io::Result<Record> {
    // Each buffer still larger than the CPU caches (32 MiB of L3 here).
    let source = match n {
        1 => params.data_size.min(MAX_SOURCE),
        _ => (params.data_size.min(MAX_SOURCE) / n as u64).max(64 << 20),
    };
    let mib = source >> 20;
    let (target, m, note) = if w == WorkloadId::SeqWrite1m {
        let regions = (0..n)
            .map(|k| ShmRegion::new(cfg, source, &k.to_string(), progress))
            .collect::<io::Result<Vec<_>>>()?;
        let m = run_together(n, params, |k| NtStore {
            pm: &regions[k].pm,
            len: source,
            buf: pattern(CHUNK, 9),
            offset: 0,
        })?;
        let what = "1 MiB non-temporal store + sfence";
        let note = match n {
            1 => format!(
                "hardware limit: {what} into a {mib} MiB mapping of the shm directory, mapped as \
                 nvmfs maps its image, walked like seqwrite-1m walks its file"
            ),
            _ => format!(
                "hardware limit, {n} threads: each a {what} at a time into its own {mib} MiB \
                 mapping"
            ),
        };
        ("nt-store", m, note)
    } else {
        // Filling the buffers also faults their pages in, outside the clock.
        let m = run_together(n, params, |k| Memcpy {
            src: pattern(source as usize, 7 + k as u64),
            dst: pattern(CHUNK, 8),
            offset: 0,
        })?;
        let note = match n {
            1 => format!(
                "DRAM reference: 1 MiB copy from a {mib} MiB buffer, walked like seqread-1m walks its file"
            ),
            _ => format!(
                "DRAM reference, {n} threads: each copies 1 MiB at a time from its own {mib} MiB buffer"
            ),
        };
        ("memcpy", m, note)
    };
    let mut r = Record::new(
        w.name(),
        target,
        TargetKind::Reference,
        w.bytes_per_op(),
        &m,
        vec![note],
    );
    if n > 1 {
        r.threads = n as u32;
        r.sharing = Some(Sharing::Disjoint);
    }
    progress(&format!("[{target}] {}", r.summary()));
    Ok(r)
}

/// The references of the selected workloads (none for a `run:nvmfs` child, whose
/// parent measures them).
pub fn all(
    cfg: &MicroConfig,
    params: &Params,
    progress: &mut dyn FnMut(&str),
) -> io::Result<Vec<Record>> {
    let mut out = Vec::new();
    if !cfg.references {
        return Ok(out);
    }
    for w in [WorkloadId::SeqRead1m, WorkloadId::SeqWrite1m] {
        if params.workloads.contains(&w) {
            out.push(sequential_1m(cfg, params, w, 1, progress)?);
            if params.threads > 1 {
                out.push(sequential_1m(cfg, params, w, params.threads, progress)?);
            }
        }
    }
    let picked = |ws: &[WorkloadId]| -> Vec<WorkloadId> {
        ws.iter()
            .copied()
            .filter(|w| params.workloads.contains(w))
            .collect()
    };
    let random = picked(&[WorkloadId::RandRead4k, WorkloadId::Overwrite4k]);
    if !random.is_empty() {
        let region = ShmRegion::new(cfg, params.data_size, "random", progress)?;
        for w in random {
            let accesses: &[Access] = match w {
                WorkloadId::Overwrite4k => &[Access::Store, Access::StoreRmw],
                _ => &[Access::Copy],
            };
            for &a in accesses {
                out.push(random_access(&region, params, w, a, progress)?);
            }
        }
    }
    let open_read = picked(&[WorkloadId::OpenRead16k, WorkloadId::OpenRead16kDeep]);
    if !open_read.is_empty() {
        let len =
            (params.file_count as u64 * FILE_16K as u64).div_ceil(CHUNK as u64) * CHUNK as u64;
        let region = ShmRegion::new(cfg, len, "files", progress)?;
        for w in open_read {
            out.push(random_access(&region, params, w, Access::Copy, progress)?);
        }
    }
    Ok(out)
}

/// Whether `r` is a workload's hardware limit (the one its ratio is taken to), not a
/// reference shown beside it.
pub fn is_limit(r: &Record) -> bool {
    r.kind == TargetKind::Reference && r.target != STORE_RMW
}

/// A file of `len` bytes in the shm directory, filled and mapped like an nvmfs image
/// (`Pm::map_file_with`, populated), removed on drop.
struct ShmRegion {
    pm: Pm,
    len: u64,
    path: PathBuf,
}

impl ShmRegion {
    /// `tag` tells apart the regions that exist at once.
    fn new(
        cfg: &MicroConfig,
        len: u64,
        tag: &str,
        progress: &mut dyn FnMut(&str),
    ) -> io::Result<Self> {
        let path = cfg
            .shm_dir
            .join(format!("nvmfs-bench-limit-{}-{tag}", std::process::id()));
        progress(&format!(
            "[limits] setup: mapping a {} MiB region",
            len >> 20
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        // From here on the file is removed on every path out (drop).
        let made = file
            .set_len(len)
            .and_then(|()| Pm::map_file_with(&file, &path, len, true, true));
        let pm = match made {
            Ok(pm) => pm,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        let region = ShmRegion { pm, len, path };
        // Written like the data file, so every page exists before the clock starts.
        let chunk = pattern(CHUNK, 1);
        for off in (0..len).step_by(CHUNK) {
            region.pm.write(off, &chunk);
        }
        Ok(region)
    }
}

impl Drop for ShmRegion {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The name of overwrite-4k's second reference (see the module's doc).
const STORE_RMW: &str = "nt-store+rmw";

/// What a random-access reference does at each offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Copies the bytes out (randread-4k, open-read-16k).
    Copy,
    /// Non-temporal stores + sfence (overwrite-4k).
    Store,
    /// The same, then one atomic read-modify-write of a word of its own (a lock release).
    StoreRmw,
}

impl Access {
    fn target(self) -> &'static str {
        match self {
            Access::Copy => "memcpy",
            Access::Store => "nt-store",
            Access::StoreRmw => STORE_RMW,
        }
    }

    fn what(self, len: usize) -> String {
        let kib = len / 1024;
        match self {
            Access::Copy => format!("{kib} KiB copy"),
            Access::Store => format!("{kib} KiB non-temporal store + sfence"),
            Access::StoreRmw => format!(
                "{kib} KiB non-temporal store + sfence + one atomic read-modify-write (a lock \
                 release; shown, not the limit)"
            ),
        }
    }
}

/// `access` of `buf.len()` bytes at random `buf.len()`-aligned offsets of the region.
struct RandomAccess<'a, Next> {
    pm: &'a Pm,
    buf: Vec<u8>,
    access: Access,
    word: AtomicU64,
    offset: u64,
    next: Next,
}

impl<Next: FnMut() -> u64> Workload for RandomAccess<'_, Next> {
    fn prepare(&mut self) -> io::Result<bool> {
        self.offset = (self.next)();
        Ok(true)
    }

    fn op(&mut self) -> io::Result<()> {
        match self.access {
            Access::Copy => {
                self.pm.read(self.offset, &mut self.buf);
                black_box(&mut self.buf);
            }
            Access::Store | Access::StoreRmw => {
                self.pm.write_nt(self.offset, &self.buf);
                self.pm.fence();
                if self.access == Access::StoreRmw {
                    black_box(self.word.fetch_add(1, Ordering::AcqRel));
                }
            }
        }
        Ok(())
    }
}

/// The reference of workload `w` (randread-4k, overwrite-4k or open-read-16k(-deep)) with
/// `access`, over `region`, in pieces of the workload's size.
fn random_access(
    region: &ShmRegion,
    params: &Params,
    w: WorkloadId,
    access: Access,
    progress: &mut dyn FnMut(&str),
) -> io::Result<Record> {
    let len = w.bytes_per_op() as usize;
    let pieces = region.len / len as u64;
    let mut rng = fastrand::Rng::with_seed(RANDOM_OFFSET_SEED);
    let mut work = RandomAccess {
        pm: &region.pm,
        buf: pattern(len, 2),
        access,
        word: AtomicU64::new(0),
        offset: 0,
        next: move || rng.u64(0..pieces) * len as u64,
    };
    let m = measure(&mut work, &params.limits)?;
    let target = access.target();
    let of_what = match len {
        BLOCK => String::new(),
        _ => " (as large as the file set: --files x 16 KiB)".to_string(),
    };
    let note = format!(
        "hardware limit: {} at random {} KiB offsets of a {} MiB mapping{of_what} of the shm \
         directory, mapped as nvmfs maps its image",
        access.what(len),
        len / 1024,
        region.len >> 20
    );
    let r = Record::new(
        w.name(),
        target,
        TargetKind::Reference,
        w.bytes_per_op(),
        &m,
        vec![note],
    );
    progress(&format!("[{target}] {}", r.summary()));
    Ok(r)
}
