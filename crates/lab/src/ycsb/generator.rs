//! YCSB's number generators (`site.ycsb.generator`), one type each, with YCSB's arithmetic.
//!
//! Randomness comes from a `fastrand::Rng` passed in by the caller (one per client thread,
//! seeded), where YCSB uses `ThreadLocalRandom`; `Rng::f64` is uniform on [0, 1) like Java's
//! `nextDouble`. The generators that carry state between threads in YCSB — the insert counters
//! — are shared here too ([`CounterGenerator`], [`AcknowledgedCounterGenerator`], atomics).
//! The others are cloned into every thread: their only mutable state is the Zipfian's running
//! zeta sum, which each clone extends on its own when the item count grows (YCSB shares one
//! behind a lock; the sums are identical, each thread just adds the new terms itself).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// YCSB's `ZipfianGenerator.ZIPFIAN_CONSTANT` (theta).
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// Items of the Zipfian inside YCSB's `ScrambledZipfianGenerator` (`ITEM_COUNT`).
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
/// YCSB's precomputed zeta of that Zipfian (`ScrambledZipfianGenerator.ZETAN`), so that no
/// one sums 10^10 terms at start-up.
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;
/// YCSB's FNV-1 64-bit offset basis (`Utils.FNV_OFFSET_BASIS_64`).
pub const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
/// YCSB's FNV-1 64-bit prime (`Utils.FNV_PRIME_64`).
pub const FNV_PRIME_64: u64 = 1_099_511_628_211;

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// YCSB's `Utils.fnvhash64`: FNV-1 over the eight bytes of `val`, low byte first, shifting
/// arithmetically as Java's `>>` does, then `Math.abs` of the signed result (which leaves
/// `i64::MIN` as it is, as Java does).
pub fn fnvhash64(val: i64) -> i64 {
    let mut val = val;
    let mut hash = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        let octet = (val & 0xff) as u64;
        val >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    (hash as i64).wrapping_abs()
}

/// YCSB's `CounterGenerator`: hands out `start`, `start + 1`, ... to any number of threads.
#[derive(Debug)]
pub struct CounterGenerator {
    next: AtomicU64,
}

impl CounterGenerator {
    /// A counter whose first value is `start`.
    pub fn new(start: u64) -> Self {
        CounterGenerator {
            next: AtomicU64::new(start),
        }
    }

    /// The next value (`getAndIncrement`).
    pub fn next_value(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }
}

/// Slots in the acknowledgement window (YCSB's `WINDOW_SIZE`, 2^20).
pub const ACK_WINDOW_SIZE: u64 = 1 << 20;
const ACK_WINDOW_MASK: u64 = ACK_WINDOW_SIZE - 1;

/// YCSB's `AcknowledgedCounterGenerator`: a counter whose [`last_value`] is the highest value
/// below which every value handed out has been acknowledged (inserted), so readers never pick
/// a key that a concurrent insert has not finished writing.
///
/// Like YCSB, acknowledgements go into a ring of 2^20 flags and whoever gets the lock moves
/// the limit over the contiguous run of set flags. One difference: after releasing the lock,
/// the mover looks once more at the slot after the new limit and goes round again if it was
/// set meanwhile. YCSB's `tryLock` lets an acknowledgement that races with the mover wait for
/// the next insert, so its limit can lag at the end of a run; this one never lags.
///
/// [`last_value`]: AcknowledgedCounterGenerator::last_value
#[derive(Debug)]
pub struct AcknowledgedCounterGenerator {
    counter: CounterGenerator,
    /// One past the limit: every value below it has been acknowledged (or preloaded).
    limit_end: AtomicU64,
    window: Box<[AtomicBool]>,
    mover: Mutex<()>,
}

