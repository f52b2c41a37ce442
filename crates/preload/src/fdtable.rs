//! The table of nvmfs descriptors: which real descriptors stand for nvmfs open file
//! descriptions, and which belong to the preload itself.
//!
//! Lookups are lock-free (one atomic load when no nvmfs descriptor exists; otherwise the
//! slot's reader count up and down around an `Arc` clone), so calls on ordinary descriptors
//! stay cheap. A change waits only for the lookups of its own slot in flight, so opening
//! and closing cost the same with any number of threads (an `ArcSwap` per slot made every
//! change visit every thread's debt list: with Filebench's 100 threads, a third of the
//! time).

use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::Arc;

use nvmfs::shared::Description;
use parking_lot::Mutex;

const CHUNK: usize = 1024;
const CHUNKS: usize = 1024;
/// Descriptors at or above this are never nvmfs descriptors (the table's capacity).
pub const MAX_FDS: usize = CHUNK * CHUNKS;

/// One descriptor: its entry (`Arc::into_raw`, or null) and the lookups reading it now.
#[repr(align(64))]
struct Slot {
    entry: AtomicPtr<Entry>,
    readers: AtomicU32,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            entry: AtomicPtr::new(std::ptr::null_mut()),
            readers: AtomicU32::new(0),
        }
    }

    fn load(&self) -> Option<Arc<Entry>> {
        self.readers.fetch_add(1, Ordering::SeqCst);
        let p = self.entry.load(Ordering::SeqCst);
        let e = (!p.is_null()).then(|| {
            // SAFETY: `p` came from Arc::into_raw, and a swap that took it out waits for
            // our count to drop before it releases its reference.
            unsafe {
                Arc::increment_strong_count(p);
                Arc::from_raw(p)
            }
        });
        self.readers.fetch_sub(1, Ordering::Release);
        e
    }

    fn swap(&self, e: Option<Arc<Entry>>) -> Option<Arc<Entry>> {
        let new = e.map_or(std::ptr::null_mut(), |e| Arc::into_raw(e).cast_mut());
        let old = self.entry.swap(new, Ordering::SeqCst);
        // A lookup that read `old` has counted itself before reading: wait until it has
        // its own reference.
        let mut spins = 0u32;
        while self.readers.load(Ordering::SeqCst) != 0 {
            spins += 1;
            if spins < 128 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // SAFETY: the table's reference, taken out of the slot.
        (!old.is_null()).then(|| unsafe { Arc::from_raw(old) })
    }
}

type Chunk = [Slot; CHUNK];

static TABLE: [AtomicPtr<Chunk>; CHUNKS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];
/// Number of occupied slots: 0 means "no nvmfs descriptor", the common fast path.
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// One past the highest descriptor ever stored.
static HIGH: AtomicUsize = AtomicUsize::new(0);

/// What an open nvmfs description is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    /// O_PATH, or a node that is neither (symlink opened with O_PATH|O_NOFOLLOW).
    Path,
}

/// One nvmfs open file description as this process knows it. Shared (Arc) by every
/// descriptor of the description in this process (dup, dup2, fcntl F_DUPFD).
pub struct Entry {
    pub desc: Description,
    pub ino: u64,
    pub kind: Kind,
    /// The core's open reference; dropped inside an operation (see Drop).
    pub file: Option<nvmfs::File>,
    /// Serialises read/write/lseek of the shared offset among this process's threads
    /// (other processes are kept out by the shared mount's gate).
    pub pos: Mutex<()>,
    /// Absolute path as the program named it when opening (empty if unknown: inherited
    /// across exec). Used for fchdir, getcwd and /proc/self/fd links.
    pub vpath: Vec<u8>,
    /// Descriptor of this description's lock file (flock, OFD locks), -1 until used.
    pub lock_fd: AtomicI32,
    /// A second descriptor of this description, internal (at `spares::SPARE_FLOOR` or
    /// above), when it came from the spares: kept so that the last close need not make one
    /// again (`spares::retire`). -1 if none. Closed with the entry unless it goes back to
    /// the spares.
    pub spare_fd: AtomicI32,
    /// Some descriptor of this description may live on where this process cannot see it
    /// close: it was duplicated, inherited, or present at a fork, a spawn or an exec. Only
    /// a description never so is kept for reuse at its last close (`spares`).
    pub escaped: AtomicBool,
    /// The program opened it without close-on-exec, but its one descriptor is still
    /// close-on-exec in the kernel: nothing has yet been able to pass it on. Cleared (and
    /// the descriptor made what the program asked for) by `escape_from` before a
    /// duplication, fork, spawn or exec could, or when the program sets close-on-exec.
    /// So a description opened without O_CLOEXEC can be reused too, and a child that
    /// bypasses all of these (a raw clone and execve) loses the descriptor rather than
    /// seeing a reused description stand for another file.
    pub keep_on_exec: AtomicBool,
}

