//! Path routing and resolution.
//!
//! The program sees one namespace: the real one, with the image's root directory standing
//! at the prefix (as a mount point would). `classify` decides cheaply, without a system
//! call in the common case, whether a path can touch nvmfs at all: it must name the
//! prefix's last component, start at an nvmfs directory descriptor, or be relative to a
//! working directory inside nvmfs. Everything else goes to the C library untouched.
//!
//! `Walker` then resolves component by component, as the kernel would: inside nvmfs with
//! `Fs::lookup_ino` and `Fs::readlink` (a symlink whose target is absolute continues in the
//! real namespace, which may lead back into the prefix; ".." at the image root leads to the
//! prefix's real parent; more than 40 links is ELOOP), outside it lexically (real symlinks
//! are left to the kernel: the real remainder is handed to the C library as a path).

use std::ffi::CString;

use nvmfs::{FileType, Fs};

use crate::fdtable;
use crate::guard::{IoErrno, R};
use crate::state::{Config, Creds};

pub const ROOT: u64 = 1;
const LINK_MAX_FOLLOW: u32 = 40;

/// Where a walk starts.
#[derive(Clone, Debug)]
pub enum Start {
    /// The real root; the path is absolute (a relative path was joined to its real base).
    RealRoot,
    /// An nvmfs directory (virtual working directory or directory descriptor).
    Nv {
        ino: u64,
        /// Generation to check (a working directory that may have been removed).
        generation: Option<u32>,
        vpath: Vec<u8>,
    },
}

#[derive(Clone, Debug)]
pub struct Walk {
    pub start: Start,
    pub path: Vec<u8>,
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Decides whether `path` (relative to `dirfd` when relative) may touch nvmfs. None: it
/// cannot; pass the call on unchanged.
pub fn classify(cfg: &Config, dirfd: i32, path: &[u8]) -> Option<Walk> {
    if path.len() >= libc::PATH_MAX as usize {
        // The kernel refuses it whole (ENAMETOOLONG) before looking at any component.
        return None;
    }
    if path.first() == Some(&b'/') {
        if fdtable::any() && (path.starts_with(b"/dev/") || path.starts_with(b"/proc/")) {
            if let Some(e) = fd_alias(path).and_then(fdtable::get) {
                return Some(Walk {
                    start: Start::Nv {
                        ino: e.ino,
                        generation: None,
                        vpath: e.vpath.clone(),
                    },
                    path: Vec::new(),
                });
            }
        }
        if contains(path, &cfg.base) {
            return Some(Walk {
                start: Start::RealRoot,
                path: path.to_vec(),
            });
        }
        return None;
    }
    if path.is_empty() {
        return None;
    }
    if dirfd == libc::AT_FDCWD {
        if let Some(c) = crate::cwd::current() {
            return Some(Walk {
                start: Start::Nv {
                    ino: c.ino,
                    generation: Some(c.generation),
                    vpath: c.vpath.clone(),
                },
                path: path.to_vec(),
            });
        }
        if !contains(path, &cfg.base) {
            return None;
        }
        let mut base = crate::cwd::real_cwd()?;
        base.push(b'/');
        base.extend_from_slice(path);
        return Some(Walk {
            start: Start::RealRoot,
            path: base,
        });
    }
    if let Some(e) = fdtable::get(dirfd) {
        return Some(Walk {
            start: Start::Nv {
                ino: e.ino,
                generation: None,
                vpath: e.vpath.clone(),
            },
            path: path.to_vec(),
        });
    }
    if !contains(path, &cfg.base) {
        return None;
    }
    let mut base = std::fs::read_link(format!("/proc/self/fd/{dirfd}"))
        .ok()?
        .into_os_string()
        .into_encoded_bytes();
    base.push(b'/');
    base.extend_from_slice(path);
    Some(Walk {
        start: Start::RealRoot,
        path: base,
    })
}

/// The descriptor a /dev/fd/N, /proc/self/fd/N, /proc/PID/fd/N (our pid), /dev/stdin,
/// /dev/stdout or /dev/stderr path names.
pub fn fd_alias(path: &[u8]) -> Option<i32> {
    let num = |s: &[u8]| -> Option<i32> {
        if s.is_empty() || s.len() > 9 || !s.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(s).ok()?.parse().ok()
    };
    match path {
        b"/dev/stdin" => return Some(0),
        b"/dev/stdout" => return Some(1),
        b"/dev/stderr" => return Some(2),
        _ => {}
    }
    if let Some(n) = path.strip_prefix(b"/dev/fd/") {
        return num(n);
    }
    let rest = path.strip_prefix(b"/proc/")?;
    let i = rest.iter().position(|&b| b == b'/')?;
    let (who, tail) = (&rest[..i], &rest[i..]);
    // SAFETY: plain getter.
    let me = unsafe { libc::getpid() };
    if who != b"self" && who != b"thread-self" && num(who) != Some(me) {
        return None;
    }
    num(tail.strip_prefix(b"/fd/")?)
}

/// A fully resolved path.
#[derive(Debug)]
pub enum Found {
    Nv {
        ino: u64,
        ft: FileType,
        /// Absolute path in the program's namespace (prefix included).
        vpath: Vec<u8>,
    },
    /// Left nvmfs again: this real path (absolute) is the C library's.
    Real(CString),
    /// Never entered nvmfs: pass the original call on.
    Pass,
}

/// A path resolved up to its last component (for calls that create or remove a name).
#[derive(Debug)]
pub enum Parent {
    Nv {
        dir: u64,
        name: Vec<u8>,
        dir_vpath: Vec<u8>,
        trailing_slash: bool,
    },
    /// The path names an nvmfs node itself (the prefix, ".", "..", /dev/fd/N): no name to
    /// act on.
    NvSelf {
        ino: u64,
        /// The last component was "." or "..".
        dot: bool,
        /// It was "..".
        dotdot: bool,
        vpath: Vec<u8>,
    },
    Real(CString),
    Pass,
}

pub struct Walker<'a> {
    pub fs: &'a Fs,
    pub cfg: &'a Config,
    creds: Creds,
    links: u32,
    entered: bool,
}

