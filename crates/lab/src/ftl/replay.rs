//! Replaying a block trace on an FTL.
//!
//! Writes become page writes: a request covers the 4 KiB pages its sectors touch, and a
//! page only partly covered is still programmed whole (the FTL reads the rest of the old
//! page and writes a new one; the read is not counted). Discards trim only the pages
//! they cover entirely, as an SSD cannot forget half a page. Reads and flushes change
//! nothing on flash; they are counted in [`TraceStats`] only.

use super::trace::{Header, Op, Record, TraceError, TraceReader};
use super::{CostModel, Counters, Ftl, FtlKind, Geometry, SECTORS_PER_PAGE, SECTOR_BYTES};
use serde::Serialize;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

/// What a trace asked of the device, counted from its records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TraceStats {
    /// Records of every kind.
    pub records: u64,
    /// Write requests.
    pub write_requests: u64,
    /// Sectors written: seed 004's "write traffic to SSD (number of sectors)" (Fig. 6).
    pub write_sectors: u64,
    /// Write requests that start or end inside a 4 KiB page.
    pub unaligned_writes: u64,
    /// Read requests.
    pub read_requests: u64,
    /// Sectors read.
    pub read_sectors: u64,
    /// Discard requests.
    pub discard_requests: u64,
    /// Sectors discarded.
    pub discard_sectors: u64,
    /// Flush requests.
    pub flushes: u64,
    /// One past the highest sector any record touches.
    pub sector_end: u64,
}

impl TraceStats {
    pub(crate) fn count(&mut self, r: &Record) {
        self.records += 1;
        let n = u64::from(r.sectors);
        match r.op {
            Op::Write => {
                self.write_requests += 1;
                self.write_sectors += n;
                let end = r.sector + n;
                if !r.sector.is_multiple_of(SECTORS_PER_PAGE)
                    || !end.is_multiple_of(SECTORS_PER_PAGE)
                {
                    self.unaligned_writes += 1;
                }
            }
            Op::Read => {
                self.read_requests += 1;
                self.read_sectors += n;
            }
            Op::Discard => {
                self.discard_requests += 1;
                self.discard_sectors += n;
            }
            Op::Flush => self.flushes += 1,
        }
        self.sector_end = self.sector_end.max(r.sector + n);
    }
}

/// One FTL's result on one trace.
#[derive(Debug, Clone, Serialize)]
pub struct FtlReport {
    /// The scheme.
    pub ftl: FtlKind,
    /// The NAND it ran on.
    pub geometry: Geometry,
    /// NAND bytes (`geometry`'s physical size).
    pub nand_bytes: u64,
    /// Bytes the host could address.
    pub logical_bytes: u64,
    /// FAST's RW log pool size (blocks); `None` for the page FTL.
    pub rw_log_blocks: Option<u64>,
    /// What the trace asked.
    pub trace: TraceStats,
    /// What the FTL did.
    pub counters: Counters,
    /// Flash page programs per host page write.
    pub write_amplification: f64,
    /// The most erases any one block had (wear; the FTLs do no wear levelling).
    pub erase_count_max: u32,
    /// The weights of the erase cost.
    pub cost_model: CostModel,
    /// Copies and erases weighted by `cost_model`, in microseconds.
    pub erase_cost_us: f64,
}

/// A trace record the FTL cannot take, with its line.
fn out_of_range(line: usize, r: &Record, g: &Geometry) -> TraceError {
    TraceError {
        line,
        message: format!(
            "{:?} of sectors {}..{} lies beyond the simulated device's {} logical bytes \
             ({} sectors); give a larger NAND size",
            r.op,
            r.sector,
            r.sector + u64::from(r.sectors),
            g.logical_bytes(),
            g.logical_bytes() / SECTOR_BYTES
        ),
    }
}

/// Feeds `records` (with their line numbers) to `ftl`; returns what the trace asked.
/// Stops at the first bad record.
pub fn replay(
    records: impl Iterator<Item = Result<(usize, Record), TraceError>>,
    ftl: &mut dyn Ftl,
) -> Result<TraceStats, TraceError> {
    let mut stats = TraceStats::default();
    let geometry = *ftl.geometry();
    let sectors_max = geometry.logical_pages() * SECTORS_PER_PAGE;
    for item in records {
        let (line, r) = item?;
        let end = r.sector + u64::from(r.sectors);
        if matches!(r.op, Op::Write | Op::Discard) && end > sectors_max {
            return Err(out_of_range(line, &r, &geometry));
        }
        stats.count(&r);
        match r.op {
            Op::Write if r.sectors > 0 => {
                let first = r.sector / SECTORS_PER_PAGE;
                let last = end.div_ceil(SECTORS_PER_PAGE);
                (first..last).for_each(|p| ftl.write(p));
            }
            Op::Discard => {
                let first = r.sector.div_ceil(SECTORS_PER_PAGE);
                let last = end / SECTORS_PER_PAGE;
                (first..last).for_each(|p| ftl.trim(p));
            }
            _ => {}
        }
    }
    Ok(stats)
}

