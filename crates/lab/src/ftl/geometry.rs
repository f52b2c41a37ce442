//! The shape of the simulated NAND: blocks of pages, and how much of it the host sees.
//!
//! Over-provisioning is the share of the *physical* blocks kept from the host: a NAND of
//! `physical_blocks` exports `floor(physical_blocks * (1 - op))` logical blocks. Seed 004
//! gives "24GB NAND flash memory ... and 10% over-provisioned capacity"; read this way its
//! device exports 21.6 GiB. (The other reading, 10% on top of the logical size, gives a
//! slightly smaller spare area; the seed does not say which it meant.)

use super::PAGE_BYTES;
use serde::Serialize;

/// Seed 004's NAND size (24 GiB).
pub const SEED_NAND_BYTES: u64 = 24 << 30;
/// Seed 004's block: 256 KiB of 4 KiB pages.
pub const SEED_PAGES_PER_BLOCK: u32 = 64;
/// Seed 004's over-provisioned share.
pub const SEED_OP: f64 = 0.10;
/// Spare blocks both FTLs can run with (FAST: its SW block, one RW block, a merge block).
pub const MIN_SPARE_BLOCKS: u64 = 3;

/// NAND geometry: pages of [`PAGE_BYTES`], `pages_per_block` to an erase block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Geometry {
    /// Pages per erase block (64: 256 KiB blocks).
    pub pages_per_block: u32,
    /// Erase blocks of the NAND.
    pub physical_blocks: u32,
    /// Blocks' worth of logical pages the host may address.
    pub logical_blocks: u32,
}

impl Geometry {
    /// Seed 004's configuration: 24 GiB, 256 KiB blocks, 10% over-provisioned.
    pub fn seed() -> Geometry {
        Geometry::from_size(SEED_NAND_BYTES, SEED_OP, SEED_PAGES_PER_BLOCK)
            .expect("the seed's geometry is valid")
    }

    /// Checks and builds a geometry from block counts. Page numbers must fit in 32 bits,
    /// and at least one block must be over-provisioned (the FTLs ask for more).
    pub fn new(
        pages_per_block: u32,
        physical_blocks: u32,
        logical_blocks: u32,
    ) -> Result<Geometry, String> {
        if !(2..=1024).contains(&pages_per_block) {
            return Err(format!(
                "{pages_per_block} pages per block: must be 2..=1024"
            ));
        }
        if logical_blocks == 0 {
            return Err("no logical blocks: the NAND is too small".into());
        }
        if physical_blocks <= logical_blocks {
            return Err(format!(
                "{physical_blocks} physical blocks leave no over-provisioning for \
                 {logical_blocks} logical blocks"
            ));
        }
        let pages = u64::from(physical_blocks) * u64::from(pages_per_block);
        if pages >= u64::from(u32::MAX) {
            return Err(format!(
                "{pages} pages: the simulator numbers pages in 32 bits (at most 16 TiB)"
            ));
        }
        Ok(Geometry {
            pages_per_block,
            physical_blocks,
            logical_blocks,
        })
    }

    /// A NAND of `nand_bytes` (a whole number of blocks) with the share `op` of its blocks
    /// over-provisioned.
    pub fn from_size(nand_bytes: u64, op: f64, pages_per_block: u32) -> Result<Geometry, String> {
        check_op(op)?;
        let block_bytes = u64::from(pages_per_block) * PAGE_BYTES;
        if nand_bytes == 0 || !nand_bytes.is_multiple_of(block_bytes) {
            return Err(format!(
                "NAND size {nand_bytes} bytes is not a positive multiple of the {block_bytes}-byte \
                 block"
            ));
        }
        let physical = u32::try_from(nand_bytes / block_bytes)
            .map_err(|_| format!("NAND size {nand_bytes} bytes: too many blocks"))?;
        Geometry::new(pages_per_block, physical, logical_of(physical, op))
    }

