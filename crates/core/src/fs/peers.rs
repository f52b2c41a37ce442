//! What the file system asks of the other processes attached to the same image.
//!
//! A mount made by `nvmfs::shared::SharedMount` shares its image with other processes, each
//! with its own DRAM state (directory indexes, free-inode pools, open references). The
//! operations stay the same; at the few points where another process's state matters they
//! consult a `Peers` implementation (the coordination file of `shared/`). A plain mount has
//! none, and every helper below reduces to the single-process behaviour.

use std::io;

use super::mount::{repair_table, replay_journal, scan_inodes, RecoveryReport};
use super::{corrupt_to_io, Inner};

pub(crate) trait Peers: Send + Sync {
    /// The entries of directory `ino` are about to change: other processes must drop their
    /// DRAM index of it before they next use it.
    fn dir_changed(&self, ino: u32);
    /// An open file description or a direct map, in any process, keeps `ino` alive.
    fn open_anywhere(&self, ino: u32) -> bool;
    /// `ino` lost its last link while open somewhere: whoever releases it last frees it.
    fn orphan_left(&self, ino: u32);
    /// Some process maps blocks of `ino` directly: they must not be freed.
    fn mapped_anywhere(&self, ino: u32) -> bool;
}

impl Inner {
    pub(crate) fn note_dir_changed(&self, ino: u32) {
        if let Some(p) = &self.peers {
            p.dir_changed(ino);
        }
    }

    /// Called when `ino` lost its last link (the directory locks are held, so no new lookup
    /// can reach it): true if something still has it open, so it must stay (an orphan) until
    /// the last release; false if the caller frees it now.
    pub(crate) fn keep_unlinked(&self, ino: u32) -> bool {
        let local = self.open.mark_unlinked(ino);
        match &self.peers {
            Some(p) if local || p.open_anywhere(ino) => {
                p.orphan_left(ino);
                true
            }
            _ => local,
        }
    }

    /// After the last reference of this process to `ino` went: whether to free it now. A
    /// plain mount knows from its own open table (`unlinked_here`); a shared one reads the
    /// link count, since another process may have removed the last link, and asks whether
    /// another description still holds the inode. The caller holds the inode's stripe lock.
    pub(crate) fn free_on_last_release(&self, ino: u32, unlinked_here: bool) -> bool {
        match &self.peers {
            None => unlinked_here,
            Some(p) => {
                let unlinked = self.inode(ino).is_ok_and(|i| i.nlink == 0);
                if unlinked && p.open_anywhere(ino) {
                    p.orphan_left(ino);
                    return false;
                }
                unlinked
            }
        }
    }

    /// Whether a reference here or, on a shared mount, in another process holds `ino`.
    pub(crate) fn held(&self, ino: u32) -> bool {
        self.open.is_open(ino) || self.peers.as_ref().is_some_and(|p| p.open_anywhere(ino))
    }

    /// The length below which `ino`'s blocks must not be freed: its longest direct map here,
    /// or everything while another process maps it.
    pub(crate) fn mapped_len(&self, ino: u32) -> u64 {
        match &self.peers {
            Some(p) if p.mapped_anywhere(ino) => u64::MAX,
            _ => self.open.mapped_len(ino),
        }
    }
}

/// What a process of a shared mount does when the image comes back to it from another
/// process (`nvmfs::shared`). The caller has the image to itself and no operation of its own
/// process is in flight.
impl Inner {
    /// Drops the DRAM index of each directory another process changed.
    pub(crate) fn forget_dirs(&self, dirs: impl Iterator<Item = u32>) {
        for ino in dirs {
            self.dirs.remove(ino);
        }
    }

    /// Drops every directory index (too many changes to list, or after a crash).
    pub(crate) fn forget_all_dirs(&self) {
        self.dirs.clear();
    }

    /// Refills the free-inode pools from the table when they run low: other processes free
    /// inodes this process's pools never hear of. `alloc_inode` checks each number it hands
    /// out against the media, so stale numbers are harmless; missing ones would be ENOSPC.
    pub(crate) fn refill_inodes(&self, below: u64) {
        if self.inodes.fewer_than(below) {
            self.inodes
                .rebuild(super::mount::free_inodes(&self.pm, &self.geo).into_iter());
        }
    }

    /// A process died in the middle of an operation on this image: does what an unclean
    /// mount does, on the live image. Its armed journal lane is rolled back, its claims in
    /// flight and blocks published past an EOF it never stored become free, block counts are
    /// recounted, and orphans that no process holds are freed. All of this process's DRAM
    /// state built from media is dropped or rebuilt.
    pub(crate) fn recover_from_peer_crash(&self) -> io::Result<RecoveryReport> {
        let mut report = RecoveryReport {
            unclean: true,
            ..Default::default()
        };
        replay_journal(&self.pm, &self.geo, &mut report).map_err(corrupt_to_io)?;
        let used = repair_table(&self.pm, &self.geo, true, &mut report);
        self.map.set_used(used);
        self.forget_all_dirs();
        let scan = scan_inodes(&self.pm, &self.geo).map_err(corrupt_to_io)?;
        self.inodes.rebuild(scan.free.into_iter());
        report.orphans_freed = self.free_unheld_orphans(&scan.orphans)?;
        Ok(report)
    }

    /// Frees the orphans (in use, no links) that nothing holds open, here or in another
    /// process (a description inherited across an exec, say): mount and recovery after a
    /// crashed peer. Returns how many it freed.
    pub(crate) fn free_unheld_orphans(&self, orphans: &[u32]) -> io::Result<u64> {
        let mut freed = 0;
        for &ino in orphans {
            if !self.held(ino) {
                let _g = self.stripes.write(ino);
                self.free_inode(ino)?;
                freed += 1;
            }
        }
        Ok(freed)
    }

    /// Frees `ino` if it is an orphan (in use, no links) that nothing holds open any more.
    /// True if it was freed or is no orphan (nothing left to watch).
    pub(crate) fn reap_orphan(&self, ino: u32) -> io::Result<bool> {
        if self.read_only || self.open.is_open(ino) {
            return Ok(false);
        }
        let _g = self.stripes.write(ino);
        match self.inode(ino) {
            Ok(i) if i.nlink == 0 => {
                if self.peers.as_ref().is_some_and(|p| p.open_anywhere(ino)) {
                    return Ok(false);
                }
                self.free_inode(ino)?;
                Ok(true)
            }
            _ => Ok(true),
        }
    }
}
