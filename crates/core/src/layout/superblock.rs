//! The superblock (block 0) and its replica (block 1): magic, version, feature bits and the
//! geometry of every region. Written once by mkfs; checksummed with crc32c.

use super::{corrupted, get_u32, get_u64, put_u32, put_u64, Corrupted, BLOCK_SIZE};
use crate::layout::inode::INODE_SIZE;
use crate::mapping::MappingKind;

pub const MAGIC: u64 = u64::from_le_bytes(*b"NVMFS\0PM");
pub const VERSION: u32 = 1;
/// Incompatible feature: the file mapping is not HashFS; field `mapping` says which. An image
/// without it (every image before this feature) is HashFS, and a build that does not know the
/// feature refuses the image instead of reading a tree region as a hash table.
pub const INCOMPAT_MAPPING: u64 = 1;
/// Incompatible feature: an SSD tier holds cold file data (docs/TIER.md); field `tier_start`
/// says where its header and block table are. A build without it would read cold blocks as
/// holes.
pub const INCOMPAT_TIER: u64 = 2;
/// Feature bits this version understands.
pub const INCOMPAT_KNOWN: u64 = INCOMPAT_MAPPING | INCOMPAT_TIER;
pub const RO_COMPAT_KNOWN: u64 = 0;

pub const PRIMARY_BLOCK: u64 = 0;
pub const REPLICA_BLOCK: u64 = 1;
pub const STATE_BLOCK: u64 = 2;
pub const JOURNAL_START_BLOCK: u64 = 3;
pub const JOURNAL_LANES: u32 = 16;
pub const LANE_BLOCKS: u32 = 2;
pub const ROOT_INO: u64 = 1;
/// Hash-table entries (8 bytes) per block.
pub const ENTRIES_PER_BLOCK: u64 = BLOCK_SIZE / 8;
/// Default bytes of image per inode (as ext4's inode_ratio).
pub const BYTES_PER_INODE: u64 = 16 * 1024;
/// The smallest image: superblocks, state, journal, one inode block and a few data blocks.
pub const MIN_BLOCKS: u64 = 64;
/// The largest image: 2^40 blocks (4 EiB).
pub const MAX_BLOCKS: u64 = 1 << 40;

// Field offsets.
const O_MAGIC: usize = 0;
const O_VERSION: usize = 8;
const O_BLOCK_SIZE: usize = 12;
const O_COMPAT: usize = 16;
const O_RO_COMPAT: usize = 24;
const O_INCOMPAT: usize = 32;
const O_TOTAL_BLOCKS: usize = 40;
const O_JOURNAL_START: usize = 48;
const O_JOURNAL_LANES: usize = 56;
const O_LANE_BLOCKS: usize = 60;
const O_ITABLE_START: usize = 64;
const O_INODE_COUNT: usize = 72;
const O_HASH_START: usize = 80;
const O_HASH_BLOCKS: usize = 88;
const O_DATA_START: usize = 96;
const O_DATA_BLOCKS: usize = 104;
const O_ROOT_INO: usize = 112;
const O_UUID: usize = 120;
const O_CREATED_NS: usize = 136;
const O_INODE_SIZE: usize = 144;
const O_MAPPING: usize = 148;
const O_LAYOUT_SCORE: usize = 152;
const O_TIER_START: usize = 160;
const O_CHECKSUM: usize = 4092;

/// Where everything is, in blocks. Derived from the image size at mkfs, then read back from
/// the superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub total_blocks: u64,
    pub journal_start: u64,
    pub journal_lanes: u32,
    pub lane_blocks: u32,
    pub itable_start: u64,
    pub inode_count: u64,
    pub hash_start: u64,
    pub hash_blocks: u64,
    pub data_start: u64,
    pub data_blocks: u64,
}

