//! Directory streams (opendir, fdopendir, readdir, readdir_r, telldir, seekdir, rewinddir,
//! dirfd, closedir, scandir) and getdents64.
//!
//! glibc's opendir opens with internal calls we cannot see, so every stream function is
//! interposed: an nvmfs stream is our own `NvDir`, recognised by two magic words at its
//! start (a glibc DIR begins with its descriptor and a lock word, never these values).

use std::ffi::{c_char, c_int, c_long, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use libc::{dirent64, size_t, ssize_t, DIR};
use parking_lot::Mutex;

use crate::exports::{active_cfg, slice_mut};
use crate::fdtable::{self, Entry, Kind};
use crate::guard::{self, ret_ssize, set_errno, IoErrno, R};
use crate::real;
use crate::resolve::classify;
use crate::state::{cbytes, nv};

const MAGIC: [u64; 2] = [0x4e56_4d46_4449_5221, 0x2152_4944_464d_564e];

#[repr(C)]
pub struct NvDir {
    magic: [u64; 2],
    fd: c_int,
    entry: Arc<Entry>,
    st: Mutex<DirState>,
}

struct DirState {
    buf: Vec<nvmfs::DirEntry>,
    idx: usize,
    /// Cookie of the next entry to return.
    pos: u64,
    eof: bool,
    ent: Box<dirent64>,
}

/// Our stream behind `d`, if it is one.
///
/// # Safety
/// `d` is NULL or a DIR* (ours or glibc's).
#[inline]
pub unsafe fn ours<'a>(d: *mut DIR) -> Option<&'a NvDir> {
    if d.is_null() {
        return None;
    }
    let w = d as *const [u64; 2];
    if *w == MAGIC {
        Some(&*(d as *const NvDir))
    } else {
        None
    }
}

fn new_dir(fd: c_int, e: Arc<Entry>) -> *mut DIR {
    let d = Box::new(NvDir {
        magic: MAGIC,
        fd,
        entry: e,
        st: Mutex::new(DirState {
            buf: Vec::new(),
            idx: 0,
            pos: 0,
            eof: false,
            // SAFETY: integers and a char array.
            ent: Box::new(unsafe { std::mem::zeroed() }),
        }),
    });
    Box::into_raw(d) as *mut DIR
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    let Some(cfg) = active_cfg() else {
        return real::opendir(path);
    };
    if classify(cfg, libc::AT_FDCWD, cbytes(path)).is_none() {
        return real::opendir(path);
    }
    let fd = crate::open::open_any(
        libc::AT_FDCWD,
        path,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    );
    if fd < 0 {
        return std::ptr::null_mut();
    }
    match fdtable::get(fd) {
        Some(e) => new_dir(fd, e),
        // The path left nvmfs: a real directory.
        None => {
            let d = real::fdopendir(fd);
            if d.is_null() {
                real::close(fd);
            }
            d
        }
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    if active_cfg().is_some() {
        if let Some(e) = fdtable::get(fd) {
            if e.kind != Kind::Dir {
                set_errno(if e.is_path() {
                    libc::EBADF
                } else {
                    libc::ENOTDIR
                });
                return std::ptr::null_mut();
            }
            return new_dir(fd, e);
        }
    }
    real::fdopendir(fd)
}

/// Fills `st.buf` from `st.pos`; false at the end.
fn refill(e: &Entry, st: &mut DirState) -> R<bool> {
    if st.eof {
        return Ok(false);
    }
    let pos = st.pos;
    let mut buf = std::mem::take(&mut st.buf);
    buf.clear();
    nv(|fs| {
        fs.readdir(e.ino, pos, |de| {
            buf.push(de);
            buf.len() < 256
        })
        .en()
    })?;
    st.idx = 0;
    if buf.is_empty() {
        st.eof = true;
    }
    let more = !buf.is_empty();
    st.buf = buf;
    Ok(more)
}

/// The d_type of a file type (DT_REG, DT_DIR, ...).
pub fn dt(t: nvmfs::FileType) -> u8 {
    use nvmfs::FileType::*;
    match t {
        File => libc::DT_REG,
        Dir => libc::DT_DIR,
        Symlink => libc::DT_LNK,
        Fifo => libc::DT_FIFO,
        CharDevice => libc::DT_CHR,
        BlockDevice => libc::DT_BLK,
        Socket => libc::DT_SOCK,
    }
}

fn fill_dirent(out: &mut dirent64, de: &nvmfs::DirEntry) {
    out.d_ino = de.ino;
    out.d_off = de.offset as i64;
    out.d_type = dt(de.file_type);
    let n = de.name.len().min(255);
    for (i, &b) in de.name[..n].iter().enumerate() {
        out.d_name[i] = b as c_char;
    }
    out.d_name[n] = 0;
    let reclen = (19 + n + 1 + 7) & !7;
    out.d_reclen = reclen as u16;
}

fn next_entry(d: &NvDir) -> R<Option<*mut dirent64>> {
    let mut st = d.st.lock();
    if st.idx >= st.buf.len() && !refill(&d.entry, &mut st)? {
        return Ok(None);
    }
    let de = st.buf[st.idx].clone();
    st.idx += 1;
    st.pos = de.offset;
    fill_dirent(&mut st.ent, &de);
    d.entry.desc.offset().store(de.offset, Ordering::Release);
    Ok(Some(&mut *st.ent as *mut dirent64))
}

macro_rules! readdir_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(d: *mut DIR) -> *mut dirent64 {
            if let Some(nd) = ours(d) {
                let saved = guard::errno();
                return match next_entry(nd) {
                    Ok(Some(p)) => p,
                    Ok(None) => {
                        set_errno(saved);
                        std::ptr::null_mut()
                    }
                    Err(e) => {
                        set_errno(e);
                        std::ptr::null_mut()
                    }
                };
            }
            real::readdir64(d)
        }
    };
}
readdir_fns!(readdir);
readdir_fns!(readdir64);

