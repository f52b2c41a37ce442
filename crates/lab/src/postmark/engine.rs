//! One Postmark instance: its phases in Postmark 1.51's exact order of random
//! draws and file operations, over any [`MicroFs`].
//!
//! An [`Instance`] holds what `cli_run` sets up (the generator seeded with
//! `sgenrand(seed)`, the source text of `2 * size_high` bytes of `32 + RND(95)`,
//! the file table) and offers the phases as methods; [`super::run`] times them
//! as Postmark does and [`super::filemark`] runs one instance per thread. The
//! target is passed to every call rather than held, so a runner can remount
//! it between phases.
//!
//! Draw order, per 1.51:
//! - create: a free slot (no draw; nothing at all when the table is full), the
//!   location `RND(total weight)` (only with several locations), the
//!   subdirectory `RND(subdirectories)` (only with more than one), the size
//!   `low + RND(high - low)`;
//! - transaction: if bias read is not -1, `RND(scale) < bias read` picks read
//!   over append, then the file by [`FileTable::find_used`]; an append draws
//!   `RND(high - size) + 1` bytes, and is skipped without drawing when the
//!   file is already `high` bytes; then if bias create is not -1,
//!   `RND(scale) < bias create` picks create over delete (delete picks its
//!   file the same way);
//! - a transaction is not started once every file created has been deleted
//!   (Postmark's "out of files!").
//!
//! Errors: an I/O error ends the phase with the error, naming the operation
//! and path (Postmark prints it and carries on, with its counts then off); so
//! does a read that gets fewer bytes than were written, which Postmark does
//! not check.
//!
//! Locations: with none or one, files go in the instance's base directory
//! (one location is where the target is; the runner puts the target there).
//! With several, each is a directory under the base named by its path (a
//! leading `/` dropped), which must exist, as Postmark expects of its
//! locations.

use super::rng::Mt19937;
use super::stdio::{
    AtEnd, Buffered, BufferedReader, FromStart, Input, Output, Raw, RawReader, STDIO_BUFFER,
};
use super::table::FileTable;
use crate::targets::api::MicroFs;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::io;
use std::time::Instant;

/// A chance of `value` in `scale`: Postmark draws `RND(scale) < value` with
/// scale 10 (its biases are in tenths); filemark uses scale 100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Bias {
    pub value: u32,
    pub scale: u32,
}

/// One instance's parameters in the engine's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// Files created at the start; the table has twice as many slots.
    pub number: u32,
    pub size_low: u32,
    pub size_high: u32,
    /// Per location; used only when more than one.
    pub subdirectories: u32,
    pub read_block: usize,
    pub write_block: usize,
    /// stdio emulation ([`super::stdio`]) when true.
    pub buffered: bool,
    /// `None`: that half of each transaction is skipped (Postmark's -1).
    pub bias_read: Option<Bias>,
    pub bias_create: Option<Bias>,
    pub seed: u32,
    /// Several locations (path relative to the base, weight); fewer than
    /// two are ignored, see the module doc.
    pub locations: Vec<(String, u32)>,
    /// The instance's directory relative to the target root, "" for the root.
    pub base: String,
}

/// What Postmark counts (`files_created`, `files_read`, ...). Bytes are exact
/// integers; 1.51 adds them up in a C `float`, which stops counting every
/// byte past 16 MiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub created: u64,
    pub read: u64,
    pub appended: u64,
    pub deleted: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl Counts {
    /// The counts added since `earlier`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            created: self.created - earlier.created,
            read: self.read - earlier.read,
            appended: self.appended - earlier.appended,
            deleted: self.deleted - earlier.deleted,
            bytes_read: self.bytes_read - earlier.bytes_read,
            bytes_written: self.bytes_written - earlier.bytes_written,
        }
    }

    /// Sums counts (of several threads).
    pub fn add(&self, other: &Counts) -> Counts {
        Counts {
            created: self.created + other.created,
            read: self.read + other.read,
            appended: self.appended + other.appended,
            deleted: self.deleted + other.deleted,
            bytes_read: self.bytes_read + other.bytes_read,
            bytes_written: self.bytes_written + other.bytes_written,
        }
    }
}

