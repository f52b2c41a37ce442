//! FAST: a log-buffer FTL with fully associative sector translation (Lee, Park, Chung,
//! Lee, Park, Song; ACM TECS 6(3), 2007), seed 004's "representative hybrid FTL".
//!
//! Logical block `lbn` (pages `lbn * ppb ..`) lives in one *data block*, each page at its
//! own offset (block mapping). Updates go to *log blocks*, page-mapped:
//!
//! * A page whose place in the data block is still free is written there (the first
//!   write of a page costs nothing more). A data block is given to a logical block on its
//!   first write.
//! * An update of offset 0 starts the *sequential (SW) log block*: an SW block still in use
//!   is merged first, then a fresh one is given to this logical block.
//! * An update of the next offset of the SW block's logical block is appended to it. When
//!   the SW block is full, it is switched at once.
//! * Any other update of the SW block's logical block breaks its sequence and ends it with
//!   a merge that takes the new page on the way: past the next offset (a gap), a partial
//!   merge that writes the new page at its offset instead of copying the old one; at or
//!   before it (a rewrite), a full merge that does the same.
//! * Every other update is appended to the *random (RW) log blocks*, shared by all
//!   logical blocks. When the last RW block is full and the pool is at its size, the
//!   oldest RW block is the victim (FAST's round-robin choice): every logical block with a
//!   valid page in it is merged (the SW block's own logical block by merging the SW block,
//!   the others fully), then it is erased and becomes the new last RW block.
//!
//! The two rules on the SW block's logical block follow the FAST implementation of the
//! Penn State FlashSim (Kim and Gupta, with DFTL, 2009), whose pair of schemes, FAST and a
//! page-level FTL, is the pair seed 004 ran (the seed does not name its simulator); we could
//! not check those two cases against the FAST paper's own text.
//! We differ from it in two places, both on purpose: a full SW block is switched when it
//! fills, not when the next offset-0 update arrives (so a rewrite of that block right after
//! does not cost a full merge), and a full merge takes each page's current copy wherever
//! it is, RW blocks included.
//!
//! Merges:
//!
//! * **switch**: the SW block holds every page of its logical block, in order, all valid:
//!   it becomes the data block and the old data block is erased (1 erase, no copy).
//! * **partial**: the SW block holds offsets `0..k` in order, all valid: the valid pages
//!   of offsets `k..` are copied into it from wherever they are (the data block or an RW
//!   block), it becomes the data block and the old one is erased (1 erase).
//! * **full**: a free block receives the current copy of each valid page of the logical
//!   block at its offset (from the data block, the SW block or RW blocks); the old data
//!   block is erased, and the SW block too if it belonged to this logical block (its pages
//!   have all moved). An SW block with an invalid page (trimmed since) is fully merged.
//!
//! Space: data blocks (at most one per logical block), the SW block, the RW pool, and one
//! free block for a full merge's destination. So the pool has `spare_blocks - 2` RW blocks:
//! seed 004 gives the FTL 10% of the NAND and no separate log-area size, so all of it but
//! those two blocks is log area.

use super::flash::{Flash, NONE};
use super::{Counters, Ftl, Geometry};
use std::collections::VecDeque;

/// The sequential log block: which logical block it belongs to and its next offset.
#[derive(Debug, Clone, Copy)]
struct SwLog {
    block: u32,
    lbn: u32,
    next: u32,
}

/// FAST FTL.
pub struct FastFtl {
    geometry: Geometry,
    flash: Flash,
    /// Logical block -> its data block ([`NONE`] before the first write).
    data_block: Vec<u32>,
    /// Logical page -> the physical page of its current copy ([`NONE`]: never written or
    /// trimmed). FAST keeps the log part of this in SRAM and computes the data part from
    /// the block map; one array is the same information.
    loc: Vec<u32>,
    free: VecDeque<u32>,
    sw: Option<SwLog>,
    /// RW log blocks, oldest first; the last one is being filled.
    rw: VecDeque<u32>,
    rw_blocks_max: usize,
}

impl FastFtl {
    /// An erased NAND of `geometry`, which must keep at least three blocks from the host
    /// (the SW block, one RW block, the merge block); every other spare block is RW pool.
    pub fn new(geometry: Geometry) -> Result<FastFtl, String> {
        FastFtl::with_rw_blocks(geometry, None)
    }

