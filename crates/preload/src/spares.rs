//! Descriptions kept for reuse.
//!
//! Each nvmfs open file description is a descriptor of the coordination file with a lock
//! on its slot (`nvmfs::shared`). Making one (an open, a lock call and a seek) and closing
//! it again costs more than all the rest of a small file's open and close. So the last
//! close of a description that nothing outside this process's view can hold keeps it as a
//! spare: its slot is cleared (the inode is no longer held open), and its descriptor moves to
//! `SPARE_FLOOR` or above (close-on-exec, internal), so the program's number is free as
//! after a close. The next open takes a spare back, duplicating it onto the lowest free
//! number as an open would get it.
//!
//! Nothing may use a spare as the old file: only a description whose entry never
//! `escaped` (never duplicated, never present at a fork, spawn or exec; its descriptor
//! close-on-exec in the kernel even when the program opened it without O_CLOEXEC, see
//! `Entry::keep_on_exec`) and whose entry nobody else holds is kept. A fork's child closes its copies of the
//! spares; exec closes them (close-on-exec).

use std::ffi::c_int;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use nvmfs::shared::Description;
use parking_lot::Mutex;

use crate::fdtable::{self, Entry};
use crate::real;
use crate::state::State;

/// Spares live at or above this number, far from the numbers programs pick themselves
/// (`dup2(fd, 10)`, a shell's `exec 10>file`).
const SPARE_FLOOR: c_int = 512;
/// At most this many spares per process.
const MAX_SPARES: usize = 16;

static SPARES: Mutex<Vec<(c_int, Description)>> = Mutex::new(Vec::new());

/// Closes `fd`, whose entry `e` is out of the table, by keeping its description as a
/// spare. False (nothing done) if the description cannot be kept: the caller closes `fd`.
pub fn retire(st: &State, fd: c_int, e: &Arc<Entry>) -> bool {
    if e.escaped.load(Ordering::Acquire)
        || Arc::strong_count(e) != 1
        || SPARES.lock().len() >= MAX_SPARES
    {
        return false;
    }
    // SAFETY: duplicating the descriptor we are closing; the real C library's fcntl.
    let spare = unsafe { real::fcntl(fd, libc::F_DUPFD_CLOEXEC, SPARE_FLOOR as usize) };
    if spare < 0 {
        return false;
    }
    st.mount.vacate_description(&e.desc);
    // SAFETY: the program's descriptor, closed as it asked; the description lives on.
    unsafe { real::close(fd) };
    fdtable::mark_internal_as(spare, st.mount.coordination_id());
    SPARES.lock().push((spare, e.desc.clone()));
    true
}

/// Opens a description of inode `ino` (whose generation is `generation`; status flags
/// `status`), from a spare if there is one: the descriptor (close-on-exec, whatever the program asked: see
/// `Entry::keep_on_exec`) and the description, as `SharedMount::open_description` gives them.
pub fn open(
    st: &State,
    ino: u64,
    generation: u32,
    status: c_int,
) -> io::Result<(c_int, Description)> {
    let Some((spare, desc)) = SPARES.lock().pop() else {
        return st.mount.open_description(ino, status, true);
    };
    // SAFETY: our spare descriptor, duplicated onto the lowest free number, then closed.
    let fd = unsafe { real::fcntl(spare, libc::F_DUPFD_CLOEXEC, 0) };
    let err = (fd < 0).then(io::Error::last_os_error);
    fdtable::unmark_internal(spare);
    // SAFETY: as above.
    unsafe { real::close(spare) };
    if let Some(err) = err {
        return Err(err);
    }
    st.mount.fill_description(&desc, ino, generation, status);
    Ok((fd, desc))
}

/// Closes every spare (in a fork's child, whose copies are not its own, and at exit, so
/// the last process out finds no description left).
pub fn close_all() {
    let all = std::mem::take(&mut *SPARES.lock());
    for (fd, _) in all {
        fdtable::unmark_internal(fd);
        // SAFETY: our spare descriptor.
        unsafe { real::close(fd) };
    }
}

pub fn fork_lock() {
    std::mem::forget(SPARES.lock());
}

pub fn fork_unlock() {
    // SAFETY: locked by fork_lock in this thread (or in the parent before the copy).
    unsafe { SPARES.force_unlock() };
}
