//! The run rule that keeps a run's trials at one CPU placement.
//!
//! On the virtual machines the lab runs on, the host places the two virtual CPUs near each
//! other (a cache line's round trip of about 45-70 ns) or far apart (about 350-400 ns) and
//! moves them now and then, between trials and even within one. At the far placement every
//! cache line that threads share costs five to eight times as much, and a target loses
//! throughput in proportion to how many lines its operations share: nvmfs, whose operations
//! are a microsecond or two, loses about 40%, tmpfs about 10% (docs/LAB.md, "nvmfs's
//! trial-to-trial spread"). A run whose trials straddle placements has a wide interval, and
//! two targets measured at different placements are not compared on the same machine.
//!
//! So before a trial that would be kept, the run waits for the near placement (probing the
//! link every `PROBE_EVERY`, for at most `WAIT_PER_TRIAL`, and at most `WAIT_TOTAL` over the
//! whole process), and a trial is set aside, and run again, when the CPU link measured just
//! before or just after it is still more than `FACTOR` times the shortest link this process
//! has measured (the nearest placement seen, by any target's trials). A run sets aside at most
//! as many trials as it keeps; after that, trials are kept whatever the placement, with their
//! link in the record. Where the placement never moves (bare metal, a pinned VM), nothing
//! waits and nothing is set aside. A process that has seen only far links
//! (`NEAR_SEEN_NS`) looks for a near one in its waits, for at most `UNSEEN_TOTAL`.

use super::engine::CpuTimes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How often a wait probes the link.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);
/// The longest wait before one trial. The far placement has lasted from seconds to about a
/// minute at a time here.
pub const WAIT_PER_TRIAL: Duration = Duration::from_secs(15);
/// The most a process waits in all: beyond it, the placement is taken as it comes.
pub const WAIT_TOTAL: Duration = Duration::from_secs(300);

/// A link this long or longer has been far on every machine the lab has run on (near
/// placements measured 44-110 ns, far ones 350-420 ns). While the nearest link a process has
/// measured is this long, it has not seen the near placement yet, and its waits look for a
/// link below this instead (for at most `UNSEEN_TOTAL` in all): a run that began at the far
/// placement would otherwise hold its first trials to that placement, and compare them with
/// later targets' trials at the near one.
pub const NEAR_SEEN_NS: f64 = 150.0;
/// The most a process waits for a near placement it has not seen yet (on a machine whose two
/// first CPUs are always far apart, that is all it loses).
pub const UNSEEN_TOTAL: Duration = Duration::from_secs(60);

/// Milliseconds this process has waited for the near placement, and of them while it had not
/// seen one.
static WAITED_MS: AtomicU64 = AtomicU64::new(0);
static WAITED_UNSEEN_MS: AtomicU64 = AtomicU64::new(0);

/// Whether `ns` is within `FACTOR` of the nearest placement's link `best` (what a trial is
/// judged by: against the nearest link actually seen, never `NEAR_SEEN_NS`).
fn near(ns: f64, best: f64) -> bool {
    ns <= ceiling(best, false)
}

/// The longest link a wait accepts, given the nearest seen (`best`): `FACTOR` times it, or
/// `NEAR_SEEN_NS` while the wait is `looking` for a near placement not seen yet and `best` is
/// still far (a near probe during the wait lowers `best`, and with it the ceiling).
fn ceiling(best: f64, looking: bool) -> f64 {
    match looking && best >= NEAR_SEEN_NS {
        true => NEAR_SEEN_NS,
        false => FACTOR * best,
    }
}

