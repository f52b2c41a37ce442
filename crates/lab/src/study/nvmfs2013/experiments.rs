//! The run of the nvmfs-2013 study: every selected workload at every utilisation level on
//! every available target, each trial on a fresh file system.
//!
//! - nvmfs: a tiered image (PM image and SSD file in the shm directory); the SSD write stream
//!   is the tier's own trace ([`nvmfs::Fs::tier_trace_start`]). Nothing is flushed at the end:
//!   dirty data in PM is durable, which is the design's point.
//! - kernel file systems: [`capture_kernel`] on a RAM-backed loop device of the level's size;
//!   the workload runs inside a memory cgroup limited to the PM tier's size (plus a slack for
//!   the workload's own memory), the seed's equal DRAM page cache, and ends with `syncfs`
//!   inside the timed phase (nvmfs's writes are durable on return); the unmount's writeback
//!   after it is in the trace too.
//!
//! A cell that cannot run is recorded with why; the others go on.

use super::{Cell, Config, Level, StudyResult, TierCounters, Workload, LEVELS, TARGETS, WORKLOADS};
use crate::filebench::{self, LabTarget, Personality, PersonalityConfig, RunConfig};
use crate::ftl::capture::{capture_kernel, kernel_unavailable};
use crate::ftl::geometry::{SEED_OP, SEED_PAGES_PER_BLOCK};
use crate::ftl::replay::{self, Setup};
use crate::ftl::trace::{Op, Record};
use crate::ftl::{FtlKind, Geometry};
use crate::micro::measure::new_histogram;
use crate::postmark::engine::Instance;
use crate::postmark::PostmarkConfig;
use crate::stats::Summary;
use crate::targets::api::{MicroFile, MicroFs};
use crate::targets::nvmfs::NvmfsTarget;
use crate::targets::sys::{ScratchFile, SysFs};
use nvmfs::{FormatOptions, TierFormat};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const BLOCK: u64 = 4096;
const SECTOR: u64 = 512;
/// nvmfs's SSD extent: every tier write starts one and stays inside it.
pub const EXTENT: u64 = 512 << 10;
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// Runs the study.
pub fn run(
    cfg: &Config,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(&str),
) -> io::Result<StudyResult> {
    let start = Instant::now();
    let mut cells = Vec::new();
    let mut unavailable_targets: Vec<(String, String)> = Vec::new();
    let mut notes = Vec::new();
    let workloads: Vec<&Workload> = WORKLOADS
        .iter()
        .filter(|w| cfg.runs_workload(w.id))
        .collect();
    let levels: Vec<&Level> = LEVELS.iter().filter(|l| cfg.runs_level(l.name)).collect();
    if workloads.is_empty() || levels.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no workload or no level selected",
        ));
    }
    let smallest = cfg.device_bytes;
    let mut targets = Vec::new();
    for t in TARGETS.iter().filter(|t| cfg.runs_target(t)) {
        if *t == "nvmfs" {
            targets.push(t.to_string());
        } else if let Some(why) = kernel_unavailable(t, smallest) {
            progress(&format!("{t}: not run: {why}"));
            unavailable_targets.push((t.to_string(), why));
        } else {
            targets.push(t.to_string());
        }
    }
    if !cfg.cache_budget {
        notes.push("the kernel targets ran without a page-cache budget (--no-budget)".into());
    }
    'all: for w in &workloads {
        for l in &levels {
            for t in &targets {
                if interrupted() {
                    break 'all;
                }
                progress(&format!("{} {} on {t}", w.id, l.name));
                let t0 = Instant::now();
                let cell = run_cell(cfg, w, l, t, interrupted);
                match cell.not_measured() {
                    Some(why) => progress(&format!("  {why}")),
                    None => progress(&format!(
                        "  {:.0} ops/s, {} sectors written, utilisation {:.0}% ({:.1} s)",
                        cell.throughput_summary.map_or(0.0, |s| s.mean),
                        cell.sectors().unwrap_or(0),
                        cell.mean_utilisation().unwrap_or(0.0) * 100.0,
                        t0.elapsed().as_secs_f64()
                    )),
                }
                cells.push(cell);
            }
        }
    }
    Ok(StudyResult {
        config: cfg.clone(),
        cells,
        unavailable_targets,
        notes,
        interrupted: interrupted(),
        wall_seconds: start.elapsed().as_secs_f64(),
    })
}

