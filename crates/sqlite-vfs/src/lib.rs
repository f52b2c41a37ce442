//! A SQLite VFS that keeps databases in an nvmfs image, in-process: every xRead, xWrite,
//! xTruncate, xSync, xFileSize and lock call of SQLite goes to the nvmfs core library, with
//! no system call on the data path, and `PRAGMA mmap_size` makes SQLite read pages in place
//! out of the image (xFetch hands out pointers into the mapped media: execute-in-place for a
//! database).
//!
//! ```no_run
//! use nvmfs::{FormatOptions, Fs, MountOptions};
//! use rusqlite::OpenFlags;
//! Fs::format("/dev/shm/db.img", &FormatOptions { size_bytes: 64 << 20, inode_count: None, ..Default::default() })?;
//! let fs = Fs::mount("/dev/shm/db.img", &MountOptions::default())?;
//! fs.create_dir("/data")?;
//! nvmfs_sqlite::register(fs.clone(), "nvmfs")?;
//! let db = nvmfs_sqlite::open("nvmfs", "/data/app.db", OpenFlags::default())?;
//! db.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);")?;
//! drop(db);
//! nvmfs_sqlite::unregister("nvmfs")?;
//! fs.unmount()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Paths are absolute paths inside the image (a relative one is taken from "/"); a
//! database's directory must exist. Every journal mode works (DELETE, TRUNCATE, PERSIST,
//! MEMORY and WAL are tested).
//!
//! **One process.** Locks (SHARED..EXCLUSIVE) and the WAL index live in this process's memory,
//! shared by all its connections on a file, so connections on several threads are serialised
//! and get SQLITE_BUSY exactly as with the unix VFS. nvmfs mounts an image in one process, so
//! nothing else can reach the database through SQLite meanwhile; the WAL index is rebuilt from
//! the WAL file by the first connection after a restart.
//!
//! **Durability.** A transaction that committed is durable when COMMIT returns: nvmfs makes
//! every write durable before it returns (docs/GUARANTEES.md §8b).

mod error;
mod fetch;
mod file;
mod lock;
mod node;
mod open;
mod path;
mod registry;
mod shm;
mod vfs;

use std::io;

pub use registry::Stats;
/// The rusqlite this crate opens connections with (its `Connection` and `OpenFlags`).
pub use rusqlite;

/// Registers a SQLite VFS named `name` that keeps its files in the image `fs` is mounted on
/// (not as SQLite's default VFS: pass the name when opening, or use [`open`]).
///
/// The registration holds a clone of `fs`, so `Fs::unmount` fails with EBUSY until
/// [`unregister`]. Errors: `InvalidInput` for an empty name or one containing NUL;
/// `AlreadyExists` if the name is registered already (by this crate or another VFS such as
/// "unix": registering twice is an error, never a replacement), or if this mount is already
/// registered under another name (two names would keep two lock tables for the same files).
pub fn register(fs: nvmfs::Fs, name: &str) -> io::Result<()> {
    registry::register(fs, name)
}

/// Unregisters the VFS `name` and lets go of its `Fs`. `NotFound` if no such VFS is
/// registered by this crate; `ResourceBusy` while any file of it is open (close its
/// connections first). The name can be registered again afterwards, for any mount.
pub fn unregister(name: &str) -> io::Result<()> {
    registry::unregister(name)
}

/// Opens a connection on the database at `path` in the image of VFS `vfs`
/// (`Connection::open_with_flags_and_vfs`).
pub fn open(
    vfs: &str,
    path: &str,
    flags: rusqlite::OpenFlags,
) -> rusqlite::Result<rusqlite::Connection> {
    rusqlite::Connection::open_with_flags_and_vfs(path, flags, vfs)
}

/// Counters of VFS `name` (`None` if it is not registered): how often xFetch gave SQLite a
/// pointer into the image and how often it fell back to xRead, and the files open now.
pub fn stats(name: &str) -> Option<Stats> {
    registry::stats(name)
}
