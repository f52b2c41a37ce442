//! Postmark 1.51's parameters, their defaults and limits, and its command
//! language ("set size 500 10000", "run", "quit", ...), so that one command file
//! drives both the real program and ours.
//!
//! The parser is stricter than Postmark's: Postmark reads numbers with `atoi`
//! and, on a value it refuses, prints "Error: ..." and keeps the old one, so a
//! typo silently benchmarks something else. Here every line Postmark would not
//! apply exactly as written is an error naming the line; a file this parser
//! accepts sets the same values in both programs.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Largest `number`: the file table has twice as many slots.
pub const MAX_FILES: u32 = 50_000_000;
/// Largest file size: Postmark keeps a source buffer of twice this in memory.
pub const MAX_FILE_SIZE: u32 = 256 << 20;
/// Largest read or write block.
pub const MAX_BLOCK_SIZE: u32 = 64 << 20;
/// Most subdirectories per location.
pub const MAX_SUBDIRECTORIES: u32 = 1_000_000;
/// Largest sum of location weights (Postmark expands the weights into an index).
pub const MAX_LOCATION_WEIGHT: u32 = 1_000_000;
/// Largest `seed`, `transactions`: Postmark keeps them in a C `int`.
pub const MAX_INT: u32 = i32::MAX as u32;

/// Which report `run` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportFormat {
    Verbose,
    Terse,
}

/// A working directory (`set location`) and its share of the files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    pub path: String,
    pub weight: u32,
}

/// Every parameter of Postmark 1.51, named after its `set` command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostmarkConfig {
    /// `set number`: files created before the transactions; the file table has
    /// twice as many slots.
    pub number: u32,
    /// `set transactions`.
    pub transactions: u32,
    /// `set size LOW HIGH`: new files are LOW..HIGH-1 bytes (uniform), appends
    /// grow them up to HIGH.
    pub size_low: u32,
    pub size_high: u32,
    /// `set subdirectories`: per location; 0 and 1 both mean none (Postmark
    /// uses subdirectories only when there are more than one).
    pub subdirectories: u32,
    /// `set read`: bytes per read call.
    pub read_block_size: u32,
    /// `set write`: bytes per write call.
    pub write_block_size: u32,
    /// `set buffering`: stdio (fopen/fread/fwrite) when true, open/read/write when false.
    pub buffering: bool,
    /// `set bias read`: chance in tenths of reading rather than appending;
    /// `None` (Postmark's -1) skips the read/append half of every transaction.
    pub bias_read: Option<u32>,
    /// `set bias create`: chance in tenths of creating rather than deleting;
    /// `None` (-1) skips the create/delete half.
    pub bias_create: Option<u32>,
    /// `set seed`.
    pub seed: u32,
    /// `set location`: none means the current directory (for ours, the
    /// target's root; see [`super::engine`] for several).
    pub locations: Vec<Location>,
    /// `set report`.
    pub report: ReportFormat,
}

impl Default for PostmarkConfig {
    /// Postmark 1.51's defaults.
    fn default() -> Self {
        PostmarkConfig {
            number: 500,
            transactions: 500,
            size_low: 500,
            size_high: 10_000,
            subdirectories: 0,
            read_block_size: 512,
            write_block_size: 512,
            buffering: true,
            bias_read: Some(5),
            bias_create: Some(5),
            seed: 42,
            locations: Vec::new(),
            report: ReportFormat::Verbose,
        }
    }
}

impl PostmarkConfig {
    /// Checks every parameter against Postmark's own limits and ours.
    pub fn validate(&self) -> Result<(), String> {
        in_range("number (files)", self.number, 1, MAX_FILES)?;
        in_range("transactions", self.transactions, 1, MAX_INT)?;
        in_range("size low", self.size_low, 1, MAX_FILE_SIZE)?;
        in_range("size high", self.size_high, self.size_low, MAX_FILE_SIZE)?;
        in_range("subdirectories", self.subdirectories, 0, MAX_SUBDIRECTORIES)?;
        in_range("read block size", self.read_block_size, 1, MAX_BLOCK_SIZE)?;
        in_range("write block size", self.write_block_size, 1, MAX_BLOCK_SIZE)?;
        for (what, bias) in [
            ("bias read", self.bias_read),
            ("bias create", self.bias_create),
        ] {
            if let Some(b) = bias {
                in_range(what, b, 0, 10)?;
            }
        }
        in_range("seed", self.seed, 1, MAX_INT)?;
        validate_locations(&self.locations)
    }

