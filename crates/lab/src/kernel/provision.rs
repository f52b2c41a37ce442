//! Provisioning one variant: backing file on a tmpfs, loop device, mkfs,
//! mount point, mount; and undoing all of it.

use super::cleanup::{register, unregister};
use super::command::CommandLine;
use super::probe::{self, Availability};
use super::resource::{self, Resource};
use super::variant::Variant;
use super::MIN_DEVICE_BYTES;
use serde::Serialize;
use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers the backing files and mount points of this process.
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// The `mount` source of tmpfs variants, to recognise them in /proc/mounts.
const TMPFS_SOURCE: &str = "nvmfs-lab";

/// A kernel file system freshly made on a RAM-backed loop device (or a
/// tmpfs) and mounted. Dropping it tears it down like
/// [`teardown`](Provisioned::teardown), printing errors as warnings.
pub struct Provisioned {
    variant: Variant,
    /// Numbers this value's backing file and mount point.
    serial: u64,
    mount_point: PathBuf,
    info: ProvisionInfo,
    /// What exists, in creation order, with registry ids; undone newest
    /// first.
    created: Vec<(u64, Resource)>,
}

/// What was run to provision a variant, for the report's environment
/// section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProvisionInfo {
    /// [`Variant::name`].
    pub variant: String,
    /// [`Variant::paper_name`].
    pub paper_name: Option<String>,
    /// [`Variant::fs_type`].
    pub fs_type: String,
    /// Size of the device (or the tmpfs size limit).
    pub size_bytes: u64,
    /// The mkfs command line as run; `None` for tmpfs.
    pub mkfs_command: Option<String>,
    /// First line of the mkfs program's version output, e.g. "mkfs.xfs
    /// version 6.1.0".
    pub mkfs_version: Option<String>,
    /// The mount command line as run.
    pub mount_command: String,
    /// Where the file system is mounted.
    pub mount_point: String,
    /// The loop device; `None` for tmpfs.
    pub loop_device: Option<String>,
    /// The loop device's backing file; `None` for tmpfs.
    pub backing_file: Option<String>,
    /// Whether the loop device reads and writes its backing file with
    /// direct I/O (as read back from sysfs) rather than through a second
    /// copy in the page cache; `None` for tmpfs.
    pub direct_io: Option<bool>,
    /// `uname -r`.
    pub kernel_release: String,
    /// Anything that did not go as asked, e.g. direct I/O refused.
    pub notes: Vec<String>,
}

impl Provisioned {
    /// Makes and mounts `v` on a fresh device of `size_bytes`.
    ///
    /// Block-backed variants get a sparse backing file
    /// `<shm_dir>/nvmfs-lab-<pid>-<n>.img` (created exclusively, never
    /// clobbering anything), attached to a free loop device with direct I/O
    /// on, then mkfs and a mount on a new directory
    /// `<temp_dir>/nvmfs-lab-mnt-<pid>-<n>`. tmpfs only gets the directory
    /// and `mount -t tmpfs -o size=...`.
    ///
    /// `size_bytes` must be a multiple of 4096 and at least
    /// [`MIN_DEVICE_BYTES`]; the variant must be available
    /// ([`availability`](super::availability)) and `shm_dir` must have room
    /// for the whole device. On any error part-way, everything created so
    /// far is removed before the error is returned.
    pub fn create(v: &Variant, shm_dir: &Path, size_bytes: u64) -> io::Result<Self> {
        check_request(v, shm_dir, size_bytes)?;
        let mut p = Provisioned::new(v, size_bytes);
        match p.build(shm_dir) {
            Ok(()) => Ok(p),
            Err(e) => Err(match p.release() {
                Ok(()) => e,
                Err(undo) => io::Error::new(e.kind(), format!("{e} (and then: {undo})")),
            }),
        }
    }

    /// Where the file system is mounted.
    pub fn mount_point(&self) -> &Path {
        &self.mount_point
    }

    /// The variant this was made from.
    pub fn variant(&self) -> &Variant {
        &self.variant
    }

