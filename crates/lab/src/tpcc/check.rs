//! Checks of a TPC-C database: the row counts of a fresh population against the
//! cardinalities of clause 4.3.3.1 (scaled ones when the population was scaled), and the
//! consistency conditions 1-4 of clause 3.3.2, which hold after any number of
//! transactions.

use std::io;

use rusqlite::Connection;
use serde::Serialize;

use super::schema::Meta;
use super::{Scale, DISTRICTS};
use crate::db::sqlite::sql_err;

/// One verified property.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    /// What was found (and, when failed, the first offending rows).
    pub detail: String,
}

/// The checks of one call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    pub checks: Vec<Check>,
}

impl CheckReport {
    /// Whether every check passed.
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The failed checks.
    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.ok)
    }

    fn push(&mut self, name: impl Into<String>, ok: bool, detail: String) {
        self.checks.push(Check {
            name: name.into(),
            ok,
            detail,
        });
    }
}

/// Rows per table of a fresh population: (table, exact expected count, or the range of
/// ORDER_LINE, 5 to 15 lines per order).
fn expected_rows(w: u64, scale: Scale) -> [(&'static str, u64, u64); 9] {
    let districts = w * u64::from(DISTRICTS);
    let customers = districts * u64::from(scale.customers_per_district);
    let orders = districts * u64::from(scale.orders_per_district());
    let exact = |table, n| (table, n, n);
    [
        exact("warehouse", w),
        exact("district", districts),
        exact("customer", customers),
        exact("history", customers),
        exact(
            "new_order",
            districts * u64::from(scale.new_orders_per_district()),
        ),
        exact("orders", orders),
        ("order_line", 5 * orders, 15 * orders),
        exact("item", u64::from(scale.items)),
        exact("stock", w * u64::from(scale.items)),
    ]
}

fn count(conn: &Connection, table: &str) -> io::Result<u64> {
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
        r.get::<_, i64>(0)
    })
    .map(|n| n as u64)
    .map_err(sql_err)
}

/// Row counts of a freshly populated database against the cardinalities for its
/// warehouses and scale (recorded in the database). After a run, counts grow; use
/// [`consistency`] then.
pub fn population(conn: &Connection) -> io::Result<CheckReport> {
    let meta = Meta::read(conn)?;
    let w = u64::from(meta.warehouses);
    let spec = expected_rows(w, Scale::SPEC);
    let mut report = CheckReport::default();
    report.push(
        "population finished",
        meta.populated,
        format!("{} warehouses, scale {:?}", meta.warehouses, meta.scale),
    );
    for ((table, lo, hi), (_, spec_lo, _)) in expected_rows(w, meta.scale).into_iter().zip(spec) {
        let rows = count(conn, table)?;
        let mut detail = match lo == hi {
            true => format!("{rows} rows, expected {lo}"),
            false => format!("{rows} rows, expected {lo}..={hi}"),
        };
        if !meta.scale.is_spec() && spec_lo != lo {
            detail += &format!(" (scaled; the specification's is {spec_lo} for W={w})");
        }
        report.push(
            format!("{table} cardinality"),
            (lo..=hi).contains(&rows),
            detail,
        );
    }
    Ok(report)
}

/// Clause 3.3.2's consistency conditions 1-4, over every warehouse and district.
pub fn consistency(conn: &Connection) -> io::Result<CheckReport> {
    let mut report = CheckReport::default();
    condition_1(conn, &mut report)?;
    districts_conditions(conn, &mut report)?;
    Ok(report)
}

/// At most this many offending rows are quoted in a failed check.
const QUOTED: usize = 3;

fn verdict(report: &mut CheckReport, name: &str, checked: usize, bad: Vec<String>) {
    let ok = bad.is_empty();
    let detail = match ok {
        true => format!("holds for all {checked}"),
        false => format!(
            "fails for {} of {checked}: {}",
            bad.len(),
            bad.into_iter().take(QUOTED).collect::<Vec<_>>().join("; ")
        ),
    };
    report.push(name, ok, detail);
}

