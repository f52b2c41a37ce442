//! Process kill: a child process runs a workload on an image in /dev/shm and acknowledges
//! each completed operation on stdout; the parent kills it with SIGKILL at a random moment,
//! mounts the image (recovery), runs fsck, and checks that every acknowledged operation is
//! present, that the operation in flight is all or nothing and that no other name exists.
//! Repeatable by seed.
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

/// Checks the recovered image against the acknowledged operations `0..acked`: every one is
/// present; operation `acked`, in flight when the child died (the next one cannot have started:
/// the child prints each acknowledgement before it starts the next operation), is all or
/// nothing (a created file absent, empty or whole, since create and write are two calls that
/// each commit; a log record whole or absent; a rename's source or destination, not both); no
/// other name exists.
pub fn verify(fs: &Fs, acked: u64) -> Result<(), String> {
    let log = fs.read_file("/log").unwrap_or_default();
    let mut appends = 0;
    // Names that must exist, with their content (None: the log, checked below).
    let mut want: std::collections::BTreeMap<String, Option<Vec<u8>>> = Default::default();
    for k in 0..acked {
        match k % 5 {
            0..=2 => {
                want.insert(format!("/f{k}"), Some(content(k)));
            }
            3 => {
                want.insert("/log".into(), None);
                appends += 1;
            }
            _ => {
                let v = want.remove(&format!("/f{}", k - 4)).flatten();
                want.insert(format!("/r{}", k - 4), v);
            }
        }
    }
    // The operation in flight: the names it may have added or moved.
    let k = acked;
    let mut optional: Vec<String> = Vec::new();
    match k % 5 {
        0..=2 => {
            let p = format!("/f{k}");
            match fs.read_file(&p) {
                Ok(d) if d.is_empty() || d == content(k) => optional.push(p),
                Ok(d) => {
                    return Err(format!(
                        "operation {k} (in flight): {p} is neither empty nor whole ({} bytes)",
                        d.len()
                    ))
                }
                Err(_) => {}
            }
        }
        3 => optional.push("/log".into()),
        _ => {
            let (from, to) = (format!("/f{}", k - 4), format!("/r{}", k - 4));
            let (a, b) = (fs.metadata(&from).is_ok(), fs.metadata(&to).is_ok());
            if a == b {
                return Err(format!(
                    "operation {k} (rename in flight): {from} {} and {to} {}",
                    if a { "exists" } else { "is missing" },
                    if b { "exists" } else { "is missing" }
                ));
            }
            if b {
                let v = want.remove(&from).flatten();
                want.insert(to, v);
            }
        }
    }
    for (p, c) in &want {
        match (fs.read_file(p), c) {
            (Ok(d), Some(c)) if &d == c => {}
            (Ok(_), None) => {}
            (Ok(_), Some(_)) => return Err(format!("{p} has wrong content")),
            (Err(e), _) => return Err(format!("{p}: {e}")),
        }
    }
    let names: Vec<String> = fs
        .read_dir("/")
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|e| format!("/{}", String::from_utf8_lossy(&e.name)))
        .collect();
    if let Some(extra) = names
        .iter()
        .find(|n| !want.contains_key(*n) && !optional.contains(n))
    {
        return Err(format!(
            "extra name {extra} (acknowledged {acked} operations)"
        ));
    }
    // The log: the acknowledged records, plus the one in flight whole or not at all.
    let whole = |n: usize| (0..n).all(|i| log[i * RECORD..(i + 1) * RECORD] == record(log_op(i)));
    let in_flight_append = k % 5 == 3;
    let ok = (log.len() == appends * RECORD && whole(appends))
        || (in_flight_append && log.len() == (appends + 1) * RECORD && whole(appends + 1));
    if !ok {
        return Err(format!(
            "log is {} bytes, expected {} records{}",
            log.len(),
            appends,
            if in_flight_append {
                " (or one more)"
            } else {
                ""
            }
        ));
    }
    Ok(())
}

/// The operation that appended log record `i` (operations 3, 8, 13, ...).
fn log_op(i: usize) -> u64 {
    i as u64 * 5 + 3
}

/// One cycle: fresh image, child started with `child` (a command that runs `child_main` on
/// the image path given as its last argument), killed after a delay drawn from `seed`.
/// Returns the number of acknowledged operations.
pub fn cycle(child: &mut Command, image: &Path, seed: u64) -> Result<u64, String> {
    cycle_on(child, image, None, seed).map(|(acked, _)| acked)
}

