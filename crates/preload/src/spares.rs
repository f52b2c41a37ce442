//! Descriptions kept for reuse.
//!
//! Each nvmfs open file description is a descriptor of a description file with a lock on
//! its slot (`nvmfs::shared`). Making one (an open, a lock call and a seek) and closing
//! it again costs more than all the rest of a small file's open and close. So the last
//! close of a description that nothing outside this process's view can hold keeps it as a
//! spare: its slot is cleared (the inode is no longer held open), and a descriptor of it at
//! `SPARE_FLOOR` or above (close-on-exec, internal) stays, so the program's number is free as
//! after a close. The next open takes a spare back, duplicating it onto the lowest free
//! number as an open would get it, and the entry keeps the spare's descriptor
//! (`Entry::spare_fd`), so that the close that retires the description again only closes the
//! program's number. A reused description's open and close are so two system calls
//! (`F_DUPFD_CLOEXEC`, `close`), where moving the descriptor up at the close and back down at
//! the open took four.
//!
//! Nothing may use a spare as the old file: only a description whose entry never
//! `escaped` (never duplicated, never present at a fork, spawn or exec; its descriptor
//! close-on-exec in the kernel even when the program opened it without O_CLOEXEC, see
//! `Entry::keep_on_exec`) and whose entry nobody else holds is kept; an entry that escaped
//! closes its spare's descriptor when it goes. A fork's child closes its copies of the idle
//! spares; exec closes them all (close-on-exec). At most `MAX_SPARES` spare descriptors exist
//! at a time, idle or with an entry, so that they take few of the program's numbers.

use std::ffi::c_int;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nvmfs::shared::Description;
use parking_lot::Mutex;

use crate::fdtable::{self, Entry};
use crate::real;
use crate::state::State;

/// Spares live at or above this number, far from the numbers programs pick themselves
/// (`dup2(fd, 10)`, a shell's `exec 10>file`).
const SPARE_FLOOR: c_int = 512;
/// At most this many spare descriptors per process, idle or held. They take numbers from
/// 512 up; an open that finds no number free closes the idle ones and tries again (`open`).
/// 128 did not beat 64 under Filebench (docs/LAB.md); every live description, idle or not,
/// holds a lock that each close and lock call of its description file walks past.
const MAX_SPARES: usize = 64;

static SPARES: Mutex<Vec<(c_int, Description)>> = Mutex::new(Vec::new());
/// Spare descriptors that open entries hold (`Entry::spare_fd`).
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Closes `fd`, whose entry `e` is out of the table, by keeping its description as a
/// spare. False (nothing done) if the description cannot be kept: the caller closes `fd`.
pub fn retire(st: &State, fd: c_int, e: &Arc<Entry>) -> bool {
    if e.escaped.load(Ordering::Acquire) || Arc::strong_count(e) != 1 {
        return false;
    }
    let held = e.spare_fd.swap(-1, Ordering::AcqRel);
    let spare = if held >= 0 {
        held
    } else {
        // A bound, not an exact count: closes that race past it may add a spare or two.
        if SPARES.lock().len() + HELD.load(Ordering::Acquire) >= MAX_SPARES {
            return false;
        }
        // SAFETY: duplicating the descriptor we are closing; the real C library's fcntl.
        let spare = unsafe { real::fcntl(fd, libc::F_DUPFD_CLOEXEC, SPARE_FLOOR as usize) };
        if spare < 0 {
            return false;
        }
        fdtable::mark_internal_as(spare, e.desc.file_id());
        spare
    };
    st.mount.vacate_description(&e.desc);
    // SAFETY: the program's descriptor, closed as it asked; the description lives on.
    unsafe { real::close(fd) };
    let mut spares = SPARES.lock();
    if held >= 0 {
        HELD.fetch_sub(1, Ordering::AcqRel);
    }
    spares.push((spare, e.desc.clone()));
    true
}

/// Opens a description of inode `ino` (whose generation is `generation`; status flags
/// `status`), from a spare if there is one: the descriptor (close-on-exec, whatever the
/// program asked: see `Entry::keep_on_exec`), the description, as
/// `SharedMount::open_description` gives them, and the spare's own descriptor (-1 for a new
/// description), for the entry to hold (`hold`).
pub fn open(
    st: &State,
    ino: u64,
    generation: u32,
    status: c_int,
) -> io::Result<(c_int, Description, c_int)> {
    let Some((spare, desc)) = SPARES.lock().pop() else {
        let (fd, desc) = giving_back(|| st.mount.open_description(ino, status, true))?;
        return Ok((fd, desc, -1));
    };
    let fd = match giving_back(|| {
        // SAFETY: our spare descriptor, duplicated onto the lowest free number.
        let fd = unsafe { real::fcntl(spare, libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(fd)
        }
    }) {
        Ok(fd) => fd,
        Err(err) => {
            SPARES.lock().push((spare, desc));
            return Err(err);
        }
    };
    st.mount.fill_description(&desc, ino, generation, status);
    HELD.fetch_add(1, Ordering::AcqRel);
    Ok((fd, desc, spare))
}

/// Runs `f`, which makes a descriptor, again after closing the idle spares if it found no
/// descriptor number free (EMFILE): the program, out of numbers, gets theirs back.
fn giving_back<T>(f: impl Fn() -> io::Result<T>) -> io::Result<T> {
    match f() {
        Err(e) if e.raw_os_error() == Some(libc::EMFILE) && close_all() > 0 => f(),
        r => r,
    }
}

/// Gives the spare's descriptor that `open` returned to entry `e` (nothing for -1).
pub fn hold(e: &Entry, spare: c_int) {
    if spare >= 0 {
        e.spare_fd.store(spare, Ordering::Release);
    }
}

/// Closes spare descriptor `fd`, which an entry held (`Entry::spare_fd`) and now goes
/// without retiring, or which an open took before it failed.
pub fn release_held(fd: c_int) {
    HELD.fetch_sub(1, Ordering::AcqRel);
    fdtable::unmark_internal(fd);
    // SAFETY: our spare descriptor, which the entry held.
    unsafe { real::close(fd) };
}

/// Closes every idle spare (in a fork's child, whose copies are not its own; at exit, so
/// the last process out finds no description left; when the program is out of descriptor
/// numbers). Returns how many.
pub fn close_all() -> usize {
    let all = std::mem::take(&mut *SPARES.lock());
    let n = all.len();
    for (fd, _) in all {
        fdtable::unmark_internal(fd);
        // SAFETY: our spare descriptor.
        unsafe { real::close(fd) };
    }
    n
}

pub fn fork_lock() {
    std::mem::forget(SPARES.lock());
}

pub fn fork_unlock() {
    // SAFETY: locked by fork_lock in this thread (or in the parent before the copy).
    unsafe { SPARES.force_unlock() };
}
