//! Postmark's two I/O paths over a [`MicroFile`]: unbuffered (`open`/`read`/
//! `write`, one call per block) and buffered (`fopen`/`fread`/`fwrite`), where
//! a user-space buffer emulates glibc's `FILE`.
//!
//! The emulation follows glibc's algorithms (`_IO_new_file_xsputn`,
//! `_IO_file_xsgetn`), so the target sees the same calls as under the real
//! program:
//! - the buffer is [`STDIO_BUFFER`] bytes: glibc sizes it by the file's
//!   `st_blksize` (capped at `BUFSIZ`, 8192), which is 4096 on ext4, XFS, btrfs
//!   and tmpfs; it is set up at a stream's first transfer, with an `fstat`
//!   (here [`MicroFile::size`]);
//! - `fwrite` fills the buffer; when data is left over it flushes the buffer,
//!   writes the largest whole number of buffers of the rest straight from the
//!   caller, and buffers the remainder; `fclose` flushes;
//! - `fread` serves from the buffer; when it is empty it refills it with one
//!   buffer-sized read if less than a buffer is wanted, else reads the largest
//!   whole number of buffers straight into the caller's memory.
//!
//! Not emulated: `fopen(.., "a")`'s `lseek` to the end (a [`MicroFile`] has no
//! file position to move; appends go through [`MicroFile::append`]), and the
//! zero-length `read`/`write` calls the unbuffered path makes when a size is a
//! multiple of the block (they move no data).

use crate::targets::api::MicroFile;
use std::io;

/// Bytes in a stdio buffer (glibc on a file system with 4 KiB `st_blksize`).
pub const STDIO_BUFFER: usize = 4096;

/// Where written bytes go: the system call behind `write`.
pub trait Sink {
    /// One `write` of all of `data`.
    fn write(&mut self, data: &[u8]) -> io::Result<()>;
    /// The `fstat` glibc makes when it sets up a stream's buffer.
    fn fstat(&self) -> io::Result<()>;
}

/// A new file written from its start (`open(O_CREAT)` or `fopen(.., "w")`).
pub struct FromStart<'a, T: MicroFile> {
    pub file: &'a T,
    pub pos: u64,
}

impl<T: MicroFile> Sink for FromStart<'_, T> {
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, self.pos)?;
        self.pos += data.len() as u64;
        Ok(())
    }

    fn fstat(&self) -> io::Result<()> {
        self.file.size().map(drop)
    }
}

/// A file opened for appending (`O_APPEND` or `fopen(.., "a")`).
pub struct AtEnd<'a, T: MicroFile> {
    pub file: &'a mut T,
}

impl<T: MicroFile> Sink for AtEnd<'_, T> {
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.append(data)
    }

    fn fstat(&self) -> io::Result<()> {
        self.file.size().map(drop)
    }
}

/// A stream's data path: each `put` is one `write` or one `fwrite` call.
pub trait Output {
    /// One `write` or `fwrite` of all of `data`.
    fn put(&mut self, data: &[u8]) -> io::Result<()>;
    /// `close` or `fclose` (which flushes).
    fn close(self) -> io::Result<()>;
}

/// Unbuffered: every call is a system call.
pub struct Raw<S: Sink>(pub S);

impl<S: Sink> Output for Raw<S> {
    fn put(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.0.write(data)
    }

    fn close(self) -> io::Result<()> {
        Ok(())
    }
}

/// A write stream with glibc's buffering. `buf` is scratch memory reused
/// across streams (glibc mallocs it per stream; reuse only saves the malloc).
pub struct Buffered<'b, S: Sink> {
    sink: S,
    buf: &'b mut Vec<u8>,
    allocated: bool,
}

impl<'b, S: Sink> Buffered<'b, S> {
    pub fn new(sink: S, buf: &'b mut Vec<u8>) -> Self {
        buf.clear();
        Buffered {
            sink,
            buf,
            allocated: false,
        }
    }

