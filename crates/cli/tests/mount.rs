//! `nvmfs mount` end to end with the built binary: background and foreground mounts,
//! unmount by fusermount3 -u, umount, SIGTERM and SIGINT (also with a busy mount point),
//! refusals, and kill -9 of the serving process during writes.
//!
//! Needs /dev/fuse and fusermount3 (and root for the umount(8) case); without them each test
//! prints why and passes.

use std::fs;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn is_root() -> bool {
    // SAFETY: a plain getter.
    unsafe { libc::geteuid() == 0 }
}

fn have_fusermount3() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists()))
}

fn fuse_available(test: &str) -> bool {
    let why = if !Path::new("/dev/fuse").exists() {
        Some("/dev/fuse is missing")
    } else if !have_fusermount3() {
        Some("fusermount3 is not installed (package fuse3)")
    } else {
        None
    };
    if let Some(why) = why {
        eprintln!("skipping {test}: {why}");
        return false;
    }
    true
}

fn nvmfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nvmfs"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let s = Setup { dir };
        let out = nvmfs()
            .args(["mkfs", "--size", "64M"])
            .arg(s.image())
            .output()
            .unwrap();
        assert!(out.status.success(), "mkfs: {}", text(&out.stderr));
        fs::create_dir(s.mnt()).unwrap();
        s
    }

    fn image(&self) -> PathBuf {
        self.dir.path().join("img")
    }

    fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    fn path(&self, p: &str) -> PathBuf {
        self.mnt().join(p)
    }

    /// `nvmfs mount IMAGE MNT extra...` (background): returns its output.
    fn mount(&self, extra: &[&str]) -> Output {
        nvmfs()
            .arg("mount")
            .arg(self.image())
            .arg(self.mnt())
            .args(extra)
            .output()
            .unwrap()
    }

    fn mount_ok(&self, extra: &[&str]) -> Output {
        let out = self.mount(extra);
        assert_eq!(
            out.status.code(),
            Some(0),
            "mount: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(self.mounted(), "mounted after nvmfs mount returned");
        out
    }

    /// `nvmfs mount -f`, returning once the mount is live.
    fn mount_foreground(&self, extra: &[&str]) -> Child {
        let mut child = nvmfs()
            .arg("mount")
            .arg("-f")
            .arg(self.image())
            .arg(self.mnt())
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while !self.mounted() {
            if let Some(st) = child.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
                panic!("nvmfs mount -f exited with {st}: {err}");
            }
            assert!(t.elapsed() < Duration::from_secs(20), "mount never came up");
            std::thread::sleep(Duration::from_millis(10));
        }
        child
    }

    /// Whether the mount point is an nvmfs mount (per /proc/self/mountinfo).
    fn mounted(&self) -> bool {
        let mnt = fs::canonicalize(self.mnt()).unwrap_or(self.mnt());
        let want = mnt.to_str().unwrap();
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                f.get(4) == Some(&want) && l.contains(" - fuse.nvmfs ")
            })
    }

    /// Waits until no process holds the image (the serving process has exited).
    fn wait_released(&self) {
        let f = fs::File::open(self.image()).unwrap();
        let t = Instant::now();
        // SAFETY: flock on our own descriptor.
        while unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            assert!(t.elapsed() < Duration::from_secs(20), "image still in use");
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: as above.
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
    }

    /// The image is marked clean and fsck finds nothing.
    fn assert_clean(&self) {
        let out = nvmfs()
            .arg("info")
            .arg("--json")
            .arg(self.image())
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["clean"], true, "image not marked clean");
        let out = nvmfs().arg("fsck").arg(self.image()).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "fsck: {}", text(&out.stdout));
        assert!(
            !text(&out.stdout).contains("recovery"),
            "{}",
            text(&out.stdout)
        );
    }
}

