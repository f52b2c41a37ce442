//! exec and spawn (programs stored in nvmfs cannot be loaded by the kernel; "#!" scripts
//! are run by their interpreter; the environment of a child keeps the preload), vfork,
//! umask, the copy calls (sendfile, copy_file_range, splice: emulated with reads and
//! writes when an nvmfs descriptor is involved), and calls nvmfs descriptors do not
//! support (io_submit, POSIX AIO, tee, vmsplice).

use std::ffi::{c_char, c_int, c_long, c_uint, c_void, CStr, CString};

use libc::{iovec, off64_t, pid_t, size_t, ssize_t};
use nvmfs::FileType;

use crate::exports::{active_cfg, route, Out, Route};
use crate::fdtable::{self, Entry};
use crate::guard::{self, ret_int, ret_ssize, IoErrno, R};
use crate::real;
use crate::resolve::{classify, Found};
use crate::state::{self, cbytes, warn_once, Config, Creds};

extern "C" {
    static mut environ: *const *const c_char;
}

// ---- environment of children -----------------------------------------------------------

unsafe fn env_list(envp: *const *const c_char) -> Vec<&'static [u8]> {
    let mut v = Vec::new();
    if envp.is_null() {
        return v;
    }
    let mut p = envp;
    while !(*p).is_null() {
        v.push(CStr::from_ptr(*p).to_bytes());
        p = p.add(1);
    }
    v
}

/// The child's environment with the preload's variables restored if the program dropped
/// them; None when nothing is missing.
unsafe fn patched_env(cfg: &Config, envp: *const *const c_char) -> Option<Vec<CString>> {
    let env = env_list(envp);
    let has_image = env.iter().any(|e| e.starts_with(b"NVMFS_IMAGE="));
    let lib_name = cfg
        .lib_path
        .rsplit(|&b| b == b'/')
        .next()
        .unwrap_or(&cfg.lib_path);
    let preload = env.iter().find(|e| e.starts_with(b"LD_PRELOAD="));
    let has_lib = preload.is_some_and(|e| e.windows(lib_name.len()).any(|w| w == lib_name));
    if has_image && has_lib {
        return None;
    }
    let mut out: Vec<CString> = Vec::with_capacity(env.len() + 4);
    for e in &env {
        if e.starts_with(b"LD_PRELOAD=") && !has_lib {
            let mut v = e.to_vec();
            if v.len() > b"LD_PRELOAD=".len() {
                v.push(b':');
            }
            v.extend_from_slice(&cfg.lib_path);
            out.push(state::cstring(v));
        } else {
            out.push(state::cstring(e.to_vec()));
        }
    }
    if !has_lib && preload.is_none() {
        let mut v = b"LD_PRELOAD=".to_vec();
        v.extend_from_slice(&cfg.lib_path);
        out.push(state::cstring(v));
    }
    if !has_image {
        let mut v = b"NVMFS_IMAGE=".to_vec();
        v.extend_from_slice(cfg.image.as_os_str().as_encoded_bytes());
        out.push(state::cstring(v));
        let mut v = b"NVMFS_PREFIX=".to_vec();
        v.extend_from_slice(&cfg.prefix);
        out.push(state::cstring(v));
        if cfg.read_only {
            out.push(state::cstring(b"NVMFS_RO=1".to_vec()));
        }
    }
    Some(out)
}

