//! The data path: read, write, truncate/extend, fallocate. Reads copy straight from the
//! mapped region; writes go straight to it with non-temporal stores (no page cache, no double
//! copy). Overwrites are in place; new blocks are claimed in the hash table, filled, published
//! and fenced before the size that exposes them (see docs/GUARANTEES.md).
//!
//! Contents past EOF are unspecified on media (a write that did not finish may leave data
//! there); whenever EOF moves up, the range between the old and the new EOF that the
//! operation does not write itself is zeroed first, so it always reads as zeros.

use std::cell::UnsafeCell;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{errno, now_ns, tick_ns, tick_start_ns, Fs, Inner};
use crate::layout::inode::{self, FileType, Inode, FILE_SIZE_MAX};
use crate::layout::BLOCK_SIZE;
use crate::mapping::Claim;

const CACHE_ENTRIES: usize = 8;
/// Hole fills inside EOF that one fallocate transaction publishes (fits a journal lane).
const HOLE_FILLS_PER_TX: usize = 200;

/// HashFS's per-handle translation cache: recent (logical -> data block) translations,
/// direct-mapped by logical block. An entry is checked against the hash table on use (one
/// load), so truncates and other handles never need to invalidate it.
#[derive(Clone, Debug)]
pub struct TranslationCache {
    entries: [(u32, u64); CACHE_ENTRIES],
    /// The handle's scratch list of the blocks a write claims, kept between writes: an
    /// allocation and a free per append cost more than the append's bookkeeping.
    claims: Vec<NewBlock>,
    /// The handle's scratch list of a write's blocks (`plan_blocks`), kept likewise.
    plan: Vec<(u32, Planned)>,
}

/// A handle's translation cache, used by one thread at a time: taken with one atomic swap and
/// given back with a plain store. A lock's release would be a locked instruction after a
/// write's non-temporal stores, and wait for them to drain.
#[derive(Default)]
pub(crate) struct CacheSlot {
    busy: AtomicBool,
    cache: UnsafeCell<TranslationCache>,
}

// SAFETY: the cache is reached only by the thread that turned `busy` from false to true, until
// it stores false again (`with`).
unsafe impl Sync for CacheSlot {}

impl CacheSlot {
    /// Runs `f` with the cache, or with an empty one while another thread uses it.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut TranslationCache) -> R) -> R {
        if self.busy.swap(true, Ordering::Acquire) {
            return f(&mut TranslationCache::default());
        }
        struct GiveBack<'a>(&'a AtomicBool);
        impl Drop for GiveBack<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _back = GiveBack(&self.busy);
        // SAFETY: `busy` was false and this thread set it: no other thread touches the cache
        // until `_back` stores false, after `f` (also when `f` unwinds).
        f(unsafe { &mut *self.cache.get() })
    }
}

/// A write's block for one piece.
#[derive(Clone, Copy, Debug)]
enum Planned {
    Mapped(u64),
    /// Not mapped yet; claimed before the plan is used.
    Hole,
    Claimed(Claim),
}

impl Default for TranslationCache {
    fn default() -> Self {
        TranslationCache {
            entries: [(u32::MAX, u64::MAX); CACHE_ENTRIES],
            claims: Vec::new(),
            plan: Vec::new(),
        }
    }
}

impl TranslationCache {
    #[inline]
    fn get(&self, lblk: u32) -> Option<u64> {
        let (l, p) = self.entries[lblk as usize % CACHE_ENTRIES];
        (l == lblk).then_some(p)
    }

    #[inline]
    fn put(&mut self, lblk: u32, pblk: u64) {
        self.entries[lblk as usize % CACHE_ENTRIES] = (lblk, pblk);
    }
}

/// One block's share of a byte range: the logical block, the offset in it, the offset in the
/// range and the length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Piece {
    pub lblk: u64,
    pub in_blk: usize,
    pub at: usize,
    pub len: usize,
}

/// How many blocks of a read are translated before their data is copied.
const READ_GROUP: usize = 8;

/// Splits `[off, off + len)` at block boundaries, in order.
pub(crate) fn pieces(off: u64, len: usize) -> impl Iterator<Item = Piece> {
    let mut at = 0;
    std::iter::from_fn(move || {
        (at < len).then(|| {
            let pos = off + at as u64;
            let in_blk = (pos % BLOCK_SIZE) as usize;
            let piece = Piece {
                lblk: pos / BLOCK_SIZE,
                in_blk,
                at,
                len: (BLOCK_SIZE as usize - in_blk).min(len - at),
            };
            at += piece.len;
            piece
        })
    })
}

