//! `impl fuser::Filesystem` for nvmfs: each kernel request becomes one call of the core's
//! inode API. The adapter itself only translates (flags, times, types, errno), counts the
//! kernel's references to inodes and the open file handles, and computes the owner of new
//! inodes the way a kernel file system does (the caller's fsuid/fsgid, or the directory's
//! group under a setgid directory).
//!
//! Round trips. Each request is a round trip between the program and a serving thread,
//! which costs far more than the nvmfs call behind it, so the adapter declines the ones
//! it does not need: `flush` (every write is durable when it returns) and, unless `direct_io`
//! is set, `open` (replied ENOSYS: the kernel then opens files without asking and sends no
//! release either, and keeps its cached pages, as `FOPEN_KEEP_CACHE` would). A close is then
//! no request at all and an open only a lookup when the cached entry has expired.
//!
//! References. The kernel holds a "lookup count" on every inode it was handed in an entry
//! reply (lookup, create, mknod, mkdir, symlink, link, readdirplus) and gives them back with
//! forget, which it sends only once no open file, dentry or cwd uses the inode. While the
//! count or the number of counted open handles (directories, and files under `direct_io`) of
//! an inode is above zero the adapter holds one `Fs::open_ino` reference on it, so an inode
//! unlinked while the kernel still knows it (an open file, a cwd) stays readable and writable
//! and is freed at the last forget or release. A file handle of 0 is not counted: it is what
//! `create` hands out when opens are not counted, and its release (sent only until the
//! kernel learns that open is declined) changes nothing. `destroy` (and `Shutdown::shutdown`) drop whatever references remain, so an
//! unmount leaves no orphans.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use log::{error, warn};
use nvmfs::{Fs, Metadata, SetAttr, SetTime};
use parking_lot::{Mutex, RwLock};

use crate::options::MountConfig;

const SHARDS: usize = 64;
/// Largest read or write the kernel is told to send (it may send less).
pub(crate) const MAX_IO: u32 = 1 << 20;