/// One trial's measurements.
struct Trial {
    ops_per_sec: f64,
    /// The filler's requests, then the workload's from `start`.
    records: Vec<Record>,
    start: usize,
    utilisation: f64,
    tier: Option<TierCounters>,
    budget: Option<String>,
}

fn run_cell(
    cfg: &Config,
    w: &Workload,
    l: &Level,
    target: &str,
    interrupted: &dyn Fn() -> bool,
) -> Cell {
    let nvmfs = target == "nvmfs";
    let ssd_bytes = cfg.device_bytes;
    let filler = cfg.filler_bytes(l, nvmfs);
    let mut cell = Cell {
        workload: w.id,
        level: l.name,
        target: target.to_string(),
        ssd_bytes,
        filler_bytes: filler,
        unavailable: None,
        out_of_space: false,
        throughput: Vec::new(),
        throughput_summary: None,
        write_sectors: Vec::new(),
        write_requests: Vec::new(),
        utilisation: Vec::new(),
        ftl: Vec::new(),
        tier: Vec::new(),
        cache_budget: None,
        extent_aligned: None,
    };
    for i in 0..cfg.trials {
        if interrupted() {
            break;
        }
        let seed = cfg.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let trial = if nvmfs {
            nvmfs_trial(cfg, w, filler, seed, interrupted)
        } else {
            kernel_trial(cfg, w, target, filler, seed, interrupted)
        };
        let t = match trial {
            Ok(t) => t,
            Err(e) => {
                cell.out_of_space = ran_out_of_space(target, &e);
                cell.unavailable = Some(format!("trial {}: {e}", i + 1));
                return cell;
            }
        };
        let written: Vec<&Record> = t.records[t.start..]
            .iter()
            .filter(|r| r.op == Op::Write)
            .collect();
        cell.write_sectors
            .push(written.iter().map(|r| u64::from(r.sectors)).sum());
        cell.write_requests.push(written.len() as u64);
        cell.throughput.push(t.ops_per_sec);
        cell.utilisation.push(t.utilisation);
        if let Some(c) = t.tier {
            cell.tier.push(c);
        }
        if i == 0 {
            cell.cache_budget = t.budget;
            if nvmfs {
                cell.extent_aligned = Some(extent_aligned(&t.records));
            }
            match replay_all(&t.records, t.start, ssd_bytes) {
                Ok(r) => cell.ftl = r,
                Err(e) => {
                    cell.unavailable = Some(format!("FTL replay: {e}"));
                    return cell;
                }
            }
        }
    }
    cell.throughput_summary = Summary::of(&cell.throughput);
    cell
}

/// Whether a trial's error means the kernel file system `target` could not hold the level's
/// data (see [`Cell::out_of_space`]). The engines keep the error's kind when they add context.
pub fn ran_out_of_space(target: &str, e: &io::Error) -> bool {
    target != "nvmfs" && e.kind() == io::ErrorKind::StorageFull
}

/// Whether every write starts at an extent boundary and ends inside that extent (the
/// tier's 512 KiB sequential units). Reads and other requests are not writes.
pub fn extent_aligned(records: &[Record]) -> bool {
    let ext_sectors = EXTENT / SECTOR;
    records.iter().filter(|r| r.op == Op::Write).all(|r| {
        r.sector % ext_sectors == 0 && u64::from(r.sectors) <= ext_sectors && r.sectors > 0
    })
}

