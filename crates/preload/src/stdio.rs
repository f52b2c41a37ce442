//! stdio on nvmfs files: fopen, fopen64, fdopen, freopen(64) return a FILE* made with
//! glibc's fopencookie, whose read/write/seek/close come back to the preload (glibc's own
//! FILE code would do raw system calls on the descriptor). fileno/fileno_unlocked on such
//! a stream give its nvmfs descriptor. At start-up, fd 0/1/2 that are nvmfs descriptors get
//! cookie streams as stdin/stdout/stderr.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{off64_t, size_t, ssize_t, FILE};
use parking_lot::Mutex;

use crate::exports::{active_cfg, slice, slice_mut, MAX_RW};
use crate::fdtable;
use crate::guard::set_errno;
use crate::real;
use crate::resolve::classify;
use crate::state::cbytes;

#[repr(C)]
struct CookieFns {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, fns: CookieFns) -> *mut FILE;
    fn setvbuf(f: *mut FILE, buf: *mut c_char, mode: c_int, size: size_t) -> c_int;
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

struct Cookie {
    fd: c_int,
    file: *mut FILE,
}

/// FILE* -> descriptor of our cookie streams.
static FILES: Mutex<Vec<(usize, c_int)>> = Mutex::new(Vec::new());
static NFILES: AtomicUsize = AtomicUsize::new(0);

pub fn fork_lock() {
    std::mem::forget(FILES.lock());
}

pub fn fork_unlock() {
    // SAFETY: locked by fork_lock.
    unsafe { FILES.force_unlock() };
}

fn lookup(f: *mut FILE) -> Option<c_int> {
    if NFILES.load(Ordering::Acquire) == 0 {
        return None;
    }
    FILES
        .lock()
        .iter()
        .find(|(p, _)| *p == f as usize)
        .map(|&(_, fd)| fd)
}

// The cookie functions act on whatever the stream's descriptor is when they run: an
// nvmfs descriptor goes through the preload, any other to the C library. So the standard
// streams (always cookie streams under the preload) follow the program's dup2s, as
// glibc's own streams do: `bash -c 'echo x > /nvmfs/f'` (a builtin writing through stdout
// after dup2 of an nvmfs descriptor onto 1) lands in nvmfs.

unsafe extern "C" fn c_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    let c = &*(c as *const Cookie);
    let Some(e) = fdtable::get(c.fd) else {
        return real::read(c.fd, buf as *mut c_void, n);
    };
    let b = slice_mut(buf as *mut c_void, n.min(MAX_RW));
    match crate::io::nv_read(&e, &mut [b], None) {
        Ok(n) => n as ssize_t,
        Err(err) => {
            set_errno(err);
            -1
        }
    }
}

unsafe extern "C" fn c_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    let c = &*(c as *const Cookie);
    let Some(e) = fdtable::get(c.fd) else {
        // glibc's own streams retry short writes and treat -1 as an error; so do we.
        let mut done = 0usize;
        while done < n {
            let r = real::write(c.fd, buf.add(done) as *const c_void, n - done);
            if r < 0 {
                if crate::guard::errno() == libc::EINTR {
                    continue;
                }
                return if done > 0 { done as ssize_t } else { -1 };
            }
            done += r as usize;
        }
        return n as ssize_t;
    };
    let b = slice(buf as *const c_void, n.min(MAX_RW));
    match crate::io::nv_write(&e, &[b], None, false) {
        Ok(n) => n as ssize_t,
        Err(err) => {
            set_errno(err);
            -1
        }
    }
}

unsafe extern "C" fn c_seek(c: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    let c = &*(c as *const Cookie);
    let Some(e) = fdtable::get(c.fd) else {
        let r = real::lseek64(c.fd, *off, whence);
        if r < 0 {
            return -1;
        }
        *off = r;
        return 0;
    };
    match crate::io::nv_lseek(&e, *off, whence) {
        Ok(p) => {
            *off = p;
            0
        }
        Err(err) => {
            set_errno(err);
            -1
        }
    }
}

unsafe extern "C" fn c_close(c: *mut c_void) -> c_int {
    let c = Box::from_raw(c as *mut Cookie);
    {
        let mut g = FILES.lock();
        if let Some(i) = g.iter().position(|(p, _)| *p == c.file as usize) {
            g.swap_remove(i);
            NFILES.fetch_sub(1, Ordering::AcqRel);
        }
    }
    if fdtable::get(c.fd).is_some() {
        crate::fdops::close_fd(c.fd)
    } else if fdtable::still_internal(c.fd) {
        0
    } else {
        real::close(c.fd)
    }
}

/// A cookie stream over nvmfs descriptor `fd` (which it owns: fclose closes it).
unsafe fn cookie_stream(fd: c_int, mode: &[u8]) -> *mut FILE {
    let mut m = vec![*mode.first().unwrap_or(&b'r')];
    if mode.contains(&b'+') {
        m.push(b'+');
    }
    m.push(0);
    let ck = Box::into_raw(Box::new(Cookie {
        fd,
        file: std::ptr::null_mut(),
    }));
    let fns = CookieFns {
        read: Some(c_read),
        write: Some(c_write),
        seek: Some(c_seek),
        close: Some(c_close),
    };
    let f = fopencookie(ck as *mut c_void, m.as_ptr() as *const c_char, fns);
    if f.is_null() {
        drop(Box::from_raw(ck));
        return f;
    }
    (*ck).file = f;
    FILES.lock().push((f as usize, fd));
    NFILES.fetch_add(1, Ordering::AcqRel);
    f
}

