//! The SSD tier under PM (seed 004, NVMFS 2013; design in docs/TIER.md): cold file blocks
//! live on a capacity device, hot ones in PM. This module holds the tier's DRAM state and what
//! touches only the tier's own structures (the SSD, the PM block table, the LRU lists); the
//! data paths that also take inode locks and the mapping are in `fs/tiered.rs`.
//!
//! A block (ino, lblk) is a hole, dirty (PM only), clean (PM and an equal SSD copy) or cold
//! (SSD only). The rule that makes every crash state readable: a PM mapping always wins.

pub mod check;
pub mod lru;
pub mod ssd;

use std::collections::BTreeMap;
use std::io;

use parking_lot::Mutex;

use crate::layout::inode::{FileType, Inode, INODE_SIZE};
use crate::layout::superblock::Geometry;
use crate::layout::tier::{
    self, entry_meta, split_meta, SsdHeader, TierHeader, Watermarks, BLOCKS_PER_EXTENT,
};
use crate::layout::BLOCK_SIZE;
use crate::mapping::hashfs::{key, split_key};
use crate::media::Pm;
use lru::{List, Lru};
use ssd::Ssd;

/// Counters since mount (`info`, the nvmfs-2013 study).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TierStats {
    /// Extents written by flushes, and the blocks they carried.
    pub flushes: u64,
    pub flushed_blocks: u64,
    /// Clean PM blocks given back (their data stays on the SSD).
    pub evicted: u64,
    /// Cold blocks read from the SSD, and those then cached in PM as clean.
    pub cold_reads: u64,
    pub promoted: u64,
    /// Segment cleaning: extents freed (each recycles 128 blocks) and valid blocks moved.
    pub cleaned_extents: u64,
    pub moved_blocks: u64,
    pub ssd_bytes_written: u64,
    pub ssd_bytes_read: u64,
}

impl TierStats {
    /// The seed's cleaning efficiency: 1 - moved valid blocks / recycled blocks.
    pub fn cleaning_efficiency(&self) -> Option<f64> {
        let recycled = self.cleaned_extents * BLOCKS_PER_EXTENT;
        (recycled > 0).then(|| 1.0 - self.moved_blocks as f64 / recycled as f64)
    }
}

/// One write the tier sent to its SSD (the block trace the study replays on FTL models).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsdWrite {
    pub offset: u64,
    pub len: u64,
}

/// A snapshot of the tier for `info` and the study.
#[derive(Clone, Debug, PartialEq)]
pub struct TierInfo {
    pub ssd_path: Option<std::path::PathBuf>,
    pub direct_io: bool,
    pub extents: u64,
    pub free_extents: u64,
    pub full_extents: u64,
    /// Valid SSD blocks (cold and clean).
    pub ssd_valid_blocks: u64,
    pub dirty_blocks: u64,
    pub clean_blocks: u64,
    pub pm_data_blocks: u64,
    pub marks: Watermarks,
    pub stats: TierStats,
}

impl TierInfo {
    /// Share of SSD blocks holding valid data.
    pub fn ssd_utilisation(&self) -> f64 {
        self.ssd_valid_blocks as f64 / (self.extents * BLOCKS_PER_EXTENT).max(1) as f64
    }
}

/// What mount found in the tier.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TierRecovery {
    /// SSD entries dropped: freed or reused inode, past EOF, or PM-resident after an unclean
    /// shutdown (the PM copy wins).
    pub stale_entries: u64,
    /// Entries for a key another entry with a newer sequence also holds.
    pub duplicate_entries: u64,
}

pub(crate) struct TierState {
    /// Valid SSD entries: key -> SSD block. Ordered, so the entries of one inode's range are
    /// one range of keys (truncate, unlink).
    pub index: BTreeMap<u64, u32>,
    /// Per data extent: valid entries and write sequence.
    pub valid: Vec<u16>,
    pub seq: Vec<u32>,
    pub free_count: u64,
    /// Where the next flush looks for a free extent (the log head).
    pub head: u64,
    pub next_seq: u32,
    pub lru: Lru,
    pub stats: TierStats,
    pub trace: Option<Vec<SsdWrite>>,
}

impl TierState {
    /// A free extent at or after the log head (wrapping), which becomes the head.
    pub fn take_free_extent(&mut self) -> Option<u64> {
        let n = self.valid.len() as u64;
        let e = (0..n)
            .map(|k| (self.head + k) % n)
            .find(|&e| self.valid[e as usize] == 0)?;
        self.head = (e + 1) % n;
        Some(e)
    }

