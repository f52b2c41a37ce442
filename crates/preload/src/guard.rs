//! The "inside nvmfs" guard and errno.
//!
//! While a thread runs the preload's own code (the core library, our bookkeeping, start-up),
//! every interposed function it calls goes straight to the C library: the core opens, maps
//! and stats the image with ordinary calls, and those must reach the kernel.

use std::cell::Cell;
use std::io;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// True while this thread is inside the preload's own code.
#[inline]
pub fn active() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// Marks this thread as inside the preload until dropped.
pub struct Guard(());

impl Guard {
    #[inline]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Guard {
        DEPTH.with(|d| d.set(d.get() + 1));
        Guard(())
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

pub fn errno() -> i32 {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(e: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

/// The errno a kernel file system would give for a core error.
pub fn to_errno(e: &io::Error) -> i32 {
    nvmfs::errno_of(e)
}

/// Result of an nvmfs-side operation: the value, or an errno.
pub type R<T> = Result<T, i32>;

pub trait IoErrno<T> {
    fn en(self) -> R<T>;
}

impl<T> IoErrno<T> for io::Result<T> {
    #[inline]
    fn en(self) -> R<T> {
        self.map_err(|e| to_errno(&e))
    }
}

/// `-1` with errno for an error, the value otherwise.
#[inline]
pub fn ret_int(r: R<i32>) -> i32 {
    match r {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

#[inline]
pub fn ret_ssize(r: R<isize>) -> isize {
    match r {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

#[inline]
pub fn ret_ptr<T>(r: R<*mut T>) -> *mut T {
    match r {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}
