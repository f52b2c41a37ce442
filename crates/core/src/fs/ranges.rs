//! Range sequence words: what lets writers of one file overwrite different parts of it at the
//! same time, and readers check that they saw no write half done.
//!
//! A write that only overwrites mapped bytes inside EOF (no block claimed, size unchanged, no
//! SSD tier) takes no stripe lock: only the words of the ranges it covers. Everything else
//! that changes a file or its inode (appends, extending writes, hole fills, truncates,
//! punches, direct-map stores, attribute and link changes) takes the stripe lock exclusively,
//! which also raises the stripe's `exclusive` flag and waits for its words to be free.
//!
//! Each stripe has `WORDS` words and the flag, in one cache line next to its lock. Byte `off`
//! of a file belongs to word `(off >> RANGE_SHIFT) % WORDS` of its inode's stripe, so a write
//! of any length covers a set of at most `WORDS` words: a bit mask. A word is a sequence
//! number, odd while a writer holds it (a seqlock):
//! - A writer makes its words odd with one compare-exchange each, in bit order (so two writers
//!   never wait for each other in a cycle), then looks at the flag: raised, it lets go of its
//!   words and waits for the flag to drop. It then reads the inode, stores its data, fences
//!   (the data is durable and visible before the release), and makes its words even again
//!   with plain stores: no locked instruction after its non-temporal stores, which would wait
//!   for them to drain.
//! - An exclusive holder raises the flag with an atomic swap and then waits for every word to
//!   be even. Both sides' read-modify-writes order their store before their later load, so
//!   at least one of them sees the other (Dekker): never both inside.
//! - A reader holds the stripe lock shared (so no exclusive holder runs), notes its words
//!   (waiting while any is odd), copies, and compares: a changed word means a writer ran over
//!   some of the bytes, and the copy is repeated. After `READ_TRIES` such copies it takes the
//!   words as a writer does, so it cannot be starved.
//!
//! Lock order: a stripe's lock, then its words in bit order.

use std::sync::atomic::{fence, AtomicU32, Ordering};

/// Range words per stripe (one 64-byte line).
pub const WORDS: usize = 8;
/// Each range is 256 KiB: 4 KiB overwrites of two threads at random offsets of a large file
/// meet on a word one time in `WORDS`; a 1 MiB write covers four words.
const RANGE_SHIFT: u32 = 18;
/// Copies a reader makes before it takes its words.
const READ_TRIES: usize = 3;
/// Spins on a held word before yielding the CPU.
const SPINS: usize = 64;

/// The range words and the exclusive flag of one stripe. 32-bit words: a reader would have to
/// miss 2^31 writes of its range during one copy to be fooled.
#[repr(align(64))]
#[derive(Default)]
pub struct RangeWords {
    words: [AtomicU32; WORDS],
    exclusive: AtomicU32,
}

/// The words that bytes `[off, off + len)` fall in, as a bit mask (0 for an empty range).
pub fn mask(off: u64, len: u64) -> u8 {
    if len == 0 {
        return 0;
    }
    let first = off >> RANGE_SHIFT;
    let last = (off + len - 1) >> RANGE_SHIFT;
    if last - first >= WORDS as u64 - 1 {
        return u8::MAX;
    }
    (first..=last).fold(0u8, |m, r| m | 1 << (r % WORDS as u64))
}

fn bits(mask: u8) -> impl Iterator<Item = usize> {
    (0..WORDS).filter(move |b| mask & (1 << b) != 0)
}

/// Waits while `w` is odd; returns its even value.
fn wait_even(w: &AtomicU32) -> u32 {
    let mut spins = 0;
    loop {
        let v = w.load(Ordering::Acquire);
        if v & 1 == 0 {
            return v;
        }
        pause(&mut spins);
    }
}

fn pause(spins: &mut usize) {
    if *spins < SPINS {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

impl RangeWords {
    /// Takes the words of `mask` (odd), in bit order, once no exclusive holder is in.
    pub fn lock(&self, mask: u8) -> RangeGuard<'_> {
        loop {
            for b in bits(mask) {
                let w = &self.words[b];
                let mut spins = 0;
                loop {
                    let v = wait_even(w);
                    if w.compare_exchange_weak(v, v + 1, Ordering::SeqCst, Ordering::Relaxed)
                        .is_ok()
                    {
                        break;
                    }
                    pause(&mut spins);
                }
            }
            let held = RangeGuard { words: self, mask };
            if self.exclusive.load(Ordering::SeqCst) == 0 {
                return held;
            }
            drop(held);
            let mut spins = 0;
            while self.exclusive.load(Ordering::Acquire) != 0 {
                pause(&mut spins);
            }
        }
    }

    /// Raises the exclusive flag and waits for every word to be free. The caller holds the
    /// stripe lock exclusively (so no reader holds words and no other flag raiser is in).
    pub fn exclude(&self) -> Excluded<'_> {
        self.exclusive.swap(1, Ordering::SeqCst);
        for w in &self.words {
            wait_even(w);
        }
        Excluded(self)
    }

    /// Runs `copy` until no writer of the words of `mask` ran during it (at most `READ_TRIES`
    /// times; then once more with the words held) and returns its last result. The caller
    /// holds the stripe lock shared.
    pub fn read<R>(&self, mask: u8, mut copy: impl FnMut() -> R) -> R {
        let mut seen = [0u32; WORDS];
        for _ in 0..READ_TRIES {
            for b in bits(mask) {
                seen[b] = wait_even(&self.words[b]);
            }
            let r = copy();
            // The copy's loads before the second look at the words (x86 keeps loads in
            // order; this keeps the compiler from moving them).
            fence(Ordering::Acquire);
            if bits(mask).all(|b| self.words[b].load(Ordering::Relaxed) == seen[b]) {
                return r;
            }
        }
        let _held = self.lock(mask);
        copy()
    }
}

