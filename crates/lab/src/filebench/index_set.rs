//! A set of fileset entry indices that answers "the first member at or after i, wrapping
//! around" in a few word reads: one bit per entry, and one summary bit per non-empty word.
//! Filebench keeps its pickable entries in AVL trees for the same query (`fileset_pick`);
//! scanning the entries one by one under the pick lock made the pick's cost depend on where
//! the rotors stood, and 50 threads queued on that lock.

#[derive(Debug, Clone)]
pub struct IndexSet {
    len: usize,
    words: Vec<u64>,
    /// Bit w is set when `words[w]` is not zero.
    summary: Vec<u64>,
}

impl IndexSet {
    /// An empty set over indices `0..len`.
    pub fn new(len: usize) -> Self {
        let words = len.div_ceil(64);
        IndexSet {
            len,
            words: vec![0; words],
            summary: vec![0; words.div_ceil(64)],
        }
    }

    #[cfg(test)]
    pub fn contains(&self, i: usize) -> bool {
        self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Adds (`on`) or removes `i`.
    pub fn set(&mut self, i: usize, on: bool) {
        assert!(i < self.len, "index {i} out of a set of {}", self.len);
        let w = i / 64;
        if on {
            self.words[w] |= 1 << (i % 64);
        } else {
            self.words[w] &= !(1 << (i % 64));
        }
        let bit = 1 << (w % 64);
        if self.words[w] == 0 {
            self.summary[w / 64] &= !bit;
        } else {
            self.summary[w / 64] |= bit;
        }
    }

    /// The first member at or after `start`, wrapping to the lowest member below it.
    pub fn first_from(&self, start: usize) -> Option<usize> {
        let start = if start >= self.len { 0 } else { start };
        self.first_at_or_after(start)
            .or_else(|| self.first_at_or_after(0).filter(|&i| i < start))
    }

    fn first_at_or_after(&self, from: usize) -> Option<usize> {
        if from >= self.len {
            return None;
        }
        let w = from / 64;
        let here = self.words[w] & (u64::MAX << (from % 64));
        if here != 0 {
            return Some(w * 64 + here.trailing_zeros() as usize);
        }
        let next = self.next_word(w + 1)?;
        Some(next * 64 + self.words[next].trailing_zeros() as usize)
    }

    /// The first non-empty word at or after word `from`.
    fn next_word(&self, from: usize) -> Option<usize> {
        if from >= self.words.len() {
            return None;
        }
        let mut s = from / 64;
        let mut bits = self.summary[s] & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(s * 64 + bits.trailing_zeros() as usize);
            }
            s += 1;
            bits = *self.summary.get(s)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The set against a plain scan of a Vec<bool>, over random changes and queries, at sizes
    /// around the word and summary boundaries.
    #[test]
    fn matches_a_linear_scan() {
        let mut rng = fastrand::Rng::with_seed(7);
        for len in [1, 2, 63, 64, 65, 127, 128, 129, 4095, 4096, 4097, 9000] {
            let mut set = IndexSet::new(len);
            let mut model = vec![false; len];
            for step in 0..3000 {
                let i = rng.usize(0..len);
                // Sparse and dense phases, so long empty stretches occur.
                let on = rng.u32(0..100) < if step % 1000 < 500 { 3 } else { 90 };
                set.set(i, on);
                model[i] = on;
                let start = rng.usize(0..len + 1);
                let s = if start >= len { 0 } else { start };
                let want = (0..len).map(|k| (s + k) % len).find(|&j| model[j]);
                assert_eq!(set.first_from(start), want, "len {len} start {start}");
                assert_eq!(set.contains(i), on);
            }
        }
    }

    #[test]
    fn empty_and_full_sets() {
        let mut set = IndexSet::new(200);
        assert_eq!(set.first_from(0), None);
        assert_eq!(set.first_from(199), None);
        for i in 0..200 {
            set.set(i, true);
        }
        assert_eq!(set.first_from(199), Some(199));
        assert_eq!(
            set.first_from(200),
            Some(0),
            "past the end wraps to the start"
        );
        set.set(199, false);
        assert_eq!(set.first_from(199), Some(0));
    }
}
