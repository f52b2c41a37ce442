//! fsx-style exerciser of the library's file data paths: a seeded random stream of reads,
//! writes, truncates (down, up, to the same size) and fallocate (mode 0, KEEP_SIZE,
//! PUNCH_HOLE|KEEP_SIZE) on two files of an in-memory image, checked against an in-memory
//! model after every operation: every read's length and bytes, the size, and the number of
//! mapped blocks. Every 1000 operations both files are read whole and compared; every 10 000
//! the image is crash-remounted from a snapshot (fsck clean, contents equal) and the run goes
//! on with the remounted file system.
//!
//! 100 000 operations for each of the seeds 1, 2, 3. `FSX_OPS=N` changes the count, and
//! `FSX_SEED=S cargo test -p nvmfs --release --test fsx_model seed_env` reruns one seed.
//! A mismatch panics with the seed, the operation number and the last 40 operations.

mod common;

use std::collections::{BTreeSet, VecDeque};

use common::*;
use nvmfs::{Fs, SetAttr};

const BLOCK: u64 = 4096;
/// Largest file the stream makes (fsx's `flen`).
const FLEN: u64 = 1 << 20;
/// Largest read, write or fallocate (fsx's `opsize.max`).
const OPMAX: u64 = 64 << 10;
const ROOT: u64 = 1;

/// splitmix64: small, seedable, no dependency.
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
    /// An offset in `0..limit`, often on or next to a block boundary (where the edge cases are).
    fn offset(&mut self, limit: u64) -> u64 {
        let o = self.below(limit);
        match self.below(4) {
            0 => (o / BLOCK * BLOCK).min(limit.saturating_sub(1)),
            1 => (o / BLOCK * BLOCK + BLOCK - 1 - self.below(3)).min(limit.saturating_sub(1)),
            _ => o,
        }
    }
    /// A length in `1..=OPMAX`, biased towards small and whole-block sizes.
    fn length(&mut self) -> u64 {
        match self.below(5) {
            0 => 1 + self.below(64),
            1 => BLOCK * (1 + self.below(OPMAX / BLOCK)),
            _ => 1 + self.below(OPMAX),
        }
    }
}

/// What the file should be: its bytes (the length is the size) and its mapped blocks.
#[derive(Default)]
struct Model {
    data: Vec<u8>,
    blocks: BTreeSet<u64>,
}

impl Model {
    fn map(&mut self, off: u64, end: u64) {
        self.blocks.extend(off / BLOCK..end.div_ceil(BLOCK));
    }
    fn unmap_from(&mut self, first: u64) {
        self.blocks.retain(|&b| b < first);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Read { off: u64, len: u64 },
    Write { off: u64, len: u64 },
    Truncate { size: u64 },
    Fallocate { mode: i32, off: u64, len: u64 },
    CrashRemount,
}

struct Run {
    seed: u64,
    fs: Fs,
    inos: [u64; 2],
    models: [Model; 2],
    history: VecDeque<(u64, usize, Op)>,
    counts: [u64; 7],
}

impl Run {
    fn fail(&self, n: u64, what: String) -> ! {
        let mut log = String::new();
        for (i, f, op) in &self.history {
            log.push_str(&format!("  {i:>7} file {f}: {op:?}\n"));
        }
        panic!(
            "fsx_model seed {} op {n}: {what}\nlast operations:\n{log}rerun: FSX_SEED={} FSX_OPS={} \
             cargo test -p nvmfs --release --test fsx_model seed_env",
            self.seed,
            self.seed,
            n + 1
        );
    }

    fn check_meta(&self, n: u64, f: usize) {
        let m = self.fs.getattr(self.inos[f]).unwrap();
        let model = &self.models[f];
        if m.size != model.data.len() as u64 {
            self.fail(
                n,
                format!("file {f}: size {} != model {}", m.size, model.data.len()),
            );
        }
        if m.blocks != model.blocks.len() as u64 {
            self.fail(
                n,
                format!(
                    "file {f}: {} blocks mapped != model {}",
                    m.blocks,
                    model.blocks.len()
                ),
            );
        }
    }

