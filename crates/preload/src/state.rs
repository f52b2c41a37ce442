//! Configuration (from the environment), the shared mount (attached on first use), the
//! caller's credentials and umask, fork and exit hooks, and one-time messages.

use std::collections::HashSet;
use std::ffi::{c_char, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use nvmfs::shared::{SharedMount, SharedOptions};
use nvmfs::Fs;
use parking_lot::Mutex;

use crate::fdtable::{self, Entry, Kind};
use crate::guard::{Guard, IoErrno, R};
use crate::real;

/// What the environment asked for.
pub struct Config {
    /// Absolute image path.
    pub image: PathBuf,
    /// The prefix, absolute, normalised, without a trailing slash (never "/").
    pub prefix: Vec<u8>,
    /// Its last component: a path can only reach the prefix by naming it.
    pub base: Vec<u8>,
    /// The prefix's real parent directory ("/" for "/nvmfs").
    pub parent: Vec<u8>,
    pub read_only: bool,
    /// Where the real working directory goes while the virtual one is inside nvmfs.
    pub marker_root: Vec<u8>,
    /// The coordination file of the image (inherited descriptions are descriptors of its
    /// description files, `nvmfs::shared::is_desc_file`).
    pub coord_path: Vec<u8>,
    /// st_dev reported for every nvmfs file.
    pub dev: u64,
    /// This library's path (for LD_PRELOAD when a program's children lost it).
    pub lib_path: Vec<u8>,
    pub quiet: bool,
}

static CONFIG_STATE: AtomicU8 = AtomicU8::new(0);
static CONFIG: OnceLock<Option<Config>> = OnceLock::new();

/// The configuration, or None when the preload is inactive (no NVMFS_IMAGE).
#[inline]
pub fn config() -> Option<&'static Config> {
    if CONFIG_STATE.load(Ordering::Acquire) == 2 {
        return CONFIG.get().and_then(|c| c.as_ref());
    }
    init_config()
}

#[cold]
fn init_config() -> Option<&'static Config> {
    let _g = Guard::new();
    let c = CONFIG.get_or_init(parse_config).as_ref();
    CONFIG_STATE.store(2, Ordering::Release);
    c
}

pub fn normalize_prefix(p: &[u8]) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
    if p.first() != Some(&b'/') {
        return None;
    }
    let mut comps: Vec<Vec<u8>> = Vec::new();
    for c in p.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                comps.pop();
            }
            c => comps.push(c.to_vec()),
        }
    }
    if comps.is_empty() {
        return None;
    }
    let mut s = Vec::new();
    for c in &comps {
        s.push(b'/');
        s.extend_from_slice(c);
    }
    Some((s, comps))
}

fn msg(s: &str) {
    let line = format!("nvmfs: {s}\n");
    // SAFETY: writes a buffer we own to stderr, straight to the C library.
    unsafe { real::write(2, line.as_ptr() as *const c_void, line.len()) };
}

fn parse_config() -> Option<Config> {
    let image = std::env::var_os("NVMFS_IMAGE")?;
    if image.is_empty() {
        return None;
    }
    let mut image = PathBuf::from(image);
    if image.is_relative() {
        image = std::env::current_dir().ok()?.join(image);
    }
    let prefix = std::env::var_os("NVMFS_PREFIX").unwrap_or_else(|| "/nvmfs".into());
    let Some((prefix, prefix_comps)) = normalize_prefix(prefix.as_bytes()) else {
        msg(&format!(
            "NVMFS_PREFIX={:?} must be an absolute directory other than /; nvmfs is off",
            prefix
        ));
        return None;
    };
    let base = prefix_comps.last().cloned().unwrap_or_default();
    let mut parent = Vec::new();
    for c in &prefix_comps[..prefix_comps.len() - 1] {
        parent.push(b'/');
        parent.extend_from_slice(c);
    }
    if parent.is_empty() {
        parent.push(b'/');
    }
    let read_only = std::env::var_os("NVMFS_RO").is_some_and(|v| v == "1");
    let quiet = std::env::var_os("NVMFS_QUIET").is_some_and(|v| v == "1");
    // SAFETY: plain getter.
    let uid = unsafe { libc::geteuid() };
    // Where the core keeps the coordination file (always /dev/shm).
    let shm = PathBuf::from("/dev/shm");
    let marker_root = shm.join(format!("nvmfs-cwd-{uid}"));
    let (coord_path, dev) = match std::fs::metadata(&image) {
        Ok(m) => {
            use std::os::unix::fs::MetadataExt;
            let p = shm.join(format!("nvmfs-{:x}-{:x}.coord", m.dev(), m.ino()));
            let mix = (m.ino() ^ m.dev().rotate_left(20)) as u32;
            (
                p.as_os_str().as_bytes().to_vec(),
                libc::makedev(0x4e6, mix & 0xf_ffff),
            )
        }
        Err(e) => {
            msg(&format!("{}: {e}; nvmfs is off", image.display()));
            return None;
        }
    };
    Some(Config {
        image,
        prefix,
        base,
        parent,
        read_only,
        marker_root: marker_root.as_os_str().as_bytes().to_vec(),
        coord_path,
        dev,
        lib_path: lib_path(),
        quiet,
    })
}