impl Geometry {
    /// Lays out an image of `total_blocks` with about `inode_count` inodes.
    pub fn compute(total_blocks: u64, inode_count: Option<u64>) -> Result<Geometry, String> {
        if total_blocks > MAX_BLOCKS {
            return Err(format!(
                "image too large: {total_blocks} blocks, at most {MAX_BLOCKS}"
            ));
        }
        if total_blocks < MIN_BLOCKS {
            return Err(format!(
                "image too small: {} blocks, need at least {MIN_BLOCKS}",
                total_blocks
            ));
        }
        let per_block = BLOCK_SIZE / INODE_SIZE;
        let wanted = inode_count
            .unwrap_or(total_blocks * BLOCK_SIZE / BYTES_PER_INODE)
            .max(per_block);
        let inode_count = wanted.div_ceil(per_block) * per_block;
        if inode_count > u32::MAX as u64 {
            return Err(format!(
                "too many inodes: {inode_count} (at most {})",
                u32::MAX
            ));
        }
        let journal_blocks = (JOURNAL_LANES * LANE_BLOCKS) as u64;
        let itable_start = JOURNAL_START_BLOCK + journal_blocks;
        let itable_blocks = inode_count / per_block;
        let hash_start = itable_start + itable_blocks;
        let rest = total_blocks
            .checked_sub(hash_start)
            .filter(|r| *r >= 8)
            .ok_or_else(|| format!("{inode_count} inodes do not fit in {total_blocks} blocks"))?;
        // data + ceil(data / 512) <= rest
        let mut data_blocks = rest * ENTRIES_PER_BLOCK / (ENTRIES_PER_BLOCK + 1);
        while data_blocks + data_blocks.div_ceil(ENTRIES_PER_BLOCK) > rest {
            data_blocks -= 1;
        }
        let hash_blocks = data_blocks.div_ceil(ENTRIES_PER_BLOCK);
        Ok(Geometry {
            total_blocks,
            journal_start: JOURNAL_START_BLOCK,
            journal_lanes: JOURNAL_LANES,
            lane_blocks: LANE_BLOCKS,
            itable_start,
            inode_count,
            hash_start,
            hash_blocks,
            data_start: hash_start + hash_blocks,
            data_blocks,
        })
    }

    /// Byte offset of inode `ino`'s record.
    #[inline]
    pub fn inode_off(&self, ino: u64) -> u64 {
        self.itable_start * BLOCK_SIZE + ino * INODE_SIZE
    }

    /// Byte offset of hash-table entry `slot` (which maps data block `slot`).
    #[inline]
    pub fn slot_off(&self, slot: u64) -> u64 {
        self.hash_start * BLOCK_SIZE + slot * 8
    }

    /// Byte offset of data block `slot`.
    #[inline]
    pub fn data_off(&self, slot: u64) -> u64 {
        (self.data_start + slot) * BLOCK_SIZE
    }

    /// Byte offset of journal lane `lane`.
    #[inline]
    pub fn lane_off(&self, lane: u32) -> u64 {
        (self.journal_start + (lane * self.lane_blocks) as u64) * BLOCK_SIZE
    }

    /// The byte range holding metadata (everything before the data region).
    pub fn metadata_end(&self) -> u64 {
        self.data_start * BLOCK_SIZE
    }

