//! Namespace operations by inode number (the API the FUSE adapter maps onto): lookup,
//! getattr/setattr, create/mknod/mkdir/symlink, link, unlink/rmdir, rename, readlink,
//! readdir, statfs. Each mutating operation is one journal transaction.

use std::io;

use super::dir::{DirIndex, InsertPlan};
use super::node::{retry, Target};
use super::{errno, now_ns, Fs, Inner, Metadata};
use crate::journal::Tx;
use crate::layout::dentry::{self, Header, UNIT_SIZE};
use crate::layout::inode::{FileType, Inode, INLINE_LEN, INODE_SIZE, NLINK_MAX, SYMLINK_MAX};
use crate::layout::superblock::ROOT_INO;
use crate::layout::BLOCK_SIZE;
use crate::mapping::Claim;

/// One directory entry as readdir returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub file_type: FileType,
    /// Cookie to pass back to continue after this entry.
    pub offset: u64,
}

impl DirEntry {
    pub fn file_name(&self) -> &std::ffi::OsStr {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(&self.name)
    }
}

/// A timestamp to set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    Now,
    /// Nanoseconds since the Unix epoch.
    At(i64),
}

/// Attributes to change; `None` leaves a field alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (the file type is kept).
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// File-system statistics (statvfs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statfs {
    pub block_size: u64,
    pub blocks: u64,
    pub blocks_free: u64,
    pub inodes: u64,
    pub inodes_free: u64,
    pub name_max: u64,
}

/// Rename behaviour (renameat2 flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

/// Inodes an operation changes, each loaded once (a parent may also be the other parent).
pub(crate) struct Staged(Vec<(u32, Inode)>);

impl Staged {
    fn load(inner: &Inner, inos: &[u32]) -> io::Result<Staged> {
        let mut v: Vec<(u32, Inode)> = Vec::with_capacity(inos.len());
        for &ino in inos {
            if !v.iter().any(|(i, _)| *i == ino) {
                v.push((ino, inner.inode(ino)?));
            }
        }
        Ok(Staged(v))
    }

    pub(crate) fn get(&mut self, ino: u32) -> &mut Inode {
        &mut self
            .0
            .iter_mut()
            .find(|(i, _)| *i == ino)
            .expect("inode staged")
            .1
    }

    pub(crate) fn write(&self, inner: &Inner, tx: &mut Tx<'_>) {
        for (ino, i) in &self.0 {
            inner.write_inode(tx, *ino, i);
        }
    }
}

/// A planned directory insert, with the block it needs claimed.
pub(crate) struct Insert {
    pub(crate) plan: InsertPlan,
    pub(crate) claim: Option<Claim>,
    /// The directory the claim is for.
    pub(crate) dir: u32,
}

impl Inner {
    fn check_name(name: &[u8]) -> io::Result<()> {
        dentry::validate_name(name).map_err(errno)
    }

    /// Plans an insert of a `units`-unit entry into directory `dir`, claiming a block if the
    /// entry starts one.
    pub(crate) fn plan_insert(&self, idx: &DirIndex, dir: u32, units: u32) -> io::Result<Insert> {
        let plan = idx.plan_insert(units);
        let claim = match plan.new_block {
            Some(lblk) => {
                self.reserve_room(1, None, true)?;
                Some(
                    self.map
                        .claim(&self.pm, &self.journal, dir, lblk)
                        .inspect_err(|_| self.map.unreserve(1))?,
                )
            }
            None => None,
        };
        Ok(Insert { plan, claim, dir })
    }

    pub(crate) fn abandon(&self, ins: &Insert) {
        if let (Some(c), Some(lblk)) = (ins.claim, ins.plan.new_block) {
            self.map.abandon(&self.pm, &self.journal, c, ins.dir, lblk);
        }
    }

    /// Stages the entry `header`/`name` at the planned place: name units as free-space
    /// writes, the header word as the logged in-place write that commits it.
    pub(crate) fn stage_insert(
        &self,
        tx: &mut Tx<'_>,
        idx: &DirIndex,
        dir: u32,
        ins: &Insert,
        header: &Header,
        name: &[u8],
    ) {
        let mut units = Vec::with_capacity(header.units as usize * UNIT_SIZE as usize);
        dentry::encode_units(header, name, &mut units);
        if let (Some(c), Some(lblk)) = (ins.claim, ins.plan.new_block) {
            // A new block is built whole and written to free space; mapping it (logged) is what
            // commits the entry.
            let mut block = vec![0u8; BLOCK_SIZE as usize];
            block[..units.len()].copy_from_slice(&units);
            tx.fresh(self.geo.data_off(c.pblk), &block);
            self.map.publish_in(tx, c, dir, lblk);
        } else {
            let off = idx.unit_off(&self.geo, ins.plan.unit);
            tx.fresh(off + 8, &units[8..]);
            tx.write(off, &units[..8]);
        }
    }

