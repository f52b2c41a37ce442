//! The inode record: 128 bytes, 32 per block, inode 0 unused, inode 1 the root directory.
//! A record with mode 0 is free. The first 64-byte line holds everything a write or append
//! changes (size, blocks, times), so that path persists one line.

use super::{corrupted, get_u32, get_u64, put_u32, put_u64, Corrupted};

pub const INODE_SIZE: u64 = 128;

pub const O_MODE: usize = 0;
pub const O_NLINK: usize = 4;
pub const O_UID: usize = 8;
pub const O_GID: usize = 12;
pub const O_SIZE: usize = 16;
pub const O_BLOCKS: usize = 24;
pub const O_ATIME: usize = 32;
pub const O_MTIME: usize = 40;
pub const O_CTIME: usize = 48;
pub const O_GENERATION: usize = 56;
pub const O_FLAGS: usize = 60;
pub const O_FALLOC_END: usize = 64;
pub const O_PARENT: usize = 72;
pub const O_DIR_ENTRIES: usize = 76;
pub const O_DIR_UNITS: usize = 80;
pub const O_INLINE: usize = 88;
/// Bytes of symlink target stored in the inode itself; longer targets use data block 0.
pub const INLINE_LEN: usize = 40;

/// Longest symlink target (as Linux's PATH_MAX - 1).
pub const SYMLINK_MAX: usize = 4095;
/// Largest link count.
pub const NLINK_MAX: u32 = 65_000;
/// Largest file: 2^32 blocks of 4 KiB (the mapping key keeps 32 bits of logical block).
pub const FILE_SIZE_MAX: u64 = (1u64 << 32) * super::BLOCK_SIZE;

/// File types, as the S_IFMT bits of st_mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    File,
    Dir,
    Symlink,
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
}

impl FileType {
    pub fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileType::File,
            libc::S_IFDIR => FileType::Dir,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFIFO => FileType::Fifo,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            libc::S_IFSOCK => FileType::Socket,
            _ => return None,
        })
    }

    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::File => libc::S_IFREG,
            FileType::Dir => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::Fifo => libc::S_IFIFO,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::Socket => libc::S_IFSOCK,
        }
    }

    /// The 4-bit type code stored in directory entries (1..=7).
    pub fn dtype(self) -> u8 {
        match self {
            FileType::File => 1,
            FileType::Dir => 2,
            FileType::Symlink => 3,
            FileType::Fifo => 4,
            FileType::CharDevice => 5,
            FileType::BlockDevice => 6,
            FileType::Socket => 7,
        }
    }

    pub fn from_dtype(d: u8) -> Option<FileType> {
        Some(match d {
            1 => FileType::File,
            2 => FileType::Dir,
            3 => FileType::Symlink,
            4 => FileType::Fifo,
            5 => FileType::CharDevice,
            6 => FileType::BlockDevice,
            7 => FileType::Socket,
            _ => return None,
        })
    }
}

/// The in-memory copy of an inode record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub blocks: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub generation: u32,
    pub flags: u32,
    /// Logical block end of space preallocated past EOF (fallocate KEEP_SIZE); 0 if none.
    pub falloc_end: u64,
    /// Directories: the parent directory's inode number (the `..` entry).
    pub parent: u32,
    /// Directories: number of entries (not counting `.` and `..`).
    pub dir_entries: u32,
    /// Directories: high-water mark of used 64-byte entry units.
    pub dir_units: u32,
    /// Symlinks with short targets: the target; devices: rdev in the first 8 bytes.
    pub inline: [u8; INLINE_LEN],
}

impl Default for Inode {
    fn default() -> Self {
        Inode::decode_raw(&[0u8; INODE_SIZE as usize])
    }
}

impl Inode {
    pub fn is_free(&self) -> bool {
        self.mode == 0
    }

    pub fn file_type(&self) -> Option<FileType> {
        FileType::from_mode(self.mode)
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == Some(FileType::Dir)
    }

    pub fn rdev(&self) -> u64 {
        get_u64(&self.inline, 0)
    }

    /// End (exclusive) of the logical blocks this inode may have mapped.
    pub fn map_end(&self) -> u64 {
        self.size.div_ceil(super::BLOCK_SIZE).max(self.falloc_end)
    }

    pub fn encode(&self) -> [u8; INODE_SIZE as usize] {
        let mut b = [0u8; INODE_SIZE as usize];
        put_u32(&mut b, O_MODE, self.mode);
        put_u32(&mut b, O_NLINK, self.nlink);
        put_u32(&mut b, O_UID, self.uid);
        put_u32(&mut b, O_GID, self.gid);
        put_u64(&mut b, O_SIZE, self.size);
        put_u64(&mut b, O_BLOCKS, self.blocks);
        put_u64(&mut b, O_ATIME, self.atime_ns as u64);
        put_u64(&mut b, O_MTIME, self.mtime_ns as u64);
        put_u64(&mut b, O_CTIME, self.ctime_ns as u64);
        put_u32(&mut b, O_GENERATION, self.generation);
        put_u32(&mut b, O_FLAGS, self.flags);
        put_u64(&mut b, O_FALLOC_END, self.falloc_end);
        put_u32(&mut b, O_PARENT, self.parent);
        put_u32(&mut b, O_DIR_ENTRIES, self.dir_entries);
        put_u32(&mut b, O_DIR_UNITS, self.dir_units);
        b[O_INLINE..O_INLINE + INLINE_LEN].copy_from_slice(&self.inline);
        b
    }