    /// Empties the file system's caches between trials by unmounting it and
    /// mounting it again with the same options; returns `Ok(true)`.
    ///
    /// Unmounting writes everything back and frees the file system's
    /// caches, and the last close of the loop device drops its page cache,
    /// so no global `drop_caches` is needed. Files must be closed first: a
    /// busy file system is an error here, not a lazy unmount that would
    /// keep the old caches alive. After a failed remount the file system
    /// may be left unmounted; teardown still works.
    ///
    /// A tmpfs would lose its files, so for tmpfs this does nothing and
    /// returns `Ok(false)`.
    pub fn remount(&mut self) -> io::Result<bool> {
        if !self.variant.is_block_backed() {
            return Ok(false);
        }
        if let Some((id, Resource::Mount(dir))) = self.created.last() {
            let id = *id;
            resource::unmount(dir, resource::UMOUNT_TRIES, false)?;
            self.created.pop();
            unregister(id);
        }
        self.mount()?;
        Ok(true)
    }

    /// What was run, for the report's environment section.
    pub fn info(&self) -> ProvisionInfo {
        self.info.clone()
    }

    /// Unmounts (retrying a busy file system a few times, then lazily),
    /// detaches the loop device, removes the backing file and the mount
    /// point. Every step is tried even if an earlier one failed; the
    /// failures are returned together. Resources that could not be removed
    /// stay in [`live_resources`](super::live_resources), except a loop
    /// device that the kernel will detach by itself: with files still open,
    /// the lazy unmount leaves the file system alive, holding the device,
    /// until they are closed.
    pub fn teardown(mut self) -> io::Result<()> {
        self.release()
    }

    fn new(v: &Variant, size_bytes: u64) -> Self {
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let mount_point =
            std::env::temp_dir().join(format!("nvmfs-lab-mnt-{}-{n}", std::process::id()));
        let info = ProvisionInfo {
            variant: v.name.clone(),
            paper_name: v.paper_name.clone(),
            fs_type: v.fs_type.clone(),
            size_bytes,
            mkfs_command: None,
            mkfs_version: None,
            mount_command: String::new(),
            mount_point: mount_point.display().to_string(),
            loop_device: None,
            backing_file: None,
            direct_io: None,
            kernel_release: probe::kernel_release(),
            notes: Vec::new(),
        };
        Provisioned {
            variant: v.clone(),
            serial: n,
            mount_point,
            info,
            created: Vec::new(),
        }
    }

    fn build(&mut self, shm_dir: &Path) -> io::Result<()> {
        fs::create_dir(&self.mount_point)
            .map_err(|e| annotate(e, "cannot create mount point", &self.mount_point))?;
        self.push(Resource::Dir(self.mount_point.clone()));
        if self.variant.is_block_backed() {
            let backing = self.make_backing_file(shm_dir)?;
            let device = self.attach_loop(&backing)?;
            self.mkfs(&device)?;
        }
        self.mount()
    }

    /// Records a resource that now exists, here and in the registry.
    fn push(&mut self, r: Resource) {
        let id = register(r.clone());
        self.created.push((id, r));
    }

    fn make_backing_file(&mut self, shm_dir: &Path) -> io::Result<PathBuf> {
        // Absolute and free of symlinks, as sysfs reports the backing file.
        let dir = fs::canonicalize(shm_dir).map_err(|e| annotate(e, "bad shm dir", shm_dir))?;
        let name = format!("nvmfs-lab-{}-{}.img", std::process::id(), self.serial);
        let path = dir.join(name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| annotate(e, "cannot create backing file", &path))?;
        self.push(Resource::File(path.clone()));
        file.set_len(self.info.size_bytes)
            .map_err(|e| annotate(e, "cannot size backing file", &path))?;
        self.info.backing_file = Some(path.display().to_string());
        Ok(path)
    }

    /// `losetup -f --show`, then `losetup --direct-io=on` as a separate
    /// step: losetup 2.38 given both at once exits non-zero when direct I/O
    /// is refused but leaves the device attached, which a failure path
    /// could not tell from an attach that failed.
    fn attach_loop(&mut self, backing: &Path) -> io::Result<PathBuf> {
        let file = backing.to_string_lossy();
        let attached = CommandLine::new("losetup", &["-f", "--show", &file]).run();
        // Whatever losetup says, take over any device now on our file.
        for device in resource::loops_backed_by(backing) {
            self.push(Resource::Loop {
                device,
                backing: backing.to_path_buf(),
            });
        }
        let device = PathBuf::from(attached?.trim());
        if !resource::backs(&device, backing) {
            return Err(io::Error::other(format!(
                "losetup reported {} for {file}, but sysfs does not show it attached",
                device.display()
            )));
        }
        let dev = device.to_string_lossy();
        if let Err(e) = CommandLine::new("losetup", &["--direct-io=on", &dev]).run() {
            self.info
                .notes
                .push(format!("direct I/O refused, buffered loop device: {e}"));
        }
        self.info.direct_io = Some(resource::loop_direct_io(&device));
        self.info.loop_device = Some(dev.into_owned());
        Ok(device)
    }

