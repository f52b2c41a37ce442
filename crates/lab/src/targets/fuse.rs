//! The `fuse:nvmfs` target: an nvmfs image served through the kernel's FUSE
//! by an in-process fuser session, reached with system calls on the mount
//! point. Against the `nvmfs` target it shows what the trip through the
//! kernel costs (a context switch to a server thread per request, the
//! kernel's page cache and attribute/entry caches in front).

use crate::kernel::{self, Resource};
use crate::targets::nvmfs::{format_scratch, mount_image};
use crate::targets::sys::{annotate, ScratchDir, ScratchFile, SysFs};
use nvmfs::Fs;
use nvmfs_fuse::fuser::BackgroundSession;
use nvmfs_fuse::MountConfig;
use std::io;
use std::path::{Path, PathBuf};

/// Why FUSE mounts cannot work here, if they cannot.
pub fn unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing (no FUSE in this kernel or container)".into());
    }
    // SAFETY: a plain getter.
    let root = unsafe { libc::geteuid() } == 0;
    let helper = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").exists()));
    if !root && !helper {
        return Some("not root and fusermount3 (package fuse3) is not installed".into());
    }
    None
}

/// The mount options used, for the report.
pub fn describe_options(cfg: &MountConfig) -> String {
    let transport = if cfg.io_uring {
        format!(
            "`-o io_uring`: requests over FUSE over io_uring, {} rings (one per CPU), each served by a thread pinned to its CPU",
            nvmfs_fuse::possible_cpus()
        )
    } else {
        format!(
            "default `nvmfs mount` options: {} server threads reading /dev/fuse",
            cfg.max_threads
        )
    };
    let writes = if cfg.writeback_cache {
        "`-o writeback_cache`: the kernel's write-back cache, written data durable at fsync or \
         close as on a kernel file system (as root, the mount's dirty-page limit is lifted to a \
         block device's)"
    } else {
        "no writeback cache: every write durable on return"
    };
    format!(
        "{transport}; kernel page cache for data, attr_timeout={}s, entry_timeout={}s, {writes}",
        cfg.attr_timeout.as_secs_f64(),
        cfg.entry_timeout.as_secs_f64(),
    )
}

/// A mounted FUSE session over a fresh image. Dropping it unmounts (lazily
/// if need be) and deletes the image and the mount point.
pub struct FuseTarget {
    // Field order is drop order: the session and mount go before the
    // directory and the image.
    session: Option<BackgroundSession>,
    fs: Option<Fs>,
    /// Registry id of the mount, so a second Ctrl-C unmounts it.
    mount_id: Option<u64>,
    sys: SysFs,
    cfg: MountConfig,
    mnt: ScratchDir,
    image: ScratchFile,
}

impl FuseTarget {
    /// Formats `image` (which must not exist yet), creates the directory
    /// `mnt` and mounts the image there with `cfg`.
    pub fn create(
        image: PathBuf,
        mnt: PathBuf,
        size_bytes: u64,
        inode_count: u64,
        cfg: MountConfig,
    ) -> io::Result<Self> {
        if let Some(why) =
            unavailable().or_else(|| cfg.io_uring.then(nvmfs_fuse::io_uring_unavailable)?)
        {
            return Err(io::Error::new(io::ErrorKind::Unsupported, why));
        }
        let image = format_scratch(image, size_bytes, inode_count)?;
        let mnt = ScratchDir::create(mnt)?;
        let mut t = FuseTarget {
            session: None,
            fs: None,
            mount_id: None,
            sys: SysFs::new(mnt.path()),
            cfg,
            mnt,
            image,
        };
        t.mount()?;
        Ok(t)
    }

    fn mount(&mut self) -> io::Result<()> {
        let fs = mount_image(self.image.path(), &self.cfg.core_options())?;
        let (session, shutdown) =
            nvmfs_fuse::session(fs.clone(), self.mnt.path(), &self.cfg, "nvmfs-lab")
                .map_err(|e| annotate(e, "cannot mount FUSE on", self.mnt.path()))?;
        self.mount_id = Some(kernel::register(Resource::Mount(
            self.mnt.path().to_path_buf(),
        )));
        if self.cfg.io_uring && !shutdown.io_uring_granted() {
            // Results over /dev/fuse must not be reported as io_uring's.
            drop(session);
            if let Some(id) = self.mount_id.take() {
                kernel::unregister(id);
            }
            let _ = fs.unmount();
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                nvmfs_fuse::io_uring_refused(),
            ));
        }
        self.fs = Some(fs);
        let session = session
            .spawn()
            .map_err(|e| annotate(e, "cannot start the FUSE session for", self.mnt.path()))?;
        self.session = Some(session);
        Ok(())
    }

    /// Unmounts through the kernel, waits for the session to end and
    /// unmounts the image cleanly.
    fn unmount(&mut self) -> io::Result<()> {
        if let Some(s) = self.session.take() {
            s.umount_and_join()
                .map_err(|e| annotate(e, "cannot unmount FUSE on", self.mnt.path()))?;
        }
        if let Some(id) = self.mount_id.take() {
            kernel::unregister(id);
        }
        match self.fs.take() {
            Some(fs) => fs
                .unmount()
                .map_err(|e| annotate(e, "cannot unmount nvmfs image", self.image.path())),
            None => Ok(()),
        }
    }

    /// Unmounts and mounts again: the kernel's page cache and dentry and
    /// attribute caches of the mount go, and nvmfs rebuilds its DRAM state.
    pub fn remount(&mut self) -> io::Result<()> {
        self.unmount()?;
        self.mount()
    }

    /// Unmounts cleanly, reporting errors (image and directory go on drop).
    pub fn close(mut self) -> io::Result<()> {
        self.unmount()
    }

    pub fn image_path(&self) -> &Path {
        self.image.path()
    }

    pub fn mount_point(&self) -> &Path {
        self.mnt.path()
    }

    pub fn options(&self) -> &MountConfig {
        &self.cfg
    }
}

impl Drop for FuseTarget {
    fn drop(&mut self) {
        if self.session.is_some() {
            // An error part-way: detach at once so the directory can go; the
            // session thread ends when the kernel drops the connection.
            let _ = kernel::unmount_lazily(self.mnt.path());
            drop(self.session.take());
        }
        if let Some(id) = self.mount_id.take() {
            kernel::unregister(id);
        }
        if let Some(fs) = self.fs.take() {
            let _ = fs.unmount();
        }
    }
}

impl crate::filebench::LabTarget for FuseTarget {
    type Fs = SysFs;

    fn fs(&self) -> &SysFs {
        &self.sys
    }

    fn remount(&mut self) -> io::Result<bool> {
        FuseTarget::remount(self).map(|()| true)
    }
}
