//! open, openat, creat and their 64-bit and fortified variants.

use std::ffi::{c_char, c_int, c_uint};

use nvmfs::FileType;

use crate::exports::{active_cfg, route, Out, Route};
use crate::fdtable;
use crate::guard::{ret_int, IoErrno, R};
use crate::real;
use crate::resolve::{Found, Parent, Walk, Walker};
use crate::state::{self, cbytes, make_entry, warn_once, Config, Creds, Origin};

/// Status flags an open file description keeps (F_GETFL shows them).
pub const STATUS_FLAGS: c_int = libc::O_ACCMODE
    | libc::O_APPEND
    | libc::O_NONBLOCK
    | libc::O_DIRECT
    | libc::O_NOATIME
    | libc::O_SYNC
    | libc::O_DSYNC
    | libc::O_PATH
    | libc::O_ASYNC;

fn join_name(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut v = dir.to_vec();
    if !v.ends_with(b"/") {
        v.push(b'/');
    }
    v.extend_from_slice(name);
    v
}

/// Owner and group of a node created in `dir` (attributes `pm`): the caller's effective
/// ids, or the directory's group under a setgid directory (whose new subdirectories keep
/// the bit), as Linux does.
pub fn new_owner(c: &Creds, pm: &nvmfs::Metadata, mode: u32, is_dir: bool) -> (u32, u32, u32) {
    if pm.perm & libc::S_ISGID != 0 {
        let mode = if is_dir { mode | libc::S_ISGID } else { mode };
        (c.uid, pm.gid, mode)
    } else {
        (c.uid, c.gid, mode)
    }
}

/// Checks that the caller may create or remove names in directory `dir`.
pub fn check_dir_writable(fs: &nvmfs::Fs, cfg: &Config, c: &Creds, dir: u64) -> R<nvmfs::Metadata> {
    let m = fs.getattr(dir).en()?;
    if cfg.read_only {
        return Err(libc::EROFS);
    }
    if !c.may(&m, 3) {
        return Err(libc::EACCES);
    }
    Ok(m)
}

/// Opens (or creates) an nvmfs file; returns the new descriptor.
pub fn nv_open(wk: &mut Walker<'_>, w: &Walk, flags: c_int, mode: u32) -> R<Out<c_int>> {
    let fs = wk.fs;
    let cfg = wk.cfg;
    let creds = Creds::effective();
    let acc = flags & libc::O_ACCMODE;
    let opath = flags & libc::O_PATH != 0;
    let wants_write = !opath && (acc == libc::O_WRONLY || acc == libc::O_RDWR);
    let wants_read = !opath && (acc == libc::O_RDONLY || acc == libc::O_RDWR);
    let (ino, ft, vpath, created) = if flags & libc::O_CREAT != 0 && !opath {
        let mut p = wk.parent(w)?;
        loop {
            match p {
                Parent::Pass => return Ok(Out::Pass),
                Parent::Real(c) => return Ok(Out::Real(c)),
                Parent::NvSelf { ino, vpath, .. } => {
                    if flags & libc::O_EXCL != 0 {
                        return Err(libc::EEXIST);
                    }
                    let ft = fs.getattr(ino).en()?.file_type;
                    break (ino, ft, vpath, false);
                }
                Parent::Nv {
                    dir,
                    name,
                    dir_vpath,
                    trailing_slash,
                } => match fs.lookup_leaf_ino(dir, &name) {
                    Ok((ino, ft)) => {
                        if flags & libc::O_EXCL != 0 {
                            return Err(libc::EEXIST);
                        }
                        if ft == FileType::Symlink {
                            if flags & libc::O_NOFOLLOW != 0 {
                                return Err(libc::ELOOP);
                            }
                            p = wk.through_link(dir, &dir_vpath, ino)?;
                            continue;
                        }
                        if ft == FileType::Dir {
                            return Err(libc::EISDIR);
                        }
                        if trailing_slash {
                            return Err(libc::ENOTDIR);
                        }
                        break (ino, ft, join_name(&dir_vpath, &name), false);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                        if trailing_slash {
                            return Err(libc::EISDIR);
                        }
                        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
                            break (0, FileType::File, Vec::new(), false);
                        }
                        let pm = check_dir_writable(fs, cfg, &creds, dir)?;
                        let perm = mode & 0o7777 & !state::umask();
                        let (uid, gid, perm) = new_owner(&creds, &pm, perm, false);
                        match fs.create(dir, &name, perm, uid, gid) {
                            Ok(m) => {
                                break (m.ino, FileType::File, join_name(&dir_vpath, &name), true)
                            }
                            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                                p = Parent::Nv {
                                    dir,
                                    name,
                                    dir_vpath,
                                    trailing_slash,
                                };
                                continue;
                            }
                            Err(e) => return Err(crate::guard::to_errno(&e)),
                        }
                    }
                    Err(e) => return Err(crate::guard::to_errno(&e)),
                },
            }
        }
    } else {
        match wk.resolve(w, flags & libc::O_NOFOLLOW == 0)? {
            Found::Pass => return Ok(Out::Pass),
            Found::Real(c) => return Ok(Out::Real(c)),
            Found::Nv { ino, ft, vpath } => (ino, ft, vpath, false),
        }
    };
    if flags & libc::O_TMPFILE == libc::O_TMPFILE && !opath {
        warn_once(
            "O_TMPFILE",
            "open with O_TMPFILE is not supported on nvmfs (EOPNOTSUPP); use a named temporary file",
        );
        return Err(libc::EOPNOTSUPP);
    }
    // The inode's generation, for its description: read once here, with its attributes.
    let mut generation = None;
    if !created {
        if ft == FileType::Symlink && !opath {
            return Err(libc::ELOOP);
        }
        if flags & libc::O_DIRECTORY != 0 && ft != FileType::Dir {
            return Err(libc::ENOTDIR);
        }
        if !opath {
            match ft {
                FileType::Dir if wants_write || flags & libc::O_TRUNC != 0 => {
                    return Err(libc::EISDIR)
                }
                FileType::Fifo
                | FileType::Socket
                | FileType::CharDevice
                | FileType::BlockDevice => {
                    warn_once(
                        "open-special",
                        "FIFOs, sockets and device nodes on nvmfs cannot be opened (ENXIO)",
                    );
                    return Err(libc::ENXIO);
                }
                _ => {}
            }
            let m = fs.getattr(ino).en()?;
            generation = Some(m.generation);
            let want = (if wants_read { 4 } else { 0 })
                | (if wants_write || flags & libc::O_TRUNC != 0 {
                    2
                } else {
                    0
                });
            if want != 0 && !creds.may(&m, want) {
                return Err(libc::EACCES);
            }
            if (wants_write || flags & libc::O_TRUNC != 0) && cfg.read_only {
                return Err(libc::EROFS);
            }
            if flags & libc::O_TRUNC != 0 && wants_write && ft == FileType::File && m.size > 0 {
                fs.setattr(
                    ino,
                    &nvmfs::SetAttr {
                        size: Some(0),
                        ..Default::default()
                    },
                )
                .en()?;
            }
        }
    }
    let generation = match generation {
        Some(g) => g,
        None => fs.getattr(ino).en()?.generation,
    };
    let st = state::state()?;
    let status = flags & STATUS_FLAGS;
    let cloexec = flags & libc::O_CLOEXEC != 0;
    let (fd, desc, spare) = crate::spares::open(st, ino, generation, status).en()?;
    match make_entry(fs, desc, ino, ft, vpath, Origin::Opened { cloexec }) {
        Ok(e) => {
            crate::spares::hold(&e, spare);
            fdtable::unmark_internal(fd);
            fdtable::insert_new(fd, e);
            Ok(Out::Done(fd))
        }
        Err(err) => {
            if spare >= 0 {
                crate::spares::release_held(spare);
            }
            // SAFETY: the descriptor we just got.
            unsafe { real::close(fd) };
            Err(err)
        }
    }
}

