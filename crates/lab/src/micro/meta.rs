//! Metadata-heavy workloads on many small files in one flat directory.

use super::data::pattern;
use super::measure::{measure, Limits, Measured, Workload};
use super::session::Session;
use crate::targets::api::{MicroFile, MicroFs};
use std::hint::black_box;
use std::io;

pub const FILE_16K: usize = 16 * 1024;

/// Creates (or truncates) `name` with `content` and closes it.
fn write_file<F: MicroFs>(fs: &F, name: &F::Name, content: &[u8]) -> io::Result<()> {
    let file = fs.create(name)?;
    file.write_all_at(content, 0)
}

/// Resolves `dir/f0000000 ..` up front (untimed).
fn names<F: MicroFs>(fs: &F, dir: &str, count: usize) -> Vec<F::Name> {
    (0..count)
        .map(|i| fs.name(&format!("{dir}/f{i:07}")))
        .collect()
}

/// Makes `dir` holding `count` 16 KiB files (untimed setup).
fn make_files<F: MicroFs>(fs: &F, dir: &str, count: usize) -> io::Result<Vec<F::Name>> {
    fs.mkdir(&fs.name(dir))?;
    let content = pattern(FILE_16K, 5);
    let names = names(fs, dir, count);
    for name in &names {
        write_file(fs, name, &content)?;
    }
    Ok(names)
}

/// The files shared by stat and open-read-16k, made on first use.
fn file_set<'s, F: MicroFs>(s: &'s mut Session<'_, F>) -> io::Result<&'s [F::Name]> {
    if s.file_set.is_none() {
        let count = s.params.file_count;
        s.say(&format!("setup: creating {count} files of 16 KiB"));
        s.file_set = Some(make_files(s.fs, "files", count)?);
    }
    Ok(s.file_set.as_deref().expect("just made"))
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

pub fn create_16k<F: MicroFs>(s: &mut Session<'_, F>) -> io::Result<(Measured, Vec<String>)> {
    s.fs.mkdir(&s.fs.name("create"))?;
    let mut w = Create {
        fs: s.fs,
        names: names(s.fs, "create", s.params.file_count),
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

fn random_file<F: MicroFs>(s: &mut Session<'_, F>, read: bool) -> io::Result<Measured> {
    let fs = s.fs;
    let limits = s.limits();
    let mut w = RandomFile {
        fs,
        names: file_set(s)?,
        rng: fastrand::Rng::with_seed(16),
        cur: 0,
        buf: vec![0; FILE_16K],
        read,
    };
    measure(&mut w, &limits)
}

/// stat: metadata of a random existing file, by path.
pub fn stat<F: MicroFs>(s: &mut Session<'_, F>) -> io::Result<Measured> {
    random_file(s, false)
}

/// open-read-16k: open a random existing 16 KiB file, read it whole, close.
pub fn open_read_16k<F: MicroFs>(s: &mut Session<'_, F>) -> io::Result<Measured> {
    random_file(s, true)
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

pub fn unlink<F: MicroFs>(s: &mut Session<'_, F>) -> io::Result<(Measured, Vec<String>)> {
    let (count, reserve) = (s.params.file_count, s.params.unlink_reserve);
    s.say(&format!(
        "setup: creating {} files of 16 KiB",
        count + reserve
    ));
    let mut w = Unlink {
        fs: s.fs,
        names: make_files(s.fs, "unlink", count + reserve)?,
        next: 0,
    };
    // The warm-up may only use the reserve, leaving `count` files to time.
    let limits = Limits {
        warmup_max_ops: reserve as u64,
        ..s.limits()
    };
    let m = measure(&mut w, &limits)?;
    for name in &w.names[w.next..] {
        s.fs.unlink(name)?;
    }
    let mut notes = Vec::new();
    if m.exhausted {
        notes.push(format!(
            "stopped after {} unlinks: ran out of pre-created 16 KiB files",
            m.ops
        ));
    }
    Ok((m, notes))
}
