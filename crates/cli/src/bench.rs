//! `nvmfs bench micro` and `scale`: the microbenchmarks of nvmfs-lab, nvmfs against kernel
//! file systems; `nvmfs bench filebench`, `ycsb`, `tpcc`, `postmark`, `filemark`, `pgmeter`
//! and `aim7` live in their own `bench_*` modules.

use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

use clap::builder::PossibleValuesParser;
use nvmfs_lab::micro::{self, all_workloads, MicroConfig, TargetSpec};
use nvmfs_lab::scale::{self, ScaleConfig};

use crate::output;
use crate::size::{format_size, parse_size};

#[derive(clap::Args, Debug)]
#[command(
    about = "Run benchmarks of nvmfs against kernel file systems",
    long_about = "Run benchmarks. Scratch images and directories are created in a tmpfs and removed \
        afterwards, also on error or interrupt.",
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Args {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(clap::Subcommand, Debug)]
enum BenchCommand {
    Micro(MicroArgs),
    Scale(ScaleArgs),
    Filebench(Box<crate::bench_filebench::Args>),
    Ycsb(Box<crate::bench_ycsb::Args>),
    Tpcc(Box<crate::bench_tpcc::Args>),
    Postmark(Box<crate::bench_postmark::Args>),
    Filemark(Box<crate::bench_filemark::Args>),
    Pgmeter(Box<crate::bench_pgmeter::Args>),
    Aim7(Box<crate::bench_aim7::Args>),
    Ftl(Box<crate::bench_ftl::Args>),
}

#[derive(clap::Args, Debug)]
#[command(
    about = "Many files: lookup in a huge directory, DRAM held, mount time",
    long_about = "Formats a large nvmfs image in the shm dir, creates --files empty files in one \
        directory and --small-files in another, remounts cleanly and reports: lookup+stat time \
        in the large directory against the small one, the DRAM the mounted file system holds \
        (anonymous memory and page tables of this process), the clean mount time, and the time \
        of the first lookup in the large directory (which builds its DRAM index).",
    after_help = "Examples:\n  nvmfs bench scale\n  nvmfs bench scale --image-size 1G --files 100000"
)]
pub struct ScaleArgs {
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = with_default(
        "Size of the nvmfs image",
        format_size(ScaleConfig::default().image_size_bytes),
    ))]
    image_size: Option<u64>,
    #[arg(long, value_name = "N", help = with_default(
        "Files in the large directory",
        ScaleConfig::default().files.to_string(),
    ))]
    files: Option<u64>,
    #[arg(long, value_name = "N", help = with_default(
        "Files in the small directory",
        ScaleConfig::default().small_files.to_string(),
    ))]
    small_files: Option<u64>,
    #[arg(long, value_name = "DIR", help = with_default(
        "Directory (a tmpfs) for the image",
        ScaleConfig::default().shm_dir.display().to_string(),
    ))]
    shm_dir: Option<PathBuf>,
    /// Also write the report to FILE as a JSON object
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
#[command(
    about = "Microbenchmarks: nvmfs in-process and under nvmfs run against kernel file systems",
    long_about = "Microbenchmarks: nvmfs in-process and under nvmfs run against kernel file systems.\n\n\
        Every selected workload runs on every target, one after the other (never concurrently). \
        Each has an untimed setup, a short unrecorded warm-up and a measured phase of --seconds \
        in which every operation's latency is recorded. nvmfs operations are durable when they \
        return; the kernel targets use plain system calls without fsync. seqread-1m, seqwrite-1m, \
        randread-4k, overwrite-4k and open-read-16k(-deep) also get hardware-limit rows (memcpy, \
        nt-store; seqread-1m's and seqwrite-1m's also with --threads N); overwrite-4k also an \
        nt-store+rmw row, its store followed by one atomic read-modify-write as a lock release, \
        shown but not the limit. run:nvmfs runs the dir: target's system-call workloads in a \
        child `nvmfs bench micro --target dir:/nvmfs` under `nvmfs run --image IMAGE --prefix \
        /nvmfs` (the LD_PRELOAD library) and reports its records as run:nvmfs.\n\n\
        mmap-load-1k / mmap-store-1k follow fio's mmap engine (seed 000's study): the whole data \
        file mapped MAP_SHARED (nvmfs, which has no mmap: File::map_direct, its DAX-style direct \
        map), one random 1 KiB-aligned memcpy out of or into the mapping per op, no msync per \
        op; after mmap-store-1k one msync(MS_SYNC) is timed and reported on its own \
        (final_sync_s), not in ops/s. The metadata workloads create-16k, stat, open-read-16k and \
        unlink keep all --files files in one flat directory; their -deep variants place the \
        same number of files --depth directories deep, in a tree as narrow as the count \
        allows.\n\n\
        Progress goes to stderr, the result table to stdout, and with --json FILE the records \
        to FILE as a JSON array. Ctrl-C stops after the current step and removes the scratch \
        files; a second Ctrl-C quits at once.",
    after_help = "Exit status: 0 on success, 1 on error, 130 when interrupted.\n\n\
        Examples:\n  nvmfs bench micro\n  \
        nvmfs bench micro --target nvmfs --target dir:/mnt/ext4 --workload stat --seconds 3\n  \
        nvmfs bench micro -t nvmfs -t run:nvmfs -t tmpfs -w randread-4k -w overwrite-4k\n  \
        nvmfs bench micro --file-size 64M --files 1000 --image-size 512M --json micro.json\n  \
        nvmfs bench micro -w mmap-load-1k -w mmap-store-1k --file-size 2G --image-size 3G\n  \
        nvmfs bench micro -w stat -w stat-deep --depth 8\n  \
        nvmfs bench micro --threads 2 -w randread-4k -w create-16k"
)]
pub struct MicroArgs {
    /// Where to run, in order (repeat for several): `nvmfs` (the library in-process on a fresh
    /// image in the shm dir), `tmpfs` (a fresh directory in the shm dir, through system calls),
    /// `dir:PATH` (a fresh subdirectory of PATH, e.g. on ext4) or `run:nvmfs` (nvmfs through the
    /// C library: this command again, with `--target dir:/nvmfs`, under `nvmfs run` on a fresh
    /// image in the shm dir) [default: nvmfs, tmpfs]
    #[arg(short, long = "target", value_name = "T", value_parser = TargetSpec::parse)]
    targets: Vec<TargetSpec>,
    /// Workload to run (repeat for several) [default: all]
    #[arg(
        short,
        long = "workload",
        value_name = "W",
        value_parser = PossibleValuesParser::new(all_workloads().iter().copied())
    )]
    workloads: Vec<String>,
    #[arg(long, value_name = "S", help = with_default(
        "Length of the measured phase of each workload on each target, in seconds",
        MicroConfig::default().seconds.to_string(),
    ))]
    seconds: Option<f64>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = with_default(
        "Size of the data file of randread/overwrite/seqread/seqwrite/mmap (at least 1M)",
        format_size(MicroConfig::default().file_size_bytes),
    ))]
    file_size: Option<u64>,
    #[arg(long, value_name = "N", help = with_default(
        "Number of 16 KiB files of create/stat/open-read/unlink and their -deep variants",
        MicroConfig::default().file_count.to_string(),
    ))]
    files: Option<usize>,
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=micro::MAX_TREE_DEPTH as i64), help = with_default(
        "Directory levels above each file in the -deep metadata workloads",
        MicroConfig::default().tree_depth.to_string(),
    ))]
    depth: Option<u32>,
    /// Also run every workload with N threads, on disjoint files (each thread 1/N of the data
    /// file and file sets) and on one shared file or directory, and report each against one
    /// thread, with the CPU link measured right after each threaded run (the default image
    /// grows by --file-size for the threads' data files)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=micro::MAX_THREADS as i64))]
    threads: Option<u32>,
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help = with_default(
        "Size of the nvmfs image; it must hold the data file and three sets of --files files",
        format_size(MicroConfig::default().image_size_bytes),
    ))]
    image_size: Option<u64>,
    #[arg(long, value_name = "DIR", help = with_default(
        "Directory (a tmpfs) for the nvmfs image and the tmpfs target",
        MicroConfig::default().shm_dir.display().to_string(),
    ))]
    shm_dir: Option<PathBuf>,
    /// Also write the records to FILE as a JSON array
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Leave out the hardware-limit rows (what a run:nvmfs child is started with)
    #[arg(long, hide = true)]
    no_references: bool,
}

