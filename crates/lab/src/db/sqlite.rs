//! SQLite as the lab runs it: one settings struct ([`SqliteSettings`]) shared by every
//! SQLite workload (YCSB's `usertable` in [`usertable`], TPC-C in `crate::tpcc`), which
//! opens connections with the journal mode, durability and cache settings applied.
//!
//! The database's files live wherever the VFS puts them: with `vfs: None` SQLite's default
//! VFS keeps them as plain files (a path on a kernel file system); with `vfs: Some(name)` a
//! registered VFS (such as nvmfs's, which keeps them in an image) receives the path. The
//! code above the connection is the same for both.

use std::fmt;
use std::io;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};
use serde::Serialize;

pub mod usertable;

pub use usertable::{SqliteSession, SqliteStore};

#[cfg(test)]
mod tests;

/// SQLite's rollback-journal and WAL modes (`PRAGMA journal_mode`). MEMORY and OFF are
/// left out: they give up the atomic commit the benchmarks are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum JournalMode {
    /// Rollback journal, deleted at each commit (SQLite's default).
    Delete,
    /// Rollback journal, truncated to zero length at each commit.
    Truncate,
    /// Rollback journal, its header zeroed at each commit.
    Persist,
    /// Write-ahead log.
    Wal,
}

impl JournalMode {
    /// The name `PRAGMA journal_mode` takes and returns.
    pub fn as_str(self) -> &'static str {
        match self {
            JournalMode::Delete => "delete",
            JournalMode::Truncate => "truncate",
            JournalMode::Persist => "persist",
            JournalMode::Wal => "wal",
        }
    }
}

impl fmt::Display for JournalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str().to_ascii_uppercase())
    }
}

impl FromStr for JournalMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "delete" => Ok(JournalMode::Delete),
            "truncate" => Ok(JournalMode::Truncate),
            "persist" => Ok(JournalMode::Persist),
            "wal" => Ok(JournalMode::Wal),
            _ => Err(format!(
                "unknown journal mode {s:?}: expected DELETE, TRUNCATE, PERSIST or WAL"
            )),
        }
    }
}

/// `PRAGMA synchronous`: when SQLite syncs its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Synchronous {
    /// Never syncs: commits survive a process crash but not a power loss.
    Off,
    /// Syncs at critical moments; in WAL mode a commit is not synced until a checkpoint.
    Normal,
    /// Syncs at every commit, so every committed transaction is durable.
    Full,
    /// FULL, plus a sync of the directory after deleting a rollback journal.
    Extra,
}

impl Synchronous {
    /// The name `PRAGMA synchronous` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Synchronous::Off => "OFF",
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
            Synchronous::Extra => "EXTRA",
        }
    }
}

impl fmt::Display for Synchronous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Synchronous {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "OFF" => Ok(Synchronous::Off),
            "NORMAL" => Ok(Synchronous::Normal),
            "FULL" => Ok(Synchronous::Full),
            "EXTRA" => Ok(Synchronous::Extra),
            _ => Err(format!(
                "unknown synchronous setting {s:?}: expected OFF, NORMAL, FULL or EXTRA"
            )),
        }
    }
}

/// How every SQLite connection of a run is opened and configured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SqliteSettings {
    /// The VFS to open files through; `None` is SQLite's default (the kernel's files).
    pub vfs: Option<String>,
    pub journal_mode: JournalMode,
    /// FULL by default: every commit is durable, as the logs of the databases the
    /// benchmarks compare against are fsynced at commit.
    pub synchronous: Synchronous,
    /// `PRAGMA mmap_size` in bytes; 0 (the default) reads pages with xRead.
    pub mmap_size: u64,
    /// `PRAGMA page_size` in bytes, a power of two in 512..=65536. It only applies when the
    /// database is created; opening an existing database with another size is an error.
    pub page_size: u32,
    /// `PRAGMA cache_size`: pages when positive, KiB when negative (SQLite's -2000 default).
    pub cache_size: i64,
    /// How long a statement waits for another connection's lock before failing with
    /// SQLITE_BUSY (multi-threaded runs).
    pub busy_timeout: Duration,
}

impl Default for SqliteSettings {
    fn default() -> Self {
        SqliteSettings {
            vfs: None,
            journal_mode: JournalMode::Delete,
            synchronous: Synchronous::Full,
            mmap_size: 0,
            page_size: 4096,
            cache_size: -2000,
            busy_timeout: Duration::from_secs(10),
        }
    }
}

impl SqliteSettings {
    /// Checks the settings SQLite would silently ignore or clamp.
    pub fn validate(&self) -> io::Result<()> {
        if !(512..=65536).contains(&self.page_size) || !self.page_size.is_power_of_two() {
            return Err(invalid(format!(
                "SQLite page size {} is not a power of two in 512..=65536",
                self.page_size
            )));
        }
        if self.vfs.as_deref() == Some("") {
            return Err(invalid("the SQLite VFS name is empty".to_string()));
        }
        if i64::try_from(self.mmap_size).is_err() {
            return Err(invalid(format!(
                "mmap_size {} is too large",
                self.mmap_size
            )));
        }
        Ok(())
    }

