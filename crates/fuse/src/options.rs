//! Mount options (`-o a,b=c`): parsed once, then turned into the core's `MountOptions`, the
//! fuser session `Config` and the adapter's own settings.

use std::fmt;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};

/// Everything `-o` can set. `Default` is what a mount without `-o` gets.
#[derive(Clone, Debug, PartialEq)]
pub struct MountConfig {
    /// `ro`: the image is opened read-only (shared lock, no recovery) and the kernel mount is
    /// read-only.
    pub read_only: bool,
    /// `allow_other`: users other than the one who mounted may use the mount.
    pub allow_other: bool,
    /// `allow_root`: the mounting user and root may use the mount.
    pub allow_root: bool,
    /// `auto_unmount`: fusermount3 unmounts the mount point when the daemon dies (even by
    /// SIGKILL). Needs `allow_other` or `allow_root` (a fusermount3 rule).
    pub auto_unmount: bool,
    /// `fsname=NAME`: the source column of /proc/mounts (default: the image path).
    pub fsname: Option<String>,
    /// `subtype=NAME`: the type column shows `fuse.NAME` (default `nvmfs`).
    pub subtype: String,
    /// `ssd=PATH`: the SSD of a tiered image, when not at the path recorded by mkfs.
    pub ssd: Option<std::path::PathBuf>,
    /// Kernel mount flags passed through: `dev`/`nodev`, `suid`/`nosuid`, `exec`/`noexec`,
    /// `atime`/`noatime`, `sync`/`async`, `dirsync`. FUSE mounts default to nodev,nosuid.
    pub dev: bool,
    pub suid: bool,
    pub noexec: bool,
    pub noatime: bool,
    pub sync: bool,
    pub dirsync: bool,
    /// `writeback_cache`: the kernel buffers writes in its page cache and sends them later.
    /// Faster for small writes, but a write() that returned is only durable after fsync,
    /// close or unmount. Off by default.
    pub writeback_cache: bool,
    /// `direct_io`: bypass the kernel page cache for file data (every read and write goes to
    /// nvmfs; shared writable mmap is then refused by the kernel).
    pub direct_io: bool,
    /// `io_uring`: serve requests over FUSE over io_uring (one ring per CPU) where the kernel
    /// offers it (Linux 6.14+ with `/sys/module/fuse/parameters/enable_uring` on); otherwise
    /// a warning says why, and requests are read from /dev/fuse.
    pub io_uring: bool,
    /// `attr_timeout=SECS`: how long the kernel caches attributes (default 1).
    pub attr_timeout: Duration,
    /// `entry_timeout=SECS`: how long the kernel caches name lookups (default 1).
    pub entry_timeout: Duration,
    /// `max_threads=N`: threads serving requests (default: CPUs, 2..=8).
    pub max_threads: usize,
    /// `remount`: change the kernel flags (ro/rw, nosuid, ...) of an existing mount instead
    /// of mounting (what `mount -o remount,...` asks through mount.fuse3).
    pub remount: bool,
}

impl Default for MountConfig {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        MountConfig {
            read_only: false,
            allow_other: false,
            allow_root: false,
            auto_unmount: false,
            fsname: None,
            ssd: None,
            subtype: "nvmfs".into(),
            dev: false,
            suid: false,
            noexec: false,
            noatime: false,
            sync: false,
            dirsync: false,
            writeback_cache: false,
            direct_io: false,
            io_uring: false,
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
            max_threads: cpus.clamp(2, 8),
            remount: false,
        }
    }
}

/// A bad `-o` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError(pub String);

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OptionError {}

/// The option names `parse` accepts, for help texts.
pub const OPTION_NAMES: &str = "ro, rw, allow_other, allow_root, default_permissions, \
    auto_unmount, fsname=NAME, subtype=NAME, ssd=PATH, dev, nodev, suid, nosuid, exec, noexec, atime, \
    noatime, sync, async, dirsync, writeback_cache, direct_io, io_uring, attr_timeout=SECS, \
    entry_timeout=SECS, max_threads=N, remount, nonempty, defaults, _netdev, nofail, auto, \
    noauto, relatime, nodiratime, x-*, comment=*";

fn seconds(name: &str, v: &str) -> Result<Duration, OptionError> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| OptionError(format!("{name}={v}: expected seconds (0 to 86400)")))
}

