//! Running the external programs (mkfs, mount, umount, losetup, modprobe)
//! with errors that say what was run and how it failed.

use std::error::Error;
use std::fmt;
use std::io;
use std::process::{Command, Output, Stdio};

/// Lines of a failing program's stderr kept in an error. The first lines
/// hold the reason; mkfs.xfs, for one, follows its one-line reason with a
/// 30-line usage text that would bury it.
const STDERR_KEEP_LINES: usize = 4;

/// A program and its arguments, kept as strings so that errors and reports
/// can show the exact command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandLine {
    program: String,
    args: Vec<String>,
}

impl CommandLine {
    /// `program` with `args`.
    pub(crate) fn new(program: &str, args: &[&str]) -> Self {
        CommandLine {
            program: program.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// A command line given as program followed by arguments (a
    /// [`Variant`](super::Variant)'s `mkfs_args`); an empty one is an error.
    pub(crate) fn from_argv(argv: &[String]) -> io::Result<Self> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command line"))?;
        Ok(CommandLine {
            program: program.clone(),
            args: args.to_vec(),
        })
    }

    /// The same command with one more argument.
    pub(crate) fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// The program (first word).
    pub(crate) fn program(&self) -> &str {
        &self.program
    }

    /// Runs the command to completion with no stdin and returns its stdout.
    /// A missing program, a non-zero exit or death by a signal is an error
    /// whose message holds the command line, the exit status and the start
    /// of stderr; the error's source is a [`CommandError`].
    pub(crate) fn run(&self) -> io::Result<String> {
        let out = self.output()?;
        if !out.status.success() {
            return Err(io::Error::other(CommandError {
                command: self.to_string(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs the command and returns its output whatever the exit status;
    /// only failing to start it is an error.
    pub(crate) fn output(&self) -> io::Result<Output> {
        Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| self.spawn_error(e))
    }

    fn spawn_error(&self, e: io::Error) -> io::Error {
        let hint = if e.kind() == io::ErrorKind::NotFound {
            format!("{} is not installed or not on PATH", self.program)
        } else {
            e.to_string()
        };
        io::Error::new(e.kind(), format!("cannot run `{self}`: {hint}"))
    }
}

impl fmt::Display for CommandLine {
    /// Shell-like: words joined by spaces, words with spaces or quotes
    /// single-quoted, so the line can be pasted into a shell.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", quote(&self.program))?;
        for a in &self.args {
            write!(f, " {}", quote(a))?;
        }
        Ok(())
    }
}

fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=.,/:+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// A program that ran but failed (non-zero exit or killed by a signal).
#[derive(Debug, Clone)]
pub(crate) struct CommandError {
    command: String,
    status: String,
    stderr: String,
}

impl CommandError {
    /// Whether the program complained about a busy target (umount, losetup
    /// -d): worth retrying after a moment.
    pub(crate) fn is_busy(&self) -> bool {
        let s = self.stderr.to_ascii_lowercase();
        s.contains("busy")
    }

    /// The `CommandError` behind an error from [`CommandLine::run`], if any.
    pub(crate) fn of(e: &io::Error) -> Option<&CommandError> {
        e.get_ref().and_then(|inner| inner.downcast_ref())
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` failed ({})", self.command, self.status)?;
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if !lines.is_empty() {
            let kept = lines.len().min(STDERR_KEEP_LINES);
            write!(f, ": {}", lines[..kept].join(" / "))?;
            if kept < lines.len() {
                write!(f, " / ... ({} more lines)", lines.len() - kept)?;
            }
        }
        Ok(())
    }
}

impl Error for CommandError {}