fn lib_path() -> Vec<u8> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr of one of our own functions fills `info`.
    let ok = unsafe { libc::dladdr(lib_path as *const c_void, &mut info) };
    if ok != 0 && !info.dli_fname.is_null() {
        // SAFETY: a NUL-terminated string owned by the loader.
        return unsafe { CStr::from_ptr(info.dli_fname) }
            .to_bytes()
            .to_vec();
    }
    b"libnvmfs_preload.so".to_vec()
}

/// The attached mount.
pub struct State {
    pub mount: SharedMount,
}

static STATE: OnceLock<Option<State>> = OnceLock::new();
static DETACHED: AtomicBool = AtomicBool::new(false);

/// The shared mount, attaching on first use. EIO if attaching failed (said once on
/// stderr) or the process is past its exit hook.
pub fn state() -> R<&'static State> {
    if DETACHED.load(Ordering::Acquire) {
        return Err(libc::EIO);
    }
    if let Some(s) = STATE.get() {
        return s.as_ref().ok_or(libc::EIO);
    }
    let cfg = config().ok_or(libc::ENOENT)?;
    STATE.get_or_init(|| attach(cfg)).as_ref().ok_or(libc::EIO)
}

/// The mount if already attached (no attach).
pub fn attached() -> Option<&'static State> {
    STATE.get().and_then(|s| s.as_ref())
}

fn fd_list() -> Vec<i32> {
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc/self/fd") {
        for e in rd.flatten() {
            if let Some(n) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
                v.push(n);
            }
        }
    }
    v.sort_unstable();
    v
}

fn fd_link(fd: i32) -> Option<Vec<u8>> {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .ok()
        .map(|p| p.into_os_string().into_encoded_bytes())
}

fn attach(cfg: &Config) -> Option<State> {
    let _g = Guard::new();
    let opts = SharedOptions {
        read_only: cfg.read_only,
        ..Default::default()
    };
    match SharedMount::attach(&cfg.image, &opts) {
        Ok(mount) => {
            // The core keeps its own descriptors at or above FD_FLOOR, out of the numbers
            // programs and shells pick themselves.
            for fd in mount.internal_fds() {
                fdtable::mark_internal(fd);
            }
            if mount.was_first() {
                sweep_stale_lock_dirs();
            }
            Some(State { mount })
        }
        Err(e) => {
            msg(&format!(
                "cannot attach {}: {e}; every path under {} fails with EIO",
                cfg.image.display(),
                String::from_utf8_lossy(&cfg.prefix)
            ));
            None
        }
    }
}

/// Removes lock-file directories (`<coordination file>.locks`) whose coordination file is
/// gone: their processes ended without detaching (killed). The first process of a mount
/// does it, after the core removed the coordination files nobody used.
fn sweep_stale_lock_dirs() {
    let Ok(rd) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = p.as_os_str().as_bytes();
        if let Some(coord) = name.strip_suffix(b".locks") {
            let coord = std::path::Path::new(std::ffi::OsStr::from_bytes(coord));
            let ours = coord.file_name().is_some_and(|n| {
                n.as_bytes().starts_with(b"nvmfs-") && n.as_bytes().ends_with(b".coord")
            });
            if ours && !coord.exists() {
                let _ = std::fs::remove_dir_all(&p);
            }
        }
    }
}

