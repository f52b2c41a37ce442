//! The capacity device of a tiered image: a block device or a file, read and written in whole
//! 4 KiB blocks with `O_DIRECT` (so the kernel's page cache does not hold a second copy of
//! cold data), or a buffer in memory for in-memory images. Every write is followed by
//! `fdatasync` before the PM table points at it (docs/TIER.md §5).

use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::layout::tier::{SsdHeader, EXTENT_BYTES};
use crate::layout::BLOCK_SIZE;

/// A heap buffer aligned to 4 KiB, as `O_DIRECT` needs.
pub struct Aligned {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: an owned allocation with no interior sharing.
unsafe impl Send for Aligned {}

impl Aligned {
    /// A zeroed buffer of `len` bytes (a multiple of 4 KiB, not 0).
    pub fn zeroed(len: usize) -> Aligned {
        assert!(len > 0 && len.is_multiple_of(BLOCK_SIZE as usize));
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Aligned { ptr, len }
    }

    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len, BLOCK_SIZE as usize).expect("aligned layout")
    }
}

impl std::ops::Deref for Aligned {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes owned by this buffer.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Aligned {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) };
    }
}

enum Backend {
    File { file: std::fs::File, direct: bool },
    Memory(Mutex<Vec<u8>>),
}

/// Sees every write an in-memory SSD takes, in order with the PM events of the same run (the
/// crash checker: a crash image is a PM image plus the SSD as written up to that point).
pub trait SsdTrace: Send + Sync {
    /// `data` was written at `off` and is durable.
    fn ssd_write(&self, off: u64, data: &[u8]);
}

/// The SSD of a tiered image.
pub struct Ssd {
    backend: Backend,
    trace: Option<std::sync::Arc<dyn SsdTrace>>,
    /// The path it was opened at (None in memory).
    pub path: Option<PathBuf>,
    /// Bytes of the device or file.
    pub len: u64,
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("SSD {}: {e}", path.display()))
}

impl Ssd {
    /// Opens `path` for the tier. `O_DIRECT` when the file system allows it; a file system
    /// that refuses it (EINVAL) gets buffered I/O, which `fdatasync` still makes durable.
    pub fn open(path: &Path, create_len: Option<u64>) -> io::Result<Ssd> {
        let open = |direct: bool| {
            let mut o = std::fs::OpenOptions::new();
            o.read(true).write(true);
            if create_len.is_some() {
                o.create(true);
            }
            let flags = libc::O_CLOEXEC | if direct { libc::O_DIRECT } else { 0 };
            o.custom_flags(flags).open(path)
        };
        let (file, direct) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                (open(false).map_err(|e| with_path(e, path))?, false)
            }
            Err(e) => return Err(with_path(e, path)),
        };
        let meta = file.metadata().map_err(|e| with_path(e, path))?;
        let len = if meta.file_type().is_file() {
            if let Some(want) = create_len {
                if meta.len() < want {
                    file.set_len(want).map_err(|e| with_path(e, path))?;
                }
            }
            file.metadata()?.len()
        } else {
            device_len(&file).map_err(|e| with_path(e, path))?
        };
        Ok(Ssd {
            backend: Backend::File { file, direct },
            trace: None,
            path: Some(path.to_path_buf()),
            len,
        })
    }

    /// An SSD in memory of `len` bytes (in-memory images).
    pub fn memory(len: u64) -> Ssd {
        Self::memory_from(vec![0; len as usize])
    }

    /// An SSD in memory holding `bytes` (crash images).
    pub fn memory_from(bytes: Vec<u8>) -> Ssd {
        Ssd {
            len: bytes.len() as u64,
            backend: Backend::Memory(Mutex::new(bytes)),
            trace: None,
            path: None,
        }
    }

    /// Reports every later write to `trace` (in-memory SSDs; the crash checker).
    pub fn set_trace(&mut self, trace: Option<std::sync::Arc<dyn SsdTrace>>) {
        self.trace = trace;
    }

    /// A copy of an in-memory SSD's bytes (None for a device or file).
    pub fn snapshot(&self) -> Option<Vec<u8>> {
        match &self.backend {
            Backend::Memory(m) => Some(m.lock().clone()),
            Backend::File { .. } => None,
        }
    }

    /// Whether reads and writes bypass the page cache.
    pub fn direct(&self) -> bool {
        matches!(self.backend, Backend::File { direct: true, .. })
    }

    /// Reads `buf.len()` bytes at `off` (both 4 KiB aligned).
    pub fn read(&self, off: u64, buf: &mut Aligned) -> io::Result<()> {
        self.check(off, buf.len())?;
        match &self.backend {
            Backend::File { file, .. } => file.read_exact_at(buf, off),
            Backend::Memory(m) => {
                let n = buf.len();
                buf.copy_from_slice(&m.lock()[off as usize..off as usize + n]);
                Ok(())
            }
        }
    }

    /// Writes `len` bytes of `buf` at `off` (4 KiB aligned) and makes them durable.
    pub fn write_durable(&self, off: u64, buf: &Aligned, len: usize) -> io::Result<()> {
        self.check(off, len)?;
        match &self.backend {
            Backend::File { file, .. } => {
                file.write_all_at(&buf[..len], off)?;
                file.sync_data()
            }
            Backend::Memory(m) => {
                m.lock()[off as usize..off as usize + len].copy_from_slice(&buf[..len]);
                if let Some(t) = &self.trace {
                    t.ssd_write(off, &buf[..len]);
                }
                Ok(())
            }
        }
    }

    fn check(&self, off: u64, len: usize) -> io::Result<()> {
        let end = off.checked_add(len as u64);
        if !off.is_multiple_of(BLOCK_SIZE) || end.is_none_or(|e| e > self.len) {
            return Err(io::Error::other(format!(
                "SSD access [{off}, +{len}) outside the device or unaligned"
            )));
        }
        Ok(())
    }

    /// Data extents the device holds after its header extent.
    pub fn extents(&self) -> u64 {
        (self.len / EXTENT_BYTES).saturating_sub(1)
    }

    pub fn write_header(&self, h: &SsdHeader) -> io::Result<()> {
        let mut b = Aligned::zeroed(BLOCK_SIZE as usize);
        b.copy_from_slice(&h.encode());
        self.write_durable(0, &b, BLOCK_SIZE as usize)
    }

    pub fn read_header(&self) -> io::Result<SsdHeader> {
        let mut b = Aligned::zeroed(BLOCK_SIZE as usize);
        self.read(0, &mut b)?;
        SsdHeader::decode(&b).map_err(|e| {
            let what = self
                .path
                .as_ref()
                .map_or("memory".to_string(), |p| p.display().to_string());
            io::Error::new(io::ErrorKind::InvalidData, format!("SSD {what}: {e}"))
        })
    }
}

/// The size of a block device (BLKGETSIZE64).
fn device_len(f: &std::fs::File) -> io::Result<u64> {
    use std::os::unix::io::AsRawFd;
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut n: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer we pass.
    if unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64 as _, &mut n) } != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "not a regular file or block device ({})",
                io::Error::last_os_error()
            ),
        ));
    }
    Ok(n)
}
