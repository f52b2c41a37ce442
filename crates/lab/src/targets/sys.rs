//! Kernel targets (`tmpfs`, `dir:PATH`): plain std / `FileExt` system calls.
//!
//! No fsync anywhere: the benchmark compares nvmfs against the plain syscall
//! path (see the notes attached to the records).

use crate::targets::api::{MicroFile, MicroFs, MicroMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A directory on a kernel file system, accessed through system calls.
pub struct SysFs {
    root: PathBuf,
}

impl SysFs {
    pub fn new(root: &Path) -> Self {
        SysFs {
            root: root.to_path_buf(),
        }
    }
}

impl MicroFs for SysFs {
    type Name = PathBuf;
    type File = File;
    type Map = SysMap;

    fn name(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    fn mkdir(&self, name: &PathBuf) -> io::Result<()> {
        fs::create_dir(name)
    }

    fn rmdir(&self, name: &PathBuf) -> io::Result<()> {
        fs::remove_dir(name)
    }

    fn create(&self, name: &PathBuf) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(name)
    }

    fn open_read(&self, name: &PathBuf) -> io::Result<File> {
        File::open(name)
    }

    fn open_rw(&self, name: &PathBuf) -> io::Result<File> {
        OpenOptions::new().read(true).write(true).open(name)
    }

    fn open_append(&self, name: &PathBuf) -> io::Result<File> {
        OpenOptions::new().append(true).create(true).open(name)
    }

    fn stat(&self, name: &PathBuf) -> io::Result<u64> {
        fs::metadata(name).map(|m| m.len())
    }

    fn unlink(&self, name: &PathBuf) -> io::Result<()> {
        fs::remove_file(name)
    }

    fn map(&self, file: &File) -> io::Result<SysMap> {
        SysMap::new(file)
    }

    fn open_sync(&self, name: &PathBuf, create: bool) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .custom_flags(libc::O_SYNC)
            .open(name)
    }
}

/// mmap(MAP_SHARED, PROT_READ | PROT_WRITE) of a whole file, as fio's mmap engine maps it
/// (no MAP_POPULATE: pages are faulted in by the first access, inside the timed ops).
pub struct SysMap {
    ptr: *mut u8,
    len: u64,
}

impl SysMap {
    fn new(file: &File) -> io::Result<SysMap> {
        let len = file.metadata()?.len();
        if len == 0 {
            // mmap refuses a zero length; an empty mapping needs no memory.
            return Ok(SysMap {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len,
            });
        }
        let size = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: a fresh shared mapping of an open file; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SysMap { ptr: p.cast(), len })
    }

    fn check(&self, offset: u64, len: usize) -> io::Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(io::Error::from_raw_os_error(libc::EFAULT)),
        }
    }
}

impl MicroMap for SysMap {
    fn len(&self) -> u64 {
        self.len
    }

    fn load(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check(offset, buf.len())?;
        // SAFETY: in range of the live mapping (checked); the benchmark is the only user of
        // its scratch file, and raw-pointer copies form no reference into shared memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.add(offset as usize),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }

    fn store(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.check(offset, buf.len())?;
        // SAFETY: as in `load`; the mapping is writable.
        unsafe {
            std::ptr::copy_nonoverlapping(buf.as_ptr(), self.ptr.add(offset as usize), buf.len())
        };
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: exactly the mapping made in `new`.
        if unsafe { libc::msync(self.ptr.cast(), self.len as usize, libc::MS_SYNC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for SysMap {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: exactly the mapping made in `new`, unmapped once.
            unsafe { libc::munmap(self.ptr.cast(), self.len as usize) };
        }
    }
}

impl MicroFile for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        FileExt::write_at(self, buf, offset)
    }

    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all(buf)
    }

    fn sync(&self) -> io::Result<()> {
        self.sync_all()
    }

    fn size(&self) -> io::Result<u64> {
        self.metadata().map(|m| m.len())
    }
}

/// A directory target the lab did not mount (tmpfs scratch directory,
/// `dir:PATH`): it cannot be remounted, so trials after the first run with
/// warm caches, which the report says.
pub struct DirTarget {
    fs: SysFs,
    _scratch: ScratchDir,
}

