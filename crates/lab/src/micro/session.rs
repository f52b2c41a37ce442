//! Runs the selected workloads on one target, from fresh setup to cleanup.

use super::measure::{Limits, Measured};
use super::report::{Record, TargetKind};
use super::{data, meta, MicroConfig, Params, TargetSpec, WorkloadId};
use crate::targets::api::MicroFs;
use crate::targets::nvmfs::NvmfsTarget;
use crate::targets::sys::{ScratchDir, SysFs};
use std::io;

/// Said on every kernel record: the comparison is against plain syscalls.
pub const NO_FSYNC_NOTE: &str =
    "plain system calls without fsync; nvmfs operations are durable on return";

/// Sets up the target, runs the workloads, tears the target down. The
/// target's guards remove its files when dropped, so `?` cleans up too.
pub fn run_target(
    cfg: &MicroConfig,
    params: &Params,
    spec: &TargetSpec,
    progress: &mut dyn FnMut(&str),
) -> io::Result<Vec<Record>> {
    let pid = std::process::id();
    let label = spec.label();
    match spec {
        TargetSpec::Nvmfs => {
            let image = cfg.shm_dir.join(format!("nvmfs-bench-{pid}.img"));
            progress(&format!("[{label}] formatting {}", image.display()));
            let target = NvmfsTarget::create(image, cfg.image_size_bytes, params.inode_count)?;
            let records =
                Session::new(&target, params, &label, TargetKind::Nvmfs, progress).run_all()?;
            target.close()?;
            Ok(records)
        }
        TargetSpec::Tmpfs => {
            let dir = ScratchDir::create(cfg.shm_dir.join(format!("nvmfs-bench-{pid}-tmpfs")))?;
            run_on_dir(&dir, params, &label, progress)
        }
        TargetSpec::Dir(parent) => {
            let dir = ScratchDir::create(parent.join(format!("nvmfs-bench-{pid}")))?;
            run_on_dir(&dir, params, &label, progress)
        }
    }
}

fn run_on_dir(
    dir: &ScratchDir,
    params: &Params,
    label: &str,
    progress: &mut dyn FnMut(&str),
) -> io::Result<Vec<Record>> {
    progress(&format!("[{label}] working in {}", dir.path().display()));
    let fs = SysFs::new(dir.path());
    Session::new(&fs, params, label, TargetKind::Kernel, progress).run_all()
}

/// One target's run of the suite. Setup shared between workloads (the big
/// data file, the stat/open-read file set) is made on first use only.
pub struct Session<'a, F: MicroFs> {
    pub fs: &'a F,
    pub params: &'a Params,
    label: &'a str,
    kind: TargetKind,
    progress: &'a mut dyn FnMut(&str),
    pub data_file: Option<F::Name>,
    pub file_set: Option<Vec<F::Name>>,
}

impl<'a, F: MicroFs> Session<'a, F> {
    fn new(
        fs: &'a F,
        params: &'a Params,
        label: &'a str,
        kind: TargetKind,
        progress: &'a mut dyn FnMut(&str),
    ) -> Self {
        Session {
            fs,
            params,
            label,
            kind,
            progress,
            data_file: None,
            file_set: None,
        }
    }

    fn run_all(mut self) -> io::Result<Vec<Record>> {
        let mut records = Vec::new();
        for &w in &self.params.workloads {
            let (m, mut notes) = self.run_one(w).map_err(|e| {
                io::Error::new(e.kind(), format!("{} on {}: {e}", w.name(), self.label))
            })?;
            if self.kind == TargetKind::Kernel {
                notes.push(NO_FSYNC_NOTE.to_string());
            }
            let r = Record::new(w.name(), self.label, self.kind, w.bytes_per_op(), &m, notes);
            self.say(&r.summary());
            records.push(r);
        }
        Ok(records)
    }

    /// Runs one workload; returns its measurement and notes about it.
    fn run_one(&mut self, w: WorkloadId) -> io::Result<(Measured, Vec<String>)> {
        let no_notes = |m| Ok((m, Vec::new()));
        match w {
            WorkloadId::RandRead4k => no_notes(data::random_4k(self, false)?),
            WorkloadId::Overwrite4k => no_notes(data::random_4k(self, true)?),
            WorkloadId::Append4k => data::append_4k(self),
            WorkloadId::SeqRead1m => no_notes(data::sequential_1m(self, false)?),
            WorkloadId::SeqWrite1m => no_notes(data::sequential_1m(self, true)?),
            WorkloadId::Create16k => meta::create_16k(self),
            WorkloadId::Stat => no_notes(meta::stat(self)?),
            WorkloadId::OpenRead16k => no_notes(meta::open_read_16k(self)?),
            WorkloadId::Unlink => meta::unlink(self),
        }
    }

    /// Reports progress, prefixed with the target.
    pub fn say(&mut self, msg: &str) {
        (self.progress)(&format!("[{}] {msg}", self.label));
    }

    pub fn limits(&self) -> Limits {
        self.params.limits
    }
}
