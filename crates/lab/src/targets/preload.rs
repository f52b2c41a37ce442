//! A child under `nvmfs run` on a fresh image: how the lab's `run:nvmfs` target (`bench
//! micro`'s and the studies') measures unmodified code through the C library.
//!
//! The lab cannot put the preload library into its own process after it started, and the
//! preload serves one image for a process's whole life. So this process formats a fresh image
//! in the shm dir and starts `nvmfs run --image IMG --prefix /nvmfs -- NVMFS ARGS...`: the
//! child runs the same workload code as on a `dir:` target, with every file call under
//! `/nvmfs` answered by nvmfs in the child's own process. The image, the child and what a
//! child that died attached leaves behind (the coordination file and its lock directory) are
//! cleaned up on every return, also on error or interrupt.

use super::nvmfs::format_scratch;
use super::sys::{annotate, ScratchFile};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};

/// The prefix the child's paths live under (`nvmfs run --prefix`).
pub const RUN_PREFIX: &str = "/nvmfs";

/// Lines of the child's stderr kept for the error message when it fails.
const TAIL_LINES: usize = 20;

/// A running child under `nvmfs run`, with its image.
pub struct PreloadChild {
    // Dropped in field order: the child is killed (if running) before its files go.
    child: ChildGuard,
    _coord: CoordLeftover,
    image: ScratchFile,
}

impl PreloadChild {
    /// Formats `image` (`bytes`, `inodes`) and starts `bin run --image IMAGE --prefix /nvmfs
    /// -- bin ARGS...`, its stdin closed and its stdout and stderr piped.
    pub fn start(
        bin: &Path,
        image: PathBuf,
        bytes: u64,
        inodes: u64,
        args: &[OsString],
    ) -> io::Result<PreloadChild> {
        let image = format_scratch(image, bytes, inodes)?;
        let coord = CoordLeftover(coord_path(image.path())?);
        let full = run_args(bin, image.path(), args);
        let child = Command::new(bin)
            .args(&full)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| annotate(e, "cannot start", bin))?;
        Ok(PreloadChild {
            child: ChildGuard(Some(child)),
            _coord: coord,
            image,
        })
    }

    pub fn image_path(&self) -> &Path {
        self.image.path()
    }

    /// The child's stdout (once).
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.0.as_mut().and_then(|c| c.stdout.take())
    }

    /// The child's stderr (once).
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.0.as_mut().and_then(|c| c.stderr.take())
    }

    /// Waits for the child; an error with its last messages unless it succeeded.
    pub fn finish(&mut self, what: &str, tail: VecDeque<String>) -> io::Result<()> {
        let status = self.child.wait()?;
        if status.success() {
            return Ok(());
        }
        Err(io::Error::other(format!(
            "nvmfs run of {what} failed ({status}); its last messages:\n  {}",
            tail.into_iter().collect::<Vec<_>>().join("\n  ")
        )))
    }
}

/// `run --image IMAGE --prefix /nvmfs -- BIN ARGS...`: the arguments `bin` is started with.
pub fn run_args(bin: &Path, image: &Path, args: &[OsString]) -> Vec<OsString> {
    let mut full: Vec<OsString> = vec![
        "run".into(),
        "--image".into(),
        image.into(),
        "--prefix".into(),
        RUN_PREFIX.into(),
        "--".into(),
        bin.into(),
    ];
    full.extend(args.iter().cloned());
    full
}

/// A command line for messages and records.
pub fn shell_line(bin: &Path, args: &[OsString]) -> String {
    std::iter::once(bin.as_os_str())
        .chain(args.iter().map(|a| a.as_os_str()))
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Passes each line to `each` and returns the last few.
pub fn tail_lines(r: impl Read, each: &mut dyn FnMut(&str)) -> VecDeque<String> {
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    for line in BufReader::new(r).lines() {
        let Ok(line) = line else { break };
        each(&line);
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    tail
}

/// The child; killed and reaped if dropped while still running (error or interrupt).
struct ChildGuard(Option<Child>);

impl ChildGuard {
    fn wait(&mut self) -> io::Result<ExitStatus> {
        match self.0.take() {
            Some(mut child) => child.wait(),
            None => Err(io::Error::other("the child was already reaped")),
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The coordination file the shared mounts of `image` use (nvmfs::shared keeps it in
/// /dev/shm, named after the image file's device and inode). The last process to detach
/// removes it; one that dies attached leaves it, and nothing needs it once no process is.
fn coord_path(image: &Path) -> io::Result<PathBuf> {
    let m = std::fs::metadata(image).map_err(|e| annotate(e, "cannot stat", image))?;
    Ok(PathBuf::from(format!(
        "/dev/shm/nvmfs-{:x}-{:x}.coord",
        m.dev(),
        m.ino()
    )))
}

/// Removes the coordination file, its description files (`<file>.d<k>`) and the directory
/// of its lock files (`<file>.locks`, the preload's), if the child left them, when dropped
/// (after the child).
struct CoordLeftover(PathBuf);

impl Drop for CoordLeftover {
    fn drop(&mut self) {
        nvmfs::shared::remove_coordination_files(&self.0);
        let mut locks = self.0.clone().into_os_string();
        locks.push(".locks");
        let _ = std::fs::remove_dir_all(locks);
    }
}
