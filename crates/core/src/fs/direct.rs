//! Direct access to a file's data on the media, the user-space counterpart of `mmap` on a DAX
//! (XIP) file system: [`File::map_direct`](super::File::map_direct) resolves the file's block
//! pointers once, like page tables after every page was faulted in, and [`DirectMap::load`] /
//! [`DirectMap::store`] are then plain copies out of and into the media, with no hash-table
//! lookup, no journal and no fence. [`DirectMap::sync`] is `msync(MS_SYNC)`: it writes back the
//! cache lines stored since the last sync and fences.
//!
//! Safety rule. A map holds media offsets of the file's blocks, so those blocks must stay the
//! file's while the map lives. Blocks never move in nvmfs (HashFS slot = physical block), so the
//! only danger is freeing them:
//!
//! - unlink / rename over the last link: **deferred**, as for an open file. The map holds an
//!   open reference, so the inode and its blocks are freed when the map and every handle are
//!   gone (POSIX keeps a mapping of an unlinked file valid too).
//! - truncate below the mapped length, and punch hole starting below it: **refused** with
//!   `EBUSY` while a map exists. Deferring them would need the file to stay longer than its
//!   size says, or data to be freed behind a later operation's back; the kernel answers the same
//!   situation with SIGBUS on the next access, which a safe Rust API cannot do.
//! - the map takes the same stripe lock as `read_at` (load) and `write_at` (store), so map
//!   accesses and the file's ordinary reads and writes in this process never race.
//!
//! Holes in `[0, size)` are allocated (zeroed, one journal transaction per 200 holes, as
//! `fallocate(KEEP_SIZE)`) when a writable map is created, like `MAP_POPULATE` on a writable
//! mapping; a read-only map of a file with holes is refused (`EINVAL`), because a later write
//! that fills a hole would place data where the map does not look.
//!
//! Durability: a store is an ordinary cached store. It is visible at once to `read_at` and to
//! other maps, survives a process crash on `shm` and `dax` media, but survives power loss only
//! after `sync` (and on `file` media after `sync`, which also msyncs the image). Stores are not
//! atomic: after a crash each 8-byte word holds old or new data (docs/GUARANTEES.md §3a).

use std::io;

use super::data::pieces;
use super::{errno, now_ns, Fs};
use crate::layout::BLOCK_SIZE;

/// Lines of 64 bytes per 4 KiB block: exactly the bits of a `u64` dirty mask.
const LINE: u64 = 64;

/// A direct-access mapping of `[0, len)` of a regular file (see the module docs).
///
/// Dropping it forgets the mapping and releases its open reference (an unlinked file is freed
/// then, if no handle remains). Unsynced stores stay in the media (they are not undone); they
/// are just not guaranteed to survive power loss.
pub struct DirectMap {
    fs: Fs,
    ino: u32,
    len: u64,
    writable: bool,
    /// Media byte offset of each 4 KiB block of `[0, len)`.
    blocks: Vec<u64>,
    /// Per block, one bit per 64-byte line stored since the last `sync`.
    dirty: Vec<u64>,
    /// Blocks whose dirty mask is non-zero, so `sync` does not scan every block.
    dirty_blocks: Vec<u32>,
}

impl std::fmt::Debug for DirectMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectMap")
            .field("ino", &self.ino)
            .field("len", &self.len)
            .field("writable", &self.writable)
            .field("dirty_blocks", &self.dirty_blocks.len())
            .finish()
    }
}

/// How many times map creation allocates holes again when another thread punched one in
/// between (it cannot hold the stripe lock across `fallocate`, which takes it).
const POPULATE_TRIES: usize = 8;

