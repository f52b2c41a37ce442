//! An in-memory [`KvStore`]: a `BTreeMap` behind a mutex. It is a test model, not a
//! benchmark target: the workload tests run on it, and backend tests compare a real database
//! against it (same operations, same answers). Every session shares the one map, so it is as
//! consistent as a single-node database and as slow as one global lock.

use super::db::{KvSession, KvStore};
use std::collections::BTreeMap;
use std::io;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

type Table = BTreeMap<String, Vec<Vec<u8>>>;

/// YCSB's `usertable` in memory.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    table: Arc<Mutex<Table>>,
}

impl MemoryStore {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records in the table.
    pub fn len(&self) -> usize {
        lock(&self.table).len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        lock(&self.table).is_empty()
    }

    /// A copy of one record's fields.
    pub fn get(&self, key: &str) -> Option<Vec<Vec<u8>>> {
        lock(&self.table).get(key).cloned()
    }

    /// Every key, in order.
    pub fn keys(&self) -> Vec<String> {
        lock(&self.table).keys().cloned().collect()
    }
}

/// The table, even if a thread panicked while holding it: every change below is a single
/// map operation, so a poisoned table is still consistent.
fn lock(table: &Mutex<Table>) -> MutexGuard<'_, Table> {
    table
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl KvStore for MemoryStore {
    type Session = MemorySession;

    fn session(&self) -> io::Result<MemorySession> {
        Ok(MemorySession {
            table: Arc::clone(&self.table),
        })
    }

    fn describe(&self) -> String {
        "memory (BTreeMap test model)".to_string()
    }
}

/// A connection to a [`MemoryStore`].
#[derive(Debug)]
pub struct MemorySession {
    table: Arc<Mutex<Table>>,
}

fn no_field(key: &str, field: usize, count: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("record {key} has {count} fields, no field {field}"),
    )
}

/// Copies the requested fields of `record` into `out` (cleared first).
fn copy_fields(
    key: &str,
    record: &[Vec<u8>],
    field: Option<usize>,
    out: &mut Vec<Vec<u8>>,
) -> io::Result<()> {
    out.clear();
    match field {
        None => out.extend(record.iter().cloned()),
        Some(i) => out.push(
            record
                .get(i)
                .ok_or_else(|| no_field(key, i, record.len()))?
                .clone(),
        ),
    }
    Ok(())
}

impl KvSession for MemorySession {
    fn insert(&mut self, key: &str, fields: &[Vec<u8>]) -> io::Result<()> {
        // YCSB's DB.insert on an existing key is backend-defined; like an SQL upsert or a
        // LevelDB put, the new record replaces the old one.
        lock(&self.table).insert(key.to_string(), fields.to_vec());
        Ok(())
    }

    fn read(
        &mut self,
        key: &str,
        field: Option<usize>,
        out: &mut Vec<Vec<u8>>,
    ) -> io::Result<bool> {
        let table = lock(&self.table);
        match table.get(key) {
            Some(record) => copy_fields(key, record, field, out).map(|()| true),
            None => {
                out.clear();
                Ok(false)
            }
        }
    }

    fn update(&mut self, key: &str, fields: &[(usize, Vec<u8>)]) -> io::Result<bool> {
        let mut table = lock(&self.table);
        let Some(record) = table.get_mut(key) else {
            return Ok(false);
        };
        // Check every index first so a bad one leaves the record untouched.
        if let Some((i, _)) = fields.iter().find(|(i, _)| *i >= record.len()) {
            return Err(no_field(key, *i, record.len()));
        }
        for (i, value) in fields {
            record[*i].clone_from(value);
        }
        Ok(true)
    }

    fn scan(
        &mut self,
        start: &str,
        count: usize,
        field: Option<usize>,
        out: &mut Vec<Vec<Vec<u8>>>,
    ) -> io::Result<usize> {
        out.clear();
        let table = lock(&self.table);
        for (key, record) in table
            .range::<str, _>((Bound::Included(start), Bound::Unbounded))
            .take(count)
        {
            let mut fields = Vec::new();
            copy_fields(key, record, field, &mut fields)?;
            out.push(fields);
        }
        Ok(out.len())
    }

    fn delete(&mut self, key: &str) -> io::Result<bool> {
        Ok(lock(&self.table).remove(key).is_some())
    }
}
