//! The data paths of a tiered image (docs/TIER.md §5): cold reads and their caching in PM,
//! writes to clean and cold blocks, eviction, flushing dirty blocks to the SSD in 512 KiB
//! extents, segment cleaning, and dropping SSD entries with the blocks they copy.
//!
//! Locking. The tier's state is one mutex, taken inside stripe locks (stripe -> tier). While
//! holding it, a flush, an eviction or a cleaning round needs the stripe locks of the blocks
//! it acts on: it only *tries* them (a busy block is skipped), so it never waits on a stripe
//! while holding the tier, and the caller's own stripe (`held`), which it may not take again,
//! counts as locked.
//!
//! Ordering. A PM mapping always wins: whenever PM maps a block, its SSD entry is either
//! absent or equal, and recovery drops the entry of every PM-resident block after an unclean
//! shutdown. So an entry is published only after its extent is durable on the SSD, a clean
//! block loses its entry before it is written, and an evicted block is unmapped (and fenced)
//! while its entry is valid.

use std::io;

use super::{errno, Inner};
use crate::layout::inode::{Inode, O_BLOCKS};
use crate::layout::tier::{extent_off, ssd_block_off, BLOCKS_PER_EXTENT};
use crate::layout::BLOCK_SIZE;
use crate::mapping::hashfs::{key, split_key};
use crate::mapping::Claim;
use crate::tier::lru::List;
use crate::tier::ssd::Aligned;
use crate::tier::{regular_inode, Tier, TierState};

/// Clean blocks an eviction frees at least (so a run of writes does not evict block by block).
const EVICT_BATCH: u64 = 64;
/// List entries an eviction or a flush looks at before giving up (busy or stale ones).
const SCAN_LIMIT: usize = 4096;
/// Times a reservation makes room and tries again before ENOSPC.
const ROOM_TRIES: usize = 8;
/// Cold blocks one read caches in PM.
const PROMOTE_MAX: usize = 32;
/// Extents a cleaning round looks at as victims.
const CLEAN_CANDIDATES: usize = 64;

/// A valid entry of a cleaning victim: its SSD block, key, generation, and the PM block of
/// the key when it is resident too (clean).
#[derive(Clone, Copy)]
struct Valid {
    b: u64,
    k: u64,
    gen: u32,
    resident: Option<u64>,
}

/// Cold blocks a read copied from the SSD: (logical block, SSD block, extent sequence, data).
pub(crate) type ColdBlocks = Vec<(u32, u32, u32, Aligned)>;

fn enospc(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::StorageFull,
        format!("no space left on the SSD tier: {what}"),
    )
}

impl Inner {
    fn read_ssd(&self, t: &Tier, st: &mut TierState, b: u32) -> io::Result<Aligned> {
        let mut buf = Aligned::zeroed(BLOCK_SIZE as usize);
        t.ssd.read(ssd_block_off(b as u64), &mut buf)?;
        st.stats.ssd_bytes_read += BLOCK_SIZE;
        Ok(buf)
    }

    /// Re-reads `i.blocks` from the record: a reservation that made room may have evicted
    /// blocks of `ino` itself (the caller's stripe counts as held), each decrementing the
    /// record's count, so a copy taken before it would write back a stale count.
    pub(crate) fn refresh_blocks(&self, ino: u32, i: &mut Inode) {
        if self.tier.is_some() {
            i.blocks = self
                .pm
                .load_u64(self.geo.inode_off(ino as u64) + O_BLOCKS as u64);
        }
    }

    /// The SSD block of (ino, lblk) when it is cold or clean.
    pub(crate) fn ssd_block(&self, ino: u32, lblk: u32) -> Option<u32> {
        let t = self.tier.as_ref()?;
        t.st.lock().index.get(&key(ino, lblk)).copied()
    }