    /// The smallest NAND with the share `op` over-provisioned whose logical space holds
    /// `logical_bytes` and which keeps at least [`MIN_SPARE_BLOCKS`] from the host: what a
    /// trace of a `logical_bytes` device replays on by default.
    pub fn covering(logical_bytes: u64, op: f64, pages_per_block: u32) -> Result<Geometry, String> {
        check_op(op)?;
        let block_bytes = u64::from(pages_per_block) * PAGE_BYTES;
        let needed = logical_bytes.div_ceil(block_bytes).max(1);
        // A first guess from the ratio, then exact steps: floor() makes the ratio inexact.
        let mut physical = ((needed as f64) / (1.0 - op)).ceil() as u64;
        while physical > needed + 1 && u64::from(logical_of_u64(physical - 1, op)) >= needed {
            physical -= 1;
        }
        // Then up to the logical size, and to the spare blocks FAST needs (a small NAND's
        // share can round down to less).
        while u64::from(logical_of_u64(physical, op)) < needed
            || physical - u64::from(logical_of_u64(physical, op)) < MIN_SPARE_BLOCKS
        {
            physical += 1;
        }
        let physical = u32::try_from(physical)
            .map_err(|_| format!("{logical_bytes} bytes: too many blocks"))?;
        Geometry::new(pages_per_block, physical, logical_of(physical, op))
    }

    /// Logical pages the host may write: `0..logical_pages()`.
    pub fn logical_pages(&self) -> u64 {
        u64::from(self.logical_blocks) * u64::from(self.pages_per_block)
    }

    /// Pages of the NAND.
    pub fn physical_pages(&self) -> u64 {
        u64::from(self.physical_blocks) * u64::from(self.pages_per_block)
    }

    /// Bytes of an erase block.
    pub fn block_bytes(&self) -> u64 {
        u64::from(self.pages_per_block) * PAGE_BYTES
    }

    /// Bytes of the NAND.
    pub fn nand_bytes(&self) -> u64 {
        self.physical_pages() * PAGE_BYTES
    }

    /// Bytes the host sees.
    pub fn logical_bytes(&self) -> u64 {
        self.logical_pages() * PAGE_BYTES
    }

    /// Blocks kept from the host.
    pub fn spare_blocks(&self) -> u32 {
        self.physical_blocks - self.logical_blocks
    }
}

fn check_op(op: f64) -> Result<(), String> {
    if op.is_finite() && op > 0.0 && op < 0.9 {
        Ok(())
    } else {
        Err(format!(
            "over-provisioning {op}: must be a share of the NAND above 0 and below 0.9"
        ))
    }
}

fn logical_of(physical: u32, op: f64) -> u32 {
    logical_of_u64(u64::from(physical), op)
}

fn logical_of_u64(physical: u64, op: f64) -> u32 {
    // Rounded to 1e-9 before the floor so that 0.9 * 10 is 9, not 8.999...
    let exact = physical as f64 * (1.0 - op);
    ((exact + 1e-9).floor() as u64).min(u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_geometry_is_24_gib_of_256_kib_blocks_with_a_tenth_spare() {
        let g = Geometry::seed();
        assert_eq!(g.physical_blocks, 98_304);
        assert_eq!(g.block_bytes(), 256 << 10);
        // floor(98304 * 0.9) = 88473.
        assert_eq!(g.logical_blocks, 88_473);
        assert_eq!(g.nand_bytes(), 24 << 30);
    }

    #[test]
    fn covering_gives_the_smallest_nand_that_holds_the_device() {
        let g = Geometry::covering(512 << 20, 0.10, 64).unwrap();
        // 512 MiB = 2048 blocks; 2276 * 0.9 = 2048.4 but 2275 * 0.9 = 2047.5.
        assert_eq!(g.logical_blocks, 2048);
        assert_eq!(g.physical_blocks, 2276);
        let g = Geometry::covering(10 * (256 << 10), 0.5, 64).unwrap();
        assert_eq!((g.physical_blocks, g.logical_blocks), (20, 10));
        // A tiny device still gets the 3 spare blocks FAST needs: 21 * 0.9 = 18.9, while
        // 20 blocks would keep only 2.
        let g = Geometry::covering(4096, 0.10, 64).unwrap();
        assert_eq!((g.physical_blocks, g.logical_blocks), (21, 18));
    }

    #[test]
    fn bad_sizes_are_refused_with_a_reason() {
        assert!(Geometry::from_size(1000, 0.1, 64)
            .unwrap_err()
            .contains("multiple"));
        assert!(Geometry::from_size(256 << 10, 0.1, 64)
            .unwrap_err()
            .contains("logical"));
        assert!(Geometry::from_size(1 << 30, 0.0, 64)
            .unwrap_err()
            .contains("over-provisioning"));
        assert!(Geometry::new(64, 10, 10).unwrap_err().contains("no over"));
    }
}
