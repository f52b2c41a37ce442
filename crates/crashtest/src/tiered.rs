//! Crash checking of tiered images (an SSD tier under PM; docs/TIER.md, GUARANTEES.md §8c).
//!
//! The SSD is part of the crash state: it is an in-memory SSD whose writes the recorder sees
//! in order with the PM's stores, flushes and fences (`Event::SsdWrite`). A write to the SSD
//! is durable when it returns (`pwrite` + `fdatasync`), so the SSD of a crash point is the
//! populated SSD with every SSD write recorded before that point applied; its PM images are
//! the tracer's. Images are mounted on that SSD and checked as on a plain image.
//!
//! The workloads start from cold files (populated, flushed, evicted: every block on the SSD
//! only) and run with watermarks so low that every write flushes all dirty blocks, so the
//! crash points cover cold reads and their caching, writes to cold and clean blocks, flushes
//! and entry publishes, truncates and unlinks dropping entries, and recovery's stale rules.

use std::sync::Arc;

use nvmfs::layout::tier::Watermarks;
use nvmfs::media::Pm;
use nvmfs::tier::ssd::Ssd;
use nvmfs::{Fs, MountOptions, TierFormat};

use crate::ace::{self, Op};
use crate::oracle::{self, Outcome, RecoveryDepth};
use crate::trace::{crash_points_with, CrashPoint, Event, Recorder, Tear};

/// PM of a tiered crash image (the PM tier).
pub const PM_BYTES: u64 = 1 << 20;
/// Its SSD: 15 data extents after the header extent.
pub const SSD_BYTES: u64 = 8 << 20;

/// The tier of the crash images: flush as soon as one block is dirty.
fn tier_format() -> TierFormat {
    TierFormat {
        ssd: None,
        ssd_size: Some(SSD_BYTES),
        marks: Watermarks {
            dirty_high: 2,
            dirty_low: 1,
            ..Default::default()
        },
    }
}

/// ACE's single operations that a tiered image supports (direct maps are refused there).
pub fn seq1() -> Vec<Op> {
    ace::seq1()
        .into_iter()
        .filter(|op| !matches!(op, Op::DirectStore(..)))
        .collect()
}

/// Checks `ops` on a tiered image whose populated files start cold.
pub fn check(ops: &[Op], depth: RecoveryDepth, tear: Tear) -> Outcome {
    let rec = Arc::new(Recorder::default());
    let fs = match setup(&rec) {
        Ok(fs) => fs,
        Err(e) => {
            return Outcome {
                violations: vec![format!("setup failed: {e}")],
                ..Default::default()
            }
        }
    };
    // The oracle's first read of the tree caches the files in PM; they are evicted again
    // before the recording starts, so the operations meet cold blocks.
    let ssd_at_start = std::cell::RefCell::new(Vec::new());
    let prepare = |fs: &Fs| {
        fs.tier_evict_all()?;
        *ssd_at_start.borrow_mut() = fs.tier_ssd_snapshot().expect("an in-memory SSD");
        Ok(())
    };
    let (base, states, setup_violations) = oracle::record_ops(&fs, &rec, ops, &prepare);
    let mut ssd = ssd_at_start.into_inner();
    let events = rec.stop();
    let (points, lost) = crash_points_with(&base, &events, tear);
    // Points in trace order, grouped by the SSD they see (a group ends at an SSD write). A
    // group's images are deduplicated among themselves only: the same PM bytes on another
    // SSD are another crash state.
    let mut out = Outcome::default();
    let mut first = Some((setup_violations, lost));
    let mut applied = 0;
    let mut start = 0;
    while start < points.len() {
        applied = apply_ssd_writes(&events, applied, points[start].fence, &mut ssd);
        let end = start
            + points[start..]
                .iter()
                .take_while(|p| !ssd_write_between(&events, applied, p.fence))
                .count();
        let group: &[CrashPoint] = &points[start..end];
        let image = ssd.clone();
        let mount = move |pm: Pm| {
            Fs::mount_pm_with_ssd(
                pm,
                &MountOptions::default(),
                Ssd::memory_from(image.clone()),
            )
        };
        let (setup, lost) = first.take().unwrap_or_default();
        let o = oracle::check_points(ops, depth, &states, setup, group, lost, &|_| &mount);
        out.images += o.images;
        out.violations.extend(o.violations);
        start = end;
    }
    out.fences = points.len();
    if let Some((setup, lost)) = first {
        out.violations.extend(setup);
        out.violations.extend(lost);
    }
    out
}

fn setup(rec: &Arc<Recorder>) -> std::io::Result<Fs> {
    let mut pm = Pm::in_memory(PM_BYTES);
    pm.set_trace(Some(rec.clone()));
    let mut ssd = Ssd::memory(SSD_BYTES);
    ssd.set_trace(Some(rec.clone()));
    let fs = Fs::format_pm_tiered(pm, &tier_format(), ssd)?;
    ace::populate(&fs)?;
    Ok(fs)
}

/// Applies the SSD writes among `events[from..to]` to `ssd`; returns `to`.
fn apply_ssd_writes(events: &[Event], from: usize, to: usize, ssd: &mut [u8]) -> usize {
    for e in &events[from.min(to)..to] {
        if let Event::SsdWrite { off, data } = e {
            ssd[*off as usize..*off as usize + data.len()].copy_from_slice(data);
        }
    }
    to.max(from)
}

fn ssd_write_between(events: &[Event], from: usize, to: usize) -> bool {
    events[from.min(to)..to]
        .iter()
        .any(|e| matches!(e, Event::SsdWrite { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_states_see_the_ssd_as_written_up_to_them() {
        let mut ssd = vec![0u8; 8];
        let ev = vec![
            Event::SsdWrite {
                off: 0,
                data: vec![1, 1],
            },
            Event::Fence,
            Event::SsdWrite {
                off: 4,
                data: vec![2],
            },
            Event::Fence,
        ];
        assert_eq!(apply_ssd_writes(&ev, 0, 1, &mut ssd), 1);
        assert_eq!(ssd, [1, 1, 0, 0, 0, 0, 0, 0]);
        assert!(!ssd_write_between(&ev, 1, 1));
        assert!(ssd_write_between(&ev, 1, 3));
        apply_ssd_writes(&ev, 1, 3, &mut ssd);
        assert_eq!(ssd, [1, 1, 0, 0, 2, 0, 0, 0]);
    }
}
