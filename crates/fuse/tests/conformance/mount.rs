// The FUSE conformance tests, included by tests/mount.rs (requests read from /dev/fuse) and
// tests/mount_uring.rs (FUSE over io_uring), which each define `TRANSPORT`: the mount options
// that pick the transport, added before every test's own options.

use nvmfs::testing::pattern;
use std::ffi::CString;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nvmfs::{FormatOptions, Fs};
use nvmfs_fuse::fuser::BackgroundSession;
use nvmfs_fuse::MountConfig;

fn is_root() -> bool {
    // SAFETY: a plain getter.
    unsafe { libc::geteuid() == 0 }
}

/// Whether FUSE mounts (over `TRANSPORT`) can work here; prints why not.
fn fuse_available(test: &str) -> bool {
    let why = if !Path::new("/dev/fuse").exists() {
        Some("/dev/fuse is missing".to_string())
    } else if !is_root()
        && !std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists()))
    {
        Some("not root and fusermount3 is not installed".to_string())
    } else {
        transport_unavailable()
    };
    if let Some(why) = why {
        eprintln!("skipping {test}: {why}");
        return false;
    }
    true
}

/// Held while a test runs a child process and while a test unmounts. Between its fork and
/// its exec a child holds a copy of every descriptor of this process, other tests' open files
/// on their own mounts included, and for that moment the kernel refuses to unmount those
/// mounts (EBUSY: seen once in CI, the remount test beside the privileges test).
static SPAWN_OR_UNMOUNT: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn spawn_or_unmount_lock() -> std::sync::MutexGuard<'static, ()> {
    SPAWN_OR_UNMOUNT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

struct Mounted {
    mnt: PathBuf,
    session: Option<BackgroundSession>,
    fs: Option<Fs>,
    shutdown: nvmfs_fuse::Shutdown,
}

impl Mounted {
    fn path(&self, p: &str) -> PathBuf {
        self.mnt.join(p)
    }

    /// Unmounts (the kernel's umount, then the session ends) and marks the image clean.
    fn unmount(mut self) {
        let unmounted = {
            let _no_child_in_fork = spawn_or_unmount_lock();
            self.session.take().unwrap().umount_and_join()
        };
        if let Err(e) = unmounted {
            // The session is gone, so Drop would not detach: leave no mount behind.
            detach(&self.mnt);
            panic!("unmounting {}: {e}", self.mnt.display());
        }
        // After the session ended: ring threads add their request counts when they end.
        check_transport(&self.shutdown);
        self.fs.take().unwrap().unmount().unwrap();
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // A failed test: detach, so the tempdir can go.
        if self.session.is_some() {
            detach(&self.mnt);
        }
    }
}

