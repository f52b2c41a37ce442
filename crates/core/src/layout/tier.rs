//! The SSD tier's on-media structures (docs/TIER.md, FORMAT.md §6d): the tier header and the
//! SSD block table at the end of the PM image, and the header in extent 0 of the SSD itself.
//! Present only on images with INCOMPAT_TIER.
//!
//! The SSD is cut into 512 KiB extents. Extent 0 holds the SSD header; data extents follow,
//! and SSD block `b` (counted over the data extents) lives at byte
//! `(1 + b / 128) * 512 KiB + (b % 128) * 4 KiB`. The PM table has one 16-byte entry per SSD
//! block: word 0 the key `ino << 32 | lblk` (0 = invalid), word 1 the inode's generation (low
//! half) and the extent's write sequence (high half). Word 0 is the commit word.

use super::{corrupted, get_u32, get_u64, put_u32, put_u64, Corrupted, BLOCK_SIZE};

pub const TIER_MAGIC: u64 = u64::from_le_bytes(*b"NVMFSTIR");
pub const SSD_MAGIC: u64 = u64::from_le_bytes(*b"NVMFSSSD");
/// Bytes of an SSD extent: the unit a flush writes, sequentially, never in place.
pub const EXTENT_BYTES: u64 = 512 * 1024;
pub const BLOCKS_PER_EXTENT: u64 = EXTENT_BYTES / BLOCK_SIZE;
/// Bytes of one SSD block table entry.
pub const ENTRY_BYTES: u64 = 16;
/// Longest SSD path the header keeps.
pub const PATH_MAX: usize = 256;
/// Largest SSD: 2^24 data extents (8 TiB), so a block number fits 31 bits.
pub const MAX_EXTENTS: u64 = 1 << 24;

// Tier header field offsets.
const O_MAGIC: usize = 0;
const O_EXTENTS: usize = 8;
const O_UUID: usize = 16;
const O_TABLE_START: usize = 32;
const O_TABLE_BLOCKS: usize = 40;
const O_DIRTY_HIGH: usize = 48;
const O_DIRTY_LOW: usize = 52;
const O_CLEAN_AT: usize = 56;
const O_FREE_MIN: usize = 60;
const O_PATH_LEN: usize = 64;
const O_PATH: usize = 128;
const O_CHECKSUM: usize = 4092;

// SSD header field offsets (the first 4 KiB of the SSD).
const S_MAGIC: usize = 0;
const S_EXTENTS: usize = 8;
const S_UUID: usize = 16;
const S_CHECKSUM: usize = 4092;

/// Flush and cleaning thresholds, in thousandths (defaults from the seed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    /// Flush when dirty PM blocks pass this share of the PM data blocks...
    pub dirty_high: u32,
    /// ...until they are below this one.
    pub dirty_low: u32,
    /// Clean segments when SSD utilisation passes this share...
    pub clean_at: u32,
    /// ...and fewer than this many extents are free.
    pub free_extents_min: u32,
}

impl Default for Watermarks {
    fn default() -> Self {
        Watermarks {
            dirty_high: 800,
            dirty_low: 500,
            clean_at: 850,
            free_extents_min: 8,
        }
    }
}

impl Watermarks {
    pub fn validate(&self) -> Result<(), String> {
        if self.dirty_low >= self.dirty_high || self.dirty_high > 1000 || self.clean_at > 1000 {
            return Err(format!(
                "tier watermarks: need dirty_low < dirty_high <= 1000 and clean_at <= 1000 (thousandths), got {self:?}"
            ));
        }
        Ok(())
    }
}

/// The tier header (first block of the tier region).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierHeader {
    /// Data extents of the SSD (extent 0, its header, not counted).
    pub extents: u64,
    /// Shared with the SSD header: a mount with another device is refused.
    pub uuid: [u8; 16],
    /// First block of the SSD block table (absolute, in PM blocks).
    pub table_start: u64,
    pub table_blocks: u64,
    pub marks: Watermarks,
    /// The SSD's path as given at mkfs (a mount may name another).
    pub path: String,
}

/// PM blocks the table for `extents` data extents needs.
pub fn table_blocks(extents: u64) -> u64 {
    (extents * BLOCKS_PER_EXTENT * ENTRY_BYTES).div_ceil(BLOCK_SIZE)
}

impl TierHeader {
    /// Blocks of the tier region: the header and the table.
    pub fn region_blocks(&self) -> u64 {
        1 + self.table_blocks
    }

    /// SSD blocks (data extents * 128).
    pub fn ssd_blocks(&self) -> u64 {
        self.extents * BLOCKS_PER_EXTENT
    }

    /// Byte offset in PM of the entry of SSD block `b`.
    #[inline]
    pub fn entry_off(&self, b: u64) -> u64 {
        self.table_start * BLOCK_SIZE + b * ENTRY_BYTES
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        put_u64(&mut b, O_MAGIC, TIER_MAGIC);
        put_u64(&mut b, O_EXTENTS, self.extents);
        b[O_UUID..O_UUID + 16].copy_from_slice(&self.uuid);
        put_u64(&mut b, O_TABLE_START, self.table_start);
        put_u64(&mut b, O_TABLE_BLOCKS, self.table_blocks);
        put_u32(&mut b, O_DIRTY_HIGH, self.marks.dirty_high);
        put_u32(&mut b, O_DIRTY_LOW, self.marks.dirty_low);
        put_u32(&mut b, O_CLEAN_AT, self.marks.clean_at);
        put_u32(&mut b, O_FREE_MIN, self.marks.free_extents_min);
        let path = self.path.as_bytes();
        let n = path.len().min(PATH_MAX);
        put_u32(&mut b, O_PATH_LEN, n as u32);
        b[O_PATH..O_PATH + n].copy_from_slice(&path[..n]);
        let crc = crc32c::crc32c(&b[..O_CHECKSUM]);
        put_u32(&mut b, O_CHECKSUM, crc);
        b
    }

