//! The disk subtests of AIM7's `disk1.c` (1.20), each doing exactly that subtest's calls.
//!
//! All move 1 KiB blocks (`NBUFSIZE`) through one buffer per task, as disk1.c's static
//! `nbuf`. `n` is `disk_iteration_count`: the test file size in KiB (FILESIZE + POOLSIZE /
//! tasks). The file positions AIM7's read/write/lseek calls move are tracked here and passed
//! to positional reads and writes. Temporary files are named as `aim_mktemp` names them
//! (`tmpb.` + 5 digits of the task + a 5-digit counter) and are unlinked by each subtest,
//! several while still open (their blocks go when the handle closes), as AIM7 does it.
//! `disk_rd` and `disk_cp` read the shared `tmpa.common`, made by the mix runner.

use super::rand::AimRand;
use crate::targets::api::{MicroFile, MicroFs};
use serde::Serialize;
use std::io;

/// AIM7's block: every read and write moves this many bytes.
pub const BLOCK_BYTES: u64 = 1024;

/// The smallest file size (KiB): the sync subtests use n/2 blocks, and `aim_rand() % 0` is
/// undefined.
pub const MIN_BLOCKS: u32 = 2;

/// The shared input file of `disk_rd` and `disk_cp`, in the disk directory.
pub const COMMON_FILE: &str = "tmpa.common";

/// One of AIM7's disk subtests, named as in its workfiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Subtest {
    DiskRr,
    DiskRw,
    DiskRd,
    DiskWrt,
    DiskCp,
    SyncDiskRw,
    SyncDiskWrt,
    SyncDiskCp,
    SyncDiskUpdate,
}

impl Subtest {
    /// In disk1.c's registration order.
    pub const ALL: [Subtest; 9] = [
        Subtest::DiskRr,
        Subtest::DiskRw,
        Subtest::DiskRd,
        Subtest::DiskWrt,
        Subtest::DiskCp,
        Subtest::SyncDiskRw,
        Subtest::SyncDiskWrt,
        Subtest::SyncDiskCp,
        Subtest::SyncDiskUpdate,
    ];

    /// The name AIM7 registers it under.
    pub fn name(self) -> &'static str {
        match self {
            Subtest::DiskRr => "disk_rr",
            Subtest::DiskRw => "disk_rw",
            Subtest::DiskRd => "disk_rd",
            Subtest::DiskWrt => "disk_wrt",
            Subtest::DiskCp => "disk_cp",
            Subtest::SyncDiskRw => "sync_disk_rw",
            Subtest::SyncDiskWrt => "sync_disk_wrt",
            Subtest::SyncDiskCp => "sync_disk_cp",
            Subtest::SyncDiskUpdate => "sync_disk_update",
        }
    }

    /// AIM7's description (the units string it registers).
    pub fn description(self) -> &'static str {
        match self {
            Subtest::DiskRr => "Random Disk Reads (K)",
            Subtest::DiskRw => "Random Disk Writes (K)",
            Subtest::DiskRd => "Sequential Disk Reads (K)",
            Subtest::DiskWrt => "Sequential Disk Writes (K)",
            Subtest::DiskCp => "Disk Copies (K)",
            Subtest::SyncDiskRw => "Sync Random Disk Writes (K)",
            Subtest::SyncDiskWrt => "Sync Sequential Disk Writes (K)",
            Subtest::SyncDiskCp => "Sync Disk Copies (K)",
            Subtest::SyncDiskUpdate => "Sync Disk Updates (K)",
        }
    }

    /// The subtest of an AIM7 name.
    pub fn parse(name: &str) -> Result<Subtest, String> {
        Subtest::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Subtest::ALL.iter().map(|s| s.name()).collect();
                format!(
                    "unknown AIM7 disk subtest {name:?} (known: {})",
                    known.join(", ")
                )
            })
    }

    /// Whether it reads `tmpa.common`.
    pub fn uses_common_file(self) -> bool {
        matches!(
            self,
            Subtest::DiskRd | Subtest::DiskCp | Subtest::SyncDiskCp
        )
    }
}

/// Bytes a subtest read and wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Moved {
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl Moved {
    /// Adds `o`'s bytes.
    pub fn add(&mut self, o: Moved) {
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
    }
}

/// One AIM7 task's side of the subtests: its file system, directory, random numbers, temp
/// file counter and block buffer.
pub struct Task<'a, F: MicroFs> {
    fs: &'a F,
    dir: &'a str,
    common: &'a F::Name,
    id: usize,
    counter: u32,
    pub rng: AimRand,
    buf: Vec<u8>,
}

