//! The cycle counter and the cache eviction of the mapping measurements.
//!
//! On x86-64 the counter is `rdtscp` between two `lfence`s, so the timed operation neither
//! starts before the first read nor finishes after the second (as the paper measured). Elsewhere
//! it falls back to a monotonic clock in nanoseconds, and [`UNIT`] says so.

use std::hint::black_box;

/// What [`now`] counts.
pub const UNIT: &str = if cfg!(target_arch = "x86_64") {
    "cycles"
} else {
    "ns"
};

/// The counter: time-stamp cycles (x86-64) or nanoseconds.
#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{__rdtscp, _mm_lfence};
        let mut aux = 0u32;
        // SAFETY: rdtscp and lfence exist on every x86-64 CPU this runs on (rdtscp since
        // 2006-era CPUs; the lab targets current ones) and touch no memory of ours but `aux`.
        unsafe {
            _mm_lfence();
            let t = __rdtscp(&mut aux);
            _mm_lfence();
            t
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// What an empty timed region costs: the least of many, subtracted from single operations.
pub fn overhead() -> u64 {
    (0..10_000)
        .map(|_| {
            let t0 = now();
            now().saturating_sub(t0)
        })
        .min()
        .unwrap_or(0)
}

/// The cycles of one call of `f`, less the timer's own `overhead`.
#[inline(always)]
pub fn time_one<T>(overhead: u64, f: impl FnOnce() -> T) -> (u64, T) {
    let t0 = now();
    let r = black_box(f());
    let dt = now().saturating_sub(t0);
    (dt.saturating_sub(overhead), r)
}

/// Evicts the CPU caches by writing one word of every line of a buffer larger than the
/// last-level cache (the "cold cache" of the paper: one operation after a reset).
pub struct Evictor {
    buf: Vec<u64>,
}

/// The eviction buffer: twice the 32 MiB L3 of the machines here.
pub const EVICT_BYTES: usize = 64 << 20;

impl Evictor {
    pub fn new(bytes: usize) -> Evictor {
        Evictor {
            buf: vec![1; bytes / 8],
        }
    }

    /// Touches every cache line of the buffer.
    pub fn evict(&mut self) {
        for w in self.buf.iter_mut().step_by(8) {
            *w = w.wrapping_add(1);
        }
        black_box(&mut self.buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_moves_forward_and_costs_little() {
        let a = now();
        let (dt, v) = time_one(overhead(), || (0..1000u64).sum::<u64>());
        assert_eq!(v, 499_500);
        assert!(now() > a);
        assert!(dt < 10_000_000, "{dt}");
        assert!(overhead() < 10_000);
    }
}
