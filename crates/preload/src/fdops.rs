//! Descriptor calls: close, close_range, closefrom, dup, dup2, dup3, fcntl, flock, lockf,
//! ioctl.

use std::ffi::{c_int, c_uint, c_ulong};
use std::sync::atomic::Ordering;

use crate::exports::active_cfg;
use crate::fdtable::{self, Kind};
use crate::guard::{self, ret_int, set_errno, IoErrno, R};
use crate::real;
use crate::state::{nv, warn_once};

/// Closes `fd`, dropping its nvmfs entry after the kernel closed it (so a last close frees
/// an unlinked inode), or after its description became a spare. Used by close and by the
/// preload's own wrappers.
pub fn close_fd(fd: c_int) -> c_int {
    let e = fdtable::set(fd, None);
    let kept = e.as_ref().is_some_and(|e| {
        crate::state::attached().is_some_and(|st| crate::spares::retire(st, fd, e))
    });
    // SAFETY: closing the descriptor the program asked for.
    let r = if kept { 0 } else { unsafe { real::close(fd) } };
    if let Some(e) = e {
        crate::locks::on_close(e.ino);
        drop(e);
    }
    r
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if guard::active() {
        return real::close(fd);
    }
    if fdtable::still_internal(fd) {
        // The preload's own descriptor (image, coordination, description or lock file): the
        // program never opened it; pretend it was closed.
        return 0;
    }
    if fdtable::any() {
        return close_fd(fd);
    }
    real::close(fd)
}

/// Runs `f` over `[lo, hi]` minus our internal descriptors.
fn around_internal(lo: u32, hi: u32, mut f: impl FnMut(u32, u32) -> c_int) -> c_int {
    let skip = fdtable::internal_in(lo, hi);
    let mut start = lo;
    let mut r = 0;
    for s in skip {
        let s = s as u32;
        if s > start {
            r |= f(start, s - 1);
        }
        start = s + 1;
    }
    if start <= hi && start >= lo {
        r |= f(start, hi);
    }
    r
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if guard::active() || active_cfg().is_none() {
        return real::close_range(first, last, flags);
    }
    if first > last {
        set_errno(libc::EINVAL);
        return -1;
    }
    let r = around_internal(first, last, |a, b| real::close_range(a, b, flags));
    if r == 0 && flags as c_uint & libc::CLOSE_RANGE_CLOEXEC != 0 {
        fdtable::fd_flags_set_range(first, last);
    } else if r == 0 {
        for (_, e) in fdtable::take_range(first, last) {
            crate::locks::on_close(e.ino);
            drop(e);
        }
    }
    r
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn closefrom(lowfd: c_int) {
    if guard::active() || active_cfg().is_none() {
        return real::closefrom(lowfd);
    }
    let lo = lowfd.max(0) as u32;
    around_internal(lo, u32::MAX, |a, b| real::close_range(a, b, 0));
    for (_, e) in fdtable::take_range(lo, u32::MAX) {
        crate::locks::on_close(e.ino);
        drop(e);
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let r = real::dup(fd);
    if r >= 0 && !guard::active() {
        if let Some(e) = fdtable::get(fd) {
            e.escape_from(fd);
            fdtable::set(r, Some(e));
        }
    }
    r
}

unsafe fn dup_onto(fd: c_int, to: c_int, call: impl FnOnce() -> c_int) -> c_int {
    if guard::active() {
        return call();
    }
    if fd != to && fdtable::still_internal(to) {
        warn_once(
            "dup2-internal",
            &format!(
                "dup2 onto descriptor {to}, which the preload uses for the image, refused (EBUSY)"
            ),
        );
        set_errno(libc::EBUSY);
        return -1;
    }
    let src = fdtable::get(fd);
    if let Some(e) = &src {
        e.escape_from(fd);
    }
    let r = call();
    if r >= 0 && fd != to {
        let prev = fdtable::set(to, src);
        if let Some(p) = prev {
            crate::locks::on_close(p.ino);
            drop(p);
        }
    }
    r
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    dup_onto(fd, to, || real::dup2(fd, to))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    dup_onto(fd, to, || real::dup3(fd, to, flags))
}

/// Status flags F_SETFL may change.
const SETFL_MASK: c_int =
    libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME;

unsafe fn fcntl_common(fd: c_int, cmd: c_int, arg: usize, call: impl FnOnce() -> c_int) -> c_int {
    if guard::active() {
        return call();
    }
    let Some(e) = fdtable::get(fd) else {
        return call();
    };
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            e.escape_from(fd);
            let r = call();
            if r >= 0 {
                fdtable::set(r, Some(e));
            }
            r
        }
        libc::F_SETFD => {
            if arg as c_int & libc::FD_CLOEXEC == 0 {
                e.escape();
            }
            e.fd_flags_set();
            call()
        }
        libc::F_GETFD => {
            let r = call();
            if r >= 0 {
                e.fd_flags(r)
            } else {
                r
            }
        }
        libc::F_GETFL => e.flags() | 0o100000,
        libc::F_SETFL => {
            let a = e.desc.status_flags();
            let mut cur = a.load(Ordering::Acquire);
            loop {
                let new = (cur & !SETFL_MASK) | (arg as c_int & SETFL_MASK);
                match a.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return 0,
                    Err(c) => cur = c,
                }
            }
        }
        libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW
        | libc::F_OFD_GETLK => {
            if e.is_path() {
                return ret_int(Err(libc::EBADF));
            }
            ret_int(crate::locks::fcntl_lock(&e, cmd, arg))
        }
        libc::F_GETLEASE
        | libc::F_SETLEASE
        | libc::F_NOTIFY
        | libc::F_ADD_SEALS
        | libc::F_GET_SEALS => ret_int(Err(libc::EINVAL)),
        _ => call(),
    }
}

