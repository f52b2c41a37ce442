//! The std::fs-like API: paths resolved from the root ("a/b" and "/a/b" are the same),
//! symlinks followed (at most 40), `File` with Read/Write/Seek and positional I/O.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::data::{CacheSlot, TranslationCache};
use super::node::{retry, Target};
use super::ops::{SetAttr, SetTime, ROOT};
use super::{errno, DirEntry, Fs, Metadata, RenameFlags};
use crate::layout::inode::FileType;

const SYMLINK_FOLLOW_MAX: usize = 40;

/// What a path's last component most likely names. A file's lookup skips the cache of
/// directory answers, where it would only miss (`Inner::lookup_leaf_at`); a directory's asks
/// it. Either finds the same answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    Dir,
    File,
}

fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
}

/// The caller's effective (uid, gid), the owner of what it creates.
fn ids() -> (u32, u32) {
    // SAFETY: plain getters without side effects.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

impl Fs {
    /// Resolves `path` to (inode, type); follows a final symlink when `follow`.
    pub fn resolve(&self, path: impl AsRef<Path>, follow: bool) -> io::Result<(u64, FileType)> {
        let (t, ft) = retry(|| self.resolve_at(path.as_ref(), follow, Last::File))?;
        Ok((t.ino as u64, ft))
    }

    /// Resolves `path` to the inode it names now, with its generation (`node.rs`).
    fn resolve_at(&self, path: &Path, follow: bool, last: Last) -> io::Result<(Target, FileType)> {
        let bytes = path.as_os_str().as_bytes();
        let mut cur = (Target::any(ROOT as u32), FileType::Dir);
        let mut iter = components(bytes).peekable();
        while let Some(c) = iter.next() {
            if cur.1 != FileType::Dir {
                return Err(errno(libc::ENOTDIR));
            }
            let next = match iter.peek() {
                None if last == Last::File => self.inner.lookup_leaf_at(cur.0, c)?,
                _ => self.inner.lookup_at(cur.0, c)?,
            };
            if next.1 == FileType::Symlink && (iter.peek().is_some() || follow) {
                // Rare path: rebuild the remaining components behind the link target.
                let rest: Vec<&[u8]> = iter.collect();
                return self.resolve_slow(cur.0, next.0, &rest, follow);
            }
            cur = next;
        }
        Ok(cur)
    }

    fn resolve_slow(
        &self,
        dir: Target,
        link: Target,
        rest: &[&[u8]],
        follow: bool,
    ) -> io::Result<(Target, FileType)> {
        let mut queue: Vec<Vec<u8>> = rest.iter().rev().map(|c| c.to_vec()).collect();
        let mut cur = (dir, FileType::Dir);
        let mut pending_link = Some(link);
        let mut followed = 0;
        loop {
            if let Some(l) = pending_link.take() {
                followed += 1;
                if followed > SYMLINK_FOLLOW_MAX {
                    return Err(errno(libc::ELOOP));
                }
                let target = self.readlink_at(l)?;
                if target.first() == Some(&b'/') {
                    cur = (Target::any(ROOT as u32), FileType::Dir);
                }
                queue.extend(
                    components(&target)
                        .rev()
                        .map(|c| c.to_vec())
                        .collect::<Vec<_>>(),
                );
            }
            let Some(c) = queue.pop() else { return Ok(cur) };
            if cur.1 != FileType::Dir {
                return Err(errno(libc::ENOTDIR));
            }
            let next = self.inner.lookup_at(cur.0, &c)?;
            if next.1 == FileType::Symlink && (!queue.is_empty() || follow) {
                pending_link = Some(next.0);
            } else {
                cur = next;
            }
        }
    }

    /// Splits `path` into (parent directory, final name).
    fn resolve_parent_at<'p>(&self, path: &'p Path) -> io::Result<(Target, &'p [u8])> {
        let bytes = path.as_os_str().as_bytes();
        let trimmed = bytes.strip_suffix(b"/").unwrap_or(bytes);
        let (dir, name) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (&b""[..], trimmed),
        };
        if name.is_empty() || name == b"." || name == b".." {
            return Err(errno(if name.is_empty() {
                libc::EEXIST
            } else {
                libc::EINVAL
            }));
        }
        let dir = Path::new(std::ffi::OsStr::from_bytes(dir));
        let (parent, ft) = self.resolve_at(dir, true, Last::Dir)?;
        if ft != FileType::Dir {
            return Err(errno(libc::ENOTDIR));
        }
        Ok((parent, name))
    }

    /// Resolves `path` and runs `f` on what it names, again from the start if `f` finds the
    /// inode changed since the lookup (`node::retry`).
    fn on_path<R>(
        &self,
        path: &Path,
        follow: bool,
        last: Last,
        f: impl Fn(Target, FileType) -> io::Result<R>,
    ) -> io::Result<R> {
        retry(|| {
            let (t, ft) = self.resolve_at(path, follow, last)?;
            f(t, ft)
        })
    }

    /// Resolves the parent of `path` and runs `f` on it and the final name, as `on_path`.
    fn on_parent<R>(
        &self,
        path: &Path,
        f: impl Fn(Target, &[u8]) -> io::Result<R>,
    ) -> io::Result<R> {
        retry(|| {
            let (parent, name) = self.resolve_parent_at(path)?;
            f(parent, name)
        })
    }

    pub fn create_dir(&self, path: impl AsRef<Path>) -> io::Result<()> {
        self.on_parent(path.as_ref(), |p, name| {
            self.mkdir_at(p, name, 0o755, ids()).map(|_| ())
        })
    }

    pub fn create_dir_all(&self, path: impl AsRef<Path>) -> io::Result<()> {
        retry(|| self.create_dir_all_once(path.as_ref().as_os_str().as_bytes()))
    }

    fn create_dir_all_once(&self, bytes: &[u8]) -> io::Result<()> {
        let mut cur = Target::any(ROOT as u32);
        for c in components(bytes) {
            cur = match self.inner.lookup_at(cur, c) {
                Ok((t, FileType::Dir)) => t,
                Ok((_, FileType::Symlink)) => {
                    let prefix = &bytes[..c.as_ptr() as usize - bytes.as_ptr() as usize + c.len()];
                    let prefix = Path::new(std::ffi::OsStr::from_bytes(prefix));
                    match self.resolve_at(prefix, true, Last::Dir)? {
                        (t, FileType::Dir) => t,
                        _ => return Err(errno(libc::ENOTDIR)),
                    }
                }
                Ok(_) => return Err(errno(libc::ENOTDIR)),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    match self.mkdir_at(cur, c, 0o755, ids()) {
                        Ok(m) => Target {
                            ino: m.ino as u32,
                            generation: Some(m.generation),
                        },
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                            self.inner.lookup_at(cur, c)?.0
                        }
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            };
        }
        Ok(())
    }

    pub fn remove_dir(&self, path: impl AsRef<Path>) -> io::Result<()> {
        self.on_parent(path.as_ref(), |p, name| self.remove_at(p, name, true))
    }

    pub fn remove_file(&self, path: impl AsRef<Path>) -> io::Result<()> {
        self.on_parent(path.as_ref(), |p, name| self.remove_at(p, name, false))
    }

    /// Renames `from` to `to`, replacing `to` if it exists (rename(2)).
    pub fn rename_path(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
        retry(|| {
            let (sp, sn) = self.resolve_parent_at(from.as_ref())?;
            let (dp, dn) = self.resolve_parent_at(to.as_ref())?;
            super::rename::rename(&self.inner, sp, sn, dp, dn, RenameFlags::default())
        })
    }

    pub fn hard_link(&self, original: impl AsRef<Path>, link: impl AsRef<Path>) -> io::Result<()> {
        self.on_path(original.as_ref(), false, Last::File, |t, _| {
            let (dp, dn) = self.resolve_parent_at(link.as_ref())?;
            self.link_at(t, dp, dn).map(|_| ())
        })
    }

    /// Creates a symlink at `link` pointing to `original` (std::os::unix::fs::symlink order).
    pub fn symlink_path(
        &self,
        original: impl AsRef<Path>,
        link: impl AsRef<Path>,
    ) -> io::Result<()> {
        let target = original.as_ref().as_os_str().as_bytes();
        self.on_parent(link.as_ref(), |p, name| {
            self.symlink_at(p, name, target, ids()).map(|_| ())
        })
    }

    pub fn read_link(&self, path: impl AsRef<Path>) -> io::Result<std::path::PathBuf> {
        let target = self.on_path(path.as_ref(), false, Last::File, |t, _| self.readlink_at(t))?;
        Ok(std::path::PathBuf::from(
            std::ffi::OsString::from_vec_compat(target),
        ))
    }

    /// Attributes, following a final symlink.
    pub fn metadata(&self, path: impl AsRef<Path>) -> io::Result<Metadata> {
        self.on_path(path.as_ref(), true, Last::File, |t, _| self.getattr_at(t))
    }

    /// Attributes of the path itself (a symlink is not followed).
    pub fn symlink_metadata(&self, path: impl AsRef<Path>) -> io::Result<Metadata> {
        self.on_path(path.as_ref(), false, Last::File, |t, _| self.getattr_at(t))
    }

    fn setattr_path(&self, path: &Path, attr: &SetAttr) -> io::Result<()> {
        self.on_path(path, true, Last::File, |t, _| {
            self.setattr_at(t, attr).map(|_| ())
        })
    }

    /// Sets permission bits (chmod).
    pub fn set_permissions(&self, path: impl AsRef<Path>, perm: u32) -> io::Result<()> {
        let attr = SetAttr {
            mode: Some(perm),
            ..Default::default()
        };
        self.setattr_path(path.as_ref(), &attr)
    }

    /// Sets access and modification times (utimensat); `None` leaves one alone.
    pub fn set_times(
        &self,
        path: impl AsRef<Path>,
        atime: Option<SetTime>,
        mtime: Option<SetTime>,
    ) -> io::Result<()> {
        let attr = SetAttr {
            atime,
            mtime,
            ..Default::default()
        };
        self.setattr_path(path.as_ref(), &attr)
    }

    /// Sets owner and group (chown); `None` leaves one alone.
    pub fn set_owner(
        &self,
        path: impl AsRef<Path>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> io::Result<()> {
        let attr = SetAttr {
            uid,
            gid,
            ..Default::default()
        };
        self.setattr_path(path.as_ref(), &attr)
    }

    /// The entries of a directory, without "." and "..".
    pub fn read_dir(&self, path: impl AsRef<Path>) -> io::Result<Vec<DirEntry>> {
        self.on_path(path.as_ref(), true, Last::Dir, |t, ft| {
            if ft != FileType::Dir {
                return Err(errno(libc::ENOTDIR));
            }
            let mut out = Vec::new();
            self.readdir_at(t, 2, |e| {
                out.push(e);
                true
            })?;
            Ok(out)
        })
    }

    /// Reads a whole file.
    pub fn read_file(&self, path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
        let mut f = OpenOptions::new().read(true).open(self, path)?;
        let mut v = Vec::new();
        f.read_to_end(&mut v)?;
        Ok(v)
    }

    /// Creates or replaces a file with `data`.
    pub fn write_file(&self, path: impl AsRef<Path>, data: &[u8]) -> io::Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(self, path)?;
        f.write_all_at(data, 0)
    }

    fn open_path(&self, path: &Path, o: &OpenOptions) -> io::Result<File> {
        let writable = o.write || o.append;
        if (o.create || o.create_new || o.truncate) && !writable {
            return Err(errno(libc::EINVAL));
        }
        if components(path.as_os_str().as_bytes()).next().is_none() {
            self.open_at(Target::any(ROOT as u32))?;
            return self.open_resolved(ROOT, FileType::Dir, o);
        }
        retry(|| self.open_path_once(path, o))
    }

    /// One attempt of `open_path` (ESTALE: the inode a name led to changed meanwhile).
    fn open_path_once(&self, path: &Path, o: &OpenOptions) -> io::Result<File> {
        let (parent, name) = self.resolve_parent_at(path)?;
        loop {
            match self.inner.lookup_leaf_at(parent, name) {
                Ok(_) if o.create_new => return Err(errno(libc::EEXIST)),
                Ok((t, ft)) => {
                    let (t, ft) = match ft {
                        FileType::Symlink => self.resolve_at(path, true, Last::File)?,
                        _ => (t, ft),
                    };
                    self.open_at(t)?;
                    return self.open_resolved(t.ino as u64, ft, o);
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && (o.create || o.create_new) => {
                    let (uid, gid) = ids();
                    match self.create_opened(parent, name, o.mode, uid, gid) {
                        // Lost a race with another creator: open theirs (unless create_new).
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) && !o.create_new => {
                            continue
                        }
                        Err(e) => return Err(e),
                        Ok(ino) => {
                            // A new file is empty: truncate has nothing to do.
                            let o = OpenOptions {
                                truncate: false,
                                ..o.clone()
                            };
                            return self.open_resolved(ino, FileType::File, &o);
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A handle on inode `ino` (any type; reads and writes need a regular file), taking an
    /// open reference, as if opened by path with `read` / `write` access: for callers that
    /// resolve paths themselves (the `nvmfs run` preload) or reopen an inherited description.
    pub fn file_from_ino(&self, ino: u64, read: bool, write: bool) -> io::Result<File> {
        self.open_ino(ino)?;
        let ft = match self.getattr(ino) {
            Ok(m) => m.file_type,
            Err(e) => {
                self.release_ino(ino)?;
                return Err(e);
            }
        };
        let o = OpenOptions {
            read,
            write,
            ..OpenOptions::default()
        };
        self.open_resolved(ino, ft, &o)
    }

    /// Finishes an open of `ino`, which already holds an open reference.
    fn open_resolved(&self, ino: u64, ft: FileType, o: &OpenOptions) -> io::Result<File> {
        let file = File {
            fs: self.clone(),
            ino: ino as u32,
            readable: o.read,
            writable: o.write || o.append,
            append: o.append,
            pos: 0,
            cache: CacheSlot::default(),
        };
        if ft == FileType::Dir && file.writable {
            return Err(errno(libc::EISDIR));
        }
        if o.truncate && ft == FileType::File {
            self.setattr(
                ino,
                &SetAttr {
                    size: Some(0),
                    ..Default::default()
                },
            )?;
        }
        Ok(file)
    }
}

/// Compatibility shim: build an OsString from bytes on Unix.
trait FromVecCompat {
    fn from_vec_compat(v: Vec<u8>) -> Self;
}

impl FromVecCompat for std::ffi::OsString {
    fn from_vec_compat(v: Vec<u8>) -> Self {
        use std::os::unix::ffi::OsStringExt;
        std::ffi::OsString::from_vec(v)
    }
}

/// How to open a file, as std::fs::OpenOptions.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o644,
        }
    }
}

impl OpenOptions {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn read(&mut self, v: bool) -> &mut Self {
        self.read = v;
        self
    }
    pub fn write(&mut self, v: bool) -> &mut Self {
        self.write = v;
        self
    }
    pub fn append(&mut self, v: bool) -> &mut Self {
        self.append = v;
        self
    }
    pub fn truncate(&mut self, v: bool) -> &mut Self {
        self.truncate = v;
        self
    }
    pub fn create(&mut self, v: bool) -> &mut Self {
        self.create = v;
        self
    }
    pub fn create_new(&mut self, v: bool) -> &mut Self {
        self.create_new = v;
        self
    }
    /// Permission bits for a created file (default 0o644).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode & 0o7777;
        self
    }
    pub fn open(&self, fs: &Fs, path: impl AsRef<Path>) -> io::Result<File> {
        fs.open_path(path.as_ref(), self)
    }
}

/// An open file. Dropping it closes it; an unlinked file's space is freed at the last close.
pub struct File {
    fs: Fs,
    ino: u32,
    readable: bool,
    writable: bool,
    append: bool,
    pos: u64,
    cache: CacheSlot,
}

impl File {
    pub fn ino(&self) -> u64 {
        self.ino as u64
    }

    fn with_cache<R>(&self, f: impl FnOnce(&mut TranslationCache) -> R) -> R {
        self.cache.with(f)
    }

    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if !self.readable {
            return Err(errno(libc::EBADF));
        }
        self.with_cache(|c| self.fs.inner.read_data(self.ino, offset, buf, c))
    }

    /// Writes at `offset` (at EOF if opened for append, as Linux pwrite does).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        if !self.writable {
            return Err(errno(libc::EBADF));
        }
        self.with_cache(|c| {
            self.fs
                .inner
                .write_data(self.ino, offset, buf, self.append, c)
        })
        .map(|(n, _)| n)
    }

    /// Writes at the end of the file, atomically with finding it (O_APPEND): returns the
    /// bytes written and the new size.
    pub fn append(&self, buf: &[u8]) -> io::Result<(usize, u64)> {
        if !self.writable {
            return Err(errno(libc::EBADF));
        }
        self.with_cache(|c| self.fs.inner.write_data(self.ino, 0, buf, true, c))
    }

    pub fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "failed to fill whole buffer",
                    ))
                }
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    pub fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.write_at(buf, offset)?;
            buf = &buf[n..];
            offset += n as u64;
        }
        Ok(())
    }

    pub fn set_len(&self, size: u64) -> io::Result<()> {
        if !self.writable {
            return Err(errno(libc::EINVAL));
        }
        self.fs
            .setattr(
                self.ino as u64,
                &SetAttr {
                    size: Some(size),
                    ..Default::default()
                },
            )
            .map(|_| ())
    }

    pub fn metadata(&self) -> io::Result<Metadata> {
        self.fs.getattr(self.ino as u64)
    }

    /// Every operation is already durable; this only matters for an image on an ordinary
    /// (non-DAX, non-tmpfs) file, where it asks the OS to write the mapping back.
    pub fn sync_all(&self) -> io::Result<()> {
        self.fs.inner.pm.sync_backing()
    }

    pub fn sync_data(&self) -> io::Result<()> {
        self.sync_all()
    }

    /// Maps `[0, size)` of the file for direct access (DAX-style `mmap(MAP_SHARED)`): loads
    /// and stores on the returned [`DirectMap`] are plain copies out of and into the media,
    /// without journal or fence; stores are durable only after [`DirectMap::sync`] and are
    /// not atomic. A handle opened for writing (on a read-write mount) gives a writable map
    /// and allocates the file's holes first (like `MAP_POPULATE`); a read-only handle gives a
    /// read-only map and fails with `EINVAL` if the file has holes. `EACCES` if the handle is
    /// not open for reading. While the map lives, a truncate below its length or a punch hole
    /// starting below it fails with `EBUSY`; unlink is deferred as for an open file.
    pub fn map_direct(&self) -> io::Result<super::DirectMap> {
        if !self.readable {
            return Err(errno(libc::EACCES));
        }
        super::DirectMap::new(&self.fs, self.ino, self.writable)
    }

    /// fallocate(2) on this file.
    pub fn allocate(&self, mode: i32, offset: u64, len: u64) -> io::Result<()> {
        if !self.writable {
            return Err(errno(libc::EBADF));
        }
        self.fs.fallocate(self.ino as u64, mode, offset, len)
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.writable {
            return Err(errno(libc::EBADF));
        }
        let pos = self.pos;
        let (n, size) =
            self.with_cache(|c| self.fs.inner.write_data(self.ino, pos, buf, self.append, c))?;
        self.pos = if self.append { size } else { pos + n as u64 };
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let (base, delta) = match to {
            SeekFrom::Start(p) => {
                self.pos = p;
                return Ok(p);
            }
            SeekFrom::End(d) => (self.metadata()?.size, d),
            SeekFrom::Current(d) => (self.pos, d),
        };
        let p = base
            .checked_add_signed(delta)
            .ok_or_else(|| errno(libc::EINVAL))?;
        self.pos = p;
        Ok(p)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = self.fs.release_ino(self.ino as u64);
    }
}
