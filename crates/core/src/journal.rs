//! Per-lane undo journal: the one mechanism that makes a metadata operation atomic.
//!
//! A transaction stages its in-place writes (`write`) and its writes to free space (`fresh`).
//! `commit` then:
//! 1. persists the fresh writes and an undo record (old bytes of every staged range) in the
//!    lane, with a checksum; fence — the record is armed;
//! 2. applies the staged writes in place and persists them; fence — the operation is done;
//! 3. clears the record's state word; fence — so recovery will not roll it back.
//!
//! Recovery rolls back every armed record whose checksum holds, newest change first. A record
//! whose checksum fails was torn while arming, before anything was changed in place, so it is
//! simply cleared. Lanes let threads commit in parallel; a thread keeps its lane.

use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};

use crate::layout::superblock::Geometry;
use crate::layout::{corrupted, get_u32, get_u64, put_u32, put_u64, Corrupted, BLOCK_SIZE};
use crate::media::Pm;

/// State word of an armed record ("NVJOURNL" read as little-endian).
pub const ARMED: u64 = u64::from_le_bytes(*b"NVJOURNL");
const O_STATE: usize = 0;
const O_SEQ: usize = 8;
const O_COUNT: usize = 16;
const O_PAYLOAD_LEN: usize = 20;
const O_CRC: usize = 24;
pub const HEADER_LEN: usize = 32;
/// Each undo entry: offset u64, length u32, reserved u32, then the old bytes padded to 8.
const ENTRY_HEADER: usize = 16;

#[derive(Default)]
struct Staging {
    /// Undo entries as they will be laid out after the header.
    undo: Vec<u8>,
    count: u32,
    /// In-place writes to apply: (offset, start in `redo_bytes`, length).
    redo: Vec<(u64, usize, usize)>,
    redo_bytes: Vec<u8>,
    /// Free-space writes already stored, to persist before arming.
    fresh: Vec<(u64, usize)>,
    /// The lane's last record number (informational: recovery does not order by it). Per
    /// lane, under the lane's lock: one counter for all lanes was a cache line that every
    /// transaction of every thread wrote.
    seq: u64,
}

impl Staging {
    fn clear(&mut self) {
        self.undo.clear();
        self.count = 0;
        self.redo.clear();
        self.redo_bytes.clear();
        self.fresh.clear();
    }
}

pub struct Journal {
    /// Each on its own cache lines: threads on different lanes share none.
    lanes: Vec<CachePadded<Mutex<Staging>>>,
    lane_offs: Vec<u64>,
    lane_capacity: usize,
}

static NEXT_THREAD_LANE: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static THREAD_LANE: usize = NEXT_THREAD_LANE.fetch_add(1, Ordering::Relaxed);
}

/// The small per-thread number that picks a journal lane and an inode group.
pub fn thread_slot() -> usize {
    THREAD_LANE.with(|l| *l)
}

impl Journal {
    pub fn new(geo: &Geometry) -> Journal {
        Journal {
            lanes: (0..geo.journal_lanes)
                .map(|_| CachePadded::new(Mutex::new(Staging::default())))
                .collect(),
            lane_offs: (0..geo.journal_lanes).map(|l| geo.lane_off(l)).collect(),
            lane_capacity: geo.lane_blocks as usize * BLOCK_SIZE as usize,
        }
    }

    /// Starts a transaction on this thread's lane.
    pub fn begin<'a>(&'a self, pm: &'a Pm) -> Tx<'a> {
        let lane = thread_slot() % self.lanes.len();
        let mut staging = self.lanes[lane].lock();
        staging.clear();
        Tx {
            pm,
            staging,
            lane_off: self.lane_offs[lane],
            capacity: self.lane_capacity,
            armed: false,
        }
    }
}

/// An open transaction. Dropping it without `commit` discards the staged writes (the fresh
/// writes already stored are in free space and harmless). A panic inside `commit` after the
/// record was armed rolls the transaction back as it unwinds (`Drop`), before the lane's lock
/// is released: otherwise the lane's next transaction would overwrite the only undo record
/// of a half-applied one.
pub struct Tx<'a> {
    pm: &'a Pm,
    staging: MutexGuard<'a, Staging>,
    lane_off: u64,
    capacity: usize,
    /// From just before arming until the record is cleared.
    armed: bool,
}