    /// Checks that the regions are in order, do not overlap and fit the image.
    fn validate(&self, offset: u64) -> Result<(), Corrupted> {
        let per_block = BLOCK_SIZE / INODE_SIZE;
        let bad = |what: &str| Err(corrupted(format!("superblock: {what}"), offset));
        if self.total_blocks < MIN_BLOCKS || self.total_blocks > MAX_BLOCKS {
            return bad("total_blocks out of range");
        }
        if self.journal_start != JOURNAL_START_BLOCK
            || self.journal_lanes == 0
            || self.journal_lanes > 256
        {
            return bad("journal geometry");
        }
        if self.lane_blocks == 0 || self.lane_blocks > 64 {
            return bad("journal lane size");
        }
        let journal_end = self.journal_start + (self.journal_lanes * self.lane_blocks) as u64;
        if self.itable_start != journal_end {
            return bad("inode table start");
        }
        if self.inode_count < per_block
            || !self.inode_count.is_multiple_of(per_block)
            || self.inode_count > u32::MAX as u64
        {
            return bad("inode count");
        }
        if self.hash_start != self.itable_start + self.inode_count / per_block {
            return bad("hash table start");
        }
        if self.hash_blocks != self.data_blocks.div_ceil(ENTRIES_PER_BLOCK) || self.data_blocks == 0
        {
            return bad("hash table size");
        }
        if self.data_start != self.hash_start + self.hash_blocks {
            return bad("data region start");
        }
        if self
            .data_start
            .checked_add(self.data_blocks)
            .is_none_or(|end| end > self.total_blocks)
        {
            return bad("data region past the end of the image");
        }
        Ok(())
    }
}

/// The decoded superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub compat: u64,
    pub ro_compat: u64,
    pub incompat: u64,
    pub geo: Geometry,
    pub uuid: [u8; 16],
    pub created_ns: u64,
    /// The file mapping (`hashfs` unless INCOMPAT_MAPPING is set).
    pub mapping: MappingKind,
    /// Tree mappings: the layout score the allocator aims at, in thousandths (mkfs
    /// `--layout-score`); None: allocate as contiguously as free space allows.
    pub layout_score_permille: Option<u32>,
    /// The block of the tier header (INCOMPAT_TIER): the tier region runs from there to the
    /// end of the image, after the data region.
    pub tier_start: Option<u64>,
}

impl Superblock {
    pub fn new(geo: Geometry, uuid: [u8; 16], created_ns: u64) -> Self {
        Superblock {
            version: VERSION,
            compat: 0,
            ro_compat: 0,
            incompat: 0,
            geo,
            uuid,
            created_ns,
            mapping: MappingKind::HashFs,
            layout_score_permille: None,
            tier_start: None,
        }
    }

    /// The superblock of an image with an SSD tier whose header is at block `start`.
    pub fn with_tier(mut self, start: u64) -> Self {
        self.tier_start = Some(start);
        self.incompat |= INCOMPAT_TIER;
        self
    }

    /// The superblock of an image using `mapping`.
    pub fn with_mapping(mut self, mapping: MappingKind) -> Self {
        self.mapping = mapping;
        if mapping == MappingKind::HashFs {
            self.incompat &= !INCOMPAT_MAPPING;
        } else {
            self.incompat |= INCOMPAT_MAPPING;
        }
        self
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        let g = &self.geo;
        put_u64(&mut b, O_MAGIC, MAGIC);
        put_u32(&mut b, O_VERSION, self.version);
        put_u32(&mut b, O_BLOCK_SIZE, BLOCK_SIZE as u32);
        put_u64(&mut b, O_COMPAT, self.compat);
        put_u64(&mut b, O_RO_COMPAT, self.ro_compat);
        put_u64(&mut b, O_INCOMPAT, self.incompat);
        put_u64(&mut b, O_TOTAL_BLOCKS, g.total_blocks);
        put_u64(&mut b, O_JOURNAL_START, g.journal_start);
        put_u32(&mut b, O_JOURNAL_LANES, g.journal_lanes);
        put_u32(&mut b, O_LANE_BLOCKS, g.lane_blocks);
        put_u64(&mut b, O_ITABLE_START, g.itable_start);
        put_u64(&mut b, O_INODE_COUNT, g.inode_count);
        put_u64(&mut b, O_HASH_START, g.hash_start);
        put_u64(&mut b, O_HASH_BLOCKS, g.hash_blocks);
        put_u64(&mut b, O_DATA_START, g.data_start);
        put_u64(&mut b, O_DATA_BLOCKS, g.data_blocks);
        put_u64(&mut b, O_ROOT_INO, ROOT_INO);
        b[O_UUID..O_UUID + 16].copy_from_slice(&self.uuid);
        put_u64(&mut b, O_CREATED_NS, self.created_ns);
        put_u32(&mut b, O_INODE_SIZE, INODE_SIZE as u32);
        put_u32(&mut b, O_MAPPING, self.mapping.code());
        // Stored plus one, so that 0 (every older image) means "not set".
        put_u32(
            &mut b,
            O_LAYOUT_SCORE,
            self.layout_score_permille.map_or(0, |p| p + 1),
        );
        put_u64(&mut b, O_TIER_START, self.tier_start.unwrap_or(0));
        let crc = crc32c::crc32c(&b[..O_CHECKSUM]);
        put_u32(&mut b, O_CHECKSUM, crc);
        b
    }

