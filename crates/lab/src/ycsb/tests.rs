//! Tests of the generators against their definitions, of the workload against YCSB's key and
//! value formats and operation mixes, and of the runner's phases, throttle and stopping.
//! Every random test uses a fixed seed, so a failure repeats.

use super::client::*;
use super::db::{KvSession, KvStore};
use super::generator::*;
use super::measure::OpKind;
use super::memory::MemoryStore;
use super::runner::{self, PhaseResult, RunOptions};
use super::workload::*;
use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const THETA: f64 = ZIPFIAN_CONSTANT;

/// How often each of `0..n` came out of `draw` in `samples` draws.
fn histogram(n: usize, samples: usize, mut draw: impl FnMut() -> u64) -> Vec<u64> {
    let mut counts = vec![0u64; n];
    for _ in 0..samples {
        let v = draw() as usize;
        assert!(v < n, "draw {v} outside 0..{n}");
        counts[v] += 1;
    }
    counts
}

/// Pearson's chi-square of `observed` counts against `expected` probabilities.
fn chi_square(observed: &[u64], expected: &[f64], samples: usize) -> f64 {
    observed
        .iter()
        .zip(expected)
        .map(|(&o, &p)| {
            let e = p * samples as f64;
            (o as f64 - e).powi(2) / e
        })
        .sum()
}

// ---- fnvhash64 and keys --------------------------------------------------------------

/// Values computed by hand (in Python, with 64-bit masking) from YCSB's Utils.fnvhash64:
/// offset basis 0xCBF29CE484222325, prime 1099511628211, the long's 8 bytes low first, abs.
#[test]
fn fnvhash64_matches_ycsb() {
    let expected = [
        (0, 6_284_781_860_667_377_211),
        (1, 8_517_097_267_634_966_620),
        (2, 1_820_151_046_732_198_393),
        (1000, 5_952_875_239_596_136_740),
        (999_999, 2_744_965_632_448_235_251),
        (123_456_789, 2_350_796_791_908_741_607),
    ];
    for (val, hash) in expected {
        assert_eq!(fnvhash64(val), hash, "fnvhash64({val})");
    }
}

#[test]
fn key_names_match_ycsb() {
    let key = |n, pad, order| build_key_name(n, pad, order, "user");
    // user6284781860667377211 is the first key of every YCSB load.
    assert_eq!(key(0, 1, InsertOrder::Hashed), "user6284781860667377211");
    assert_eq!(key(1000, 1, InsertOrder::Hashed), "user5952875239596136740");
    assert_eq!(
        key(0, 25, InsertOrder::Hashed),
        "user0000006284781860667377211"
    );
    assert_eq!(key(42, 1, InsertOrder::Ordered), "user42");
    assert_eq!(key(42, 5, InsertOrder::Ordered), "user00042");
    assert_eq!(key(123_456, 3, InsertOrder::Ordered), "user123456");
}

#[test]
fn values_are_ycsb_random_bytes() {
    let mut rng = fastrand::Rng::with_seed(1);
    let mut value = Vec::new();
    for len in [0, 1, 5, 6, 7, 100, 1000] {
        random_value(&mut rng, len, &mut value);
        assert_eq!(value.len(), len);
        // RandomByteIterator's masks per position within each 6-byte group.
        let masks = [31u8, 63, 95, 31, 63, 95];
        for (i, b) in value.iter().enumerate() {
            let bits = b.checked_sub(b' ').expect("byte at or above a space");
            assert_eq!(bits & !masks[i % 6], 0, "byte {i} = {b} outside its mask");
        }
    }
    // Not constant: a 1000-byte value uses many distinct bytes.
    let distinct: HashSet<u8> = value.iter().copied().collect();
    assert!(
        distinct.len() > 50,
        "only {} distinct bytes",
        distinct.len()
    );
}

// ---- Zipfian -------------------------------------------------------------------------

/// The probability YCSB's generator gives rank `r` of `n`: ranks 0 and 1 exactly, then the
/// share of `u` that Gray's inversion `n * (eta*u - eta + 1)^alpha` maps to `r`. `eta` takes
/// the item count the generator was built with, `n_built`, as YCSB's does after growing.
fn gray_probability(r: u64, n: u64, n_built: u64, zetan: f64) -> f64 {
    let alpha = 1.0 / (1.0 - THETA);
    let two = (2.0 / n_built as f64).powf(1.0 - THETA);
    let eta = (1.0 - two) / (1.0 - zeta_sum(0, 2, THETA, 0.0) / zetan);
    let u_of = |rank: u64| 1.0 + ((rank as f64 / n as f64).powf(1.0 / alpha) - 1.0) / eta;
    let u_two = (1.0 + 0.5f64.powf(THETA)) / zetan;
    match r {
        0 => 1.0 / zetan,
        1 => u_two - 1.0 / zetan,
        _ => (u_of(r + 1).min(1.0) - u_of(r).max(u_two)).max(0.0),
    }
}

