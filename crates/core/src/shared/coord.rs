//! The coordination file: one per image, in /dev/shm, mapped by every process attached to
//! the image. Nothing in it is needed to read the image; it holds only what the attached
//! processes share while they run (see ARCHITECTURE.md §7 for the layout and protocol):
//!
//! - the mapping (`MAP_LEN` bytes): a header (magic, the ownership gate, the shared count of
//!   used blocks, the sequence of directory changes), the process table, the ring of changed
//!   directories, the list of orphans left open elsewhere, and the open file descriptions;
//! - byte-range locks (open file description locks, far past the mapped bytes), which the
//!   kernel drops when their description's last descriptor closes, however the process ends:
//!   `DMS` (every attached process holds it shared; exclusive means "alone"), one per process
//!   slot (held by the process: alive), and per inode a "mapped" byte held shared by every
//!   direct map of that inode.
//!
//! Beside it, `DESC_FILES` empty description files (`<coordination file>.d<k>`): each open
//! file description is a descriptor of description file `slot % DESC_FILES` holding a lock on
//! its slot's byte. They are spread over several files because the kernel keeps one list of
//! locks per file and walks all of it under one spin lock at every lock call and at every
//! close of any descriptor of that file: with one file, each close cost as much as there
//! were descriptions open in all processes (docs/LAB.md). Whether an inode is open somewhere
//! is read from the description slots in use (`CoordMap::desc_high`), so that reusing a
//! description for another file takes no lock call.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use super::sys;

// Version 2: inodes open somewhere are found in the description slots, not by lock.
// Version 3: descriptions live in the description files, not in the coordination file.
pub const MAGIC: u64 = u64::from_le_bytes(*b"nvmfsCo3");
pub const MAP_LEN: usize = 4 << 20;

// Header words, each on its own cache line where processes contend.
const H_MAGIC: usize = 0;
const H_GATE: usize = 64;
const H_WAKE: usize = 128;
const H_USED: usize = 192;
const H_SEQ: usize = 256;
const H_NEXT_DESC: usize = 320;
const H_ORPHAN_OVERFLOW: usize = 384;
const H_DESC_HIGH: usize = 448;

/// Process slots: (epoch u32, pid u32) each.
pub const PROCS: usize = 4000;
const PROC_OFF: usize = 4096;
/// Ring of directories changed, by sequence number.
pub const RING: u64 = 4096;
const RING_OFF: usize = 40960;
/// Orphans (inode numbers, 0 = empty) left because another description held them.
pub const ORPHANS: usize = 1024;
const ORPHAN_OFF: usize = RING_OFF + RING as usize * 8;
/// Open file descriptions: 32 bytes each.
pub const DESCS: usize = 65536;
const DESC_OFF: usize = ORPHAN_OFF + ORPHANS * 4;
const DESC_SIZE: usize = 32;
const _: () = assert!(DESC_OFF + DESCS * DESC_SIZE <= MAP_LEN);
const _: () = assert!(PROC_OFF + PROCS * 8 <= RING_OFF && DESC_OFF.is_multiple_of(64));

/// Description files beside the coordination file; slot `s` is in file `s % DESC_FILES`.
pub const DESC_FILES: usize = 16;
const _: () = assert!(DESCS.is_multiple_of(DESC_FILES));

// Lock bytes.
pub const DMS_LOCK: u64 = 0;
pub const PROC_LOCK: u64 = 1 << 20;
pub const DESC_LOCK: u64 = 1 << 24;
pub const MAP_LOCK: u64 = 1 << 33;
/// A description's file position encodes its slot (the offset is otherwise unused, and
/// survives exec with the descriptor).
pub const DESC_POS: u64 = 1 << 40;

/// The mapped coordination file of one image, shared by the handles of this process.
pub struct CoordMap {
    base: *mut u8,
    pub path: CString,
    /// The description files, `DESC_FILES` of them.
    descs: Vec<DescFile>,
}

/// One description file as this process holds it.
pub struct DescFile {
    pub path: CString,
    /// A descriptor holding no lock of its own (close-on-exec, at or above the floor): asks
    /// whether a slot's lock is held, by any description.
    pub fd: RawFd,
    /// (st_dev, st_ino) of the file: how an inherited description is recognised.
    pub id: (u64, u64),
}

