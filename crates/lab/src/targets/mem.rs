//! A test double: an in-memory [`MicroFs`] that enforces directory semantics
//! (a parent must exist, only empty directories are removed, names are
//! unique) and logs every call, so tests can check exactly what a workload
//! asked of its target.

use crate::targets::api::{MicroFile, MicroFs, MicroMap};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// One call a workload made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub op: &'static str,
    pub path: String,
    /// Bytes moved (reads, writes, appends), else 0.
    pub bytes: usize,
    /// The thread that made the call.
    pub thread: std::thread::ThreadId,
}

type Data = Arc<Mutex<Vec<u8>>>;
type Log = Arc<Mutex<Vec<Call>>>;

#[derive(Default)]
struct Tree {
    dirs: BTreeSet<String>,
    files: BTreeMap<String, Data>,
}

/// The in-memory file system; its root always exists.
#[derive(Default)]
pub struct MemFs {
    tree: Mutex<Tree>,
    log: Log,
    remounts: Mutex<usize>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn err(kind: io::ErrorKind, what: &str, path: &str) -> io::Error {
    io::Error::new(kind, format!("{what}: {path}"))
}

impl MemFs {
    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.log).clone()
    }

    /// Files and directories that exist now.
    pub fn entries(&self) -> (Vec<String>, Vec<String>) {
        let t = lock(&self.tree);
        (
            t.files.keys().cloned().collect(),
            t.dirs.iter().cloned().collect(),
        )
    }

    /// A file's contents.
    pub fn contents(&self, path: &str) -> Option<Vec<u8>> {
        lock(&self.tree).files.get(path).map(|d| lock(d).clone())
    }

    /// Times [`crate::filebench::LabTarget::remount`] was called.
    pub fn remounts(&self) -> usize {
        *lock(&self.remounts)
    }

    fn record(&self, op: &'static str, path: &str, bytes: usize) {
        let (path, thread) = (path.to_string(), std::thread::current().id());
        lock(&self.log).push(Call {
            op,
            path,
            bytes,
            thread,
        });
    }

    fn parent_exists(t: &Tree, path: &str) -> bool {
        match path.rsplit_once('/') {
            Some((parent, _)) => t.dirs.contains(parent),
            None => true,
        }
    }

    fn open(
        &self,
        op: &'static str,
        path: &str,
        create: bool,
        truncate: bool,
    ) -> io::Result<MemFile> {
        self.record(op, path, 0);
        let mut t = lock(&self.tree);
        let data = match t.files.get(path) {
            Some(d) => d.clone(),
            None if create && Self::parent_exists(&t, path) && !t.dirs.contains(path) => {
                let d = Data::default();
                t.files.insert(path.to_string(), d.clone());
                d
            }
            None => return Err(err(io::ErrorKind::NotFound, "no such file", path)),
        };
        if truncate {
            lock(&data).clear();
        }
        Ok(MemFile {
            path: path.to_string(),
            data,
            log: self.log.clone(),
        })
    }
}

impl MicroFs for MemFs {
    type Name = String;
    type File = MemFile;
    type Map = MemMap;

    fn name(&self, rel: &str) -> String {
        rel.trim_start_matches('/').to_string()
    }

    fn mkdir(&self, name: &String) -> io::Result<()> {
        self.record("mkdir", name, 0);
        let mut t = lock(&self.tree);
        if t.dirs.contains(name) || t.files.contains_key(name) {
            return Err(err(io::ErrorKind::AlreadyExists, "exists", name));
        }
        if !Self::parent_exists(&t, name) {
            return Err(err(io::ErrorKind::NotFound, "no parent", name));
        }
        t.dirs.insert(name.clone());
        Ok(())
    }

    fn rmdir(&self, name: &String) -> io::Result<()> {
        self.record("rmdir", name, 0);
        let mut t = lock(&self.tree);
        let prefix = format!("{name}/");
        let busy = t.dirs.iter().any(|d| d.starts_with(&prefix))
            || t.files.keys().any(|f| f.starts_with(&prefix));
        if busy {
            return Err(err(io::ErrorKind::DirectoryNotEmpty, "not empty", name));
        }
        if !t.dirs.remove(name) {
            return Err(err(io::ErrorKind::NotFound, "no such directory", name));
        }
        Ok(())
    }

    fn create(&self, name: &String) -> io::Result<MemFile> {
        self.open("create", name, true, true)
    }

    fn open_read(&self, name: &String) -> io::Result<MemFile> {
        self.open("open_read", name, false, false)
    }

    fn open_rw(&self, name: &String) -> io::Result<MemFile> {
        self.open("open_rw", name, false, false)
    }

    fn open_append(&self, name: &String) -> io::Result<MemFile> {
        self.open("open_append", name, true, false)
    }

    fn open_sync(&self, name: &String, create: bool) -> io::Result<MemFile> {
        self.open("open_sync", name, create, false)
    }

    fn stat(&self, name: &String) -> io::Result<u64> {
        self.record("stat", name, 0);
        let t = lock(&self.tree);
        let d = t.files.get(name);
        d.map(|d| lock(d).len() as u64)
            .ok_or_else(|| err(io::ErrorKind::NotFound, "no such file", name))
    }

    fn unlink(&self, name: &String) -> io::Result<()> {
        self.record("unlink", name, 0);
        match lock(&self.tree).files.remove(name) {
            Some(_) => Ok(()),
            None => Err(err(io::ErrorKind::NotFound, "no such file", name)),
        }
    }

    fn map(&self, file: &MemFile) -> io::Result<MemMap> {
        Ok(MemMap(file.data.clone()))
    }
}

impl crate::filebench::LabTarget for MemFs {
    type Fs = MemFs;

    fn fs(&self) -> &MemFs {
        self
    }

    fn remount(&mut self) -> io::Result<bool> {
        *lock(&self.remounts) += 1;
        Ok(true)
    }
}

/// An open file of [`MemFs`]; it keeps its data after an unlink, as on Unix.
pub struct MemFile {
    path: String,
    data: Data,
    log: Log,
}

impl MemFile {
    fn record(&self, op: &'static str, bytes: usize) {
        let (path, thread) = (self.path.clone(), std::thread::current().id());
        lock(&self.log).push(Call {
            op,
            path,
            bytes,
            thread,
        });
    }
}

impl MicroFile for MemFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let data = lock(&self.data);
        let start = (offset as usize).min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        drop(data);
        self.record("read", n);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let mut data = lock(&self.data);
        // As pwrite: an empty write does not extend the file.
        if !buf.is_empty() {
            let end = offset as usize + buf.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            data[offset as usize..end].copy_from_slice(buf);
        }
        drop(data);
        self.record("write", buf.len());
        Ok(buf.len())
    }

    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        lock(&self.data).extend_from_slice(buf);
        self.record("append", buf.len());
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        self.record("fstat", 0);
        Ok(lock(&self.data).len() as u64)
    }
}

/// A "mapping" that copies in and out of the file's data.
pub struct MemMap(Data);

impl MicroMap for MemMap {
    fn len(&self) -> u64 {
        lock(&self.0).len() as u64
    }

    fn load(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let data = lock(&self.0);
        let src = data
            .get(offset as usize..offset as usize + buf.len())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn store(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut data = lock(&self.0);
        let dst = data
            .get_mut(offset as usize..offset as usize + buf.len())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
        dst.copy_from_slice(buf);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}