/// Waits until the CPU link is short enough (`ceiling`), within the limits above; returns the
/// last link measured. `say` is told once when a wait begins.
fn wait_for_near(say: &mut dyn FnMut(&str)) -> Option<f64> {
    let spent = |waited: &AtomicU64| Duration::from_millis(waited.load(Ordering::Relaxed));
    let unseen_budget = UNSEEN_TOTAL.saturating_sub(spent(&WAITED_UNSEEN_MS));
    let looking =
        !unseen_budget.is_zero() && crate::core_link::best_ns().is_some_and(|b| b >= NEAR_SEEN_NS);
    let mut limit = WAIT_PER_TRIAL.min(WAIT_TOTAL.saturating_sub(spent(&WAITED_MS)));
    if looking {
        limit = limit.min(unseen_budget);
    }
    let (ns, waited) = wait_with(
        crate::core_link::round_trip_ns,
        || crate::core_link::best_ns().map(|b| ceiling(b, looking)),
        limit,
        std::thread::sleep,
        say,
    );
    WAITED_MS.fetch_add(waited.as_millis() as u64, Ordering::Relaxed);
    if looking {
        WAITED_UNSEEN_MS.fetch_add(waited.as_millis() as u64, Ordering::Relaxed);
    }
    ns
}

/// `wait_for_near` with its probe, longest accepted link, limit and sleep given: the last link
/// probed and the time slept.
fn wait_with(
    mut probe: impl FnMut() -> Option<f64>,
    ceiling: impl Fn() -> Option<f64>,
    limit: Duration,
    mut sleep: impl FnMut(Duration),
    say: &mut dyn FnMut(&str),
) -> (Option<f64>, Duration) {
    let mut waited = Duration::ZERO;
    loop {
        let ns = probe();
        let (Some(now), Some(c)) = (ns, ceiling()) else {
            return (ns, waited);
        };
        if now <= c || waited + PROBE_EVERY > limit {
            return (ns, waited);
        }
        if waited.is_zero() {
            say(&format!(
                "waiting up to {} s for the near CPU placement (link {now:.0} ns, waiting for \
                 {c:.0} ns or less)",
                limit.as_secs()
            ));
        }
        sleep(PROBE_EVERY);
        waited += PROBE_EVERY;
    }
}

/// How much longer than the nearest placement's link a trial's link may be. The two
/// placements seen here differ five- to eightfold, while one placement's probes vary by up to
/// about 1.6x (45-70 ns).
pub const FACTOR: f64 = 3.0;

/// Decides which trials are set aside, within a budget.
#[derive(Debug)]
pub struct PlacementGuard {
    hold: bool,
    /// Set-asides left.
    budget: usize,
}

impl PlacementGuard {
    /// A guard for a run of `trials` trials; `hold` false never waits or sets a trial aside.
    pub fn new(hold: bool, trials: usize) -> Self {
        PlacementGuard {
            hold,
            budget: if hold { trials } else { 0 },
        }
    }

    /// The CPU link just before a trial; before one that `counts`, after waiting for the near
    /// placement (`wait_for_near`) when the guard holds it.
    pub fn link_before(&self, counts: bool, say: &mut dyn FnMut(&str)) -> Option<f64> {
        match self.hold && counts {
            true => wait_for_near(say),
            false => crate::core_link::round_trip_ns(),
        }
    }