#[test]
fn zipfian_follows_its_definition() {
    let n = 1000u64;
    let samples = 2_000_000;
    let mut z = ZipfianGenerator::new(0, n - 1).unwrap();
    let mut rng = fastrand::Rng::with_seed(7);
    let counts = histogram(n as usize, samples, || z.next_value(&mut rng));
    let zetan = zeta_sum(0, n, THETA, 0.0);
    let freq = |i: usize| counts[i] as f64 / samples as f64;
    // Ranks 0 and 1 are exact: 1 / (i+1)^theta / zeta(n), within 2% (7 standard errors).
    for i in 0..2 {
        let p = 1.0 / ((i + 1) as f64).powf(THETA) / zetan;
        assert!(
            (freq(i) / p - 1.0).abs() < 0.02,
            "rank {i}: {} vs {p}",
            freq(i)
        );
    }
    // Beyond, YCSB uses Gray's approximation, which overweights rank 2 by about 17% and
    // converges towards the exact law; the top 20 ranks follow it (chi-square, 20 degrees
    // of freedom plus the rest, 0.1% critical value 46.8) and stay within 25% of the law.
    let chi2 = chi_square_top20(&counts, n, n, zetan, samples);
    assert!(
        chi2 < 46.8,
        "chi-square {chi2} against Gray's probabilities"
    );
    for i in 2..20 {
        let p = 1.0 / ((i + 1) as f64).powf(THETA) / zetan;
        assert!(
            (freq(i) / p - 1.0).abs() < 0.25,
            "rank {i}: {} vs {p}",
            freq(i)
        );
    }
}

/// Chi-square of ranks 0..20 and the rest against [`gray_probability`] (20 degrees of
/// freedom at most: the 0.1% critical value is 46.8). Ranks the formula never yields must
/// not occur at all and are left out of the sum.
fn chi_square_top20(counts: &[u64], n: u64, n_built: u64, zetan: f64, samples: usize) -> f64 {
    let mut expected = Vec::new();
    let mut observed = Vec::new();
    for r in 0..20 {
        let p = gray_probability(r, n, n_built, zetan);
        if p == 0.0 {
            assert_eq!(counts[r as usize], 0, "rank {r} has probability 0");
        } else {
            expected.push(p);
            observed.push(counts[r as usize]);
        }
    }
    expected.push(
        1.0 - (0..20)
            .map(|r| gray_probability(r, n, n_built, zetan))
            .sum::<f64>(),
    );
    observed.push(counts[20..].iter().sum());
    chi_square(&observed, &expected, samples)
}

#[test]
fn zipfian_extends_zeta_incrementally() {
    let mut z = ZipfianGenerator::with_items(1000).unwrap();
    let from_scratch = |n| zeta_sum(0, n, THETA, 0.0);
    assert_eq!(z.zetan(), from_scratch(1000));
    let mut rng = fastrand::Rng::with_seed(3);
    for _ in 0..1000 {
        assert!(z.next_long(5000, &mut rng) < 5000);
    }
    assert!((z.zetan() / from_scratch(5000) - 1.0).abs() < 1e-12);
    // Grown, it draws with zeta(5000) and, as YCSB, the eta of 1000 items, with which ranks
    // 2 to about 28 can no longer come out (see ZipfianGenerator::next_long).
    let samples = 1_000_000;
    let counts = histogram(5000, samples, || z.next_long(5000, &mut rng));
    let chi2 = chi_square_top20(&counts, 5000, 1000, from_scratch(5000), samples);
    assert!(chi2 < 46.8, "chi-square {chi2} after growing");
    // A smaller count keeps the larger zeta, as YCSB without allowitemcountdecrease.
    z.next_long(2000, &mut rng);
    assert!((z.zetan() / from_scratch(5000) - 1.0).abs() < 1e-12);
}

#[test]
fn zipfian_rejects_empty_ranges() {
    assert!(ZipfianGenerator::new(5, 4).is_err());
    assert!(ZipfianGenerator::with_items(0).is_err());
    assert!(ZipfianGenerator::new(0, u64::MAX).is_err());
}