fn ptrs(v: &[CString]) -> Vec<*const c_char> {
    v.iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

// ---- exec ----------------------------------------------------------------------------------

/// What to run instead of an nvmfs program: its "#!" interpreter with the script's path.
struct Interp {
    path: CString,
    argv: Vec<CString>,
}

unsafe fn argv_list(argv: *const *const c_char) -> Vec<CString> {
    env_list(argv)
        .into_iter()
        .map(|a| state::cstring(a.to_vec()))
        .collect()
}

/// Decides how to run `path` (as the program named it), which resolves into nvmfs.
fn nv_exec_plan(
    wk: &mut crate::resolve::Walker<'_>,
    w: &crate::resolve::Walk,
    path: &[u8],
    argv: &[CString],
) -> R<Out<Interp>> {
    let fs = wk.fs;
    let (ino, ft, vpath) = match wk.resolve(w, true)? {
        Found::Nv { ino, ft, vpath } => (ino, ft, vpath),
        Found::Real(c) => return Ok(Out::Real(c)),
        Found::Pass => return Ok(Out::Pass),
    };
    if ft != FileType::File {
        return Err(libc::EACCES);
    }
    let m = fs.getattr(ino).en()?;
    if !Creds::effective().may(&m, 1) {
        return Err(libc::EACCES);
    }
    let mut head = [0u8; 256];
    let n = fs.read(ino, 0, &mut head).en()?;
    let head = &head[..n];
    if head.starts_with(b"#!") {
        let line = head[2..].split(|&b| b == b'\n').next().unwrap_or(&[]);
        let line: Vec<u8> = line
            .iter()
            .copied()
            .skip_while(|b| *b == b' ' || *b == b'\t')
            .collect();
        let mut parts = line.splitn(2, |&b| b == b' ' || b == b'\t');
        let interp = parts.next().unwrap_or(&[]).to_vec();
        let arg = parts
            .next()
            .map(|a| {
                a.iter()
                    .copied()
                    .filter(|&b| b != b'\r')
                    .collect::<Vec<u8>>()
            })
            .map(|a| a.trim_ascii().to_vec())
            .filter(|a| !a.is_empty());
        if interp.is_empty() {
            return Err(libc::ENOEXEC);
        }
        let mut nargv = vec![state::cstring(interp.clone())];
        if let Some(a) = arg {
            nargv.push(state::cstring(a));
        }
        nargv.push(state::cstring(path.to_vec()));
        nargv.extend(argv.iter().skip(1).cloned());
        return Ok(Out::Done(Interp {
            path: state::cstring(interp),
            argv: nargv,
        }));
    }
    warn_once(
        "exec",
        &format!(
            "cannot execute {}: a program stored in nvmfs cannot be loaded by the kernel (copy it out of {} first)",
            String::from_utf8_lossy(&vpath),
            String::from_utf8_lossy(&wk.cfg.prefix)
        ),
    );
    Err(if head.starts_with(b"\x7fELF") {
        libc::EACCES
    } else {
        libc::ENOEXEC
    })
}

enum Plan {
    Pass,
    Real(CString),
    Interp(Interp),
}

unsafe fn plan(
    cfg: &'static Config,
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
) -> R<Plan> {
    let p = cbytes(path);
    let args = argv_list(argv);
    match route(cfg, dirfd, p, |wk, w| nv_exec_plan(wk, w, p, &args)) {
        Route::Pass => Ok(Plan::Pass),
        Route::Real(c) => Ok(Plan::Real(c)),
        Route::Done(r) => r.map(Plan::Interp),
    }
}

unsafe fn exec_depth(
    cfg: &'static Config,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    depth: u32,
) -> c_int {
    let env = patched_env(cfg, envp);
    let envp2 = env.as_ref().map(|v| ptrs(v));
    let envp = envp2.as_ref().map_or(envp, |v| v.as_ptr());
    match plan(cfg, libc::AT_FDCWD, path, argv) {
        Err(e) => ret_int(Err(e)),
        Ok(Plan::Pass) => real::execve(path, argv, envp),
        Ok(Plan::Real(c)) => real::execve(c.as_ptr(), argv, envp),
        Ok(Plan::Interp(i)) => {
            if depth >= 4 {
                return ret_int(Err(libc::ELOOP));
            }
            let a = ptrs(&i.argv);
            exec_depth(cfg, i.path.as_ptr(), a.as_ptr(), envp, depth + 1)
        }
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return real::execve(path, argv, envp);
    };
    fdtable::pass_on_exec();
    exec_depth(cfg, path, argv, envp, 0)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    execve(path, argv, environ)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return real::execvpe(file, argv, envp);
    };
    fdtable::pass_on_exec();
    let f = cbytes(file);
    if f.contains(&b'/') {
        return execve(file, argv, envp);
    }
    let path_var = std::env::var_os("PATH")
        .map(|p| p.into_encoded_bytes())
        .unwrap_or_else(|| b"/bin:/usr/bin".to_vec());
    let in_nv = path_var
        .split(|&b| b == b':')
        .any(|d| classify(cfg, libc::AT_FDCWD, d).is_some());
    if !in_nv || f.is_empty() {
        let env = patched_env(cfg, envp);
        let e2 = env.as_ref().map(|v| ptrs(v));
        return real::execvpe(file, argv, e2.as_ref().map_or(envp, |v| v.as_ptr()));
    }
    // PATH has nvmfs directories: search it here, the C library would not see them.
    let mut last = libc::ENOENT;
    for dir in path_var.split(|&b| b == b':') {
        let mut cand = if dir.is_empty() {
            b".".to_vec()
        } else {
            dir.to_vec()
        };
        cand.push(b'/');
        cand.extend_from_slice(f);
        let c = state::cstring(cand);
        execve(c.as_ptr(), argv, envp);
        let e = guard::errno();
        if e != libc::ENOENT && e != libc::ENOTDIR {
            last = e;
        }
    }
    ret_int(Err(last))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    execvpe(file, argv, environ)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let Some(cfg) = active_cfg() else {
        return real::fexecve(fd, argv, envp);
    };
    fdtable::pass_on_exec();
    if let Some(e) = fdtable::get(fd) {
        if e.vpath.is_empty() {
            return ret_int(Err(libc::EACCES));
        }
        let p = state::cstring(e.vpath.clone());
        return execve(p.as_ptr(), argv, envp);
    }
    let env = patched_env(cfg, envp);
    let e2 = env.as_ref().map(|v| ptrs(v));
    real::fexecve(fd, argv, e2.as_ref().map_or(envp, |v| v.as_ptr()))
}

