//! Shared mounts: several processes on one image at once (nvmfs::shared).
//!
//! The other processes are this test binary run again as a worker (`NVMFS_SHARED_WORKER`
//! names the job, see `worker`), so each has its own DRAM state, as programs under
//! `nvmfs run` do. Every test ends with an fsck of the image.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nvmfs::shared::{SharedMount, SharedOptions};
use nvmfs::{FormatOptions, Fs, MountOptions};

/// Held for writing while a test has a descriptor open that children inherit (not
/// close-on-exec): other tests' workers, spawned meanwhile by this same process, would inherit
/// it too and keep that test's description alive (correctly, as POSIX says).
static INHERIT: std::sync::RwLock<()> = std::sync::RwLock::new(());

struct Image {
    path: PathBuf,
}

impl Image {
    fn new(tag: &str) -> Image {
        let dir = std::env::temp_dir().join(format!(
            "nvmfs-shared-{tag}-{}-{}",
            std::process::id(),
            fastrand_u64()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("img");
        Fs::format(
            &path,
            &FormatOptions {
                size_bytes: 64 << 20,
                inode_count: Some(8192),
                ..Default::default()
            },
        )
        .unwrap();
        Image { path }
    }

    fn attach(&self) -> SharedMount {
        SharedMount::attach(&self.path, &SharedOptions::default()).unwrap()
    }

    fn worker(&self, job: &str, arg: &str) -> Child {
        let _g = INHERIT.read().unwrap();
        self.worker_unlocked(job, arg)
    }

    fn worker_unlocked(&self, job: &str, arg: &str) -> Child {
        Command::new(std::env::current_exe().unwrap())
            .args(["worker", "--exact", "--nocapture", "--test-threads=1"])
            .env("NVMFS_SHARED_WORKER", job)
            .env("NVMFS_SHARED_ARG", arg)
            .env("NVMFS_SHARED_IMAGE", &self.path)
            .spawn()
            .unwrap()
    }

    /// The coordination file and description files of this image that exist in /dev/shm.
    fn coordination_files(&self) -> Vec<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&self.path).unwrap();
        let coord = format!("nvmfs-{:x}-{:x}.coord", m.dev(), m.ino());
        std::fs::read_dir("/dev/shm")
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&coord))
            })
            .collect()
    }

    /// fsck after every process detached (which removed the coordination files): clean, and
    /// the image marked clean.
    fn check_clean(&self) {
        let left = self.coordination_files();
        assert!(left.is_empty(), "the last process out left {left:?}");
        let report = nvmfs::fsck::check_image(&self.path).unwrap();
        assert!(report.is_clean(), "fsck found problems: {report:?}");
        let fs = Fs::mount(&self.path, &MountOptions::default()).unwrap();
        assert!(
            !fs.recovery_report().unclean,
            "the last process out did not mark the image clean"
        );
        fs.unmount().unwrap();
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.path.parent().unwrap());
    }
}

fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

fn wait_ok(mut c: Child, what: &str) {
    let st = c.wait().unwrap();
    assert!(st.success(), "{what} failed: {st}");
}

fn content(worker: u32, i: u32) -> Vec<u8> {
    let len = 100 + (i as usize * 997 + worker as usize * 131) % 9000;
    (0..len)
        .map(|k| (k as u32 ^ i ^ worker << 4) as u8)
        .collect()
}

/// Creates, writes, renames and removes files of its own in the shared directory `/d`.
fn churn(m: &SharedMount, worker: u32, n: u32) {
    for i in 0..n {
        let name = format!("/d/w{worker}-{i}");
        m.op(|fs| fs.write_file(&name, &content(worker, i)))
            .unwrap();
        if i.is_multiple_of(3) {
            let to = format!("/d/r{worker}-{i}");
            m.op(|fs| fs.rename_path(&name, &to)).unwrap();
        }
        if i % 5 == 1 && i % 3 != 0 {
            m.op(|fs| fs.remove_file(&name)).unwrap();
        }
    }
}

fn expect_churned(m: &SharedMount, worker: u32, n: u32) {
    for i in 0..n {
        let plain = format!("/d/w{worker}-{i}");
        let renamed = format!("/d/r{worker}-{i}");
        let (path, present) = if i.is_multiple_of(3) {
            (renamed, true)
        } else {
            (plain, i % 5 != 1)
        };
        let got = m.op(|fs| fs.read_file(&path));
        match (present, got) {
            (true, Ok(data)) => assert_eq!(data, content(worker, i), "{path}"),
            (false, Err(e)) => assert_eq!(e.kind(), io::ErrorKind::NotFound, "{path}"),
            (p, r) => panic!("{path}: expected present={p}, got {:?}", r.map(|d| d.len())),
        }
    }
}