/// The NAND a trace replays on: the smallest with the seed's 10% over-provisioning and
/// 256 KiB blocks whose logical space covers the SSD (or device) it was recorded on.
pub fn geometry(ssd_bytes: u64) -> Result<Geometry, String> {
    Geometry::covering(ssd_bytes, SEED_OP, SEED_PAGES_PER_BLOCK)
}

/// Replays the whole stream (filler, then workload) on a fresh NAND of each FTL and keeps
/// what the workload's part did: the counters of the whole less those of the filler alone
/// (the FTLs are deterministic, so the filler leaves the same state in both replays).
fn replay_all(
    records: &[Record],
    start: usize,
    ssd_bytes: u64,
) -> Result<Vec<replay::FtlReport>, String> {
    let setup = Setup::new(geometry(ssd_bytes)?);
    let mut out = Vec::new();
    for k in FtlKind::ALL {
        let mut all = replay::replay_records(records, k, &setup)?;
        let pre = replay::replay_records(&records[..start], k, &setup)?;
        let (a, p) = (all.counters, pre.counters);
        let c = crate::ftl::Counters {
            host_page_writes: a.host_page_writes - p.host_page_writes,
            host_page_trims: a.host_page_trims - p.host_page_trims,
            page_programs: a.page_programs - p.page_programs,
            page_copies: a.page_copies - p.page_copies,
            erases: a.erases - p.erases,
            gc_victims: a.gc_victims - p.gc_victims,
            switch_merges: a.switch_merges - p.switch_merges,
            partial_merges: a.partial_merges - p.partial_merges,
            full_merges: a.full_merges - p.full_merges,
        };
        let mut trace = replay::TraceStats::default();
        records[start..].iter().for_each(|r| trace.count(r));
        all.counters = c;
        all.trace = trace;
        all.write_amplification = c.write_amplification();
        all.erase_cost_us = all.cost_model.erase_cost_us(&c);
        out.push(all);
    }
    Ok(out)
}

/// The tier's SSD writes as trace records (byte offsets on the SSD to sectors).
pub fn tier_records(writes: &[nvmfs::tier::SsdWrite]) -> Vec<Record> {
    writes
        .iter()
        .enumerate()
        .map(|(i, w)| Record {
            time_ns: i as u64,
            op: Op::Write,
            sector: w.offset / SECTOR,
            sectors: w.len.div_ceil(SECTOR) as u32,
        })
        .collect()
}

fn scratch_path(cfg: &Config, what: &str) -> PathBuf {
    cfg.shm_dir.join(format!(
        "nvmfs-2013-{}-{}.{what}",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ))
}

fn nvmfs_trial(
    cfg: &Config,
    w: &Workload,
    filler: u64,
    seed: u64,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<Trial> {
    let ssd = ScratchFile::claim(scratch_path(cfg, "ssd"))?;
    let opts = FormatOptions {
        size_bytes: cfg.pm_bytes,
        inode_count: Some(inode_count(cfg)),
        tier: Some(TierFormat::new(
            Some(ssd.path().to_path_buf()),
            Some(cfg.device_bytes),
        )),
        ..Default::default()
    };
    let target = NvmfsTarget::create_with(scratch_path(cfg, "img"), &opts)?;
    target.fs().tier_trace_start();
    write_filler(&target, filler, interrupted)?;
    let mut records = tier_records(&target.fs().tier_trace_take());
    let start = records.len();
    let info = |t: &NvmfsTarget| {
        t.fs()
            .tier_info()
            .ok_or_else(|| io::Error::other("the image has no tier"))
    };
    let before = info(&target)?.stats;
    target.fs().tier_trace_start();
    let ops_per_sec = run_workload(&target, w, cfg, seed, &|| Ok(()), interrupted)?;
    records.extend(tier_records(&target.fs().tier_trace_take()));
    let after = info(&target)?;
    target.close()?;
    drop(ssd);
    let s = &after.stats;
    let cleaned = s.cleaned_extents - before.cleaned_extents;
    let moved = s.moved_blocks - before.moved_blocks;
    let recycled = cleaned * (EXTENT / BLOCK);
    let counters = TierCounters {
        flushes: s.flushes - before.flushes,
        flushed_blocks: s.flushed_blocks - before.flushed_blocks,
        cleaned_extents: cleaned,
        recycled_blocks: recycled,
        moved_blocks: moved,
        cleaning_efficiency: (recycled > 0).then(|| 1.0 - moved as f64 / recycled as f64),
        ssd_utilisation: after.ssd_utilisation(),
    };
    Ok(Trial {
        ops_per_sec,
        records,
        start,
        utilisation: after.ssd_utilisation(),
        tier: Some(counters),
        budget: None,
    })
}

/// The untraced filler: one file of `bytes` written in 1 MiB writes.
fn write_filler<F: MicroFs>(fs: &F, bytes: u64, interrupted: &dyn Fn() -> bool) -> io::Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let chunk = vec![0xF1u8; 1 << 20];
    let f = fs.create(&fs.name("filler"))?;
    for i in 0..bytes >> 20 {
        if interrupted() {
            return Err(stopped());
        }
        f.write_all_at(&chunk, i << 20)?;
    }
    Ok(())
}

