//! The initial population of clause 4.3.3.1 for W warehouses.
//!
//! Loading order and transactions: the schema and `tpcc_meta` (marked unpopulated), ITEM
//! in one transaction, then per warehouse its WAREHOUSE and STOCK rows in one transaction
//! and each district (DISTRICT, CUSTOMER, HISTORY, ORDERS, ORDER_LINE, NEW_ORDER) in one
//! transaction, then the secondary indexes.
//!
//! Durability: the load runs with `PRAGMA synchronous=OFF` (nothing is synced while
//! loading: an interrupted load is started over anyway). At the end the connection's
//! configured setting is restored and a last transaction marks the database populated;
//! with FULL (or NORMAL in rollback mode) its commit syncs the database file, which
//! covers every page written before. In WAL mode a TRUNCATE checkpoint then copies the
//! log into the database file and syncs it, so the run starts from a synced database
//! and an empty log.

use std::io;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use fastrand::Rng;
use rusqlite::{params, Connection, Transaction};
use serde::Serialize;

use super::random::{
    astring, c_last_load, data_with_original, last_name, letters, nstring, nurand, zip, A_C_LAST,
};
use super::schema::{self, Meta, TABLES};
use super::{Scale, TpccConfig, DISTRICTS};
use crate::db::sqlite::{sql_err, JournalMode, SqliteSettings, Synchronous};

/// What a population built.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PopulateReport {
    pub warehouses: u32,
    /// The cardinalities used; `scaled` says whether they differ from the specification's.
    pub scale: Scale,
    pub scaled: bool,
    /// C for C_LAST used by the load (C_LOAD).
    pub c_last_load: i64,
    /// Rows inserted per table, in the order of clause 1.3.
    pub rows: Vec<(String, u64)>,
    pub seconds: f64,
}

/// Row counters, indexed as [`TABLES`].
#[derive(Default)]
struct Rows([u64; 9]);

impl Rows {
    fn add(&mut self, table: &str, n: u64) {
        let i = TABLES
            .iter()
            .position(|t| *t == table)
            .expect("a TPC-C table");
        self.0[i] += n;
    }
}