/// The worker side: `NVMFS_SHARED_WORKER` says what to do. A plain test run does nothing.
#[test]
fn worker() {
    let Ok(job) = std::env::var("NVMFS_SHARED_WORKER") else {
        return;
    };
    let arg = std::env::var("NVMFS_SHARED_ARG").unwrap_or_default();
    let image = PathBuf::from(std::env::var("NVMFS_SHARED_IMAGE").unwrap());
    let m = SharedMount::attach(&image, &SharedOptions::default()).unwrap();
    match job.as_str() {
        "churn" => {
            let w: u32 = arg.parse().unwrap();
            churn(&m, w, 300);
            expect_churned(&m, w, 300);
        }
        "churn-threads" => {
            // Two threads, each its own worker number: the gate admits both at once.
            let w: u32 = arg.parse().unwrap();
            std::thread::scope(|sc| {
                for t in 0..2 {
                    let m = &m;
                    sc.spawn(move || {
                        churn(m, w + t, 200);
                        expect_churned(m, w + t, 200);
                    });
                }
            });
        }
        "adopt" => {
            // Inherited descriptor: same inode, same (shared) offset.
            let (fd, ino) = arg.split_once(':').unwrap();
            let fd: i32 = fd.parse().unwrap();
            let d = m.adopt(fd).expect("inherited descriptor not recognised");
            assert_eq!(d.ino(), ino.parse::<u64>().unwrap());
            assert_eq!(d.offset().load(std::sync::atomic::Ordering::Acquire), 1234);
            d.offset().store(5678, std::sync::atomic::Ordering::Release);
            assert!(m.adopt(0).is_none() && m.adopt(1).is_none());
        }
        "hold-open" => {
            // Opens /held, reports through a marker file, keeps it until /release exists.
            let (fd, d) = {
                let ino = m.op(|fs| fs.resolve("/held", true)).unwrap().0;
                m.open_description(ino, libc::O_RDONLY, true).unwrap()
            };
            let f = m.op(|fs| fs.file_from_ino(d.ino(), true, false)).unwrap();
            std::fs::write(&arg, b"open").unwrap();
            let t = Instant::now();
            while !Path::new(&format!("{arg}.release")).exists() {
                assert!(t.elapsed() < Duration::from_secs(60));
                std::thread::sleep(Duration::from_millis(5));
            }
            let mut buf = vec![0u8; 5000];
            let n = m.op(|fs| {
                let _ = fs;
                f.read_at(&mut buf, 0)
            });
            assert_eq!(n.unwrap(), 5000);
            assert!(buf.iter().all(|&b| b == 7), "unlinked file's data changed");
            // SAFETY: closing our own descriptor before the handle goes, as the preload does.
            unsafe { libc::close(fd) };
            m.op(|_| drop(f));
        }
        "write-forever" => {
            // Appends and creates until killed.
            let mut i = 0u64;
            loop {
                let name = format!("/k/f{}", i % 50);
                let data = vec![(i % 251) as u8; 1 + (i as usize * 4099) % 70_000];
                m.op(|fs| fs.write_file(&name, &data)).unwrap();
                if i.is_multiple_of(7) {
                    let _ = m.op(|fs| fs.remove_file(&name));
                }
                if i == 20 {
                    std::fs::write(&arg, b"running").unwrap();
                }
                i += 1;
            }
        }
        "swap-dir" => {
            // /p/x moves to /p/y; a new /p/x holds an f with other contents.
            m.op(|fs| fs.rename_path("/p/x", "/p/y")).unwrap();
            m.op(|fs| fs.create_dir("/p/x")).unwrap();
            m.op(|fs| fs.write_file("/p/x/f", b"new")).unwrap();
        }
        other => panic!("unknown worker job {other}"),
    }
    m.detach();
}

#[test]
fn processes_change_one_directory_at_once() {
    let img = Image::new("churn");
    let m = img.attach();
    m.op(|fs| fs.create_dir("/d")).unwrap();
    let kids: Vec<Child> = (1..=3)
        .map(|w| img.worker("churn", &w.to_string()))
        .collect();
    churn(&m, 0, 300);
    for k in kids {
        wait_ok(k, "churn worker");
    }
    for w in 0..=3 {
        expect_churned(&m, w, 300);
    }
    let n = m.op(|fs| fs.read_dir("/d")).unwrap().len();
    // Per worker: 300 files, minus those removed (i % 5 == 1 and not renamed).
    let removed = (0..300).filter(|i| i % 5 == 1 && i % 3 != 0).count();
    assert_eq!(n, 4 * (300 - removed));
    m.detach();
    drop(m);
    img.check_clean();
}