    fn mkfs(&mut self, device: &Path) -> io::Result<()> {
        let cmd = CommandLine::from_argv(&self.variant.mkfs_args)?.arg(device.to_string_lossy());
        self.info.mkfs_command = Some(cmd.to_string());
        self.info.mkfs_version = mkfs_version(cmd.program());
        cmd.run().map(drop)
    }

    fn mount(&mut self) -> io::Result<()> {
        let source = self.info.loop_device.as_deref().unwrap_or(TMPFS_SOURCE);
        let mut args = vec!["-t", self.variant.fs_type.as_str()];
        if !self.variant.mount_options.is_empty() {
            args.extend(["-o", self.variant.mount_options.as_str()]);
        }
        let dir = self.mount_point.to_string_lossy();
        args.extend([source, &dir]);
        let cmd = CommandLine::new("mount", &args);
        self.info.mount_command = cmd.to_string();
        cmd.run()?;
        self.push(Resource::Mount(self.mount_point.clone()));
        Ok(())
    }

    /// Undoes everything created, newest first, continuing past failures.
    fn release(&mut self) -> io::Result<()> {
        let mut errors = Vec::new();
        while let Some((id, r)) = self.created.pop() {
            match r.undo(false) {
                Ok(()) => unregister(id),
                Err(e) => {
                    // A deferred undo is the kernel's to finish, not ours
                    // to retry; still worth an error for the caller.
                    if e.deferred {
                        unregister(id);
                    }
                    errors.push(e.message);
                }
            }
        }
        if errors.is_empty() {
            return Ok(());
        }
        Err(io::Error::other(format!(
            "tearing down {} on {}: {}",
            self.variant.name,
            self.mount_point.display(),
            errors.join("; ")
        )))
    }
}

impl Drop for Provisioned {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            eprintln!("warning: {e}");
        }
    }
}

fn annotate(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

/// Refuses what cannot work before creating anything.
fn check_request(v: &Variant, shm_dir: &Path, size_bytes: u64) -> io::Result<()> {
    let invalid = |msg: String| Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
    if size_bytes < MIN_DEVICE_BYTES {
        return invalid(format!(
            "device size {size_bytes} bytes is below the lab's minimum of {} MiB (mkfs.xfs \
             refuses file systems under 300 MB)",
            MIN_DEVICE_BYTES >> 20
        ));
    }
    if !size_bytes.is_multiple_of(4096) {
        return invalid(format!(
            "device size {size_bytes} is not a multiple of 4096 bytes"
        ));
    }
    if let Availability::Unavailable { reason } = probe::availability(v) {
        let msg = format!("cannot provision {}: {reason}", v.name);
        return Err(io::Error::new(io::ErrorKind::Unsupported, msg));
    }
    if v.is_block_backed() {
        check_space(shm_dir, size_bytes)?;
    }
    Ok(())
}

/// The device is sparse, but a benchmark may fill it: a tmpfs that runs out
/// underneath a loop device shows up as I/O errors inside the file system.
fn check_space(shm_dir: &Path, size_bytes: u64) -> io::Result<()> {
    let available = available_bytes(shm_dir).map_err(|e| annotate(e, "bad shm dir", shm_dir))?;
    if available < size_bytes {
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "{} has {} MiB free, too little for a {} MiB device",
                shm_dir.display(),
                available >> 20,
                size_bytes >> 20
            ),
        ));
    }
    Ok(())
}

fn available_bytes(dir: &Path) -> io::Result<u64> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs writes into a zeroed struct we own; `c` is a valid C
    // string for the duration of the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// First line of `<program> -V` (`--version` for mkfs.btrfs), from stdout
/// or stderr (mke2fs prints it there); `None` if nothing useful comes out.
fn mkfs_version(program: &str) -> Option<String> {
    let flag = if program.ends_with("mkfs.btrfs") {
        "--version"
    } else {
        "-V"
    };
    let out = CommandLine::new(program, &[flag]).output().ok()?;
    [&out.stdout, &out.stderr]
        .iter()
        .flat_map(|bytes| {
            String::from_utf8_lossy(bytes)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .map(|l| l.trim().to_string())
        .find(|l| !l.is_empty())
}