    /// Applies one line of Postmark's command language. `Ok(Some(..))` for
    /// `run` and `quit`, which the caller acts on; `Ok(None)` for settings
    /// and for the commands that change nothing (`show`, `help`).
    pub fn apply(&mut self, line: &str) -> Result<Option<Action>, String> {
        let line = line.trim();
        let (name, param) = match_command(line)?;
        let param = param.filter(|p| !p.is_empty());
        match name {
            "run" => return Ok(Some(Action::Run)),
            "quit" => return Ok(Some(Action::Quit)),
            "show" | "help" => {}
            "load" => return Err("'load' is not supported: put the file's lines here".into()),
            _ => self.set(
                name,
                param.ok_or_else(|| format!("'{name}' needs a value"))?,
            )?,
        }
        Ok(None)
    }

    fn set(&mut self, name: &str, param: &str) -> Result<(), String> {
        match name {
            "set size" => self.set_size(param)?,
            "set number" => self.number = positive(param, "number of files")?,
            "set seed" => self.seed = positive(param, "seed")?,
            "set transactions" => self.transactions = command_transactions(param)?,
            "set location" => set_location(&mut self.locations, param)?,
            "set subdirectories" => self.subdirectories = positive(param, "subdirectories")?,
            "set read" => self.read_block_size = positive(param, "read block size")?,
            "set write" => self.write_block_size = positive(param, "write block size")?,
            "set buffering" => self.buffering = parse_buffering(param)?,
            "set bias read" => self.bias_read = parse_bias(param)?,
            "set bias create" => self.bias_create = parse_bias(param)?,
            "set report" => self.report = parse_report(param)?,
            _ => unreachable!("every command of COMMANDS is handled"),
        }
        Ok(())
    }

    /// `set size LOW [HIGH]`: one value sets a fixed size, as in Postmark.
    fn set_size(&mut self, param: &str) -> Result<(), String> {
        let mut words = param.split_whitespace();
        let low = positive(words.next().unwrap_or(""), "file size low bound")?;
        let high = match words.next() {
            Some(w) => positive(w, "file size high bound")?,
            None => low,
        };
        if words.next().is_some() {
            return Err(format!("'set size' takes LOW [HIGH], got '{param}'"));
        }
        if high < low {
            // Postmark silently sets HIGH = LOW here.
            return Err(format!(
                "file size high bound {high} is below the low bound {low}"
            ));
        }
        (self.size_low, self.size_high) = (low, high);
        Ok(())
    }
}

/// What a command line asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Run,
    Quit,
}

/// A command file read like Postmark reads one: lines in order, a `run` runs
/// the benchmark with the settings so far, `quit` ends the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandFile {
    /// The configuration of each `run`, in order.
    pub runs: Vec<PostmarkConfig>,
    /// The settings after the last line read.
    pub config: PostmarkConfig,
    /// Whether the file ended with `quit` (without it the real program goes on
    /// to prompt on its standard input).
    pub quits: bool,
}

/// A line of a command file that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandError {
    /// 1-based.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for CommandError {}

/// Reads a Postmark command file starting from the defaults. Blank lines and
/// lines starting with `#` are skipped (Postmark answers "Eh?" to them and
/// goes on). Each `run` configuration is validated.
pub fn parse_command_file(text: &str) -> Result<CommandFile, CommandError> {
    let mut config = PostmarkConfig::default();
    let mut runs = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let err = |message: String| CommandError {
            line: i + 1,
            message,
        };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match config.apply(line).map_err(err)? {
            Some(Action::Run) => {
                config.validate().map_err(err)?;
                runs.push(config.clone());
            }
            Some(Action::Quit) => {
                return Ok(CommandFile {
                    runs,
                    config,
                    quits: true,
                })
            }
            None => {}
        }
    }
    Ok(CommandFile {
        runs,
        config,
        quits: false,
    })
}

/// Postmark's commands, in its table's order (it takes the first whose name
/// starts the line).
const COMMANDS: [&str; 17] = [
    "set size",
    "set number",
    "set seed",
    "set transactions",
    "set location",
    "set subdirectories",
    "set read",
    "set write",
    "set buffering",
    "set bias read",
    "set bias create",
    "set report",
    "run",
    "load",
    "show",
    "help",
    "quit",
];

/// Splits a line into a command of [`COMMANDS`] and its parameter. Unlike
/// Postmark, the name must end at a space or the end of the line ("set
/// readers 4" is not "set read").
fn match_command(line: &str) -> Result<(&'static str, Option<&str>), String> {
    if line.starts_with('!') {
        return Err("shell escapes ('!') are not supported".into());
    }
    for name in COMMANDS {
        if let Some(rest) = line.strip_prefix(name) {
            if rest.is_empty() {
                return Ok((name, None));
            }
            if rest.starts_with(char::is_whitespace) {
                return Ok((name, Some(rest.trim())));
            }
        }
    }
    Err(format!(
        "unknown command '{line}' (Postmark's commands: {})",
        COMMANDS.join(", ")
    ))
}

