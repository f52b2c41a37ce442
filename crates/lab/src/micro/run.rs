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
use super::session::{no_flush_note, NO_FSYNC_NOTE};
use super::{MicroConfig, Params, TargetSpec};
pub use crate::targets::preload::RUN_PREFIX;
use crate::targets::preload::{run_args, shell_line, tail_lines, PreloadChild};
use crate::targets::sys::{annotate, ScratchFile};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// Said on every `run:nvmfs` record.
pub const RUN_NOTE: &str = "through the C library under nvmfs run (libnvmfs_preload.so): the \
    system calls of dir:PATH, answered by nvmfs in-process on an image in the shm dir";

/// Runs the selected workloads in a child under `nvmfs run` and returns its records as
/// `run:nvmfs`. The image, the records file and what the child leaves behind are removed on
/// return, also on error or interrupt ([`PreloadChild`]).
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
    let json = ScratchFile::claim(cfg.shm_dir.join(format!("nvmfs-bench-{pid}-run.json")))?;
    let args = child_args(cfg, params, json.path());
    progress(&format!(
        "[{label}] {}",
        shell_line(bin, &run_args(bin, &image, &args))
    ));
    let mut child =
        PreloadChild::start(bin, image, cfg.image_size_bytes, params.inode_count, &args)?;
    // The child's table on stdout is not needed (its records come in the JSON file), but
    // the pipe must be drained or a long table would block the child.
    let drain = child
        .take_stdout()
        .map(|mut out| std::thread::spawn(move || io::copy(&mut out, &mut io::sink())));
    let child_label = TargetSpec::Dir(PathBuf::from(RUN_PREFIX)).label();
    let (from, to) = (format!("[{child_label}]"), format!("[{label}]"));
    let tail = match child.take_stderr() {
        Some(err) => tail_lines(err, &mut |line| progress(&line.replace(&from, &to))),
        None => Default::default(),
    };
    if let Some(d) = drain {
        let _ = d.join();
    }
    child.finish("the benchmark", tail)?;
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

/// `bench micro --target dir:/nvmfs <the workload flags of cfg> --json JSON`: what the
/// child runs under `nvmfs run`.
pub(crate) fn child_args(cfg: &MicroConfig, params: &Params, json: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![
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
        "--threads".into(),
        cfg.threads.to_string().into(),
        // The parent measures the hardware limits, outside `nvmfs run`.
        "--no-references".into(),
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
            r.ratio_to_limit = None;
            r.notes.retain(|n| n != NO_FSYNC_NOTE);
            r.notes.push(RUN_NOTE.to_string());
            r.notes.extend(no_flush_note().map(str::to_string));
            r
        })
        .collect()
}
