//! Metadata-heavy workloads on many small files, either all in one flat
//! directory or spread over a deep tree of directories ([`Layout`]).

use super::data::pattern;
use super::measure::{measure, Limits, Measured, Workload};
use super::session::Session;
use super::threads::Lane;
use super::Params;
use crate::targets::api::{MicroFile, MicroFs};
use std::collections::HashSet;
use std::hint::black_box;
use std::io;
use std::ops::Range;

pub const FILE_16K: usize = 16 * 1024;

/// Where the `count` files of a metadata workload live below its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// All files directly in the workload's directory.
    Flat,
    /// Every file `depth` directories below the workload's directory: file
    /// `i` is at `d<a>/d<b>/.../f<i>`, where `a, b, ...` are the leading
    /// `depth` digits of `i` written with `depth + 1` digits in base `width`
    /// (its last digit picks its place among the `width` files of its leaf
    /// directory). `width` is the smallest (at least 2) for which
    /// `width^(depth+1) >= count`, so the tree is as narrow as the file
    /// count allows and every directory holds at most `width` entries.
    Deep { depth: u32, width: u64 },
}

impl Layout {
    /// The deep layout of `count` files at `depth` (>= 1) levels.
    pub fn deep(count: usize, depth: u32) -> Layout {
        let fits = |w: u64| {
            (0..=depth)
                .try_fold(1u64, |acc, _| acc.checked_mul(w))
                .is_none_or(|c| c >= count as u64)
        };
        let mut width = 2;
        while !fits(width) {
            width += 1;
        }
        Layout::Deep { depth, width }
    }

    /// Directory levels between the workload's directory and each file.
    pub fn depth(self) -> u32 {
        match self {
            Layout::Flat => 0,
            Layout::Deep { depth, .. } => depth,
        }
    }

    /// The directories above file `i`, outermost first ("d1", "d1/d0", ...).
    fn dirs_of(self, i: usize) -> Vec<String> {
        let Layout::Deep { depth, width } = self else {
            return Vec::new();
        };
        let mut digits = Vec::with_capacity(depth as usize);
        let mut rest = i as u64 / width; // drop the leaf digit
        for _ in 0..depth {
            digits.push(rest % width);
            rest /= width;
        }
        let mut path = String::new();
        digits
            .iter()
            .rev()
            .map(|d| {
                if !path.is_empty() {
                    path.push('/');
                }
                path.push_str(&format!("d{d}"));
                path.clone()
            })
            .collect()
    }

    /// Path of file `i` relative to the workload's directory.
    pub fn file(self, i: usize) -> String {
        match self.dirs_of(i).pop() {
            Some(leaf) => format!("{leaf}/f{i:07}"),
            None => format!("f{i:07}"),
        }
    }

    /// The directories `count` files need, parents before children.
    pub fn dirs(self, count: usize) -> Vec<String> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for i in 0..count {
            for d in self.dirs_of(i) {
                if seen.insert(d.clone()) {
                    out.push(d);
                }
            }
        }
        out
    }

    /// How many directories `count` files need (for sizing the image).
    pub fn dir_count(self, count: usize) -> usize {
        match self {
            Layout::Flat => 0,
            Layout::Deep { depth, width } => {
                // Level k (1..=depth) has ceil(count / width^(depth+1-k)) directories.
                let mut n = 0u64;
                let mut span = width;
                for _ in 0..depth {
                    n += (count as u64).div_ceil(span);
                    span = span.saturating_mul(width);
                }
                n as usize
            }
        }
    }
}

/// Creates (or truncates) `name` with `content` and closes it.
fn write_file<F: MicroFs>(fs: &F, name: &F::Name, content: &[u8]) -> io::Result<()> {
    let file = fs.create(name)?;
    file.write_all_at(content, 0)
}

/// Resolves the paths of files `which` below `dir` up front (untimed).
fn names<F: MicroFs>(fs: &F, dir: &str, which: Range<usize>, layout: Layout) -> Vec<F::Name> {
    which
        .map(|i| fs.name(&format!("{dir}/{}", layout.file(i))))
        .collect()
}

/// Makes `dir` and, for a deep layout, the tree below it (untimed setup).
fn make_dirs<F: MicroFs>(fs: &F, dir: &str, count: usize, layout: Layout) -> io::Result<()> {
    fs.mkdir(&fs.name(dir))?;
    for d in layout.dirs(count) {
        fs.mkdir(&fs.name(&format!("{dir}/{d}")))?;
    }
    Ok(())
}