/// Lazily unmounts `mnt` (MNT_DETACH), ignoring errors: only for a test that has failed.
fn detach(mnt: &std::path::Path) {
    let c = CString::new(mnt.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        Fs::format(
            dir.path().join("img"),
            &FormatOptions {
                size_bytes: 64 << 20,
                inode_count: None,
                ..Default::default()
            },
        )
        .unwrap();
        fs::create_dir(dir.path().join("mnt")).unwrap();
        Setup { dir }
    }

    fn image(&self) -> PathBuf {
        self.dir.path().join("img")
    }

    fn mount(&self, opts: &str) -> Mounted {
        let mut cfg = MountConfig::default();
        cfg.parse(TRANSPORT).unwrap();
        cfg.parse(opts).unwrap();
        let fs = Fs::mount(self.image(), &cfg.core_options()).unwrap();
        let mnt = self.dir.path().join("mnt");
        let (session, shutdown) =
            nvmfs_fuse::session(fs.clone(), &mnt, &cfg, "nvmfs-test").unwrap();
        Mounted {
            mnt,
            session: Some(session.spawn().unwrap()),
            fs: Some(fs),
            shutdown,
        }
    }

    fn fsck_clean(&self) {
        let r = nvmfs::fsck::check_image(&self.image()).unwrap();
        assert!(r.is_clean(), "fsck problems: {:?}", r.problems);
        assert!(
            r.recovery.is_empty(),
            "not unmounted cleanly: {:?}",
            r.recovery
        );
    }
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

#[test]
fn files_dirs_links_times_persist_across_remount() {
    if !fuse_available("files_dirs_links_times_persist_across_remount") {
        return;
    }
    let s = Setup::new();
    let m = s.mount("");
    let big = pattern(3 << 20, 7);
    {
        fs::create_dir_all(m.path("a/b/c")).unwrap();
        fs::write(m.path("a/b/c/big"), &big).unwrap();
        fs::write(m.path("a/small"), b"hello world").unwrap();
        std::os::unix::fs::symlink("b/c/big", m.path("a/link")).unwrap();
        std::os::unix::fs::symlink("x".repeat(300), m.path("a/longlink")).unwrap();
        fs::hard_link(m.path("a/small"), m.path("a/b/hard")).unwrap();
        fs::rename(m.path("a/b/c"), m.path("a/c2")).unwrap();
        fs::set_permissions(m.path("a/small"), fs::Permissions::from_mode(0o640)).unwrap();

        // truncate down and up, overwrite in the middle, append
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.path("a/c2/big"))
            .unwrap();
        f.set_len(1 << 20).unwrap();
        f.set_len((1 << 20) + 5000).unwrap();
        let mut f = f;
        f.seek(SeekFrom::Start(4096 * 3 + 17)).unwrap();
        f.write_all(b"MIDDLE").unwrap();
        drop(f);
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(m.path("a/c2/big"))
            .unwrap();
        f.write_all(b"TAIL").unwrap();
        drop(f);

        // utimensat with nanoseconds, UTIME_OMIT and UTIME_NOW
        let p = cstr(&m.path("a/small"));
        let ts = [
            libc::timespec {
                tv_sec: 1_000_000_000,
                tv_nsec: 123_456_789,
            },
            libc::timespec {
                tv_sec: 1_500_000_000,
                tv_nsec: 987_654_321,
            },
        ];
        // SAFETY: valid path and two timespecs.
        assert_eq!(
            unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), ts.as_ptr(), 0) },
            0
        );
        let md = fs::metadata(m.path("a/small")).unwrap();
        assert_eq!((md.atime(), md.atime_nsec()), (1_000_000_000, 123_456_789));
        assert_eq!((md.mtime(), md.mtime_nsec()), (1_500_000_000, 987_654_321));
        let omit_now = [
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_NOW,
            },
        ];
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), omit_now.as_ptr(), 0) },
            0
        );
        let md2 = fs::metadata(m.path("a/small")).unwrap();
        assert_eq!(
            (md2.atime(), md2.atime_nsec()),
            (1_000_000_000, 123_456_789)
        );
        assert!(md2.mtime() > 1_600_000_000, "UTIME_NOW");
    }
    m.unmount();
    s.fsck_clean();

    let m = s.mount("");
    let mut expect = big[..1 << 20].to_vec();
    expect.resize((1 << 20) + 5000, 0);
    expect[4096 * 3 + 17..4096 * 3 + 23].copy_from_slice(b"MIDDLE");
    expect.extend_from_slice(b"TAIL");
    assert_eq!(fs::read(m.path("a/c2/big")).unwrap(), expect);
    assert_eq!(
        fs::read(m.path("a/link")).unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
    assert_eq!(
        fs::read_link(m.path("a/link")).unwrap(),
        Path::new("b/c/big")
    );
    assert_eq!(
        fs::read_link(m.path("a/longlink")).unwrap(),
        Path::new(&"x".repeat(300))
    );
    let small = fs::metadata(m.path("a/small")).unwrap();
    assert_eq!(small.mode() & 0o7777, 0o640);
    assert_eq!(small.nlink(), 2);
    assert_eq!(small.ino(), fs::metadata(m.path("a/b/hard")).unwrap().ino());
    assert_eq!(
        (small.atime(), small.atime_nsec()),
        (1_000_000_000, 123_456_789)
    );
    assert_eq!(fs::read(m.path("a/b/hard")).unwrap(), b"hello world");
    assert_eq!(fs::metadata(m.path("a")).unwrap().nlink(), 4); // ., .., b, c2
    let mut names: Vec<_> = fs::read_dir(m.path("a"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["b", "c2", "link", "longlink", "small"]);
    m.unmount();
    s.fsck_clean();
}

#[test]
fn ctime_moves_on_link_unlink_rename_chmod() {
    if !fuse_available("ctime_moves_on_link_unlink_rename_chmod") {
        return;
    }
    let s = Setup::new();
    let m = s.mount("attr_timeout=0,entry_timeout=0");
    fs::write(m.path("f"), b"x").unwrap();
    let ctime = |p: &str| {
        let md = fs::symlink_metadata(m.path(p)).unwrap();
        (md.ctime(), md.ctime_nsec())
    };
    let step = || std::thread::sleep(Duration::from_millis(20));
    let c0 = ctime("f");
    step();
    fs::hard_link(m.path("f"), m.path("g")).unwrap();
    let c1 = ctime("f");
    assert!(c1 > c0, "link");
    step();
    fs::remove_file(m.path("g")).unwrap();
    let c2 = ctime("f");
    assert!(c2 > c1, "unlink");
    step();
    fs::rename(m.path("f"), m.path("h")).unwrap();
    let c3 = ctime("h");
    assert!(c3 > c2, "rename");
    step();
    fs::set_permissions(m.path("h"), fs::Permissions::from_mode(0o600)).unwrap();
    let c4 = ctime("h");
    assert!(c4 > c3, "chmod");
    m.unmount();
    s.fsck_clean();
}

#[test]
fn unlinked_open_file_lives_until_close() {
    if !fuse_available("unlinked_open_file_lives_until_close") {
        return;
    }
    let s = Setup::new();
    let m = s.mount("");
    let free0 = m.fs.as_ref().unwrap().statfs().inodes_free;
    let mut f = fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(m.path("tmp"))
        .unwrap();
    f.write_all(&pattern(100_000, 1)).unwrap();
    fs::remove_file(m.path("tmp")).unwrap();
    assert!(!m.path("tmp").exists());
    f.write_all(b"more").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut back = Vec::new();
    f.read_to_end(&mut back).unwrap();
    assert_eq!(back.len(), 100_004);
    assert_eq!(&back[..100_000], &pattern(100_000, 1)[..]);
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    assert_eq!(m.fs.as_ref().unwrap().statfs().inodes_free, free0 - 1);
    drop(f);
    // release and forget reach the file system asynchronously
    let mut freed = false;
    for _ in 0..200 {
        if m.fs.as_ref().unwrap().statfs().inodes_free == free0 {
            freed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(freed, "the unlinked inode is freed after close");
    // The same for a file reached by a plain open, which the adapter declines (the kernel
    // then opens without asking): only the kernel's lookup reference keeps it alive.
    fs::write(m.path("old"), pattern(50_000, 2)).unwrap();
    let mut r = fs::File::open(m.path("old")).unwrap();
    let mut w = fs::OpenOptions::new()
        .append(true)
        .open(m.path("old"))
        .unwrap();
    fs::remove_file(m.path("old")).unwrap();
    w.write_all(b"tail").unwrap();
    drop(w);
    let mut back = Vec::new();
    r.read_to_end(&mut back).unwrap();
    assert_eq!(back.len(), 50_004);
    assert_eq!(&back[..50_000], &pattern(50_000, 2)[..]);
    assert_eq!(m.fs.as_ref().unwrap().statfs().inodes_free, free0 - 1);
    drop(r);
    let freed = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        m.fs.as_ref().unwrap().statfs().inodes_free == free0
    });
    assert!(
        freed,
        "the unlinked inode reached by open is freed after close"
    );
    // Shutdown (what `nvmfs mount` does on SIGTERM with a busy mount point) drops the
    // kernel's references: an unlinked file that is still open is freed, not left as an
    // orphan, and later requests fail.
    let mut f = fs::File::create(m.path("tmp2")).unwrap();
    f.write_all(b"data").unwrap();
    fs::remove_file(m.path("tmp2")).unwrap();
    assert_eq!(m.fs.as_ref().unwrap().statfs().inodes_free, free0 - 1);
    assert!(m.shutdown.shutdown());
    assert_eq!(m.fs.as_ref().unwrap().statfs().inodes_free, free0);
    assert_eq!(errno_of(f.write_all(b"more")), libc::ENOTCONN);
    assert_eq!(errno_of(fs::metadata(m.path("x"))), libc::ENOTCONN);
    drop(f);
    m.unmount();
    s.fsck_clean();
}

#[test]
fn rename_noreplace_and_exchange() {
    if !fuse_available("rename_noreplace_and_exchange") {
        return;
    }
    let s = Setup::new();
    let m = s.mount("");
    fs::create_dir(m.path("d1")).unwrap();
    fs::create_dir(m.path("d2")).unwrap();
    fs::write(m.path("d1/a"), b"A").unwrap();
    fs::create_dir(m.path("d2/b")).unwrap();
    fs::write(m.path("d2/b/inside"), b"I").unwrap();
    let ren = |a: &str, b: &str, flags: u32| {
        let (a, b) = (cstr(&m.path(a)), cstr(&m.path(b)));
        // SAFETY: valid C strings.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                flags,
            )
        };
        if r == 0 {
            0
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap()
        }
    };
    assert_eq!(ren("d1/a", "d2/b", libc::RENAME_NOREPLACE), libc::EEXIST);
    assert_eq!(ren("d1/a", "d2/b", libc::RENAME_EXCHANGE), 0);
    assert_eq!(fs::read(m.path("d2/b")).unwrap(), b"A");
    assert_eq!(fs::read(m.path("d1/a/inside")).unwrap(), b"I");
    assert_eq!(fs::metadata(m.path("d1")).unwrap().nlink(), 3);
    assert_eq!(fs::metadata(m.path("d2")).unwrap().nlink(), 2);
    assert_eq!(ren("d2/b", "d2/new", libc::RENAME_NOREPLACE), 0);
    assert_eq!(ren("d2/x", "d2/y", libc::RENAME_EXCHANGE), libc::ENOENT);
    assert_eq!(ren("d1/a", "d1/a/sub", 0), libc::EINVAL);
    assert_eq!(ren("d1/a", "d1/a/inside/z", 0), libc::ENOTDIR);
    // plain rename over an existing file, and over a non-empty directory
    fs::write(m.path("d2/victim"), b"V").unwrap();
    fs::rename(m.path("d2/new"), m.path("d2/victim")).unwrap();
    assert_eq!(fs::read(m.path("d2/victim")).unwrap(), b"A");
    assert_eq!(
        errno_of(fs::rename(m.path("d2"), m.path("d1/a"))),
        libc::ENOTEMPTY
    );
    m.unmount();
    s.fsck_clean();
}

