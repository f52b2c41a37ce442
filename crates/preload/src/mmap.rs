//! mmap of nvmfs files: the file's blocks are mapped straight from the image.
//!
//! `File::map_direct` gives the media offset of every block of the file (allocating holes
//! for a writable map, like MAP_POPULATE); each run of physically contiguous blocks is then
//! mapped with `mmap(MAP_FIXED | MAP_SHARED or MAP_PRIVATE, image_fd, media_offset)` into
//! one reserved range. Loads and stores go to the image with no copy. msync persists the
//! range through the core (write-back and fence, mtime); munmap drops the map when its
//! last page goes. A `MapGuard` marks the inode as mapped for every process (shrinking
//! truncate and punch hole refuse with EBUSY below the mapped length, as for DirectMap).
//!
//! Pages past the end of the file (the kernel would raise SIGBUS) are anonymous zero pages.
//! A read-only map of a file with holes (which the core will not map directly) gets a
//! private copy of the data.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use libc::{off64_t, size_t};
use nvmfs::shared::MapGuard;
use nvmfs::DirectMap;
use parking_lot::Mutex;

use crate::exports::active_cfg;
use crate::fdtable::{self, Entry, Kind};
use crate::guard::{self, ret_int, set_errno, Guard, IoErrno, R};
use crate::real;
use crate::state::{self, nv};

const PAGE: usize = 4096;

struct Mapping {
    start: usize,
    len: usize,
    /// Live sub-ranges (munmap may take pieces).
    live: Vec<(usize, usize)>,
    file_off: u64,
    shared: bool,
    prot: c_int,
    flags: c_int,
    entry: Arc<Entry>,
    dmap: Option<DirectMap>,
    guard: Option<MapGuard>,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(g) = self.guard.take() {
            let fd = g.fd();
            drop(g);
            fdtable::unmark_internal(fd);
        }
    }
}

static MAPS: Mutex<Vec<Mapping>> = Mutex::new(Vec::new());
static NMAPS: AtomicUsize = AtomicUsize::new(0);

pub fn fork_lock() {
    std::mem::forget(MAPS.lock());
}

pub fn fork_unlock() {
    // SAFETY: locked by fork_lock.
    unsafe { MAPS.force_unlock() };
}

fn failed(p: *mut c_void) -> bool {
    p == libc::MAP_FAILED
}

/// Maps `len` bytes of nvmfs file `e` at offset `off`.
unsafe fn map_nv(
    e: &Arc<Entry>,
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    off: i64,
) -> R<*mut c_void> {
    if len == 0 || off < 0 || !(off as usize).is_multiple_of(PAGE) {
        return Err(libc::EINVAL);
    }
    if e.kind != Kind::File {
        return Err(if e.kind == Kind::Dir || e.is_path() {
            libc::ENODEV
        } else {
            libc::EACCES
        });
    }
    let shared = flags & libc::MAP_TYPE == libc::MAP_SHARED
        || flags & libc::MAP_TYPE == libc::MAP_SHARED_VALIDATE;
    if !e.readable() {
        return Err(libc::EACCES);
    }
    if shared && prot & libc::PROT_WRITE != 0 && !e.writable() {
        return Err(libc::EACCES);
    }
    let len = len.div_ceil(PAGE) * PAGE;
    let st = state::state()?;
    let image_fd = st.mount.image_fd();
    let (dmap, guard) = {
        let d = nv(|_| Ok(e.file().map_direct()));
        let d = d?;
        match d {
            Ok(m) => {
                let _g = Guard::new();
                let gd = st.mount.map_guard(e.ino).en()?;
                fdtable::mark_internal(gd.fd());
                (Some(m), Some(gd))
            }
            Err(err)
                if err.raw_os_error() == Some(libc::EINVAL)
                    && (!shared || prot & libc::PROT_WRITE == 0) =>
            {
                (None, None)
            }
            Err(err) => return Err(guard::to_errno(&err)),
        }
    };
    let base_flags = flags & (libc::MAP_POPULATE | libc::MAP_NORESERVE | libc::MAP_LOCKED);
    let fixed = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE);
    let base = real::mmap64(
        addr,
        len,
        libc::PROT_NONE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | fixed,
        -1,
        0,
    );
    if failed(base) {
        return Err(guard::errno());
    }
    let kind = if shared {
        libc::MAP_SHARED
    } else {
        libc::MAP_PRIVATE
    };
    let first_block = off as usize / PAGE;
    let npages = len / PAGE;
    let mut i = 0;
    let fail = |err: c_int| -> R<*mut c_void> {
        real::munmap(base, len);
        Err(err)
    };
    match &dmap {
        Some(m) => {
            let blocks = m.block_offsets();
            while i < npages {
                let b = first_block + i;
                let at = (base as usize + i * PAGE) as *mut c_void;
                if b >= blocks.len() {
                    let r = real::mmap64(
                        at,
                        (npages - i) * PAGE,
                        prot,
                        libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | base_flags,
                        -1,
                        0,
                    );
                    if failed(r) {
                        return fail(guard::errno());
                    }
                    break;
                }
                let mut run = 1;
                while i + run < npages
                    && b + run < blocks.len()
                    && blocks[b + run] == blocks[b] + (run * PAGE) as u64
                {
                    run += 1;
                }
                let r = real::mmap64(
                    at,
                    run * PAGE,
                    prot,
                    libc::MAP_FIXED | kind | base_flags,
                    image_fd,
                    blocks[b] as i64,
                );
                if failed(r) {
                    return fail(guard::errno());
                }
                i += run;
            }
        }
        None => {
            // A private copy (read-only map of a file with holes).
            let r = real::mmap64(
                base,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if failed(r) {
                return fail(guard::errno());
            }
            let buf = std::slice::from_raw_parts_mut(base as *mut u8, len);
            nv(|_| e.file().read_at(buf, off as u64).en())?;
            if libc::mprotect(base, len, prot) != 0 {
                return fail(guard::errno());
            }
        }
    }
    let mut g = MAPS.lock();
    g.push(Mapping {
        start: base as usize,
        len,
        live: vec![(base as usize, base as usize + len)],
        file_off: off as u64,
        shared,
        prot,
        flags,
        entry: e.clone(),
        dmap,
        guard,
    });
    NMAPS.store(g.len(), Ordering::Release);
    Ok(base)
}