unsafe fn spawn_common(
    pid: *mut pid_t,
    path: *const c_char,
    fa: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
    search: bool,
) -> c_int {
    let call = |p: *const c_char, a: *const *const c_char, e: *const *const c_char| {
        if search {
            real::posix_spawnp(pid, p, fa, attr, a, e)
        } else {
            real::posix_spawn(pid, p, fa, attr, a, e)
        }
    };
    let Some(cfg) = active_cfg() else {
        return call(path, argv, envp);
    };
    spawn_fds(fa);
    let env = patched_env(cfg, envp);
    let e2 = env.as_ref().map(|v| ptrs(v));
    let envp = e2.as_ref().map_or(envp, |v| v.as_ptr());
    if search && !cbytes(path).contains(&b'/') {
        return call(path, argv, envp);
    }
    match plan(cfg, libc::AT_FDCWD, path, argv) {
        Err(e) => e,
        Ok(Plan::Pass) => call(path, argv, envp),
        Ok(Plan::Real(c)) => call(c.as_ptr(), argv, envp),
        Ok(Plan::Interp(i)) => {
            let a = ptrs(&i.argv);
            call(i.path.as_ptr(), a.as_ptr(), envp)
        }
    }
}

/// Before a child is spawned (with file actions `fa`, or none): the descriptors it inherits.
fn spawn_fds(fa: *const c_void) {
    if active_cfg().is_none() {
        return;
    }
    if fa.is_null() {
        fdtable::pass_on_exec();
    } else {
        // File actions may duplicate any descriptor into the child, past its exec.
        fdtable::escape_all();
    }
}

/// pidfd_spawn and pidfd_spawnp: as posix_spawn for the descriptors the child inherits
/// (the environment is passed as given).
///
/// # Safety
/// C ABI (returns an error number).
#[no_mangle]
pub unsafe extern "C" fn pidfd_spawn(
    pidfd: *mut c_int,
    path: *const c_char,
    fa: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    spawn_fds(fa);
    real::pidfd_spawn(pidfd, path, fa, attr, argv, envp)
}

/// # Safety
/// C ABI (returns an error number).
#[no_mangle]
pub unsafe extern "C" fn pidfd_spawnp(
    pidfd: *mut c_int,
    file: *const c_char,
    fa: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    spawn_fds(fa);
    real::pidfd_spawnp(pidfd, file, fa, attr, argv, envp)
}

