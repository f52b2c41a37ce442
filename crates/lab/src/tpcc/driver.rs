//! Terminals as threads running the transaction mix, and the run's results.
//!
//! Each terminal is a thread with its own connection, a fixed home warehouse and district
//! and its own random stream. It draws transaction types from a shuffled deck of 100
//! cards, 45 New-Order, 43 Payment and 4 each of Order-Status, Delivery and Stock-Level,
//! reshuffled when used up: clause 5.2.4.2 allows a deck, and 100 cards give the mix of
//! clause 5.2.3 exactly over every 100 transactions of a terminal (a weighted draw only
//! approaches it). There are no keying or think times (see the module doc of `tpcc`).
//!
//! A transaction that fails with SQLITE_BUSY (the busy timeout ran out) is rolled back
//! and retried with the same input; retries are counted apart and its latency spans
//! every attempt. Any other error stops the run and is returned.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread::{self, ScopedJoinHandle};
use std::time::{Duration, Instant};

use fastrand::Rng;
use hdrhistogram::Histogram;
use rusqlite::Connection;
use serde::Serialize;

use super::random::NuConstants;
use super::schema::Meta;
use super::txn::{Ctx, Home, Input, Outcome, TxnKind};
use super::{Scale, TpccConfig, DISTRICTS};
use crate::db::sqlite::is_busy;

/// The deck: how many of every 100 transactions are of each type (clause 5.2.3).
const DECK: [(TxnKind, usize); 5] = [
    (TxnKind::NewOrder, 45),
    (TxnKind::Payment, 43),
    (TxnKind::OrderStatus, 4),
    (TxnKind::Delivery, 4),
    (TxnKind::StockLevel, 4),
];

/// How often the supervising thread polls `interrupted()` and the clock.
const POLL: Duration = Duration::from_millis(10);

/// Consecutive SQLITE_BUSY failures of one transaction (each after the busy timeout)
/// after which the database is taken to be stuck (another process holding a lock).
const MAX_BUSY_ATTEMPTS: u32 = 50;

/// Enough prepared statements for every transaction profile (about 45 distinct texts).
const STATEMENT_CACHE: usize = 64;

/// Latency percentiles of one transaction type, in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latency {
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

/// The results of one transaction type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypeResult {
    pub kind: TxnKind,
    pub name: &'static str,
    /// Completed transactions: committed, plus (New-Order) rolled back.
    pub count: u64,
    /// Share of all completed transactions, in percent.
    pub percent: f64,
    /// New-Orders rolled back on the unused item id (0 for the others).
    pub rollbacks: u64,
    /// Attempts that failed with SQLITE_BUSY and were retried.
    pub busy_retries: u64,
    pub latency: Latency,
}

/// The results of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TpccResult {
    pub warehouses: u32,
    pub terminals: usize,
    pub scale: Scale,
    /// Whether the database's cardinalities are below the specification's.
    pub scaled: bool,
    pub seed: u64,
    /// SQLite's version and settings.
    pub sqlite: String,
    /// The run's NURand constants.
    pub constants: NuConstants,
    pub elapsed_secs: f64,
    /// Completed transactions of every type.
    pub transactions: u64,
    /// Committed New-Orders per minute.
    pub tpmc: f64,
    /// Completed transactions of every type per minute.
    pub total_tpm: f64,
    pub rollbacks: u64,
    pub busy_retries: u64,
    /// Districts a Delivery found without undelivered orders.
    pub delivery_skipped_districts: u64,
    /// The run stopped because `interrupted()` said so.
    pub interrupted: bool,
    /// In the order of [`TxnKind::ALL`].
    pub per_type: Vec<TypeResult>,
}

/// Counters and latencies of one transaction type at one terminal.
struct Tally {
    count: u64,
    rollbacks: u64,
    busy_retries: u64,
    latency_us: Histogram<u64>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            count: 0,
            rollbacks: 0,
            busy_retries: 0,
            // Up to an hour, 3 significant digits.
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("constant histogram bounds are valid"),
        }
    }

    fn merge(&mut self, other: &Tally) {
        self.count += other.count;
        self.rollbacks += other.rollbacks;
        self.busy_retries += other.busy_retries;
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms with equal bounds merge");
    }
}

/// What one terminal measured.
struct TerminalStats {
    per_kind: [Tally; 5],
    skipped_districts: u64,
    finished: Instant,
}

/// State every terminal shares.
struct Shared {
    ctx: Ctx,
    stop: AtomicBool,
    /// Transactions left to start when the run has a transaction limit.
    tickets: Option<AtomicU64>,
}

impl Shared {
    /// Whether the terminal may start another transaction (and takes a ticket for it).
    fn may_start(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        match &self.tickets {
            None => true,
            Some(left) => left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
        }
    }
}

/// A shuffled deck of transaction types.
struct Deck(Vec<TxnKind>);

