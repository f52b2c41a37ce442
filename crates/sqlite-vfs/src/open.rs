//! xOpen: SQLite's open flags on nvmfs `OpenOptions`, as the unix VFS (`unixOpen`) applies
//! them: CREATE and EXCLUSIVE, a read-write open that falls back to read-only when the image
//! refuses writing, temporary files (a NULL name) with a unique name in the image, and
//! DELETEONCLOSE files unlinked right after opening (nvmfs keeps an unlinked file until its
//! last handle goes, and a crash leaves an orphan that the next mount frees).

use std::ffi::{c_int, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;

use libsqlite3_sys as ffi;
use nvmfs::{File, Fs, OpenOptions};

use crate::error::record;
use crate::file::FileState;
use crate::lock;
use crate::registry::OpenSlot;

/// Attempts at a fresh temporary name before giving up.
const TEMP_TRIES: usize = 100;

/// Opens `name` (`None`: a new temporary file) with SQLite's `flags`; returns the file and
/// the flags it was really opened with (READONLY after a fallback), or an SQLite code.
pub(crate) fn open(
    slot: OpenSlot,
    name: Option<&[u8]>,
    flags: c_int,
) -> Result<(FileState, c_int), c_int> {
    let fs = &slot.0.fs;
    let (path, file, flags) = match name {
        None => {
            let (path, file) = create_temp(fs)?;
            (path, file, flags)
        }
        Some(p) => {
            let (file, flags) = open_path(fs, p, flags)?;
            (p.to_vec(), file, flags)
        }
    };
    check_regular(&file)?;
    let path = if flags & ffi::SQLITE_OPEN_DELETEONCLOSE != 0 {
        fs.remove_file(OsStr::from_bytes(&path)).map_err(cantopen)?;
        None
    } else {
        Some(path)
    };
    let node = slot.0.nodes.acquire(file.ino());
    let conn = slot.0.next_conn();
    let state = FileState {
        slot,
        file,
        node,
        conn,
        level: lock::NONE,
        path,
        shm: None,
        fetched: Vec::new(),
        mmap_limit: 0,
    };
    Ok((state, flags))
}

fn cantopen(e: io::Error) -> c_int {
    record(&e);
    if e.raw_os_error() == Some(libc::EISDIR) {
        ffi::SQLITE_CANTOPEN_ISDIR
    } else {
        ffi::SQLITE_CANTOPEN
    }
}

fn options(write: bool, create: bool, exclusive: bool) -> OpenOptions {
    let mut o = OpenOptions::new();
    o.read(true)
        .write(write)
        .create(write && create && !exclusive)
        .create_new(write && create && exclusive);
    o
}

fn open_path(fs: &Fs, path: &[u8], flags: c_int) -> Result<(File, c_int), c_int> {
    let p = OsStr::from_bytes(path);
    let write = flags & ffi::SQLITE_OPEN_READWRITE != 0;
    let create = flags & ffi::SQLITE_OPEN_CREATE != 0;
    let exclusive = flags & ffi::SQLITE_OPEN_EXCLUSIVE != 0;
    match options(write, create, exclusive).open(fs, p) {
        Ok(f) => Ok((f, flags)),
        // A read-only mount (EROFS): open read-only and tell SQLite, as unixOpen does.
        Err(e)
            if write
                && matches!(
                    e.raw_os_error(),
                    Some(libc::EROFS | libc::EACCES | libc::EPERM)
                ) =>
        {
            let f = options(false, false, false).open(fs, p).map_err(cantopen)?;
            let ro = (flags & !(ffi::SQLITE_OPEN_READWRITE | ffi::SQLITE_OPEN_CREATE))
                | ffi::SQLITE_OPEN_READONLY;
            Ok((f, ro))
        }
        Err(e) => Err(cantopen(e)),
    }
}

/// A new empty file with a unique name in the image's root directory.
fn create_temp(fs: &Fs) -> Result<(Vec<u8>, File), c_int> {
    for _ in 0..TEMP_TRIES {
        let mut r = [0u8; 8];
        crate::vfs::fill_random(&mut r);
        let name = format!("/.sqlite-tmp-{:016x}", u64::from_le_bytes(r)).into_bytes();
        match options(true, true, true).open(fs, OsStr::from_bytes(&name)) {
            Ok(f) => return Ok((name, f)),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => return Err(cantopen(e)),
        }
    }
    Err(cantopen(io::Error::from_raw_os_error(libc::EEXIST)))
}

/// Databases, journals and WAL files are regular files; a directory is SQLITE_CANTOPEN_ISDIR.
fn check_regular(f: &File) -> Result<(), c_int> {
    match f.metadata() {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) if m.is_dir() => Err(ffi::SQLITE_CANTOPEN_ISDIR),
        Ok(_) => Err(cantopen(io::Error::from_raw_os_error(libc::EINVAL))),
        Err(e) => Err(cantopen(e)),
    }
}