    /// Checks a directory inode still is the directory the DRAM state was built for.
    pub(crate) fn check_live_dir(i: &Inode, generation: u32) -> io::Result<()> {
        if i.generation != generation || i.nlink == 0 || !i.is_dir() {
            return Err(errno(libc::ENOENT));
        }
        Ok(())
    }

    /// Creates `name` in `parent`. With `open`, the new inode also gets an open reference
    /// before the directory is unlocked, so no unlink can free it before the caller uses it.
    fn create_node(
        &self,
        at: Target,
        name: &[u8],
        mut new: Inode,
        target: Option<&[u8]>,
        open: bool,
    ) -> io::Result<(u32, Inode)> {
        self.check_writable()?;
        Self::check_name(name)?;
        let parent = at.ino;
        let ds = self.dir_at(at)?;
        let _modify = ds.modify.lock();
        let g = self.index_read(parent, &ds)?;
        let idx = g.as_ref().expect("index loaded");
        let h = self.name_hash(name);
        if idx.find(&self.pm, &self.geo, name, h).is_some() {
            return Err(errno(libc::EEXIST));
        }
        let ino = self.alloc_inode()?;
        let ins = match self.plan_insert(idx, parent, dentry::units_for(name.len())) {
            Ok(ins) => ins,
            Err(e) => {
                self.inodes.free(ino);
                return Err(e);
            }
        };
        let link_claim = match target.filter(|t| t.len() > INLINE_LEN) {
            Some(_) => match self
                .reserve_room(1, None, true)
                .and_then(|_| self.map.claim(&self.pm, &self.journal, ino, 0))
            {
                Ok(c) => Some(c),
                Err(e) => {
                    self.abandon(&ins);
                    self.inodes.free(ino);
                    return Err(e);
                }
            },
            None => None,
        };
        let _locks = self.stripes.write_many(&[parent, ino]);
        let res = (|| {
            let mut st = Staged::load(self, &[parent])?;
            Self::check_live_dir(st.get(parent), ds.generation)?;
            if new.is_dir() && st.get(parent).nlink >= NLINK_MAX {
                return Err(errno(libc::EMLINK));
            }
            Ok(st)
        })();
        let mut st = match res {
            Ok(st) => st,
            Err(e) => {
                self.abandon(&ins);
                if let Some(c) = link_claim {
                    self.map.abandon(&self.pm, &self.journal, c, ino, 0);
                }
                self.inodes.free(ino);
                return Err(e);
            }
        };
        let old = Inode::decode_raw(
            &self
                .pm
                .read_array::<{ INODE_SIZE as usize }>(self.geo.inode_off(ino as u64)),
        );
        new.generation = old.generation.wrapping_add(1).max(1);
        let mut tx = self.tx();
        if let Some(t) = target {
            match link_claim {
                Some(c) => {
                    tx.fresh(self.geo.data_off(c.pblk), t);
                    self.map.publish_in(&mut tx, c, ino, 0);
                    new.blocks = 1;
                }
                None => new.inline[..t.len()].copy_from_slice(t),
            }
        }
        let ft = new.file_type().expect("valid type");
        let header = Header::new(ino, name.len(), ft);
        self.stage_insert(&mut tx, idx, parent, &ins, &header, name);
        self.write_inode(&mut tx, ino, &new);
        let p = st.get(parent);
        p.mtime_ns = new.ctime_ns;
        p.ctime_ns = new.ctime_ns;
        p.dir_entries = p.dir_entries.saturating_add(1);
        p.dir_units = ins.plan.new_hw;
        p.blocks = p.blocks.saturating_add(ins.claim.is_some() as u64);
        if new.is_dir() {
            p.nlink = p.nlink.saturating_add(1);
        }
        st.write(self, &mut tx);
        self.note_dir_changed(parent);
        tx.commit();
        drop(_locks);
        drop(g);
        let mut g = self.index_write(parent, &ds)?;
        let idx = g.as_mut().expect("index loaded");
        idx.apply_insert(&ins.plan, h, &header, name, ins.claim.map(|c| c.pblk));
        if open {
            self.open.acquire(ino);
        }
        Ok((ino, new))
    }