impl DirectMap {
    /// Maps `[0, size)` of `ino`, which the caller holds open; the map takes an open
    /// reference of its own. `writable`: stores allowed, holes allocated.
    pub(crate) fn new(fs: &Fs, ino: u32, writable: bool) -> io::Result<DirectMap> {
        let inner = &fs.inner;
        if inner.tier.is_some() {
            // A map holds PM block offsets; eviction would pull blocks from under it.
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "direct maps (mmap) of files on an image with an SSD tier are not supported",
            ));
        }
        let writable = writable && !inner.read_only;
        for _ in 0..POPULATE_TRIES {
            let hole_in = {
                let _g = inner.stripes.read(ino);
                let i = inner.inode(ino)?;
                super::data::check_regular(&i)?;
                let nblocks = i.size.div_ceil(BLOCK_SIZE);
                let mut blocks = Vec::with_capacity(nblocks as usize);
                for lblk in 0..nblocks {
                    match inner.map.lookup(&inner.pm, ino, lblk as u32) {
                        Some(p) => blocks.push(inner.geo.data_off(p)),
                        None => break,
                    }
                }
                if blocks.len() as u64 == nblocks {
                    // Registered under the stripe lock: a truncate or punch hole (which takes
                    // it for writing) sees the map from here on.
                    inner.open.acquire(ino);
                    inner.open.add_map(ino, i.size);
                    return Ok(DirectMap {
                        fs: fs.clone(),
                        ino,
                        len: i.size,
                        writable,
                        dirty: vec![0; blocks.len()],
                        blocks,
                        dirty_blocks: Vec::new(),
                    });
                }
                i.size
            };
            if !writable {
                return Err(errno(libc::EINVAL));
            }
            inner.fallocate(ino, libc::FALLOC_FL_KEEP_SIZE, 0, hole_in)?;
        }
        Err(errno(libc::EAGAIN))
    }

    /// The inode number of the mapped file.
    pub fn ino(&self) -> u64 {
        self.ino as u64
    }

    /// Length of the mapping: the file's size when it was mapped.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `store` is allowed (a writable handle on a read-write mount).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The media byte offset of each 4 KiB block of `[0, len)`: where a process maps the
    /// image to give a program the file's pages directly (`nvmfs run`'s mmap).
    pub fn block_offsets(&self) -> &[u64] {
        &self.blocks
    }

    /// The address of `[off, off + len)` of the file in this process's mapping of the media,
    /// if the range is inside `[0, len)` and its blocks are physically consecutive (a range
    /// inside one block always is): the pointer a DAX `mmap` would give, for callers that read
    /// the file's bytes in place (execute-in-place, the SQLite VFS's `xFetch`). `None`
    /// otherwise, and for an empty range.
    ///
    /// The address stays mapped while any handle on this mount lives. The blocks stay this
    /// file's while the map lives (the safety rule in the module docs); once it is dropped, a
    /// truncate may free them and the bytes there may then belong to another file. Reads
    /// through the pointer take no lock: the caller keeps writers of the range away (as a
    /// program does with a mapping) or tolerates seeing a write in progress.
    pub fn as_ptr(&self, off: u64, len: usize) -> Option<*const u8> {
        if len == 0 || self.check_range(off, len).is_err() {
            return None;
        }
        let start = self.blocks[(off / BLOCK_SIZE) as usize] + off % BLOCK_SIZE;
        let consecutive = pieces(off, len)
            .all(|p| self.blocks[p.lblk as usize] + p.in_blk as u64 == start + p.at as u64);
        consecutive.then(|| self.fs.inner.pm.addr(start, len))
    }

    /// `msync` of `[off, off + len)` for stores that did not go through `store` (a program's
    /// own stores into a mapping of `block_offsets`): writes back every line of the range,
    /// stamps mtime and ctime, and fences. `EFAULT` outside `[0, len)`.
    pub fn persist(&self, off: u64, len: u64) -> io::Result<()> {
        let len = len.min(self.len.saturating_sub(off));
        self.check_range(off, len as usize)?;
        let inner = &self.fs.inner;
        if len > 0 && self.writable {
            let _g = inner.stripes.write(self.ino);
            for p in pieces(off, len as usize) {
                inner
                    .pm
                    .persist(self.blocks[p.lblk as usize] + p.in_blk as u64, p.len);
            }
            inner.stamp_times(self.ino, now_ns());
            inner.pm.fence();
        }
        inner.pm.sync_backing()
    }

    /// Bytes stored since the last `sync`, rounded to whole 64-byte lines.
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_blocks
            .iter()
            .map(|&b| self.dirty[b as usize].count_ones() as u64 * LINE)
            .sum()
    }

    fn check_range(&self, off: u64, len: usize) -> io::Result<()> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(errno(libc::EFAULT)),
        }
    }

    /// Copies `buf.len()` bytes at `off` out of the media (a memcpy per block piece).
    /// `EFAULT` if the range leaves `[0, len)`.
    pub fn load(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check_range(off, buf.len())?;
        let inner = &self.fs.inner;
        let _g = inner.stripes.read(self.ino);
        // In-place overwrites do not take the stripe lock: the load is repeated if one ran
        // over its bytes, as a read is (`ranges.rs`).
        inner
            .stripes
            .read_bytes(self.ino, off, buf.len() as u64, || {
                for p in pieces(off, buf.len()) {
                    let media = self.blocks[p.lblk as usize] + p.in_blk as u64;
                    inner.pm.read(media, &mut buf[p.at..p.at + p.len]);
                }
            });
        Ok(())
    }

    /// Copies `data` into the media at `off` (cached stores, no journal, no fence). Visible
    /// to every reader at once; durable after [`sync`](Self::sync). `EBADF` on a read-only
    /// map, `EFAULT` if the range leaves `[0, len)`.
    pub fn store(&mut self, off: u64, data: &[u8]) -> io::Result<()> {
        if !self.writable {
            return Err(errno(libc::EBADF));
        }
        self.check_range(off, data.len())?;
        let inner = &self.fs.inner;
        // A store changes no size and no mapping (the blocks stay while the map lives), so,
        // like an in-place overwrite, it takes only the range words of its bytes: reads see
        // all of it or none, stores and overwrites of other ranges run alongside, and no
        // locked instruction follows the stores (`ranges.rs`).
        let _words = inner.stripes.lock_bytes(self.ino, off, data.len() as u64);
        for p in pieces(off, data.len()) {
            let b = p.lblk as usize;
            inner
                .pm
                .write(self.blocks[b] + p.in_blk as u64, &data[p.at..p.at + p.len]);
            if self.dirty[b] == 0 {
                self.dirty_blocks.push(b as u32);
            }
            self.dirty[b] |= line_mask(p.in_blk as u64, p.len as u64);
        }
        Ok(())
    }

    /// `msync(MS_SYNC)`: writes back every line stored since the last sync, stamps the file's
    /// mtime and ctime (POSIX marks them between a store and the next msync), and fences, so
    /// everything stored before the call is durable when it returns. On `file` media it also
    /// asks the OS to write the image back. Nothing stored: only the OS write-back.
    pub fn sync(&mut self) -> io::Result<()> {
        let inner = &self.fs.inner;
        if !self.dirty_blocks.is_empty() {
            let _g = inner.stripes.write(self.ino);
            for &b in &self.dirty_blocks {
                let mut mask = std::mem::take(&mut self.dirty[b as usize]);
                while mask != 0 {
                    // Write back each run of consecutive dirty lines with one call.
                    let first = mask.trailing_zeros() as u64;
                    let run = (mask >> first).trailing_ones() as u64;
                    inner.pm.persist(
                        self.blocks[b as usize] + first * LINE,
                        (run * LINE) as usize,
                    );
                    mask &= !line_mask(first * LINE, run * LINE);
                }
            }
            self.dirty_blocks.clear();
            inner.stamp_times(self.ino, now_ns());
            inner.pm.fence();
        }
        inner.pm.sync_backing()
    }
}