    pub fn record_write(&mut self, offset: u64, len: u64) {
        self.stats.ssd_bytes_written += len;
        if let Some(t) = &mut self.trace {
            t.push(SsdWrite { offset, len });
        }
    }
}

pub(crate) struct Tier {
    pub hdr: TierHeader,
    pub ssd: Ssd,
    pub st: Mutex<TierState>,
}

/// The inode record `ino` if it is an in-use regular file.
pub(crate) fn regular_inode(pm: &Pm, geo: &Geometry, ino: u32) -> Option<Inode> {
    if ino == 0 || ino as u64 >= geo.inode_count {
        return None;
    }
    let i = Inode::decode_raw(&pm.read_array::<{ INODE_SIZE as usize }>(geo.inode_off(ino as u64)));
    (!i.is_free() && i.file_type() == Some(FileType::File)).then_some(i)
}

impl Tier {
    /// Writes the tier header (PM) and the SSD header of a new tiered image; the table is
    /// all zero (every entry invalid) in a fresh image.
    pub fn format(pm: &Pm, start: u64, hdr: &TierHeader, ssd: &Ssd) -> io::Result<()> {
        ssd.write_header(&SsdHeader {
            extents: hdr.extents,
            uuid: hdr.uuid,
        })?;
        pm.write(start * BLOCK_SIZE, &hdr.encode());
        pm.persist(start * BLOCK_SIZE, BLOCK_SIZE as usize);
        pm.fence();
        Ok(())
    }

