//! The study's targets: nvmfs in-process, nvmfs through FUSE, every kernel
//! variant of Table III this machine can provision on a RAM-backed loop
//! device, and on request any mounted directory (`dir:PATH`).

use super::workload::StudyWorkload;
use crate::filebench::{
    self, LabTarget, Personality, PersonalityConfig, Progress, RunConfig, RunResult,
};
use crate::kernel::{self, Availability, Provisioned};
use crate::targets::api::MicroFs;
use crate::targets::fuse::{self, FuseTarget};
use crate::targets::nvmfs::NvmfsTarget;
use crate::targets::sys::{DirTarget, ScratchDir, SysFs};
use serde::Serialize;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const GIB: u64 = 1 << 30;

/// A target of the study, available or not.
#[derive(Debug, Clone, Serialize)]
pub struct TargetEntry {
    pub name: String,
    /// The paper's name of the variant (`pmfs` is the paper's direct-access
    /// file system, which nvmfs stands in for).
    pub paper_name: Option<String>,
    pub description: String,
    /// Why it cannot run here, if it cannot.
    pub unavailable: Option<String>,
    #[serde(skip)]
    kind: Kind,
}

impl TargetEntry {
    /// Whether this is `run:nvmfs`, whose cells run in a child under `nvmfs run`.
    pub fn is_run(&self) -> bool {
        matches!(self.kind, Kind::Run)
    }
}

/// How a target is made.
#[derive(Debug, Clone)]
enum Kind {
    Nvmfs,
    /// Through FUSE, mounted with these options (the transport, the write-back cache).
    Fuse(nvmfs_fuse::MountConfig),
    /// nvmfs under `nvmfs run` in a child ([`super::run_nvmfs`]).
    Run,
    Kernel(kernel::Variant),
    /// A directory the user named; the lab works in a fresh subdirectory.
    Dir(PathBuf),
    /// Listed in the report only (a variant of the paper this kernel lacks).
    Missing,
}

/// The FUSE target's name.
pub const FUSE_NAME: &str = "fuse:nvmfs";

/// The FUSE target served over FUSE over io_uring (`nvmfs mount -o io_uring`); run only when
/// named.
pub const FUSE_URING_NAME: &str = "fuse-uring:nvmfs";

/// The FUSE target with the kernel's write-back cache (`nvmfs mount -o writeback_cache`):
/// written data durable at fsync or close, as on a kernel file system; run only when named.
pub const FUSE_WB_NAME: &str = "fuse-wb:nvmfs";

/// The name of nvmfs through the C library under `nvmfs run` (the LD_PRELOAD library).
pub const RUN_NAME: &str = "run:nvmfs";

/// How the `run:nvmfs` target starts `nvmfs run`.
#[derive(Debug, Clone, Default)]
pub enum Runner {
    /// This program cannot start it (a library caller without the nvmfs binary).
    #[default]
    Absent,
    /// The nvmfs binary, which finds libnvmfs_preload.so.
    Binary(PathBuf),
    /// Why it cannot run here (e.g. the preload library was not built).
    Unavailable(String),
}

/// Whether `name` is nvmfs in one of its forms: in-process, through FUSE or under `nvmfs run`.
pub fn is_nvmfs(name: &str) -> bool {
    name == "nvmfs"
        || name == FUSE_NAME
        || name == FUSE_URING_NAME
        || name == FUSE_WB_NAME
        || name == RUN_NAME
}

/// Whether `name` is one of the kernel variants the lab provisions (not
/// nvmfs in any form, not a user's directory): the "best kernel variant"
/// nvmfs is compared with is one of these.
pub fn is_kernel_variant(name: &str) -> bool {
    !is_nvmfs(name) && !name.starts_with("dir:")
}

/// Kernel device size: room for the largest fileset three times over
/// (creates, appends and the webserver log grow it) plus 2 GiB, and at least
/// 8 GiB so that XFS can have many allocation groups (the paper's 464 needs
/// 30 GiB). The devices are sparse files, so only written blocks use memory.
pub fn device_size_bytes(workloads: &[StudyWorkload]) -> u64 {
    let filebench = device_size_for(workloads.iter().filter_map(|w| w.personality()));
    let largest = workloads
        .iter()
        .map(StudyWorkload::footprint_bytes)
        .max()
        .unwrap_or(0);
    filebench.max((largest * 3 + 2 * GIB).div_ceil(GIB) * GIB)
}