/// Where a walk stands. Paths are kept whole ("/a/b"), not as lists of components: a
/// component costs no allocation.
enum Loc {
    /// In the real namespace: the path as walked, and its lexical normal form (to notice
    /// the prefix).
    Real { raw: Vec<u8>, norm: Vec<u8> },
    /// In nvmfs: the node, and its absolute path in the program's namespace ("" = "/").
    Nv { ino: u64, vpath: Vec<u8> },
}

/// Appends component `c` to the whole path `p`.
fn push_comp(p: &mut Vec<u8>, c: &[u8]) {
    p.push(b'/');
    p.extend_from_slice(c);
}

/// Drops the last component of the whole path `p`.
fn pop_comp(p: &mut Vec<u8>) {
    let at = p.iter().rposition(|&b| b == b'/').unwrap_or(0);
    p.truncate(at);
}

/// A whole path as the program sees it: "/" for the empty path of the real root.
fn whole(p: Vec<u8>) -> Vec<u8> {
    if p.is_empty() {
        b"/".to_vec()
    } else {
        p
    }
}

/// The components a walk has still to take, the next one last: ranges of the path or of
/// a symlink target met on the way (so taking a component allocates nothing).
struct Queue<'p> {
    path: &'p [u8],
    targets: Vec<Vec<u8>>,
    /// (source: 0 the path, i the i-th target; start; end).
    items: Vec<(usize, usize, usize)>,
}

impl<'p> Queue<'p> {
    fn new(path: &'p [u8]) -> Queue<'p> {
        let mut q = Queue {
            path,
            targets: Vec::new(),
            items: Vec::with_capacity(16),
        };
        q.push_source(0);
        q
    }

    fn source(&self, src: usize) -> &[u8] {
        if src == 0 {
            self.path
        } else {
            &self.targets[src - 1]
        }
    }

    /// Queues a source's components ("" and "." left out), its first to be taken next.
    fn push_source(&mut self, src: usize) {
        let Queue {
            path,
            targets,
            items,
        } = self;
        let bytes = if src == 0 {
            path
        } else {
            &targets[src - 1][..]
        };
        let first = items.len();
        let mut start = 0;
        for c in bytes.split(|&b| b == b'/') {
            if !c.is_empty() && c != b"." {
                items.push((src, start, start + c.len()));
            }
            start += c.len() + 1;
        }
        items[first..].reverse();
    }

    /// Queues a symlink's target, to be walked before the rest.
    fn push_target(&mut self, target: Vec<u8>) {
        self.targets.push(target);
        self.push_source(self.targets.len());
    }

    fn pop(&mut self) -> Option<(usize, usize, usize)> {
        self.items.pop()
    }

    fn bytes(&self, (src, start, end): (usize, usize, usize)) -> &[u8] {
        &self.source(src)[start..end]
    }

    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl<'a> Walker<'a> {
    pub fn new(fs: &'a Fs, cfg: &'a Config) -> Walker<'a> {
        Walker {
            fs,
            cfg,
            creds: Creds::effective(),
            links: 0,
            entered: false,
        }
    }

    fn start(&mut self, s: &Start) -> R<Loc> {
        match s {
            Start::RealRoot => Ok(Loc::Real {
                raw: Vec::new(),
                norm: Vec::new(),
            }),
            Start::Nv {
                ino,
                generation,
                vpath,
            } => {
                self.entered = true;
                if let Some(g) = generation {
                    let m = self.fs.getattr(*ino).en()?;
                    if m.generation != *g || m.nlink == 0 {
                        return Err(libc::ENOENT);
                    }
                }
                let mut whole = Vec::with_capacity(vpath.len() + 64);
                for c in vpath.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
                    push_comp(&mut whole, c);
                }
                Ok(Loc::Nv {
                    ino: *ino,
                    vpath: whole,
                })
            }
        }
    }