/// Condition 1: W_YTD = sum(D_YTD) for each warehouse.
fn condition_1(conn: &Connection, report: &mut CheckReport) -> io::Result<()> {
    let mut stmt = conn
        .prepare(
            "SELECT w_id, w_ytd, (SELECT sum(d_ytd) FROM district WHERE d_w_id = w_id) \
             FROM warehouse ORDER BY w_id",
        )
        .map_err(sql_err)?;
    let rows: Vec<(i64, i64, Option<i64>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .map_err(sql_err)?
        .collect::<Result<_, _>>()
        .map_err(sql_err)?;
    let bad = rows
        .iter()
        .filter(|(_, ytd, sum)| Some(*ytd) != *sum)
        .map(|(w, ytd, sum)| format!("warehouse {w}: W_YTD {ytd} cents, sum(D_YTD) {sum:?}"))
        .collect();
    verdict(report, "condition 1: W_YTD = sum(D_YTD)", rows.len(), bad);
    Ok(())
}

/// The per-district figures conditions 2-4 compare.
struct DistrictFigures {
    w_id: i64,
    d_id: i64,
    next_o_id: i64,
    max_o_id: Option<i64>,
    max_no: Option<i64>,
    min_no: Option<i64>,
    new_orders: i64,
    sum_ol_cnt: Option<i64>,
    order_lines: i64,
}

fn district_figures(conn: &Connection) -> io::Result<Vec<DistrictFigures>> {
    let mut stmt = conn
        .prepare(
            "SELECT d_w_id, d_id, d_next_o_id,
               (SELECT max(o_id) FROM orders WHERE o_w_id = d_w_id AND o_d_id = d_id),
               (SELECT max(no_o_id) FROM new_order WHERE no_w_id = d_w_id AND no_d_id = d_id),
               (SELECT min(no_o_id) FROM new_order WHERE no_w_id = d_w_id AND no_d_id = d_id),
               (SELECT count(*) FROM new_order WHERE no_w_id = d_w_id AND no_d_id = d_id),
               (SELECT sum(o_ol_cnt) FROM orders WHERE o_w_id = d_w_id AND o_d_id = d_id),
               (SELECT count(*) FROM order_line WHERE ol_w_id = d_w_id AND ol_d_id = d_id)
             FROM district ORDER BY d_w_id, d_id",
        )
        .map_err(sql_err)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(DistrictFigures {
                w_id: r.get(0)?,
                d_id: r.get(1)?,
                next_o_id: r.get(2)?,
                max_o_id: r.get(3)?,
                max_no: r.get(4)?,
                min_no: r.get(5)?,
                new_orders: r.get(6)?,
                sum_ol_cnt: r.get(7)?,
                order_lines: r.get(8)?,
            })
        })
        .map_err(sql_err)?
        .collect::<Result<_, _>>()
        .map_err(sql_err)?;
    Ok(rows)
}

/// Conditions 2-4, per district:
/// 2. D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID) (the NEW_ORDER part only while the
///    district has undelivered orders);
/// 3. max(NO_O_ID) - min(NO_O_ID) + 1 = the number of NEW_ORDER rows;
/// 4. sum(O_OL_CNT) = the number of ORDER_LINE rows.
fn districts_conditions(conn: &Connection, report: &mut CheckReport) -> io::Result<()> {
    let figures = district_figures(conn)?;
    let (mut bad2, mut bad3, mut bad4) = (Vec::new(), Vec::new(), Vec::new());
    for f in &figures {
        let at = format!("warehouse {} district {}", f.w_id, f.d_id);
        let last = f.next_o_id - 1;
        if f.max_o_id != Some(last) || f.max_no.is_some_and(|no| no != last) {
            bad2.push(format!(
                "{at}: D_NEXT_O_ID-1 {last}, max(O_ID) {:?}, max(NO_O_ID) {:?}",
                f.max_o_id, f.max_no
            ));
        }
        let span = match (f.max_no, f.min_no) {
            (Some(max), Some(min)) => max - min + 1,
            _ => 0,
        };
        if span != f.new_orders {
            bad3.push(format!(
                "{at}: max-min+1 = {span}, {} NEW_ORDER rows",
                f.new_orders
            ));
        }
        if f.sum_ol_cnt.unwrap_or(0) != f.order_lines {
            bad4.push(format!(
                "{at}: sum(O_OL_CNT) {:?}, {} ORDER_LINE rows",
                f.sum_ol_cnt, f.order_lines
            ));
        }
    }
    let n = figures.len();
    verdict(
        report,
        "condition 2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)",
        n,
        bad2,
    );
    verdict(
        report,
        "condition 3: max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW_ORDER)",
        n,
        bad3,
    );
    verdict(
        report,
        "condition 4: sum(O_OL_CNT) = count(ORDER_LINE)",
        n,
        bad4,
    );
    Ok(())
}
