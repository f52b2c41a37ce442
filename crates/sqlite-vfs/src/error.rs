//! The FFI boundary: nvmfs errors as SQLite result codes, the last error of each thread for
//! xGetLastError, and the guard that keeps a panic from unwinding into SQLite's C frames.

use std::cell::RefCell;
use std::ffi::c_int;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};

use libsqlite3_sys as ffi;

thread_local! {
    /// (errno, message) of the last failed nvmfs call on this thread.
    static LAST: RefCell<(i32, String)> = const { RefCell::new((0, String::new())) };
}

/// Remembers `e` for xGetLastError.
pub(crate) fn record(e: &io::Error) {
    LAST.with(|l| *l.borrow_mut() = (nvmfs::errno_of(e), e.to_string()));
}

/// The last error recorded on this thread: (errno, message).
pub(crate) fn last() -> (i32, String) {
    LAST.with(|l| l.borrow().clone())
}

/// The SQLite code for a failed I/O call whose generic code is `generic` (an SQLITE_IOERR_*
/// code): a full image is SQLITE_FULL, a damaged one SQLITE_IOERR_CORRUPTFS (nvmfs reports
/// damaged media as `InvalidData`), a failed allocation SQLITE_IOERR_NOMEM.
pub(crate) fn io_code(e: &io::Error, generic: c_int) -> c_int {
    record(e);
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => ffi::SQLITE_FULL,
        Some(libc::ENOMEM) => ffi::SQLITE_IOERR_NOMEM,
        None if e.kind() == io::ErrorKind::InvalidData => ffi::SQLITE_IOERR_CORRUPTFS,
        _ => generic,
    }
}

/// Runs a callback body, turning a panic into `on_panic` (an error code SQLite understands)
/// instead of unwinding across `extern "C"`, which would abort the process.
pub(crate) fn guard(on_panic: c_int, f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        LAST.with(|l| *l.borrow_mut() = (libc::EIO, "panic in the nvmfs VFS".into()));
        on_panic
    })
}

/// `guard` for callbacks that return nothing.
pub(crate) fn guard_void(f: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// Copies `msg` into the C buffer `out` of `n` bytes, truncated and NUL-terminated.
///
/// # Safety
/// `out` must be valid for `n` bytes of writes (or `n` <= 0).
pub(crate) unsafe fn write_c_str(msg: &str, n: c_int, out: *mut std::ffi::c_char) {
    if n <= 0 || out.is_null() {
        return;
    }
    let len = msg.len().min(n as usize - 1);
    // SAFETY: the caller's buffer holds n >= len + 1 bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), out.cast(), len);
        *out.add(len) = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(
            io_code(&e(libc::ENOSPC), ffi::SQLITE_IOERR_WRITE),
            ffi::SQLITE_FULL
        );
        assert_eq!(
            io_code(&e(libc::EIO), ffi::SQLITE_IOERR_WRITE),
            ffi::SQLITE_IOERR_WRITE
        );
        let bad = io::Error::new(io::ErrorKind::InvalidData, "inode 5: bad mode");
        assert_eq!(
            io_code(&bad, ffi::SQLITE_IOERR_READ),
            ffi::SQLITE_IOERR_CORRUPTFS
        );
        assert_eq!(last(), (libc::EIO, "inode 5: bad mode".into()));
        assert_eq!(guard(ffi::SQLITE_IOERR, || panic!("x")), ffi::SQLITE_IOERR);
        assert_eq!(last().1, "panic in the nvmfs VFS");
        let mut buf = [1 as std::ffi::c_char; 4];
        // SAFETY: 4-byte buffer.
        unsafe { write_c_str("hello", 4, buf.as_mut_ptr()) };
        assert_eq!(buf.map(|c| c as u8), *b"hel\0");
    }
}