fn with_default(text: &str, default: String) -> String {
    format!("{text} [default: {default}]")
}

pub fn run(args: &Args) -> u8 {
    match &args.command {
        BenchCommand::Micro(m) => run_micro(m),
        BenchCommand::Scale(s) => run_scale(s),
        BenchCommand::Filebench(f) => crate::bench_filebench::run(f),
        BenchCommand::Ycsb(y) => crate::bench_ycsb::run(y),
        BenchCommand::Tpcc(t) => crate::bench_tpcc::run(t),
        BenchCommand::Postmark(p) => crate::bench_postmark::run(p),
        BenchCommand::Filemark(f) => crate::bench_filemark::run(f),
        BenchCommand::Pgmeter(p) => crate::bench_pgmeter::run(p),
        BenchCommand::Aim7(a) => crate::bench_aim7::run(a),
        BenchCommand::Ftl(f) => crate::bench_ftl::run(f),
    }
}

fn run_scale(args: &ScaleArgs) -> u8 {
    let d = ScaleConfig::default();
    let cfg = ScaleConfig {
        image_size_bytes: args.image_size.unwrap_or(d.image_size_bytes),
        files: args.files.unwrap_or(d.files),
        small_files: args.small_files.unwrap_or(d.small_files),
        lookups: d.lookups,
        shm_dir: args.shm_dir.clone().unwrap_or(d.shm_dir),
    };
    if let Some(path) = &args.json {
        if let Err(e) = check_writable(path) {
            eprintln!("nvmfs bench: --json {}: {e}", path.display());
            return 1;
        }
    }
    let report = match guarded(|progress| scale::run(&cfg, progress)) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if !output::print("bench", &format!("{}\n", scale::format_report(&report))) {
        return 1;
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report).expect("serialisable");
        if let Err(e) = std::fs::write(path, json + "\n") {
            eprintln!("nvmfs bench: cannot write {}: {e}", path.display());
            return 1;
        }
    }
    0
}

