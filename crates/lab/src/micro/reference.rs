//! The `memcpy` reference for seqread-1m: what copying 1 MiB out of DRAM
//! costs with no file system at all.

use super::data::{pattern, CHUNK};
use super::measure::{measure, Measured, Workload};
use super::report::{Record, TargetKind};
use super::{Params, WorkloadId};
use std::hint::black_box;
use std::io;

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

pub fn memcpy_1m(params: &Params, progress: &mut dyn FnMut(&str)) -> io::Result<Record> {
    let source = params.data_size.min(MAX_SOURCE);
    // Filling the buffers also faults their pages in, outside the clock.
    let mut w = Memcpy {
        src: pattern(source as usize, 7),
        dst: pattern(CHUNK, 8),
        offset: 0,
    };
    let m: Measured = measure(&mut w, &params.limits)?;
    let note = format!(
        "DRAM reference: 1 MiB copy from a {} MiB buffer, walked like seqread-1m walks its file",
        source >> 20
    );
    let w = WorkloadId::SeqRead1m;
    let r = Record::new(
        w.name(),
        "memcpy",
        TargetKind::Reference,
        w.bytes_per_op(),
        &m,
        vec![note],
    );
    progress(&format!("[memcpy] {}", r.summary()));
    Ok(r)
}