impl Entry {
    pub fn flags(&self) -> i32 {
        self.desc.status_flags().load(Ordering::Acquire)
    }
    pub fn readable(&self) -> bool {
        let f = self.flags();
        f & libc::O_PATH == 0 && matches!(f & libc::O_ACCMODE, libc::O_RDONLY | libc::O_RDWR)
    }
    pub fn writable(&self) -> bool {
        let f = self.flags();
        f & libc::O_PATH == 0 && matches!(f & libc::O_ACCMODE, libc::O_WRONLY | libc::O_RDWR)
    }
    pub fn is_path(&self) -> bool {
        self.flags() & libc::O_PATH != 0
    }
    pub fn file(&self) -> &nvmfs::File {
        self.file.as_ref().expect("file present until drop")
    }
    /// Some descriptor of this description may now outlive this process's view of it.
    pub fn escape(&self) {
        self.escaped.store(true, Ordering::Release);
    }

    /// As `escape`, for the description's descriptor `fd` about to be passed on (duplicated,
    /// inherited by a child or kept across exec): makes it keep across exec if the program
    /// opened it so.
    pub fn escape_from(&self, fd: i32) {
        self.escape();
        if self.keep_on_exec.swap(false, Ordering::AcqRel) {
            // SAFETY: clearing close-on-exec on the program's own descriptor, as it opened it.
            unsafe { crate::real::fcntl(fd, libc::F_SETFD, 0) };
        }
    }

    /// The program set the descriptor's flags itself (F_SETFD, FIOCLEX, FIONCLEX,
    /// close_range): the kernel's copy is the truth again.
    pub fn fd_flags_set(&self) {
        self.keep_on_exec.store(false, Ordering::Release);
    }

    /// The descriptor flags to report for the kernel's `flags`: without close-on-exec while
    /// only the kernel's copy has it.
    pub fn fd_flags(&self, flags: i32) -> i32 {
        if self.keep_on_exec.load(Ordering::Acquire) {
            flags & !libc::FD_CLOEXEC
        } else {
            flags
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let lf = self.lock_fd.load(Ordering::Acquire);
        if lf >= 0 {
            // Unmarked first: once closed, the number may be another thread's.
            unmark_internal(lf);
            // SAFETY: our own descriptor.
            unsafe { crate::real::close(lf) };
        }
        let spare = self.spare_fd.load(Ordering::Acquire);
        if spare >= 0 {
            crate::spares::release_held(spare);
        }
        if let Some(f) = self.file.take() {
            crate::state::drop_in_op(f);
        }
    }
}

fn chunk(fd: usize, create: bool) -> Option<&'static Chunk> {
    let i = fd / CHUNK;
    if i >= CHUNKS {
        return None;
    }
    let p = TABLE[i].load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: chunks are never freed once published.
        return Some(unsafe { &*p });
    }
    if !create {
        return None;
    }
    let fresh: Box<Chunk> = Box::new([const { Slot::new() }; CHUNK]);
    let fresh = Box::into_raw(fresh);
    match TABLE[i].compare_exchange(
        std::ptr::null_mut(),
        fresh,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: just published, never freed.
        Ok(_) => Some(unsafe { &*fresh }),
        Err(cur) => {
            // SAFETY: ours, never published.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: published by another thread, never freed.
            Some(unsafe { &*cur })
        }
    }
}

/// True if any nvmfs descriptor exists in this process.
#[inline]
pub fn any() -> bool {
    COUNT.load(Ordering::Relaxed) != 0
}