fn inode_count(cfg: &Config) -> u64 {
    let fio = cfg.data_bytes / cfg.fio_file_bytes;
    let postmark = 2 * cfg.data_bytes / u64::from(cfg.postmark_size_high);
    let fileserver = 2 * cfg.data_bytes / (128 << 10);
    (fio.max(postmark).max(fileserver) + 1024).next_power_of_two()
}

fn kernel_trial(
    cfg: &Config,
    w: &Workload,
    target: &str,
    filler: u64,
    seed: u64,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<Trial> {
    let mut out = (0.0, 0.0, None);
    let device_bytes = cfg.device_bytes;
    let cap = capture_kernel(target, device_bytes, &cfg.shm_dir, |mnt| {
        preallocate_backing(mnt);
        let fs = SysFs::new(mnt);
        write_filler(&fs, filler, interrupted)?;
        syncfs(mnt)?;
        mark(mnt, device_bytes)?;
        let budget = if cfg.cache_budget {
            Some(budget::Budget::enter(cfg.pm_bytes + cfg.cgroup_slack_bytes))
        } else {
            None
        };
        let sync = || syncfs(mnt);
        let r = run_workload(&fs, w, cfg, seed, &sync, interrupted);
        let util = used_share(mnt);
        let note = match budget {
            Some(Ok(b)) => Some(b.leave()),
            Some(Err(why)) => Some(format!("not applied: {why}")),
            None => None,
        };
        out = (r?, util?, note);
        Ok(())
    })?;
    Ok(Trial {
        ops_per_sec: out.0,
        start: after_mark(&cap.records, device_bytes)?,
        records: cap.records,
        utilisation: out.1,
        tier: None,
        budget: out.2,
    })
}

/// The marker request: an O_DIRECT read of [`MARK_SECTORS`] at the device's end, which no
/// file system issues itself.
const MARK_SECTORS: u32 = 40;

fn mark_sector(device_bytes: u64) -> u64 {
    device_bytes / SECTOR - u64::from(MARK_SECTORS)
}

/// Reads the marker from the device under `mnt`, so the trace can drop what came before
/// (mkfs is not traced; the filler is).
fn mark(mnt: &Path, device_bytes: u64) -> io::Result<()> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let dev = mount_source(mnt)
        .ok_or_else(|| io::Error::other(format!("no device mounted at {}", mnt.display())))?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&dev)?;
    let len = MARK_SECTORS as usize * SECTOR as usize;
    let layout = std::alloc::Layout::from_size_align(len, 4096).expect("a valid layout");
    // SAFETY: a non-zero size; freed below with the same layout.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(io::Error::other("out of memory"));
    }
    // SAFETY: `ptr` holds `len` initialised bytes until the dealloc below.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
    let r = FileExt::read_exact_at(&f, buf, mark_sector(device_bytes) * SECTOR);
    // SAFETY: allocated above with `layout`.
    unsafe { std::alloc::dealloc(ptr, layout) };
    r
}

