//! CoreWorkload at work: the generators a phase builds from the properties ([`Workload`],
//! shared by the client threads of one phase), keys and values as YCSB builds them, and the
//! per-thread operation step ([`Client`]): one load insert, or one transaction (choose the
//! operation, choose the key, do it on a session, time it).
//!
//! Key numbers are 64-bit throughout, where YCSB narrows them to `int` in places; the keys
//! are the same below 2^31 records.

use super::db::KvSession;
use super::generator::{
    fnvhash64, AcknowledgedCounterGenerator, CounterGenerator, DiscreteGenerator,
    HotspotIntegerGenerator, NumberGenerator, ScrambledZipfianGenerator, SkewedLatestGenerator,
    UniformLongGenerator, ZipfianGenerator,
};
use super::measure::{Measurements, OpKind};
use super::workload::{
    CoreWorkload, FieldLengthDistribution, InsertOrder, RequestDistribution, ScanLengthDistribution,
};
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Instant;

/// YCSB's `CoreWorkload.buildKeyName`: `prefix`, zeros up to `zero_padding` digits, then the
/// key number, or with [`InsertOrder::Hashed`] its [`fnvhash64`] in decimal.
pub fn build_key_name(
    keynum: u64,
    zero_padding: usize,
    order: InsertOrder,
    prefix: &str,
) -> String {
    let mut key = String::with_capacity(prefix.len() + zero_padding.max(20));
    write_key_name(&mut key, keynum, zero_padding, order, prefix);
    key
}

fn write_key_name(
    out: &mut String,
    keynum: u64,
    zero_padding: usize,
    order: InsertOrder,
    prefix: &str,
) {
    use fmt::Write;
    out.clear();
    out.push_str(prefix);
    // Java's long: key numbers are below 2^63, so `as i64` keeps them.
    let value = match order {
        InsertOrder::Hashed => fnvhash64(keynum as i64),
        InsertOrder::Ordered => keynum as i64,
    };
    // `{:0>w$}` would pad after a minus sign; YCSB pads before it (only i64::MIN is negative).
    let digits = value.to_string();
    for _ in digits.len()..zero_padding {
        out.push('0');
    }
    let _ = write!(out, "{digits}");
}

/// YCSB's `RandomByteIterator`: `len` bytes, six from each random 32-bit integer, each byte
/// a space plus 5, 6 or 7 bits of it. The bytes are ASCII 32..=127 (printable, and DEL).
pub fn random_value(rng: &mut fastrand::Rng, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(len);
    while out.len() < len {
        let bits = rng.u32(..);
        let chunk = [
            (bits & 31) as u8,
            ((bits >> 5) & 63) as u8,
            ((bits >> 10) & 95) as u8,
            ((bits >> 15) & 31) as u8,
            ((bits >> 20) & 63) as u8,
            ((bits >> 25) & 95) as u8,
        ];
        let take = (len - out.len()).min(chunk.len());
        out.extend(chunk[..take].iter().map(|b| b + b' '));
    }
}

/// Draws before [`Client`] gives up finding a key at or below the insert limit. YCSB loops
/// without bound; the odds of a key being usable are at least the loaded share of the
/// chooser's key space, so this many misses means a broken configuration, not bad luck.
pub const KEY_DRAWS_MAX: u64 = 100_000_000;

/// The generators of one phase, built from the properties and shared by its client threads
/// (YCSB's `CoreWorkload` object after `init`).
#[derive(Debug)]
pub struct Workload {
    props: CoreWorkload,
    /// Load phase key numbers (`keysequence`).
    key_sequence: CounterGenerator,
    /// Run phase insert key numbers (`transactioninsertkeysequence`), starting at
    /// `record_count`; its limit bounds the keys other operations may pick.
    insert_key_sequence: Arc<AcknowledgedCounterGenerator>,
    op_chooser: DiscreteGenerator<OpKind>,
    /// Prototypes cloned into every [`Client`].
    key_chooser: NumberGenerator,
    field_length: NumberGenerator,
    scan_length: NumberGenerator,
}

