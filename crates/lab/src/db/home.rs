//! Where a database keeps its files: a directory of a kernel file system (the database's
//! own file I/O through system calls), or an nvmfs image in-process (SQLite through the
//! nvmfs VFS, LevelDB through `NvmfsEnv`). The benchmarks open their databases through
//! [`DbHome`] so the same code runs on every target.

use super::leveldb::{LevelDbSettings, LevelDbStore};
use super::sqlite::{SqliteSettings, SqliteStore};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The place a database lives in.
#[derive(Clone)]
pub enum DbHome {
    /// A directory, reached through system calls.
    Dir(PathBuf),
    /// The root directory of a mounted nvmfs image, reached in-process.
    Nvmfs(nvmfs::Fs),
}

impl DbHome {
    /// One line for reports.
    pub fn describe(&self) -> String {
        match self {
            DbHome::Dir(d) => format!("files in {}", d.display()),
            DbHome::Nvmfs(_) => "nvmfs image in-process".to_string(),
        }
    }

    /// Opens SQLite's database `name` (a file name) here: a plain file in the directory, or
    /// through a VFS registered for the image as long as the returned [`SqliteDb`] lives.
    /// `settings.vfs` must be unset (the home decides).
    pub fn sqlite(&self, name: &str, settings: &SqliteSettings) -> io::Result<SqliteDb> {
        if settings.vfs.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the SQLite VFS is chosen by the target, not the settings",
            ));
        }
        let mut settings = settings.clone();
        let (path, vfs) = match self {
            DbHome::Dir(d) => (d.join(name), None),
            DbHome::Nvmfs(fs) => {
                let reg = VfsRegistration::new(fs)?;
                settings.vfs = Some(reg.name.clone());
                (Path::new("/").join(name), Some(reg))
            }
        };
        Ok(SqliteDb {
            path,
            settings,
            vfs,
        })
    }

    /// Opens (creating) a LevelDB database in subdirectory `name`.
    pub fn leveldb(&self, name: &str, settings: &LevelDbSettings) -> io::Result<LevelDbStore> {
        match self {
            DbHome::Dir(d) => LevelDbStore::on_dir(&d.join(name), settings),
            DbHome::Nvmfs(fs) => {
                LevelDbStore::on_nvmfs(Arc::new(fs.clone()), &Path::new("/").join(name), settings)
            }
        }
    }
}

/// A SQLite database's path and the settings to open it with, holding the nvmfs VFS
/// registration its connections need. Drop every connection before this.
pub struct SqliteDb {
    pub path: PathBuf,
    pub settings: SqliteSettings,
    vfs: Option<VfsRegistration>,
}

impl SqliteDb {
    /// YCSB's `usertable` in this database.
    pub fn usertable(&self, field_count: usize) -> io::Result<SqliteStore> {
        SqliteStore::open(&self.path, self.settings.clone(), field_count)
    }

    /// Unregisters the VFS, reporting a connection left open.
    pub fn close(mut self) -> io::Result<()> {
        match self.vfs.take() {
            Some(reg) => reg.close(),
            None => Ok(()),
        }
    }
}

/// The nvmfs SQLite VFS registered for one mount under a name unique in this process.
struct VfsRegistration {
    name: String,
}

static NEXT_VFS: AtomicU64 = AtomicU64::new(0);

impl VfsRegistration {
    fn new(fs: &nvmfs::Fs) -> io::Result<Self> {
        let name = format!(
            "nvmfs-lab-{}-{}",
            std::process::id(),
            NEXT_VFS.fetch_add(1, Ordering::Relaxed)
        );
        nvmfs_sqlite::register(fs.clone(), &name)?;
        Ok(VfsRegistration { name })
    }

    fn close(self) -> io::Result<()> {
        let name = std::mem::take(&mut std::mem::ManuallyDrop::new(self).name);
        nvmfs_sqlite::unregister(&name)
    }
}

impl Drop for VfsRegistration {
    fn drop(&mut self) {
        // Errors are reported by `close`; on an error path the registration goes anyway
        // (it holds a clone of the Fs, which would keep the image from unmounting).
        let _ = nvmfs_sqlite::unregister(&self.name);
    }
}
