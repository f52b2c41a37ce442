//! Runs the selected workloads on one target, from fresh setup to cleanup.

use super::measure::{Limits, Measured};
use super::report::{Record, TargetKind};
use super::threads::{self, Inherited, Lane, Sharing};
use super::{data, meta, MicroConfig, Params, TargetSpec, WorkloadId};
use crate::targets::api::MicroFs;
use crate::targets::nvmfs::NvmfsTarget;
use crate::targets::sys::{ScratchDir, SysFs};
use std::io;

/// Said on every kernel record but the mmap ones: the comparison is against
/// plain syscalls.
pub const NO_FSYNC_NOTE: &str =
    "plain system calls without fsync; nvmfs operations are durable on return";

/// Said on nvmfs's records when `NVMFS_NO_FLUSH=1` (docs/GUARANTEES.md §1).
pub const NO_FLUSH_NOTE: &str = "NVMFS_NO_FLUSH=1: no cache-line write-backs, fences kept \
    (durable where the CPU caches are persistent: eADR, or a process crash on /dev/shm)";

/// [`NO_FLUSH_NOTE`] when this process runs nvmfs without write-backs. `no_flush_requested`
/// reads the variable once per process, so this is cheap per record.
pub fn no_flush_note() -> Option<&'static str> {
    matches!(nvmfs::media::no_flush_requested(), Ok(true)).then_some(NO_FLUSH_NOTE)
}

/// Said on every mmap record, nvmfs's too: here no target is durable per op.
pub const MMAP_NOTE: &str = "fio mmap semantics: MAP_SHARED mapping of the whole data file \
    (nvmfs: File::map_direct), memcpy per op, no msync per op, so stores are durable on no \
    target until the final msync";

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
        TargetSpec::Run => super::run::run_target(cfg, params, progress),
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

/// One target's run of the suite, or one thread's part of a `--threads` run (`lane`). Setup
/// shared between workloads (the big data file, the stat/open-read file set) is made on
/// first use only.
pub struct Session<'a, F: MicroFs> {
    pub fs: &'a F,
    pub params: &'a Params,
    /// Which thread of which run this is (names, shares, seeds).
    pub lane: Lane,
    limits: Limits,
    label: &'a str,
    kind: TargetKind,
    progress: &'a mut dyn FnMut(&str),
    pub data_file: Option<F::Name>,
    pub file_set: Option<Vec<F::Name>>,
    /// The stat/open-read set of the -deep workloads.
    pub deep_file_set: Option<Vec<F::Name>>,
    /// The own files of each thread of the disjoint `--threads` runs, kept from workload to
    /// workload like this session's own (threads.rs).
    pub lanes: Vec<Inherited<F::Name>>,
}

/// What one workload run gives besides its measurement.
pub struct Outcome {
    pub m: Measured,
    pub notes: Vec<String>,
    /// The msync after mmap-store-1k's measured phase.
    pub final_sync: Option<std::time::Duration>,
}

impl<'a, F: MicroFs> Session<'a, F> {
    pub(crate) fn new(
        fs: &'a F,
        params: &'a Params,
        label: &'a str,
        kind: TargetKind,
        progress: &'a mut dyn FnMut(&str),
    ) -> Self {
        Session::for_lane(fs, params, Lane::SOLO, params.limits.clone(), progress)
            .labelled(label, kind)
    }

    /// A session of one thread of a `--threads` run (`threads.rs`).
    pub(crate) fn for_lane(
        fs: &'a F,
        params: &'a Params,
        lane: Lane,
        limits: Limits,
        progress: &'a mut dyn FnMut(&str),
    ) -> Self {
        Session {
            fs,
            params,
            lane,
            limits,
            label: "",
            kind: TargetKind::Kernel,
            progress,
            data_file: None,
            file_set: None,
            deep_file_set: None,
            lanes: Vec::new(),
        }
    }

    fn labelled(mut self, label: &'a str, kind: TargetKind) -> Self {
        self.label = label;
        self.kind = kind;
        self
    }

    /// Starts a thread's session with the files it uses (threads.rs).
    pub(crate) fn inherit(&mut self, from: Inherited<F::Name>) {
        self.data_file = from.data_file;
        self.file_set = from.file_set;
        self.deep_file_set = from.deep_file_set;
    }

    /// What a thread's session hands back: the files it made or used.
    pub(crate) fn into_inherited(self) -> Inherited<F::Name> {
        Inherited {
            data_file: self.data_file,
            file_set: self.file_set,
            deep_file_set: self.deep_file_set,
        }
    }

