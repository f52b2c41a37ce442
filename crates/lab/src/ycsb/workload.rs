//! YCSB's `CoreWorkload`: its properties ([`CoreWorkload`], with the presets A-F of YCSB's
//! `workloads/workloada..f`), the generators it builds from them ([`Workload`], shared by
//! the client threads of one phase) and the per-thread operation step ([`Client`]): one load
//! insert, or one transaction (choose the operation, choose the key, do it on a session).
//!
//! Not carried over from YCSB: the `exponential`, `sequential` request distributions, the
//! `histogram` field length distribution, `dataintegrity`, `readallfieldsbyname` and the
//! insertion retry properties. Key numbers are 64-bit throughout, where YCSB narrows them to
//! `int` in places; the keys are the same below 2^31 records.

use super::db::KvSession;
use super::generator::{
    fnvhash64, AcknowledgedCounterGenerator, CounterGenerator, DiscreteGenerator,
    HotspotIntegerGenerator, NumberGenerator, ScrambledZipfianGenerator, SkewedLatestGenerator,
    UniformLongGenerator, ZipfianGenerator,
};
use super::measure::{Measurements, OpKind};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Parses one of `names` (YCSB's spelling) into the matching value.
fn parse_choice<T: Copy>(what: &str, s: &str, choices: &[(&str, T)]) -> Result<T, String> {
    choices
        .iter()
        .find(|(name, _)| *name == s)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown {what} {s:?} (expected one of: {})",
                names.join(", ")
            )
        })
}

/// How keys are picked for reads, updates, scans and read-modify-writes
/// (`requestdistribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestDistribution {
    /// Every loaded key equally likely (YCSB's default).
    Uniform,
    /// Scrambled Zipfian: a few popular keys, spread over the key space.
    Zipfian,
    /// Skewed towards the most recently inserted keys (workload D).
    Latest,
    /// A hot set of keys (`hotspot_data_fraction`) gets `hotspot_opn_fraction` of the ops.
    Hotspot,
}

impl FromStr for RequestDistribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        use RequestDistribution::*;
        let choices = [
            ("uniform", Uniform),
            ("zipfian", Zipfian),
            ("latest", Latest),
            ("hotspot", Hotspot),
        ];
        parse_choice("request distribution", s, &choices)
    }
}

/// How field lengths vary (`fieldlengthdistribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldLengthDistribution {
    /// Always `field_length`.
    Constant,
    /// Uniform in `min_field_length..=field_length`.
    Uniform,
    /// Zipfian over `min_field_length..=field_length` (short fields most common).
    Zipfian,
}

impl FromStr for FieldLengthDistribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        use FieldLengthDistribution::*;
        let choices = [
            ("constant", Constant),
            ("uniform", Uniform),
            ("zipfian", Zipfian),
        ];
        parse_choice("field length distribution", s, &choices)
    }
}

/// How scan lengths vary (`scanlengthdistribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanLengthDistribution {
    /// Uniform in `min_scan_length..=max_scan_length`.
    Uniform,
    /// Zipfian over `min_scan_length..=max_scan_length`.
    Zipfian,
}

impl FromStr for ScanLengthDistribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let choices = [
            ("uniform", ScanLengthDistribution::Uniform),
            ("zipfian", ScanLengthDistribution::Zipfian),
        ];
        parse_choice("scan length distribution", s, &choices)
    }
}

/// Whether key numbers are hashed into keys (`insertorder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InsertOrder {
    /// `prefix + fnvhash64(keynum)`: inserts land all over the key space (YCSB's default).
    Hashed,
    /// `prefix + keynum`: inserts in key order.
    Ordered,
}

impl FromStr for InsertOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_choice(
            "insert order",
            s,
            &[
                ("hashed", InsertOrder::Hashed),
                ("ordered", InsertOrder::Ordered),
            ],
        )
    }
}