    /// A free inode number. The record on media is the judge: a shared mount's pools may still
    /// hold numbers another process has taken since they were built (`nvmfs::shared`).
    fn alloc_inode(&self) -> io::Result<u32> {
        self.inodes
            .fill_once(|| super::mount::free_inodes(&self.pm, &self.geo));
        loop {
            let ino = self.inodes.alloc().ok_or_else(|| errno(libc::ENOSPC))?;
            // Mode is the record's first 4 bytes; 0 means free (FORMAT.md).
            if self.pm.load_u64(self.geo.inode_off(ino as u64)) as u32 == 0 {
                return Ok(ino);
            }
        }
    }

    /// Removes `name` from `parent` (unlink, or rmdir when `dir`).
    fn remove(&self, at: Target, name: &[u8], dir: bool) -> io::Result<()> {
        self.check_writable()?;
        let parent = at.ino;
        match name {
            b"." => return Err(errno(if dir { libc::EINVAL } else { libc::EISDIR })),
            b".." => return Err(errno(if dir { libc::ENOTEMPTY } else { libc::EISDIR })),
            _ => Self::check_name(name)?,
        }
        let ds = self.dir_at(at)?;
        let modify = ds.modify.lock();
        let g = self.index_read(parent, &ds)?;
        let idx = g.as_ref().expect("index loaded");
        let h = self.name_hash(name);
        let f = idx
            .find(&self.pm, &self.geo, name, h)
            .ok_or_else(|| errno(libc::ENOENT))?;
        let child = f.header.ino;
        let is_dir = f.header.ftype == FileType::Dir;
        if dir && !is_dir {
            return Err(errno(libc::ENOTDIR));
        }
        if !dir && is_dir {
            return Err(errno(libc::EISDIR));
        }
        let _locks = self.stripes.write_many(&[parent, child]);
        let mut st = Staged::load(self, &[parent, child])?;
        Self::check_live_dir(st.get(parent), ds.generation)?;
        if dir && st.get(child).dir_entries > 0 {
            return Err(errno(libc::ENOTEMPTY));
        }
        let now = now_ns();
        let mut tx = self.tx();
        tx.write_u64(idx.unit_off(&self.geo, f.unit), 0);
        let p = st.get(parent);
        p.mtime_ns = now;
        p.ctime_ns = now;
        p.dir_entries = p.dir_entries.saturating_sub(1);
        if dir {
            p.nlink = p.nlink.saturating_sub(1);
        }
        let c = st.get(child);
        c.nlink = if dir { 0 } else { c.nlink.saturating_sub(1) };
        c.ctime_ns = now;
        let last = c.nlink == 0;
        st.write(self, &mut tx);
        self.note_dir_changed(parent);
        tx.commit();
        drop(_locks);
        drop(g);
        let free = {
            let mut g = self.index_write(parent, &ds)?;
            g.as_mut()
                .expect("index loaded")
                .apply_remove(f.unit, f.header.units as u32, h);
            if dir {
                self.dirs.remove(child);
            }
            // Under the exclusive index lock: a lookup that found the entry has taken its
            // open reference by now, and none can find it any more.
            last && !self.keep_unlinked(child)
        };
        // Freeing the blocks needs no directory lock: the child is unreachable, and its
        // number is not reused before free_inode returns it. Holding the lock through the
        // freeing's fence would make every other change of this directory wait for it.
        drop(modify);
        if free {
            let _child = self.stripes.write(child);
            self.free_inode(child)?;
        }
        Ok(())
    }

