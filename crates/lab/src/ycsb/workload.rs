//! YCSB's `CoreWorkload` properties ([`CoreWorkload`]): their defaults, the presets A-F of
//! YCSB's `workloads/workloada..f`, their validation and the names command lines use for the
//! distributions. [`super::client`] turns them into generators and operations.
//!
//! Not carried over from YCSB: the `exponential`, `sequential` request distributions, the
//! `histogram` field length distribution, `dataintegrity`, `readallfieldsbyname` and the
//! insertion retry properties.

use super::generator::DiscreteGenerator;
use super::measure::OpKind;
use serde::{Deserialize, Serialize};
use std::io;
use std::str::FromStr;

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

    /// Checks the properties against each other; [`super::client::Workload::new`] calls it.
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
    pub(crate) fn operation_chooser(&self) -> io::Result<DiscreteGenerator<OpKind>> {
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