macro_rules! readdir_r_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            d: *mut DIR,
            ent: *mut dirent64,
            res: *mut *mut dirent64,
        ) -> c_int {
            if let Some(nd) = ours(d) {
                return match next_entry(nd) {
                    Ok(Some(p)) => {
                        std::ptr::copy_nonoverlapping(p, ent, 1);
                        *res = ent;
                        0
                    }
                    Ok(None) => {
                        *res = std::ptr::null_mut();
                        0
                    }
                    Err(e) => {
                        *res = std::ptr::null_mut();
                        e
                    }
                };
            }
            real::readdir64_r(d, ent, res)
        }
    };
}
readdir_r_fns!(readdir_r);
readdir_r_fns!(readdir64_r);

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    if let Some(nd) = ours(d) {
        let fd = nd.fd;
        let b = Box::from_raw(d as *mut NvDir);
        drop(b);
        return crate::fdops::close_fd(fd);
    }
    real::closedir(d)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    if let Some(nd) = ours(d) {
        let mut st = nd.st.lock();
        st.pos = 0;
        st.buf.clear();
        st.idx = 0;
        st.eof = false;
        nd.entry.desc.offset().store(0, Ordering::Release);
        return;
    }
    real::rewinddir(d)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut DIR) -> c_long {
    if let Some(nd) = ours(d) {
        return nd.st.lock().pos as c_long;
    }
    real::telldir(d)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut DIR, pos: c_long) {
    if let Some(nd) = ours(d) {
        let mut st = nd.st.lock();
        st.pos = pos.max(0) as u64;
        st.buf.clear();
        st.idx = 0;
        st.eof = false;
        return;
    }
    real::seekdir(d, pos)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut DIR) -> c_int {
    if let Some(nd) = ours(d) {
        return nd.fd;
    }
    real::dirfd(d)
}

type Filter = Option<unsafe extern "C" fn(*const dirent64) -> c_int>;
type Compar = Option<unsafe extern "C" fn(*const c_void, *const c_void) -> c_int>;

unsafe fn scan(
    d: *mut DIR,
    list: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compar,
) -> c_int {
    let mut v: Vec<*mut dirent64> = Vec::new();
    let fail = |v: &Vec<*mut dirent64>, e: i32| {
        for &p in v {
            libc::free(p as *mut c_void);
        }
        set_errno(e);
        -1
    };
    loop {
        guard::set_errno(0);
        let p = readdir64(d);
        if p.is_null() {
            let e = guard::errno();
            if e != 0 {
                return fail(&v, e);
            }
            break;
        }
        if let Some(f) = filter {
            if f(p) == 0 {
                continue;
            }
        }
        let c = libc::malloc(std::mem::size_of::<dirent64>()) as *mut dirent64;
        if c.is_null() {
            return fail(&v, libc::ENOMEM);
        }
        std::ptr::copy_nonoverlapping(p, c, 1);
        v.push(c);
    }
    let arr =
        libc::malloc(v.len().max(1) * std::mem::size_of::<*mut dirent64>()) as *mut *mut dirent64;
    if arr.is_null() {
        return fail(&v, libc::ENOMEM);
    }
    std::ptr::copy_nonoverlapping(v.as_ptr(), arr, v.len());
    if let Some(c) = compar {
        libc::qsort(
            arr as *mut c_void,
            v.len(),
            std::mem::size_of::<*mut dirent64>(),
            Some(c),
        );
    }
    *list = arr;
    v.len() as c_int
}