    /// Frees an inode with no links and no open handles: its blocks, then its record. The
    /// caller holds its stripe lock (or is mounting). A crash in between leaves an orphan
    /// (nlink 0) that the next mount frees.
    pub(crate) fn free_inode(&self, ino: u32) -> io::Result<()> {
        let off = self.geo.inode_off(ino as u64);
        let i = Inode::decode_raw(&self.pm.read_array::<{ INODE_SIZE as usize }>(off));
        // The record is freed before the blocks: a lookup that read an entry from a directory
        // block without a lock trusts it only if the record is still in use afterwards
        // (`lookup_at`). No fence between the two: after a crash, blocks of a free inode are
        // strays and recovery frees them, so either order is safe; the fence below makes both
        // durable before the number can be reused. Mode and link count share the first word:
        // one atomic store frees the record.
        self.pm.store_u64(off, 0);
        self.pm.persist(off, 8);
        // Dropping every mapping needs no new node, so this cannot fail for want of space.
        let freed = self.map.unmap_all(
            &self.pm,
            &self.journal,
            ino,
            super::mount::allowed_blocks(&i),
        )?;
        self.tier_drop(ino, 0, u64::MAX);
        self.pm.fence();
        self.map.freed(freed);
        self.dirs.remove(ino);
        self.inodes.free(ino);
        Ok(())
    }

    /// Unmaps the blocks of `ino` in [from, to) (written back, maybe not fenced); returns how
    /// many. See `FileMap::unmap_range`.
    pub(crate) fn unmap_from(&self, ino: u32, from: u64, to: u64) -> io::Result<u64> {
        let n = self
            .map
            .unmap_range(&self.pm, &self.journal, ino, from, to)?;
        self.tier_drop(ino, from, to);
        Ok(n)
    }
}

impl Fs {
    /// Attributes of inode `ino`.
    pub fn getattr(&self, ino: u64) -> io::Result<Metadata> {
        self.getattr_at(Target::any(to_ino(ino)?))
    }

    pub(crate) fn getattr_at(&self, t: Target) -> io::Result<Metadata> {
        let _g = self.inner.stripes.read(t.ino);
        Ok(Metadata::from_inode(t.ino, &self.inner.inode_at(t)?))
    }

    /// Finds `name` in directory `parent`: (inode number, type). "." and ".." resolve too.
    pub fn lookup_ino(&self, parent: u64, name: &[u8]) -> io::Result<(u64, FileType)> {
        let (t, ft) = self.inner.lookup_at(Target::any(to_ino(parent)?), name)?;
        Ok((t.ino as u64, ft))
    }

    /// `lookup_ino` for the last component of a path that most often names a file (an open,
    /// a stat): the same answer, without asking the cache of directory answers first
    /// (`Inner::lookup_leaf_at`).
    pub fn lookup_leaf_ino(&self, parent: u64, name: &[u8]) -> io::Result<(u64, FileType)> {
        let (t, ft) = self
            .inner
            .lookup_leaf_at(Target::any(to_ino(parent)?), name)?;
        Ok((t.ino as u64, ft))
    }

