//! Sizes on the command line (`512M`, `8G`, `4096`) and in output (`16 MiB`).

const UNITS: [(&str, u64); 5] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("B", 1),
];

/// Parses a byte count: a whole number, optionally followed by a binary unit
/// `K`, `M`, `G`, `T` (or `KiB`, `MiB`, `GiB`, `TiB`, any case), or `B` for bytes.
/// `KB`, `MB`, ... are refused because they usually mean powers of 1000.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty size: expected e.g. 4096, 512M or 8G".into());
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, suffix) = s.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "invalid size {text:?}: expected a whole number of bytes, optionally with a K, M, G or T suffix"
        ));
    }
    let suffix = suffix.trim();
    let unit: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" | "mb" | "gb" | "tb" => {
            let letter = &suffix[..1].to_ascii_uppercase();
            return Err(format!(
                "ambiguous unit {suffix:?} in {text:?}: sizes are binary, write {letter} or {letter}iB"
            ));
        }
        _ if suffix.starts_with(['.', ',']) => {
            return Err(format!("invalid size {text:?}: use a whole number (e.g. 1536M instead of 1.5G)"));
        }
        _ => {
            return Err(format!(
                "invalid size {text:?}: unknown unit {suffix:?} (use K, M, G or T, or KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("size {text:?} is too large"))?;
    n.checked_mul(unit)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// `16777216` -> `16 MiB`, `1610612736` -> `1.5 GiB`, `100` -> `100 B`.
pub fn format_size(bytes: u64) -> String {
    for (name, unit) in UNITS {
        if bytes >= unit && unit > 1 {
            return if bytes.is_multiple_of(unit) {
                format!("{} {name}", bytes / unit)
            } else {
                format!("{:.1} {name}", bytes as f64 / unit as f64)
            };
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_bytes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 4096 "), Ok(4096));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn binary_suffixes() {
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("8G"), Ok(8 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("1gib"), Ok(1 << 30));
        assert_eq!(parse_size("3TiB"), Ok(3 << 40));
        assert_eq!(parse_size("16 M"), Ok(16 << 20));
    }

    #[test]
    fn invalid() {
        for bad in [
            "", "   ", "M", "-1", "-1G", "1.5G", "1,5G", "12X", "1MB", "1kb", "1GiBs", "0x100",
            "1 G B", "G1",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn overflow() {
        assert!(parse_size("18446744073709551616").is_err());
        assert!(parse_size("16777216T").is_err());
        assert!(parse_size("99999999999999999999999G").is_err());
    }

    #[test]
    fn messages_name_the_input() {
        let e = parse_size("12X").unwrap_err();
        assert!(e.contains("12X") && e.contains("unknown unit"), "{e}");
        let e = parse_size("1MB").unwrap_err();
        assert!(e.contains("M or MiB"), "{e}");
        let e = parse_size("1.5G").unwrap_err();
        assert!(e.contains("whole number"), "{e}");
    }

    #[test]
    fn formatting() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(100), "100 B");
        assert_eq!(format_size(4096), "4 KiB");
        assert_eq!(format_size(16 << 20), "16 MiB");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(1 << 40), "1 TiB");
    }
}
