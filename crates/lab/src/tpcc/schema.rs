//! The nine TPC-C tables (clause 1.3), their primary keys, the secondary indexes the
//! transactions need, and a small table of load parameters that is not part of TPC-C.
//!
//! Types: SQLite has no fixed-point decimal, so every `numeric(m, n)` with n > 0 is an
//! INTEGER in units of 10^-n (money in cents, W_TAX/D_TAX/C_DISCOUNT in 1/10000), which
//! keeps sums exact (consistency condition 1 compares sums of money). Dates are INTEGER
//! seconds since the Unix epoch. Text columns keep the spec's declared lengths (SQLite
//! does not enforce them; the generator does).
//!
//! Tables with a composite primary key are WITHOUT ROWID, clustered on the key as InnoDB
//! (the paper's MySQL) clusters them; WAREHOUSE and ITEM key on an INTEGER PRIMARY KEY,
//! which is SQLite's clustered rowid. HISTORY has no primary key (clause 1.3).

use std::io;

use rusqlite::{params, Connection, OptionalExtension};

use super::random::A_C_LAST;
use super::Scale;
use crate::db::sqlite::sql_err;

/// The nine TPC-C tables, in the order of clause 1.3.
pub const TABLES: [&str; 9] = [
    "warehouse",
    "district",
    "customer",
    "history",
    "new_order",
    "orders",
    "order_line",
    "item",
    "stock",
];

const CREATE_TABLES: &str = "
CREATE TABLE warehouse (
    w_id INTEGER PRIMARY KEY,
    w_name VARCHAR(10) NOT NULL,
    w_street_1 VARCHAR(20) NOT NULL,
    w_street_2 VARCHAR(20) NOT NULL,
    w_city VARCHAR(20) NOT NULL,
    w_state CHAR(2) NOT NULL,
    w_zip CHAR(9) NOT NULL,
    w_tax INTEGER NOT NULL,          -- numeric(4,4), 1/10000
    w_ytd INTEGER NOT NULL           -- numeric(12,2), cents
);
CREATE TABLE district (
    d_id INTEGER NOT NULL,
    d_w_id INTEGER NOT NULL,
    d_name VARCHAR(10) NOT NULL,
    d_street_1 VARCHAR(20) NOT NULL,
    d_street_2 VARCHAR(20) NOT NULL,
    d_city VARCHAR(20) NOT NULL,
    d_state CHAR(2) NOT NULL,
    d_zip CHAR(9) NOT NULL,
    d_tax INTEGER NOT NULL,          -- numeric(4,4), 1/10000
    d_ytd INTEGER NOT NULL,          -- numeric(12,2), cents
    d_next_o_id INTEGER NOT NULL,
    PRIMARY KEY (d_w_id, d_id)
) WITHOUT ROWID;
CREATE TABLE customer (
    c_id INTEGER NOT NULL,
    c_d_id INTEGER NOT NULL,
    c_w_id INTEGER NOT NULL,
    c_first VARCHAR(16) NOT NULL,
    c_middle CHAR(2) NOT NULL,
    c_last VARCHAR(16) NOT NULL,
    c_street_1 VARCHAR(20) NOT NULL,
    c_street_2 VARCHAR(20) NOT NULL,
    c_city VARCHAR(20) NOT NULL,
    c_state CHAR(2) NOT NULL,
    c_zip CHAR(9) NOT NULL,
    c_phone CHAR(16) NOT NULL,
    c_since INTEGER NOT NULL,        -- date and time, Unix seconds
    c_credit CHAR(2) NOT NULL,
    c_credit_lim INTEGER NOT NULL,   -- numeric(12,2), cents
    c_discount INTEGER NOT NULL,     -- numeric(4,4), 1/10000
    c_balance INTEGER NOT NULL,      -- numeric(12,2), cents
    c_ytd_payment INTEGER NOT NULL,  -- numeric(12,2), cents
    c_payment_cnt INTEGER NOT NULL,
    c_delivery_cnt INTEGER NOT NULL,
    c_data VARCHAR(500) NOT NULL,
    PRIMARY KEY (c_w_id, c_d_id, c_id)
) WITHOUT ROWID;
CREATE TABLE history (
    h_c_id INTEGER NOT NULL,
    h_c_d_id INTEGER NOT NULL,
    h_c_w_id INTEGER NOT NULL,
    h_d_id INTEGER NOT NULL,
    h_w_id INTEGER NOT NULL,
    h_date INTEGER NOT NULL,         -- date and time, Unix seconds
    h_amount INTEGER NOT NULL,       -- numeric(6,2), cents
    h_data VARCHAR(24) NOT NULL
);
CREATE TABLE new_order (
    no_o_id INTEGER NOT NULL,
    no_d_id INTEGER NOT NULL,
    no_w_id INTEGER NOT NULL,
    PRIMARY KEY (no_w_id, no_d_id, no_o_id)
) WITHOUT ROWID;
CREATE TABLE orders (
    o_id INTEGER NOT NULL,
    o_d_id INTEGER NOT NULL,
    o_w_id INTEGER NOT NULL,
    o_c_id INTEGER NOT NULL,
    o_entry_d INTEGER NOT NULL,      -- date and time, Unix seconds
    o_carrier_id INTEGER,            -- NULL until delivered
    o_ol_cnt INTEGER NOT NULL,
    o_all_local INTEGER NOT NULL,
    PRIMARY KEY (o_w_id, o_d_id, o_id)
) WITHOUT ROWID;
CREATE TABLE order_line (
    ol_o_id INTEGER NOT NULL,
    ol_d_id INTEGER NOT NULL,
    ol_w_id INTEGER NOT NULL,
    ol_number INTEGER NOT NULL,
    ol_i_id INTEGER NOT NULL,
    ol_supply_w_id INTEGER NOT NULL,
    ol_delivery_d INTEGER,           -- NULL until delivered
    ol_quantity INTEGER NOT NULL,
    ol_amount INTEGER NOT NULL,      -- numeric(6,2), cents
    ol_dist_info CHAR(24) NOT NULL,
    PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number)
) WITHOUT ROWID;
CREATE TABLE item (
    i_id INTEGER PRIMARY KEY,
    i_im_id INTEGER NOT NULL,
    i_name VARCHAR(24) NOT NULL,
    i_price INTEGER NOT NULL,        -- numeric(5,2), cents
    i_data VARCHAR(50) NOT NULL
);
CREATE TABLE stock (
    s_i_id INTEGER NOT NULL,
    s_w_id INTEGER NOT NULL,
    s_quantity INTEGER NOT NULL,
    s_dist_01 CHAR(24) NOT NULL,
    s_dist_02 CHAR(24) NOT NULL,
    s_dist_03 CHAR(24) NOT NULL,
    s_dist_04 CHAR(24) NOT NULL,
    s_dist_05 CHAR(24) NOT NULL,
    s_dist_06 CHAR(24) NOT NULL,
    s_dist_07 CHAR(24) NOT NULL,
    s_dist_08 CHAR(24) NOT NULL,
    s_dist_09 CHAR(24) NOT NULL,
    s_dist_10 CHAR(24) NOT NULL,
    s_ytd INTEGER NOT NULL,
    s_order_cnt INTEGER NOT NULL,
    s_remote_cnt INTEGER NOT NULL,
    s_data VARCHAR(50) NOT NULL,
    PRIMARY KEY (s_w_id, s_i_id)
) WITHOUT ROWID;
CREATE TABLE tpcc_meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
";

