//! Writing to stdout without panicking, and small formatting helpers shared by commands.

use std::io::Write;

/// Lets a closed pipe (`nvmfs info img | head -1`) end the process quietly, as with C tools,
/// instead of making every `print!` fail.
pub fn restore_sigpipe() {
    // SAFETY: resetting a signal disposition to its default before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Writes `text` to stdout. On failure (e.g. a full disk behind a redirect) prints
/// `nvmfs <cmd>: cannot write output: ...` and returns false.
pub fn print(cmd: &str, text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("nvmfs {cmd}: cannot write output: {e}");
            false
        }
    }
}

/// `err` prefixed with `path:` unless its message already names the path.
pub fn with_path(path: &std::path::Path, err: &dyn std::fmt::Display) -> String {
    let shown = path.display().to_string();
    let msg = err.to_string();
    if msg.contains(&shown) {
        msg
    } else {
        format!("{shown}: {msg}")
    }
}

/// `x` of `total` as a percentage (0 when `total` is 0).
pub fn percent(x: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        x as f64 * 100.0 / total as f64
    }
}

/// `1.2 ms`, `850 µs`, `3.40 s`.
pub fn format_duration(d: std::time::Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 1e6 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// A UUID in the usual 8-4-4-4-12 form.
pub fn uuid_string(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    dashed_uuid(&hex)
}

/// Inserts the dashes into a 32-digit hex UUID (other strings are returned as they are).
pub fn dashed_uuid(hex: &str) -> String {
    if hex.len() != 32 || !hex.is_ascii() {
        return hex.to_string();
    }
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Nanoseconds since the Unix epoch as ISO-8601 UTC, e.g. `2024-02-29T13:05:09Z`.
pub fn iso8601_utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = nvmfs_lab::study::env::civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            iso8601_utc(951_782_400 * 1_000_000_000),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            iso8601_utc(1_709_211_909_123_456_789),
            "2024-02-29T13:05:09Z"
        );
        assert_eq!(
            iso8601_utc(4_102_444_799 * 1_000_000_000),
            "2099-12-31T23:59:59Z"
        );
    }

    #[test]
    fn uuids() {
        let b: [u8; 16] = std::array::from_fn(|i| i as u8 * 17);
        assert_eq!(uuid_string(&b), "00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(dashed_uuid("abc"), "abc");
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(format_duration(Duration::from_micros(850)), "850 µs");
        assert_eq!(format_duration(Duration::from_micros(3400)), "3.4 ms");
        assert_eq!(format_duration(Duration::from_millis(3400)), "3.40 s");
    }
}
