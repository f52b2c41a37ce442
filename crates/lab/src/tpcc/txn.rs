//! The five transaction profiles of clauses 2.4-2.8: their input generation (clause
//! x.1) and their database work (clause x.2), each one SQLite transaction.
//!
//! The writers (New-Order, Payment, Delivery) begin with BEGIN IMMEDIATE: they take the
//! write lock up front, so two of them never both hold read locks and then deadlock
//! upgrading (SQLite would answer one with SQLITE_BUSY at once). The read-only Order-Status
//! and Stock-Level run in a deferred (read) transaction, a consistent snapshot. Commits
//! are as durable as the connection's `synchronous` setting makes them.
//!
//! Inputs are generated before the transaction starts so a retry after SQLITE_BUSY
//! replays the same input. Values only the terminal's output screen shows are selected
//! as the profiles specify but not formatted.

use std::time::{SystemTime, UNIX_EPOCH};

use fastrand::Rng;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use serde::Serialize;

use super::random::{
    last_name, nurand, other_warehouse, NuConstants, A_C_ID, A_C_LAST, A_OL_I_ID, ORIGINAL,
};
use super::{Scale, DISTRICTS};

/// The five transaction types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum TxnKind {
    NewOrder,
    Payment,
    OrderStatus,
    Delivery,
    StockLevel,
}

impl TxnKind {
    /// Every type, in the order of clause 2.
    pub const ALL: [TxnKind; 5] = [
        TxnKind::NewOrder,
        TxnKind::Payment,
        TxnKind::OrderStatus,
        TxnKind::Delivery,
        TxnKind::StockLevel,
    ];

    /// The specification's name.
    pub fn name(self) -> &'static str {
        match self {
            TxnKind::NewOrder => "New-Order",
            TxnKind::Payment => "Payment",
            TxnKind::OrderStatus => "Order-Status",
            TxnKind::Delivery => "Delivery",
            TxnKind::StockLevel => "Stock-Level",
        }
    }

    /// The position in [`TxnKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What every terminal shares: the database's dimensions and the run's NURand constants.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    pub warehouses: u32,
    pub scale: Scale,
    pub c: NuConstants,
}

/// A terminal's fixed warehouse and district (clauses 2.4.1.1, 2.8.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Home {
    pub w_id: u32,
    pub d_id: u32,
}

/// How a customer is selected: by id or by last name (Payment, Order-Status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CustomerKey {
    Id(u32),
    LastName(String),
}

/// One order line of a New-Order input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineInput {
    pub i_id: u32,
    pub supply_w_id: u32,
    pub quantity: u32,
}

/// The input of a New-Order (clause 2.4.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrderInput {
    pub w_id: u32,
    pub d_id: u32,
    pub c_id: u32,
    pub lines: Vec<LineInput>,
    pub entry_d: i64,
}

/// The input of a Payment (clause 2.5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentInput {
    pub w_id: u32,
    pub d_id: u32,
    pub c_w_id: u32,
    pub c_d_id: u32,
    pub customer: CustomerKey,
    /// Cents.
    pub amount: i64,
    pub date: i64,
}

/// The input of one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    NewOrder(NewOrderInput),
    Payment(PaymentInput),
    OrderStatus {
        w_id: u32,
        d_id: u32,
        customer: CustomerKey,
    },
    Delivery {
        w_id: u32,
        carrier_id: u32,
        delivery_d: i64,
    },
    StockLevel {
        w_id: u32,
        d_id: u32,
        threshold: u32,
    },
}

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Committed,
    /// New-Order's deliberate rollback on an unused item id (clause 2.4.2.3).
    RolledBack,
    /// Delivery committed; `skipped` districts had no undelivered order (clause 2.7.4.2).
    Delivered {
        skipped: u32,
    },
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A random district in [1 .. 10].
fn district(rng: &mut Rng) -> u32 {
    rng.u32(1..=DISTRICTS)
}

/// C_ID = NURand(1023, 1, 3000) (customers per district when scaled).
fn customer_id(rng: &mut Rng, ctx: &Ctx) -> u32 {
    nurand(
        rng,
        A_C_ID,
        1,
        ctx.scale.customers_per_district.into(),
        ctx.c.c_id,
    ) as u32
}