/// Runs `f` as one file-system operation with the guard set; panics become EIO.
pub fn nv<T>(f: impl FnOnce(&Fs) -> R<T>) -> R<T> {
    let _g = Guard::new();
    let saved = crate::guard::errno();
    let st = state()?;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| st.mount.op(f)))
        .unwrap_or(Err(libc::EIO));
    if r.is_ok() {
        crate::guard::set_errno(saved);
    }
    r
}

/// Drops a core handle inside an operation (dropping may free an unlinked inode).
pub fn drop_in_op<T>(v: T) {
    let _g = Guard::new();
    match attached() {
        Some(st) if !DETACHED.load(Ordering::Acquire) => {
            let _ =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| st.mount.op(|_| drop(v))));
        }
        // Past detach: leak rather than touch the image.
        _ => std::mem::forget(v),
    }
}

/// The caller's effective ids.
#[derive(Clone, Copy, Debug)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
}

impl Creds {
    /// The effective ids, read from the kernel once and kept until an interposed set*id
    /// call changes them (see [`forget_creds`]): two system calls fewer on every path call.
    pub fn effective() -> Creds {
        let v = EFFECTIVE.load(Ordering::Relaxed);
        if v != UNKNOWN {
            return Creds {
                uid: (v >> 32) as u32,
                gid: v as u32,
            };
        }
        // SAFETY: plain getters.
        let c = unsafe {
            Creds {
                uid: libc::geteuid(),
                gid: libc::getegid(),
            }
        };
        EFFECTIVE.store(u64::from(c.uid) << 32 | u64::from(c.gid), Ordering::Relaxed);
        c
    }
    pub fn real() -> Creds {
        // SAFETY: plain getters.
        unsafe {
            Creds {
                uid: libc::getuid(),
                gid: libc::getgid(),
            }
        }
    }
    pub fn root(&self) -> bool {
        self.uid == 0
    }
    pub fn in_group(&self, gid: u32) -> bool {
        if gid == self.gid {
            return true;
        }
        let mut groups = [0 as libc::gid_t; 256];
        // SAFETY: getgroups fills at most 256 entries.
        let n = unsafe { libc::getgroups(256, groups.as_mut_ptr()) };
        n > 0 && groups[..n as usize].contains(&gid)
    }
    /// Whether these credentials may `want` (4 read, 2 write, 1 search/execute) a node with
    /// attributes `m`, as the kernel's generic_permission decides.
    pub fn may(&self, m: &nvmfs::Metadata, want: u32) -> bool {
        if self.root() {
            return want & 1 == 0 || m.is_dir() || m.perm & 0o111 != 0;
        }
        let bits = if m.uid == self.uid {
            m.perm >> 6
        } else if self.in_group(m.gid) {
            m.perm >> 3
        } else {
            m.perm
        } & 7;
        bits & want == want
    }
}

/// The cached effective ids, uid << 32 | gid; [`UNKNOWN`] until read. (uid_t)-1 and
/// (gid_t)-1 are never ids, so the value cannot be a real pair.
static EFFECTIVE: AtomicU64 = AtomicU64::new(UNKNOWN);
const UNKNOWN: u64 = u64::MAX;

/// Drops the cached effective ids: the set*id interposers call it after the C library
/// changed them. A program that changes its ids with a raw system call bypasses this (as it
/// bypasses the C library's own caches); README lists it among the limits.
pub fn forget_creds() {
    EFFECTIVE.store(UNKNOWN, Ordering::Relaxed);
}

static UMASK: AtomicU32 = AtomicU32::new(0o022);

pub fn umask() -> u32 {
    UMASK.load(Ordering::Relaxed)
}

pub fn set_umask(m: u32) {
    UMASK.store(m & 0o777, Ordering::Relaxed);
}

