//! The persistent-memory region: the only module that stores to, flushes or fences persistent
//! memory. Everything above works with byte offsets into the region.
//!
//! Persistence rules (x86): a store is durable once its cache line was written back
//! (`persist`) and a fence followed (`fence`); non-temporal copies (`write_nt`) are durable
//! after the next fence without a flush; aligned 8-byte stores are atomic.

mod flush;
pub mod mutation;
pub mod pages;
mod region;
pub mod trace;

pub use flush::{no_flush_requested, FlushKind, CACHE_LINE, NO_FLUSH_ENV};
pub use region::MediaMode;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use region::Backing;
use trace::PersistTrace;

/// A mapped persistent-memory region.
pub struct Pm {
    base: *mut u8,
    len: u64,
    flush: FlushKind,
    mode: MediaMode,
    trace: Option<Arc<dyn PersistTrace>>,
    _backing: Backing,
}

// SAFETY: the region is plain shared memory; the file system's locks and atomic 8-byte
// accesses decide who may write which bytes, exactly as for memory shared between threads.
unsafe impl Send for Pm {}
// SAFETY: see above.
unsafe impl Sync for Pm {}

impl Pm {
    /// Maps `len` bytes of the file at `path` (MAP_SHARED, MAP_SYNC on a DAX mount).
    pub fn map_file(file: &std::fs::File, path: &Path, len: u64, writable: bool) -> io::Result<Pm> {
        Self::map_file_with(file, path, len, writable, true)
    }

    /// As `map_file`; `populate_shm` = false leaves a tmpfs image's pages to be mapped on
    /// first touch (a short-lived process of a shared mount touches few of them).
    pub fn map_file_with(
        file: &std::fs::File,
        path: &Path,
        len: u64,
        writable: bool,
        populate_shm: bool,
    ) -> io::Result<Pm> {
        let (backing, mode) = Backing::map(file, path, len, writable, populate_shm)?;
        Ok(Self::from_backing(backing, mode, len))
    }

    /// A private copy-on-write view of an image file: reads see the file, writes stay in this
    /// process (fsck replays the journal on it without touching the image).
    pub fn map_private(file: &std::fs::File, len: u64) -> io::Result<Pm> {
        Ok(Self::from_backing(
            Backing::map_private(file, len)?,
            MediaMode::Memory,
            len,
        ))
    }

    /// A region holding a copy of `bytes` (crash images, tests).
    pub fn from_bytes(bytes: &[u8]) -> Pm {
        let pm = Self::in_memory(bytes.len() as u64);
        pm.write(0, bytes);
        pm
    }

    /// A region in ordinary memory, for tests and scratch images.
    pub fn in_memory(len: u64) -> Pm {
        Self::from_backing(Backing::memory(len), MediaMode::Memory, len)
    }

    fn from_backing(backing: Backing, mode: MediaMode, len: u64) -> Pm {
        Pm {
            base: backing.ptr(),
            len,
            flush: FlushKind::selected(),
            mode,
            trace: None,
            _backing: backing,
        }
    }