/// Largest `field_count`, `zero_padding` and record size accepted: far beyond any YCSB
/// configuration, low enough that a typo fails with a message instead of exhausting memory.
pub const FIELD_COUNT_MAX: usize = 65_536;
/// See [`FIELD_COUNT_MAX`].
pub const ZERO_PADDING_MAX: usize = 1024;
/// See [`FIELD_COUNT_MAX`]: `field_count * field_length`.
pub const RECORD_SIZE_MAX_BYTES: u64 = 1 << 30;

/// YCSB's CoreWorkload properties, with YCSB's names in the field docs. Every field is plain
/// so a command line can fill it; [`Default`] is YCSB's CoreWorkload defaults (with the 1000
/// records and operations of the workload files), [`CoreWorkload::preset`] the workloads A-F.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreWorkload {
    /// `recordcount`: records loaded before the run phase.
    pub record_count: u64,
    /// `operationcount`: operations of the run phase, all threads together; 0 runs until the
    /// time limit or an interrupt.
    pub operation_count: u64,
    /// `insertstart`: first key number this client loads.
    pub insert_start: u64,
    /// `insertcount`: records this client loads; `None` is `record_count - insert_start`.
    pub insert_count: Option<u64>,
    /// `fieldcount`.
    pub field_count: usize,
    /// `fieldlength`: bytes per field (the maximum for non-constant distributions).
    pub field_length: u64,
    /// `minfieldlength`.
    pub min_field_length: u64,
    /// `fieldlengthdistribution`.
    pub field_length_distribution: FieldLengthDistribution,
    /// `readallfields`: reads and scans fetch every field, else one random field.
    pub read_all_fields: bool,
    /// `writeallfields`: updates rewrite every field, else one random field.
    pub write_all_fields: bool,
    /// `readproportion`.
    pub read_proportion: f64,
    /// `updateproportion`.
    pub update_proportion: f64,
    /// `insertproportion`.
    pub insert_proportion: f64,
    /// `scanproportion`.
    pub scan_proportion: f64,
    /// `readmodifywriteproportion`.
    pub read_modify_write_proportion: f64,
    /// `requestdistribution`.
    pub request_distribution: RequestDistribution,
    /// `minscanlength`.
    pub min_scan_length: u64,
    /// `maxscanlength`.
    pub max_scan_length: u64,
    /// `scanlengthdistribution`.
    pub scan_length_distribution: ScanLengthDistribution,
    /// `insertorder`.
    pub insert_order: InsertOrder,
    /// `zeropadding`: the key number is left-padded with zeros to this many digits.
    pub zero_padding: usize,
    /// The key prefix, `user` in YCSB (not a property there).
    pub key_prefix: String,
    /// `hotspotdatafraction`.
    pub hotspot_data_fraction: f64,
    /// `hotspotopnfraction`.
    pub hotspot_opn_fraction: f64,
}

impl Default for CoreWorkload {
    fn default() -> Self {
        CoreWorkload {
            record_count: 1000,
            operation_count: 1000,
            insert_start: 0,
            insert_count: None,
            field_count: 10,
            field_length: 100,
            min_field_length: 1,
            field_length_distribution: FieldLengthDistribution::Constant,
            read_all_fields: true,
            write_all_fields: false,
            read_proportion: 0.95,
            update_proportion: 0.05,
            insert_proportion: 0.0,
            scan_proportion: 0.0,
            read_modify_write_proportion: 0.0,
            request_distribution: RequestDistribution::Uniform,
            min_scan_length: 1,
            max_scan_length: 1000,
            scan_length_distribution: ScanLengthDistribution::Uniform,
            insert_order: InsertOrder::Hashed,
            zero_padding: 1,
            key_prefix: "user".to_string(),
            hotspot_data_fraction: 0.2,
            hotspot_opn_fraction: 0.8,
        }
    }
}

