//! The database thread: it opens the database, then serves requests one at a time until
//! told to close. rusty-leveldb's `DB` holds `Rc`s throughout (options, environment, table
//! cache), so it must stay on the thread that made it, and so must its environment.

use std::io;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use nvmfs_leveldb::NvmfsEnv;
use rusty_leveldb::compressor::{NoneCompressor, SnappyCompressor};
use rusty_leveldb::{CompressorId, LdbIterator, Options, Status, StatusCode, WriteBatch, DB};

use super::record;
use super::LevelDbSettings;

/// Where the database lives.
pub enum Target {
    /// A directory of the kernel's file systems, through rusty-leveldb's disk environment.
    Dir(PathBuf),
    /// A directory inside a mounted nvmfs image, through [`NvmfsEnv`].
    Nvmfs(Arc<nvmfs::Fs>, PathBuf),
}

/// One operation of a session. Keys and values are bytes; the record codec runs in the
/// sessions' threads except where the database must see the fields (update).
pub enum Op {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Get {
        key: Vec<u8>,
    },
    Update {
        key: Vec<u8>,
        fields: Vec<(usize, Vec<u8>)>,
    },
    Scan {
        start: Vec<u8>,
        count: usize,
    },
    Delete {
        key: Vec<u8>,
    },
}

/// The result of an [`Op`], by kind.
pub enum Answer {
    Done,
    Found(bool),
    Value(Option<Vec<u8>>),
    Values(Vec<Vec<u8>>),
}

/// What sessions and the store send to the thread.
pub enum Message {
    Op(Op, Sender<io::Result<Answer>>),
    /// Close the database, answer with the outcome, and stop.
    Close(Sender<io::Result<()>>),
}

/// The thread's body: opens the database at `target`, reports the outcome on `opened`, then
/// serves `requests` until a `Close` (or until every sender is gone, closing then too).
pub fn run(
    target: Target,
    settings: LevelDbSettings,
    opened: Sender<io::Result<()>>,
    requests: Receiver<Message>,
) {
    let mut db = match open(target, &settings) {
        Ok(db) => db,
        Err(e) => {
            let _ = opened.send(Err(e));
            return;
        }
    };
    let _ = opened.send(Ok(()));
    for message in requests {
        match message {
            Message::Op(op, reply) => {
                let _ = reply.send(execute(&mut db, op, settings.sync_writes));
            }
            Message::Close(reply) => {
                let _ = reply.send(db.close().map_err(to_io));
                return;
            }
        }
    }
    let _ = db.close();
}

fn open(target: Target, settings: &LevelDbSettings) -> io::Result<DB> {
    match target {
        // The default options' environment is rusty-leveldb's disk environment.
        Target::Dir(dir) => DB::open(&dir, options(settings)).map_err(to_io),
        Target::Nvmfs(fs, dir) => NvmfsEnv::new(nvmfs::Fs::clone(&fs))
            .open_db(&dir, options(settings))
            .map_err(to_io),
    }
}

/// rusty-leveldb options from the settings, LevelDB's defaults otherwise.
fn options(settings: &LevelDbSettings) -> Options {
    Options {
        create_if_missing: true,
        write_buffer_size: settings.write_buffer_size,
        max_file_size: settings.max_file_size,
        block_cache_capacity_bytes: settings.block_cache_bytes,
        compressor: if settings.compression {
            SnappyCompressor::ID
        } else {
            NoneCompressor::ID
        },
        // rusty-leveldb reuses the last log at open by default, LevelDB does not. Reuse
        // appends behind a record a crash tore, and the log reader stops at that record on
        // the next open, losing what followed: a fresh log per open has no such hazard.
        reuse_logs: false,
        ..Options::default()
    }
}

fn execute(db: &mut DB, op: Op, sync: bool) -> io::Result<Answer> {
    match op {
        Op::Put { key, value } => {
            put(db, &key, &value, sync)?;
            Ok(Answer::Done)
        }
        Op::Get { key } => Ok(Answer::Value(lookup(db, &key)?)),
        Op::Update { key, fields } => update(db, &key, &fields, sync).map(Answer::Found),
        Op::Scan { start, count } => scan(db, &start, count).map(Answer::Values),
        Op::Delete { key } => delete(db, &key, sync).map(Answer::Found),
    }
}

fn put(db: &mut DB, key: &[u8], value: &[u8], sync: bool) -> io::Result<()> {
    let mut batch = WriteBatch::default();
    batch.put(key, value);
    db.write(batch, sync).map_err(to_io)
}

/// The value stored under `key`. rusty-leveldb 4.0.2's `DB::get` can answer "absent" for a
/// key that is there: when a table's lookup lands on the deletion marker of a *later* key,
/// it takes that marker as the answer and stops before the older table holding the key. It
/// never returns a wrong value, so only an absence needs checking, and an iterator (which
/// merges the levels correctly) does that. YCSB rarely reads absent keys, so the common path
/// costs one `get`.
fn lookup(db: &mut DB, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
    if let Some(v) = db.get(key) {
        return Ok(Some(v.to_vec()));
    }
    let mut it = db.new_iter().map_err(to_io)?;
    it.seek(key);
    Ok(match it.current() {
        Some((k, v)) if k.as_ref() == key => Some(v.to_vec()),
        _ => None,
    })
}

/// Read, merge the given fields, write back (as YCSB's LevelDB and RocksDB bindings do);
/// atomic here, since this thread runs one request at a time.
fn update(db: &mut DB, key: &[u8], fields: &[(usize, Vec<u8>)], sync: bool) -> io::Result<bool> {
    let Some(old) = lookup(db, key)? else {
        return Ok(false);
    };
    let mut record = record::decode(&old)?;
    // Checked before anything changes, so a bad field index leaves the record alone.
    if let Some((i, _)) = fields.iter().find(|(i, _)| *i >= record.len()) {
        return Err(record::no_such_field(*i, record.len()));
    }
    for (i, value) in fields {
        record[*i].clone_from(value);
    }
    put(db, key, &record::encode(&record), sync)?;
    Ok(true)
}

/// Up to `count` values in key order from `start`, from an iterator seeked to it.
fn scan(db: &mut DB, start: &[u8], count: usize) -> io::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    if count == 0 {
        return Ok(out);
    }
    let mut it = db.new_iter().map_err(to_io)?;
    it.seek(start);
    while let Some((_, v)) = it.current() {
        out.push(v.to_vec());
        if out.len() == count || !it.advance() {
            break;
        }
    }
    Ok(out)
}

fn delete(db: &mut DB, key: &[u8], sync: bool) -> io::Result<bool> {
    if lookup(db, key)?.is_none() {
        return Ok(false);
    }
    let mut batch = WriteBatch::default();
    batch.delete(key);
    db.write(batch, sync).map_err(to_io)?;
    Ok(true)
}

/// A LevelDB status as an I/O error of the closest kind, its message kept.
pub fn to_io(s: Status) -> io::Error {
    use io::ErrorKind as K;
    let kind = match s.code {
        StatusCode::NotFound => K::NotFound,
        StatusCode::AlreadyExists => K::AlreadyExists,
        StatusCode::Corruption | StatusCode::InvalidData | StatusCode::CompressionError => {
            K::InvalidData
        }
        StatusCode::InvalidArgument => K::InvalidInput,
        StatusCode::PermissionDenied => K::PermissionDenied,
        StatusCode::NotSupported => K::Unsupported,
        StatusCode::LockError => K::WouldBlock,
        _ => K::Other,
    };
    io::Error::new(kind, format!("leveldb: {}", s.err))
}
