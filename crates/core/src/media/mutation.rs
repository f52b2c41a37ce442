//! Test-only switch for the mutation check: skip one flush or fence call site (identified by
//! source file and line of the `Pm::persist` / `Pm::fence` call) and see whether the crash
//! tests notice. Off unless a test turns it on; the cost when off is one relaxed load.

use std::collections::BTreeSet;
use std::panic::Location;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

const OFF: u8 = 0;
const RECORD: u8 = 1;
const SKIP: u8 = 2;

static MODE: AtomicU8 = AtomicU8::new(OFF);
static SITES: Mutex<BTreeSet<Site>> = Mutex::new(BTreeSet::new());
static SKIPPED: Mutex<Option<Site>> = Mutex::new(None);

/// A persist or fence call site.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Site {
    pub kind: &'static str,
    pub file: &'static str,
    pub line: u32,
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}:{}", self.kind, self.file, self.line)
    }
}

/// Starts collecting the sites that run.
pub fn record() {
    SITES.lock().unwrap().clear();
    MODE.store(RECORD, Ordering::SeqCst);
}

/// The sites seen since `record`.
pub fn recorded() -> Vec<Site> {
    SITES.lock().unwrap().iter().cloned().collect()
}

/// Skips `site` from now on (None: back to normal).
pub fn skip(site: Option<Site>) {
    let on = site.is_some();
    *SKIPPED.lock().unwrap() = site;
    MODE.store(if on { SKIP } else { OFF }, Ordering::SeqCst);
}

/// True if the call at `loc` must be skipped. Records it when recording.
#[inline]
pub(crate) fn skipped(kind: &'static str, loc: &'static Location<'static>) -> bool {
    match MODE.load(Ordering::Relaxed) {
        OFF => false,
        mode => slow(mode, kind, loc),
    }
}

#[cold]
fn slow(mode: u8, kind: &'static str, loc: &'static Location<'static>) -> bool {
    let site = Site {
        kind,
        file: loc.file(),
        line: loc.line(),
    };
    if mode == RECORD {
        SITES.lock().unwrap().insert(site);
        return false;
    }
    SKIPPED.lock().unwrap().as_ref() == Some(&site)
}