    /// One line for reports: SQLite's version and these settings.
    pub fn describe(&self) -> String {
        format!(
            "SQLite {} (vfs={}, journal_mode={}, synchronous={}, page_size={}, \
             cache_size={}, mmap_size={}, busy_timeout={}ms)",
            rusqlite::version(),
            self.vfs.as_deref().unwrap_or("default"),
            self.journal_mode,
            self.synchronous,
            self.page_size,
            self.cache_size,
            self.mmap_size,
            self.busy_timeout.as_millis()
        )
    }

    /// Opens (creating if needed) the database at `path` through the configured VFS and
    /// applies the settings.
    pub fn open(&self, path: &Path) -> io::Result<Connection> {
        self.validate()?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = match &self.vfs {
            Some(vfs) => Connection::open_with_flags_and_vfs(path, flags, vfs.as_str()),
            None => Connection::open_with_flags(path, flags),
        }
        .map_err(|e| io::Error::new(e_kind(&e), format!("opening {}: {e}", path.display())))?;
        self.configure(&conn).map_err(|e| {
            io::Error::new(e.kind(), format!("configuring {}: {e}", path.display()))
        })?;
        Ok(conn)
    }

    /// Applies the settings to an open connection. The busy timeout comes first so the
    /// pragmas that take locks wait for other connections; the page size comes before the
    /// journal mode because a WAL database cannot change its page size.
    fn configure(&self, conn: &Connection) -> io::Result<()> {
        conn.busy_timeout(self.busy_timeout).map_err(sql_err)?;
        conn.pragma_update(None, "page_size", self.page_size)
            .map_err(sql_err)?;
        let page_size: u32 = conn
            .pragma_query_value(None, "page_size", |r| r.get(0))
            .map_err(sql_err)?;
        if page_size != self.page_size {
            return Err(invalid(format!(
                "the database has page size {page_size}, the settings ask for {}",
                self.page_size
            )));
        }
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", self.journal_mode.as_str(), |r| {
                r.get(0)
            })
            .map_err(sql_err)?;
        if !mode.eq_ignore_ascii_case(self.journal_mode.as_str()) {
            // SQLite answers with the mode it kept when it cannot switch, e.g. WAL
            // through a VFS without shared memory.
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "journal mode {} refused, the database stays in {mode}",
                    self.journal_mode
                ),
            ));
        }
        conn.pragma_update(None, "synchronous", self.synchronous.as_str())
            .map_err(sql_err)?;
        conn.pragma_update(None, "cache_size", self.cache_size)
            .map_err(sql_err)?;
        // mmap_size answers with the size it applied (capped by SQLITE_MAX_MMAP_SIZE).
        let _applied: i64 = conn
            .pragma_update_and_check(None, "mmap_size", self.mmap_size as i64, |r| r.get(0))
            .map_err(sql_err)?;
        Ok(())
    }

    /// Sets `PRAGMA synchronous` on `conn` (bulk loads turn it off, then restore it).
    pub fn set_synchronous(conn: &Connection, value: Synchronous) -> io::Result<()> {
        conn.pragma_update(None, "synchronous", value.as_str())
            .map_err(sql_err)
    }
}

/// Runs `PRAGMA integrity_check` and fails with SQLite's findings unless it says "ok".
pub fn integrity_check(conn: &Connection) -> io::Result<()> {
    let mut stmt = conn.prepare("PRAGMA integrity_check").map_err(sql_err)?;
    let lines: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .map_err(sql_err)?
        .collect::<Result<_, _>>()
        .map_err(sql_err)?;
    if lines.len() == 1 && lines[0] == "ok" {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("integrity_check: {}", lines.join("; ")),
        ))
    }
}

/// Whether a SQLite error is lock contention (SQLITE_BUSY / SQLITE_LOCKED) that a retry of
/// the whole transaction can get past.
pub fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// The io::ErrorKind for a SQLite error: lock contention stays recognizable as
/// `ResourceBusy`, a full disk as `StorageFull`.
fn e_kind(e: &rusqlite::Error) -> io::ErrorKind {
    if is_busy(e) {
        return io::ErrorKind::ResourceBusy;
    }
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => io::ErrorKind::StorageFull,
        Some(ErrorCode::PermissionDenied | ErrorCode::ReadOnly) => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    }
}

/// A SQLite error as an io::Error, keeping its kind (see [`e_kind`]) and message.
pub fn sql_err(e: rusqlite::Error) -> io::Error {
    io::Error::new(e_kind(&e), e)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// A scratch directory for tests: on tmpfs (/dev/shm) when there is one, so the fsyncs of
/// FULL synchronous commits cost nothing, else the default temporary directory.
#[cfg(test)]
pub(crate) fn scratch_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nvmfs-lab-sqlite-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a temporary directory")
}