// SAFETY: the mapping is only reached through atomics (see the accessors).
unsafe impl Send for CoordMap {}
// SAFETY: as above.
unsafe impl Sync for CoordMap {}

impl Drop for CoordMap {
    fn drop(&mut self) {
        sys::unmap(self.base, MAP_LEN);
        close_desc_files(&self.descs);
    }
}

impl CoordMap {
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= MAP_LEN);
        // SAFETY: an aligned word inside the mapping, which lives as long as self.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn word32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= MAP_LEN);
        // SAFETY: as `word`.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    pub fn gate(&self) -> &AtomicU64 {
        self.word(H_GATE)
    }
    pub fn wake(&self) -> &AtomicU32 {
        self.word32(H_WAKE)
    }
    pub fn used_ptr(&self) -> *mut u64 {
        // SAFETY: inside the mapping.
        unsafe { self.base.add(H_USED) as *mut u64 }
    }
    pub fn seq(&self) -> &AtomicU64 {
        self.word(H_SEQ)
    }
    pub fn next_desc(&self) -> &AtomicU64 {
        self.word(H_NEXT_DESC)
    }
    pub fn orphan_overflow(&self) -> &AtomicU64 {
        self.word(H_ORPHAN_OVERFLOW)
    }
    /// Description slots are taken below this bound only (it grows when they fill up), so
    /// every slot in use is below it: how far a search for an open inode looks.
    pub fn desc_high(&self) -> &AtomicU64 {
        self.word(H_DESC_HIGH)
    }
    pub fn proc_epoch(&self, slot: usize) -> &AtomicU32 {
        self.word32(PROC_OFF + slot * 8)
    }
    pub fn proc_pid(&self, slot: usize) -> &AtomicU32 {
        self.word32(PROC_OFF + slot * 8 + 4)
    }
    pub fn ring(&self, seq: u64) -> &AtomicU64 {
        self.word(RING_OFF + (seq % RING) as usize * 8)
    }
    pub fn orphan(&self, i: usize) -> &AtomicU32 {
        self.word32(ORPHAN_OFF + i * 4)
    }
    pub fn desc_ino(&self, slot: usize) -> &AtomicU64 {
        self.word(DESC_OFF + slot * DESC_SIZE)
    }
    pub fn desc_flags(&self, slot: usize) -> &AtomicI32 {
        // SAFETY: as `word`; the flags are the third 4-byte word of the record.
        unsafe { &*(self.base.add(DESC_OFF + slot * DESC_SIZE + 8) as *const AtomicI32) }
    }
    pub fn desc_offset(&self, slot: usize) -> &AtomicU64 {
        self.word(DESC_OFF + slot * DESC_SIZE + 16)
    }

    /// The description file that description slot `slot` lives in.
    pub fn desc_file(&self, slot: usize) -> &DescFile {
        &self.descs[slot % DESC_FILES]
    }

    /// This process's descriptors of the description files.
    pub fn desc_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.descs.iter().map(|d| d.fd)
    }

    /// Whether any description lives, in any process (one between exec and attach too).
    pub fn any_description(&self) -> bool {
        any_held(&self.descs)
    }

    /// Removes the coordination file and its description files (the last process out,
    /// holding DMS alone, with no description left).
    pub fn remove_files(&self) {
        remove_files(&self.path);
    }
}

fn any_held(descs: &[DescFile]) -> bool {
    descs
        .iter()
        .any(|d| sys::locked_by_other(d.fd, DESC_LOCK, 0))
}

/// Removes the description files of the coordination file at `coord`, then that file: a
/// process killed in between leaves the coordination file, which `sweep_stale` then removes
/// with what is left of the others.
pub fn remove_files(coord: &CStr) {
    for k in 0..DESC_FILES {
        sys::unlink(&desc_file_path(coord.to_bytes(), k));
    }
    sys::unlink(coord);
}

