//! A per-thread cache of the name lookups that found directories, so that a path walk
//! through directories nobody is changing writes no shared cache line.
//!
//! A lookup through a directory's index takes its state (a reference count) and read-locks
//! its index: four atomic read-modify-writes on two cache lines that every thread walking
//! the same directories shares (the root, above all). With two CPUs walking the same paths
//! those lines move between the cores on every component, which costs ~100 ns each on this
//! hardware and several times that when the host places the virtual CPUs far apart.
//!
//! Each directory number maps to one change counter (`Changes`, shared by numbers that
//! collide). Whoever is about to change a directory's entries bumps its counter while
//! holding the directory's index exclusively (`Inner::index_write`), and dropping a
//! directory's DRAM state bumps it too (rmdir, a rename over it, another process changing it:
//! `DirCache::remove`; all at once: `clear`). A lookup stamps the counter before it reads the
//! index and, when the name is a directory, remembers (directory, generation, name) ->
//! (child, generation) with the stamp. A later lookup of the same name on the same thread
//! uses the answer only if the counter still reads the stamp: no entry of the directory has
//! changed since the answer was read (the answer is then the one a locked lookup would give
//! at the moment of the check), and the caller re-checks the directory's own generation on
//! media, as the locked path does. A hit only loads: the counter, two words of the inode.
//!
//! Only directories are cached: they are what path walks pass through again and again,
//! while file names (the last component) would evict them for little gain.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Change counters per mount; directory numbers share them modulo this many.
const COUNTERS: usize = 4096;
/// Answers each thread keeps (direct-mapped by directory and name hash).
const ENTRIES: usize = 512;
/// Longer names are looked up through the index every time.
const NAME_CACHED_MAX: usize = 40;

/// Identity of each mount's counters, so that a thread's answers from one file system are
/// never taken for another's (ids are never reused; 0 marks an empty entry).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The change counters of one mount's directories.
pub struct Changes {
    id: u64,
    /// Bumped when every directory's state is dropped at once.
    epoch: AtomicU64,
    counters: Box<[AtomicU64]>,
}

/// The counters a lookup read before it looked in a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stamp {
    epoch: u64,
    count: u64,
}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            epoch: AtomicU64::new(0),
            counters: (0..COUNTERS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Changes {
    fn counter(&self, dir: u32) -> &AtomicU64 {
        &self.counters[dir as usize % COUNTERS]
    }

    /// Read before a lookup reads directory `dir`'s index (acquire: the index reads that
    /// follow cannot be done before it).
    #[inline]
    pub fn stamp(&self, dir: u32) -> Stamp {
        Stamp {
            epoch: self.epoch.load(Ordering::Acquire),
            count: self.counter(dir).load(Ordering::Acquire),
        }
    }

    /// The entries of `dir` are about to change, or its DRAM state is being dropped. Called
    /// before the change (a full barrier: no store of the change is seen before it).
    pub fn bump(&self, dir: u32) {
        self.counter(dir).fetch_add(1, Ordering::SeqCst);
    }

    /// Every directory's DRAM state is being dropped.
    pub fn bump_all(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// What a lookup found: the name is directory `child` of generation `child_gen` in a parent
/// of generation `parent_gen`, while the parent's counter read `stamp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Answer {
    pub parent_gen: u32,
    pub child: u32,
    pub child_gen: u32,
    pub stamp: Stamp,
}

/// A cached answer and the question it answers.
#[derive(Clone, Copy)]
struct Entry {
    mount: u64,
    parent: u32,
    hash: u64,
    len: u8,
    name: [u8; NAME_CACHED_MAX],
    answer: Answer,
}

const EMPTY: Entry = Entry {
    mount: 0,
    parent: 0,
    hash: 0,
    len: 0,
    name: [0; NAME_CACHED_MAX],
    answer: Answer {
        parent_gen: 0,
        child: 0,
        child_gen: 0,
        stamp: Stamp { epoch: 0, count: 0 },
    },
};

thread_local! {
    static CACHE: RefCell<Box<[Entry]>> = RefCell::new(vec![EMPTY; ENTRIES].into_boxed_slice());
}

fn slot(parent: u32, hash: u64) -> usize {
    (hash ^ (parent as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) as usize % ENTRIES
}

/// What this thread last found for `name` in `parent`. The caller checks its stamp
/// (`Changes::stamp`) and the parent's generation before using it.
pub fn find(changes: &Changes, parent: u32, name: &[u8], hash: u64) -> Option<Answer> {
    if name.len() > NAME_CACHED_MAX {
        return None;
    }
    // `try_with`: a program's own thread-exit code may call into nvmfs (under `nvmfs run`)
    // after this thread's cache was destroyed; it then simply misses.
    CACHE
        .try_with(|c| {
            let c = c.try_borrow().ok()?;
            let e = &c[slot(parent, hash)];
            let same = e.mount == changes.id
                && e.parent == parent
                && e.hash == hash
                && &e.name[..e.len as usize] == name;
            same.then_some(e.answer)
        })
        .ok()
        .flatten()
}

/// Remembers what a lookup of `name` in `parent` found.
pub fn put(changes: &Changes, parent: u32, name: &[u8], hash: u64, answer: Answer) {
    if name.len() > NAME_CACHED_MAX {
        return;
    }
    let mut e = Entry {
        mount: changes.id,
        parent,
        hash,
        len: name.len() as u8,
        name: [0; NAME_CACHED_MAX],
        answer,
    };
    e.name[..name.len()].copy_from_slice(name);
    // Never panics: not after the thread's cache was destroyed (see `find`), not inside
    // another borrow.
    let _ = CACHE.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            c[slot(parent, hash)] = e;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_found_only_for_its_mount_directory_and_name() {
        let (a, b) = (Changes::default(), Changes::default());
        let answer = Answer {
            parent_gen: 3,
            child: 9,
            child_gen: 5,
            stamp: a.stamp(7),
        };
        put(&a, 7, b"usr", 42, answer);
        assert_eq!(find(&a, 7, b"usr", 42), Some(answer));
        assert_eq!(find(&b, 7, b"usr", 42), None, "another mount");
        assert_eq!(find(&a, 8, b"usr", 42), None, "another directory");
        assert_eq!(find(&a, 7, b"usx", 42), None, "another name, same hash");
        let long = [b'x'; NAME_CACHED_MAX + 1];
        put(&a, 7, &long, 43, answer);
        assert_eq!(find(&a, 7, &long, 43), None, "long names are not kept");
    }

    #[test]
    fn a_change_or_a_drop_moves_the_stamp() {
        let c = Changes::default();
        let s = c.stamp(7);
        assert_eq!(c.stamp(7), s);
        c.bump(7);
        assert_ne!(c.stamp(7), s);
        let s = c.stamp(7);
        c.bump_all();
        assert_ne!(c.stamp(7), s);
        // Numbers that share a counter: a change to one moves the other's stamp too (a
        // needless miss, never a stale hit).
        let s = c.stamp(7);
        c.bump(7 + COUNTERS as u32);
        assert_ne!(c.stamp(7), s);
    }
}
