//! The erase cost: what garbage collection and merges cost in NAND time.
//!
//! Seed 004 plots "erase cost" next to the erase count (Fig. 7) and says only that "the
//! overhead of erase operations are usually determined by the number of valid pages that
//! are copied during the GC"; it gives no weights. We charge each copied page one page
//! read and one page program, and each erase one block erase:
//!
//! `erase_cost_us = page_copies * (read_us + program_us) + erases * erase_us`
//!
//! with large-block SLC NAND timings by default: 25 us page read, 200 us page program,
//! 1.5 ms block erase (the datasheet figures of the Samsung large-block SLC parts that the
//! FTL papers of the time, FAST among them, modelled; we did not have FAST's own table to
//! check them against). Host writes are not part of the cost: every FTL pays them alike.

use super::Counters;
use serde::Serialize;

/// NAND operation times, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CostModel {
    /// Reading one page.
    pub read_us: f64,
    /// Programming one page.
    pub program_us: f64,
    /// Erasing one block.
    pub erase_us: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            read_us: 25.0,
            program_us: 200.0,
            erase_us: 1500.0,
        }
    }
}

impl CostModel {
    /// Parses `READ,PROGRAM,ERASE` in microseconds, e.g. `25,200,1500`.
    pub fn parse(text: &str) -> Result<CostModel, String> {
        let parts: Vec<&str> = text.split(',').map(str::trim).collect();
        let [read, program, erase] = parts[..] else {
            return Err(format!(
                "{text:?}: expected READ_US,PROGRAM_US,ERASE_US, e.g. 25,200,1500"
            ));
        };
        let num = |name: &str, t: &str| -> Result<f64, String> {
            match t.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
                _ => Err(format!("{text:?}: bad {name} time {t:?}")),
            }
        };
        Ok(CostModel {
            read_us: num("read", read)?,
            program_us: num("program", program)?,
            erase_us: num("erase", erase)?,
        })
    }

    /// The erase cost of `c`, in microseconds.
    pub fn erase_cost_us(&self, c: &Counters) -> f64 {
        c.page_copies as f64 * (self.read_us + self.program_us) + c.erases as f64 * self.erase_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_weights_copies_and_erases() {
        let c = Counters {
            page_copies: 10,
            erases: 2,
            ..Counters::default()
        };
        assert_eq!(
            CostModel::default().erase_cost_us(&c),
            10.0 * 225.0 + 3000.0
        );
        let m = CostModel::parse("1, 2,3").unwrap();
        assert_eq!(m.erase_cost_us(&c), 36.0);
        assert!(CostModel::parse("1,2").unwrap_err().contains("expected"));
        assert!(CostModel::parse("1,x,3").unwrap_err().contains("program"));
    }
}
