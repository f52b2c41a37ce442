//! The `run:nvmfs` target of a study: each cell in a child under `nvmfs run`.
//!
//! The preload library serves one image for a process's whole life and cannot be put into a
//! process that has started, so a `run:nvmfs` cell cannot run in the study's own process.
//! Instead the study formats a fresh image sized like the in-process nvmfs target's, and
//! starts `nvmfs run --image IMG --prefix /nvmfs -- nvmfs study-cell JOB`. The child runs the
//! very same cell code on the `dir:/nvmfs` target: system calls through the C library, which
//! the preload answers from the image in the child's own process. It reports progress as JSON
//! lines on stdout and writes its [`Cell`] (CBOR); the study relabels it `run:nvmfs`. Every
//! workload kind (Filebench, the databases, filemark, pgmeter, AIM7) goes through this one
//! path.
//!
//! A `dir:` target is not remounted between trials; here that only keeps the preload's
//! in-process caches warm (nvmfs has no page cache to drop).

use super::database;
use super::fsbench;
use super::targets::{self, ImageSpec, TargetEntry};
use super::workload::{StudyWorkload, WorkloadConfig};
use super::{Cell, CellStatus, StudyConfig, StudyProgress};
use crate::targets::preload::{run_args, shell_line, tail_lines, PreloadChild, RUN_PREFIX};
use crate::targets::sys::{annotate, ScratchFile};
use serde::{Deserialize, Serialize};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What the child runs: one workload of one study under the parent's settings.
#[derive(Debug, Serialize, Deserialize)]
pub struct Job {
    pub study: String,
    pub workload: String,
    pub config: StudyConfig,
    /// Where the child writes its [`Cell`], in CBOR: unlike JSON it keeps infinities (the
    /// interval of one trial) and NaNs as they are.
    pub out: PathBuf,
}

/// What the child says on stdout while it works, one JSON object per line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Event {
    Note {
        msg: String,
    },
    Tick {
        trial: usize,
        trials: usize,
        ops_per_sec: f64,
        measuring: bool,
    },
}

/// Runs workload `w` of `study` on `run:nvmfs` (`t`) in a child under `nvmfs run` started
/// from `bin`, forwarding its progress; the cell it ran, relabelled, or a failed cell.
pub fn run_cell(
    study: &str,
    cfg: &StudyConfig,
    w: &StudyWorkload,
    t: &TargetEntry,
    bin: &Path,
    device_bytes: u64,
    progress: &mut dyn StudyProgress,
) -> Cell {
    let start = Instant::now();
    let mut provision = None;
    let outcome = child_cell(study, cfg, w, bin, device_bytes, &mut provision, progress);
    let (status, result) = match outcome {
        Ok(cell) => (cell.status, cell.result),
        Err(e) => (CellStatus::Failed(e.to_string()), None),
    };
    Cell {
        workload: w.id.clone(),
        target: t.name.clone(),
        paper_name: t.paper_name.clone(),
        status,
        result,
        provision,
        wall_seconds: start.elapsed().as_secs_f64(),
    }
}

/// Starts the child, forwards its events and reads back its cell.
fn child_cell(
    study: &str,
    cfg: &StudyConfig,
    w: &StudyWorkload,
    bin: &Path,
    device_bytes: u64,
    provision: &mut Option<serde_json::Value>,
    progress: &mut dyn StudyProgress,
) -> io::Result<Cell> {
    let image = image_for(cfg, w, device_bytes)?;
    let name = targets::scratch_name("");
    let out = ScratchFile::claim(cfg.shm_dir.join(format!("{name}-cell.cbor")))?;
    let job = ScratchFile::claim(cfg.shm_dir.join(format!("{name}-job.json")))?;
    let mut child_cfg = cfg.clone();
    child_cfg.only_targets = vec![format!("dir:{RUN_PREFIX}")];
    child_cfg.only_workloads = vec![w.id.clone()];
    let spec = Job {
        study: study.to_string(),
        workload: w.id.clone(),
        config: child_cfg,
        out: out.path().to_path_buf(),
    };
    std::fs::write(job.path(), serde_json::to_vec(&spec)?)
        .map_err(|e| annotate(e, "cannot write", job.path()))?;
    let img_path = cfg.shm_dir.join(format!("{name}.img"));
    let args = ["study-cell".into(), job.path().into()];
    let mut child = PreloadChild::start(bin, img_path, image.bytes, image.inodes, &args)?;
    *provision = Some(serde_json::json!({
        "image": child.image_path(),
        "image_bytes": image.bytes,
        "inodes": image.inodes,
        "mode": format!(
            "a child process: {} study-cell JOB, the workload on dir:{RUN_PREFIX} through the C \
             library",
            shell_line(bin, &run_args(bin, Path::new("IMAGE"), &[]))
        ),
    }));
    // stderr on a thread of its own, so that neither pipe can fill and stall the child.
    let stderr = child.take_stderr();
    let tail = std::thread::spawn(move || stderr.map(|e| tail_lines(e, &mut |_| {})));
    if let Some(stdout) = child.take_stdout() {
        forward_events(stdout, progress);
    }
    let tail = tail.join().ok().flatten().unwrap_or_default();
    child.finish(&format!("the {} cell", w.id), tail)?;
    let bytes = std::fs::read(out.path())
        .map_err(|e| annotate(e, "cannot read the child's cell", out.path()))?;
    let cell: Cell = ciborium::from_reader(bytes.as_slice()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the child's cell in {}: {e}", out.path().display()),
        )
    })?;
    if let (Some(p), Some(child)) = (provision.as_mut(), cell.provision.clone()) {
        p["child_target"] = child;
    }
    Ok(cell)
}

