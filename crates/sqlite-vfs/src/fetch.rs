//! xFetch / xUnfetch: pointers straight into the image for SQLite's memory-mapped I/O
//! (`PRAGMA mmap_size`), so pages are read in place from persistent memory instead of being
//! copied by xRead.
//!
//! A page's address comes from a read-only [`DirectMap`] of the file (`File::map_direct`),
//! which resolves every block once and pins the blocks to the file while it lives (a shrinking
//! truncate below its length is refused by the core). The maps of a file are shared by the
//! connections of this process that have it open ([`Maps`] lives in the file's node):
//!
//! - A fetch uses the newest map if it covers the page. If the file grew past it, a new map
//!   is made only once the file is a quarter larger than the newest map (a map costs one
//!   lookup per block, so remapping at every new page would cost quadratic time); pages in
//!   between are read with xRead. Older maps stay while pages fetched from them are out.
//! - A fetch returns NULL (SQLite falls back to xRead, always correct) when the page is past
//!   EOF or the mmap limit, spans two blocks that are not physically consecutive (page sizes
//!   above 4 KiB), lies within 256 bytes of the image end (SQLite may read up to 256 bytes
//!   past a page of a corrupt database, os_unix.c `unixFetch`), or the file has holes (a
//!   read-only map refuses them).
//! - xTruncate drops every map longer than the new size before it shrinks the file, even with
//!   pages still out: the unix VFS lets the truncate through too, and SQLite never reads a
//!   fetched page past the EOF it set (with the kernel it would get SIGBUS there). The
//!   addresses stay mapped (the image mapping lives as long as the mount), and pages below
//!   the new EOF keep their blocks.
//! - xUnfetch(NULL) ("the mapping may be stale") needs nothing: only a truncate, which this
//!   VFS sees, can change which blocks a map names; another process cannot touch the image.

use std::io;

use nvmfs::layout::BLOCK_SIZE as BLOCK;
use nvmfs::{DirectMap, Fs};

/// SQLite may read this many bytes past a fetched page (os_unix.c: `nEofBuffer`).
const OVERREAD: u64 = 256;

/// A pointer handed to SQLite and the map it came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fetched {
    pub ptr: *mut u8,
    pub map: u64,
}

struct Entry {
    id: u64,
    map: DirectMap,
    /// Pointers from this map that SQLite has not released.
    out: usize,
}

/// The direct maps of one file (see the module docs).
#[derive(Default)]
pub(crate) struct Maps {
    entries: Vec<Entry>,
    next_id: u64,
}

impl Maps {
    /// A pointer to `[off, off + amt)` of file `ino`, or `None` for "use xRead".
    /// `image_end`: the byte length of the image (the over-read check).
    pub fn fetch(
        &mut self,
        fs: &Fs,
        ino: u64,
        off: u64,
        amt: usize,
        image_end: u64,
    ) -> io::Result<Option<Fetched>> {
        let end = off + amt as u64;
        let covered = self.entries.last().is_some_and(|e| end <= e.map.len());
        if !covered && !self.remap(fs, ino, end)? {
            return Ok(None);
        }
        let e = self.entries.last_mut().expect("a map covers the range");
        let Some(ptr) = e.map.as_ptr(off, amt) else {
            return Ok(None);
        };
        let last = end - 1;
        let media_last = e.map.block_offsets()[(last / BLOCK) as usize] + last % BLOCK;
        if media_last + 1 + OVERREAD > image_end {
            return Ok(None);
        }
        e.out += 1;
        Ok(Some(Fetched {
            ptr: ptr.cast_mut(),
            map: e.id,
        }))
    }

    /// Makes a new newest map if the file now covers `end` and has grown enough since the
    /// newest map; `false` if no map will cover `end` now.
    fn remap(&mut self, fs: &Fs, ino: u64, end: u64) -> io::Result<bool> {
        let size = fs.getattr(ino)?.size;
        let newest = self.entries.last().map_or(0, |e| e.map.len());
        if size < end || (newest > 0 && size < newest + newest / 4) {
            return Ok(false);
        }
        let map = match fs.file_from_ino(ino, true, false)?.map_direct() {
            Ok(m) => m,
            // Holes: a read-only map refuses them; read those pages with xRead.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(false),
            Err(e) => return Err(e),
        };
        if map.len() < end {
            return Ok(false);
        }
        self.next_id += 1;
        self.entries.push(Entry {
            id: self.next_id,
            map,
            out: 0,
        });
        self.prune();
        Ok(true)
    }

    /// SQLite released a pointer from map `id` (gone already if a truncate dropped it).
    pub fn release(&mut self, id: u64) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.out = e.out.saturating_sub(1);
        }
        self.prune();
    }

    /// Before the file is truncated to `len`: drops every map longer than that (see the
    /// module docs), so the core's pin does not refuse the truncate.
    pub fn truncating(&mut self, len: u64) {
        self.entries.retain(|e| e.map.len() <= len);
    }

    /// Drops maps that are not the newest and have no pointer out.
    fn prune(&mut self) {
        let newest = self.entries.last().map(|e| e.id);
        self.entries.retain(|e| e.out > 0 || Some(e.id) == newest);
    }
}