impl AcknowledgedCounterGenerator {
    /// A counter handing out `start`, `start + 1`, ...; values below `start` count as
    /// acknowledged (the records loaded before the run).
    pub fn new(start: u64) -> Self {
        AcknowledgedCounterGenerator {
            counter: CounterGenerator::new(start),
            limit_end: AtomicU64::new(start),
            window: (0..ACK_WINDOW_SIZE)
                .map(|_| AtomicBool::new(false))
                .collect(),
            mover: Mutex::new(()),
        }
    }

    /// The next value to insert; acknowledge it once inserted.
    pub fn next_value(&self) -> u64 {
        self.counter.next_value()
    }

    /// The highest value up to which all values are acknowledged, or `None` when that is no
    /// value at all (a counter started at 0 with nothing acknowledged yet).
    pub fn last_value(&self) -> Option<u64> {
        self.limit_end.load(Ordering::SeqCst).checked_sub(1)
    }

    /// Marks `value` as inserted. Fails, as YCSB does, when more than 2^20 values are
    /// outstanding: the window would wrap over a value still waiting.
    ///
    /// YCSB only notices when the slot is still set; a value a whole window ahead of the
    /// limit would then land on the slot of a value not yet acknowledged and release it early,
    /// so the distance to the limit is checked here as well. Acknowledging a value twice
    /// before the limit passes it is caught by the same slot check.
    pub fn acknowledge(&self, value: u64) -> io::Result<()> {
        let limit_end = self.limit_end.load(Ordering::SeqCst);
        if value < limit_end {
            return Err(io::Error::other(format!(
                "insertion key number {value} acknowledged twice (limit is past it)"
            )));
        }
        let slot = &self.window[(value & ACK_WINDOW_MASK) as usize];
        if value - limit_end >= ACK_WINDOW_SIZE || slot.swap(true, Ordering::SeqCst) {
            return Err(io::Error::other(format!(
                "too many unacknowledged insertion keys (more than {ACK_WINDOW_SIZE} \
                 inserts outstanding at key number {value}, or {value} acknowledged twice)"
            )));
        }
        self.advance();
        Ok(())
    }

    /// Moves the limit over acknowledged values, unless another thread is doing it (that
    /// thread's final look at the next slot then sees our flag).
    fn advance(&self) {
        loop {
            let Ok(guard) = self.mover.try_lock() else {
                return;
            };
            let start = self.limit_end.load(Ordering::SeqCst);
            let mut end = start;
            // At most one full window: beyond it the flags belong to later values.
            while end - start < ACK_WINDOW_SIZE {
                let slot = &self.window[(end & ACK_WINDOW_MASK) as usize];
                if !slot.load(Ordering::SeqCst) {
                    break;
                }
                slot.store(false, Ordering::SeqCst);
                end += 1;
            }
            self.limit_end.store(end, Ordering::SeqCst);
            drop(guard);
            // An acknowledger of `end` sets its flag, then tries the lock. Either its flag is
            // seen here (all SeqCst), or its store comes after this load and so its try_lock
            // after our unlock: one of the two moves the limit over it. (Not caught by a
            // stress test: the window is a few instructions wide.)
            let next = &self.window[(end & ACK_WINDOW_MASK) as usize];
            if !next.load(Ordering::SeqCst) {
                return;
            }
        }
    }
}