/// The nvmfs entry of `fd`, if it is one.
#[inline]
pub fn get(fd: i32) -> Option<Arc<Entry>> {
    if COUNT.load(Ordering::Relaxed) == 0 || fd < 0 {
        return None;
    }
    chunk(fd as usize, false)?[fd as usize % CHUNK].load()
}

/// Makes `fd` stand for `e` (or for nothing); returns what it stood for before.
pub fn set(fd: i32, e: Option<Arc<Entry>>) -> Option<Arc<Entry>> {
    if fd < 0 || fd as usize >= MAX_FDS {
        return None;
    }
    let c = chunk(fd as usize, e.is_some())?;
    let now = e.is_some();
    let old = c[fd as usize % CHUNK].swap(e);
    match (old.is_some(), now) {
        (false, true) => {
            COUNT.fetch_add(1, Ordering::AcqRel);
            HIGH.fetch_max(fd as usize + 1, Ordering::AcqRel);
        }
        (true, false) => {
            COUNT.fetch_sub(1, Ordering::AcqRel);
        }
        _ => {}
    }
    old
}

/// Calls `f` with every descriptor in the table and its entry.
fn for_each(mut f: impl FnMut(i32, &Entry)) {
    if !any() {
        return;
    }
    for fd in 0..HIGH.load(Ordering::Acquire) {
        if let Some(e) = chunk(fd, false).and_then(|c| c[fd % CHUNK].load()) {
            f(fd as i32, &e);
        }
    }
}

/// Marks every entry escaped (a fork, or a spawn whose file actions may duplicate any
/// descriptor: the child holds them).
pub fn escape_all() {
    for_each(|fd, e| e.escape_from(fd));
}

/// Before an exec or a spawn: every descriptor the program opened without close-on-exec
/// must reach the new program.
pub fn pass_on_exec() {
    for_each(|fd, e| {
        if e.keep_on_exec.load(Ordering::Acquire) {
            e.escape_from(fd);
        }
    });
}

/// Every descriptor in `[lo, hi]` is close-on-exec now (close_range's CLOSE_RANGE_CLOEXEC).
pub fn fd_flags_set_range(lo: u32, hi: u32) {
    for_each(|fd, e| {
        if (lo..=hi).contains(&(fd as u32)) {
            e.fd_flags_set();
        }
    });
}

/// Fork hooks run (each fork's begin and end), and forks under way, for `insert_new`.
static FORK_EVENTS: AtomicU64 = AtomicU64::new(0);
static FORKING: AtomicU32 = AtomicU32::new(0);

/// Before a fork: from here on, a new entry may be copied into the child without the
/// fork's `escape_all` (which follows) seeing it.
pub fn fork_begin() {
    FORKING.fetch_add(1, Ordering::SeqCst);
    FORK_EVENTS.fetch_add(1, Ordering::SeqCst);
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// After a fork, in the parent and in the child.
pub fn fork_end() {
    FORK_EVENTS.fetch_add(1, Ordering::SeqCst);
    FORKING.fetch_sub(1, Ordering::SeqCst);
}

/// In a fork's child: its only thread is this one.
pub fn fork_end_in_child() {
    FORK_EVENTS.fetch_add(1, Ordering::SeqCst);
    FORKING.store(0, Ordering::SeqCst);
}

/// Stores the entry of a description just opened at `fd`. If a fork ran meanwhile, the
/// child may hold the descriptor and a copy of the entry that the fork's `escape_all` did
/// not see: the entry escapes, so the parent never reuses the description under it.
pub fn insert_new(fd: i32, e: Arc<Entry>) {
    let before = FORK_EVENTS.load(Ordering::SeqCst);
    set(fd, Some(e.clone()));
    std::sync::atomic::fence(Ordering::SeqCst);
    if FORKING.load(Ordering::SeqCst) != 0 || FORK_EVENTS.load(Ordering::SeqCst) != before {
        e.escape_from(fd);
    }
}

/// Takes every entry in `[lo, hi]` out of the table.
pub fn take_range(lo: u32, hi: u32) -> Vec<(i32, Arc<Entry>)> {
    let mut out = Vec::new();
    if !any() {
        return out;
    }
    let high = HIGH.load(Ordering::Acquire).min(hi as usize + 1);
    for fd in lo as usize..high {
        if let Some(e) = set(fd as i32, None) {
            out.push((fd as i32, e));
        }
    }
    out
}

/// Descriptors the preload (and the core) opened for itself: the image, the coordination
/// file, the description files, lock files. A program's close, dup2 onto, or close_range
/// over them is not passed on (close reports success), so the shared mount keeps working.
const INTERNAL_BITS: usize = 65536;
static INTERNAL: [AtomicU64; INTERNAL_BITS / 64] =
    [const { AtomicU64::new(0) }; INTERNAL_BITS / 64];
static INTERNAL_ANY: AtomicUsize = AtomicUsize::new(0);

/// (dev, ino) of the file behind each internal descriptor when it was marked: a mark whose
/// descriptor was closed behind our back (the core closes some of its descriptors with raw
/// system calls) and reused for something else is recognised and dropped. Indexed by
/// descriptor and never locked: spares are marked and unmarked at every close and open.
static IDENTITY: [[AtomicU64; 2]; INTERNAL_BITS] =
    [const { [const { AtomicU64::new(0) }; 2] }; INTERNAL_BITS];

fn identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: fstat into a local buffer, straight to the kernel.
    unsafe {
        let mut st: libc::stat64 = std::mem::zeroed();
        (libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat64) == 0)
            .then_some((st.st_dev, st.st_ino))
    }
}

