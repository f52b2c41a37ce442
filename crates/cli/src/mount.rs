//! `nvmfs mount IMAGE MOUNTPOINT [-o OPTIONS] [-f]`: serve an image through FUSE.
//!
//! Order: parse options, check the mount point, mount the image (recovery runs here), mount
//! FUSE and finish the handshake, and only then fork into the background: every error up to
//! a live mount reaches the caller with a non-zero exit. The serving process blocks SIGTERM,
//! SIGINT and SIGHUP in all threads and waits for them in one thread, which unmounts the mount
//! point; the session then ends as after `fusermount3 -u` or `umount`, and the image is
//! marked clean.

use std::ffi::{CString, OsString};
use std::io::{self, Write as _};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nvmfs::{Fs, RecoveryReport};
use nvmfs_fuse::{MountConfig, Shutdown};
use parking_lot::Mutex;

/// mount(8)'s exit status for a failed mount.
pub const EXIT_MOUNT_FAILED: u8 = 32;
const EXIT_USAGE: u8 = 1;

#[derive(clap::Args, Debug)]
#[command(
    about = "Mount an nvmfs image with FUSE (in the background unless -f)",
    long_about = "Mount an nvmfs image on a directory with FUSE.\n\n\
        The command returns once the mount is live; the file system is then served by a \
        background process (with -f, by this one until it is unmounted). Unmount with \
        `fusermount3 -u MOUNTPOINT`, `umount MOUNTPOINT` (root), or SIGTERM / SIGINT to the \
        serving process; the image is then marked clean. A write that returned to a program \
        is durable (unless -o writeback_cache).\n\n\
        The kernel checks permissions (default_permissions is always on). Without allow_other \
        only the user who mounted can use the mount, as with every FUSE file system.",
    after_help = "Options (-o, comma-separated; see README.md for each):\n  \
        ro                      mount read-only (image opened read-only; refused if unclean)\n  \
        rw                      mount read-write (default)\n  \
        allow_other             let every user use the mount (non-root: needs user_allow_other in /etc/fuse.conf)\n  \
        allow_root              let the mounting user and root use the mount\n  \
        default_permissions     kernel permission checks (always on; accepted for compatibility)\n  \
        auto_unmount            unmount when the daemon dies, even by SIGKILL (needs allow_other or allow_root)\n  \
        fsname=NAME             source shown in /proc/mounts (default: the image path)\n  \
        subtype=NAME            type shown as fuse.NAME (default: nvmfs)\n  \
        dev,suid,noexec,noatime,sync,dirsync (and their opposites): kernel mount flags; FUSE defaults to nodev,nosuid\n  \
        writeback_cache         kernel write-back caching: faster small writes, but a write is durable only after\n                          fsync, close or unmount (off by default)\n  \
        direct_io               bypass the kernel page cache for file data (no shared writable mmap)\n  \
        attr_timeout=SECS       kernel attribute cache time (default 1)\n  \
        entry_timeout=SECS      kernel name cache time (default 1)\n  \
        max_threads=N           threads serving requests (default: CPUs, 2 to 8)\n  \
        nonempty, defaults      accepted and ignored\n\n\
        Exit status: 0 mounted (and, with -f, unmounted cleanly); 1 bad options; 32 mount failed."
)]
pub struct Args {
    /// The image file (made with `nvmfs mkfs`)
    #[arg(value_name = "IMAGE")]
    pub image: PathBuf,
    /// An existing directory to mount on
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
    /// Mount options, comma-separated (may be repeated)
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
    pub options: Vec<String>,
    /// Stay in the foreground (log to stderr) until unmounted
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Log every FUSE request to stderr (implies -f)
    #[arg(short = 'd', long)]
    pub debug: bool,
}

fn fail(args: &Args, what: String) -> u8 {
    eprintln!(
        "nvmfs mount: cannot mount {} on {}: {what}",
        args.image.display(),
        args.mountpoint.display()
    );
    EXIT_MOUNT_FAILED
}

