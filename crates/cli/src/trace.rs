//! `nvmfs trace capture`: records the block requests a kernel file system issues while a
//! command runs on it, as a trace for `nvmfs bench ftl`.

use std::io;
use std::path::PathBuf;
use std::process::Command;

use nvmfs_lab::ftl::{blkparse, capture, trace};
use nvmfs_lab::kernel;

use crate::size::{format_size, parse_size};

#[derive(clap::Args, Debug)]
#[command(
    about = "Record or import block traces for the FTL simulator",
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Args {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(clap::Subcommand, Debug)]
enum TraceCommand {
    Capture(CaptureArgs),
    Import(ImportArgs),
}

#[derive(clap::Args, Debug)]
#[command(
    about = "Convert blkparse's output (a blktrace capture) to the lab's trace format",
    long_about = "Reads the text blkparse prints by default (`blkparse -i DEV`) and writes the \
        issued requests (action D: what `nvmfs trace capture` records) in the lab's trace \
        format, for `nvmfs bench ftl`. Other actions and blkparse's closing summary are \
        skipped; a D line that does not parse is an error naming its line. With requests of \
        several devices, --device picks one.",
    after_help = "Examples:\n  blktrace -d /dev/sdb -o - | blkparse -i - > sdb.txt\n  \
        nvmfs trace import --blkparse sdb.txt --device-bytes 64G --out sdb.trace"
)]
struct ImportArgs {
    /// blkparse's output (`-` for stdin)
    #[arg(long, value_name = "FILE")]
    blkparse: PathBuf,
    /// The device as blkparse names it, e.g. 8,16 [default: the only one in the file]
    #[arg(long, value_name = "MAJ,MIN")]
    device: Option<String>,
    /// Size of the traced device, recorded in the trace (what `bench ftl` sizes its NAND by)
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    device_bytes: Option<u64>,
    /// Where to write the trace
    #[arg(short, long, value_name = "FILE")]
    out: PathBuf,
}

#[derive(clap::Args, Debug)]
#[command(
    about = "Run a command on a fresh kernel file system and record its block writes",
    long_about = "Makes --target fresh on a loop device over a sparse file in --shm-dir (as the \
        lab's benchmarks do: mkfs, mount), records every request the kernel issues to the loop \
        device (tracefs event block:block_rq_issue, what blktrace reports as `D`) while the \
        command runs in the mount point and while the file system is unmounted after it (so \
        the page cache's dirty data is written back into the trace), then tears everything \
        down and writes the trace to --out. mkfs and the first mount are not in the trace.\n\n\
        The command runs with the mount point as its working directory and in \
        $NVMFS_TRACE_DIR. Needs root and tracefs; a target the kernel lacks (nilfs2, f2fs on \
        this kernel) is reported as unavailable with the reason.",
    after_help = "Exit status: 0 on success, 1 when the target is unavailable, the command fails \
        or the capture loses events, 2 on bad flags.\n\n\
        Examples:\n  \
        nvmfs trace capture -t ext4 -o ext4.trace -- sh -c 'dd if=/dev/urandom of=f bs=4k count=25600'\n  \
        nvmfs trace capture -t btrfs --size 1G -o btrfs.trace -- nvmfs bench postmark -t dir:.\n  \
        nvmfs bench ftl --trace ext4.trace"
)]
struct CaptureArgs {
    /// Kernel variant of the lab's catalogue: ext2, ext3, ext4, xfs, btrfs, ...
    #[arg(short, long, value_name = "T")]
    target: String,
    /// Size of the loop device
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "512M")]
    size: u64,
    /// Directory (a tmpfs) for the loop device's backing file
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    shm_dir: PathBuf,
    /// Where to write the trace
    #[arg(short, long, value_name = "FILE")]
    out: PathBuf,
    /// The command to run in the mount point
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

pub fn run(args: &Args) -> u8 {
    match &args.command {
        TraceCommand::Capture(c) => run_capture(c),
        TraceCommand::Import(i) => run_import(i),
    }
}

fn run_import(args: &ImportArgs) -> u8 {
    let name = args.blkparse.display().to_string();
    let records = if name == "-" {
        blkparse::import(io::stdin().lock(), args.device.as_deref())
    } else {
        match std::fs::File::open(&args.blkparse) {
            Ok(f) => blkparse::import(io::BufReader::new(f), args.device.as_deref()),
            Err(e) => {
                eprintln!("nvmfs trace import: {name}: {e}");
                return 1;
            }
        }
    };
    let records = match records {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nvmfs trace import: {name}: {e}");
            return 1;
        }
    };
    let header = trace::Header {
        device_bytes: args.device_bytes,
        source: Some(format!(
            "blkparse {name}{}, action D",
            args.device
                .as_deref()
                .map(|d| format!(" device {d}"))
                .unwrap_or_default()
        )),
    };
    if let Err(e) = trace::write_file(&args.out, &header, &records) {
        eprintln!("nvmfs trace import: {}: {e}", args.out.display());
        return 1;
    }
    eprintln!("wrote {}: {} requests", args.out.display(), records.len());
    0
}

fn run_capture(args: &CaptureArgs) -> u8 {
    if let Some(reason) = capture::kernel_unavailable(&args.target, args.size) {
        eprintln!("nvmfs trace capture: {reason}");
        return 1;
    }
    if let Err(e) = kernel::install_interrupt_handler() {
        eprintln!("nvmfs trace capture: warning: no Ctrl-C cleanup: {e}");
    }
    eprintln!(
        "capturing {} on a {} loop device: {}",
        args.target,
        format_size(args.size),
        args.command.join(" ")
    );
    let got = capture::capture_kernel(&args.target, args.size, &args.shm_dir, |dir| {
        let status = Command::new(&args.command[0])
            .args(&args.command[1..])
            .current_dir(dir)
            .env("NVMFS_TRACE_DIR", dir)
            .status()
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", args.command[0])))?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("the command failed: {status}")))
        }
    });
    let got = match got {
        Ok(g) => g,
        Err(e) => {
            eprintln!("nvmfs trace capture: {e}");
            return 1;
        }
    };
    if let Err(e) = trace::write_file(&args.out, &got.header, &got.records) {
        eprintln!("nvmfs trace capture: {}: {e}", args.out.display());
        return 1;
    }
    let written: u64 = got
        .records
        .iter()
        .filter(|r| r.op == trace::Op::Write)
        .map(|r| u64::from(r.sectors))
        .sum();
    eprintln!(
        "wrote {}: {} requests, {written} sectors written\nreplay: nvmfs bench ftl --trace {}",
        args.out.display(),
        got.records.len(),
        args.out.display()
    );
    0
}