/// Runs a benchmark with the interrupt handler installed and progress on stderr; an error or
/// interrupt becomes the exit status.
fn guarded<T>(f: impl FnOnce(&mut dyn FnMut(&str)) -> std::io::Result<T>) -> Result<T, u8> {
    install_interrupt_handler();
    let mut progress = |msg: &str| {
        if interrupted().is_some() && !std::thread::panicking() {
            // Unwinds out of the benchmark; its guards unmount and delete the scratch
            // images and directories on the way (see `Interrupted`).
            panic::resume_unwind(Box::new(Interrupted));
        }
        eprintln!("{msg}");
    };
    match panic::catch_unwind(AssertUnwindSafe(|| f(&mut progress))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            if let Some(code) = interrupted() {
                eprintln!("nvmfs bench: interrupted");
                return Err(code);
            }
            eprintln!("nvmfs bench: {e}");
            Err(1)
        }
        Err(payload) if payload.is::<Interrupted>() => {
            eprintln!("nvmfs bench: interrupted; scratch files removed");
            Err(interrupted().unwrap_or(130))
        }
        Err(payload) => panic::resume_unwind(payload),
    }
}

fn run_micro(args: &MicroArgs) -> u8 {
    let d = MicroConfig::default();
    let threads = args.threads.map_or(1, |t| t as usize);
    let file_size = args.file_size.unwrap_or(d.file_size_bytes);
    // Threads on disjoint files add one data file's worth beside the one-thread run's.
    let image_default = d.image_size_bytes
        + match threads {
            1 => 0,
            _ => file_size,
        };
    let cfg = MicroConfig {
        targets: if args.targets.is_empty() {
            d.targets
        } else {
            args.targets.clone()
        },
        workloads: args.workloads.clone(),
        seconds: args.seconds.unwrap_or(d.seconds),
        file_size_bytes: file_size,
        file_count: args.files.unwrap_or(d.file_count),
        tree_depth: args.depth.unwrap_or(d.tree_depth),
        image_size_bytes: args.image_size.unwrap_or(image_default),
        shm_dir: args.shm_dir.clone().unwrap_or(d.shm_dir),
        // run:nvmfs starts this binary under `nvmfs run`.
        nvmfs_bin: std::env::current_exe().ok(),
        references: !args.no_references,
        threads,
    };
    // Fail before running anything rather than after the whole benchmark.
    if let Some(path) = &args.json {
        if let Err(e) = check_writable(path) {
            eprintln!("nvmfs bench: --json {}: {e}", path.display());
            return 1;
        }
    }
    let records = match guarded(|progress| micro::run(&cfg, progress)) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if !output::print("bench", &micro::format_table(&records)) {
        return 1;
    }
    if let Some(path) = &args.json {
        if let Err(e) = micro::write_json(path, &records) {
            eprintln!("nvmfs bench: cannot write {}: {e}", path.display());
            return 1;
        }
        eprintln!("wrote {} records to {}", records.len(), path.display());
    }
    0
}

/// Opens `path` for writing without truncating it (creating it if needed, and removing
/// it again if so), to catch a bad --json path before the run.
pub(crate) fn check_writable(path: &std::path::Path) -> std::io::Result<()> {
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Panic payload used to abandon the benchmark on SIGINT/SIGTERM: `resume_unwind` does not
/// run the panic hook, so nothing is printed, and the unwinding drops the benchmark's
/// scratch guards, which remove its images and directories.
struct Interrupted;

/// The signal that interrupted the benchmark (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The exit status for an interrupt (128 + signal), if one arrived.
fn interrupted() -> Option<u8> {
    match SIGNAL.load(Ordering::Relaxed) {
        0 => None,
        sig => Some(u8::try_from(128 + sig).unwrap_or(130)),
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work: an atomic store and write(2).
    SIGNAL.store(sig, Ordering::Relaxed);
    const MSG: &[u8] = b"\nnvmfs bench: interrupted: stopping after the current step and removing \
        scratch files (interrupt again to quit at once)\n";
    // SAFETY: write(2) of a static buffer to stderr.
    unsafe {
        libc::write(2, MSG.as_ptr().cast(), MSG.len());
    }
}

/// SIGINT and SIGTERM set `SIGNAL`; the progress callback then unwinds out of the run.
/// SA_RESETHAND restores the default action, so a second signal ends the process at once.
fn install_interrupt_handler() {
    // SAFETY: sigaction with a zeroed (then filled) struct and a handler that only does
    // async-signal-safe work.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        for sig in [libc::SIGINT, libc::SIGTERM] {
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                eprintln!(
                    "nvmfs bench: warning: cannot install the interrupt handler: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
}
