//! Calls that create, remove, rename or read names: unlink, rmdir, remove, rename(at)(2),
//! mkdir(at), link(at), symlink(at), readlink(at), mknod(at), mkfifo(at), realpath, the
//! mkstemp family and mkdtemp.

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use libc::{mode_t, size_t, ssize_t};
use nvmfs::{FileType, Fs, RenameFlags};

use crate::exports::{active_cfg, route, Out, Route};
use crate::fdtable;
use crate::guard::{ret_int, ret_ptr, ret_ssize, set_errno, to_errno, IoErrno, R};
use crate::open::{check_dir_writable, new_owner};
use crate::real;
use crate::resolve::{classify, fd_alias, Found, Parent, Walker, ROOT};
use crate::state::{self, cbytes, nv, Config, Creds};

/// The sticky-directory rule: in a sticky directory only the owner of the entry, the
/// owner of the directory, or root may remove or rename it.
fn check_sticky(fs: &Fs, c: &Creds, dir: &nvmfs::Metadata, ino: u64) -> R<()> {
    if c.root() || dir.perm & libc::S_ISVTX == 0 || dir.uid == c.uid {
        return Ok(());
    }
    if fs.getattr(ino).en()?.uid == c.uid {
        return Ok(());
    }
    Err(libc::EPERM)
}

fn remove_nv(wk: &mut Walker<'_>, w: &crate::resolve::Walk, dir_wanted: bool) -> R<Out<c_int>> {
    let fs = wk.fs;
    let cfg = wk.cfg;
    match wk.parent(w)? {
        Parent::Pass => Ok(Out::Pass),
        Parent::Real(c) => Ok(Out::Real(c)),
        Parent::NvSelf {
            ino, dot, dotdot, ..
        } => Err(if !dir_wanted {
            libc::EISDIR
        } else if dotdot {
            libc::ENOTEMPTY
        } else if dot {
            libc::EINVAL
        } else if ino == ROOT {
            libc::EBUSY
        } else {
            libc::EINVAL
        }),
        Parent::Nv {
            dir,
            name,
            trailing_slash,
            ..
        } => {
            let c = Creds::effective();
            let dm = check_dir_writable(fs, cfg, &c, dir)?;
            let (ino, ft) = fs.lookup_ino(dir, &name).en()?;
            check_sticky(fs, &c, &dm, ino)?;
            if dir_wanted {
                if ft != FileType::Dir {
                    return Err(libc::ENOTDIR);
                }
                fs.rmdir(dir, &name).en()?;
            } else {
                if ft == FileType::Dir {
                    return Err(libc::EISDIR);
                }
                if trailing_slash {
                    return Err(libc::ENOTDIR);
                }
                fs.unlink(dir, &name).en()?;
            }
            Ok(Out::Done(0))
        }
    }
}

unsafe fn remove_path(
    dirfd: c_int,
    path: *const c_char,
    dir: bool,
    pass: impl FnOnce() -> c_int,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return pass();
    };
    match route(cfg, dirfd, cbytes(path), |wk, w| remove_nv(wk, w, dir)) {
        Route::Pass => pass(),
        Route::Real(c) => real::unlinkat(
            libc::AT_FDCWD,
            c.as_ptr(),
            if dir { libc::AT_REMOVEDIR } else { 0 },
        ),
        Route::Done(r) => ret_int(r),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    remove_path(libc::AT_FDCWD, path, false, || real::unlink(path))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    remove_path(libc::AT_FDCWD, path, true, || real::rmdir(path))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if flags & !libc::AT_REMOVEDIR != 0 {
        return real::unlinkat(dirfd, path, flags);
    }
    remove_path(dirfd, path, flags & libc::AT_REMOVEDIR != 0, || {
        real::unlinkat(dirfd, path, flags)
    })
}