    /// Read path, for a block PM does not map: if it is cold, copies `[in_blk, +out.len())`
    /// of it into `out` and keeps the block to cache in PM after the read. False: a hole.
    /// The caller holds the inode's stripe (read), so no cleaning moves the block meanwhile.
    pub(crate) fn read_cold(
        &self,
        ino: u32,
        lblk: u32,
        in_blk: usize,
        out: &mut [u8],
        cold: &mut ColdBlocks,
    ) -> io::Result<bool> {
        let Some(t) = &self.tier else {
            return Ok(false);
        };
        let mut st = t.st.lock();
        let Some(&b) = st.index.get(&key(ino, lblk)) else {
            return Ok(false);
        };
        let buf = self.read_ssd(t, &mut st, b)?;
        st.stats.cold_reads += 1;
        let seq = st.seq[b as usize / BLOCKS_PER_EXTENT as usize];
        drop(st);
        out.copy_from_slice(&buf[in_blk..in_blk + out.len()]);
        if cold.len() < PROMOTE_MAX && !self.read_only {
            cold.push((lblk, b, seq, buf));
        }
        Ok(true)
    }

    /// A read of PM block `pblk` of (ino, lblk): it becomes the most recently used of its list.
    #[inline]
    pub(crate) fn tier_read(&self, ino: u32, lblk: u32, pblk: u64) {
        if let Some(t) = &self.tier {
            let mut st = t.st.lock();
            let k = key(ino, lblk);
            if let Some(l) = st
                .lru
                .list_of(pblk)
                .filter(|_| st.lru.listed_key(pblk) == k)
            {
                st.lru.touch(l, pblk, k);
            }
        }
    }

    /// Caches blocks a read found cold in PM, as clean (both copies valid). Best effort: with
    /// no clean block to evict for room, the blocks stay cold.
    pub(crate) fn promote(&self, ino: u32, cold: ColdBlocks) {
        let Some(t) = &self.tier else {
            return;
        };
        let _g = self.stripes.write(ino);
        let Ok(mut i) = self.inode(ino) else {
            return;
        };
        let mut claims: Vec<(Claim, u32)> = Vec::new();
        for (lblk, b, seq, buf) in cold {
            // Still the copy that was read: not written, truncated or moved meanwhile.
            let same = {
                let st = t.st.lock();
                st.index.get(&key(ino, lblk)) == Some(&b)
                    && st.seq[b as usize / BLOCKS_PER_EXTENT as usize] == seq
            };
            if !same || lblk as u64 >= i.map_end() || self.map.lookup(&self.pm, ino, lblk).is_some()
            {
                continue;
            }
            if self.reserve_room(1, Some(ino), false).is_err() {
                break;
            }
            let Ok(c) = self.map.claim(&self.pm, &self.journal, ino, lblk) else {
                self.map.unreserve(1);
                break;
            };
            self.pm.write_nt(self.geo.data_off(c.pblk), &buf);
            claims.push((c, lblk));
        }
        if claims.is_empty() {
            return;
        }
        self.refresh_blocks(ino, &mut i);
        self.commit_hole_fills(ino, &mut i, &claims, |_| {});
        let mut st = t.st.lock();
        for &(c, lblk) in &claims {
            st.lru.touch(List::Clean, c.pblk, key(ino, lblk));
        }
        st.stats.promoted += claims.len() as u64;
    }

    /// A write is about to store into PM block `pblk` of (ino, lblk): the block becomes
    /// dirty, and if it was clean its SSD entry goes first (the write's own fence makes that
    /// durable with the data; a crash before it is resolved by PM winning at recovery).
    #[inline]
    pub(crate) fn tier_wrote(&self, ino: u32, lblk: u32, pblk: u64) {
        if let Some(t) = &self.tier {
            let k = key(ino, lblk);
            let mut st = t.st.lock();
            if let Some(&b) = st.index.get(&k) {
                t.invalidate(&self.pm, &mut st, k, b);
            }
            st.lru.touch(List::Dirty, pblk, k);
        }
    }

    /// New blocks of `ino` are published: they are dirty, and the SSD entries of those that
    /// were cold are dropped (after the publish, so a crash leaves the SSD copy or the PM one
    /// mapped; PM wins).
    pub(crate) fn tier_filled(&self, ino: u32, claims: &[(Claim, u32)]) {
        let Some(t) = &self.tier else {
            return;
        };
        let mut st = t.st.lock();
        let mut dropped = false;
        for &(c, lblk) in claims {
            let k = key(ino, lblk);
            if let Some(&b) = st.index.get(&k) {
                t.invalidate(&self.pm, &mut st, k, b);
                dropped = true;
            }
            st.lru.touch(List::Dirty, c.pblk, k);
        }
        if dropped {
            self.pm.fence();
        }
    }