#[test]
fn scrambled_zipfian_spreads_hot_items() {
    let n = 1000usize;
    let samples = 1_000_000;
    let mut g = ScrambledZipfianGenerator::new(0, n as u64 - 1).unwrap();
    let mut rng = fastrand::Rng::with_seed(11);
    let counts = histogram(n, samples, || g.next_value(&mut rng));
    // Every item is reachable.
    assert!(counts.iter().all(|&c| c > 0), "some item never drawn");
    // The hottest item is the one rank 0 of the 10^10 Zipfian hashes to.
    let hottest = (0..n).max_by_key(|&i| counts[i]).unwrap();
    assert_eq!(hottest as i64, fnvhash64(0) % n as i64);
    // Popularity is skewed: the hottest item is drawn far more than the median one.
    let mut sorted = counts.clone();
    sorted.sort_unstable();
    let median = sorted[n / 2];
    assert!(
        counts[hottest] > 10 * median,
        "{} vs median {median}",
        counts[hottest]
    );
    // And the ten hottest are spread over the key space, not clustered at its start.
    let mut by_count: Vec<usize> = (0..n).collect();
    by_count.sort_by_key(|&i| std::cmp::Reverse(counts[i]));
    let top = &by_count[..10];
    let (lo, hi) = (top.iter().min().unwrap(), top.iter().max().unwrap());
    assert!(hi - lo > n / 2, "ten hottest items lie within {lo}..={hi}");
    assert!(top.iter().filter(|&&i| i >= n / 2).count() >= 2);
}

#[test]
fn scrambled_zipfian_stays_in_its_range() {
    let mut g = ScrambledZipfianGenerator::new(500, 1499).unwrap();
    let mut rng = fastrand::Rng::with_seed(12);
    for _ in 0..100_000 {
        assert!((500..=1499).contains(&g.next_value(&mut rng)));
    }
}

#[test]
fn skewed_latest_favours_recent_inserts() {
    let basis = Arc::new(AcknowledgedCounterGenerator::new(1000));
    let mut g = SkewedLatestGenerator::new(Arc::clone(&basis)).unwrap();
    let mut rng = fastrand::Rng::with_seed(5);
    let samples = 200_000;
    let counts = histogram(1000, samples, || g.next_value(&mut rng));
    assert_eq!(counts[0], 0, "key 0 is unreachable, as in YCSB");
    assert_eq!((0..1000).max_by_key(|&i| counts[i]), Some(999));
    let newest = counts[999] as f64 / samples as f64;
    let zipf_rank0 = 1.0 / zeta_sum(0, 999, THETA, 0.0);
    assert!(
        (newest / zipf_rank0 - 1.0).abs() < 0.05,
        "{newest} vs {zipf_rank0}"
    );
    let recent: u64 = counts[990..].iter().sum();
    assert!(
        recent as f64 / samples as f64 > 0.3,
        "only {recent} in the newest 10"
    );
    // After 100 inserts the newest key is 1099, and nothing beyond it is drawn.
    for _ in 0..100 {
        let v = basis.next_value();
        basis.acknowledge(v).unwrap();
    }
    let counts = histogram(1100, samples, || g.next_value(&mut rng));
    assert_eq!((0..1100).max_by_key(|&i| counts[i]), Some(1099));
}

#[test]
fn skewed_latest_needs_two_records() {
    let basis = Arc::new(AcknowledgedCounterGenerator::new(1));
    assert!(SkewedLatestGenerator::new(basis).is_err());
}

// ---- uniform, hotspot, discrete ------------------------------------------------------

#[test]
fn uniform_is_flat() {
    let g = UniformLongGenerator::new(10, 109).unwrap();
    let mut rng = fastrand::Rng::with_seed(9);
    let samples = 200_000;
    let counts = histogram(110, samples, || g.next_value(&mut rng));
    assert!(counts[..10].iter().all(|&c| c == 0));
    let expected = vec![0.01; 100];
    // 99 degrees of freedom: 0.1% critical value 148.2.
    let chi2 = chi_square(&counts[10..], &expected, samples);
    assert!(chi2 < 148.2, "chi-square {chi2}");
    assert!(UniformLongGenerator::new(2, 1).is_err());
}

#[test]
fn hotspot_sends_its_share_to_the_hot_set() {
    let g = HotspotIntegerGenerator::new(0, 999, 0.2, 0.8).unwrap();
    let mut rng = fastrand::Rng::with_seed(13);
    let samples = 200_000;
    let counts = histogram(1000, samples, || g.next_value(&mut rng));
    let hot: u64 = counts[..200].iter().sum();
    assert!(
        (hot as f64 / samples as f64 - 0.8).abs() < 0.01,
        "hot share {hot}"
    );
    assert!(counts.iter().all(|&c| c > 0));
    assert!(
        HotspotIntegerGenerator::new(0, 9, 0.01, 0.5).is_err(),
        "empty hot set"
    );
    assert!(
        HotspotIntegerGenerator::new(0, 9, 1.0, 0.5).is_err(),
        "empty cold set"
    );
    assert!(HotspotIntegerGenerator::new(0, 9, 1.5, 0.5).is_err());
    assert!(HotspotIntegerGenerator::new(9, 0, 0.2, 0.8).is_err());
}

