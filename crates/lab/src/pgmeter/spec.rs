//! Iometer access specifications: what one I/O of a test looks like.
//!
//! An access specification is a list of lines. Each line owns a share of the accesses (percent)
//! and says the transfer size, the share of reads (the rest are writes), the share of random
//! accesses (the rest are sequential: they start where the stream's previous I/O ended) and
//! the alignment of the offsets. An I/O is drawn as Iometer draws it: a line by its share,
//! then read or write by the line's read share, then random or sequential by its random share.
//!
//! The presets are Iometer's standard specifications as seed 001 (Bryant et al., 2002) gives
//! them in its appendix, with `../shared/reference/WORKLOADS.md` section 4.

use serde::Serialize;

/// Offsets on sector boundaries: Iometer's default alignment ("align I/Os on sector
/// boundaries"), which its distributed specifications keep.
pub const SECTOR_BYTES: u64 = 512;

/// The largest transfer a line may ask for (the engine holds one buffer of it per thread).
pub const TRANSFER_BYTES_MAX: u64 = 64 << 20;

/// One line of an access specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AccessLine {
    /// Share of all I/Os that use this line, percent ("% of access specification").
    pub access_percent: u32,
    /// Bytes per I/O ("request size").
    pub transfer_bytes: u64,
    /// Share of this line's I/Os that read, percent; the others write.
    pub read_percent: u32,
    /// Share of this line's I/Os at a random offset, percent; the others are sequential.
    pub random_percent: u32,
    /// Every offset is a multiple of this ("align I/Os on").
    pub align_bytes: u64,
}

impl AccessLine {
    /// A line aligned on sector boundaries.
    pub const fn new(
        access_percent: u32,
        transfer_bytes: u64,
        read_percent: u32,
        random_percent: u32,
    ) -> Self {
        AccessLine {
            access_percent,
            transfer_bytes,
            read_percent,
            random_percent,
            align_bytes: SECTOR_BYTES,
        }
    }
}

/// A named access specification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccessSpec {
    pub name: String,
    pub lines: Vec<AccessLine>,
}

/// One drawn I/O: which line, and whether it reads and whether it is random.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub line: usize,
    pub read: bool,
    pub random: bool,
}

/// The names [`AccessSpec::preset`] knows.
pub const PRESETS: [&str; 5] = [
    "file-server",
    "web-server",
    "oltp-8k",
    "seq-read",
    "seq-write",
];

/// (size, share) of the File Server mix: 80% reads, all random (seed 001, appendix).
const FILE_SERVER: [(u64, u32); 8] = [
    (512, 10),
    (1 << 10, 5),
    (2 << 10, 5),
    (4 << 10, 60),
    (8 << 10, 2),
    (16 << 10, 4),
    (32 << 10, 4),
    (64 << 10, 10),
];

/// (size, share) of the Web Server mix: all reads, all random (seed 001, appendix).
const WEB_SERVER: [(u64, u32); 10] = [
    (512, 22),
    (1 << 10, 15),
    (2 << 10, 8),
    (4 << 10, 23),
    (8 << 10, 15),
    (16 << 10, 2),
    (32 << 10, 6),
    (64 << 10, 7),
    (128 << 10, 1),
    (512 << 10, 1),
];

impl AccessSpec {
    /// Iometer's File Server: 512 B to 64 KiB, 80% reads, 100% random.
    pub fn file_server() -> Self {
        Self::mix("file-server", &FILE_SERVER, 80)
    }

    /// Iometer's Web Server: 512 B to 512 KiB, 100% reads, 100% random.
    pub fn web_server() -> Self {
        Self::mix("web-server", &WEB_SERVER, 100)
    }

    /// Intel's 8K OLTP: 8 KiB transfers, 67% reads, 100% random.
    pub fn oltp_8k() -> Self {
        AccessSpec {
            name: "oltp-8k".into(),
            lines: vec![AccessLine::new(100, 8 << 10, 67, 100)],
        }
    }

    /// Sequential reads of a fixed record size (seed 001: 8 KiB on the small system, 64 KiB
    /// on the others), records aligned on their own size.
    pub fn sequential_read(record_bytes: u64) -> Self {
        Self::sequential("seq-read", record_bytes, 100)
    }

    /// Sequential writes of a fixed record size, records aligned on their own size.
    pub fn sequential_write(record_bytes: u64) -> Self {
        Self::sequential("seq-write", record_bytes, 0)
    }

    /// A preset by name ([`PRESETS`]); `record_bytes` is the sequential tests' record size.
    pub fn preset(name: &str, record_bytes: u64) -> Result<Self, String> {
        match name {
            "file-server" => Ok(Self::file_server()),
            "web-server" => Ok(Self::web_server()),
            "oltp-8k" => Ok(Self::oltp_8k()),
            "seq-read" => Ok(Self::sequential_read(record_bytes)),
            "seq-write" => Ok(Self::sequential_write(record_bytes)),
            _ => Err(format!(
                "unknown access specification {name:?} (known: {})",
                PRESETS.join(", ")
            )),
        }
    }