impl Deck {
    fn draw(&mut self, rng: &mut Rng) -> TxnKind {
        if self.0.is_empty() {
            for (kind, cards) in DECK {
                self.0.extend(std::iter::repeat_n(kind, cards));
            }
            rng.shuffle(&mut self.0);
        }
        self.0.pop().expect("a refilled deck has cards")
    }
}

/// Terminal `i`'s home: warehouses round-robin, then districts, so the default ten
/// terminals per warehouse cover every (warehouse, district) once.
fn home_of(i: usize, warehouses: u32) -> Home {
    let w = warehouses as usize;
    Home {
        w_id: (i % w) as u32 + 1,
        d_id: ((i / w) % DISTRICTS as usize) as u32 + 1,
    }
}

/// Checks that the database was fully populated with the configuration's dimensions and
/// returns its load parameters.
fn populated_meta(path: &Path, config: &TpccConfig) -> io::Result<Meta> {
    let conn = config.sqlite.open(path)?;
    let meta = Meta::read(&conn)?;
    let mismatch = |what: String| Err(io::Error::new(io::ErrorKind::InvalidInput, what));
    if !meta.populated {
        return mismatch(format!(
            "{}: the TPC-C population did not finish",
            path.display()
        ));
    }
    if meta.warehouses != config.warehouses || meta.scale != config.scale {
        return mismatch(format!(
            "{} holds {} warehouses at {:?}, the run asks for {} at {:?}",
            path.display(),
            meta.warehouses,
            meta.scale,
            config.warehouses,
            config.scale
        ));
    }
    Ok(meta)
}