impl DirTarget {
    /// Works in `scratch`, which is removed with everything in it on drop.
    pub fn new(scratch: ScratchDir) -> Self {
        DirTarget {
            fs: SysFs::new(scratch.path()),
            _scratch: scratch,
        }
    }
}

impl DirTarget {
    /// The scratch directory the target works in.
    pub fn path(&self) -> &Path {
        self._scratch.path()
    }
}

impl crate::filebench::LabTarget for DirTarget {
    type Fs = SysFs;

    fn fs(&self) -> &SysFs {
        &self.fs
    }

    fn remount(&mut self) -> io::Result<bool> {
        Ok(false)
    }
}

/// A directory created fresh for one target and removed with everything in
/// it when dropped, so scratch data goes away on success, error and panic.
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Creates `path`; fails if it already exists, so a leftover of another
    /// run (or a directory that is not ours) is never reused or deleted.
    pub fn create(path: PathBuf) -> io::Result<Self> {
        fs::create_dir(&path).map_err(|e| annotate(e, "cannot create scratch directory", &path))?;
        Ok(ScratchDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        warn_unless_gone(fs::remove_dir_all(&self.path), &self.path);
    }
}

/// Drop can only warn: a failed removal (other than of something already
/// gone) is reported on stderr.
fn warn_unless_gone(r: io::Result<()>, path: &Path) {
    if let Err(e) = r {
        if e.kind() != io::ErrorKind::NotFound {
            eprintln!("warning: cannot remove {}: {e}", path.display());
        }
    }
}

/// A file path owned by the benchmark, removed when dropped.
pub struct ScratchFile {
    path: PathBuf,
}

impl ScratchFile {
    /// Claims `path` by creating it exclusively (never clobbers a foreign file).
    pub fn claim(path: PathBuf) -> io::Result<Self> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| annotate(e, "cannot create", &path))?;
        Ok(ScratchFile { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        warn_unless_gone(fs::remove_file(&self.path), &self.path);
    }
}

/// Adds the path to an error so the CLI's message says what failed.
pub fn annotate(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_dir_is_fresh_and_removed_recursively() {
        let parent = tempfile::tempdir().unwrap();
        let path = parent.path().join("s");
        {
            let dir = ScratchDir::create(path.clone()).unwrap();
            fs::create_dir(dir.path().join("sub")).unwrap();
            fs::write(dir.path().join("sub/f"), b"x").unwrap();
            // A second claim on the same path must fail, not share it.
            assert!(ScratchDir::create(path.clone()).is_err());
        }
        assert!(!path.exists());
    }

    #[test]
    fn scratch_file_never_clobbers() {
        let parent = tempfile::tempdir().unwrap();
        let path = parent.path().join("img");
        fs::write(&path, b"foreign").unwrap();
        assert!(ScratchFile::claim(path.clone()).is_err());
        assert_eq!(fs::read(&path).unwrap(), b"foreign");
        fs::remove_file(&path).unwrap();
        drop(ScratchFile::claim(path.clone()).unwrap());
        assert!(!path.exists());
    }

    #[test]
    fn open_sync_sets_o_sync_and_creates_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let fs = SysFs::new(dir.path());
        let name = fs.name("f");
        assert!(fs.open_sync(&name, false).is_err(), "no file to open yet");
        let f = fs.open_sync(&name, true).unwrap();
        // SAFETY: F_GETFL on a descriptor we own.
        let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_SYNC, libc::O_SYNC);
        assert_eq!(flags & libc::O_ACCMODE, libc::O_RDWR);
        MicroFile::write_at(&f, b"abc", 0).unwrap();
        drop(f);
        // Opening the existing file keeps its bytes (no truncation).
        let f = fs.open_sync(&name, false).unwrap();
        assert_eq!(MicroFile::size(&f).unwrap(), 3);
    }

    #[test]
    fn names_are_relative_to_root() {
        let fs = SysFs::new(Path::new("/r"));
        assert_eq!(fs.name("/a/b"), PathBuf::from("/r/a/b"));
        assert_eq!(fs.name("a/b"), PathBuf::from("/r/a/b"));
    }
}