    /// Reads the tier of a mounted image and rebuilds its DRAM state. `recover` (an unclean
    /// shutdown, read-write): drop stale entries from the table as well.
    pub fn open(
        pm: &Pm,
        geo: &Geometry,
        start: u64,
        ssd: Ssd,
        recover: bool,
        writable: bool,
    ) -> io::Result<(Tier, TierRecovery)> {
        let hdr = TierHeader::decode(
            &pm.read_vec(start * BLOCK_SIZE, BLOCK_SIZE as usize),
            start,
            geo.total_blocks,
        )?;
        let sh = ssd.read_header()?;
        let name = || {
            ssd.path
                .as_ref()
                .map_or("memory".into(), |p| p.display().to_string())
        };
        if sh.uuid != hdr.uuid {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("SSD {} belongs to another image (UUID differs)", name()),
            ));
        }
        if sh.extents != hdr.extents || ssd.extents() < hdr.extents {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "SSD {}: {} extents, the image expects {}",
                    name(),
                    sh.extents.min(ssd.extents()),
                    hdr.extents
                ),
            ));
        }
        let mut rec = TierRecovery::default();
        let mut st = TierState {
            index: BTreeMap::new(),
            valid: vec![0; hdr.extents as usize],
            seq: vec![0; hdr.extents as usize],
            free_count: 0,
            head: 0,
            next_seq: 1,
            lru: Lru::new(geo.data_blocks),
            stats: TierStats::default(),
            trace: None,
        };
        let drop_entry = |b: u64| {
            if writable {
                pm.store_u64(hdr.entry_off(b), 0);
                pm.persist(hdr.entry_off(b), 8);
            }
        };
        // Entries of freed or reused inodes and past EOF are stale whatever the shutdown: an
        // unlink or truncate drops them after its own commit, so a crash can leave them.
        for b in 0..hdr.ssd_blocks() {
            let k = pm.load_u64(hdr.entry_off(b));
            if k == 0 {
                continue;
            }
            let (gen, seq) = split_meta(pm.load_u64(hdr.entry_off(b) + 8));
            let live = split_key(k).and_then(|(ino, lblk)| {
                regular_inode(pm, geo, ino)
                    .filter(|i| i.generation == gen && (lblk as u64) < i.map_end())
            });
            if live.is_none() {
                drop_entry(b);
                rec.stale_entries += 1;
                continue;
            }
            let e = (b / BLOCKS_PER_EXTENT) as usize;
            if let Some(&old) = st.index.get(&k) {
                // Two entries for one key: the newer write wins (a cleaning round that
                // stopped between publishing the copy and dropping the original).
                let old_e = (old as u64 / BLOCKS_PER_EXTENT) as usize;
                rec.duplicate_entries += 1;
                if st.seq[old_e] >= seq {
                    drop_entry(b);
                    continue;
                }
                drop_entry(old as u64);
                st.valid[old_e] -= 1;
            }
            st.index.insert(k, b as u32);
            st.valid[e] += 1;
            st.seq[e] = st.seq[e].max(seq);
            st.next_seq = st.next_seq.max(seq.wrapping_add(1));
        }
        // Every PM block of a regular file goes on a list: clean if its SSD copy is valid,
        // dirty otherwise. After an unclean shutdown the PM copy may be newer than a valid
        // SSD entry (a write's invalidation was not durable), so such blocks become dirty.
        let mut kinds: hashbrown::HashMap<u32, bool> = hashbrown::HashMap::new();
        for s in 0..geo.data_blocks {
            let Some((ino, lblk)) = split_key(pm.load_u64(geo.slot_off(s))) else {
                continue;
            };
            let regular = *kinds
                .entry(ino)
                .or_insert_with(|| regular_inode(pm, geo, ino).is_some());
            if !regular {
                continue;
            }
            let k = key(ino, lblk);
            match st.index.get(&k).copied() {
                Some(_) if !recover => st.lru.touch(List::Clean, s, k),
                Some(b) => {
                    drop_entry(b as u64);
                    st.index.remove(&k);
                    st.valid[b as usize / BLOCKS_PER_EXTENT as usize] -= 1;
                    rec.stale_entries += 1;
                    st.lru.touch(List::Dirty, s, k);
                }
                None => st.lru.touch(List::Dirty, s, k),
            }
        }
        if writable {
            pm.fence();
        }
        st.free_count = st.valid.iter().filter(|&&v| v == 0).count() as u64;
        Ok((
            Tier {
                hdr,
                ssd,
                st: Mutex::new(st),
            },
            rec,
        ))
    }

    /// Drops the entry of SSD block `b` holding `k` (written back, not fenced).
    pub fn invalidate(&self, pm: &Pm, st: &mut TierState, k: u64, b: u32) {
        st.index.remove(&k);
        self.clear_entry(pm, st, b);
    }

    /// Clears the entry of SSD block `b` in the table and the extent counts, leaving the
    /// index alone (cleaning: the index points at the block's new copy already).
    pub fn clear_entry(&self, pm: &Pm, st: &mut TierState, b: u32) {
        let off = self.hdr.entry_off(b as u64);
        pm.store_u64(off, 0);
        pm.persist(off, 8);
        let e = b as usize / BLOCKS_PER_EXTENT as usize;
        st.valid[e] -= 1;
        if st.valid[e] == 0 {
            st.free_count += 1;
        }
    }

    /// Publishes entries for `blocks` ((key, generation) per SSD block, in order from
    /// `first`): word 1 of each, a fence, then the commit words, a fence. Before the second
    /// fence a crash leaves each entry invalid or whole, never a key with the wrong
    /// generation.
    pub fn publish(&self, pm: &Pm, st: &mut TierState, first: u64, blocks: &[(u64, u32)]) {
        let e = (first / BLOCKS_PER_EXTENT) as usize;
        let seq = st.next_seq;
        st.next_seq = st.next_seq.wrapping_add(1);
        for (n, &(_, gen)) in blocks.iter().enumerate() {
            let off = self.hdr.entry_off(first + n as u64);
            pm.store_u64(off + 8, entry_meta(gen, seq));
            pm.persist(off + 8, 8);
        }
        pm.fence();
        for (n, &(k, _)) in blocks.iter().enumerate() {
            let off = self.hdr.entry_off(first + n as u64);
            pm.store_u64(off, k);
            pm.persist(off, 8);
            st.index.insert(k, (first + n as u64) as u32);
        }
        pm.fence();
        if st.valid[e] == 0 && !blocks.is_empty() {
            st.free_count -= 1;
        }
        st.valid[e] += blocks.len() as u16;
        st.seq[e] = seq;
    }

    pub fn info(&self, pm_data_blocks: u64) -> TierInfo {
        let st = self.st.lock();
        TierInfo {
            ssd_path: self.ssd.path.clone(),
            direct_io: self.ssd.direct(),
            extents: self.hdr.extents,
            free_extents: st.free_count,
            full_extents: st
                .valid
                .iter()
                .filter(|&&v| v as u64 == BLOCKS_PER_EXTENT)
                .count() as u64,
            ssd_valid_blocks: st.index.len() as u64,
            dirty_blocks: st.lru.len(List::Dirty),
            clean_blocks: st.lru.len(List::Clean),
            pm_data_blocks,
            marks: self.hdr.marks,
            stats: st.stats.clone(),
        }
    }
}

/// The tier header for an SSD of `extents` data extents.
pub(crate) fn new_header(
    extents: u64,
    start: u64,
    uuid: [u8; 16],
    marks: Watermarks,
    path: String,
) -> TierHeader {
    TierHeader {
        extents,
        uuid,
        table_start: start + 1,
        table_blocks: tier::table_blocks(extents),
        marks,
        path,
    }
}