impl CoreWorkload {
    /// YCSB's `workloads/workloada` .. `workloadf` (letter `a`..=`f`, either case): the
    /// defaults with that file's properties.
    pub fn preset(letter: char) -> io::Result<Self> {
        let base = CoreWorkload {
            request_distribution: RequestDistribution::Zipfian,
            ..CoreWorkload::default()
        };
        let mix = |read, update, insert, scan, rmw| CoreWorkload {
            read_proportion: read,
            update_proportion: update,
            insert_proportion: insert,
            scan_proportion: scan,
            read_modify_write_proportion: rmw,
            ..base.clone()
        };
        let w = match letter.to_ascii_lowercase() {
            'a' => mix(0.5, 0.5, 0.0, 0.0, 0.0),
            'b' => mix(0.95, 0.05, 0.0, 0.0, 0.0),
            'c' => mix(1.0, 0.0, 0.0, 0.0, 0.0),
            'd' => CoreWorkload {
                request_distribution: RequestDistribution::Latest,
                ..mix(0.95, 0.0, 0.05, 0.0, 0.0)
            },
            'e' => CoreWorkload {
                max_scan_length: 100,
                scan_length_distribution: ScanLengthDistribution::Uniform,
                ..mix(0.0, 0.0, 0.05, 0.95, 0.0)
            },
            'f' => mix(0.5, 0.0, 0.0, 0.0, 0.5),
            other => {
                return Err(invalid(format!(
                    "no YCSB workload {other:?} (expected a..=f)"
                )));
            }
        };
        Ok(w)
    }

    /// `insertcount`, defaulted as CoreWorkload does.
    pub fn effective_insert_count(&self) -> u64 {
        self.insert_count
            .unwrap_or(self.record_count.saturating_sub(self.insert_start))
    }

    /// Checks the properties against each other; [`Workload::new`] calls it.
    pub fn validate(&self) -> io::Result<()> {
        self.validate_keys()?;
        self.validate_fields()?;
        // YCSB reads scan lengths as Java ints.
        let (min, max) = (self.min_scan_length, self.max_scan_length);
        if min == 0 || max < min || max > i32::MAX as u64 {
            return Err(invalid(format!(
                "scan lengths {}..={} must be a non-empty range within 1..=2^31-1",
                self.min_scan_length, self.max_scan_length
            )));
        }
        Ok(())
    }

    fn validate_keys(&self) -> io::Result<()> {
        if self.record_count == 0 {
            return Err(invalid("record count must be at least 1".into()));
        }
        let insert_count = self.effective_insert_count();
        let end = self.insert_start.checked_add(insert_count);
        if insert_count == 0 || end.is_none_or(|end| end > self.record_count) {
            return Err(invalid(format!(
                "insert start {} + insert count {insert_count} must be within record count {} \
                 and insert count at least 1",
                self.insert_start, self.record_count
            )));
        }
        if self.zero_padding > ZERO_PADDING_MAX {
            return Err(invalid(format!(
                "zero padding {} exceeds {ZERO_PADDING_MAX}",
                self.zero_padding
            )));
        }
        Ok(())
    }

    fn validate_fields(&self) -> io::Result<()> {
        if self.field_count == 0 || self.field_count > FIELD_COUNT_MAX {
            return Err(invalid(format!(
                "field count {} is not in 1..={FIELD_COUNT_MAX}",
                self.field_count
            )));
        }
        let record = (self.field_count as u64).checked_mul(self.field_length);
        if record.is_none_or(|r| r > RECORD_SIZE_MAX_BYTES) {
            return Err(invalid(format!(
                "{} fields of {} bytes exceed {RECORD_SIZE_MAX_BYTES} bytes per record",
                self.field_count, self.field_length
            )));
        }
        let ranged = self.field_length_distribution != FieldLengthDistribution::Constant;
        if ranged && self.min_field_length > self.field_length {
            return Err(invalid(format!(
                "min field length {} exceeds field length {}",
                self.min_field_length, self.field_length
            )));
        }
        Ok(())
    }

    /// The operation chooser: positive proportions, in YCSB's order.
    fn operation_chooser(&self) -> io::Result<DiscreteGenerator<OpKind>> {
        DiscreteGenerator::new([
            (self.read_proportion, OpKind::Read),
            (self.update_proportion, OpKind::Update),
            (self.insert_proportion, OpKind::Insert),
            (self.scan_proportion, OpKind::Scan),
            (self.read_modify_write_proportion, OpKind::ReadModifyWrite),
        ])
        .map_err(|e| invalid(format!("operation proportions: {e}")))
    }
}

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
