//! The ownership gate: one 64-bit word in the coordination file that gives the image to one
//! process at a time, while any number of that process's threads run operations in it.
//!
//! Word layout: bits 0..32 the number of operations in flight, bits 32..60 the owner (a
//! process identity: slot + 1 in 12 bits, epoch in 16), bit 62 `REFRESH` (the owner is
//! bringing its DRAM state up to date; its other threads wait), bit 63 `WAITERS` (someone
//! sleeps on the wake word). The owner stays recorded after its count drops to zero, so a
//! process that runs operations back to back takes and leaves the gate with one
//! compare-and-swap each, and only a change of owner costs a refresh.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::sys;

const COUNT: u64 = 0xffff_ffff;
const OWNER_BITS: u64 = 0x0fff_ffff;
const REFRESH: u64 = 1 << 62;
const WAITERS: u64 = 1 << 63;
/// How long a waiter sleeps before it checks whether the owner is still alive.
const WAIT_MS: u64 = 5;

pub fn owner(g: u64) -> u32 {
    ((g >> 32) & OWNER_BITS) as u32
}

fn count(g: u64) -> u64 {
    g & COUNT
}

/// How `enter` got the gate.
pub enum Entry {
    /// Joined the operations this process already had in flight, or took it back from
    /// nobody else: DRAM state is current.
    Joined,
    /// Took it from another process (`from`), idle: refresh, then call `refreshed`.
    Took,
    /// Took it from a process that died with operations in flight: recover the image, then
    /// call `refreshed`.
    TookFromDead,
}

/// Waits until the image is this process's (`me`), then counts one more operation in flight.
/// `alive(owner)` tells whether another process is still running. The count is added by a
/// sequentially consistent read-modify-write, which `SharedMount::enter` relies on against a
/// fork beginning.
pub fn enter(gate: &AtomicU64, wake: &AtomicU32, me: u32, alive: impl Fn(u32) -> bool) -> Entry {
    let mine = (me as u64) << 32;
    let mut spins = 0u32;
    loop {
        let g = gate.load(Ordering::Acquire);
        let o = owner(g);
        let refreshing = g & REFRESH != 0;
        // Join our own process's operations, unless another process waits for the gate:
        // then let the count drain so it gets its turn.
        if o == me && !refreshing && (g & WAITERS == 0 || count(g) == 0) {
            if gate
                .compare_exchange_weak(g, g + 1, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                return Entry::Joined;
            }
            continue;
        }
        if count(g) == 0 && !refreshing {
            let took = if o == 0 { Entry::Joined } else { Entry::Took };
            let flag = if o == 0 { 0 } else { REFRESH };
            let new = mine | 1 | flag | (g & WAITERS);
            if gate
                .compare_exchange_weak(g, new, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                return took;
            }
            continue;
        }
        // Busy. Spin briefly: operations take microseconds.
        if spins < 64 {
            spins += 1;
            std::hint::spin_loop();
            if spins > 16 {
                std::thread::yield_now();
            }
            continue;
        }
        let w = wake.load(Ordering::Acquire);
        if g & WAITERS == 0
            && gate
                .compare_exchange(g, g | WAITERS, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        sys::futex_wait(wake, w, WAIT_MS);
        let g = gate.load(Ordering::Acquire);
        let o = owner(g);
        if o != me && o != 0 && count(g) > 0 && !alive(o) {
            // The owner died with operations in flight: they will never leave.
            let new = mine | 1 | REFRESH | (g & WAITERS);
            if gate
                .compare_exchange(g, new, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                return Entry::TookFromDead;
            }
        }
        // A refresher that died holds REFRESH with its count: covered by the same check,
        // since its count is > 0.
    }
}

/// Ends a refresh: this process's other threads may join.
pub fn refreshed(gate: &AtomicU64, wake: &AtomicU32) {
    let g = gate.fetch_and(!REFRESH, Ordering::AcqRel);
    if g & WAITERS != 0 {
        wake_all(gate, wake);
    }
}

/// One operation fewer in flight; the last one out wakes the waiters.
pub fn leave(gate: &AtomicU64, wake: &AtomicU32) {
    let mut g = gate.load(Ordering::Relaxed);
    loop {
        debug_assert!(count(g) > 0);
        let mut new = g - 1;
        let last_with_waiters = count(new) == 0 && g & WAITERS != 0;
        if last_with_waiters {
            new &= !WAITERS;
        }
        match gate.compare_exchange_weak(g, new, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => {
                if last_with_waiters {
                    bump_and_wake(wake);
                }
                return;
            }
            Err(now) => g = now,
        }
    }
}

fn wake_all(gate: &AtomicU64, wake: &AtomicU32) {
    gate.fetch_and(!WAITERS, Ordering::AcqRel);
    bump_and_wake(wake);
}

fn bump_and_wake(wake: &AtomicU32) {
    wake.fetch_add(1, Ordering::AcqRel);
    sys::futex_wake_all(wake);
}
