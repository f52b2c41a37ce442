//! A cache of the name lookups that found directories, shared by a mount's threads and
//! read without writing, so that a path walk through directories nobody is changing writes
//! no shared cache line.
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
//! index and, when the name is a directory, remembers (directory, name) -> (child,
//! generations) with the stamp. A later lookup of the same name, by any thread, uses the
//! answer only if the counter still reads the stamp: no entry of the directory has changed
//! since the answer was read (the answer is then the one a locked lookup would give at the
//! moment of the check), and the caller re-checks the directory's own generation on media,
//! as the locked path does. A hit only loads: the entry, the counter, two words of the inode.
//!
//! The answers sit in one direct-mapped table per mount, each entry under its own sequence
//! word (a seqlock): a reader loads the word, the entry and the word again, and takes the
//! entry only if the word was even and unchanged; a writer makes the word odd, stores, and
//! makes it even again, and simply skips the entry if another writer holds it. Shared rather
//! than per thread: a workload of many threads (Filebench runs 100) on two CPUs found each
//! thread's own table cold, since the CPU had run other threads since that thread's last
//! lookup (the table's loads were 5% of a webproxy run's samples), and one table also learns
//! a path once for all threads.
//!
//! Only directories are cached: they are what path walks pass through again and again,
//! while file names (the last component) would evict them for little gain.

use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Change counters per mount; directory numbers share them modulo this many.
const COUNTERS: usize = 4096;
/// Answers per mount (direct-mapped by directory and name hash).
const ENTRIES: usize = 4096;
/// Words of name an entry holds; longer names are looked up through the index every time.
const NAME_WORDS: usize = 9;
const NAME_CACHED_MAX: usize = NAME_WORDS * 8;

/// The change counters of one mount's directories, and its cached answers.
pub struct Changes {
    /// Bumped when every directory's state is dropped at once.
    epoch: AtomicU64,
    counters: Box<[AtomicU64]>,
    entries: Box<[Entry]>,
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
            epoch: AtomicU64::new(0),
            counters: (0..COUNTERS).map(|_| AtomicU64::new(0)).collect(),
            entries: (0..ENTRIES).map(|_| Entry::default()).collect(),
        }
    }
}

