//! Attributes: the stat family (old and new ABI, statx), access, truncate, chmod, chown,
//! utimes, statfs/statvfs, fsync and friends, fallocate, extended attributes, pathconf.

use std::ffi::{c_char, c_int, c_long, c_uint, c_void};

use libc::{gid_t, mode_t, off64_t, size_t, ssize_t, timespec, timeval, uid_t};

type Stat = libc::stat64;
use nvmfs::{FileType, Fs, Metadata, SetAttr, SetTime};

use crate::exports::{active_cfg, route, Out, Route};
use crate::fdtable::{self, Entry, Kind};
use crate::guard::{ret_int, ret_ssize, set_errno, IoErrno, R};
use crate::real;
use crate::resolve::Found;
use crate::state::{cbytes, nv, Config, Creds};

fn split_ns(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

pub fn fill_stat(cfg: &Config, m: &Metadata, out: *mut Stat) {
    // SAFETY: every field of stat64 is an integer; zero is a valid value for each.
    let mut s: Stat = unsafe { std::mem::zeroed() };
    s.st_dev = cfg.dev;
    s.st_ino = m.ino;
    s.st_nlink = m.nlink as _;
    s.st_mode = m.mode();
    s.st_uid = m.uid;
    s.st_gid = m.gid;
    s.st_rdev = m.rdev;
    s.st_size = m.size as i64;
    s.st_blksize = 4096;
    s.st_blocks = m.st_blocks() as i64;
    (s.st_atime, s.st_atime_nsec) = split_ns(m.atime_ns);
    (s.st_mtime, s.st_mtime_nsec) = split_ns(m.mtime_ns);
    (s.st_ctime, s.st_ctime_nsec) = split_ns(m.ctime_ns);
    // SAFETY: the caller's buffer, as stat(2) writes it.
    unsafe { out.write(s) };
}

fn ts(ns: i64) -> libc::statx_timestamp {
    let (s, n) = split_ns(ns);
    // SAFETY: plain integers.
    let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    t.tv_sec = s;
    t.tv_nsec = n as u32;
    t
}

pub fn fill_statx(cfg: &Config, m: &Metadata, out: *mut libc::statx) {
    // SAFETY: plain integers.
    let mut s: libc::statx = unsafe { std::mem::zeroed() };
    s.stx_mask = libc::STATX_BASIC_STATS;
    s.stx_blksize = 4096;
    s.stx_nlink = m.nlink;
    s.stx_uid = m.uid;
    s.stx_gid = m.gid;
    s.stx_mode = m.mode() as u16;
    s.stx_ino = m.ino;
    s.stx_size = m.size;
    s.stx_blocks = m.st_blocks();
    s.stx_atime = ts(m.atime_ns);
    s.stx_mtime = ts(m.mtime_ns);
    s.stx_ctime = ts(m.ctime_ns);
    s.stx_rdev_major = libc::major(m.rdev);
    s.stx_rdev_minor = libc::minor(m.rdev);
    s.stx_dev_major = libc::major(cfg.dev);
    s.stx_dev_minor = libc::minor(cfg.dev);
    // SAFETY: the caller's buffer.
    unsafe { out.write(s) };
}

/// Resolves and runs `f` on the node; `follow` the final symlink.
fn on_node<T>(
    cfg: &'static Config,
    dirfd: c_int,
    path: *const c_char,
    follow: bool,
    f: impl FnOnce(&Fs, u64, FileType) -> R<T>,
) -> Route<T> {
    // SAFETY: the caller passes a C string.
    let p = unsafe { cbytes(path) };
    route(cfg, dirfd, p, |wk, w| match wk.resolve(w, follow)? {
        Found::Nv { ino, ft, .. } => f(wk.fs, ino, ft).map(Out::Done),
        Found::Real(c) => Ok(Out::Real(c)),
        Found::Pass => Ok(Out::Pass),
    })
}

fn stat_nv(cfg: &'static Config, e: &Entry, buf: *mut Stat) -> c_int {
    ret_int(nv(|fs| {
        let m = fs.getattr(e.ino).en()?;
        fill_stat(cfg, &m, buf);
        Ok(0)
    }))
}

/// stat/lstat/fstatat on a path; `pass` is the original call, `real_at` the call on a real
/// path that left nvmfs.
unsafe fn stat_path(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut Stat,
    flags: c_int,
    pass: impl FnOnce() -> c_int,
    real_at: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return pass();
    };
    if flags & libc::AT_EMPTY_PATH != 0 && cbytes(path).is_empty() {
        if let Some(e) = fdtable::get(dirfd) {
            return stat_nv(cfg, &e, buf);
        }
        return pass();
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    match on_node(cfg, dirfd, path, follow, |fs, ino, _| {
        let m = fs.getattr(ino).en()?;
        fill_stat(cfg, &m, buf);
        Ok(0)
    }) {
        Route::Pass => pass(),
        Route::Real(c) => real_at(c.as_ptr()),
        Route::Done(r) => ret_int(r),
    }
}

unsafe fn fstat_fd(fd: c_int, buf: *mut Stat, pass: impl FnOnce() -> c_int) -> c_int {
    if let Some(cfg) = active_cfg() {
        if let Some(e) = fdtable::get(fd) {
            return stat_nv(cfg, &e, buf);
        }
    }
    pass()
}

macro_rules! stat_fns {
    ($name:ident, $real:ident, $nofollow:expr) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut Stat) -> c_int {
            let fl = if $nofollow {
                libc::AT_SYMLINK_NOFOLLOW
            } else {
                0
            };
            stat_path(
                libc::AT_FDCWD,
                path,
                buf,
                fl,
                || real::$real(path, buf),
                |p| real::fstatat64(libc::AT_FDCWD, p, buf, fl),
            )
        }
    };
}
stat_fns!(stat, stat64, false);
stat_fns!(stat64, stat64, false);
stat_fns!(lstat, lstat64, true);
stat_fns!(lstat64, lstat64, true);