    fn check_search(&self, dir: u64) -> R<()> {
        if self.creds.root() {
            return Ok(());
        }
        let m = self.fs.getattr(dir).en()?;
        if !self.creds.may(&m, 1) {
            return Err(libc::EACCES);
        }
        Ok(())
    }

    /// Takes the next component of `q`. `follow`: a symlink here is followed (its target's
    /// components are queued). Returns the type of the node the walk then stands at, when
    /// this step learnt it. `leaf`: the component is the path's last, most often a file's name
    /// (`Fs::lookup_leaf_ino`).
    fn step(
        &mut self,
        loc: &mut Loc,
        q: &mut Queue,
        follow: bool,
        leaf: bool,
    ) -> R<Option<FileType>> {
        let Some(item) = q.pop() else { return Ok(None) };
        let c = q.bytes(item);
        match loc {
            Loc::Real { raw, norm } => {
                push_comp(raw, c);
                if c == b".." {
                    pop_comp(norm);
                } else {
                    push_comp(norm, c);
                    if *norm == self.cfg.prefix {
                        self.entered = true;
                        let mut vpath = Vec::with_capacity(self.cfg.prefix.len() + 64);
                        vpath.extend_from_slice(&self.cfg.prefix);
                        *loc = Loc::Nv { ino: ROOT, vpath };
                    }
                }
                Ok(None)
            }
            Loc::Nv { ino, vpath } => {
                if c == b".." {
                    if *ino == ROOT {
                        let mut norm = self.cfg.prefix.clone();
                        pop_comp(&mut norm);
                        *loc = Loc::Real {
                            raw: if norm.is_empty() {
                                Vec::new()
                            } else {
                                self.cfg.parent.clone()
                            },
                            norm,
                        };
                        return Ok(None);
                    }
                    self.check_search(*ino)?;
                    let (p, _) = self.fs.lookup_ino(*ino, b"..").en()?;
                    *ino = p;
                    pop_comp(vpath);
                    return Ok(Some(FileType::Dir));
                }
                self.check_search(*ino)?;
                let (next, ft) = if leaf {
                    self.fs.lookup_leaf_ino(*ino, c)
                } else {
                    self.fs.lookup_ino(*ino, c)
                }
                .en()?;
                if ft == FileType::Symlink && follow {
                    self.links += 1;
                    if self.links > LINK_MAX_FOLLOW {
                        return Err(libc::ELOOP);
                    }
                    let target = self.fs.readlink(next).en()?;
                    if target.first() == Some(&b'/') {
                        *loc = Loc::Real {
                            raw: Vec::new(),
                            norm: Vec::new(),
                        };
                    }
                    q.push_target(target);
                    return Ok(None);
                }
                if !q.is_empty() && ft != FileType::Dir {
                    return Err(libc::ENOTDIR);
                }
                *ino = next;
                push_comp(vpath, c);
                Ok(Some(ft))
            }
        }
    }

    /// Resolves `w` fully; `follow`: a final symlink is followed.
    pub fn resolve(&mut self, w: &Walk, follow: bool) -> R<Found> {
        let trailing = w.path.ends_with(b"/") || w.path.ends_with(b"/.") || w.path == b".";
        let mut loc = self.start(&w.start)?;
        let mut q = Queue::new(&w.path);
        let mut last_ft = None;
        while !q.is_empty() {
            let last = q.items.len() == 1;
            last_ft = self.step(
                &mut loc,
                &mut q,
                !last || follow || trailing,
                last && !trailing,
            )?;
        }
        self.finish(loc, trailing, last_ft)
    }

