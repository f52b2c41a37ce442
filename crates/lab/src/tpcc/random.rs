//! TPC-C's random inputs: NURand and its run-time constants C (clauses 2.1.5-2.1.6), and
//! the generated strings of the initial population (clause 4.3.2).

use fastrand::Rng;
use serde::Serialize;

/// NURand's A for customer last names (numbers 0..=999).
pub const A_C_LAST: i64 = 255;
/// NURand's A for customer ids.
pub const A_C_ID: i64 = 1023;
/// NURand's A for item ids.
pub const A_OL_I_ID: i64 = 8191;

/// The syllables of last names, indexed by digit (clause 4.3.2.3).
const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

const ALPHANUMERIC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const LETTERS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The non-uniform random number of clause 2.1.6:
/// `NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x`.
/// Needs `0 <= x <= y` and `0 <= c <= a`.
pub fn nurand(rng: &mut Rng, a: i64, x: i64, y: i64, c: i64) -> i64 {
    (((rng.i64(0..=a) | rng.i64(x..=y)) + c) % (y - x + 1)) + x
}

/// The run-time constants C of the three NURand uses, shared by every terminal of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NuConstants {
    /// C for C_LAST (A = 255).
    pub c_last: i64,
    /// C for C_ID (A = 1023).
    pub c_id: i64,
    /// C for OL_I_ID (A = 8191).
    pub ol_i_id: i64,
}

/// C for C_LAST during the initial population (C_LOAD), random within [0 .. 255]. The
/// load uses NURand only for last names (C_IDs are a permutation, OL_I_IDs uniform).
pub fn c_last_load(rng: &mut Rng) -> i64 {
    rng.i64(0..=A_C_LAST)
}

/// Clause 2.1.6.1: C_DELTA = |C_RUN - C_LOAD| must be in [65 .. 119] and neither 96
/// nor 112, so run-time last names do not follow the loaded distribution exactly.
pub fn c_last_delta_ok(load: i64, run: i64) -> bool {
    let delta = (run - load).abs();
    (65..=119).contains(&delta) && delta != 96 && delta != 112
}

impl NuConstants {
    /// The constants of a run against a database loaded with `c_last_load`: C_LAST drawn
    /// uniformly among the values in [0 .. 255] obeying the delta rule (over fifty
    /// for every load value), the others uniformly within [0 .. A].
    pub fn for_run(rng: &mut Rng, c_last_load: i64) -> NuConstants {
        let allowed: Vec<i64> = (0..=A_C_LAST)
            .filter(|&run| c_last_delta_ok(c_last_load, run))
            .collect();
        NuConstants {
            c_last: allowed[rng.usize(..allowed.len())],
            c_id: rng.i64(0..=A_C_ID),
            ol_i_id: rng.i64(0..=A_OL_I_ID),
        }
    }
}

/// The last name for `number` in 0..=999: the syllables of its three digits
/// (clause 4.3.2.3), e.g. 371 is PRI-CALLY-OUGHT.
pub fn last_name(number: u32) -> String {
    let digit = |d: u32| SYLLABLES[(d % 10) as usize];
    let mut name = String::with_capacity(15);
    name.push_str(digit(number / 100));
    name.push_str(digit(number / 10));
    name.push_str(digit(number));
    name
}

fn string_of(rng: &mut Rng, alphabet: &[u8], len: usize) -> String {
    (0..len)
        .map(|_| char::from(alphabet[rng.usize(..alphabet.len())]))
        .collect()
}

/// A random a-string [lo .. hi]: random length, alphanumeric characters (clause 4.3.2.2).
pub fn astring(rng: &mut Rng, lo: usize, hi: usize) -> String {
    let len = rng.usize(lo..=hi);
    string_of(rng, ALPHANUMERIC, len)
}

/// A random n-string [lo .. hi]: random length, numeric characters.
pub fn nstring(rng: &mut Rng, lo: usize, hi: usize) -> String {
    let len = rng.usize(lo..=hi);
    string_of(rng, b"0123456789", len)
}

/// A string of `len` random letters (states, S_DIST_xx).
pub fn letters(rng: &mut Rng, len: usize) -> String {
    string_of(rng, LETTERS, len)
}