/// Secondary indexes, built after the bulk load (cheaper than maintaining them row by
/// row). Payment and Order-Status select customers by last name sorted by first name
/// (clauses 2.5.2.2, 2.6.2.2); Order-Status reads a customer's most recent order, which
/// without the second index scans every order of the district, a scan that grows with
/// the run.
const CREATE_INDEXES: &str = "
CREATE INDEX customer_last_first ON customer (c_w_id, c_d_id, c_last, c_first);
CREATE INDEX orders_customer ON orders (o_w_id, o_d_id, o_c_id, o_id);
";

/// Creates the tables (the caller then loads them and calls [`create_indexes`]).
pub fn create_tables(conn: &Connection) -> io::Result<()> {
    conn.execute_batch(CREATE_TABLES).map_err(sql_err)
}

/// Creates the secondary indexes.
pub fn create_indexes(conn: &Connection) -> io::Result<()> {
    conn.execute_batch(CREATE_INDEXES).map_err(sql_err)
}

/// Whether the database holds any table (population needs an empty database).
pub fn has_tables(conn: &Connection) -> io::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(sql_err)
}

/// The parameters of a population, kept in `tpcc_meta` so a later run uses the same
/// cardinalities and obeys the C_LAST delta rule against the load's constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub warehouses: u32,
    pub scale: Scale,
    /// C for C_LAST used by the load (C_LOAD of clause 2.1.6.1).
    pub c_last_load: i64,
    /// Set once the load finished and was made durable.
    pub populated: bool,
}

impl Meta {
    /// Writes every parameter (replacing earlier values).
    pub fn write(&self, conn: &Connection) -> io::Result<()> {
        let rows: [(&str, i64); 5] = [
            ("warehouses", self.warehouses.into()),
            ("items", self.scale.items.into()),
            (
                "customers_per_district",
                self.scale.customers_per_district.into(),
            ),
            ("c_last_load", self.c_last_load),
            ("populated", self.populated.into()),
        ];
        let mut stmt = conn
            .prepare("INSERT OR REPLACE INTO tpcc_meta (name, value) VALUES (?1, ?2)")
            .map_err(sql_err)?;
        for (name, value) in rows {
            stmt.execute(params![name, value]).map_err(sql_err)?;
        }
        Ok(())
    }

    /// Reads the parameters; an error names what is missing when the database was not
    /// populated by this module.
    pub fn read(conn: &Connection) -> io::Result<Meta> {
        let exists: bool = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'tpcc_meta'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map_err(sql_err)?
            > 0;
        if !exists {
            return Err(not_tpcc("it has no tpcc_meta table"));
        }
        let get = |name: &str| -> io::Result<i64> {
            conn.query_row("SELECT value FROM tpcc_meta WHERE name = ?1", [name], |r| {
                r.get(0)
            })
            .optional()
            .map_err(sql_err)?
            .ok_or_else(|| not_tpcc(&format!("tpcc_meta lacks {name}")))
        };
        let small = |name: &str| -> io::Result<u32> {
            u32::try_from(get(name)?)
                .map_err(|_| not_tpcc(&format!("tpcc_meta {name} is out of range")))
        };
        let c_last_load = get("c_last_load")?;
        if !(0..=A_C_LAST).contains(&c_last_load) {
            return Err(not_tpcc(&format!(
                "C_LOAD {c_last_load} is not in 0..={A_C_LAST}"
            )));
        }
        Ok(Meta {
            warehouses: small("warehouses")?,
            scale: Scale {
                items: small("items")?,
                customers_per_district: small("customers_per_district")?,
            },
            c_last_load,
            populated: get("populated")? == 1,
        })
    }
}

fn not_tpcc(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not a TPC-C database populated by the lab: {why}"),
    )
}