/// Makes `dir` holding `count` 16 KiB files (untimed setup).
fn make_files<F: MicroFs>(
    fs: &F,
    dir: &str,
    count: usize,
    layout: Layout,
) -> io::Result<Vec<F::Name>> {
    make_dirs(fs, dir, count, layout)?;
    let content = pattern(FILE_16K, 5);
    let names = names(fs, dir, 0..count, layout);
    for name in &names {
        write_file(fs, name, &content)?;
    }
    Ok(names)
}

/// The workload directory of a layout ("files" and "files-deep", ...).
fn dir_name(base: &str, layout: Layout) -> String {
    match layout {
        Layout::Flat => base.to_string(),
        Layout::Deep { .. } => format!("{base}-deep"),
    }
}

/// The files shared by stat and open-read-16k (one set per layout), made on
/// first use.
pub(crate) fn file_set<'s, F: MicroFs>(
    s: &'s mut Session<'_, F>,
    layout: Layout,
) -> io::Result<&'s [F::Name]> {
    let deep = layout != Layout::Flat;
    let made = if deep { &s.deep_file_set } else { &s.file_set };
    if made.is_none() {
        let count = s.params.file_count;
        s.say(&format!(
            "setup: creating {count} files of 16 KiB{}",
            describe(layout)
        ));
        let dir = s.lane.scoped(&dir_name("files", layout));
        let names = make_files(s.fs, &dir, count, layout)?;
        if deep {
            s.deep_file_set = Some(names);
        } else {
            s.file_set = Some(names);
        }
    }
    let set = if deep { &s.deep_file_set } else { &s.file_set };
    Ok(set.as_deref().expect("just made"))
}

/// " in a tree of depth 6, width 4" (empty for flat).
fn describe(layout: Layout) -> String {
    match layout {
        Layout::Flat => String::new(),
        Layout::Deep { depth, width } => format!(" in a tree of depth {depth}, width {width}"),
    }
}

/// The note attached to a deep workload's records.
pub fn layout_note(layout: Layout, count: usize) -> Option<String> {
    match layout {
        Layout::Flat => None,
        Layout::Deep { depth, width } => Some(format!(
            "files {depth} directories deep (width {width}, {} directories for {count} files)",
            layout.dir_count(count)
        )),
    }
}

/// create-16k: create a new file, write 16 KiB, close. The directory is
/// kept at `file_count` entries: when full it is emptied outside the clock.
struct Create<'a, F: MicroFs> {
    fs: &'a F,
    names: Vec<F::Name>,
    content: Vec<u8>,
    next: usize,
    rounds: u64,
}

impl<F: MicroFs> Create<'_, F> {
    /// Removes the files made so far (untimed).
    fn clear(&mut self) -> io::Result<()> {
        for name in &self.names[..self.next] {
            self.fs.unlink(name)?;
        }
        self.next = 0;
        Ok(())
    }
}

impl<F: MicroFs> Workload for Create<'_, F> {
    fn prepare(&mut self) -> io::Result<bool> {
        if self.next == self.names.len() {
            self.clear()?;
            self.rounds += 1;
        }
        Ok(true)
    }

    fn op(&mut self) -> io::Result<()> {
        write_file(self.fs, &self.names[self.next], &self.content)?;
        self.next += 1;
        Ok(())
    }
}

/// The directories of create-16k (shared ones: made once, before the threads start).
pub fn make_create_dirs<F: MicroFs>(
    fs: &F,
    params: &Params,
    lane: &Lane,
    layout: Layout,
) -> io::Result<()> {
    let dir = lane.scoped(&dir_name("create", layout));
    make_dirs(fs, &dir, params.file_count, layout)
}

pub fn create_16k<F: MicroFs>(
    s: &mut Session<'_, F>,
    layout: Layout,
) -> io::Result<(Measured, Vec<String>)> {
    let (dir, count) = (
        s.lane.scoped(&dir_name("create", layout)),
        s.params.file_count,
    );
    if !s.lane.is_shared() {
        if layout != Layout::Flat {
            s.say(&format!(
                "setup: creating the directories{}",
                describe(layout)
            ));
        }
        make_create_dirs(s.fs, s.params, &s.lane, layout)?;
    }
    let mut w = Create {
        fs: s.fs,
        names: names(s.fs, &dir, s.lane.share(count), layout),
        content: pattern(FILE_16K, 6),
        next: 0,
        rounds: 0,
    };
    let m = measure(&mut w, &s.limits())?;
    w.clear()?;
    let mut notes = Vec::new();
    if w.rounds > 0 {
        notes.push(format!(
            "directory emptied {} times at {} files (unlinks untimed)",
            w.rounds,
            w.names.len()
        ));
    }
    Ok((m, notes))
}