    /// Decodes and validates a superblock read from byte `offset` of the image.
    pub fn decode(b: &[u8], offset: u64) -> Result<Superblock, Corrupted> {
        let bad = |what: &str| corrupted(format!("superblock: {what}"), offset);
        if b.len() < BLOCK_SIZE as usize {
            return Err(bad("short read"));
        }
        if get_u64(b, O_MAGIC) != MAGIC {
            return Err(bad("bad magic (not an nvmfs image)"));
        }
        if get_u32(b, O_CHECKSUM) != crc32c::crc32c(&b[..O_CHECKSUM]) {
            return Err(bad("checksum mismatch"));
        }
        let version = get_u32(b, O_VERSION);
        if version != VERSION {
            return Err(bad(&format!(
                "unsupported version {version} (this build reads {VERSION})"
            )));
        }
        if get_u32(b, O_BLOCK_SIZE) as u64 != BLOCK_SIZE
            || get_u32(b, O_INODE_SIZE) as u64 != INODE_SIZE
        {
            return Err(bad("block or inode size"));
        }
        let incompat = get_u64(b, O_INCOMPAT);
        if incompat & !INCOMPAT_KNOWN != 0 {
            return Err(bad(&format!("unknown incompatible features {incompat:#x}")));
        }
        if get_u64(b, O_ROOT_INO) != ROOT_INO {
            return Err(bad("root inode number"));
        }
        let geo = Geometry {
            total_blocks: get_u64(b, O_TOTAL_BLOCKS),
            journal_start: get_u64(b, O_JOURNAL_START),
            journal_lanes: get_u32(b, O_JOURNAL_LANES),
            lane_blocks: get_u32(b, O_LANE_BLOCKS),
            itable_start: get_u64(b, O_ITABLE_START),
            inode_count: get_u64(b, O_INODE_COUNT),
            hash_start: get_u64(b, O_HASH_START),
            hash_blocks: get_u64(b, O_HASH_BLOCKS),
            data_start: get_u64(b, O_DATA_START),
            data_blocks: get_u64(b, O_DATA_BLOCKS),
        };
        geo.validate(offset)?;
        let mapping = decode_mapping(b, incompat).map_err(|w| bad(&w))?;
        mapping.check_fits(&geo).map_err(|w| bad(&w))?;
        let layout_score_permille = match get_u32(b, O_LAYOUT_SCORE) {
            0 => None,
            v if v <= 1001 && mapping.uses_allocator() => Some(v - 1),
            v => return Err(bad(&format!("layout score field {v} (mapping {mapping})"))),
        };
        let tier_start = match (incompat & INCOMPAT_TIER != 0, get_u64(b, O_TIER_START)) {
            (false, 0) => None,
            (true, t) if t >= geo.data_start + geo.data_blocks && t < geo.total_blocks => {
                if mapping != MappingKind::HashFs {
                    return Err(bad("an SSD tier needs the hashfs mapping"));
                }
                Some(t)
            }
            (_, t) => return Err(bad(&format!("tier start {t} (feature bit and geometry)"))),
        };
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[O_UUID..O_UUID + 16]);
        Ok(Superblock {
            version,
            compat: get_u64(b, O_COMPAT),
            ro_compat: get_u64(b, O_RO_COMPAT),
            incompat,
            geo,
            uuid,
            created_ns: get_u64(b, O_CREATED_NS),
            mapping,
            layout_score_permille,
            tier_start,
        })
    }

    /// True when the image is mountable read-write by this build.
    pub fn writable(&self) -> bool {
        self.ro_compat & !RO_COMPAT_KNOWN == 0
    }
}