/// Populates an empty database through `conn` (see the module doc for the steps).
pub fn populate(conn: &mut Connection, config: &TpccConfig) -> io::Result<PopulateReport> {
    let started = Instant::now();
    if schema::has_tables(conn)? {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the database already holds tables; TPC-C population needs an empty database",
        ));
    }
    let mut rng = Rng::with_seed(config.seed);
    let mut meta = Meta {
        warehouses: config.warehouses,
        scale: config.scale,
        c_last_load: c_last_load(&mut rng),
        populated: false,
    };
    SqliteSettings::set_synchronous(conn, Synchronous::Off)?;
    let tx = conn.transaction().map_err(sql_err)?;
    schema::create_tables(&tx)?;
    meta.write(&tx)?;
    tx.commit().map_err(sql_err)?;

    let mut loader = Loader {
        rng,
        scale: config.scale,
        c_last_load: meta.c_last_load,
        now: unix_now(),
        rows: Rows::default(),
    };
    loader.in_transaction(conn, |l, tx| l.items(tx))?;
    for w in 1..=config.warehouses {
        loader.in_transaction(conn, |l, tx| l.warehouse(tx, w))?;
        for d in 1..=DISTRICTS {
            loader.in_transaction(conn, |l, tx| l.district(tx, w, d))?;
        }
    }
    schema::create_indexes(conn)?;
    meta.populated = true;
    finish(conn, &config.sqlite, &meta)?;
    Ok(PopulateReport {
        warehouses: config.warehouses,
        scale: config.scale,
        scaled: !config.scale.is_spec(),
        c_last_load: meta.c_last_load,
        rows: TABLES
            .iter()
            .zip(loader.rows.0)
            .map(|(t, n)| (t.to_string(), n))
            .collect(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Restores the configured `synchronous`, marks the database populated in a synced
/// commit and, in WAL mode, checkpoints the log into the database file.
fn finish(conn: &mut Connection, settings: &SqliteSettings, meta: &Meta) -> io::Result<()> {
    SqliteSettings::set_synchronous(conn, settings.synchronous)?;
    let tx = conn.transaction().map_err(sql_err)?;
    meta.write(&tx)?;
    tx.commit().map_err(sql_err)?;
    if settings.journal_mode == JournalMode::Wal {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(sql_err)
        .and_then(|busy| match busy {
            0 => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "the WAL checkpoint after population could not finish",
            )),
        })?;
    }
    Ok(())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Generates and inserts rows; one instance for the whole population so the random
/// stream (and thus the database) depends only on the seed.
struct Loader {
    rng: Rng,
    scale: Scale,
    c_last_load: i64,
    /// The load's "current date/time" for C_SINCE, H_DATE, O_ENTRY_D.
    now: i64,
    rows: Rows,
}

/// Street 1, street 2, city, state, zip: the address columns every address-holding
/// table shares (clause 4.3.3.1).
type Address = (String, String, String, String, String);

impl Loader {
    fn in_transaction(
        &mut self,
        conn: &mut Connection,
        load: impl FnOnce(&mut Self, &Transaction<'_>) -> rusqlite::Result<()>,
    ) -> io::Result<()> {
        let tx = conn.transaction().map_err(sql_err)?;
        load(self, &tx).map_err(sql_err)?;
        tx.commit().map_err(sql_err)
    }

    fn address(&mut self) -> Address {
        let r = &mut self.rng;
        (
            astring(r, 10, 20),
            astring(r, 10, 20),
            astring(r, 10, 20),
            letters(r, 2),
            zip(r),
        )
    }

    fn items(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let mut stmt = tx.prepare("INSERT INTO item VALUES (?1, ?2, ?3, ?4, ?5)")?;
        for i_id in 1..=self.scale.items {
            let r = &mut self.rng;
            let (im_id, name, price) = (r.u32(1..=10_000), astring(r, 14, 24), r.i64(100..=10_000));
            stmt.execute(params![i_id, im_id, name, price, data_with_original(r)])?;
        }
        self.rows.add("item", self.scale.items.into());
        Ok(())
    }

    /// The WAREHOUSE row and the warehouse's STOCK.
    fn warehouse(&mut self, tx: &Transaction<'_>, w: u32) -> rusqlite::Result<()> {
        let name = astring(&mut self.rng, 6, 10);
        let (s1, s2, city, state, zip) = self.address();
        let tax = self.rng.i64(0..=2000);
        tx.execute(
            "INSERT INTO warehouse VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![w, name, s1, s2, city, state, zip, tax, 30_000_000i64],
        )?;
        self.rows.add("warehouse", 1);
        let mut stmt = tx.prepare(
            "INSERT INTO stock VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, \
             0, 0, 0, ?14)",
        )?;
        for i_id in 1..=self.scale.items {
            let r = &mut self.rng;
            let quantity = r.i64(10..=100);
            let dist: Vec<String> = (0..DISTRICTS).map(|_| letters(r, 24)).collect();
            let data = data_with_original(r);
            stmt.execute(params![
                i_id, w, quantity, dist[0], dist[1], dist[2], dist[3], dist[4], dist[5], dist[6],
                dist[7], dist[8], dist[9], data
            ])?;
        }
        self.rows.add("stock", self.scale.items.into());
        Ok(())
    }

    /// The DISTRICT row, its customers (with one HISTORY row each) and its orders.
    fn district(&mut self, tx: &Transaction<'_>, w: u32, d: u32) -> rusqlite::Result<()> {
        let name = astring(&mut self.rng, 6, 10);
        let (s1, s2, city, state, zip) = self.address();
        let tax = self.rng.i64(0..=2000);
        let next_o_id = self.scale.orders_per_district() + 1;
        tx.execute(
            "INSERT INTO district VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                d,
                w,
                name,
                s1,
                s2,
                city,
                state,
                zip,
                tax,
                3_000_000i64,
                next_o_id
            ],
        )?;
        self.rows.add("district", 1);
        self.customers(tx, w, d)?;
        self.orders(tx, w, d)
    }

    /// C_LAST of customer `c_id`: the first 1,000 customers take the names of numbers
    /// 0..=999 in order, the others NURand(255, 0, 999) with C_LOAD (clause 4.3.3.1).
    fn customer_last_name(&mut self, c_id: u32) -> String {
        let number = if c_id <= 1000 {
            c_id - 1
        } else {
            nurand(&mut self.rng, A_C_LAST, 0, 999, self.c_last_load) as u32
        };
        last_name(number)
    }

    fn customers(&mut self, tx: &Transaction<'_>, w: u32, d: u32) -> rusqlite::Result<()> {
        let mut customer = tx.prepare(
            "INSERT INTO customer VALUES (?1, ?2, ?3, ?4, 'OE', ?5, ?6, ?7, ?8, ?9, ?10, ?11, \
             ?12, ?13, 5000000, ?14, -1000, 1000, 1, 0, ?15)",
        )?;
        let mut history =
            tx.prepare("INSERT INTO history VALUES (?1, ?2, ?3, ?2, ?3, ?4, 1000, ?5)")?;
        for c_id in 1..=self.scale.customers_per_district {
            let last = self.customer_last_name(c_id);
            let first = astring(&mut self.rng, 8, 16);
            let (s1, s2, city, state, zip) = self.address();
            let r = &mut self.rng;
            let phone = nstring(r, 16, 16);
            let credit = if r.u32(0..10) == 0 { "BC" } else { "GC" };
            let discount = r.i64(0..=5000);
            let data = astring(r, 300, 500);
            customer.execute(params![
                c_id, d, w, first, last, s1, s2, city, state, zip, phone, self.now, credit,
                discount, data
            ])?;
            let h_data = astring(&mut self.rng, 12, 24);
            history.execute(params![c_id, d, w, self.now, h_data])?;
        }
        let n = u64::from(self.scale.customers_per_district);
        self.rows.add("customer", n);
        self.rows.add("history", n);
        Ok(())
    }

    /// ORDERS with their ORDER_LINEs, and NEW_ORDER rows for the undelivered ones.
    /// O_C_ID follows a random permutation of the customers, so each has one order.
    fn orders(&mut self, tx: &Transaction<'_>, w: u32, d: u32) -> rusqlite::Result<()> {
        let mut order = tx.prepare("INSERT INTO orders VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1)")?;
        let mut line =
            tx.prepare("INSERT INTO order_line VALUES (?1, ?2, ?3, ?4, ?5, ?3, ?6, 5, ?7, ?8)")?;
        let mut new_order = tx.prepare("INSERT INTO new_order VALUES (?1, ?2, ?3)")?;
        let mut customers: Vec<u32> = (1..=self.scale.customers_per_district).collect();
        self.rng.shuffle(&mut customers);
        let first_new = self.scale.first_new_order();
        for (o_id, c_id) in (1u32..).zip(customers) {
            let delivered = o_id < first_new;
            let carrier = delivered.then(|| self.rng.u32(1..=10));
            let ol_cnt = self.rng.u32(5..=15);
            order.execute(params![o_id, d, w, c_id, self.now, carrier, ol_cnt])?;
            for number in 1..=ol_cnt {
                let r = &mut self.rng;
                let i_id = r.u32(1..=self.scale.items);
                let (delivery_d, amount) = match delivered {
                    true => (Some(self.now), 0),
                    false => (None, r.i64(1..=999_999)),
                };
                let dist_info = letters(r, 24);
                line.execute(params![
                    o_id, d, w, number, i_id, delivery_d, amount, dist_info
                ])?;
            }
            self.rows.add("order_line", ol_cnt.into());
            if !delivered {
                new_order.execute(params![o_id, d, w])?;
                self.rows.add("new_order", 1);
            }
        }
        self.rows
            .add("orders", self.scale.orders_per_district().into());
        Ok(())
    }
}
