//! The `sqlite3_vfs` methods (version 2): open, delete, access and full pathname on the
//! image's namespace; randomness, sleep and time from the system; no loadable extensions.

use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::hash::BuildHasher;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use libsqlite3_sys as ffi;
use nvmfs::OpenOptions;

use crate::error::{guard, guard_void, io_code, last, record, write_c_str};
use crate::file::{install, RawFile};
use crate::registry::{mount_of, open_slot};

/// Longest full pathname handed to SQLite (bytes, without the NUL).
const MAX_PATHNAME: c_int = 1024;

/// xFullPathname's "resolved, but a symlink was followed" (sqlite3.c SQLITE_OK_SYMLINK, an
/// internal code the pager turns into SQLITE_CANTOPEN_SYMLINK under SQLITE_OPEN_NOFOLLOW).
const OK_SYMLINK: c_int = ffi::SQLITE_OK | (2 << 8);

/// Julian day number of the Unix epoch, in milliseconds (os_unix.c `unixEpoch`).
const UNIX_EPOCH_JD_MS: i64 = 24_405_875 * 8_640_000;

/// A `sqlite3_vfs` with our methods; the registry fills in the name and app data.
pub(crate) fn raw_vfs() -> ffi::sqlite3_vfs {
    ffi::sqlite3_vfs {
        iVersion: 2,
        szOsFile: std::mem::size_of::<RawFile>() as c_int,
        mxPathname: MAX_PATHNAME,
        pNext: std::ptr::null_mut(),
        zName: std::ptr::null(),
        pAppData: std::ptr::null_mut(),
        xOpen: Some(x_open),
        xDelete: Some(x_delete),
        xAccess: Some(x_access),
        xFullPathname: Some(x_full_pathname),
        xDlOpen: Some(x_dl_open),
        xDlError: Some(x_dl_error),
        xDlSym: Some(x_dl_sym),
        xDlClose: Some(x_dl_close),
        xRandomness: Some(x_randomness),
        xSleep: Some(x_sleep),
        xCurrentTime: Some(x_current_time),
        xGetLastError: Some(x_get_last_error),
        xCurrentTimeInt64: Some(x_current_time_int64),
        xSetSystemCall: None,
        xGetSystemCall: None,
        xNextSystemCall: None,
    }
}

/// The bytes of a C path SQLite passes.
///
/// # Safety
/// `p` must be a NUL-terminated string.
unsafe fn path_bytes<'a>(p: *const c_char) -> &'a [u8] {
    // SAFETY: forwarded.
    unsafe { CStr::from_ptr(p) }.to_bytes()
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    f: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite's file memory. pMethods stays NULL unless the open succeeds, so SQLite
    // does not call xClose on a file that was never opened.
    unsafe { (*f).pMethods = std::ptr::null() };
    guard(ffi::SQLITE_CANTOPEN, || {
        // SAFETY: `vfs` is ours; `name` is NULL or a C string.
        let (slot, name) = unsafe {
            let Some(slot) = open_slot(vfs) else {
                return ffi::SQLITE_CANTOPEN;
            };
            (slot, (!name.is_null()).then(|| path_bytes(name)))
        };
        match crate::open::open(slot, name, flags) {
            Ok((state, flags)) => {
                // SAFETY: SQLite's szOsFile bytes and its output variable.
                unsafe {
                    install(f, state);
                    if !out_flags.is_null() {
                        *out_flags = flags;
                    }
                }
                ffi::SQLITE_OK
            }
            Err(code) => code,
        }
    })
}

unsafe extern "C" fn x_delete(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    guard(ffi::SQLITE_IOERR_DELETE, || {
        // SAFETY: `vfs` is ours; `name` is a C string.
        let (Some(m), path) = (unsafe { (mount_of(vfs), path_bytes(name)) }) else {
            return ffi::SQLITE_IOERR_DELETE;
        };
        match m.fs.remove_file(OsStr::from_bytes(path)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                record(&e);
                return ffi::SQLITE_IOERR_DELETE_NOENT;
            }
            Err(e) => return io_code(&e, ffi::SQLITE_IOERR_DELETE),
        }
        if sync_dir == 0 {
            return ffi::SQLITE_OK;
        }
        // The unlink is durable already; syncing the directory msyncs a `file`-media image.
        let dir = match path.iter().rposition(|&b| b == b'/') {
            Some(0) | None => &b"/"[..],
            Some(i) => &path[..i],
        };
        let synced = OpenOptions::new()
            .read(true)
            .open(&m.fs, OsStr::from_bytes(dir))
            .and_then(|d| d.sync_all());
        match synced {
            Ok(()) => ffi::SQLITE_OK,
            Err(e) => io_code(&e, ffi::SQLITE_IOERR_DIR_FSYNC),
        }
    })
}