unsafe fn open_common(
    cfg: &'static Config,
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> Option<c_int> {
    let p = cbytes(path);
    match route(cfg, dirfd, p, |wk, w| nv_open(wk, w, flags, mode)) {
        Route::Pass => None,
        Route::Real(c) => Some(real::openat64(libc::AT_FDCWD, c.as_ptr(), flags, mode)),
        Route::Done(r) => Some(ret_int(r)),
    }
}

macro_rules! open_fn {
    ($name:ident) => {
        /// # Safety
        /// C ABI (the mode argument is read only with O_CREAT or O_TMPFILE).
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
            if let Some(cfg) = active_cfg() {
                if let Some(r) = open_common(cfg, libc::AT_FDCWD, path, flags, mode) {
                    return r;
                }
            }
            real::open64(path, flags, mode)
        }
    };
}
open_fn!(open);
open_fn!(open64);

macro_rules! openat_fn {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dirfd: c_int,
            path: *const c_char,
            flags: c_int,
            mode: c_uint,
        ) -> c_int {
            if let Some(cfg) = active_cfg() {
                if let Some(r) = open_common(cfg, dirfd, path, flags, mode) {
                    return r;
                }
            }
            real::openat64(dirfd, path, flags, mode)
        }
    };
}
openat_fn!(openat);
openat_fn!(openat64);

macro_rules! open2_fn {
    ($name:ident, $real:ident) => {
        /// # Safety
        /// C ABI (fortified open without a mode).
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int) -> c_int {
            if let Some(cfg) = active_cfg() {
                if let Some(r) = open_common(cfg, libc::AT_FDCWD, path, flags, 0) {
                    return r;
                }
            }
            real::$real(path, flags)
        }
    };
}
open2_fn!(__open_2, __open_2);
open2_fn!(__open64_2, __open64_2);

macro_rules! openat2_fn {
    ($name:ident, $real:ident) => {
        /// # Safety
        /// C ABI (fortified openat without a mode).
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
            if let Some(cfg) = active_cfg() {
                if let Some(r) = open_common(cfg, dirfd, path, flags, 0) {
                    return r;
                }
            }
            real::$real(dirfd, path, flags)
        }
    };
}
openat2_fn!(__openat_2, __openat_2);
openat2_fn!(__openat64_2, __openat64_2);

macro_rules! creat_fn {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: libc::mode_t) -> c_int {
            let flags = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
            if let Some(cfg) = active_cfg() {
                if let Some(r) = open_common(cfg, libc::AT_FDCWD, path, flags, mode) {
                    return r;
                }
            }
            real::creat64(path, mode)
        }
    };
}
creat_fn!(creat);
creat_fn!(creat64);

/// Opens `path` for the preload's own wrappers (fopen, opendir, mkstemp): like open(2).
///
/// # Safety
/// `path` is a C string.
pub unsafe fn open_any(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    if let Some(cfg) = active_cfg() {
        if let Some(r) = open_common(cfg, dirfd, path, flags, mode) {
            return r;
        }
    }
    real::openat64(dirfd, path, flags, mode)
}
