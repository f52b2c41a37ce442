//! An FTL simulator: how much flash work a block-level write stream costs an SSD.
//!
//! Seed 004 (NVMFS, 2013, §IV-C) captured the block I/O of each file system with blktrace
//! and replayed it on "an FTL simulator ... with two FTL schemes, (a) FAST as a
//! representative hybrid FTL scheme and (b) page-level FTL", configured as "a large block
//! 24GB NAND flash memory with 4KB page, 256 KB block, and 10% over-provisioned capacity".
//! Its Figs. 6-7 report the write traffic to the SSD in sectors, the number of erases and
//! the erase cost. This module is that simulator, with the same geometry by default
//! ([`Geometry::seed`]) and any size for tests and small traces:
//!
//! * [`geometry`]: NAND size, 4 KiB pages, pages per block (64 = 256 KiB blocks), the
//!   over-provisioned share and the logical space it leaves.
//! * [`flash`]: the NAND array itself: page states (free, valid, invalid), erase-before-
//!   program, per-block valid counts and erase counts. Both FTLs act only through it, so
//!   its counters (programs, copies, erases) mean the same thing for both.
//! * [`page`]: page-level mapping with greedy garbage collection.
//! * [`fast`]: FAST (Lee et al., ACM TECS 2007): block-mapped data blocks, one sequential
//!   (SW) log block and a pool of fully associative random (RW) log blocks; switch,
//!   partial and full merges.
//! * [`cost`]: the erase cost, copies and erases weighted by NAND timings.
//! * [`trace`]: the lab's block trace format (text), its reader and writer.
//! * [`replay`]: feeds a trace to an FTL and returns the counters.
//! * [`blkparse`]: imports blkparse's text output (blktrace captures made elsewhere).
//! * [`capture`]: records the block requests a kernel file system on one of the lab's loop
//!   devices issues, as a trace.

pub mod blkparse;
pub mod capture;
pub mod cost;
pub mod fast;
pub mod flash;
pub mod geometry;
pub mod page;
pub mod replay;
pub mod trace;

#[cfg(test)]
mod tests;

pub use cost::CostModel;
pub use geometry::Geometry;

use serde::Serialize;
use std::fmt;

/// Bytes of a flash page and of a file-system block: the unit the FTLs map.
pub const PAGE_BYTES: u64 = 4096;
/// Bytes of a sector, the unit of block-layer addresses in traces.
pub const SECTOR_BYTES: u64 = 512;
/// Sectors per flash page.
pub const SECTORS_PER_PAGE: u64 = PAGE_BYTES / SECTOR_BYTES;

/// What a flash translation layer does with logical pages (4 KiB, numbered from 0).
pub trait Ftl {
    /// Writes logical page `lpn`, which must be below [`Geometry::logical_pages`].
    fn write(&mut self, lpn: u64);
    /// Forgets logical page `lpn` (TRIM/discard): its flash copy becomes invalid and is
    /// not migrated by later garbage collection.
    fn trim(&mut self, lpn: u64);
    /// The counters so far.
    fn counters(&self) -> Counters;
    /// The geometry this FTL was made for.
    fn geometry(&self) -> &Geometry;
    /// Whether logical page `lpn` holds data (written and not trimmed since).
    fn holds(&self, lpn: u64) -> bool;
    /// The most erases any one block has had (wear).
    fn erase_count_max(&self) -> u32;
    /// Checks the FTL's internal invariants (mapping against page states, valid counts),
    /// panicking on the first broken one. For tests; costs a pass over every page.
    fn check(&self);
}

/// The FTL schemes of seed 004's Fig. 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FtlKind {
    /// Page-level mapping, greedy garbage collection ([`page::PageFtl`]).
    Page,
    /// FAST hybrid log-block mapping ([`fast::FastFtl`]).
    Fast,
}

impl FtlKind {
    /// Both, in the seed's order of Fig. 7 (FAST first).
    pub const ALL: [FtlKind; 2] = [FtlKind::Fast, FtlKind::Page];

    /// `page` or `fast`.
    pub fn name(self) -> &'static str {
        match self {
            FtlKind::Page => "page",
            FtlKind::Fast => "fast",
        }
    }

    /// Parses `page` or `fast`.
    pub fn parse(text: &str) -> Result<FtlKind, String> {
        match text {
            "page" => Ok(FtlKind::Page),
            "fast" => Ok(FtlKind::Fast),
            _ => Err(format!("unknown FTL {text:?}: page or fast")),
        }
    }

    /// A fresh (all blocks erased) FTL of this kind on `geometry`.
    pub fn build(self, geometry: Geometry) -> Result<Box<dyn Ftl>, String> {
        Ok(match self {
            FtlKind::Page => Box::new(page::PageFtl::new(geometry)?),
            FtlKind::Fast => Box::new(fast::FastFtl::new(geometry)?),
        })
    }
}

impl fmt::Display for FtlKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an FTL did, in flash operations. Every page program is either a host write or a
/// copy: `page_programs == host_page_writes + page_copies`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Logical pages written by the host.
    pub host_page_writes: u64,
    /// Logical pages trimmed by the host.
    pub host_page_trims: u64,
    /// Pages programmed on flash (host writes and copies).
    pub page_programs: u64,
    /// Valid pages migrated by garbage collection or merges: each is one page read and
    /// one page program.
    pub page_copies: u64,
    /// Blocks erased.
    pub erases: u64,
    /// Garbage collections (page FTL: victim blocks reclaimed).
    pub gc_victims: u64,
    /// FAST switch merges: a complete sequential log block becomes the data block.
    pub switch_merges: u64,
    /// FAST partial merges: the rest of a sequential log block is copied in, then it
    /// becomes the data block.
    pub partial_merges: u64,
    /// FAST full merges: one data block rebuilt in a free block from its latest pages.
    pub full_merges: u64,
}

impl Counters {
    /// Flash page programs per host page write (1 when nothing was copied; 0 before any
    /// write).
    pub fn write_amplification(&self) -> f64 {
        if self.host_page_writes == 0 {
            0.0
        } else {
            self.page_programs as f64 / self.host_page_writes as f64
        }
    }
}
