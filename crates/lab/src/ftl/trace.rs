//! The lab's block trace format: one block request per line, as text.
//!
//! ```text
//! # nvmfs-trace 1
//! # device_bytes 536870912
//! # source ext4 on /dev/loop3, tracefs block:block_rq_issue
//! # time_ns op sector sectors
//! 0 W 2048 8
//! 11034 W 2056 256
//! 52000 D 4096 2048
//! 60211 F 0 0
//! ```
//!
//! The first line names the format and its version. Then `#` lines are the header:
//! `# device_bytes N` is the size of the traced device (what a replay sizes its NAND
//! from), `# source TEXT` says where the trace came from; other `#` lines are comments.
//! Each record is four fields separated by blanks: the time in nanoseconds from the
//! start of the trace, the operation (`W` write, `R` read, `D` discard/TRIM, `F` flush),
//! the first 512-byte sector and the number of sectors. Blank lines are skipped.
//!
//! Text rather than blktrace's binary: a trace is read once per replay, small enough for
//! a file of a few million lines, and can be written by hand for a test, cut with `head`
//! or made by a script from any other tool's output.

use serde::Serialize;
use std::fmt;
use std::io::{self, BufRead, Write};

/// The first line of every trace.
pub const MAGIC: &str = "# nvmfs-trace 1";

/// What a block request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Op {
    /// Data written.
    Write,
    /// Data read.
    Read,
    /// Sectors discarded (TRIM): the device may forget them.
    Discard,
    /// A cache flush (no sectors).
    Flush,
}

impl Op {
    /// The letter of the trace format.
    pub fn letter(self) -> char {
        match self {
            Op::Write => 'W',
            Op::Read => 'R',
            Op::Discard => 'D',
            Op::Flush => 'F',
        }
    }

    fn parse(text: &str) -> Option<Op> {
        match text {
            "W" => Some(Op::Write),
            "R" => Some(Op::Read),
            "D" => Some(Op::Discard),
            "F" => Some(Op::Flush),
            _ => None,
        }
    }
}

/// One block request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Record {
    /// Nanoseconds since the start of the trace.
    pub time_ns: u64,
    /// What it does.
    pub op: Op,
    /// First 512-byte sector.
    pub sector: u64,
    /// Sectors.
    pub sectors: u32,
}

/// The `#` lines of a trace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Header {
    /// Size of the traced device, when known.
    pub device_bytes: Option<u64>,
    /// Where the trace came from.
    pub source: Option<String>,
}

/// A malformed trace: the line (from 1) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// Line number, from 1; 0 for an error reading the file itself.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for TraceError {}

/// Reads a trace: the header at once, then records one line at a time (a trace need not
/// fit in memory).
pub struct TraceReader<R> {
    input: R,
    header: Header,
    line: usize,
    /// The first record line, read while looking for the end of the header.
    pending: Option<String>,
}