/// This process's path walks reuse the directories its threads found before (the core's
/// per-thread lookup cache); a directory another process renamed and replaced must not be
/// walked into by its old answer.
#[test]
fn a_directory_another_process_replaced_is_walked_anew() {
    let img = Image::new("swap");
    let m = img.attach();
    m.op(|fs| fs.create_dir_all("/p/x")).unwrap();
    m.op(|fs| fs.write_file("/p/x/f", b"old")).unwrap();
    assert_eq!(m.op(|fs| fs.read_file("/p/x/f")).unwrap(), b"old");
    wait_ok(img.worker("swap-dir", ""), "swap-dir worker");
    assert_eq!(m.op(|fs| fs.read_file("/p/x/f")).unwrap(), b"new");
    assert_eq!(m.op(|fs| fs.read_file("/p/y/f")).unwrap(), b"old");
    m.detach();
    drop(m);
    img.check_clean();
}

#[test]
fn threads_of_several_processes_change_one_directory() {
    let img = Image::new("threads");
    let m = img.attach();
    m.op(|fs| fs.create_dir("/d")).unwrap();
    let kids: Vec<Child> = [10, 20]
        .iter()
        .map(|w| img.worker("churn-threads", &w.to_string()))
        .collect();
    std::thread::scope(|sc| {
        for w in 0..2 {
            let m = &m;
            sc.spawn(move || churn(m, w, 200));
        }
    });
    for k in kids {
        wait_ok(k, "churn-threads worker");
    }
    for w in [0, 1, 10, 11, 20, 21] {
        expect_churned(&m, w, 200);
    }
    m.detach();
    drop(m);
    img.check_clean();
}

#[test]
fn descriptions_are_shared_with_child_processes() {
    let img = Image::new("adopt");
    let m = img.attach();
    m.op(|fs| fs.write_file("/f", b"hello")).unwrap();
    let ino = m.op(|fs| fs.resolve("/f", true)).unwrap().0;
    // Not close-on-exec: the child inherits it, as a forked and exec'd program would.
    let inherit = INHERIT.write().unwrap();
    let (fd, d) = m.open_description(ino, libc::O_RDWR, false).unwrap();
    assert!(m.adopt(fd).is_some_and(|a| a.slot() == d.slot()));
    d.offset().store(1234, std::sync::atomic::Ordering::Release);
    wait_ok(
        img.worker_unlocked("adopt", &format!("{fd}:{ino}")),
        "adopt worker",
    );
    assert_eq!(d.offset().load(std::sync::atomic::Ordering::Acquire), 5678);
    // While the description lives, the file survives its unlink.
    m.op(|fs| fs.remove_file("/f")).unwrap();
    assert_eq!(m.op(|fs| fs.getattr(ino)).unwrap().nlink, 0);
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    drop(inherit);
    m.detach();
    drop(m);
    // The last process out frees nothing it does not know is free; recovery does.
    let report = nvmfs::fsck::check_image(&img.path).unwrap();
    assert!(report.is_clean(), "fsck found problems: {report:?}");
}