thread_local! {
    /// Each serving thread's read buffer, kept between requests: a fresh zeroed megabyte per
    /// 1 MiB read cost as much as copying the data out of the image.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Kernel references to one inode.
#[derive(Default, Debug)]
struct Pin {
    lookups: u64,
    handles: u64,
}

struct Shared {
    /// The mounted file system; `None` once the session was shut down (requests then fail
    /// with ENOTCONN, as they would on an aborted connection).
    fs: RwLock<Option<Fs>>,
    pins: Vec<Mutex<HashMap<u64, Pin>>>,
    /// Whether FUSE_INIT granted FUSE over io_uring (set in `init`).
    uring_granted: AtomicBool,
    /// Requests crate::uring's threads dispatched, each adding its own count when it ends
    /// (no counter shared between CPUs on the request path).
    uring_served: AtomicU64,
}

impl Shared {
    /// Drops every reference the kernel still held (it sends no forget at unmount).
    fn release_all(&self, fs: &Fs) {
        for shard in &self.pins {
            for (ino, _) in shard.lock().drain() {
                if let Err(e) = fs.release_ino(ino) {
                    warn!("release of inode {ino} at unmount: {e}");
                }
            }
        }
    }

    /// Takes the file system out of the adapter (waiting for requests in progress), after
    /// dropping the kernel's references. Later requests fail with ENOTCONN.
    fn take(&self) -> Option<Fs> {
        let mut g = self.fs.write();
        let fs = g.take()?;
        self.release_all(&fs);
        Some(fs)
    }
}

/// Stops the adapter from outside the session (a signal handler): waits for requests in
/// progress, drops the kernel's references and lets go of the adapter's `Fs`, so the owner's
/// `Fs::unmount` can mark the image clean even while the kernel connection is still up.
#[derive(Clone)]
pub struct Shutdown(Arc<Shared>);

impl Shutdown {
    /// Whether FUSE_INIT granted FUSE over io_uring (`-o io_uring` on a kernel offering it):
    /// then the session serves requests from per-CPU rings once it runs.
    pub fn io_uring_granted(&self) -> bool {
        self.0.uring_granted.load(Ordering::Relaxed)
    }

    /// Requests served through the io_uring rings by ring threads that have ended: each adds
    /// its count when it ends, at unmount, so read this after the session ended.
    pub fn io_uring_requests(&self) -> u64 {
        self.0.uring_served.load(Ordering::Relaxed)
    }

    pub(crate) fn add_io_uring_requests(&self, n: u64) {
        self.0.uring_served.fetch_add(n, Ordering::Relaxed);
    }

    /// True if this call shut the adapter down (false if it already was).
    pub fn shutdown(&self) -> bool {
        self.0.take().is_some()
    }
}

/// The FUSE adapter. Create it with [`NvmFuse::new`] and hand it to a fuser `Session`.
pub struct NvmFuse {
    shared: Arc<Shared>,
    next_fh: AtomicU64,
    attr_ttl: Duration,
    entry_ttl: Duration,
    writeback_cache: bool,
    direct_io: bool,
    read_only: bool,
    /// `io_uring`: ask FUSE_INIT for FUSE over io_uring (then crate::uring serves).
    want_uring: bool,
}

/// errno for a core error: its raw errno, EIO for damaged media (logged), a best guess
/// from the kind otherwise.
fn to_errno(e: &io::Error) -> Errno {
    if e.raw_os_error().is_none() && e.kind() == io::ErrorKind::InvalidData {
        error!("damaged media: {e} (run nvmfs fsck after unmounting)");
    }
    Errno::from_i32(nvmfs::errno_of(e))
}

fn time(ns: i64) -> SystemTime {
    let d = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

fn nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

fn set_time(t: Option<TimeOrNow>) -> Option<SetTime> {
    t.map(|t| match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(nanos(t)),
    })
}

fn kind(t: nvmfs::FileType) -> FileType {
    match t {
        nvmfs::FileType::File => FileType::RegularFile,
        nvmfs::FileType::Dir => FileType::Directory,
        nvmfs::FileType::Symlink => FileType::Symlink,
        nvmfs::FileType::Fifo => FileType::NamedPipe,
        nvmfs::FileType::CharDevice => FileType::CharDevice,
        nvmfs::FileType::BlockDevice => FileType::BlockDevice,
        nvmfs::FileType::Socket => FileType::Socket,
    }
}

fn attr(m: &Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(m.ino),
        size: m.size,
        blocks: m.st_blocks(),
        atime: time(m.atime_ns),
        mtime: time(m.mtime_ns),
        ctime: time(m.ctime_ns),
        crtime: time(m.ctime_ns),
        kind: kind(m.file_type),
        perm: (m.perm & 0o7777) as u16,
        nlink: m.nlink,
        uid: m.uid,
        gid: m.gid,
        rdev: m.rdev as u32,
        blksize: 4096,
        flags: 0,
    }
}

fn name(n: &OsStr) -> &[u8] {
    n.as_bytes()
}

impl NvmFuse {
    /// An adapter serving `fs` with the caching and I/O settings of `cfg`, and the handle
    /// that can shut it down from another thread.
    pub fn new(fs: Fs, cfg: &MountConfig) -> (NvmFuse, Shutdown) {
        let shared = Arc::new(Shared {
            fs: RwLock::new(Some(fs)),
            pins: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            uring_granted: AtomicBool::new(false),
            uring_served: AtomicU64::new(0),
        });
        let a = NvmFuse {
            shared: shared.clone(),
            next_fh: AtomicU64::new(1),
            attr_ttl: cfg.attr_timeout,
            entry_ttl: cfg.entry_timeout,
            writeback_cache: cfg.writeback_cache,
            direct_io: cfg.direct_io,
            read_only: cfg.read_only,
            want_uring: cfg.io_uring,
        };
        (a, Shutdown(shared))
    }

    /// Runs `f` on the file system, or fails with ENOTCONN after a shutdown.
    fn with<R>(&self, f: impl FnOnce(&Fs) -> io::Result<R>) -> Result<R, Errno> {
        let g = self.shared.fs.read();
        match g.as_ref() {
            Some(fs) => f(fs).map_err(|e| to_errno(&e)),
            None => Err(Errno::ENOTCONN),
        }
    }

