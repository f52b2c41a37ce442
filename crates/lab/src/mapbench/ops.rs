//! Cold and hot measurements of one mapping operation on one file (sections 4.1-4.5).
//!
//! Cold: evict the caches, then time one operation; a trial's sample is the mean of a few such
//! operations. Hot: time a run of many operations back to back and divide (the counter's own
//! cost is then negligible). Appends map blocks past EOF and are trimmed after each sample,
//! so every sample starts from the same file.

use super::clock::{self, now, time_one, Evictor};
use super::Op;
use nvmfs::{Fs, ProbeFile};
use std::hint::black_box;
use std::io;

/// One file of an image, measured.
pub struct Bench<'a> {
    fs: &'a Fs,
    ino: u64,
    file: ProbeFile<'a>,
    /// The file's blocks: 0..blocks are mapped.
    blocks: u32,
    overhead: u64,
    rng: fastrand::Rng,
}

impl<'a> Bench<'a> {
    /// File `ino` of `fs`, `bytes` long.
    pub fn new(fs: &'a Fs, ino: u64, bytes: u64, seed: u64) -> io::Result<Bench<'a>> {
        Ok(Bench {
            fs,
            ino,
            file: fs.mapping_probe().file(ino)?,
            blocks: bytes.div_ceil(super::image::BLOCK) as u32,
            overhead: clock::overhead(),
            rng: fastrand::Rng::with_seed(seed),
        })
    }

    pub fn file(&self) -> ProbeFile<'a> {
        self.file
    }

    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    /// A random block and the one before it (the block itself for a one-block file).
    fn pick(&mut self) -> (u32, u32) {
        if self.blocks < 2 {
            return (0, 0);
        }
        let k = self.rng.u32(1..self.blocks);
        (k - 1, k)
    }

    /// Mean cycles of `reps` cold operations.
    pub fn cold(&mut self, op: Op, reps: usize, ev: &mut Evictor) -> io::Result<f64> {
        let mut sum = 0u64;
        for j in 0..reps as u32 {
            let (prev, k) = self.pick();
            let (file, ovh) = (self.file, self.overhead);
            sum += match op {
                Op::SeqRead => {
                    black_box(file.lookup(prev));
                    ev.evict();
                    time_one(ovh, || file.lookup(k)).0
                }
                Op::RandRead => {
                    ev.evict();
                    time_one(ovh, || file.lookup(k)).0
                }
                Op::Append => {
                    let lblk = self.blocks + j;
                    ev.evict();
                    let (dt, r) = time_one(ovh, || file.append(lblk));
                    r?;
                    dt
                }
            };
        }
        if op == Op::Append {
            self.file.trim(self.blocks, self.blocks + reps as u32)?;
        }
        Ok(sum as f64 / reps.max(1) as f64)
    }

    /// Mean cycles of `n` hot operations in a row.
    pub fn hot(&mut self, op: Op, n: u32) -> io::Result<f64> {
        let file = self.file;
        let t = match op {
            Op::SeqRead => {
                let (_, mut l) = self.pick();
                let t0 = now();
                for _ in 0..n {
                    black_box(file.lookup(l));
                    l += 1;
                    if l == self.blocks {
                        l = 0;
                    }
                }
                now() - t0
            }
            Op::RandRead => {
                let picks: Vec<u32> = (0..n).map(|_| self.rng.u32(0..self.blocks)).collect();
                let t0 = now();
                for &l in &picks {
                    black_box(file.lookup(l));
                }
                now() - t0
            }
            Op::Append => {
                let t0 = now();
                for j in 0..n {
                    file.append(self.blocks + j)?;
                }
                let t = now() - t0;
                file.trim(self.blocks, self.blocks + n)?;
                t
            }
        };
        Ok(t as f64 / n.max(1) as f64)
    }

    /// One cold read of `io_blocks` blocks (sequential: following the blocks before it, or
    /// at a random place), timed twice: its lookups alone, then the whole `read` (after
    /// evicting again). Returns the two cycle counts.
    pub fn cold_read_path(
        &mut self,
        io_blocks: u32,
        sequential: bool,
        buf: &mut [u8],
        ev: &mut Evictor,
    ) -> io::Result<(u64, u64)> {
        let io_blocks = io_blocks.min(self.blocks);
        let start = self.rng.u32(0..=self.blocks - io_blocks);
        let (file, ovh) = (self.file, self.overhead);
        let before = start.saturating_sub(io_blocks);
        let bytes = io_blocks as usize * super::image::BLOCK as usize;
        let buf = &mut buf[..bytes];
        if sequential {
            black_box(file.lookup(start.saturating_sub(1)));
        }
        ev.evict();
        let (map, _) = time_one(ovh, || {
            for l in start..start + io_blocks {
                black_box(file.lookup(l));
            }
        });
        let off = |l: u32| l as u64 * super::image::BLOCK;
        if sequential {
            self.fs.read(self.ino, off(before), buf)?;
        }
        ev.evict();
        let (read, n) = time_one(ovh, || self.fs.read(self.ino, off(start), buf));
        if n? != bytes {
            return Err(io::Error::other("short read in the read-path measurement"));
        }
        Ok((map, read))
    }
}