/// The time an overwrite stamps as mtime and ctime, or None when both were already stamped
/// during the current tick of the coarse clock. An overwrite then leaves them as they are, as
/// Linux's coarse inode clock does: times are exact to one tick, and most overwrites skip
/// storing and writing back the inode's line. The coarse clock alone usually decides (both
/// times from the tick's start to one tick later): the precise clock costs 45-60 ns a call on
/// this kind of virtual machine, a quarter of a 4 KiB durable store. When the coarse clock lags
/// by more than its resolution (a busy or tickless CPU), stamps taken this tick lie past that
/// window, and the precise clock decides as before: both times in [tick start, now]; its
/// reading is then the stamp. A time set into the future by more than one tick is in neither
/// window, so the next write stamps it.
fn overwrite_stamp(i: &Inode) -> Option<i64> {
    let start = tick_start_ns();
    let window = start..start.saturating_add(tick_ns());
    if window.contains(&i.mtime_ns) && window.contains(&i.ctime_ns) {
        return None;
    }
    let now = now_ns();
    let tick = start..=now;
    let stamped = tick.contains(&i.mtime_ns) && tick.contains(&i.ctime_ns);
    (!stamped).then_some(now)
}

impl Inner {
    #[inline]
    fn translate(&self, ino: u32, lblk: u32, cache: &mut TranslationCache) -> Option<u64> {
        if let Some(p) = cache.get(lblk) {
            if self.map.still_maps(&self.pm, p, ino, lblk) {
                return Some(p);
            }
        }
        let p = self.map.lookup(&self.pm, ino, lblk)?;
        cache.put(lblk, p);
        Some(p)
    }

    /// Reads up to `buf.len()` bytes at `off`; holes read as zeros. On a tiered image, cold
    /// blocks read from the SSD are then cached in PM (after the read lock is gone: caching
    /// maps blocks, which needs the write lock).
    pub(crate) fn read_data(
        &self,
        ino: u32,
        off: u64,
        buf: &mut [u8],
        cache: &mut TranslationCache,
    ) -> io::Result<usize> {
        let mut cold = super::tiered::ColdBlocks::new();
        let n = self.read_locked(ino, off, buf, cache, &mut cold)?;
        if !cold.is_empty() {
            self.promote(ino, cold);
        }
        Ok(n)
    }

    fn read_locked(
        &self,
        ino: u32,
        off: u64,
        buf: &mut [u8],
        cache: &mut TranslationCache,
        cold: &mut super::tiered::ColdBlocks,
    ) -> io::Result<usize> {
        let _g = self.stripes.read(ino);
        let i = self.inode(ino)?;
        check_regular(&i)?;
        if off >= i.size || buf.is_empty() {
            return Ok(0);
        }
        let n = (i.size - off).min(buf.len() as u64) as usize;
        if self.tier.is_some() {
            // No in-place overwrites run next to reads on a tiered image (`write_data`).
            self.copy_out(ino, off, &mut buf[..n], cache, cold)?;
        } else {
            self.stripes.read_bytes(ino, off, n as u64, || {
                self.copy_out(ino, off, &mut buf[..n], cache, cold)
            })?;
        }
        Ok(n)
    }

    /// Copies the file's bytes at `off` into `buf` (inside EOF); holes read as zeros.
    fn copy_out(
        &self,
        ino: u32,
        off: u64,
        buf: &mut [u8],
        cache: &mut TranslationCache,
        cold: &mut super::tiered::ColdBlocks,
    ) -> io::Result<()> {
        // Physically adjacent blocks are copied as one run (one memcpy the prefetcher can
        // follow); `run` is (source offset, start in buf, length).
        let mut run: Option<(u64, usize, usize)> = None;
        let mut rest = pieces(off, buf.len());
        let mut group = [(Piece::default(), None); READ_GROUP];
        loop {
            let k = self.translate_group(ino, &mut rest, &mut group, cache);
            if k == 0 {
                break;
            }
            for &(piece, pblk) in &group[..k] {
                let Piece {
                    lblk,
                    in_blk,
                    at,
                    len,
                } = piece;
                let lblk = lblk as u32;
                match pblk {
                    Some(p) => {
                        self.tier_read(ino, lblk, p);
                        let src = self.geo.data_off(p) + in_blk as u64;
                        run = match run {
                            Some((s, d, l)) if s + l as u64 == src => Some((s, d, l + len)),
                            prev => {
                                self.copy_run(prev, buf);
                                Some((src, at, len))
                            }
                        };
                    }
                    None => {
                        self.copy_run(run.take(), buf);
                        let out = &mut buf[at..at + len];
                        if !self.read_cold(ino, lblk, in_blk, out, cold)? {
                            out.fill(0);
                        }
                    }
                }
            }
        }
        self.copy_run(run, buf);
        Ok(())
    }

