//! LevelDB on nvmfs: [`NvmfsEnv`] implements rusty-leveldb's [`Env`] on the nvmfs library
//! in-process, so a `rusty_leveldb::DB` keeps its files in an nvmfs image with no kernel
//! file system, FUSE or system call on the data path.
//!
//! ```no_run
//! use std::path::Path;
//! use nvmfs::{Fs, MountOptions};
//! use nvmfs_leveldb::NvmfsEnv;
//! use rusty_leveldb::Options;
//!
//! let fs = Fs::mount("/dev/shm/kv.img", &MountOptions::default())?;
//! let env = NvmfsEnv::new(fs);
//! let mut db = env.open_db(Path::new("/db"), Options::default()).map_err(std::io::Error::other)?;
//! db.put(b"k", b"v").map_err(std::io::Error::other)?;
//! db.close().map_err(std::io::Error::other)?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Paths are paths inside the image, resolved from its root ("db/CURRENT" and
//! "/db/CURRENT" are the same file). Every nvmfs operation is durable when it returns, so
//! what LevelDB has handed to a file survives a crash; what it still holds in its own
//! buffers until the next flush does not (as on any file system).
//!
//! Open databases with [`NvmfsEnv::open_db`] rather than `DB::open`: rusty-leveldb
//! canonicalises the database name on the *host* file system and then uses both spellings,
//! so a name the host resolves differently (a relative one, or one through a host symlink)
//! would scatter the database over two directories of the image. `open_db` refuses such
//! names.

mod files;
mod locks;
mod status;

use std::ffi::OsStr;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nvmfs::{FileType, Fs, OpenOptions};
use rusty_leveldb::env::{Env, FileLock, Logger, RandomAccess};
use rusty_leveldb::{Options, Result, Status, StatusCode, DB};

use files::{RandomAccessFile, WritableFile};
use status::status;

/// rusty-leveldb's environment on a mounted nvmfs image. Cheap to clone; clones (and other
/// `NvmfsEnv`s on the same mount) share the lock table, so one database directory can be
/// open once per mount at a time.
#[derive(Clone)]
pub struct NvmfsEnv {
    fs: Fs,
}

impl NvmfsEnv {
    /// An environment on `fs`. The environment keeps a handle on the mount, so the mount
    /// outlives every database opened on it.
    pub fn new(fs: Fs) -> Self {
        NvmfsEnv { fs }
    }

    /// The mount this environment works on.
    pub fn fs(&self) -> &Fs {
        &self.fs
    }

    /// Opens the database in directory `dir` of the image with `opts` on this environment
    /// (their `env` is replaced). `dir` must be absolute, without `.` or `..`, and not
    /// rewritten by the host's `canonicalize` (see the crate documentation); otherwise
    /// `InvalidArgument`.
    pub fn open_db(&self, dir: &Path, opts: Options) -> Result<DB> {
        check_db_dir(dir)?;
        let opts = Options {
            env: Rc::new(Box::new(self.clone())),
            ..opts
        };
        DB::open(dir, opts)
    }

    fn open(&self, op: &str, path: &Path, how: &OpenOptions) -> Result<nvmfs::File> {
        how.open(&self.fs, path).map_err(|e| status(op, path, &e))
    }

    fn open_writer(&self, op: &str, path: &Path, append: bool) -> Result<WritableFile> {
        let mut how = OpenOptions::new();
        how.write(true).create(true);
        if append {
            how.append(true);
        } else {
            how.truncate(true);
        }
        Ok(WritableFile::new(self.open(op, path, &how)?, path))
    }

    /// Removes `path` and everything below it (the disk env's `remove_dir_all`).
    fn remove_tree(&self, path: &Path) -> std::io::Result<()> {
        for entry in self.fs.read_dir(path)? {
            let child = path.join(OsStr::from_bytes(&entry.name));
            if entry.file_type == FileType::Dir {
                self.remove_tree(&child)?;
            } else {
                self.fs.remove_file(&child)?;
            }
        }
        self.fs.remove_dir(path)
    }
}

