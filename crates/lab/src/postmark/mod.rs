//! PostMark 1.51 (Katcher 1997, NetApp TR-3022) and filemark, its
//! multithreaded variant from seed 001 (Bryant et al. 2002), on any lab target.
//!
//! Layout, one mechanism per module:
//! - [`rng`]: the 1999 MT19937 with its `sgenrand` seeding, and `RND(x)`;
//! - [`config`]: Postmark's parameters, defaults, limits and command language;
//! - [`table`]: the file table (`find_free_file`, `find_used_file`);
//! - [`stdio`]: the unbuffered path and the emulated stdio buffering;
//! - [`engine`]: one instance's phases in 1.51's draw order;
//! - [`report`]: the counts, phase times and rates of Postmark's report;
//! - [`filemark`]: N instances on N threads, repeated transaction phases.
//!
//! [`run`] is one Postmark `run`: subdirectories, creation, transactions,
//! deletion, subdirectory removal, timed as 1.51 times them. The same seed and
//! parameters give the same files, sizes, operations and counts as the real
//! program (the cross-check test runs both).

pub mod config;
pub mod engine;
pub mod filemark;
pub mod report;
pub mod rng;
pub mod stdio;
pub mod table;

pub use config::{parse_command_file, CommandFile, Location, PostmarkConfig, ReportFormat};
pub use engine::{Bias, Counts, Params};
pub use filemark::{FilemarkConfig, FilemarkResult};
pub use report::{
    format_report, format_terse, format_verbose, FileCounts, PhaseSeconds, PostmarkResult, Rates,
};

use crate::filebench::stats::Latency;
use crate::micro::measure::new_histogram;
use crate::targets::api::MicroFs;
use engine::Instance;
use std::io;
use std::time::Instant;

impl PostmarkConfig {
    /// The engine's parameters: biases in tenths, and the locations only when
    /// there are several (one location is where the target is).
    pub fn params(&self) -> Params {
        let bias = |b: Option<u32>| b.map(|value| Bias { value, scale: 10 });
        let locations = if self.locations.len() > 1 {
            let strip = |p: &str| p.trim_start_matches('/').to_string();
            self.locations
                .iter()
                .map(|l| (strip(&l.path), l.weight))
                .collect()
        } else {
            Vec::new()
        };
        Params {
            number: self.number,
            size_low: self.size_low,
            size_high: self.size_high,
            subdirectories: self.subdirectories,
            read_block: self.read_block_size as usize,
            write_block: self.write_block_size as usize,
            buffered: self.buffering,
            bias_read: bias(self.bias_read),
            bias_create: bias(self.bias_create),
            seed: self.seed,
            locations,
            base: String::new(),
        }
    }
}

/// Runs Postmark once on `fs` (its root is the working directory). The files
/// and subdirectories are gone afterwards. `interrupted` is polled before
/// every create and transaction; it ends the run with `ErrorKind::Interrupted`,
/// leaving files behind.
pub fn run<F: MicroFs>(
    fs: &F,
    cfg: &PostmarkConfig,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<PostmarkResult> {
    cfg.validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut pm = Instance::new(cfg.params());
    let t0 = Instant::now();
    pm.make_subdirectories(fs)?;
    let start = Instant::now();
    if !pm.create_files(fs, interrupted)? {
        return Err(stopped());
    }
    let created = pm.counts();
    let t_start = Instant::now();
    let mut latency = new_histogram();
    let t = pm.transactions(fs, u64::from(cfg.transactions), interrupted, &mut latency)?;
    if t.stopped {
        return Err(stopped());
    }
    let transacted = pm.counts();
    let t_end = Instant::now();
    pm.delete_files(fs)?;
    let end = Instant::now();
    pm.remove_subdirectories(fs)?;
    let done = Instant::now();
    let secs = |a: Instant, b: Instant| b.duration_since(a).as_secs_f64();
    let seconds = PhaseSeconds {
        subdirectories_created: secs(t0, start),
        creation: secs(start, t_start),
        transactions: secs(t_start, t_end),
        deletion: secs(t_end, end),
        subdirectories_deleted: secs(end, done),
        total: secs(start, end),
    };
    let counts = pm.counts();
    let files = FileCounts::of(&created, &transacted, &counts);
    let bytes = (counts.bytes_read, counts.bytes_written);
    Ok(PostmarkResult {
        transactions: t.done,
        out_of_files: t.out_of_files,
        rates: Rates::of(t.done, &files, bytes, &seconds),
        files,
        bytes_read: bytes.0,
        bytes_written: bytes.1,
        seconds,
        transaction_latency_ns: Latency::of(&latency),
    })
}

/// Makes the directories of `cfg`'s locations under `fs`'s root, each with its parents,
/// when there are several (the engine then puts files in them and Postmark expects them to
/// exist; one location is the target itself and needs none). Directories already there are
/// kept. A fresh target can so run a command file written for a real machine's paths.
pub fn make_locations<F: MicroFs>(fs: &F, cfg: &PostmarkConfig) -> io::Result<()> {
    for (path, _) in cfg.params().locations {
        let mut prefix = String::new();
        for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            match fs.mkdir(&fs.name(&prefix)) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                    return Err(io::Error::new(e.kind(), format!("mkdir {prefix}: {e}")))
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn stopped() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "interrupted")
}

#[cfg(test)]
mod tests;