macro_rules! mmap_fns {
    ($name:ident) => {
        /// # Safety
        /// C ABI.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            addr: *mut c_void,
            len: size_t,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            off: off64_t,
        ) -> *mut c_void {
            if !guard::active() && flags & libc::MAP_ANONYMOUS == 0 && active_cfg().is_some() {
                if let Some(e) = fdtable::get(fd) {
                    return match map_nv(&e, addr, len, prot, flags, off) {
                        Ok(p) => p,
                        Err(err) => {
                            set_errno(err);
                            libc::MAP_FAILED
                        }
                    };
                }
            }
            real::mmap64(addr, len, prot, flags, fd, off)
        }
    };
}
mmap_fns!(mmap);
mmap_fns!(mmap64);

/// Removes `[a, b)` from the live ranges of every mapping; returns the mappings left with
/// nothing live (to drop outside the lock).
fn forget_range(a: usize, b: usize) -> Vec<Mapping> {
    let mut g = MAPS.lock();
    let mut dead = Vec::new();
    let mut i = 0;
    while i < g.len() {
        let m = &mut g[i];
        if m.start < b && a < m.start + m.len {
            let mut live = Vec::new();
            for &(s, e) in &m.live {
                if e <= a || s >= b {
                    live.push((s, e));
                    continue;
                }
                if s < a {
                    live.push((s, a));
                }
                if e > b {
                    live.push((b, e));
                }
            }
            m.live = live;
            if m.live.is_empty() {
                dead.push(g.swap_remove(i));
                continue;
            }
        }
        i += 1;
    }
    NMAPS.store(g.len(), Ordering::Release);
    dead
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let r = real::munmap(addr, len);
    if r == 0 && NMAPS.load(Ordering::Acquire) != 0 && !guard::active() {
        let a = addr as usize;
        let dead = forget_range(a, a + len.div_ceil(PAGE) * PAGE);
        for m in dead {
            state::drop_in_op(m);
        }
    }
    r
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    if NMAPS.load(Ordering::Acquire) != 0 && !guard::active() {
        let a = addr as usize;
        let b = a + len;
        let mut err = None;
        {
            let g = MAPS.lock();
            for m in g.iter() {
                if !(m.start < b && a < m.start + m.len && m.shared) {
                    continue;
                }
                let Some(d) = &m.dmap else { continue };
                let s = a.max(m.start);
                let e = b.min(m.start + m.len);
                let off = m.file_off + (s - m.start) as u64;
                if let Err(x) = nv(|_| d.persist(off, (e - s) as u64).en()) {
                    err = Some(x);
                }
            }
        }
        let r = real::msync(addr, len, flags);
        if let Some(e) = err {
            return ret_int(Err(e));
        }
        return r;
    }
    real::msync(addr, len, flags)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    if NMAPS.load(Ordering::Acquire) != 0 && !guard::active() {
        let a = old as usize;
        let found = {
            let g = MAPS.lock();
            g.iter()
                .find(|m| m.start <= a && a < m.start + m.len)
                .map(|m| {
                    (
                        m.entry.clone(),
                        m.prot,
                        m.flags,
                        m.file_off + (a - m.start) as u64,
                        m.shared,
                    )
                })
        };
        if let Some((e, prot, mflags, off, shared)) = found {
            if new_len <= old_len {
                if new_len < old_len {
                    let cut = (a + new_len).div_ceil(PAGE) * PAGE;
                    munmap(cut as *mut c_void, a + old_len - cut);
                }
                return old;
            }
            if flags & libc::MREMAP_MAYMOVE == 0 || !shared {
                set_errno(libc::ENOMEM);
                return libc::MAP_FAILED;
            }
            let fixed = if flags & libc::MREMAP_FIXED != 0 {
                libc::MAP_FIXED
            } else {
                0
            };
            let hint = if fixed != 0 {
                new_addr
            } else {
                std::ptr::null_mut()
            };
            return match map_nv(
                &e,
                hint,
                new_len,
                prot,
                (mflags & !libc::MAP_FIXED) | fixed,
                off as i64,
            ) {
                Ok(p) => {
                    munmap(old, old_len);
                    p
                }
                Err(err) => {
                    set_errno(err);
                    libc::MAP_FAILED
                }
            };
        }
    }
    real::mremap(old, old_len, new_len, flags, new_addr)
}