macro_rules! fstat_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *mut Stat) -> c_int {
            fstat_fd(fd, buf, || real::fstat64(fd, buf))
        }
    };
}
fstat_fns!(fstat);
fstat_fns!(fstat64);

macro_rules! fstatat_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dirfd: c_int,
            path: *const c_char,
            buf: *mut Stat,
            flags: c_int,
        ) -> c_int {
            stat_path(
                dirfd,
                path,
                buf,
                flags,
                || real::fstatat64(dirfd, path, buf, flags),
                |p| real::fstatat64(libc::AT_FDCWD, p, buf, flags & !libc::AT_EMPTY_PATH),
            )
        }
    };
}
fstatat_fns!(fstatat);
fstatat_fns!(fstatat64);
fstatat_fns!(newfstatat);

macro_rules! xstat_fns {
    ($name:ident, $real:ident, $nofollow:expr) => {
        /// # Safety
        /// C ABI (glibc's old stat interface).
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, path: *const c_char, buf: *mut Stat) -> c_int {
            let fl = if $nofollow {
                libc::AT_SYMLINK_NOFOLLOW
            } else {
                0
            };
            stat_path(
                libc::AT_FDCWD,
                path,
                buf,
                fl,
                || real::$real(ver, path, buf),
                |p| real::fstatat64(libc::AT_FDCWD, p, buf, fl),
            )
        }
    };
}
xstat_fns!(__xstat, __xstat64, false);
xstat_fns!(__xstat64, __xstat64, false);
xstat_fns!(__lxstat, __lxstat64, true);
xstat_fns!(__lxstat64, __lxstat64, true);

macro_rules! fxstat_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, fd: c_int, buf: *mut Stat) -> c_int {
            fstat_fd(fd, buf, || real::__fxstat64(ver, fd, buf))
        }
    };
}
fxstat_fns!(__fxstat);
fxstat_fns!(__fxstat64);

macro_rules! fxstatat_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ver: c_int,
            dirfd: c_int,
            path: *const c_char,
            buf: *mut Stat,
            flags: c_int,
        ) -> c_int {
            stat_path(
                dirfd,
                path,
                buf,
                flags,
                || real::__fxstatat64(ver, dirfd, path, buf, flags),
                |p| real::fstatat64(libc::AT_FDCWD, p, buf, flags & !libc::AT_EMPTY_PATH),
            )
        }
    };
}
fxstatat_fns!(__fxstatat);
fxstatat_fns!(__fxstatat64);

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return real::statx(dirfd, path, flags, mask, buf);
    };
    let on_fd = |e: &Entry| {
        ret_int(nv(|fs| {
            let m = fs.getattr(e.ino).en()?;
            fill_statx(cfg, &m, buf);
            Ok(0)
        }))
    };
    if flags & libc::AT_EMPTY_PATH != 0 && cbytes(path).is_empty() {
        if let Some(e) = fdtable::get(dirfd) {
            return on_fd(&e);
        }
        return real::statx(dirfd, path, flags, mask, buf);
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    match on_node(cfg, dirfd, path, follow, |fs, ino, _| {
        let m = fs.getattr(ino).en()?;
        fill_statx(cfg, &m, buf);
        Ok(0)
    }) {
        Route::Pass => real::statx(dirfd, path, flags, mask, buf),
        Route::Real(c) => real::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            flags & !libc::AT_EMPTY_PATH,
            mask,
            buf,
        ),
        Route::Done(r) => ret_int(r),
    }
}

