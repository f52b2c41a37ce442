//! The data path: read, write and their positional, vectored, 64-bit and fortified
//! variants, lseek. On an nvmfs descriptor these are copies between the program's buffer
//! and the image (no system call); on any other they are the C library's.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use libc::{iovec, off64_t, size_t, ssize_t};

use crate::exports::{slice, slice_mut, MAX_RW};
use crate::fdtable::{self, Entry, Kind};
use crate::guard::{self, ret_ssize, IoErrno, R};
use crate::real;
use crate::state::nv;

fn check_read(e: &Entry) -> R<()> {
    if !e.readable() {
        return Err(libc::EBADF);
    }
    if e.kind == Kind::Dir {
        return Err(libc::EISDIR);
    }
    if e.kind != Kind::File {
        return Err(libc::EINVAL);
    }
    Ok(())
}

fn check_write(e: &Entry) -> R<()> {
    if !e.writable() || e.kind != Kind::File {
        return Err(libc::EBADF);
    }
    Ok(())
}

/// Runs `io` on consecutive buffers from `off` (readv/writev semantics): `io(off)` does the
/// next buffer and returns (its length, bytes done), or None when there is none left. Stops
/// at the first short transfer; an error after some bytes ends the call with those bytes.
/// Returns (bytes done, offset after them).
fn each_buffer(
    mut off: u64,
    mut io: impl FnMut(u64) -> Option<(usize, std::io::Result<usize>)>,
) -> R<(usize, u64)> {
    let mut total = 0usize;
    while let Some((len, r)) = io(off) {
        if len == 0 {
            continue;
        }
        let n = match r {
            Ok(n) => n,
            Err(_) if total > 0 => break,
            Err(err) => return Err(guard::to_errno(&err)),
        };
        total += n;
        off += n as u64;
        if n < len {
            break;
        }
    }
    Ok((total, off))
}

/// Reads into `bufs` in order at `at`, or at the description's offset (which then moves).
pub fn nv_read(e: &Entry, bufs: &mut [&mut [u8]], at: Option<u64>) -> R<usize> {
    check_read(e)?;
    nv(|_| {
        let _l = at.is_none().then(|| e.pos.lock());
        let start = at.unwrap_or_else(|| e.desc.offset().load(Ordering::Acquire));
        let mut bufs = bufs.iter_mut();
        let (total, off) = each_buffer(start, |off| {
            let b = bufs.next()?;
            Some((b.len(), e.file().read_at(b, off)))
        })?;
        if at.is_none() {
            e.desc.offset().store(off, Ordering::Release);
        }
        Ok(total)
    })
}

/// Writes `bufs` in order at `at` or at the description's offset; at end of file when the
/// description has O_APPEND (or `append`), as one atomic append.
pub fn nv_write(e: &Entry, bufs: &[&[u8]], at: Option<u64>, append: bool) -> R<usize> {
    check_write(e)?;
    let append = append || e.flags() & libc::O_APPEND != 0;
    nv(|_| {
        let _l = at.is_none().then(|| e.pos.lock());
        if append {
            let joined;
            let data: &[u8] = if bufs.len() == 1 {
                bufs[0]
            } else {
                joined = bufs.concat();
                &joined
            };
            let (n, size) = e.file().append(data).en()?;
            if at.is_none() {
                e.desc.offset().store(size, Ordering::Release);
            }
            return Ok(n);
        }
        let start = at.unwrap_or_else(|| e.desc.offset().load(Ordering::Acquire));
        let mut bufs = bufs.iter();
        let (total, off) = each_buffer(start, |off| {
            let b = bufs.next()?;
            Some((b.len(), e.file().write_at(b, off)))
        })?;
        if at.is_none() {
            e.desc.offset().store(off, Ordering::Release);
        }
        Ok(total)
    })
}