/// How a run of transactions ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transactions {
    /// Transactions completed.
    pub done: u64,
    /// Stopped because every file created had been deleted.
    pub out_of_files: bool,
    /// Stopped because the caller asked.
    pub stopped: bool,
}

/// One Postmark instance's state.
pub struct Instance<N> {
    p: Params,
    rng: Mt19937,
    table: FileTable<N>,
    /// Paths of the table's files, for error messages.
    paths: Vec<String>,
    source: Vec<u8>,
    read_buf: Vec<u8>,
    stdio_write: Vec<u8>,
    stdio_read: Vec<u8>,
    /// Location directories with a trailing `/` (base included), in order.
    dirs: Vec<String>,
    /// Index into `dirs` for each unit of weight (`location_index`).
    location_index: Vec<u32>,
    counts: Counts,
}

impl<N> Instance<N> {
    /// Seeds the generator and draws the source text, as `cli_run` does first.
    pub fn new(p: Params) -> Self {
        let mut rng = Mt19937::sgenrand(p.seed);
        let source = (0..2 * p.size_high as usize)
            .map(|_| 32 + rng.rnd(95) as u8)
            .collect();
        let base = if p.base.is_empty() {
            String::new()
        } else {
            format!("{}/", p.base.trim_end_matches('/'))
        };
        let several = p.locations.len() > 1;
        let dirs: Vec<String> = if several {
            let loc = |l: &str| format!("{base}{}/", l.trim_matches('/'));
            p.locations.iter().map(|(l, _)| loc(l)).collect()
        } else {
            vec![base]
        };
        let location_index = if several {
            let weights = p.locations.iter().map(|(_, w)| *w as usize);
            (0u32..)
                .zip(weights)
                .flat_map(|(i, w)| std::iter::repeat_n(i, w))
                .collect()
        } else {
            Vec::new()
        };
        Instance {
            table: FileTable::new(p.number),
            paths: vec![String::new(); 2 * p.number as usize],
            read_buf: vec![0; p.read_block],
            stdio_write: Vec::with_capacity(STDIO_BUFFER),
            stdio_read: vec![0; STDIO_BUFFER],
            p,
            rng,
            source,
            dirs,
            location_index,
            counts: Counts::default(),
        }
    }

    /// Everything counted so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Files in the table now.
    pub fn files(&self) -> usize {
        self.table.used()
    }

    /// The 2 × high bytes new files and appends are copied from.
    pub fn source(&self) -> &[u8] {
        &self.source
    }

    /// The subdirectories Postmark makes: `s0..s{n-1}` in each location, only
    /// when there are more than one.
    fn subdirectories(&self) -> Vec<String> {
        if self.p.subdirectories <= 1 {
            return Vec::new();
        }
        let n = self.p.subdirectories;
        let mut out = Vec::with_capacity(self.dirs.len() * n as usize);
        for d in &self.dirs {
            out.extend((0..n).map(|i| format!("{d}s{i}")));
        }
        out
    }

    /// `create_subdirectories`.
    pub fn make_subdirectories<F: MicroFs<Name = N>>(&self, fs: &F) -> io::Result<()> {
        for d in self.subdirectories() {
            fs.mkdir(&fs.name(&d))
                .map_err(|e| context(e, "mkdir", &d))?;
        }
        Ok(())
    }

    /// `delete_subdirectories`.
    pub fn remove_subdirectories<F: MicroFs<Name = N>>(&self, fs: &F) -> io::Result<()> {
        for d in self.subdirectories() {
            fs.rmdir(&fs.name(&d))
                .map_err(|e| context(e, "rmdir", &d))?;
        }
        Ok(())
    }