/// A whole positive decimal number that fits a C `int`, as `cli_generic_int`
/// accepts (but without `atoi`'s tolerance for trailing junk).
fn positive(word: &str, what: &str) -> Result<u32, String> {
    match word.parse::<u32>() {
        Ok(v) if (1..=MAX_INT).contains(&v) => Ok(v),
        _ => Err(format!(
            "invalid {what} '{word}': a whole number 1..{MAX_INT}"
        )),
    }
}

/// A bias as `set bias read|create` takes it: 0..10 tenths, or -1 to disable.
pub fn parse_bias(word: &str) -> Result<Option<u32>, String> {
    match word.parse::<i32>() {
        Ok(-1) => Ok(None),
        Ok(v @ 0..=10) => Ok(Some(v as u32)),
        _ => Err(format!(
            "invalid bias '{word}': 0..10 (tenths of a chance) or -1 to disable"
        )),
    }
}

/// `set transactions N` in a command file: Postmark 1.51 prints progress
/// every `transactions / 10` transactions and dies dividing by zero below 10,
/// so a file meant for both programs needs at least 10. (The engine itself
/// takes any positive number.)
fn command_transactions(word: &str) -> Result<u32, String> {
    let n = positive(word, "transactions")?;
    if n < 10 {
        return Err(format!(
            "{n} transactions: Postmark 1.51 dies (division by zero) below 10"
        ));
    }
    Ok(n)
}

/// `set buffering true|false`.
pub fn parse_buffering(word: &str) -> Result<bool, String> {
    match word {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("invalid buffering '{word}': true or false")),
    }
}

/// `set report verbose|terse`.
pub fn parse_report(word: &str) -> Result<ReportFormat, String> {
    match word {
        "verbose" => Ok(ReportFormat::Verbose),
        "terse" => Ok(ReportFormat::Terse),
        _ => Err(format!("invalid report format '{word}': verbose or terse")),
    }
}

/// `set location PATH [WEIGHT]` replaces the list, `+PATH [WEIGHT]` adds to it,
/// `-PATH` removes from it.
fn set_location(list: &mut Vec<Location>, param: &str) -> Result<(), String> {
    if let Some(path) = param.strip_prefix('-') {
        let path = path.trim();
        let before = list.len();
        list.retain(|l| l.path != path);
        if list.len() == before {
            return Err(format!("cannot remove location '{path}': not in the list"));
        }
        return Ok(());
    }
    let (add, spec) = match param.strip_prefix('+') {
        Some(rest) => (true, rest.trim()),
        None => (false, param),
    };
    let location = parse_location(spec)?;
    if !add {
        list.clear();
    }
    list.push(location);
    Ok(())
}

/// `PATH [WEIGHT]`: Postmark takes the text after the last space as the weight
/// whenever there is a space, so a path cannot contain one.
fn parse_location(spec: &str) -> Result<Location, String> {
    let (path, weight) = match spec.rsplit_once(char::is_whitespace) {
        Some((path, w)) => (path.trim(), positive(w, "location weight")?),
        None => (spec, 1),
    };
    if path.is_empty() || path.contains(char::is_whitespace) {
        return Err(format!(
            "invalid location '{spec}': PATH [WEIGHT], no spaces in PATH"
        ));
    }
    Ok(Location {
        path: path.to_string(),
        weight,
    })
}

fn validate_locations(list: &[Location]) -> Result<(), String> {
    let mut total = 0u64;
    for (i, l) in list.iter().enumerate() {
        if l.path.is_empty() || l.path.contains(char::is_whitespace) {
            return Err(format!("location '{}': empty or containing spaces", l.path));
        }
        if l.path.split('/').any(|c| c == "..") {
            return Err(format!("location '{}': '..' is not allowed", l.path));
        }
        if list[..i].iter().any(|o| o.path == l.path) {
            return Err(format!("location '{}' is listed twice", l.path));
        }
        in_range("location weight", l.weight, 1, MAX_LOCATION_WEIGHT)?;
        total += u64::from(l.weight);
    }
    if total > u64::from(MAX_LOCATION_WEIGHT) {
        return Err(format!(
            "location weights add up to {total}, more than {MAX_LOCATION_WEIGHT}"
        ));
    }
    Ok(())
}

fn in_range(what: &str, v: u32, min: u32, max: u32) -> Result<(), String> {
    if (min..=max).contains(&v) {
        Ok(())
    } else {
        Err(format!("{what} must be {min}..={max}, got {v}"))
    }
}