    fn mix(name: &str, sizes: &[(u64, u32)], read_percent: u32) -> Self {
        AccessSpec {
            name: name.into(),
            lines: sizes
                .iter()
                .map(|&(bytes, share)| AccessLine::new(share, bytes, read_percent, 100))
                .collect(),
        }
    }

    fn sequential(name: &str, record_bytes: u64, read_percent: u32) -> Self {
        let mut line = AccessLine::new(100, record_bytes, read_percent, 0);
        // Whole records: a stream never straddles two (any alignment > 0 is valid).
        line.align_bytes = record_bytes.max(1);
        AccessSpec {
            name: name.into(),
            lines: vec![line],
        }
    }

    /// Parses lines `SIZE:ACCESS%:READ%:RANDOM%[:ALIGN]` separated by commas, sizes in bytes
    /// or with a K or M suffix (2^10, 2^20), e.g. `4K:60:80:100,64K:40:80:100:4K`. ALIGN
    /// defaults to 512 (sector boundaries). The result is validated.
    pub fn parse(name: &str, text: &str) -> Result<Self, String> {
        let lines = text
            .split(',')
            .map(|l| parse_line(l.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        let spec = AccessSpec {
            name: name.into(),
            lines,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Checks that the shares of the lines add up to 100, each percentage is at most 100,
    /// every transfer is 1 byte ..= 64 MiB and every alignment at least 1 and at most the
    /// largest transfer the engine allows.
    pub fn validate(&self) -> Result<(), String> {
        if self.lines.is_empty() {
            return Err(format!("access specification {}: no lines", self.name));
        }
        for (i, l) in self.lines.iter().enumerate() {
            check_line(l).map_err(|e| format!("{} line {}: {e}", self.name, i + 1))?;
        }
        let total: u64 = self.lines.iter().map(|l| u64::from(l.access_percent)).sum();
        if total != 100 {
            return Err(format!(
                "{}: the lines' access percentages add up to {total}, not 100",
                self.name
            ));
        }
        Ok(())
    }

    /// The largest transfer of any line.
    pub fn max_transfer_bytes(&self) -> u64 {
        self.lines
            .iter()
            .map(|l| l.transfer_bytes)
            .max()
            .unwrap_or(0)
    }

    /// Draws one I/O: a line by the lines' shares, then read or write, then random or
    /// sequential, each an independent uniform percent. The spec must be valid.
    pub fn draw(&self, rng: &mut fastrand::Rng) -> Access {
        let mut p = rng.u32(0..100);
        let line = self
            .lines
            .iter()
            .position(|l| {
                let hit = p < l.access_percent;
                p = p.saturating_sub(l.access_percent);
                hit
            })
            // Unreachable for a valid spec (shares add up to 100); the last line otherwise.
            .unwrap_or(self.lines.len() - 1);
        let l = &self.lines[line];
        Access {
            line,
            read: rng.u32(0..100) < l.read_percent,
            random: rng.u32(0..100) < l.random_percent,
        }
    }
}

fn check_line(l: &AccessLine) -> Result<(), String> {
    for (what, v) in [
        ("access", l.access_percent),
        ("read", l.read_percent),
        ("random", l.random_percent),
    ] {
        if v > 100 {
            return Err(format!("{what} percentage {v} is over 100"));
        }
    }
    if l.transfer_bytes == 0 || l.transfer_bytes > TRANSFER_BYTES_MAX {
        return Err(format!(
            "transfer size {} must be 1 ..= {TRANSFER_BYTES_MAX} bytes",
            l.transfer_bytes
        ));
    }
    if l.align_bytes == 0 || l.align_bytes > TRANSFER_BYTES_MAX {
        return Err(format!(
            "alignment {} must be 1 ..= {TRANSFER_BYTES_MAX} bytes",
            l.align_bytes
        ));
    }
    Ok(())
}

fn parse_line(text: &str) -> Result<AccessLine, String> {
    let fields: Vec<&str> = text.split(':').map(str::trim).collect();
    if !(4..=5).contains(&fields.len()) {
        return Err(format!(
            "access line {text:?}: want SIZE:ACCESS%:READ%:RANDOM%[:ALIGN]"
        ));
    }
    let pct = |s: &str, what: &str| -> Result<u32, String> {
        s.trim_end_matches('%')
            .parse()
            .map_err(|_| format!("access line {text:?}: {what} percentage {s:?} is not a number"))
    };
    let mut line = AccessLine::new(
        pct(fields[1], "access")?,
        parse_size(fields[0]).map_err(|e| format!("access line {text:?}: {e}"))?,
        pct(fields[2], "read")?,
        pct(fields[3], "random")?,
    );
    if let Some(a) = fields.get(4) {
        line.align_bytes = parse_size(a).map_err(|e| format!("access line {text:?}: {e}"))?;
    }
    Ok(line)
}

/// Bytes, or a number with a K or M suffix (binary).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("size {s:?} is not a number of bytes (suffix K or M allowed)"))
}
