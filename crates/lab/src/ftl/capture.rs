//! Capturing the block requests a kernel file system issues to its loop device.
//!
//! Seed 004 collected "I/O traces issued by the file systems using blktrace". blktrace
//! reads per-CPU relay files that the kernel creates under debugfs
//! (`/sys/kernel/debug/block/loopN/trace0`); on the lab's kernels opening them can fail
//! with EPERM even as root (debugfs restricted by the host: seen here with 6.18 in a
//! VM), and the Debian package is one more thing to install. So the lab records the same
//! event from the kernel's tracepoint instead: `block:block_rq_issue`, the request handed
//! to the driver, which is what blkparse prints as action `D` (issue), with the same
//! fields (device, rwbs, sector, sector count). It comes through tracefs, which the same
//! kernel option (CONFIG_BLK_DEV_IO_TRACE) enables and which works wherever debugfs
//! mounts.
//!
//! A capture makes its own tracefs instance (`instances/nvmfs-lab-<pid>-<n>`), so
//! nothing else using the global buffer is disturbed and several captures can run at
//! once; it filters on the loop device's number in the kernel, reads `trace_pipe` from a
//! thread while the workload runs (so the ring buffer does not fill), and removes the
//! instance at the end. Lost events (ring-buffer overruns) make the capture fail rather
//! than return a silently short trace.
//!
//! The rwbs flags map to the trace format as: `D...` discard, `W...` write (also a write
//! with a preflush, `FWS`), `R...` read, and a request with no sectors and `F` (a bare
//! flush) flush; anything else (e.g. `N`, zone management) is skipped.

use super::trace::{Header, Op, Record};
use crate::kernel::{self, Provisioned};
use std::fs::{self, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

const EVENT: &str = "events/block/block_rq_issue";
/// Ring buffer per CPU: a few seconds of a busy device's requests.
const BUFFER_KB_PER_CPU: u32 = 16 << 10;
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// Where tracefs is mounted: `/sys/kernel/tracing`, or `tracing` under debugfs. Mounts
/// tracefs at `/sys/kernel/tracing` if neither has it (root only).
pub fn tracefs_root() -> Result<PathBuf, String> {
    let candidates = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
    let found = || {
        candidates
            .iter()
            .map(PathBuf::from)
            .find(|p| p.join("instances").is_dir() && p.join(EVENT).is_dir())
    };
    if let Some(p) = found() {
        return Ok(p);
    }
    // Not mounted yet (or the kernel lacks the event): try to mount it once.
    let _ = std::process::Command::new("mount")
        .args(["-t", "tracefs", "nodev", candidates[0]])
        .stderr(std::process::Stdio::null())
        .status();
    found().ok_or_else(|| {
        "no tracefs with the block:block_rq_issue event (needs root, tracefs and a kernel \
         with CONFIG_BLK_DEV_IO_TRACE)"
            .to_string()
    })
}

/// Whether block captures can run here; the reason when not.
pub fn availability() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root to use tracefs".into());
    }
    tracefs_root().map(drop)
}

/// What a capture recorded.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The requests, times from the first one.
    pub records: Vec<Record>,
    /// Trace lines that were not block_rq_issue requests of the device (none expected).
    pub skipped_lines: u64,
}

/// A running capture of one block device's issued requests.
pub struct BlockCapture {
    instance: PathBuf,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<io::Result<Captured>>>,
}

impl BlockCapture {
    /// Starts recording the requests issued to block device `device` (e.g. /dev/loop3).
    pub fn start(device: &Path) -> io::Result<BlockCapture> {
        let meta = fs::metadata(device)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", device.display())))?;
        if !meta.file_type().is_block_device() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a block device", device.display()),
            ));
        }
        let rdev = meta.rdev();
        let (major, minor) = (libc::major(rdev), libc::minor(rdev));
        let root = tracefs_root().map_err(io::Error::other)?;
        let name = format!(
            "nvmfs-lab-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let instance = root.join("instances").join(name);
        fs::create_dir(&instance)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", instance.display())))?;
        // From here on, Drop removes the instance.
        let mut capture = BlockCapture {
            instance,
            stop: Arc::new(AtomicBool::new(false)),
            reader: None,
        };
        // The tracepoint's `dev` is the kernel's dev_t: major << 20 | minor.
        let kdev = (u64::from(major) << 20) | u64::from(minor);
        capture.set("buffer_size_kb", &BUFFER_KB_PER_CPU.to_string())?;
        capture.set(&format!("{EVENT}/filter"), &format!("dev == {kdev}"))?;
        let pipe = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(capture.instance.join("trace_pipe"))?;
        capture.set(&format!("{EVENT}/enable"), "1")?;
        capture.set("tracing_on", "1")?;
        let stop = Arc::clone(&capture.stop);
        capture.reader = Some(thread::spawn(move || read_pipe(pipe, &stop)));
        Ok(capture)
    }

    fn set(&self, file: &str, value: &str) -> io::Result<()> {
        let path = self.instance.join(file);
        fs::write(&path, value)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    }

    /// Stops recording and returns what was recorded; fails if the kernel dropped events.
    pub fn stop(mut self) -> io::Result<Captured> {
        self.set(&format!("{EVENT}/enable"), "0")?;
        self.stop.store(true, Ordering::Release);
        let reader = self.reader.take().expect("started");
        let captured = reader
            .join()
            .map_err(|_| io::Error::other("the trace reader panicked"))??;
        let lost = self.lost_events();
        if lost > 0 {
            return Err(io::Error::other(format!(
                "the kernel dropped {lost} trace events (ring buffer overrun): the trace is \
                 incomplete"
            )));
        }
        Ok(captured)
    }

    /// Overruns and dropped events over every CPU's buffer.
    fn lost_events(&self) -> u64 {
        let Ok(cpus) = fs::read_dir(self.instance.join("per_cpu")) else {
            return 0;
        };
        cpus.filter_map(Result::ok)
            .filter_map(|cpu| fs::read_to_string(cpu.path().join("stats")).ok())
            .flat_map(|text| {
                text.lines()
                    .filter_map(|l| {
                        let (key, value) = l.split_once(':')?;
                        matches!(key.trim(), "overrun" | "dropped events")
                            .then(|| value.trim().parse::<u64>().ok())
                            .flatten()
                    })
                    .collect::<Vec<_>>()
            })
            .sum()
    }
}