/// The index of the first record after the (last) marker read.
pub fn after_mark(records: &[Record], device_bytes: u64) -> io::Result<usize> {
    let at = mark_sector(device_bytes);
    let i = records
        .iter()
        .rposition(|r| r.op == Op::Read && r.sector == at && r.sectors == MARK_SECTORS)
        .ok_or_else(|| io::Error::other("the marker read is not in the block trace"))?;
    Ok(i + 1)
}

/// Allocates the loop device's tmpfs backing file whole before the workload enters its memory
/// cgroup, so that the loop worker's writes into it are not charged to the budget (they
/// would be: loop charges its I/O to the issuer's memory cgroup). Best effort.
fn preallocate_backing(mnt: &Path) {
    let Some(dev) = mount_source(mnt) else { return };
    let Some(name) = Path::new(&dev).file_name() else {
        return;
    };
    let sys = Path::new("/sys/block").join(name).join("loop/backing_file");
    let Ok(backing) = std::fs::read_to_string(sys) else {
        return;
    };
    if let Ok(f) = std::fs::OpenOptions::new().write(true).open(backing.trim()) {
        use std::os::fd::AsRawFd;
        if let Ok(m) = f.metadata() {
            // SAFETY: a valid descriptor; FALLOC mode 0 only allocates (keeps the size).
            unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, m.len() as libc::off_t) };
        }
    }
}

/// The device mounted at `mnt`, from /proc/self/mountinfo.
fn mount_source(mnt: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mnt.to_str()?;
    text.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let point = pre.split(' ').nth(4)?;
        (point == want).then(|| post.split(' ').nth(1).map(str::to_string))?
    })
}

fn syncfs(dir: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(dir)?;
    // SAFETY: a valid descriptor.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Used blocks over all blocks of the file system at `dir` (statvfs).
fn used_share(dir: &Path) -> io::Result<f64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs fills the struct; zeroed is a valid initial value.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let total = s.f_blocks as f64;
    Ok(if total > 0.0 {
        (total - s.f_bfree as f64) / total
    } else {
        0.0
    })
}

/// A target the lab keeps mounted across the run (the trace would not survive a remount).
struct Fixed<'a, F>(&'a F);

impl<F: MicroFs + Sync> LabTarget for Fixed<'_, F> {
    type Fs = F;
    fn fs(&self) -> &F {
        self.0
    }
    fn remount(&mut self) -> io::Result<bool> {
        Ok(false)
    }
}

/// Runs workload `w` on `fs`; operations per second of its timed phase (which ends with
/// `sync`).
pub(crate) fn run_workload<F>(
    fs: &F,
    w: &Workload,
    cfg: &Config,
    seed: u64,
    sync: &dyn Fn() -> io::Result<()>,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<f64>
where
    F: MicroFs + Sync,
    F::Name: Sync,
    F::File: Send,
{
    match w.id {
        "iozone" => iozone(fs, cfg, seed, sync, interrupted),
        "postmark" => postmark(fs, cfg, seed, sync, interrupted),
        "fio" => fio(fs, cfg, seed, sync, interrupted),
        "fileserver" => fileserver(fs, cfg, seed, sync, interrupted),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unknown workload {other}"),
        )),
    }
}

fn stopped() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "interrupted")
}

fn block_of(seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..BLOCK).map(|_| rng.u8(..)).collect()
}

fn per_second(ops: u64, t: Instant) -> f64 {
    ops as f64 / t.elapsed().as_secs_f64().max(1e-9)
}