// ---- access ----------------------------------------------------------------------------

fn check_access(cfg: &Config, m: &Metadata, mode: c_int, c: &Creds) -> R<c_int> {
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(libc::EINVAL);
    }
    if mode == libc::F_OK {
        return Ok(0);
    }
    if mode & libc::W_OK != 0 && cfg.read_only {
        return Err(libc::EROFS);
    }
    let want = (if mode & libc::R_OK != 0 { 4 } else { 0 })
        | (if mode & libc::W_OK != 0 { 2 } else { 0 })
        | (if mode & libc::X_OK != 0 { 1 } else { 0 });
    if c.may(m, want) {
        Ok(0)
    } else {
        Err(libc::EACCES)
    }
}

unsafe fn access_common(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
    pass: impl FnOnce() -> c_int,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return pass();
    };
    let creds = if flags & libc::AT_EACCESS != 0 {
        Creds::effective()
    } else {
        Creds::real()
    };
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    match on_node(cfg, dirfd, path, follow, |fs, ino, _| {
        let m = fs.getattr(ino).en()?;
        check_access(cfg, &m, mode, &creds)
    }) {
        Route::Pass => pass(),
        Route::Real(c) => real::faccessat(libc::AT_FDCWD, c.as_ptr(), mode, flags),
        Route::Done(r) => ret_int(r),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    access_common(libc::AT_FDCWD, path, mode, 0, || real::access(path, mode))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    access_common(dirfd, path, mode, flags, || {
        real::faccessat(dirfd, path, mode, flags)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    access_common(libc::AT_FDCWD, path, mode, libc::AT_EACCESS, || {
        real::euidaccess(path, mode)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    euidaccess(path, mode)
}

// ---- truncate --------------------------------------------------------------------------

fn truncate_ino(
    fs: &Fs,
    cfg: &Config,
    ino: u64,
    ft: FileType,
    len: i64,
    check_perm: bool,
) -> R<c_int> {
    if len < 0 {
        return Err(libc::EINVAL);
    }
    match ft {
        FileType::Dir => return Err(libc::EISDIR),
        FileType::File => {}
        _ => return Err(libc::EINVAL),
    }
    if cfg.read_only {
        return Err(libc::EROFS);
    }
    let c = Creds::effective();
    let m = fs.getattr(ino).en()?;
    if check_perm && !c.may(&m, 2) {
        return Err(libc::EACCES);
    }
    let mut a = SetAttr {
        size: Some(len as u64),
        ..Default::default()
    };
    if !c.root() && m.perm & (libc::S_ISUID | libc::S_ISGID) != 0 {
        a.mode = Some(m.perm & !(libc::S_ISUID | libc::S_ISGID));
    }
    fs.setattr(ino, &a).en()?;
    Ok(0)
}

macro_rules! truncate_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, len: off64_t) -> c_int {
            let Some(cfg) = active_cfg() else {
                return real::truncate64(path, len);
            };
            match on_node(cfg, libc::AT_FDCWD, path, true, |fs, ino, ft| {
                truncate_ino(fs, cfg, ino, ft, len, true)
            }) {
                Route::Pass => real::truncate64(path, len),
                Route::Real(c) => real::truncate64(c.as_ptr(), len),
                Route::Done(r) => ret_int(r),
            }
        }
    };
}
truncate_fns!(truncate);
truncate_fns!(truncate64);

macro_rules! ftruncate_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, len: off64_t) -> c_int {
            if let Some(cfg) = active_cfg() {
                if let Some(e) = fdtable::get(fd) {
                    if e.is_path() {
                        return ret_int(Err(libc::EBADF));
                    }
                    if !e.writable() || e.kind != Kind::File {
                        return ret_int(Err(libc::EINVAL));
                    }
                    return ret_int(nv(|fs| {
                        truncate_ino(fs, cfg, e.ino, FileType::File, len, false)
                    }));
                }
            }
            real::ftruncate64(fd, len)
        }
    };
}
ftruncate_fns!(ftruncate);
ftruncate_fns!(ftruncate64);