/// The sum `zeta` of YCSB's `zetastatic(st, n, theta, initialsum)`: `initialsum` plus
/// `1 / (i + 1)^theta` for `i` in `st..n`, in that order (so the rounding matches YCSB's).
pub fn zeta_sum(st: u64, n: u64, theta: f64, initial_sum: f64) -> f64 {
    let mut sum = initial_sum;
    for i in st..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// YCSB's `ZipfianGenerator`: item `base + i` with probability about `1 / (i+1)^theta /
/// zeta(n)`, by Gray et al.'s approximate inversion ("Quickly generating billion-record
/// synthetic databases", SIGMOD 1994): ranks 0 and 1 are exact, the rest follow the
/// continuous approximation.
#[derive(Debug, Clone)]
pub struct ZipfianGenerator {
    /// Item count given at construction; YCSB keeps using it in `eta` after the count grows.
    items: u64,
    base: u64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    /// The item count `zetan` was summed up to.
    count_for_zeta: u64,
}

impl ZipfianGenerator {
    /// Items `min..=max` with YCSB's constant 0.99, computing zeta(max - min + 1).
    pub fn new(min: u64, max: u64) -> io::Result<Self> {
        let items = Self::item_count(min, max)?;
        Self::with_zetan(min, max, zeta_sum(0, items, ZIPFIAN_CONSTANT, 0.0))
    }

    /// Items `0..items` (YCSB's `ZipfianGenerator(long items)`).
    pub fn with_items(items: u64) -> io::Result<Self> {
        if items == 0 {
            return Err(invalid(
                "a zipfian distribution needs at least one item".into(),
            ));
        }
        Self::new(0, items - 1)
    }

    /// Items `min..=max` with a precomputed zeta(max - min + 1), as the scrambled Zipfian
    /// passes YCSB's constant for 10^10 items.
    pub fn with_zetan(min: u64, max: u64, zetan: f64) -> io::Result<Self> {
        let items = Self::item_count(min, max)?;
        let theta = ZIPFIAN_CONSTANT;
        let zeta2theta = zeta_sum(0, 2, theta, 0.0);
        Ok(ZipfianGenerator {
            items,
            base: min,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: Self::eta(items, theta, zeta2theta, zetan),
            count_for_zeta: items,
        })
    }

    fn item_count(min: u64, max: u64) -> io::Result<u64> {
        if max < min || max - min == u64::MAX {
            return Err(invalid(format!(
                "zipfian range {min}..={max} is empty or too large"
            )));
        }
        Ok(max - min + 1)
    }

    fn eta(items: u64, theta: f64, zeta2theta: f64, zetan: f64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan)
    }

    /// The zeta(n) the generator currently draws with.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// A value in `base..base + items` (YCSB's `nextValue`).
    pub fn next_value(&mut self, rng: &mut fastrand::Rng) -> u64 {
        self.next_long(self.items, rng)
    }

    /// A value for `item_count` items (YCSB's `nextLong`). When the count has grown since the
    /// last call, zeta is extended incrementally by the new terms; a smaller count keeps the
    /// larger zeta (YCSB's `allowitemcountdecrease = false`). Like YCSB, `eta` keeps the
    /// construction-time item count in its `2 / n` term.
    pub fn next_long(&mut self, item_count: u64, rng: &mut fastrand::Rng) -> u64 {
        if item_count > self.count_for_zeta {
            self.zetan = zeta_sum(self.count_for_zeta, item_count, self.theta, self.zetan);
            self.count_for_zeta = item_count;
            self.eta = Self::eta(self.items, self.theta, self.zeta2theta, self.zetan);
        }
        let u = rng.f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        // Java's (long) cast truncates toward zero, as `as u64` does for positive values.
        let rank = (item_count as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        self.base + rank
    }
}

/// YCSB's `ScrambledZipfianGenerator`: a Zipfian over 10^10 items, each drawn item hashed with
/// [`fnvhash64`] and taken modulo the item count, so popular items are spread over the key
/// space instead of clustered at its start. The modulo folds many of the 10^10 ranks onto one
/// item, which flattens the skew somewhat but leaves it strongly skewed.
#[derive(Debug, Clone)]
pub struct ScrambledZipfianGenerator {
    inner: ZipfianGenerator,
    min: u64,
    item_count: u64,
}

impl ScrambledZipfianGenerator {
    /// Items `min..=max`.
    pub fn new(min: u64, max: u64) -> io::Result<Self> {
        let item_count = ZipfianGenerator::item_count(min, max)?;
        // YCSB builds ZipfianGenerator(0, ITEM_COUNT, ...): 10^10 + 1 items with the zeta of
        // 10^10; kept as it is.
        let inner = ZipfianGenerator::with_zetan(0, SCRAMBLED_ITEM_COUNT, SCRAMBLED_ZETAN)?;
        Ok(ScrambledZipfianGenerator {
            inner,
            min,
            item_count,
        })
    }

    /// A value in `min..=max`.
    pub fn next_value(&mut self, rng: &mut fastrand::Rng) -> u64 {
        let z = self.inner.next_value(rng);
        // The inner ranks stay below 2^34, so the cast to Java's long is exact; the hash is
        // non-negative except for i64::MIN, whose bit pattern `as u64` keeps as 2^63.
        let hash = fnvhash64(z as i64) as u64;
        self.min + hash % self.item_count
    }
}

/// YCSB's `SkewedLatestGenerator`: `last - zipfian(last)` over the acknowledged insert limit,
/// favouring the most recently inserted keys (workload D). As in YCSB the result is never 0
/// and at most `last`: the Zipfian over `last` items returns at most `last - 1`.
#[derive(Debug, Clone)]
pub struct SkewedLatestGenerator {
    basis: Arc<AcknowledgedCounterGenerator>,
    zipfian: ZipfianGenerator,
}

impl SkewedLatestGenerator {
    /// Over `basis`, which must already hold at least two values (limit >= 1).
    pub fn new(basis: Arc<AcknowledgedCounterGenerator>) -> io::Result<Self> {
        let last = basis.last_value().unwrap_or(0);
        if last == 0 {
            return Err(invalid(
                "the latest distribution needs at least 2 records".into(),
            ));
        }
        let zipfian = ZipfianGenerator::with_items(last)?;
        Ok(SkewedLatestGenerator { basis, zipfian })
    }

    /// A value in `1..=last`, where `last` is the acknowledged limit now.
    pub fn next_value(&mut self, rng: &mut fastrand::Rng) -> u64 {
        // The limit only grows, and was >= 1 at construction.
        let max = self.basis.last_value().unwrap_or(0);
        max.saturating_sub(self.zipfian.next_long(max, rng))
    }
}

/// YCSB's `UniformLongGenerator`: every value in `lb..=ub` equally likely. YCSB takes
/// `abs(nextLong()) % interval`, whose modulo bias is below 2^-30 for any key space here;
/// fastrand draws without bias.
#[derive(Debug, Clone)]
pub struct UniformLongGenerator {
    lb: u64,
    ub: u64,
}

impl UniformLongGenerator {
    /// Values `lb..=ub`.
    pub fn new(lb: u64, ub: u64) -> io::Result<Self> {
        if ub < lb {
            return Err(invalid(format!("uniform range {lb}..={ub} is empty")));
        }
        Ok(UniformLongGenerator { lb, ub })
    }

    /// A value in `lb..=ub`.
    pub fn next_value(&self, rng: &mut fastrand::Rng) -> u64 {
        rng.u64(self.lb..=self.ub)
    }
}

/// YCSB's `HotspotIntegerGenerator`: a fraction `hot_op_fraction` of draws go uniformly to the
/// first `hot_set_fraction` of `lb..=ub`, the rest uniformly to the remainder.
#[derive(Debug, Clone)]
pub struct HotspotIntegerGenerator {
    lb: u64,
    hot_interval: u64,
    cold_interval: u64,
    hot_op_fraction: f64,
}

impl HotspotIntegerGenerator {
    /// YCSB replaces out-of-range fractions by 0 and swaps reversed bounds, with a warning,
    /// and then divides by zero when a set is empty; here each of these is an error.
    pub fn new(lb: u64, ub: u64, hot_set_fraction: f64, hot_op_fraction: f64) -> io::Result<Self> {
        for (name, f) in [("data", hot_set_fraction), ("operation", hot_op_fraction)] {
            if !(0.0..=1.0).contains(&f) {
                return Err(invalid(format!(
                    "hotspot {name} fraction {f} is not in 0..=1"
                )));
            }
        }
        if ub < lb || ub - lb == u64::MAX {
            return Err(invalid(format!(
                "hotspot range {lb}..={ub} is empty or too large"
            )));
        }
        let interval = ub - lb + 1;
        // YCSB casts to int: truncation toward zero.
        let hot_interval = (interval as f64 * hot_set_fraction) as u64;
        let cold_interval = interval - hot_interval;
        if hot_interval == 0 && hot_op_fraction > 0.0 {
            return Err(invalid(format!(
                "hotspot data fraction {hot_set_fraction} of {interval} keys is no key, \
                 but operation fraction {hot_op_fraction} goes there"
            )));
        }
        if cold_interval == 0 && hot_op_fraction < 1.0 {
            return Err(invalid(format!(
                "hotspot data fraction {hot_set_fraction} leaves no cold keys, \
                 but operation fraction {hot_op_fraction} leaves cold operations"
            )));
        }
        Ok(HotspotIntegerGenerator {
            lb,
            hot_interval,
            cold_interval,
            hot_op_fraction,
        })
    }

    /// A value in `lb..=ub`.
    pub fn next_value(&self, rng: &mut fastrand::Rng) -> u64 {
        if rng.f64() < self.hot_op_fraction {
            self.lb + rng.u64(0..self.hot_interval)
        } else {
            self.lb + self.hot_interval + rng.u64(0..self.cold_interval)
        }
    }
}

/// YCSB's `DiscreteGenerator`: picks one of the values with probability proportional to its
/// weight, with one uniform double walked through the normalised weights in insertion order.
#[derive(Debug, Clone)]
pub struct DiscreteGenerator<T> {
    values: Vec<(f64, T)>,
    sum: f64,
}

impl<T: Copy + std::fmt::Debug> DiscreteGenerator<T> {
    /// From (weight, value) pairs; weights must be finite and non-negative with a positive
    /// sum. Zero weights are dropped, as CoreWorkload only adds positive proportions.
    pub fn new(weighted: impl IntoIterator<Item = (f64, T)>) -> io::Result<Self> {
        let mut values = Vec::new();
        for (weight, value) in weighted {
            if !weight.is_finite() || weight < 0.0 {
                return Err(invalid(format!("weight {weight} of {value:?} is not >= 0")));
            }
            if weight > 0.0 {
                values.push((weight, value));
            }
        }
        let sum: f64 = values.iter().map(|(w, _)| w).sum();
        if values.is_empty() || !sum.is_finite() {
            return Err(invalid("no positive finite weights to choose from".into()));
        }
        Ok(DiscreteGenerator { values, sum })
    }

    /// One value.
    pub fn next_value(&self, rng: &mut fastrand::Rng) -> T {
        let mut val = rng.f64();
        for (weight, value) in &self.values {
            let pw = weight / self.sum;
            if val < pw {
                return *value;
            }
            val -= pw;
        }
        // Rounding can leave `val` a hair above the last normalised weight (YCSB asserts
        // here); the last value is the one whose interval it lies at the end of.
        self.values[self.values.len() - 1].1
    }
}

/// YCSB's `NumberGenerator`s that CoreWorkload draws keys, field lengths and scan lengths
/// from, behind one type.
#[derive(Debug, Clone)]
pub enum NumberGenerator {
    /// `ConstantIntegerGenerator`.
    Constant(u64),
    Uniform(UniformLongGenerator),
    Zipfian(ZipfianGenerator),
    ScrambledZipfian(ScrambledZipfianGenerator),
    SkewedLatest(SkewedLatestGenerator),
    Hotspot(HotspotIntegerGenerator),
}

impl NumberGenerator {
    /// The next value.
    pub fn next_value(&mut self, rng: &mut fastrand::Rng) -> u64 {
        match self {
            NumberGenerator::Constant(v) => *v,
            NumberGenerator::Uniform(g) => g.next_value(rng),
            NumberGenerator::Zipfian(g) => g.next_value(rng),
            NumberGenerator::ScrambledZipfian(g) => g.next_value(rng),
            NumberGenerator::SkewedLatest(g) => g.next_value(rng),
            NumberGenerator::Hotspot(g) => g.next_value(rng),
        }
    }
}