/// One file of the data set's size written sequentially in 4 KiB writes, then as many random
/// 4 KiB writes as `iozone_rewrites` times its blocks (timed).
fn iozone<F: MicroFs>(
    fs: &F,
    cfg: &Config,
    seed: u64,
    sync: &dyn Fn() -> io::Result<()>,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<f64> {
    let blocks = cfg.data_bytes / BLOCK;
    let buf = block_of(seed);
    let f = fs.create(&fs.name("iozone.dat"))?;
    for b in 0..blocks {
        if b % 4096 == 0 && interrupted() {
            return Err(stopped());
        }
        f.write_all_at(&buf, b * BLOCK)?;
    }
    sync()?;
    let mut rng = fastrand::Rng::with_seed(seed ^ 1);
    let n = (blocks as f64 * cfg.iozone_rewrites) as u64;
    let t = Instant::now();
    for i in 0..n {
        if i % 4096 == 0 && interrupted() {
            return Err(stopped());
        }
        f.write_all_at(&buf, rng.u64(..blocks) * BLOCK)?;
    }
    sync()?;
    Ok(per_second(n, t))
}

/// Postmark's creation phase and transactions (half reads, half 4 KiB-block appends; half
/// creates, half deletes), timed over the transactions. The deletion phase is not run: the
/// seed's point is the appends, and the SSD's utilisation is read after the transactions.
fn postmark<F: MicroFs>(
    fs: &F,
    cfg: &Config,
    seed: u64,
    sync: &dyn Fn() -> io::Result<()>,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<f64> {
    let number = (cfg.data_bytes / u64::from(cfg.postmark_size_high)) as u32;
    let pc = PostmarkConfig {
        number,
        transactions: number * cfg.postmark_transactions_per_file,
        size_low: cfg.postmark_size_low,
        size_high: cfg.postmark_size_high,
        subdirectories: 10,
        read_block_size: BLOCK as u32,
        write_block_size: BLOCK as u32,
        buffering: false,
        seed: (seed % 2_147_483_647) as u32 + 1,
        ..PostmarkConfig::default()
    };
    pc.validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut pm = Instance::new(pc.params());
    pm.make_subdirectories(fs)?;
    if !pm.create_files(fs, interrupted)? {
        return Err(stopped());
    }
    sync()?;
    let mut latency = new_histogram();
    let t = Instant::now();
    let done = pm.transactions(fs, u64::from(pc.transactions), interrupted, &mut latency)?;
    if done.stopped {
        return Err(stopped());
    }
    sync()?;
    Ok(per_second(done.done, t))
}

/// Thousands of files written sequentially, then random 4 KiB updates, each to a randomly
/// chosen file opened for it and closed after (timed).
fn fio<F: MicroFs>(
    fs: &F,
    cfg: &Config,
    seed: u64,
    sync: &dyn Fn() -> io::Result<()>,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<f64> {
    let files = (cfg.data_bytes / cfg.fio_file_bytes) as usize;
    let per_file = cfg.fio_file_bytes / BLOCK;
    let buf = block_of(seed);
    let dirs = files.div_ceil(256);
    for d in 0..dirs {
        fs.mkdir(&fs.name(&format!("d{d}")))?;
    }
    let names: Vec<F::Name> = (0..files)
        .map(|i| fs.name(&format!("d{}/f{i}", i / 256)))
        .collect();
    for n in &names {
        if interrupted() {
            return Err(stopped());
        }
        let f = fs.create(n)?;
        for b in 0..per_file {
            f.write_all_at(&buf, b * BLOCK)?;
        }
    }
    sync()?;
    let mut rng = fastrand::Rng::with_seed(seed ^ 2);
    let n = (files as f64 * per_file as f64 * cfg.fio_updates) as u64;
    let t = Instant::now();
    for i in 0..n {
        if i % 1024 == 0 && interrupted() {
            return Err(stopped());
        }
        let f = fs.open_rw(&names[rng.usize(..files)])?;
        f.write_all_at(&buf, rng.u64(..per_file) * BLOCK)?;
    }
    sync()?;
    Ok(per_second(n, t))
}

/// Filebench fileserver with 4 KiB I/O: a fileset of the data set's size (80% preallocated),
/// one trial bounded by ops (and a time cap), then `sync`; flowops per second over both.
fn fileserver<F>(
    fs: &F,
    cfg: &Config,
    seed: u64,
    sync: &dyn Fn() -> io::Result<()>,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<f64>
where
    F: MicroFs + Sync,
    F::Name: Sync,
    F::File: Send,
{
    let mut p = PersonalityConfig::defaults(Personality::Fileserver);
    p.files = (cfg.data_bytes / p.mean_file_size_bytes) as usize;
    p.iosize_bytes = BLOCK;
    p.threads = cfg.fileserver_threads;
    let rc = RunConfig {
        personality: p,
        trials: 1,
        extra_trials: 0,
        warmup_seconds: 0.0,
        run_seconds: cfg.fileserver_seconds,
        ops_max: Some(cfg.fileserver_ops),
        seed,
        // One trial that ages the image: not compared with another target's.
        hold_placement: false,
    };
    let mut target = Fixed(fs);
    let r = filebench::run(&mut target, &rc, interrupted, &mut |_| {})?;
    if let Some(why) = &r.stopped_early {
        return Err(io::Error::other(format!("fileserver stopped early: {why}")));
    }
    let trial = r
        .trials
        .first()
        .ok_or_else(|| io::Error::other("fileserver ran no trial"))?;
    let t = Instant::now();
    sync()?;
    let seconds = trial.seconds + t.elapsed().as_secs_f64();
    Ok(trial.summary.ops as f64 / seconds.max(1e-9))
}

/// The kernel targets' page-cache budget: a memory cgroup the process enters for the
/// workload. cgroup v2 when its memory controller is enabled (`memory.max`), else the v1
/// memory hierarchy (`memory.limit_in_bytes`), each below the process's own cgroup.
///
/// The cgroup also charges the process's own anonymous memory (the workload's buffers, its
/// threads' latency histograms: over 20 MiB for fileserver's 16 threads), which would leave
/// the page cache less than the budget, or get the process OOM-killed. So a watcher thread
/// raises the limit by the cgroup's anonymous memory, every millisecond: the budget bounds
/// the page cache (and kernel objects), not the workload.
pub mod budget {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::Duration;

    static SERIAL: AtomicU64 = AtomicU64::new(0);
    const MIB: u64 = 1 << 20;

    /// The process inside a limited cgroup until [`Budget::leave`] (or drop).
    pub struct Budget {
        dir: PathBuf,
        back: PathBuf,
        v2: bool,
        limit: u64,
        left: bool,
        stop: Arc<AtomicBool>,
        watcher: Option<JoinHandle<Peaks>>,
    }

    /// The largest anonymous memory and page cache the watcher saw in the cgroup.
    #[derive(Default, Clone, Copy)]
    struct Peaks {
        anon: u64,
        cache: u64,
    }

    /// (anonymous, page cache) bytes charged to the cgroup, from its `memory.stat`.
    fn charged(dir: &Path, v2: bool) -> Option<(u64, u64)> {
        let text = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
        let (anon_key, cache_key) = if v2 {
            ("anon", "file")
        } else {
            ("rss", "cache")
        };
        let field = |key: &str| {
            text.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse::<u64>().ok()).flatten()
            })
        };
        Some((field(anon_key)?, field(cache_key)?))
    }

    /// Follows the cgroup's anonymous memory with its limit (`base` + anonymous, in whole
    /// MiB) until `stop`; the peaks it saw.
    fn watch(dir: PathBuf, file: &'static str, v2: bool, base: u64, stop: &AtomicBool) -> Peaks {
        let mut peaks = Peaks::default();
        let mut set = base;
        while !stop.load(Ordering::Relaxed) {
            if let Some((anon, cache)) = charged(&dir, v2) {
                peaks.anon = peaks.anon.max(anon);
                peaks.cache = peaks.cache.max(cache);
                let want = base + anon.div_ceil(MIB) * MIB;
                // Lowering below the usage may fail (v1: EBUSY) until the cache shrinks;
                // the next round tries again.
                if want != set && std::fs::write(dir.join(file), want.to_string()).is_ok() {
                    set = want;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        peaks
    }

    /// The process's own cgroup directory: (v2?, path).
    fn own() -> Result<(bool, PathBuf), String> {
        let text = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let root2 = Path::new("/sys/fs/cgroup");
        let has_memory = |dir: &Path| {
            std::fs::read_to_string(dir.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"))
        };
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (id, ctl, path) = (parts.next(), parts.next(), parts.next());
            let path = path.unwrap_or("/").trim_start_matches('/');
            if id == Some("0") && ctl == Some("") {
                for root in [root2.to_path_buf(), root2.join("unified")] {
                    let dir = root.join(path);
                    if has_memory(&dir) {
                        return Ok((true, dir));
                    }
                }
            }
            if ctl.is_some_and(|c| c.split(',').any(|c| c == "memory")) {
                let dir = root2.join("memory").join(path);
                if dir.join("memory.limit_in_bytes").exists() {
                    return Ok((false, dir));
                }
            }
        }
        Err("no memory cgroup controller to limit (neither v2 with memory enabled nor v1)".into())
    }

    fn write(path: &Path, text: &str) -> Result<(), String> {
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    impl Budget {
        /// Creates a cgroup limited to `limit` bytes and moves this process into it.
        pub fn enter(limit: u64) -> Result<Budget, String> {
            let (v2, back) = own()?;
            let dir = back.join(format!(
                "nvmfs-lab-{}-{}",
                std::process::id(),
                SERIAL.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let file = if v2 {
                "memory.max"
            } else {
                "memory.limit_in_bytes"
            };
            let mut b = Budget {
                dir,
                back,
                v2,
                limit,
                left: false,
                stop: Arc::new(AtomicBool::new(false)),
                watcher: None,
            };
            write(&b.dir.join(file), &limit.to_string())?;
            let (dir, stop) = (b.dir.clone(), b.stop.clone());
            b.watcher = Some(
                std::thread::Builder::new()
                    .name("cgroup-budget".into())
                    .spawn(move || watch(dir, file, v2, limit, &stop))
                    .map_err(|e| format!("cannot start the budget's watcher: {e}"))?,
            );
            write(&b.dir.join("cgroup.procs"), &std::process::id().to_string())?;
            Ok(b)
        }

        fn stop_watcher(&mut self) -> Option<Peaks> {
            self.stop.store(true, Ordering::Relaxed);
            self.watcher.take()?.join().ok()
        }

        /// Moves the process back and removes the cgroup; what was applied and the peak.
        pub fn leave(mut self) -> String {
            let peaks = self.stop_watcher();
            self.restore();
            let mib = |b: u64| format!("{:.1} MiB", b as f64 / MIB as f64);
            format!(
                "cgroup {} limit {} MiB (PM tier + slack) plus the process's own anonymous \
                 memory (peak {}); page cache peak {}",
                if self.v2 {
                    "v2 memory.max"
                } else {
                    "v1 memory.limit_in_bytes"
                },
                self.limit >> 20,
                peaks.map_or("unknown".into(), |p| mib(p.anon)),
                peaks.map_or("unknown".into(), |p| mib(p.cache)),
            )
        }

        fn restore(&mut self) {
            if self.left {
                return;
            }
            self.left = true;
            self.stop_watcher();
            let _ = write(
                &self.back.join("cgroup.procs"),
                &std::process::id().to_string(),
            );
            for _ in 0..50 {
                if std::fs::remove_dir(&self.dir).is_ok() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }

    impl Drop for Budget {
        fn drop(&mut self) {
            self.restore();
        }
    }
}