/// Picks a random file of a set for each op (fixed seed: same on all targets).
struct RandomFile<'a, F: MicroFs> {
    fs: &'a F,
    names: &'a [F::Name],
    rng: fastrand::Rng,
    cur: usize,
    buf: Vec<u8>,
    read: bool,
}

impl<F: MicroFs> Workload for RandomFile<'_, F> {
    fn prepare(&mut self) -> io::Result<bool> {
        self.cur = self.rng.usize(..self.names.len());
        Ok(true)
    }

    fn op(&mut self) -> io::Result<()> {
        let name = &self.names[self.cur];
        if self.read {
            // The size is known, so one read of 16 KiB reads the file whole.
            let file = self.fs.open_read(name)?;
            file.read_exact_at(&mut self.buf, 0)
        } else {
            black_box(self.fs.stat(name)?);
            Ok(())
        }
    }
}

fn random_file<F: MicroFs>(
    s: &mut Session<'_, F>,
    read: bool,
    layout: Layout,
) -> io::Result<Measured> {
    let fs = s.fs;
    let limits = s.limits();
    let seed = s.lane.seed(16);
    let mut w = RandomFile {
        fs,
        names: file_set(s, layout)?,
        rng: fastrand::Rng::with_seed(seed),
        cur: 0,
        buf: vec![0; FILE_16K],
        read,
    };
    measure(&mut w, &limits)
}

/// stat: metadata of a random existing file, by path.
pub fn stat<F: MicroFs>(s: &mut Session<'_, F>, layout: Layout) -> io::Result<Measured> {
    random_file(s, false, layout)
}

/// open-read-16k: open a random existing 16 KiB file, read it whole, close.
pub fn open_read_16k<F: MicroFs>(s: &mut Session<'_, F>, layout: Layout) -> io::Result<Measured> {
    random_file(s, true, layout)
}

/// unlink: removes pre-created files in order; stops when they run out.
struct Unlink<'a, F: MicroFs> {
    fs: &'a F,
    names: Vec<F::Name>,
    next: usize,
}

impl<F: MicroFs> Workload for Unlink<'_, F> {
    fn prepare(&mut self) -> io::Result<bool> {
        Ok(self.next < self.names.len())
    }

    fn op(&mut self) -> io::Result<()> {
        self.fs.unlink(&self.names[self.next])?;
        self.next += 1;
        Ok(())
    }
}

/// The files of unlink: the workload's, plus the reserve that feeds the warm-up. The
/// reserve's files get a tree of their own shape, so the deep layout is computed for all.
fn unlink_layout(params: &Params, layout: Layout) -> (usize, Layout) {
    let total = params.file_count + params.unlink_reserve;
    match layout {
        Layout::Flat => (total, Layout::Flat),
        Layout::Deep { depth, .. } => (total, Layout::deep(total, depth)),
    }
}

/// Makes unlink's files (shared ones: once, before the threads start).
pub fn make_unlink_set<F: MicroFs>(
    fs: &F,
    params: &Params,
    lane: &Lane,
    layout: Layout,
) -> io::Result<Vec<F::Name>> {
    let (total, layout) = unlink_layout(params, layout);
    make_files(fs, &lane.scoped(&dir_name("unlink", layout)), total, layout)
}

pub fn unlink<F: MicroFs>(
    s: &mut Session<'_, F>,
    layout: Layout,
) -> io::Result<(Measured, Vec<String>)> {
    let (count, reserve) = (s.params.file_count, s.params.unlink_reserve);
    let (total, layout) = unlink_layout(s.params, layout);
    let names = if s.lane.is_shared() {
        let dir = s.lane.scoped(&dir_name("unlink", layout));
        names(s.fs, &dir, s.lane.share(total), layout)
    } else {
        s.say(&format!(
            "setup: creating {total} files of 16 KiB{}",
            describe(layout)
        ));
        make_unlink_set(s.fs, s.params, &s.lane, layout)?
    };
    let mut w = Unlink {
        fs: s.fs,
        names,
        next: 0,
    };
    // The warm-up may only use the reserve, leaving `count` files to time.
    let limits = Limits {
        warmup_max_ops: s.lane.share(reserve).len() as u64,
        ..s.limits()
    };
    let m = measure(&mut w, &limits)?;
    for name in &w.names[w.next..] {
        s.fs.unlink(name)?;
    }
    let mut notes: Vec<String> = layout_note(layout, count + reserve).into_iter().collect();
    if m.exhausted {
        notes.push(format!(
            "stopped after {} unlinks: ran out of pre-created 16 KiB files",
            m.ops
        ));
    }
    Ok((m, notes))
}