impl<R: BufRead> TraceReader<R> {
    /// Reads the header of `input`.
    pub fn new(input: R) -> Result<TraceReader<R>, TraceError> {
        let mut r = TraceReader {
            input,
            header: Header::default(),
            line: 0,
            pending: None,
        };
        let first = r.next_line()?;
        if first.as_deref().map(str::trim_end) != Some(MAGIC) {
            return Err(TraceError {
                line: r.line.max(1),
                message: format!("not an nvmfs trace: the first line must be {MAGIC:?}"),
            });
        }
        while let Some(text) = r.next_line()? {
            let Some(rest) = text.strip_prefix('#') else {
                r.pending = Some(text);
                break;
            };
            r.header_line(rest.trim())?;
        }
        Ok(r)
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    fn header_line(&mut self, text: &str) -> Result<(), TraceError> {
        let (key, value) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        let value = value.trim();
        match key {
            "device_bytes" => {
                let v = value.parse::<u64>().map_err(|_| TraceError {
                    line: self.line,
                    message: format!("bad device_bytes {value:?}: expected a byte count"),
                })?;
                self.header.device_bytes = Some(v);
            }
            "source" => self.header.source = Some(value.to_string()),
            _ => {}
        }
        Ok(())
    }

    /// The next non-blank line, without its newline; `None` at the end.
    fn next_line(&mut self) -> Result<Option<String>, TraceError> {
        let mut buf = String::new();
        loop {
            buf.clear();
            let n = self.input.read_line(&mut buf).map_err(|e| TraceError {
                line: self.line + 1,
                message: format!("cannot read: {e}"),
            })?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            let text = buf.trim_end_matches(['\n', '\r']);
            if !text.trim().is_empty() {
                return Ok(Some(text.to_string()));
            }
        }
    }

    fn next_record(&mut self) -> Result<Option<(usize, Record)>, TraceError> {
        loop {
            let text = match self.pending.take() {
                Some(t) => t,
                None => match self.next_line()? {
                    Some(t) => t,
                    None => return Ok(None),
                },
            };
            if text.starts_with('#') {
                continue;
            }
            return parse_record(&text)
                .map(|r| Some((self.line, r)))
                .map_err(|message| TraceError {
                    line: self.line,
                    message,
                });
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    /// A record with its line number.
    type Item = Result<(usize, Record), TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

fn parse_record(text: &str) -> Result<Record, String> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let [time, op, sector, sectors] = fields[..] else {
        return Err(format!(
            "expected 4 fields (time_ns op sector sectors), found {}: {text:?}",
            fields.len()
        ));
    };
    let number = |what: &str, t: &str| -> Result<u64, String> {
        t.parse::<u64>()
            .map_err(|_| format!("bad {what} {t:?}: expected a non-negative integer"))
    };
    let op = Op::parse(op).ok_or_else(|| {
        format!("bad operation {op:?}: expected W (write), R (read), D (discard) or F (flush)")
    })?;
    let sectors = u32::try_from(number("sector count", sectors)?)
        .map_err(|_| format!("sector count {sectors} is too large"))?;
    let sector = number("sector", sector)?;
    if sector.checked_add(u64::from(sectors)).is_none() {
        return Err(format!("sector {sector} + {sectors} overflows"));
    }
    Ok(Record {
        time_ns: number("time", time)?,
        op,
        sector,
        sectors,
    })
}

/// Writes a trace: the header first, then records.
pub struct TraceWriter<W: Write> {
    out: W,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header of a trace to `out`.
    pub fn new(mut out: W, header: &Header) -> io::Result<TraceWriter<W>> {
        writeln!(out, "{MAGIC}")?;
        if let Some(b) = header.device_bytes {
            writeln!(out, "# device_bytes {b}")?;
        }
        if let Some(s) = &header.source {
            // One line: a newline would end the header.
            writeln!(out, "# source {}", s.replace(['\n', '\r'], " "))?;
        }
        writeln!(out, "# time_ns op sector sectors")?;
        Ok(TraceWriter { out })
    }

    /// Appends one record.
    pub fn write(&mut self, r: &Record) -> io::Result<()> {
        writeln!(
            self.out,
            "{} {} {} {}",
            r.time_ns,
            r.op.letter(),
            r.sector,
            r.sectors
        )
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Writes a whole trace to `path`.
pub fn write_file(path: &std::path::Path, header: &Header, records: &[Record]) -> io::Result<()> {
    let file = std::fs::File::create(path)?;
    let mut w = TraceWriter::new(io::BufWriter::new(file), header)?;
    for r in records {
        w.write(r)?;
    }
    w.finish()?
        .into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records() -> Vec<Record> {
        vec![
            Record {
                time_ns: 0,
                op: Op::Write,
                sector: 2048,
                sectors: 8,
            },
            Record {
                time_ns: 11_034,
                op: Op::Read,
                sector: 0,
                sectors: 256,
            },
            Record {
                time_ns: 52_000,
                op: Op::Discard,
                sector: 4096,
                sectors: 2048,
            },
            Record {
                time_ns: 60_211,
                op: Op::Flush,
                sector: 0,
                sectors: 0,
            },
        ]
    }

    #[test]
    fn a_trace_round_trips_through_text() {
        let header = Header {
            device_bytes: Some(512 << 20),
            source: Some("ext4 on /dev/loop3\nsecond line".into()),
        };
        let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
        for r in records() {
            w.write(&r).unwrap();
        }
        let text = w.finish().unwrap();
        let reader = TraceReader::new(&text[..]).unwrap();
        assert_eq!(reader.header().device_bytes, Some(512 << 20));
        assert_eq!(
            reader.header().source.as_deref(),
            Some("ext4 on /dev/loop3 second line")
        );
        let got: Vec<(usize, Record)> = reader.map(Result::unwrap).collect();
        assert_eq!(got.iter().map(|(_, r)| *r).collect::<Vec<_>>(), records());
        // Lines: magic, device_bytes, source, column names, then the records.
        assert_eq!(got[0].0, 5);
    }

    #[test]
    fn bad_lines_are_named() {
        let text = "# nvmfs-trace 1\n# comment\n\n0 W 8 8\n5 X 8 8\n";
        let err = TraceReader::new(text.as_bytes())
            .unwrap()
            .find_map(Result::err)
            .unwrap();
        assert_eq!(err.line, 5);
        assert!(
            err.to_string().starts_with("line 5: bad operation \"X\""),
            "{err}"
        );

        let bad = |body: &str| {
            let text = format!("{MAGIC}\n{body}\n");
            TraceReader::new(text.as_bytes())
                .and_then(|r| r.collect::<Result<Vec<_>, _>>())
                .unwrap_err()
                .to_string()
        };
        assert!(bad("0 W 8").contains("line 2: expected 4 fields"));
        assert!(bad("0 W -8 8").contains("bad sector \"-8\""));
        assert!(bad("0 W 8 99999999999").contains("too large"));
        assert!(bad("x W 8 8").contains("bad time"));
        assert!(bad("# device_bytes lots").contains("line 2: bad device_bytes"));
        let err = TraceReader::new("0 W 8 8\n".as_bytes()).err().unwrap();
        assert!(err.to_string().contains("not an nvmfs trace"), "{err}");
        assert!(TraceReader::new("".as_bytes()).is_err());
    }
}