    /// Finds `name` in directory `parent` and returns its attributes: those of the inode the
    /// name named, never of a file that reused its number meanwhile.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> io::Result<Metadata> {
        let parent = Target::any(to_ino(parent)?);
        retry(|| {
            let (t, _) = self.inner.lookup_at(parent, name)?;
            self.getattr_at(t)
        })
    }

    /// Creates a node: a regular file, FIFO, socket or device (`mode` carries the type).
    pub fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
    ) -> io::Result<Metadata> {
        let ft = FileType::from_mode(mode).ok_or_else(|| errno(libc::EINVAL))?;
        // Only the type and permission bits are kept (as the kernel's mknod).
        let mode = ft.mode_bits() | (mode & 0o7777);
        if matches!(ft, FileType::Dir | FileType::Symlink) {
            return Err(errno(libc::EINVAL));
        }
        let mut i = new_inode(mode, uid, gid, 1);
        if matches!(ft, FileType::CharDevice | FileType::BlockDevice) {
            i.inline[..8].copy_from_slice(&rdev.to_le_bytes());
        }
        let (ino, i) =
            self.inner
                .create_node(Target::any(to_ino(parent)?), name, i, None, false)?;
        Ok(Metadata::from_inode(ino, &i))
    }

    /// Creates a regular file and takes an open reference on it (the path API's open with
    /// O_CREAT); release it with `release_ino`.
    pub(crate) fn create_opened(
        &self,
        parent: Target,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> io::Result<u64> {
        let i = new_inode(libc::S_IFREG | (perm & 0o7777), uid, gid, 1);
        let (ino, _) = self.inner.create_node(parent, name, i, None, true)?;
        Ok(ino as u64)
    }

    /// Creates a regular file.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> io::Result<Metadata> {
        self.mknod(parent, name, libc::S_IFREG | (perm & 0o7777), uid, gid, 0)
    }

    pub fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> io::Result<Metadata> {
        self.mkdir_at(Target::any(to_ino(parent)?), name, perm, (uid, gid))
    }

    pub(crate) fn mkdir_at(
        &self,
        parent: Target,
        name: &[u8],
        perm: u32,
        (uid, gid): (u32, u32),
    ) -> io::Result<Metadata> {
        let mut i = new_inode(libc::S_IFDIR | (perm & 0o7777), uid, gid, 2);
        i.parent = parent.ino;
        let (ino, i) = self.inner.create_node(parent, name, i, None, false)?;
        Ok(Metadata::from_inode(ino, &i))
    }

    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> io::Result<Metadata> {
        self.symlink_at(Target::any(to_ino(parent)?), name, target, (uid, gid))
    }

    pub(crate) fn symlink_at(
        &self,
        parent: Target,
        name: &[u8],
        target: &[u8],
        (uid, gid): (u32, u32),
    ) -> io::Result<Metadata> {
        if target.is_empty() || target.contains(&0) {
            return Err(errno(if target.is_empty() {
                libc::ENOENT
            } else {
                libc::EINVAL
            }));
        }
        if target.len() > SYMLINK_MAX {
            return Err(errno(libc::ENAMETOOLONG));
        }
        let mut i = new_inode(libc::S_IFLNK | 0o777, uid, gid, 1);
        i.size = target.len() as u64;
        let (ino, i) = self
            .inner
            .create_node(parent, name, i, Some(target), false)?;
        Ok(Metadata::from_inode(ino, &i))
    }

    pub fn readlink(&self, ino: u64) -> io::Result<Vec<u8>> {
        self.readlink_at(Target::any(to_ino(ino)?))
    }

    pub(crate) fn readlink_at(&self, t: Target) -> io::Result<Vec<u8>> {
        let inner = &self.inner;
        let ino = t.ino;
        let _g = inner.stripes.read(ino);
        let i = inner.inode_at(t)?;
        if i.file_type() != Some(FileType::Symlink) {
            return Err(errno(libc::EINVAL));
        }
        let len = i.size as usize;
        if len <= INLINE_LEN {
            return Ok(i.inline[..len].to_vec());
        }
        let pblk = inner.map.lookup(&inner.pm, ino, 0).ok_or_else(|| {
            super::corrupt_to_io(crate::layout::corrupted(
                "symlink: target block not mapped",
                inner.geo.inode_off(ino as u64),
            ))
        })?;
        Ok(inner.pm.read_vec(inner.geo.data_off(pblk), len))
    }

    pub fn unlink(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        self.remove_at(Target::any(to_ino(parent)?), name, false)
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        self.remove_at(Target::any(to_ino(parent)?), name, true)
    }

    /// unlink (`dir` false) or rmdir of `name` in `parent`.
    pub(crate) fn remove_at(&self, parent: Target, name: &[u8], dir: bool) -> io::Result<()> {
        self.inner.remove(parent, name, dir)
    }

    /// Adds a hard link `newparent/newname` to inode `ino`.
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> io::Result<Metadata> {
        let (ino, parent) = (to_ino(ino)?, to_ino(newparent)?);
        self.link_at(Target::any(ino), Target::any(parent), newname)
    }

    pub(crate) fn link_at(
        &self,
        target: Target,
        at: Target,
        newname: &[u8],
    ) -> io::Result<Metadata> {
        let inner = &self.inner;
        inner.check_writable()?;
        Inner::check_name(newname)?;
        let (ino, parent) = (target.ino, at.ino);
        let ds = inner.dir_at(at)?;
        let _modify = ds.modify.lock();
        let g = inner.index_read(parent, &ds)?;
        let idx = g.as_ref().expect("index loaded");
        let h = inner.name_hash(newname);
        if idx.find(&inner.pm, &inner.geo, newname, h).is_some() {
            return Err(errno(libc::EEXIST));
        }
        let ins = inner.plan_insert(idx, parent, dentry::units_for(newname.len()))?;
        let _locks = inner.stripes.write_many(&[parent, ino]);
        let res = (|| {
            let st = Staged::load(inner, &[parent, ino])?;
            Ok::<_, io::Error>(st)
        })();
        let mut st = res.inspect_err(|_| inner.abandon(&ins))?;
        let check = (|| {
            Inner::check_live_dir(st.get(parent), ds.generation)?;
            let i = st.get(ino);
            target.check(i.generation)?;
            if i.is_dir() {
                return Err(errno(libc::EPERM));
            }
            if i.nlink == 0 {
                return Err(errno(libc::ENOENT));
            }
            if i.nlink >= NLINK_MAX {
                return Err(errno(libc::EMLINK));
            }
            Ok(())
        })();
        check.inspect_err(|_| inner.abandon(&ins))?;
        let now = now_ns();
        let ft = st.get(ino).file_type().expect("valid");
        let mut tx = inner.tx();
        let header = Header::new(ino, newname.len(), ft);
        inner.stage_insert(&mut tx, idx, parent, &ins, &header, newname);
        let i = st.get(ino);
        i.nlink = i.nlink.saturating_add(1);
        i.ctime_ns = now;
        let p = st.get(parent);
        p.mtime_ns = now;
        p.ctime_ns = now;
        p.dir_entries = p.dir_entries.saturating_add(1);
        p.dir_units = ins.plan.new_hw;
        p.blocks = p.blocks.saturating_add(ins.claim.is_some() as u64);
        st.write(inner, &mut tx);
        inner.note_dir_changed(parent);
        tx.commit();
        drop(_locks);
        drop(g);
        inner
            .index_write(parent, &ds)?
            .as_mut()
            .expect("index loaded")
            .apply_insert(&ins.plan, h, &header, newname, ins.claim.map(|c| c.pblk));
        Ok(Metadata::from_inode(ino, st.get(ino)))
    }

    /// Lists directory `ino` from cookie `offset` (0 = start), calling `f` per entry until it
    /// returns false. "." and ".." come first.
    pub fn readdir(
        &self,
        ino: u64,
        offset: u64,
        f: impl FnMut(DirEntry) -> bool,
    ) -> io::Result<()> {
        self.readdir_at(Target::any(to_ino(ino)?), offset, f)
    }

    pub(crate) fn readdir_at(
        &self,
        t: Target,
        offset: u64,
        mut f: impl FnMut(DirEntry) -> bool,
    ) -> io::Result<()> {
        let inner = &self.inner;
        let ino = t.ino;
        let (ds, inode) = inner.dir_state(ino)?;
        t.check(inode.generation)?;
        if offset == 0
            && !f(DirEntry {
                name: b".".to_vec(),
                ino: ino as u64,
                file_type: FileType::Dir,
                offset: 1,
            })
        {
            return Ok(());
        }
        if offset <= 1
            && !f(DirEntry {
                name: b"..".to_vec(),
                ino: inode.parent as u64,
                file_type: FileType::Dir,
                offset: 2,
            })
        {
            return Ok(());
        }
        let start = offset.saturating_sub(2).min(u32::MAX as u64) as u32;
        let g = inner.index_read(ino, &ds)?;
        let idx = g.as_ref().expect("index loaded");
        idx.scan(&inner.pm, &inner.geo, start, |unit, h, name| {
            f(DirEntry {
                name: name.to_vec(),
                ino: h.ino as u64,
                file_type: h.ftype,
                offset: (unit + h.units as u32) as u64 + 2,
            })
        });
        Ok(())
    }

    /// Changes attributes of `ino`; a size change truncates or extends the file.
    pub fn setattr(&self, ino: u64, attr: &SetAttr) -> io::Result<Metadata> {
        self.setattr_at(Target::any(to_ino(ino)?), attr)
    }

    pub(crate) fn setattr_at(&self, t: Target, attr: &SetAttr) -> io::Result<Metadata> {
        let inner = &self.inner;
        inner.check_writable()?;
        let ino = t.ino;
        let _g = inner.stripes.write(ino);
        let mut i = inner.inode_at(t)?;
        let mut changed = false;
        if let Some(size) = attr.size {
            // A truncate to the current size still stamps mtime and ctime (as Linux does);
            // set_size persists those itself when the size changes.
            changed = size == i.size && i.falloc_end == 0;
            inner.set_size(ino, &mut i, size)?;
        }
        let now = now_ns();
        if let Some(m) = attr.mode {
            i.mode = (i.mode & libc::S_IFMT) | (m & 0o7777);
            changed = true;
        }
        if let Some(u) = attr.uid {
            i.uid = u;
            changed = true;
        }
        if let Some(g) = attr.gid {
            i.gid = g;
            changed = true;
        }
        for (set, field) in [(attr.atime, &mut i.atime_ns), (attr.mtime, &mut i.mtime_ns)] {
            if let Some(t) = set {
                *field = match t {
                    SetTime::Now => now,
                    SetTime::At(ns) => ns,
                };
                changed = true;
            }
        }
        if changed {
            i.ctime_ns = now;
            let mut tx = inner.tx();
            inner.write_inode(&mut tx, ino, &i);
            tx.commit();
        }
        Ok(Metadata::from_inode(ino, &i))
    }

    pub fn statfs(&self) -> Statfs {
        let inner = &self.inner;
        let mut total = inner.map.total_blocks();
        let mut used = inner.map.used_blocks();
        if let Some(t) = &inner.tier {
            // A clean block has copies in both tiers and counts once.
            let info = t.info(inner.geo.data_blocks);
            total += t.hdr.ssd_blocks();
            used = (used + info.ssd_valid_blocks).saturating_sub(info.clean_blocks);
        }
        Statfs {
            block_size: BLOCK_SIZE,
            blocks: total,
            blocks_free: total.saturating_sub(used),
            inodes: inner.geo.inode_count - 1,
            inodes_free: inner.inodes.free_count(),
            name_max: dentry::NAME_MAX as u64,
        }
    }

    /// Renames `parent/name` to `newparent/newname` (renameat2 semantics).
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: RenameFlags,
    ) -> io::Result<()> {
        let (sp, dp) = (to_ino(parent)?, to_ino(newparent)?);
        let (sp, dp) = (Target::any(sp), Target::any(dp));
        super::rename::rename(&self.inner, sp, name, dp, newname, flags)
    }

    /// Takes a reference that keeps `ino` alive after its last link goes (an open file, or a
    /// kernel lookup reference through FUSE).
    pub fn open_ino(&self, ino: u64) -> io::Result<()> {
        self.open_at(Target::any(to_ino(ino)?))
    }

    /// Takes an open reference on `t`. Under its stripe lock, which `release_ino` holds from
    /// dropping a reference to freeing, so a free is never half-way when this looks. An
    /// inode without links is refused unless something already holds it: `remove` decides
    /// to free an unheld one before it takes the stripe lock to do it, and a reference taken
    /// in between would pin a freed inode.
    pub(crate) fn open_at(&self, t: Target) -> io::Result<()> {
        let inner = &self.inner;
        let _g = inner.stripes.read(t.ino);
        // Two words, not the whole record: opening reads nothing else, and the first read or
        // write through the handle validates the record.
        if inner.nlink_at(t)? == 0 && !inner.held(t.ino) {
            return Err(errno(libc::ENOENT));
        }
        inner.open.acquire(t.ino);
        Ok(())
    }

    /// Drops a reference taken by `open_ino`; frees the inode if it was the last and the
    /// inode has no links.
    pub fn release_ino(&self, ino: u64) -> io::Result<()> {
        let inner = &self.inner;
        let ino = to_ino(ino)?;
        // Taken before the reference goes, held until the free: an `open_ino` in between
        // would otherwise find the inode still in use, pin it, and watch it be freed.
        let _g = (!inner.read_only).then(|| inner.stripes.write(ino));
        let Some(unlinked_here) = inner.open.release(ino) else {
            return Ok(());
        };
        crate::hook::at(crate::hook::Point::Released { ino });
        if inner.read_only || !inner.free_on_last_release(ino, unlinked_here) {
            return Ok(());
        }
        inner.free_inode(ino)
    }
}

pub(crate) fn to_ino(ino: u64) -> io::Result<u32> {
    u32::try_from(ino)
        .ok()
        .filter(|&i| i != 0)
        .ok_or_else(|| errno(libc::ENOENT))
}

pub(crate) fn new_inode(mode: u32, uid: u32, gid: u32, nlink: u32) -> Inode {
    let now = now_ns();
    Inode {
        mode,
        nlink,
        uid,
        gid,
        atime_ns: now,
        mtime_ns: now,
        ctime_ns: now,
        ..Default::default()
    }
}

pub(crate) const ROOT: u64 = ROOT_INO;

pub(crate) fn stage_for_rename(inner: &Inner, inos: &[u32]) -> io::Result<Staged> {
    Staged::load(inner, inos)
}