pub fn nv_lseek(e: &Entry, off: i64, whence: c_int) -> R<i64> {
    if e.is_path() {
        return Err(libc::EBADF);
    }
    nv(|fs| {
        let _l = e.pos.lock();
        let cur = e.desc.offset().load(Ordering::Acquire) as i64;
        if e.kind == Kind::Dir {
            let new = match whence {
                libc::SEEK_SET => off,
                libc::SEEK_CUR if off == 0 => cur,
                _ => return Err(libc::EINVAL),
            };
            if new < 0 {
                return Err(libc::EINVAL);
            }
            e.desc.offset().store(new as u64, Ordering::Release);
            return Ok(new);
        }
        let size = || -> R<i64> { Ok(fs.getattr(e.ino).en()?.size as i64) };
        let new = match whence {
            libc::SEEK_SET => off,
            libc::SEEK_CUR => cur.checked_add(off).ok_or(libc::EOVERFLOW)?,
            libc::SEEK_END => size()?.checked_add(off).ok_or(libc::EOVERFLOW)?,
            libc::SEEK_DATA => {
                let s = size()?;
                if off < 0 || off >= s {
                    return Err(libc::ENXIO);
                }
                off
            }
            libc::SEEK_HOLE => {
                let s = size()?;
                if off < 0 || off >= s {
                    return Err(libc::ENXIO);
                }
                s
            }
            _ => return Err(libc::EINVAL),
        };
        if new < 0 {
            return Err(libc::EINVAL);
        }
        e.desc.offset().store(new as u64, Ordering::Release);
        Ok(new)
    })
}

fn r_ssize(r: R<usize>) -> ssize_t {
    ret_ssize(r.map(|n| n as isize))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    if !guard::active() {
        if let Some(e) = fdtable::get(fd) {
            let b = slice_mut(buf, n.min(MAX_RW));
            return r_ssize(nv_read(&e, &mut [b], None));
        }
    }
    real::read(fd, buf, n)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        libc::abort();
    }
    read(fd, buf, n)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    if let Some(e) = fdtable::get(fd) {
        if guard::active() {
            // The core's own diagnostics to a stderr that is an nvmfs file: dropped rather
            // than written into the description file behind the descriptor.
            return n as ssize_t;
        }
        let b = slice(buf, n.min(MAX_RW));
        return r_ssize(nv_write(&e, &[b], None, false));
    }
    real::write(fd, buf, n)
}

macro_rules! pread_fn {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *mut c_void,
            n: size_t,
            off: off64_t,
        ) -> ssize_t {
            if !guard::active() {
                if let Some(e) = fdtable::get(fd) {
                    if off < 0 {
                        return ret_ssize(Err(libc::EINVAL));
                    }
                    let b = slice_mut(buf, n.min(MAX_RW));
                    return r_ssize(nv_read(&e, &mut [b], Some(off as u64)));
                }
            }
            real::pread64(fd, buf, n, off)
        }
    };
}
pread_fn!(pread);
pread_fn!(pread64);

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        libc::abort();
    }
    pread64(fd, buf, n, off)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        libc::abort();
    }
    pread64(fd, buf, n, off)
}

macro_rules! pwrite_fn {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *const c_void,
            n: size_t,
            off: off64_t,
        ) -> ssize_t {
            if !guard::active() {
                if let Some(e) = fdtable::get(fd) {
                    if off < 0 {
                        return ret_ssize(Err(libc::EINVAL));
                    }
                    let b = slice(buf, n.min(MAX_RW));
                    return r_ssize(nv_write(&e, &[b], Some(off as u64), false));
                }
            }
            real::pwrite64(fd, buf, n, off)
        }
    };
}
pwrite_fn!(pwrite);
pwrite_fn!(pwrite64);

unsafe fn iov_mut<'a>(iov: *const iovec, cnt: c_int) -> R<Vec<&'a mut [u8]>> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    let mut v = Vec::with_capacity(cnt as usize);
    let mut total = 0usize;
    for i in 0..cnt as usize {
        let e = &*iov.add(i);
        let len = e.iov_len.min(MAX_RW - total);
        total += len;
        v.push(slice_mut(e.iov_base, len));
    }
    Ok(v)
}

unsafe fn iov<'a>(iov: *const iovec, cnt: c_int) -> R<Vec<&'a [u8]>> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    let mut v = Vec::with_capacity(cnt as usize);
    let mut total = 0usize;
    for i in 0..cnt as usize {
        let e = &*iov.add(i);
        let len = e.iov_len.min(MAX_RW - total);
        total += len;
        v.push(slice(e.iov_base, len));
    }
    Ok(v)
}