    fn check_read(&self, n: u64, f: usize, off: u64, len: u64) {
        let mut buf = vec![0xa5u8; len as usize];
        let got = match self.fs.read(self.inos[f], off, &mut buf) {
            Ok(g) => g,
            Err(e) => self.fail(n, format!("file {f}: read {off}+{len}: {e}")),
        };
        let data = &self.models[f].data;
        let want = data.len().saturating_sub(off as usize).min(len as usize);
        if got != want {
            self.fail(
                n,
                format!("file {f}: read {off}+{len} returned {got} bytes, model {want}"),
            );
        }
        let start = (off as usize).min(data.len());
        let expect = &data[start..start + want];
        if let Some(i) = (0..want).find(|&i| buf[i] != expect[i]) {
            self.fail(
                n,
                format!(
                    "file {f}: read {off}+{len}: byte at {} is {:#04x}, model {:#04x} \
                     (first of {} differing bytes)",
                    off + i as u64,
                    buf[i],
                    expect[i],
                    (i..want).filter(|&j| buf[j] != expect[j]).count()
                ),
            );
        }
    }

    fn step(&mut self, n: u64, rng: &mut Rng) {
        let f = rng.below(2) as usize;
        let size = self.models[f].data.len() as u64;
        let op = match rng.below(100) {
            0..=29 => Op::Read {
                off: rng.offset(size + BLOCK),
                len: rng.length(),
            },
            30..=64 => {
                let off = rng.offset(FLEN);
                Op::Write {
                    off,
                    len: rng.length().min(FLEN - off),
                }
            }
            65..=74 => Op::Truncate {
                size: match rng.below(4) {
                    0 => size,
                    1 => rng.offset(size + 1),
                    _ => rng.offset(FLEN + 1),
                },
            },
            75..=99 => {
                let mode = match rng.below(3) {
                    0 => 0,
                    1 => libc::FALLOC_FL_KEEP_SIZE,
                    _ => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                };
                let off = rng.offset(FLEN);
                Op::Fallocate {
                    mode,
                    off,
                    len: rng.length().min(FLEN - off),
                }
            }
            _ => unreachable!(),
        };
        let op = if n > 0 && n.is_multiple_of(10_000) {
            Op::CrashRemount
        } else {
            op
        };
        self.history.push_back((n, f, op.clone()));
        if self.history.len() > 40 {
            self.history.pop_front();
        }
        let ino = self.inos[f];
        match op {
            Op::Read { off, len } => {
                self.counts[0] += 1;
                self.check_read(n, f, off, len);
            }
            Op::Write { off, len } => {
                self.counts[1] += 1;
                let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                match self.fs.write(ino, off, &bytes) {
                    Ok(w) if w as u64 == len => {}
                    other => self.fail(n, format!("file {f}: write {off}+{len}: {other:?}")),
                }
                let m = &mut self.models[f];
                let end = (off + len) as usize;
                if m.data.len() < end {
                    m.data.resize(end, 0);
                }
                m.data[off as usize..end].copy_from_slice(&bytes);
                m.map(off, off + len);
            }
            Op::Truncate { size: new } => {
                self.counts[2] += 1;
                let attr = SetAttr {
                    size: Some(new),
                    ..Default::default()
                };
                if let Err(e) = self.fs.setattr(ino, &attr) {
                    self.fail(n, format!("file {f}: truncate to {new}: {e}"));
                }
                let m = &mut self.models[f];
                // Up keeps blocks preallocated past EOF; down or to the same size frees every
                // block past the new end (as ext4 does).
                if new <= size {
                    m.unmap_from(new.div_ceil(BLOCK));
                }
                m.data.resize(new as usize, 0);
            }
            Op::Fallocate { mode, off, len } => {
                let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
                let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
                self.counts[if punch {
                    5
                } else if keep {
                    4
                } else {
                    3
                }] += 1;
                if let Err(e) = self.fs.fallocate(ino, mode, off, len) {
                    self.fail(
                        n,
                        format!("file {f}: fallocate({mode:#x}) {off}+{len}: {e}"),
                    );
                }
                let m = &mut self.models[f];
                let end = off + len;
                if punch {
                    // Bytes inside EOF read as zeros; whole blocks are unmapped.
                    let zero_end = (end as usize).min(m.data.len());
                    if (off as usize) < zero_end {
                        m.data[off as usize..zero_end].fill(0);
                    }
                    let (first, last) = (off.div_ceil(BLOCK), end / BLOCK);
                    m.blocks.retain(|&b| b < first || b >= last);
                } else {
                    m.map(off, end);
                    if !keep && end > m.data.len() as u64 {
                        m.data.resize(end as usize, 0);
                    }
                }
            }
            Op::CrashRemount => {
                self.counts[6] += 1;
                assert_fsck_clean(&self.fs);
                let fs = crash_remount(&self.fs);
                std::mem::replace(&mut self.fs, fs).drop_without_unmount();
                for g in 0..2 {
                    self.check_meta(n, g);
                    self.check_read(n, g, 0, FLEN + BLOCK);
                }
            }
        }
        self.check_meta(n, f);
        if n % 1000 == 999 {
            for g in 0..2 {
                self.check_read(n, g, 0, FLEN + BLOCK);
            }
        }
    }
}

fn run(seed: u64) {
    run_on(seed, nvmfs::MappingKind::HashFs);
}

fn run_on(seed: u64, mapping: nvmfs::MappingKind) {
    let ops: u64 = std::env::var("FSX_OPS")
        .ok()
        .map(|s| s.parse().expect("FSX_OPS"))
        .unwrap_or(100_000);
    let fs = nvmfs::Fs::format_in_memory(&nvmfs::FormatOptions {
        size_bytes: 16 << 20,
        inode_count: Some(64),
        mapping,
        layout_score: None,
        tier: None,
    })
    .unwrap();
    let inos =
        [b"fsx-a".as_slice(), b"fsx-b"].map(|name| fs.create(ROOT, name, 0o644, 0, 0).unwrap().ino);
    let mut run = Run {
        seed,
        fs,
        inos,
        models: Default::default(),
        history: VecDeque::new(),
        counts: [0; 7],
    };
    let mut rng = Rng(seed);
    for n in 0..ops {
        run.step(n, &mut rng);
    }
    for g in 0..2 {
        run.check_read(ops, g, 0, FLEN + BLOCK);
    }
    assert_fsck_clean(&run.fs);
    let [r, w, t, fa, fk, fp, c] = run.counts;
    println!(
        "fsx_model {mapping} seed {seed}: {ops} ops, 0 mismatches (read {r}, write {w}, truncate {t}, \
         fallocate {fa}, keep-size {fk}, punch {fp}, crash remounts {c}); sizes {} and {} bytes, \
         {} and {} blocks",
        run.models[0].data.len(),
        run.models[1].data.len(),
        run.models[0].blocks.len(),
        run.models[1].blocks.len()
    );
    run.fs.unmount().unwrap();
}

#[test]
fn seed_1() {
    run(1);
}

#[test]
fn seed_2() {
    run(2);
}

#[test]
fn seed_3() {
    run(3);
}

#[test]
fn seed_1_extent_tree() {
    run_on(1, nvmfs::MappingKind::Extent);
}

#[test]
fn seed_1_radix_tree() {
    run_on(1, nvmfs::MappingKind::Radix);
}

#[test]
fn seed_1_cuckoo_table() {
    run_on(1, nvmfs::MappingKind::Cuckoo);
}

#[test]
fn seed_1_level_hashing() {
    run_on(1, nvmfs::MappingKind::Level);
}

/// Reruns the seed in FSX_SEED (does nothing without it).
#[test]
fn seed_env() {
    if let Ok(s) = std::env::var("FSX_SEED") {
        run(s.parse().expect("FSX_SEED"));
    }
}