/// # Safety
/// C ABI (glibc's remove calls its internal unlink and rmdir, so it is caught here too).
#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    let Some(cfg) = active_cfg() else {
        return real::remove(path);
    };
    if classify(cfg, libc::AT_FDCWD, cbytes(path)).is_none() {
        return real::remove(path);
    }
    let r = unlink(path);
    if r == 0 || crate::guard::errno() != libc::EISDIR {
        return r;
    }
    rmdir(path)
}

/// A path the kernel refuses whole (ENAMETOOLONG): calls with two paths pass it on.
unsafe fn too_long(p: *const c_char) -> bool {
    cbytes(p).len() >= libc::PATH_MAX as usize
}

// ---- rename ----------------------------------------------------------------------------

enum Ren {
    Done(R<c_int>),
    /// Both sides are real: (dirfd, path) each, original or rewritten.
    Real(Option<std::ffi::CString>, Option<std::ffi::CString>),
}

fn rename_nv(fs: &Fs, cfg: &'static Config, a: Parent, b: Parent, flags: u32) -> R<Ren> {
    use Parent::*;
    match (a, b) {
        (NvSelf { .. }, _) | (_, NvSelf { .. }) => Err(libc::EBUSY),
        (
            Nv {
                dir: d1,
                name: n1,
                trailing_slash: t1,
                ..
            },
            Nv {
                dir: d2,
                name: n2,
                trailing_slash: t2,
                ..
            },
        ) => {
            if flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0
                || flags == libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE
            {
                return Err(libc::EINVAL);
            }
            let c = Creds::effective();
            let dm1 = check_dir_writable(fs, cfg, &c, d1)?;
            let dm2 = if d2 == d1 {
                dm1.clone()
            } else {
                check_dir_writable(fs, cfg, &c, d2)?
            };
            let (ino, ft) = fs.lookup_ino(d1, &n1).en()?;
            if (t1 || t2) && ft != FileType::Dir {
                return Err(libc::ENOTDIR);
            }
            check_sticky(fs, &c, &dm1, ino)?;
            let target = match fs.lookup_ino(d2, &n2) {
                Ok(t) => Some(t),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
                Err(e) => return Err(to_errno(&e)),
            };
            if let Some((tino, _)) = target {
                if flags & libc::RENAME_NOREPLACE != 0 {
                    return Err(libc::EEXIST);
                }
                if tino == ino && flags == 0 {
                    // POSIX: two links to one file; nothing happens.
                    return Ok(Ren::Done(Ok(0)));
                }
                check_sticky(fs, &c, &dm2, tino)?;
            }
            if ft == FileType::Dir && d1 != d2 && !c.root() {
                let m = fs.getattr(ino).en()?;
                if !c.may(&m, 2) {
                    return Err(libc::EACCES);
                }
            }
            let f = RenameFlags {
                noreplace: flags & libc::RENAME_NOREPLACE != 0,
                exchange: flags & libc::RENAME_EXCHANGE != 0,
            };
            fs.rename(d1, &n1, d2, &n2, f).en()?;
            Ok(Ren::Done(Ok(0)))
        }
        (Nv { .. }, _) | (_, Nv { .. }) => Err(libc::EXDEV),
        (a, b) => {
            let side = |p: Parent| match p {
                Real(c) => Some(c),
                _ => None,
            };
            Ok(Ren::Real(side(a), side(b)))
        }
    }
}

/// The (directory, path) to hand the C library: the path the walk resolved to outside the
/// prefix (`Some`, absolute) or the caller's own arguments.
fn redirected(
    resolved: &Option<std::ffi::CString>,
    dirfd: c_int,
    path: *const c_char,
) -> (c_int, *const c_char) {
    match resolved {
        Some(c) => (libc::AT_FDCWD, c.as_ptr()),
        None => (dirfd, path),
    }
}

/// renameat, or renameat2 when flags are given (older kernels lack the latter).
unsafe fn real_rename(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: u32,
) -> c_int {
    if flags == 0 {
        real::renameat(od, old, nd, new)
    } else {
        real::renameat2(od, old, nd, new, flags)
    }
}

