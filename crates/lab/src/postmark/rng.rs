//! The random numbers of Postmark 1.51: Matsumoto and Nishimura's MT19937 as
//! distributed in 1999 (`genrand`), seeded by that version's `sgenrand`, and
//! Postmark's `RND(x)`.
//!
//! The generator core is the standard MT19937, but the 1999 `sgenrand` fills the
//! state with Knuth's LCG (`seed = 69069 * seed + 1`, two steps per word, high
//! halves), not with the 2002 `init_genrand` every crate implements, so no
//! published crate reproduces Postmark's sequence; hence this small copy.
//! [`Mt19937::init_genrand`] is here only so the core can be checked against the
//! reference sequence for seed 5489.
//!
//! Postmark declares the state `unsigned long`, 64 bits on LP64 Linux; every
//! value is masked to 32 bits on the way (the seeding keeps bits 16..31, the
//! twist combines 32-bit words, the tempering masks are 32-bit), so the
//! sequence is the 32-bit one on every platform, which the recorded draws of the
//! original compiled on x86-64 confirm (tests).

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// MT19937's state: 624 words and the index of the next one to temper.
#[derive(Clone)]
pub struct Mt19937 {
    mt: Box<[u32; N]>,
    mti: usize,
}

impl Mt19937 {
    /// Postmark's seeding (`sgenrand(seed)` of the 1999 mt19937.c, called by every
    /// `run` with the configured seed).
    pub fn sgenrand(seed: u32) -> Self {
        let mut mt = Box::new([0u32; N]);
        let mut s = seed;
        for word in mt.iter_mut() {
            let high = s & 0xffff_0000;
            s = s.wrapping_mul(69069).wrapping_add(1);
            *word = high | ((s & 0xffff_0000) >> 16);
            s = s.wrapping_mul(69069).wrapping_add(1);
        }
        Mt19937 { mt, mti: N }
    }

    /// The 2002 reference seeding (`init_genrand`), for checking the generator
    /// against the published MT19937 outputs; Postmark does not use it.
    pub fn init_genrand(seed: u32) -> Self {
        let mut mt = Box::new([0u32; N]);
        mt[0] = seed;
        for i in 1..N {
            let prev = mt[i - 1];
            mt[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { mt, mti: N }
    }

    /// The next 32-bit output (`genrand()`).
    pub fn genrand(&mut self) -> u32 {
        if self.mti >= N {
            self.twist();
        }
        let mut y = self.mt[self.mti];
        self.mti += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// Postmark's `RND(x)`: `genrand() % x` for `x > 0`, else 0 without drawing
    /// (the macro tests `x>0` before calling `genrand`).
    pub fn rnd(&mut self, x: i64) -> u32 {
        if x > 0 {
            // x fits the C `int` Postmark passes; the remainder is below it.
            (u64::from(self.genrand()) % x as u64) as u32
        } else {
            0
        }
    }

    /// Generates the next 624 words at once.
    fn twist(&mut self) {
        let mag01 = |y: u32| if y & 1 == 0 { 0 } else { MATRIX_A };
        let mt = &mut self.mt;
        for kk in 0..N {
            let y = (mt[kk] & UPPER_MASK) | (mt[(kk + 1) % N] & LOWER_MASK);
            mt[kk] = mt[(kk + M) % N] ^ (y >> 1) ^ mag01(y);
        }
        self.mti = 0;
    }
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937").field("mti", &self.mti).finish()
    }
}