/// 60% by last name (NURand(255, 0, 999)), 40% by id (clauses 2.5.1.2, 2.6.1.2).
fn customer_key(rng: &mut Rng, ctx: &Ctx) -> CustomerKey {
    if rng.u32(1..=100) <= 60 {
        let max = ctx.scale.last_name_max().into();
        CustomerKey::LastName(last_name(nurand(rng, A_C_LAST, 0, max, ctx.c.c_last) as u32))
    } else {
        CustomerKey::Id(customer_id(rng, ctx))
    }
}

impl Input {
    /// Generates the input of a `kind` transaction at terminal `home`.
    pub fn generate(kind: TxnKind, rng: &mut Rng, ctx: &Ctx, home: Home) -> Input {
        match kind {
            TxnKind::NewOrder => new_order_input(rng, ctx, home),
            TxnKind::Payment => payment_input(rng, ctx, home),
            TxnKind::OrderStatus => Input::OrderStatus {
                w_id: home.w_id,
                d_id: district(rng),
                customer: customer_key(rng, ctx),
            },
            TxnKind::Delivery => Input::Delivery {
                w_id: home.w_id,
                carrier_id: rng.u32(1..=10),
                delivery_d: unix_now(),
            },
            TxnKind::StockLevel => Input::StockLevel {
                w_id: home.w_id,
                d_id: home.d_id,
                threshold: rng.u32(10..=20),
            },
        }
    }

    /// Runs the transaction on `conn`. SQLITE_BUSY leaves the database unchanged (the
    /// transaction is rolled back) and may be retried with the same input.
    pub fn execute(&self, conn: &mut Connection) -> rusqlite::Result<Outcome> {
        match self {
            Input::NewOrder(input) => new_order(conn, input),
            Input::Payment(input) => payment(conn, input),
            Input::OrderStatus {
                w_id,
                d_id,
                customer,
            } => order_status(conn, *w_id, *d_id, customer),
            Input::Delivery {
                w_id,
                carrier_id,
                delivery_d,
            } => delivery(conn, *w_id, *carrier_id, *delivery_d),
            Input::StockLevel {
                w_id,
                d_id,
                threshold,
            } => stock_level(conn, *w_id, *d_id, *threshold),
        }
    }
}

/// Clause 2.4.1: 5-15 lines of NURand(8191, 1, 100000) items, quantity 1-10; 1% of the
/// items come from a remote warehouse (when W > 1); 1% of orders end with an unused item
/// id, which rolls the transaction back.
fn new_order_input(rng: &mut Rng, ctx: &Ctx, home: Home) -> Input {
    let ol_cnt = rng.usize(5..=15);
    let rollback = rng.u32(1..=100) == 1;
    let items = ctx.scale.items;
    let lines = (0..ol_cnt)
        .map(|n| {
            let i_id = if rollback && n == ol_cnt - 1 {
                items + 1
            } else {
                nurand(rng, A_OL_I_ID, 1, items.into(), ctx.c.ol_i_id) as u32
            };
            let remote = ctx.warehouses > 1 && rng.u32(1..=100) == 1;
            let supply_w_id = match remote {
                true => other_warehouse(rng, home.w_id, ctx.warehouses),
                false => home.w_id,
            };
            LineInput {
                i_id,
                supply_w_id,
                quantity: rng.u32(1..=10),
            }
        })
        .collect();
    Input::NewOrder(NewOrderInput {
        w_id: home.w_id,
        d_id: district(rng),
        c_id: customer_id(rng, ctx),
        lines,
        entry_d: unix_now(),
    })
}

/// Clause 2.5.1: 85% of payments are to the home district's customers, 15% to a random
/// district of a remote warehouse (when W > 1); amount 1.00-5,000.00.
fn payment_input(rng: &mut Rng, ctx: &Ctx, home: Home) -> Input {
    let d_id = district(rng);
    let local = rng.u32(1..=100) <= 85 || ctx.warehouses == 1;
    let (c_w_id, c_d_id) = match local {
        true => (home.w_id, d_id),
        false => (
            other_warehouse(rng, home.w_id, ctx.warehouses),
            district(rng),
        ),
    };
    Input::Payment(PaymentInput {
        w_id: home.w_id,
        d_id,
        c_w_id,
        c_d_id,
        customer: customer_key(rng, ctx),
        amount: rng.i64(100..=500_000),
        date: unix_now(),
    })
}

/// The S_DIST_xx column for district `d_id`.
fn stock_dist_column(d_id: u32) -> String {
    format!("s_dist_{d_id:02}")
}