    /// Decodes a record without judging it (fsck wants to see bad records too).
    pub fn decode_raw(b: &[u8]) -> Inode {
        let mut inline = [0u8; INLINE_LEN];
        inline.copy_from_slice(&b[O_INLINE..O_INLINE + INLINE_LEN]);
        Inode {
            mode: get_u32(b, O_MODE),
            nlink: get_u32(b, O_NLINK),
            uid: get_u32(b, O_UID),
            gid: get_u32(b, O_GID),
            size: get_u64(b, O_SIZE),
            blocks: get_u64(b, O_BLOCKS),
            atime_ns: get_u64(b, O_ATIME) as i64,
            mtime_ns: get_u64(b, O_MTIME) as i64,
            ctime_ns: get_u64(b, O_CTIME) as i64,
            generation: get_u32(b, O_GENERATION),
            flags: get_u32(b, O_FLAGS),
            falloc_end: get_u64(b, O_FALLOC_END),
            parent: get_u32(b, O_PARENT),
            dir_entries: get_u32(b, O_DIR_ENTRIES),
            dir_units: get_u32(b, O_DIR_UNITS),
            inline,
        }
    }

    /// Decodes and validates an in-use record read at byte `offset`.
    pub fn decode(b: &[u8], offset: u64, inode_count: u64) -> Result<Inode, Corrupted> {
        let ino = Inode::decode_raw(b);
        ino.validate(offset, inode_count)?;
        Ok(ino)
    }

    /// The checks every in-use inode must pass before the file system acts on it.
    pub fn validate(&self, offset: u64, inode_count: u64) -> Result<(), Corrupted> {
        let bad = |what: &str| Err(corrupted(format!("inode: {what}"), offset));
        let Some(ft) = self.file_type() else {
            return bad(&format!("invalid file type in mode {:#o}", self.mode));
        };
        if self.flags != 0 {
            return bad("unknown flags");
        }
        if self.size > FILE_SIZE_MAX || self.falloc_end > FILE_SIZE_MAX / super::BLOCK_SIZE {
            return bad("size out of range");
        }
        match ft {
            FileType::Dir => {
                if self.parent == 0 || self.parent as u64 >= inode_count {
                    return bad("directory parent out of range");
                }
                if self.size != 0 || self.falloc_end != 0 {
                    return bad("directory with a size");
                }
                if self.dir_entries > self.dir_units {
                    return bad("directory entry counts");
                }
            }
            FileType::Symlink => {
                if self.size == 0 || self.size > SYMLINK_MAX as u64 || self.falloc_end != 0 {
                    return bad("symlink target length");
                }
            }
            FileType::File => {}
            _ => {
                if self.size != 0 || self.blocks != 0 || self.falloc_end != 0 {
                    return bad("special file with data");
                }
            }
        }
        if ft != FileType::Dir && (self.dir_units != 0 || self.dir_entries != 0) {
            return bad("directory fields on a non-directory");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut i = Inode {
            mode: libc::S_IFREG | 0o644,
            nlink: 1,
            uid: 5,
            gid: 6,
            size: 12345,
            blocks: 4,
            atime_ns: -1,
            mtime_ns: 2,
            ctime_ns: 3,
            generation: 9,
            falloc_end: 7,
            ..Default::default()
        };
        i.inline[..3].copy_from_slice(b"abc");
        let b = i.encode();
        assert_eq!(Inode::decode(&b, 0, 64).unwrap(), i);
    }

    #[test]
    fn bad_records_refused() {
        let dir = Inode {
            mode: libc::S_IFDIR | 0o755,
            nlink: 2,
            parent: 1,
            ..Default::default()
        };
        assert!(dir.validate(0, 64).is_ok());
        assert!(Inode {
            parent: 0,
            ..dir.clone()
        }
        .validate(0, 64)
        .is_err());
        assert!(Inode {
            parent: 64,
            ..dir.clone()
        }
        .validate(0, 64)
        .is_err());
        assert!(Inode {
            size: 1,
            ..dir.clone()
        }
        .validate(0, 64)
        .is_err());
        assert!(Inode {
            mode: 0o170000,
            ..dir.clone()
        }
        .validate(0, 64)
        .is_err());
        let link = Inode {
            mode: libc::S_IFLNK | 0o777,
            nlink: 1,
            size: 0,
            ..Default::default()
        };
        assert!(link.validate(0, 64).is_err());
    }
}