    /// Fills newly claimed PM block `pblk` for a write of `chunk` at `in_blk` of (ino, lblk):
    /// a cold block's other bytes come from its SSD copy, a hole's are zeros.
    pub(crate) fn fill_block(
        &self,
        ino: u32,
        lblk: u32,
        pblk: u64,
        in_blk: usize,
        chunk: &[u8],
    ) -> io::Result<()> {
        let whole = in_blk == 0 && chunk.len() == BLOCK_SIZE as usize;
        let cold = match &self.tier {
            Some(t) if !whole => {
                let mut st = t.st.lock();
                match st.index.get(&key(ino, lblk)).copied() {
                    Some(b) => Some(self.read_ssd(t, &mut st, b)?),
                    None => None,
                }
            }
            _ => None,
        };
        match cold {
            Some(mut buf) => {
                buf[in_blk..in_blk + chunk.len()].copy_from_slice(chunk);
                self.pm.write_nt(self.geo.data_off(pblk), &buf);
            }
            None => self.fill_new_block(pblk, in_blk, chunk),
        }
        Ok(())
    }

    /// Brings cold block `lblk` of `ino` into PM as a dirty block, for a caller about to
    /// change part of it outside the write path (zeroing past EOF). Its PM block, or None
    /// when it is not cold. The caller holds the stripe write lock; `i` is updated.
    pub(crate) fn make_resident(
        &self,
        ino: u32,
        i: &mut Inode,
        lblk: u32,
    ) -> io::Result<Option<u64>> {
        let Some(t) = &self.tier else {
            return Ok(None);
        };
        let Some(b) = self.ssd_block(ino, lblk) else {
            return Ok(None);
        };
        self.reserve_room(1, Some(ino), true)?;
        let c = self.claim_one(ino, lblk)?;
        let buf = {
            let mut st = t.st.lock();
            self.read_ssd(t, &mut st, b)
        };
        let buf = match buf {
            Ok(b) => b,
            Err(e) => {
                self.map.abandon(&self.pm, &self.journal, c, ino, lblk);
                return Err(e);
            }
        };
        self.pm.write_nt(self.geo.data_off(c.pblk), &buf);
        let claims = [(c, lblk)];
        self.refresh_blocks(ino, i);
        self.commit_hole_fills(ino, i, &claims, |_| {});
        self.tier_filled(ino, &claims);
        Ok(Some(c.pblk))
    }

    /// Drops the SSD entries of `ino` for logical blocks [from, to) (truncate, punch hole,
    /// unlink), fenced. The caller holds the stripe write lock and has unmapped PM's copies.
    pub(crate) fn tier_drop(&self, ino: u32, from: u64, to: u64) {
        let Some(t) = &self.tier else {
            return;
        };
        let to = to.min(1 << 32);
        if from >= to {
            return;
        }
        let base = (ino as u64) << 32;
        let mut st = t.st.lock();
        let gone: Vec<(u64, u32)> = st
            .index
            .range(base + from..base + to)
            .map(|(&k, &b)| (k, b))
            .collect();
        for &(k, b) in &gone {
            t.invalidate(&self.pm, &mut st, k, b);
        }
        if !gone.is_empty() {
            self.pm.fence();
        }
    }

    /// Reserves `n` PM blocks. On a tiered image with PM full, makes room: evicts clean
    /// blocks and, with `may_flush`, flushes dirty ones to the SSD first (cleaning SSD
    /// segments if it has no free extent). The caller holds the stripe write lock of `held`.
    pub(crate) fn reserve_room(
        &self,
        n: u64,
        held: Option<u32>,
        may_flush: bool,
    ) -> io::Result<()> {
        let full = |e: &io::Error| e.raw_os_error() == Some(libc::ENOSPC);
        match self.map.reserve(n) {
            Err(e) if full(&e) && self.tier.is_some() => {}
            r => return r,
        }
        for _ in 0..ROOM_TRIES {
            self.make_room(n, held, may_flush)?;
            match self.map.reserve(n) {
                Err(e) if full(&e) => continue,
                r => return r,
            }
        }
        Err(errno(libc::ENOSPC))
    }

