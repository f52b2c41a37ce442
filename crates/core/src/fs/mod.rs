//! The file system: shared state (`Inner`), mount/format, namespace operations, the data path
//! and the std::fs-like API on top. Every operation is durable and atomic when it returns.

mod data;
pub mod dir;
mod direct;
mod locks;
mod lookups;
pub(crate) mod mount;
mod node;
mod ops;
mod path;
mod peers;
mod probe;
#[cfg(test)]
mod races;
mod ranges;
mod rename;
mod tiered;

use std::io;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use parking_lot::{Mutex, RwLockReadGuard, RwLockWriteGuard};

pub use direct::DirectMap;
pub use mount::{FormatOptions, MountOptions, RecoveryReport, TierFormat};
pub use ops::{DirEntry, RenameFlags, SetAttr, SetTime, Statfs};
pub use path::{File, OpenOptions};
pub use probe::{MappingProbe, ProbeFile};

use crate::alloc::InodeAlloc;
use crate::journal::{Journal, Tx};
use crate::layout::inode::{FileType, Inode, INODE_SIZE, O_GENERATION, O_MODE, O_NLINK};
use crate::layout::superblock::{Geometry, Superblock};
use crate::mapping::FileMap;
use crate::media::Pm;
use dir::{DirCache, DirIndex, DirState};
use locks::{OpenTable, Stripes};
pub(crate) use peers::Peers;

/// A mounted nvmfs image. Cheap to clone; `Send + Sync`: operations on different files and
/// directories run in parallel and readers do not block readers.
#[derive(Clone)]
pub struct Fs {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub pm: Pm,
    pub geo: Geometry,
    pub sb: Superblock,
    pub map: Box<dyn FileMap>,
    pub journal: Journal,
    pub inodes: InodeAlloc,
    pub stripes: Stripes,
    pub dirs: DirCache,
    pub open: OpenTable,
    /// Serialises directory moves between parents, so the loop check sees a stable tree.
    pub rename_lock: Mutex<()>,
    pub read_only: bool,
    pub hash_seed: u64,
    pub path: Option<PathBuf>,
    pub recovery: RecoveryReport,
    /// Holds the image's exclusive lock (flock) while mounted.
    pub _image: Option<std::fs::File>,
    pub unmounted: AtomicBool,
    /// The other processes of a shared mount (`nvmfs::shared`); `None` for a plain mount.
    pub peers: Option<Arc<dyn peers::Peers>>,
    /// The SSD tier of a tiered image (docs/TIER.md); `None` for a PM-only image.
    pub tier: Option<crate::tier::Tier>,
}

pub(crate) fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

/// The errno a POSIX front end (the FUSE adapter, the `nvmfs run` preload) reports for an
/// error of this library: its raw errno when it has one (nearly every error does), EIO for
/// damaged media (`InvalidData`), otherwise the closest errno to its kind.
pub fn errno_of(e: &io::Error) -> i32 {
    if let Some(n) = e.raw_os_error() {
        return n;
    }
    match e.kind() {
        io::ErrorKind::InvalidData => libc::EIO,
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::PermissionDenied => libc::EACCES,
        io::ErrorKind::AlreadyExists => libc::EEXIST,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::OutOfMemory => libc::ENOMEM,
        io::ErrorKind::Unsupported => libc::EOPNOTSUPP,
        // A full mapping structure (the cuckoo table) says why, and is still ENOSPC.
        io::ErrorKind::StorageFull => libc::ENOSPC,
        _ => libc::EIO,
    }
}

/// Nanoseconds since the Unix epoch.
pub(crate) fn now_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// The start of the current clock tick (Linux's coarse real-time clock, the one the kernel
/// stamps inodes with): never later than `now_ns()`, at most one tick earlier.
pub(crate) fn tick_start_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME_COARSE)
}