impl Workload {
    /// Validates the properties and builds the generators, as `CoreWorkload.init`.
    pub fn new(props: &CoreWorkload) -> io::Result<Self> {
        props.validate()?;
        let insert_key_sequence = Arc::new(AcknowledgedCounterGenerator::new(props.record_count));
        Ok(Workload {
            key_sequence: CounterGenerator::new(props.insert_start),
            op_chooser: props.operation_chooser()?,
            key_chooser: key_chooser(props, &insert_key_sequence)?,
            field_length: field_length_generator(props)?,
            scan_length: scan_length_generator(props)?,
            insert_key_sequence,
            props: props.clone(),
        })
    }

    /// The properties the workload was built from.
    pub fn properties(&self) -> &CoreWorkload {
        &self.props
    }

    /// The highest key number every operation may pick now (the acknowledged insert limit).
    pub fn key_limit(&self) -> u64 {
        // Starts at record_count - 1 >= 0 and only grows.
        self.insert_key_sequence.last_value().unwrap_or(0)
    }

    /// A client thread's state, its random numbers seeded with `seed`.
    pub fn client(&self, seed: u64) -> Client<'_> {
        Client {
            workload: self,
            rng: fastrand::Rng::with_seed(seed),
            key_chooser: self.key_chooser.clone(),
            field_length: self.field_length.clone(),
            scan_length: self.scan_length.clone(),
            key: String::new(),
            values: Vec::new(),
            updates: Vec::new(),
            read_out: Vec::new(),
            scan_out: Vec::new(),
        }
    }
}

fn key_chooser(
    props: &CoreWorkload,
    inserts: &Arc<AcknowledgedCounterGenerator>,
) -> io::Result<NumberGenerator> {
    let lb = props.insert_start;
    let ub = lb + props.effective_insert_count() - 1;
    Ok(match props.request_distribution {
        RequestDistribution::Uniform => {
            NumberGenerator::Uniform(UniformLongGenerator::new(lb, ub)?)
        }
        RequestDistribution::Zipfian => {
            // YCSB sizes the key space for the inserts it expects (twice the insert share of
            // the operations), so that popular keys stay popular as the table grows: keys not
            // yet inserted are redrawn. Its `(int)` cast truncates.
            let expected = (props.operation_count as f64 * props.insert_proportion * 2.0) as u64;
            let max = (ub + 1).saturating_add(expected);
            NumberGenerator::ScrambledZipfian(ScrambledZipfianGenerator::new(lb, max)?)
        }
        RequestDistribution::Latest => {
            NumberGenerator::SkewedLatest(SkewedLatestGenerator::new(Arc::clone(inserts))?)
        }
        RequestDistribution::Hotspot => NumberGenerator::Hotspot(HotspotIntegerGenerator::new(
            lb,
            ub,
            props.hotspot_data_fraction,
            props.hotspot_opn_fraction,
        )?),
    })
}

fn field_length_generator(props: &CoreWorkload) -> io::Result<NumberGenerator> {
    let (min, max) = (props.min_field_length, props.field_length);
    Ok(match props.field_length_distribution {
        FieldLengthDistribution::Constant => NumberGenerator::Constant(max),
        FieldLengthDistribution::Uniform => {
            NumberGenerator::Uniform(UniformLongGenerator::new(min, max)?)
        }
        FieldLengthDistribution::Zipfian => {
            NumberGenerator::Zipfian(ZipfianGenerator::new(min, max)?)
        }
    })
}

fn scan_length_generator(props: &CoreWorkload) -> io::Result<NumberGenerator> {
    let (min, max) = (props.min_scan_length, props.max_scan_length);
    Ok(match props.scan_length_distribution {
        ScanLengthDistribution::Uniform => {
            NumberGenerator::Uniform(UniformLongGenerator::new(min, max)?)
        }
        ScanLengthDistribution::Zipfian => {
            NumberGenerator::Zipfian(ZipfianGenerator::new(min, max)?)
        }
    })
}

/// Adds what was being done to a database error.
fn db_error(op: OpKind, key: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{} {key}: {e}", op.name()))
}

