//! The narrow file-system interface the workloads are written against.
//!
//! Workloads are generic over [`MicroFs`] (monomorphised, no `dyn`), so each
//! target pays exactly its own call cost on the data path and nothing else.

use std::io;

/// An open file of a benchmark target.
pub trait MicroFile {
    /// One positional read (`pread` on kernel targets).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// One positional write (`pwrite` on kernel targets).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at the end of a file opened with [`MicroFs::open_append`].
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// fsync: on kernel targets the data and metadata reach the device; nvmfs
    /// operations are already durable on return, so it only checks the handle.
    fn sync(&self) -> io::Result<()>;
    /// The file's current length (`fstat`).
    fn size(&self) -> io::Result<u64>;

    /// Fills `buf` from `offset`; short reads are retried (normally there is one call).
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    /// Writes all of `buf` at `offset`; short writes are retried (normally there is one call).
    fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, offset)? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }
}

/// A shared mapping of a whole file, as fio's mmap engine uses it: `load` is a memcpy out of
/// the mapping, `store` a memcpy into it, `sync` is msync(MS_SYNC) of the whole mapping.
pub trait MicroMap {
    /// Length of the mapping (the file's size when it was mapped).
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `buf.len()` bytes at `offset` out of the mapping.
    fn load(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Copies `buf` into the mapping at `offset` (not durable until `sync`).
    fn store(&mut self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes every store so far durable (msync(MS_SYNC)).
    fn sync(&mut self) -> io::Result<()>;
}

/// A benchmark target: a directory tree the workloads may do anything in.
pub trait MicroFs {
    /// A path resolved ahead of time, so that building path strings (joining,
    /// formatting numbers) is done during setup and not inside timed ops.
    type Name;
    type File: MicroFile;
    type Map: MicroMap;

    /// Resolves `rel` (relative to the target's root, `/`-separated).
    fn name(&self, rel: &str) -> Self::Name;
    /// Creates a directory; an existing one is an error.
    fn mkdir(&self, name: &Self::Name) -> io::Result<()>;
    /// Removes an empty directory.
    fn rmdir(&self, name: &Self::Name) -> io::Result<()>;
    /// Creates (or truncates) a file for reading and writing.
    fn create(&self, name: &Self::Name) -> io::Result<Self::File>;
    /// Opens an existing file read-only.
    fn open_read(&self, name: &Self::Name) -> io::Result<Self::File>;
    /// Opens an existing file for reading and writing.
    fn open_rw(&self, name: &Self::Name) -> io::Result<Self::File>;
    /// Opens a file in append mode, creating it if needed.
    fn open_append(&self, name: &Self::Name) -> io::Result<Self::File>;
    /// Looks up a path and returns the file's length.
    fn stat(&self, name: &Self::Name) -> io::Result<u64>;
    /// Removes a file.
    fn unlink(&self, name: &Self::Name) -> io::Result<()>;
    /// Maps all of `file` (opened with [`MicroFs::open_rw`]) shared, for reading and
    /// writing: mmap(MAP_SHARED) on kernel targets, `File::map_direct` on nvmfs.
    fn map(&self, file: &Self::File) -> io::Result<Self::Map>;
    /// Opens a file for reading and writing with O_SYNC, creating (or truncating) it when
    /// `create`: every write is durable when it returns, data and metadata, inside the write
    /// call itself (AIM7's sync subtests open their files so). nvmfs writes are durable on
    /// return anyway, so there it is an ordinary open.
    fn open_sync(&self, name: &Self::Name, create: bool) -> io::Result<Self::File>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A file whose read_at/write_at move at most 3 bytes per call.
    struct Trickle(RefCell<Vec<u8>>);

    impl MicroFile for Trickle {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            let data = self.0.borrow();
            let start = (offset as usize).min(data.len());
            let n = buf.len().min(3).min(data.len() - start);
            buf[..n].copy_from_slice(&data[start..start + n]);
            Ok(n)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
            let mut data = self.0.borrow_mut();
            let n = buf.len().min(3);
            let end = offset as usize + n;
            if data.len() < end {
                data.resize(end, 0);
            }
            data[offset as usize..end].copy_from_slice(&buf[..n]);
            Ok(n)
        }
        fn append(&mut self, buf: &[u8]) -> io::Result<()> {
            self.0.get_mut().extend_from_slice(buf);
            Ok(())
        }
        fn sync(&self) -> io::Result<()> {
            Ok(())
        }
        fn size(&self) -> io::Result<u64> {
            Ok(self.0.borrow().len() as u64)
        }
    }

    #[test]
    fn exact_helpers_retry_short_transfers() {
        let f = Trickle(RefCell::new(Vec::new()));
        f.write_all_at(b"hello world", 2).unwrap();
        let mut buf = [0u8; 11];
        f.read_exact_at(&mut buf, 2).unwrap();
        assert_eq!(&buf, b"hello world");
    }

    #[test]
    fn read_exact_reports_eof() {
        let f = Trickle(RefCell::new(b"abc".to_vec()));
        let mut buf = [0u8; 8];
        let err = f.read_exact_at(&mut buf, 0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }
}
