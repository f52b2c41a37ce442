//! Directory entries. A directory's data blocks are arrays of 64 64-byte units; an entry
//! occupies 1..=5 consecutive units inside one block. The first unit starts with an 8-byte
//! header (the entry's commit word: written last, cleared to remove); each later unit starts
//! with 8 zero bytes, so the first word of every unit is either a valid header or zero.
//! Name bytes fill bytes 8..64 of each unit.

use super::inode::FileType;
use super::{corrupted, Corrupted, BLOCK_SIZE};

pub const UNIT_SIZE: u64 = 64;
pub const UNITS_PER_BLOCK: u32 = (BLOCK_SIZE / UNIT_SIZE) as u32;
/// Name bytes carried by each unit.
pub const NAME_PER_UNIT: usize = 56;
pub const NAME_MAX: usize = 255;
pub const UNITS_MAX: u32 = 5;
/// Top byte of a valid header.
const TAG: u64 = 0xD7;

/// Units needed for a name of `len` bytes.
pub fn units_for(len: usize) -> u32 {
    len.div_ceil(NAME_PER_UNIT) as u32
}

/// A decoded entry header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub ino: u32,
    pub name_len: u8,
    pub ftype: FileType,
    pub units: u8,
}

impl Header {
    pub fn new(ino: u32, name_len: usize, ftype: FileType) -> Header {
        Header {
            ino,
            name_len: name_len as u8,
            ftype,
            units: units_for(name_len) as u8,
        }
    }

    pub fn encode(&self) -> u64 {
        self.ino as u64
            | (self.name_len as u64) << 32
            | (self.ftype.dtype() as u64) << 40
            | (self.units as u64) << 44
            | TAG << 56
    }

    /// Decodes the first word of unit `unit` (in its block); `Ok(None)` for a free unit.
    pub fn decode(
        w: u64,
        unit: u32,
        offset: u64,
        inode_count: u64,
    ) -> Result<Option<Header>, Corrupted> {
        if w == 0 {
            return Ok(None);
        }
        let bad = |what: &str| Err(corrupted(format!("directory entry: {what}"), offset));
        if w >> 56 != TAG || (w >> 48) & 0xff != 0 {
            return bad("bad header tag");
        }
        let ino = w as u32;
        let name_len = (w >> 32) as u8;
        let units = ((w >> 44) & 0xf) as u8;
        let Some(ftype) = FileType::from_dtype(((w >> 40) & 0xf) as u8) else {
            return bad("bad file type");
        };
        if ino == 0 || ino as u64 >= inode_count {
            return bad("inode number out of range");
        }
        if name_len == 0 || units as u32 != units_for(name_len as usize) {
            return bad("name length");
        }
        if unit % UNITS_PER_BLOCK + units as u32 > UNITS_PER_BLOCK {
            return bad("entry crosses its block");
        }
        Ok(Some(Header {
            ino,
            name_len,
            ftype,
            units,
        }))
    }
}

/// Lays out the units of an entry (header included) into `out` (units * 64 bytes).
pub fn encode_units(h: &Header, name: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.resize(h.units as usize * UNIT_SIZE as usize, 0);
    out[..8].copy_from_slice(&h.encode().to_le_bytes());
    for (i, chunk) in name.chunks(NAME_PER_UNIT).enumerate() {
        let at = i * UNIT_SIZE as usize + 8;
        out[at..at + chunk.len()].copy_from_slice(chunk);
    }
}

/// Reassembles an entry's name from its units.
pub fn name_from_units(units: &[u8], name_len: usize, name: &mut Vec<u8>) {
    name.clear();
    let mut left = name_len;
    for u in units.chunks(UNIT_SIZE as usize) {
        let take = left.min(NAME_PER_UNIT);
        name.extend_from_slice(&u[8..8 + take]);
        left -= take;
        if left == 0 {
            break;
        }
    }
}

/// Checks a name for a directory entry: 1..=255 bytes, no '/' or NUL, not "." or "..".
pub fn validate_name(name: &[u8]) -> Result<(), i32> {
    if name.len() > NAME_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(libc::EINVAL);
    }
    if name == b"." || name == b".." {
        return Err(libc::EEXIST);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip() {
        for len in [1usize, 56, 57, 200, 255] {
            let h = Header::new(77, len, FileType::Symlink);
            let unit = UNITS_PER_BLOCK - h.units as u32;
            assert_eq!(Header::decode(h.encode(), unit, 0, 100).unwrap(), Some(h));
            if h.units > 1 {
                assert!(
                    Header::decode(h.encode(), unit + 1, 0, 100).is_err(),
                    "crossing entry accepted"
                );
            }
        }
        assert_eq!(Header::decode(0, 0, 0, 10).unwrap(), None);
        assert!(Header::decode(Header::new(10, 3, FileType::File).encode(), 0, 0, 10).is_err());
    }

    #[test]
    fn names_roundtrip_through_units() {
        let name: Vec<u8> = (0..255u32).map(|i| b'a' + (i % 26) as u8).collect();
        for len in [1usize, 55, 56, 57, 112, 113, 255] {
            let h = Header::new(3, len, FileType::File);
            let mut units = Vec::new();
            encode_units(&h, &name[..len], &mut units);
            for u in units.chunks(64).skip(1) {
                assert_eq!(&u[..8], &[0; 8]);
            }
            let mut back = Vec::new();
            name_from_units(&units, len, &mut back);
            assert_eq!(back, &name[..len]);
        }
    }

    #[test]
    fn name_rules() {
        assert_eq!(validate_name(&[b'a'; 256]), Err(libc::ENAMETOOLONG));
        assert!(validate_name(&[b'a'; 255]).is_ok());
        assert_eq!(validate_name(b"a/b"), Err(libc::EINVAL));
        assert_eq!(validate_name(b""), Err(libc::EINVAL));
        assert_eq!(validate_name(b".."), Err(libc::EEXIST));
    }
}