/// [`device_size_bytes`] for any personality configurations.
pub fn device_size_for<'a>(configs: impl Iterator<Item = &'a PersonalityConfig>) -> u64 {
    let largest = configs.map(fileset_bytes).max().unwrap_or(0);
    ((largest * 3 + 2 * GIB).div_ceil(GIB) * GIB).max(8 * GIB)
}

/// Mean bytes of a personality's filesets (main and log).
fn fileset_bytes(c: &PersonalityConfig) -> u64 {
    let log = c
        .log_fileset()
        .map_or(0, |l| l.entries as u64 * l.mean_size_bytes);
    c.files as u64 * c.mean_file_size_bytes + log
}

/// nvmfs image size for one workload: the fileset twice over, 512 MiB, and for webserver
/// room for its log's growth in one trial (the log is rewritten to its preallocated size
/// before each: `filebench::run`): 1 GiB per second of warm-up and run (nvmfs appended up to
/// 0.9 GiB/s to it, 3.5 M ops/s with 8 KiB mean appends), or, when trials end after an op
/// count, one full append per op if that is less; at most 8 GiB. Smaller than the kernel
/// devices because the image is preallocated and mapped with MAP_POPULATE at every mount
/// (persistent memory has no sparse holes), which costs about a second per GiB on this
/// machine.
pub fn nvmfs_image_bytes(run: &RunConfig) -> u64 {
    let c = &run.personality;
    let fileset = fileset_bytes(c);
    // Only webserver's log grows (appends); oltp writes inside its files.
    let log = if c.personality == Personality::Webserver {
        let room = |seconds: f64| (seconds.max(0.0) * LOG_MIB_PER_SECOND) as u64 * (1 << 20);
        let by_time = room(run.warmup_seconds + run.run_seconds);
        let by_ops = run.ops_max.map_or(u64::MAX, |n| {
            // Warm-up ops are not bounded by the count: allow for the warm-up's time.
            let warmup = room(run.warmup_seconds);
            n * c.append_size_bytes + warmup
        });
        by_time.min(by_ops).min(LOG_ROOM_MAX)
    } else {
        0
    };
    (fileset * 2 + GIB / 2 + log).div_ceil(GIB / 4) * (GIB / 4)
}

/// The most room an nvmfs image keeps for webserver's log (RAM: the image lives in /dev/shm).
const LOG_ROOM_MAX: u64 = 8 * GIB;
/// webserver's log growth an nvmfs image keeps room for, per second of trial.
const LOG_MIB_PER_SECOND: f64 = 1024.0;

/// Which targets a study runs, and what its paper called them.
#[derive(Debug)]
pub struct TargetPlan {
    /// The paper's name for the file system nvmfs stands in for, if it had one.
    pub nvmfs_paper_name: Option<&'static str>,
    /// The kernel catalogue's variants the study runs, by lab name, each with the paper's
    /// name for it (`None`: not in the paper). `None` runs the whole catalogue with its own
    /// names (seed 000's) and lists the variants of seed 000 this kernel lacks. A catalogue
    /// variant outside the list still runs when `--target` names it.
    pub kernel: Option<&'static [(&'static str, Option<&'static str>)]>,
    /// The paper's file systems outside the catalogue: run when this kernel has them,
    /// otherwise listed as unavailable with the reason.
    pub extra: fn() -> Vec<ExtraVariant>,
    /// Whether `run:nvmfs` runs without being named (it always runs when `--target` names it).
    pub run: bool,
}

/// A kernel file system of a paper that the lab's catalogue does not hold.
#[derive(Debug, Clone)]
pub struct ExtraVariant {
    pub variant: kernel::Variant,
    /// Added to the reason when this kernel lacks it (e.g. when it left mainline Linux).
    pub history: &'static str,
}

/// No file systems beyond the catalogue.
pub fn no_extra() -> Vec<ExtraVariant> {
    Vec::new()
}

/// Seed 000's targets: nvmfs (for PMFS), FUSE and the whole kernel catalogue.
pub const CATALOGUE: TargetPlan = TargetPlan {
    nvmfs_paper_name: Some("pmfs"),
    kernel: None,
    extra: no_extra,
    run: false,
};

/// [`discover_for`] with the whole catalogue ([`CATALOGUE`]) and no `run:nvmfs`.
pub fn discover(device_bytes: u64, only: &[String]) -> io::Result<Vec<TargetEntry>> {
    discover_for(&CATALOGUE, device_bytes, only, &Runner::Absent)
}