    /// Decodes the header at block `start` of an image of `total_blocks`, whose tier region
    /// must end exactly at the end of the image.
    pub fn decode(b: &[u8], start: u64, total_blocks: u64) -> Result<TierHeader, Corrupted> {
        let offset = start * BLOCK_SIZE;
        let bad = |what: &str| corrupted(format!("tier header: {what}"), offset);
        if b.len() < BLOCK_SIZE as usize || get_u64(b, O_MAGIC) != TIER_MAGIC {
            return Err(bad("bad magic"));
        }
        if get_u32(b, O_CHECKSUM) != crc32c::crc32c(&b[..O_CHECKSUM]) {
            return Err(bad("checksum mismatch"));
        }
        let extents = get_u64(b, O_EXTENTS);
        if extents == 0 || extents > MAX_EXTENTS {
            return Err(bad("extent count out of range"));
        }
        let table_start = get_u64(b, O_TABLE_START);
        let table_blocks = get_u64(b, O_TABLE_BLOCKS);
        if table_start != start + 1
            || table_blocks != self::table_blocks(extents)
            || table_start + table_blocks != total_blocks
        {
            return Err(bad("table geometry"));
        }
        let marks = Watermarks {
            dirty_high: get_u32(b, O_DIRTY_HIGH),
            dirty_low: get_u32(b, O_DIRTY_LOW),
            clean_at: get_u32(b, O_CLEAN_AT),
            free_extents_min: get_u32(b, O_FREE_MIN),
        };
        marks.validate().map_err(|e| bad(&e))?;
        let n = get_u32(b, O_PATH_LEN) as usize;
        if n > PATH_MAX {
            return Err(bad("path length"));
        }
        let path = String::from_utf8(b[O_PATH..O_PATH + n].to_vec())
            .map_err(|_| bad("path is not UTF-8"))?;
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[O_UUID..O_UUID + 16]);
        Ok(TierHeader {
            extents,
            uuid,
            table_start,
            table_blocks,
            marks,
            path,
        })
    }
}

/// The header in the first 4 KiB of the SSD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SsdHeader {
    pub extents: u64,
    pub uuid: [u8; 16],
}

impl SsdHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        put_u64(&mut b, S_MAGIC, SSD_MAGIC);
        put_u64(&mut b, S_EXTENTS, self.extents);
        b[S_UUID..S_UUID + 16].copy_from_slice(&self.uuid);
        let crc = crc32c::crc32c(&b[..S_CHECKSUM]);
        put_u32(&mut b, S_CHECKSUM, crc);
        b
    }

    pub fn decode(b: &[u8]) -> Result<SsdHeader, String> {
        if b.len() < BLOCK_SIZE as usize || get_u64(b, S_MAGIC) != SSD_MAGIC {
            return Err("not an nvmfs SSD tier (bad magic)".into());
        }
        if get_u32(b, S_CHECKSUM) != crc32c::crc32c(&b[..S_CHECKSUM]) {
            return Err("SSD header checksum mismatch".into());
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[S_UUID..S_UUID + 16]);
        Ok(SsdHeader {
            extents: get_u64(b, S_EXTENTS),
            uuid,
        })
    }
}

/// Word 1 of an entry: the inode's generation and the extent's write sequence.
#[inline]
pub fn entry_meta(generation: u32, seq: u32) -> u64 {
    (seq as u64) << 32 | generation as u64
}

/// (generation, sequence) of word 1.
#[inline]
pub fn split_meta(w: u64) -> (u32, u32) {
    (w as u32, (w >> 32) as u32)
}

/// Byte offset on the SSD of SSD block `b`.
#[inline]
pub fn ssd_block_off(b: u64) -> u64 {
    (1 + b / BLOCKS_PER_EXTENT) * EXTENT_BYTES + (b % BLOCKS_PER_EXTENT) * BLOCK_SIZE
}

/// Byte offset on the SSD of data extent `e`.
#[inline]
pub fn extent_off(e: u64) -> u64 {
    (1 + e) * EXTENT_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrips_and_rejects_damage() {
        let h = TierHeader {
            extents: 10,
            uuid: [3; 16],
            table_start: 91,
            table_blocks: table_blocks(10),
            marks: Watermarks::default(),
            path: "/dev/shm/ssd".into(),
        };
        let total = 91 + table_blocks(10);
        let b = h.encode();
        assert_eq!(TierHeader::decode(&b, 90, total).unwrap(), h);
        assert!(TierHeader::decode(&b, 90, total + 1).is_err());
        let mut d = b.clone();
        d[20] ^= 1;
        assert!(TierHeader::decode(&d, 90, total).is_err());
        let s = SsdHeader {
            extents: 10,
            uuid: [3; 16],
        };
        assert_eq!(SsdHeader::decode(&s.encode()).unwrap(), s);
        assert!(SsdHeader::decode(&[0u8; 4096]).is_err());
    }

    #[test]
    fn block_offsets_skip_the_header_extent() {
        assert_eq!(ssd_block_off(0), EXTENT_BYTES);
        assert_eq!(ssd_block_off(127), EXTENT_BYTES + 127 * 4096);
        assert_eq!(ssd_block_off(128), 2 * EXTENT_BYTES);
        assert_eq!(extent_off(1), ssd_block_off(128));
        assert_eq!(table_blocks(1), 1);
        assert_eq!(table_blocks(3), 2);
    }
}
