//! YCSB's backend on LevelDB (rusty-leveldb, a Rust port of Google's LevelDB), on a kernel
//! file system through rusty-leveldb's disk environment or on nvmfs in-process through
//! [`nvmfs_leveldb::NvmfsEnv`].
//!
//! **One database thread.** rusty-leveldb's `DB` is built on `Rc` and must stay on one
//! thread, so a [`LevelDbStore`] owns a thread that opens the database and runs every
//! request; each [`LevelDbSession`] sends its requests over a channel and waits for the
//! reply. Client threads therefore never run LevelDB code in parallel: reads are serialised
//! too, and each operation pays a channel round trip (a few microseconds). Google's LevelDB
//! serialises writers behind one mutex (one writer forms the log batch for the queue) but
//! lets readers run concurrently against the memtable and tables, so for write-heavy
//! workloads (A, F, loads) the effect is similar, while for read-heavy ones (B, C, D, E)
//! this backend scales worse with threads than C++ LevelDB would. Comparisons between file
//! systems stay fair, since every target runs the same way; absolute numbers do not
//! compare with published LevelDB results.
//!
//! **Records.** key = the YCSB key; value = the fields in order, length-prefixed
//! (`leveldb/record.rs`). A read decodes in the client thread; an update reads, merges the given
//! fields and writes the record back, as YCSB's LevelDB and RocksDB bindings do (atomic
//! here, one request at a time); an insert writes the whole record (overwriting, as a
//! LevelDB put does); a scan reads from an iterator seeked to the start key.
//!
//! **Settings** ([`LevelDbSettings`]): seed 002 ran YCSB on LevelDB with a 128 MB maximum
//! file size and gives no other setting, so the rest are LevelDB's defaults (4 MiB write
//! buffer, 8 MiB block cache) except compression, which is **off** by default (LevelDB
//! defaults to Snappy): YCSB's values are random bytes that do not compress, so Snappy
//! would only spend CPU. Writes are not synced by default (LevelDB's and YCSB's binding
//! default); with `sync_writes` each write is one `WriteBatch` written with `sync = true`,
//! which flushes the log to the file system before the write returns.
//!
//! **rusty-leveldb 4.0.2 issues worked around.** Its `DB::get` may report a present key as
//! absent after deletions (see `worker::lookup`); absences are confirmed with an
//! iterator. It reuses the last log file at open by default, which loses writes after a
//! crash-torn log record; the store opens a new log each time, as LevelDB does.

mod record;
mod worker;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crate::ycsb::db::{KvSession, KvStore};
use worker::{Answer, Message, Op, Target};

const MIB: usize = 1 << 20;

/// The LevelDB options the store sets (everything else is rusty-leveldb's default).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LevelDbSettings {
    /// Target size of a table file (LevelDB `max_file_size`); 128 MiB as in seed 002.
    pub max_file_size: usize,
    /// Bytes of writes gathered in the memtable before it becomes a level-0 table; 4 MiB.
    pub write_buffer_size: usize,
    /// Bytes of uncompressed table blocks cached in DRAM; 8 MiB.
    pub block_cache_bytes: usize,
    /// Snappy-compress table blocks; off.
    pub compression: bool,
    /// Write each update with `sync = true`; off.
    pub sync_writes: bool,
}

impl Default for LevelDbSettings {
    fn default() -> Self {
        LevelDbSettings {
            max_file_size: 128 * MIB,
            write_buffer_size: 4 * MIB,
            block_cache_bytes: 8 * MIB,
            compression: false,
            sync_writes: false,
        }
    }
}

impl LevelDbSettings {
    /// Refuses settings LevelDB cannot work with.
    pub fn check(&self) -> io::Result<()> {
        let sizes = [
            ("max_file_size", self.max_file_size),
            ("write_buffer_size", self.write_buffer_size),
            ("block_cache_bytes", self.block_cache_bytes),
        ];
        match sizes.iter().find(|(_, v)| *v < 64 << 10) {
            Some((name, v)) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("leveldb {name} = {v}: must be at least 64 KiB"),
            )),
            None => Ok(()),
        }
    }
}

/// A LevelDB database serving YCSB sessions from its own thread.
pub struct LevelDbStore {
    requests: Sender<Message>,
    worker: Option<JoinHandle<()>>,
    description: String,
}

impl LevelDbStore {
    /// Opens (creating if needed) the database in `dir` on a kernel file system.
    pub fn on_dir(dir: &Path, settings: &LevelDbSettings) -> io::Result<Self> {
        let place = format!("dir {}", dir.display());
        Self::start(Target::Dir(dir.to_path_buf()), settings, place)
    }

    /// Opens (creating if needed) the database in directory `dir` of the mounted image
    /// `fs`: an absolute path inside the image (see [`nvmfs_leveldb::NvmfsEnv::open_db`]).
    /// The store holds a handle on the mount until it is closed.
    pub fn on_nvmfs(
        fs: Arc<nvmfs::Fs>,
        dir: &Path,
        settings: &LevelDbSettings,
    ) -> io::Result<Self> {
        let image = fs.image_path().map_or_else(
            || "in-memory image".to_string(),
            |p| p.display().to_string(),
        );
        let place = format!("nvmfs {image}:{}", dir.display());
        Self::start(Target::Nvmfs(fs, PathBuf::from(dir)), settings, place)
    }

