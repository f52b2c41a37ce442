//! The `sqlite3_io_methods` (version 3) of an open file: every call goes to the nvmfs core
//! in-process (`File::read_at`, `write_at`, `set_len`, ...), with no system call on the data
//! path. Locks, shared memory and fetches are kept in the file's [`Node`], shared with the
//! other connections of this process that have the same file open.

use std::ffi::{c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use libsqlite3_sys as ffi;

use crate::error::{guard, guard_void, io_code, record};
use crate::fetch::Fetched;
use crate::lock;
use crate::node::Node;
use crate::registry::OpenSlot;
use crate::shm::ShmHandle;

/// What SQLite allocates for each open file (`szOsFile`): the base struct SQLite knows,
/// followed by our state.
#[repr(C)]
pub(crate) struct RawFile {
    base: ffi::sqlite3_file,
    state: *mut FileState,
}

/// One open file of one connection.
pub(crate) struct FileState {
    pub slot: OpenSlot,
    pub file: nvmfs::File,
    pub node: Arc<Node>,
    /// This file's identity as a lock owner.
    pub conn: u64,
    /// The SQLite lock it holds (lock::NONE..=EXCLUSIVE).
    pub level: i32,
    /// Its path, `None` once unlinked (delete-on-close files are unlinked at open).
    pub path: Option<Vec<u8>>,
    pub shm: Option<ShmHandle>,
    /// Pointers handed out by xFetch and not yet released.
    pub fetched: Vec<Fetched>,
    /// SQLITE_FCNTL_MMAP_SIZE: fetches reach at most this far into the file.
    pub mmap_limit: i64,
}

impl FileState {
    fn ino(&self) -> u64 {
        self.file.ino()
    }
}

impl Drop for FileState {
    fn drop(&mut self) {
        // SQLite unlocks and unmaps before closing; a file dropped in the middle of
        // something must not leave the other connections locked out.
        if let Some(h) = self.shm.take() {
            self.node.shm.lock().detach(h);
        }
        let mut locks = self.node.locks.lock();
        self.level = locks.unlock(self.conn, self.level, lock::NONE);
        drop(locks);
        for f in self.fetched.drain(..) {
            self.node.maps.lock().release(f.map);
        }
        self.slot.0.nodes.release(self.file.ino());
    }
}

/// Which SQLITE_IOCAP_* flags nvmfs really gives. `ordered`: the media persist stores in
/// program order (dax; shm and memory, where power loss keeps nothing anyway), not `file`
/// media, where the kernel writes dirty pages back in any order between two msyncs
/// (GUARANTEES.md §1).
///
/// - POWERSAFE_OVERWRITE (all media): a write stores only the bytes of its range; bytes
///   outside it are never rewritten (GUARANTEES.md §3), so a crash cannot damage them (on
///   `file` media: as far as the disk keeps sectors it does not write, the unix VFS's default
///   assumption too).
/// - SUBPAGE_READ (all media): reads are byte-granular copies out of memory, no page cache.
/// - SAFE_APPEND (ordered media): an extending write makes data and mappings durable, then
///   stores the size with one 8-byte store after a fence; after a crash the size is old or
///   new, and with the new size all data is there (§3: "size all-or-nothing").
/// - SEQUENTIAL (ordered media): every write is durable before it returns (§1), so writes
///   reach the media in the order SQLite issues them.
///
/// Not claimed: ATOMIC* and BATCH_ATOMIC (an overwrite torn by power loss leaves each 8-byte
/// word old or new, §3), UNDELETABLE_WHEN_OPEN (an open file can be unlinked, §5), IMMUTABLE.
pub(crate) fn iocaps(ordered: bool) -> c_int {
    let always = ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE | ffi::SQLITE_IOCAP_SUBPAGE_READ;
    if ordered {
        always | ffi::SQLITE_IOCAP_SAFE_APPEND | ffi::SQLITE_IOCAP_SEQUENTIAL
    } else {
        always
    }
}

pub(crate) static IO_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: Some(x_fetch),
    xUnfetch: Some(x_unfetch),
};

