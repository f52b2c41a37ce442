//! Named registrations: which mount each VFS name serves, and the `sqlite3_vfs` structures
//! handed to SQLite.
//!
//! A connection keeps a pointer to its `sqlite3_vfs` for its whole life and SQLite offers no
//! hook when the last one goes, so the structures are never freed: one small allocation per
//! distinct name, reused when that name is registered again. What a registration holds (the
//! `Fs` and its shared file state) is released by `unregister`, which is refused while a file
//! of that VFS is open.

use std::cell::UnsafeCell;
use std::ffi::{c_void, CString};
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use libsqlite3_sys as ffi;
use nvmfs::media::MediaMode;
use nvmfs::Fs;
use parking_lot::{Mutex, RwLock};

use crate::node::Nodes;
use crate::vfs;

/// The state of one registered VFS: the mount and what its open files share.
pub(crate) struct Mount {
    pub fs: Fs,
    pub name: CString,
    pub nodes: Nodes,
    /// Open `sqlite3_file`s of this VFS (`OpenSlot`s).
    open_files: AtomicUsize,
    next_conn: AtomicU64,
    /// Byte length of the image (the xFetch over-read check).
    pub image_end: u64,
    /// xDeviceCharacteristics of every file.
    pub iocaps: i32,
    pub fetches: AtomicU64,
    pub fetch_fallbacks: AtomicU64,
    /// Identity of the mount (see `mount_id`).
    id: usize,
}

impl Mount {
    /// A fresh number for a newly opened file: its identity as a lock owner.
    pub fn next_conn(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }
}

/// One open file's claim on its mount: counted while it lives, so `unregister` knows whether
/// a connection still uses the VFS.
pub(crate) struct OpenSlot(pub Arc<Mount>);

impl Drop for OpenSlot {
    fn drop(&mut self) {
        self.0.open_files.fetch_sub(1, Ordering::AcqRel);
    }
}

struct Registration {
    raw: UnsafeCell<ffi::sqlite3_vfs>,
    name: CString,
    mount: RwLock<Option<Arc<Mount>>>,
}

// SAFETY: `raw` is written only before it is registered, and afterwards only by SQLite (its
// `pNext` link), under SQLite's own mutex; everything else is behind locks.
unsafe impl Sync for Registration {}

static REGISTRY: Mutex<Vec<&'static Registration>> = Mutex::new(Vec::new());

/// Statistics of a registered VFS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// xFetch calls that handed SQLite a pointer into the image.
    pub fetches: u64,
    /// xFetch calls answered with NULL (SQLite read the page with xRead instead).
    pub fetch_fallbacks: u64,
    /// Files (databases, journals, WAL files, temporary files) open through this VFS now.
    pub open_files: usize,
}

/// A mount's identity: the address of its superblock inside the shared mount state, the
/// same for every clone of one `Fs` and stable while a registration holds that `Fs`.
fn mount_id(fs: &Fs) -> usize {
    fs.superblock() as *const _ as usize
}

/// The state of a new registration on `fs`; its files' SQLITE_IOCAP_* flags follow the
/// image's media (see `file::iocaps`).
fn new_mount(fs: Fs, name: CString) -> Mount {
    let geo = &fs.superblock().geo;
    let image_end = geo.total_blocks * nvmfs::layout::BLOCK_SIZE;
    let iocaps = crate::file::iocaps(fs.media_mode() != MediaMode::File);
    Mount {
        id: mount_id(&fs),
        fs,
        name,
        nodes: Nodes::default(),
        open_files: AtomicUsize::new(0),
        next_conn: AtomicU64::new(1),
        image_end,
        iocaps,
        fetches: AtomicU64::new(0),
        fetch_fallbacks: AtomicU64::new(0),
    }
}

fn err(kind: io::ErrorKind, msg: String) -> io::Error {
    io::Error::new(kind, msg)
}