    /// Like [`new`](FastFtl::new), with the RW pool limited to `rw_blocks` (1 ..= spare
    /// blocks - 2) when given, to model a smaller log area; the spare blocks left over stay
    /// free.
    pub fn with_rw_blocks(geometry: Geometry, rw_blocks: Option<u32>) -> Result<FastFtl, String> {
        let spare = geometry.spare_blocks();
        if spare < 3 {
            return Err(format!(
                "FAST needs at least 3 over-provisioned blocks (a sequential log block, a \
                 random log block, a free block for merges); this geometry has {spare}"
            ));
        }
        let rw_max = spare - 2;
        let rw = rw_blocks.unwrap_or(rw_max);
        if !(1..=rw_max).contains(&rw) {
            return Err(format!(
                "{rw} RW log blocks: this geometry has room for 1 to {rw_max} ({spare} spare \
                 blocks less the SW block and the merge block)"
            ));
        }
        Ok(FastFtl {
            geometry,
            flash: Flash::new(geometry.physical_blocks, geometry.pages_per_block),
            data_block: vec![NONE; geometry.logical_blocks as usize],
            loc: vec![NONE; geometry.logical_pages() as usize],
            free: (0..geometry.physical_blocks).collect(),
            sw: None,
            rw: VecDeque::new(),
            rw_blocks_max: rw as usize,
        })
    }

    /// RW log blocks in the pool at most.
    pub fn rw_blocks_max(&self) -> usize {
        self.rw_blocks_max
    }

    fn take_free(&mut self) -> u32 {
        // Space accounting in the module doc: data + SW + RW never exceed physical - 1
        // outside a merge, so a free block is always there.
        self.free.pop_front().expect("FAST keeps a free block")
    }

    /// Invalidates the current copy of `lpn`, if any.
    fn drop_copy(&mut self, lpn: u32) {
        let old = self.loc[lpn as usize];
        if old != NONE {
            self.flash.invalidate(old);
            self.loc[lpn as usize] = NONE;
        }
    }

    /// Moves the current copy of `lpn` (if any) to free page `to`.
    fn copy_to(&mut self, lpn: u32, to: u32) {
        let from = self.loc[lpn as usize];
        if from != NONE {
            self.flash.invalidate(from);
            self.flash.program(to, lpn, true);
            self.loc[lpn as usize] = to;
        }
    }

    fn put(&mut self, lpn: u32, to: u32) {
        self.drop_copy(lpn);
        self.flash.program(to, lpn, false);
        self.loc[lpn as usize] = to;
    }

    /// Merges the SW log block (switch, partial or full); afterwards there is none. With
    /// `host`, that logical page (of the SW block's logical block, past its next offset) is
    /// written by the host into its place during the merge instead of being copied.
    fn merge_sw(&mut self, host: Option<u32>) {
        let Some(sw) = self.sw else { return };
        let ppb = self.geometry.pages_per_block;
        let in_order = (0..sw.next).all(|i| self.flash.is_valid(self.flash.ppn(sw.block, i)));
        if !in_order {
            self.full_merge(sw.lbn, host);
            debug_assert!(self.sw.is_none());
            return;
        }
        self.sw = None;
        for off in sw.next..ppb {
            self.fill(sw.lbn * ppb + off, self.flash.ppn(sw.block, off), host);
        }
        let old = self.data_block[sw.lbn as usize];
        self.flash.erase(old);
        self.free.push_back(old);
        self.data_block[sw.lbn as usize] = sw.block;
        if sw.next == ppb {
            self.flash.counters.switch_merges += 1;
        } else {
            self.flash.counters.partial_merges += 1;
        }
    }

    /// Page `to` of a block being merged receives `lpn`: the host's new data when it is
    /// `host`, else a copy of its current version (if it has one).
    fn fill(&mut self, lpn: u32, to: u32, host: Option<u32>) {
        if host == Some(lpn) {
            self.put(lpn, to);
        } else {
            self.copy_to(lpn, to);
        }
    }

    /// Rebuilds logical block `lbn` in a free block from the current copies of its pages
    /// (and the host's new `host` page, if given).
    fn full_merge(&mut self, lbn: u32, host: Option<u32>) {
        let ppb = self.geometry.pages_per_block;
        let dest = self.take_free();
        for off in 0..ppb {
            self.fill(lbn * ppb + off, self.flash.ppn(dest, off), host);
        }
        let old = self.data_block[lbn as usize];
        self.flash.erase(old);
        self.free.push_back(old);
        self.data_block[lbn as usize] = dest;
        if let Some(sw) = self.sw.filter(|sw| sw.lbn == lbn) {
            // Every page it held has moved to `dest`.
            self.flash.erase(sw.block);
            self.free.push_back(sw.block);
            self.sw = None;
        }
        self.flash.counters.full_merges += 1;
    }

    /// The page the next RW log write goes to: the last RW block's next page, a new RW
    /// block while the pool has room, or else the oldest RW block after merging it away.
    fn rw_page(&mut self) -> u32 {
        let ppb = self.geometry.pages_per_block;
        if let Some(&last) = self.rw.back() {
            let used = self.flash.programmed_pages(last);
            if used < ppb {
                return self.flash.ppn(last, used);
            }
        }
        let block = if self.rw.len() < self.rw_blocks_max {
            self.take_free()
        } else {
            let victim = self.rw.pop_front().expect("the pool has a block");
            self.reclaim_rw(victim);
            victim
        };
        self.rw.push_back(block);
        self.flash.ppn(block, 0)
    }