/// system, popen and wordexp start their children inside the C library, past this
/// library's posix_spawn: the descriptors opened without close-on-exec are passed on first.
///
/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn system(command: *const c_char) -> c_int {
    spawn_fds(std::ptr::null());
    real::system(command)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    spawn_fds(std::ptr::null());
    real::popen(command, mode)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn wordexp(words: *const c_char, we: *mut c_void, flags: c_int) -> c_int {
    spawn_fds(std::ptr::null());
    real::wordexp(words, we, flags)
}

/// # Safety
/// C ABI (returns an error number).
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut pid_t,
    path: *const c_char,
    fa: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    spawn_common(pid, path, fa, attr, argv, envp, false)
}

/// # Safety
/// C ABI (returns an error number).
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut pid_t,
    file: *const c_char,
    fa: *const c_void,
    attr: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    spawn_common(pid, file, fa, attr, argv, envp, true)
}

/// vfork is fork here: the child may run interposed calls before it execs, and those must
/// not share the parent's memory (fork is a valid implementation of vfork).
///
/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn vfork() -> pid_t {
    real::fork()
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn umask(mask: libc::mode_t) -> libc::mode_t {
    let old = real::umask(mask);
    state::set_umask(mask);
    old
}

/// The set*id family: the C library's own, then the preload's cached ids are dropped.
macro_rules! setid_fn {
    ($($name:ident ( $($a:ident : $t:ty),* );)*) => {
        $(
            /// # Safety
            /// C ABI.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
                let r = real::$name($($a),*);
                state::forget_creds();
                r
            }
        )*
    };
}

setid_fn! {
    setuid(uid: libc::uid_t);
    seteuid(uid: libc::uid_t);
    setreuid(ruid: libc::uid_t, euid: libc::uid_t);
    setresuid(ruid: libc::uid_t, euid: libc::uid_t, suid: libc::uid_t);
    setgid(gid: libc::gid_t);
    setegid(gid: libc::gid_t);
    setregid(rgid: libc::gid_t, egid: libc::gid_t);
    setresgid(rgid: libc::gid_t, egid: libc::gid_t, sgid: libc::gid_t);
}

// ---- copies between descriptors --------------------------------------------------------

fn read_any(
    fd: c_int,
    e: &Option<std::sync::Arc<Entry>>,
    buf: &mut [u8],
    at: Option<u64>,
) -> R<usize> {
    match e {
        Some(e) => crate::io::nv_read(e, &mut [buf], at),
        None => {
            // SAFETY: a buffer we own.
            let r = unsafe {
                match at {
                    Some(o) => {
                        real::pread64(fd, buf.as_mut_ptr() as *mut c_void, buf.len(), o as i64)
                    }
                    None => real::read(fd, buf.as_mut_ptr() as *mut c_void, buf.len()),
                }
            };
            if r < 0 {
                Err(guard::errno())
            } else {
                Ok(r as usize)
            }
        }
    }
}

fn write_any(
    fd: c_int,
    e: &Option<std::sync::Arc<Entry>>,
    buf: &[u8],
    at: Option<u64>,
) -> R<usize> {
    match e {
        Some(e) => crate::io::nv_write(e, &[buf], at, false),
        None => {
            // SAFETY: a buffer we own.
            let r = unsafe {
                match at {
                    Some(o) => {
                        real::pwrite64(fd, buf.as_ptr() as *const c_void, buf.len(), o as i64)
                    }
                    None => real::write(fd, buf.as_ptr() as *const c_void, buf.len()),
                }
            };
            if r < 0 {
                Err(guard::errno())
            } else {
                Ok(r as usize)
            }
        }
    }
}