#[test]
fn unlinked_file_lives_while_another_process_holds_it() {
    let img = Image::new("unlink");
    let m = img.attach();
    m.op(|fs| fs.write_file("/held", &[7u8; 5000])).unwrap();
    let marker = img.path.with_extension("marker");
    let kid = img.worker("hold-open", marker.to_str().unwrap());
    let t = Instant::now();
    while !marker.exists() {
        assert!(t.elapsed() < Duration::from_secs(60), "worker never opened");
        std::thread::sleep(Duration::from_millis(5));
    }
    let ino = m.op(|fs| fs.resolve("/held", true)).unwrap().0;
    m.op(|fs| fs.remove_file("/held")).unwrap();
    // Still in use (an orphan): its blocks must not be handed to a new file.
    m.op(|fs| fs.write_file("/other", &[9u8; 20000])).unwrap();
    assert_eq!(m.op(|fs| fs.getattr(ino)).unwrap().nlink, 0);
    std::fs::write(format!("{}.release", marker.display()), b"").unwrap();
    wait_ok(kid, "hold-open worker");
    // The worker's close freed it (it was the last holder).
    let e = m.op(|fs| fs.getattr(ino)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    m.detach();
    drop(m);
    img.check_clean();
}

#[test]
fn descriptions_in_use_hold_their_inodes_and_closed_ones_do_not() {
    let img = Image::new("slots");
    let m = img.attach();
    // More descriptions than the first window of slots (64): every slot taken must be
    // searched when an inode loses its last link.
    let mut held = Vec::new();
    for i in 0..300 {
        let p = format!("/f{i}");
        m.op(|fs| fs.write_file(&p, b"x")).unwrap();
        let ino = m.op(|fs| fs.resolve(&p, true)).unwrap().0;
        let (fd, d) = m.open_description(ino, libc::O_RDONLY, true).unwrap();
        assert!(m.adopt(fd).is_some_and(|a| a.slot() == d.slot()));
        held.push((p, ino, fd));
    }
    // Spread over every description file, each description in the file of its slot.
    let mut files: Vec<(u64, u64)> = held
        .iter()
        .map(|&(_, _, fd)| {
            let m = std::fs::metadata(format!("/proc/self/fd/{fd}")).unwrap();
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        })
        .collect();
    files.sort_unstable();
    files.dedup();
    assert_eq!(files.len(), nvmfs::shared::DESC_FILES);
    assert_eq!(
        img.coordination_files().len(),
        1 + nvmfs::shared::DESC_FILES
    );
    for (p, ino, _) in &held {
        m.op(|fs| fs.remove_file(p)).unwrap();
        assert_eq!(
            m.op(|fs| fs.getattr(*ino)).unwrap().nlink,
            0,
            "{p} freed while held"
        );
    }
    for (_, _, fd) in &held {
        // SAFETY: our own descriptor.
        unsafe { libc::close(*fd) };
    }
    // A description closed where no process saw it still names its inode in its slot; its
    // lock is gone, so the file goes with its last link.
    m.op(|fs| fs.write_file("/g", b"y")).unwrap();
    let ino = m.op(|fs| fs.resolve("/g", true)).unwrap().0;
    let (fd, _) = m.open_description(ino, libc::O_RDONLY, true).unwrap();
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    m.op(|fs| fs.remove_file("/g")).unwrap();
    let e = m.op(|fs| fs.getattr(ino)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    m.detach();
    drop(m);
    img.check_clean();
}

#[test]
fn killed_process_is_recovered_while_others_run() {
    let img = Image::new("kill");
    let m = img.attach();
    m.op(|fs| fs.create_dir("/k")).unwrap();
    // Kill until at least two kills landed inside an operation (the worker spends nearly
    // all its time in one, so this takes two or three rounds).
    let mut round = 0u64;
    while m.recoveries() < 2 {
        assert!(round < 40, "no kill landed mid-operation in 40 rounds");
        round += 1;
        let marker = img.path.with_extension(format!("run{round}"));
        let mut kid = img.worker("write-forever", marker.to_str().unwrap());
        let t = Instant::now();
        while !marker.exists() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "worker never started"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // Keep working alongside it, then kill it at an arbitrary point.
        for i in 0..50 {
            m.op(|fs| fs.write_file(format!("/mine-{round}-{i}"), &[round as u8; 3000]))
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(3 + round % 5 * 7));
        kid.kill().unwrap();
        kid.wait().unwrap();
        for i in 0..50 {
            let path = format!("/mine-{round}-{i}");
            assert_eq!(
                m.op(|fs| fs.read_file(&path)).unwrap(),
                vec![round as u8; 3000]
            );
            m.op(|fs| fs.write_file(&path, &[1u8; 10])).unwrap();
        }
        // Whatever the worker left is consistent: every file reads fully.
        for e in m.op(|fs| fs.read_dir("/k")).unwrap() {
            let p = format!("/k/{}", e.file_name().to_str().unwrap());
            let data = m.op(|fs| fs.read_file(&p)).unwrap();
            assert!(data.iter().all(|&b| b == data[0]), "{p} is torn");
        }
    }
    m.detach();
    drop(m);
    let report = nvmfs::fsck::check_image(&img.path).unwrap();
    assert!(report.is_clean(), "fsck found problems: {report:?}");
}

#[test]
fn exclusive_and_shared_mounts_refuse_each_other() {
    let img = Image::new("excl");
    let m = img.attach();
    let e = Fs::mount(&img.path, &MountOptions::default())
        .err()
        .expect("an exclusive mount of a shared image must fail");
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
    m.detach();
    drop(m);
    let fs = Fs::mount(&img.path, &MountOptions::default()).unwrap();
    let e = SharedMount::attach(&img.path, &SharedOptions::default())
        .err()
        .expect("shared attach of an exclusively mounted image must fail");
    assert!(e.to_string().contains("exclusively"), "{e}");
    fs.unmount().unwrap();
}
