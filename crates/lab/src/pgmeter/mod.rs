//! pgmeter: Iometer's access specifications against test files, on any lab target.
//!
//! pgmeter (Bryant et al., the benchmark of seed 001) is patterned after Intel's Iometer: it
//! measures the rate at which data moves to and from existing files under a synthetic access
//! specification, with a number of outstanding I/Os per file, and reports ops/s and MB/s.
//! [`spec`] holds access specifications and their presets (File Server, Web Server, 8K OLTP,
//! sequential read and write), [`stream`] places each I/O in its file (random or sequential,
//! aligned), and [`engine`] preallocates the files and runs the threads of a test: a warm-up,
//! then a measured phase by time with pgmeter's interval statistics. [`run`] follows pgmeter's
//! run rule on a [`LabTarget`]: files made first, the file system remounted (cache emptied)
//! at the start of the test, then warm-up and measurement.

pub mod engine;
pub mod spec;
pub mod stream;

pub use engine::{
    FileStats, IntervalStats, LineStats, PgmeterConfig, PgmeterResult, Prepared, DIR,
};
pub use spec::{AccessLine, AccessSpec, PRESETS};

use crate::filebench::engine::Tick;
use crate::filebench::LabTarget;
use crate::targets::api::MicroFs;
use std::io;

/// What [`run`] reports while it works.
pub enum Progress<'a> {
    Setup(&'a str),
    Tick(Tick),
}

/// One test on `target`: preallocates the files (keeping ones already there at the right
/// size), remounts the file system when it can, then warm-up and the measured phase.
pub fn run<T: LabTarget>(
    target: &mut T,
    cfg: &PgmeterConfig,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> io::Result<PgmeterResult>
where
    <T::Fs as MicroFs>::File: Send,
{
    cfg.validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    progress(Progress::Setup(&format!(
        "preallocating {} file(s) of {:.0} MiB",
        cfg.files,
        cfg.file_size_bytes as f64 / 1048576.0
    )));
    let prepared = engine::prepare(target.fs(), cfg, interrupted)?;
    let remounted = target.remount()?;
    progress(Progress::Setup(&format!(
        "{}: {} outstanding I/O(s) on each of {} file(s)",
        cfg.spec.name, cfg.outstanding, cfg.files
    )));
    let mut result = engine::measure(target.fs(), cfg, interrupted, &mut |t| {
        progress(Progress::Tick(t))
    })?;
    result.prepared = prepared;
    result.remounted = remounted;
    Ok(result)
}

/// The same test on a bare [`MicroFs`] that cannot be remounted: preallocation, then warm-up
/// and the measured phase.
pub fn run_on<F>(
    fs: &F,
    cfg: &PgmeterConfig,
    interrupted: &dyn Fn() -> bool,
    tick: &mut dyn FnMut(Tick),
) -> io::Result<PgmeterResult>
where
    F: MicroFs,
    F::File: Send,
{
    let prepared = engine::prepare(fs, cfg, interrupted)?;
    let mut result = engine::measure(fs, cfg, interrupted, tick)?;
    result.prepared = prepared;
    Ok(result)
}

#[cfg(test)]
mod tests;