pub fn run(args: &Args) -> u8 {
    // mount(8) passes a remount every option of the mount, kernel-internal ones included
    // (user_id=, group_id=): only the flags matter there.
    if args
        .options
        .iter()
        .flat_map(|o| o.split(','))
        .any(|o| o.trim() == "remount")
    {
        return remount(args);
    }
    let mut cfg = MountConfig::default();
    for o in &args.options {
        if let Err(e) = cfg.parse(o) {
            eprintln!("nvmfs mount: -o {o}: {e}");
            return EXIT_USAGE;
        }
    }
    let foreground = args.foreground || args.debug;
    if let Err(msg) = check_mountpoint(&args.mountpoint) {
        return fail(args, msg);
    }
    if !Path::new("/dev/fuse").exists() {
        return fail(
            args,
            "FUSE is not available: /dev/fuse is missing (load the fuse module: modprobe fuse)"
                .into(),
        );
    }
    let fs = match Fs::mount(&args.image, &cfg.core_options()) {
        Ok(fs) => fs,
        Err(e) => return fail(args, explain_image_error(&args.image, &e)),
    };
    report_recovery(&args.image, fs.recovery_report());
    let fsname = std::fs::canonicalize(&args.image).unwrap_or_else(|_| args.image.clone());
    let fsname = fsname.to_string_lossy().into_owned();
    let (session, shutdown) = match nvmfs_fuse::session(fs.clone(), &args.mountpoint, &cfg, &fsname)
    {
        Ok(s) => s,
        Err(e) => {
            let _ = fs.unmount();
            return fail(args, explain_fuse_error(&e));
        }
    };
    let mountpoint = std::fs::canonicalize(&args.mountpoint).unwrap_or(args.mountpoint.clone());
    if cfg.io_uring {
        // Said here, before the fork, so that it reaches the terminal.
        if shutdown.io_uring_granted() {
            eprintln!(
                "nvmfs mount: io_uring: requests are served from {} rings, one per CPU",
                nvmfs_fuse::possible_cpus()
            );
        } else {
            eprintln!("nvmfs mount: warning: {}", nvmfs_fuse::io_uring_refused());
        }
    }

    if !foreground {
        let _ = io::stdout().flush();
        let _ = io::stderr().flush();
        // fork copies only the calling thread: refuse rather than continue with a child that
        // lost threads (and maybe locks they held), should mounting ever start one.
        let threads = std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count());
        if threads > 1 {
            drop(session);
            let _ = fs.unmount();
            return fail(
                args,
                format!("internal error: {threads} threads before fork; use -f"),
            );
        }
        // SAFETY: no thread has been started yet (the session's threads start in `run`), so
        // the child is a complete copy. The parent leaves with _exit: it must not run the
        // destructors that would unmount the session and mark the image clean.
        match unsafe { libc::fork() } {
            -1 => {
                let e = io::Error::last_os_error();
                drop(session);
                let _ = fs.unmount();
                return fail(args, format!("cannot fork into the background: {e}"));
            }
            0 => detach(),
            _ => unsafe { libc::_exit(0) },
        }
    }
    Logger::install(foreground, args.debug);

    // Blocked before the session threads start, so they inherit the mask and only the
    // signal thread sees these signals.
    let signals = block_signals();
    let fs_slot = Arc::new(Mutex::new(Some(fs)));
    {
        let (slot, mp) = (fs_slot.clone(), mountpoint.clone());
        let res = std::thread::Builder::new()
            .name("nvmfs-signals".into())
            .spawn(move || signal_thread(signals, mp, shutdown, slot));
        if let Err(e) = res {
            log::error!("cannot start the signal thread: {e}");
        }
    }
    log::info!(
        "{} mounted on {}{}",
        args.image.display(),
        mountpoint.display(),
        if cfg.read_only { " (read-only)" } else { "" }
    );
    if let Err(e) = session.run() {
        log::error!("FUSE session ended with an error: {e}");
    }
    finish(&fs_slot, &args.image)
}

/// Marks the image clean once nothing else holds the file system.
fn finish(slot: &Mutex<Option<Fs>>, image: &Path) -> u8 {
    // Held through the unmount, so a signal thread exiting the process waits for it.
    let mut g = slot.lock();
    let Some(fs) = g.take() else {
        return 0;
    };
    match fs.unmount() {
        Ok(()) => {
            log::info!("{} unmounted cleanly", image.display());
            0
        }
        Err(e) => {
            log::error!(
                "{}: could not mark the image clean ({e}); the next mount recovers it",
                image.display()
            );
            1
        }
    }
}