    /// Routes every store, flush and fence through `trace` as well (crash testing).
    pub fn set_trace(&mut self, trace: Option<Arc<dyn PersistTrace>>) {
        self.trace = trace;
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn flush_kind(&self) -> FlushKind {
        self.flush
    }

    /// Bytes of the mapping the kernel maps with 2 MiB pages (see [`pages`]); None for
    /// memory that is not a file mapping, or when /proc/self/smaps cannot tell.
    pub fn huge_mapped_bytes(&self) -> Option<u64> {
        match self._backing {
            Backing::Mapped { ptr, .. } => pages::pmd_mapped_bytes(ptr as usize),
            Backing::Memory(_) => None,
        }
    }

    pub fn mode(&self) -> MediaMode {
        self.mode
    }

    /// A copy of the whole region (crash tests, image snapshots).
    pub fn snapshot(&self) -> Vec<u8> {
        self.read_vec(0, self.len as usize)
    }

    #[inline]
    fn check(&self, off: u64, len: usize) {
        // Offsets come from validated metadata; a miss here is a programming error, and a panic
        // is better than touching memory outside the mapping.
        assert!(
            off.checked_add(len as u64)
                .is_some_and(|end| end <= self.len),
            "media access out of range: offset {off} len {len} region {}",
            self.len
        );
    }

    #[inline]
    fn ptr(&self, off: u64) -> *mut u8 {
        // SAFETY: callers checked `off` against the mapping length.
        unsafe { self.base.add(off as usize) }
    }

    /// The address of the `len` bytes at `off`, checked against the region, for readers that
    /// work through raw pointers without holding the file system's locks
    /// (`DirectMap::as_ptr`): no Rust reference to the bytes is formed.
    #[inline]
    pub(crate) fn addr(&self, off: u64, len: usize) -> *const u8 {
        self.check(off, len);
        self.ptr(off)
    }

    /// Copies bytes out of the region.
    ///
    /// The region is shared memory that other threads store into through `&self`, so it is
    /// never lent out as a `&[u8]` (a reference asserts that nothing writes the bytes while it
    /// lives, and creating one reads all of them): every read is a copy through a raw pointer.
    /// This one is a plain copy, as fast as `memcpy`, and is sound only while nothing writes
    /// these bytes: the caller holds the lock that keeps writers out (the stripe lock for an
    /// inode's record and data, the directory locks for entry names). Words that are stored
    /// without such a lock (hash-table slots, directory entry headers, the words `Inner::dir`
    /// checks) are read with `load_u64`, and written only with atomic stores (`store_u64`,
    /// `store_words`), never with `write`.
    #[inline]
    pub fn read(&self, off: u64, buf: &mut [u8]) {
        self.check(off, buf.len());
        // SAFETY: in range; `buf` is ours; no concurrent writer of these bytes (see above).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr(off), buf.as_mut_ptr(), buf.len()) };
    }

    /// `read` into a new vector.
    pub fn read_vec(&self, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(off, &mut v);
        v
    }

    /// `read` into an array (fixed-size records: an inode, the state block).
    #[inline]
    pub fn read_array<const N: usize>(&self, off: u64) -> [u8; N] {
        self.check(off, N);
        let mut a = std::mem::MaybeUninit::<[u8; N]>::uninit();
        // SAFETY: in range; every byte of `a` is written before `assume_init` (no zeroing
        // first: an inode is read on every operation); no concurrent writer (see `read`).
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr(off), a.as_mut_ptr() as *mut u8, N);
            a.assume_init()
        }
    }

    /// Whether the bytes at `off` equal `expected` (a directory entry's name during a
    /// lookup), compared in place. The same contract as `read`: nothing writes these bytes
    /// meanwhile; the borrow below covers only them and ends with the comparison.
    #[inline]
    pub fn bytes_eq(&self, off: u64, expected: &[u8]) -> bool {
        self.check(off, expected.len());
        // SAFETY: in range; not written concurrently (caller's lock); not kept.
        unsafe { std::slice::from_raw_parts(self.ptr(off), expected.len()) == expected }
    }

    #[inline]
    fn atomic(&self, off: u64) -> &AtomicU64 {
        self.check(off, 8);
        assert_eq!(off % 8, 0, "unaligned 8-byte access at {off}");
        // SAFETY: in range, 8-byte aligned (the mapping is page aligned), and only ever
        // accessed as a whole word by the 8-byte accessors.
        unsafe { &*(self.ptr(off) as *const AtomicU64) }
    }

    /// Loads an aligned little-endian u64 (one atomic load).
    #[inline]
    pub fn load_u64(&self, off: u64) -> u64 {
        u64::from_le(self.atomic(off).load(Ordering::Acquire))
    }

    /// Stores an aligned little-endian u64 with one atomic store (not yet durable).
    #[inline]
    pub fn store_u64(&self, off: u64, v: u64) {
        self.atomic(off).store(v.to_le(), Ordering::Release);
        if let Some(t) = &self.trace {
            t.store(off, &v.to_le_bytes());
        }
    }

    /// Compare-and-swap of an aligned u64; returns the value found.
    #[inline]
    pub fn cas_u64(&self, off: u64, old: u64, new: u64) -> Result<u64, u64> {
        let r = self
            .atomic(off)
            .compare_exchange(
                old.to_le(),
                new.to_le(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map(u64::from_le)
            .map_err(u64::from_le);
        if r.is_ok() {
            if let Some(t) = &self.trace {
                t.store(off, &new.to_le_bytes());
            }
        }
        r
    }

    /// Stores `data` (offset and length multiples of 8) as aligned 8-byte atomic stores, in
    /// order (not yet durable). For records that other threads read word by word without a
    /// lock (`load_u64`): an inode record, whose type, link count and generation `Inner::dir`
    /// and name lookups check unlocked, while a transaction rewrites it. A plain copy there
    /// would be a data race; on x86-64 each store is still one `mov`.
    #[inline]
    pub fn store_words(&self, off: u64, data: &[u8]) {
        self.check(off, data.len());
        assert!(
            off.is_multiple_of(8) && data.len().is_multiple_of(8),
            "store_words of {} bytes at {off}",
            data.len()
        );
        let words = self.ptr(off) as *const AtomicU64;
        for k in 0..data.len() / 8 {
            // SAFETY: `data` has 8 bytes at 8k (read unaligned, copied as they are); word k
            // of the range is in the mapping and 8-byte aligned (checked above; the mapping
            // is page aligned), and such words are accessed only whole or under the lock.
            unsafe {
                let v = std::ptr::read_unaligned(data.as_ptr().add(8 * k) as *const u64);
                (*words.add(k)).store(v, Ordering::Release);
            }
        }
        if let Some(t) = &self.trace {
            t.store(off, data);
        }
    }

    /// Cached store of `data` at `off` (not yet durable). A plain copy: the caller holds the
    /// lock that keeps other readers and writers of these bytes out (see `read`).
    #[inline]
    pub fn write(&self, off: u64, data: &[u8]) {
        self.check(off, data.len());
        // SAFETY: in range; the caller holds the lock for these bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr(off), data.len()) };
        if let Some(t) = &self.trace {
            t.store(off, data);
        }
    }

    /// Stores `data` at `off` so that it is durable after the next `fence` without a flush:
    /// non-temporal stores for the aligned middle, cached stores plus a flush at the edges.
    pub fn write_nt(&self, off: u64, data: &[u8]) {
        self.check(off, data.len());
        let (head, mid, tail) = nt_split(off, data.len());
        if head > 0 {
            self.write(off, &data[..head]);
            self.persist(off, head);
        }
        if mid > 0 {
            // SAFETY: in range, 16-byte aligned destination, length a multiple of 16.
            unsafe {
                flush::copy_nontemporal(self.ptr(off + head as u64), data[head..].as_ptr(), mid)
            };
            if let Some(t) = &self.trace {
                t.store_nt(off + head as u64, &data[head..head + mid]);
            }
        }
        if tail > 0 {
            let t_off = off + (head + mid) as u64;
            self.write(t_off, &data[head + mid..]);
            self.persist(t_off, tail);
        }
    }

    /// Zeroes `len` bytes at `off`, durable after the next `fence` (like `write_nt`).
    pub fn zero_nt(&self, off: u64, len: usize) {
        self.check(off, len);
        let (head, mid, tail) = nt_split(off, len);
        let zeros = [0u8; 16];
        if head > 0 {
            self.write(off, &zeros[..head]);
            self.persist(off, head);
        }
        if mid > 0 {
            // SAFETY: in range and aligned as required.
            unsafe { flush::zero_nontemporal(self.ptr(off + head as u64), mid) };
            if let Some(t) = &self.trace {
                t.store_nt(off + head as u64, &vec![0; mid]);
            }
        }
        if tail > 0 {
            let t_off = off + (head + mid) as u64;
            self.write(t_off, &zeros[..tail]);
            self.persist(t_off, tail);
        }
    }

    /// Writes back every cache line overlapping `[off, off+len)` (durable after `fence`).
    #[inline]
    #[track_caller]
    pub fn persist(&self, off: u64, len: usize) {
        if len == 0 || mutation::skipped("persist", std::panic::Location::caller()) {
            return;
        }
        self.check(off, len);
        let mut line = off & !(CACHE_LINE - 1);
        let end = off + len as u64;
        while line < end {
            // SAFETY: the line starts inside the mapping (checked above).
            unsafe { self.flush.flush_line(self.ptr(line)) };
            if let Some(t) = &self.trace {
                t.flush(line);
            }
            line += CACHE_LINE;
        }
    }

    /// Store fence: everything persisted or written non-temporally before it is durable.
    #[inline]
    #[track_caller]
    pub fn fence(&self) {
        if mutation::skipped("fence", std::panic::Location::caller()) {
            return;
        }
        flush::store_fence();
        if let Some(t) = &self.trace {
            t.fence();
        }
    }

    /// Marks the start of a file-system operation in the trace.
    #[inline]
    pub fn op_begin(&self, name: &'static str) {
        if let Some(t) = &self.trace {
            t.op_begin(name);
        }
    }

    /// Marks the end of a file-system operation in the trace.
    #[inline]
    pub fn op_end(&self) {
        if let Some(t) = &self.trace {
            t.op_end();
        }
    }

    /// Asks the OS to write the mapping back (only matters for a plain file that is not DAX).
    pub fn sync_backing(&self) -> io::Result<()> {
        self._backing.msync(self.mode)
    }

    /// Prefetches the cache line at `off` (a hint; out-of-range offsets are ignored).
    #[inline]
    pub fn prefetch(&self, off: u64) {
        if off < self.len {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: prefetch is a hint that never faults; the address is in the mapping.
            unsafe {
                std::arch::x86_64::_mm_prefetch(
                    self.ptr(off) as *const i8,
                    std::arch::x86_64::_MM_HINT_T0,
                )
            };
        }
    }
}

/// Splits `[off, off+len)` into an unaligned head, a 16-byte aligned middle and a tail.
fn nt_split(off: u64, len: usize) -> (usize, usize, usize) {
    let head = (((16 - (off % 16)) % 16) as usize).min(len);
    let mid = (len - head) & !15;
    (head, mid, len - head - mid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nt_split_covers_range() {
        for off in 0..40u64 {
            for len in 0..100usize {
                let (h, m, t) = nt_split(off, len);
                assert_eq!(h + m + t, len);
                assert_eq!(m % 16, 0);
                if m > 0 {
                    assert_eq!((off + h as u64) % 16, 0);
                }
                assert!(t < 16 || m == 0);
            }
        }
    }

    #[test]
    fn write_nt_and_read_back() {
        let pm = Pm::in_memory(8192);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        pm.write_nt(3, &data);
        pm.fence();
        assert_eq!(pm.read_vec(3, 1000), &data[..]);
        pm.zero_nt(5, 500);
        pm.fence();
        assert!(pm.read_vec(5, 500).iter().all(|&b| b == 0));
        assert_eq!(pm.read_vec(3, 2), &data[..2]);
        assert_eq!(pm.read_vec(505, 498), &data[502..]);
    }

    #[test]
    fn u64_roundtrip_and_cas() {
        let pm = Pm::in_memory(4096);
        pm.store_u64(64, 0xdead_beef);
        assert_eq!(pm.load_u64(64), 0xdead_beef);
        assert_eq!(pm.cas_u64(64, 1, 2), Err(0xdead_beef));
        assert_eq!(pm.cas_u64(64, 0xdead_beef, 2), Ok(0xdead_beef));
        assert_eq!(pm.read_array::<8>(64), 2u64.to_le_bytes());
        pm.persist(60, 10);
        pm.fence();
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn out_of_range_is_caught() {
        let pm = Pm::in_memory(4096);
        pm.write(4090, &[0; 10]);
    }
}