/// Copies up to `len` bytes with reads and writes; offsets (if given) are used and updated
/// instead of the descriptors' own.
unsafe fn copy_emulated(
    inp: c_int,
    ioff: *mut off64_t,
    out: c_int,
    ooff: *mut off64_t,
    len: usize,
) -> R<usize> {
    let ei = fdtable::get(inp);
    let eo = fdtable::get(out);
    let mut buf = vec![0u8; len.clamp(1, 1 << 17)];
    let mut total = 0usize;
    while total < len {
        let want = (len - total).min(buf.len());
        let at_in = (!ioff.is_null()).then(|| *ioff as u64);
        let n = match read_any(inp, &ei, &mut buf[..want], at_in) {
            Ok(n) => n,
            Err(_) if total > 0 => break,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        let mut done = 0;
        while done < n {
            let at_out = (!ooff.is_null()).then(|| *ooff as u64);
            let w = match write_any(out, &eo, &buf[done..n], at_out) {
                Ok(w) => w,
                Err(_) if total + done > 0 => {
                    return Ok(total + done);
                }
                Err(e) => return Err(e),
            };
            if !ooff.is_null() {
                *ooff += w as i64;
            }
            done += w;
        }
        if !ioff.is_null() {
            *ioff += n as i64;
        }
        total += n;
        if n < want {
            break;
        }
    }
    Ok(total)
}

fn involved(a: c_int, b: c_int) -> bool {
    !guard::active()
        && active_cfg().is_some()
        && (fdtable::get(a).is_some() || fdtable::get(b).is_some())
}

macro_rules! sendfile_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            out: c_int,
            inp: c_int,
            off: *mut off64_t,
            n: size_t,
        ) -> ssize_t {
            if involved(inp, out) {
                if !off.is_null() && *off < 0 {
                    return ret_ssize(Err(libc::EINVAL));
                }
                return ret_ssize(
                    copy_emulated(inp, off, out, std::ptr::null_mut(), n).map(|v| v as isize),
                );
            }
            real::sendfile64(out, inp, off, n)
        }
    };
}
sendfile_fns!(sendfile);
sendfile_fns!(sendfile64);

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    inp: c_int,
    ioff: *mut off64_t,
    out: c_int,
    ooff: *mut off64_t,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    if involved(inp, out) {
        if flags != 0 {
            return ret_ssize(Err(libc::EINVAL));
        }
        if inp == out {
            return ret_ssize(Err(libc::EINVAL));
        }
        return ret_ssize(copy_emulated(inp, ioff, out, ooff, n).map(|v| v as isize));
    }
    real::copy_file_range(inp, ioff, out, ooff, n, flags)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn splice(
    inp: c_int,
    ioff: *mut off64_t,
    out: c_int,
    ooff: *mut off64_t,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    if involved(inp, out) {
        return ret_ssize(copy_emulated(inp, ioff, out, ooff, n).map(|v| v as isize));
    }
    real::splice(inp, ioff, out, ooff, n, flags)
}

fn unsupported(call: &str, err: c_int) -> c_int {
    warn_once(
        call,
        &format!(
            "{call} on an nvmfs descriptor is not supported ({})",
            errname(err)
        ),
    );
    err
}