/// The mapping field, which must be 0 (HashFS) without INCOMPAT_MAPPING and a known other
/// mapping with it.
fn decode_mapping(b: &[u8], incompat: u64) -> Result<MappingKind, String> {
    let code = get_u32(b, O_MAPPING);
    match (
        incompat & INCOMPAT_MAPPING != 0,
        MappingKind::from_code(code),
    ) {
        (false, Some(MappingKind::HashFs)) => Ok(MappingKind::HashFs),
        (true, Some(k)) if k != MappingKind::HashFs => Ok(k),
        (flag, _) => Err(format!(
            "mapping field {code} does not agree with the mapping feature bit ({})",
            if flag { "set" } else { "clear" }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_fits_and_roundtrips() {
        for blocks in [64u64, 100, 1000, 262_144, 2_097_152] {
            let g = Geometry::compute(blocks, None).unwrap();
            assert!(g.data_start + g.data_blocks <= blocks, "{g:?}");
            assert!(g.hash_blocks * ENTRIES_PER_BLOCK >= g.data_blocks);
            let sb = Superblock::new(g.clone(), [7; 16], 42);
            let d = Superblock::decode(&sb.encode(), 0).unwrap();
            assert_eq!(d, sb);
        }
    }

    #[test]
    fn every_bit_flip_in_used_fields_is_caught() {
        let sb = Superblock::new(Geometry::compute(4096, None).unwrap(), [1; 16], 5);
        let enc = sb.encode();
        for byte in 0..O_CHECKSUM + 4 {
            let mut b = enc.clone();
            b[byte] ^= 0x10;
            assert!(
                Superblock::decode(&b, 0).is_err(),
                "flip at byte {byte} not caught"
            );
        }
    }

    #[test]
    fn mapping_roundtrips_and_old_images_are_hashfs() {
        let g = Geometry::compute(4096, None).unwrap();
        for k in MappingKind::ALL {
            let sb = Superblock::new(g.clone(), [3; 16], 9).with_mapping(k);
            let d = Superblock::decode(&sb.encode(), 0).unwrap();
            assert_eq!(d.mapping, k);
            assert_eq!(d.incompat & INCOMPAT_MAPPING != 0, k != MappingKind::HashFs);
        }
        // A hashfs superblock is byte for byte what images before the feature carried.
        let old = Superblock::new(g.clone(), [3; 16], 9).encode();
        assert_eq!(get_u32(&old, O_MAPPING), 0);
        assert_eq!(get_u64(&old, O_INCOMPAT), 0);
        // A mapping code without the feature bit (or an unknown code) is refused.
        let mut b = old.clone();
        put_u32(&mut b, O_MAPPING, 2);
        let crc = crc32c::crc32c(&b[..O_CHECKSUM]);
        put_u32(&mut b, O_CHECKSUM, crc);
        assert!(Superblock::decode(&b, 0).is_err());
        let mut b = Superblock::new(g, [3; 16], 9)
            .with_mapping(MappingKind::Radix)
            .encode();
        put_u32(&mut b, O_MAPPING, 77);
        let crc = crc32c::crc32c(&b[..O_CHECKSUM]);
        put_u32(&mut b, O_CHECKSUM, crc);
        assert!(Superblock::decode(&b, 0).is_err());
    }

    #[test]
    fn too_small_and_too_many_inodes_refused() {
        assert!(Geometry::compute(10, None).is_err());
        assert!(Geometry::compute(100, Some(1_000_000)).is_err());
    }
}