    /// Full merges of every logical block with a valid page in RW block `victim`, in the
    /// order of their first page there, then the victim's erase.
    fn reclaim_rw(&mut self, victim: u32) {
        let ppb = self.geometry.pages_per_block;
        let mut lbns: Vec<u32> = Vec::new();
        for i in 0..ppb {
            let p = self.flash.ppn(victim, i);
            if self.flash.is_valid(p) {
                let lbn = self.flash.owner(p) / ppb;
                if !lbns.contains(&lbn) {
                    lbns.push(lbn);
                }
            }
        }
        for lbn in lbns {
            if self.sw.is_some_and(|sw| sw.lbn == lbn) {
                self.merge_sw(None);
            } else {
                self.full_merge(lbn, None);
            }
        }
        self.flash.erase(victim);
    }
}

impl Ftl for FastFtl {
    fn write(&mut self, lpn: u64) {
        assert!(
            lpn < self.geometry.logical_pages(),
            "logical page {lpn} out of range"
        );
        let ppb = self.geometry.pages_per_block;
        let lpn = lpn as u32;
        let (lbn, off) = (lpn / ppb, lpn % ppb);
        self.flash.counters.host_page_writes += 1;
        if self.data_block[lbn as usize] == NONE {
            self.data_block[lbn as usize] = self.take_free();
        }
        let home = self.flash.ppn(self.data_block[lbn as usize], off);
        if self.flash.is_free(home) {
            // A free page in the data block has not held this page since the block was
            // built. Usually no other copy exists; but a trimmed page's block may have been
            // merged (leaving its place free) just before the host's rewrite of it went to
            // the RW log, and `put` invalidates that copy.
            self.put(lpn, home);
            return;
        }
        if off == 0 {
            self.merge_sw(None);
            let block = self.take_free();
            self.sw = Some(SwLog {
                block,
                lbn,
                next: 0,
            });
        }
        match self.sw {
            Some(sw) if sw.lbn == lbn && off == sw.next => {
                self.put(lpn, self.flash.ppn(sw.block, off));
                let next = off + 1;
                self.sw = Some(SwLog { next, ..sw });
                if next == ppb {
                    self.merge_sw(None);
                }
            }
            Some(sw) if sw.lbn == lbn && off > sw.next => self.merge_sw(Some(lpn)),
            Some(sw) if sw.lbn == lbn => self.full_merge(lbn, Some(lpn)),
            _ => {
                let to = self.rw_page();
                self.put(lpn, to);
            }
        }
    }

    fn trim(&mut self, lpn: u64) {
        assert!(
            lpn < self.geometry.logical_pages(),
            "logical page {lpn} out of range"
        );
        self.flash.counters.host_page_trims += 1;
        self.drop_copy(lpn as u32);
    }

    fn counters(&self) -> Counters {
        self.flash.counters
    }

    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn holds(&self, lpn: u64) -> bool {
        self.loc[lpn as usize] != NONE
    }

    fn erase_count_max(&self) -> u32 {
        self.flash.max_erase_count()
    }

    fn check(&self) {
        self.flash.check();
        let ppb = self.geometry.pages_per_block;
        let mut mapped = 0u64;
        for (lpn, &p) in self.loc.iter().enumerate() {
            if p == NONE {
                continue;
            }
            assert!(self.flash.is_valid(p), "lpn {lpn}: page {p} is not valid");
            assert_eq!(self.flash.owner(p) as usize, lpn, "owner of page {p}");
            let (lbn, block) = (lpn as u32 / ppb, self.flash.block_of(p));
            let logged = self.rw.contains(&block) || self.sw.is_some_and(|sw| sw.block == block);
            if !logged {
                assert_eq!(
                    block, self.data_block[lbn as usize],
                    "lpn {lpn} outside its blocks"
                );
            }
            if logged && !self.rw.contains(&block) {
                assert_eq!(p % ppb, lpn as u32 % ppb, "SW page {p} off its offset");
            }
            if block == self.data_block[lbn as usize] {
                assert_eq!(p % ppb, lpn as u32 % ppb, "data page {p} off its offset");
            }
            mapped += 1;
        }
        let valid: u64 = (0..self.geometry.physical_blocks)
            .map(|b| u64::from(self.flash.valid_pages(b)))
            .sum();
        assert_eq!(valid, mapped, "valid pages without a mapping");
        let data = self.data_block.iter().filter(|&&b| b != NONE).count();
        let used = data + self.rw.len() + usize::from(self.sw.is_some()) + self.free.len();
        assert_eq!(used, self.geometry.physical_blocks as usize, "blocks lost");
        assert!(self.rw.len() <= self.rw_blocks_max);
        assert!(!self.free.is_empty(), "no free block for a merge");
    }
}