impl<'a> Tx<'a> {
    /// The region this transaction writes.
    pub fn pm(&self) -> &'a Pm {
        self.pm
    }

    /// Stages an in-place write of `data` at `off`, logging the bytes there now (read
    /// straight into the record being built: no buffer per write).
    pub fn write(&mut self, off: u64, data: &[u8]) {
        let pm = self.pm;
        self.stage(off, data, |old| pm.read(off, old));
    }

    /// Stages an in-place write whose undo value is `old` rather than the current bytes (for
    /// an entry claimed in DRAM-visible form before the transaction, such as a reserved
    /// hash-table slot).
    pub fn write_with_old(&mut self, off: u64, old: &[u8], data: &[u8]) {
        assert_eq!(old.len(), data.len());
        self.stage(off, data, |dst| dst.copy_from_slice(old));
    }

    /// Appends an undo entry for `data` at `off` whose old bytes `fill_old` writes, and the
    /// redo write itself.
    fn stage(&mut self, off: u64, data: &[u8], fill_old: impl FnOnce(&mut [u8])) {
        let s = &mut *self.staging;
        s.undo.extend_from_slice(&off.to_le_bytes());
        s.undo.extend_from_slice(&(data.len() as u32).to_le_bytes());
        s.undo.extend_from_slice(&[0; 4]);
        let at = s.undo.len();
        s.undo.resize(at + data.len(), 0);
        fill_old(&mut s.undo[at..]);
        s.undo.resize(s.undo.len().next_multiple_of(8), 0);
        s.count += 1;
        let start = s.redo_bytes.len();
        s.redo_bytes.extend_from_slice(data);
        s.redo.push((off, start, data.len()));
        assert!(
            HEADER_LEN + s.undo.len() <= self.capacity,
            "transaction larger than a journal lane ({} bytes)",
            s.undo.len()
        );
    }

    pub fn write_u64(&mut self, off: u64, v: u64) {
        self.write(off, &v.to_le_bytes());
    }

    /// Stores `data` at `off` in free space now; it is persisted before the record is armed,
    /// so it is durable before anything points at it.
    pub fn fresh(&mut self, off: u64, data: &[u8]) {
        self.pm.write(off, data);
        self.staging.fresh.push((off, data.len()));
    }

    /// Makes the staged writes durable and atomic (see the module comment).
    pub fn commit(mut self) {
        let pm = self.pm;
        self.staging.seq += 1;
        let s = &*self.staging;
        for &(off, len) in &s.fresh {
            pm.persist(off, len);
        }
        if s.redo.is_empty() {
            pm.fence();
            return;
        }
        self.armed = true;
        self.arm(s);
        for (k, &(off, start, len)) in s.redo.iter().enumerate() {
            if k == 1 {
                crate::hook::at(crate::hook::Point::TxApplied);
            }
            put_in_place(pm, off, &s.redo_bytes[start..start + len]);
            pm.persist(off, len);
        }
        pm.fence();
        pm.store_u64(self.lane_off + O_STATE as u64, 0);
        pm.persist(self.lane_off, 8);
        pm.fence();
        self.armed = false;
    }

    fn arm(&self, s: &Staging) {
        let pm = self.pm;
        let mut head = [0u8; HEADER_LEN];
        put_u64(&mut head, O_SEQ, s.seq);
        put_u32(&mut head, O_COUNT, s.count);
        put_u32(&mut head, O_PAYLOAD_LEN, s.undo.len() as u32);
        let crc = record_crc(&head, &s.undo);
        put_u32(&mut head, O_CRC, crc);
        pm.write(self.lane_off + HEADER_LEN as u64, &s.undo);
        // Header fields before the state word: stores to one line persist in order, so a
        // durable state word implies a durable header.
        pm.write(self.lane_off + 8, &head[8..]);
        pm.store_u64(self.lane_off, ARMED);
        pm.persist(self.lane_off, HEADER_LEN + s.undo.len());
        pm.fence();
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.roll_back_staged();
        }
    }
}

impl Tx<'_> {
    /// Restores the old bytes of every staged write, newest first, and clears the record, as
    /// recovery's `roll_back` would from the media copy. Only while unwinding from `commit`;
    /// a second panic in here aborts the process, which leaves the record armed for the next
    /// mount to roll back.
    fn roll_back_staged(&self) {
        let s = &*self.staging;
        let mut entries = Vec::with_capacity(s.count as usize);
        let mut at = 0;
        for _ in 0..s.count {
            let off = get_u64(&s.undo, at);
            let len = get_u32(&s.undo, at + 8) as usize;
            let old = &s.undo[at + ENTRY_HEADER..at + ENTRY_HEADER + len];
            entries.push((off, old));
            at = (at + ENTRY_HEADER + len).next_multiple_of(8);
        }
        for &(off, old) in entries.iter().rev() {
            put_in_place(self.pm, off, old);
            self.pm.persist(off, old.len());
        }
        self.pm.fence();
        self.pm.store_u64(self.lane_off + O_STATE as u64, 0);
        self.pm.persist(self.lane_off, 8);
        self.pm.fence();
    }
}