    /// `ft`: the node's type if the walk's last step learnt it.
    fn finish(&mut self, loc: Loc, trailing: bool, ft: Option<FileType>) -> R<Found> {
        match loc {
            Loc::Real { raw, .. } => {
                if !self.entered {
                    return Ok(Found::Pass);
                }
                let mut raw = whole(raw);
                if trailing && !raw.ends_with(b"/") {
                    raw.push(b'/');
                }
                Ok(Found::Real(crate::state::cstring(raw)))
            }
            Loc::Nv { ino, vpath } => {
                let ft = match ft {
                    _ if ino == ROOT => FileType::Dir,
                    Some(ft) => ft,
                    None => self.fs.getattr(ino).en()?.file_type,
                };
                if trailing && ft != FileType::Dir {
                    return Err(libc::ENOTDIR);
                }
                Ok(Found::Nv {
                    ino,
                    ft,
                    vpath: whole(vpath),
                })
            }
        }
    }

    /// Resolves all but the last component of `w` (following symlinks).
    pub fn parent(&mut self, w: &Walk) -> R<Parent> {
        let trimmed_len = w.path.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
        let trailing_slash = trimmed_len < w.path.len();
        let trimmed = &w.path[..trimmed_len];
        let (dir, name) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(i) => (&trimmed[..i + 1], &trimmed[i + 1..]),
            None => (&b""[..], trimmed),
        };
        if name.is_empty() || name == b"." || name == b".." {
            // "/", "", "x/.", "x/..": the directory itself.
            return match self.resolve(w, true)? {
                Found::Nv { ino, vpath, .. } => Ok(Parent::NvSelf {
                    ino,
                    dot: !name.is_empty(),
                    dotdot: name == b"..",
                    vpath,
                }),
                Found::Real(p) => Ok(Parent::Real(p)),
                Found::Pass => Ok(Parent::Pass),
            };
        }
        let mut loc = self.start(&w.start)?;
        let mut q = Queue::new(dir);
        let mut ft = None;
        while !q.is_empty() {
            ft = self.step(&mut loc, &mut q, true, false)?;
        }
        if let Loc::Nv { ino, .. } = &loc {
            let is_dir = match ft {
                _ if *ino == ROOT => true,
                Some(ft) => ft == FileType::Dir,
                None => self.fs.getattr(*ino).en()?.is_dir(),
            };
            if !is_dir {
                return Err(libc::ENOTDIR);
            }
        }
        match loc {
            Loc::Nv { ino, vpath } => Ok(Parent::Nv {
                dir: ino,
                name: name.to_vec(),
                dir_vpath: whole(vpath),
                trailing_slash,
            }),
            Loc::Real { mut raw, mut norm } => {
                push_comp(&mut norm, name);
                if norm == self.cfg.prefix {
                    self.entered = true;
                    return Ok(Parent::NvSelf {
                        ino: ROOT,
                        dot: false,
                        dotdot: false,
                        vpath: self.cfg.prefix.clone(),
                    });
                }
                if !self.entered {
                    return Ok(Parent::Pass);
                }
                raw.push(b'/');
                raw.extend_from_slice(name);
                if trailing_slash {
                    raw.push(b'/');
                }
                Ok(Parent::Real(crate::state::cstring(raw)))
            }
        }
    }

    /// Follows the symlink `dir/name` for a call that creates its target (open O_CREAT,
    /// which follows a dangling final link): resolves the link's target up to its last
    /// component.
    pub fn through_link(&mut self, dir: u64, dir_vpath: &[u8], link: u64) -> R<Parent> {
        self.links += 1;
        if self.links > LINK_MAX_FOLLOW {
            return Err(libc::ELOOP);
        }
        let target = self.fs.readlink(link).en()?;
        let w = if target.first() == Some(&b'/') {
            Walk {
                start: Start::RealRoot,
                path: target,
            }
        } else {
            Walk {
                start: Start::Nv {
                    ino: dir,
                    generation: None,
                    vpath: dir_vpath.to_vec(),
                },
                path: target,
            }
        };
        self.entered = true;
        let p = self.parent(&w)?;
        Ok(match p {
            Parent::Pass => Parent::Real(crate::state::cstring(w.path)),
            p => p,
        })
    }
}

/// The path of directory `ino` inside the prefix, found by walking ".." up to the root and
/// looking for each directory's name in its parent.
pub fn dir_path(fs: &Fs, cfg: &Config, ino: u64) -> Option<Vec<u8>> {
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut cur = ino;
    for _ in 0..4096 {
        if cur == ROOT {
            let mut path = cfg.prefix.clone();
            for n in names.iter().rev() {
                push_comp(&mut path, n);
            }
            return Some(whole(path));
        }
        let (parent, _) = fs.lookup_ino(cur, b"..").ok()?;
        let mut found = None;
        fs.readdir(parent, 2, |e| {
            if e.ino == cur {
                found = Some(e.name.clone());
                false
            } else {
                true
            }
        })
        .ok()?;
        names.push(found?);
        cur = parent;
    }
    None
}
