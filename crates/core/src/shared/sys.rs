//! The system calls of the coordination layer, made directly (`syscall(2)`), never through
//! the C library's wrappers: in a program run under `nvmfs run`, those wrappers are the
//! preload library's own interposed functions, and a descriptor of the coordination file is
//! exactly what they would take for an nvmfs file.

use std::ffi::CStr;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::atomic::AtomicU32;

fn check(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub fn open(path: &CStr, flags: i32, mode: u32) -> io::Result<RawFd> {
    // SAFETY: openat with a NUL-terminated path.
    check(unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), flags, mode) })
        .map(|fd| fd as RawFd)
}

/// The lowest descriptor number the coordination layer keeps its own descriptors at: below
/// it are the numbers programs pick themselves (shells redirect 0-9, `exec 3>`).
pub const FD_FLOOR: RawFd = 10;

/// Moves `fd` to the lowest free number at or above `FD_FLOOR` (close-on-exec). Keeps it
/// where it is if that fails.
pub fn above_floor(fd: RawFd) -> RawFd {
    if fd >= FD_FLOOR {
        return fd;
    }
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor this layer owns.
    let hi = unsafe {
        libc::syscall(
            libc::SYS_fcntl,
            fd as libc::c_long,
            libc::F_DUPFD_CLOEXEC as libc::c_long,
            FD_FLOOR as libc::c_long,
        )
    };
    if hi < 0 {
        return fd;
    }
    close(fd);
    hi as RawFd
}

pub fn close(fd: RawFd) {
    // SAFETY: closes a descriptor this layer owns.
    unsafe { libc::syscall(libc::SYS_close, fd as libc::c_long) };
}

pub fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat fills the buffer it is given.
    check(unsafe { libc::syscall(libc::SYS_fstat, fd as libc::c_long, st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call.
    Ok(unsafe { st.assume_init() })
}

pub fn stat(path: &CStr) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: newfstatat fills the buffer it is given.
    check(unsafe {
        libc::syscall(
            libc::SYS_newfstatat,
            libc::AT_FDCWD as libc::c_long,
            path.as_ptr(),
            st.as_mut_ptr(),
            0 as libc::c_long,
        )
    })?;
    // SAFETY: initialised by the successful call.
    Ok(unsafe { st.assume_init() })
}

pub fn unlink(path: &CStr) {
    // SAFETY: unlinkat with a NUL-terminated path.
    unsafe {
        libc::syscall(
            libc::SYS_unlinkat,
            libc::AT_FDCWD as libc::c_long,
            path.as_ptr(),
            0 as libc::c_long,
        )
    };
}

pub fn ftruncate(fd: RawFd, len: u64) -> io::Result<()> {
    // SAFETY: ftruncate on a descriptor this layer owns.
    check(unsafe { libc::syscall(libc::SYS_ftruncate, fd as libc::c_long, len as libc::c_long) })
        .map(|_| ())
}

pub fn fchmod(fd: RawFd, mode: u32) {
    // SAFETY: fchmod on a descriptor this layer owns; failure leaves the umask's mode.
    unsafe { libc::syscall(libc::SYS_fchmod, fd as libc::c_long, mode as libc::c_long) };
}

pub fn lseek(fd: RawFd, off: u64, whence: i32) -> io::Result<u64> {
    // SAFETY: lseek on a descriptor this layer owns.
    check(unsafe {
        libc::syscall(
            libc::SYS_lseek,
            fd as libc::c_long,
            off as libc::c_long,
            whence as libc::c_long,
        )
    })
    .map(|p| p as u64)
}

pub fn getpid() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::syscall(libc::SYS_getpid) as u32 }
}

/// A shared writable mapping of `len` bytes of `fd`.
pub fn map_shared(fd: RawFd, len: usize) -> io::Result<*mut u8> {
    // SAFETY: a fresh mapping; the kernel picks the address.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            std::ptr::null_mut::<libc::c_void>(),
            len as libc::c_long,
            (libc::PROT_READ | libc::PROT_WRITE) as libc::c_long,
            libc::MAP_SHARED as libc::c_long,
            fd as libc::c_long,
            0 as libc::c_long,
        )
    };
    if p < 0 && p > -4096 {
        return Err(io::Error::from_raw_os_error(-p as i32));
    }
    check(p).map(|p| p as *mut u8)
}

pub fn unmap(ptr: *mut u8, len: usize) {
    // SAFETY: unmaps exactly a mapping made by map_shared.
    unsafe { libc::syscall(libc::SYS_munmap, ptr, len as libc::c_long) };
}

/// Open file description locks (F_OFD_*): owned by the description, inherited with it across
/// fork and exec, released by the kernel when its last descriptor closes, whichever process
/// that is and however it ends.
fn ofd(fd: RawFd, cmd: i32, ty: i32, start: u64, len: u64) -> io::Result<libc::flock> {
    let mut fl = libc::flock {
        l_type: ty as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: start as libc::off_t,
        l_len: len as libc::off_t,
        l_pid: 0,
    };
    // SAFETY: fcntl with a flock struct we own.
    check(unsafe {
        libc::syscall(
            libc::SYS_fcntl,
            fd as libc::c_long,
            cmd as libc::c_long,
            &mut fl as *mut libc::flock,
        )
    })?;
    Ok(fl)
}

/// Takes a lock of type `ty` (F_RDLCK / F_WRLCK) on byte `at`; false if another description
/// holds a conflicting one.
pub fn try_lock(fd: RawFd, ty: i32, at: u64) -> io::Result<bool> {
    match ofd(fd, libc::F_OFD_SETLK, ty, at, 1) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Takes a lock, waiting for conflicting ones to go.
pub fn lock_wait(fd: RawFd, ty: i32, at: u64) -> io::Result<()> {
    loop {
        match ofd(fd, libc::F_OFD_SETLKW, ty, at, 1) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            r => return r.map(|_| ()),
        }
    }
}

pub fn unlock(fd: RawFd, at: u64) {
    let _ = ofd(fd, libc::F_OFD_SETLK, libc::F_UNLCK, at, 1);
}

/// Whether a description other than `fd`'s holds any lock in `[at, at + len)` (len 0: to the
/// end of the file's range).
pub fn locked_by_other(fd: RawFd, at: u64, len: u64) -> bool {
    match ofd(fd, libc::F_OFD_GETLK, libc::F_WRLCK, at, len) {
        Ok(fl) => fl.l_type != libc::F_UNLCK as libc::c_short,
        // Cannot tell: assume it is held, the safe answer for every caller.
        Err(_) => true,
    }
}

/// Sleeps while `word` holds `expected`, at most `timeout_ms` (shared, not private, futex:
/// the word is in a mapping other processes share).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout_ms: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ms / 1000) as libc::time_t,
        tv_nsec: ((timeout_ms % 1000) * 1_000_000) as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on an aligned u32 we can read; a timeout bounds the sleep.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT as libc::c_long,
            expected as libc::c_long,
            &ts as *const libc::timespec,
        )
    };
}

pub fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on an aligned u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE as libc::c_long,
            i32::MAX as libc::c_long,
        )
    };
}