/// A raised exclusive flag; dropping it lowers the flag.
pub struct Excluded<'a>(&'a RangeWords);

impl Drop for Excluded<'_> {
    fn drop(&mut self) {
        self.0.exclusive.store(0, Ordering::Release);
    }
}

/// Held range words; dropping it makes them even again. The holder fences its data first.
pub struct RangeGuard<'a> {
    words: &'a RangeWords,
    mask: u8,
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        for b in bits(self.mask) {
            // Only the holder changes an odd word: a plain store, no read-modify-write.
            let w = &self.words.words[b];
            w.store(w.load(Ordering::Relaxed) + 1, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_cover_exactly_the_ranges_touched() {
        let r = 1u64 << RANGE_SHIFT;
        assert_eq!(mask(0, 0), 0);
        assert_eq!(mask(0, 1), 0b1);
        assert_eq!(mask(r - 1, 1), 0b1);
        assert_eq!(mask(r - 1, 2), 0b11);
        assert_eq!(mask(3 * r, r), 0b1000);
        // Wraps around the stripe's words.
        assert_eq!(mask(7 * r, r + 1), 0b1000_0001);
        assert_eq!(mask(0, 7 * r), 0b0111_1111);
        assert_eq!(mask(5, 8 * r), u8::MAX);
        assert_eq!(mask(1 << 40, 1 << 30), u8::MAX);
    }

    #[test]
    fn a_reader_repeats_a_copy_a_writer_ran_over_and_a_writer_waits_for_the_words() {
        let w = RangeWords::default();
        let mut copies = 0;
        let got = w.read(0b10, || {
            copies += 1;
            if copies == 1 {
                // A writer of the same range comes and goes during the first copy.
                drop(w.lock(0b110));
            }
            copies
        });
        assert_eq!((got, copies), (2, 2));
        // A writer of another range does not disturb the copy.
        let mut copies = 0;
        w.read(0b10, || {
            copies += 1;
            drop(w.lock(0b01));
        });
        assert_eq!(copies, 1);
        // Held words are odd; a second writer gets them only after the first lets go.
        let g = w.lock(0b1);
        blocks_until_dropped(g, || drop(w.lock(0b11)), || {});
        // Every hold added two: word 0 was held three times, word 1 twice.
        assert_eq!(w.words[0].load(Ordering::SeqCst), 6);
        assert_eq!(w.words[1].load(Ordering::SeqCst), 4);
    }

    /// Runs `take` on another thread while `held` is held: it must not finish within 20 ms
    /// (`meanwhile` then runs), and must finish within a second once `held` is dropped.
    fn blocks_until_dropped<H>(held: H, take: impl FnOnce() + Send, meanwhile: impl FnOnce()) {
        use std::sync::atomic::AtomicBool;
        use std::time::Duration;
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                take();
                done.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(Duration::from_millis(20));
            assert!(!done.load(Ordering::SeqCst));
            meanwhile();
            drop(held);
            let comes = (0..1000).any(|_| {
                std::thread::sleep(Duration::from_millis(1));
                done.load(Ordering::SeqCst)
            });
            assert!(comes);
        });
    }

    #[test]
    fn an_exclusive_holder_and_in_place_writers_are_never_in_together() {
        let w = RangeWords::default();
        // A held word keeps an exclusive holder out until it is let go.
        blocks_until_dropped(w.lock(0b100), || drop(w.exclude()), || {});
        // A raised flag keeps writers of any word out until it drops; the waiting writer
        // lets go of its word meanwhile (all words even).
        let all_even = || assert!(w.words.iter().all(|v| v.load(Ordering::SeqCst) & 1 == 0));
        blocks_until_dropped(w.exclude(), || drop(w.lock(0b1)), all_even);
    }

    #[test]
    fn a_reader_that_keeps_losing_copies_under_the_words() {
        let w = RangeWords::default();
        let mut copies = 0;
        w.read(0b1, || {
            copies += 1;
            if copies <= READ_TRIES {
                drop(w.lock(0b1));
            } else {
                // The last copy runs with the word held.
                assert_eq!(w.words[0].load(Ordering::SeqCst) & 1, 1);
            }
        });
        assert_eq!(copies, READ_TRIES + 1);
    }
}