/// Clause 2.4.2.2.
fn new_order(conn: &mut Connection, input: &NewOrderInput) -> rusqlite::Result<Outcome> {
    let NewOrderInput {
        w_id,
        d_id,
        c_id,
        lines,
        entry_d,
    } = input;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let _w_tax: i64 = tx
        .prepare_cached("SELECT w_tax FROM warehouse WHERE w_id = ?1")?
        .query_row([w_id], |r| r.get(0))?;
    let (_d_tax, o_id): (i64, i64) = tx
        .prepare_cached("SELECT d_tax, d_next_o_id FROM district WHERE d_w_id = ?1 AND d_id = ?2")?
        .query_row([w_id, d_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    tx.prepare_cached("UPDATE district SET d_next_o_id = ?3 WHERE d_w_id = ?1 AND d_id = ?2")?
        .execute(params![w_id, d_id, o_id + 1])?;
    tx.prepare_cached(
        "SELECT c_discount, c_last, c_credit FROM customer \
         WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
    )?
    .query_row([w_id, d_id, c_id], |r| r.get::<_, i64>(0))?;
    let all_local = lines.iter().all(|l| l.supply_w_id == *w_id);
    tx.prepare_cached("INSERT INTO orders VALUES (?1, ?2, ?3, ?4, ?5, NULL, ?6, ?7)")?
        .execute(params![
            o_id,
            d_id,
            w_id,
            c_id,
            entry_d,
            lines.len() as i64,
            all_local
        ])?;
    tx.prepare_cached("INSERT INTO new_order VALUES (?1, ?2, ?3)")?
        .execute(params![o_id, d_id, w_id])?;
    for (number, line) in (1u32..).zip(lines) {
        if !order_line(&tx, *w_id, *d_id, o_id, number, line)? {
            tx.rollback()?;
            return Ok(Outcome::RolledBack);
        }
    }
    tx.commit()?;
    Ok(Outcome::Committed)
}

/// One line of a New-Order: the item, the stock update, the ORDER_LINE row. `false` when
/// the item does not exist (the signal to roll back).
fn order_line(
    tx: &Transaction<'_>,
    w_id: u32,
    d_id: u32,
    o_id: i64,
    number: u32,
    line: &LineInput,
) -> rusqlite::Result<bool> {
    let item: Option<(i64, String)> = tx
        .prepare_cached("SELECT i_price, i_name, i_data FROM item WHERE i_id = ?1")?
        .query_row([line.i_id], |r| Ok((r.get(0)?, r.get(2)?)))
        .optional()?;
    let Some((price, i_data)) = item else {
        return Ok(false);
    };
    let sql = format!(
        "SELECT s_quantity, {}, s_data FROM stock WHERE s_w_id = ?1 AND s_i_id = ?2",
        stock_dist_column(d_id)
    );
    let (s_quantity, dist_info, s_data): (i64, String, String) = tx
        .prepare_cached(&sql)?
        .query_row([line.supply_w_id, line.i_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    let quantity = i64::from(line.quantity);
    // Restock by 91 when fewer than 10 would remain (clause 2.4.2.2).
    let new_quantity = if s_quantity >= quantity + 10 {
        s_quantity - quantity
    } else {
        s_quantity - quantity + 91
    };
    let remote = i64::from(line.supply_w_id != w_id);
    tx.prepare_cached(
        "UPDATE stock SET s_quantity = ?3, s_ytd = s_ytd + ?4, s_order_cnt = s_order_cnt + 1, \
         s_remote_cnt = s_remote_cnt + ?5 WHERE s_w_id = ?1 AND s_i_id = ?2",
    )?
    .execute(params![
        line.supply_w_id,
        line.i_id,
        new_quantity,
        quantity,
        remote
    ])?;
    // The brand-generic flag of the output screen: computed as the profile specifies.
    let _brand = i_data.contains(ORIGINAL) && s_data.contains(ORIGINAL);
    tx.prepare_cached("INSERT INTO order_line VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, ?7, ?8, ?9)")?
        .execute(params![
            o_id,
            d_id,
            w_id,
            number,
            line.i_id,
            line.supply_w_id,
            quantity,
            quantity * price,
            dist_info
        ])?;
    Ok(true)
}

/// The position of the selected customer among `n` sorted by C_FIRST: n/2 rounded up,
/// counting from 1 (clause 2.5.2.2), as a 0-based index.
pub fn middle_customer(n: usize) -> usize {
    n.div_ceil(2) - 1
}

/// C_ID of the customer `key` designates in (w_id, d_id). By last name: the middle one
/// of those with that name sorted by first name.
fn find_customer(
    tx: &Transaction<'_>,
    w_id: u32,
    d_id: u32,
    key: &CustomerKey,
) -> rusqlite::Result<u32> {
    let name = match key {
        CustomerKey::Id(c_id) => return Ok(*c_id),
        CustomerKey::LastName(name) => name,
    };
    let mut stmt = tx.prepare_cached(
        "SELECT c_id FROM customer WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_last = ?3 \
         ORDER BY c_first",
    )?;
    let ids: Vec<u32> = stmt
        .query_map(params![w_id, d_id, name], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if ids.is_empty() {
        // The population gives every run-time name to some customer of every district.
        return Err(rusqlite::Error::QueryReturnedNoRows);
    }
    Ok(ids[middle_customer(ids.len())])
}

/// Clause 2.5.2.2.
fn payment(conn: &mut Connection, input: &PaymentInput) -> rusqlite::Result<Outcome> {
    let PaymentInput {
        w_id,
        d_id,
        c_w_id,
        c_d_id,
        customer,
        amount,
        date,
    } = input;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.prepare_cached("UPDATE warehouse SET w_ytd = w_ytd + ?2 WHERE w_id = ?1")?
        .execute(params![w_id, amount])?;
    let w_name: String = tx
        .prepare_cached(
            "SELECT w_name, w_street_1, w_street_2, w_city, w_state, w_zip \
             FROM warehouse WHERE w_id = ?1",
        )?
        .query_row([w_id], |r| r.get(0))?;
    tx.prepare_cached("UPDATE district SET d_ytd = d_ytd + ?3 WHERE d_w_id = ?1 AND d_id = ?2")?
        .execute(params![w_id, d_id, amount])?;
    let d_name: String = tx
        .prepare_cached(
            "SELECT d_name, d_street_1, d_street_2, d_city, d_state, d_zip \
             FROM district WHERE d_w_id = ?1 AND d_id = ?2",
        )?
        .query_row([w_id, d_id], |r| r.get(0))?;
    let c_id = find_customer(&tx, *c_w_id, *c_d_id, customer)?;
    let credit: String = tx
        .prepare_cached(
            "SELECT c_first, c_middle, c_last, c_street_1, c_street_2, c_city, c_state, c_zip, \
             c_phone, c_since, c_credit, c_credit_lim, c_discount, c_balance \
             FROM customer WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
        )?
        .query_row([c_w_id, c_d_id, &c_id], |r| r.get(10))?;
    tx.prepare_cached(
        "UPDATE customer SET c_balance = c_balance - ?4, c_ytd_payment = c_ytd_payment + ?4, \
         c_payment_cnt = c_payment_cnt + 1 WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
    )?
    .execute(params![c_w_id, c_d_id, c_id, amount])?;
    if credit == "BC" {
        let history = format!("{c_id} {c_d_id} {c_w_id} {d_id} {w_id} {} ", money(*amount));
        bad_credit_data(&tx, *c_w_id, *c_d_id, c_id, &history)?;
    }
    tx.prepare_cached("INSERT INTO history VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")?
        .execute(params![
            c_id,
            c_d_id,
            c_w_id,
            d_id,
            w_id,
            date,
            amount,
            format!("{w_name}    {d_name}")
        ])?;
    tx.commit()?;
    Ok(Outcome::Committed)
}

/// Cents as a decimal amount ("12.34").
fn money(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, (cents % 100).abs())
}

/// C_DATA of a bad-credit customer: the payment's history inserted at the left, the
/// old content shifted right and cut at 500 characters (clause 2.5.2.2).
fn bad_credit_data(
    tx: &Transaction<'_>,
    w_id: u32,
    d_id: u32,
    c_id: u32,
    history: &str,
) -> rusqlite::Result<()> {
    let key = params![w_id, d_id, c_id];
    let old: String = tx
        .prepare_cached(
            "SELECT c_data FROM customer WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
        )?
        .query_row(key, |r| r.get(0))?;
    let data = shift_in(history, &old, 500);
    tx.prepare_cached(
        "UPDATE customer SET c_data = ?4 WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
    )?
    .execute(params![w_id, d_id, c_id, data])?;
    Ok(())
}

/// `front` followed by `old`, cut to at most `max` bytes at a character boundary.
pub fn shift_in(front: &str, old: &str, max: usize) -> String {
    let mut data = String::with_capacity(max);
    data.push_str(front);
    data.push_str(old);
    let mut end = max.min(data.len());
    while !data.is_char_boundary(end) {
        end -= 1;
    }
    data.truncate(end);
    data
}

/// Clause 2.6.2.2 (read-only).
fn order_status(
    conn: &mut Connection,
    w_id: u32,
    d_id: u32,
    customer: &CustomerKey,
) -> rusqlite::Result<Outcome> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
    let c_id = find_customer(&tx, w_id, d_id, customer)?;
    tx.prepare_cached(
        "SELECT c_balance, c_first, c_middle, c_last FROM customer \
         WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
    )?
    .query_row([w_id, d_id, c_id], |r| r.get::<_, i64>(0))?;
    let o_id: i64 = tx
        .prepare_cached(
            "SELECT o_id, o_entry_d, o_carrier_id FROM orders \
             WHERE o_w_id = ?1 AND o_d_id = ?2 AND o_c_id = ?3 ORDER BY o_id DESC LIMIT 1",
        )?
        .query_row([w_id, d_id, c_id], |r| r.get(0))?;
    let mut lines = tx.prepare_cached(
        "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line \
         WHERE ol_w_id = ?1 AND ol_d_id = ?2 AND ol_o_id = ?3",
    )?;
    let mut rows = lines.query(params![w_id, d_id, o_id])?;
    while rows.next()?.is_some() {}
    drop(rows);
    drop(lines);
    tx.commit()?;
    Ok(Outcome::Committed)
}

/// Clause 2.7.4.2: for each district, the oldest undelivered order is delivered, all in
/// one database transaction.
fn delivery(
    conn: &mut Connection,
    w_id: u32,
    carrier_id: u32,
    delivery_d: i64,
) -> rusqlite::Result<Outcome> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut skipped = 0;
    for d_id in 1..=DISTRICTS {
        if !deliver_district(&tx, w_id, d_id, carrier_id, delivery_d)? {
            skipped += 1;
        }
    }
    tx.commit()?;
    Ok(Outcome::Delivered { skipped })
}

/// Delivers the oldest NEW_ORDER of one district; `false` when there is none.
fn deliver_district(
    tx: &Transaction<'_>,
    w_id: u32,
    d_id: u32,
    carrier_id: u32,
    delivery_d: i64,
) -> rusqlite::Result<bool> {
    let o_id: Option<i64> = tx
        .prepare_cached("SELECT min(no_o_id) FROM new_order WHERE no_w_id = ?1 AND no_d_id = ?2")?
        .query_row([w_id, d_id], |r| r.get(0))?;
    let Some(o_id) = o_id else {
        return Ok(false);
    };
    let order = params![w_id, d_id, o_id];
    tx.prepare_cached(
        "DELETE FROM new_order WHERE no_w_id = ?1 AND no_d_id = ?2 AND no_o_id = ?3",
    )?
    .execute(order)?;
    let c_id: i64 = tx
        .prepare_cached(
            "SELECT o_c_id FROM orders WHERE o_w_id = ?1 AND o_d_id = ?2 AND o_id = ?3",
        )?
        .query_row(order, |r| r.get(0))?;
    tx.prepare_cached(
        "UPDATE orders SET o_carrier_id = ?4 WHERE o_w_id = ?1 AND o_d_id = ?2 AND o_id = ?3",
    )?
    .execute(params![w_id, d_id, o_id, carrier_id])?;
    tx.prepare_cached(
        "UPDATE order_line SET ol_delivery_d = ?4 WHERE ol_w_id = ?1 AND ol_d_id = ?2 AND ol_o_id = ?3",
    )?
    .execute(params![w_id, d_id, o_id, delivery_d])?;
    let total: i64 = tx
        .prepare_cached(
            "SELECT sum(ol_amount) FROM order_line WHERE ol_w_id = ?1 AND ol_d_id = ?2 AND ol_o_id = ?3",
        )?
        .query_row(order, |r| r.get(0))?;
    tx.prepare_cached(
        "UPDATE customer SET c_balance = c_balance + ?4, c_delivery_cnt = c_delivery_cnt + 1 \
         WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
    )?
    .execute(params![w_id, d_id, c_id, total])?;
    Ok(true)
}

/// Clause 2.8.2.2 (read-only): the distinct items of the district's last 20 orders whose
/// stock at the home warehouse is below the threshold.
fn stock_level(
    conn: &mut Connection,
    w_id: u32,
    d_id: u32,
    threshold: u32,
) -> rusqlite::Result<Outcome> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
    let next_o_id: i64 = tx
        .prepare_cached("SELECT d_next_o_id FROM district WHERE d_w_id = ?1 AND d_id = ?2")?
        .query_row([w_id, d_id], |r| r.get(0))?;
    let _low_stock: i64 = tx
        .prepare_cached(
            "SELECT count(DISTINCT s_i_id) FROM order_line, stock \
             WHERE ol_w_id = ?1 AND ol_d_id = ?2 AND ol_o_id < ?3 AND ol_o_id >= ?3 - 20 \
             AND s_w_id = ?1 AND s_i_id = ol_i_id AND s_quantity < ?4",
        )?
        .query_row(params![w_id, d_id, next_o_id, threshold], |r| r.get(0))?;
    tx.commit()?;
    Ok(Outcome::Committed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn middle_customer_is_n_over_2_rounded_up() {
        assert_eq!(middle_customer(1), 0);
        assert_eq!(middle_customer(2), 0);
        assert_eq!(middle_customer(3), 1);
        assert_eq!(middle_customer(4), 1);
        assert_eq!(middle_customer(5), 2);
    }

    #[test]
    fn c_data_shifts_right_and_stays_within_500() {
        let old = "x".repeat(500);
        let new = shift_in("1 2 3 4 5 10.00 ", &old, 500);
        assert_eq!(new.len(), 500);
        assert!(new.starts_with("1 2 3 4 5 10.00 x"));
        assert_eq!(shift_in("ab", "cd", 500), "abcd");
        assert_eq!(shift_in("é", "", 1), "");
        assert_eq!(money(123_456), "1234.56");
        assert_eq!(money(5), "0.05");
    }

    #[test]
    fn inputs_follow_the_profiles() {
        let ctx = Ctx {
            warehouses: 3,
            scale: Scale::SPEC,
            c: NuConstants {
                c_last: 100,
                c_id: 200,
                ol_i_id: 300,
            },
        };
        let home = Home { w_id: 2, d_id: 7 };
        let mut rng = Rng::with_seed(9);
        let (mut rollbacks, mut remote_lines, mut lines, mut remote_pay, mut by_name) =
            (0, 0, 0, 0, 0);
        let n = 20_000;
        for _ in 0..n {
            match Input::generate(TxnKind::NewOrder, &mut rng, &ctx, home) {
                Input::NewOrder(NewOrderInput {
                    w_id,
                    d_id,
                    c_id,
                    lines: l,
                    ..
                }) => {
                    assert!(w_id == 2 && (1..=10).contains(&d_id) && (1..=3000).contains(&c_id));
                    assert!((5..=15).contains(&l.len()));
                    rollbacks += usize::from(l.last().unwrap().i_id == 100_001);
                    lines += l.len();
                    remote_lines += l.iter().filter(|x| x.supply_w_id != 2).count();
                    assert!(l.iter().all(
                        |x| (1..=10).contains(&x.quantity) && (1..=3).contains(&x.supply_w_id)
                    ));
                }
                other => panic!("{other:?}"),
            }
            match Input::generate(TxnKind::Payment, &mut rng, &ctx, home) {
                Input::Payment(PaymentInput {
                    c_w_id,
                    amount,
                    customer,
                    ..
                }) => {
                    remote_pay += usize::from(c_w_id != 2);
                    by_name += usize::from(matches!(customer, CustomerKey::LastName(_)));
                    assert!((100..=500_000).contains(&amount));
                }
                other => panic!("{other:?}"),
            }
        }
        let pct = |x: usize, of: usize| 100.0 * x as f64 / of as f64;
        assert!(
            (0.7..1.3).contains(&pct(rollbacks, n)),
            "rollbacks {rollbacks}"
        );
        assert!(
            (0.8..1.2).contains(&pct(remote_lines, lines)),
            "remote lines {remote_lines}/{lines}"
        );
        assert!(
            (14.0..16.0).contains(&pct(remote_pay, n)),
            "remote payments {remote_pay}"
        );
        assert!((58.5..61.5).contains(&pct(by_name, n)), "by name {by_name}");
        let stock = Input::generate(TxnKind::StockLevel, &mut rng, &ctx, home);
        assert!(matches!(
            stock,
            Input::StockLevel {
                w_id: 2,
                d_id: 7,
                threshold: 10..=20
            }
        ));
    }
}
