//! The working directory when it is inside nvmfs (the "virtual" working directory).
//!
//! Design: the process keeps the directory's inode, generation and path here, and its
//! real working directory is a *marker directory*: `MARKER_ROOT/<path>`, e.g.
//! `/dev/shm/nvmfs-cwd-0/nvmfs/src` for `/nvmfs/src` (created on demand, empty, never
//! removed while in use). Children inherit the real working directory through fork and
//! exec whatever they do with the environment, and a new program's preload finds the
//! virtual directory again by reading its real one (`inherited_vpath`). Relative paths that
//! reach the kernel without passing through the preload (raw system calls) resolve inside
//! the empty marker directory and fail with ENOENT instead of touching another directory.

use std::ffi::{c_char, c_int, CString};
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::exports::active_cfg;
use crate::fdtable::{self, Kind};
use crate::guard::{ret_int, set_errno, Guard, IoErrno, R};
use crate::real;
use crate::resolve::{self, classify, Found, Walker};
use crate::state::{self, cbytes, nv, Config, Creds};

pub struct Cwd {
    pub ino: u64,
    pub generation: u32,
    pub vpath: Vec<u8>,
}

static VCWD: ArcSwapOption<Cwd> = ArcSwapOption::const_empty();

#[inline]
pub fn current() -> Option<Arc<Cwd>> {
    VCWD.load_full()
}

pub fn release() {
    VCWD.store(None);
}

/// The real working directory (one getcwd system call).
pub fn real_cwd() -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: getcwd writes at most buf.len() bytes.
    let p = unsafe { real::getcwd(buf.as_mut_ptr() as *mut c_char, buf.len()) };
    if p.is_null() {
        return None;
    }
    let n = buf.iter().position(|&b| b == 0)?;
    buf.truncate(n);
    Some(buf)
}

fn under<'a>(path: &'a [u8], dir: &[u8]) -> Option<&'a [u8]> {
    let rest = path.strip_prefix(dir)?;
    if rest.is_empty() || rest[0] == b'/' {
        Some(rest)
    } else {
        None
    }
}

/// The virtual working directory this process inherited: its real one is a marker
/// directory, or lies in the prefix's real directory.
pub fn inherited_vpath(cfg: &Config) -> Option<Vec<u8>> {
    let real = real_cwd()?;
    if let Some(rest) = under(&real, &cfg.marker_root) {
        if under(rest, &cfg.prefix).is_some() {
            return Some(rest.to_vec());
        }
    }
    under(&real, &cfg.prefix).map(|_| real.clone())
}

/// Re-establishes an inherited virtual working directory (start-up).
pub fn restore(cfg: &'static Config, vpath: &[u8]) {
    let w = resolve::Walk {
        start: resolve::Start::RealRoot,
        path: vpath.to_vec(),
    };
    let r = nv(|fs| match Walker::new(fs, cfg).resolve(&w, true)? {
        Found::Nv {
            ino,
            ft: nvmfs::FileType::Dir,
            vpath,
        } => {
            let g = fs.getattr(ino).en()?.generation;
            Ok(Some(Cwd {
                ino,
                generation: g,
                vpath,
            }))
        }
        _ => Ok(None),
    });
    match r {
        Ok(Some(c)) => {
            VCWD.store(Some(Arc::new(c)));
            let _ = enter_marker(cfg, vpath);
        }
        _ => {
            // Gone meanwhile: keep a working directory that fails every relative lookup,
            // as a removed directory does.
            VCWD.store(Some(Arc::new(Cwd {
                ino: resolve::ROOT,
                generation: u32::MAX,
                vpath: vpath.to_vec(),
            })));
        }
    }
}

