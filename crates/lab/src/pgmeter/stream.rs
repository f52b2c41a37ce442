//! Where an I/O goes in its test file: Iometer's random and sequential offsets.
//!
//! Each emulated outstanding I/O is one stream with its own position. A sequential I/O starts
//! where the stream's previous I/O (of any line) ended, rounded up to the line's alignment,
//! and wraps to the start of the file when it would run past the end. A random I/O starts at a
//! uniformly drawn aligned offset at which the whole transfer fits in the file.

/// One stream's position in a file of `file_bytes`.
#[derive(Debug, Clone)]
pub struct Stream {
    file_bytes: u64,
    /// End of the previous I/O.
    next: u64,
}

impl Stream {
    /// Stream `index` of `count` on one file starts `index / count` of the way in, so that
    /// sequential streams of one file read or write different parts of it rather than the
    /// same blocks one after another.
    pub fn new(file_bytes: u64, index: usize, count: usize) -> Self {
        let start = (u128::from(file_bytes) * index as u128 / count.max(1) as u128) as u64;
        Stream {
            file_bytes,
            next: start,
        }
    }

    /// The offset of an I/O of `bytes` aligned on `align` (both > 0, `bytes` at most the
    /// file's size: the engine's config is validated so).
    pub fn place(&mut self, rng: &mut fastrand::Rng, bytes: u64, align: u64, random: bool) -> u64 {
        let offset = if random {
            random_offset(rng, self.file_bytes, bytes, align)
        } else {
            let at = self.next.div_ceil(align).saturating_mul(align);
            match at.checked_add(bytes) {
                Some(end) if end <= self.file_bytes => at,
                _ => 0,
            }
        };
        self.next = offset + bytes;
        offset
    }
}

/// A uniform aligned offset in [0, file_bytes - bytes].
fn random_offset(rng: &mut fastrand::Rng, file_bytes: u64, bytes: u64, align: u64) -> u64 {
    let slots = (file_bytes - bytes) / align + 1;
    rng.u64(0..slots) * align
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_offsets_are_consecutive_and_wrap() {
        let mut rng = fastrand::Rng::with_seed(1);
        let mut s = Stream::new(10 * 4096, 0, 1);
        let offs: Vec<u64> = (0..12)
            .map(|_| s.place(&mut rng, 4096, 4096, false))
            .collect();
        let want: Vec<u64> = (0..10).chain(0..2).map(|i| i * 4096).collect();
        assert_eq!(offs, want);
    }

    #[test]
    fn sequential_after_an_unaligned_end_rounds_up() {
        let mut rng = fastrand::Rng::with_seed(1);
        let mut s = Stream::new(1 << 20, 0, 1);
        assert_eq!(s.place(&mut rng, 700, 512, false), 0);
        // 700 rounds up to the next sector boundary.
        assert_eq!(s.place(&mut rng, 512, 512, false), 1024);
        assert_eq!(s.place(&mut rng, 512, 512, false), 1536);
    }

    #[test]
    fn streams_start_spread_over_the_file() {
        let mut rng = fastrand::Rng::with_seed(1);
        let starts: Vec<u64> = (0..4)
            .map(|k| Stream::new(1 << 20, k, 4).place(&mut rng, 8192, 8192, false))
            .collect();
        assert_eq!(starts, [0, 256 << 10, 512 << 10, 768 << 10]);
    }

    #[test]
    fn random_offsets_are_aligned_fit_and_cover_the_file() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut s = Stream::new(64 << 10, 0, 1);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..20_000 {
            let off = s.place(&mut rng, 4096, 512, true);
            assert_eq!(off % 512, 0);
            assert!(off + 4096 <= 64 << 10);
            seen.insert(off);
        }
        // (64 KiB - 4 KiB) / 512 + 1 = 121 possible offsets, every one drawn.
        assert_eq!(seen.len(), 121);
        assert_eq!(seen.last(), Some(&(60 << 10)));
    }

    #[test]
    fn a_transfer_of_the_whole_file_goes_at_zero() {
        let mut rng = fastrand::Rng::with_seed(3);
        let mut s = Stream::new(8192, 0, 1);
        assert_eq!(s.place(&mut rng, 8192, 512, true), 0);
        assert_eq!(s.place(&mut rng, 8192, 512, false), 0);
    }
}
