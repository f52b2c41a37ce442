//! The hardware limits beside the data workloads: what the same access costs with no file
//! system at all.
//! - seqread-1m: `memcpy`, 1 MiB copies out of a DRAM buffer;
//! - randread-4k: `memcpy`, 4 KiB copies from random 4 KiB offsets of a file of the data
//!   file's size in the shm directory, mapped as nvmfs maps its image (same page size);
//! - overwrite-4k: `nt-store`, 4 KiB non-temporal stores + sfence at those offsets of that
//!   mapping: how nvmfs makes data durable without a flush.
//!
//! The random ones use the data workloads' offset seed, so they touch the same blocks.

use super::data::{pattern, BLOCK, CHUNK, RANDOM_OFFSET_SEED};
use super::measure::{measure, Limits, Measured, Workload};
use super::report::{Record, TargetKind};
use super::{MicroConfig, Params, Sharing, WorkloadId};
use nvmfs::media::Pm;
use std::hint::black_box;
use std::io;
use std::path::PathBuf;
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

/// seqread-1m's reference with `n` threads at once, each copying out of its own buffer. With
/// more than one, the memory bandwidth that `--threads` disjoint readers and writers share,
/// and so the most their scaling can reach.
fn memcpy_1m(params: &Params, n: usize, progress: &mut dyn FnMut(&str)) -> io::Result<Record> {
    // Each buffer still larger than the CPU caches (32 MiB of L3 here).
    let source = match n {
        1 => params.data_size.min(MAX_SOURCE),
        _ => (params.data_size.min(MAX_SOURCE) / n as u64).max(64 << 20),
    };
    let limits = Limits {
        start: (n > 1).then(|| Arc::new(Barrier::new(n))),
        ..params.limits.clone()
    };
    let parts = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let limits = limits.clone();
                scope.spawn(move || {
                    // Filling the buffers also faults their pages in, outside the clock.
                    let mut w = Memcpy {
                        src: pattern(source as usize, 7 + k as u64),
                        dst: pattern(CHUNK, 8),
                        offset: 0,
                    };
                    measure(&mut w, &limits)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a reference thread panicked"))
            .collect::<io::Result<Vec<Measured>>>()
    })?;
    let mib = source >> 20;
    let note = match n {
        1 => format!(
            "DRAM reference: 1 MiB copy from a {mib} MiB buffer, walked like seqread-1m walks its file"
        ),
        _ => format!(
            "DRAM reference, {n} threads: each copies 1 MiB at a time from its own {mib} MiB buffer"
        ),
    };
    let w = WorkloadId::SeqRead1m;
    let mut r = Record::new(
        w.name(),
        "memcpy",
        TargetKind::Reference,
        w.bytes_per_op(),
        &Measured::merge(&parts),
        vec![note],
    );
    if n > 1 {
        r.threads = n as u32;
        r.sharing = Some(Sharing::Disjoint);
    }
    progress(&format!("[memcpy] {}", r.summary()));
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
    if params.workloads.contains(&WorkloadId::SeqRead1m) {
        out.push(memcpy_1m(params, 1, progress)?);
        if params.threads > 1 {
            out.push(memcpy_1m(params, params.threads, progress)?);
        }
    }
    let random = [WorkloadId::RandRead4k, WorkloadId::Overwrite4k];
    if random.iter().any(|w| params.workloads.contains(w)) {
        let region = ShmRegion::new(cfg, params.data_size, progress)?;
        for w in random.into_iter().filter(|w| params.workloads.contains(w)) {
            out.push(random_4k(&region, params, w, progress)?);
        }
    }
    Ok(out)
}

/// A file of `len` bytes in the shm directory, filled and mapped like an nvmfs image
/// (`Pm::map_file_with`, populated), removed on drop.
struct ShmRegion {
    pm: Pm,
    path: PathBuf,
}

impl ShmRegion {
    fn new(cfg: &MicroConfig, len: u64, progress: &mut dyn FnMut(&str)) -> io::Result<Self> {
        let path = cfg
            .shm_dir
            .join(format!("nvmfs-bench-limit-{}", std::process::id()));
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
        let region = ShmRegion { pm, path };
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

/// 4 KiB copies out of (randread-4k) or non-temporal stores + sfence into (overwrite-4k)
/// the region at random 4 KiB offsets.
struct Random4k<'a, Next> {
    pm: &'a Pm,
    buf: Vec<u8>,
    store: bool,
    offset: u64,
    next: Next,
}

impl<Next: FnMut() -> u64> Workload for Random4k<'_, Next> {
    fn prepare(&mut self) -> io::Result<bool> {
        self.offset = (self.next)();
        Ok(true)
    }

    fn op(&mut self) -> io::Result<()> {
        if self.store {
            self.pm.write_nt(self.offset, &self.buf);
            self.pm.fence();
        } else {
            self.pm.read(self.offset, &mut self.buf);
            black_box(&mut self.buf);
        }
        Ok(())
    }
}

fn random_4k(
    region: &ShmRegion,
    params: &Params,
    w: WorkloadId,
    progress: &mut dyn FnMut(&str),
) -> io::Result<Record> {
    let store = w == WorkloadId::Overwrite4k;
    let blocks = params.data_size / BLOCK as u64;
    let mut rng = fastrand::Rng::with_seed(RANDOM_OFFSET_SEED);
    let mut work = Random4k {
        pm: &region.pm,
        buf: pattern(BLOCK, 2),
        store,
        offset: 0,
        next: move || rng.u64(0..blocks) * BLOCK as u64,
    };
    let m = measure(&mut work, &params.limits)?;
    let (target, what) = if store {
        ("nt-store", "4 KiB non-temporal store + sfence")
    } else {
        ("memcpy", "4 KiB copy")
    };
    let note = format!(
        "hardware limit: {what} at random 4 KiB offsets of a {} MiB mapping of the shm \
         directory, mapped as nvmfs maps its image",
        params.data_size >> 20
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