unsafe extern "C" fn x_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    guard(ffi::SQLITE_IOERR_ACCESS, || {
        // SAFETY: `vfs` is ours; `name` is a C string; `out` SQLite's output variable.
        let (Some(m), path) = (unsafe {
            *out = 0;
            (mount_of(vfs), path_bytes(name))
        }) else {
            return ffi::SQLITE_IOERR_ACCESS;
        };
        let found = match m.fs.metadata(OsStr::from_bytes(path)) {
            // As unixAccess: an empty regular file does not "exist" (a zero-length journal
            // is not a hot journal). nvmfs checks no permissions (GUARANTEES.md §9), so an
            // existing file is readable and writable (a read-only mount makes xOpen fall back).
            Ok(md) => flags != ffi::SQLITE_ACCESS_EXISTS || !md.is_file() || !md.is_empty(),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => false,
            Err(e) => return io_code(&e, ffi::SQLITE_IOERR_ACCESS),
        };
        // SAFETY: as above.
        unsafe { *out = found as c_int };
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n_out: c_int,
    out: *mut c_char,
) -> c_int {
    guard(ffi::SQLITE_CANTOPEN_FULLPATH, || {
        // SAFETY: `vfs` is ours; `name` is a C string.
        let (Some(m), path) = (unsafe { (mount_of(vfs), path_bytes(name)) }) else {
            return ffi::SQLITE_CANTOPEN_FULLPATH;
        };
        let (full, followed) = match crate::path::full_path(&m.fs, path) {
            Ok(r) => r,
            Err(e) => {
                record(&e);
                return ffi::SQLITE_CANTOPEN_FULLPATH;
            }
        };
        if full.len() >= n_out.max(0) as usize {
            return ffi::SQLITE_CANTOPEN_FULLPATH;
        }
        // SAFETY: SQLite's buffer holds n_out > full.len() bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(full.as_ptr(), out.cast::<u8>(), full.len());
            *out.add(full.len()) = 0;
        }
        if followed {
            OK_SYMLINK
        } else {
            ffi::SQLITE_OK
        }
    })
}

const NO_EXTENSIONS: &str = "the nvmfs VFS does not load extensions";

unsafe extern "C" fn x_dl_open(_vfs: *mut ffi::sqlite3_vfs, _name: *const c_char) -> *mut c_void {
    std::ptr::null_mut()
}

unsafe extern "C" fn x_dl_error(_vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) {
    // SAFETY: SQLite's buffer of n bytes.
    guard_void(|| unsafe { write_c_str(NO_EXTENSIONS, n, out) });
}

type DlSym = unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char);

unsafe extern "C" fn x_dl_sym(
    _vfs: *mut ffi::sqlite3_vfs,
    _h: *mut c_void,
    _sym: *const c_char,
) -> Option<DlSym> {
    None
}

unsafe extern "C" fn x_dl_close(_vfs: *mut ffi::sqlite3_vfs, _h: *mut c_void) {}

/// Fills `buf` from the kernel's random source (getrandom(2)). Should that fail, std's
/// randomly keyed hasher over a counter fills the rest: SQLite wants randomness for its PRNG
/// seed and temporary names, not for secrets.
pub(crate) fn fill_random(buf: &mut [u8]) {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: writes at most the remaining bytes of `buf`.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n <= 0 {
            break;
        }
        done += n as usize;
    }
    let keys = std::collections::hash_map::RandomState::new();
    for (i, chunk) in buf[done..].chunks_mut(8).enumerate() {
        let word = keys.hash_one(i).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

unsafe extern "C" fn x_randomness(
    _vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    guard(0, || {
        let n = n.max(0);
        // SAFETY: SQLite's buffer of n bytes.
        fill_random(unsafe { std::slice::from_raw_parts_mut(out.cast::<u8>(), n as usize) });
        n
    })
}

unsafe extern "C" fn x_sleep(_vfs: *mut ffi::sqlite3_vfs, us: c_int) -> c_int {
    guard(0, || {
        std::thread::sleep(Duration::from_micros(us.max(0) as u64));
        us
    })
}

fn now_jd_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    UNIX_EPOCH_JD_MS + since.as_millis() as i64
}

unsafe extern "C" fn x_current_time(_vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    // SAFETY: SQLite's output variable.
    guard(ffi::SQLITE_ERROR, || unsafe {
        *out = now_jd_ms() as f64 / 86_400_000.0;
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_current_time_int64(_vfs: *mut ffi::sqlite3_vfs, out: *mut i64) -> c_int {
    // SAFETY: SQLite's output variable.
    guard(ffi::SQLITE_ERROR, || unsafe {
        *out = now_jd_ms();
        ffi::SQLITE_OK
    })
}

unsafe extern "C" fn x_get_last_error(
    _vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    guard(0, || {
        let (errno, msg) = last();
        // SAFETY: SQLite's buffer of n bytes.
        unsafe { write_c_str(&msg, n, out) };
        errno
    })
}