impl Changes {
    /// Directory `dir`'s counter. Consecutive numbers get counters on different cache lines
    /// (eight counters share a line): two threads each creating in its own directory, which
    /// usually got neighbouring numbers, would otherwise bump one line from both CPUs.
    fn counter(&self, dir: u32) -> &AtomicU64 {
        const LINES: usize = COUNTERS / 8;
        let i = dir as usize % COUNTERS;
        &self.counters[i % LINES * 8 + i / LINES]
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

    fn entry(&self, parent: u32, hash: u64) -> &Entry {
        let slot = (hash ^ (parent as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) as usize;
        &self.entries[slot % ENTRIES]
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

/// One cached answer and its question, as words under a sequence word (odd while a writer
/// stores). Two cache lines, aligned.
#[repr(align(128))]
#[derive(Default)]
struct Entry {
    seq: AtomicU64,
    /// Parent directory (low half) and name length (high half); 0 when empty (no name is
    /// empty).
    key: AtomicU64,
    hash: AtomicU64,
    /// Child (low half) and the parent's generation (high half).
    child: AtomicU64,
    child_gen: AtomicU64,
    epoch: AtomicU64,
    count: AtomicU64,
    name: [AtomicU64; NAME_WORDS],
}

fn key(parent: u32, len: usize) -> u64 {
    parent as u64 | (len as u64) << 32
}

/// `name`'s words: each 8 bytes of it little-endian, the last zero padded.
fn name_words(name: &[u8]) -> impl Iterator<Item = u64> + '_ {
    name.chunks(8).map(super::dir::word_le)
}

/// What was last found for `name` in `parent`. The caller checks its stamp
/// (`Changes::stamp`) and the parent's generation before using it.
pub fn find(changes: &Changes, parent: u32, name: &[u8], hash: u64) -> Option<Answer> {
    if name.len() > NAME_CACHED_MAX {
        return None;
    }
    let e = changes.entry(parent, hash);
    let seq = e.seq.load(Ordering::Acquire);
    if seq % 2 == 1
        || e.key.load(Ordering::Relaxed) != key(parent, name.len())
        || e.hash.load(Ordering::Relaxed) != hash
    {
        return None;
    }
    if name_words(name)
        .zip(&e.name)
        .any(|(w, stored)| stored.load(Ordering::Relaxed) != w)
    {
        return None;
    }
    let child = e.child.load(Ordering::Relaxed);
    let answer = Answer {
        parent_gen: (child >> 32) as u32,
        child: child as u32,
        child_gen: e.child_gen.load(Ordering::Relaxed) as u32,
        stamp: Stamp {
            epoch: e.epoch.load(Ordering::Relaxed),
            count: e.count.load(Ordering::Relaxed),
        },
    };
    // The loads above before the second read of the sequence word: if it is unchanged, no
    // writer stored into the entry meanwhile.
    fence(Ordering::Acquire);
    (e.seq.load(Ordering::Relaxed) == seq).then_some(answer)
}

/// Remembers what a lookup of `name` in `parent` found (unless another thread is storing
/// into the same entry right now).
pub fn put(changes: &Changes, parent: u32, name: &[u8], hash: u64, answer: Answer) {
    if name.len() > NAME_CACHED_MAX {
        return;
    }
    let e = changes.entry(parent, hash);
    let seq = e.seq.load(Ordering::Relaxed);
    if seq % 2 == 1
        || e.seq
            .compare_exchange(seq, seq + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    // A reader that loads any of the stores below then sees the odd word (its acquire fence
    // pairs with this one).
    fence(Ordering::Release);
    e.key.store(key(parent, name.len()), Ordering::Relaxed);
    e.hash.store(hash, Ordering::Relaxed);
    for (stored, w) in e.name.iter().zip(name_words(name)) {
        stored.store(w, Ordering::Relaxed);
    }
    e.child.store(
        answer.child as u64 | (answer.parent_gen as u64) << 32,
        Ordering::Relaxed,
    );
    e.child_gen
        .store(answer.child_gen as u64, Ordering::Relaxed);
    e.epoch.store(answer.stamp.epoch, Ordering::Relaxed);
    e.count.store(answer.stamp.count, Ordering::Relaxed);
    e.seq.store(seq + 2, Ordering::Release);
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

    /// Threads storing into one entry while others read it: a reader gets either nothing or
    /// one whole answer that some writer stored, never words of two.
    #[test]
    fn a_reader_never_sees_half_of_a_writers_answer() {
        let c = Changes::default();
        let whole = |k: u32| Answer {
            parent_gen: k,
            child: k,
            child_gen: k,
            stamp: Stamp {
                epoch: k as u64,
                count: k as u64,
            },
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        let puts = AtomicU64::new(0);
        put(&c, 7, b"usr", 42, whole(0));
        let (found, mixed) = std::thread::scope(|s| {
            for w in 0..2u32 {
                let (c, stop, puts) = (&c, &stop, &puts);
                s.spawn(move || {
                    let mut k = w;
                    while !stop.load(Ordering::Relaxed) {
                        put(c, 7, b"usr", 42, whole(k));
                        puts.fetch_add(1, Ordering::Relaxed);
                        k = k.wrapping_add(2);
                    }
                });
            }
            let reader = s.spawn(|| {
                let (mut found, mut mixed) = (0u64, 0u64);
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while (puts.load(Ordering::Relaxed) < 200_000 || found < 200_000)
                    && std::time::Instant::now() < deadline
                {
                    if let Some(a) = find(&c, 7, b"usr", 42) {
                        found += 1;
                        mixed += (a != whole(a.child)) as u64;
                    }
                }
                (found, mixed)
            });
            let r = reader.join().unwrap();
            stop.store(true, Ordering::Relaxed);
            r
        });
        assert!(found > 0, "the reader never found an answer");
        assert_eq!(
            mixed, 0,
            "{mixed} of {found} answers mixed two writers' words"
        );
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