impl MountConfig {
    /// Applies one or more comma-separated options (as given to `-o`); later ones win.
    pub fn parse<'a>(&mut self, opts: &'a str) -> Result<(), OptionError> {
        for opt in opts.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (name, value) = match opt.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (opt, None),
            };
            let flag = |v: Option<&str>| match v {
                None => Ok(()),
                Some(_) => Err(OptionError(format!("{name} takes no value"))),
            };
            let need = |v: Option<&'a str>| -> Result<&'a str, OptionError> {
                v.filter(|v| !v.is_empty())
                    .ok_or_else(|| OptionError(format!("{name} needs a value ({name}=...)")))
            };
            match name {
                "ro" => flag(value).map(|_| self.read_only = true)?,
                "rw" => flag(value).map(|_| self.read_only = false)?,
                "allow_other" => flag(value).map(|_| self.allow_other = true)?,
                "allow_root" => flag(value).map(|_| self.allow_root = true)?,
                // Always on: the core checks no permissions, so the kernel must (see README).
                "default_permissions" => flag(value)?,
                "auto_unmount" => flag(value).map(|_| self.auto_unmount = true)?,
                "fsname" => {
                    let v = need(value)?;
                    if v.contains(['\\', ' ', '\t', '\n']) {
                        return Err(OptionError(format!(
                            "fsname={v}: must not contain blanks or backslashes"
                        )));
                    }
                    self.fsname = Some(v.to_string());
                }
                "ssd" => self.ssd = Some(need(value)?.into()),
                "subtype" => {
                    let v = need(value)?;
                    if !v
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
                    {
                        return Err(OptionError(format!(
                            "subtype={v}: letters, digits, '.', '_' and '-' only"
                        )));
                    }
                    self.subtype = v.to_string();
                }
                "dev" => flag(value).map(|_| self.dev = true)?,
                "nodev" => flag(value).map(|_| self.dev = false)?,
                "suid" => flag(value).map(|_| self.suid = true)?,
                "nosuid" => flag(value).map(|_| self.suid = false)?,
                "exec" => flag(value).map(|_| self.noexec = false)?,
                "noexec" => flag(value).map(|_| self.noexec = true)?,
                "atime" => flag(value).map(|_| self.noatime = false)?,
                "noatime" => flag(value).map(|_| self.noatime = true)?,
                "sync" => flag(value).map(|_| self.sync = true)?,
                "async" => flag(value).map(|_| self.sync = false)?,
                "dirsync" => flag(value).map(|_| self.dirsync = true)?,
                "writeback_cache" => flag(value).map(|_| self.writeback_cache = true)?,
                "direct_io" => flag(value).map(|_| self.direct_io = true)?,
                "io_uring" => flag(value).map(|_| self.io_uring = true)?,
                "attr_timeout" => self.attr_timeout = seconds(name, need(value)?)?,
                "entry_timeout" => self.entry_timeout = seconds(name, need(value)?)?,
                "max_threads" => {
                    let v = need(value)?;
                    self.max_threads = v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=256).contains(n))
                        .ok_or_else(|| {
                            OptionError(format!("max_threads={v}: expected 1 to 256"))
                        })?;
                }
                "remount" => flag(value).map(|_| self.remount = true)?,
                // Accepted for fstab lines written for libfuse 2 and mount(8): FUSE 3 always
                // allows mounting over a non-empty directory; the others are for mount(8) or
                // systemd, or weaker than what nvmfs does (it never updates atime on reads).
                "nonempty" | "defaults" | "_netdev" | "nofail" | "auto" | "noauto" | "relatime"
                | "nodiratime" => flag(value)?,
                _ if name.starts_with("x-") || name == "comment" => {}
                _ => {
                    return Err(OptionError(format!(
                        "unknown mount option '{opt}' (known: {OPTION_NAMES})"
                    )))
                }
            }
        }
        if self.remount {
            return Ok(());
        }
        if self.auto_unmount && !self.allow_other && !self.allow_root {
            return Err(OptionError(
                "auto_unmount needs allow_other or allow_root (a fusermount3 rule)".into(),
            ));
        }
        if self.allow_other && self.allow_root {
            return Err(OptionError(
                "allow_other and allow_root are mutually exclusive".into(),
            ));
        }
        Ok(())
    }

    /// mount(2) flags for `-o remount,...`: the mount's current flags (`current`, statvfs's
    /// f_flag) with the ones `opts` (each a comma-separated list) name changed. Keeping the
    /// current ones matters: a remount replaces all of them (nosuid, nodev included).
    pub fn remount_flags(opts: &[String], current: u64) -> libc::c_ulong {
        let mut f: libc::c_ulong = libc::MS_REMOUNT;
        for (st, ms) in [
            (libc::ST_RDONLY, libc::MS_RDONLY),
            (libc::ST_NOSUID, libc::MS_NOSUID),
            (libc::ST_NODEV, libc::MS_NODEV),
            (libc::ST_NOEXEC, libc::MS_NOEXEC),
            (libc::ST_SYNCHRONOUS, libc::MS_SYNCHRONOUS),
            (libc::ST_NOATIME, libc::MS_NOATIME),
            (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
            (libc::ST_RELATIME, libc::MS_RELATIME),
        ] {
            if current & st != 0 {
                f |= ms;
            }
        }
        for opt in opts.iter().flat_map(|o| o.split(',')).map(str::trim) {
            match opt {
                "ro" => f |= libc::MS_RDONLY,
                "rw" => f &= !libc::MS_RDONLY,
                "nosuid" => f |= libc::MS_NOSUID,
                "suid" => f &= !libc::MS_NOSUID,
                "nodev" => f |= libc::MS_NODEV,
                "dev" => f &= !libc::MS_NODEV,
                "noexec" => f |= libc::MS_NOEXEC,
                "exec" => f &= !libc::MS_NOEXEC,
                "sync" => f |= libc::MS_SYNCHRONOUS,
                "async" => f &= !libc::MS_SYNCHRONOUS,
                "noatime" => f |= libc::MS_NOATIME,
                "atime" => f &= !libc::MS_NOATIME,
                _ => {}
            }
        }
        f
    }

    /// The core's mount options.
    pub fn core_options(&self) -> nvmfs::MountOptions {
        nvmfs::MountOptions {
            read_only: self.read_only,
            ssd: self.ssd.clone(),
        }
    }

    /// The fuser session configuration. `default_fsname` is used unless `fsname=` was given.
    pub fn session_config(&self, default_fsname: &str) -> Config {
        let mut o = vec![
            MountOption::FSName(
                self.fsname
                    .clone()
                    .unwrap_or_else(|| sanitize_fsname(default_fsname)),
            ),
            // A kernel option (not fuser's Subtype, which only fusermount3 would pass on), so
            // /proc/mounts shows fuse.nvmfs for root's direct mount(2) too.
            MountOption::CUSTOM(format!("subtype={}", self.subtype)),
            MountOption::DefaultPermissions,
            if self.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
        ];
        for (on, opt) in [
            (self.dev, MountOption::Dev),
            (self.suid, MountOption::Suid),
            (self.noexec, MountOption::NoExec),
            (self.noatime, MountOption::NoAtime),
            (self.sync, MountOption::Sync),
            (self.dirsync, MountOption::DirSync),
            (self.auto_unmount, MountOption::AutoUnmount),
        ] {
            if on {
                o.push(opt);
            }
        }
        let mut c = Config::default();
        c.mount_options = o;
        c.acl = if self.allow_other {
            SessionACL::All
        } else if self.allow_root {
            SessionACL::RootAndOwner
        } else {
            SessionACL::Owner
        };
        c.n_threads = Some(self.max_threads);
        // Each serving thread reads its own clone of /dev/fuse, so replies do not contend
        // on one device's processing queue.
        c.clone_fd = true;
        c
    }
}

