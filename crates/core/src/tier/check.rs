//! What fsck checks (and repairs) in the SSD tier's PM structures: the tier header decodes and
//! fits the image, and every valid entry of the SSD block table names an in-use regular file
//! of the same generation, a block below its `map_end`, and a key no other entry holds
//! (FORMAT.md §10, invariants 37-39). The SSD itself is not read: fsck checks one image file.

use std::collections::HashMap;

use crate::layout::inode::{FileType, Inode};
use crate::layout::superblock::Superblock;
use crate::layout::tier::{split_meta, TierHeader};
use crate::layout::{Corrupted, BLOCK_SIZE};
use crate::mapping::hashfs::split_key;
use crate::media::Pm;

/// A table entry that must go, and why.
pub struct BadEntry {
    /// SSD block whose entry it is.
    pub block: u64,
    /// Byte offset of the entry in the image.
    pub offset: u64,
    pub why: String,
}

/// The tier header of `sb`'s image, if it has a tier.
pub fn header(pm: &Pm, sb: &Superblock) -> Option<Result<TierHeader, Corrupted>> {
    let start = sb.tier_start?;
    Some(TierHeader::decode(
        &pm.read_vec(start * BLOCK_SIZE, BLOCK_SIZE as usize),
        start,
        sb.geo.total_blocks,
    ))
}

/// Entries that violate the table's invariants, given the in-use inodes (`inodes[ino]`).
/// Of two entries for one key the one with the older write sequence is the bad one (what
/// mount keeps is the newer). Also returns how many entries are valid.
pub fn bad_entries(pm: &Pm, hdr: &TierHeader, inodes: &[Option<Inode>]) -> (Vec<BadEntry>, u64) {
    let mut bad = Vec::new();
    let mut seen: HashMap<u64, (u64, u32)> = HashMap::new();
    let mut valid = 0;
    for b in 0..hdr.ssd_blocks() {
        let offset = hdr.entry_off(b);
        let k = pm.load_u64(offset);
        if k == 0 {
            continue;
        }
        let (gen, seq) = split_meta(pm.load_u64(offset + 8));
        let why = match split_key(k) {
            None => Some(format!("key {k:#x} is not an (inode, block) key")),
            Some((ino, lblk)) => match inodes.get(ino as usize).and_then(|i| i.as_ref()) {
                None => Some(format!("inode {ino} is not in use")),
                Some(i) if i.file_type() != Some(FileType::File) => {
                    Some(format!("inode {ino} is not a regular file"))
                }
                Some(i) if i.generation != gen => Some(format!(
                    "inode {ino} has generation {}, the entry {gen}",
                    i.generation
                )),
                Some(i) if lblk as u64 >= i.map_end() => Some(format!(
                    "inode {ino} block {lblk} is past its end ({} blocks)",
                    i.map_end()
                )),
                Some(_) => None,
            },
        };
        if let Some(why) = why {
            bad.push(BadEntry {
                block: b,
                offset,
                why,
            });
            continue;
        }
        valid += 1;
        if let Some(&(other, other_seq)) = seen.get(&k) {
            let (loser, keep) = if other_seq >= seq {
                (b, (other, other_seq))
            } else {
                (other, (b, seq))
            };
            bad.push(BadEntry {
                block: loser,
                offset: hdr.entry_off(loser),
                why: format!("key {k:#x} has another valid entry (SSD block {})", keep.0),
            });
            valid -= 1;
            seen.insert(k, keep);
        } else {
            seen.insert(k, (b, seq));
        }
    }
    (bad, valid)
}