#[test]
fn discrete_follows_its_weights() {
    let g = DiscreteGenerator::new([(5.0, 'a'), (0.0, 'z'), (3.0, 'b'), (2.0, 'c')]).unwrap();
    let mut rng = fastrand::Rng::with_seed(17);
    let samples = 100_000;
    let mut seen = std::collections::HashMap::new();
    for _ in 0..samples {
        *seen.entry(g.next_value(&mut rng)).or_insert(0u64) += 1;
    }
    assert!(!seen.contains_key(&'z'));
    for (value, share) in [('a', 0.5), ('b', 0.3), ('c', 0.2)] {
        let got = seen[&value] as f64 / samples as f64;
        assert!((got - share).abs() < 0.01, "{value}: {got}");
    }
    assert!(DiscreteGenerator::new([(0.0, 'a')]).is_err());
    assert!(DiscreteGenerator::new([(-1.0, 'a'), (2.0, 'b')]).is_err());
    assert!(DiscreteGenerator::new([(f64::NAN, 'a')]).is_err());
}

// ---- counters ------------------------------------------------------------------------

#[test]
fn acknowledged_counter_advances_over_contiguous_acknowledgements() {
    let c = AcknowledgedCounterGenerator::new(10);
    assert_eq!(c.last_value(), Some(9));
    let (a, b, d) = (c.next_value(), c.next_value(), c.next_value());
    assert_eq!((a, b, d), (10, 11, 12));
    c.acknowledge(11).unwrap();
    assert_eq!(c.last_value(), Some(9), "10 is still outstanding");
    c.acknowledge(10).unwrap();
    assert_eq!(c.last_value(), Some(11));
    c.acknowledge(12).unwrap();
    assert_eq!(c.last_value(), Some(12));
    assert!(c.acknowledge(12).is_err(), "acknowledged twice");
    assert_eq!(AcknowledgedCounterGenerator::new(0).last_value(), None);
}

#[test]
fn acknowledged_counter_refuses_a_full_window() {
    let c = AcknowledgedCounterGenerator::new(0);
    let held = c.next_value();
    for _ in 1..ACK_WINDOW_SIZE {
        let v = c.next_value();
        c.acknowledge(v).unwrap();
    }
    assert_eq!(c.last_value(), None, "value {held} holds the limit back");
    let beyond = c.next_value();
    assert_eq!(beyond, ACK_WINDOW_SIZE);
    assert!(c.acknowledge(beyond).is_err());
    c.acknowledge(held).unwrap();
    assert_eq!(c.last_value(), Some(ACK_WINDOW_SIZE - 1));
}

#[test]
fn acknowledged_counter_is_thread_safe_and_never_lags() {
    let c = AcknowledgedCounterGenerator::new(0);
    let (threads, per_thread) = (4u64, 20_000u64);
    std::thread::scope(|s| {
        for t in 0..threads {
            let c = &c;
            s.spawn(move || {
                let mut rng = fastrand::Rng::with_seed(t);
                let mut last_seen = None;
                for _ in 0..per_thread {
                    let v = c.next_value();
                    if rng.u8(..) < 8 {
                        std::thread::yield_now();
                    }
                    c.acknowledge(v).unwrap();
                    let now = c.last_value();
                    assert!(now >= last_seen, "the limit went back");
                    last_seen = now;
                }
            });
        }
    });
    assert_eq!(c.last_value(), Some(threads * per_thread - 1));
}

#[test]
fn counter_hands_out_each_value_once() {
    let c = CounterGenerator::new(5);
    let values: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| (0..1000).map(|_| c.next_value()).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let unique: HashSet<u64> = values.iter().copied().collect();
    assert_eq!(unique.len(), 4000);
    assert_eq!(
        (*unique.iter().min().unwrap(), *unique.iter().max().unwrap()),
        (5, 4004)
    );
}

// ---- stores used by the workload tests -----------------------------------------------

/// What the workload asked of the database, beyond the answers.
#[derive(Debug, Default)]
struct Calls {
    scan_counts: Vec<usize>,
    read_fields: Vec<Option<usize>>,
    update_fields: Vec<Vec<usize>>,
}

/// The memory store, recording the arguments of reads, updates and scans; with `fail_after`
/// set, every operation after that many fails with an I/O error.
struct RecordingStore {
    inner: MemoryStore,
    calls: Arc<Mutex<Calls>>,
    ops: Arc<AtomicU64>,
    fail_after: Option<u64>,
}

impl RecordingStore {
    fn new(fail_after: Option<u64>) -> Self {
        RecordingStore {
            inner: MemoryStore::new(),
            calls: Arc::default(),
            ops: Arc::default(),
            fail_after,
        }
    }
}

struct RecordingSession {
    inner: <MemoryStore as KvStore>::Session,
    calls: Arc<Mutex<Calls>>,
    ops: Arc<AtomicU64>,
    fail_after: Option<u64>,
}