/// Runs the terminals (see the module doc) and gathers their results.
pub fn run(
    path: &Path,
    config: &TpccConfig,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<TpccResult> {
    let meta = populated_meta(path, config)?;
    let mut rng = Rng::with_seed(config.seed);
    let shared = Shared {
        ctx: Ctx {
            warehouses: meta.warehouses,
            scale: meta.scale,
            c: NuConstants::for_run(&mut rng, meta.c_last_load),
        },
        stop: AtomicBool::new(false),
        tickets: config.max_transactions.map(AtomicU64::new),
    };
    let n = config.terminal_count();
    let barrier = Barrier::new(n + 1);
    let (start, was_interrupted, outcomes) = thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (shared, barrier) = (&shared, &barrier);
                let seed = rng.u64(..);
                scope.spawn(move || {
                    terminal(
                        path,
                        config,
                        shared,
                        barrier,
                        home_of(i, meta.warehouses),
                        seed,
                    )
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let was_interrupted = supervise(&handles, start, config, &shared.stop, interrupted);
        let outcomes: Vec<io::Result<TerminalStats>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect();
        (start, was_interrupted, outcomes)
    });
    let stats = outcomes.into_iter().collect::<io::Result<Vec<_>>>()?;
    Ok(summarize(
        config,
        &shared.ctx,
        start,
        was_interrupted,
        &stats,
    ))
}

/// Waits for the terminals, setting the stop flag at the deadline or on interruption.
/// Returns whether the run was interrupted.
fn supervise(
    handles: &[ScopedJoinHandle<'_, io::Result<TerminalStats>>],
    start: Instant,
    config: &TpccConfig,
    stop: &AtomicBool,
    interrupted: &dyn Fn() -> bool,
) -> bool {
    let mut was_interrupted = false;
    while !handles.iter().all(|h| h.is_finished()) {
        if !stop.load(Ordering::Relaxed) && interrupted() {
            was_interrupted = true;
            stop.store(true, Ordering::Relaxed);
        }
        let mut nap = POLL;
        if let Some(limit) = config.duration {
            let left = limit.saturating_sub(start.elapsed());
            if left.is_zero() {
                stop.store(true, Ordering::Relaxed);
            }
            nap = nap.min(left.max(Duration::from_millis(1)));
        }
        thread::sleep(nap);
    }
    was_interrupted
}

/// One terminal: connects, waits for the others, then runs transactions until told to
/// stop. An error stops every terminal.
fn terminal(
    path: &Path,
    config: &TpccConfig,
    shared: &Shared,
    barrier: &Barrier,
    home: Home,
    seed: u64,
) -> io::Result<TerminalStats> {
    let conn = config.sqlite.open(path);
    // Every terminal reaches the barrier, connected or not, so none waits forever.
    barrier.wait();
    let result = conn.and_then(|mut conn| {
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        terminal_loop(&mut conn, shared, home, &mut Rng::with_seed(seed))
    });
    if result.is_err() {
        shared.stop.store(true, Ordering::Relaxed);
    }
    result
}

fn terminal_loop(
    conn: &mut Connection,
    shared: &Shared,
    home: Home,
    rng: &mut Rng,
) -> io::Result<TerminalStats> {
    let mut stats = TerminalStats {
        per_kind: std::array::from_fn(|_| Tally::new()),
        skipped_districts: 0,
        finished: Instant::now(),
    };
    let mut deck = Deck(Vec::new());
    while shared.may_start() {
        let kind = deck.draw(rng);
        let input = Input::generate(kind, rng, &shared.ctx, home);
        let started = Instant::now();
        let tally = &mut stats.per_kind[kind.index()];
        let Some(outcome) = execute_with_retry(conn, &input, kind, shared, tally)? else {
            break;
        };
        tally.count += 1;
        tally
            .latency_us
            .saturating_record(started.elapsed().as_micros().try_into().unwrap_or(u64::MAX));
        match outcome {
            Outcome::Committed => {}
            Outcome::RolledBack => tally.rollbacks += 1,
            Outcome::Delivered { skipped } => stats.skipped_districts += u64::from(skipped),
        }
    }
    stats.finished = Instant::now();
    Ok(stats)
}

/// Runs `input`, retrying on SQLITE_BUSY; `None` when the run stopped while retrying.
fn execute_with_retry(
    conn: &mut Connection,
    input: &Input,
    kind: TxnKind,
    shared: &Shared,
    tally: &mut Tally,
) -> io::Result<Option<Outcome>> {
    let mut attempts = 0;
    loop {
        match input.execute(conn) {
            Ok(outcome) => return Ok(Some(outcome)),
            Err(e) if is_busy(&e) => {
                tally.busy_retries += 1;
                attempts += 1;
                if shared.stop.load(Ordering::Relaxed) {
                    return Ok(None);
                }
                if attempts > MAX_BUSY_ATTEMPTS {
                    return Err(io::Error::new(
                        io::ErrorKind::ResourceBusy,
                        format!("{} still busy after {attempts} attempts: {e}", kind.name()),
                    ));
                }
            }
            Err(e) => {
                return Err(io::Error::other(format!(
                    "{} failed: {e} (input {input:?})",
                    kind.name()
                )))
            }
        }
    }
}

fn latency(h: &Histogram<u64>) -> Latency {
    Latency {
        p50_us: h.value_at_quantile(0.50),
        p95_us: h.value_at_quantile(0.95),
        p99_us: h.value_at_quantile(0.99),
        max_us: h.max(),
        mean_us: h.mean(),
    }
}

fn summarize(
    config: &TpccConfig,
    ctx: &Ctx,
    start: Instant,
    was_interrupted: bool,
    stats: &[TerminalStats],
) -> TpccResult {
    let mut totals: [Tally; 5] = std::array::from_fn(|_| Tally::new());
    for s in stats {
        for (total, t) in totals.iter_mut().zip(&s.per_kind) {
            total.merge(t);
        }
    }
    let end = stats.iter().map(|s| s.finished).max().unwrap_or(start);
    let elapsed = end.saturating_duration_since(start).as_secs_f64();
    let per_minute = |n: u64| {
        if elapsed > 0.0 {
            n as f64 * 60.0 / elapsed
        } else {
            0.0
        }
    };
    let transactions: u64 = totals.iter().map(|t| t.count).sum();
    let new_order = &totals[TxnKind::NewOrder.index()];
    TpccResult {
        warehouses: ctx.warehouses,
        terminals: stats.len(),
        scale: ctx.scale,
        scaled: !ctx.scale.is_spec(),
        seed: config.seed,
        sqlite: config.sqlite.describe(),
        constants: ctx.c,
        elapsed_secs: elapsed,
        transactions,
        tpmc: per_minute(new_order.count - new_order.rollbacks),
        total_tpm: per_minute(transactions),
        rollbacks: totals.iter().map(|t| t.rollbacks).sum(),
        busy_retries: totals.iter().map(|t| t.busy_retries).sum(),
        delivery_skipped_districts: stats.iter().map(|s| s.skipped_districts).sum(),
        interrupted: was_interrupted,
        per_type: TxnKind::ALL
            .iter()
            .zip(&totals)
            .map(|(&kind, t)| TypeResult {
                kind,
                name: kind.name(),
                count: t.count,
                percent: if transactions > 0 {
                    100.0 * t.count as f64 / transactions as f64
                } else {
                    0.0
                },
                rollbacks: t.rollbacks,
                busy_retries: t.busy_retries,
                latency: latency(&t.latency_us),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deck_gives_the_mix_per_hundred() {
        let mut rng = Rng::with_seed(1);
        let mut deck = Deck(Vec::new());
        let mut counts = [0usize; 5];
        for _ in 0..300 {
            counts[deck.draw(&mut rng).index()] += 1;
        }
        assert_eq!(counts, [135, 129, 12, 12, 12]);
    }

    #[test]
    fn default_terminals_cover_every_district_once() {
        let homes: std::collections::HashSet<(u32, u32)> = (0..30)
            .map(|i| home_of(i, 3))
            .map(|h| (h.w_id, h.d_id))
            .collect();
        assert_eq!(homes.len(), 30);
        assert!(homes
            .iter()
            .all(|&(w, d)| (1..=3).contains(&w) && (1..=10).contains(&d)));
    }
}