/// # Safety
/// C ABI (the third argument is read as a machine word, whatever it is).
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_common(fd, cmd, arg, || real::fcntl(fd, cmd, arg))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_common(fd, cmd, arg, || real::fcntl64(fd, cmd, arg))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    if active_cfg().is_some() {
        if let Some(e) = fdtable::get(fd) {
            return ret_int(crate::locks::flock(&e, op));
        }
    }
    real::flock(fd, op)
}

unsafe fn lockf_nv(e: &fdtable::Entry, cmd: c_int, len: i64) -> R<c_int> {
    let mut fl = libc::flock {
        l_type: libc::F_WRLCK as i16,
        l_whence: libc::SEEK_CUR as i16,
        l_start: 0,
        l_len: len,
        l_pid: 0,
    };
    let p = &mut fl as *mut libc::flock as usize;
    match cmd {
        libc::F_LOCK => crate::locks::fcntl_lock(e, libc::F_SETLKW, p),
        libc::F_TLOCK => crate::locks::fcntl_lock(e, libc::F_SETLK, p),
        libc::F_ULOCK => {
            fl.l_type = libc::F_UNLCK as i16;
            crate::locks::fcntl_lock(e, libc::F_SETLK, &mut fl as *mut libc::flock as usize)
        }
        libc::F_TEST => {
            fl.l_type = libc::F_RDLCK as i16;
            crate::locks::fcntl_lock(e, libc::F_GETLK, p)?;
            if fl.l_type == libc::F_UNLCK as i16 || fl.l_pid == libc::getpid() {
                Ok(0)
            } else {
                Err(libc::EACCES)
            }
        }
        _ => Err(libc::EINVAL),
    }
}

macro_rules! lockf_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, cmd: c_int, len: i64) -> c_int {
            if active_cfg().is_some() {
                if let Some(e) = fdtable::get(fd) {
                    return ret_int(lockf_nv(&e, cmd, len));
                }
            }
            real::lockf64(fd, cmd, len)
        }
    };
}
lockf_fns!(lockf);
lockf_fns!(lockf64);

const FIGETBSZ: c_ulong = 2;
/// _IOWR(0x94, 54, struct file_dedupe_range)
const FIDEDUPERANGE: c_ulong = 0xc018_9436;

/// # Safety
/// C ABI (the third argument is read as a machine word).
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int {
    if guard::active() || active_cfg().is_none() {
        return real::ioctl(fd, req, arg);
    }
    let Some(e) = fdtable::get(fd) else {
        return real::ioctl(fd, req, arg);
    };
    let r: R<c_int> = match req {
        libc::FIOCLEX => {
            e.fd_flags_set();
            return real::ioctl(fd, req, arg);
        }
        libc::FIONCLEX => {
            e.escape();
            e.fd_flags_set();
            return real::ioctl(fd, req, arg);
        }
        libc::FIONREAD => {
            if e.kind != Kind::File {
                Err(libc::ENOTTY)
            } else {
                nv(|fs| {
                    let size = fs.getattr(e.ino).en()?.size;
                    let off = e.desc.offset().load(Ordering::Acquire);
                    let n = size.saturating_sub(off).min(i32::MAX as u64) as c_int;
                    *(arg as *mut c_int) = n;
                    Ok(0)
                })
            }
        }
        libc::FIONBIO => {
            let on = *(arg as *const c_int) != 0;
            if on {
                e.desc
                    .status_flags()
                    .fetch_or(libc::O_NONBLOCK, Ordering::AcqRel);
            } else {
                e.desc
                    .status_flags()
                    .fetch_and(!libc::O_NONBLOCK, Ordering::AcqRel);
            }
            Ok(0)
        }
        FIGETBSZ => {
            *(arg as *mut c_int) = 4096;
            Ok(0)
        }
        // Reflink requests: "not supported here", which cp and friends answer by copying.
        libc::FICLONE | libc::FICLONERANGE | FIDEDUPERANGE => Err(libc::EOPNOTSUPP),
        // Terminal requests (isatty and friends): not a terminal.
        r if (r & 0xff00) == 0x5400 => Err(libc::ENOTTY),
        _ => {
            warn_once(
                &format!("ioctl-{req:x}"),
                &format!("ioctl request {req:#x} on an nvmfs file is not supported (ENOTTY)"),
            );
            Err(libc::ENOTTY)
        }
    };
    ret_int(r)
}