/// nvmfs first (in-process, FUSE, under `nvmfs run`), then the plan's kernel variants, then
/// what this kernel lacks. `only` filters by name (`xfs-ag` matches the high-AG variant
/// whatever its count). `run:nvmfs` is listed when the plan runs it or `only` names it, and
/// is available when `runner` can start `nvmfs run`.
pub fn discover_for(
    plan: &TargetPlan,
    device_bytes: u64,
    only: &[String],
    runner: &Runner,
) -> io::Result<Vec<TargetEntry>> {
    let named = |name: &str| only.iter().any(|o| matches_name(name, o));
    let wanted = |name: &str| only.is_empty() || named(name);
    let mut out = Vec::new();
    if wanted("nvmfs") {
        out.push(TargetEntry {
            name: "nvmfs".into(),
            paper_name: plan.nvmfs_paper_name.map(str::to_string),
            description: format!(
                "nvmfs library in-process on a fresh image in the shm dir: direct access, no page cache, durable on return{}",
                plan.nvmfs_paper_name.map_or(String::new(), |p| format!(
                    " (stands in for the paper's {})",
                    p.to_uppercase()
                ))
            ),
            unavailable: None,
            kind: Kind::Nvmfs,
        });
    }
    if wanted(FUSE_NAME) {
        out.push(fuse_entry(FUSE_NAME, nvmfs_fuse::MountConfig::default()));
    }
    if named(FUSE_URING_NAME) {
        let cfg = nvmfs_fuse::MountConfig {
            io_uring: true,
            ..Default::default()
        };
        out.push(fuse_entry(FUSE_URING_NAME, cfg));
    }
    if named(FUSE_WB_NAME) {
        let cfg = nvmfs_fuse::MountConfig {
            writeback_cache: true,
            ..Default::default()
        };
        out.push(fuse_entry(FUSE_WB_NAME, cfg));
    }
    if named(RUN_NAME) || (only.is_empty() && plan.run) {
        out.push(run_entry(runner));
    }
    let catalogue = kernel::catalogue(device_bytes);
    for v in &catalogue {
        let listed = match plan.kernel {
            None => Some(v.paper_name.clone()),
            Some(list) => list
                .iter()
                .find(|(name, _)| matches_name(&v.name, name))
                .map(|(_, paper)| paper.map(str::to_string)),
        };
        let paper_name = match (listed, only.is_empty()) {
            (Some(p), _) if wanted(&v.name) => p,
            // Outside the plan: only when asked for by name.
            (None, false) if named(&v.name) => None,
            _ => continue,
        };
        out.push(kernel_entry(v.clone(), paper_name, kernel::availability(v)));
    }
    let extras = (plan.extra)();
    for x in extras.iter().filter(|x| wanted(&x.variant.name)) {
        let availability = extra_availability(x);
        let paper = x.variant.paper_name.clone();
        out.push(kernel_entry(x.variant.clone(), paper, availability));
    }
    for o in only {
        if let Some(dir) = o.strip_prefix("dir:") {
            out.push(dir_entry(dir)?);
        }
    }
    if only.is_empty() && plan.kernel.is_none() {
        for (paper, reason) in kernel::unavailable_variants() {
            out.push(TargetEntry {
                name: paper.clone(),
                paper_name: Some(paper),
                description: String::new(),
                unavailable: Some(reason),
                kind: Kind::Missing,
            });
        }
    }
    let unknown: Vec<&String> = only
        .iter()
        .filter(|o| !out.iter().any(|t| matches_name(&t.name, o)))
        .collect();
    if !unknown.is_empty() {
        let mut known = vec![
            "nvmfs".to_string(),
            FUSE_NAME.to_string(),
            FUSE_URING_NAME.to_string(),
            FUSE_WB_NAME.to_string(),
            RUN_NAME.to_string(),
            "dir:PATH".into(),
        ];
        for name in catalogue
            .iter()
            .map(|v| &v.name)
            .chain(extras.iter().map(|x| &x.variant.name))
        {
            known.push(match name.strip_prefix("xfs-ag") {
                Some(_) => "xfs-ag".to_string(),
                None => name.clone(),
            });
        }
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unknown target(s) {unknown:?}; known: {}", known.join(", ")),
        ));
    }
    Ok(out)
}