/// Installs `state` in the memory SQLite gave xOpen, with our methods.
///
/// # Safety
/// `f` must point to `szOsFile` (= size of `RawFile`) writable bytes.
pub(crate) unsafe fn install(f: *mut ffi::sqlite3_file, state: FileState) {
    let raw = RawFile {
        base: ffi::sqlite3_file {
            pMethods: &IO_METHODS,
        },
        state: Box::into_raw(Box::new(state)),
    };
    // SAFETY: the caller's buffer is a RawFile's size; SQLite aligns it for 8 bytes.
    unsafe { f.cast::<RawFile>().write(raw) };
}

/// The state of a file SQLite passes to a method.
///
/// # Safety
/// `f` must be a file `install`ed and not yet closed; SQLite never calls the methods of one
/// file concurrently, so the `&mut` is unique.
unsafe fn state<'a>(f: *mut ffi::sqlite3_file) -> &'a mut FileState {
    // SAFETY: see above.
    unsafe { &mut *(*f.cast::<RawFile>()).state }
}

unsafe extern "C" fn x_close(f: *mut ffi::sqlite3_file) -> c_int {
    guard(ffi::SQLITE_IOERR_CLOSE, || {
        // SAFETY: SQLite closes a file once; take the state out first.
        unsafe {
            let raw = f.cast::<RawFile>();
            let state = std::mem::replace(&mut (*raw).state, std::ptr::null_mut());
            (*raw).base.pMethods = std::ptr::null();
            if !state.is_null() {
                drop(Box::from_raw(state));
            }
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    off: i64,
) -> c_int {
    guard(ffi::SQLITE_IOERR_READ, || {
        // SAFETY: an open file; SQLite's buffer holds `amt` bytes.
        let (s, buf) = unsafe {
            if amt < 0 || off < 0 {
                return ffi::SQLITE_IOERR_READ;
            }
            (
                state(f),
                std::slice::from_raw_parts_mut(buf.cast::<u8>(), amt as usize),
            )
        };
        let mut done = 0;
        while done < buf.len() {
            match s.file.read_at(&mut buf[done..], off as u64 + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) => return io_code(&e, ffi::SQLITE_IOERR_READ),
            }
        }
        if done < buf.len() {
            // SQLite requires the rest zeroed on a short read.
            buf[done..].fill(0);
            return ffi::SQLITE_IOERR_SHORT_READ;
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    off: i64,
) -> c_int {
    guard(ffi::SQLITE_IOERR_WRITE, || {
        if amt < 0 || off < 0 {
            return ffi::SQLITE_IOERR_WRITE;
        }
        // SAFETY: an open file; SQLite's buffer holds `amt` bytes.
        let (s, data) = unsafe {
            (
                state(f),
                std::slice::from_raw_parts(buf.cast::<u8>(), amt as usize),
            )
        };
        match s.file.write_all_at(data, off as u64) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => io_code(&e, ffi::SQLITE_IOERR_WRITE),
        }
    })
}

unsafe extern "C" fn x_truncate(f: *mut ffi::sqlite3_file, size: i64) -> c_int {
    guard(ffi::SQLITE_IOERR_TRUNCATE, || {
        // SAFETY: an open file.
        let s = unsafe { state(f) };
        let Ok(size) = u64::try_from(size) else {
            return ffi::SQLITE_IOERR_TRUNCATE;
        };
        // Held across the truncate, so no connection maps the old length in between.
        let mut maps = s.node.maps.lock();
        maps.truncating(size);
        match s.file.set_len(size) {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => io_code(&e, ffi::SQLITE_IOERR_TRUNCATE),
        }
    })
}

unsafe extern "C" fn x_sync(f: *mut ffi::sqlite3_file, _flags: c_int) -> c_int {
    guard(ffi::SQLITE_IOERR_FSYNC, || {
        // Every nvmfs write is durable on return; this only msyncs an image on `file` media.
        // SAFETY: an open file.
        match unsafe { state(f) }.file.sync_all() {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => io_code(&e, ffi::SQLITE_IOERR_FSYNC),
        }
    })
}

unsafe extern "C" fn x_file_size(f: *mut ffi::sqlite3_file, out: *mut i64) -> c_int {
    guard(ffi::SQLITE_IOERR_FSTAT, || {
        // SAFETY: an open file and SQLite's output variable.
        unsafe {
            match state(f).file.metadata() {
                Ok(m) => {
                    *out = m.len() as i64;
                    ffi::SQLITE_OK
                }
                Err(e) => io_code(&e, ffi::SQLITE_IOERR_FSTAT),
            }
        }
    })
}

unsafe extern "C" fn x_lock(f: *mut ffi::sqlite3_file, want: c_int) -> c_int {
    guard(ffi::SQLITE_IOERR_LOCK, || {
        // SAFETY: an open file.
        let s = unsafe { state(f) };
        let outcome = s.node.locks.lock().lock(s.conn, s.level, want);
        match outcome {
            None => ffi::SQLITE_IOERR_LOCK,
            Some(o) => {
                s.level = o.level;
                if o.granted {
                    ffi::SQLITE_OK
                } else {
                    ffi::SQLITE_BUSY
                }
            }
        }
    })
}

unsafe extern "C" fn x_unlock(f: *mut ffi::sqlite3_file, want: c_int) -> c_int {
    guard(ffi::SQLITE_IOERR_UNLOCK, || {
        if want != lock::NONE && want != lock::SHARED {
            return ffi::SQLITE_IOERR_UNLOCK;
        }
        // SAFETY: an open file.
        let s = unsafe { state(f) };
        s.level = s.node.locks.lock().unlock(s.conn, s.level, want);
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    guard(ffi::SQLITE_IOERR_CHECKRESERVEDLOCK, || {
        // SAFETY: an open file and SQLite's output variable.
        unsafe { *out = state(f).node.locks.lock().reserved() as c_int };
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_file_control(
    f: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    guard(ffi::SQLITE_IOERR, || {
        // SAFETY: an open file; for each op SQLite passes the argument type it documents.
        unsafe { file_control(state(f), op, arg) }
    })
}

/// # Safety
/// `arg` must be what SQLite passes for `op`.
unsafe fn file_control(s: &mut FileState, op: c_int, arg: *mut c_void) -> c_int {
    // SAFETY (every arm): `arg` points to the type SQLite documents for `op`.
    unsafe {
        match op {
            ffi::SQLITE_FCNTL_LOCKSTATE => *arg.cast::<c_int>() = s.level,
            ffi::SQLITE_FCNTL_SIZE_HINT => return size_hint(s, *arg.cast::<i64>()),
            ffi::SQLITE_FCNTL_MMAP_SIZE => {
                // As unixFileControl: report the old limit, take the new one if >= 0.
                let new = *arg.cast::<i64>();
                *arg.cast::<i64>() = s.mmap_limit;
                if new >= 0 {
                    s.mmap_limit = new;
                }
            }
            ffi::SQLITE_FCNTL_VFSNAME => {
                let name = s.slot.0.name.as_ptr();
                *arg.cast::<*mut c_char>() = ffi::sqlite3_mprintf(c"%s".as_ptr(), name);
            }
            ffi::SQLITE_FCNTL_HAS_MOVED => *arg.cast::<c_int>() = has_moved(s) as c_int,
            _ => return ffi::SQLITE_NOTFOUND,
        }
    }
    ffi::SQLITE_OK
}

/// SQLITE_FCNTL_SIZE_HINT: the file is about to grow to `size`. Its blocks are allocated up
/// front past EOF (fallocate KEEP_SIZE, so the size SQLite sees does not change): a full
/// image fails here, before SQLite writes anything, and the writes then overwrite allocated
/// blocks.
fn size_hint(s: &FileState, size: i64) -> c_int {
    let cur = match s.file.metadata() {
        Ok(m) => m.len(),
        Err(e) => return io_code(&e, ffi::SQLITE_IOERR_FSTAT),
    };
    let Ok(size) = u64::try_from(size) else {
        return ffi::SQLITE_OK;
    };
    if size <= cur {
        return ffi::SQLITE_OK;
    }
    match s.file.allocate(libc::FALLOC_FL_KEEP_SIZE, cur, size - cur) {
        Ok(()) => ffi::SQLITE_OK,
        Err(e) => io_code(&e, ffi::SQLITE_IOERR_TRUNCATE),
    }
}

/// Whether the file's path no longer names it (renamed or unlinked behind SQLite's back).
fn has_moved(s: &FileState) -> bool {
    let Some(p) = &s.path else { return false };
    let p = std::ffi::OsStr::from_bytes(p);
    s.slot.0.fs.metadata(p).map_or(true, |m| m.ino() != s.ino())
}

unsafe extern "C" fn x_sector_size(_f: *mut ffi::sqlite3_file) -> c_int {
    nvmfs::layout::BLOCK_SIZE as c_int
}

unsafe extern "C" fn x_device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: an open file.
    guard(0, || unsafe { state(f) }.slot.0.iocaps)
}

unsafe extern "C" fn x_shm_map(
    f: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    guard(ffi::SQLITE_IOERR_SHMMAP, || {
        // SAFETY: an open file and SQLite's output variable.
        let s = unsafe {
            *pp = std::ptr::null_mut();
            state(f)
        };
        if region < 0 || size <= 0 {
            return ffi::SQLITE_IOERR_SHMMAP;
        }
        let mut node = s.node.shm.lock();
        if s.shm.is_none() {
            s.shm = Some(node.attach());
        }
        match node.map(region as usize, size as usize, extend != 0) {
            Ok(Some(p)) => {
                // SAFETY: SQLite's output variable.
                unsafe { *pp = p.cast() };
                ffi::SQLITE_OK
            }
            Ok(None) => ffi::SQLITE_OK,
            Err(code) => code,
        }
    })
}

unsafe extern "C" fn x_shm_lock(
    f: *mut ffi::sqlite3_file,
    ofst: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    guard(ffi::SQLITE_IOERR_SHMLOCK, || {
        // SAFETY: an open file.
        let s = unsafe { state(f) };
        let Some(h) = s.shm.as_mut() else {
            return ffi::SQLITE_IOERR_SHMLOCK;
        };
        match s.node.shm.lock().lock(h, ofst, n, flags) {
            Ok(()) => ffi::SQLITE_OK,
            Err(code) => code,
        }
    })
}

unsafe extern "C" fn x_shm_barrier(_f: *mut ffi::sqlite3_file) {
    // Every connection of the wal-index is a thread of this process: a full fence orders the
    // loads and stores around it, as the unix VFS's memory barrier does.
    guard_void(|| std::sync::atomic::fence(Ordering::SeqCst));
}

unsafe extern "C" fn x_shm_unmap(f: *mut ffi::sqlite3_file, _delete: c_int) -> c_int {
    guard(ffi::SQLITE_IOERR_SHMMAP, || {
        // SAFETY: an open file.
        let s = unsafe { state(f) };
        if let Some(h) = s.shm.take() {
            s.node.shm.lock().detach(h);
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_fetch(
    f: *mut ffi::sqlite3_file,
    off: i64,
    amt: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    guard(ffi::SQLITE_IOERR_MMAP, || {
        // SAFETY: an open file and SQLite's output variable.
        let s = unsafe {
            *pp = std::ptr::null_mut();
            state(f)
        };
        let mount = s.slot.0.clone();
        let in_limit = off >= 0
            && amt > 0
            && off
                .checked_add(amt as i64)
                .is_some_and(|end| end <= s.mmap_limit);
        let got = if in_limit {
            let mut maps = s.node.maps.lock();
            maps.fetch(
                &mount.fs,
                s.ino(),
                off as u64,
                amt as usize,
                mount.image_end,
            )
            .unwrap_or_else(|e| {
                // Not fatal: xRead reports a real I/O error on the same bytes itself.
                record(&e);
                None
            })
        } else {
            None
        };
        match got {
            Some(fetched) => {
                s.fetched.push(fetched);
                mount.fetches.fetch_add(1, Ordering::Relaxed);
                // SAFETY: SQLite's output variable.
                unsafe { *pp = fetched.ptr.cast() };
            }
            None => {
                mount.fetch_fallbacks.fetch_add(1, Ordering::Relaxed);
            }
        }
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_unfetch(f: *mut ffi::sqlite3_file, _off: i64, p: *mut c_void) -> c_int {
    guard(ffi::SQLITE_IOERR_MMAP, || {
        // NULL ("drop the whole mapping, it may be stale") needs nothing: see fetch.rs.
        if p.is_null() {
            return ffi::SQLITE_OK;
        }
        // SAFETY: an open file.
        let s = unsafe { state(f) };
        if let Some(i) = s.fetched.iter().position(|x| x.ptr == p.cast()) {
            let fetched = s.fetched.swap_remove(i);
            s.node.maps.lock().release(fetched.map);
        }
        ffi::SQLITE_OK
    })
}