impl<'a, F: MicroFs> Task<'a, F> {
    /// Task number `id` working in `dir` (relative to the target's root), whose
    /// `tmpa.common` is `common`.
    pub fn new(fs: &'a F, dir: &'a str, common: &'a F::Name, id: usize, rng: AimRand) -> Self {
        Task {
            fs,
            dir,
            common,
            id,
            counter: 0,
            rng,
            buf: common_block(),
        }
    }

    /// Runs `subtest` with file size `n` KiB. A temp file it leaves behind after an error is
    /// removed (AIM7 tries to on most error paths).
    pub fn run(&mut self, subtest: Subtest, n: u32) -> io::Result<Moved> {
        if n < MIN_BLOCKS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: file size {n} KiB, need at least {MIN_BLOCKS}",
                    subtest.name()
                ),
            ));
        }
        let temp = self.temp_name();
        let name = self.fs.name(&temp);
        let r = self.body(subtest, &name, n);
        if r.is_err() {
            let _ = self.fs.unlink(&name);
        }
        r.map_err(|e| io::Error::new(e.kind(), format!("{} ({temp}): {e}", subtest.name())))
    }

    fn body(&mut self, subtest: Subtest, temp: &F::Name, n: u32) -> io::Result<Moved> {
        match subtest {
            Subtest::DiskRr => self.disk_rr(temp, n),
            Subtest::DiskRw => self.disk_rw(temp, n),
            Subtest::DiskRd => self.disk_rd(n),
            Subtest::DiskWrt => self.disk_wrt(temp, n),
            Subtest::DiskCp => self.disk_cp(temp, n),
            Subtest::SyncDiskRw => self.sync_disk_rw(temp, n),
            Subtest::SyncDiskWrt => self.sync_disk_wrt(temp, n),
            Subtest::SyncDiskCp => self.sync_disk_cp(temp, n),
            Subtest::SyncDiskUpdate => self.sync_disk_update(temp, n),
        }
    }

    /// `aim_mktemp("tmpb.XXXXXXXXXX")`: 5 digits of the task, then a 5-digit counter.
    fn temp_name(&mut self) -> String {
        let name = format!(
            "{}/tmpb.{:05}{:05}",
            self.dir,
            self.id % 100_000,
            self.counter
        );
        self.counter = (self.counter + 1) % 100_000;
        name
    }

    /// Random reads: `creat`, n sequential writes, close, open O_RDONLY, unlink, n reads of
    /// block `aim_rand() % n`, close.
    fn disk_rr(&mut self, temp: &F::Name, n: u32) -> io::Result<Moved> {
        let mut moved = self.write_file(temp, n)?;
        let f = self.fs.open_read(temp)?;
        self.fs.unlink(temp)?;
        for _ in 0..n {
            let block = self.rng.below(n);
            f.read_exact_at(&mut self.buf, at(block))?;
        }
        moved.read_bytes += blocks(n);
        Ok(moved)
    }

    /// Random writes: `creat`, n sequential writes, close, open O_WRONLY, unlink, n writes
    /// of block `aim_rand() % n`, close.
    fn disk_rw(&mut self, temp: &F::Name, n: u32) -> io::Result<Moved> {
        let mut moved = self.write_file(temp, n)?;
        let f = self.fs.open_rw(temp)?;
        self.fs.unlink(temp)?;
        moved.write_bytes += self.random_writes(&f, n, n)?;
        Ok(moved)
    }

    /// Sync random writes: a file of n/2 blocks written plainly, closed, opened again
    /// O_WRONLY | O_SYNC, n/2 O_SYNC writes of block `aim_rand() % (n/2)`, unlink, close.
    fn sync_disk_rw(&mut self, temp: &F::Name, n: u32) -> io::Result<Moved> {
        let half = n / 2;
        let mut moved = self.write_file(temp, half)?;
        let f = self.fs.open_sync(temp, false)?;
        moved.write_bytes += self.random_writes(&f, half, half)?;
        self.fs.unlink(temp)?;
        Ok(moved)
    }

    /// Sequential reads of the shared `tmpa.common`: open O_RDONLY, n reads from offset 0.
    fn disk_rd(&mut self, n: u32) -> io::Result<Moved> {
        let f = self.fs.open_read(self.common)?;
        for i in 0..n {
            f.read_exact_at(&mut self.buf, at(i))?;
        }
        Ok(Moved {
            read_bytes: blocks(n),
            write_bytes: 0,
        })
    }

    /// Sequential writes: `creat`, unlink, n writes, close.
    fn disk_wrt(&mut self, temp: &F::Name, n: u32) -> io::Result<Moved> {
        let f = self.fs.create(temp)?;
        self.fs.unlink(temp)?;
        self.sequential_writes(&f, n)
    }

    /// Sync sequential writes: open O_SYNC | O_WRONLY | O_CREAT | O_TRUNC, n/2 writes,
    /// unlink, close.
    fn sync_disk_wrt(&mut self, temp: &F::Name, n: u32) -> io::Result<Moved> {
        let f = self.fs.open_sync(temp, true)?;
        let moved = self.sequential_writes(&f, n / 2)?;
        self.fs.unlink(temp)?;
        Ok(moved)
    }

    /// Copy: open `tmpa.common` O_RDONLY, `creat` the copy, unlink it, n block reads each
    /// followed by its write, close both.
    fn disk_cp(&mut self, temp: &F::Name, n: u32) -> io::Result<Moved> {
        let src = self.fs.open_read(self.common)?;
        let dst = self.fs.create(temp)?;
        self.fs.unlink(temp)?;
        self.copy(&src, &dst, n)
    }

    /// Sync copy: as `disk_cp` with the copy opened O_SYNC, n/2 blocks, unlinked at the end.
    fn sync_disk_cp(&mut self, temp: &F::Name, n: u32) -> io::Result<Moved> {
        let src = self.fs.open_read(self.common)?;
        let dst = self.fs.open_sync(temp, true)?;
        let moved = self.copy(&src, &dst, n / 2)?;
        self.fs.unlink(temp)?;
        Ok(moved)
    }

    /// Sync updates: a "database" of n blocks written plainly, closed, opened O_RDWR |
    /// O_SYNC; n/2 times: seek to block `aim_rand() % n`, read it, write the buffer. The
    /// read moved the file position, so the write lands on the block after the one read
    /// (past the end of the file when the last block was read, which grows it), exactly as
    /// disk1.c's read-then-write does. Then unlink and close.
    fn sync_disk_update(&mut self, temp: &F::Name, n: u32) -> io::Result<Moved> {
        let mut moved = self.write_file(temp, n)?;
        let f = self.fs.open_sync(temp, false)?;
        for _ in 0..n / 2 {
            let block = self.rng.below(n);
            f.read_exact_at(&mut self.buf, at(block))?;
            f.write_all_at(&self.buf, at(block) + BLOCK_BYTES)?;
        }
        moved.read_bytes += blocks(n / 2);
        moved.write_bytes += blocks(n / 2);
        self.fs.unlink(temp)?;
        Ok(moved)
    }

    /// `creat` (or O_WRONLY | O_CREAT | O_TRUNC), `count` sequential block writes, close.
    fn write_file(&mut self, temp: &F::Name, count: u32) -> io::Result<Moved> {
        let f = self.fs.create(temp)?;
        self.sequential_writes(&f, count)
    }

    fn sequential_writes(&mut self, f: &F::File, count: u32) -> io::Result<Moved> {
        for i in 0..count {
            f.write_all_at(&self.buf, at(i))?;
        }
        Ok(Moved {
            read_bytes: 0,
            write_bytes: blocks(count),
        })
    }

    /// `count` writes, each of block `aim_rand() % span`.
    fn random_writes(&mut self, f: &F::File, count: u32, span: u32) -> io::Result<u64> {
        for _ in 0..count {
            let block = self.rng.below(span);
            f.write_all_at(&self.buf, at(block))?;
        }
        Ok(blocks(count))
    }

    fn copy(&mut self, src: &F::File, dst: &F::File, count: u32) -> io::Result<Moved> {
        for i in 0..count {
            src.read_exact_at(&mut self.buf, at(i))?;
            dst.write_all_at(&self.buf, at(i))?;
        }
        Ok(Moved {
            read_bytes: blocks(count),
            write_bytes: blocks(count),
        })
    }
}

/// Offset of block `i`.
fn at(i: u32) -> u64 {
    u64::from(i) * BLOCK_BYTES
}

fn blocks(count: u32) -> u64 {
    u64::from(count) * BLOCK_BYTES
}

/// `multitask.c`'s `file_buffer`: byte j is j % 127.
fn common_block() -> Vec<u8> {
    (0..BLOCK_BYTES).map(|j| (j % 127) as u8).collect()
}

/// Makes `tmpa.common` of `n` blocks as `disk_create_all_files` does (`creat`, n writes of
/// `file_buffer`, close), synced so that the subtests read it from a quiet file system.
pub fn create_common<F: MicroFs>(fs: &F, name: &F::Name, n: u32) -> io::Result<()> {
    let f = fs.create(name)?;
    let block = common_block();
    for i in 0..n {
        f.write_all_at(&block, at(i))?;
    }
    f.sync()
}
