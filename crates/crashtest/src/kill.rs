//! Process kill: a child process runs a workload on an image in /dev/shm and acknowledges
//! each completed operation on stdout; the parent kills it with SIGKILL at a random moment,
//! mounts the image (recovery), runs fsck, and checks that every acknowledged operation is
//! present. Repeatable by seed.
//!
//! Workload, operation k: k%5 in 0..3 creates /f{k} with content(k); k%5 == 3 appends record
//! k to /log; k%5 == 4 renames /f{k-4} to /r{k-4}.

use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nvmfs::{FormatOptions, Fs, MountOptions, OpenOptions};

const RECORD: usize = 64;

fn content(k: u64) -> Vec<u8> {
    let len = 1 + (k * 7919 % 20_000) as usize;
    (0..len).map(|i| (i as u64 ^ k) as u8).collect()
}

fn record(k: u64) -> [u8; RECORD] {
    let mut r = [b'.'; RECORD];
    let s = format!("record {k}");
    r[..s.len()].copy_from_slice(s.as_bytes());
    r
}

fn op(fs: &Fs, k: u64) -> io::Result<()> {
    match k % 5 {
        0..=2 => fs.write_file(format!("/f{k}"), &content(k)),
        3 => OpenOptions::new()
            .append(true)
            .create(true)
            .open(fs, "/log")?
            .write_all_at(&record(k), 0),
        _ => fs.rename_path(format!("/f{}", k - 4), format!("/r{}", k - 4)),
    }
}

/// The child: mounts `image`, runs operations 0.. until killed, printing "ack k" after each.
pub fn child_main(image: &Path) -> io::Result<()> {
    let fs = Fs::mount(image, &MountOptions::default())?;
    let mut out = io::stdout().lock();
    // The parent's kill delay counts from here, so that mount time does not eat it.
    writeln!(out, "ready")?;
    out.flush()?;
    for k in 0.. {
        match op(&fs, k) {
            Ok(()) => {}
            // A fast machine can fill the image before the kill comes: the image is still a
            // valid crash point, so wait for the kill instead of exiting early.
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => loop {
                std::thread::park();
            },
            Err(e) => return Err(e),
        }
        writeln!(out, "ack {k}")?;
        out.flush()?;
    }
    Ok(())
}

/// Checks that every acknowledged operation (0..acked) is in the recovered image.
fn verify(fs: &Fs, acked: u64) -> Result<(), String> {
    let log = fs.read_file("/log").unwrap_or_default();
    let mut appends = 0;
    for k in 0..acked {
        match k % 5 {
            0..=2 => {
                // Operation k+4 renames /f{k} when k % 5 == 0.
                let renamed = k % 5 == 0 && k + 4 < acked;
                let p = if renamed {
                    format!("/r{k}")
                } else {
                    format!("/f{k}")
                };
                // An unacknowledged rename may have happened: accept either name then.
                let got = fs.read_file(&p).or_else(|e| {
                    if renamed {
                        Err(e)
                    } else {
                        fs.read_file(format!("/r{k}"))
                    }
                });
                match got {
                    Ok(d) if d == content(k) => {}
                    Ok(_) => return Err(format!("operation {k}: {p} has wrong content")),
                    Err(e) => return Err(format!("operation {k}: {p}: {e}")),
                }
            }
            3 => {
                let at = appends * RECORD;
                if log.get(at..at + RECORD) != Some(&record(k)[..]) {
                    return Err(format!("operation {k}: log record missing"));
                }
                appends += 1;
            }
            _ => {}
        }
    }
    Ok(())
}

/// One cycle: fresh image, child started with `child` (a command that runs `child_main` on
/// the image path given as its last argument), killed after a delay drawn from `seed`.
/// Returns the number of acknowledged operations.
pub fn cycle(child: &mut Command, image: &Path, seed: u64) -> Result<u64, String> {
    Fs::format(
        image,
        &FormatOptions {
            // Sparse in /dev/shm: only what the child writes takes memory. Large enough that
            // the longest delay (62 ms) does not fill it at ~150 operations/ms.
            size_bytes: 256 << 20,
            inode_count: Some(65_536),
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let mut proc = child
        .arg(image)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let delay = Duration::from_micros(2_000 + fastrand::Rng::with_seed(seed).u64(0..60_000));
    let mut lines = BufReader::new(proc.stdout.take().expect("piped")).lines();
    match lines.next() {
        Some(Ok(l)) if l == "ready" => {}
        _ => {
            let st = proc.wait().map_err(|e| e.to_string())?;
            return Err(format!("child did not start: {st}"));
        }
    }
    let reader = std::thread::spawn(move || {
        let mut acked = 0u64;
        for line in lines.map_while(Result::ok) {
            if let Some(k) = line
                .strip_prefix("ack ")
                .and_then(|k| k.parse::<u64>().ok())
            {
                acked = k + 1;
            }
        }
        acked
    });
    let start = Instant::now();
    while start.elapsed() < delay {
        if let Ok(Some(st)) = proc.try_wait() {
            return Err(format!("child exited early: {st}"));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(proc.id() as i32, libc::SIGKILL) };
    let _ = proc.wait();
    let acked = reader
        .join()
        .map_err(|_| "reader thread panicked".to_string())?;
    let r = nvmfs::fsck::check_image(image).map_err(|e| e.to_string())?;
    if !r.is_clean() {
        return Err(format!("fsck after kill: {:?}", r.problems));
    }
    let fs =
        Fs::mount(image, &MountOptions::default()).map_err(|e| format!("mount after kill: {e}"))?;
    verify(&fs, acked)?;
    fs.unmount().map_err(|e| e.to_string())?;
    let r = nvmfs::fsck::check_image(image).map_err(|e| e.to_string())?;
    if !r.is_clean() {
        return Err(format!("fsck after recovery: {:?}", r.problems));
    }
    Ok(acked)
}
