//! `nvmfs bench ftl`: replays a block trace on the lab's FTL simulator (page-level
//! mapping and FAST) and prints seed 004's SSD counters: write traffic in sectors,
//! erases and erase cost (Figs. 6-7), with the copies and merges behind them.

use std::path::PathBuf;

use nvmfs_lab::ftl::geometry::{SEED_NAND_BYTES, SEED_OP, SEED_PAGES_PER_BLOCK};
use nvmfs_lab::ftl::replay::{self, FtlReport, TraceStats};
use nvmfs_lab::ftl::trace::Header;
use nvmfs_lab::ftl::{CostModel, FtlKind, Geometry};
use serde::Serialize;

use crate::bench_targets::finish_report;
use crate::output;
use crate::size::{format_size, parse_size};

#[derive(clap::Args, Debug)]
#[command(
    about = "Replay a block trace on simulated SSDs (page-level FTL, FAST): erases, copies, cost",
    long_about = "Replays a block trace (the lab's text format; `nvmfs trace capture` records \
        one from a kernel file system) on a simulated NAND SSD, once per FTL scheme, each on a \
        fresh (erased) device, and prints seed 004's counters (NVMFS, 2013, Figs. 6-7): the \
        write traffic in sectors, host page writes, valid-page copies, erases, merges by kind \
        (FAST), write amplification and the erase cost.\n\n\
        The NAND has 4 KiB pages and 256 KiB blocks (64 pages), with the share --op of its \
        blocks over-provisioned, as the seed's 24 GiB device with 10%. Without --size it is \
        the smallest NAND whose logical space holds the traced device (the trace's \
        device_bytes, or its highest sector), so the file system's own free-space layout \
        decides how full the SSD looks; --size 24G gives the seed's device. Writes cover the \
        4 KiB pages their sectors touch; discards trim the pages they cover whole.\n\n\
        Erase cost = copies x (read + program) + erases x erase, with --cost-us READ,PROGRAM,\
        ERASE (default 25,200,1500 µs: large-block SLC NAND; the seed gives no weights).\n\n\
        The whole trace is read once first, so a bad line is reported before any replay.",
    after_help = "Exit status: 0 on success, 1 on a bad trace or an error, 2 on bad flags.\n\n\
        Examples:\n  nvmfs bench ftl --trace ext4.trace\n  \
        nvmfs bench ftl --trace ext4.trace --ftl fast --size 24G --json ftl.json\n  \
        nvmfs bench ftl --trace t.trace --op 0.07 --cost-us 50,600,3000"
)]
pub struct Args {
    /// The trace to replay (`# nvmfs-trace 1` format)
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// FTL scheme: page or fast (repeat for both) [default: fast and page]
    #[arg(long = "ftl", value_name = "FTL", value_parser = FtlKind::parse)]
    ftls: Vec<FtlKind>,
    /// NAND size (a multiple of the block) [default: the smallest that holds the traced device]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    size: Option<u64>,
    /// Over-provisioned share of the NAND's blocks
    #[arg(long, value_name = "SHARE", default_value_t = SEED_OP)]
    op: f64,
    /// Pages (4 KiB) per erase block
    #[arg(long, value_name = "N", default_value_t = SEED_PAGES_PER_BLOCK)]
    pages_per_block: u32,
    /// FAST's pool of random log blocks [default: every spare block but the SW block and the
    /// merge block]
    #[arg(long, value_name = "N")]
    fast_rw_blocks: Option<u32>,
    /// NAND operation times in µs for the erase cost: READ,PROGRAM,ERASE
    #[arg(long, value_name = "R,P,E", value_parser = CostModel::parse)]
    cost_us: Option<CostModel>,
    /// Also write the report to FILE as a JSON object
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// The JSON report.
#[derive(Serialize)]
struct Report {
    schema: &'static str,
    trace_file: String,
    header: Header,
    trace: TraceStats,
    /// How the NAND size was chosen.
    sized_by: String,
    results: Vec<FtlReport>,
}

pub fn run(args: &Args) -> u8 {
    let (header, stats) = match replay::summarize(&args.trace) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("nvmfs bench ftl: {e}");
            return 1;
        }
    };
    let (geometry, sized_by) = match geometry(args, &header, &stats) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("nvmfs bench ftl: {e}");
            return 1;
        }
    };
    let setup = replay::Setup {
        geometry,
        cost_model: args.cost_us.unwrap_or_default(),
        fast_rw_blocks: args.fast_rw_blocks,
    };
    let kinds = if args.ftls.is_empty() {
        FtlKind::ALL.to_vec()
    } else {
        args.ftls.clone()
    };
    eprintln!(
        "{}: {} records, {} sectors written; NAND {} ({} blocks, {} logical = {}), {sized_by}",
        args.trace.display(),
        stats.records,
        stats.write_sectors,
        format_size(geometry.nand_bytes()),
        geometry.physical_blocks,
        geometry.logical_blocks,
        format_size(geometry.logical_bytes()),
    );
    let mut results = Vec::new();
    let mut failed = false;
    for kind in kinds {
        eprintln!("replaying on {kind} ...");
        match replay::replay_file(&args.trace, kind, &setup) {
            Ok(r) => results.push(r),
            Err(e) => {
                eprintln!("nvmfs bench ftl: {kind}: {e}");
                failed = true;
            }
        }
    }
    if !results.is_empty() && !output::print("bench", &table(&stats, &results)) {
        return 1;
    }
    let report = Report {
        schema: "nvmfs-lab/bench-ftl/v1",
        trace_file: args.trace.display().to_string(),
        header,
        trace: stats,
        sized_by,
        results,
    };
    let runs = report
        .results
        .iter()
        .map(|_| (false, true))
        .chain(failed.then_some((true, false)))
        .collect::<Vec<_>>();
    finish_report("ftl", args.json.as_ref(), &report, false, runs.into_iter())
}