/// `nvmfs IMAGE MOUNTPOINT -o OPTIONS` (no subcommand) is `nvmfs mount ...`: the form
/// mount(8) runs, through mount.fuse3, for a `fuse.nvmfs` file system (fstab, or
/// `mount -t fuse.nvmfs IMAGE MOUNTPOINT`).
pub fn helper_form(mut args: Vec<OsString>, subcommands: &[&str]) -> Vec<OsString> {
    let is_helper = args.len() >= 3
        && args[1]
            .to_str()
            .is_none_or(|a| !a.starts_with('-') && !subcommands.contains(&a))
        && Path::new(&args[2]).is_dir();
    if is_helper {
        args.insert(1, "mount".into());
    }
    args
}

/// `-o remount,...`: changes the kernel flags of the existing mount on MOUNTPOINT (ro/rw,
/// nosuid, nodev, noexec, noatime, sync) and keeps the others. The image stays open as it was
/// mounted: `remount,ro` makes the kernel refuse every change; `remount,rw` of an image
/// mounted `ro` lets the kernel try, and nvmfs answers EROFS.
fn remount(args: &Args) -> u8 {
    let mp = std::fs::canonicalize(&args.mountpoint).unwrap_or(args.mountpoint.clone());
    if !is_nvmfs_mount(&mp) {
        return fail(args, format!("{} is not an nvmfs mount", mp.display()));
    }
    let Ok(c) = CString::new(mp.as_os_str().as_bytes()) else {
        return fail(args, "bad mount point path".into());
    };
    // SAFETY: statvfs into a zeroed struct; valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return fail(args, format!("statvfs: {}", io::Error::last_os_error()));
    }
    let flags = MountConfig::remount_flags(&args.options, st.f_flag);
    // FUSE sends the release of a closed file asynchronously, and until its reply the kernel
    // holds the inode: going read-only is refused (EBUSY) for a moment after an unlinked file
    // was closed. Retry for up to two seconds.
    let mut tries = 0;
    loop {
        // SAFETY: a remount of an existing mount point; no source, type or data.
        let r = unsafe {
            libc::mount(
                std::ptr::null(),
                c.as_ptr(),
                std::ptr::null(),
                flags,
                std::ptr::null(),
            )
        };
        if r == 0 {
            return 0;
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) || tries == 100 {
            return fail(args, format!("remount: {e}"));
        }
        tries += 1;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn is_nvmfs_mount(mp: &Path) -> bool {
    let Some(want) = mp.to_str() else {
        return false;
    };
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|s| {
        s.lines().any(|l| {
            l.split(' ').nth(4) == Some(want)
                && l.split(" - ").nth(1).is_some_and(|t| t.starts_with("fuse"))
        })
    })
}

fn check_mountpoint(mp: &Path) -> Result<(), String> {
    match std::fs::metadata(mp) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{} is not a directory", mp.display())),
        // ENOTCONN once the connection is gone; ECONNABORTED for a request that was waiting
        // when it went (FUSE over io_uring: the dead daemon's rings are torn down after it).
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) => {
            Err(format!(
                "{} is a stale FUSE mount (its daemon died); unmount it first: fusermount3 -u {}",
                mp.display(),
                mp.display()
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(format!("mount point {} does not exist", mp.display()))
        }
        Err(e) => Err(format!("mount point {}: {e}", mp.display())),
    }
}

fn explain_image_error(image: &Path, e: &io::Error) -> String {
    let shown = image.display();
    match e.kind() {
        io::ErrorKind::WouldBlock => {
            format!(
                "{shown} is already mounted or in use by another process (nvmfs mount, fsck -y, \
                 mkfs, or programs under nvmfs run)"
            )
        }
        io::ErrorKind::NotFound => format!("image {shown} does not exist"),
        io::ErrorKind::InvalidData => format!(
            "the image is damaged or not cleanly unmounted: {e}\n\
             Check it with: nvmfs fsck {shown}"
        ),
        _ => crate::output::with_path(image, e),
    }
}

fn explain_fuse_error(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::PermissionDenied => format!(
            "{e}\n(allow_other for a non-root user needs user_allow_other in /etc/fuse.conf)"
        ),
        io::ErrorKind::NotFound => format!(
            "{e}\n(unprivileged mounts and auto_unmount need fusermount3: install the fuse3 package)"
        ),
        _ => format!("FUSE mount failed: {e}"),
    }
}

