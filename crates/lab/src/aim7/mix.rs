//! AIM7's workfile: weighted subtests, turned into each task's list of jobs as
//! `multitask.c`'s `runtap` does it, and drawn from in random order without replacement.

use super::rand::AimRand;
use super::subtests::Subtest;
use serde::Serialize;

/// The most lines a workfile may have (`WORKLD`).
pub const MIX_LINES_MAX: usize = 100;

/// One workfile line: `<weight> <test name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MixEntry {
    pub subtest: Subtest,
    pub weight: u32,
}

/// The disk mix: the nine disk subtests of disk1.c with equal weights.
pub fn disk_mix() -> Vec<MixEntry> {
    Subtest::ALL
        .into_iter()
        .map(|subtest| MixEntry { subtest, weight: 1 })
        .collect()
}

/// Parses `name[=weight],...` (weight 1 when left out), e.g. `disk_rr=2,disk_cp`.
pub fn parse_mix(text: &str) -> Result<Vec<MixEntry>, String> {
    text.split(',')
        .map(|item| {
            let (name, weight) = match item.trim().split_once('=') {
                Some((n, w)) => (
                    n.trim(),
                    w.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("mix entry {item:?}: weight {w:?} is not a number"))?,
                ),
                None => (item.trim(), 1),
            };
            Ok(MixEntry {
                subtest: Subtest::parse(name)?,
                weight,
            })
        })
        .collect()
}

/// Checks a mix: 1 ..= 100 lines, every weight 1 ..= 1,000,000.
pub fn validate_mix(mix: &[MixEntry]) -> Result<(), String> {
    if mix.is_empty() || mix.len() > MIX_LINES_MAX {
        return Err(format!(
            "the mix needs 1..={MIX_LINES_MAX} entries, got {}",
            mix.len()
        ));
    }
    match mix.iter().find(|e| !(1..=1_000_000).contains(&e.weight)) {
        Some(e) => Err(format!(
            "{}: weight {} must be 1..=1000000",
            e.subtest.name(),
            e.weight
        )),
        None => Ok(()),
    }
}

/// How many times each line runs in one task's list (`wlist`): its share of `jobs_per_task`
/// (`LOADNUM`), rounded half up, and at least once when its share is not zero.
pub fn job_counts(mix: &[MixEntry], jobs_per_task: u32) -> Vec<u32> {
    let total: u64 = mix.iter().map(|e| u64::from(e.weight)).sum();
    mix.iter()
        .map(|e| {
            let load = e.weight as f64 / total as f64 * f64::from(jobs_per_task);
            let whole = load as u32;
            let frac = load - f64::from(whole);
            if frac >= 0.5 {
                whole + 1
            } else if frac != 0.0 && whole == 0 {
                1
            } else {
                whole
            }
        })
        .collect()
}

/// The next job of a task's list (an index into the mix), taken out of `left`: a line drawn
/// as `aim_rand() % lines`; when that line has run its count, one drawn uniformly among the
/// lines with jobs left (`reduce_list`). `None` when the list is done.
pub fn next_job(left: &mut [u32], rng: &mut AimRand) -> Option<usize> {
    if left.iter().all(|&c| c == 0) {
        return None;
    }
    let mut k = rng.below(left.len() as u32) as usize;
    if left[k] == 0 {
        let open: Vec<usize> = (0..left.len()).filter(|&i| left[i] > 0).collect();
        k = open[rng.below(open.len() as u32) as usize];
    }
    left[k] -= 1;
    Some(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_round_half_up_and_keep_every_line() {
        let mix = |w: &[u32]| -> Vec<MixEntry> {
            w.iter()
                .map(|&weight| MixEntry {
                    subtest: Subtest::DiskRr,
                    weight,
                })
                .collect()
        };
        // 100 / 9 = 11.1 each.
        assert_eq!(job_counts(&disk_mix(), 100), vec![11; 9]);
        // 1/1000 of 100 = 0.1: at least once; 999/1000 of 100 = 99.9: rounds up.
        assert_eq!(job_counts(&mix(&[1, 999]), 100), vec![1, 100]);
        // Shares of 2.5 round up.
        assert_eq!(job_counts(&mix(&[1, 1, 2]), 10), vec![3, 3, 5]);
    }

    #[test]
    fn a_list_runs_every_job_exactly_its_count() {
        let mut left = vec![3, 0, 5, 1];
        let mut rng = AimRand::new(4);
        let mut seen = [0u32; 4];
        while let Some(k) = next_job(&mut left, &mut rng) {
            seen[k] += 1;
        }
        assert_eq!(seen, [3, 0, 5, 1]);
        assert_eq!(left, [0, 0, 0, 0]);
    }

    #[test]
    fn mixes_parse_and_bad_ones_are_refused() {
        let m = parse_mix("disk_rr=2, sync_disk_update").unwrap();
        assert_eq!(m[0].weight, 2);
        assert_eq!(m[1].subtest, Subtest::SyncDiskUpdate);
        assert_eq!(m[1].weight, 1);
        assert!(parse_mix("disk_rr=x").unwrap_err().contains("weight"));
        assert!(parse_mix("disk_zz").unwrap_err().contains("unknown"));
        assert!(validate_mix(&[]).is_err());
        let zero = [MixEntry {
            subtest: Subtest::DiskCp,
            weight: 0,
        }];
        assert!(validate_mix(&zero).unwrap_err().contains("disk_cp"));
        assert!(validate_mix(&disk_mix()).is_ok());
    }
}
