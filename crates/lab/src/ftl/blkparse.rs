//! Importing blktrace captures: the text `blkparse` prints by default.
//!
//! Where blktrace works (it does not on this lab's kernel: see [`capture`](super::capture)),
//! or for traces recorded elsewhere, `blkparse -i DEV` output converts to the lab's format.
//! Its default line is
//!
//! ```text
//!   8,0    3        4     0.000005021   697  D   W 223490 + 8 [kjournald]
//! ```
//!
//! device, CPU, sequence, seconds, pid, action, rwbs, then for requests `sector + count`.
//! Only `D` (issue) lines are taken: the request as handed to the driver, the event the lab's
//! own capture records, and each request once (`Q`, `G`, `I`, `C` describe the same one at
//! other stages). blkparse's closing summary (`CPU0 (8,0):`, `Total`, `Throughput`, ...) is
//! skipped; a `D` line that does not parse is an error naming its line.

use super::capture::op_of;
use super::trace::{Record, TraceError};
use std::collections::BTreeSet;
use std::io::BufRead;

/// Reads blkparse's default output: the issued requests of `device` (`"8,0"`), or of the
/// only device in it when `None`. Times start from the first request.
pub fn import(input: impl BufRead, device: Option<&str>) -> Result<Vec<Record>, TraceError> {
    let mut records = Vec::new();
    let mut devices = BTreeSet::new();
    let mut first_ns = None;
    for (i, line) in input.lines().enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|e| TraceError {
            line: line_no,
            message: format!("cannot read: {e}"),
        })?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        // A trace line has a major,minor device first and an action letter sixth.
        if fields.len() < 7 || !is_device(fields[0]) || fields[5] != "D" {
            continue;
        }
        let bad = |message: String| TraceError {
            line: line_no,
            message,
        };
        if device.is_some_and(|d| d != fields[0]) {
            continue;
        }
        devices.insert(fields[0].to_string());
        let time_ns =
            seconds_to_ns(fields[3]).ok_or_else(|| bad(format!("bad time {:?}", fields[3])))?;
        let rwbs = fields[6];
        let (sector, sectors) = match fields.get(8) {
            Some(&"+") => {
                let sector = fields[7].parse::<u64>();
                let sectors = fields.get(9).and_then(|n| n.parse::<u32>().ok());
                match (sector, sectors) {
                    (Ok(s), Some(n)) => (s, n),
                    _ => return Err(bad(format!("bad request {:?}", fields[7..].join(" ")))),
                }
            }
            // A request without sectors (a bare flush): `D FN [proc]`.
            _ => (0, 0),
        };
        let Some(op) = op_of(rwbs, sectors) else {
            continue;
        };
        let t0 = *first_ns.get_or_insert(time_ns);
        records.push(Record {
            time_ns: time_ns.saturating_sub(t0),
            op,
            sector,
            sectors,
        });
    }
    if device.is_none() && devices.len() > 1 {
        let list: Vec<String> = devices.into_iter().collect();
        return Err(TraceError {
            line: 0,
            message: format!(
                "requests of several devices ({}): choose one",
                list.join(", ")
            ),
        });
    }
    Ok(records)
}

fn is_device(text: &str) -> bool {
    text.split_once(',').is_some_and(|(a, b)| {
        !a.is_empty()
            && !b.is_empty()
            && a.bytes().all(|c| c.is_ascii_digit())
            && b.bytes().all(|c| c.is_ascii_digit())
    })
}

/// `12.000005021` -> 12000005021.
fn seconds_to_ns(text: &str) -> Option<u64> {
    let (secs, frac) = text.split_once('.').unwrap_or((text, "0"));
    if frac.len() > 9 || !frac.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let frac_ns = frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32);
    secs.parse::<u64>()
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(frac_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ftl::trace::Op;

    const SAMPLE: &str = "  8,0    3        1     0.000000000   697  G   W 223490 + 8 [kjournald]
  8,0    3        2     0.000001829   697  P   N [kjournald]
  8,0    3        4     0.000005021   697  D   W 223490 + 8 [kjournald]
  8,0    0        1     0.000207284     0  C   W 223490 + 8 [0]
  8,0    1        7     1.500000000   811  D  RA 1024 + 256 [cat]
  8,0    1        8     1.600000000   811  D  DS 4096 + 2048 [fstrim]
  8,0    1        9     1.700000000   811  D  FN [kworker/1:1H]
CPU0 (8,0):
 Reads Queued:           0,        0KiB\t Writes Queued:           1,        4KiB
Total (8,0):
Throughput (R/W): 0KiB/s / 0KiB/s
";

    #[test]
    fn issued_requests_are_taken_and_the_summary_skipped() {
        let r = import(SAMPLE.as_bytes(), None).unwrap();
        let ops: Vec<(u64, Op, u64, u32)> = r
            .iter()
            .map(|r| (r.time_ns, r.op, r.sector, r.sectors))
            .collect();
        assert_eq!(
            ops,
            [
                (0, Op::Write, 223_490, 8),
                (1_499_994_979, Op::Read, 1024, 256),
                (1_599_994_979, Op::Discard, 4096, 2048),
                (1_699_994_979, Op::Flush, 0, 0),
            ]
        );
    }

    #[test]
    fn devices_and_bad_lines() {
        let two = format!("{SAMPLE}  8,16   0   1   2.0   1  D   W 8 + 8 [x]\n");
        let err = import(two.as_bytes(), None).unwrap_err();
        assert!(err.message.contains("8,0, 8,16"), "{err}");
        assert_eq!(import(two.as_bytes(), Some("8,16")).unwrap().len(), 1);
        let bad = "  8,0  0  1  0.5  1  D   W 8 + x [y]\n";
        let err = import(bad.as_bytes(), None).unwrap_err();
        assert_eq!(err.line, 1);
        assert!(err.to_string().contains("bad request"), "{err}");
        assert_eq!(seconds_to_ns("3.25"), Some(3_250_000_000));
        assert_eq!(seconds_to_ns("x.1"), None);
    }
}
