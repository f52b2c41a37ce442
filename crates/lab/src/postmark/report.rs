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

use super::config::ReportFormat;
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

/// Postmark's "out of files!" message, which 1.51 prints instead of the report.
pub const OUT_OF_FILES: &str = "out of files!\n\
    For this workload, either increase the number of files or\n\
    decrease the number of transactions.\n";

/// The report `set report` chooses ([`format_verbose`] or [`format_terse`]), after
/// Postmark's "out of files!" message when the run ran out of files (Postmark then prints
/// no report; the counts of what was done are still given here).
pub fn format_report(r: &PostmarkResult, format: ReportFormat) -> String {
    let report = match format {
        ReportFormat::Verbose => format_verbose(r),
        ReportFormat::Terse => format_terse(r),
    };
    match r.out_of_files {
        true => format!("{OUT_OF_FILES}{report}"),
        false => report,
    }
}

/// 1.51's verbose report (`verbose_report`), line for line, with seconds to the
/// millisecond and rates as floats (Postmark: whole seconds, at least 1, and integer
/// rates), "deleted" the files deleted, each rate over its own phase (see the module doc).
pub fn format_verbose(r: &PostmarkResult) -> String {
    let (f, x, s) = (&r.files, &r.rates, &r.seconds);
    format!(
        "Time:\n\
         \t{:.3} seconds total\n\
         \t{:.3} seconds of transactions ({:.2} per second)\n\
         \nFiles:\n\
         \t{} created ({:.2} per second)\n\
         \t\tCreation alone: {} files ({:.2} per second)\n\
         \t\tMixed with transactions: {} files ({:.2} per second)\n\
         \t{} read ({:.2} per second)\n\
         \t{} appended ({:.2} per second)\n\
         \t{} deleted ({:.2} per second)\n\
         \t\tDeletion alone: {} files ({:.2} per second)\n\
         \t\tMixed with transactions: {} files ({:.2} per second)\n\
         \nData:\n\
         \t{} read ({} per second)\n\
         \t{} written ({} per second)\n",
        s.total,
        s.transactions,
        x.transactions,
        f.created,
        x.created,
        f.created_alone,
        x.created_alone,
        f.created_mixed,
        x.created_mixed,
        f.read,
        x.read,
        f.appended,
        x.appended,
        f.deleted,
        x.deleted,
        f.deleted_alone,
        x.deleted_alone,
        f.deleted_mixed,
        x.deleted_mixed,
        scalef(r.bytes_read as f64),
        scalef(x.bytes_read),
        scalef(r.bytes_written as f64),
        scalef(x.bytes_written),
    )
}

/// 1.51's terse report (`terse_report`): one line of 13 numbers, total seconds, seconds of
/// transactions, then transactions, created, created alone, created mixed, read, appended,
/// deleted, deleted alone, deleted mixed per second, and bytes read and written per second.
/// The seconds are given to the millisecond (Postmark: whole seconds).
pub fn format_terse(r: &PostmarkResult) -> String {
    let (x, s) = (&r.rates, &r.seconds);
    let rates = [
        x.transactions,
        x.created,
        x.created_alone,
        x.created_mixed,
        x.read,
        x.appended,
        x.deleted,
        x.deleted_alone,
        x.deleted_mixed,
        x.bytes_read,
        x.bytes_written,
    ];
    let rates: Vec<String> = rates.iter().map(|v| format!("{v:.2}")).collect();
    format!("{:.3} {:.3} {}\n", s.total, s.transactions, rates.join(" "))
}

/// Postmark's `scalef`: megabytes (2^20) above one, else kilobytes, and `%f bytes` for 0.
pub fn scalef(bytes: f64) -> String {
    const KIB: f64 = 1024.0;
    const MIB: f64 = KIB * KIB;
    if bytes / MIB > 1.0 {
        format!("{:.2} megabytes", bytes / MIB)
    } else if bytes / KIB != 0.0 {
        format!("{:.2} kilobytes", bytes / KIB)
    } else {
        format!("{bytes:.6} bytes")
    }
}