/// The bits of the 64-byte lines touched by `[in_blk, in_blk + n)` inside one block.
fn line_mask(in_blk: u64, n: u64) -> u64 {
    debug_assert!(n > 0 && in_blk + n <= BLOCK_SIZE);
    let first = in_blk / LINE;
    let last = (in_blk + n - 1) / LINE;
    let upto = if last == 63 {
        u64::MAX
    } else {
        (1u64 << (last + 1)) - 1
    };
    upto & !((1u64 << first) - 1)
}

impl Drop for DirectMap {
    fn drop(&mut self) {
        let inner = &self.fs.inner;
        {
            // Under the stripe lock, like registration, so a truncate that checked the
            // mapped length a moment ago is not racing the removal (harmless either way).
            let _g = inner.stripes.write(self.ino);
            inner.open.remove_map(self.ino, self.len);
        }
        let _ = self.fs.release_ino(self.ino as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_masks() {
        assert_eq!(line_mask(0, 1), 1);
        assert_eq!(line_mask(0, 64), 1);
        assert_eq!(line_mask(0, 65), 0b11);
        assert_eq!(line_mask(63, 2), 0b11);
        assert_eq!(line_mask(64, 64), 0b10);
        assert_eq!(line_mask(1024, 1024), 0xffff_0000);
        assert_eq!(line_mask(0, 4096), u64::MAX);
        assert_eq!(line_mask(4095, 1), 1 << 63);
        assert_eq!(line_mask(4032, 64), 1 << 63);
    }
}