/// A form of nvmfs through FUSE, mounted with `cfg`.
fn fuse_entry(name: &str, cfg: nvmfs_fuse::MountConfig) -> TargetEntry {
    let uring = cfg.io_uring;
    TargetEntry {
        name: name.into(),
        paper_name: None,
        description: format!(
            "the same nvmfs image served through the kernel's FUSE by this process, reached with system calls; {}",
            fuse::describe_options(&cfg)
        ),
        unavailable: fuse::unavailable()
            .or_else(|| uring.then(nvmfs_fuse::io_uring_unavailable).flatten()),
        kind: Kind::Fuse(cfg),
    }
}

/// `run:nvmfs`: unmodified code through the C library, answered by nvmfs in its own process.
fn run_entry(runner: &Runner) -> TargetEntry {
    let unavailable = match runner {
        Runner::Binary(_) => None,
        Runner::Unavailable(why) => Some(why.clone()),
        Runner::Absent => Some(
            "this program cannot start `nvmfs run` (run the study with the nvmfs command)".into(),
        ),
    };
    TargetEntry {
        name: RUN_NAME.into(),
        paper_name: None,
        description: "the dir: target's system calls through the C library, answered by nvmfs \
            in the benchmark's own process under `nvmfs run` (libnvmfs_preload.so), on a fresh \
            image in the shm dir per workload; each workload runs in a child process"
            .into(),
        unavailable,
        kind: Kind::Run,
    }
}

fn kernel_entry(
    v: kernel::Variant,
    paper_name: Option<String>,
    availability: Availability,
) -> TargetEntry {
    let unavailable = match availability {
        Availability::Available => None,
        Availability::Unavailable { reason } => Some(reason),
    };
    TargetEntry {
        name: v.name.clone(),
        paper_name,
        description: v.description.clone(),
        unavailable,
        kind: Kind::Kernel(v),
    }
}

/// Whether a file system outside the catalogue can run: the kernel must list its type in
/// /proc/filesystems or have a module for it that `modprobe -n` (a dry run, which loads
/// nothing) finds; then it needs what every variant needs ([`kernel::availability`]: root,
/// its mkfs program, loop devices), which loads the module if there is one.
fn extra_availability(x: &ExtraVariant) -> Availability {
    let fs_type = &x.variant.fs_type;
    if !kernel_lists(fs_type) {
        if let Err(why) = module_exists(fs_type) {
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".to_string(), |s| s.trim().to_string());
            let history = if x.history.is_empty() {
                String::new()
            } else {
                format!(" ({})", x.history)
            };
            return Availability::Unavailable {
                reason: format!(
                    "the running kernel ({release}) has no {fs_type}: not in /proc/filesystems, and {why}{history}"
                ),
            };
        }
    }
    kernel::availability(&x.variant)
}

/// Whether /proc/filesystems lists `fs_type` (lines are `nodev\ttmpfs` or `\text4`).
pub fn kernel_lists(fs_type: &str) -> bool {
    std::fs::read_to_string("/proc/filesystems")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().last() == Some(fs_type))
}

/// Ok when `modprobe -n -q fs_type` finds a module; otherwise what happened.
fn module_exists(fs_type: &str) -> Result<(), String> {
    match std::process::Command::new("modprobe")
        .args(["-n", "-q", fs_type])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        Ok(_) => Err(format!("`modprobe -n {fs_type}` finds no module for it")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "modprobe is not installed to look for a {fs_type} module"
        )),
        Err(e) => Err(format!("`modprobe -n {fs_type}` could not run: {e}")),
    }
}

/// `dir:PATH`: PATH must be an existing directory.
fn dir_entry(path: &str) -> io::Result<TargetEntry> {
    let invalid = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
    if path.is_empty() {
        return Err(invalid(
            "dir: target needs a path, e.g. dir:/mnt/ext4".into(),
        ));
    }
    let p = PathBuf::from(path);
    match std::fs::metadata(&p) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(invalid(format!("dir:{path}: not a directory"))),
        Err(e) => return Err(invalid(format!("dir:{path}: {e}"))),
    }
    Ok(TargetEntry {
        name: format!("dir:{path}"),
        paper_name: None,
        description: format!(
            "a fresh subdirectory of {path} through system calls; not remounted between trials (the lab did not mount it), so later trials run with warm caches"
        ),
        unavailable: None,
        kind: Kind::Dir(p),
    })
}

