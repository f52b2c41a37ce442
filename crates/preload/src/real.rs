//! The C library's own functions, found once with `dlsym(RTLD_NEXT, name)`.
//!
//! Never call them through the `libc` crate: in this library those names are our own
//! interposed exports, so `libc::read` would come straight back here.

use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{
    dirent64, gid_t, iovec, mode_t, off64_t, off_t, pid_t, size_t, ssize_t, timespec, timeval,
    uid_t, DIR, FILE,
};

type Stat = libc::stat64;
type StatFs = libc::statfs64;
type StatVfs = libc::statvfs64;

/// What a missing symbol resolves to: fails with ENOSYS.
extern "C" fn missing() -> c_long {
    crate::guard::set_errno(libc::ENOSYS);
    -1
}

/// Resolves `name` (NUL-terminated) once and caches it in `slot`.
pub fn resolve(slot: &AtomicUsize, name: &'static str) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the next definition after
    // this library, normally the C library's.
    let mut f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) } as usize;
    if f == 0 {
        f = missing as *const () as usize;
    }
    slot.store(f, Ordering::Relaxed);
    f
}

macro_rules! reals {
    ($( fn $name:ident ( $($a:ident : $t:ty),* ) -> $r:ty; )*) => {
        $(
            /// # Safety
            /// The C function's contract.
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn $name($($a: $t),*) -> $r {
                static P: AtomicUsize = AtomicUsize::new(0);
                let f: unsafe extern "C" fn($($t),*) -> $r =
                    std::mem::transmute(resolve(&P, concat!(stringify!($name), "\0")));
                f($($a),*)
            }
        )*
    };
}

macro_rules! variadic {
    ($( fn $name:ident ( $($a:ident : $t:ty),* ; $($v:ident : $vt:ty),* ) -> $r:ty; )*) => {
        $(
            /// # Safety
            /// The C function's contract.
            pub unsafe fn $name($($a: $t),* , $($v: $vt),*) -> $r {
                static P: AtomicUsize = AtomicUsize::new(0);
                let f: unsafe extern "C" fn($($t),* , ...) -> $r =
                    std::mem::transmute(resolve(&P, concat!(stringify!($name), "\0")));
                f($($a),* , $($v),*)
            }
        )*
    };
}

pub type Path = *const c_char;
pub type Argv = *const *const c_char;

variadic! {
    fn open64(path: Path, flags: c_int; mode: c_uint) -> c_int;
    fn openat64(dirfd: c_int, path: Path, flags: c_int; mode: c_uint) -> c_int;
    fn fcntl64(fd: c_int, cmd: c_int; arg: usize) -> c_int;
    fn fcntl(fd: c_int, cmd: c_int; arg: usize) -> c_int;
    fn ioctl(fd: c_int, req: c_ulong; arg: usize) -> c_int;
    fn mremap(old: *mut c_void, old_len: size_t, new_len: size_t, flags: c_int; new_addr: *mut c_void) -> *mut c_void;
}