fn wait_exit(child: &mut Child) -> i32 {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        assert!(t.elapsed() < Duration::from_secs(20), "still running");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// fusermount3 -u [-z]. A plain unmount is retried for a moment: a path lookup in flight
/// (another test thread walking /tmp) can hold the mount briefly.
fn fusermount_u(mnt: &Path, lazy: bool) {
    let t = Instant::now();
    loop {
        let mut c = Command::new("fusermount3");
        c.arg("-u");
        if lazy {
            c.arg("-z");
        }
        let out = c.arg(mnt).output().unwrap();
        if out.status.success() {
            return;
        }
        let err = text(&out.stderr);
        assert!(
            err.contains("busy") && t.elapsed() < Duration::from_secs(5),
            "fusermount3 -u: {err}"
        );
        eprintln!("retrying: {err}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signals our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

#[test]
fn background_mount_then_fusermount_and_umount_leave_a_clean_image() {
    if !fuse_available("background_mount_then_fusermount_and_umount_leave_a_clean_image") {
        return;
    }
    let s = Setup::new();
    s.mount_ok(&[]);
    fs::create_dir(s.path("dir")).unwrap();
    fs::write(s.path("dir/file"), b"persisted").unwrap();
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.contains(" fuse.nvmfs "))
        .expect("fuse.nvmfs in /proc/mounts");
    assert!(line.contains("default_permissions"), "{line}");
    // The image is locked by the daemon: a second mount is refused.
    let out = s.mount(&[]);
    assert_eq!(out.status.code(), Some(32));
    assert!(
        text(&out.stderr).contains("already mounted"),
        "{}",
        text(&out.stderr)
    );

    fusermount_u(&s.mnt(), false);
    s.wait_released();
    assert!(!s.mounted());
    s.assert_clean();

    s.mount_ok(&["-o", "ro"]);
    assert_eq!(fs::read(s.path("dir/file")).unwrap(), b"persisted");
    assert_eq!(
        fs::write(s.path("x"), b"").unwrap_err().raw_os_error(),
        Some(libc::EROFS)
    );
    if is_root() {
        let out = Command::new("umount").arg(s.mnt()).output().unwrap();
        assert!(out.status.success(), "umount: {}", text(&out.stderr));
    } else {
        fusermount_u(&s.mnt(), false);
    }
    s.wait_released();
    s.assert_clean();
}

#[test]
fn sigterm_and_sigint_unmount_cleanly() {
    if !fuse_available("sigterm_and_sigint_unmount_cleanly") {
        return;
    }
    let s = Setup::new();
    for (i, sig) in [libc::SIGTERM, libc::SIGINT].into_iter().enumerate() {
        let mut child = s.mount_foreground(&[]);
        fs::write(s.path(&format!("f{i}")), b"data").unwrap();
        signal(&child, sig);
        assert_eq!(wait_exit(&mut child), 0);
        assert!(!s.mounted());
        s.assert_clean();
    }
    let mut child = s.mount_foreground(&["-o", "ro"]);
    assert_eq!(fs::read(s.path("f0")).unwrap(), b"data");
    assert_eq!(fs::read(s.path("f1")).unwrap(), b"data");
    signal(&child, libc::SIGTERM);
    assert_eq!(wait_exit(&mut child), 0);
    s.assert_clean();
}

#[test]
fn sigterm_with_a_busy_mount_point_detaches_and_exits_cleanly() {
    if !fuse_available("sigterm_with_a_busy_mount_point_detaches_and_exits_cleanly") {
        return;
    }
    let s = Setup::new();
    let mut child = s.mount_foreground(&[]);
    let mut open = fs::File::create(s.path("held")).unwrap();
    open.write_all(b"written before the signal").unwrap();
    fs::remove_file(s.path("held")).unwrap(); // unlinked while open: must not stay an orphan
    fs::write(s.path("kept"), b"kept").unwrap();
    signal(&child, libc::SIGTERM);
    assert_eq!(wait_exit(&mut child), 0);
    assert!(!s.mounted());
    let e = open.write_all(b"after").unwrap_err().raw_os_error();
    assert!(matches!(e, Some(libc::ENOTCONN) | Some(libc::EIO)), "{e:?}");
    drop(open);
    s.assert_clean();
    let mut child = s.mount_foreground(&[]);
    assert_eq!(fs::read(s.path("kept")).unwrap(), b"kept");
    assert!(!s.path("held").exists());
    signal(&child, libc::SIGTERM);
    assert_eq!(wait_exit(&mut child), 0);
}

#[test]
fn refuses_clearly() {
    if !fuse_available("refuses_clearly") {
        return;
    }
    let s = Setup::new();
    let check = |out: Output, code: i32, want: &str| {
        assert_eq!(out.status.code(), Some(code), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(want),
            "want {want:?} in {}",
            text(&out.stderr)
        );
    };
    // missing mount point, mount point not a directory
    check(
        nvmfs()
            .arg("mount")
            .arg(s.image())
            .arg(s.dir.path().join("nope"))
            .output()
            .unwrap(),
        32,
        "does not exist",
    );
    check(
        nvmfs()
            .arg("mount")
            .arg(s.image())
            .arg(s.image())
            .output()
            .unwrap(),
        32,
        "not a directory",
    );
    // missing image, unknown option
    check(
        nvmfs()
            .arg("mount")
            .arg(s.dir.path().join("none.img"))
            .arg(s.mnt())
            .output()
            .unwrap(),
        32,
        "does not exist",
    );
    check(
        s.mount(&["-o", "ro,bogus"]),
        1,
        "unknown mount option 'bogus'",
    );
    check(s.mount(&["-o", "auto_unmount"]), 1, "auto_unmount needs");
    // damaged image: both superblocks zeroed
    let mut bytes = fs::read(s.image()).unwrap();
    let good = bytes.clone();
    bytes[..4096].fill(0);
    bytes[4096..8192].fill(0);
    fs::write(s.image(), &bytes).unwrap();
    check(s.mount(&[]), 32, "damaged");
    assert!(!s.mounted());
    fs::write(s.image(), &good).unwrap();
    s.mount_ok(&[]);
    fusermount_u(&s.mnt(), false);
    s.wait_released();
    s.assert_clean();
}

/// kill -9 of the serving process in the middle of writes: every write that returned to the
/// program is on the image after recovery, and the image checks clean.
#[test]
fn kill_9_during_writes_keeps_acknowledged_data() {
    if fuse_available("kill_9_during_writes_keeps_acknowledged_data") {
        kill_9_during_writes(&[]);
    }
}

/// The same over FUSE over io_uring: a write the ring's reply acknowledged is as durable.
#[test]
fn kill_9_during_writes_over_io_uring_keeps_acknowledged_data() {
    const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";
    let test = "kill_9_during_writes_over_io_uring_keeps_acknowledged_data";
    if !fuse_available(test) {
        return;
    }
    match fs::read_to_string(PARAM) {
        Ok(v) if v.trim() == "Y" || (is_root() && fs::write(PARAM, "Y").is_ok()) => {}
        _ => return eprintln!("skipping {test}: FUSE over io_uring is not available"),
    }
    kill_9_during_writes(&["-o", "io_uring"]);
}

fn kill_9_during_writes(opts: &[&str]) {
    let s = Setup::new();
    let mut child = s.mount_foreground(opts);
    const REC: usize = 4096 + 100;
    let record = |i: usize| {
        let mut r = vec![(i % 251) as u8; REC];
        r[..8].copy_from_slice(&(i as u64).to_le_bytes());
        r
    };
    let mnt = s.mnt();
    let writer = std::thread::spawn(move || {
        let mut log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(mnt.join("log"))
            .unwrap();
        let (mut files, mut records) = (0usize, 0usize);
        loop {
            if log.write_all(&record(records)).is_err() {
                break;
            }
            records += 1;
            if fs::write(mnt.join(format!("f{files}")), record(files)).is_err() {
                break;
            }
            files += 1;
        }
        (files, records)
    });
    std::thread::sleep(Duration::from_millis(400));
    signal(&child, libc::SIGKILL);
    wait_exit(&mut child);
    let (files, records) = writer.join().unwrap();
    if opts.contains(&"io_uring") {
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(err.contains("io_uring: requests are served"), "{err}");
    }
    assert!(
        files > 10 && records > 10,
        "too few writes: {files} files, {records} records"
    );

    // The dead daemon leaves a stale mount; mount refuses it until it is cleaned up.
    let out = s.mount(&[]);
    assert_eq!(out.status.code(), Some(32));
    assert!(text(&out.stderr).contains("stale"), "{}", text(&out.stderr));
    fusermount_u(&s.mnt(), true);

    // fsck: no problems (recovery notes are expected after a crash)
    let out = nvmfs().arg("fsck").arg(s.image()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "fsck: {}", text(&out.stdout));

    let out = s.mount_ok(&[]);
    assert!(
        text(&out.stderr).contains("not unmounted cleanly"),
        "{}",
        text(&out.stderr)
    );
    let log = fs::read(s.path("log")).unwrap();
    assert!(log.len() >= records * REC, "log lost acknowledged records");
    for i in 0..records {
        assert!(
            log[i * REC..(i + 1) * REC] == record(i),
            "record {i} differs"
        );
    }
    for i in 0..files {
        assert_eq!(
            fs::read(s.path(&format!("f{i}"))).unwrap(),
            record(i),
            "file f{i}"
        );
    }
    fusermount_u(&s.mnt(), false);
    s.wait_released();
    s.assert_clean();
}