pub fn mark_internal(fd: i32) {
    mark_internal_as(fd, identity(fd).unwrap_or((0, 0)));
}

/// `mark_internal` for a descriptor whose file's (dev, ino) the caller knows.
pub fn mark_internal_as(fd: i32, id: (u64, u64)) {
    if fd >= 0 && (fd as usize) < INTERNAL_BITS {
        let ident = &IDENTITY[fd as usize];
        ident[0].store(id.0, Ordering::Relaxed);
        ident[1].store(id.1, Ordering::Relaxed);
        let prev = INTERNAL[fd as usize / 64].fetch_or(1 << (fd % 64), Ordering::AcqRel);
        if prev & (1 << (fd % 64)) == 0 {
            INTERNAL_ANY.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// True if `fd` is marked internal and still is the file it was marked for (one fstat);
/// a stale mark is removed.
pub fn still_internal(fd: i32) -> bool {
    if !is_internal(fd) {
        return false;
    }
    let ident = &IDENTITY[fd as usize];
    let want = (
        ident[0].load(Ordering::Acquire),
        ident[1].load(Ordering::Acquire),
    );
    if identity(fd) == Some(want) {
        return true;
    }
    unmark_internal(fd);
    false
}

pub fn unmark_internal(fd: i32) {
    if fd >= 0 && (fd as usize) < INTERNAL_BITS {
        let prev = INTERNAL[fd as usize / 64].fetch_and(!(1 << (fd % 64)), Ordering::AcqRel);
        if prev & (1 << (fd % 64)) != 0 {
            INTERNAL_ANY.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[inline]
pub fn is_internal(fd: i32) -> bool {
    INTERNAL_ANY.load(Ordering::Relaxed) != 0
        && fd >= 0
        && (fd as usize) < INTERNAL_BITS
        && INTERNAL[fd as usize / 64].load(Ordering::Relaxed) & (1 << (fd % 64)) != 0
}

/// Internal descriptors in `[lo, hi]`, ascending.
pub fn internal_in(lo: u32, hi: u32) -> Vec<i32> {
    if INTERNAL_ANY.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    let hi = (hi as usize).min(INTERNAL_BITS - 1);
    (lo as usize..=hi)
        .filter(|&fd| still_internal(fd as i32))
        .map(|fd| fd as i32)
        .collect()
}

/// In a fork's child: lookups that other threads had in flight never finish there, so their
/// counts go (or the next change of that slot would wait for ever).
pub fn forget_readers() {
    for i in 0..CHUNKS {
        if let Some(c) = chunk(i * CHUNK, false) {
            for slot in c {
                slot.readers.store(0, Ordering::Release);
            }
        }
    }
}