    fn make_room(&self, n: u64, held: Option<u32>, may_flush: bool) -> io::Result<()> {
        let t = self.tier.as_ref().expect("tiered");
        let mut st = t.st.lock();
        let want = n.max(EVICT_BATCH);
        let mut freed = self.evict(&mut st, want, held);
        if freed >= n {
            return Ok(());
        }
        if !may_flush {
            return Err(errno(libc::ENOSPC));
        }
        while freed < n {
            if self.flush_batch(t, &mut st, held)? == 0 {
                return Err(errno(libc::ENOSPC));
            }
            freed += self.evict(&mut st, want, held);
        }
        Ok(())
    }

    /// Evicts up to `want` clean blocks, least recently used first: each is unmapped from PM
    /// (its SSD copy stays valid, so it is cold now). Returns how many.
    fn evict(&self, st: &mut TierState, want: u64, held: Option<u32>) -> u64 {
        let mut locks = self.stripes.try_set(held);
        let mut evicted = 0;
        let mut next = st.lru.oldest(List::Clean);
        let mut looked = 0;
        while let Some(b) = next {
            if evicted >= want || looked >= SCAN_LIMIT {
                break;
            }
            looked += 1;
            next = st.lru.newer(b);
            let k = st.lru.listed_key(b);
            if self.pm.load_u64(self.geo.slot_off(b)) != k {
                st.lru.remove(b); // freed or reused behind the list's back
                continue;
            }
            if !st.index.contains_key(&k) {
                st.lru.touch(List::Dirty, b, k);
                continue;
            }
            let (ino, lblk) = split_key(k).expect("a listed block holds a key");
            if !locks.lock(ino) || self.pm.load_u64(self.geo.slot_off(b)) != k {
                continue;
            }
            let n = self
                .map
                .unmap_range(&self.pm, &self.journal, ino, lblk as u64, lblk as u64 + 1)
                .unwrap_or(0);
            if n == 1 {
                let off = self.geo.inode_off(ino as u64) + O_BLOCKS as u64;
                let blocks = self.pm.load_u64(off);
                self.pm.store_u64(off, blocks.saturating_sub(1));
                self.pm.persist(off, 8);
                evicted += 1;
            }
            st.lru.remove(b);
        }
        if evicted > 0 {
            // Before the victims' locks go: a later write of the block must not find its
            // unmapping still in flight.
            self.pm.fence();
            self.map.freed(evicted);
            st.stats.evicted += evicted;
        }
        drop(locks);
        evicted
    }