/// [`cycle`] on a tiered image whose SSD is the file `ssd`: 8 MiB of PM under 256 MiB of SSD,
/// so the child's files soon outgrow PM and its writes flush, evict and clean while it runs.
/// Returns the acknowledged operations and the SSD blocks holding data after recovery.
pub fn cycle_tiered(
    child: &mut Command,
    image: &Path,
    ssd: &Path,
    seed: u64,
) -> Result<(u64, u64), String> {
    cycle_on(child, image, Some(ssd), seed)
}

fn cycle_on(
    child: &mut Command,
    image: &Path,
    ssd: Option<&Path>,
    seed: u64,
) -> Result<(u64, u64), String> {
    let opts = match ssd {
        // Sparse in /dev/shm: only what the child writes takes memory. Large enough that the
        // longest delay (62 ms) does not fill it at ~150 operations/ms.
        None => FormatOptions {
            size_bytes: 256 << 20,
            inode_count: Some(65_536),
            ..Default::default()
        },
        Some(p) => {
            let _ = std::fs::remove_file(p);
            FormatOptions {
                size_bytes: 8 << 20,
                inode_count: Some(16_384),
                tier: Some(nvmfs::TierFormat::new(
                    Some(p.to_path_buf()),
                    Some(256 << 20),
                )),
                ..Default::default()
            }
        }
    };
    Fs::format(image, &opts).map_err(|e| e.to_string())?;
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
    let on_ssd = fs.tier_info().map_or(0, |t| t.ssd_valid_blocks);
    fs.unmount().map_err(|e| e.to_string())?;
    let r = nvmfs::fsck::check_image(image).map_err(|e| e.to_string())?;
    if !r.is_clean() {
        return Err(format!("fsck after recovery: {:?}", r.problems));
    }
    Ok((acked, on_ssd))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs_after(n: u64) -> Fs {
        let fs = Fs::format_in_memory(&FormatOptions {
            size_bytes: 16 << 20,
            ..Default::default()
        })
        .unwrap();
        for k in 0..n {
            op(&fs, k).unwrap();
        }
        fs
    }

    fn fails(fs: &Fs, acked: u64, what: &str) {
        let r = verify(fs, acked);
        assert!(r.as_ref().is_err_and(|e| e.contains(what)), "{what}: {r:?}");
    }

    #[test]
    fn in_flight_operation_is_all_or_nothing_and_no_extra_names() {
        // Create in flight (operation 12): absent, empty or whole.
        let fs = fs_after(12);
        verify(&fs, 12).unwrap();
        fs.write_file("/f12", b"").unwrap();
        verify(&fs, 12).unwrap();
        op(&fs, 12).unwrap();
        verify(&fs, 12).unwrap();
        fs.write_file("/f12", &content(12)[..10]).unwrap();
        fails(&fs, 12, "neither empty nor whole");
        fs.remove_file("/f12").unwrap();
        fs.write_file("/zz", b"").unwrap();
        fails(&fs, 12, "extra name /zz");
        // A name the next operation (not started) would add.
        fs.remove_file("/zz").unwrap();
        op(&fs, 12).unwrap();
        op(&fs, 13).unwrap();
        verify(&fs, 14).unwrap();
        fs.write_file("/f15", &content(15)).unwrap();
        fails(&fs, 14, "extra name /f15");

        // Append in flight (operation 13): the record whole or absent.
        let fs = fs_after(13);
        verify(&fs, 13).unwrap();
        op(&fs, 13).unwrap();
        verify(&fs, 13).unwrap();
        let f = OpenOptions::new().append(true).open(&fs, "/log").unwrap();
        f.write_all_at(&record(18)[..RECORD / 2], 0).unwrap();
        fails(&fs, 13, "log is");

        // Rename in flight (operation 14, /f10 -> /r10): exactly one of the two names.
        let fs = fs_after(14);
        verify(&fs, 14).unwrap();
        op(&fs, 14).unwrap();
        verify(&fs, 14).unwrap();
        fs.hard_link("/r10", "/f10").unwrap();
        fails(&fs, 14, "rename in flight");

        // An acknowledged operation lost.
        let fs = fs_after(14);
        fs.remove_file("/f11").unwrap();
        fails(&fs, 14, "/f11");
    }
}