// ---- sync, fallocate, advice ---------------------------------------------------------------

fn sync_entry(e: &Entry) -> c_int {
    if e.is_path() {
        return ret_int(Err(libc::EBADF));
    }
    ret_int(nv(|fs| fs.sync_all().en().map(|_| 0)))
}

macro_rules! sync_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI. Every nvmfs operation is durable when it returns; this writes the image
        /// back only when it lives on an ordinary file system.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int) -> c_int {
            if active_cfg().is_some() {
                if let Some(e) = fdtable::get(fd) {
                    return sync_entry(&e);
                }
            }
            real::$name(fd)
        }
    };
}
sync_fns!(fsync);
sync_fns!(fdatasync);
sync_fns!(syncfs);

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn sync_file_range(
    fd: c_int,
    off: off64_t,
    n: off64_t,
    flags: c_uint,
) -> c_int {
    if active_cfg().is_some() {
        if let Some(e) = fdtable::get(fd) {
            if off < 0 || n < 0 {
                return ret_int(Err(libc::EINVAL));
            }
            return sync_entry(&e);
        }
    }
    real::sync_file_range(fd, off, n, flags)
}

fn fallocate_nv(e: &Entry, mode: c_int, off: i64, len: i64) -> R<c_int> {
    if off < 0 || len <= 0 {
        return Err(libc::EINVAL);
    }
    if !e.writable() {
        return Err(libc::EBADF);
    }
    match e.kind {
        Kind::Dir => return Err(libc::EISDIR),
        Kind::File => {}
        Kind::Path => return Err(libc::EBADF),
    }
    nv(|_| {
        e.file()
            .allocate(mode, off as u64, len as u64)
            .en()
            .map(|_| 0)
    })
}

macro_rules! fallocate_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            mode: c_int,
            off: off64_t,
            len: off64_t,
        ) -> c_int {
            if active_cfg().is_some() {
                if let Some(e) = fdtable::get(fd) {
                    return ret_int(fallocate_nv(&e, mode, off, len));
                }
            }
            real::fallocate64(fd, mode, off, len)
        }
    };
}
fallocate_fns!(fallocate);
fallocate_fns!(fallocate64);

macro_rules! posix_fallocate_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI (returns the error number, not -1).
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, off: off64_t, len: off64_t) -> c_int {
            if active_cfg().is_some() {
                if let Some(e) = fdtable::get(fd) {
                    return match fallocate_nv(&e, 0, off, len) {
                        Ok(_) => 0,
                        Err(err) => err,
                    };
                }
            }
            real::posix_fallocate64(fd, off, len)
        }
    };
}
posix_fallocate_fns!(posix_fallocate);
posix_fallocate_fns!(posix_fallocate64);

macro_rules! fadvise_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI: advice is accepted and ignored on nvmfs files (there is no page cache).
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            off: off64_t,
            len: off64_t,
            advice: c_int,
        ) -> c_int {
            if active_cfg().is_some() && fdtable::get(fd).is_some() {
                return if (0..=5).contains(&advice) && len >= 0 {
                    0
                } else {
                    libc::EINVAL
                };
            }
            real::posix_fadvise64(fd, off, len, advice)
        }
    };
}
fadvise_fns!(posix_fadvise);
fadvise_fns!(posix_fadvise64);

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn readahead(fd: c_int, off: off64_t, n: size_t) -> ssize_t {
    if active_cfg().is_some() && fdtable::get(fd).is_some() {
        return 0;
    }
    real::readahead(fd, off, n)
}

// ---- chmod, chown, utimes ------------------------------------------------------------------