/// Refuses a database directory that `DB::open` would not use under its own name.
fn check_db_dir(dir: &Path) -> Result<()> {
    let plain = dir.is_absolute()
        && dir
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain {
        return Err(Status::new(
            StatusCode::InvalidArgument,
            &format!(
                "database directory {}: must be an absolute path in the image, without . or ..",
                dir.display()
            ),
        ));
    }
    // DB::open replaces the name by its host canonical form when the host has that path.
    match dir.canonicalize() {
        Ok(host) if host != dir => Err(Status::new(
            StatusCode::InvalidArgument,
            &format!(
                "database directory {}: rusty-leveldb would resolve it on the host file system, \
                 to {}; pick a path that no host symlink rewrites",
                dir.display(),
                host.display()
            ),
        )),
        _ => Ok(()),
    }
}

impl Env for NvmfsEnv {
    fn open_sequential_file(&self, path: &Path) -> Result<Box<dyn Read>> {
        // nvmfs's File reads from its own position: exactly a sequential file.
        let file = self.open("open (seq)", path, OpenOptions::new().read(true))?;
        Ok(Box::new(file))
    }

    fn open_random_access_file(&self, path: &Path) -> Result<Box<dyn RandomAccess>> {
        let file = self.open("open (randomaccess)", path, OpenOptions::new().read(true))?;
        Ok(Box::new(RandomAccessFile::new(file, path)))
    }

    fn open_writable_file(&self, path: &Path) -> Result<Box<dyn Write>> {
        Ok(Box::new(self.open_writer("open (write)", path, false)?))
    }

    fn open_appendable_file(&self, path: &Path) -> Result<Box<dyn Write>> {
        Ok(Box::new(self.open_writer("open (append)", path, true)?))
    }

    /// Whether `path` names anything; a missing parent directory is "no", as with
    /// `Path::exists`, but any other failure is reported.
    fn exists(&self, path: &Path) -> Result<bool> {
        match self.fs.metadata(path) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                Ok(false)
            }
            Err(e) => Err(status("exists", path, &e)),
        }
    }

    /// The names (not paths) of the entries of directory `path`.
    fn children(&self, path: &Path) -> Result<Vec<PathBuf>> {
        let entries = self
            .fs
            .read_dir(path)
            .map_err(|e| status("children", path, &e))?;
        Ok(entries
            .into_iter()
            .map(|e| PathBuf::from(OsStr::from_bytes(&e.name)))
            .collect())
    }

    fn size_of(&self, path: &Path) -> Result<usize> {
        let meta = self
            .fs
            .metadata(path)
            .map_err(|e| status("size_of", path, &e))?;
        Ok(meta.len() as usize)
    }

    fn delete(&self, path: &Path) -> Result<()> {
        self.fs
            .remove_file(path)
            .map_err(|e| status("delete", path, &e))
    }

    /// Creates `path` and any missing parents (the disk env's `create_dir_all`).
    fn mkdir(&self, path: &Path) -> Result<()> {
        self.fs
            .create_dir_all(path)
            .map_err(|e| status("mkdir", path, &e))
    }

    /// Removes directory `path` with its contents (the disk env's `remove_dir_all`).
    fn rmdir(&self, path: &Path) -> Result<()> {
        self.remove_tree(path)
            .map_err(|e| status("rmdir", path, &e))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.fs
            .rename_path(from, to)
            .map_err(|e| status("rename", from, &e))
    }

    fn lock(&self, path: &Path) -> Result<FileLock> {
        locks::lock(&self.fs, path)
    }

    fn unlock(&self, lock: FileLock) -> Result<()> {
        locks::unlock(&self.fs, lock)
    }

    fn new_logger(&self, path: &Path) -> Result<Logger> {
        Ok(Logger::new(Box::new(self.open_writer(
            "open (logger)",
            path,
            true,
        )?)))
    }

    /// Microseconds since the Unix epoch (LevelDB times compactions with it); 0 if the
    /// clock reads before the epoch.
    fn micros(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }

    fn sleep_for(&self, micros: u32) {
        std::thread::sleep(Duration::from_micros(micros.into()));
    }
}