    /// Translates the next (up to) `READ_GROUP` pieces of a read into `group` and returns
    /// how many. Each piece's cache misses are started before any is waited for: the hash
    /// slots of the whole group first, then the first line (and page walk) of each block as
    /// it is found, so that the copies that follow find their blocks on the way. Copying four
    /// random 4 KiB blocks alone took about 20% less time so; open-read-16k gained 3-4%
    /// (docs/LAB.md).
    fn translate_group(
        &self,
        ino: u32,
        rest: &mut impl Iterator<Item = Piece>,
        group: &mut [(Piece, Option<u64>); READ_GROUP],
        cache: &mut TranslationCache,
    ) -> usize {
        let mut k = 0;
        for (slot, piece) in group.iter_mut().zip(rest) {
            self.map.prefetch(&self.pm, ino, piece.lblk as u32);
            *slot = (piece, None);
            k += 1;
        }
        for (piece, pblk) in &mut group[..k] {
            *pblk = self.translate(ino, piece.lblk as u32, cache);
            if let Some(p) = *pblk {
                self.pm.prefetch(self.geo.data_off(p) + piece.in_blk as u64);
            }
        }
        k
    }

    fn copy_run(&self, run: Option<(u64, usize, usize)>, buf: &mut [u8]) {
        // No software prefetch of the run's lines beyond its first (`translate_group`): the
        // C library's copy (ERMS / AVX-512 here)
        // keeps as many lines in flight by itself, and 64 prefetches ahead of it stall on the
        // line-fill buffers. Measured on random 4 KiB reads: p50 about 620 -> 520 ns with 2 MiB
        // pages, 650 -> 600 ns with 4 KiB pages (docs/LAB.md).
        if let Some((src, at, len)) = run {
            self.pm.read(src, &mut buf[at..at + len]);
        }
    }

    /// Writes `data` at `off` (at EOF when `append`); returns (bytes written, new size). A
    /// write that runs out of space stops short and returns what it wrote.
    pub(crate) fn write_data(
        &self,
        ino: u32,
        off: u64,
        data: &[u8],
        append: bool,
        cache: &mut TranslationCache,
    ) -> io::Result<(usize, u64)> {
        self.check_writable()?;
        if !append && self.tier.is_none() {
            if let Some(done) = self.overwrite_in_place(ino, off, data, cache) {
                return done;
            }
        }
        let _g = self.stripes.write(ino);
        let mut i = self.inode(ino)?;
        check_regular(&i)?;
        let off = if append { i.size } else { off };
        if data.is_empty() {
            return Ok((0, i.size));
        }
        if off
            .checked_add(data.len() as u64)
            .is_none_or(|end| end > FILE_SIZE_MAX)
        {
            return Err(errno(libc::EFBIG));
        }
        if off > i.size {
            let size = i.size;
            self.zero_range(ino, &mut i, size, off, cache)?;
        }
        let mut plan = std::mem::take(&mut cache.plan);
        let mut err = self.plan_blocks(ino, off, data.len(), i.map_end(), cache, &mut plan);
        let mut claims = std::mem::take(&mut cache.claims);
        claims.clear();
        let mut done = 0usize;
        for (k, (piece, &(lblk, block))) in pieces(off, data.len()).zip(plan.iter()).enumerate() {
            let chunk = &data[piece.at..piece.at + piece.len];
            match block {
                Planned::Mapped(p) => self
                    .pm
                    .write_nt(self.geo.data_off(p) + piece.in_blk as u64, chunk),
                Planned::Claimed(c) => {
                    if let Err(e) = self.fill_block(ino, lblk, c.pblk, piece.in_blk, chunk) {
                        self.abandon_planned(ino, &plan[k..]);
                        err = Some(e);
                        break;
                    }
                    cache.put(lblk, c.pblk);
                    claims.push((c, lblk));
                }
                Planned::Hole => unreachable!("plan_blocks claims every hole it keeps"),
            }
            done = piece.at + piece.len;
        }
        cache.plan = plan;
        if done == 0 {
            return Err(err.unwrap_or_else(|| errno(libc::ENOSPC)));
        }
        let new_size = i.size.max(off + done as u64);
        self.refresh_blocks(ino, &mut i);
        self.publish_and_stamp(ino, &i, &claims, new_size);
        if self.tier.is_some() {
            self.tier_filled(ino, &claims);
            self.tier_after_write(ino);
        }
        claims.clear();
        cache.claims = claims;
        Ok((done, new_size))
    }