    fn start(target: Target, settings: &LevelDbSettings, place: String) -> io::Result<Self> {
        settings.check()?;
        let (requests, inbox) = mpsc::channel();
        let (opened, open_result) = mpsc::channel();
        let s = settings.clone();
        let worker = thread::Builder::new()
            .name("leveldb".into())
            .spawn(move || worker::run(target, s, opened, inbox))?;
        let outcome = open_result.recv().unwrap_or_else(|_| Err(stopped()));
        if let Err(e) = outcome {
            let _ = worker.join();
            return Err(e);
        }
        Ok(LevelDbStore {
            requests,
            worker: Some(worker),
            description: describe(settings, &place),
        })
    }

    /// Closes the database (flushing its log) and stops its thread; sessions still open fail
    /// from then on. Dropping the store does the same, without the result.
    pub fn close(mut self) -> io::Result<()> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> io::Result<()> {
        let Some(worker) = self.worker.take() else {
            return Ok(());
        };
        let (reply, result) = mpsc::channel();
        let closed = match self.requests.send(Message::Close(reply)) {
            Ok(()) => result.recv().unwrap_or_else(|_| Err(stopped())),
            Err(_) => Err(stopped()),
        };
        worker.join().map_err(|_| stopped())?;
        closed
    }
}

impl Drop for LevelDbStore {
    fn drop(&mut self) {
        let _ = self.shut_down();
    }
}

fn describe(s: &LevelDbSettings, place: &str) -> String {
    format!(
        "LevelDB (rusty-leveldb 4.0.2) on {place}: max_file_size {}, write_buffer_size {}, \
         block cache {}, compression {}, sync writes {}, one database thread for all sessions",
        size(s.max_file_size),
        size(s.write_buffer_size),
        size(s.block_cache_bytes),
        if s.compression { "snappy" } else { "off" },
        if s.sync_writes { "on" } else { "off" },
    )
}

/// A byte count in MiB, or KiB when it is not a whole number of MiB.
fn size(n: usize) -> String {
    if n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else {
        format!("{} KiB", n >> 10)
    }
}

/// The error of a session or store whose database thread is gone.
fn stopped() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "leveldb: the database thread has stopped (store closed, or it panicked)",
    )
}

impl KvStore for LevelDbStore {
    type Session = LevelDbSession;

    fn session(&self) -> io::Result<LevelDbSession> {
        let (reply, replies) = mpsc::channel();
        Ok(LevelDbSession {
            requests: self.requests.clone(),
            reply,
            replies,
        })
    }

    fn describe(&self) -> String {
        self.description.clone()
    }
}

/// One client's connection: requests go to the database thread, replies come back on the
/// session's own channel.
pub struct LevelDbSession {
    requests: Sender<Message>,
    reply: Sender<io::Result<Answer>>,
    replies: Receiver<io::Result<Answer>>,
}

impl LevelDbSession {
    fn call(&mut self, op: Op) -> io::Result<Answer> {
        self.requests
            .send(Message::Op(op, self.reply.clone()))
            .map_err(|_| stopped())?;
        self.replies.recv().map_err(|_| stopped())?
    }
}

/// The error for an answer of the wrong kind: a bug of this module, reported, not panicked.
fn mismatch(op: &str) -> io::Error {
    io::Error::other(format!("leveldb: unexpected answer kind to {op}"))
}

impl KvSession for LevelDbSession {
    fn insert(&mut self, key: &str, fields: &[Vec<u8>]) -> io::Result<()> {
        let op = Op::Put {
            key: key.as_bytes().to_vec(),
            value: record::encode(fields),
        };
        match self.call(op)? {
            Answer::Done => Ok(()),
            _ => Err(mismatch("insert")),
        }
    }

    fn read(
        &mut self,
        key: &str,
        field: Option<usize>,
        out: &mut Vec<Vec<u8>>,
    ) -> io::Result<bool> {
        out.clear();
        let value = match self.call(Op::Get {
            key: key.as_bytes().to_vec(),
        })? {
            Answer::Value(Some(v)) => v,
            Answer::Value(None) => return Ok(false),
            _ => return Err(mismatch("read")),
        };
        select(&value, field, out)?;
        Ok(true)
    }

    fn update(&mut self, key: &str, fields: &[(usize, Vec<u8>)]) -> io::Result<bool> {
        let op = Op::Update {
            key: key.as_bytes().to_vec(),
            fields: fields.to_vec(),
        };
        match self.call(op)? {
            Answer::Found(found) => Ok(found),
            _ => Err(mismatch("update")),
        }
    }

    fn scan(
        &mut self,
        start: &str,
        count: usize,
        field: Option<usize>,
        out: &mut Vec<Vec<Vec<u8>>>,
    ) -> io::Result<usize> {
        out.clear();
        let op = Op::Scan {
            start: start.as_bytes().to_vec(),
            count,
        };
        let Answer::Values(values) = self.call(op)? else {
            return Err(mismatch("scan"));
        };
        for value in values {
            let mut fields = Vec::new();
            select(&value, field, &mut fields)?;
            out.push(fields);
        }
        Ok(out.len())
    }

    fn delete(&mut self, key: &str) -> io::Result<bool> {
        match self.call(Op::Delete {
            key: key.as_bytes().to_vec(),
        })? {
            Answer::Found(found) => Ok(found),
            _ => Err(mismatch("delete")),
        }
    }
}

/// Every field of a stored value, or field `i`, into `out`.
fn select(value: &[u8], field: Option<usize>, out: &mut Vec<Vec<u8>>) -> io::Result<()> {
    match field {
        None => *out = record::decode(value)?,
        Some(i) => out.push(record::field(value, i)?),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