#[test]
fn special_files_fallocate_and_statfs() {
    if !fuse_available("special_files_fallocate_and_statfs") {
        return;
    }
    let s = Setup::new();
    let m = s.mount("");
    let fifo = cstr(&m.path("fifo"));
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    assert!(fs::metadata(m.path("fifo")).unwrap().file_type().is_fifo());
    // A FIFO on the mount works as a pipe (the kernel serves it).
    let p = m.path("fifo");
    let w = std::thread::spawn(move || fs::write(p, b"through the fifo").unwrap());
    assert_eq!(fs::read(m.path("fifo")).unwrap(), b"through the fifo");
    w.join().unwrap();
    let sock = cstr(&m.path("sock"));
    // SAFETY: valid C string.
    assert_eq!(
        unsafe { libc::mknod(sock.as_ptr(), libc::S_IFSOCK | 0o600, 0) },
        0
    );
    assert!(fs::metadata(m.path("sock"))
        .unwrap()
        .file_type()
        .is_socket());

    let f = fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(m.path("pre"))
        .unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on an open descriptor.
    assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 1 << 20) }, 0);
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    assert_eq!(f.metadata().unwrap().blocks(), (1 << 20) / 512);
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20,) },
        0
    );
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    assert_eq!(f.metadata().unwrap().blocks(), (2 << 20) / 512);
    // SAFETY: as above.
    assert_eq!(
        unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                1 << 19,
            )
        },
        0
    );
    assert_eq!(f.metadata().unwrap().blocks(), (3 << 19) / 512);
    // SAFETY: as above (collapse range is not supported).
    let r = unsafe { libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096) };
    assert_eq!(r, -1);
    drop(f);

    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let root = cstr(&m.mnt);
    // SAFETY: valid path and out struct.
    assert_eq!(unsafe { libc::statvfs(root.as_ptr(), &mut st) }, 0);
    assert_eq!(st.f_bsize, 4096);
    assert_eq!(st.f_namemax, 255);
    assert!(st.f_blocks > 0 && st.f_bfree < st.f_blocks && st.f_ffree > 0);
    // xattrs are not supported
    let name = c"user.test";
    // SAFETY: valid strings and buffer.
    let r = unsafe { libc::setxattr(root.as_ptr(), name.as_ptr(), b"v".as_ptr().cast(), 1, 0) };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EOPNOTSUPP)
    );
    m.unmount();
    s.fsck_clean();
}