/// The path of description file `k` of the coordination file at `coord`.
fn desc_file_path(coord: &[u8], k: usize) -> CString {
    let mut p = coord.to_vec();
    p.extend_from_slice(format!(".d{k}").as_bytes());
    CString::new(p).expect("a coordination path has no NUL")
}

/// Whether `path` (a descriptor's target, as /proc/self/fd shows it) names one of the
/// description files of the coordination file at `coord`: how a process that exec'd finds
/// the descriptions it inherited before it attaches.
pub fn is_desc_file(coord: &[u8], path: &[u8]) -> bool {
    path.strip_prefix(coord)
        .and_then(|rest| rest.strip_prefix(b".d"))
        .and_then(|k| std::str::from_utf8(k).ok())
        .and_then(|k| k.parse::<usize>().ok())
        .is_some_and(|k| k < DESC_FILES && desc_file_path(coord, k).as_bytes() == path)
}

/// Opens (creating them if needed, with `mode`) the description files of `coord`.
fn open_desc_files(coord: &CStr, mode: u32) -> io::Result<Vec<DescFile>> {
    let mut descs = Vec::with_capacity(DESC_FILES);
    for k in 0..DESC_FILES {
        let path = desc_file_path(coord.to_bytes(), k);
        let opened = sys::open(&path, libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC, 0o600)
            .and_then(|fd| {
                let fd = sys::above_floor(fd);
                sys::fchmod(fd, mode & 0o666);
                let st = sys::fstat(fd);
                if st.is_err() {
                    sys::close(fd);
                }
                st.map(|st| (fd, (st.st_dev, st.st_ino)))
            });
        match opened {
            Ok((fd, id)) => descs.push(DescFile { path, fd, id }),
            Err(e) => {
                close_desc_files(&descs);
                return Err(io::Error::new(
                    e.kind(),
                    format!("description file {}: {e}", path.to_string_lossy()),
                ));
            }
        }
    }
    Ok(descs)
}

fn close_desc_files(descs: &[DescFile]) {
    for d in descs {
        sys::close(d.fd);
    }
}

/// Whether a description lives in any existing description file of `coord` (for a
/// coordination file this process is not attached to).
fn descriptions_alive_at(coord: &CStr) -> bool {
    (0..DESC_FILES).any(|k| {
        let Ok(fd) = sys::open(
            &desc_file_path(coord.to_bytes(), k),
            libc::O_RDWR | libc::O_CLOEXEC,
            0,
        ) else {
            return false;
        };
        let alive = sys::locked_by_other(fd, DESC_LOCK, 0);
        sys::close(fd);
        alive
    })
}

/// Where the coordination file of the image open as `image_fd` lives: in /dev/shm, named
/// after the image file's device and inode, so every path to one image finds the same file.
/// Deliberately not configurable: two processes that disagreed on it would be two writers
/// with no coordination at all.
pub fn coord_path(image_fd: RawFd) -> io::Result<PathBuf> {
    let st = sys::fstat(image_fd)?;
    let dir = Path::new("/dev/shm");
    if !dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "/dev/shm is missing: shared mounts keep their coordination file there",
        ));
    }
    Ok(dir.join(format!("nvmfs-{:x}-{:x}.coord", st.st_dev, st.st_ino)))
}

/// The result of opening the coordination file.
pub struct Opened {
    pub map: CoordMap,
    /// This process's own description of the file: holds DMS (shared, or exclusive while
    /// `alone`) and the process slot lock; used for every "held by another?" query.
    pub fd: RawFd,
    /// No other process is attached (DMS taken exclusively): the caller recovers the image
    /// and then calls `share`.
    pub alone: bool,
}

