//! Inodes as names reached them: the number and the generation a lookup saw.
//!
//! Inode numbers are reused at once (the pools hand out the number freed last first), and a
//! path operation looks each name up, lets go of the directory, and acts on the number it
//! found later. In between, an unlink and a create can give that number to an unrelated file.
//! Every record keeps a generation that a create sets to one more than the number's previous
//! file had (`create_node`), and freeing leaves it alone, so a number and a generation name
//! one file for good. A lookup reads the generation while the directory entry that named the
//! inode is held in place (its directory's index read-locked: no remove can free the inode
//! before it takes that index exclusively); an operation compares it with the record under
//! the inode's stripe lock (or, for a directory it works in, under the directory's stripe
//! lock through `check_live_dir`). A mismatch, or a record freed meanwhile, is `ESTALE`,
//! which the path layer answers by resolving the path again (`retry`): the name may now be
//! gone, or name another file, and the fresh walk finds out which.

use std::io;
use std::sync::Arc;

use super::dir::DirState;
use super::lookups;
use super::{errno, Inner};
use crate::hook::{self, Point};
use crate::layout::dentry;
use crate::layout::inode::{FileType, Inode, INODE_SIZE, O_GENERATION};

/// How many times a path is resolved again after the inode it named changed under it before
/// giving up with ENOENT (each retry needs another unlink and create to land in a window of
/// a few microseconds; the bound keeps a pathological churn from spinning forever).
const STALE_RETRIES_MAX: usize = 16;

/// An inode an operation acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub ino: u32,
    /// The generation a name lookup saw; `None` for a number the caller holds on its own
    /// (the inode API: a FUSE kernel reference or an open handle keeps the inode alive).
    pub generation: Option<u32>,
}

impl Target {
    #[inline]
    pub fn any(ino: u32) -> Target {
        Target {
            ino,
            generation: None,
        }
    }

    /// ESTALE unless the inode found under the lock is the one the name named.
    #[inline]
    pub fn check(&self, generation: u32) -> io::Result<()> {
        match self.generation {
            Some(g) if g != generation => Err(errno(libc::ESTALE)),
            _ => Ok(()),
        }
    }
}

/// Runs `op` (a path resolution and the act on what it found) until it does not meet an
/// inode that changed under it.
pub(crate) fn retry<R>(mut op: impl FnMut() -> io::Result<R>) -> io::Result<R> {
    for _ in 0..STALE_RETRIES_MAX {
        match op() {
            Err(e) if e.raw_os_error() == Some(libc::ESTALE) => continue,
            r => return r,
        }
    }
    Err(errno(libc::ENOENT))
}