    /// Why a trial that ran with `cpu`'s links (`before_ns` measured before it) is set aside,
    /// or None to keep it, given the nearest link seen, `best_ns`. Each set-aside spends one
    /// of the budget.
    pub fn judge(
        &mut self,
        best_ns: Option<f64>,
        before_ns: Option<f64>,
        cpu: &CpuTimes,
    ) -> Option<String> {
        if self.budget == 0 {
            return None;
        }
        let best = best_ns?;
        let worst = [before_ns, cpu.core_link_ns]
            .into_iter()
            .flatten()
            .reduce(f64::max)?;
        if near(worst, best) {
            return None;
        }
        self.budget -= 1;
        Some(format!(
            "CPU link {worst:.0} ns, more than {FACTOR}x the nearest placement's {best:.0} ns"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(after: Option<f64>) -> CpuTimes {
        CpuTimes {
            core_link_ns: after,
            ..CpuTimes::default()
        }
    }

    #[test]
    fn a_trial_at_the_far_placement_before_or_after_is_set_aside() {
        let mut g = PlacementGuard::new(true, 3);
        assert_eq!(g.judge(Some(50.0), Some(55.0), &cpu(Some(60.0))), None);
        // Up to FACTOR times the best is the same placement.
        assert_eq!(g.judge(Some(50.0), Some(150.0), &cpu(Some(150.0))), None);
        let why = g.judge(Some(50.0), Some(380.0), &cpu(Some(55.0))).unwrap();
        assert!(why.contains("380 ns") && why.contains("50 ns"), "{why}");
        assert!(g.judge(Some(50.0), Some(52.0), &cpu(Some(390.0))).is_some());
        assert!(g.judge(Some(50.0), None, &cpu(Some(390.0))).is_some());
    }

    /// Probes far, far, near: two sleeps, and the near link is returned; always far: gives
    /// up at the limit; near at once or without a nearest link: no sleep.
    #[test]
    fn a_wait_ends_at_the_near_placement_or_its_limit() {
        let mut said = Vec::new();
        let mut links = [400.0, 390.0, 48.0].into_iter();
        let mut slept = Duration::ZERO;
        let (ns, waited) = wait_with(
            || links.next(),
            || Some(ceiling(45.0, true)),
            Duration::from_secs(15),
            |d| slept += d,
            &mut |m: &str| said.push(m.to_string()),
        );
        assert_eq!(
            (ns, waited, slept),
            (Some(48.0), 2 * PROBE_EVERY, 2 * PROBE_EVERY)
        );
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("400 ns") && said[0].contains("135 ns"),
            "{said:?}"
        );
        let (ns, waited) = wait_with(
            || Some(400.0),
            || Some(135.0),
            Duration::from_secs(2),
            |_| {},
            &mut |_: &str| {},
        );
        assert_eq!((ns, waited), (Some(400.0), Duration::from_secs(2)));
        let (_, waited) = wait_with(
            || Some(400.0),
            || Some(135.0),
            Duration::ZERO,
            |_| {},
            &mut |_: &str| {},
        );
        assert_eq!(waited, Duration::ZERO, "no wait left");
        let (_, waited) = wait_with(
            || Some(400.0),
            || None,
            Duration::from_secs(2),
            |_| {},
            &mut |_: &str| {},
        );
        assert_eq!(waited, Duration::ZERO, "nothing to compare with");
    }

    /// Before any near placement is seen, a wait looks for one: a far link is not accepted
    /// just because it is the nearest so far, until that looking is used up.
    #[test]
    fn a_process_that_has_seen_only_the_far_placement_looks_for_the_near_one() {
        assert_eq!(ceiling(45.0, true), 135.0);
        assert_eq!(ceiling(45.0, false), 135.0);
        assert_eq!(ceiling(390.0, true), NEAR_SEEN_NS);
        assert_eq!(ceiling(390.0, false), 3.0 * 390.0);
        let mut links = [400.0, 395.0, 52.0].into_iter();
        let (ns, waited) = wait_with(
            || links.next(),
            || Some(ceiling(390.0, true)),
            Duration::from_secs(15),
            |_| {},
            &mut |_: &str| {},
        );
        assert_eq!((ns, waited), (Some(52.0), 2 * PROBE_EVERY));
    }

    #[test]
    fn the_budget_bounds_the_set_asides_and_no_link_keeps_the_trial() {
        let mut g = PlacementGuard::new(true, 2);
        assert!(g.judge(Some(50.0), Some(400.0), &cpu(None)).is_some());
        assert!(g.judge(Some(50.0), Some(400.0), &cpu(None)).is_some());
        // Budget spent: kept whatever the placement.
        assert_eq!(g.judge(Some(50.0), Some(400.0), &cpu(Some(400.0))), None);
        let mut g = PlacementGuard::new(true, 2);
        assert_eq!(g.judge(None, Some(400.0), &cpu(Some(400.0))), None);
        assert_eq!(g.judge(Some(50.0), None, &cpu(None)), None);
        let mut off = PlacementGuard::new(false, 5);
        assert_eq!(off.judge(Some(50.0), Some(400.0), &cpu(Some(400.0))), None);
    }
}