/// Opens (creating it if needed) the coordination file at `path`, taking DMS. Retries if the
/// last process detached and removed the file meanwhile.
pub fn open(path: &Path, mode: u32) -> io::Result<Opened> {
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    for _ in 0..100 {
        let fd = sys::open(
            &cpath,
            libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
            0o600,
        )
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("coordination file {}: {e}", path.display()),
            )
        })?;
        let fd = sys::above_floor(fd);
        sys::fchmod(fd, mode & 0o666);
        // Exclusive if nobody is attached; otherwise wait for a shared hold (an exclusive
        // holder is a first process still recovering the image).
        let alone = sys::try_lock(fd, libc::F_WRLCK, DMS_LOCK)?;
        if !alone {
            sys::lock_wait(fd, libc::F_RDLCK, DMS_LOCK)?;
        }
        // The file we locked must still be the one at `path` (the last process out removes
        // it while holding DMS exclusively).
        let st = sys::fstat(fd)?;
        let same = sys::stat(&cpath).is_ok_and(|p| p.st_dev == st.st_dev && p.st_ino == st.st_ino);
        if !same {
            sys::close(fd);
            continue;
        }
        let descs = match open_desc_files(&cpath, mode) {
            Ok(d) => d,
            Err(e) => {
                sys::close(fd);
                return Err(e);
            }
        };
        let base = (|| {
            // Descriptions of processes between an exec and their re-attach keep slots in
            // the mapping alive: the mapping is reset only when none exists.
            let fresh = alone && !any_held(&descs);
            if fresh {
                sys::ftruncate(fd, 0)?;
            }
            if (st.st_size as u64) < MAP_LEN as u64 || fresh {
                sys::ftruncate(fd, MAP_LEN as u64)?;
            }
            sys::map_shared(fd, MAP_LEN)
        })();
        let base = match base {
            Ok(b) => b,
            Err(e) => {
                close_desc_files(&descs);
                sys::close(fd);
                return Err(e);
            }
        };
        let map = CoordMap {
            base,
            path: cpath,
            descs,
        };
        if alone {
            // Nobody attached: any gate holder died; recovery follows.
            map.gate().store(0, Ordering::Release);
            map.word(H_MAGIC).store(MAGIC, Ordering::Release);
        } else if map.word(H_MAGIC).load(Ordering::Acquire) != MAGIC {
            sys::close(fd);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "coordination file {} is not one this nvmfs writes (another version attached?)",
                    path.display()
                ),
            ));
        }
        return Ok(Opened { map, fd, alone });
    }
    Err(io::Error::other(format!(
        "coordination file {}: kept disappearing while attaching",
        path.display()
    )))
}

/// Removes the coordination files in `dir` that no process uses (left by processes that were
/// killed, or whose image is gone): those whose DMS byte can be taken exclusively with no
/// description alive. A process opening one at that moment finds it gone after taking DMS
/// (`open` checks the path still names the file it locked) and creates a fresh one.
pub fn sweep_stale(dir: &Path, keep: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let n = name.as_bytes();
        if !(n.starts_with(b"nvmfs-") && n.ends_with(b".coord")) || e.path() == keep {
            continue;
        }
        let Ok(cpath) = CString::new(e.path().as_os_str().as_bytes()) else {
            continue;
        };
        let Ok(fd) = sys::open(&cpath, libc::O_RDWR | libc::O_CLOEXEC, 0) else {
            continue;
        };
        if sys::try_lock(fd, libc::F_WRLCK, DMS_LOCK).unwrap_or(false)
            && !descriptions_alive_at(&cpath)
        {
            remove_files(&cpath);
        }
        sys::close(fd);
    }
}

/// Takes a free process slot for `fd`'s description: (slot, epoch).
pub fn take_proc_slot(map: &CoordMap, fd: RawFd) -> io::Result<(usize, u32)> {
    let start = (sys::getpid() as usize) % PROCS;
    for i in 0..PROCS {
        let slot = (start + i) % PROCS;
        if sys::try_lock(fd, libc::F_WRLCK, PROC_LOCK + slot as u64)? {
            // 16-bit epochs, never 0: a reused slot gets a new identity.
            let mut epoch = (map.proc_epoch(slot).load(Ordering::Acquire) + 1) & 0xffff;
            if epoch == 0 {
                epoch = 1;
            }
            map.proc_epoch(slot).store(epoch, Ordering::Release);
            map.proc_pid(slot).store(sys::getpid(), Ordering::Release);
            return Ok((slot, epoch));
        }
    }
    Err(io::Error::other(format!(
        "more than {PROCS} processes attached to one nvmfs image"
    )))
}