/// Opens a trace file and reads its header.
pub fn open(path: &Path) -> Result<TraceReader<BufReader<File>>, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    TraceReader::new(BufReader::new(file)).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a whole trace file once: its header and what it asks, checking every line.
pub fn summarize(path: &Path) -> Result<(Header, TraceStats), String> {
    let reader = open(path)?;
    let header = reader.header().clone();
    let mut stats = TraceStats::default();
    for item in reader {
        let (_, r) = item.map_err(|e| format!("{}: {e}", path.display()))?;
        stats.count(&r);
    }
    Ok((header, stats))
}

/// The NAND a trace replays on when no size is given: the smallest one with the share
/// `op` over-provisioned that covers the traced device (its header's `device_bytes`, or
/// else the highest sector the trace touches).
pub fn default_geometry(
    header: &Header,
    stats: &TraceStats,
    op: f64,
    pages_per_block: u32,
) -> Result<Geometry, String> {
    let bytes = header
        .device_bytes
        .unwrap_or(0)
        .max(stats.sector_end * SECTOR_BYTES);
    Geometry::covering(bytes, op, pages_per_block)
}

/// What a replay runs on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Setup {
    /// The NAND.
    pub geometry: Geometry,
    /// The weights of the erase cost.
    pub cost_model: CostModel,
    /// FAST's RW log pool in blocks; `None`: every spare block but two.
    pub fast_rw_blocks: Option<u32>,
}

impl Setup {
    /// `geometry` with the default cost model and FAST's largest RW pool.
    pub fn new(geometry: Geometry) -> Setup {
        Setup {
            geometry,
            cost_model: CostModel::default(),
            fast_rw_blocks: None,
        }
    }
}

/// Replays the trace file at `path` on a fresh FTL of `kind`.
pub fn replay_file(path: &Path, kind: FtlKind, setup: &Setup) -> Result<FtlReport, String> {
    let reader = open(path)?;
    replay_on(reader, kind, setup).map_err(|e| match e.line {
        // The FTL refused the setup: nothing to do with the file.
        0 => e.message,
        _ => format!("{}: {e}", path.display()),
    })
}

/// Replays records held in memory (a capture's, or a tier's own write stream) on a fresh
/// FTL of `kind` on `geometry`. Errors name the record's index from 1 as its line.
pub fn replay_records(
    records: &[Record],
    kind: FtlKind,
    setup: &Setup,
) -> Result<FtlReport, String> {
    let items = records.iter().enumerate().map(|(i, r)| Ok((i + 1, *r)));
    replay_on(items, kind, setup).map_err(|e| match e.line {
        0 => e.message,
        n => format!("record {n}: {}", e.message),
    })
}

fn replay_on(
    records: impl Iterator<Item = Result<(usize, Record), TraceError>>,
    kind: FtlKind,
    setup: &Setup,
) -> Result<FtlReport, TraceError> {
    let (geometry, cost_model) = (setup.geometry, setup.cost_model);
    let build_error = |message: String| TraceError { line: 0, message };
    let (mut ftl, rw_log_blocks) = match kind {
        FtlKind::Page => (kind.build(geometry).map_err(build_error)?, None),
        FtlKind::Fast => {
            let f = super::fast::FastFtl::with_rw_blocks(geometry, setup.fast_rw_blocks)
                .map_err(build_error)?;
            let rw = f.rw_blocks_max() as u64;
            (Box::new(f) as Box<dyn Ftl>, Some(rw))
        }
    };
    let trace = replay(records, ftl.as_mut())?;
    let counters = ftl.counters();
    Ok(FtlReport {
        ftl: kind,
        geometry,
        nand_bytes: geometry.nand_bytes(),
        logical_bytes: geometry.logical_bytes(),
        rw_log_blocks,
        trace,
        counters,
        write_amplification: counters.write_amplification(),
        erase_count_max: ftl.erase_count_max(),
        cost_model,
        erase_cost_us: cost_model.erase_cost_us(&counters),
    })
}
