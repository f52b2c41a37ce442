//! How long one cache line takes to go from one CPU to another and back: two threads pinned to
//! the first two CPUs this process may use take turns incrementing one counter.
//!
//! On this kind of virtual machine the number is not fixed: the host places the two virtual
//! CPUs near each other (a round trip of about 75 ns) or far apart (about 365 ns), and moves
//! them now and then. A workload whose threads share cache lines (locks, reference counts, a
//! fileset's pick state) runs at about half its rate in the far placement, so the lab
//! measures the link before and after every Filebench trial, reports it beside the trial and
//! sets aside trials run farther than the nearest placement seen (`best_ns`;
//! filebench/placement.rs), and measures it after every `bench micro --threads` run
//! (docs/LAB.md, "nvmfs's trial-to-trial spread").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Round trips per batch; the result is the median batch's mean.
const ROUND_TRIPS: u64 = 200;
const BATCHES: usize = 15;
/// The probe gives up (None) when its threads cannot run together for this long.
const DEADLINE: Duration = Duration::from_millis(100);

/// The mean round trip of a cache line between the first two CPUs of this process's affinity
/// mask, in nanoseconds; None with fewer than two CPUs, when pinning fails, or when the two
/// threads did not get to run together within the deadline.
pub fn round_trip_ns() -> Option<f64> {
    let ns = measure()?;
    BEST_BITS.fetch_min(ns.to_bits(), Ordering::Relaxed);
    Some(ns)
}

/// The shortest round trip any `round_trip_ns` of this process has measured (positive
/// floats order as their bits do).
static BEST_BITS: AtomicU64 = AtomicU64::new(u64::MAX);

/// The shortest round trip this process has measured so far: the nearest placement seen.
pub fn best_ns() -> Option<f64> {
    match BEST_BITS.load(Ordering::Relaxed) {
        u64::MAX => None,
        bits => Some(f64::from_bits(bits)),
    }
}

fn measure() -> Option<f64> {
    let (a, b) = two_cpus()?;
    let counter = AtomicU64::new(0);
    let give_up = AtomicBool::new(false);
    let deadline = Instant::now() + DEADLINE;
    let total = ROUND_TRIPS * BATCHES as u64;
    std::thread::scope(|s| {
        let partner = s.spawn(|| {
            if !pin(b) {
                give_up.store(true, Ordering::Relaxed);
                return;
            }
            // Answers every odd value with the next even one.
            for k in 0..total {
                if !wait_for(&counter, 2 * k + 1, deadline, &give_up) {
                    return;
                }
                counter.store(2 * k + 2, Ordering::Release);
            }
        });
        let mine = s.spawn(|| {
            if !pin(a) {
                give_up.store(true, Ordering::Relaxed);
                return None;
            }
            let mut batches = Vec::with_capacity(BATCHES);
            for batch in 0..BATCHES as u64 {
                let t0 = Instant::now();
                for k in batch * ROUND_TRIPS..(batch + 1) * ROUND_TRIPS {
                    counter.store(2 * k + 1, Ordering::Release);
                    if !wait_for(&counter, 2 * k + 2, deadline, &give_up) {
                        return None;
                    }
                }
                batches.push(t0.elapsed().as_nanos() as f64 / ROUND_TRIPS as f64);
            }
            batches.sort_by(f64::total_cmp);
            Some(batches[BATCHES / 2])
        });
        let ns = mine.join().ok().flatten();
        if ns.is_none() {
            give_up.store(true, Ordering::Relaxed);
        }
        let _ = partner.join();
        ns
    })
}

/// Spins until `counter` holds `value`; false when the deadline passed or the other side
/// gave up (checked every 1024 rounds, so the clock is not in the measured loop).
fn wait_for(counter: &AtomicU64, value: u64, deadline: Instant, give_up: &AtomicBool) -> bool {
    let mut spins = 0u32;
    while counter.load(Ordering::Acquire) != value {
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024)
            && (give_up.load(Ordering::Relaxed) || Instant::now() > deadline)
        {
            give_up.store(true, Ordering::Relaxed);
            return false;
        }
    }
    true
}

/// The first two CPUs of this thread's affinity mask.
fn two_cpus() -> Option<(usize, usize)> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills the one we own.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size is the set's.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } != 0 {
        return None;
    }
    let mut cpus = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe {
        // SAFETY: c is below CPU_SETSIZE.
        libc::CPU_ISSET(c, &set)
    });
    Some((cpus.next()?, cpus.next()?))
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) -> bool {
    // SAFETY: as in two_cpus; cpu is below CPU_SETSIZE (it came from a mask).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With two CPUs the probe answers with a round trip between a few nanoseconds and the
    /// deadline; with one it answers None rather than a number.
    #[test]
    fn measures_a_round_trip_or_says_it_cannot() {
        match (two_cpus(), round_trip_ns()) {
            (None, r) => assert_eq!(r, None),
            (Some(_), Some(ns)) => assert!((5.0..1e6).contains(&ns), "{ns} ns"),
            // Two CPUs, but the machine was too busy to run both threads together.
            (Some(_), None) => {}
        }
    }

    #[test]
    fn leaves_the_callers_affinity_alone() {
        let before = two_cpus();
        let _ = round_trip_ns();
        assert_eq!(two_cpus(), before);
    }
}