    /// Adds `lookups` kernel references and `handles` open handles to `ino`; the first
    /// reference takes an `open_ino` reference in the core, the last one drops it.
    fn adjust(&self, fs: &Fs, ino: u64, lookups: i64, handles: i64) -> io::Result<()> {
        let mut shard = self.shared.pins[ino as usize % SHARDS].lock();
        let new = !shard.contains_key(&ino);
        if new {
            if lookups < 0 || handles < 0 {
                warn!("kernel dropped a reference to inode {ino} it did not hold");
                return Ok(());
            }
            fs.open_ino(ino)?;
        }
        let p = shard.entry(ino).or_default();
        p.lookups = p.lookups.saturating_add_signed(lookups);
        p.handles = p.handles.saturating_add_signed(handles);
        if p.lookups == 0 && p.handles == 0 {
            shard.remove(&ino);
            // Under the shard lock, so a concurrent first reference cannot slip in between
            // the count reaching zero and the core reference going.
            fs.release_ino(ino)?;
        }
        Ok(())
    }

    /// Replies with an entry for `m`, counting the kernel's new reference first.
    fn entry(&self, fs: &Fs, m: &Metadata) -> io::Result<(FileAttr, Generation)> {
        self.adjust(fs, m.ino, 1, 0)?;
        Ok((attr(m), Generation(m.generation as u64)))
    }

    fn reply_entry(&self, reply: ReplyEntry, r: Result<(FileAttr, Generation), Errno>) {
        match r {
            Ok((a, g)) => reply.entry_with_ttls(&self.attr_ttl, &self.entry_ttl, &a, g),
            Err(e) => reply.error(e),
        }
    }

    /// Looks `name` up and pins what it names. The name is looked up again after the pin:
    /// if it moved in between (and the inode number might have been reused), try again.
    fn lookup_pinned(&self, fs: &Fs, parent: u64, name: &[u8]) -> io::Result<Metadata> {
        let mut tries = 0;
        loop {
            let (ino, _) = fs.lookup_ino(parent, name)?;
            match fs.open_ino(ino) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && tries < 8 => {
                    tries += 1;
                    continue;
                }
                Err(e) => return Err(e),
            }
            let still = fs.lookup_ino(parent, name).map(|(i, _)| i);
            if still.as_ref().ok() != Some(&ino) && tries < 8 {
                fs.release_ino(ino)?;
                tries += 1;
                continue;
            }
            // Our own pin keeps the inode until the kernel's reference is recorded.
            let r = fs
                .getattr(ino)
                .and_then(|m| self.adjust(fs, ino, 1, 0).map(|_| m));
            fs.release_ino(ino)?;
            return r;
        }
    }

    /// Owner of a new inode in `parent`: the caller, with the group of a setgid directory
    /// (whose subdirectories inherit the setgid bit), as Linux's inode_init_owner does. The
    /// kernel has already applied the umask and stripped a setgid bit the caller may not set.
    fn new_owner(
        fs: &Fs,
        req: &Request,
        parent: u64,
        mode: u32,
        dir: bool,
    ) -> io::Result<(u32, u32, u32)> {
        let p = fs.getattr(parent)?;
        if p.perm & libc::S_ISGID != 0 {
            let mode = if dir { mode | libc::S_ISGID } else { mode };
            Ok((req.uid(), p.gid, mode))
        } else {
            Ok((req.uid(), req.gid(), mode))
        }
    }

    fn open_flags(&self) -> FopenFlags {
        if self.direct_io {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            // The kernel's cached pages of a file stay valid across opens: the mount holds
            // the image's exclusive lock (a read-only one shares it with readers only), so
            // every change to file data arrives through this mount, and the kernel updates
            // or drops its pages for each (write-through writes, truncate, punch hole, copy
            // range). Without this flag every open would drop them.
            FopenFlags::FOPEN_KEEP_CACHE
        }
    }

    /// 1 when open file handles are counted (under `direct_io`, where opens are not
    /// declined), else 0.
    fn counted_handles(&self) -> i64 {
        i64::from(self.direct_io)
    }

    /// The handle `create` gives a new open file: a counted one under `direct_io`, else 0.
    fn file_fh(&self) -> FileHandle {
        if self.direct_io {
            self.new_fh()
        } else {
            FileHandle(0)
        }
    }

    fn new_fh(&self) -> FileHandle {
        FileHandle(self.next_fh.fetch_add(1, Ordering::Relaxed))
    }
}

