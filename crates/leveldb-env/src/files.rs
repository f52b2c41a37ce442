//! The file handles LevelDB reads and writes through: nvmfs files behind rusty-leveldb's
//! `RandomAccess` and `std::io::Write`.
//!
//! Writes go straight through to nvmfs, with no buffer of our own: every write is durable
//! when it returns, and LevelDB already batches its two busy writers (the write-ahead log
//! and the table builder both sit behind a `BufWriter`), so a second buffer here would only
//! copy the data again. The one unbuffered writer, the MANIFEST's, writes a few records per
//! compaction. `flush` (LevelDB's sync point) asks nvmfs to sync, which costs nothing on
//! /dev/shm or DAX and writes the mapping back (msync) for an image on an ordinary file.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use rusty_leveldb::env::RandomAccess;
use rusty_leveldb::Result;

use crate::status::status;

/// An nvmfs file read at offsets (tables).
pub(crate) struct RandomAccessFile {
    file: nvmfs::File,
    path: PathBuf,
}

impl RandomAccessFile {
    pub(crate) fn new(file: nvmfs::File, path: &Path) -> Self {
        RandomAccessFile {
            file,
            path: path.to_path_buf(),
        }
    }
}

impl RandomAccess for RandomAccessFile {
    /// Fills `dst` from `off`, short only at the end of the file: the table reader treats a
    /// short block read as corruption, so it must not see a partial read mid-file.
    fn read_at(&self, off: usize, dst: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        while done < dst.len() {
            let n = self
                .file
                .read_at(&mut dst[done..], (off + done) as u64)
                .map_err(|e| status("read", &self.path, &e))?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }
}

/// An nvmfs file written sequentially from its start (writable) or its end (appendable).
pub(crate) struct WritableFile {
    file: nvmfs::File,
    path: PathBuf,
}

impl WritableFile {
    pub(crate) fn new(file: nvmfs::File, path: &Path) -> Self {
        WritableFile {
            file,
            path: path.to_path_buf(),
        }
    }

    /// The error with the file's name, which LevelDB's own conversion keeps in its message.
    fn named(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("{}: {e}", self.path.display()))
    }
}

impl Write for WritableFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf).map_err(|e| self.named(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.sync_data().map_err(|e| self.named(e))
    }
}
