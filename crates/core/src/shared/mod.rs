//! Shared mounts: several processes using one image at the same time, each running the file
//! system in-process (the `nvmfs run` preload library is one per process).
//!
//! Design (ARCHITECTURE.md §7, GUARANTEES.md §8):
//! - **One process at a time runs operations** on the image, any number of its threads at
//!   once: the ownership gate (`gate.rs`), a word in the coordination file (`coord.rs`).
//!   Within the owner, the core's own locks order threads as in a plain mount.
//! - **DRAM state follows the image when it changes hands.** Directory changes are logged
//!   (inode number, sequence) in a ring; a process that takes the gate from another drops
//!   the indexes of the directories changed since it last had it. The used-block count lives
//!   in the coordination file. Inode numbers are checked against the media when allocated
//!   (`Inner::alloc_inode`), and pools are refilled from the table when they run low.
//! - **Open file descriptions are kernel objects**: each is a descriptor of one of the
//!   description files beside the coordination file, holding a byte-range lock on its slot,
//!   so the kernel shares it across fork, dup and exec and drops it when its last descriptor
//!   closes, even when the process is killed. The inode, shared offset and status flags live
//!   in its slot (in the coordination file); an inode is open somewhere if a slot whose lock
//!   is held names it.
//!   Unlinking a file some description still holds leaves an orphan that the last closer,
//!   the next process to detach, or the next recovery frees.
//! - **A process killed mid-operation** leaves the gate counted and its owner's lock gone:
//!   the next process to wait notices (`alive`), takes the gate and runs the recovery an
//!   unclean mount would, on the live image (`Inner::recover_from_peer_crash`).
//! - A plain (exclusive) mount of the same image, the FUSE mount among them, is refused
//!   while shared mounts exist, and the other way round (`flock` shared vs exclusive).

mod coord;
mod gate;
mod sys;

use std::cell::Cell;
use std::io;
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::fs::mount::{lock_image, open_image, SharedCount, SharedParts};
use crate::fs::Peers;
use crate::layout::BLOCK_SIZE;
use crate::media::Pm;
use crate::{Fs, MountOptions};
pub use coord::{is_desc_file, DESC_FILES};

/// Removes the coordination file at `coord` and its description files, which a process killed
/// while attached leaves in /dev/shm (for a harness that killed it; the next first process to
/// attach to any image also removes those nobody uses).
pub fn remove_coordination_files(coord: &Path) {
    use std::os::unix::ffi::OsStrExt;
    if let Ok(c) = std::ffi::CString::new(coord.as_os_str().as_bytes()) {
        coord::remove_files(&c);
    }
}
use coord::{CoordMap, DESCS, DESC_LOCK, DESC_POS, MAP_LOCK, ORPHANS, PROC_LOCK};

/// Options of a shared mount.
#[derive(Clone, Debug, Default)]
pub struct SharedOptions {
    pub read_only: bool,
    /// Map every page of a tmpfs image up front (as a plain mount does). Off by default: a
    /// short-lived process of a shared mount touches few pages.
    pub populate: bool,
}

/// The lowest number the library's own descriptors get (see `internal_fds`).
pub const FD_FLOOR: RawFd = sys::FD_FLOOR;

/// Below this many free inode numbers in its pools, a process refills them from the inode
/// table when the image comes back to it.
const INODE_REFILL_BELOW: u64 = 64;

/// The coordination file as this process holds it. After a fork, the child replaces `fd`
/// (the description is shared with the parent, whose locks it carries).
struct Link {
    map: Arc<CoordMap>,
    fd: AtomicI32,
}

impl Link {
    fn fd(&self) -> RawFd {
        self.fd.load(Ordering::Acquire)
    }
}

impl Peers for Link {
    fn dir_changed(&self, ino: u32) {
        let s = self.map.seq().fetch_add(1, Ordering::AcqRel);
        self.map.ring(s).store(ino as u64, Ordering::Release);
    }

    fn open_anywhere(&self, ino: u32) -> bool {
        open_in_slots(&self.map, ino) || self.mapped_anywhere(ino)
    }

