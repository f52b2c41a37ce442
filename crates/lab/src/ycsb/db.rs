//! The database interface YCSB workloads run against: YCSB's `DB` class (read, scan,
//! update, insert, delete on one table of records with numbered fields), reduced to what the
//! core workloads use.
//!
//! A [`KvStore`] is shared by every client thread; each thread opens its own [`KvSession`]
//! (a SQLite connection, a LevelDB handle) inside the thread, so sessions need not be `Send`.
//! Records have `field_count` fields, field `i` being YCSB's `field{i}`.

use std::io;

/// A database holding YCSB's `usertable`.
pub trait KvStore: Sync {
    type Session: KvSession;
    /// A new client connection, for one thread.
    fn session(&self) -> io::Result<Self::Session>;
    /// One line for reports: engine, version, settings (journal mode, sync, ...).
    fn describe(&self) -> String;
}

/// One client's connection. Methods return `Ok(false)` (or 0 records) when the key is
/// absent, which YCSB counts as a failed operation but not an error of the database.
pub trait KvSession {
    /// Inserts a new record with all its fields (`fields[i]` is field i).
    fn insert(&mut self, key: &str, fields: &[Vec<u8>]) -> io::Result<()>;
    /// Reads a record: every field (`field == None`, YCSB's readallfields) or one. `out`
    /// is cleared and receives the values in field order.
    fn read(&mut self, key: &str, field: Option<usize>, out: &mut Vec<Vec<u8>>)
        -> io::Result<bool>;
    /// Replaces the given fields of an existing record, leaving the others as they are.
    fn update(&mut self, key: &str, fields: &[(usize, Vec<u8>)]) -> io::Result<bool>;
    /// Reads up to `count` records in key order from `start` (inclusive); `out` is cleared
    /// and receives one entry per record, its fields as in [`KvSession::read`].
    fn scan(
        &mut self,
        start: &str,
        count: usize,
        field: Option<usize>,
        out: &mut Vec<Vec<Vec<u8>>>,
    ) -> io::Result<usize>;
    /// Removes a record.
    fn delete(&mut self, key: &str) -> io::Result<bool>;
}