    /// Overwrites `data` at `off` when that is all the write does (every block mapped, the
    /// range inside EOF) holding only the range words of the bytes, not the stripe lock, so
    /// that writers of different parts of one file run side by side (`ranges.rs`). None: the
    /// write needs the exclusive path (a hole, or past EOF). Durable as any overwrite: data
    /// and times (when stamped) behind one fence, and no locked instruction after the data's
    /// non-temporal stores.
    fn overwrite_in_place(
        &self,
        ino: u32,
        off: u64,
        data: &[u8],
        cache: &mut TranslationCache,
    ) -> Option<io::Result<(usize, u64)>> {
        let end = off.checked_add(data.len() as u64)?;
        if data.is_empty() {
            return None;
        }
        // No exclusive holder runs while the words are held: the inode and the mapping of
        // these blocks stay as read here.
        let _words = self.stripes.lock_bytes(ino, off, data.len() as u64);
        let i = match self.inode(ino).and_then(|i| check_regular(&i).map(|_| i)) {
            Ok(i) => i,
            Err(e) => return Some(Err(e)),
        };
        if end > i.size {
            return None;
        }
        let mut plan = std::mem::take(&mut cache.plan);
        plan.clear();
        let mapped = pieces(off, data.len()).all(|p| {
            let block = self.translate(ino, p.lblk as u32, cache);
            plan.extend(block.map(|b| (p.lblk as u32, Planned::Mapped(b))));
            block.is_some()
        });
        if mapped {
            for (piece, &(_, block)) in pieces(off, data.len()).zip(plan.iter()) {
                if let Planned::Mapped(p) = block {
                    let chunk = &data[piece.at..piece.at + piece.len];
                    self.pm
                        .write_nt(self.geo.data_off(p) + piece.in_blk as u64, chunk);
                }
            }
            if let Some(now) = overwrite_stamp(&i) {
                self.stamp_times(ino, now);
            }
            self.pm.fence();
        }
        cache.plan = plan;
        mapped.then_some(Ok((data.len(), i.size)))
    }

    /// The block of every piece of a write of `len` bytes at `off`, in order: the mapped
    /// ones found (and marked dirty on a tiered image, so making room cannot evict them),
    /// new ones claimed for the holes, all before any data is stored. A claim is an atomic
    /// read-modify-write, which waits for the non-temporal stores before it to drain:
    /// claiming between block copies would drain once per block instead of once per write.
    /// Stops at the first hole it cannot claim, with that error (the write is then short).
    fn plan_blocks(
        &self,
        ino: u32,
        off: u64,
        len: usize,
        map_end: u64,
        cache: &mut TranslationCache,
        plan: &mut Vec<(u32, Planned)>,
    ) -> Option<io::Error> {
        plan.clear();
        let mut holes = 0u64;
        for piece in pieces(off, len) {
            let lblk = piece.lblk as u32;
            let mapped = if piece.lblk < map_end {
                self.translate(ino, lblk, cache)
            } else {
                None
            };
            match mapped {
                Some(p) => {
                    self.tier_wrote(ino, lblk, p);
                    plan.push((lblk, Planned::Mapped(p)));
                }
                None => {
                    holes += 1;
                    plan.push((lblk, Planned::Hole));
                }
            }
        }
        // One reservation for all the holes; when they do not all fit, one at a time, so the
        // write still fills what fits.
        let mut reserved = if holes > 0 && self.reserve_room(holes, Some(ino), true).is_ok() {
            holes
        } else {
            0
        };
        for k in 0..plan.len() {
            let (lblk, Planned::Hole) = plan[k] else {
                continue;
            };
            let room = match reserved {
                0 => self.reserve_room(1, Some(ino), true),
                _ => {
                    reserved -= 1;
                    Ok(())
                }
            };
            match room.and_then(|_| self.claim_one(ino, lblk)) {
                Ok(c) => plan[k].1 = Planned::Claimed(c),
                Err(e) => {
                    plan.truncate(k);
                    self.map.unreserve(reserved);
                    return Some(e);
                }
            }
        }
        None
    }

