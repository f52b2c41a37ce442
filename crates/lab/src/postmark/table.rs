//! Postmark's file table: twice `number` slots, a slot of size 0 is free.
//!
//! New files take the slot after the last one handed out while that is free,
//! else the first free slot from the start (`find_free_file`); files to read,
//! append or delete are drawn uniformly over all slots, drawing again until
//! one is in use (`find_used_file`), so holes cost extra draws, exactly as in
//! 1.51.

use super::rng::Mt19937;

/// One slot: a file's name and its size as Postmark tracks it.
#[derive(Debug)]
pub struct Slot<N> {
    pub name: Option<N>,
    /// 0 means free (Postmark's files are never empty: sizes start at 1).
    pub size: u32,
}

/// The table of one Postmark instance.
#[derive(Debug)]
pub struct FileTable<N> {
    slots: Vec<Slot<N>>,
    /// `file_allocated`: the slot after the last one handed out.
    allocated: usize,
    used: usize,
}

impl<N> FileTable<N> {
    /// A table for `number` files: `2 * number` free slots.
    pub fn new(number: u32) -> Self {
        let slots = (0..2 * number as usize)
            .map(|_| Slot {
                name: None,
                size: 0,
            })
            .collect();
        FileTable {
            slots,
            allocated: 0,
            used: 0,
        }
    }

    /// Number of slots (`simultaneous << 1`).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Slots in use.
    pub fn used(&self) -> usize {
        self.used
    }

    /// `find_free_file`: a free slot, or `None` when the table is full (then
    /// Postmark's create does nothing, drawing nothing).
    pub fn find_free(&mut self) -> Option<usize> {
        let next = self.allocated;
        if next < self.slots.len() && self.slots[next].size == 0 {
            self.allocated += 1;
            return Some(next);
        }
        let i = self.slots.iter().position(|s| s.size == 0)?;
        self.allocated = i + 1;
        Some(i)
    }

    /// `find_used_file`: draws `RND(2 * number)` until the slot is in use;
    /// `None` (drawing nothing) when no slot is, where Postmark would loop
    /// forever (its caller stops the run before that can happen).
    pub fn find_used(&self, rng: &mut Mt19937) -> Option<usize> {
        if self.used == 0 {
            return None;
        }
        let n = self.slots.len() as i64;
        loop {
            let i = rng.rnd(n) as usize;
            if self.slots[i].size != 0 {
                return Some(i);
            }
        }
    }

    pub fn get(&self, i: usize) -> &Slot<N> {
        &self.slots[i]
    }

    /// Puts a new file of `size` (at least 1) in free slot `i`.
    pub fn fill(&mut self, i: usize, name: N, size: u32) {
        debug_assert!(size > 0 && self.slots[i].size == 0);
        self.slots[i] = Slot {
            name: Some(name),
            size,
        };
        self.used += 1;
    }

    /// Records that the file in slot `i` grew by `bytes`.
    pub fn grow(&mut self, i: usize, bytes: u32) {
        self.slots[i].size += bytes;
    }

    /// Frees slot `i`, returning its name.
    pub fn free(&mut self, i: usize) -> Option<N> {
        let slot = &mut self.slots[i];
        if slot.size == 0 {
            return None;
        }
        slot.size = 0;
        self.used -= 1;
        slot.name.take()
    }
}