impl RecordingSession {
    fn count(&self) -> io::Result<()> {
        let n = self.ops.fetch_add(1, Ordering::SeqCst);
        match self.fail_after {
            Some(limit) if n >= limit => Err(io::Error::other("injected failure")),
            _ => Ok(()),
        }
    }
}

impl KvStore for RecordingStore {
    type Session = RecordingSession;
    fn session(&self) -> io::Result<RecordingSession> {
        Ok(RecordingSession {
            inner: self.inner.session()?,
            calls: Arc::clone(&self.calls),
            ops: Arc::clone(&self.ops),
            fail_after: self.fail_after,
        })
    }
    fn describe(&self) -> String {
        "recording memory store".into()
    }
}

impl KvSession for RecordingSession {
    fn insert(&mut self, key: &str, fields: &[Vec<u8>]) -> io::Result<()> {
        self.count()?;
        self.inner.insert(key, fields)
    }
    fn read(
        &mut self,
        key: &str,
        field: Option<usize>,
        out: &mut Vec<Vec<u8>>,
    ) -> io::Result<bool> {
        self.count()?;
        self.calls.lock().unwrap().read_fields.push(field);
        self.inner.read(key, field, out)
    }
    fn update(&mut self, key: &str, fields: &[(usize, Vec<u8>)]) -> io::Result<bool> {
        self.count()?;
        let indices = fields.iter().map(|(i, _)| *i).collect();
        self.calls.lock().unwrap().update_fields.push(indices);
        self.inner.update(key, fields)
    }
    fn scan(
        &mut self,
        start: &str,
        count: usize,
        field: Option<usize>,
        out: &mut Vec<Vec<Vec<u8>>>,
    ) -> io::Result<usize> {
        self.count()?;
        self.calls.lock().unwrap().scan_counts.push(count);
        self.inner.scan(start, count, field, out)
    }
    fn delete(&mut self, key: &str) -> io::Result<bool> {
        self.count()?;
        self.inner.delete(key)
    }
}

fn never() -> bool {
    false
}

fn options(threads: usize) -> RunOptions {
    RunOptions {
        threads,
        seed: 42,
        ..RunOptions::default()
    }
}

fn load_and_run<S: KvStore>(
    store: &S,
    w: &CoreWorkload,
    threads: usize,
) -> (PhaseResult, PhaseResult) {
    let opts = options(threads);
    let loaded = runner::load(store, w, &opts, &never, &mut |_| {}).unwrap();
    let ran = runner::run(store, w, &opts, &never, &mut |_| {}).unwrap();
    (loaded, ran)
}

fn small(letter: char, records: u64, operations: u64) -> CoreWorkload {
    CoreWorkload {
        record_count: records,
        operation_count: operations,
        ..CoreWorkload::preset(letter).unwrap()
    }
}

// ---- the workloads -------------------------------------------------------------------

#[test]
fn presets_carry_ycsb_properties() {
    let e = CoreWorkload::preset('E').unwrap();
    assert_eq!(
        (e.scan_proportion, e.insert_proportion, e.max_scan_length),
        (0.95, 0.05, 100)
    );
    let d = CoreWorkload::preset('d').unwrap();
    assert_eq!(d.request_distribution, RequestDistribution::Latest);
    for letter in ['a', 'b', 'c', 'e', 'f'] {
        let w = CoreWorkload::preset(letter).unwrap();
        assert_eq!(
            w.request_distribution,
            RequestDistribution::Zipfian,
            "{letter}"
        );
        assert_eq!((w.field_count, w.field_length), (10, 100));
        assert!(w.read_all_fields && !w.write_all_fields);
        assert_eq!(w.insert_order, InsertOrder::Hashed);
    }
    assert!(CoreWorkload::preset('g').is_err());
}

/// The share of each YCSB series in workloads A-F, from a run on the memory store: within 2
/// percentage points (about 6 standard errors at 10 000 operations). F's reads include the
/// reads of its read-modify-writes, as YCSB reports them.
#[test]
fn operation_mixes_match_a_to_f() {
    let mixes: [(char, &[(&str, f64)]); 6] = [
        ('a', &[("READ", 0.5), ("UPDATE", 0.5)]),
        ('b', &[("READ", 0.95), ("UPDATE", 0.05)]),
        ('c', &[("READ", 1.0)]),
        ('d', &[("READ", 0.95), ("INSERT", 0.05)]),
        ('e', &[("SCAN", 0.95), ("INSERT", 0.05)]),
        (
            'f',
            &[("READ", 1.0), ("UPDATE", 0.5), ("READ-MODIFY-WRITE", 0.5)],
        ),
    ];
    for (letter, mix) in mixes {
        let store = MemoryStore::new();
        let (_, ran) = load_and_run(&store, &small(letter, 1000, 10_000), 2);
        assert_eq!(ran.operations, 10_000);
        let names: HashSet<&str> = ran.per_op.keys().map(String::as_str).collect();
        let wanted: HashSet<&str> = mix.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names, wanted,
            "workload {letter}: series (no failures expected)"
        );
        for (name, share) in mix {
            let got = ran.count(name) as f64 / ran.operations as f64;
            assert!(
                (got - share).abs() < 0.02,
                "workload {letter} {name}: {got} vs {share}"
            );
        }
    }
}