/// Stores a transaction's in-place bytes (new on commit, old on roll-back). Whole aligned
/// words go as atomic word stores: hash-table slots, directory headers and inode records are
/// read concurrently, word by word and without a lock (`load_u64`), and must never be seen
/// torn nor race a plain copy. Anything else is a plain copy under the caller's locks.
fn put_in_place(pm: &Pm, off: u64, data: &[u8]) {
    if off.is_multiple_of(8) && data.len().is_multiple_of(8) {
        pm.store_words(off, data);
    } else {
        pm.write(off, data);
    }
}

fn record_crc(head: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&head[8..O_CRC]), payload)
}

/// What recovery found in one lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaneState {
    Idle,
    /// An armed record with `entries` undo entries.
    Armed {
        entries: u32,
    },
    /// An armed state word whose record fails its checksum (torn while arming).
    Torn,
}

/// One undo entry of an armed record.
pub struct UndoEntry {
    pub off: u64,
    pub old: Vec<u8>,
}

/// Reads lane `lane` and decodes its record. Entries must lie between the start of the inode
/// table and `limit` (the end of the image; directory entries live in data blocks): a record
/// pointing elsewhere is damaged, never applied.
pub fn read_lane(
    pm: &Pm,
    geo: &Geometry,
    lane: u32,
    limit: u64,
) -> Result<(LaneState, Vec<UndoEntry>), Corrupted> {
    let off = geo.lane_off(lane);
    let cap = geo.lane_blocks as usize * BLOCK_SIZE as usize;
    let rec = &pm.read_vec(off, cap);
    if get_u64(rec, O_STATE) != ARMED {
        return Ok((LaneState::Idle, Vec::new()));
    }
    let count = get_u32(rec, O_COUNT);
    let len = get_u32(rec, O_PAYLOAD_LEN) as usize;
    if len > cap - HEADER_LEN {
        return Ok((LaneState::Torn, Vec::new()));
    }
    let payload = &rec[HEADER_LEN..HEADER_LEN + len];
    if get_u32(rec, O_CRC) != record_crc(rec, payload) {
        return Ok((LaneState::Torn, Vec::new()));
    }
    let mut entries = Vec::new();
    let mut at = 0usize;
    for _ in 0..count {
        let bad = || {
            corrupted(
                format!("journal lane {lane}: undo entry"),
                off + (HEADER_LEN + at) as u64,
            )
        };
        if at + ENTRY_HEADER > len {
            return Err(bad());
        }
        let e_off = get_u64(payload, at);
        let e_len = get_u32(payload, at + 8) as usize;
        let data_at = at + ENTRY_HEADER;
        if data_at + e_len > len || e_off.checked_add(e_len as u64).is_none_or(|e| e > limit) {
            return Err(bad());
        }
        // The journal itself is never a target.
        if e_off < geo.itable_start * BLOCK_SIZE {
            return Err(bad());
        }
        entries.push(UndoEntry {
            off: e_off,
            old: payload[data_at..data_at + e_len].to_vec(),
        });
        at = (data_at + e_len).next_multiple_of(8);
    }
    Ok((LaneState::Armed { entries: count }, entries))
}

/// Rolls back an armed record and clears the lane.
pub fn roll_back(pm: &Pm, geo: &Geometry, lane: u32, entries: &[UndoEntry]) {
    for e in entries.iter().rev() {
        put_in_place(pm, e.off, &e.old);
        pm.persist(e.off, e.old.len());
    }
    pm.fence();
    clear_lane(pm, geo, lane);
}

