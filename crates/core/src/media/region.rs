//! Where a region's bytes live: a shared file mapping or ordinary memory.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// How durable the mapped bytes are, which `nvmfs info` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaMode {
    /// A file on tmpfs (/dev/shm): persistent memory emulated with DRAM; survives process
    /// crashes, not power loss.
    Shm,
    /// A file on a DAX file system mapped with MAP_SYNC: flushes reach the persistence domain.
    Dax,
    /// A file on an ordinary file system: durable after msync (sync_all, unmount).
    File,
    /// Anonymous memory (tests).
    Memory,
}

impl MediaMode {
    pub fn describe(self) -> &'static str {
        match self {
            MediaMode::Shm => "shm (persistent memory emulated with DRAM: survives process crash)",
            MediaMode::Dax => "dax (MAP_SYNC: cache-line flushes are durable)",
            MediaMode::File => "file (page cache: durable after msync on sync/unmount)",
            MediaMode::Memory => "memory (anonymous, not persistent)",
        }
    }
}

pub(super) enum Backing {
    Mapped { ptr: *mut u8, len: usize },
    Memory(Vec<u64>),
}

const TMPFS_MAGIC: i64 = 0x0102_1994;

impl Backing {
    pub(super) fn memory(len: u64) -> Backing {
        Backing::Memory(vec![0u64; len.div_ceil(8) as usize])
    }

    pub(super) fn ptr(&self) -> *mut u8 {
        match self {
            Backing::Mapped { ptr, .. } => *ptr,
            Backing::Memory(v) => v.as_ptr() as *mut u8,
        }
    }

    pub(super) fn map(
        file: &std::fs::File,
        path: &Path,
        len: u64,
        writable: bool,
        populate_shm: bool,
    ) -> io::Result<(Backing, MediaMode)> {
        let len_usize =
            usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let fd = file.as_raw_fd();
        let on_tmpfs = fs_type(path)? == TMPFS_MAGIC;
        // MAP_SYNC is only accepted (with MAP_SHARED_VALIDATE) on DAX mappings; elsewhere the
        // kernel refuses it and we fall back to a plain shared mapping.
        if writable && !on_tmpfs {
            if let Some(ptr) = mmap(
                len_usize,
                prot,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                fd,
            ) {
                return Ok((
                    Backing::Mapped {
                        ptr,
                        len: len_usize,
                    },
                    MediaMode::Dax,
                ));
            }
        }
        // On tmpfs the pages already exist (mkfs preallocates them): mapping them all now keeps
        // page faults off the data path, as on a DAX device.
        let populate = if on_tmpfs && populate_shm {
            libc::MAP_POPULATE
        } else {
            0
        };
        let ptr = mmap(len_usize, prot, libc::MAP_SHARED | populate, fd)
            .ok_or_else(io::Error::last_os_error)?;
        let mode = if on_tmpfs {
            MediaMode::Shm
        } else {
            MediaMode::File
        };
        Ok((
            Backing::Mapped {
                ptr,
                len: len_usize,
            },
            mode,
        ))
    }

    /// A private copy-on-write mapping: writes stay in this process (fsck's scratch copy).
    pub(super) fn map_private(file: &std::fs::File, len: u64) -> io::Result<Backing> {
        let len_usize =
            usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        let ptr = mmap(
            len_usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
        )
        .ok_or_else(io::Error::last_os_error)?;
        Ok(Backing::Mapped {
            ptr,
            len: len_usize,
        })
    }

    pub(super) fn msync(&self, mode: MediaMode) -> io::Result<()> {
        if let (Backing::Mapped { ptr, len }, MediaMode::File) = (self, mode) {
            // SAFETY: ptr/len are exactly the mapping we created.
            if unsafe { libc::msync(*ptr as *mut libc::c_void, *len, libc::MS_SYNC) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

fn mmap(len: usize, prot: i32, flags: i32, fd: i32) -> Option<*mut u8> {
    // SAFETY: a fresh mapping of an open file descriptor; the result is checked.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
    (p != libc::MAP_FAILED).then_some(p as *mut u8)
}

fn fs_type(path: &Path) -> io::Result<i64> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: statfs fills the zeroed struct; c is a valid NUL-terminated path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_type as i64)
}

impl Drop for Backing {
    fn drop(&mut self) {
        if let Backing::Mapped { ptr, len } = *self {
            // SAFETY: unmapping the mapping we own, once.
            unsafe { libc::munmap(ptr as *mut libc::c_void, len) };
        }
    }
}