/// Says `text` on stderr once per `key` in this process (not with NVMFS_QUIET=1).
pub fn warn_once(key: &str, text: &str) {
    static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    if config().is_some_and(|c| c.quiet) {
        return;
    }
    {
        let mut g = SAID.lock();
        if !g.get_or_insert_with(HashSet::new).insert(key.to_string()) {
            return;
        }
    }
    let line = format!("nvmfs: {text}\n");
    // Through our own write: stderr may itself be an nvmfs file.
    // SAFETY: a buffer we own.
    unsafe { crate::io::write(2, line.as_ptr() as *const c_void, line.len()) };
}

/// How a description came to this process.
#[derive(Clone, Copy)]
pub enum Origin {
    /// Opened here, with or without O_CLOEXEC (its descriptor is close-on-exec either way).
    Opened { cloexec: bool },
    /// Inherited across exec, or found at start-up.
    Inherited,
}

/// Builds an entry for a new or inherited description.
pub fn make_entry(
    fs: &Fs,
    desc: nvmfs::shared::Description,
    ino: u64,
    ft: nvmfs::FileType,
    vpath: Vec<u8>,
    origin: Origin,
) -> R<Arc<Entry>> {
    let flags = desc.status_flags().load(Ordering::Acquire);
    let path = flags & libc::O_PATH != 0;
    let acc = flags & libc::O_ACCMODE;
    let kind = match ft {
        _ if path => Kind::Path,
        nvmfs::FileType::Dir => Kind::Dir,
        nvmfs::FileType::File => Kind::File,
        _ => Kind::Path,
    };
    let read = !path && kind != Kind::Path && (acc == libc::O_RDONLY || acc == libc::O_RDWR);
    let write = !path && kind == Kind::File && (acc == libc::O_WRONLY || acc == libc::O_RDWR);
    let file = fs.file_from_ino(ino, read, write).en()?;
    Ok(Arc::new(Entry {
        desc,
        ino,
        kind,
        file: Some(file),
        pos: Mutex::new(()),
        vpath,
        lock_fd: std::sync::atomic::AtomicI32::new(-1),
        spare_fd: std::sync::atomic::AtomicI32::new(-1),
        escaped: AtomicBool::new(matches!(origin, Origin::Inherited)),
        keep_on_exec: AtomicBool::new(matches!(origin, Origin::Opened { cloexec: false })),
    }))
}

/// Start-up: parses the configuration and, when this process inherited nvmfs descriptors
/// or an nvmfs working directory, attaches at once and takes them over.
pub fn init() {
    let _g = Guard::new();
    let Some(cfg) = config() else { return };
    // SAFETY: read and restore; start-up runs before the program's threads.
    unsafe {
        let m = real::umask(0o022);
        real::umask(m);
        set_umask(m);
    }
    // SAFETY: registers our fork hooks with plain function pointers.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
    let fds = fd_list();
    crate::stdio::replace_std_streams();
    let inherited: Vec<i32> = fds
        .iter()
        .copied()
        .filter(|&fd| fd_link(fd).is_some_and(|l| nvmfs::shared::is_desc_file(&cfg.coord_path, &l)))
        .collect();
    let cwd = crate::cwd::inherited_vpath(cfg);
    if inherited.is_empty() && cwd.is_none() {
        return;
    }
    let Ok(st) = state() else { return };
    adopt(st, &inherited);
    if let Some(v) = cwd {
        crate::cwd::restore(cfg, &v);
    }
}

/// Takes over the nvmfs descriptions this process inherited across exec.
fn adopt(st: &State, fds: &[i32]) {
    let mut by_slot: Vec<(usize, Arc<Entry>)> = Vec::new();
    for &fd in fds {
        if fdtable::is_internal(fd) {
            continue;
        }
        let Some(desc) = st.mount.adopt(fd) else {
            continue;
        };
        if let Some((_, e)) = by_slot.iter().find(|(s, _)| *s == desc.slot()) {
            fdtable::set(fd, Some(e.clone()));
            continue;
        }
        let slot = desc.slot();
        let made = nv(|fs| {
            let ino = desc.ino();
            let m = fs.getattr(ino).en()?;
            if m.generation != desc.generation() {
                return Err(libc::ESTALE);
            }
            let vpath = if m.is_dir() {
                crate::resolve::dir_path(fs, config().expect("configured"), ino).unwrap_or_default()
            } else {
                Vec::new()
            };
            make_entry(fs, desc, ino, m.file_type, vpath, Origin::Inherited)
        });
        if let Ok(e) = made {
            fdtable::set(fd, Some(e.clone()));
            by_slot.push((slot, e));
        }
    }
}