    fn mapped_anywhere(&self, ino: u32) -> bool {
        sys::locked_by_other(self.fd(), MAP_LOCK + ino as u64, 1)
    }

    fn orphan_left(&self, ino: u32) {
        let m = &self.map;
        for i in 0..ORPHANS {
            let e = m.orphan(i);
            match e.compare_exchange(0, ino, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(cur) if cur == ino => return,
                Err(_) => {}
            }
        }
        // The list is full: the orphan stays until the next recovery (a mount with no other
        // process attached frees every orphan nothing holds).
        m.orphan_overflow().store(1, Ordering::Release);
    }
}

/// One process's attachment to an image shared with other processes.
///
/// Every file-system call must run inside [`SharedMount::op`]. Dropping the last `File`,
/// `DirectMap` or reference of an inode is an operation too (it may free the inode).
pub struct SharedMount {
    fs: Fs,
    link: Arc<Link>,
    /// This process's identity in the gate: slot + 1 | epoch << 12.
    me: AtomicU32,
    /// Sequence number of the last directory change this process's indexes account for.
    seen: AtomicU64,
    /// Set across fork: new operations wait, and prepare_fork waits for those in flight, so
    /// a child starts with no operation half done in its copy of the memory.
    forking: AtomicBool,
    image_fd: RawFd,
    path: PathBuf,
    /// This process found no other attached, recovered the image and tidied /dev/shm.
    first: bool,
    detached: AtomicBool,
    /// Times this process recovered the image after another died mid-operation.
    recoveries: AtomicU64,
}

thread_local! {
    /// The shared mounts this thread is inside `op` of, with their nesting depth.
    // A plain array (no destructor): operations must keep working while a thread's
    // thread-locals are being destroyed, e.g. stdio flushing at exit(), which runs after
    // the main thread's TLS destructors (the preload library's cookie streams).
    static DEPTH: [Cell<(usize, u32)>; DEPTH_SLOTS] = const { [const { Cell::new((0, 0)) }; DEPTH_SLOTS] };
}

/// Shared mounts one thread can be inside `op` of at once.
const DEPTH_SLOTS: usize = 8;

fn process_id(slot: usize, epoch: u32) -> u32 {
    (slot as u32 + 1) | (epoch << 12)
}

