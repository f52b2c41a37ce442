//! `Fs::mapping_probe`: a narrow window on the file mapping of a mounted image, for the lab's
//! file-mapping study (Neal et al., FAST'21, section 4), which times the mapping operations a
//! read or an append does, alone, in CPU cycles. Through it a benchmark calls exactly what the
//! data path calls: `lookup` for a block a read needs, and `reserve` + `claim` + `publish` for a
//! block an append adds past EOF. Nothing else of the file system is exposed.
//!
//! The probe takes no inode lock (the data path's stripe lock is not part of the mapping), so
//! a benchmark serialises appends to one file itself, as the file system would. Blocks it
//! appends are mapped past the inode's size, like the blocks of a write between its publish
//! and its size store; `ProbeFile::trim` unmaps them again (recovery would free them too).

use std::io;

use super::{errno, Fs, Inner};
use crate::layout::inode::FileType;
use crate::mapping::MappingKind;

/// The file mapping of a mounted image, as a benchmark sees it.
pub struct MappingProbe<'a> {
    inner: &'a Inner,
}

/// One regular file of the image, checked once so the timed calls carry no checks.
#[derive(Clone, Copy)]
pub struct ProbeFile<'a> {
    inner: &'a Inner,
    ino: u32,
}

impl Fs {
    /// The mapping of this image for benchmarks (see the module `probe`).
    pub fn mapping_probe(&self) -> MappingProbe<'_> {
        MappingProbe { inner: &self.inner }
    }
}

impl<'a> MappingProbe<'a> {
    pub fn kind(&self) -> MappingKind {
        self.inner.map.kind()
    }

    /// Blocks in use (data and mapping nodes) and all data blocks: how full the image is.
    pub fn used_and_total_blocks(&self) -> (u64, u64) {
        (self.inner.map.used_blocks(), self.inner.map.total_blocks())
    }

    /// Regular file `ino` (its `Metadata::ino`); fails for anything else.
    pub fn file(&self, ino: u64) -> io::Result<ProbeFile<'a>> {
        let ino = super::ops::to_ino(ino)?;
        let i = self.inner.inode(ino)?;
        if i.file_type() != Some(FileType::File) {
            return Err(errno(libc::EINVAL));
        }
        Ok(ProbeFile {
            inner: self.inner,
            ino,
        })
    }
}

impl ProbeFile<'_> {
    /// The data block of logical block `lblk`: the mapping call a read makes per block
    /// (without the read path's per-handle translation cache).
    #[inline]
    pub fn lookup(&self, lblk: u32) -> Option<u64> {
        self.inner.map.lookup(&self.inner.pm, self.ino, lblk)
    }

    /// Maps a new block at `lblk` (unmapped, at or past EOF) as a write appending it does:
    /// reserve one block, claim it, publish it (written back; the data path's next fence
    /// makes it durable). Returns the data block.
    #[inline]
    pub fn append(&self, lblk: u32) -> io::Result<u64> {
        let (map, pm, journal) = (&self.inner.map, &self.inner.pm, &self.inner.journal);
        map.reserve(1)?;
        let c = map
            .claim(pm, journal, self.ino, lblk)
            .inspect_err(|_| map.unreserve(1))?;
        map.publish(pm, journal, c, self.ino, lblk);
        Ok(c.pblk)
    }

    /// Unmaps the blocks in [`from`, `to`) (the blocks `append` added past EOF) and returns
    /// how many; fenced and accounted, as a truncate does.
    pub fn trim(&self, from: u32, to: u32) -> io::Result<u64> {
        let n = self.inner.unmap_from(self.ino, from as u64, to as u64)?;
        self.inner.pm.fence();
        self.inner.map.freed(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use crate::{FormatOptions, Fs, MappingKind};

    #[test]
    fn probe_looks_up_appends_and_trims_on_every_mapping() {
        for mapping in MappingKind::ALL {
            let fs = Fs::format_in_memory(&FormatOptions {
                size_bytes: 8 << 20,
                inode_count: Some(64),
                mapping,
                layout_score: None,
                tier: None,
            })
            .unwrap();
            fs.write_file("/f", &[7u8; 3 * 4096]).unwrap();
            let ino = fs.metadata("/f").unwrap().ino;
            let probe = fs.mapping_probe();
            assert_eq!(probe.kind(), mapping);
            let f = probe.file(ino).unwrap();
            assert!(f.lookup(2).is_some() && f.lookup(3).is_none(), "{mapping}");
            let used = probe.used_and_total_blocks().0;
            let p = f.append(3).unwrap();
            assert_eq!(f.lookup(3), Some(p), "{mapping}");
            assert_eq!(f.trim(3, 4).unwrap(), 1, "{mapping}");
            assert_eq!(f.lookup(3), None);
            assert_eq!(probe.used_and_total_blocks().0, used, "{mapping}");
            assert!(probe.file(1).is_err(), "the root is not a regular file");
        }
    }
}