/// A zip code: a random n-string of 4 digits followed by "11111" (clause 4.3.2.7).
pub fn zip(rng: &mut Rng) -> String {
    nstring(rng, 4, 4) + "11111"
}

/// I_DATA / S_DATA: a random a-string [26 .. 50] that in 10% of rows holds "ORIGINAL" at
/// a random position (clause 4.3.3.1).
pub fn data_with_original(rng: &mut Rng) -> String {
    let mut data = astring(rng, 26, 50);
    if rng.u32(0..10) == 0 {
        let at = rng.usize(0..=data.len() - ORIGINAL.len());
        data.replace_range(at..at + ORIGINAL.len(), ORIGINAL);
    }
    data
}

/// The marker of brand items (New-Order's brand-generic field).
pub const ORIGINAL: &str = "ORIGINAL";

/// A uniformly random warehouse in [1 .. warehouses] other than `home` (the caller
/// ensures there are at least two).
pub fn other_warehouse(rng: &mut Rng, home: u32, warehouses: u32) -> u32 {
    let w = rng.u32(1..warehouses);
    if w >= home {
        w + 1
    } else {
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let mut rng = Rng::with_seed(3);
        let (x, y) = (1, 3000);
        let mut hits = vec![0u32; 3001];
        for _ in 0..300_000 {
            let v = nurand(&mut rng, A_C_ID, x, y, 259);
            assert!((x..=y).contains(&v), "{v}");
            hits[v as usize] += 1;
        }
        // Uniform would give every value ~100 hits; NURand concentrates on some values.
        hits.sort_unstable();
        let top_1_percent: u32 = hits[hits.len() - 30..].iter().sum();
        assert!(
            top_1_percent > 3 * 3000,
            "top 1% of values got {top_1_percent} of 300000"
        );
        let mut rng = Rng::with_seed(4);
        for _ in 0..10_000 {
            assert!((0..=999).contains(&nurand(&mut rng, A_C_LAST, 0, 999, 255)));
            assert!((1..=100_000).contains(&nurand(&mut rng, A_OL_I_ID, 1, 100_000, 0)));
        }
    }

    #[test]
    fn last_names_follow_the_syllable_rule() {
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(999), "EINGEINGEING");
        let mut names = std::collections::HashSet::new();
        for n in 0..1000u32 {
            let name = last_name(n);
            let expected: String = format!("{n:03}")
                .bytes()
                .map(|d| SYLLABLES[usize::from(d - b'0')])
                .collect();
            assert_eq!(name, expected);
            assert!(name.len() <= 16, "C_LAST is varchar(16): {name}");
            names.insert(name);
        }
        assert_eq!(names.len(), 1000);
    }

    #[test]
    fn run_constant_obeys_the_delta_rule() {
        let mut rng = Rng::with_seed(5);
        for load in 0..=A_C_LAST {
            let c = NuConstants::for_run(&mut rng, load);
            assert!(
                c_last_delta_ok(load, c.c_last),
                "load {load} run {}",
                c.c_last
            );
            assert!((0..=A_C_ID).contains(&c.c_id) && (0..=A_OL_I_ID).contains(&c.ol_i_id));
        }
        assert!(!c_last_delta_ok(10, 106) && !c_last_delta_ok(120, 8) && !c_last_delta_ok(0, 64));
        assert!(c_last_delta_ok(0, 65) && c_last_delta_ok(200, 81));
    }

    #[test]
    fn strings_have_the_specified_shapes() {
        let mut rng = Rng::with_seed(6);
        let mut original = 0;
        for _ in 0..10_000 {
            let s = astring(&mut rng, 8, 16);
            assert!((8..=16).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric()));
            let z = zip(&mut rng);
            assert!(z.len() == 9 && z.ends_with("11111") && z.bytes().all(|b| b.is_ascii_digit()));
            let d = data_with_original(&mut rng);
            assert!((26..=50).contains(&d.len()));
            original += usize::from(d.contains(ORIGINAL));
            let w = other_warehouse(&mut rng, 2, 3);
            assert!(w == 1 || w == 3);
        }
        assert!(
            (800..1200).contains(&original),
            "{original} of 10000 hold ORIGINAL"
        );
    }
}