impl SharedMount {
    /// Attaches this process to the image at `image`, alongside every other process attached
    /// to it. The first one recovers the image as a plain mount does; later ones join it.
    pub fn attach(image: &Path, opts: &SharedOptions) -> io::Result<SharedMount> {
        let f = open_image(image, !opts.read_only)?;
        // The library's own descriptors stay out of the numbers programs choose themselves.
        let f = {
            use std::os::unix::io::{FromRawFd, IntoRawFd};
            // SAFETY: ownership moves from `f` to the returned descriptor.
            unsafe { std::fs::File::from_raw_fd(sys::above_floor(f.into_raw_fd())) }
        };
        lock_image(&f, image, false).map_err(|e| {
            if e.kind() == io::ErrorKind::WouldBlock {
                io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "{}: image is mounted exclusively by another process (nvmfs mount, fsck -y, a benchmark); unmount it first",
                        image.display()
                    ),
                )
            } else {
                e
            }
        })?;
        let len = f.metadata()?.len();
        if len < 3 * BLOCK_SIZE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: too small to be an nvmfs image ({len} bytes)",
                    image.display()
                ),
            ));
        }
        let mode = {
            use std::os::unix::fs::PermissionsExt;
            f.metadata()?.permissions().mode()
        };
        let cpath = coord::coord_path(f.as_raw_fd())?;
        let opened = coord::open(&cpath, mode)?;
        if opened.alone {
            // The first process of a mount tidies up after processes that never detached.
            coord::sweep_stale(cpath.parent().unwrap_or(Path::new("/dev/shm")), &cpath);
        }
        let fd = opened.fd;
        let result = Self::attach_with(image, opts, f, opened);
        if result.is_err() {
            sys::close(fd);
        }
        result
    }

    fn attach_with(
        image: &Path,
        opts: &SharedOptions,
        f: std::fs::File,
        opened: coord::Opened,
    ) -> io::Result<SharedMount> {
        let map = Arc::new(opened.map);
        let (slot, epoch) = coord::take_proc_slot(&map, opened.fd)?;
        let me = process_id(slot, epoch);
        let link = Arc::new(Link {
            map: map.clone(),
            fd: AtomicI32::new(opened.fd),
        });
        let len = f.metadata()?.len();
        let image_fd = f.as_raw_fd();
        let pm = Pm::map_file_with(&f, image, len, !opts.read_only, opts.populate)?;
        let parts = SharedParts {
            peers: link.clone(),
            used: SharedCount {
                ptr: map.used_ptr(),
                keep: map.clone(),
            },
            first: opened.alone,
        };
        let mount_opts = MountOptions {
            read_only: opts.read_only,
            ..Default::default()
        };
        // Joining (or recovering) runs under the gate like any operation.
        let entry = gate::enter(map.gate(), map.wake(), me, |id| alive(&link, id));
        let fs = Fs::mount_region(
            pm,
            &mount_opts,
            Some(image.to_path_buf()),
            Some(f),
            Some(parts),
        );
        let fs = match fs {
            Ok(fs) => fs,
            Err(e) => {
                gate::refreshed(map.gate(), map.wake());
                gate::leave(map.gate(), map.wake());
                return Err(e);
            }
        };
        let recovered_now = matches!(entry, gate::Entry::TookFromDead) as u64;
        let recovered = match entry {
            gate::Entry::TookFromDead if !opened.alone => {
                fs.inner.recover_from_peer_crash().map(|_| ())
            }
            _ => Ok(()),
        };
        let seen = map.seq().load(Ordering::Acquire);
        gate::refreshed(map.gate(), map.wake());
        gate::leave(map.gate(), map.wake());
        recovered?;
        if opened.alone {
            // Recovered: others may join now.
            sys::lock_wait(opened.fd, libc::F_RDLCK, coord::DMS_LOCK)?;
        }
        Ok(SharedMount {
            fs,
            link,
            me: AtomicU32::new(me),
            seen: AtomicU64::new(seen),
            forking: AtomicBool::new(false),
            image_fd,
            path: image.to_path_buf(),
            first: opened.alone,
            detached: AtomicBool::new(false),
            recoveries: AtomicU64::new(recovered_now),
        })
    }

    fn key(&self) -> usize {
        self as *const SharedMount as usize
    }

    /// Runs `f` as one file-system operation: meanwhile no other process runs one on this
    /// image. Nested calls on one thread are part of the outer operation.
    pub fn op<R>(&self, f: impl FnOnce(&Fs) -> R) -> R {
        let _g = self.enter();
        f(&self.fs)
    }

    fn enter(&self) -> OpGuard<'_> {
        let key = self.key();
        let nested = DEPTH.with(|d| {
            if let Some(c) = d.iter().find(|c| c.get().0 == key && c.get().1 > 0) {
                c.set((key, c.get().1 + 1));
                return true;
            }
            // More than DEPTH_SLOTS mounts at once on one thread: not recorded, so nested
            // calls take the gate again (allowed: it is this process's).
            if let Some(free) = d.iter().find(|c| c.get().1 == 0) {
                free.set((key, 1));
            }
            false
        });
        if nested {
            return OpGuard { m: self };
        }
        loop {
            while self.forking.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            self.take_gate();
            // Our count in the gate (a sequentially consistent read-modify-write in
            // `gate::enter`) is seen by prepare_fork, or we see its flag: a fork never copies
            // this process with an operation half done. No fence needed: on x86 that
            // read-modify-write is already a full barrier, where a fence was one more.
            if !self.forking.load(Ordering::SeqCst) {
                break;
            }
            let map = &self.link.map;
            gate::leave(map.gate(), map.wake());
        }
        OpGuard { m: self }
    }

    /// Waits for the gate and brings this process's state up to date if the image was
    /// another process's meanwhile.
    fn take_gate(&self) {
        let map = &self.link.map;
        let me = self.me.load(Ordering::Acquire);
        match gate::enter(map.gate(), map.wake(), me, |id| alive(&self.link, id)) {
            gate::Entry::Joined => {}
            gate::Entry::Took => {
                self.refresh();
                gate::refreshed(map.gate(), map.wake());
            }
            gate::Entry::TookFromDead => {
                self.recoveries.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = self.fs.inner.recover_from_peer_crash() {
                    // The operation that follows meets the same damage and reports it.
                    eprintln!(
                        "nvmfs: recovery after a crashed process on {} failed: {e}",
                        self.path.display()
                    );
                }
                self.seen
                    .store(map.seq().load(Ordering::Acquire), Ordering::Release);
                gate::refreshed(map.gate(), map.wake());
            }
        }
    }

    fn leave(&self) {
        let key = self.key();
        let outer = DEPTH.with(
            |d| match d.iter().find(|c| c.get().0 == key && c.get().1 > 0) {
                Some(c) => {
                    let n = c.get().1 - 1;
                    c.set((key, n));
                    n == 0
                }
                None => true,
            },
        );
        if !outer {
            return;
        }
        let map = &self.link.map;
        // Every change logged so far is this process's own (it has the image): its indexes
        // already reflect them. Stored only when it moved: every thread's operations end
        // here, and a store each time would bounce the word's line between them.
        let seq = map.seq().load(Ordering::Acquire);
        if self.seen.load(Ordering::Relaxed) != seq {
            self.seen.store(seq, Ordering::Release);
        }
        gate::leave(map.gate(), map.wake());
    }

    /// Brings this process's DRAM state up to date with what other processes did since it
    /// last had the image.
    fn refresh(&self) {
        let map = &self.link.map;
        let inner = &self.fs.inner;
        let cur = map.seq().load(Ordering::Acquire);
        let seen = self.seen.load(Ordering::Acquire);
        if cur.wrapping_sub(seen) > coord::RING {
            inner.forget_all_dirs();
        } else {
            inner.forget_dirs((seen..cur).map(|s| map.ring(s).load(Ordering::Acquire) as u32));
        }
        self.seen.store(cur, Ordering::Release);
        if inner.inodes.is_scanned() {
            inner.refill_inodes(INODE_REFILL_BELOW);
        }
        self.reap_orphans();
    }

    /// Frees the listed orphans that nothing holds open any more.
    fn reap_orphans(&self) {
        let map = &self.link.map;
        for i in 0..ORPHANS {
            let e = map.orphan(i);
            let ino = e.load(Ordering::Acquire);
            if ino != 0 && self.fs.inner.reap_orphan(ino).unwrap_or(false) {
                let _ = e.compare_exchange(ino, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }

    /// Opens a new open file description of inode `ino`: a real descriptor (close-on-exec if
    /// `cloexec`) that keeps the inode from being freed, and whose offset and status flags
    /// are shared by every descriptor duplicated from it, in this process or any child.
    pub fn open_description(
        &self,
        ino: u64,
        status_flags: i32,
        cloexec: bool,
    ) -> io::Result<(RawFd, Description)> {
        let map = &self.link.map;
        let cloexec = if cloexec { libc::O_CLOEXEC } else { 0 };
        let start = map.next_desc().fetch_add(1, Ordering::Relaxed);
        let file = (start % DESC_FILES as u64) as usize;
        let fd = sys::open(&map.desc_file(file).path, libc::O_RDWR | cloexec, 0)?;
        let done = (|| {
            let slot = take_desc_slot(map, fd, file, start)?;
            // The slot may still name the inode of a description closed unseen: with our
            // lock on it, that inode would look open until the slot is filled.
            map.desc_ino(slot).store(0, Ordering::Release);
            sys::lseek(fd, DESC_POS + slot as u64, libc::SEEK_SET)?;
            let desc = Description {
                map: map.clone(),
                slot,
            };
            let generation = self.op(|fs| fs.getattr(ino))?.generation;
            self.fill_description(&desc, ino, generation, status_flags);
            Ok(desc)
        })();
        match done {
            Ok(d) => Ok((fd, d)),
            Err(e) => {
                sys::close(fd);
                Err(e)
            }
        }
    }

    /// Empties description `desc` so that it can stand for another inode later
    /// ([`SharedMount::fill_description`]): clears its slot, so that it no longer holds its
    /// inode open. The description keeps its slot lock and its position.
    ///
    /// Only for a description that nothing else will use as the old file again: no other
    /// descriptor of it in this process or any other (the caller knows it was never
    /// duplicated, inherited or passed on). Opening and closing a description of the
    /// coordination file costs more than all the rest of a small file's open and close.
    pub fn vacate_description(&self, desc: &Description) {
        self.link
            .map
            .desc_ino(desc.slot)
            .store(0, Ordering::Release);
    }

    /// Makes description `desc` (new, or vacated) stand for inode `ino`, whose generation
    /// the caller has just read (in an operation): fills its slot (inode and generation,
    /// offset 0, `status_flags`), which holds the inode open.
    pub fn fill_description(
        &self,
        desc: &Description,
        ino: u64,
        generation: u32,
        status_flags: i32,
    ) {
        let map = &self.link.map;
        map.desc_ino(desc.slot)
            .store((generation as u64) << 32 | ino, Ordering::Release);
        map.desc_flags(desc.slot)
            .store(status_flags, Ordering::Release);
        map.desc_offset(desc.slot).store(0, Ordering::Release);
    }

    /// If `fd` is an open file description of this image (made here, or inherited from the
    /// process that exec'd this one), returns it.
    pub fn adopt(&self, fd: RawFd) -> Option<Description> {
        let map = &self.link.map;
        let st = sys::fstat(fd).ok()?;
        let slot = sys::lseek(fd, 0, libc::SEEK_CUR)
            .ok()?
            .checked_sub(DESC_POS)? as usize;
        (slot < DESCS && map.desc_file(slot).id == (st.st_dev, st.st_ino)).then(|| Description {
            map: map.clone(),
            slot,
        })
    }

    /// A reference that marks inode `ino` as directly mapped (shrinking truncate and punch
    /// hole refuse with EBUSY in every process while it lives) and keeps it from being freed.
    pub fn map_guard(&self, ino: u64) -> io::Result<MapGuard> {
        let fd = sys::above_floor(sys::open(
            &self.link.map.path,
            libc::O_RDWR | libc::O_CLOEXEC,
            0,
        )?);
        let g = MapGuard { fd };
        if !sys::try_lock(fd, libc::F_RDLCK, MAP_LOCK + ino)? {
            return Err(io::Error::other("inode map lock refused"));
        }
        Ok(g)
    }

    /// Call before fork (pthread_atfork prepare): waits for this process's operations to
    /// finish and holds new ones back until `parent_after_fork` / `child_after_fork`.
    pub fn prepare_fork(&self) {
        self.forking.store(true, Ordering::SeqCst);
        // A fork from inside an operation (a signal handler, say) cannot wait for itself.
        let key = self.key();
        if DEPTH.with(|d| d.iter().any(|c| c.get().0 == key && c.get().1 > 0)) {
            return;
        }
        let gate = self.link.map.gate();
        let me = self.me.load(Ordering::Acquire);
        loop {
            let g = gate.load(Ordering::SeqCst);
            if gate::owner(g) != me || g & 0xffff_ffff == 0 {
                return;
            }
            std::thread::yield_now();
        }
    }

    pub fn parent_after_fork(&self) {
        self.forking.store(false, Ordering::Release);
    }

    /// In the child: becomes a process of its own (new slot, own description of the
    /// coordination file), keeping the descriptions it inherited.
    pub fn child_after_fork(&self) {
        self.forking.store(false, Ordering::Release);
        let map = &self.link.map;
        let inherited = self.link.fd();
        let fresh = (|| {
            let fd = sys::above_floor(sys::open(&map.path, libc::O_RDWR | libc::O_CLOEXEC, 0)?);
            sys::lock_wait(fd, libc::F_RDLCK, coord::DMS_LOCK)?;
            let (slot, epoch) = coord::take_proc_slot(map, fd)?;
            Ok::<_, io::Error>((fd, process_id(slot, epoch)))
        })();
        match fresh {
            Ok((fd, me)) => {
                self.link.fd.store(fd, Ordering::Release);
                self.me.store(me, Ordering::Release);
                // Closing our copy leaves the parent's locks in place (they belong to the
                // description, which the parent still holds).
                sys::close(inherited);
            }
            Err(e) => eprintln!(
                "nvmfs: child process cannot attach to {}: {e}; it shares the parent's identity",
                self.path.display()
            ),
        }
    }

    /// Leaves the image (at process exit). The last process out, with no description left
    /// anywhere, marks the image clean and removes the coordination file. No operation may
    /// follow.
    pub fn detach(&self) {
        if self.detached.swap(true, Ordering::AcqRel) {
            return;
        }
        self.op(|_| self.reap_orphans());
        let fd = self.link.fd();
        let me = self.me.load(Ordering::Acquire);
        sys::unlock(fd, PROC_LOCK + ((me & 0xfff) - 1) as u64);
        // Let go of DMS first, then try to take it alone: of several processes detaching at
        // once, the last to let go finds no other holder (an upgrade in place would fail for
        // every one of them, each still holding its own share).
        sys::unlock(fd, coord::DMS_LOCK);
        if sys::try_lock(fd, libc::F_WRLCK, coord::DMS_LOCK).unwrap_or(false) {
            if !self.link.map.any_description() {
                if !self.fs.inner.read_only {
                    if let Err(e) = self.fs.inner.write_clean() {
                        eprintln!("nvmfs: marking {} clean: {e}", self.path.display());
                    }
                }
                self.link.map.remove_files();
            }
            sys::unlock(fd, coord::DMS_LOCK);
        }
    }

    /// The descriptors this process's attachment holds for itself (the image, its own
    /// description of the coordination file, and one of each description file), all at or
    /// above `FD_FLOOR` (10) and close-on-exec. The second changes in a child after
    /// `child_after_fork`. A program that closes descriptors it did not open must spare them.
    pub fn internal_fds(&self) -> [RawFd; 2 + DESC_FILES] {
        let mut fds = [self.image_fd; 2 + DESC_FILES];
        fds[1] = self.link.fd();
        for (to, fd) in fds[2..].iter_mut().zip(self.link.map.desc_fds()) {
            *to = fd;
        }
        fds
    }

    /// The image file's descriptor (read-write unless mounted read-only), for mapping block
    /// runs of a file directly.
    pub fn image_fd(&self) -> RawFd {
        self.image_fd
    }

    /// Whether this process attached first (no other process was attached): it recovered
    /// the image and removed coordination files nobody used any more.
    pub fn was_first(&self) -> bool {
        self.first
    }

    pub fn image_path(&self) -> &Path {
        &self.path
    }

    /// How many times this process recovered the image after another process died in the
    /// middle of an operation.
    pub fn recoveries(&self) -> u64 {
        self.recoveries.load(Ordering::Relaxed)
    }

    pub fn is_read_only(&self) -> bool {
        self.fs.inner.read_only
    }
}

struct OpGuard<'a> {
    m: &'a SharedMount,
}

impl Drop for OpGuard<'_> {
    fn drop(&mut self) {
        self.m.leave();
    }
}