/// See [`crate::register`].
pub(crate) fn register(fs: Fs, name: &str) -> io::Result<()> {
    let cname = CString::new(name)
        .ok()
        .filter(|c| !c.as_bytes().is_empty())
        .ok_or_else(|| {
            err(
                io::ErrorKind::InvalidInput,
                format!("bad VFS name {name:?}"),
            )
        })?;
    let mut reg = REGISTRY.lock();
    for r in reg.iter() {
        if let Some(m) = r.mount.read().as_ref() {
            if r.name == cname {
                let msg = format!("VFS {name:?} is already registered");
                return Err(err(io::ErrorKind::AlreadyExists, msg));
            }
            if m.id == mount_id(&fs) {
                let msg = format!("this mount is already registered as VFS {:?}", r.name);
                return Err(err(io::ErrorKind::AlreadyExists, msg));
            }
        }
    }
    let ours = reg.iter().find(|r| r.name == cname).copied();
    // SAFETY: a valid C string; sqlite3_vfs_find initialises SQLite if needed.
    let existing = unsafe { ffi::sqlite3_vfs_find(cname.as_ptr()) };
    if !existing.is_null() && ours.is_none_or(|r| r.raw.get() != existing) {
        let msg = format!("SQLite already has a VFS named {name:?}");
        return Err(err(io::ErrorKind::AlreadyExists, msg));
    }
    let r = ours.unwrap_or_else(|| {
        let r: &'static Registration = Box::leak(Box::new(Registration {
            raw: UnsafeCell::new(vfs::raw_vfs()),
            name: cname.clone(),
            mount: RwLock::new(None),
        }));
        // SAFETY: not registered yet, so nothing else reads it.
        unsafe {
            let raw = &mut *r.raw.get();
            raw.zName = r.name.as_ptr();
            raw.pAppData = r as *const Registration as *mut c_void;
        }
        reg.push(r);
        r
    });
    *r.mount.write() = Some(Arc::new(new_mount(fs, cname)));
    // SAFETY: `raw` is 'static and fully initialised.
    let rc = unsafe { ffi::sqlite3_vfs_register(r.raw.get(), 0) };
    if rc != ffi::SQLITE_OK {
        *r.mount.write() = None;
        let msg = format!("sqlite3_vfs_register({name:?}) failed with code {rc}");
        return Err(err(io::ErrorKind::Other, msg));
    }
    Ok(())
}

/// See [`crate::unregister`].
pub(crate) fn unregister(name: &str) -> io::Result<()> {
    let reg = REGISTRY.lock();
    let r = reg
        .iter()
        .find(|r| r.name.as_bytes() == name.as_bytes() && r.mount.read().is_some())
        .ok_or_else(|| {
            err(
                io::ErrorKind::NotFound,
                format!("no VFS {name:?} is registered"),
            )
        })?;
    let mut m = r.mount.write();
    let open = m
        .as_ref()
        .map_or(0, |m| m.open_files.load(Ordering::Acquire));
    if open > 0 {
        let msg = format!("VFS {name:?} still has {open} open files: close its connections first");
        return Err(err(io::ErrorKind::ResourceBusy, msg));
    }
    // SAFETY: registered by `register`; unregistering an unknown pointer is a no-op anyway.
    unsafe { ffi::sqlite3_vfs_unregister(r.raw.get()) };
    *m = None;
    Ok(())
}

/// See [`crate::stats`].
pub(crate) fn stats(name: &str) -> Option<Stats> {
    let reg = REGISTRY.lock();
    let r = reg.iter().find(|r| r.name.as_bytes() == name.as_bytes())?;
    let m = r.mount.read();
    let m = m.as_ref()?;
    Some(Stats {
        fetches: m.fetches.load(Ordering::Relaxed),
        fetch_fallbacks: m.fetch_fallbacks.load(Ordering::Relaxed),
        open_files: m.open_files.load(Ordering::Relaxed),
    })
}

/// The registration behind a `sqlite3_vfs` pointer SQLite passes to a callback.
///
/// # Safety
/// `vfs` must be one of ours (SQLite passes back the pointer it was registered with).
unsafe fn registration<'a>(vfs: *mut ffi::sqlite3_vfs) -> &'a Registration {
    // SAFETY: pAppData was set to a leaked, never freed Registration.
    unsafe { &*((*vfs).pAppData as *const Registration) }
}

/// The mount a VFS callback works on; `None` after `unregister`.
///
/// # Safety
/// As for `registration`.
pub(crate) unsafe fn mount_of(vfs: *mut ffi::sqlite3_vfs) -> Option<Arc<Mount>> {
    // SAFETY: forwarded.
    unsafe { registration(vfs) }.mount.read().clone()
}

/// Claims an open-file slot on the VFS's mount, atomically with `unregister`'s check.
///
/// # Safety
/// As for `registration`.
pub(crate) unsafe fn open_slot(vfs: *mut ffi::sqlite3_vfs) -> Option<OpenSlot> {
    // SAFETY: forwarded.
    let g = unsafe { registration(vfs) }.mount.read();
    let m = g.as_ref()?;
    m.open_files.fetch_add(1, Ordering::AcqRel);
    Some(OpenSlot(m.clone()))
}
