//! Pause points inside operations, for tests that need a race to happen at one exact place.
//!
//! A race between resolving a name and acting on it, or between dropping a reference and
//! freeing, is a window of a few instructions: a stress loop on a busy two-core machine
//! rarely hits it. A unit test installs a closure on its own thread (`set`) that runs at the
//! chosen point (`at`) and does the racing operation there, so the race happens every run.
//! Outside `cfg(test)` `at` is an empty inline function.

/// Where an operation calls `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Point {
    /// A path component (or an inode-API name lookup) was resolved to inode `ino`; nothing
    /// that names it is held any more.
    Resolved { ino: u32 },
    /// A name lookup holds directory `dir`'s index read lock and has not searched it yet.
    Looking { dir: u32 },
    /// `release_ino` dropped the open reference of `ino` and has not freed it yet.
    Released { ino: u32 },
    /// A transaction's record is armed and its first in-place write applied.
    TxApplied,
    /// A write published its blocks past the old `map_end` and has not stored the size
    /// that covers them.
    Published,
    /// `fsck -n` or `info` has its view of the image and has not read it yet.
    ViewTaken,
}

#[cfg(test)]
type Hook = Box<dyn FnMut(Point)>;

#[cfg(test)]
thread_local! {
    static HOOK: std::cell::RefCell<Option<Hook>> = const { std::cell::RefCell::new(None) };
}

/// Runs this thread's hook, if any. It is taken out while it runs, so the file-system calls
/// it makes pass their own points without re-entering it.
#[cfg(test)]
pub(crate) fn at(p: Point) {
    let Some(mut f) = HOOK.with(|h| h.borrow_mut().take()) else {
        return;
    };
    f(p);
    HOOK.with(|h| {
        let mut slot = h.borrow_mut();
        if slot.is_none() {
            *slot = Some(f);
        }
    });
}

/// Installs `f` on this thread until `clear`.
#[cfg(test)]
pub(crate) fn set(f: impl FnMut(Point) + 'static) {
    HOOK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

#[cfg(test)]
pub(crate) fn clear() {
    HOOK.with(|h| *h.borrow_mut() = None);
}

#[cfg(not(test))]
#[inline(always)]
pub(crate) fn at(_: Point) {}