/// Whether the process `id` (slot + 1 | epoch << 12) still runs.
fn alive(link: &Link, id: u32) -> bool {
    let slot = (id & 0xfff) as usize;
    if slot == 0 || slot > coord::PROCS {
        return false;
    }
    let slot = slot - 1;
    if link.map.proc_epoch(slot).load(Ordering::Acquire) != id >> 12 {
        return false;
    }
    sys::locked_by_other(link.fd(), PROC_LOCK + slot as u64, 1)
}

/// Description slots are first taken among this many.
const DESC_WINDOW_MIN: u64 = 64;
const _: () = assert!(DESC_WINDOW_MIN.is_multiple_of(DESC_FILES as u64));
/// Slots tried at random in the window before it doubles.
const DESC_TRIES: usize = 8;

/// Takes a free description slot for `fd`, a new descriptor of description file `file`,
/// among that file's slots (`slot % DESC_FILES == file`), trying them from `start` on. Its
/// lock is the claim; the kernel drops it with the description. Slots are taken below
/// `desc_high`, which doubles when a few tries in a row find its slots taken, so that it
/// stays within about twice the descriptions open at once: `open_in_slots` reads every slot
/// below it.
fn take_desc_slot(map: &CoordMap, fd: RawFd, file: usize, mut start: u64) -> io::Result<usize> {
    let bound = map.desc_high();
    bound.fetch_max(DESC_WINDOW_MIN, Ordering::AcqRel);
    loop {
        let high = bound.load(Ordering::Acquire).min(DESCS as u64);
        let rows = high / DESC_FILES as u64;
        let tries = if high == DESCS as u64 {
            rows
        } else {
            DESC_TRIES as u64
        };
        for i in 0..tries {
            let row = start.wrapping_mul(0x9e37_79b9).wrapping_add(i) % rows;
            let slot = row as usize * DESC_FILES + file;
            if sys::try_lock(fd, libc::F_WRLCK, DESC_LOCK + slot as u64)? {
                return Ok(slot);
            }
        }
        if high == DESCS as u64 {
            return Err(io::Error::from_raw_os_error(libc::ENFILE));
        }
        let _ = bound.compare_exchange(high, high * 2, Ordering::AcqRel, Ordering::Acquire);
        start = map.next_desc().fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether a description in use, in any process, stands for `ino`: a slot below
/// `desc_high` that names it and whose lock is held. A slot whose description was closed
/// where no process saw it still names its last inode; only its lock tells.
fn open_in_slots(map: &CoordMap, ino: u32) -> bool {
    let high = map.desc_high().load(Ordering::Acquire).min(DESCS as u64) as usize;
    (0..high).any(|slot| {
        map.desc_ino(slot).load(Ordering::Acquire) as u32 == ino
            && sys::locked_by_other(map.desc_file(slot).fd, DESC_LOCK + slot as u64, 1)
    })
}

/// An open file description of a shared mount: its slot in the coordination file.
#[derive(Clone)]
pub struct Description {
    map: Arc<CoordMap>,
    slot: usize,
}

impl Description {
    pub fn ino(&self) -> u64 {
        self.map.desc_ino(self.slot).load(Ordering::Acquire) & 0xffff_ffff
    }

    pub fn generation(&self) -> u32 {
        (self.map.desc_ino(self.slot).load(Ordering::Acquire) >> 32) as u32
    }

    /// The file offset, shared by every descriptor of the description.
    pub fn offset(&self) -> &AtomicU64 {
        self.map.desc_offset(self.slot)
    }

    /// O_ACCMODE | O_APPEND | O_NONBLOCK | ... as open and F_SETFL set them.
    pub fn status_flags(&self) -> &AtomicI32 {
        self.map.desc_flags(self.slot)
    }

    pub fn slot(&self) -> usize {
        self.slot
    }

    /// (st_dev, st_ino) of the description file its descriptors stand for.
    pub fn file_id(&self) -> (u64, u64) {
        self.map.desc_file(self.slot).id
    }
}

/// See [`SharedMount::map_guard`]; dropping it releases the mark.
pub struct MapGuard {
    fd: RawFd,
}

impl MapGuard {
    /// Its descriptor (at or above `FD_FLOOR`, close-on-exec).
    pub fn fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for MapGuard {
    fn drop(&mut self) {
        sys::close(self.fd);
    }
}
