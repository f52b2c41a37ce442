//! YCSB's `usertable` on SQLite, laid out as YCSB's JDBC binding creates it:
//! `usertable(YCSB_KEY TEXT PRIMARY KEY, FIELD0 BLOB, ..., FIELD{n-1} BLOB)`.
//!
//! Each session is one connection in autocommit mode, so every YCSB operation is one
//! statement and one transaction (as the JDBC binding with autocommit), durable at return
//! when `synchronous` is FULL. Statements are prepared once per session and cached.

use std::io;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, ErrorCode, Row};

use super::{sql_err, SqliteSettings};
use crate::ycsb::db::{KvSession, KvStore};

/// SQLite allows 2000 columns per table; one is the key.
const MAX_FIELDS: usize = 1999;

/// A SQLite database holding `usertable` with `field_count` fields.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    path: PathBuf,
    settings: SqliteSettings,
    field_count: usize,
}

impl SqliteStore {
    /// Opens the database at `path` (through `settings.vfs`), creating `usertable` if it
    /// does not exist. An existing `usertable` must have `field_count` fields.
    pub fn open(path: &Path, settings: SqliteSettings, field_count: usize) -> io::Result<Self> {
        if field_count == 0 || field_count > MAX_FIELDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("field count {field_count} is not in 1..={MAX_FIELDS}"),
            ));
        }
        let conn = settings.open(path)?;
        conn.execute(&create_table_sql(field_count), [])
            .map_err(sql_err)?;
        let columns: i64 = conn
            .query_row(
                "SELECT count(*) FROM pragma_table_info('usertable')",
                [],
                |r| r.get(0),
            )
            .map_err(sql_err)?;
        let columns = columns as usize;
        if columns != field_count + 1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: usertable has {} fields, expected {field_count}",
                    path.display(),
                    columns.saturating_sub(1)
                ),
            ));
        }
        Ok(SqliteStore {
            path: path.to_path_buf(),
            settings,
            field_count,
        })
    }

    /// The settings every session opens with.
    pub fn settings(&self) -> &SqliteSettings {
        &self.settings
    }
}

impl KvStore for SqliteStore {
    type Session = SqliteSession;

    fn session(&self) -> io::Result<SqliteSession> {
        let conn = self.settings.open(&self.path)?;
        let sql = Sql::new(self.field_count);
        // Room for every statement a session can prepare with a single field, so the
        // cache never evicts in a run with YCSB's usual one-field reads and updates.
        conn.set_prepared_statement_cache_capacity(3 * self.field_count + 8);
        Ok(SqliteSession { conn, sql })
    }

    fn describe(&self) -> String {
        format!(
            "{} usertable with {} fields",
            self.settings.describe(),
            self.field_count
        )
    }
}

/// The SQL text of every statement a session runs, built once per session.
#[derive(Debug)]
struct Sql {
    field_count: usize,
    insert: String,
    read_all: String,
    read_one: Vec<String>,
    scan_all: String,
    scan_one: Vec<String>,
    update_one: Vec<String>,
    delete: String,
}

fn create_table_sql(field_count: usize) -> String {
    let fields: Vec<String> = (0..field_count).map(|i| format!("FIELD{i} BLOB")).collect();
    format!(
        "CREATE TABLE IF NOT EXISTS usertable (YCSB_KEY TEXT PRIMARY KEY, {})",
        fields.join(", ")
    )
}

impl Sql {
    fn new(field_count: usize) -> Self {
        let all: Vec<String> = (0..field_count).map(|i| format!("FIELD{i}")).collect();
        let all = all.join(", ");
        let marks: Vec<String> = (2..=field_count + 1).map(|i| format!("?{i}")).collect();
        let scan = |cols: &str| {
            format!("SELECT {cols} FROM usertable WHERE YCSB_KEY >= ?1 ORDER BY YCSB_KEY LIMIT ?2")
        };
        Sql {
            field_count,
            insert: format!(
                "INSERT INTO usertable (YCSB_KEY, {all}) VALUES (?1, {})",
                marks.join(", ")
            ),
            read_all: format!("SELECT {all} FROM usertable WHERE YCSB_KEY = ?1"),
            read_one: (0..field_count)
                .map(|i| format!("SELECT FIELD{i} FROM usertable WHERE YCSB_KEY = ?1"))
                .collect(),
            scan_all: scan(&all),
            scan_one: (0..field_count)
                .map(|i| scan(&format!("FIELD{i}")))
                .collect(),
            update_one: (0..field_count)
                .map(|i| format!("UPDATE usertable SET FIELD{i} = ?2 WHERE YCSB_KEY = ?1"))
                .collect(),
            delete: "DELETE FROM usertable WHERE YCSB_KEY = ?1".to_string(),
        }
    }

    /// The SELECT for `field` (None: all fields), checking the field number.
    fn read(&self, field: Option<usize>) -> io::Result<&str> {
        match field {
            None => Ok(&self.read_all),
            Some(i) => Ok(&self.read_one[self.check_field(i)?]),
        }
    }

