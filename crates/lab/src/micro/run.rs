//! The `run:nvmfs` target: the microbenchmarks through the C library, answered by nvmfs
//! in-process under `nvmfs run` (the LD_PRELOAD library).
//!
//! The workloads are the same code as every other target's. This process formats a fresh image
//! in the shm dir and starts
//! `nvmfs run --image IMG --prefix /nvmfs -- nvmfs bench micro --target dir:/nvmfs ... --json F`
//! with the same workload flags; the child measures exactly what `dir:PATH` measures on a
//! kernel file system (system calls through the C library), except that the preload answers
//! the calls. Its progress is forwarded, its records read back and relabelled `run:nvmfs`.

use super::report::{Record, TargetKind};
use super::session::NO_FSYNC_NOTE;
use super::{MicroConfig, Params, TargetSpec};
use crate::targets::nvmfs::format_scratch;
use crate::targets::sys::{annotate, ScratchFile};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The prefix the child's paths live under (`nvmfs run --prefix`).
pub const RUN_PREFIX: &str = "/nvmfs";

/// Said on every `run:nvmfs` record.
pub const RUN_NOTE: &str = "through the C library under nvmfs run (libnvmfs_preload.so): the \
    system calls of dir:PATH, answered by nvmfs in-process on an image in the shm dir";

/// Lines of the child's stderr kept for the error message when it fails.
const TAIL_LINES: usize = 20;

/// Runs the selected workloads in a child under `nvmfs run` and returns its records as
/// `run:nvmfs`. The image, the records file and (if the child died without detaching) the
/// image's coordination file and lock files are removed on return, also on error or interrupt (the guards
/// below; the child is killed first if it is still running).
pub fn run_target(
    cfg: &MicroConfig,
    params: &Params,
    progress: &mut dyn FnMut(&str),
) -> io::Result<Vec<Record>> {
    let label = TargetSpec::Run.label();
    let bin = cfg.nvmfs_bin.as_deref().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "run:nvmfs needs the nvmfs binary to start `nvmfs run` (nvmfs bench micro sets it)",
        )
    })?;
    let pid = std::process::id();
    let image = cfg.shm_dir.join(format!("nvmfs-bench-{pid}-run.img"));
    progress(&format!("[{label}] formatting {}", image.display()));
    // Dropped in reverse order: the child is killed (if running) before its files go.
    let image = format_scratch(image, cfg.image_size_bytes, params.inode_count)?;
    let _coord = CoordLeftover(coord_path(image.path())?);
    let json = ScratchFile::claim(cfg.shm_dir.join(format!("nvmfs-bench-{pid}-run.json")))?;
    let args = child_args(cfg, params, bin, image.path(), json.path());
    progress(&format!(
        "[{label}] {} {}",
        bin.display(),
        args.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    ));
    let mut child = ChildGuard(Some(
        Command::new(bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| annotate(e, "cannot start", bin))?,
    ));
    let child_label = TargetSpec::Dir(PathBuf::from(RUN_PREFIX)).label();
    let tail = forward_stderr(&mut child, &child_label, &label, progress)?;
    let status = child.wait()?;
    if !status.success() {
        return Err(io::Error::other(format!(
            "nvmfs run of the benchmark failed ({status}); its last messages:\n  {}",
            tail.into_iter().collect::<Vec<_>>().join("\n  ")
        )));
    }
    let text = std::fs::read_to_string(json.path())
        .map_err(|e| annotate(e, "cannot read the child's records", json.path()))?;
    let records: Vec<Record> = serde_json::from_str(&text).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the child's records in {}: {e}", json.path().display()),
        )
    })?;
    Ok(relabel(records, &child_label, &label))
}

/// `run --image IMG --prefix /nvmfs -- BIN bench micro --target dir:/nvmfs <the workload
/// flags of cfg> --json JSON`.
pub(crate) fn child_args(
    cfg: &MicroConfig,
    params: &Params,
    bin: &Path,
    image: &Path,
    json: &Path,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
        "run".into(),
        "--image".into(),
        image.into(),
        "--prefix".into(),
        RUN_PREFIX.into(),
        "--".into(),
        bin.into(),
        "bench".into(),
        "micro".into(),
        "--target".into(),
        format!("dir:{RUN_PREFIX}").into(),
        "--seconds".into(),
        cfg.seconds.to_string().into(),
        "--file-size".into(),
        cfg.file_size_bytes.to_string().into(),
        "--files".into(),
        cfg.file_count.to_string().into(),
        "--depth".into(),
        cfg.tree_depth.to_string().into(),
        "--image-size".into(),
        cfg.image_size_bytes.to_string().into(),
        "--shm-dir".into(),
        cfg.shm_dir.clone().into(),
        "--json".into(),
        json.into(),
    ];
    for w in &params.workloads {
        a.push("--workload".into());
        a.push(w.name().into());
    }
    a
}

/// The child's records as `run:nvmfs` ones: only its `dir:/nvmfs` records (not its memcpy
/// reference), kind nvmfs, the kernel-target note replaced by [`RUN_NOTE`]. Ratios are
/// filled in later over all targets.
pub(crate) fn relabel(records: Vec<Record>, child_label: &str, label: &str) -> Vec<Record> {
    records
        .into_iter()
        .filter(|r| r.target == child_label)
        .map(|mut r| {
            r.target = label.to_string();
            r.kind = TargetKind::Nvmfs;
            r.ratio_to_best_kernel = None;
            r.notes.retain(|n| n != NO_FSYNC_NOTE);
            r.notes.push(RUN_NOTE.to_string());
            r
        })
        .collect()
}

/// Passes each line of the child's stderr to `progress` with its target renamed, and returns
/// the last few lines.
fn forward_stderr(
    child: &mut ChildGuard,
    from: &str,
    to: &str,
    progress: &mut dyn FnMut(&str),
) -> io::Result<VecDeque<String>> {
    let stderr = child
        .0
        .as_mut()
        .and_then(|c| c.stderr.take())
        .expect("stderr piped");
    let (from, to) = (format!("[{from}]"), format!("[{to}]"));
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    for line in BufReader::new(stderr).lines() {
        let line = line?.replace(&from, &to);
        progress(&line);
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    Ok(tail)
}

/// The child; killed and reaped if dropped while still running (error or interrupt).
struct ChildGuard(Option<Child>);

impl ChildGuard {
    fn wait(&mut self) -> io::Result<std::process::ExitStatus> {
        let mut child = self.0.take().expect("waited once");
        child.wait()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The coordination file the shared mounts of `image` use (nvmfs::shared keeps it in
/// /dev/shm, named after the image file's device and inode). The last process to detach
/// removes it; one that dies attached leaves it, and nothing needs it once no process is.
fn coord_path(image: &Path) -> io::Result<PathBuf> {
    let m = std::fs::metadata(image).map_err(|e| annotate(e, "cannot stat", image))?;
    Ok(PathBuf::from(format!(
        "/dev/shm/nvmfs-{:x}-{:x}.coord",
        m.dev(),
        m.ino()
    )))
}

/// Removes the coordination file and the directory of its lock files (`<file>.locks`, the
/// preload's), if the child left them, when dropped (after the child).
struct CoordLeftover(PathBuf);

impl Drop for CoordLeftover {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let mut locks = self.0.clone().into_os_string();
        locks.push(".locks");
        let _ = std::fs::remove_dir_all(locks);
    }
}