fn geometry(
    args: &Args,
    header: &Header,
    stats: &TraceStats,
) -> Result<(Geometry, String), String> {
    match args.size {
        Some(size) => {
            let g = Geometry::from_size(size, args.op, args.pages_per_block)?;
            Ok((g, format!("--size {}", format_size(size))))
        }
        None => {
            let g = replay::default_geometry(header, stats, args.op, args.pages_per_block)?;
            let why = match header.device_bytes {
                Some(b) => format!("sized for the traced device ({})", format_size(b)),
                None => "sized for the highest sector written (no device_bytes)".to_string(),
            };
            let seed = if g.nand_bytes() == SEED_NAND_BYTES {
                " (the seed's)"
            } else {
                ""
            };
            Ok((g, format!("{why}{seed}")))
        }
    }
}

fn table(stats: &TraceStats, results: &[FtlReport]) -> String {
    let mut out = format!(
        "write traffic: {} sectors in {} requests ({} unaligned to 4 KiB); {} sectors \
         discarded, {} flushes\n\n",
        stats.write_sectors,
        stats.write_requests,
        stats.unaligned_writes,
        stats.discard_sectors,
        stats.flushes
    );
    out += &format!(
        "{:<5} {:>12} {:>12} {:>10} {:>8} {:>8} {:>8} {:>8} {:>7} {:>14}\n",
        "ftl",
        "host pages",
        "copies",
        "erases",
        "gc",
        "switch",
        "partial",
        "full",
        "WA",
        "erase cost ms"
    );
    for r in results {
        let c = &r.counters;
        let fast = r.ftl == FtlKind::Fast;
        let merge = |n: u64| if fast { n.to_string() } else { "-".into() };
        out += &format!(
            "{:<5} {:>12} {:>12} {:>10} {:>8} {:>8} {:>8} {:>8} {:>7.3} {:>14.1}\n",
            r.ftl.name(),
            c.host_page_writes,
            c.page_copies,
            c.erases,
            if fast {
                "-".into()
            } else {
                c.gc_victims.to_string()
            },
            merge(c.switch_merges),
            merge(c.partial_merges),
            merge(c.full_merges),
            r.write_amplification,
            r.erase_cost_us / 1000.0
        );
    }
    if let Some(r) = results.first() {
        out += &format!(
            "\nerase cost = copies x ({} + {}) µs + erases x {} µs\n",
            r.cost_model.read_us, r.cost_model.program_us, r.cost_model.erase_us
        );
    }
    out
}
