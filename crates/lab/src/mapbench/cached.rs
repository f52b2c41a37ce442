//! Section 4.7's baseline, study-only: Strata's page-cached extent tree, modelled as a DRAM
//! copy of a file's extents in front of the PM extent tree. A lookup asks the DRAM copy first
//! and, on a miss, walks the PM tree and adds what it found (the dynamic allocation the paper
//! says is not amortised); an append maps the block in PM and keeps the copy coherent. The PM
//! extent tree measured beside it is the file system's own, without the copy.

use nvmfs::ProbeFile;
use std::collections::BTreeMap;
use std::io;

/// A file's extents cached in DRAM: start block -> (data block, length).
pub struct PageCachedExtents<'a> {
    file: ProbeFile<'a>,
    extents: BTreeMap<u32, (u64, u32)>,
}

impl<'a> PageCachedExtents<'a> {
    /// An empty cache in front of `file` (the file was just opened).
    pub fn new(file: ProbeFile<'a>) -> Self {
        PageCachedExtents {
            file,
            extents: BTreeMap::new(),
        }
    }

    /// The data block of `lblk`: from DRAM, or from PM and then cached.
    pub fn lookup(&mut self, lblk: u32) -> Option<u64> {
        if let Some((&start, &(p, len))) = self.extents.range(..=lblk).next_back() {
            if lblk < start + len {
                return Some(p + (lblk - start) as u64);
            }
        }
        let p = self.file.lookup(lblk)?;
        self.insert(lblk, p);
        Some(p)
    }

    /// Maps a new block in PM and records it in the copy.
    pub fn append(&mut self, lblk: u32) -> io::Result<u64> {
        let p = self.file.append(lblk)?;
        self.insert(lblk, p);
        Ok(p)
    }

    /// Unmaps the PM blocks in [`from`, `to`) and drops them from the copy.
    pub fn trim(&mut self, from: u32, to: u32) -> io::Result<u64> {
        let n = self.file.trim(from, to)?;
        self.forget_from(from);
        Ok(n)
    }

    /// Drops cached extents at or past `from`.
    fn forget_from(&mut self, from: u32) {
        self.extents.split_off(&from);
        if let Some((&start, e)) = self.extents.range_mut(..from).next_back() {
            e.1 = e.1.min(from - start);
        }
    }

    /// Extends the extent ending just before `lblk` when `p` follows it, else adds one.
    fn insert(&mut self, lblk: u32, p: u64) {
        if let Some((&start, e)) = self.extents.range_mut(..lblk).next_back() {
            if start + e.1 == lblk && e.0 + e.1 as u64 == p {
                e.1 += 1;
                return;
            }
        }
        self.extents.insert(lblk, (p, 1));
    }

    /// Extents held in DRAM.
    pub fn len(&self) -> usize {
        self.extents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.extents.is_empty()
    }
}
