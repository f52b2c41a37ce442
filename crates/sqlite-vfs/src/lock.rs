//! SQLite's file locks (SHARED, RESERVED, PENDING, EXCLUSIVE) between the connections of this
//! process on one file, with the rules of the unix VFS (`unixLock` / `unixUnlock` in
//! os_unix.c) minus its POSIX byte-range locks: nothing outside this process uses the image
//! through SQLite, so the in-process table is the whole truth.
//!
//! - SHARED: refused while another connection holds PENDING or EXCLUSIVE (a waiting writer
//!   keeps new readers out, so it cannot starve).
//! - RESERVED: one connection at a time; readers continue.
//! - EXCLUSIVE: from RESERVED the connection first takes PENDING and keeps it if readers are
//!   still there (it retries later); from SHARED it stays SHARED when refused.

use libsqlite3_sys as ffi;

pub(crate) const NONE: i32 = ffi::SQLITE_LOCK_NONE;
pub(crate) const SHARED: i32 = ffi::SQLITE_LOCK_SHARED;
pub(crate) const RESERVED: i32 = ffi::SQLITE_LOCK_RESERVED;
pub(crate) const PENDING: i32 = ffi::SQLITE_LOCK_PENDING;
pub(crate) const EXCLUSIVE: i32 = ffi::SQLITE_LOCK_EXCLUSIVE;

/// The lock state of one file (inode), shared by every connection that has it open.
#[derive(Debug, Default)]
pub(crate) struct FileLocks {
    /// Connections holding SHARED or more.
    shared: u32,
    /// The one connection above SHARED, with its level (RESERVED, PENDING or EXCLUSIVE).
    writer: Option<(u64, i32)>,
}

/// What a lock request did: the level the connection holds now, and whether that is the
/// level it asked for (`false`: SQLITE_BUSY).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub level: i32,
    pub granted: bool,
}

impl FileLocks {
    /// Raises connection `conn` from `held` towards `want`. `None` for a request SQLite never
    /// makes (PENDING, a jump from NONE past SHARED, RESERVED without SHARED).
    pub fn lock(&mut self, conn: u64, held: i32, want: i32) -> Option<Outcome> {
        let busy = |level| {
            Some(Outcome {
                level,
                granted: false,
            })
        };
        if held >= want {
            return Some(Outcome {
                level: held,
                granted: true,
            });
        }
        let other_writer = self.writer.filter(|&(c, _)| c != conn);
        match (held, want) {
            (NONE, SHARED) => {
                if other_writer.is_some_and(|(_, l)| l >= PENDING) {
                    return busy(held);
                }
                self.shared += 1;
            }
            (SHARED, RESERVED) => {
                if self.writer.is_some() {
                    return busy(held);
                }
                self.writer = Some((conn, RESERVED));
            }
            (SHARED | RESERVED | PENDING, EXCLUSIVE) => {
                if other_writer.is_some() {
                    return busy(held);
                }
                let mut level = held;
                if held >= RESERVED {
                    level = PENDING;
                    self.writer = Some((conn, PENDING));
                }
                if self.shared > 1 {
                    return busy(level);
                }
                self.writer = Some((conn, EXCLUSIVE));
            }
            _ => return None,
        }
        Some(Outcome {
            level: want,
            granted: true,
        })
    }

    /// Lowers connection `conn` from `held` to `want` (SHARED or NONE); returns the new level.
    pub fn unlock(&mut self, conn: u64, held: i32, want: i32) -> i32 {
        if held <= want {
            return held;
        }
        if held > SHARED && self.writer.is_some_and(|(c, _)| c == conn) {
            self.writer = None;
        }
        if want == NONE && held >= SHARED {
            self.shared = self.shared.saturating_sub(1);
        }
        want
    }

    /// Whether any connection holds RESERVED or more (xCheckReservedLock).
    pub fn reserved(&self) -> bool {
        self.writer.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(level: i32) -> Option<Outcome> {
        Some(Outcome {
            level,
            granted: true,
        })
    }

    fn busy(level: i32) -> Option<Outcome> {
        Some(Outcome {
            level,
            granted: false,
        })
    }

    #[test]
    fn readers_share_and_one_writer_reserves() {
        let mut l = FileLocks::default();
        assert_eq!(l.lock(1, NONE, SHARED), ok(SHARED));
        assert_eq!(l.lock(2, NONE, SHARED), ok(SHARED));
        assert!(!l.reserved());
        assert_eq!(l.lock(1, SHARED, RESERVED), ok(RESERVED));
        assert!(l.reserved());
        assert_eq!(l.lock(2, SHARED, RESERVED), busy(SHARED));
        // A reserved writer lets new readers in.
        assert_eq!(l.lock(3, NONE, SHARED), ok(SHARED));
    }

    #[test]
    fn exclusive_waits_for_readers_holding_pending() {
        let mut l = FileLocks::default();
        l.lock(1, NONE, SHARED);
        l.lock(2, NONE, SHARED);
        l.lock(1, SHARED, RESERVED);
        assert_eq!(l.lock(1, RESERVED, EXCLUSIVE), busy(PENDING));
        // PENDING keeps new readers out.
        assert_eq!(l.lock(3, NONE, SHARED), busy(NONE));
        assert_eq!(l.unlock(2, SHARED, NONE), NONE);
        assert_eq!(l.lock(1, PENDING, EXCLUSIVE), ok(EXCLUSIVE));
        assert_eq!(l.lock(3, NONE, SHARED), busy(NONE));
        assert_eq!(l.unlock(1, EXCLUSIVE, SHARED), SHARED);
        assert!(!l.reserved());
        assert_eq!(l.lock(3, NONE, SHARED), ok(SHARED));
    }

    #[test]
    fn shared_to_exclusive_stays_shared_when_refused() {
        let mut l = FileLocks::default();
        l.lock(1, NONE, SHARED);
        l.lock(2, NONE, SHARED);
        assert_eq!(l.lock(1, SHARED, EXCLUSIVE), busy(SHARED));
        assert!(!l.reserved());
        l.unlock(2, SHARED, NONE);
        assert_eq!(l.lock(1, SHARED, EXCLUSIVE), ok(EXCLUSIVE));
        // Another connection's exclusive request fails while a writer exists.
        assert_eq!(l.lock(2, NONE, SHARED), busy(NONE));
    }

    #[test]
    fn requests_sqlite_never_makes_are_refused() {
        let mut l = FileLocks::default();
        assert_eq!(l.lock(1, NONE, RESERVED), None);
        assert_eq!(l.lock(1, NONE, EXCLUSIVE), None);
        assert_eq!(l.lock(1, SHARED, PENDING), None);
        // Holding already: nothing to do.
        assert_eq!(l.lock(1, EXCLUSIVE, SHARED), ok(EXCLUSIVE));
    }

    #[test]
    fn unlock_to_none_releases_everything() {
        let mut l = FileLocks::default();
        l.lock(1, NONE, SHARED);
        l.lock(1, SHARED, RESERVED);
        assert_eq!(l.unlock(1, RESERVED, NONE), NONE);
        assert!(!l.reserved());
        assert_eq!(l.lock(2, NONE, SHARED), ok(SHARED));
        assert_eq!(l.lock(2, SHARED, EXCLUSIVE), ok(EXCLUSIVE));
    }
}
