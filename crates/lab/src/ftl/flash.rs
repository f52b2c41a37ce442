//! The NAND array: every page free, valid or invalid; erase before program.
//!
//! Both FTLs keep their mapping themselves and act on the flash only through [`Flash`],
//! which checks the physical rules (a page is programmed once between erases; a block is
//! erased only when it holds no valid page: the FTL must have moved them first) and counts
//! programs, copies and erases, so the two schemes are counted the same way.
//!
//! Pages may be programmed in any order within a block. FAST (2007) was designed for
//! small-block SLC NAND, where a data block is written at each page's own offset; current
//! MLC parts require in-order programming, which the page FTL and all log blocks respect
//! anyway.

use super::Counters;

/// No page / no logical page.
pub const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageState {
    Free,
    Valid,
    Invalid,
}

/// A NAND of `blocks` erase blocks of `pages_per_block` pages, all erased.
pub struct Flash {
    pages_per_block: u32,
    state: Vec<PageState>,
    /// The logical page each programmed page holds (also kept once invalid, for checks).
    owner: Vec<u32>,
    /// Valid pages per block.
    valid: Vec<u32>,
    /// Pages programmed per block since its last erase.
    programmed: Vec<u32>,
    /// Erases per block (wear).
    erase_count: Vec<u32>,
    pub(crate) counters: Counters,
}

impl Flash {
    /// An erased NAND.
    pub fn new(blocks: u32, pages_per_block: u32) -> Flash {
        let pages = blocks as usize * pages_per_block as usize;
        Flash {
            pages_per_block,
            state: vec![PageState::Free; pages],
            owner: vec![NONE; pages],
            valid: vec![0; blocks as usize],
            programmed: vec![0; blocks as usize],
            erase_count: vec![0; blocks as usize],
            counters: Counters::default(),
        }
    }

    /// Page `index` of `block`.
    pub fn ppn(&self, block: u32, index: u32) -> u32 {
        debug_assert!(index < self.pages_per_block);
        block * self.pages_per_block + index
    }

    /// The block of page `ppn`.
    pub fn block_of(&self, ppn: u32) -> u32 {
        ppn / self.pages_per_block
    }

    /// Programs page `ppn` with logical page `lpn`: a host write, or a copy when `copy`
    /// (counted as one read and one program).
    pub fn program(&mut self, ppn: u32, lpn: u32, copy: bool) {
        let p = ppn as usize;
        assert_eq!(
            self.state[p],
            PageState::Free,
            "page {ppn} programmed twice without an erase"
        );
        self.state[p] = PageState::Valid;
        self.owner[p] = lpn;
        let b = self.block_of(ppn) as usize;
        self.valid[b] += 1;
        self.programmed[b] += 1;
        self.counters.page_programs += 1;
        if copy {
            self.counters.page_copies += 1;
        }
    }

    /// Marks valid page `ppn` invalid (its logical page was rewritten, moved or trimmed).
    pub fn invalidate(&mut self, ppn: u32) {
        let p = ppn as usize;
        assert_eq!(self.state[p], PageState::Valid, "page {ppn} is not valid");
        self.state[p] = PageState::Invalid;
        let b = self.block_of(ppn) as usize;
        self.valid[b] -= 1;
    }

    /// Erases `block`, which must hold no valid page.
    pub fn erase(&mut self, block: u32) {
        let b = block as usize;
        assert_eq!(self.valid[b], 0, "block {block} erased with valid pages");
        let first = b * self.pages_per_block as usize;
        let pages = first..first + self.pages_per_block as usize;
        self.state[pages.clone()].fill(PageState::Free);
        self.owner[pages].fill(NONE);
        self.programmed[b] = 0;
        self.erase_count[b] += 1;
        self.counters.erases += 1;
    }

    /// Whether page `ppn` is erased.
    pub fn is_free(&self, ppn: u32) -> bool {
        self.state[ppn as usize] == PageState::Free
    }

    /// Whether page `ppn` holds the current copy of a logical page.
    pub fn is_valid(&self, ppn: u32) -> bool {
        self.state[ppn as usize] == PageState::Valid
    }

    /// The logical page `ppn` was programmed with ([`NONE`] when free).
    pub fn owner(&self, ppn: u32) -> u32 {
        self.owner[ppn as usize]
    }

    /// Valid pages of `block`.
    pub fn valid_pages(&self, block: u32) -> u32 {
        self.valid[block as usize]
    }

    /// Pages of `block` programmed since its last erase.
    pub fn programmed_pages(&self, block: u32) -> u32 {
        self.programmed[block as usize]
    }

    /// Pages per block.
    pub fn pages_per_block(&self) -> u32 {
        self.pages_per_block
    }

    /// The most erases any block has had (wear).
    pub fn max_erase_count(&self) -> u32 {
        self.erase_count.iter().copied().max().unwrap_or(0)
    }

    /// Checks the counts against the page states, and that every program is accounted
    /// for: each erase removed `programmed` pages, the rest are still on flash.
    pub fn check(&self) {
        let ppb = self.pages_per_block as usize;
        let mut on_flash = 0u64;
        for (b, chunk) in self.state.chunks(ppb).enumerate() {
            let valid = chunk.iter().filter(|s| **s == PageState::Valid).count();
            let programmed = chunk.iter().filter(|s| **s != PageState::Free).count();
            assert_eq!(valid as u32, self.valid[b], "valid count of block {b}");
            assert_eq!(
                programmed as u32, self.programmed[b],
                "programmed count of block {b}"
            );
            on_flash += programmed as u64;
        }
        let c = &self.counters;
        assert_eq!(c.page_programs, c.host_page_writes + c.page_copies);
        // Programs erased away are at most a full block per erase.
        assert!(c.page_programs - on_flash <= c.erases * ppb as u64);
    }
}