/// `xfs-ag` stands for the high-AG XFS variant, whose name carries its count.
pub fn matches_name(name: &str, wanted: &str) -> bool {
    name == wanted || (wanted == "xfs-ag" && name.starts_with("xfs-ag"))
}

/// A kernel file system made for one workload.
pub struct KernelTarget {
    prov: Provisioned,
    fs: SysFs,
}

impl LabTarget for KernelTarget {
    type Fs = SysFs;

    fn fs(&self) -> &SysFs {
        &self.fs
    }

    fn remount(&mut self) -> io::Result<bool> {
        self.prov.remount()
    }
}

/// Work done on a [`StudyTarget`] whatever its kind ([`StudyTarget::visit`]). The bounds
/// are what the lab's multithreaded workloads ask of a target's names and files; every kind
/// meets them.
pub trait TargetVisitor {
    type Output;
    fn visit<T: LabTarget>(self, target: &mut T) -> Self::Output
    where
        <T::Fs as MicroFs>::Name: Send + Sync,
        <T::Fs as MicroFs>::File: Send;
}

/// The size of a fresh nvmfs image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageSpec {
    pub bytes: u64,
    pub inodes: u64,
}

/// Where a target keeps files (see [`StudyTarget::place`]).
pub enum Place<'a> {
    /// The nvmfs library in-process, on this mounted image.
    Nvmfs(&'a nvmfs::Fs),
    /// A directory, through system calls.
    Dir(&'a Path),
}

/// A provisioned target, alive for one workload.
pub enum StudyTarget {
    Nvmfs(NvmfsTarget),
    Fuse(Box<FuseTarget>),
    Kernel(Box<KernelTarget>),
    Dir(DirTarget),
}

/// Distinguishes the scratch names of targets made one after another.
static SERIAL: AtomicU64 = AtomicU64::new(0);

pub(crate) fn scratch_name(what: &str) -> String {
    let n = SERIAL.fetch_add(1, Ordering::Relaxed);
    format!("nvmfs-study-{}-{n}{what}", std::process::id())
}

/// The nvmfs image for a Filebench run.
pub fn filebench_image(run: &RunConfig) -> ImageSpec {
    ImageSpec {
        bytes: nvmfs_image_bytes(run),
        inodes: nvmfs_inodes(run),
    }
}

/// Inodes for an nvmfs image holding the personality's files with room.
fn nvmfs_inodes(run: &RunConfig) -> u64 {
    let files = run.personality.files as u64;
    ((files * 2 + 4096) * 3 / 2).next_power_of_two()
}

impl StudyTarget {
    /// A fresh subdirectory `name` of `parent` (`nvmfs bench filebench`'s
    /// `tmpfs` and `dir:PATH`), removed with its contents when the target is
    /// closed or dropped.
    pub fn dir(parent: &Path, name: &str) -> io::Result<StudyTarget> {
        Ok(StudyTarget::Dir(DirTarget::new(ScratchDir::create(
            parent.join(name),
        )?)))
    }

    /// Fresh nvmfs image or fresh mkfs for a Filebench run; everything is removed on drop.
    pub fn create(
        t: &TargetEntry,
        shm_dir: &Path,
        device_bytes: u64,
        run: &RunConfig,
    ) -> io::Result<StudyTarget> {
        StudyTarget::create_sized(t, shm_dir, device_bytes, filebench_image(run))
    }

    /// Fresh nvmfs image of `image`'s size or fresh mkfs of a `device_bytes` device.
    pub fn create_sized(
        t: &TargetEntry,
        shm_dir: &Path,
        device_bytes: u64,
        image: ImageSpec,
    ) -> io::Result<StudyTarget> {
        if let Some(why) = &t.unavailable {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{}: {why}", t.name),
            ));
        }
        match &t.kind {
            Kind::Nvmfs => Ok(StudyTarget::Nvmfs(NvmfsTarget::create(
                shm_dir.join(scratch_name(".img")),
                image.bytes,
                image.inodes,
            )?)),
            Kind::Fuse(cfg) => Ok(StudyTarget::Fuse(Box::new(FuseTarget::create(
                shm_dir.join(scratch_name(".img")),
                std::env::temp_dir().join(scratch_name("-fuse")),
                image.bytes,
                image.inodes,
                cfg.clone(),
            )?))),
            Kind::Kernel(v) => {
                let prov = Provisioned::create(v, shm_dir, device_bytes)?;
                let fs = SysFs::new(prov.mount_point());
                Ok(StudyTarget::Kernel(Box::new(KernelTarget { prov, fs })))
            }
            Kind::Dir(p) => StudyTarget::dir(p, &scratch_name("")),
            Kind::Run => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "run:nvmfs runs each workload in a child under `nvmfs run` (study::run_nvmfs), \
                 not as a target of this process",
            )),
            Kind::Missing => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{}: not available on this machine", t.name),
            )),
        }
    }

    /// Where a program keeps its files on this target: the nvmfs library in-process, or
    /// a directory reached through system calls.
    pub fn place(&self) -> Place<'_> {
        match self {
            StudyTarget::Nvmfs(t) => Place::Nvmfs(t.fs()),
            StudyTarget::Fuse(t) => Place::Dir(t.mount_point()),
            StudyTarget::Kernel(k) => Place::Dir(k.prov.mount_point()),
            StudyTarget::Dir(t) => Place::Dir(t.path()),
        }
    }

    /// Drops caches between trials (see [`LabTarget::remount`]); `Ok(false)` when this
    /// target cannot be remounted.
    pub fn remount(&mut self) -> io::Result<bool> {
        match self {
            StudyTarget::Nvmfs(t) => LabTarget::remount(t),
            StudyTarget::Fuse(t) => LabTarget::remount(t.as_mut()),
            StudyTarget::Kernel(k) => LabTarget::remount(k.as_mut()),
            StudyTarget::Dir(t) => LabTarget::remount(t),
        }
    }

    /// What was made, for the environment section of the report.
    pub fn describe(&self) -> serde_json::Value {
        match self {
            StudyTarget::Nvmfs(t) => serde_json::json!({
                "image": t.image_path(),
                "mode": "library, in-process",
                "huge_mapped_bytes": t.fs().huge_mapped_bytes(),
            }),
            StudyTarget::Fuse(t) => serde_json::json!({
                "image": t.image_path(),
                "mount_point": t.mount_point(),
                "mode": "FUSE, in-process fuser session, system calls on the mount point",
                "options": fuse::describe_options(t.options()),
            }),
            StudyTarget::Dir(t) => serde_json::json!({
                "directory": t.path(),
                "mode": "system calls on a directory the lab did not mount (no remount between trials)",
            }),
            StudyTarget::Kernel(k) => {
                serde_json::to_value(k.prov.info()).unwrap_or(serde_json::Value::Null)
            }
        }
    }

    /// Calls `visitor` with this target as the [`LabTarget`] it is: each kind has its own file
    /// system type, so a workload generic over [`LabTarget`] (Postmark, filemark, pgmeter,
    /// AIM7) reaches any target through one call.
    pub fn visit<V: TargetVisitor>(&mut self, visitor: V) -> V::Output {
        match self {
            StudyTarget::Nvmfs(t) => visitor.visit(t),
            StudyTarget::Fuse(t) => visitor.visit(t.as_mut()),
            StudyTarget::Kernel(k) => visitor.visit(k.as_mut()),
            StudyTarget::Dir(t) => visitor.visit(t),
        }
    }

    pub fn run(
        &mut self,
        cfg: &RunConfig,
        interrupted: &dyn Fn() -> bool,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> io::Result<RunResult> {
        match self {
            StudyTarget::Nvmfs(t) => filebench::run(t, cfg, interrupted, progress),
            StudyTarget::Fuse(t) => filebench::run(t.as_mut(), cfg, interrupted, progress),
            StudyTarget::Kernel(k) => filebench::run(k.as_mut(), cfg, interrupted, progress),
            StudyTarget::Dir(t) => filebench::run(t, cfg, interrupted, progress),
        }
    }

    /// Runs the trials, then closes the target whatever happened; the run's
    /// error comes first, then a closing error.
    pub fn run_and_close(
        mut self,
        cfg: &RunConfig,
        interrupted: &dyn Fn() -> bool,
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> io::Result<RunResult> {
        let r = self.run(cfg, interrupted, progress);
        let closed = self.close();
        let r = r?;
        closed?;
        Ok(r)
    }

    /// Unmounts and removes everything, reporting errors.
    pub fn close(self) -> io::Result<()> {
        match self {
            StudyTarget::Nvmfs(t) => t.close(),
            StudyTarget::Fuse(t) => t.close(),
            StudyTarget::Kernel(k) => k.prov.teardown(),
            StudyTarget::Dir(t) => {
                drop(t);
                Ok(())
            }
        }
    }
}
