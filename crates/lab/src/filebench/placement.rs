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
//! So a trial that would be kept is set aside, and run again, when the CPU link measured just
//! before or just after it is more than `FACTOR` times the shortest link this process has
//! measured (the nearest placement seen, by any target's trials). A run sets aside at most as
//! many trials as it keeps; after that, trials are kept whatever the placement, with their
//! link in the record. Where the placement never moves (bare metal, a pinned VM), nothing is
//! set aside.

use super::engine::CpuTimes;

/// How much longer than the nearest placement's link a trial's link may be. The two
/// placements seen here differ five- to eightfold, while one placement's probes vary by up to
/// about 1.6x (45-70 ns).
pub const FACTOR: f64 = 3.0;

/// Decides which trials are set aside, within a budget.
#[derive(Debug)]
pub struct PlacementGuard {
    /// Set-asides left.
    budget: usize,
}

impl PlacementGuard {
    /// A guard for a run of `trials` trials; `hold` false never sets a trial aside.
    pub fn new(hold: bool, trials: usize) -> Self {
        PlacementGuard {
            budget: if hold { trials } else { 0 },
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
            .fold(None, |w: Option<f64>, ns| Some(w.map_or(ns, |w| w.max(ns))))?;
        if worst <= FACTOR * best {
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
