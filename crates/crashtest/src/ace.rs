//! ACE workloads for persistent memory (CrashMonkey/Chipmunk): single operations (seq-1) and
//! ordered pairs (seq-2) of creat, mkdir, mknod, symlink, falloc (KEEP_SIZE and mode 0),
//! punch hole, write (append, overwrite, sparse), direct-map store + sync, link, unlink
//! (also while open), rename (plain, exchange, noreplace), truncate, chmod, chown, utimens
//! and rmdir over a small namespace, run on a pre-populated image; plus random sequences
//! drawn from the same operations.
//!
//! Every operation of a workload must succeed and change the tree (the oracle reports a
//! failed or no-op operation as a violation): seq-2 keeps only the pairs whose second
//! operation still applies after the first, and random sequences draw only operations that
//! apply at their point (see [`valid`]).

use std::io;
use std::sync::OnceLock;

use nvmfs::{Fs, MappingKind, OpenOptions, RenameFlags, SetTime};

use crate::oracle::{self, Loose, Tree};

/// Where [`Op::UnlinkOpen`] writes through its handle after the unlink: (offset, length).
pub const UNLINK_OPEN_WRITE: (u64, usize) = (100, 3000);

/// A symlink target too long to be stored inline (more than 40 bytes): it needs a data block.
pub const LONG_TARGET: &str =
    "a/long/symlink/target/that/needs/its/own/data/block/because/it/is/long";

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
    /// chmod to the permission bits.
    Chmod(&'static str, u32),
    /// chown to (uid, gid).
    Chown(&'static str, u32, u32),
    /// utimensat with explicit (atime, mtime) in nanoseconds.
    Utimens(&'static str, i64, i64),
    /// mknod with (mode including the type, rdev).
    Mknod(&'static str, u32, u64),
    /// symlink(target, link).
    Symlink(&'static str, &'static str),
    /// fallocate(PUNCH_HOLE | KEEP_SIZE) of [off, off+len): not atomic (GUARANTEES.md §4).
    Punch(&'static str, u64, u64),
    /// fallocate mode 0 of [off, off+len): may grow the size.
    FallocGrow(&'static str, u64, u64),
    /// rename with RENAME_EXCHANGE.
    Exchange(&'static str, &'static str),
    /// rename with RENAME_NOREPLACE.
    RenameNoreplace(&'static str, &'static str),
    /// Open, unlink, write through the handle, close (frees the inode at the close).
    UnlinkOpen(&'static str),
    /// Direct map of the file, store `len` bytes at `off`, sync, drop the map.
    DirectStore(&'static str, u64, usize),
    /// Append 16 KiB chunks (one step each) until the image is full: succeeds when at least
    /// one chunk went in and the last write stopped short or met ENOSPC.
    FillUp(&'static str),
    /// The operation must fail with this errno and change nothing (abandon paths).
    MustFail(&'static Op, i32),
}

fn split(p: &str) -> (&str, &[u8]) {
    let i = p.rfind('/').expect("absolute path");
    (if i == 0 { "/" } else { &p[..i] }, &p.as_bytes()[i + 1..])
}

impl Op {
    /// What a crash in the middle of step `step` (see [`Op::run_marked`]) may leave of the
    /// one inode the step changes outside the journal (GUARANTEES.md §3, §3a, §4); `steps[0]`
    /// is the state before the operation, `steps[step]` the state before the step.
    pub fn loose(&self, step: usize, steps: &[Tree]) -> Loose {
        let before = &steps[step];
        let ino = |p: &str| before.get(p).map(|e| e.ino);
        let size = |p: &str| before.get(p).map_or(0, |e| e.size);
        match *self {
            // Step 0: the map's creation fills holes in journal transactions, 200 holes each.
            Op::DirectStore(p, ..) if step == 0 => Loose {
                ino: ino(p),
                blocks: true,
                ..Loose::default()
            },
            // fallocate of more than 200 holes: one transaction per 200 (§4).
            Op::Falloc(p, _, len) | Op::FallocGrow(p, _, len) if len > 200 * 4096 => Loose {
                ino: ino(p),
                blocks: true,
                ..Loose::default()
            },
            // Each step appends one chunk.
            Op::FillUp(p) => Loose {
                ino: steps[0].get(p).map(|e| e.ino),
                times: true,
                ..Loose::default()
            },
            // Step 1: the write through the handle after the unlink, visible under another
            // hard link if there is one (step 0, the unlink, and 2, the close, are atomic).
            Op::UnlinkOpen(p) if step == 1 => Loose {
                ino: steps[0].get(p).map(|e| e.ino),
                times: true,
                torn: Some((UNLINK_OPEN_WRITE.0, UNLINK_OPEN_WRITE.1 as u64)),
                blocks: true,
            },
            Op::UnlinkOpen(_) => Loose::default(),
            // In place: each word old or new; times stored after the data.
            Op::Overwrite(p, off, len) | Op::DirectStore(p, off, len) => Loose {
                ino: ino(p),
                times: true,
                torn: Some((off, len as u64)),
                blocks: true,
            },
            // Not atomic: any part of the range may read as zeros already; the transaction
            // with the block count and times comes last.
            Op::Punch(p, off, len) => Loose {
                ino: ino(p),
                times: true,
                torn: Some((off, len)),
                blocks: true,
            },
            // The size is stored first, the times after it in the same line.
            Op::Append(p, _) | Op::Sparse(p, ..) => Loose {
                ino: ino(p),
                times: true,
                ..Loose::default()
            },
            Op::Truncate(p, to) if to > size(p) => Loose {
                ino: ino(p),
                times: true,
                ..Loose::default()
            },
            _ => Loose::default(),
        }
    }

    /// The bytes an operation writes (`seed` tells the operations apart).
    pub fn data(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
            .collect()
    }

    /// Whether the operation is expected to fail ([`Op::MustFail`]).
    pub fn must_fail(&self) -> bool {
        matches!(self, Op::MustFail(..))
    }

    /// Runs the operation.
    pub fn run(&self, fs: &Fs) -> io::Result<()> {
        self.run_marked(fs, &mut || {})
    }

    /// Runs the operation, calling `mark` between its steps when it is made of several
    /// file-system calls that each commit on their own (unlink while open: unlink, write
    /// through the handle, close; direct store: map creation, which fills holes, then
    /// store + sync). A crash may leave the state after any step.
    pub fn run_marked(&self, fs: &Fs, mark: &mut dyn FnMut()) -> io::Result<()> {
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
            Op::Overwrite(p, off, len) => {
                // The complement of the bytes there (zeros past EOF): an overwrite always
                // changes what it covers, so it changes the tree even when its times were
                // already stamped this clock tick (GUARANTEES.md §9). With fixed data, a
                // repeated overwrite changed nothing or something depending on the clock.
                let f = OpenOptions::new().read(true).write(true).open(fs, p)?;
                let mut data = vec![0u8; len];
                let mut got = 0;
                while got < len {
                    match f.read_at(&mut data[got..], off + got as u64)? {
                        0 => break,
                        n => got += n,
                    }
                }
                data.iter_mut().for_each(|b| *b = !*b);
                f.write_all_at(&data, off)
            }
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
            Op::Chmod(p, perm) => fs.set_permissions(p, perm),
            Op::Chown(p, uid, gid) => fs.set_owner(p, Some(uid), Some(gid)),
            Op::Utimens(p, a, m) => fs.set_times(p, Some(SetTime::At(a)), Some(SetTime::At(m))),
            Op::Mknod(p, mode, rdev) => {
                let (dir, name) = split(p);
                let parent = fs.metadata(dir)?.ino;
                fs.mknod(parent, name, mode, 1000, 1000, rdev).map(drop)
            }
            Op::Symlink(target, p) => fs.symlink_path(target, p),
            Op::Punch(p, off, len) => open_w(p)?.allocate(
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                len,
            ),
            Op::FallocGrow(p, off, len) => open_w(p)?.allocate(0, off, len),
            Op::Exchange(a, b) | Op::RenameNoreplace(a, b) => {
                let ((da, na), (db, nb)) = (split(a), split(b));
                let (pa, pb) = (fs.metadata(da)?.ino, fs.metadata(db)?.ino);
                let flags = RenameFlags {
                    exchange: matches!(self, Op::Exchange(..)),
                    noreplace: matches!(self, Op::RenameNoreplace(..)),
                };
                fs.rename(pa, na, pb, nb, flags)
            }
            Op::UnlinkOpen(p) => {
                let f = OpenOptions::new().read(true).write(true).open(fs, p)?;
                fs.remove_file(p)?;
                mark();
                let (off, len) = UNLINK_OPEN_WRITE;
                f.write_all_at(&Self::data(len, 4), off)?;
                let mut back = vec![0; len];
                f.read_exact_at(&mut back, off)?;
                if back != Self::data(len, 4) {
                    return Err(io::Error::other("unlinked file reads back wrong"));
                }
                mark();
                drop(f);
                Ok(())
            }
            Op::DirectStore(p, off, len) => {
                let f = OpenOptions::new().read(true).write(true).open(fs, p)?;
                let mut m = f.map_direct()?;
                mark();
                m.store(off, &Self::data(len, 5))?;
                m.sync()
            }
            Op::FillUp(p) => {
                let f = OpenOptions::new().append(true).open(fs, p)?;
                let chunk = Self::data(16 << 10, 6);
                let mut wrote = 0u64;
                loop {
                    let end = f.metadata()?.size;
                    match f.write_at(&chunk, end) {
                        Ok(n) if n == chunk.len() => wrote += n as u64,
                        Ok(n) => {
                            if n > 0 {
                                wrote += n as u64;
                                mark();
                            }
                            break;
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                        Err(e) => return Err(e),
                    }
                    mark();
                }
                if wrote == 0 {
                    return Err(io::Error::other("nothing written before ENOSPC"));
                }
                Ok(())
            }
            Op::MustFail(op, errno) => match op.run(fs) {
                Err(e) if e.raw_os_error() == Some(errno) => Ok(()),
                Err(e) => Err(io::Error::other(format!(
                    "{op:?}: {e}, expected errno {errno}"
                ))),
                Ok(()) => Err(io::Error::other(format!(
                    "{op:?} succeeded, expected errno {errno}"
                ))),
            },
        }
    }
}

/// Whether every operation of `ops` succeeds and changes the tree, run from the populated
/// image (the workloads keep only such sequences; the oracle checks it again under the
/// tracer).
pub fn valid(ops: &[Op]) -> bool {
    valid_on(ops, MappingKind::HashFs)
}

/// [`valid`] on an image formatted with `mapping` (what applies may differ between
/// mappings: block counts, ENOSPC).
pub fn valid_on(ops: &[Op], mapping: MappingKind) -> bool {
    valid_prefix_on(ops, mapping) == ops.len()
}

/// How many leading operations of `ops` succeed and change the tree (HashFS).
pub fn valid_prefix(ops: &[Op]) -> usize {
    valid_prefix_on(ops, MappingKind::HashFs)
}

/// [`valid_prefix`] on an image formatted with `mapping`.
pub fn valid_prefix_on(ops: &[Op], mapping: MappingKind) -> usize {
    let Ok(fs) = scratch_on(mapping) else {
        return 0;
    };
    let mut t = oracle::tree(&fs);
    for (k, op) in ops.iter().enumerate() {
        if op.run(&fs).is_err() {
            return k;
        }
        let next = oracle::tree(&fs);
        if (next == t) != op.must_fail() {
            return k;
        }
        t = next;
    }
    ops.len()
}

/// A populated in-memory image formatted with `mapping`.
pub(crate) fn scratch_on(mapping: MappingKind) -> io::Result<Fs> {
    let fs = Fs::format_pm_with(nvmfs::media::Pm::in_memory(oracle::IMAGE_BYTES), mapping)?;
    populate(&fs)?;
    Ok(fs)
}

/// The image every workload starts from: directories A, A/C, A/C/E (empty), B, D (D empty but with a
/// directory block); files foo (8 KiB), bar (100 B), A/bar (5000 B, with stale bytes past
/// its EOF that an extension must not expose), A/C/foo (empty); a symlink lnk whose target
/// needs a data block.
pub fn populate(fs: &Fs) -> io::Result<()> {
    fs.create_dir_all("/A/C/E")?;
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
        Rmdir("/A/C/E"),
        Rmdir("/D"),
        Unlink("/lnk"),
        Rename("/lnk", "/A/lnk"),
        Truncate("/A/bar", 5500),
        Chmod("/foo", 0o600),
        Chmod("/A", 0o700),
        Chown("/bar", 1234, 5678),
        Chown("/A/C", 42, 43),
        Utimens("/foo", 1_000_000_007, 2_000_000_009),
        Utimens("/A/C", 3_000_000_011, 4_000_000_013),
        Mknod("/A/fifo", libc::S_IFIFO | 0o640, 0),
        Mknod("/B/null", libc::S_IFCHR | 0o666, libc::makedev(1, 3)),
        Mknod("/A/C/reg", libc::S_IFREG | 0o604, 0),
        Symlink("short", "/A/sl"),
        Symlink(LONG_TARGET, "/B/sl"),
        Punch("/foo", 4096, 4096),
        Punch("/foo", 100, 5000),
        Punch("/A/bar", 4000, 1000),
        FallocGrow("/bar", 0, 10000),
        FallocGrow("/A/C/foo", 4096, 5000),
        Exchange("/foo", "/bar"),
        Exchange("/A", "/B"),
        Exchange("/foo", "/A/C"),
        RenameNoreplace("/foo", "/A/foo"),
        RenameNoreplace("/A/C", "/B/C"),
        UnlinkOpen("/foo"),
        UnlinkOpen("/A/bar"),
        DirectStore("/foo", 100, 300),
        DirectStore("/A/bar", 4000, 1000),
        DirectStore("/bar", 0, 100),
    ]
}

/// Names of `n` files in directory `dir`, long enough (60 bytes) that a directory of them
/// needs several blocks.
fn many_names(dir: &str, n: usize) -> Vec<&'static str> {
    (0..n)
        .map(|i| &*Box::leak(format!("{dir}/{i:03}-{}", "n".repeat(56)).into_boxed_str()))
        .collect()
}

/// Workloads on bigger images (see `crate::big`): (name, image bytes, operations).
pub fn big() -> Vec<(&'static str, u64, Vec<Op>)> {
    use Op::*;
    // 276 blocks: more than 200 hole fills, so two transactions.
    const HOLES: u64 = 276 * 4096;
    let sparse = || vec![Creat("/big"), Truncate("/big", HOLES)];
    let mut dir = vec![Mkdir("/M")];
    let names = many_names("/M", 100);
    dir.extend(names.iter().map(|n| Creat(n)));
    dir.extend(names.iter().step_by(3).map(|n| Unlink(n)));
    dir.extend(
        names
            .iter()
            .skip(1)
            .step_by(6)
            .map(|n| Rename(n, "/B/moved")),
    );
    dir.extend(
        names
            .iter()
            .skip(2)
            .step_by(3)
            .take(5)
            .map(|n| Append(n, 100)),
    );
    vec![
        ("overwrite filling 276 holes", 8 << 20, {
            let mut v = sparse();
            v.push(Overwrite("/big", 0, HOLES as usize));
            v
        }),
        ("fallocate KEEP_SIZE filling 276 holes", 8 << 20, {
            let mut v = sparse();
            v.push(Falloc("/big", 0, HOLES));
            v
        }),
        ("direct map over 276 holes", 8 << 20, {
            let mut v = sparse();
            v.push(DirectStore("/big", 4000, 10000));
            v
        }),
        (
            "fallocate mode 0 of 300 blocks past EOF, then punch",
            8 << 20,
            vec![
                FallocGrow("/A/C/foo", 0, 300 * 4096),
                Punch("/A/C/foo", 4096, 250 * 4096),
            ],
        ),
        (
            "multi-block directory: 150 creates, unlinks, renames, appends",
            2 << 20,
            dir,
        ),
        (
            "ENOSPC: fill the image, fail cleanly, free, reuse",
            512 << 10,
            vec![
                FillUp("/bar"),
                MustFail(&FallocGrow("/foo", 0, 1 << 20), libc::ENOSPC),
                // /foo ends on a block boundary: nothing fits, nothing is written.
                MustFail(&Append("/foo", 64 << 10), libc::ENOSPC),
                Truncate("/bar", 100),
                Creat("/baz"),
                Append("/baz", 20000),
            ],
        ),
    ]
}

/// seq-2: every ordered pair of seq-1 operations in which both apply (see [`valid`]) on
/// HashFS; computed once per process.
pub fn seq2() -> Vec<Vec<Op>> {
    seq2_on(MappingKind::HashFs)
}

/// [`seq2`] with validity decided on an image formatted with `mapping`; computed once per
/// process and mapping.
pub fn seq2_on(mapping: MappingKind) -> Vec<Vec<Op>> {
    static PAIRS: [OnceLock<Vec<Vec<Op>>>; MappingKind::ALL.len()] =
        [const { OnceLock::new() }; MappingKind::ALL.len()];
    let slot = MappingKind::ALL
        .iter()
        .position(|&m| m == mapping)
        .expect("a known mapping");
    PAIRS[slot]
        .get_or_init(|| {
            let ops = seq1();
            ops.iter()
                .flat_map(|a| ops.iter().map(move |b| vec![a.clone(), b.clone()]))
                .filter(|w| valid_on(w, mapping))
                .collect()
        })
        .clone()
}

/// A random sequence of up to `max_len` seq-1 operations, reproducible by `seed`: each draw
/// that would fail or change nothing at its point is drawn again (up to 20 times, then the
/// sequence ends there).
pub fn random(seed: u64, max_len: usize) -> Vec<Op> {
    random_on(seed, max_len, MappingKind::HashFs)
}

/// [`random`] with each draw tried on an image formatted with `mapping`.
pub fn random_on(seed: u64, max_len: usize, mapping: MappingKind) -> Vec<Op> {
    let ops = seq1();
    let mut rng = fastrand::Rng::with_seed(seed);
    let n = rng.usize(1..=max_len);
    let Ok(fs) = scratch_on(mapping) else {
        return Vec::new();
    };
    let mut t = oracle::tree(&fs);
    let mut out = Vec::new();
    'grow: while out.len() < n {
        for _ in 0..20 {
            let op = ops[rng.usize(0..ops.len())].clone();
            // A failed operation may have changed the scratch image; try it on a copy.
            let trial = match Fs::mount_pm(
                nvmfs::media::Pm::from_bytes(&fs.snapshot()),
                &nvmfs::MountOptions::default(),
                None,
                None,
            ) {
                Ok(f) => f,
                Err(_) => break 'grow,
            };
            if op.run(&trial).is_ok() {
                let next = oracle::tree(&trial);
                if next != t {
                    op.run(&fs).expect("same operation on the same state");
                    t = oracle::tree(&fs);
                    out.push(op);
                    continue 'grow;
                }
            }
        }
        break;
    }
    out
}
