//! rename(2)/renameat2: move, replace, exchange; across directories with loop checks. One
//! journal transaction covers both entries and every inode involved.

use std::io;

use super::dir::{DirIndex, Found};
use super::node::Target;
use super::ops::RenameFlags;
use super::{errno, now_ns, Inner};
use crate::layout::dentry::{self, Header};
use crate::layout::inode::{FileType, NLINK_MAX};
use crate::layout::superblock::ROOT_INO;

/// What is at the destination name.
enum Dest {
    New,
    Replace(Found),
    Exchange(Found),
}

pub(crate) fn rename(
    inner: &Inner,
    src: Target,
    sname: &[u8],
    dst: Target,
    dname: &[u8],
    flags: RenameFlags,
) -> io::Result<()> {
    let (sp, dp) = (src.ino, dst.ino);
    inner.check_writable()?;
    if flags.noreplace && flags.exchange {
        return Err(errno(libc::EINVAL));
    }
    for n in [sname, dname] {
        if n == b"." || n == b".." {
            return Err(errno(libc::EINVAL));
        }
        dentry::validate_name(n).map_err(errno)?;
    }
    let cross = sp != dp;
    // Moves between directories are serialised so the loop check sees a stable tree.
    let _rename_guard = cross.then(|| inner.rename_lock.lock());
    let sds = inner.dir_at(src)?;
    let dds = inner.dir_at(dst)?;
    // Both directories' modify locks, then their index locks, in inode order.
    let _modify = if sp <= dp {
        (sds.modify.lock(), cross.then(|| dds.modify.lock()))
    } else {
        let d = dds.modify.lock();
        (sds.modify.lock(), Some(d))
    };
    let (mut first, mut second) = if sp <= dp {
        (
            inner.index_write(sp, &sds)?,
            cross.then(|| inner.index_write(dp, &dds)).transpose()?,
        )
    } else {
        let d = inner.index_write(dp, &dds)?;
        (inner.index_write(sp, &sds)?, Some(d))
    };
    // `first` is always the source's index, `second` the destination's (if another one).
    let sidx: &mut DirIndex = first.as_mut().expect("loaded");
    let didx: Option<&mut DirIndex> = second.as_mut().map(|s| s.as_mut().expect("loaded"));
    let mut r = Rename {
        inner,
        sp,
        dp,
        sname,
        dname,
        sidx,
        didx,
        sgen: sds.generation,
        dgen: dds.generation,
    };
    r.run(flags)
}

struct Rename<'a> {
    inner: &'a Inner,
    sp: u32,
    dp: u32,
    sname: &'a [u8],
    dname: &'a [u8],
    sidx: &'a mut DirIndex,
    didx: Option<&'a mut DirIndex>,
    sgen: u32,
    dgen: u32,
}