/// One tick of the coarse clock (its resolution, asked once): a jiffy, 1-10 ms.
pub(crate) fn tick_ns() -> i64 {
    static TICK: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *TICK.get_or_init(|| {
        let mut ts = zero_timespec();
        // SAFETY: clock_getres writes the struct we pass.
        let ok = unsafe { libc::clock_getres(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0;
        // Without an answer, a zero-length tick makes every overwrite stamp (exact times).
        if ok {
            timespec_ns(ts).max(0)
        } else {
            0
        }
    })
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = zero_timespec();
    // SAFETY: clock_gettime writes the struct we pass.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    timespec_ns(ts)
}

fn zero_timespec() -> libc::timespec {
    libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    }
}

fn timespec_ns(ts: libc::timespec) -> i64 {
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Attributes of an inode, as `stat` reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    pub ino: u64,
    pub file_type: FileType,
    /// Permission bits including setuid, setgid and sticky (mode & 0o7777).
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 4 KiB data blocks mapped to the file.
    pub blocks: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub generation: u32,
    pub rdev: u64,
}

impl Metadata {
    pub(crate) fn from_inode(ino: u32, i: &Inode) -> Metadata {
        let file_type = i.file_type().unwrap_or(FileType::File);
        let rdev = matches!(file_type, FileType::CharDevice | FileType::BlockDevice)
            .then(|| i.rdev())
            .unwrap_or(0);
        Metadata {
            ino: ino as u64,
            file_type,
            perm: i.mode & 0o7777,
            nlink: i.nlink,
            uid: i.uid,
            gid: i.gid,
            size: i.size,
            blocks: i.blocks,
            atime_ns: i.atime_ns,
            mtime_ns: i.mtime_ns,
            ctime_ns: i.ctime_ns,
            generation: i.generation,
            rdev,
        }
    }

    pub fn ino(&self) -> u64 {
        self.ino
    }
    pub fn len(&self) -> u64 {
        self.size
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    pub fn is_dir(&self) -> bool {
        self.file_type == FileType::Dir
    }
    pub fn is_file(&self) -> bool {
        self.file_type == FileType::File
    }
    pub fn is_symlink(&self) -> bool {
        self.file_type == FileType::Symlink
    }
    /// The full st_mode (type and permission bits).
    pub fn mode(&self) -> u32 {
        self.file_type.mode_bits() | self.perm
    }
    /// st_blocks: 512-byte units.
    pub fn st_blocks(&self) -> u64 {
        self.blocks * 8
    }
    pub fn modified(&self) -> std::time::SystemTime {
        ns_to_time(self.mtime_ns)
    }
    pub fn accessed(&self) -> std::time::SystemTime {
        ns_to_time(self.atime_ns)
    }
}

pub(crate) fn ns_to_time(ns: i64) -> std::time::SystemTime {
    let d = std::time::Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        std::time::UNIX_EPOCH + d
    } else {
        std::time::UNIX_EPOCH - d
    }
}

impl Inner {
    /// Reads and validates in-use inode `ino`; ENOENT for a free or out-of-range number,
    /// EIO (naming the structure and offset) for a damaged record.
    pub fn inode(&self, ino: u32) -> io::Result<Inode> {
        if ino == 0 || ino as u64 >= self.geo.inode_count {
            return Err(errno(libc::ENOENT));
        }
        let off = self.geo.inode_off(ino as u64);
        let raw = Inode::decode_raw(&self.pm.read_array::<{ INODE_SIZE as usize }>(off));
        if raw.is_free() {
            return Err(errno(libc::ENOENT));
        }
        raw.validate(off, self.geo.inode_count)
            .map_err(corrupt_to_io)?;
        Ok(raw)
    }

    pub fn write_inode(&self, tx: &mut Tx<'_>, ino: u32, i: &Inode) {
        tx.write(self.geo.inode_off(ino as u64), &i.encode());
    }

    pub fn tx(&self) -> Tx<'_> {
        self.journal.begin(&self.pm)
    }

    pub fn check_writable(&self) -> io::Result<()> {
        if self.read_only {
            Err(errno(libc::EROFS))
        } else {
            Ok(())
        }
    }

    /// The DRAM state of directory `ino` (ENOTDIR if it is not one).
    ///
    /// The state is looked up (or made) under the inode's stripe lock, which a create or a
    /// free of that number needs too: the generation read is the record's until the cache
    /// has answered. Outside the lock, a thread that read the record just before its
    /// directory was removed and the number made a new directory would replace the new
    /// directory's state with one for the old generation, and then a third one for the new:
    /// two live states of one directory, whose index locks no longer exclude each other (a
    /// lookup in one could find an entry whose removal, and the free of its inode, went
    /// through the other).
    pub fn dir_state(&self, ino: u32) -> io::Result<(Arc<DirState>, Inode)> {
        let _g = self.stripes.read(ino);
        let inode = self.inode(ino)?;
        if !inode.is_dir() {
            return Err(errno(libc::ENOTDIR));
        }
        Ok((self.dirs.get(ino, inode.generation), inode))
    }

    /// The DRAM state of live directory `ino`, for operations that do not need its inode.
    ///
    /// A cached state is checked against the inode with two single-word loads (type and link
    /// count, generation) instead of reading the record under its stripe lock: every create
    /// or remove in a directory holds the directory inode's stripe for its transaction, and
    /// lookups in a busy directory would queue behind it. The words are safe to read
    /// unlocked: a live directory's type and generation do not change, freeing the record is
    /// one atomic store of the first word, a transaction rewrites the record with atomic word
    /// stores (`journal::put_in_place`: never a plain copy these loads could race), and a count
    /// caught mid-update only sends the call to the locked path.
    pub fn dir(&self, ino: u32) -> io::Result<Arc<DirState>> {
        if let Some(ds) = self.dirs.peek(ino) {
            if self.dir_words(ino) == Some((ds.generation, true)) {
                return Ok(ds);
            }
        }
        self.dir_state(ino).map(|(ds, _)| ds)
    }

    /// Without a lock, two word loads: if record `ino` is an in-use directory, its generation
    /// and whether it has links.
    #[inline]
    pub fn dir_words(&self, ino: u32) -> Option<(u32, bool)> {
        if ino == 0 || ino as u64 >= self.geo.inode_count {
            return None;
        }
        let off = self.geo.inode_off(ino as u64);
        // mode and nlink share the record's first word (FORMAT.md).
        const _: () = assert!(O_MODE == 0 && O_NLINK == 4 && O_GENERATION.is_multiple_of(8));
        let first = self.pm.load_u64(off);
        let (mode, nlink) = (first as u32, (first >> 32) as u32);
        let generation = self.pm.load_u64(off + O_GENERATION as u64) as u32;
        (mode & libc::S_IFMT == libc::S_IFDIR).then_some((generation, nlink > 0))
    }

    /// Read access to a directory's index, building it on first use.
    pub fn index_read<'a>(
        &self,
        ino: u32,
        ds: &'a DirState,
    ) -> io::Result<RwLockReadGuard<'a, Option<DirIndex>>> {
        // A plain shared lock first: an upgradable read would admit one lookup at a time
        // (parking_lot allows a single upgradable holder), serialising every lookup in a
        // busy directory. Only the first use takes the lock exclusively to build the index.
        let g = ds.index.read();
        if g.is_some() {
            return Ok(g);
        }
        drop(g);
        let mut w = ds.index.write();
        if w.is_none() {
            self.load_index(ino, ds, &mut w)?;
        }
        Ok(RwLockWriteGuard::downgrade(w))
    }

    /// Write access to a directory's index, building it on first use.
    pub fn index_write<'a>(
        &self,
        ino: u32,
        ds: &'a DirState,
    ) -> io::Result<RwLockWriteGuard<'a, Option<DirIndex>>> {
        let mut w = ds.index.write();
        // Every change to a directory's entries goes through here: the lookup cache stops
        // trusting its answers about it (lookups.rs).
        self.dirs.changes.bump(ino);
        if w.is_none() {
            self.load_index(ino, ds, &mut w)?;
        }
        Ok(w)
    }

    fn load_index(&self, ino: u32, ds: &DirState, slot: &mut Option<DirIndex>) -> io::Result<()> {
        let _g = self.stripes.read(ino);
        let inode = self.inode(ino)?;
        if inode.generation != ds.generation || !inode.is_dir() {
            return Err(errno(libc::ENOENT));
        }
        let idx = DirIndex::load(
            &self.pm,
            &self.geo,
            self.map.as_ref(),
            ino,
            &inode,
            self.hash_seed,
        )
        .map_err(corrupt_to_io)?;
        *slot = Some(idx);
        Ok(())
    }

    pub fn name_hash(&self, name: &[u8]) -> u64 {
        dir::name_hash(self.hash_seed, name)
    }
}

pub(crate) fn corrupt_to_io(c: crate::layout::Corrupted) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, c)
}