// ---- fork ----------------------------------------------------------------------------------

extern "C" fn fork_prepare() {
    let _g = Guard::new();
    if let Some(st) = attached() {
        st.mount.prepare_fork();
    }
    // The child holds every description from here on: none may become a spare.
    fdtable::fork_begin();
    fdtable::escape_all();
    crate::locks::fork_lock_all();
}

extern "C" fn fork_parent() {
    let _g = Guard::new();
    crate::locks::fork_unlock_all();
    fdtable::fork_end();
    if let Some(st) = attached() {
        st.mount.parent_after_fork();
    }
}

extern "C" fn fork_child() {
    let _g = Guard::new();
    crate::locks::fork_unlock_all();
    fdtable::forget_readers();
    fdtable::fork_end_in_child();
    // An entry the parent made while the fork began was copied here unescaped.
    fdtable::escape_all();
    // The parent's spares are its own; the child's copies only keep them alive.
    crate::spares::close_all();
    if let Some(st) = attached() {
        // The child gets a coordination descriptor of its own; the inherited one is closed.
        let before = st.mount.internal_fds();
        st.mount.child_after_fork();
        for fd in before {
            fdtable::unmark_internal(fd);
        }
        for fd in st.mount.internal_fds() {
            fdtable::mark_internal(fd);
        }
    }
}

// ---- exit ----------------------------------------------------------------------------------

/// At exit (the library's destructor): flushes stdio (cookie streams write through us),
/// closes this process's nvmfs descriptors and detaches, so the last process out leaves
/// the image clean.
pub fn fini() {
    let _g = Guard::new();
    let Some(st) = attached() else { return };
    // SAFETY: fflush(NULL) flushes every stream.
    unsafe { real::fflush(std::ptr::null_mut()) };
    for (fd, e) in fdtable::take_range(0, u32::MAX) {
        // SAFETY: closing our table's descriptors at exit.
        unsafe { real::close(fd) };
        drop(e);
    }
    crate::spares::close_all();
    crate::cwd::release();
    DETACHED.store(true, Ordering::Release);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| st.mount.detach()));
    // The last process out removed the coordination file: its lock files go too (a
    // process attaching at this very moment would recreate any it needs).
    if let Some(cfg) = config() {
        let coord = std::path::Path::new(std::ffi::OsStr::from_bytes(&cfg.coord_path));
        if !coord.exists() {
            let mut locks = cfg.coord_path.clone();
            locks.extend_from_slice(b".locks");
            let _ =
                std::fs::remove_dir_all(std::path::Path::new(std::ffi::OsStr::from_bytes(&locks)));
        }
    }
}

// ---- small helpers -------------------------------------------------------------------------

/// End of the user half of the address space (x86_64, 4-level page tables; also correct
/// for a bad pointer under 5-level tables, which only lets more through to the kernel).
const USER_SPACE_END: usize = 0x0000_8000_0000_0000;

/// Whether `p` can be a path pointer at all (not NULL, not outside user space): calls with
/// two paths hand a bad one to the C library, whose system call says EFAULT.
pub fn valid_ptr(p: *const c_char) -> bool {
    (p as usize) >= 4096 && (p as usize) < USER_SPACE_END
}

/// The bytes of a C string (empty for NULL).
///
/// # Safety
/// `p` is NULL or NUL-terminated.
pub unsafe fn cbytes<'a>(p: *const c_char) -> &'a [u8] {
    // NULL, the first page and addresses outside user space (EFAULT tests pass usize::MAX):
    // read as empty, so the call goes on to the C library, whose system call says EFAULT.
    if (p as usize) < 4096 || (p as usize) >= USER_SPACE_END {
        &[]
    } else {
        CStr::from_ptr(p).to_bytes()
    }
}

pub fn cstring(v: Vec<u8>) -> CString {
    CString::new(v).unwrap_or_else(|_| CString::from(c"/"))
}