    /// `_IO_OVERFLOW(f, EOF)`: sets the buffer up on first use, else writes it out.
    fn overflow(&mut self) -> io::Result<()> {
        if !self.allocated {
            self.sink.fstat()?;
            self.allocated = true;
        }
        if !self.buf.is_empty() {
            self.sink.write(self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

impl<S: Sink> Output for Buffered<'_, S> {
    /// `fwrite(data, len, 1, fp)`.
    fn put(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        // A stream without a buffer yet has no space: its first write overflows.
        let space = if self.allocated {
            STDIO_BUFFER - self.buf.len()
        } else {
            0
        };
        let (now, rest) = data.split_at(space.min(data.len()));
        self.buf.extend_from_slice(now);
        if rest.is_empty() {
            return Ok(());
        }
        self.overflow()?;
        let direct = rest.len() - rest.len() % STDIO_BUFFER;
        if direct > 0 {
            self.sink.write(&rest[..direct])?;
        }
        self.buf.extend_from_slice(&rest[direct..]);
        Ok(())
    }

    fn close(mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.sink.write(self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// A stream's read path: each `get` is one `read` or one `fread` call and
/// returns the bytes it delivered.
pub trait Input {
    /// One `read` or `fread` of up to `dst.len()` bytes.
    fn get(&mut self, dst: &mut [u8]) -> io::Result<usize>;
}

/// Unbuffered sequential reads from the start of a file.
pub struct RawReader<'a, T: MicroFile> {
    pub file: &'a T,
    pub pos: u64,
}

impl<T: MicroFile> Input for RawReader<'_, T> {
    fn get(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        if dst.is_empty() {
            return Ok(0);
        }
        let n = self.file.read_at(dst, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// A read stream with glibc's buffering; `buf` is reused scratch memory of
/// at least [`STDIO_BUFFER`] bytes.
pub struct BufferedReader<'a, 'b, T: MicroFile> {
    file: &'a T,
    pos: u64,
    buf: &'b mut [u8],
    /// The unread part of `buf` is `start..end`.
    start: usize,
    end: usize,
    allocated: bool,
}

impl<'a, 'b, T: MicroFile> BufferedReader<'a, 'b, T> {
    pub fn new(file: &'a T, buf: &'b mut [u8]) -> Self {
        debug_assert!(buf.len() >= STDIO_BUFFER);
        BufferedReader {
            file,
            pos: 0,
            buf,
            start: 0,
            end: 0,
            allocated: false,
        }
    }

    /// `__underflow`: one buffer-sized read; false at end of file.
    fn refill(&mut self) -> io::Result<bool> {
        let n = self.file.read_at(&mut self.buf[..STDIO_BUFFER], self.pos)?;
        self.pos += n as u64;
        (self.start, self.end) = (0, n);
        Ok(n > 0)
    }
}

impl<T: MicroFile> Input for BufferedReader<'_, '_, T> {
    /// `fread(dst, len, 1, fp)`.
    fn get(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        if dst.is_empty() {
            return Ok(0);
        }
        if !self.allocated {
            self.file.size()?;
            self.allocated = true;
        }
        let mut got = 0;
        while got < dst.len() {
            let want = dst.len() - got;
            let have = self.end - self.start;
            let n = have.min(want);
            dst[got..got + n].copy_from_slice(&self.buf[self.start..self.start + n]);
            (self.start, got) = (self.start + n, got + n);
            let want = want - n;
            if want == 0 {
                break;
            }
            if want < STDIO_BUFFER {
                if !self.refill()? {
                    break;
                }
                continue;
            }
            let count = want - want % STDIO_BUFFER;
            let n = self.file.read_at(&mut dst[got..got + count], self.pos)?;
            if n == 0 {
                break;
            }
            self.pos += n as u64;
            got += n;
        }
        Ok(got)
    }
}