/// Runs `f` and records its latency under `op`; `Ok(false)` is a failed operation. Database
/// errors are returned (and not recorded): the runner stops the phase on them.
fn timed<T>(
    m: &mut Measurements,
    op: OpKind,
    key: &str,
    f: impl FnOnce() -> io::Result<T>,
    ok: impl FnOnce(&T) -> bool,
) -> io::Result<T> {
    let start = Instant::now();
    let result = f().map_err(|e| db_error(op, key, e))?;
    let latency_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    m.record(op, ok(&result), latency_ns);
    Ok(result)
}

/// One client thread's side of the workload (YCSB's per-thread generator use), with buffers
/// reused from one operation to the next.
pub struct Client<'w> {
    workload: &'w Workload,
    rng: fastrand::Rng,
    key_chooser: NumberGenerator,
    field_length: NumberGenerator,
    scan_length: NumberGenerator,
    key: String,
    values: Vec<Vec<u8>>,
    updates: Vec<(usize, Vec<u8>)>,
    read_out: Vec<Vec<u8>>,
    scan_out: Vec<Vec<Vec<u8>>>,
}

impl Client<'_> {
    /// The thread's random numbers (the runner draws its start-up jitter from them).
    pub fn rng(&mut self) -> &mut fastrand::Rng {
        &mut self.rng
    }

    /// One load-phase insert (`doInsert`): the next key number of the load sequence, a full
    /// record of random values.
    pub fn do_insert<S: KvSession>(&mut self, s: &mut S, m: &mut Measurements) -> io::Result<()> {
        let keynum = self.workload.key_sequence.next_value();
        self.insert_record(keynum, s, m)
    }

    /// One run-phase operation (`doTransaction`); returns which one it was.
    pub fn do_transaction<S: KvSession>(
        &mut self,
        s: &mut S,
        m: &mut Measurements,
    ) -> io::Result<OpKind> {
        let op = self.workload.op_chooser.next_value(&mut self.rng);
        match op {
            OpKind::Read => self.transaction_read(s, m)?,
            OpKind::Update => self.transaction_update(s, m)?,
            OpKind::Insert => self.transaction_insert(s, m)?,
            OpKind::Scan => self.transaction_scan(s, m)?,
            OpKind::ReadModifyWrite => self.transaction_read_modify_write(s, m)?,
        }
        Ok(op)
    }

    /// `nextKeynum`: a key from the chooser, redrawn while it lies beyond the acknowledged
    /// insert limit (not inserted yet, or still being inserted by another thread).
    fn next_keynum(&mut self) -> io::Result<u64> {
        for _ in 0..KEY_DRAWS_MAX {
            let keynum = self.key_chooser.next_value(&mut self.rng);
            if keynum <= self.workload.key_limit() {
                return Ok(keynum);
            }
        }
        Err(io::Error::other(format!(
            "no key at or below the insert limit {} in {KEY_DRAWS_MAX} draws",
            self.workload.key_limit()
        )))
    }

    fn set_key(&mut self, keynum: u64) {
        let p = &self.workload.props;
        write_key_name(
            &mut self.key,
            keynum,
            p.zero_padding,
            p.insert_order,
            &p.key_prefix,
        );
    }

    /// The field a one-field read or write goes to (`fieldchooser`).
    fn random_field(&mut self) -> usize {
        self.rng.usize(0..self.workload.props.field_count)
    }

    /// `None` (all fields) under `readallfields`, else one random field.
    fn read_fields(&mut self) -> Option<usize> {
        if self.workload.props.read_all_fields {
            None
        } else {
            Some(self.random_field())
        }
    }

    /// A random value of a length from the field length generator.
    fn new_value(&mut self, out: &mut Vec<u8>) {
        // Lengths are bounded by RECORD_SIZE_MAX_BYTES at validation, so they fit usize.
        let len = self.field_length.next_value(&mut self.rng) as usize;
        random_value(&mut self.rng, len, out);
    }

    /// `buildValues`: every field.
    fn build_values(&mut self) {
        let mut values = std::mem::take(&mut self.values);
        values.resize_with(self.workload.props.field_count, Vec::new);
        for v in &mut values {
            self.new_value(v);
        }
        self.values = values;
    }

    /// `buildValues` or `buildSingleValue` for an update, as `writeallfields` says.
    fn build_update(&mut self) {
        let mut updates = std::mem::take(&mut self.updates);
        let all = self.workload.props.write_all_fields;
        let count = if all {
            self.workload.props.field_count
        } else {
            1
        };
        updates.resize_with(count, || (0, Vec::new()));
        for (i, (field, value)) in updates.iter_mut().enumerate() {
            *field = if all { i } else { self.random_field() };
            self.new_value(value);
        }
        self.updates = updates;
    }

    fn insert_record<S: KvSession>(
        &mut self,
        keynum: u64,
        s: &mut S,
        m: &mut Measurements,
    ) -> io::Result<()> {
        self.set_key(keynum);
        self.build_values();
        let (key, values) = (&self.key, &self.values);
        timed(m, OpKind::Insert, key, || s.insert(key, values), |_| true)
    }

    fn transaction_read<S: KvSession>(
        &mut self,
        s: &mut S,
        m: &mut Measurements,
    ) -> io::Result<()> {
        let keynum = self.next_keynum()?;
        self.set_key(keynum);
        let field = self.read_fields();
        let (key, out) = (&self.key, &mut self.read_out);
        timed(
            m,
            OpKind::Read,
            key,
            || s.read(key, field, out),
            |found| *found,
        )?;
        Ok(())
    }

    fn transaction_update<S: KvSession>(
        &mut self,
        s: &mut S,
        m: &mut Measurements,
    ) -> io::Result<()> {
        let keynum = self.next_keynum()?;
        self.set_key(keynum);
        self.build_update();
        let (key, updates) = (&self.key, &self.updates);
        timed(
            m,
            OpKind::Update,
            key,
            || s.update(key, updates),
            |found| *found,
        )?;
        Ok(())
    }

    /// `doTransactionInsert`: the next run-phase key number, acknowledged whether or not the
    /// insert succeeded (YCSB's `finally`), so a failed insert cannot stall the limit.
    fn transaction_insert<S: KvSession>(
        &mut self,
        s: &mut S,
        m: &mut Measurements,
    ) -> io::Result<()> {
        let sequence = &self.workload.insert_key_sequence;
        let keynum = sequence.next_value();
        let inserted = self.insert_record(keynum, s, m);
        sequence.acknowledge(keynum)?;
        inserted
    }

    fn transaction_scan<S: KvSession>(
        &mut self,
        s: &mut S,
        m: &mut Measurements,
    ) -> io::Result<()> {
        let keynum = self.next_keynum()?;
        self.set_key(keynum);
        // Scan lengths are validated to fit in YCSB's int, hence in usize.
        let len = self.scan_length.next_value(&mut self.rng) as usize;
        let field = self.read_fields();
        let (key, out) = (&self.key, &mut self.scan_out);
        timed(
            m,
            OpKind::Scan,
            key,
            || s.scan(key, len, field, out),
            |n| *n > 0,
        )?;
        Ok(())
    }

    /// `doTransactionReadModifyWrite`: a read then an update of the same key, each measured
    /// under its own name as YCSB's DB wrapper does, and the pair under READ-MODIFY-WRITE
    /// (failed when either half found no record; YCSB files the pair as successful always).
    fn transaction_read_modify_write<S: KvSession>(
        &mut self,
        s: &mut S,
        m: &mut Measurements,
    ) -> io::Result<()> {
        let keynum = self.next_keynum()?;
        self.set_key(keynum);
        let field = self.read_fields();
        self.build_update();
        let (key, out, updates) = (&self.key, &mut self.read_out, &self.updates);
        let start = Instant::now();
        let read = timed(
            m,
            OpKind::Read,
            key,
            || s.read(key, field, out),
            |found| *found,
        )?;
        let updated = timed(
            m,
            OpKind::Update,
            key,
            || s.update(key, updates),
            |found| *found,
        )?;
        let latency_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        m.record(OpKind::ReadModifyWrite, read && updated, latency_ns);
        Ok(())
    }
}