    /// Flushes dirty blocks while they are above the high watermark, down to the low one
    /// (the seed's 80% / 50%), in the foreground of the write that crossed it. Errors (a full
    /// SSD) leave the blocks dirty in PM, which is always safe.
    pub(crate) fn tier_after_write(&self, held: u32) {
        let Some(t) = &self.tier else {
            return;
        };
        let mut st = t.st.lock();
        let data = self.geo.data_blocks;
        let (high, low) = (
            data * t.hdr.marks.dirty_high as u64 / 1000,
            data * t.hdr.marks.dirty_low as u64 / 1000,
        );
        if st.lru.len(List::Dirty) <= high {
            return;
        }
        while st.lru.len(List::Dirty) > low {
            match self.flush_batch(t, &mut st, Some(held)) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }

    /// Writes up to one extent of the least recently used dirty blocks to the SSD, sorted by
    /// (inode, block) so an extent holds neighbours of one file, and makes them clean.
    /// Returns how many blocks left the dirty list (flushed, or found stale).
    fn flush_batch(&self, t: &Tier, st: &mut TierState, held: Option<u32>) -> io::Result<u64> {
        let util = st.index.len() as u64 * 1000 / t.hdr.ssd_blocks().max(1);
        if util > t.hdr.marks.clean_at as u64 && st.free_count < t.hdr.marks.free_extents_min as u64
        {
            self.clean_round(t, st, held)?;
        }
        // One free extent stays for cleaning, which needs somewhere to move blocks to.
        if st.free_count < 2 {
            self.clean_round(t, st, held)?;
            if st.free_count < 2 {
                return Err(enospc("no free extent and cleaning freed none"));
            }
        }
        let mut locks = self.stripes.try_set(held);
        let mut picked: Vec<(u64, u64, u32)> = Vec::new();
        let mut left = 0;
        let mut next = st.lru.oldest(List::Dirty);
        let mut looked = 0;
        while let Some(b) = next {
            if picked.len() as u64 >= BLOCKS_PER_EXTENT || looked >= SCAN_LIMIT {
                break;
            }
            looked += 1;
            next = st.lru.newer(b);
            let k = st.lru.listed_key(b);
            let (ino, lblk) = split_key(k).expect("a listed block holds a key");
            if self.pm.load_u64(self.geo.slot_off(b)) != k {
                st.lru.remove(b);
                left += 1;
                continue;
            }
            // The record is read under the stripe: a stale read could name a generation or
            // size the inode no longer has.
            if !locks.lock(ino) {
                continue;
            }
            let Some(i) = regular_inode(&self.pm, &self.geo, ino) else {
                st.lru.remove(b);
                left += 1;
                continue;
            };
            // A block past the inode's map_end belongs to a write still in flight (its size
            // is not stored yet): an entry for it would be stale at recovery.
            if lblk as u64 >= i.map_end() {
                continue;
            }
            picked.push((b, k, i.generation));
        }
        if picked.is_empty() {
            return Ok(left);
        }
        picked.sort_unstable_by_key(|p| p.1);
        let e = st.take_free_extent().expect("two free extents checked");
        let len = picked.len() * BLOCK_SIZE as usize;
        let mut buf = Aligned::zeroed(len);
        for (n, &(b, _, _)) in picked.iter().enumerate() {
            let at = n * BLOCK_SIZE as usize;
            self.pm
                .read(self.geo.data_off(b), &mut buf[at..at + BLOCK_SIZE as usize]);
        }
        t.ssd.write_durable(extent_off(e), &buf, len)?;
        st.record_write(extent_off(e), len as u64);
        let entries: Vec<(u64, u32)> = picked.iter().map(|&(_, k, g)| (k, g)).collect();
        t.publish(&self.pm, st, e * BLOCKS_PER_EXTENT, &entries);
        for &(b, k, _) in &picked {
            st.lru.touch(List::Clean, b, k);
        }
        st.stats.flushes += 1;
        st.stats.flushed_blocks += picked.len() as u64;
        drop(locks);
        Ok(left + picked.len() as u64)
    }

    /// One round of segment cleaning: frees the extents with the best LFS cost-benefit
    /// (`(1 - u) * age / (1 + u)`) whose cold blocks fit together in one free extent. A block
    /// also in PM (clean) just loses its entry and becomes dirty; a cold one is copied to the
    /// new extent, published there, and only then dropped from its victim. Returns the
    /// extents freed.
    fn clean_round(&self, t: &Tier, st: &mut TierState, held: Option<u32>) -> io::Result<u64> {
        let now = st.next_seq;
        let mut cands: Vec<(f64, usize)> = st
            .valid
            .iter()
            .enumerate()
            .filter(|&(_, &v)| v > 0 && (v as u64) < BLOCKS_PER_EXTENT)
            .map(|(e, &v)| {
                let u = v as f64 / BLOCKS_PER_EXTENT as f64;
                let age = now.wrapping_sub(st.seq[e]) as f64 + 1.0;
                ((1.0 - u) * age / (1.0 + u), e)
            })
            .collect();
        cands.sort_by(|a, b| b.0.total_cmp(&a.0));
        let can_copy = st.free_count > 0;
        let mut locks = self.stripes.try_set(held);
        let mut victims: Vec<(usize, Vec<Valid>)> = Vec::new();
        let mut cold_total = 0u64;
        'cand: for &(_, e) in cands.iter().take(CLEAN_CANDIDATES) {
            let mut blocks = Vec::new();
            for b in e as u64 * BLOCKS_PER_EXTENT..(e as u64 + 1) * BLOCKS_PER_EXTENT {
                let off = t.hdr.entry_off(b);
                let k = self.pm.load_u64(off);
                if k == 0 || st.index.get(&k) != Some(&(b as u32)) {
                    continue;
                }
                let (ino, lblk) = split_key(k).expect("a valid entry holds a key");
                if !locks.lock(ino) {
                    continue 'cand;
                }
                let gen = crate::layout::tier::split_meta(self.pm.load_u64(off + 8)).0;
                let resident = self.map.lookup(&self.pm, ino, lblk);
                blocks.push(Valid {
                    b,
                    k,
                    gen,
                    resident,
                });
            }
            let cold = blocks.iter().filter(|x| x.resident.is_none()).count() as u64;
            if (cold > 0 && !can_copy) || cold_total + cold > BLOCKS_PER_EXTENT {
                continue;
            }
            cold_total += cold;
            victims.push((e, blocks));
        }
        // Progress: the victims free more extents than the copy takes.
        if victims.len() as u64 <= (cold_total > 0) as u64 {
            return Ok(0);
        }
        let mut moved = Vec::new();
        if cold_total > 0 {
            let dest = st.take_free_extent().expect("a free extent checked");
            let len = cold_total as usize * BLOCK_SIZE as usize;
            let mut buf = Aligned::zeroed(len);
            for &Valid { b, k, gen, .. } in victims
                .iter()
                .flat_map(|v| v.1.iter())
                .filter(|x| x.resident.is_none())
            {
                let at = moved.len() * BLOCK_SIZE as usize;
                let one = self.read_ssd(t, st, b as u32)?;
                buf[at..at + BLOCK_SIZE as usize].copy_from_slice(&one);
                moved.push((k, gen));
            }
            t.ssd.write_durable(extent_off(dest), &buf, len)?;
            st.record_write(extent_off(dest), len as u64);
            // Both copies are valid until the old entries go: recovery keeps the newer.
            t.publish(&self.pm, st, dest * BLOCKS_PER_EXTENT, &moved);
        }
        let mut moved_blocks = 0;
        for (_, blocks) in &victims {
            for &Valid { b, k, resident, .. } in blocks {
                match resident {
                    Some(p) => {
                        t.invalidate(&self.pm, st, k, b as u32);
                        st.lru.touch(List::Dirty, p, k);
                    }
                    None => t.clear_entry(&self.pm, st, b as u32),
                }
                moved_blocks += 1;
            }
        }
        self.pm.fence();
        drop(locks);
        st.stats.cleaned_extents += victims.len() as u64;
        st.stats.moved_blocks += moved_blocks;
        Ok(victims.len() as u64)
    }
}

