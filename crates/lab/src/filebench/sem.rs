//! Filebench's `semblock` / `sempost` semaphores (flowop_library.c, the
//! System V build that Linux uses).
//!
//! Each semblock flowop instance (one per thread that runs it) owns a pair
//! of counters: `lw`, the posts waiting to be consumed, and `hw`, the room
//! left for posts. `hw` starts at the flowop's `highwater`.
//!
//! - semblock(value): `hw += value` (never waits), then waits until
//!   `lw >= value` and takes `value` from it. Filebench's `semtimedop` gives
//!   up after 600 s and carries on without taking anything; so does this.
//! - sempost(value, blocking): `lw += value`; a blocking post also takes
//!   `value` from `hw` in the same atomic step, waiting until there is room.
//!
//! So a blocking poster can run at most `highwater` posts ahead of the
//! blocker's consumption, and the blocker proceeds once per `value` posts.
//! [`Semaphore::close`] wakes every waiter for good so that a trial can stop
//! while threads are blocked.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a semblock or blocking sempost waits before giving up, as
/// filebench's `semtimedop` timeout.
pub const SEM_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug)]
struct Counts {
    lw: u64,
    hw: u64,
    closed: bool,
}

/// One semblock flowop instance's semaphore pair.
#[derive(Debug)]
pub struct Semaphore {
    counts: Mutex<Counts>,
    changed: Condvar,
    timeout: Duration,
}

/// Why a wait ended without its operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The operation took place.
    Done,
    /// Waited [`SEM_TIMEOUT`]: carried on without it, as filebench does.
    TimedOut,
    /// The trial is stopping; the thread must end its loop.
    Closed,
}

impl Semaphore {
    pub fn new(highwater: u64) -> Self {
        Self::with_timeout(highwater, SEM_TIMEOUT)
    }

    /// A semaphore whose waits give up after `timeout` (tests).
    pub fn with_timeout(highwater: u64, timeout: Duration) -> Self {
        Semaphore {
            counts: Mutex::new(Counts {
                lw: 0,
                hw: highwater,
                closed: false,
            }),
            changed: Condvar::new(),
            timeout,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        // Every update is a plain assignment under the lock: a panicking
        // holder cannot leave the counts half-changed.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `ready` holds, the semaphore closes or the timeout passes.
    fn wait_until<'a>(
        &'a self,
        mut g: MutexGuard<'a, Counts>,
        ready: impl Fn(&Counts) -> bool,
    ) -> (MutexGuard<'a, Counts>, Waited) {
        let deadline = Instant::now() + self.timeout;
        loop {
            if g.closed {
                return (g, Waited::Closed);
            }
            if ready(&g) {
                return (g, Waited::Done);
            }
            let now = Instant::now();
            if now >= deadline {
                return (g, Waited::TimedOut);
            }
            g = self
                .changed
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// `semblock value=V`: adds V of room for posters, then takes V posts.
    pub fn block(&self, value: u64) -> Waited {
        let mut g = self.lock();
        g.hw += value;
        self.changed.notify_all();
        let (mut g, how) = self.wait_until(g, |c| c.lw >= value);
        if how == Waited::Done {
            g.lw -= value;
        }
        how
    }

    /// `sempost value=V[,blocking]`.
    pub fn post(&self, value: u64, blocking: bool) -> Waited {
        let g = self.lock();
        let (mut g, how) = if blocking {
            self.wait_until(g, |c| c.hw >= value)
        } else {
            (g, Waited::Done)
        };
        if how == Waited::Done {
            if blocking {
                g.hw -= value;
            }
            g.lw += value;
            self.changed.notify_all();
        }
        how
    }

    /// Wakes every waiter, now and later, with [`Waited::Closed`].
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// (posts waiting, room for posts), for tests.
    pub fn counts(&self) -> (u64, u64) {
        let g = self.lock();
        (g.lw, g.hw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn block_waits_for_value_posts() {
        let s = Arc::new(Semaphore::new(10));
        let passed = Arc::new(AtomicU64::new(0));
        let t = {
            let (s, passed) = (s.clone(), passed.clone());
            std::thread::spawn(move || {
                assert_eq!(s.block(3), Waited::Done);
                passed.store(1, Ordering::SeqCst);
            })
        };
        // Two posts are not enough for a block of value 3.
        assert_eq!(s.post(1, true), Waited::Done);
        assert_eq!(s.post(1, true), Waited::Done);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            passed.load(Ordering::SeqCst),
            0,
            "passed after 2 of 3 posts"
        );
        assert_eq!(s.post(1, true), Waited::Done);
        t.join().unwrap();
        assert_eq!(passed.load(Ordering::SeqCst), 1);
        // hw: 10 + 3 (block) - 3 (posts); lw: all consumed.
        assert_eq!(s.counts(), (0, 10));
    }

    #[test]
    fn blocking_posts_stop_at_highwater_until_a_block_makes_room() {
        let s = Arc::new(Semaphore::new(2));
        assert_eq!(s.post(1, true), Waited::Done);
        assert_eq!(s.post(1, true), Waited::Done);
        let posted = Arc::new(AtomicU64::new(0));
        let t = {
            let (s, posted) = (s.clone(), posted.clone());
            std::thread::spawn(move || {
                assert_eq!(s.post(1, true), Waited::Done);
                posted.store(1, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            posted.load(Ordering::SeqCst),
            0,
            "third post above highwater 2"
        );
        // A block of 1 adds one of room, then consumes one post.
        assert_eq!(s.block(1), Waited::Done);
        t.join().unwrap();
        assert_eq!(posted.load(Ordering::SeqCst), 1);
        assert_eq!(s.counts(), (2, 0));
    }

    #[test]
    fn non_blocking_posts_ignore_highwater() {
        let s = Semaphore::new(0);
        for _ in 0..5 {
            assert_eq!(s.post(2, false), Waited::Done);
        }
        assert_eq!(s.counts(), (10, 0));
        assert_eq!(s.block(10), Waited::Done);
        assert_eq!(s.counts(), (0, 10));
    }

    #[test]
    fn close_releases_blocked_threads() {
        let s = Arc::new(Semaphore::new(0));
        let waiters: Vec<_> = (0..4)
            .map(|i| {
                let s = s.clone();
                std::thread::spawn(move || {
                    if i % 2 == 0 {
                        s.block(5)
                    } else {
                        // hw is 0 until a block runs: waits (or posts after one).
                        s.post(100, true)
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        s.close();
        for w in waiters {
            assert_eq!(w.join().unwrap(), Waited::Closed);
        }
        assert_eq!(s.block(1), Waited::Closed, "closed for good");
    }

    #[test]
    fn waits_give_up_after_the_timeout() {
        let s = Semaphore::with_timeout(0, Duration::from_millis(30));
        assert_eq!(s.block(1), Waited::TimedOut);
        // The room the block added stays; nothing was taken.
        assert_eq!(s.counts(), (0, 1));
        assert_eq!(s.post(5, true), Waited::TimedOut);
        assert_eq!(s.counts(), (0, 1));
    }
}