    fn run_all(mut self) -> io::Result<Vec<Record>>
    where
        F: Sync,
        F::Name: Clone + Send + Sync,
    {
        let mut records = Vec::new();
        for &w in &self.params.workloads {
            let out = self.run_one(w).map_err(|e| self.failed(w, None, e))?;
            records.push(self.record(w, out, None));
            if self.params.threads < 2 {
                continue;
            }
            for sharing in Sharing::BOTH {
                let n = self.params.threads;
                let out = threads::run(&mut self, w, n, sharing)
                    .map_err(|e| self.failed(w, Some(sharing), e))?;
                records.push(self.record(w, out, Some(sharing)));
            }
        }
        Ok(records)
    }

    fn failed(&self, w: WorkloadId, sharing: Option<Sharing>, e: io::Error) -> io::Error {
        let run = match sharing {
            Some(s) => format!(" ({} threads, {})", self.params.threads, s.name()),
            None => String::new(),
        };
        io::Error::new(
            e.kind(),
            format!("{}{run} on {}: {e}", w.name(), self.label),
        )
    }

    /// The record of one run of `w`, said on the progress line.
    fn record(&mut self, w: WorkloadId, mut out: Outcome, sharing: Option<Sharing>) -> Record {
        if let Some(s) = sharing {
            let run = format!("{} threads, {}", self.params.threads, s.name());
            for n in &mut out.notes {
                *n = format!("{run}: {n}");
            }
        }
        if w.is_mmap() {
            out.notes.push(MMAP_NOTE.to_string());
        } else if self.kind == TargetKind::Kernel {
            out.notes.push(NO_FSYNC_NOTE.to_string());
        }
        if let Some(note) = no_flush_note().filter(|_| self.kind == TargetKind::Nvmfs) {
            out.notes.push(note.to_string());
        }
        let mut r = Record::new(
            w.name(),
            self.label,
            self.kind,
            w.bytes_per_op(),
            &out.m,
            out.notes,
        );
        r.dir_depth = w.layout(self.params).map(|l| l.depth());
        r.final_sync_s = out.final_sync.map(|d| d.as_secs_f64());
        if let Some(s) = sharing {
            r.threads = self.params.threads as u32;
            r.sharing = Some(s);
            r.core_link_ns = crate::core_link::round_trip_ns();
        }
        self.say(&r.summary());
        r
    }

    /// Runs one workload; returns its measurement and notes about it.
    pub(crate) fn run_one(&mut self, w: WorkloadId) -> io::Result<Outcome> {
        use WorkloadId::*;
        let plain = |m| Outcome {
            m,
            notes: Vec::new(),
            final_sync: None,
        };
        let noted = |(m, notes)| Outcome {
            m,
            notes,
            final_sync: None,
        };
        let layout = w.layout(self.params);
        // The tree's shape, said on the deep workloads (unlink-deep says its own).
        let deep_note = || match layout {
            Some(l) if w != UnlinkDeep => meta::layout_note(l, self.params.file_count),
            _ => None,
        };
        let mut out = match w {
            RandRead4k => plain(data::random_4k(self, false)?),
            Overwrite4k => plain(data::random_4k(self, true)?),
            Append4k => noted(data::append_4k(self)?),
            SeqRead1m => plain(data::sequential_1m(self, false)?),
            SeqWrite1m => plain(data::sequential_1m(self, true)?),
            MmapLoad1k | MmapStore1k => {
                let (m, notes, final_sync) = data::mmap_1k(self, w == MmapStore1k)?;
                Outcome {
                    m,
                    notes,
                    final_sync,
                }
            }
            Create16k | Create16kDeep => noted(meta::create_16k(self, layout.expect("meta"))?),
            Stat | StatDeep => plain(meta::stat(self, layout.expect("meta"))?),
            OpenRead16k | OpenRead16kDeep => {
                plain(meta::open_read_16k(self, layout.expect("meta"))?)
            }
            Unlink | UnlinkDeep => noted(meta::unlink(self, layout.expect("meta"))?),
        };
        if let Some(n) = deep_note() {
            out.notes.insert(0, n);
        }
        Ok(out)
    }

    /// Reports progress, prefixed with the target.
    pub fn say(&mut self, msg: &str) {
        (self.progress)(&format!("[{}] {msg}", self.label));
    }

    pub fn limits(&self) -> Limits {
        self.limits.clone()
    }
}