impl Rename<'_> {
    fn dst(&mut self) -> &mut DirIndex {
        match self.didx.as_deref_mut() {
            Some(d) => d,
            None => self.sidx,
        }
    }

    fn run(&mut self, flags: RenameFlags) -> io::Result<()> {
        let inner = self.inner;
        let (pm, geo) = (&inner.pm, &inner.geo);
        let sh = inner.name_hash(self.sname);
        let dh = inner.name_hash(self.dname);
        let src = self
            .sidx
            .find(pm, geo, self.sname, sh)
            .ok_or_else(|| errno(libc::ENOENT))?;
        let dname = self.dname;
        let found = self.dst().find(pm, geo, dname, dh);
        let dest = match found {
            Some(d) if d.header.ino == src.header.ino => return Ok(()),
            Some(_) if flags.noreplace => return Err(errno(libc::EEXIST)),
            Some(d) if flags.exchange => Dest::Exchange(d),
            Some(d) => Dest::Replace(d),
            None if flags.exchange => return Err(errno(libc::ENOENT)),
            None => Dest::New,
        };
        let src_dir = src.header.ftype == FileType::Dir;
        if let Dest::Replace(d) = &dest {
            let dst_dir = d.header.ftype == FileType::Dir;
            if src_dir && !dst_dir {
                return Err(errno(libc::ENOTDIR));
            }
            if !src_dir && dst_dir {
                return Err(errno(libc::EISDIR));
            }
        }
        if self.sp != self.dp {
            if src_dir {
                self.check_not_ancestor(src.header.ino, self.dp)?;
            }
            if let Dest::Exchange(d) = &dest {
                if d.header.ftype == FileType::Dir {
                    self.check_not_ancestor(d.header.ino, self.sp)?;
                }
            }
        }
        self.commit(src, dest, sh, dh)
    }

    /// EINVAL if `dir` is `from` or one of its ancestors (the move would make a loop).
    fn check_not_ancestor(&self, dir: u32, from: u32) -> io::Result<()> {
        let mut cur = from;
        for _ in 0..self.inner.geo.inode_count {
            if cur == dir {
                return Err(errno(libc::EINVAL));
            }
            if cur as u64 == ROOT_INO {
                return Ok(());
            }
            let _g = self.inner.stripes.read(cur);
            cur = self.inner.inode(cur)?.parent;
        }
        Err(errno(libc::ELOOP))
    }

    fn commit(&mut self, src: Found, dest: Dest, sh: u64, dh: u64) -> io::Result<()> {
        let inner = self.inner;
        let (sp, dp) = (self.sp, self.dp);
        let dname = self.dname;
        let ins = match dest {
            Dest::New => Some(inner.plan_insert(self.dst(), dp, dentry::units_for(dname.len()))?),
            _ => None,
        };
        let victim = match &dest {
            Dest::Replace(d) | Dest::Exchange(d) => Some(d.header),
            Dest::New => None,
        };
        let mut inos = vec![sp, dp, src.header.ino];
        inos.extend(victim.map(|v| v.ino));
        let _locks = inner.stripes.write_many(&inos);
        let staged = super::ops::stage_for_rename(inner, &inos);
        let mut st = match staged {
            Ok(st) => st,
            Err(e) => {
                if let Some(i) = &ins {
                    inner.abandon(i);
                }
                return Err(e);
            }
        };
        let checks = (|| {
            Inner::check_live_dir(st.get(sp), self.sgen)?;
            Inner::check_live_dir(st.get(dp), self.dgen)?;
            if let (Dest::Replace(_), Some(v)) = (&dest, victim) {
                if v.ftype == FileType::Dir && st.get(v.ino).dir_entries > 0 {
                    return Err(errno(libc::ENOTEMPTY));
                }
            }
            let src_dir = src.header.ftype == FileType::Dir;
            if src_dir
                && sp != dp
                && !matches!(dest, Dest::Replace(_))
                && st.get(dp).nlink >= NLINK_MAX
            {
                return Err(errno(libc::EMLINK));
            }
            Ok(())
        })();
        if let Err(e) = checks {
            if let Some(i) = &ins {
                inner.abandon(i);
            }
            return Err(e);
        }
        let now = now_ns();
        let mut tx = inner.tx();
        let (pm, geo) = (&inner.pm, &inner.geo);
        let s_off = self.sidx.unit_off(geo, src.unit);
        let src_h = src.header;
        let mut last_link = None;
        // The source's header under its new name (the destination's entry, new or replaced).
        let moved = Header::new(src_h.ino, dname.len(), src_h.ftype);
        // An exchange's destination inode under the source's name.
        let slen = self.sname.len();
        let exchanged = |d: &Found| Header::new(d.header.ino, slen, d.header.ftype);
        match &dest {
            Dest::New => {
                let ins = ins.as_ref().expect("planned");
                let didx: &DirIndex = match self.didx.as_deref() {
                    Some(d) => d,
                    None => self.sidx,
                };
                inner.stage_insert(&mut tx, didx, dp, ins, &moved, dname);
                tx.write_u64(s_off, 0);
                dec(&mut st.get(sp).dir_entries);
                let d = st.get(dp);
                d.dir_entries = d.dir_entries.saturating_add(1);
                d.dir_units = ins.plan.new_hw;
                d.blocks = d.blocks.saturating_add(ins.claim.is_some() as u64);
            }
            Dest::Replace(d) => {
                let d_off = self.dst().unit_off(geo, d.unit);
                tx.write_u64(d_off, moved.encode());
                tx.write_u64(s_off, 0);
                dec(&mut st.get(sp).dir_entries);
                let v = st.get(d.header.ino);
                v.nlink = if d.header.ftype == FileType::Dir {
                    0
                } else {
                    v.nlink.saturating_sub(1)
                };
                v.ctime_ns = now;
                if v.nlink == 0 {
                    last_link = Some(d.header);
                }
                if d.header.ftype == FileType::Dir {
                    dec(&mut st.get(dp).nlink);
                }
            }
            Dest::Exchange(d) => {
                let d_off = self.dst().unit_off(geo, d.unit);
                tx.write_u64(d_off, moved.encode());
                tx.write_u64(s_off, exchanged(d).encode());
                st.get(d.header.ino).ctime_ns = now;
                if sp != dp && d.header.ftype == FileType::Dir {
                    st.get(d.header.ino).parent = sp;
                    dec(&mut st.get(dp).nlink);
                    inc(&mut st.get(sp).nlink);
                }
            }
        }
        if sp != dp && src_h.ftype == FileType::Dir {
            st.get(src_h.ino).parent = dp;
            dec(&mut st.get(sp).nlink);
            inc(&mut st.get(dp).nlink);
        }
        st.get(src_h.ino).ctime_ns = now;
        for p in [sp, dp] {
            let p = st.get(p);
            p.mtime_ns = now;
            p.ctime_ns = now;
        }
        st.write(inner, &mut tx);
        inner.note_dir_changed(sp);
        if dp != sp {
            inner.note_dir_changed(dp);
        }
        tx.commit();
        let _ = pm;
        // DRAM indexes follow the committed state.
        match &dest {
            Dest::New => {
                let ins = ins.as_ref().expect("planned");
                self.dst()
                    .apply_insert(&ins.plan, dh, &moved, dname, ins.claim.map(|c| c.pblk));
            }
            Dest::Replace(d) | Dest::Exchange(d) => self.dst().set_header(d.unit, dh, moved),
        }
        match &dest {
            Dest::Exchange(d) => self.sidx.set_header(src.unit, sh, exchanged(d)),
            _ => self.sidx.apply_remove(src.unit, src_h.units as u32, sh),
        }
        if let Some(v) = last_link {
            if v.ftype == FileType::Dir {
                inner.dirs.remove(v.ino);
            }
            if !inner.keep_unlinked(v.ino) {
                inner.free_inode(v.ino)?;
            }
        }
        Ok(())
    }
}

/// Increments a count read from media; a damaged count saturates instead of wrapping.
fn inc(v: &mut u32) {
    *v = v.saturating_add(1);
}

/// Decrements a count read from media; a damaged count stays at zero instead of wrapping.
fn dec(v: &mut u32) {
    *v = v.saturating_sub(1);
}