    fn scan(&self, field: Option<usize>) -> io::Result<&str> {
        match field {
            None => Ok(&self.scan_all),
            Some(i) => Ok(&self.scan_one[self.check_field(i)?]),
        }
    }

    /// An UPDATE of several fields: `SET FIELDa = ?2, FIELDb = ?3 ...`. Built on demand
    /// (the prepared-statement cache keeps it by text).
    fn update_many(&self, fields: &[(usize, Vec<u8>)]) -> io::Result<String> {
        let mut sets = Vec::with_capacity(fields.len());
        for (n, (i, _)) in fields.iter().enumerate() {
            sets.push(format!("FIELD{} = ?{}", self.check_field(*i)?, n + 2));
        }
        Ok(format!(
            "UPDATE usertable SET {} WHERE YCSB_KEY = ?1",
            sets.join(", ")
        ))
    }

    fn check_field(&self, i: usize) -> io::Result<usize> {
        if i < self.field_count {
            Ok(i)
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "field {i} out of range: usertable has {} fields",
                    self.field_count
                ),
            ))
        }
    }
}

/// One client's connection to a [`SqliteStore`].
#[derive(Debug)]
pub struct SqliteSession {
    conn: Connection,
    sql: Sql,
}

impl SqliteSession {
    /// The session's connection (for checks such as `integrity_check`).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// The values of every column of `row`, in column order; NULL reads as empty.
fn row_values(row: &Row<'_>, columns: usize, out: &mut Vec<Vec<u8>>) -> rusqlite::Result<()> {
    for i in 0..columns {
        let value = row.get_ref(i)?.as_blob_or_null()?;
        out.push(value.map(<[u8]>::to_vec).unwrap_or_default());
    }
    Ok(())
}

impl KvSession for SqliteSession {
    fn insert(&mut self, key: &str, fields: &[Vec<u8>]) -> io::Result<()> {
        if fields.len() != self.sql.field_count {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "insert of {} fields into a {}-field usertable",
                    fields.len(),
                    self.sql.field_count
                ),
            ));
        }
        let mut stmt = self
            .conn
            .prepare_cached(&self.sql.insert)
            .map_err(sql_err)?;
        stmt.raw_bind_parameter(1, key).map_err(sql_err)?;
        for (i, value) in fields.iter().enumerate() {
            stmt.raw_bind_parameter(i + 2, value.as_slice())
                .map_err(sql_err)?;
        }
        match stmt.raw_execute() {
            Ok(_) => Ok(()),
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
                Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("key {key:?} exists: {e}"),
                ))
            }
            Err(e) => Err(sql_err(e)),
        }
    }

    fn read(
        &mut self,
        key: &str,
        field: Option<usize>,
        out: &mut Vec<Vec<u8>>,
    ) -> io::Result<bool> {
        out.clear();
        let mut stmt = self
            .conn
            .prepare_cached(self.sql.read(field)?)
            .map_err(sql_err)?;
        let columns = stmt.column_count();
        let mut rows = stmt.query([key]).map_err(sql_err)?;
        match rows.next().map_err(sql_err)? {
            Some(row) => {
                row_values(row, columns, out).map_err(sql_err)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn update(&mut self, key: &str, fields: &[(usize, Vec<u8>)]) -> io::Result<bool> {
        let changed = match fields {
            [] => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "update of no fields",
                ))
            }
            [(i, value)] => {
                let sql = &self.sql.update_one[self.sql.check_field(*i)?];
                let mut stmt = self.conn.prepare_cached(sql).map_err(sql_err)?;
                stmt.execute(params![key, value]).map_err(sql_err)?
            }
            _ => {
                let sql = self.sql.update_many(fields)?;
                let mut stmt = self.conn.prepare_cached(&sql).map_err(sql_err)?;
                stmt.raw_bind_parameter(1, key).map_err(sql_err)?;
                for (n, (_, value)) in fields.iter().enumerate() {
                    stmt.raw_bind_parameter(n + 2, value.as_slice())
                        .map_err(sql_err)?;
                }
                stmt.raw_execute().map_err(sql_err)?
            }
        };
        Ok(changed > 0)
    }

    fn scan(
        &mut self,
        start: &str,
        count: usize,
        field: Option<usize>,
        out: &mut Vec<Vec<Vec<u8>>>,
    ) -> io::Result<usize> {
        out.clear();
        let sql = self.sql.scan(field)?;
        if count == 0 {
            return Ok(0);
        }
        let mut stmt = self.conn.prepare_cached(sql).map_err(sql_err)?;
        let columns = stmt.column_count();
        let limit = i64::try_from(count).unwrap_or(i64::MAX);
        let mut rows = stmt.query(params![start, limit]).map_err(sql_err)?;
        while let Some(row) = rows.next().map_err(sql_err)? {
            let mut record = Vec::with_capacity(columns);
            row_values(row, columns, &mut record).map_err(sql_err)?;
            out.push(record);
        }
        Ok(out.len())
    }

    fn delete(&mut self, key: &str) -> io::Result<bool> {
        let mut stmt = self
            .conn
            .prepare_cached(&self.sql.delete)
            .map_err(sql_err)?;
        Ok(stmt.execute([key]).map_err(sql_err)? > 0)
    }
}
