//! Cold and hot measurements of one mapping operation on one file (sections 4.1-4.5).
//!
//! Cold: evict the caches, then time one operation; a sample is the median of several such
//! operations (a median, because on a shared machine an operation now and then takes an
//! interrupt or a context switch worth a hundred operations). Hot: time runs of many
//! operations back to back and divide (the counter's own cost is then negligible); a sample is
//! the median of [`HOT_CHUNKS`] such runs. Appends map blocks past EOF and are trimmed after
//! each sample, so every sample starts from the same file.

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

    /// Median cycles of `reps` cold operations.
    pub fn cold(&mut self, op: Op, reps: usize, ev: &mut Evictor) -> io::Result<f64> {
        let mut times = Vec::with_capacity(reps);
        for j in 0..reps as u32 {
            let (prev, k) = self.pick();
            let (file, ovh) = (self.file, self.overhead);
            let t = match op {
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
            times.push(t as f64);
        }
        if op == Op::Append {
            self.file.trim(self.blocks, self.blocks + reps as u32)?;
        }
        Ok(median(&mut times))
    }

    /// Cycles per operation of `n` hot operations: the median of [`HOT_CHUNKS`] runs of
    /// `n / HOT_CHUNKS` operations in a row.
    pub fn hot(&mut self, op: Op, n: u32) -> io::Result<f64> {
        let chunk = (n / HOT_CHUNKS).max(1);
        let mut runs = (0..HOT_CHUNKS)
            .map(|_| self.hot_run(op, chunk))
            .collect::<io::Result<Vec<f64>>>()?;
        Ok(median(&mut runs))
    }

    /// Mean cycles of `n` hot operations in a row.
    fn hot_run(&mut self, op: Op, n: u32) -> io::Result<f64> {
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

    /// A random start for a read of `io_blocks` blocks.
    fn start_of(&mut self, io_blocks: u32) -> u32 {
        self.rng.u32(0..=self.blocks - io_blocks.min(self.blocks))
    }

    /// Cycles of the lookups of one cold read of `io_blocks` blocks (sequential: just after
    /// a lookup of the block before it, or at a random place).
    pub fn cold_read_lookups(&mut self, io_blocks: u32, sequential: bool, ev: &mut Evictor) -> u64 {
        let io_blocks = io_blocks.min(self.blocks);
        let start = self.start_of(io_blocks);
        let file = self.file;
        if sequential {
            black_box(file.lookup(start.saturating_sub(1)));
        }
        ev.evict();
        time_one(self.overhead, || {
            for l in start..start + io_blocks {
                black_box(file.lookup(l));
            }
        })
        .0
    }

    /// Cycles of one whole cold `read` of `io_blocks` blocks (sequential: just after reading
    /// the blocks before it), at a place of its own: a place the lookups above just visited
    /// would find the extent tree's cursor already there.
    pub fn cold_read(
        &mut self,
        io_blocks: u32,
        sequential: bool,
        buf: &mut [u8],
        ev: &mut Evictor,
    ) -> io::Result<u64> {
        let io_blocks = io_blocks.min(self.blocks);
        let start = self.start_of(io_blocks);
        let bytes = io_blocks as usize * super::image::BLOCK as usize;
        let buf = &mut buf[..bytes];
        let off = |l: u32| l as u64 * super::image::BLOCK;
        if sequential {
            self.fs
                .read(self.ino, off(start.saturating_sub(io_blocks)), buf)?;
        }
        ev.evict();
        let (read, n) = time_one(self.overhead, || self.fs.read(self.ino, off(start), buf));
        if n? != bytes {
            return Err(io::Error::other("short read in the read-path measurement"));
        }
        Ok(read)
    }

    /// Median cycles of `reps` cold reads' lookups and median cycles of `reps` whole cold
    /// reads (at other places).
    pub fn cold_read_path(
        &mut self,
        io_blocks: u32,
        sequential: bool,
        reps: usize,
        buf: &mut [u8],
        ev: &mut Evictor,
    ) -> io::Result<(f64, f64)> {
        let mut map: Vec<f64> = Vec::with_capacity(reps);
        let mut read: Vec<f64> = Vec::with_capacity(reps);
        for _ in 0..reps {
            map.push(self.cold_read_lookups(io_blocks, sequential, ev) as f64);
            read.push(self.cold_read(io_blocks, sequential, buf, ev)? as f64);
        }
        Ok((median(&mut map), median(&mut read)))
    }
}

/// Runs of hot operations a hot sample is the median of.
pub const HOT_CHUNKS: u32 = 5;

/// The median (the mean of the middle two for an even count); 0 for none.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}
