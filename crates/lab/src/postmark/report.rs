//! What a Postmark run reports: the counts and rates of 1.51's report, from
//! our clock.
//!
//! Postmark times with `time()` (whole seconds, at least 1 per interval) and
//! divides with integers in its verbose report; we time each phase with a
//! monotonic clock in nanoseconds and give the same ratios as floats. The
//! intervals are Postmark's: "total" runs from the first create to the last
//! delete of the final phase (subdirectory creation and removal are outside
//! it), "transactions" is the transaction phase, "creation alone" the creation
//! phase and "deletion alone" the final deletion.
//!
//! 1.51's reports print the number of files *created* where they mean
//! deleted, and its terse report divides "deletion alone" by the creation
//! phase's time (fixed in 1.53 and 1.52; Debian ships 1.53, whose banner still
//! says 1.51). After a complete run every created file has been deleted, so
//! the counts agree; here `deleted` is the number deleted and each rate has
//! its own phase's time.

use super::engine::Counts;
use crate::filebench::stats::Latency;
use serde::Serialize;

/// A Postmark run's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct PostmarkResult {
    /// Transactions done: the configured number unless [`Self::out_of_files`].
    pub transactions: u64,
    /// Stopped early because every file had been deleted (Postmark prints "out
    /// of files!" and no report; the files left are still deleted).
    pub out_of_files: bool,
    pub files: FileCounts,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub seconds: PhaseSeconds,
    pub rates: Rates,
    /// Per transaction (its read or append plus its create or delete).
    pub transaction_latency_ns: Latency,
}

/// The "Files:" section of the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FileCounts {
    pub created: u64,
    /// "Creation alone": the creation phase.
    pub created_alone: u64,
    /// "Mixed with transactions".
    pub created_mixed: u64,
    pub read: u64,
    pub appended: u64,
    pub deleted: u64,
    /// "Deletion alone": the final deletion phase.
    pub deleted_alone: u64,
    /// "Mixed with transactions".
    pub deleted_mixed: u64,
}

impl FileCounts {
    /// From the counters after the creation, transaction and deletion phases.
    pub fn of(created: &Counts, transacted: &Counts, end: &Counts) -> Self {
        FileCounts {
            created: end.created,
            created_alone: created.created,
            created_mixed: transacted.created - created.created,
            read: end.read,
            appended: end.appended,
            deleted: end.deleted,
            deleted_alone: end.deleted - transacted.deleted,
            deleted_mixed: transacted.deleted - created.deleted,
        }
    }
}

/// Seconds spent in each phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PhaseSeconds {
    pub subdirectories_created: f64,
    pub creation: f64,
    pub transactions: f64,
    pub deletion: f64,
    pub subdirectories_deleted: f64,
    /// Creation + transactions + deletion (Postmark's "seconds total").
    pub total: f64,
}

/// The rates of the report, per second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Rates {
    pub transactions: f64,
    /// Files created over the total time.
    pub created: f64,
    /// Creation alone over the creation phase.
    pub created_alone: f64,
    /// Creations mixed with transactions over the transaction phase.
    pub created_mixed: f64,
    pub read: f64,
    pub appended: f64,
    /// Files deleted over the total time.
    pub deleted: f64,
    /// Deletion alone over the deletion phase.
    pub deleted_alone: f64,
    pub deleted_mixed: f64,
    /// Bytes over the total time (the report's "Data:" section).
    pub bytes_read: f64,
    pub bytes_written: f64,
}

impl Rates {
    pub fn of(transactions: u64, f: &FileCounts, bytes: (u64, u64), s: &PhaseSeconds) -> Self {
        Rates {
            transactions: per_second(transactions, s.transactions),
            created: per_second(f.created, s.total),
            created_alone: per_second(f.created_alone, s.creation),
            created_mixed: per_second(f.created_mixed, s.transactions),
            read: per_second(f.read, s.transactions),
            appended: per_second(f.appended, s.transactions),
            deleted: per_second(f.deleted, s.total),
            deleted_alone: per_second(f.deleted_alone, s.deletion),
            deleted_mixed: per_second(f.deleted_mixed, s.transactions),
            bytes_read: per_second(bytes.0, s.total),
            bytes_written: per_second(bytes.1, s.total),
        }
    }
}

/// `count / seconds`, with an interval of at least 1 ns (Postmark's
/// `diff_time` makes it at least 1 s, its clock's resolution).
pub fn per_second(count: u64, seconds: f64) -> f64 {
    count as f64 / seconds.max(1e-9)
}