pub fn chmod_ino(fs: &Fs, cfg: &Config, ino: u64, mode: mode_t) -> R<c_int> {
    let c = Creds::effective();
    let m = fs.getattr(ino).en()?;
    if !c.root() && m.uid != c.uid {
        return Err(libc::EPERM);
    }
    if cfg.read_only {
        return Err(libc::EROFS);
    }
    let mut mode = mode & 0o7777;
    if !c.root() && !m.is_dir() && mode & libc::S_ISGID != 0 && !c.in_group(m.gid) {
        mode &= !libc::S_ISGID;
    }
    fs.setattr(
        ino,
        &SetAttr {
            mode: Some(mode),
            ..Default::default()
        },
    )
    .en()?;
    Ok(0)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    let Some(cfg) = active_cfg() else {
        return real::chmod(path, mode);
    };
    match on_node(cfg, libc::AT_FDCWD, path, true, |fs, ino, _| {
        chmod_ino(fs, cfg, ino, mode)
    }) {
        Route::Pass => real::chmod(path, mode),
        Route::Real(c) => real::chmod(c.as_ptr(), mode),
        Route::Done(r) => ret_int(r),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return real::fchmodat(dirfd, path, mode, flags);
    };
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    match on_node(cfg, dirfd, path, follow, |fs, ino, ft| {
        if ft == FileType::Symlink {
            return Err(libc::EOPNOTSUPP);
        }
        chmod_ino(fs, cfg, ino, mode)
    }) {
        Route::Pass => real::fchmodat(dirfd, path, mode, flags),
        Route::Real(c) => real::fchmodat(libc::AT_FDCWD, c.as_ptr(), mode, flags),
        Route::Done(r) => ret_int(r),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    if let Some(cfg) = active_cfg() {
        if let Some(e) = fdtable::get(fd) {
            if e.is_path() {
                return ret_int(Err(libc::EBADF));
            }
            return ret_int(nv(|fs| chmod_ino(fs, cfg, e.ino, mode)));
        }
    }
    real::fchmod(fd, mode)
}

pub fn chown_ino(fs: &Fs, cfg: &Config, ino: u64, uid: uid_t, gid: gid_t) -> R<c_int> {
    let c = Creds::effective();
    let m = fs.getattr(ino).en()?;
    let uid = (uid != u32::MAX).then_some(uid);
    let gid = (gid != u32::MAX).then_some(gid);
    if !c.root() {
        if uid.is_some_and(|u| u != m.uid || c.uid != m.uid) {
            return Err(libc::EPERM);
        }
        if gid.is_some_and(|g| c.uid != m.uid || (g != m.gid && !c.in_group(g))) {
            return Err(libc::EPERM);
        }
    }
    if cfg.read_only {
        return Err(libc::EROFS);
    }
    let mut mode = m.perm;
    if (uid.is_some() || gid.is_some()) && !m.is_dir() {
        mode &= !libc::S_ISUID;
        if mode & libc::S_IXGRP != 0 {
            mode &= !libc::S_ISGID;
        }
    }
    fs.setattr(
        ino,
        &SetAttr {
            uid,
            gid,
            mode: Some(mode),
            ..Default::default()
        },
    )
    .en()?;
    Ok(0)
}

unsafe fn chown_path(
    dirfd: c_int,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
    follow: bool,
    pass: impl FnOnce() -> c_int,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return pass();
    };
    let fl = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    match on_node(cfg, dirfd, path, follow, |fs, ino, _| {
        chown_ino(fs, cfg, ino, uid, gid)
    }) {
        Route::Pass => pass(),
        Route::Real(c) => real::fchownat(libc::AT_FDCWD, c.as_ptr(), uid, gid, fl),
        Route::Done(r) => ret_int(r),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn chown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    chown_path(libc::AT_FDCWD, path, uid, gid, true, || {
        real::chown(path, uid, gid)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    chown_path(libc::AT_FDCWD, path, uid, gid, false, || {
        real::lchown(path, uid, gid)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
    flags: c_int,
) -> c_int {
    if flags & libc::AT_EMPTY_PATH != 0 && cbytes(path).is_empty() {
        return fchown(dirfd, uid, gid);
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    chown_path(dirfd, path, uid, gid, follow, || {
        real::fchownat(dirfd, path, uid, gid, flags)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, uid: uid_t, gid: gid_t) -> c_int {
    if let Some(cfg) = active_cfg() {
        if let Some(e) = fdtable::get(fd) {
            return ret_int(nv(|fs| chown_ino(fs, cfg, e.ino, uid, gid)));
        }
    }
    real::fchown(fd, uid, gid)
}

/// A time to set: None = leave (UTIME_OMIT).
type Times = (Option<SetTime>, Option<SetTime>);

fn times_from_timespec(t: *const timespec) -> R<Times> {
    if t.is_null() {
        return Ok((Some(SetTime::Now), Some(SetTime::Now)));
    }
    let one = |ts: &timespec| -> R<Option<SetTime>> {
        match ts.tv_nsec {
            libc::UTIME_NOW => Ok(Some(SetTime::Now)),
            libc::UTIME_OMIT => Ok(None),
            n if (0..1_000_000_000).contains(&n) => Ok(Some(SetTime::At(
                ts.tv_sec.saturating_mul(1_000_000_000).saturating_add(n),
            ))),
            _ => Err(libc::EINVAL),
        }
    };
    // SAFETY: two timespecs, as utimensat takes them.
    let (a, m) = unsafe { (&*t, &*t.add(1)) };
    Ok((one(a)?, one(m)?))
}

fn times_from_timeval(t: *const timeval) -> R<Times> {
    if t.is_null() {
        return Ok((Some(SetTime::Now), Some(SetTime::Now)));
    }
    let one = |tv: &timeval| -> R<Option<SetTime>> {
        if !(0..1_000_000).contains(&tv.tv_usec) {
            return Err(libc::EINVAL);
        }
        Ok(Some(SetTime::At(
            tv.tv_sec
                .saturating_mul(1_000_000_000)
                .saturating_add(tv.tv_usec * 1000),
        )))
    };
    // SAFETY: two timevals.
    let (a, m) = unsafe { (&*t, &*t.add(1)) };
    Ok((one(a)?, one(m)?))
}

pub fn utimes_ino(fs: &Fs, cfg: &Config, ino: u64, t: Times) -> R<c_int> {
    if t.0.is_none() && t.1.is_none() {
        return Ok(0);
    }
    let c = Creds::effective();
    let m = fs.getattr(ino).en()?;
    let explicit = matches!(t.0, Some(SetTime::At(_))) || matches!(t.1, Some(SetTime::At(_)));
    if !c.root() && m.uid != c.uid {
        if explicit {
            return Err(libc::EPERM);
        }
        if !c.may(&m, 2) {
            return Err(libc::EACCES);
        }
    }
    if cfg.read_only {
        return Err(libc::EROFS);
    }
    fs.setattr(
        ino,
        &SetAttr {
            atime: t.0,
            mtime: t.1,
            ..Default::default()
        },
    )
    .en()?;
    Ok(0)
}

unsafe fn utimes_path(
    dirfd: c_int,
    path: *const c_char,
    t: R<Times>,
    follow: bool,
    pass: impl FnOnce() -> c_int,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return pass();
    };
    let t = match t {
        Ok(t) => t,
        Err(_) => return pass(),
    };
    match on_node(cfg, dirfd, path, follow, |fs, ino, _| {
        utimes_ino(fs, cfg, ino, t)
    }) {
        Route::Pass => pass(),
        Route::Real(c) => {
            let ts = to_timespecs(t);
            let fl = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
            real::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), fl)
        }
        Route::Done(r) => ret_int(r),
    }
}

fn to_timespecs(t: Times) -> [timespec; 2] {
    let one = |s: Option<SetTime>| match s {
        None => timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(SetTime::Now) => timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(SetTime::At(ns)) => {
            let (s, n) = split_ns(ns);
            timespec {
                tv_sec: s,
                tv_nsec: n,
            }
        }
    };
    [one(t.0), one(t.1)]
}

unsafe fn utimes_fd(fd: c_int, t: R<Times>, pass: impl FnOnce() -> c_int) -> c_int {
    if let Some(cfg) = active_cfg() {
        if let Some(e) = fdtable::get(fd) {
            return ret_int(t.and_then(|t| nv(|fs| utimes_ino(fs, cfg, e.ino, t))));
        }
    }
    pass()
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    times: *const timespec,
    flags: c_int,
) -> c_int {
    if path.is_null() || (flags & libc::AT_EMPTY_PATH != 0 && cbytes(path).is_empty()) {
        return utimes_fd(dirfd, times_from_timespec(times), || {
            real::utimensat(dirfd, path, times, flags)
        });
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    utimes_path(dirfd, path, times_from_timespec(times), follow, || {
        real::utimensat(dirfd, path, times, flags)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, times: *const timespec) -> c_int {
    utimes_fd(fd, times_from_timespec(times), || real::futimens(fd, times))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn utimes(path: *const c_char, times: *const timeval) -> c_int {
    utimes_path(
        libc::AT_FDCWD,
        path,
        times_from_timeval(times),
        true,
        || real::utimes(path, times),
    )
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn lutimes(path: *const c_char, times: *const timeval) -> c_int {
    utimes_path(
        libc::AT_FDCWD,
        path,
        times_from_timeval(times),
        false,
        || real::lutimes(path, times),
    )
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, times: *const timeval) -> c_int {
    utimes_fd(fd, times_from_timeval(times), || real::futimes(fd, times))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn futimesat(
    dirfd: c_int,
    path: *const c_char,
    times: *const timeval,
) -> c_int {
    if path.is_null() {
        return utimes_fd(dirfd, times_from_timeval(times), || {
            real::futimesat(dirfd, path, times)
        });
    }
    utimes_path(dirfd, path, times_from_timeval(times), true, || {
        real::futimesat(dirfd, path, times)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, times: *const libc::utimbuf) -> c_int {
    let t = if times.is_null() {
        Ok((Some(SetTime::Now), Some(SetTime::Now)))
    } else {
        let u = &*times;
        Ok((
            Some(SetTime::At(u.actime.saturating_mul(1_000_000_000))),
            Some(SetTime::At(u.modtime.saturating_mul(1_000_000_000))),
        ))
    };
    utimes_path(libc::AT_FDCWD, path, t, true, || real::utime(path, times))
}

// ---- statfs ------------------------------------------------------------------------------

/// f_type of nvmfs ("NVMF").
pub const NVMFS_MAGIC: i64 = 0x4e56_4d46;

fn fill_statfs(cfg: &Config, s: &nvmfs::Statfs, out: *mut libc::statfs64) {
    // SAFETY: integers only.
    let mut o: libc::statfs64 = unsafe { std::mem::zeroed() };
    o.f_type = NVMFS_MAGIC;
    o.f_bsize = s.block_size as i64;
    o.f_blocks = s.blocks;
    o.f_bfree = s.blocks_free;
    o.f_bavail = s.blocks_free;
    o.f_files = s.inodes;
    o.f_ffree = s.inodes_free;
    o.f_namelen = s.name_max as i64;
    o.f_frsize = s.block_size as i64;
    o.f_flags = (libc::ST_NOATIME
        | libc::ST_NODEV
        | if cfg.read_only { libc::ST_RDONLY } else { 0 }) as i64;
    // SAFETY: the caller's buffer.
    unsafe { out.write(o) };
}

fn fill_statvfs(cfg: &Config, s: &nvmfs::Statfs, out: *mut libc::statvfs64) {
    // SAFETY: integers only.
    let mut o: libc::statvfs64 = unsafe { std::mem::zeroed() };
    o.f_bsize = s.block_size;
    o.f_frsize = s.block_size;
    o.f_blocks = s.blocks;
    o.f_bfree = s.blocks_free;
    o.f_bavail = s.blocks_free;
    o.f_files = s.inodes;
    o.f_ffree = s.inodes_free;
    o.f_favail = s.inodes_free;
    o.f_fsid = cfg.dev;
    o.f_flag = libc::ST_NOATIME | libc::ST_NODEV | if cfg.read_only { libc::ST_RDONLY } else { 0 };
    o.f_namemax = s.name_max;
    // SAFETY: the caller's buffer.
    unsafe { out.write(o) };
}

macro_rules! statfs_fns {
    ($name:ident, $fname:ident, $ty:ty, $fill:ident, $real:ident, $freal:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut $ty) -> c_int {
            let Some(cfg) = active_cfg() else {
                return real::$real(path, buf);
            };
            match on_node(cfg, libc::AT_FDCWD, path, true, |fs, _, _| {
                $fill(cfg, &fs.statfs(), buf);
                Ok(0)
            }) {
                Route::Pass => real::$real(path, buf),
                Route::Real(c) => real::$real(c.as_ptr(), buf),
                Route::Done(r) => ret_int(r),
            }
        }

        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $fname(fd: c_int, buf: *mut $ty) -> c_int {
            if let Some(cfg) = active_cfg() {
                if fdtable::get(fd).is_some() {
                    return ret_int(nv(|fs| {
                        $fill(cfg, &fs.statfs(), buf);
                        Ok(0)
                    }));
                }
            }
            real::$freal(fd, buf)
        }
    };
}
statfs_fns!(
    statfs,
    fstatfs,
    libc::statfs64,
    fill_statfs,
    statfs64,
    fstatfs64
);
statfs_fns!(
    statfs64,
    fstatfs64,
    libc::statfs64,
    fill_statfs,
    statfs64,
    fstatfs64
);
statfs_fns!(
    statvfs,
    fstatvfs,
    libc::statvfs64,
    fill_statvfs,
    statvfs64,
    fstatvfs64
);
statfs_fns!(
    statvfs64,
    fstatvfs64,
    libc::statvfs64,
    fill_statvfs,
    statvfs64,
    fstatvfs64
);

// ---- extended attributes: not stored (EOPNOTSUPP, as the FUSE mount) -------------------------

macro_rules! xattr_path_fns {
    ($name:ident, $follow:expr, ($($a:ident : $t:ty),*) -> $r:ty, $ret:ident) => {
        /// # Safety
        /// C ABI. nvmfs stores no extended attributes: EOPNOTSUPP on its files.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, $($a: $t),*) -> $r {
            let Some(cfg) = active_cfg() else {
                return real::$name(path, $($a),*);
            };
            match on_node(cfg, libc::AT_FDCWD, path, $follow, |_, _, _| Err::<(), i32>(libc::EOPNOTSUPP)) {
                Route::Pass => real::$name(path, $($a),*),
                Route::Real(c) => real::$name(c.as_ptr(), $($a),*),
                Route::Done(r) => $ret(r.map(|_| 0)) as $r,
            }
        }
    };
}
xattr_path_fns!(getxattr, true, (name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t, ret_ssize);
xattr_path_fns!(lgetxattr, false, (name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t, ret_ssize);
xattr_path_fns!(setxattr, true, (name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int, ret_int);
xattr_path_fns!(lsetxattr, false, (name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int, ret_int);
xattr_path_fns!(listxattr, true, (list: *mut c_char, size: size_t) -> ssize_t, ret_ssize);
xattr_path_fns!(llistxattr, false, (list: *mut c_char, size: size_t) -> ssize_t, ret_ssize);
xattr_path_fns!(removexattr, true, (name: *const c_char) -> c_int, ret_int);
xattr_path_fns!(lremovexattr, false, (name: *const c_char) -> c_int, ret_int);

macro_rules! xattr_fd_fns {
    ($name:ident, ($($a:ident : $t:ty),*) -> $r:ty) => {
        /// # Safety
        /// C ABI. nvmfs stores no extended attributes: EOPNOTSUPP on its files.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, $($a: $t),*) -> $r {
            if active_cfg().is_some() && fdtable::get(fd).is_some() {
                set_errno(libc::EOPNOTSUPP);
                return -1;
            }
            real::$name(fd, $($a),*)
        }
    };
}
xattr_fd_fns!(fgetxattr, (name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t);
xattr_fd_fns!(fsetxattr, (name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int);
xattr_fd_fns!(flistxattr, (list: *mut c_char, size: size_t) -> ssize_t);
xattr_fd_fns!(fremovexattr, (name: *const c_char) -> c_int);

// ---- pathconf ----------------------------------------------------------------------------

fn conf(name: c_int) -> R<c_long> {
    Ok(match name {
        libc::_PC_LINK_MAX => 65000,
        libc::_PC_MAX_CANON | libc::_PC_MAX_INPUT => 255,
        libc::_PC_NAME_MAX => 255,
        libc::_PC_PATH_MAX => 4096,
        libc::_PC_PIPE_BUF => 4096,
        libc::_PC_CHOWN_RESTRICTED | libc::_PC_NO_TRUNC => 1,
        libc::_PC_VDISABLE => 0,
        libc::_PC_FILESIZEBITS => 64,
        libc::_PC_REC_XFER_ALIGN | libc::_PC_ALLOC_SIZE_MIN | libc::_PC_REC_MIN_XFER_SIZE => 4096,
        libc::_PC_SYMLINK_MAX => 4095,
        libc::_PC_2_SYMLINKS => 1,
        _ => return Err(libc::EINVAL),
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn pathconf(path: *const c_char, name: c_int) -> c_long {
    let Some(cfg) = active_cfg() else {
        return real::pathconf(path, name);
    };
    match on_node(cfg, libc::AT_FDCWD, path, true, |_, _, _| conf(name)) {
        Route::Pass => real::pathconf(path, name),
        Route::Real(c) => real::pathconf(c.as_ptr(), name),
        Route::Done(Ok(v)) => v,
        Route::Done(Err(e)) => {
            set_errno(e);
            -1
        }
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fpathconf(fd: c_int, name: c_int) -> c_long {
    if active_cfg().is_some() && fdtable::get(fd).is_some() {
        return match conf(name) {
            Ok(v) => v,
            Err(e) => {
                set_errno(e);
                -1
            }
        };
    }
    real::fpathconf(fd, name)
}