fn mode_flags(mode: &[u8]) -> Option<c_int> {
    let plus = mode.contains(&b'+');
    let mut fl = match mode.first()? {
        b'r' => {
            if plus {
                libc::O_RDWR
            } else {
                libc::O_RDONLY
            }
        }
        b'w' => (if plus { libc::O_RDWR } else { libc::O_WRONLY }) | libc::O_CREAT | libc::O_TRUNC,
        b'a' => (if plus { libc::O_RDWR } else { libc::O_WRONLY }) | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    if mode.contains(&b'x') {
        fl |= libc::O_EXCL;
    }
    if mode.contains(&b'e') {
        fl |= libc::O_CLOEXEC;
    }
    Some(fl)
}

unsafe fn fopen_nv(path: *const c_char, mode: *const c_char) -> *mut FILE {
    let m = cbytes(mode);
    let Some(flags) = mode_flags(m) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    let fd = crate::open::open_any(libc::AT_FDCWD, path, flags, 0o666);
    if fd < 0 {
        return std::ptr::null_mut();
    }
    if fdtable::get(fd).is_none() {
        // The path left nvmfs: an ordinary stream.
        let f = real::fdopen(fd, mode);
        if f.is_null() {
            real::close(fd);
        }
        return f;
    }
    let f = cookie_stream(fd, m);
    if f.is_null() {
        crate::fdops::close_fd(fd);
    }
    f
}

macro_rules! fopen_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char) -> *mut FILE {
            if let Some(cfg) = active_cfg() {
                if classify(cfg, libc::AT_FDCWD, cbytes(path)).is_some() {
                    return fopen_nv(path, mode);
                }
            }
            real::fopen64(path, mode)
        }
    };
}
fopen_fns!(fopen);
fopen_fns!(fopen64);

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    if active_cfg().is_some() {
        if let Some(e) = fdtable::get(fd) {
            let m = cbytes(mode);
            let ok = match m.first() {
                Some(b'r') => e.readable() && (!m.contains(&b'+') || e.writable()),
                Some(b'w') | Some(b'a') => e.writable() && (!m.contains(&b'+') || e.readable()),
                _ => false,
            };
            if !ok {
                set_errno(libc::EINVAL);
                return std::ptr::null_mut();
            }
            if m.first() == Some(&b'a') {
                e.desc
                    .status_flags()
                    .fetch_or(libc::O_APPEND, Ordering::AcqRel);
            }
            return cookie_stream(fd, m);
        }
    }
    real::fdopen(fd, mode)
}

/// Which standard stream variable holds `f` (0, 1, 2), if any.
unsafe fn std_slot(f: *mut FILE) -> Option<usize> {
    let p = std::ptr::addr_of_mut!(stdin);
    if *p == f {
        return Some(0);
    }
    if *std::ptr::addr_of_mut!(stdout) == f {
        return Some(1);
    }
    if *std::ptr::addr_of_mut!(stderr) == f {
        return Some(2);
    }
    None
}

unsafe fn set_std(slot: usize, f: *mut FILE) {
    match slot {
        0 => *std::ptr::addr_of_mut!(stdin) = f,
        1 => *std::ptr::addr_of_mut!(stdout) = f,
        _ => *std::ptr::addr_of_mut!(stderr) = f,
    }
}

macro_rules! freopen_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI. A stream that changes between nvmfs and the real namespace comes back as
        /// a new FILE*; if it was stdin, stdout or stderr, that variable is updated.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            mode: *const c_char,
            f: *mut FILE,
        ) -> *mut FILE {
            let Some(cfg) = active_cfg() else {
                return real::freopen64(path, mode, f);
            };
            let ours_old = lookup(f).is_some();
            let nv_new = !path.is_null() && classify(cfg, libc::AT_FDCWD, cbytes(path)).is_some();
            if !ours_old && !nv_new {
                return real::freopen64(path, mode, f);
            }
            if path.is_null() {
                // Changing the mode of a stream in place: on Linux only "b" could differ,
                // which means nothing; the stream stays as it is.
                return f;
            }
            let slot = std_slot(f);
            real::fclose(f);
            let nf = fopen64(path, mode);
            if let (Some(s), false) = (slot, nf.is_null()) {
                set_std(s, nf);
            }
            nf
        }
    };
}
freopen_fns!(freopen);
freopen_fns!(freopen64);

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut FILE) -> c_int {
    if let Some(fd) = lookup(f) {
        return fd;
    }
    real::fileno(f)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(f: *mut FILE) -> c_int {
    if let Some(fd) = lookup(f) {
        return fd;
    }
    real::fileno_unlocked(f)
}

/// Start-up: stdin, stdout and stderr become cookie streams on descriptors 0, 1 and 2
/// (whatever those are now or later), buffered as glibc would: stderr unbuffered, stdout
/// line-buffered on a terminal.
pub fn replace_std_streams() {
    for fd in 0..3 {
        let mode: &[u8] = if fd == 0 { b"r" } else { b"a" };
        // SAFETY: start-up, before the program's main: replacing the stream variables.
        unsafe {
            let f = cookie_stream(fd as c_int, mode);
            if f.is_null() {
                continue;
            }
            match fd {
                2 => {
                    setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
                }
                1 if libc::isatty(1) == 1 => {
                    setvbuf(
                        f,
                        std::ptr::null_mut(),
                        libc::_IOLBF,
                        libc::BUFSIZ as size_t,
                    );
                }
                _ => {}
            }
            set_std(fd as usize, f);
        }
    }
}