#[test]
fn big_directory_listing_and_removal() {
    if !fuse_available("big_directory_listing_and_removal") {
        return;
    }
    let s = Setup::new();
    let m = s.mount("");
    fs::create_dir(m.path("d")).unwrap();
    for i in 0..3000 {
        fs::write(
            m.path(&format!("d/file-{i:05}-{}", "n".repeat(i % 60))),
            b"",
        )
        .unwrap();
    }
    let list = |m: &Mounted| {
        let mut v: Vec<String> = fs::read_dir(m.path("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let all = list(&m);
    assert_eq!(all.len(), 3000);
    for n in all.iter().step_by(2) {
        fs::remove_file(m.path(&format!("d/{n}"))).unwrap();
    }
    assert_eq!(list(&m).len(), 1500);
    // rm -rf
    fs::remove_dir_all(m.path("d")).unwrap();
    assert!(fs::read_dir(&m.mnt).unwrap().next().is_none());
    m.unmount();
    s.fsck_clean();
    let m = s.mount("ro");
    assert!(fs::read_dir(&m.mnt).unwrap().next().is_none());
    m.unmount();
}

#[test]
fn read_only_mount_refuses_writes() {
    if !fuse_available("read_only_mount_refuses_writes") {
        return;
    }
    let s = Setup::new();
    let m = s.mount("");
    fs::write(m.path("keep"), b"kept").unwrap();
    m.unmount();
    let m = s.mount("ro");
    assert_eq!(fs::read(m.path("keep")).unwrap(), b"kept");
    assert_eq!(errno_of(fs::write(m.path("new"), b"x")), libc::EROFS);
    assert_eq!(
        errno_of(fs::OpenOptions::new().write(true).open(m.path("keep"))),
        libc::EROFS
    );
    assert_eq!(errno_of(fs::remove_file(m.path("keep"))), libc::EROFS);
    m.unmount();
    s.fsck_clean();
}

/// `-o writeback_cache`: the kernel holds written data in its page cache until fsync or close,
/// so what a program fsynced, or closed, is on the image after an unmount and a remount. As
/// root the mount's write-back device no longer has FUSE's 1% dirty-page limit (bdi.rs), under
/// which large buffered writes stall.
#[test]
fn writeback_cache_keeps_fsynced_and_closed_data_and_lifts_the_dirty_limit() {
    if !fuse_available("writeback_cache_keeps_fsynced_and_closed_data_and_lifts_the_dirty_limit") {
        return;
    }
    let s = Setup::new();
    let m = s.mount("writeback_cache");
    if is_root() {
        let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mnt = m.mnt.canonicalize().unwrap();
        let bdi = nvmfs_fuse::bdi::mount_device(&info, &mnt).expect("the mount in mountinfo");
        let knob = |k: &str| fs::read_to_string(format!("/sys/class/bdi/{bdi}/{k}")).unwrap();
        assert_eq!(knob("strict_limit").trim(), "0");
        assert_eq!(knob("max_ratio").trim(), "100");
    }
    let synced = pattern(3 << 20, 7);
    let closed = pattern((1 << 20) + 123, 8);
    let mut f = fs::File::create(m.path("synced")).unwrap();
    f.write_all(&synced).unwrap();
    f.sync_all().unwrap();
    drop(f);
    fs::write(m.path("closed"), &closed).unwrap();
    m.unmount();
    let m = s.mount("");
    assert!(fs::read(m.path("synced")).unwrap() == synced, "fsynced data lost");
    assert!(fs::read(m.path("closed")).unwrap() == closed, "closed file's data lost");
    m.unmount();
    s.fsck_clean();
}

#[test]
fn random_io_matches_a_model() {
    if !fuse_available("random_io_matches_a_model") {
        return;
    }
    let s = Setup::new();
    let m = s.mount("");
    let mut model: Vec<u8> = Vec::new();
    let mut f = fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(m.path("f"))
        .unwrap();
    let mut x: u64 = 12345;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for i in 0..400 {
        match rnd(10) {
            0 => {
                let len = rnd(3 << 20);
                f.set_len(len).unwrap();
                model.resize(len as usize, 0);
            }
            _ => {
                let off = rnd(4 << 20) as usize;
                let len = 1 + rnd(300_000) as usize;
                let data = pattern(len, i);
                f.seek(SeekFrom::Start(off as u64)).unwrap();
                f.write_all(&data).unwrap();
                if model.len() < off + len {
                    model.resize(off + len, 0);
                }
                model[off..off + len].copy_from_slice(&data);
            }
        }
        if i % 50 == 0 {
            let mut back = Vec::new();
            f.seek(SeekFrom::Start(0)).unwrap();
            f.read_to_end(&mut back).unwrap();
            assert!(back == model, "contents differ after step {i}");
        }
    }
    drop(f);
    m.unmount();
    s.fsck_clean();
    let m = s.mount("direct_io");
    assert!(fs::read(m.path("f")).unwrap() == model);
    m.unmount();
}

/// Mode bits under a non-root user: setuid/setgid cleared by a write and by chown, setgid
/// directories pass on their group. Needs root (to act as another user).
#[test]
fn privileges_behave_like_a_kernel_file_system() {
    if !fuse_available("privileges_behave_like_a_kernel_file_system") {
        return;
    }
    if !is_root() {
        eprintln!("skipping privileges_behave_like_a_kernel_file_system: not root");
        return;
    }
    let s = Setup::new();
    let m = s.mount("allow_other");
    let as_user = |cmd: &str| {
        use std::os::unix::process::CommandExt;
        let _no_unmount_meanwhile = spawn_or_unmount_lock();
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(&m.mnt)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let mode = |p: &str| fs::metadata(m.path(p)).unwrap().mode() & 0o7777;
    fs::set_permissions(&m.mnt, fs::Permissions::from_mode(0o777)).unwrap();

    // write by another user clears setuid and setgid
    fs::write(m.path("prog"), b"#!").unwrap();
    fs::set_permissions(m.path("prog"), fs::Permissions::from_mode(0o6777)).unwrap();
    assert_eq!(mode("prog"), 0o6777);
    let (ok, err) = as_user("echo x >> prog");
    assert!(ok, "{err}");
    assert_eq!(mode("prog"), 0o777);
    // a write by root keeps them
    fs::set_permissions(m.path("prog"), fs::Permissions::from_mode(0o6777)).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(m.path("prog"))
        .unwrap()
        .write_all(b"y")
        .unwrap();
    assert_eq!(mode("prog"), 0o6777);
    // chown clears them (even by root)
    std::os::unix::fs::chown(m.path("prog"), Some(65534), None).unwrap();
    assert_eq!(mode("prog"), 0o777);
    assert_eq!(fs::metadata(m.path("prog")).unwrap().uid(), 65534);

    // permissions are enforced for other users
    fs::write(m.path("private"), b"secret").unwrap();
    fs::set_permissions(m.path("private"), fs::Permissions::from_mode(0o600)).unwrap();
    assert!(!as_user("cat private").0);
    assert!(!as_user("chmod 777 private").0);
    assert!(as_user("touch mine && chmod 600 mine").0);
    let md = fs::metadata(m.path("mine")).unwrap();
    assert_eq!(
        (md.uid(), md.gid(), md.mode() & 0o777),
        (65534, 65534, 0o600)
    );

    // setgid directory: new entries get its group, new directories inherit the bit
    fs::create_dir(m.path("shared")).unwrap();
    std::os::unix::fs::chown(m.path("shared"), None, Some(4242)).unwrap();
    fs::set_permissions(m.path("shared"), fs::Permissions::from_mode(0o2777)).unwrap();
    assert!(as_user("mkdir shared/sub && touch shared/f && ln -s f shared/l").0);
    let sub = fs::metadata(m.path("shared/sub")).unwrap();
    assert_eq!((sub.uid(), sub.gid()), (65534, 4242));
    assert_eq!(sub.mode() & 0o2000, 0o2000);
    let f = fs::metadata(m.path("shared/f")).unwrap();
    assert_eq!((f.gid(), f.mode() & 0o2000), (4242, 0));
    assert_eq!(
        fs::symlink_metadata(m.path("shared/l")).unwrap().gid(),
        4242
    );

    // sticky directory: others' files cannot be removed
    fs::create_dir(m.path("tmp")).unwrap();
    fs::set_permissions(m.path("tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
    fs::write(m.path("tmp/roots"), b"").unwrap();
    assert!(!as_user("rm -f tmp/roots").0);
    assert!(m.path("tmp/roots").exists());
    m.unmount();
    s.fsck_clean();
}

/// An image with an SSD tier (16 MiB of PM, 64 MiB of SSD) through the kernel: a file larger
/// than the PM tier written and read back, fsck clean after unmount, the same bytes after a
/// remount.
#[test]
fn tiered_image_through_fuse() {
    if !fuse_available("tiered_image_through_fuse") {
        return;
    }
    let s = Setup::new();
    Fs::format(
        s.image(),
        &FormatOptions {
            size_bytes: 16 << 20,
            tier: Some(nvmfs::TierFormat::new(
                Some(s.dir.path().join("ssd")),
                Some(64 << 20),
            )),
            ..Default::default()
        },
    )
    .unwrap();
    let data = pattern(40 << 20, 9);
    let m = s.mount("");
    fs::write(m.path("big"), &data).unwrap();
    assert!(
        fs::read(m.path("big")).unwrap() == data,
        "read back before unmount"
    );
    let tier = m.fs.as_ref().unwrap().tier_info().unwrap();
    assert!(
        tier.stats.evicted > 0 && tier.ssd_valid_blocks > 0,
        "{tier:?}"
    );
    m.unmount();
    s.fsck_clean();
    let m = s.mount("");
    assert!(
        fs::read(m.path("big")).unwrap() == data,
        "read back after remount"
    );
    m.unmount();
}
