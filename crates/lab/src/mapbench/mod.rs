//! Cycle measurements of file-mapping operations on a real nvmfs image, for the file-mapping
//! study (Neal et al., "Rethinking File Mapping for Persistent Memory", FAST'21, section 4;
//! `nvmfs study file-mapping-2021`).
//!
//! What is timed is the mapping alone, as the data path calls it through
//! [`nvmfs::Fs::mapping_probe`]: one `lookup` per block a read needs, and `reserve` + `claim` +
//! `publish` (with whatever journal work the mapping does inside them) per block an append
//! adds. [`clock`] reads the cycle counter (`rdtscp` between `lfence`s) and evicts the caches;
//! [`image`] makes the images (one per mapping, in a tmpfs); [`ops`] runs the cold (one
//! operation after evicting the caches) and hot (many operations, averaged) measurements;
//! [`threads`] the concurrent ones; [`cached`] is the study-only page-cached extent tree
//! (Strata's baseline, section 4.7).

pub mod cached;
pub mod clock;
pub mod image;
pub mod ops;
pub mod threads;

use serde::Serialize;

/// The single-block operation a measurement times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// A lookup of the block after the one looked up last.
    SeqRead,
    /// A lookup of a uniformly random block of the file.
    RandRead,
    /// Mapping a new block past EOF.
    Append,
}

impl Op {
    pub const ALL: [Op; 3] = [Op::SeqRead, Op::RandRead, Op::Append];

    pub fn name(self) -> &'static str {
        match self {
            Op::SeqRead => "seq-read",
            Op::RandRead => "rand-read",
            Op::Append => "append",
        }
    }
}