    /// The creation phase: `number` creates. False if `stop` ended it early.
    pub fn create_files<F: MicroFs<Name = N>>(
        &mut self,
        fs: &F,
        stop: &dyn Fn() -> bool,
    ) -> io::Result<bool> {
        for _ in 0..self.p.number {
            if stop() {
                return Ok(false);
            }
            self.create_file(fs)?;
        }
        Ok(true)
    }

    /// `run_transactions`: up to `n` transactions, each one's latency recorded
    /// in `latency_ns`.
    pub fn transactions<F: MicroFs<Name = N>>(
        &mut self,
        fs: &F,
        n: u64,
        stop: &dyn Fn() -> bool,
        latency_ns: &mut Histogram<u64>,
    ) -> io::Result<Transactions> {
        let mut out = Transactions {
            done: 0,
            out_of_files: false,
            stopped: false,
        };
        while out.done < n {
            if self.counts.created == self.counts.deleted {
                out.out_of_files = true;
                break;
            }
            if stop() {
                out.stopped = true;
                break;
            }
            let t0 = Instant::now();
            self.transaction(fs)?;
            latency_ns.saturating_record((t0.elapsed().as_nanos() as u64).max(1));
            out.done += 1;
        }
        Ok(out)
    }

    /// The deletion phase: every file left, in slot order. Returns how many.
    pub fn delete_files<F: MicroFs<Name = N>>(&mut self, fs: &F) -> io::Result<u64> {
        let before = self.counts.deleted;
        for i in 0..self.table.len() {
            self.delete_file(fs, i)?;
        }
        Ok(self.counts.deleted - before)
    }

    fn transaction<F: MicroFs<Name = N>>(&mut self, fs: &F) -> io::Result<()> {
        if let Some(b) = self.p.bias_read {
            let read = self.chance(b);
            if let Some(i) = self.table.find_used(&mut self.rng) {
                if read {
                    self.read_file(fs, i)?;
                } else {
                    self.append_file(fs, i)?;
                }
            }
        }
        if let Some(b) = self.p.bias_create {
            if self.chance(b) {
                self.create_file(fs)?;
            } else if let Some(i) = self.table.find_used(&mut self.rng) {
                self.delete_file(fs, i)?;
            }
        }
        Ok(())
    }

    fn chance(&mut self, b: Bias) -> bool {
        self.rng.rnd(i64::from(b.scale)) < b.value
    }

    /// `create_file_name`: location, subdirectory, then the file's number
    /// (`++files_created`).
    fn next_path(&mut self) -> String {
        let dir = if self.location_index.is_empty() {
            &self.dirs[0]
        } else {
            let r = self.rng.rnd(self.location_index.len() as i64) as usize;
            &self.dirs[self.location_index[r] as usize]
        };
        let mut path = dir.clone();
        if self.p.subdirectories > 1 {
            let s = self.rng.rnd(i64::from(self.p.subdirectories));
            path.push_str(&format!("s{s}/"));
        }
        self.counts.created += 1;
        path.push_str(&self.counts.created.to_string());
        path
    }

    /// `create_file`: a new file of `low + RND(high - low)` bytes.
    fn create_file<F: MicroFs<Name = N>>(&mut self, fs: &F) -> io::Result<()> {
        let Some(slot) = self.table.find_free() else {
            return Ok(());
        };
        let path = self.next_path();
        let range = i64::from(self.p.size_high) - i64::from(self.p.size_low);
        let size = self.p.size_low + self.rng.rnd(range);
        let name = fs.name(&path);
        let file = fs.create(&name).map_err(|e| context(e, "create", &path))?;
        let sink = FromStart {
            file: &file,
            pos: 0,
        };
        let w = &mut self.stdio_write;
        let (src, block) = (&self.source[..], self.p.write_block);
        if self.p.buffered {
            write_blocks(Buffered::new(sink, w), src, size as usize, block)
        } else {
            write_blocks(Raw(sink), src, size as usize, block)
        }
        .map_err(|e| context(e, "write", &path))?;
        self.table.fill(slot, name, size);
        self.paths[slot] = path;
        self.counts.bytes_written += u64::from(size);
        Ok(())
    }

