//! LevelDB's `LOCK` file on nvmfs: a process-wide table of the locks held.
//!
//! Other processes are already kept out: a mount holds the image's exclusive flock, so one
//! process has the image at a time. What is left is two databases in this process opening
//! one directory. LevelDB's PosixEnv meets that case with a process-wide table of locked
//! names beside its fcntl lock (fcntl locks do not conflict within a process); this is that
//! table. It is keyed by mount and inode of the lock file, so two spellings of one path, or
//! two `NvmfsEnv`s on one mount, find each other, while the same path on another mount does
//! not conflict.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use nvmfs::{Fs, OpenOptions};
use rusty_leveldb::env::FileLock;
use rusty_leveldb::{Result, Status, StatusCode};

use crate::status::status;

/// One lock held: the open lock file keeps its inode (and the mount) alive until unlock.
struct Held {
    fs: Fs,
    ino: u64,
    id: String,
    _file: nvmfs::File,
}

static HELD: Mutex<Vec<Held>> = Mutex::new(Vec::new());

fn table() -> MutexGuard<'static, Vec<Held>> {
    // Every update of the table is a single push or remove, so a panic elsewhere while it was
    // held cannot have left it half-changed.
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Creates `path` if needed and takes its lock; `LockError` if this process holds it.
pub(crate) fn lock(fs: &Fs, path: &Path) -> Result<FileLock> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(fs, path)
        .map_err(|e| status("lock", path, &e))?;
    let ino = file.ino();
    let mut held = table();
    if held.iter().any(|h| h.fs.same_mount(fs) && h.ino == ino) {
        return Err(Status::new(
            StatusCode::LockError,
            &format!("lock {}: already held in this process", path.display()),
        ));
    }
    // The inode makes the id unique on the mount even if the path is later reused.
    let id = format!("{} (inode {ino})", path.display());
    held.push(Held {
        fs: fs.clone(),
        ino,
        id: id.clone(),
        _file: file,
    });
    Ok(FileLock { id })
}

/// Releases a lock taken by [`lock`] on this mount; `LockError` if it is not held.
pub(crate) fn unlock(fs: &Fs, lock: FileLock) -> Result<()> {
    let mut held = table();
    let Some(at) = held
        .iter()
        .position(|h| h.fs.same_mount(fs) && h.id == lock.id)
    else {
        return Err(Status::new(
            StatusCode::LockError,
            &format!("unlock {}: not locked", lock.id),
        ));
    };
    let gone = held.swap_remove(at);
    drop(held);
    // Closing the lock file outside the table's mutex: the close is a file system operation.
    drop(gone);
    Ok(())
}