    /// Gives back the claimed blocks of `plan` (a write that stopped before filling them),
    /// newest first: a tree mapping then always gives back the last block of a run it
    /// extended.
    fn abandon_planned(&self, ino: u32, plan: &[(u32, Planned)]) {
        for &(lblk, block) in plan.iter().rev() {
            if let Planned::Claimed(c) = block {
                self.map.abandon(&self.pm, &self.journal, c, ino, lblk);
            }
        }
    }

    pub(super) fn claim_one(&self, ino: u32, lblk: u32) -> io::Result<Claim> {
        self.map
            .claim(&self.pm, &self.journal, ino, lblk)
            .inspect_err(|_| self.map.unreserve(1))
    }

    /// Fills a newly claimed block: `chunk` at `in_blk`, zeros around it.
    pub(super) fn fill_new_block(&self, pblk: u64, in_blk: usize, chunk: &[u8]) {
        let base = self.geo.data_off(pblk);
        if in_blk > 0 {
            self.pm.zero_nt(base, in_blk);
        }
        self.pm.write_nt(base + in_blk as u64, chunk);
        let tail = in_blk + chunk.len();
        if tail < BLOCK_SIZE as usize {
            self.pm
                .zero_nt(base + tail as u64, BLOCK_SIZE as usize - tail);
        }
    }

    /// Publishes new blocks and records size, block count and times. An overwrite in place
    /// needs one fence (data and times together; times only when the clock tick moved since
    /// they were last stamped, see `overwrite_stamp`). A write that maps blocks past EOF or grows
    /// the file fences the data and mappings first, then stores the size that exposes them
    /// (recovery frees mapped blocks past EOF). A write that fills holes inside EOF commits
    /// those mappings with the inode in a journal transaction (see `commit_hole_fills`).
    fn publish_and_stamp(&self, ino: u32, i: &Inode, claims: &[(Claim, u32)], new_size: u64) {
        let base = self.geo.inode_off(ino as u64);
        if claims.is_empty() && new_size == i.size {
            if let Some(now) = overwrite_stamp(i) {
                self.stamp_times(ino, now);
            }
            self.pm.fence();
            return;
        }
        let now = now_ns();
        let (inside, outside) = split_hole_fills(i, claims);
        let uncovered = self.publish_uncovered(ino, outside);
        crate::hook::at(crate::hook::Point::Published);
        if !inside.is_empty() {
            let mut i = i.clone();
            let added = outside.len() as u64;
            self.commit_hole_fills(ino, &mut i, inside, |i| {
                i.blocks = i.blocks.saturating_add(added);
                i.size = new_size;
                i.mtime_ns = now;
                i.ctime_ns = now;
            });
            uncovered.covered();
            return;
        }
        self.pm.fence();
        // Size before block count and times (one line: they persist in this order); recovery
        // recomputes block counts after a crash in any case.
        self.pm.store_u64(base + inode::O_SIZE as u64, new_size);
        self.pm.store_u64(
            base + inode::O_BLOCKS as u64,
            i.blocks.saturating_add(claims.len() as u64),
        );
        self.pm.store_u64(base + inode::O_MTIME as u64, now as u64);
        self.pm.store_u64(base + inode::O_CTIME as u64, now as u64);
        self.pm.persist(base, 64);
        self.pm.fence();
        uncovered.covered();
    }

    /// Publishes new blocks at or past the inode's `map_end` directly (nothing reads them
    /// before the size or `falloc_end` that covers them is stored). The caller reports that
    /// store with `Uncovered::covered`; until then an unwinding panic unmaps them again.
    fn publish_uncovered<'a>(&'a self, ino: u32, blocks: &'a [NewBlock]) -> Uncovered<'a> {
        for &(c, lblk) in blocks {
            self.map.publish(&self.pm, &self.journal, c, ino, lblk);
        }
        Uncovered {
            inner: self,
            ino,
            blocks,
            armed: true,
        }
    }

    /// Stores mtime and ctime (line 0 of the record) and writes the line back; not fenced.
    /// The caller holds the inode's stripe write lock, or range words of it (an in-place
    /// overwrite: concurrent ones each store whole 8-byte times).
    pub(crate) fn stamp_times(&self, ino: u32, now: i64) {
        let base = self.geo.inode_off(ino as u64);
        self.pm.store_u64(base + inode::O_MTIME as u64, now as u64);
        self.pm.store_u64(base + inode::O_CTIME as u64, now as u64);
        self.pm.persist(base, 64);
    }