impl super::Fs {
    /// The SSD tier of a tiered image: sizes, utilisation, LRU occupancy and counters.
    pub fn tier_info(&self) -> Option<crate::tier::TierInfo> {
        let i = &self.inner;
        i.tier.as_ref().map(|t| t.info(i.geo.data_blocks))
    }

    /// Starts recording every write the tier sends to its SSD (the nvmfs-2013 study's block
    /// trace), dropping what was recorded before.
    pub fn tier_trace_start(&self) {
        if let Some(t) = &self.inner.tier {
            t.st.lock().trace = Some(Vec::new());
        }
    }

    /// The SSD writes recorded since `tier_trace_start` (and stops recording).
    pub fn tier_trace_take(&self) -> Vec<crate::tier::SsdWrite> {
        self.inner
            .tier
            .as_ref()
            .and_then(|t| t.st.lock().trace.take())
            .unwrap_or_default()
    }

    /// A copy of the SSD of a tiered image on an in-memory SSD (crash checking).
    pub fn tier_ssd_snapshot(&self) -> Option<Vec<u8>> {
        self.inner.tier.as_ref().and_then(|t| t.ssd.snapshot())
    }

    /// Flushes every dirty block to the SSD and evicts every clean one from PM, so all file
    /// data is cold (tests: the crash checker starts its workloads from cold files).
    pub fn tier_evict_all(&self) -> std::io::Result<()> {
        self.tier_flush_all()?;
        let i = &self.inner;
        let Some(t) = &i.tier else {
            return Ok(());
        };
        let mut st = t.st.lock();
        while st.lru.len(List::Clean) > 0 {
            let before = st.lru.len(List::Clean);
            if i.evict(&mut st, u64::MAX, None) == 0 && st.lru.len(List::Clean) == before {
                return Err(errno(libc::EBUSY));
            }
        }
        Ok(())
    }

    /// Flushes every dirty block to the SSD (tests, and the study's "everything on the SSD"
    /// setups). Fails with ENOSPC when the SSD cannot take them.
    pub fn tier_flush_all(&self) -> std::io::Result<()> {
        let i = &self.inner;
        let Some(t) = &i.tier else {
            return Ok(());
        };
        let mut st = t.st.lock();
        while st.lru.len(List::Dirty) > 0 {
            if i.flush_batch(t, &mut st, None)? == 0 {
                return Err(errno(libc::EBUSY));
            }
        }
        Ok(())
    }
}