impl Drop for BlockCapture {
    fn drop(&mut self) {
        let _ = fs::write(self.instance.join(EVENT).join("enable"), "0");
        self.stop.store(true, Ordering::Release);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        if let Err(e) = fs::remove_dir(&self.instance) {
            eprintln!(
                "warning: cannot remove tracefs instance {}: {e}",
                self.instance.display()
            );
        }
    }
}

/// Reads `trace_pipe` until told to stop and the pipe is empty.
fn read_pipe(mut pipe: fs::File, stop: &AtomicBool) -> io::Result<Captured> {
    let mut records = Vec::new();
    let mut skipped = 0u64;
    let mut pending = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut first_us: Option<u64> = None;
    loop {
        match pipe.read(&mut buf) {
            Ok(n) if n > 0 => {
                pending.extend_from_slice(&buf[..n]);
                while let Some(pos) = pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=pos).collect();
                    match parse_line(&String::from_utf8_lossy(&line)) {
                        Some(Parsed::Request(time_us, op, sector, sectors)) => {
                            let t0 = *first_us.get_or_insert(time_us);
                            records.push(Record {
                                time_ns: time_us.saturating_sub(t0) * 1000,
                                op,
                                sector,
                                sectors,
                            });
                        }
                        Some(Parsed::Ignored) => {}
                        None => skipped += 1,
                    }
                }
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Empty now: done if asked to stop (events are off by then), else wait.
                if stop.load(Ordering::Acquire) {
                    return Ok(Captured {
                        records,
                        skipped_lines: skipped,
                    });
                }
                thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[derive(Debug, PartialEq)]
enum Parsed {
    /// Time in microseconds, operation, sector, sectors.
    Request(u64, Op, u64, u32),
    /// A request of a kind traces do not hold.
    Ignored,
}

/// Parses one `trace_pipe` line of block_rq_issue:
/// `dd-10195 [001] ..... 3054.480226: block_rq_issue: 7,0 WS 4096 () 40 + 8 be,0,4 [dd]`.
fn parse_line(line: &str) -> Option<Parsed> {
    let (before, after) = line.split_once(" block_rq_issue: ")?;
    let stamp = before.split_whitespace().last()?.strip_suffix(':')?;
    let (secs, micros) = stamp.split_once('.')?;
    let time_us = secs.parse::<u64>().ok()? * 1_000_000 + micros.parse::<u64>().ok()?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let rwbs = *fields.get(1)?;
    let plus = fields.iter().position(|f| *f == "+")?;
    let sector = fields.get(plus.checked_sub(1)?)?.parse::<u64>().ok()?;
    let sectors = fields.get(plus + 1)?.parse::<u32>().ok()?;
    let Some(op) = op_of(rwbs, sectors) else {
        return Some(Parsed::Ignored);
    };
    let sector = if op == Op::Flush { 0 } else { sector };
    Some(Parsed::Request(time_us, op, sector, sectors))
}

/// The trace operation of a request from its rwbs flags (`WS`, `FWS`, `RA`, `DS`, `N`, ...)
/// and sector count; `None` for kinds traces do not hold.
pub(crate) fn op_of(rwbs: &str, sectors: u32) -> Option<Op> {
    if rwbs.starts_with('D') {
        Some(Op::Discard)
    } else if rwbs.contains('W') && sectors > 0 {
        Some(Op::Write)
    } else if rwbs.starts_with('R') {
        Some(Op::Read)
    } else if rwbs.contains('F') {
        Some(Op::Flush)
    } else {
        None
    }
}

/// A captured trace of one workload on a kernel file system.
pub struct KernelCapture {
    /// The trace's header (device size, source).
    pub header: Header,
    /// Its records.
    pub records: Vec<Record>,
    /// What was provisioned.
    pub provision: kernel::ProvisionInfo,
}

/// Why `target` (a kernel variant name of the lab's catalogue, e.g. `ext4`, `btrfs`) cannot
/// be captured here, if it cannot: unknown names, variants the kernel lacks (nilfs2, f2fs
/// on kernels without them) and missing root or tracefs each get their reason.
pub fn kernel_unavailable(target: &str, device_bytes: u64) -> Option<String> {
    let catalogue = kernel::catalogue(device_bytes);
    let Some(v) = catalogue.iter().find(|v| v.name == target) else {
        let missing = kernel::unavailable_variants()
            .into_iter()
            .find(|(name, _)| target.starts_with(name.as_str()) || name.starts_with(target));
        return Some(match missing {
            Some((name, reason)) => format!("{name}: unavailable: {reason}"),
            None => format!(
                "unknown kernel target {target:?}: one of {}",
                catalogue
                    .iter()
                    .filter(|v| v.is_block_backed())
                    .map(|v| v.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    };
    if !v.is_block_backed() {
        return Some(format!("{target} has no block device to trace"));
    }
    if let kernel::Availability::Unavailable { reason } = kernel::availability(v) {
        return Some(format!("{target}: unavailable: {reason}"));
    }
    availability()
        .err()
        .map(|r| format!("{target}: block capture unavailable: {r}"))
}

/// Makes `target` fresh on a loop device of `device_bytes` in `shm_dir`, records the
/// block requests of `workload` (given the mount point) and of the unmount after it (which
/// writes back everything the page cache still held), and tears it all down. mkfs and the
/// first mount are not in the trace.
pub fn capture_kernel(
    target: &str,
    device_bytes: u64,
    shm_dir: &Path,
    workload: impl FnOnce(&Path) -> io::Result<()>,
) -> io::Result<KernelCapture> {
    if let Some(reason) = kernel_unavailable(target, device_bytes) {
        return Err(io::Error::new(io::ErrorKind::Unsupported, reason));
    }
    let variant = kernel::catalogue(device_bytes)
        .into_iter()
        .find(|v| v.name == target)
        .expect("checked above");
    let mut fs = Provisioned::create(&variant, shm_dir, device_bytes)?;
    let info = fs.info();
    let device = PathBuf::from(info.loop_device.clone().expect("block-backed"));
    let capture = BlockCapture::start(&device)?;
    workload(fs.mount_point())?;
    // Unmount and mount again: the unmount writes back and the trace sees it.
    fs.remount()?;
    let captured = capture.stop()?;
    fs.teardown()?;
    if captured.skipped_lines > 0 {
        // Lines of another shape ("[LOST n EVENTS]", a changed event format) mean the trace
        // may be short: better no trace than a wrong one.
        return Err(io::Error::other(format!(
            "{} trace_pipe lines were not block_rq_issue requests: the trace may be incomplete",
            captured.skipped_lines
        )));
    }
    let header = Header {
        device_bytes: Some(device_bytes),
        source: Some(format!(
            "{target} on {} (mkfs: {}; mount: {}), tracefs block:block_rq_issue, kernel {}",
            device.display(),
            info.mkfs_command.as_deref().unwrap_or("-"),
            info.mount_command,
            info.kernel_release
        )),
    };
    Ok(KernelCapture {
        header,
        records: captured.records,
        provision: info,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_block_devices_are_captured() {
        let err = BlockCapture::start(Path::new("/dev/null")).err().unwrap();
        assert!(err.to_string().contains("not a block device"), "{err}");
    }

    #[test]
    fn trace_pipe_lines_parse() {
        let l = "  dd-10195   [001] .....  3054.480226: block_rq_issue: 7,0 WS 4096 () 40 + 8 \
                 be,0,4 [dd]";
        assert_eq!(
            parse_line(l),
            Some(Parsed::Request(3_054_480_226, Op::Write, 40, 8))
        );
        let l = "kworker/u8:1-55 [000] ..... 10.000001: block_rq_issue: 7,3 FWS 0 () 0 + 0 \
                 none,0,0 [kworker/u8:1]";
        assert_eq!(
            parse_line(l),
            Some(Parsed::Request(10_000_001, Op::Flush, 0, 0))
        );
        let l = "x-1 [000] ..... 1.5: block_rq_issue: 7,3 DS 1048576 () 2048 + 2048 none,0,0 [x]";
        assert_eq!(
            parse_line(l),
            Some(Parsed::Request(1_000_005, Op::Discard, 2048, 2048))
        );
        let l = "x-1 [000] ..... 1.000002: block_rq_issue: 7,3 RA 4096 () 8 + 8 none,0,0 [x]";
        assert_eq!(
            parse_line(l),
            Some(Parsed::Request(1_000_002, Op::Read, 8, 8))
        );
        assert_eq!(parse_line("# tracer: nop"), None);
    }
}
