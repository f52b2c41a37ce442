//! Shared plumbing of the interposed functions.

use std::ffi::CString;

use crate::guard::{self, R};
use crate::resolve::{classify, Walk, Walker};
use crate::state::{self, nv, Config};

/// The configuration when this call should be looked at (not inside the preload's own
/// code, preload active); None: pass it straight on.
#[inline]
pub fn active_cfg() -> Option<&'static Config> {
    if guard::active() {
        None
    } else {
        state::config()
    }
}

/// What an nvmfs-side handler decided.
pub enum Out<T> {
    Done(T),
    /// The path left nvmfs: do the call on this real path.
    Real(CString),
    /// The path never touched nvmfs: do the original call.
    Pass,
}

/// The outcome of routing a path call.
pub enum Route<T> {
    Pass,
    Real(CString),
    Done(R<T>),
}

/// Classifies `path` (relative to `dirfd`) and, if it may touch nvmfs, runs `f` as one
/// operation with a walker.
pub fn route<T>(
    cfg: &'static Config,
    dirfd: i32,
    path: &[u8],
    f: impl FnOnce(&mut Walker<'_>, &Walk) -> R<Out<T>>,
) -> Route<T> {
    let Some(w) = classify(cfg, dirfd, path) else {
        return Route::Pass;
    };
    match nv(|fs| f(&mut Walker::new(fs, cfg), &w)) {
        Ok(Out::Done(v)) => Route::Done(Ok(v)),
        Ok(Out::Real(c)) => Route::Real(c),
        Ok(Out::Pass) => Route::Pass,
        Err(e) => Route::Done(Err(e)),
    }
}

/// A byte slice from a C buffer (empty for length 0, whatever the pointer).
///
/// # Safety
/// `p` points at `n` readable bytes when `n > 0`.
pub unsafe fn slice<'a>(p: *const std::ffi::c_void, n: usize) -> &'a [u8] {
    if n == 0 || p.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(p as *const u8, n)
    }
}

/// # Safety
/// `p` points at `n` writable bytes when `n > 0`.
pub unsafe fn slice_mut<'a>(p: *mut std::ffi::c_void, n: usize) -> &'a mut [u8] {
    if n == 0 || p.is_null() {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(p as *mut u8, n)
    }
}

/// Linux never moves more than this in one read or write.
pub const MAX_RW: usize = 0x7fff_f000;
