//! Record locks (fcntl F_SETLK/F_SETLKW/F_GETLK and the F_OFD_ variants), flock and lockf on
//! nvmfs files, kept by the kernel on per-inode lock files.
//!
//! Each nvmfs inode that gets locked has a lock file `<coordination file>.locks/<ino>-<gen>`.
//! POSIX (process-owned) locks are taken on one descriptor of that file per process and
//! inode, so they conflict across processes, F_GETLK reports the holder's pid, fork does
//! not pass them on, and, as POSIX requires, closing any descriptor of the inode drops
//! them (done in close). flock and OFD locks belong to an open file description: they are
//! taken on a lock-file descriptor of the nvmfs description (`Entry::lock_fd`), which fork
//! and dup share. Limit: that descriptor is close-on-exec, so flock/OFD locks do not survive
//! an exec of the holder (POSIX locks do not either: exec closes the per-process descriptor).

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::fdtable::{self, Entry};
use crate::guard::{Guard, IoErrno, R};
use crate::real;
use crate::state::{self, nv};

static POSIX: Mutex<Option<HashMap<u64, c_int>>> = Mutex::new(None);
static POSIX_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Where the preload's own descriptors go: above what shells and programs pick by number.
pub fn high_base() -> c_int {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writes rl.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) };
    let soft = rl.rlim_cur.min(1 << 20) as c_int;
    if soft >= 1024 {
        512
    } else {
        (soft / 2).max(10)
    }
}

/// Moves `fd` to a high number (close-on-exec) and marks it internal.
pub fn relocate(fd: c_int) -> c_int {
    let _g = Guard::new();
    // SAFETY: duplicating and closing our own descriptor.
    let hi = unsafe { real::fcntl(fd, libc::F_DUPFD_CLOEXEC, high_base() as usize) };
    let fd = if hi >= 0 {
        // SAFETY: our own descriptor.
        unsafe { real::close(fd) };
        hi
    } else {
        fd
    };
    fdtable::mark_internal(fd);
    fd
}

fn lock_path(ino: u64, generation: u32) -> Option<std::ffi::CString> {
    let cfg = state::config()?;
    let mut dir = cfg.coord_path.clone();
    dir.extend_from_slice(b".locks");
    let cdir = state::cstring(dir.clone());
    // SAFETY: a NUL-terminated path; failure (it exists) is fine.
    unsafe {
        if real::mkdir(cdir.as_ptr(), 0o1777) == 0 {
            libc::chmod(cdir.as_ptr(), 0o1777);
        }
    }
    dir.extend_from_slice(format!("/{ino}-{generation}").as_bytes());
    Some(state::cstring(dir))
}

fn open_lock_file(e: &Entry) -> R<c_int> {
    let _g = Guard::new();
    let p = lock_path(e.ino, e.desc.generation()).ok_or(libc::EIO)?;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        real::openat64(
            libc::AT_FDCWD,
            p.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
            0o666,
        )
    };
    if fd < 0 {
        return Err(crate::guard::errno());
    }
    // SAFETY: our descriptor.
    unsafe { real::fchmod(fd, 0o666) };
    Ok(relocate(fd))
}

/// The description's own lock-file descriptor (flock, OFD locks).
fn desc_lock_fd(e: &Entry) -> R<c_int> {
    let cur = e.lock_fd.load(Ordering::Acquire);
    if cur >= 0 {
        return Ok(cur);
    }
    let fd = open_lock_file(e)?;
    match e
        .lock_fd
        .compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) => Ok(fd),
        Err(other) => {
            // SAFETY: ours, lost the race.
            unsafe { real::close(fd) };
            fdtable::unmark_internal(fd);
            Ok(other)
        }
    }
}

