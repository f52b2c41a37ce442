//! On-media structures, one module each. Every field is little-endian at a fixed offset; the
//! offsets are the constants in each module and are drawn in docs/FORMAT.md.

pub mod dentry;
pub mod inode;
pub mod state;
pub mod superblock;
pub mod tier;

/// The one block size of the format.
pub const BLOCK_SIZE: u64 = 4096;

#[inline]
pub(crate) fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

#[inline]
pub(crate) fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

#[inline]
pub(crate) fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline]
pub(crate) fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// A structure on the media failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrupted {
    /// Which structure and field, e.g. "superblock: geometry".
    pub what: String,
    /// Byte offset of the structure in the image.
    pub offset: u64,
}

impl std::fmt::Display for Corrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "corrupted {} at byte offset {}", self.what, self.offset)
    }
}

impl std::error::Error for Corrupted {}

impl From<Corrupted> for std::io::Error {
    fn from(c: Corrupted) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, c)
    }
}

pub(crate) fn corrupted(what: impl Into<String>, offset: u64) -> Corrupted {
    Corrupted {
        what: what.into(),
        offset,
    }
}