unsafe fn rename_common(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: u32,
) -> c_int {
    let pass = || real_rename(od, old, nd, new, flags);
    let Some(cfg) = active_cfg() else {
        return pass();
    };
    if !state::valid_ptr(old) || !state::valid_ptr(new) {
        return ret_int(Err(libc::EFAULT));
    }
    if too_long(old) || too_long(new) {
        return pass();
    }
    let wa = classify(cfg, od, cbytes(old));
    let wb = classify(cfg, nd, cbytes(new));
    if wa.is_none() && wb.is_none() {
        return pass();
    }
    let r = nv(|fs| {
        let pa = match &wa {
            Some(w) => Walker::new(fs, cfg).parent(w)?,
            None => Parent::Pass,
        };
        let pb = match &wb {
            Some(w) => Walker::new(fs, cfg).parent(w)?,
            None => Parent::Pass,
        };
        rename_nv(fs, cfg, pa, pb, flags)
    });
    match r {
        Err(e) => ret_int(Err(e)),
        Ok(Ren::Done(r)) => ret_int(r),
        Ok(Ren::Real(a, b)) => {
            let (od, old) = redirected(&a, od, old);
            let (nd, new) = redirected(&b, nd, new);
            real_rename(od, old, nd, new, flags)
        }
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    if active_cfg().is_none() {
        return real::rename(old, new);
    }
    rename_common(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn renameat(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
) -> c_int {
    rename_common(od, old, nd, new, 0)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn renameat2(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: u32,
) -> c_int {
    rename_common(od, old, nd, new, flags)
}

// ---- mkdir, mknod, symlink, link ----------------------------------------------------------

fn create_nv(
    wk: &mut Walker<'_>,
    w: &crate::resolve::Walk,
    make: impl FnOnce(&Fs, u64, &[u8], &Creds, &nvmfs::Metadata) -> R<()>,
    dir_ok_trailing: bool,
) -> R<Out<c_int>> {
    let fs = wk.fs;
    let cfg = wk.cfg;
    match wk.parent(w)? {
        Parent::Pass => Ok(Out::Pass),
        Parent::Real(c) => Ok(Out::Real(c)),
        Parent::NvSelf { .. } => Err(libc::EEXIST),
        Parent::Nv {
            dir,
            name,
            trailing_slash,
            ..
        } => {
            if trailing_slash && !dir_ok_trailing {
                // Linux: a trailing slash names a directory; creating a non-directory there
                // fails (EEXIST when the name exists, else ENOENT).
                return Err(if fs.lookup_ino(dir, &name).is_ok() {
                    libc::EEXIST
                } else {
                    libc::ENOENT
                });
            }
            let c = Creds::effective();
            let dm = check_dir_writable(fs, cfg, &c, dir)?;
            make(fs, dir, &name, &c, &dm)?;
            Ok(Out::Done(0))
        }
    }
}

unsafe fn mkdir_common(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    pass: impl FnOnce() -> c_int,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return pass();
    };
    let r = route(cfg, dirfd, cbytes(path), |wk, w| {
        create_nv(
            wk,
            w,
            |fs, dir, name, c, dm| {
                let perm = mode & 0o1777 & !state::umask();
                let (uid, gid, perm) = new_owner(c, dm, perm, true);
                fs.mkdir(dir, name, perm, uid, gid).en().map(|_| ())
            },
            true,
        )
    });
    match r {
        Route::Pass => pass(),
        Route::Real(c) => real::mkdir(c.as_ptr(), mode),
        Route::Done(r) => ret_int(r),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    mkdir_common(libc::AT_FDCWD, path, mode, || real::mkdir(path, mode))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    mkdir_common(dirfd, path, mode, || real::mkdirat(dirfd, path, mode))
}

unsafe fn mknod_common(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
    pass: impl FnOnce() -> c_int,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return pass();
    };
    let r = route(cfg, dirfd, cbytes(path), |wk, w| {
        create_nv(
            wk,
            w,
            |fs, dir, name, c, dm| {
                let ty = match mode & libc::S_IFMT {
                    0 => libc::S_IFREG,
                    t @ (libc::S_IFREG | libc::S_IFIFO | libc::S_IFSOCK) => t,
                    t @ (libc::S_IFCHR | libc::S_IFBLK) => {
                        if !c.root() {
                            return Err(libc::EPERM);
                        }
                        t
                    }
                    libc::S_IFDIR => return Err(libc::EPERM),
                    _ => return Err(libc::EINVAL),
                };
                let perm = mode & 0o7777 & !state::umask();
                let (uid, gid, perm) = new_owner(c, dm, perm, false);
                fs.mknod(dir, name, ty | perm, uid, gid, dev)
                    .en()
                    .map(|_| ())
            },
            false,
        )
    });
    match r {
        Route::Pass => pass(),
        Route::Real(c) => real::mknodat(libc::AT_FDCWD, c.as_ptr(), mode, dev),
        Route::Done(r) => ret_int(r),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn mknod(path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    mknod_common(libc::AT_FDCWD, path, mode, dev, || {
        real::mknod(path, mode, dev)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn mknodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: libc::dev_t,
) -> c_int {
    mknod_common(dirfd, path, mode, dev, || {
        real::mknodat(dirfd, path, mode, dev)
    })
}

/// # Safety
/// C ABI (old glibc interface).
#[no_mangle]
pub unsafe extern "C" fn __xmknod(
    ver: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: *mut libc::dev_t,
) -> c_int {
    let d = if dev.is_null() { 0 } else { *dev };
    mknod_common(libc::AT_FDCWD, path, mode, d, || {
        real::__xmknod(ver, path, mode, dev)
    })
}

/// # Safety
/// C ABI (old glibc interface).
#[no_mangle]
pub unsafe extern "C" fn __xmknodat(
    ver: c_int,
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    dev: *mut libc::dev_t,
) -> c_int {
    let d = if dev.is_null() { 0 } else { *dev };
    mknod_common(dirfd, path, mode, d, || {
        real::__xmknodat(ver, dirfd, path, mode, dev)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn mkfifo(path: *const c_char, mode: mode_t) -> c_int {
    mknod_common(
        libc::AT_FDCWD,
        path,
        libc::S_IFIFO | (mode & 0o7777),
        0,
        || real::mkfifo(path, mode),
    )
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn mkfifoat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    mknod_common(dirfd, path, libc::S_IFIFO | (mode & 0o7777), 0, || {
        real::mkfifoat(dirfd, path, mode)
    })
}

unsafe fn symlink_common(
    target: *const c_char,
    dirfd: c_int,
    path: *const c_char,
    pass: impl FnOnce() -> c_int,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return pass();
    };
    if !state::valid_ptr(target) || !state::valid_ptr(path) {
        return ret_int(Err(libc::EFAULT));
    }
    let t = cbytes(target).to_vec();
    let r = route(cfg, dirfd, cbytes(path), |wk, w| {
        create_nv(
            wk,
            w,
            |fs, dir, name, c, dm| {
                let (uid, gid, _) = new_owner(c, dm, 0o777, false);
                fs.symlink(dir, name, &t, uid, gid).en().map(|_| ())
            },
            false,
        )
    });
    match r {
        Route::Pass => pass(),
        Route::Real(c) => real::symlink(target, c.as_ptr()),
        Route::Done(r) => ret_int(r),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    symlink_common(target, libc::AT_FDCWD, path, || real::symlink(target, path))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    dirfd: c_int,
    path: *const c_char,
) -> c_int {
    symlink_common(target, dirfd, path, || real::symlinkat(target, dirfd, path))
}

unsafe fn link_common(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    let pass = || real::linkat(od, old, nd, new, flags);
    let Some(cfg) = active_cfg() else {
        return pass();
    };
    if !state::valid_ptr(new) || (flags & libc::AT_EMPTY_PATH == 0 && !state::valid_ptr(old)) {
        return ret_int(Err(libc::EFAULT));
    }
    if too_long(new) || (flags & libc::AT_EMPTY_PATH == 0 && too_long(old)) {
        return pass();
    }
    let empty = flags & libc::AT_EMPTY_PATH != 0 && cbytes(old).is_empty();
    let src_fd = if empty { fdtable::get(od) } else { None };
    let wa = if empty {
        None
    } else {
        classify(cfg, od, cbytes(old))
    };
    let wb = classify(cfg, nd, cbytes(new));
    if wa.is_none() && wb.is_none() && src_fd.is_none() {
        return pass();
    }
    let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
    enum L {
        Done,
        Real(Option<std::ffi::CString>, Option<std::ffi::CString>),
    }
    let r = nv(|fs| {
        let src = if let Some(e) = &src_fd {
            Some(Found::Nv {
                ino: e.ino,
                ft: fs.getattr(e.ino).en()?.file_type,
                vpath: e.vpath.clone(),
            })
        } else {
            match &wa {
                Some(w) => Some(Walker::new(fs, cfg).resolve(w, follow)?),
                None => None,
            }
        };
        let dst = match &wb {
            Some(w) => Walker::new(fs, cfg).parent(w)?,
            None => Parent::Pass,
        };
        match (src, dst) {
            (
                Some(Found::Nv { ino, ft, .. }),
                Parent::Nv {
                    dir,
                    name,
                    trailing_slash,
                    ..
                },
            ) => {
                if ft == FileType::Dir {
                    return Err(libc::EPERM);
                }
                if trailing_slash {
                    return Err(libc::ENOENT);
                }
                let c = Creds::effective();
                check_dir_writable(fs, cfg, &c, dir)?;
                fs.link(ino, dir, &name).en()?;
                Ok(L::Done)
            }
            (_, Parent::NvSelf { .. }) => Err(libc::EEXIST),
            (Some(Found::Nv { .. }), _) | (_, Parent::Nv { .. }) => Err(libc::EXDEV),
            (a, b) => Ok(L::Real(
                match a {
                    Some(Found::Real(c)) => Some(c),
                    _ => None,
                },
                match b {
                    Parent::Real(c) => Some(c),
                    _ => None,
                },
            )),
        }
    });
    match r {
        Err(e) => ret_int(Err(e)),
        Ok(L::Done) => 0,
        Ok(L::Real(a, b)) => {
            let (od, old) = redirected(&a, od, old);
            let (nd, new) = redirected(&b, nd, new);
            real::linkat(od, old, nd, new, flags)
        }
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn link(old: *const c_char, new: *const c_char) -> c_int {
    if active_cfg().is_none() {
        return real::link(old, new);
    }
    link_common(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn linkat(
    od: c_int,
    old: *const c_char,
    nd: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    link_common(od, old, nd, new, flags)
}

// ---- readlink --------------------------------------------------------------------------

unsafe fn copy_link(target: &[u8], buf: *mut c_char, n: size_t) -> ssize_t {
    let k = target.len().min(n);
    std::ptr::copy_nonoverlapping(target.as_ptr(), buf as *mut u8, k);
    k as ssize_t
}

/// What /proc/self/fd/N shows for an nvmfs descriptor, and /proc/self/cwd for a virtual
/// working directory.
fn proc_link(cfg: &Config, p: &[u8]) -> Option<Vec<u8>> {
    if !p.starts_with(b"/proc/") {
        return None;
    }
    if p == b"/proc/self/cwd" || p == b"/proc/thread-self/cwd" {
        return crate::cwd::current().map(|c| c.vpath.clone());
    }
    let e = fd_alias(p).and_then(fdtable::get)?;
    if e.vpath.is_empty() {
        let mut v = cfg.prefix.clone();
        v.extend_from_slice(format!("/(inode {})", e.ino).as_bytes());
        return Some(v);
    }
    Some(e.vpath.clone())
}

unsafe fn readlink_common(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
    pass: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let Some(cfg) = active_cfg() else {
        return pass();
    };
    let p = cbytes(path);
    if p.first() == Some(&b'/') {
        if let Some(t) = proc_link(cfg, p) {
            return copy_link(&t, buf, n);
        }
    }
    if n == 0 {
        return pass();
    }
    match route(cfg, dirfd, p, |wk, w| match wk.resolve(w, false)? {
        Found::Nv { ino, ft, .. } => {
            if ft != FileType::Symlink {
                return Err(libc::EINVAL);
            }
            wk.fs.readlink(ino).en().map(Out::Done)
        }
        Found::Real(c) => Ok(Out::Real(c)),
        Found::Pass => Ok(Out::Pass),
    }) {
        Route::Pass => pass(),
        Route::Real(c) => real::readlink(c.as_ptr(), buf, n),
        Route::Done(Ok(t)) => copy_link(&t, buf, n),
        Route::Done(Err(e)) => ret_ssize(Err(e)),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, n: size_t) -> ssize_t {
    readlink_common(libc::AT_FDCWD, path, buf, n, || {
        real::readlink(path, buf, n)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> ssize_t {
    readlink_common(dirfd, path, buf, n, || {
        real::readlinkat(dirfd, path, buf, n)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn __readlink_chk(
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        libc::abort();
    }
    readlink(path, buf, n)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn __readlinkat_chk(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        libc::abort();
    }
    readlinkat(dirfd, path, buf, n)
}

// ---- realpath ----------------------------------------------------------------------------

unsafe fn out_path(p: &[u8], out: *mut c_char) -> *mut c_char {
    if p.len() >= libc::PATH_MAX as usize {
        set_errno(libc::ENAMETOOLONG);
        return std::ptr::null_mut();
    }
    let dst = if out.is_null() {
        let m = libc::malloc(p.len() + 1) as *mut c_char;
        if m.is_null() {
            set_errno(libc::ENOMEM);
            return m;
        }
        m
    } else {
        out
    };
    std::ptr::copy_nonoverlapping(p.as_ptr(), dst as *mut u8, p.len());
    *dst.add(p.len()) = 0;
    dst
}

unsafe fn realpath_common(path: *const c_char, out: *mut c_char) -> Option<*mut c_char> {
    let cfg = active_cfg()?;
    let p = cbytes(path);
    if p.first() == Some(&b'/') {
        if let Some(t) = proc_link(cfg, p) {
            return Some(out_path(&t, out));
        }
    }
    match route(cfg, libc::AT_FDCWD, p, |wk, w| {
        match wk.resolve(w, true)? {
            Found::Nv { vpath, .. } => Ok(Out::Done(vpath)),
            Found::Real(c) => Ok(Out::Real(c)),
            Found::Pass => Ok(Out::Pass),
        }
    }) {
        Route::Pass => None,
        Route::Real(c) => Some(real::realpath(c.as_ptr(), out)),
        Route::Done(Ok(v)) => Some(out_path(&v, out)),
        Route::Done(Err(e)) => Some(ret_ptr(Err(e))),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, out: *mut c_char) -> *mut c_char {
    realpath_common(path, out).unwrap_or_else(|| real::realpath(path, out))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    out: *mut c_char,
    outlen: size_t,
) -> *mut c_char {
    if outlen < libc::PATH_MAX as usize {
        libc::abort();
    }
    realpath_common(path, out).unwrap_or_else(|| real::__realpath_chk(path, out, outlen))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    realpath_common(path, std::ptr::null_mut())
        .unwrap_or_else(|| real::canonicalize_file_name(path))
}

// ---- temporary files ---------------------------------------------------------------------

fn next_random() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut x = STATE.load(Ordering::Relaxed);
    if x == 0 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes ts.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
        // SAFETY: plain getter.
        x = (ts.tv_nsec as u64)
            ^ ((unsafe { libc::getpid() } as u64) << 32)
            ^ 0x9e37_79b9_7f4a_7c15;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Ordering::Relaxed);
    x
}

const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Fills the six X's before a `suffix`-byte suffix; EINVAL if the template does not have
/// them.
unsafe fn fill_template(t: *mut c_char, suffix: c_int) -> R<()> {
    let len = CStr::from_ptr(t).to_bytes().len();
    let suffix = usize::try_from(suffix).map_err(|_| libc::EINVAL)?;
    if len < 6 + suffix {
        return Err(libc::EINVAL);
    }
    let start = len - 6 - suffix;
    let b = std::slice::from_raw_parts_mut(t as *mut u8, len);
    if &b[start..start + 6] != b"XXXXXX" {
        return Err(libc::EINVAL);
    }
    Ok(())
}

unsafe fn randomize(t: *mut c_char, suffix: usize) {
    let len = CStr::from_ptr(t).to_bytes().len();
    let start = len - 6 - suffix;
    let b = std::slice::from_raw_parts_mut(t as *mut u8, len);
    let mut r = next_random();
    for c in &mut b[start..start + 6] {
        *c = LETTERS[(r % LETTERS.len() as u64) as usize];
        r /= LETTERS.len() as u64;
    }
}

fn is_nv_template(cfg: &'static Config, t: *const c_char) -> bool {
    // SAFETY: a C string.
    classify(cfg, libc::AT_FDCWD, unsafe { cbytes(t) }).is_some()
}

unsafe fn mkstemp_nv(t: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    if let Err(e) = fill_template(t, suffix) {
        return ret_int(Err(e));
    }
    let flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    for _ in 0..238_328 {
        randomize(t, suffix as usize);
        let fd = crate::open::open_any(libc::AT_FDCWD, t, flags, 0o600);
        if fd >= 0 || crate::guard::errno() != libc::EEXIST {
            return fd;
        }
    }
    ret_int(Err(libc::EEXIST))
}

macro_rules! mkstemp_fns {
    ($name:ident, $real:ident, ($($a:ident : $t:ty),*), $suffix:expr, $flags:expr) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(t: *mut c_char, $($a: $t),*) -> c_int {
            if let Some(cfg) = active_cfg() {
                if is_nv_template(cfg, t) {
                    return mkstemp_nv(t, $suffix, $flags);
                }
            }
            real::$real(t, $($a),*)
        }
    };
}
mkstemp_fns!(mkstemp, mkstemp64, (), 0, 0);
mkstemp_fns!(mkstemp64, mkstemp64, (), 0, 0);
mkstemp_fns!(mkostemp, mkostemp64, (flags: c_int), 0, flags);
mkstemp_fns!(mkostemp64, mkostemp64, (flags: c_int), 0, flags);
mkstemp_fns!(mkstemps, mkstemps64, (suffix: c_int), suffix, 0);
mkstemp_fns!(mkstemps64, mkstemps64, (suffix: c_int), suffix, 0);
mkstemp_fns!(mkostemps, mkostemps64, (suffix: c_int, flags: c_int), suffix, flags);
mkstemp_fns!(mkostemps64, mkostemps64, (suffix: c_int, flags: c_int), suffix, flags);

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn mkdtemp(t: *mut c_char) -> *mut c_char {
    if let Some(cfg) = active_cfg() {
        if is_nv_template(cfg, t) {
            if let Err(e) = fill_template(t, 0) {
                return ret_ptr(Err(e));
            }
            for _ in 0..238_328 {
                randomize(t, 0);
                if mkdir(t, 0o700) == 0 {
                    return t;
                }
                if crate::guard::errno() != libc::EEXIST {
                    return std::ptr::null_mut();
                }
            }
            return ret_ptr(Err(libc::EEXIST));
        }
    }
    real::mkdtemp(t)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn mktemp(t: *mut c_char) -> *mut c_char {
    if let Some(cfg) = active_cfg() {
        if is_nv_template(cfg, t) {
            if fill_template(t, 0).is_err() {
                *t = 0;
                set_errno(libc::EINVAL);
                return t;
            }
            for _ in 0..238_328 {
                randomize(t, 0);
                let mut st: libc::stat64 = std::mem::zeroed();
                if crate::meta::lstat64(t, &mut st) != 0 && crate::guard::errno() == libc::ENOENT {
                    return t;
                }
            }
            *t = 0;
            return t;
        }
    }
    real::mktemp(t)
}