/// Passes the child's events to `progress`; other lines become notes.
fn forward_events(stdout: impl io::Read, progress: &mut dyn StudyProgress) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Event>(&line) {
            Ok(Event::Note { msg }) => progress.note(&msg),
            Ok(Event::Tick {
                trial,
                trials,
                ops_per_sec,
                measuring,
            }) => progress.tick(trial, trials, ops_per_sec, measuring),
            Err(_) => progress.note(&line),
        }
    }
}

/// The image the in-process nvmfs target would get for `w`.
fn image_for(cfg: &StudyConfig, w: &StudyWorkload, device_bytes: u64) -> io::Result<ImageSpec> {
    Ok(match &w.config {
        WorkloadConfig::Filebench(f) => {
            targets::filebench_image(&super::filebench_run(cfg, &f.personality))
        }
        WorkloadConfig::Ycsb(y) => database::ycsb_image(y),
        WorkloadConfig::Tpcc(c) => database::tpcc_image(c),
        WorkloadConfig::Filemark(f) => {
            let rules = super::fs_rules(cfg, device_bytes);
            fsbench::filemark_image(&fsbench::filemark_config(f, &rules)?)
        }
        WorkloadConfig::Pgmeter(p) => fsbench::pgmeter_image(p),
        WorkloadConfig::Aim7(a) => fsbench::aim7_image(&a.config),
    })
}

/// The child's side (`nvmfs study-cell JOB`): runs the job's cell on `dir:/nvmfs`, says its
/// progress on stdout and writes the cell to the job's `out`. An error here is one the cell
/// could not even start with (a bad job); the cell's own failures are in its status.
pub fn serve(job_path: &Path, interrupted: &dyn Fn() -> bool) -> io::Result<()> {
    let text =
        std::fs::read_to_string(job_path).map_err(|e| annotate(e, "cannot read", job_path))?;
    let job: Job = serde_json::from_str(&text).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a study-cell job: {e}", job_path.display()),
        )
    })?;
    let study = super::find(&job.study).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unknown study {:?}", job.study),
        )
    })?;
    let result = super::run_study(study, &job.config, interrupted, &mut EventWriter)?;
    let cell = match result.cells.as_slice() {
        [cell] => cell,
        cells => {
            return Err(io::Error::other(format!(
                "the job selected {} cells, not one (workload {:?} on {:?})",
                cells.len(),
                job.workload,
                job.config.only_targets
            )))
        }
    };
    let mut bytes = Vec::new();
    ciborium::into_writer(cell, &mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
    std::fs::write(&job.out, bytes).map_err(|e| annotate(e, "cannot write", &job.out))
}

/// The child's progress: [`Event`]s on stdout.
struct EventWriter;

impl EventWriter {
    fn say(&self, e: &Event) {
        let mut out = io::stdout().lock();
        if let Ok(line) = serde_json::to_string(e) {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

impl StudyProgress for EventWriter {
    fn cell_started(&mut self, _: usize, _: usize, _: &str, _: &str) {}

    fn note(&mut self, msg: &str) {
        self.say(&Event::Note { msg: msg.into() });
    }

    fn tick(&mut self, trial: usize, trials: usize, ops_per_sec: f64, measuring: bool) {
        self.say(&Event::Tick {
            trial,
            trials,
            ops_per_sec,
            measuring,
        });
    }

    fn cell_done(&mut self, _: &Cell) {}
}