#[test]
fn load_and_run_leave_the_right_records() {
    for letter in ['a', 'd', 'e'] {
        let store = MemoryStore::new();
        let w = small(letter, 500, 4000);
        let (loaded, ran) = load_and_run(&store, &w, 3);
        assert_eq!(loaded.count("INSERT"), 500);
        let inserted = ran.count("INSERT");
        assert_eq!(store.len() as u64, 500 + inserted, "workload {letter}");
        assert_eq!(inserted > 0, letter != 'a');
        // The keys are exactly key numbers 0..500 + inserted, hashed.
        let expected: HashSet<String> = (0..500 + inserted)
            .map(|n| build_key_name(n, 1, InsertOrder::Hashed, "user"))
            .collect();
        assert_eq!(store.keys().into_iter().collect::<HashSet<_>>(), expected);
    }
}

#[test]
fn load_honours_insert_start_and_count_and_ordered_keys() {
    let store = MemoryStore::new();
    let w = CoreWorkload {
        record_count: 100,
        insert_start: 40,
        insert_count: Some(25),
        insert_order: InsertOrder::Ordered,
        zero_padding: 3,
        ..CoreWorkload::default()
    };
    let loaded = runner::load(&store, &w, &options(4), &never, &mut |_| {}).unwrap();
    assert_eq!((loaded.operations, loaded.threads), (25, 4));
    let keys: Vec<String> = (40..65).map(|n| format!("user{n:03}")).collect();
    assert_eq!(store.keys(), keys);
    let record = store.get("user040").unwrap();
    assert_eq!(record.len(), 10);
    assert!(record.iter().all(|f| f.len() == 100));
}

#[test]
fn scan_lengths_stay_within_bounds() {
    for dist in [
        ScanLengthDistribution::Uniform,
        ScanLengthDistribution::Zipfian,
    ] {
        let store = RecordingStore::new(None);
        let w = CoreWorkload {
            scan_length_distribution: dist,
            min_scan_length: 3,
            max_scan_length: 40,
            ..small('e', 300, 3000)
        };
        load_and_run(&store, &w, 1);
        let counts = std::mem::take(&mut store.calls.lock().unwrap().scan_counts);
        assert!(counts.len() > 2500, "{} scans", counts.len());
        assert!(counts.iter().all(|c| (3..=40).contains(c)), "{dist:?}");
        assert_eq!(
            counts.iter().min(),
            Some(&3),
            "{dist:?}: shortest scan never drawn"
        );
        let at_min = counts.iter().filter(|&&c| c == 3).count();
        let at_max = counts.iter().filter(|&&c| c == 40).count();
        match dist {
            ScanLengthDistribution::Uniform => assert!(at_max > 0),
            ScanLengthDistribution::Zipfian => assert!(at_min > 5 * at_max.max(1)),
        }
    }
}

#[test]
fn read_and_write_all_fields_choose_fields_as_ycsb() {
    let store = RecordingStore::new(None);
    let one_field = CoreWorkload {
        read_all_fields: false,
        ..small('a', 200, 2000)
    };
    load_and_run(&store, &one_field, 1);
    {
        let calls = store.calls.lock().unwrap();
        assert!(calls.read_fields.iter().all(|f| f.is_some_and(|i| i < 10)));
        let distinct: HashSet<_> = calls.read_fields.iter().collect();
        assert_eq!(distinct.len(), 10, "every field read");
        assert!(calls
            .update_fields
            .iter()
            .all(|f| f.len() == 1 && f[0] < 10));
    }
    let store = RecordingStore::new(None);
    let all_fields = CoreWorkload {
        write_all_fields: true,
        ..small('a', 200, 2000)
    };
    load_and_run(&store, &all_fields, 1);
    let calls = store.calls.lock().unwrap();
    assert!(calls.read_fields.iter().all(Option::is_none));
    let every: Vec<usize> = (0..10).collect();
    assert!(calls.update_fields.iter().all(|f| *f == every));
}

#[test]
fn field_lengths_follow_their_distribution() {
    let store = MemoryStore::new();
    let w = CoreWorkload {
        field_length_distribution: FieldLengthDistribution::Uniform,
        min_field_length: 5,
        field_length: 50,
        ..small('c', 300, 0)
    };
    runner::load(&store, &w, &options(1), &never, &mut |_| {}).unwrap();
    let lengths: Vec<usize> = store
        .keys()
        .iter()
        .flat_map(|k| store.get(k).unwrap())
        .map(|f| f.len())
        .collect();
    assert_eq!(lengths.len(), 3000);
    assert!(lengths.iter().all(|l| (5..=50).contains(l)));
    assert_eq!(
        (lengths.iter().min(), lengths.iter().max()),
        (Some(&5), Some(&50))
    );
}