/// A source name mount(2) and fusermount3 accept: no commas, blanks or backslashes.
fn sanitize_fsname(s: &str) -> String {
    let t: String = s
        .chars()
        .map(|c| if ", \t\n\\".contains(c) { '_' } else { c })
        .collect();
    if t.is_empty() {
        "nvmfs".into()
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_options_and_rejects_unknown() {
        let mut c = MountConfig::default();
        c.parse("ro,allow_other,default_permissions,attr_timeout=0.5,entry_timeout=0")
            .unwrap();
        assert!(c.read_only && c.allow_other);
        assert_eq!(c.attr_timeout, Duration::from_millis(500));
        assert_eq!(c.entry_timeout, Duration::ZERO);
        c.parse("rw,writeback_cache,max_threads=3,fsname=img,subtype=x.y,ssd=/dev/shm/s")
            .unwrap();
        assert!(!c.read_only && c.writeback_cache);
        assert_eq!(c.max_threads, 3);
        assert_eq!(c.fsname.as_deref(), Some("img"));
        assert_eq!(
            c.core_options().ssd.as_deref(),
            Some(std::path::Path::new("/dev/shm/s"))
        );
        assert!(MountConfig::default().parse("bogus").is_err());
        assert!(MountConfig::default().parse("ro=1").is_err());
        assert!(MountConfig::default().parse("attr_timeout=-1").is_err());
        assert!(MountConfig::default().parse("auto_unmount").is_err());
        assert!(MountConfig::default()
            .parse("auto_unmount,allow_other")
            .is_ok());
    }

    #[test]
    fn remount_keeps_current_flags() {
        let cur = libc::ST_NOSUID | libc::ST_NODEV;
        let f = MountConfig::remount_flags(&["remount,ro".into()], cur);
        assert_eq!(
            f,
            libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RDONLY
        );
        let f = MountConfig::remount_flags(
            &["remount".into(), "rw,exec".into()],
            cur | libc::ST_RDONLY,
        );
        assert_eq!(f, libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV);
        assert!(MountConfig::default()
            .parse("remount,ro,_netdev,x-systemd.automount")
            .is_ok());
    }

    #[test]
    fn session_config_carries_flags() {
        let mut c = MountConfig::default();
        c.parse("ro,allow_other,noexec").unwrap();
        let s = c.session_config("/dev/shm/a b,c.img");
        assert_eq!(s.acl, SessionACL::All);
        assert!(s.mount_options.contains(&MountOption::RO));
        assert!(s.mount_options.contains(&MountOption::NoExec));
        assert!(s.mount_options.contains(&MountOption::DefaultPermissions));
        assert!(s
            .mount_options
            .contains(&MountOption::FSName("/dev/shm/a_b_c.img".into())));
    }
}