unsafe fn scandir_common(
    dirfd: c_int,
    path: *const c_char,
    list: *mut *mut *mut dirent64,
    filter: Filter,
    compar: Compar,
) -> Option<c_int> {
    let cfg = active_cfg()?;
    classify(cfg, dirfd, cbytes(path))?;
    let fd = crate::open::open_any(
        dirfd,
        path,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    );
    if fd < 0 {
        return Some(-1);
    }
    let d = fdopendir(fd);
    if d.is_null() {
        let e = guard::errno();
        crate::fdops::close_fd(fd);
        set_errno(e);
        return Some(-1);
    }
    let n = scan(d, list, filter, compar);
    let e = guard::errno();
    closedir(d);
    if n < 0 {
        set_errno(e);
    }
    Some(n)
}

macro_rules! scandir_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            list: *mut *mut *mut dirent64,
            filter: Filter,
            compar: Compar,
        ) -> c_int {
            scandir_common(libc::AT_FDCWD, path, list, filter, compar).unwrap_or_else(|| {
                real::scandir64(
                    path,
                    list,
                    std::mem::transmute::<Filter, usize>(filter),
                    std::mem::transmute::<Compar, usize>(compar),
                )
            })
        }
    };
}
scandir_fns!(scandir);
scandir_fns!(scandir64);

macro_rules! scandirat_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dirfd: c_int,
            path: *const c_char,
            list: *mut *mut *mut dirent64,
            filter: Filter,
            compar: Compar,
        ) -> c_int {
            scandir_common(dirfd, path, list, filter, compar).unwrap_or_else(|| {
                real::scandirat64(
                    dirfd,
                    path,
                    list,
                    std::mem::transmute::<Filter, usize>(filter),
                    std::mem::transmute::<Compar, usize>(compar),
                )
            })
        }
    };
}
scandirat_fns!(scandirat);
scandirat_fns!(scandirat64);

/// getdents64 on an nvmfs directory: Linux dirent64 records from the description's
/// offset (a readdir cookie).
fn getdents_nv(e: &Entry, buf: &mut [u8]) -> R<usize> {
    if e.kind != Kind::Dir {
        return Err(if e.is_path() {
            libc::EBADF
        } else {
            libc::ENOTDIR
        });
    }
    nv(|fs| {
        let _l = e.pos.lock();
        let pos = e.desc.offset().load(Ordering::Acquire);
        let mut used = 0usize;
        let mut last = pos;
        let mut too_small = false;
        fs.readdir(e.ino, pos, |de| {
            let n = de.name.len();
            let reclen = (19 + n + 1 + 7) & !7;
            if used + reclen > buf.len() {
                too_small = used == 0;
                return false;
            }
            let r = &mut buf[used..used + reclen];
            // SAFETY: writes inside the record slice (8 + 8 + 2 bytes at its start).
            unsafe {
                let p = r.as_mut_ptr();
                (p as *mut u64).write_unaligned(de.ino);
                (p.add(8) as *mut i64).write_unaligned(de.offset as i64);
                (p.add(16) as *mut u16).write_unaligned(reclen as u16);
            }
            r[18] = dt(de.file_type);
            r[19..19 + n].copy_from_slice(&de.name);
            for b in &mut r[19 + n..] {
                *b = 0;
            }
            used += reclen;
            last = de.offset;
            true
        })
        .en()?;
        if too_small {
            return Err(libc::EINVAL);
        }
        e.desc.offset().store(last, Ordering::Release);
        Ok(used)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    if active_cfg().is_some() {
        if let Some(e) = fdtable::get(fd) {
            return ret_ssize(getdents_nv(&e, slice_mut(buf, n)).map(|v| v as isize));
        }
    }
    real::getdents64(fd, buf, n)
}