reals! {
    fn __open_2(path: Path, flags: c_int) -> c_int;
    fn __open64_2(path: Path, flags: c_int) -> c_int;
    fn __openat_2(dirfd: c_int, path: Path, flags: c_int) -> c_int;
    fn __openat64_2(dirfd: c_int, path: Path, flags: c_int) -> c_int;
    fn creat64(path: Path, mode: mode_t) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int;
    fn closefrom(fd: c_int) -> ();
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t;
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
    fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t;
    fn __pread64_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t, buflen: size_t) -> ssize_t;
    fn __pread_chk(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, buflen: size_t) -> ssize_t;
    fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t;
    fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
    fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t;
    fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t;
    fn preadv64v2(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t;
    fn pwritev64v2(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t;
    fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t;
    fn stat64(path: Path, buf: *mut Stat) -> c_int;
    fn lstat64(path: Path, buf: *mut Stat) -> c_int;
    fn fstat64(fd: c_int, buf: *mut Stat) -> c_int;
    fn fstatat64(dirfd: c_int, path: Path, buf: *mut Stat, flags: c_int) -> c_int;
    fn __xstat64(ver: c_int, path: Path, buf: *mut Stat) -> c_int;
    fn __lxstat64(ver: c_int, path: Path, buf: *mut Stat) -> c_int;
    fn __fxstat64(ver: c_int, fd: c_int, buf: *mut Stat) -> c_int;
    fn __fxstatat64(ver: c_int, dirfd: c_int, path: Path, buf: *mut Stat, flags: c_int) -> c_int;
    fn statx(dirfd: c_int, path: Path, flags: c_int, mask: c_uint, buf: *mut libc::statx) -> c_int;
    fn access(path: Path, mode: c_int) -> c_int;
    fn faccessat(dirfd: c_int, path: Path, mode: c_int, flags: c_int) -> c_int;
    fn euidaccess(path: Path, mode: c_int) -> c_int;
    fn truncate64(path: Path, len: off64_t) -> c_int;
    fn ftruncate64(fd: c_int, len: off64_t) -> c_int;
    fn fsync(fd: c_int) -> c_int;
    fn fdatasync(fd: c_int) -> c_int;
    fn sync_file_range(fd: c_int, off: off64_t, n: off64_t, flags: c_uint) -> c_int;
    fn syncfs(fd: c_int) -> c_int;
    fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int;
    fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int;
    fn posix_fadvise64(fd: c_int, off: off64_t, len: off64_t, advice: c_int) -> c_int;
    fn readahead(fd: c_int, off: off64_t, n: size_t) -> ssize_t;
    fn unlink(path: Path) -> c_int;
    fn unlinkat(dirfd: c_int, path: Path, flags: c_int) -> c_int;
    fn remove(path: Path) -> c_int;
    fn rmdir(path: Path) -> c_int;
    fn rename(old: Path, new: Path) -> c_int;
    fn renameat(od: c_int, old: Path, nd: c_int, new: Path) -> c_int;
    fn renameat2(od: c_int, old: Path, nd: c_int, new: Path, flags: c_uint) -> c_int;
    fn mkdir(path: Path, mode: mode_t) -> c_int;
    fn mkdirat(dirfd: c_int, path: Path, mode: mode_t) -> c_int;
    fn link(old: Path, new: Path) -> c_int;
    fn linkat(od: c_int, old: Path, nd: c_int, new: Path, flags: c_int) -> c_int;
    fn symlink(target: Path, path: Path) -> c_int;
    fn symlinkat(target: Path, dirfd: c_int, path: Path) -> c_int;
    fn readlink(path: Path, buf: *mut c_char, n: size_t) -> ssize_t;
    fn readlinkat(dirfd: c_int, path: Path, buf: *mut c_char, n: size_t) -> ssize_t;
    fn __readlink_chk(path: Path, buf: *mut c_char, n: size_t, buflen: size_t) -> ssize_t;
    fn __readlinkat_chk(dirfd: c_int, path: Path, buf: *mut c_char, n: size_t, buflen: size_t) -> ssize_t;
    fn chmod(path: Path, mode: mode_t) -> c_int;
    fn fchmod(fd: c_int, mode: mode_t) -> c_int;
    fn fchmodat(dirfd: c_int, path: Path, mode: mode_t, flags: c_int) -> c_int;
    fn chown(path: Path, uid: uid_t, gid: gid_t) -> c_int;
    fn lchown(path: Path, uid: uid_t, gid: gid_t) -> c_int;
    fn fchown(fd: c_int, uid: uid_t, gid: gid_t) -> c_int;
    fn fchownat(dirfd: c_int, path: Path, uid: uid_t, gid: gid_t, flags: c_int) -> c_int;
    fn utime(path: Path, times: *const libc::utimbuf) -> c_int;
    fn utimes(path: Path, times: *const timeval) -> c_int;
    fn lutimes(path: Path, times: *const timeval) -> c_int;
    fn futimes(fd: c_int, times: *const timeval) -> c_int;
    fn futimesat(dirfd: c_int, path: Path, times: *const timeval) -> c_int;
    fn utimensat(dirfd: c_int, path: Path, times: *const timespec, flags: c_int) -> c_int;
    fn futimens(fd: c_int, times: *const timespec) -> c_int;
    fn opendir(path: Path) -> *mut DIR;
    fn fdopendir(fd: c_int) -> *mut DIR;
    fn readdir64(d: *mut DIR) -> *mut dirent64;
    fn readdir64_r(d: *mut DIR, e: *mut dirent64, r: *mut *mut dirent64) -> c_int;
    fn closedir(d: *mut DIR) -> c_int;
    fn rewinddir(d: *mut DIR) -> ();
    fn telldir(d: *mut DIR) -> c_long;
    fn seekdir(d: *mut DIR, pos: c_long) -> ();
    fn dirfd(d: *mut DIR) -> c_int;
    fn scandir64(path: Path, list: *mut *mut *mut dirent64, filter: usize, compar: usize) -> c_int;
    fn scandirat64(dirfd: c_int, path: Path, list: *mut *mut *mut dirent64, filter: usize, compar: usize) -> c_int;
    fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
    fn dup(fd: c_int) -> c_int;
    fn dup2(fd: c_int, to: c_int) -> c_int;
    fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int;
    fn flock(fd: c_int, op: c_int) -> c_int;
    fn lockf64(fd: c_int, cmd: c_int, len: off64_t) -> c_int;
    fn statfs64(path: Path, buf: *mut StatFs) -> c_int;
    fn fstatfs64(fd: c_int, buf: *mut StatFs) -> c_int;
    fn statvfs64(path: Path, buf: *mut StatVfs) -> c_int;
    fn fstatvfs64(fd: c_int, buf: *mut StatVfs) -> c_int;
    fn realpath(path: Path, out: *mut c_char) -> *mut c_char;
    fn __realpath_chk(path: Path, out: *mut c_char, outlen: size_t) -> *mut c_char;
    fn canonicalize_file_name(path: Path) -> *mut c_char;
    fn chdir(path: Path) -> c_int;
    fn fchdir(fd: c_int) -> c_int;
    fn getcwd(buf: *mut c_char, n: size_t) -> *mut c_char;
    fn __getcwd_chk(buf: *mut c_char, n: size_t, buflen: size_t) -> *mut c_char;
    fn get_current_dir_name() -> *mut c_char;
    fn getwd(buf: *mut c_char) -> *mut c_char;
    fn mkstemp64(t: *mut c_char) -> c_int;
    fn mkostemp64(t: *mut c_char, flags: c_int) -> c_int;
    fn mkstemps64(t: *mut c_char, suffix: c_int) -> c_int;
    fn mkostemps64(t: *mut c_char, suffix: c_int, flags: c_int) -> c_int;
    fn mkdtemp(t: *mut c_char) -> *mut c_char;
    fn mktemp(t: *mut c_char) -> *mut c_char;
    fn mknod(path: Path, mode: mode_t, dev: libc::dev_t) -> c_int;
    fn mknodat(dirfd: c_int, path: Path, mode: mode_t, dev: libc::dev_t) -> c_int;
    fn __xmknod(ver: c_int, path: Path, mode: mode_t, dev: *mut libc::dev_t) -> c_int;
    fn __xmknodat(ver: c_int, dirfd: c_int, path: Path, mode: mode_t, dev: *mut libc::dev_t) -> c_int;
    fn mkfifo(path: Path, mode: mode_t) -> c_int;
    fn mkfifoat(dirfd: c_int, path: Path, mode: mode_t) -> c_int;
    fn fopen64(path: Path, mode: Path) -> *mut FILE;
    fn fdopen(fd: c_int, mode: Path) -> *mut FILE;
    fn freopen64(path: Path, mode: Path, f: *mut FILE) -> *mut FILE;
    fn fclose(f: *mut FILE) -> c_int;
    fn fflush(f: *mut FILE) -> c_int;
    fn fileno(f: *mut FILE) -> c_int;
    fn fileno_unlocked(f: *mut FILE) -> c_int;
    fn umask(mask: mode_t) -> mode_t;
    fn setuid(uid: uid_t) -> c_int;
    fn seteuid(uid: uid_t) -> c_int;
    fn setreuid(ruid: uid_t, euid: uid_t) -> c_int;
    fn setresuid(ruid: uid_t, euid: uid_t, suid: uid_t) -> c_int;
    fn setgid(gid: gid_t) -> c_int;
    fn setegid(gid: gid_t) -> c_int;
    fn setregid(rgid: gid_t, egid: gid_t) -> c_int;
    fn setresgid(rgid: gid_t, egid: gid_t, sgid: gid_t) -> c_int;
    fn mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off64_t) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: size_t) -> c_int;
    fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int;
    fn execve(path: Path, argv: Argv, envp: Argv) -> c_int;
    fn execvpe(file: Path, argv: Argv, envp: Argv) -> c_int;
    fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int;
    fn posix_spawn(pid: *mut pid_t, path: Path, fa: *const c_void, attr: *const c_void, argv: Argv, envp: Argv) -> c_int;
    fn posix_spawnp(pid: *mut pid_t, path: Path, fa: *const c_void, attr: *const c_void, argv: Argv, envp: Argv) -> c_int;
    fn fork() -> pid_t;
    fn pidfd_spawn(pidfd: *mut c_int, path: Path, fa: *const c_void, attr: *const c_void, argv: Argv, envp: Argv) -> c_int;
    fn pidfd_spawnp(pidfd: *mut c_int, path: Path, fa: *const c_void, attr: *const c_void, argv: Argv, envp: Argv) -> c_int;
    fn system(command: Path) -> c_int;
    fn popen(command: Path, mode: Path) -> *mut FILE;
    fn wordexp(words: Path, we: *mut c_void, flags: c_int) -> c_int;
    fn sendfile64(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t;
    fn copy_file_range(inp: c_int, ioff: *mut off64_t, out: c_int, ooff: *mut off64_t, n: size_t, flags: c_uint) -> ssize_t;
    fn splice(inp: c_int, ioff: *mut off64_t, out: c_int, ooff: *mut off64_t, n: size_t, flags: c_uint) -> ssize_t;
    fn tee(inp: c_int, out: c_int, n: size_t, flags: c_uint) -> ssize_t;
    fn vmsplice(fd: c_int, iov: *const iovec, n: size_t, flags: c_uint) -> ssize_t;
    fn io_submit(ctx: usize, n: c_long, iocbs: *mut *mut c_void) -> c_int;
    fn aio_read64(cb: *mut c_void) -> c_int;
    fn aio_write64(cb: *mut c_void) -> c_int;
    fn aio_fsync64(op: c_int, cb: *mut c_void) -> c_int;
    fn getxattr(path: Path, name: Path, value: *mut c_void, size: size_t) -> ssize_t;
    fn lgetxattr(path: Path, name: Path, value: *mut c_void, size: size_t) -> ssize_t;
    fn fgetxattr(fd: c_int, name: Path, value: *mut c_void, size: size_t) -> ssize_t;
    fn setxattr(path: Path, name: Path, value: *const c_void, size: size_t, flags: c_int) -> c_int;
    fn lsetxattr(path: Path, name: Path, value: *const c_void, size: size_t, flags: c_int) -> c_int;
    fn fsetxattr(fd: c_int, name: Path, value: *const c_void, size: size_t, flags: c_int) -> c_int;
    fn listxattr(path: Path, list: *mut c_char, size: size_t) -> ssize_t;
    fn llistxattr(path: Path, list: *mut c_char, size: size_t) -> ssize_t;
    fn flistxattr(fd: c_int, list: *mut c_char, size: size_t) -> ssize_t;
    fn removexattr(path: Path, name: Path) -> c_int;
    fn lremovexattr(path: Path, name: Path) -> c_int;
    fn fremovexattr(fd: c_int, name: Path) -> c_int;
    fn pathconf(path: Path, name: c_int) -> c_long;
    fn fpathconf(fd: c_int, name: c_int) -> c_long;
}