impl Filesystem for NvmFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(MAX_IO);
        let caps = config.capabilities();
        let mut want = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_MAX_PAGES;
        if self.writeback_cache {
            if caps.contains(InitFlags::FUSE_WRITEBACK_CACHE) {
                want |= InitFlags::FUSE_WRITEBACK_CACHE;
            } else {
                warn!("writeback_cache: the kernel does not offer it; writes stay synchronous");
            }
        }
        if self.want_uring && caps.contains(InitFlags::FUSE_OVER_IO_URING) {
            want |= InitFlags::FUSE_OVER_IO_URING;
            self.shared.uring_granted.store(true, Ordering::Relaxed);
        }
        let _ = config.add_capabilities(want & caps);
        Ok(())
    }

    fn destroy(&mut self) {
        self.shared.take();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        let r = self.with(|fs| {
            let m = self.lookup_pinned(fs, parent.0, name(n))?;
            Ok((attr(&m), Generation(m.generation as u64)))
        });
        self.reply_entry(reply, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _ = self.with(|fs| self.adjust(fs, ino.0, -(nlookup.min(i64::MAX as u64) as i64), 0));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.with(|fs| fs.getattr(ino.0)) {
            Ok(m) => reply.attr(&self.attr_ttl, &attr(&m)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Permission checks and the setuid/setgid clearing that chown, truncate and write
        // by an unprivileged caller imply are done by the kernel (default_permissions, and
        // no FUSE_HANDLE_KILLPRIV): it sends the new mode along with the change.
        let a = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: set_time(atime),
            mtime: set_time(mtime),
        };
        match self.with(|fs| fs.setattr(ino.0, &a)) {
            Ok(m) => reply.attr(&self.attr_ttl, &attr(&m)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.with(|fs| fs.readlink(ino.0)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = self.with(|fs| {
            let (uid, gid, mode) = Self::new_owner(fs, req, parent.0, mode, false)?;
            let m = fs.mknod(parent.0, name(n), mode, uid, gid, rdev as u64)?;
            self.entry(fs, &m)
        });
        self.reply_entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.with(|fs| {
            let (uid, gid, mode) = Self::new_owner(fs, req, parent.0, mode & 0o7777, true)?;
            let m = fs.mkdir(parent.0, name(n), mode, uid, gid)?;
            self.entry(fs, &m)
        });
        self.reply_entry(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        match self.with(|fs| fs.unlink(parent.0, name(n))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        match self.with(|fs| fs.rmdir(parent.0, name(n))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.with(|fs| {
            let (uid, gid, _) = Self::new_owner(fs, req, parent.0, 0o777, false)?;
            let m = fs.symlink(
                parent.0,
                name(link_name),
                target.as_os_str().as_bytes(),
                uid,
                gid,
            )?;
            self.entry(fs, &m)
        });
        self.reply_entry(reply, r);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(!(RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE)) {
            // RENAME_WHITEOUT (overlayfs upper layers) is not supported.
            return reply.error(Errno::EINVAL);
        }
        let f = nvmfs::RenameFlags {
            noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
        };
        match self.with(|fs| fs.rename(parent.0, name(n), newparent.0, name(newname), f)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.with(|fs| {
            let m = fs.link(ino.0, newparent.0, name(newname))?;
            self.entry(fs, &m)
        });
        self.reply_entry(reply, r);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if !self.direct_io {
            // Declined (see the module's "Round trips"): the lookup count keeps the inode
            // alive while the kernel has it open.
            reply.error(Errno::ENOSYS);
            return;
        }
        // Access modes were checked by the kernel; O_TRUNC arrives as a setattr before the
        // open (FUSE_ATOMIC_O_TRUNC is not negotiated), O_APPEND as write offsets.
        match self.with(|fs| self.adjust(fs, ino.0, 0, 1)) {
            Ok(()) => reply.opened(self.new_fh(), self.open_flags()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        READ_BUF.with_borrow_mut(|buf| {
            let len = size.min(MAX_IO) as usize;
            if buf.len() < len {
                buf.resize(len, 0);
            }
            match self.with(|fs| fs.read(ino.0, offset, &mut buf[..len])) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(e),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // Durable when Fs::write returns, so before the reply reaches the program.
        match self.with(|fs| fs.write(ino.0, offset, data)) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to flush: writes are durable when they return. ENOSYS makes the kernel
        // stop sending flush, saving a round trip on every close.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if fh.0 == 0 {
            reply.ok();
            return;
        }
        match self.with(|fs| self.adjust(fs, ino.0, 0, -1)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.with(|fs| fs.sync_all()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|fs| self.adjust(fs, ino.0, 0, 1)) {
            Ok(()) => reply.opened(self.new_fh(), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.with(|fs| {
            fs.readdir(ino.0, offset, |e| {
                !reply.add(INodeNo(e.ino), e.offset, kind(e.file_type), e.file_name())
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let r = self.with(|fs| {
            let mut err = None;
            fs.readdir(ino.0, offset, |e| {
                // The callback runs under the directory's read lock: the entry cannot go
                // away, so the inode it names is linked and its number is not reused.
                let dots = e.name == b"." || e.name == b"..";
                let m = match fs.getattr(e.ino) {
                    Ok(m) => m,
                    Err(x) => {
                        err = Some(x);
                        return false;
                    }
                };
                if !dots {
                    if let Err(x) = self.adjust(fs, e.ino, 1, 0) {
                        err = Some(x);
                        return false;
                    }
                }
                let full = reply.add(
                    INodeNo(e.ino),
                    e.offset,
                    e.file_name(),
                    &self.entry_ttl,
                    &attr(&m),
                    Generation(m.generation as u64),
                );
                if full && !dots {
                    // Not sent: the kernel takes no reference.
                    if let Err(x) = self.adjust(fs, e.ino, -1, 0) {
                        err = Some(x);
                    }
                }
                !full
            })?;
            err.map_or(Ok(()), Err)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        match self.with(|fs| self.adjust(fs, ino.0, 0, -1)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.with(|fs| fs.sync_all()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.with(|fs| Ok(fs.statfs())) {
            Ok(s) => reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_free,
                s.inodes,
                s.inodes_free,
                s.block_size as u32,
                s.name_max as u32,
                s.block_size as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    // Extended attributes are not stored: ENOSYS makes the kernel answer EOPNOTSUPP itself
    // from then on (and skip the security.capability probe on every write).
    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _n: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // With default_permissions (always set) the kernel checks access itself and does not
        // ask; answer for existence and read-only media in case it does.
        let r = self.with(|fs| {
            fs.getattr(ino.0)?;
            if mask.contains(AccessFlags::W_OK) && self.read_only {
                return Err(io::Error::from_raw_os_error(libc::EROFS));
            }
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.with(|fs| {
            let (uid, gid, mode) = Self::new_owner(fs, req, parent.0, mode, false)?;
            let mode = if mode & libc::S_IFMT == 0 {
                mode | libc::S_IFREG
            } else {
                mode
            };
            let m = match fs.mknod(parent.0, name(n), mode, uid, gid, 0) {
                Ok(m) => {
                    self.adjust(fs, m.ino, 1, self.counted_handles())?;
                    m
                }
                // Another creator won the race for the name: open theirs, as open(2) with
                // O_CREAT but without O_EXCL does.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) && flags & libc::O_EXCL == 0 => {
                    let m = self.lookup_pinned(fs, parent.0, name(n))?;
                    if !m.is_file() {
                        self.adjust(fs, m.ino, -1, 0)?;
                        return Err(io::Error::from_raw_os_error(if m.is_dir() {
                            libc::EISDIR
                        } else {
                            libc::EEXIST
                        }));
                    }
                    self.adjust(fs, m.ino, 0, self.counted_handles())?;
                    if flags & libc::O_TRUNC != 0 && m.size > 0 {
                        let t = SetAttr {
                            size: Some(0),
                            ..Default::default()
                        };
                        match fs.setattr(m.ino, &t) {
                            Ok(m) => m,
                            Err(e) => {
                                self.adjust(fs, m.ino, -1, -self.counted_handles())?;
                                return Err(e);
                            }
                        }
                    } else {
                        m
                    }
                }
                Err(e) => return Err(e),
            };
            Ok(m)
        });
        match r {
            Ok(m) => reply.created(
                &self.entry_ttl,
                &attr(&m),
                Generation(m.generation as u64),
                self.file_fh(),
                self.open_flags(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.with(|fs| fs.fallocate(ino.0, mode, offset, length)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: i64,
        _whence: i32,
        reply: ReplyLseek,
    ) {
        // The kernel then seeks itself (SEEK_DATA/SEEK_HOLE see one data extent up to EOF).
        reply.error(Errno::ENOSYS);
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        // The kernel falls back to reading and writing.
        reply.error(Errno::ENOSYS);
    }
}