/// Clears a lane's state word (after a roll-back, or of a torn record).
pub fn clear_lane(pm: &Pm, geo: &Geometry, lane: u32) {
    let off = geo.lane_off(lane);
    pm.store_u64(off, 0);
    pm.persist(off, 8);
    pm.fence();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (Pm, Geometry) {
        let geo = Geometry::compute(256, None).unwrap();
        (Pm::in_memory(256 * BLOCK_SIZE), geo)
    }

    #[test]
    fn committed_tx_leaves_lane_idle() {
        let (pm, geo) = setup();
        let j = Journal::new(&geo);
        let target = geo.itable_start * BLOCK_SIZE + 128;
        let mut tx = j.begin(&pm);
        tx.write(target, &[9; 20]);
        tx.commit();
        assert_eq!(&pm.read_vec(target, 20), &[9; 20]);
        for lane in 0..geo.journal_lanes {
            let (state, _) = read_lane(&pm, &geo, lane, geo.total_blocks * BLOCK_SIZE).unwrap();
            assert_eq!(state, LaneState::Idle);
        }
    }

    #[test]
    fn armed_record_rolls_back() {
        let (pm, geo) = setup();
        let j = Journal::new(&geo);
        let a = geo.itable_start * BLOCK_SIZE + 256;
        let b = geo.hash_start * BLOCK_SIZE + 8;
        pm.write(a, &[1; 16]);
        let mut tx = j.begin(&pm);
        tx.write(a, &[2; 16]);
        tx.write_with_old(b, &0u64.to_le_bytes(), &5u64.to_le_bytes());
        let lane = (thread_slot() % geo.journal_lanes as usize) as u32;
        // Arm by hand and apply, as if power failed before the record was cleared.
        tx.arm(&tx.staging);
        pm.write(a, &[2; 16]);
        pm.store_u64(b, 5);
        drop(tx);
        let (state, entries) = read_lane(&pm, &geo, lane, geo.total_blocks * BLOCK_SIZE).unwrap();
        assert_eq!(state, LaneState::Armed { entries: 2 });
        roll_back(&pm, &geo, lane, &entries);
        assert_eq!(&pm.read_vec(a, 16), &[1; 16]);
        assert_eq!(pm.load_u64(b), 0);
        assert_eq!(
            read_lane(&pm, &geo, lane, geo.total_blocks * BLOCK_SIZE)
                .unwrap()
                .0,
            LaneState::Idle
        );
    }

    /// A panic between arming and clearing (here after the first of two in-place writes) must
    /// not leave the record for the lane's next transaction to overwrite: the half-applied
    /// transaction would then survive a crash with no undo record left.
    #[test]
    fn panic_mid_commit_leaves_no_half_applied_transaction() {
        let (pm, geo) = setup();
        let j = Journal::new(&geo);
        let (a, b, c) = (
            geo.itable_start * BLOCK_SIZE + 256,
            geo.itable_start * BLOCK_SIZE + 512,
            geo.itable_start * BLOCK_SIZE + 1024,
        );
        pm.write(a, &[1; 16]);
        pm.write(b, &[1; 16]);
        crate::hook::set(|p| {
            if p == crate::hook::Point::TxApplied {
                panic!("injected panic mid-commit");
            }
        });
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut tx = j.begin(&pm);
            tx.write(a, &[2; 16]);
            tx.write(b, &[2; 16]);
            tx.commit();
        }));
        crate::hook::clear();
        assert!(r.is_err(), "the hook did not run");
        // The lane's next transaction, then a crash: recovery rolls back what is armed.
        let mut tx = j.begin(&pm);
        tx.write(c, &[3; 8]);
        tx.commit();
        for lane in 0..geo.journal_lanes {
            let limit = geo.total_blocks * BLOCK_SIZE;
            if let (LaneState::Armed { .. }, entries) = read_lane(&pm, &geo, lane, limit).unwrap() {
                roll_back(&pm, &geo, lane, &entries);
            }
        }
        assert_eq!(
            &pm.read_vec(a, 16),
            &[1; 16],
            "half of the panicked transaction stayed"
        );
        assert_eq!(&pm.read_vec(b, 16), &[1; 16]);
        assert_eq!(&pm.read_vec(c, 8), &[3; 8]);
    }

    #[test]
    fn torn_record_detected() {
        let (pm, geo) = setup();
        let j = Journal::new(&geo);
        let a = geo.itable_start * BLOCK_SIZE + 256;
        let mut tx = j.begin(&pm);
        tx.write(a, &[2; 16]);
        tx.arm(&tx.staging);
        drop(tx);
        let lane = (thread_slot() % geo.journal_lanes as usize) as u32;
        let off = geo.lane_off(lane) + HEADER_LEN as u64 + 20;
        pm.write(off, &[0xff]);
        assert_eq!(
            read_lane(&pm, &geo, lane, geo.total_blocks * BLOCK_SIZE)
                .unwrap()
                .0,
            LaneState::Torn
        );
    }
}