    /// Maps blocks filling holes inside EOF, which are visible the moment they are mapped, in
    /// journal transactions (a roll-back leaves tombstones) together with the inode: at most
    /// HOLE_FILLS_PER_TX per transaction, so an operation filling more holes than that is
    /// atomic per chunk. `last` updates the inode in the final transaction. Each arming fence
    /// also makes the blocks' data (and earlier direct publishes) durable first.
    pub(super) fn commit_hole_fills(
        &self,
        ino: u32,
        i: &mut Inode,
        inside: &[(Claim, u32)],
        last: impl FnOnce(&mut Inode),
    ) {
        let mut chunks: Vec<&[(Claim, u32)]> = inside.chunks(HOLE_FILLS_PER_TX).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        let n = chunks.len();
        let mut last = Some(last);
        for (k, chunk) in chunks.into_iter().enumerate() {
            let mut tx = self.tx();
            for &(c, lblk) in chunk {
                self.map.publish_in(&mut tx, c, ino, lblk);
            }
            i.blocks = i.blocks.saturating_add(chunk.len() as u64);
            if k + 1 == n {
                if let Some(f) = last.take() {
                    f(i);
                }
            }
            self.write_inode(&mut tx, ino, i);
            tx.commit();
        }
    }

    /// Zeroes whatever is mapped in [from, to) (not fenced: the caller fences before moving
    /// EOF over it). A cold block in the range is brought into PM first (its SSD copy may
    /// hold bytes past the old EOF), which updates `i`.
    fn zero_range(
        &self,
        ino: u32,
        i: &mut Inode,
        from: u64,
        to: u64,
        cache: &mut TranslationCache,
    ) -> io::Result<()> {
        let map_end = i.map_end();
        for piece in pieces(from, to.saturating_sub(from) as usize) {
            if piece.lblk >= map_end {
                break;
            }
            let lblk = piece.lblk as u32;
            let p = match self.translate(ino, lblk, cache) {
                Some(p) => Some(p),
                None => self.make_resident(ino, i, lblk)?,
            };
            if let Some(p) = p {
                self.tier_wrote(ino, lblk, p);
                self.pm
                    .zero_nt(self.geo.data_off(p) + piece.in_blk as u64, piece.len);
            }
        }
        Ok(())
    }

    /// Truncates or extends inode `ino` (stripe lock held); updates `i` to match.
    pub(crate) fn set_size(&self, ino: u32, i: &mut Inode, size: u64) -> io::Result<()> {
        check_regular(i)?;
        if size > FILE_SIZE_MAX {
            return Err(errno(libc::EFBIG));
        }
        let now = now_ns();
        if size > i.size {
            let old = i.size;
            self.zero_range(ino, i, old, size, &mut TranslationCache::default())?;
            self.pm.fence();
            let base = self.geo.inode_off(ino as u64);
            self.pm.store_u64(base + inode::O_SIZE as u64, size);
            self.pm.store_u64(base + inode::O_MTIME as u64, now as u64);
            self.pm.store_u64(base + inode::O_CTIME as u64, now as u64);
            self.pm.persist(base, 64);
            self.pm.fence();
        } else if size < i.size || i.falloc_end > 0 {
            // A live DirectMap points at the blocks of [0, its length): freeing them would
            // leave it storing into blocks that another file may get. Refused, not deferred
            // (see DirectMap).
            if size < self.mapped_len(ino) {
                return Err(errno(libc::EBUSY));
            }
            let old_end = i.map_end();
            i.size = size;
            i.falloc_end = 0;
            i.mtime_ns = now;
            i.ctime_ns = now;
            let mut tx = self.tx();
            self.write_inode(&mut tx, ino, i);
            tx.commit();
            // The new size is durable; blocks past it are now strays that recovery would free
            // too, so freeing them needs no transaction.
            // No fence between the unmapping and the block count: recovery frees strays and
            // recomputes counts, so either order survives a crash (the final fence makes both
            // durable before returning).
            let freed = self.unmap_from(ino, size.div_ceil(BLOCK_SIZE), old_end)?;
            if freed > 0 {
                i.blocks = i.blocks.saturating_sub(freed);
                let base = self.geo.inode_off(ino as u64);
                self.pm.store_u64(base + inode::O_BLOCKS as u64, i.blocks);
                self.pm.persist(base + inode::O_BLOCKS as u64, 8);
                self.pm.fence();
                self.map.freed(freed);
            }
            return Ok(());
        }
        i.size = size;
        i.mtime_ns = now;
        i.ctime_ns = now;
        Ok(())
    }