fn errname(e: c_int) -> &'static str {
    match e {
        libc::EINVAL => "EINVAL",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENODEV => "ENODEV",
        _ => "error",
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn tee(inp: c_int, out: c_int, n: size_t, flags: c_uint) -> ssize_t {
    if involved(inp, out) {
        return ret_ssize(Err(unsupported("tee", libc::EINVAL)));
    }
    real::tee(inp, out, n, flags)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn vmsplice(
    fd: c_int,
    iov: *const iovec,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    if involved(fd, fd) {
        return ret_ssize(Err(unsupported("vmsplice", libc::EINVAL)));
    }
    real::vmsplice(fd, iov, n, flags)
}

/// libaio's io_submit (returns a negative error number): nvmfs descriptors have no
/// kernel asynchronous I/O.
///
/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn io_submit(ctx: usize, n: c_long, iocbs: *mut *mut c_void) -> c_int {
    if !guard::active() && active_cfg().is_some() && fdtable::any() && !iocbs.is_null() {
        for i in 0..n.max(0) as usize {
            let cb = *iocbs.add(i) as *const u8;
            if cb.is_null() {
                continue;
            }
            // struct iocb: aio_fildes is the u32 at byte 20.
            let fd = (cb.add(20) as *const u32).read_unaligned() as c_int;
            if fdtable::get(fd).is_some() {
                return -unsupported("io_submit", libc::EINVAL);
            }
        }
    }
    real::io_submit(ctx, n, iocbs)
}

macro_rules! aio_fns {
    ($name:ident, $real:ident) => {
        /// # Safety
        /// C ABI (struct aiocb starts with aio_fildes).
        #[no_mangle]
        pub unsafe extern "C" fn $name(cb: *mut c_void) -> c_int {
            if !guard::active() && active_cfg().is_some() && !cb.is_null() {
                if fdtable::get(*(cb as *const c_int)).is_some() {
                    return ret_int(Err(unsupported(stringify!($name), libc::EOPNOTSUPP)));
                }
            }
            real::$real(cb)
        }
    };
}
aio_fns!(aio_read, aio_read64);
aio_fns!(aio_read64, aio_read64);
aio_fns!(aio_write, aio_write64);
aio_fns!(aio_write64, aio_write64);

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn aio_fsync(op: c_int, cb: *mut c_void) -> c_int {
    if !guard::active()
        && active_cfg().is_some()
        && !cb.is_null()
        && fdtable::get(*(cb as *const c_int)).is_some()
    {
        return ret_int(Err(unsupported("aio_fsync", libc::EOPNOTSUPP)));
    }
    real::aio_fsync64(op, cb)
}

// ---- execl, execlp, execle: variadic, so entered through small assembly trampolines ------

/// Collects the argument list of an execl-style call: `regs` holds the five argument
/// registers after `path` (rsi, rdx, rcx, r8, r9), `stack` the caller's stack arguments.
/// Returns argv (NULL-terminated) and, for execle, the envp after it.
unsafe fn collect_args(
    regs: *const *const c_char,
    stack: *const *const c_char,
) -> (Vec<*const c_char>, *const *const c_char) {
    let mut v = Vec::new();
    let mut i = 0usize;
    loop {
        let p = if i < 5 {
            *regs.add(i)
        } else {
            *stack.add(i - 5)
        };
        i += 1;
        if p.is_null() {
            v.push(p);
            let next = if i < 5 {
                *regs.add(i)
            } else {
                *stack.add(i - 5)
            };
            return (v, next as *const *const c_char);
        }
        v.push(p);
    }
}

unsafe extern "C" fn nvmfs_preload_execl(
    path: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
) -> c_int {
    let (argv, _) = collect_args(regs, stack);
    execve(path, argv.as_ptr(), environ)
}

unsafe extern "C" fn nvmfs_preload_execlp(
    file: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
) -> c_int {
    let (argv, _) = collect_args(regs, stack);
    execvpe(file, argv.as_ptr(), environ)
}

unsafe extern "C" fn nvmfs_preload_execle(
    path: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
) -> c_int {
    let (argv, envp) = collect_args(regs, stack);
    execve(path, argv.as_ptr(), envp)
}

// execl(path, arg0, ...): a naked trampoline saves the five argument registers after
// `path` on the stack and calls the Rust function with pointers to them and to the stack
// arguments. On entry rsp is 8 mod 16; after `sub rsp, 40` it is 16-aligned for the call.
#[cfg(target_arch = "x86_64")]
macro_rules! execl_trampoline {
    ($name:ident, $imp:ident) => {
        /// # Safety
        /// C ABI: `path, arg0, ..., NULL` (execle: then envp).
        #[no_mangle]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name() -> c_int {
            std::arch::naked_asm!(
                "sub rsp, 40",
                "mov [rsp], rsi",
                "mov [rsp+8], rdx",
                "mov [rsp+16], rcx",
                "mov [rsp+24], r8",
                "mov [rsp+32], r9",
                "mov rsi, rsp",
                "lea rdx, [rsp+48]",
                "call {imp}",
                "add rsp, 40",
                "ret",
                imp = sym $imp,
            )
        }
    };
}
#[cfg(target_arch = "x86_64")]
execl_trampoline!(execl, nvmfs_preload_execl);
#[cfg(target_arch = "x86_64")]
execl_trampoline!(execlp, nvmfs_preload_execlp);
#[cfg(target_arch = "x86_64")]
execl_trampoline!(execle, nvmfs_preload_execle);
