//! Page-level mapping with greedy garbage collection (seed 004's "page-level FTL").
//!
//! Every logical page maps to any physical page. Writes, host and garbage collection
//! alike, go to one write frontier: the next free page of the active block. When the active
//! block is full, the next block comes from the free list, as long as more than one block
//! is free. The last free block is the reserve garbage collection copies into: then the
//! closed block with the fewest valid pages (greedy; the lowest block number among equals)
//! is the victim, its valid pages are copied to the reserve, which becomes the active
//! block, and the victim is erased and becomes the new reserve.
//!
//! The reserve always takes the victim's pages: at that moment every block but the reserve
//! is closed, and they hold at most `logical_pages <= (physical_blocks - 2) *
//! pages_per_block` valid pages, so some closed block has an invalid page. That is why the
//! geometry must keep two blocks from the host.

use super::flash::{Flash, NONE};
use super::{Counters, Ftl, Geometry};
use std::collections::{BTreeSet, VecDeque};

/// Free blocks kept for garbage collection.
const RESERVE_BLOCKS: usize = 1;

/// Page-level FTL.
pub struct PageFtl {
    geometry: Geometry,
    flash: Flash,
    /// Logical page -> physical page ([`NONE`]: never written or trimmed).
    l2p: Vec<u32>,
    free: VecDeque<u32>,
    /// The write frontier's block.
    active: Option<u32>,
    /// Full blocks other than the active one, by (valid pages, block): greedy picks the
    /// first.
    closed: BTreeSet<(u32, u32)>,
}

impl PageFtl {
    /// An erased NAND of `geometry`, which must keep at least two blocks from the host.
    pub fn new(geometry: Geometry) -> Result<PageFtl, String> {
        if geometry.spare_blocks() < 2 {
            return Err(format!(
                "page-level FTL needs at least 2 over-provisioned blocks (a garbage-collection \
                 reserve and room to find a victim); this geometry has {}",
                geometry.spare_blocks()
            ));
        }
        Ok(PageFtl {
            geometry,
            flash: Flash::new(geometry.physical_blocks, geometry.pages_per_block),
            l2p: vec![NONE; geometry.logical_pages() as usize],
            free: (0..geometry.physical_blocks).collect(),
            active: None,
            closed: BTreeSet::new(),
        })
    }

    /// The free page the next write goes to, collecting garbage first if needed.
    fn next_page(&mut self) -> u32 {
        let ppb = self.geometry.pages_per_block;
        // Each round either returns, opens a free block or reclaims one victim; a victim
        // always frees at least one page (module doc), so this ends.
        loop {
            if let Some(b) = self.active {
                let used = self.flash.programmed_pages(b);
                if used < ppb {
                    return self.flash.ppn(b, used);
                }
                self.closed.insert((self.flash.valid_pages(b), b));
                self.active = None;
            }
            if self.free.len() > RESERVE_BLOCKS {
                self.active = self.free.pop_front();
            } else {
                self.collect();
            }
        }
    }

    /// Greedy garbage collection of one victim into the reserve block.
    fn collect(&mut self) {
        let ppb = self.geometry.pages_per_block;
        let (valid, victim) = self
            .closed
            .pop_first()
            .expect("closed blocks exist when full");
        assert!(valid < ppb, "greedy victim {victim} has no invalid page");
        let dest = self.free.pop_front().expect("the reserve block");
        self.active = Some(dest);
        for i in 0..ppb {
            let from = self.flash.ppn(victim, i);
            if !self.flash.is_valid(from) {
                continue;
            }
            let lpn = self.flash.owner(from);
            let to = self.flash.ppn(dest, self.flash.programmed_pages(dest));
            self.flash.invalidate(from);
            self.flash.program(to, lpn, true);
            self.l2p[lpn as usize] = to;
        }
        self.flash.erase(victim);
        self.free.push_back(victim);
        self.flash.counters.gc_victims += 1;
    }

    /// Marks the current copy of `lpn` invalid, keeping the greedy order of its block.
    fn drop_copy(&mut self, lpn: u32) {
        let old = self.l2p[lpn as usize];
        if old == NONE {
            return;
        }
        let b = self.flash.block_of(old);
        let closed = self.closed.remove(&(self.flash.valid_pages(b), b));
        self.flash.invalidate(old);
        if closed {
            self.closed.insert((self.flash.valid_pages(b), b));
        }
        self.l2p[lpn as usize] = NONE;
    }
}

impl Ftl for PageFtl {
    fn write(&mut self, lpn: u64) {
        assert!(
            lpn < self.geometry.logical_pages(),
            "logical page {lpn} out of range"
        );
        let lpn = lpn as u32;
        self.flash.counters.host_page_writes += 1;
        // The old copy is dropped before collecting so that a victim never copies data the
        // host is overwriting right now.
        self.drop_copy(lpn);
        let to = self.next_page();
        self.flash.program(to, lpn, false);
        self.l2p[lpn as usize] = to;
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
        self.l2p[lpn as usize] != NONE
    }

    fn erase_count_max(&self) -> u32 {
        self.flash.max_erase_count()
    }

    fn check(&self) {
        self.flash.check();
        let mut mapped = 0u64;
        for (lpn, &p) in self.l2p.iter().enumerate() {
            if p != NONE {
                assert!(
                    self.flash.is_valid(p),
                    "lpn {lpn} maps to a page that is not valid"
                );
                assert_eq!(self.flash.owner(p) as usize, lpn, "owner of page {p}");
                mapped += 1;
            }
        }
        let valid: u64 = (0..self.geometry.physical_blocks)
            .map(|b| u64::from(self.flash.valid_pages(b)))
            .sum();
        assert_eq!(valid, mapped, "valid pages without a mapping");
        for &(v, b) in &self.closed {
            assert_eq!(
                v,
                self.flash.valid_pages(b),
                "stale greedy key of block {b}"
            );
        }
        let in_use = self.closed.len() + self.free.len() + usize::from(self.active.is_some());
        assert_eq!(
            in_use, self.geometry.physical_blocks as usize,
            "blocks lost"
        );
    }
}