    /// fallocate: mode 0 (allocate, extend size), KEEP_SIZE, and PUNCH_HOLE|KEEP_SIZE.
    pub(crate) fn fallocate(&self, ino: u32, mode: i32, off: u64, len: u64) -> io::Result<()> {
        self.check_writable()?;
        if len == 0 {
            return Err(errno(libc::EINVAL));
        }
        let end = off
            .checked_add(len)
            .filter(|&e| e <= FILE_SIZE_MAX)
            .ok_or_else(|| errno(libc::EFBIG))?;
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        if mode & !(libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE) != 0 || (punch && !keep)
        {
            return Err(errno(libc::EOPNOTSUPP));
        }
        let _g = self.stripes.write(ino);
        let mut i = self.inode(ino)?;
        check_regular(&i)?;
        if punch {
            // Punching a hole under a live DirectMap would free blocks it points at.
            if off < self.mapped_len(ino) {
                return Err(errno(libc::EBUSY));
            }
            return self.punch_hole(ino, &mut i, off, end);
        }
        let mut cache = TranslationCache::default();
        let (first, last) = (off / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE));
        let map_end = i.map_end();
        // A cold block (on the SSD tier) is data, not a hole.
        let missing: Vec<u32> = (first..last)
            .filter(|&l| {
                l >= map_end
                    || (self.translate(ino, l as u32, &mut cache).is_none()
                        && self.ssd_block(ino, l as u32).is_none())
            })
            .map(|l| l as u32)
            .collect();
        self.reserve_room(missing.len() as u64, Some(ino), true)?;
        let mut claims = Vec::with_capacity(missing.len());
        for (n, &lblk) in missing.iter().enumerate() {
            match self.map.claim(&self.pm, &self.journal, ino, lblk) {
                Ok(c) => {
                    self.pm
                        .zero_nt(self.geo.data_off(c.pblk), BLOCK_SIZE as usize);
                    claims.push((c, lblk));
                }
                Err(e) => {
                    self.map.unreserve((missing.len() - n) as u64);
                    // Newest first: a tree mapping then always gives back the last block of
                    // a run it extended.
                    for (c, lblk) in claims.into_iter().rev() {
                        self.map.abandon(&self.pm, &self.journal, c, ino, lblk);
                    }
                    return Err(e);
                }
            }
        }
        if !keep && end > i.size {
            let size = i.size;
            if let Err(e) = self.zero_range(ino, &mut i, size, end, &mut cache) {
                for (c, lblk) in claims.into_iter().rev() {
                    self.map.abandon(&self.pm, &self.journal, c, ino, lblk);
                }
                return Err(e);
            }
        }
        self.refresh_blocks(ino, &mut i);
        // Blocks past EOF are exposed only by the size or falloc_end the last transaction
        // commits, so they are published directly (recovery frees them if it never commits).
        let (inside, outside) = split_hole_fills(&i, &claims);
        let uncovered = self.publish_uncovered(ino, outside);
        let now = now_ns();
        let added = outside.len() as u64;
        self.commit_hole_fills(ino, &mut i, inside, |i| {
            i.blocks = i.blocks.saturating_add(added);
            if !keep && end > i.size {
                i.size = end;
                i.mtime_ns = now;
            }
            if keep && last > i.map_end() {
                i.falloc_end = last;
            }
            i.ctime_ns = now;
        });
        uncovered.covered();
        self.tier_filled(ino, &claims);
        Ok(())
    }

    fn punch_hole(&self, ino: u32, i: &mut Inode, off: u64, end: u64) -> io::Result<()> {
        let end = end.min(i.map_end() * BLOCK_SIZE);
        if off >= end {
            return Ok(());
        }
        let (full_first, full_last) = (off.div_ceil(BLOCK_SIZE), end / BLOCK_SIZE);
        let mut cache = TranslationCache::default();
        // Partial blocks at the edges are zeroed; whole blocks are unmapped.
        if full_first > full_last {
            self.zero_range(ino, i, off, end, &mut cache)?;
        } else {
            self.zero_range(ino, i, off, full_first * BLOCK_SIZE, &mut cache)?;
            self.zero_range(ino, i, full_last * BLOCK_SIZE, end, &mut cache)?;
        }
        let freed = if full_first < full_last {
            self.unmap_from(ino, full_first, full_last)?
        } else {
            0
        };
        self.pm.fence();
        i.blocks = i.blocks.saturating_sub(freed);
        i.ctime_ns = now_ns();
        i.mtime_ns = i.ctime_ns;
        let mut tx = self.tx();
        self.write_inode(&mut tx, ino, i);
        tx.commit();
        self.map.freed(freed);
        Ok(())
    }
}

