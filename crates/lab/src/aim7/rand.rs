//! AIM7's random numbers (`rand.c`): a linear congruential generator on an `unsigned long`
//! (64 bits on LP64 Linux), returning 15 bits. One per task, seeded by `aim_srand` with the
//! task's number, drives both the order of the task's jobs and the subtests' random blocks.

/// `aim_rand()`'s state.
#[derive(Debug, Clone)]
pub struct AimRand {
    seed: u64,
}

impl AimRand {
    /// `aim_srand(seed)`.
    pub fn new(seed: u64) -> Self {
        AimRand { seed }
    }

    /// The next number, 0 ..= 32767: `seed = seed * 1103515245 + 12345`, bits 16..31.
    pub fn next_u15(&mut self) -> u32 {
        self.seed = self.seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        ((self.seed >> 16) & 0x7fff) as u32
    }

    /// `aim_rand() % n`, as the subtests and the job sampler use it (`n` > 0). Only the first
    /// 32768 values of a larger `n` can come out, as in AIM7.
    pub fn below(&mut self, n: u32) -> u32 {
        self.next_u15() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_c_generator() {
        // seed 1: 1103515245 + 12345 = 1103527590; >> 16 = 16838, & 0x7fff = 16838.
        let mut r = AimRand::new(1);
        assert_eq!(r.next_u15(), 16838);
        // The next state wraps a 64-bit unsigned long, as on LP64.
        let s1: u64 = 1_103_527_590;
        let s2 = s1.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        assert_eq!(r.next_u15(), ((s2 >> 16) & 0x7fff) as u32);
        let mut z = AimRand::new(0);
        assert_eq!(z.next_u15(), (12_345u64 >> 16) as u32 & 0x7fff);
        assert!((0..10_000).all(|_| r.next_u15() <= 0x7fff));
    }
}
