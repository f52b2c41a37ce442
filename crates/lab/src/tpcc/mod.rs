//! TPC-C (Standard Specification revision 5.11) on SQLite.
//!
//! [`populate`] builds the initial database of clause 4.3 for W warehouses; [`run`]
//! drives terminals through the five transactions of clauses 2.4-2.8 in the mix of clause
//! 5.2.3 and reports tpmC; [`check`] verifies the population's cardinalities and the
//! consistency conditions 1-4 of clause 3.3.2.
//!
//! What this is and is not: the schema, the population, the input generation and the
//! transaction profiles follow the specification. The driver is a closed-loop load
//! generator as most TPC-C tools run it (and the paper's MySQL runs): no keying or think
//! times, so a handful of terminals saturate the database, and tpmC is a throughput
//! measure, not a result comparable with audited ones (which cap at 12.86 tpmC per
//! warehouse). Delivery runs inline in its terminal rather than queued for deferred
//! execution (clause 2.7.2), as most tools run it: the database sees the same
//! transaction, and its latency is the database transaction's.
//!
//! A [`Scale`] below the specification's cardinalities (fewer items, fewer customers per
//! district) exists for tests and quick runs; it is recorded in the database and in every
//! report, and is refused at run time unless it matches the population.
//!
//! Files: the database is one SQLite database (plus its journal or WAL), opened through
//! [`SqliteSettings`]: plain files on a kernel file system, or any VFS (nvmfs).

use std::io;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::db::sqlite::SqliteSettings;

pub mod check;
pub mod driver;
pub mod populate;
pub mod random;
pub mod schema;
pub mod txn;

#[cfg(test)]
mod tests;

pub use driver::TpccResult;
pub use populate::PopulateReport;

/// Districts per warehouse (fixed by the specification).
pub const DISTRICTS: u32 = 10;

/// The cardinalities of a population. [`Scale::SPEC`] is clause 4.3.3.1's; anything else
/// shrinks them for tests and quick runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Scale {
    /// Rows of ITEM, and of STOCK per warehouse (specification: 100,000).
    pub items: u32,
    /// Customers per district, and orders per district (specification: 3,000).
    pub customers_per_district: u32,
}

impl Scale {
    /// The specification's cardinalities.
    pub const SPEC: Scale = Scale {
        items: 100_000,
        customers_per_district: 3_000,
    };

    /// Whether these are the specification's cardinalities.
    pub fn is_spec(&self) -> bool {
        *self == Scale::SPEC
    }

    /// Refuses cardinalities above the specification's (they would change the
    /// transactions' id ranges) or too small to leave undelivered orders.
    pub fn validate(&self) -> io::Result<()> {
        if !(1..=Scale::SPEC.items).contains(&self.items) {
            return Err(invalid(format!("items {} not in 1..=100000", self.items)));
        }
        if !(10..=Scale::SPEC.customers_per_district).contains(&self.customers_per_district) {
            return Err(invalid(format!(
                "customers per district {} not in 10..=3000",
                self.customers_per_district
            )));
        }
        Ok(())
    }

    /// Orders per district at load: one per customer.
    pub fn orders_per_district(&self) -> u32 {
        self.customers_per_district
    }

    /// Undelivered orders (NEW_ORDER rows) per district at load: the last 900 of 3,000,
    /// scaled in proportion.
    pub fn new_orders_per_district(&self) -> u32 {
        self.orders_per_district() * 900 / 3000
    }

    /// The first undelivered order id (2,101 at the specification's scale).
    pub fn first_new_order(&self) -> u32 {
        self.orders_per_district() - self.new_orders_per_district() + 1
    }

    /// The largest last-name number in use: 999, or fewer when fewer than 1,000
    /// customers per district (each of the first 1,000 customers has name number
    /// C_ID - 1), so run-time names always exist.
    pub fn last_name_max(&self) -> u32 {
        (self.customers_per_district - 1).min(999)
    }
}

/// A TPC-C population and run.
#[derive(Debug, Clone, PartialEq)]
pub struct TpccConfig {
    /// W, the number of warehouses.
    pub warehouses: u32,
    /// Terminal threads. `None` is the specification's ten per warehouse (one per
    /// district); with N threads, terminal i serves warehouse i mod W + 1 and district
    /// (i / W) mod 10 + 1.
    pub terminals: Option<usize>,
    /// Stop after this long (measured from the moment every terminal is connected).
    pub duration: Option<Duration>,
    /// Stop after this many transactions in all (committed or rolled back).
    pub max_transactions: Option<u64>,
    /// Seeds the population and every terminal's random inputs.
    pub seed: u64,
    pub scale: Scale,
    pub sqlite: SqliteSettings,
}

impl Default for TpccConfig {
    fn default() -> Self {
        TpccConfig {
            warehouses: 1,
            terminals: None,
            duration: Some(Duration::from_secs(60)),
            max_transactions: None,
            seed: 1,
            scale: Scale::SPEC,
            sqlite: SqliteSettings::default(),
        }
    }
}

/// Warehouse ids beyond this are refused (the population alone would take days).
const MAX_WAREHOUSES: u32 = 10_000;

impl TpccConfig {
    /// Checks the parameters population and run share.
    pub fn validate(&self) -> io::Result<()> {
        if !(1..=MAX_WAREHOUSES).contains(&self.warehouses) {
            return Err(invalid(format!(
                "warehouses {} not in 1..={MAX_WAREHOUSES}",
                self.warehouses
            )));
        }
        if self.terminals == Some(0) {
            return Err(invalid("zero terminals".to_string()));
        }
        self.scale.validate()?;
        self.sqlite.validate()
    }

    /// The number of terminal threads.
    pub fn terminal_count(&self) -> usize {
        self.terminals
            .unwrap_or(self.warehouses as usize * DISTRICTS as usize)
    }
}

/// Builds the initial database of `config.warehouses` warehouses at `path`, which must
/// not hold any table yet.
pub fn populate(path: &Path, config: &TpccConfig) -> io::Result<PopulateReport> {
    config.validate()?;
    let mut conn = config.sqlite.open(path)?;
    populate::populate(&mut conn, config)
}

/// Runs the transaction mix against the database at `path` until the duration or
/// transaction limit is reached or `interrupted()` answers true (polled every 10 ms).
pub fn run(
    path: &Path,
    config: &TpccConfig,
    interrupted: &dyn Fn() -> bool,
) -> io::Result<TpccResult> {
    config.validate()?;
    if config.duration.is_none() && config.max_transactions.is_none() {
        return Err(invalid(
            "a run needs a duration or a transaction limit".to_string(),
        ));
    }
    driver::run(path, config, interrupted)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}