fn report_recovery(image: &Path, r: &RecoveryReport) {
    if !r.unclean && !r.used_replica {
        return;
    }
    eprintln!(
        "nvmfs mount: {} was not unmounted cleanly; recovered: {} journal lanes rolled back, \
         {} torn lanes cleared, {} stray blocks freed, {} block counts fixed, {} orphans freed{}",
        image.display(),
        r.lanes_rolled_back,
        r.torn_lanes_cleared,
        r.stray_blocks_freed,
        r.block_counts_fixed,
        r.orphans_freed,
        if r.used_replica {
            " (primary superblock damaged: the replica was used; run nvmfs fsck)"
        } else {
            ""
        }
    );
}

/// The background process: a new session without a terminal, in /, stdio on /dev/null.
fn detach() {
    // SAFETY: plain system calls on our own process and descriptors.
    unsafe {
        libc::setsid();
        let _ = libc::chdir(c"/".as_ptr());
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
}

fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local; pthread_sigmask on the calling thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits for SIGTERM, SIGINT or SIGHUP and unmounts. If the mount point is busy, it is
/// detached (lazy unmount, as libfuse does on a signal), the adapter is shut down (requests
/// still in flight finish; later ones fail), the image is marked clean and the process exits,
/// which closes the FUSE connection.
fn signal_thread(
    set: libc::sigset_t,
    mp: PathBuf,
    shutdown: Shutdown,
    slot: Arc<Mutex<Option<Fs>>>,
) {
    loop {
        let mut sig = 0;
        // SAFETY: waits on a signal set we built; writes the signal number to `sig`.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            continue;
        }
        log::info!("signal {sig}: unmounting {}", mp.display());
        match unmount(&mp, false) {
            Ok(()) => continue, // the session ends; the main thread marks the image clean
            Err(e) => log::warn!(
                "{} could not be unmounted ({e}); detaching it and stopping",
                mp.display()
            ),
        }
        if let Err(e) = unmount(&mp, true) {
            log::error!("lazy unmount of {} failed: {e}", mp.display());
        }
        shutdown.shutdown();
        let code = finish(&slot, &mp);
        // SAFETY: ends the process without unwinding the threads blocked in the session.
        unsafe { libc::_exit(code as i32) };
    }
}

/// Unmounts `mp`: umount2(2) as root, fusermount3 -u otherwise; `lazy` detaches a busy mount.
fn unmount(mp: &Path, lazy: bool) -> io::Result<()> {
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } == 0 {
        let c = CString::new(mp.as_os_str().as_bytes())?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: a valid C string.
        if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
            return Ok(());
        }
        return Err(io::Error::last_os_error());
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u").arg("-q");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg("--").arg(mp).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

/// Log records to stderr (foreground) or syslog (background).
struct Logger {
    syslog: bool,
    debug: bool,
}

impl Logger {
    fn install(foreground: bool, debug: bool) {
        let l = Box::leak(Box::new(Logger {
            syslog: !foreground,
            debug,
        }));
        if l.syslog {
            // SAFETY: the identifier is a static C string, as openlog requires.
            unsafe { libc::openlog(c"nvmfs".as_ptr(), libc::LOG_PID, libc::LOG_DAEMON) };
        }
        if log::set_logger(l).is_ok() {
            log::set_max_level(if debug {
                log::LevelFilter::Debug
            } else {
                log::LevelFilter::Info
            });
        }
    }
}

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        // fuser logs each mount step at info; keep its warnings and errors only.
        self.debug || !m.target().starts_with("fuser") || m.level() <= log::Level::Warn
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let msg = format!("{}", r.args());
        if self.syslog {
            let prio = match r.level() {
                log::Level::Error => libc::LOG_ERR,
                log::Level::Warn => libc::LOG_WARNING,
                log::Level::Info => libc::LOG_INFO,
                _ => libc::LOG_DEBUG,
            };
            if let Ok(c) = CString::new(msg.replace('\0', " ")) {
                // SAFETY: "%s" with one valid C string argument.
                unsafe { libc::syslog(prio, c"%s".as_ptr(), c.as_ptr()) };
            }
        } else {
            eprintln!("nvmfs mount: {}: {msg}", r.level().as_str().to_lowercase());
        }
    }

    fn flush(&self) {}
}