unsafe fn readv_nv(e: &Entry, v: *const iovec, cnt: c_int, at: Option<u64>) -> ssize_t {
    r_ssize(iov_mut(v, cnt).and_then(|mut b| nv_read(e, &mut b, at)))
}

unsafe fn writev_nv(
    e: &Entry,
    v: *const iovec,
    cnt: c_int,
    at: Option<u64>,
    append: bool,
) -> ssize_t {
    r_ssize(iov(v, cnt).and_then(|b| nv_write(e, &b, at, append)))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, v: *const iovec, cnt: c_int) -> ssize_t {
    if !guard::active() {
        if let Some(e) = fdtable::get(fd) {
            return readv_nv(&e, v, cnt, None);
        }
    }
    real::readv(fd, v, cnt)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, v: *const iovec, cnt: c_int) -> ssize_t {
    if let Some(e) = fdtable::get(fd) {
        if guard::active() {
            return iov(v, cnt).map_or(-1, |b| b.iter().map(|s| s.len()).sum::<usize>() as ssize_t);
        }
        return writev_nv(&e, v, cnt, None, false);
    }
    real::writev(fd, v, cnt)
}

macro_rules! preadv_fn {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            v: *const iovec,
            cnt: c_int,
            off: off64_t,
        ) -> ssize_t {
            if !guard::active() {
                if let Some(e) = fdtable::get(fd) {
                    if off < 0 {
                        return ret_ssize(Err(libc::EINVAL));
                    }
                    return readv_nv(&e, v, cnt, Some(off as u64));
                }
            }
            real::preadv64(fd, v, cnt, off)
        }
    };
}
preadv_fn!(preadv);
preadv_fn!(preadv64);

macro_rules! pwritev_fn {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            v: *const iovec,
            cnt: c_int,
            off: off64_t,
        ) -> ssize_t {
            if !guard::active() {
                if let Some(e) = fdtable::get(fd) {
                    if off < 0 {
                        return ret_ssize(Err(libc::EINVAL));
                    }
                    return writev_nv(&e, v, cnt, Some(off as u64), false);
                }
            }
            real::pwritev64(fd, v, cnt, off)
        }
    };
}
pwritev_fn!(pwritev);
pwritev_fn!(pwritev64);

macro_rules! preadv2_fn {
    ($name:ident) => {
        /// # Safety
        /// C ABI. An offset of -1 means the current offset.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            v: *const iovec,
            cnt: c_int,
            off: off64_t,
            flags: c_int,
        ) -> ssize_t {
            if !guard::active() {
                if let Some(e) = fdtable::get(fd) {
                    if off < -1 {
                        return ret_ssize(Err(libc::EINVAL));
                    }
                    let _ = flags;
                    return readv_nv(&e, v, cnt, (off >= 0).then_some(off as u64));
                }
            }
            real::preadv64v2(fd, v, cnt, off, flags)
        }
    };
}
preadv2_fn!(preadv2);
preadv2_fn!(preadv64v2);

macro_rules! pwritev2_fn {
    ($name:ident) => {
        /// # Safety
        /// C ABI. An offset of -1 means the current offset; RWF_APPEND appends.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            v: *const iovec,
            cnt: c_int,
            off: off64_t,
            flags: c_int,
        ) -> ssize_t {
            if !guard::active() {
                if let Some(e) = fdtable::get(fd) {
                    if off < -1 {
                        return ret_ssize(Err(libc::EINVAL));
                    }
                    let append = flags & libc::RWF_APPEND != 0;
                    return writev_nv(&e, v, cnt, (off >= 0).then_some(off as u64), append);
                }
            }
            real::pwritev64v2(fd, v, cnt, off, flags)
        }
    };
}
pwritev2_fn!(pwritev2);
pwritev2_fn!(pwritev64v2);

macro_rules! lseek_fn {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
            if !guard::active() {
                if let Some(e) = fdtable::get(fd) {
                    return match nv_lseek(&e, off, whence) {
                        Ok(v) => v,
                        Err(err) => {
                            guard::set_errno(err);
                            -1
                        }
                    };
                }
            }
            real::lseek64(fd, off, whence)
        }
    };
}
lseek_fn!(lseek);
lseek_fn!(lseek64);