#[test]
fn one_thread_repeats_with_its_seed() {
    let contents = |seed| {
        let store = MemoryStore::new();
        let opts = RunOptions { seed, ..options(1) };
        let w = small('a', 100, 500);
        runner::load(&store, &w, &opts, &never, &mut |_| {}).unwrap();
        runner::run(&store, &w, &opts, &never, &mut |_| {}).unwrap();
        store
            .keys()
            .into_iter()
            .map(|k| store.get(&k).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(contents(1), contents(1));
    assert_ne!(contents(1), contents(2));
}

#[test]
fn missing_records_count_as_failed() {
    // Run C on an empty store: every read finds nothing.
    let store = MemoryStore::new();
    let w = small('c', 100, 300);
    let ran = runner::run(&store, &w, &options(2), &never, &mut |_| {}).unwrap();
    assert_eq!(ran.count("READ-FAILED"), 300);
    assert_eq!(ran.count("READ"), 0);
}

// ---- the runner ----------------------------------------------------------------------

#[test]
fn target_throughput_is_honoured() {
    let store = MemoryStore::new();
    let w = small('a', 200, 200);
    runner::load(&store, &w, &options(1), &never, &mut |_| {}).unwrap();
    let opts = RunOptions {
        target_ops_per_sec: Some(400.0),
        ..options(2)
    };
    let ran = runner::run(&store, &w, &opts, &never, &mut |_| {}).unwrap();
    assert_eq!(ran.operations, 200);
    let error = ran.ops_per_sec / 400.0 - 1.0;
    assert!(
        error.abs() < 0.10,
        "{} ops/s for a target of 400",
        ran.ops_per_sec
    );
}

#[test]
fn interrupt_stops_a_run_promptly() {
    let store = MemoryStore::new();
    let w = small('b', 200, 0);
    runner::load(&store, &w, &options(1), &never, &mut |_| {}).unwrap();
    // One throttled thread sleeping a whole second between operations, one flat out.
    for target in [Some(2.0), None] {
        let start = Instant::now();
        let interrupted = || start.elapsed() > Duration::from_millis(100);
        let mut reports = Vec::new();
        let opts = RunOptions {
            target_ops_per_sec: target,
            ..options(2)
        };
        let ran = runner::run(&store, &w, &opts, &interrupted, &mut |n| reports.push(n)).unwrap();
        assert!(ran.interrupted && !ran.timed_out);
        // The throttled threads may still be in their start-up jitter (up to one tick).
        if target.is_none() {
            assert!(ran.operations > 0);
        } else {
            assert!(ran.operations <= 2, "{} operations", ran.operations);
        }
        assert!(
            start.elapsed() < Duration::from_millis(600),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(reports.last(), Some(&ran.operations));
        assert!(reports.windows(2).all(|p| p[0] <= p[1]));
    }
}

#[test]
fn time_limit_ends_a_run() {
    let store = MemoryStore::new();
    let w = small('c', 100, 0);
    runner::load(&store, &w, &options(1), &never, &mut |_| {}).unwrap();
    let opts = RunOptions {
        max_execution_time: Some(Duration::from_millis(150)),
        ..options(2)
    };
    let ran = runner::run(&store, &w, &opts, &never, &mut |_| {}).unwrap();
    assert!(ran.timed_out && !ran.interrupted);
    let runtime = Duration::from_nanos(ran.runtime_ns);
    assert!(runtime >= Duration::from_millis(150) && runtime < Duration::from_secs(1));
    assert_eq!(ran.count("READ"), ran.operations);
}

#[test]
fn a_database_error_stops_every_thread() {
    let store = RecordingStore::new(Some(1000));
    let w = small('a', 500, 1_000_000);
    runner::load(&store, &w, &options(1), &never, &mut |_| {}).unwrap();
    let err = runner::run(&store, &w, &options(4), &never, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert!(err.to_string().starts_with("READ user") || err.to_string().starts_with("UPDATE user"));
    // Each thread does at most one operation past the first failure.
    assert!(store.ops.load(Ordering::SeqCst) <= 1000 + 4);
}

#[test]
fn results_serialise_with_properties_and_latencies() {
    let store = MemoryStore::new();
    let (_, ran) = load_and_run(&store, &small('a', 100, 1000), 2);
    let json = serde_json::to_value(&ran).unwrap();
    assert_eq!(json["phase"], "run");
    assert_eq!(json["workload"]["request_distribution"], "zipfian");
    assert_eq!(json["threads"], 2);
    let read = &json["per_op"]["READ"];
    assert!(read["count"].as_u64().unwrap() > 0);
    let p = |q: &str| read[q].as_u64().unwrap();
    assert!(
        p("latency_ns_p50") <= p("latency_ns_p95") && p("latency_ns_p95") <= p("latency_ns_p99")
    );
    assert!(p("latency_ns_p99") <= p("latency_ns_max"));
    assert!(ran.ops_per_sec > 0.0 && ran.runtime_ns > 0);
}

#[test]
fn bad_configurations_are_refused() {
    let base = CoreWorkload::default();
    let bad = [
        CoreWorkload {
            record_count: 0,
            ..base.clone()
        },
        CoreWorkload {
            insert_start: 900,
            insert_count: Some(200),
            ..base.clone()
        },
        CoreWorkload {
            field_count: 0,
            ..base.clone()
        },
        CoreWorkload {
            field_length: 1 << 40,
            ..base.clone()
        },
        CoreWorkload {
            read_proportion: 0.0,
            update_proportion: 0.0,
            ..base.clone()
        },
        CoreWorkload {
            update_proportion: -0.5,
            ..base.clone()
        },
        CoreWorkload {
            min_scan_length: 0,
            ..base.clone()
        },
        CoreWorkload {
            min_scan_length: 10,
            max_scan_length: 5,
            ..base.clone()
        },
        CoreWorkload {
            field_length_distribution: FieldLengthDistribution::Uniform,
            min_field_length: 200,
            ..base.clone()
        },
        CoreWorkload {
            request_distribution: RequestDistribution::Latest,
            record_count: 1,
            ..base.clone()
        },
        CoreWorkload {
            request_distribution: RequestDistribution::Hotspot,
            hotspot_data_fraction: 2.0,
            ..base.clone()
        },
        CoreWorkload {
            zero_padding: 1 << 20,
            ..base.clone()
        },
    ];
    let store = MemoryStore::new();
    for w in bad {
        let err = runner::load(&store, &w, &options(1), &never, &mut |_| {}).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{w:?}");
    }
    for opts in [
        RunOptions {
            threads: 0,
            ..options(1)
        },
        RunOptions {
            target_ops_per_sec: Some(0.0),
            ..options(1)
        },
        RunOptions {
            target_ops_per_sec: Some(f64::NAN),
            ..options(1)
        },
    ] {
        let err = runner::run(&store, &base, &opts, &never, &mut |_| {}).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{opts:?}");
    }
    assert!(store.is_empty());
    assert!("zipf".parse::<RequestDistribution>().is_err());
    assert_eq!(
        "latest".parse::<RequestDistribution>(),
        Ok(RequestDistribution::Latest)
    );
}

#[test]
fn memory_store_answers_like_a_database() {
    let store = MemoryStore::new();
    let mut s = store.session().unwrap();
    let rec = |tag: u8| (0..3).map(|i| vec![tag, i]).collect::<Vec<_>>();
    s.insert("b", &rec(2)).unwrap();
    s.insert("a", &rec(1)).unwrap();
    s.insert("c", &rec(3)).unwrap();
    let mut out = Vec::new();
    assert!(s.read("a", None, &mut out).unwrap());
    assert_eq!(out, rec(1));
    assert!(s.read("b", Some(2), &mut out).unwrap());
    assert_eq!(out, vec![vec![2, 2]]);
    assert!(!s.read("zz", None, &mut out).unwrap() && out.is_empty());
    assert!(s.read("a", Some(3), &mut out).is_err());
    assert!(s.update("b", &[(1, vec![9])]).unwrap());
    assert_eq!(
        store.get("b").unwrap(),
        vec![vec![2, 0], vec![9], vec![2, 2]]
    );
    assert!(!s.update("zz", &[(0, vec![])]).unwrap());
    assert!(s.update("b", &[(0, vec![7]), (5, vec![])]).is_err());
    assert_eq!(
        store.get("b").unwrap()[0],
        vec![2, 0],
        "a refused update changes nothing"
    );
    let mut rows = Vec::new();
    assert_eq!(s.scan("aa", 5, Some(0), &mut rows).unwrap(), 2);
    assert_eq!(rows, vec![vec![vec![2, 0]], vec![vec![3, 0]]]);
    assert_eq!(s.scan("d", 5, None, &mut rows).unwrap(), 0);
    assert!(s.delete("a").unwrap() && !s.delete("a").unwrap());
    assert_eq!(store.len(), 2);
}

#[test]
fn op_kinds_name_ycsb_series() {
    assert_eq!(
        OpKind::ReadModifyWrite.series_name(true),
        "READ-MODIFY-WRITE"
    );
    assert_eq!(OpKind::Scan.series_name(false), "SCAN-FAILED");
}
