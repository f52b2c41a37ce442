//! A kernel-directory target that logs every call the workloads make (opens with their mode,
//! positional reads and writes, syncs, closes, unlinks) and counts, per file, how many I/O
//! calls are inside at once. Calls can be made to sleep, and the first calls on a file can be
//! held until a number of them are inside together (a rendezvous), so that "N I/Os in flight
//! at once" is checked without depending on the scheduler. For tests of what workloads issue,
//! not of their speed.

use crate::targets::api::{MicroFile, MicroFs};
use crate::targets::sys::{SysFs, SysMap};
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How a file was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    Create,
    Read,
    ReadWrite,
    Append,
    /// `open_sync(name, create)`.
    Sync {
        create: bool,
    },
}

/// One call, in the order the calls happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Open {
        handle: usize,
        path: PathBuf,
        how: How,
    },
    Read {
        handle: usize,
        offset: u64,
        len: usize,
    },
    Write {
        handle: usize,
        offset: u64,
        len: usize,
    },
    Sync {
        handle: usize,
    },
    Close {
        handle: usize,
    },
    Unlink {
        path: PathBuf,
    },
}

/// What the probe saw.
#[derive(Default)]
pub struct Probe {
    next_handle: Mutex<usize>,
    pub events: Mutex<Vec<Event>>,
    /// (now, most ever) I/O calls in flight, by path.
    pub in_flight: Mutex<HashMap<PathBuf, (usize, usize)>>,
    /// Signalled when a count in `in_flight` rises.
    arrived: Condvar,
    delay: Duration,
    /// Hold each file's first calls until this many are in flight on it (10 s at most).
    rendezvous: Option<usize>,
}

impl Probe {
    fn log(&self, e: Event) {
        self.events.lock().unwrap().push(e);
    }

    /// The events so far, emptying the log.
    pub fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }
}

/// The probing target, on a directory.
pub struct ProbeFs {
    inner: SysFs,
    pub probe: Arc<Probe>,
}

impl ProbeFs {
    /// Probes `root`; each read and write sleeps `delay` inside the call.
    pub fn new(root: &Path, delay: Duration) -> Self {
        Self::with_rendezvous(root, delay, None)
    }

    /// Probes `root`, holding the first calls on each file until `rendezvous` of them are in
    /// flight together (or 10 s have passed); later calls go straight through.
    pub fn with_rendezvous(root: &Path, delay: Duration, rendezvous: Option<usize>) -> Self {
        ProbeFs {
            inner: SysFs::new(root),
            probe: Arc::new(Probe {
                delay,
                rendezvous,
                ..Probe::default()
            }),
        }
    }

    fn wrap(&self, inner: io::Result<File>, path: &Path, how: How) -> io::Result<ProbeFile> {
        let inner = inner?;
        let handle = {
            let mut n = self.probe.next_handle.lock().unwrap();
            *n += 1;
            *n
        };
        self.probe.log(Event::Open {
            handle,
            path: path.to_path_buf(),
            how,
        });
        Ok(ProbeFile {
            inner,
            path: path.to_path_buf(),
            handle,
            probe: self.probe.clone(),
        })
    }
}

/// A probed open file.
pub struct ProbeFile {
    inner: File,
    path: PathBuf,
    handle: usize,
    probe: Arc<Probe>,
}

impl ProbeFile {
    fn probed<T>(&self, event: Event, f: impl FnOnce() -> T) -> T {
        self.enter();
        if !self.probe.delay.is_zero() {
            std::thread::sleep(self.probe.delay);
        }
        let r = f();
        if let Some(e) = self.probe.in_flight.lock().unwrap().get_mut(&self.path) {
            e.0 -= 1;
        }
        self.probe.log(event);
        r
    }
}

impl ProbeFile {
    /// Counts the call in flight; before the file's rendezvous is reached, waits for it.
    fn enter(&self) {
        let p = &self.probe;
        let mut m = p.in_flight.lock().unwrap();
        let e = m.entry(self.path.clone()).or_default();
        e.0 += 1;
        e.1 = e.1.max(e.0);
        let Some(want) = p.rendezvous else { return };
        p.arrived.notify_all();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while m[&self.path].1 < want {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            m = p.arrived.wait_timeout(m, left).unwrap().0;
        }
    }
}

impl Drop for ProbeFile {
    fn drop(&mut self) {
        self.probe.log(Event::Close {
            handle: self.handle,
        });
    }
}

impl MicroFile for ProbeFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let e = Event::Read {
            handle: self.handle,
            offset,
            len: buf.len(),
        };
        self.probed(e, || MicroFile::read_at(&self.inner, buf, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let e = Event::Write {
            handle: self.handle,
            offset,
            len: buf.len(),
        };
        self.probed(e, || MicroFile::write_at(&self.inner, buf, offset))
    }

    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.append(buf)
    }

    fn sync(&self) -> io::Result<()> {
        self.probe.log(Event::Sync {
            handle: self.handle,
        });
        MicroFile::sync(&self.inner)
    }

    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
}

impl MicroFs for ProbeFs {
    type Name = PathBuf;
    type File = ProbeFile;
    type Map = SysMap;

    fn name(&self, rel: &str) -> PathBuf {
        self.inner.name(rel)
    }

    fn mkdir(&self, name: &PathBuf) -> io::Result<()> {
        self.inner.mkdir(name)
    }

    fn rmdir(&self, name: &PathBuf) -> io::Result<()> {
        self.inner.rmdir(name)
    }

    fn create(&self, name: &PathBuf) -> io::Result<ProbeFile> {
        self.wrap(self.inner.create(name), name, How::Create)
    }

    fn open_read(&self, name: &PathBuf) -> io::Result<ProbeFile> {
        self.wrap(self.inner.open_read(name), name, How::Read)
    }

    fn open_rw(&self, name: &PathBuf) -> io::Result<ProbeFile> {
        self.wrap(self.inner.open_rw(name), name, How::ReadWrite)
    }

    fn open_append(&self, name: &PathBuf) -> io::Result<ProbeFile> {
        self.wrap(self.inner.open_append(name), name, How::Append)
    }

    fn stat(&self, name: &PathBuf) -> io::Result<u64> {
        self.inner.stat(name)
    }

    fn unlink(&self, name: &PathBuf) -> io::Result<()> {
        self.probe.log(Event::Unlink { path: name.clone() });
        self.inner.unlink(name)
    }

    fn map(&self, file: &ProbeFile) -> io::Result<SysMap> {
        self.inner.map(&file.inner)
    }

    fn open_sync(&self, name: &PathBuf, create: bool) -> io::Result<ProbeFile> {
        self.wrap(
            self.inner.open_sync(name, create),
            name,
            How::Sync { create },
        )
    }
}