/// Makes the real working directory the marker of `vpath` (creating it as needed).
fn enter_marker(cfg: &Config, vpath: &[u8]) -> R<()> {
    let _g = Guard::new();
    let mut full = cfg.marker_root.clone();
    full.extend_from_slice(vpath);
    let c = state::cstring(full.clone());
    // SAFETY: NUL-terminated paths we own.
    unsafe {
        if real::chdir(c.as_ptr()) == 0 {
            return Ok(());
        }
        // Create each level (mode 0700 for the root: it is per user).
        let mut at = 0;
        while at < full.len() {
            let next = full[at + 1..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(full.len(), |i| at + 1 + i);
            let part = state::cstring(full[..next].to_vec());
            real::mkdir(part.as_ptr(), 0o700);
            at = next;
        }
        if real::chdir(c.as_ptr()) == 0 {
            return Ok(());
        }
        // Too long or not creatable: at least leave the old real directory.
        let root = state::cstring(cfg.marker_root.clone());
        real::chdir(root.as_ptr());
    }
    Ok(())
}

fn set_virtual(cfg: &Config, c: Cwd) {
    let _ = enter_marker(cfg, &c.vpath);
    VCWD.store(Some(Arc::new(c)));
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    let Some(cfg) = active_cfg() else {
        return real::chdir(path);
    };
    let p = cbytes(path);
    let Some(w) = classify(cfg, libc::AT_FDCWD, p) else {
        let r = real::chdir(path);
        if r == 0 {
            VCWD.store(None);
        }
        return r;
    };
    enum To {
        Nv(Cwd),
        Real(CString),
        Pass,
    }
    let r = nv(|fs| {
        let mut wk = Walker::new(fs, cfg);
        Ok(match wk.resolve(&w, true)? {
            Found::Nv { ino, ft, vpath } => {
                if ft != nvmfs::FileType::Dir {
                    return Err(libc::ENOTDIR);
                }
                let m = fs.getattr(ino).en()?;
                if !Creds::effective().may(&m, 1) {
                    return Err(libc::EACCES);
                }
                To::Nv(Cwd {
                    ino,
                    generation: m.generation,
                    vpath,
                })
            }
            Found::Real(c) => To::Real(c),
            Found::Pass => To::Pass,
        })
    });
    match r {
        Ok(To::Nv(c)) => {
            set_virtual(cfg, c);
            0
        }
        Ok(To::Real(c)) => {
            let r = real::chdir(c.as_ptr());
            if r == 0 {
                VCWD.store(None);
            }
            r
        }
        Ok(To::Pass) => {
            let r = real::chdir(path);
            if r == 0 {
                VCWD.store(None);
            }
            r
        }
        Err(e) => ret_int(Err(e)),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    let Some(cfg) = active_cfg() else {
        return real::fchdir(fd);
    };
    let Some(e) = fdtable::get(fd) else {
        let r = real::fchdir(fd);
        if r == 0 {
            VCWD.store(None);
        }
        return r;
    };
    if e.kind == Kind::File {
        return ret_int(Err(libc::ENOTDIR));
    }
    let r = nv(|fs| {
        let m = fs.getattr(e.ino).en()?;
        if !m.is_dir() {
            return Err(libc::ENOTDIR);
        }
        if !Creds::effective().may(&m, 1) {
            return Err(libc::EACCES);
        }
        let vpath = if e.vpath.is_empty() {
            resolve::dir_path(fs, cfg, e.ino).ok_or(libc::ENOENT)?
        } else {
            e.vpath.clone()
        };
        Ok(Cwd {
            ino: e.ino,
            generation: m.generation,
            vpath,
        })
    });
    match r {
        Ok(c) => {
            set_virtual(cfg, c);
            0
        }
        Err(e) => ret_int(Err(e)),
    }
}

/// The virtual working directory's path, checked against the image (it follows renames).
fn vcwd_path(cfg: &'static Config, c: &Cwd) -> R<Vec<u8>> {
    nv(|fs| {
        let m = fs.getattr(c.ino).en()?;
        if m.generation != c.generation || m.nlink == 0 {
            return Err(libc::ENOENT);
        }
        let w = resolve::Walk {
            start: resolve::Start::RealRoot,
            path: c.vpath.clone(),
        };
        if let Ok(Found::Nv { ino, .. }) = Walker::new(fs, cfg).resolve(&w, true) {
            if ino == c.ino {
                return Ok(c.vpath.clone());
            }
        }
        resolve::dir_path(fs, cfg, c.ino).ok_or(libc::ENOENT)
    })
}

unsafe fn copy_out(path: &[u8], buf: *mut c_char, size: usize) -> *mut c_char {
    let need = path.len() + 1;
    if buf.is_null() {
        let n = if size == 0 { need } else { size };
        if n < need {
            set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        let p = libc::malloc(n) as *mut c_char;
        if p.is_null() {
            set_errno(libc::ENOMEM);
            return p;
        }
        std::ptr::copy_nonoverlapping(path.as_ptr(), p as *mut u8, path.len());
        *p.add(path.len()) = 0;
        return p;
    }
    if size == 0 {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    if size < need {
        set_errno(libc::ERANGE);
        return std::ptr::null_mut();
    }
    std::ptr::copy_nonoverlapping(path.as_ptr(), buf as *mut u8, path.len());
    *buf.add(path.len()) = 0;
    buf
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: usize) -> *mut c_char {
    let Some(cfg) = active_cfg() else {
        return real::getcwd(buf, size);
    };
    let Some(c) = current() else {
        return real::getcwd(buf, size);
    };
    match vcwd_path(cfg, &c) {
        Ok(p) => copy_out(&p, buf, size),
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn __getcwd_chk(buf: *mut c_char, size: usize, buflen: usize) -> *mut c_char {
    if size > buflen {
        libc::abort();
    }
    getcwd(buf, size)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    if active_cfg().is_some() && current().is_some() {
        return getcwd(std::ptr::null_mut(), 0);
    }
    real::get_current_dir_name()
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn getwd(buf: *mut c_char) -> *mut c_char {
    if active_cfg().is_some() && current().is_some() {
        return getcwd(buf, libc::PATH_MAX as usize);
    }
    real::getwd(buf)
}
