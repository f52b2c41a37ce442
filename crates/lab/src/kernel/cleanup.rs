//! The registry of live resources, and Ctrl-C.
//!
//! Every mount point directory, backing file, loop device and mount is a
//! [`Resource`] registered in a process-wide registry while it exists, so
//! that a second Ctrl-C can tear down everything still alive even though
//! the values that own the resources are in the middle of something else.

use super::resource::{Resource, UndoError};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread;

/// Exit status after a second signal: 128 + SIGINT, as a shell reports it.
pub const INTERRUPT_EXIT_STATUS: i32 = 130;

/// Live resources in creation order, each with its registry id.
static REGISTRY: Mutex<Vec<(u64, Resource)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn registry() -> MutexGuard<'static, Vec<(u64, Resource)>> {
    // Nothing panics while holding the lock, but never let a poisoned lock
    // stop a cleanup.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records a resource that now exists; returns its registry id.
pub(crate) fn register(r: Resource) -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    registry().push((id, r));
    id
}

/// Forgets a resource that has been undone (or taken by an emergency
/// teardown; then this does nothing).
pub(crate) fn unregister(id: u64) {
    registry().retain(|(i, _)| *i != id);
}

/// The live resources of every provisioned file system of this process,
/// oldest first, e.g. "mount on /tmp/nvmfs-lab-mnt-123-0".
pub fn live_resources() -> Vec<String> {
    registry().iter().map(|(_, r)| r.to_string()).collect()
}

/// Undoes every registered resource, newest first (mounts before loop
/// devices before files and directories), continuing past failures;
/// returns the failures. The registry is emptied first so that the owners
/// find nothing left to do.
pub(crate) fn teardown_all(urgent: bool) -> Vec<UndoError> {
    let taken = std::mem::take(&mut *registry());
    taken
        .iter()
        .rev()
        .filter_map(|(_, r)| r.undo(urgent).err())
        .collect()
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

/// Whether a SIGINT or SIGTERM arrived since [`install_interrupt_handler`].
/// Long-running code polls this to stop its threads and drop its
/// [`Provisioned`](super::Provisioned) values normally.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Installs SIGINT and SIGTERM handling, once per process (later calls
/// return the first call's result). The first signal only sets
/// [`interrupted`]; the second tears down every live resource at once
/// (umount, else lazy umount; losetup -d; remove files and directories)
/// and exits the process with status 130.
///
/// The signal handler itself only writes to a pipe (signal-hook); the work
/// happens on a dedicated thread, where running umount and losetup is safe.
/// Child processes (mkfs, mount) in the foreground process group get the
/// terminal's Ctrl-C too and fail, which their caller handles as any error.
pub fn install_interrupt_handler() -> io::Result<()> {
    INSTALLED
        .get_or_init(|| spawn_signal_thread().map_err(|e| e.to_string()))
        .clone()
        .map_err(|e| io::Error::other(format!("cannot install the interrupt handler: {e}")))
}

fn spawn_signal_thread() -> io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    thread::Builder::new()
        .name("nvmfs-lab-signals".to_string())
        .spawn(move || {
            for _ in signals.forever() {
                on_signal();
            }
        })?;
    Ok(())
}

fn on_signal() {
    if !INTERRUPTED.swap(true, Ordering::SeqCst) {
        eprintln!(
            "interrupted: stopping after the current step (signal again to clean up and exit now)"
        );
        return;
    }
    let live = live_resources();
    eprintln!(
        "interrupted again: removing {} resource(s) and exiting",
        live.len()
    );
    // A thread in the middle of provisioning may register one more resource
    // while the first pass runs: a few passes catch it.
    for _ in 0..3 {
        for e in teardown_all(true) {
            eprintln!("warning: {e}");
        }
    }
    std::process::exit(INTERRUPT_EXIT_STATUS);
}