impl Inner {
    /// Reads in-use inode `t` (the caller holds its stripe lock): ESTALE if a name led here
    /// and the record is free or belongs to a newer file.
    pub fn inode_at(&self, t: Target) -> io::Result<Inode> {
        let i = match self.inode(t.ino) {
            Err(e) if t.generation.is_some() && e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(errno(libc::ESTALE))
            }
            r => r?,
        };
        t.check(i.generation)?;
        Ok(i)
    }

    /// The link count of in-use inode `t`, from two word loads (the caller holds its stripe
    /// lock); errors as `inode_at`, without validating the rest of the record.
    pub fn nlink_at(&self, t: Target) -> io::Result<u32> {
        let stale = || {
            errno(if t.generation.is_some() {
                libc::ESTALE
            } else {
                libc::ENOENT
            })
        };
        if t.ino == 0 || t.ino as u64 >= self.geo.inode_count {
            return Err(errno(libc::ENOENT));
        }
        // Mode and link count share the first word; mode 0 is a free record (FORMAT.md).
        let first = self.pm.load_u64(self.geo.inode_off(t.ino as u64));
        if first as u32 == 0 {
            return Err(stale());
        }
        t.check(self.generation_of(t.ino))?;
        Ok((first >> 32) as u32)
    }

    /// The DRAM state of directory `t`. Operations that change the directory check its
    /// generation again under its stripe lock (`check_live_dir`); a lookup needs no lock: a
    /// directory is removed only when empty, so a stale state can only answer ENOENT.
    #[inline]
    pub fn dir_at(&self, t: Target) -> io::Result<Arc<DirState>> {
        let ds = match self.dir(t.ino) {
            Err(e) if t.generation.is_some() && e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(errno(libc::ESTALE))
            }
            r => r?,
        };
        t.check(ds.generation)?;
        Ok(ds)
    }

    /// Finds `name` in directory `parent`: what it names, with the generation it has now.
    pub fn lookup_at(&self, parent: Target, name: &[u8]) -> io::Result<(Target, FileType)> {
        self.lookup_in(parent, name, true)
    }

    /// `lookup_at` for the last component of a path that most often names a file (an open,
    /// a stat): it skips the cache of directory answers, where a file's name only misses.
    /// Under a workload that copies data the table's lines are out of the CPU's caches, so
    /// each such probe cost a memory load in series with the index's (2.4% of Filebench
    /// webserver's samples, on one load).
    pub fn lookup_leaf_at(&self, parent: Target, name: &[u8]) -> io::Result<(Target, FileType)> {
        self.lookup_in(parent, name, false)
    }

    /// `lookup_at`, asking the cache of directory answers first when `probe`.
    fn lookup_in(
        &self,
        parent: Target,
        name: &[u8],
        probe: bool,
    ) -> io::Result<(Target, FileType)> {
        match name {
            b"." => return self.dir_at(parent).map(|_| (parent, FileType::Dir)),
            b".." => return self.parent_of(parent).map(|t| (t, FileType::Dir)),
            _ if name.len() > dentry::NAME_MAX => return Err(errno(libc::ENAMETOOLONG)),
            _ => {}
        }
        // Both paths below check the parent's inode words after a lookup that likely misses
        // the cache itself (the answer, or the index): the two misses overlap.
        self.pm.prefetch(self.geo.inode_off(parent.ino as u64));
        let hash = self.name_hash(name);
        if let Some(t) = probe.then(|| self.cached_dir(parent, name, hash)).flatten() {
            return Ok((t, FileType::Dir));
        }
        let stamp = self.dirs.changes.stamp(parent.ino);
        let ds = self.dir_at(parent)?;
        let g = self.index_read(parent.ino, &ds)?;
        let idx = g.as_ref().expect("index loaded");
        hook::at(Point::Looking { dir: parent.ino });
        let f = idx
            .find(&self.pm, &self.geo, name, hash)
            .ok_or_else(|| errno(libc::ENOENT))?;
        // The entry is held in place by `g`, so the inode is not freed before this load.
        let generation = self.generation_of(f.header.ino);
        // `g` holds off the removal of an entry that is still in the index, but not an rmdir
        // of the directory once its last entry is gone from media (the remove then waits
        // for `g` only to update the index), nor a new directory taking the number and the
        // blocks and putting another entry where this one was. The entry counts only if the
        // record is still this directory after it was read: `free_inode` frees a record
        // before it unmaps the blocks, and the entry store that a reader of a reused block
        // would see comes after that (release stores, acquire loads).
        if self.dir_words(parent.ino).map(|(now, _)| now) != Some(ds.generation) {
            return Err(errno(match parent.generation {
                Some(_) => libc::ESTALE,
                None => libc::ENOENT,
            }));
        }
        drop(g);
        if f.header.ftype == FileType::Dir {
            let answer = lookups::Answer {
                parent_gen: ds.generation,
                child: f.header.ino,
                child_gen: generation,
                stamp,
            };
            lookups::put(&self.dirs.changes, parent.ino, name, hash, answer);
        }
        hook::at(Point::Resolved { ino: f.header.ino });
        let t = Target {
            ino: f.header.ino,
            generation: Some(generation),
        };
        Ok((t, f.header.ftype))
    }

    /// The directory `name` in `parent` named when this thread last looked it up, if no
    /// entry of `parent` changed since and `parent` is still the live directory it was then
    /// (lookups.rs). Loads only: no lock, no reference count.
    fn cached_dir(&self, parent: Target, name: &[u8], hash: u64) -> Option<Target> {
        let changes = &self.dirs.changes;
        let a = lookups::find(changes, parent.ino, name, hash)?;
        if parent.generation.is_some_and(|g| g != a.parent_gen) {
            return None; // the locked path answers ESTALE
        }
        hook::at(Point::Looking { dir: parent.ino });
        // Checked after the hook (a test's racing change runs there), counter first: once it
        // reads the stamp, the answer is what a locked lookup would find at that moment.
        if changes.stamp(parent.ino) != a.stamp
            || self.dir_words(parent.ino) != Some((a.parent_gen, true))
        {
            return None;
        }
        hook::at(Point::Resolved { ino: a.child });
        Some(Target {
            ino: a.child,
            generation: Some(a.child_gen),
        })
    }

    /// The parent of directory `t`. Its generation is read under `t`'s stripe lock: a move
    /// of `t` (which rewrites its parent field) waits for it, and a parent with `t` in it is
    /// not empty, so it cannot be removed meanwhile.
    fn parent_of(&self, t: Target) -> io::Result<Target> {
        let _g = self.stripes.read(t.ino);
        let i = self.inode_at(t)?;
        if !i.is_dir() {
            return Err(errno(libc::ENOTDIR));
        }
        Ok(Target {
            ino: i.parent,
            generation: Some(self.generation_of(i.parent)),
        })
    }

    /// The generation word of record `ino` (an aligned atomic load: creates write it).
    #[inline]
    fn generation_of(&self, ino: u32) -> u32 {
        const _: () = assert!(O_GENERATION.is_multiple_of(8));
        let off = self.geo.inode_off(ino as u64);
        // The caller reads the whole record next (stat, open): both of its cache lines miss
        // together rather than one after the other.
        self.pm.prefetch(off + INODE_SIZE - 64);
        self.pm.load_u64(off + O_GENERATION as u64) as u32
    }
}