/// This process's lock-file descriptor for POSIX locks on `e`'s inode.
fn posix_lock_fd(e: &Entry) -> R<c_int> {
    {
        let g = POSIX.lock();
        if let Some(&fd) = g.as_ref().and_then(|m| m.get(&e.ino)) {
            return Ok(fd);
        }
    }
    let fd = open_lock_file(e)?;
    let mut g = POSIX.lock();
    let m = g.get_or_insert_with(HashMap::new);
    if let Some(&other) = m.get(&e.ino) {
        // SAFETY: ours, lost the race.
        unsafe { real::close(fd) };
        fdtable::unmark_internal(fd);
        return Ok(other);
    }
    m.insert(e.ino, fd);
    POSIX_COUNT.fetch_add(1, Ordering::AcqRel);
    Ok(fd)
}

/// POSIX: closing any descriptor of a file drops the process's locks on it.
pub fn on_close(ino: u64) {
    if POSIX_COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let fd = POSIX.lock().as_ref().and_then(|m| m.get(&ino).copied());
    if let Some(fd) = fd {
        let fl = libc::flock {
            l_type: libc::F_UNLCK as i16,
            l_whence: libc::SEEK_SET as i16,
            l_start: 0,
            l_len: 0,
            l_pid: 0,
        };
        // SAFETY: our descriptor and a flock we own.
        unsafe { real::fcntl(fd, libc::F_SETLK, &fl as *const libc::flock as usize) };
    }
}

/// fcntl record-lock commands on an nvmfs descriptor.
///
/// # Safety
/// `arg` points at a struct flock.
pub unsafe fn fcntl_lock(e: &Entry, cmd: c_int, arg: usize) -> R<c_int> {
    let p = arg as *mut libc::flock;
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    let mut fl = *p;
    let ofd = matches!(
        cmd,
        libc::F_OFD_SETLK | libc::F_OFD_SETLKW | libc::F_OFD_GETLK
    );
    let setting = !matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK);
    if setting {
        match fl.l_type as c_int {
            libc::F_RDLCK if !e.readable() => return Err(libc::EBADF),
            libc::F_WRLCK if !e.writable() => return Err(libc::EBADF),
            libc::F_RDLCK | libc::F_WRLCK | libc::F_UNLCK => {}
            _ => return Err(libc::EINVAL),
        }
    }
    let base: i64 = match fl.l_whence as c_int {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => e.desc.offset().load(Ordering::Acquire) as i64,
        libc::SEEK_END => nv(|fs| fs.getattr(e.ino).en().map(|m| m.size as i64))?,
        _ => return Err(libc::EINVAL),
    };
    fl.l_start = base.checked_add(fl.l_start).ok_or(libc::EOVERFLOW)?;
    fl.l_whence = libc::SEEK_SET as i16;
    if fl.l_start < 0 {
        return Err(libc::EINVAL);
    }
    let lfd = if ofd {
        desc_lock_fd(e)?
    } else {
        posix_lock_fd(e)?
    };
    let r = real::fcntl(lfd, cmd, &mut fl as *mut libc::flock as usize);
    if r < 0 {
        return Err(crate::guard::errno());
    }
    if !setting {
        *p = fl;
    }
    Ok(r)
}

pub fn flock(e: &Entry, op: c_int) -> R<c_int> {
    let lfd = desc_lock_fd(e)?;
    // SAFETY: our descriptor.
    let r = unsafe { real::flock(lfd, op) };
    if r < 0 {
        Err(crate::guard::errno())
    } else {
        Ok(r)
    }
}

// ---- fork: our leaf locks, held across fork so the child gets them unlocked ---------------

pub fn fork_lock_all() {
    std::mem::forget(POSIX.lock());
    crate::spares::fork_lock();
    crate::stdio::fork_lock();
    crate::mmap::fork_lock();
}

pub fn fork_unlock_all() {
    // SAFETY: locked by fork_lock_all in this thread (or in the parent before the copy).
    unsafe { POSIX.force_unlock() };
    crate::spares::fork_unlock();
    crate::stdio::fork_unlock();
    crate::mmap::fork_unlock();
}
