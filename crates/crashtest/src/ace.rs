//! ACE workloads for persistent memory (CrashMonkey/Chipmunk): single operations (seq-1) and
//! ordered pairs (seq-2) of creat, mkdir, falloc, write (append, overwrite, sparse), link,
//! unlink, rename, truncate and rmdir over a small namespace, run on a pre-populated image;
//! plus random sequences drawn from the same operations.

use std::io;

use nvmfs::{Fs, OpenOptions};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Creat(&'static str),
    Mkdir(&'static str),
    /// fallocate with KEEP_SIZE of [off, off+len).
    Falloc(&'static str, u64, u64),
    Append(&'static str, usize),
    /// In-place write inside EOF: may be torn by a crash (see docs/GUARANTEES.md).
    Overwrite(&'static str, u64, usize),
    /// Write past EOF, leaving a hole.
    Sparse(&'static str, u64, usize),
    Link(&'static str, &'static str),
    Unlink(&'static str),
    Rename(&'static str, &'static str),
    Truncate(&'static str, u64),
    Rmdir(&'static str),
}

impl Op {
    /// The file whose bytes a crash may leave mixed, if any.
    pub fn torn_file(&self) -> Option<&'static str> {
        match self {
            Op::Overwrite(p, ..) => Some(p),
            _ => None,
        }
    }

    fn data(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
            .collect()
    }

    /// Runs the operation; errors (e.g. the file a previous operation removed) are results too.
    pub fn run(&self, fs: &Fs) -> io::Result<()> {
        let open_w = |p: &str| OpenOptions::new().write(true).open(fs, p);
        match *self {
            Op::Creat(p) => OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(fs, p)
                .map(drop),
            Op::Mkdir(p) => fs.create_dir(p),
            Op::Falloc(p, off, len) => open_w(p)?.allocate(libc::FALLOC_FL_KEEP_SIZE, off, len),
            Op::Append(p, len) => {
                let f = OpenOptions::new().append(true).open(fs, p)?;
                f.write_all_at(&Self::data(len, 1), 0)
            }
            Op::Overwrite(p, off, len) => open_w(p)?.write_all_at(&Self::data(len, 2), off),
            Op::Sparse(p, gap, len) => {
                let f = open_w(p)?;
                let end = f.metadata()?.size;
                f.write_all_at(&Self::data(len, 3), end + gap)
            }
            Op::Link(a, b) => fs.hard_link(a, b),
            Op::Unlink(p) => fs.remove_file(p),
            Op::Rename(a, b) => fs.rename_path(a, b),
            Op::Truncate(p, size) => open_w(p)?.set_len(size),
            Op::Rmdir(p) => fs.remove_dir(p),
        }
    }
}

/// The image every workload starts from: directories A, A/C, B, D (D empty but with a
/// directory block); files foo (8 KiB), bar (100 B), A/bar (5000 B, with stale bytes past
/// its EOF that an extension must not expose), A/C/foo (empty); a symlink lnk whose target
/// needs a data block.
pub fn populate(fs: &Fs) -> io::Result<()> {
    fs.create_dir_all("/A/C")?;
    fs.create_dir("/B")?;
    fs.create_dir("/D")?;
    fs.write_file("/D/x", b"")?;
    fs.remove_file("/D/x")?;
    fs.write_file("/foo", &Op::data(8192, 7))?;
    fs.write_file("/bar", &Op::data(100, 8))?;
    fs.write_file("/A/bar", &Op::data(6000, 9))?;
    OpenOptions::new()
        .write(true)
        .open(fs, "/A/bar")?
        .set_len(5000)?;
    fs.write_file("/A/C/foo", b"")?;
    fs.symlink_path("t/".repeat(40), "/lnk")?;
    Ok(())
}

/// seq-1: every single operation.
pub fn seq1() -> Vec<Op> {
    use Op::*;
    vec![
        Creat("/A/foo"),
        Creat("/B/foo"),
        Creat("/A/C/bar"),
        Creat("/baz"),
        Mkdir("/A/D"),
        Mkdir("/B/D"),
        Mkdir("/A/C/D"),
        Mkdir("/E"),
        Falloc("/foo", 8192, 16384),
        Falloc("/A/bar", 0, 4096),
        Falloc("/A/C/foo", 0, 12288),
        Append("/foo", 100),
        Append("/A/bar", 5000),
        Append("/A/C/foo", 4096),
        Overwrite("/foo", 10, 100),
        Overwrite("/foo", 4000, 200),
        Overwrite("/A/bar", 0, 5000),
        Sparse("/foo", 20000, 100),
        Sparse("/A/C/foo", 4096, 10),
        Link("/foo", "/A/foo"),
        Link("/A/bar", "/B/bar"),
        Link("/bar", "/A/C/baz"),
        Unlink("/foo"),
        Unlink("/A/bar"),
        Unlink("/A/C/foo"),
        Rename("/foo", "/bar"),
        Rename("/foo", "/A/foo"),
        Rename("/A/bar", "/B/bar"),
        Rename("/bar", "/A/C/foo"),
        Rename("/A/C", "/B/C"),
        Rename("/A", "/B/A"),
        Rename("/B", "/A/C/B"),
        Truncate("/foo", 100),
        Truncate("/foo", 0),
        Truncate("/A/bar", 20000),
        Truncate("/bar", 4096),
        Rmdir("/B"),
        Rmdir("/A/C"),
        Rmdir("/A"),
        Rmdir("/D"),
        Unlink("/lnk"),
        Rename("/lnk", "/A/lnk"),
        Truncate("/A/bar", 5500),
    ]
}

/// seq-2: every ordered pair of seq-1 operations.
pub fn seq2() -> Vec<Vec<Op>> {
    let ops = seq1();
    ops.iter()
        .flat_map(|a| ops.iter().map(move |b| vec![a.clone(), b.clone()]))
        .collect()
}

/// A random sequence of up to `max_len` seq-1 operations, reproducible by `seed`.
pub fn random(seed: u64, max_len: usize) -> Vec<Op> {
    let ops = seq1();
    let mut rng = fastrand::Rng::with_seed(seed);
    let n = rng.usize(1..=max_len);
    (0..n)
        .map(|_| ops[rng.usize(0..ops.len())].clone())
        .collect()
}