/// A claimed data block and the logical block it will map.
type NewBlock = (Claim, u32);

/// Blocks published past an inode's `map_end` whose covering size is not stored yet.
///
/// Recovery frees such blocks only after a crash (GUARANTEES.md §6). A panic that unwinds out
/// of the operation in between (a caught one: the preload and the FUSE adapter keep running)
/// would leave them mapped in a live mount, and a clean unmount would keep them; a later write
/// of the same block would claim a second slot for the same key. Dropping this while armed
/// unmaps them, which restores the invariant a clean image relies on: every mapping lies below
/// its inode's `allowed_blocks`.
struct Uncovered<'a> {
    inner: &'a Inner,
    ino: u32,
    blocks: &'a [NewBlock],
    armed: bool,
}

impl Uncovered<'_> {
    /// The size or `falloc_end` covering the blocks is stored: they stay.
    fn covered(mut self) {
        self.armed = false;
    }
}

impl Drop for Uncovered<'_> {
    fn drop(&mut self) {
        if !self.armed || self.blocks.is_empty() {
            return;
        }
        let inner = self.inner;
        let mut freed = 0;
        for &(_, lblk) in self.blocks {
            let (from, to) = (lblk as u64, lblk as u64 + 1);
            // Dropping the tail of a run never needs a new node, so this does not fail; if it
            // did, the block would stay mapped past EOF, which fsck reports.
            freed += inner
                .map
                .unmap_range(&inner.pm, &inner.journal, self.ino, from, to)
                .unwrap_or(0);
        }
        inner.pm.fence();
        inner.map.freed(freed);
    }
}

/// Splits new blocks into those below the inode's old `map_end` (holes inside EOF or inside
/// preallocated space: recovery keeps such mappings, so they must commit atomically with the
/// inode) and those past it (recovery frees them as strays if the inode never commits).
/// `claims` are in ascending logical order (both callers claim front to back), so the split
/// is a prefix and a suffix.
fn split_hole_fills<'a>(i: &Inode, claims: &'a [NewBlock]) -> (&'a [NewBlock], &'a [NewBlock]) {
    debug_assert!(claims.is_sorted_by_key(|&(_, l)| l));
    let limit = i.map_end();
    claims.split_at(claims.partition_point(|&(_, l)| (l as u64) < limit))
}

pub(super) fn check_regular(i: &Inode) -> io::Result<()> {
    match i.file_type() {
        Some(FileType::File) => Ok(()),
        Some(FileType::Dir) => Err(errno(libc::EISDIR)),
        _ => Err(errno(libc::EINVAL)),
    }
}

impl Fs {
    /// Reads file `ino` at `off` (inode-level API).
    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_data(
            super::ops::to_ino(ino)?,
            off,
            buf,
            &mut TranslationCache::default(),
        )
    }

    /// Writes file `ino` at `off` (inode-level API); returns bytes written.
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> io::Result<usize> {
        Ok(self
            .inner
            .write_data(
                super::ops::to_ino(ino)?,
                off,
                data,
                false,
                &mut TranslationCache::default(),
            )?
            .0)
    }

    /// fallocate(2) modes 0, FALLOC_FL_KEEP_SIZE and FALLOC_FL_PUNCH_HOLE|KEEP_SIZE.
    pub fn fallocate(&self, ino: u64, mode: i32, off: u64, len: u64) -> io::Result<()> {
        self.inner
            .fallocate(super::ops::to_ino(ino)?, mode, off, len)
    }

    /// fsync/syncfs (inode-level API). Every operation is already durable when it returns;
    /// this only matters for an image on an ordinary (non-DAX, non-tmpfs) file, where it asks
    /// the OS to write the mapping back (msync), as `File::sync_all` does.
    pub fn sync_all(&self) -> io::Result<()> {
        self.inner.pm.sync_backing()
    }
}

#[cfg(test)]
mod pieces_tests {
    use super::{pieces, Piece};

    #[test]
    fn ranges_split_at_block_boundaries() {
        let p = |lblk, in_blk, at, len| Piece {
            lblk,
            in_blk,
            at,
            len,
        };
        assert_eq!(
            pieces(4000, 5000).collect::<Vec<_>>(),
            vec![p(0, 4000, 0, 96), p(1, 0, 96, 4096), p(2, 0, 4192, 808)]
        );
        assert_eq!(
            pieces(8192, 4096).collect::<Vec<_>>(),
            vec![p(2, 0, 0, 4096)]
        );
        assert_eq!(pieces(10, 0).count(), 0);
    }
}