    /// `read_file`: the whole file in read-block calls. A file shorter than
    /// Postmark's record of it is an error (Postmark does not check).
    fn read_file<F: MicroFs<Name = N>>(&mut self, fs: &F, i: usize) -> io::Result<()> {
        let (slot, path) = (self.table.get(i), &self.paths[i]);
        let name = slot.name.as_ref().expect("a used slot has a name");
        let size = slot.size as usize;
        let file = fs.open_read(name).map_err(|e| context(e, "open", path))?;
        let buf = &mut self.read_buf;
        let got = if self.p.buffered {
            read_blocks(BufferedReader::new(&file, &mut self.stdio_read), size, buf)
        } else {
            read_blocks(
                RawReader {
                    file: &file,
                    pos: 0,
                },
                size,
                buf,
            )
        }
        .map_err(|e| context(e, "read", path))?;
        if got != size {
            let msg = format!("read {path}: {got} bytes where {size} were written");
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, msg));
        }
        self.counts.read += 1;
        self.counts.bytes_read += size as u64;
        Ok(())
    }

    /// `append_file`: `RND(high - size) + 1` bytes, unless the file is full.
    fn append_file<F: MicroFs<Name = N>>(&mut self, fs: &F, i: usize) -> io::Result<()> {
        let (slot, path) = (self.table.get(i), &self.paths[i]);
        if slot.size >= self.p.size_high {
            return Ok(());
        }
        let name = slot.name.as_ref().expect("a used slot has a name");
        let mut file = fs.open_append(name).map_err(|e| context(e, "open", path))?;
        let room = i64::from(self.p.size_high - slot.size);
        let block = self.rng.rnd(room) + 1;
        let sink = AtEnd { file: &mut file };
        let (src, wb) = (&self.source[..], self.p.write_block);
        if self.p.buffered {
            write_blocks(
                Buffered::new(sink, &mut self.stdio_write),
                src,
                block as usize,
                wb,
            )
        } else {
            write_blocks(Raw(sink), src, block as usize, wb)
        }
        .map_err(|e| context(e, "append", path))?;
        self.table.grow(i, block);
        self.counts.appended += 1;
        self.counts.bytes_written += u64::from(block);
        Ok(())
    }

    /// `delete_file`: removes the file in slot `i` if there is one.
    fn delete_file<F: MicroFs<Name = N>>(&mut self, fs: &F, i: usize) -> io::Result<()> {
        let Some(name) = self.table.get(i).name.as_ref() else {
            return Ok(());
        };
        fs.unlink(name)
            .map_err(|e| context(e, "unlink", &self.paths[i]))?;
        self.table.free(i);
        self.counts.deleted += 1;
        Ok(())
    }
}

/// `write_blocks`/`fwrite_blocks`: whole blocks then the remainder, each
/// copied from the start of the source text onwards, then close.
fn write_blocks<O: Output>(mut out: O, source: &[u8], size: usize, block: usize) -> io::Result<()> {
    let mut off = 0;
    while size - off >= block {
        out.put(&source[off..off + block])?;
        off += block;
    }
    out.put(&source[off..size])?;
    out.close()
}

/// The read loop of `read_file`: whole blocks then the remainder into the
/// read buffer. Returns the bytes delivered.
fn read_blocks<I: Input>(mut input: I, size: usize, buf: &mut [u8]) -> io::Result<usize> {
    let block = buf.len();
    let (mut left, mut got) = (size, 0);
    while left >= block {
        got += input.get(buf)?;
        left -= block;
    }
    got += input.get(&mut buf[..left])?;
    Ok(got)
}

/// Names the operation and path in an error.
fn context(e: io::Error, op: &str, path: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{op} {path}: {e}"))
}
