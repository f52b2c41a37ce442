//! The DRAM LRU lists of a tiered image's PM data blocks (the seed's dirty and clean lists):
//! intrusive doubly linked lists over PM block numbers, so moving a block is O(1) and the
//! memory is two `u32` links, a list tag and the key the block was listed under, per PM block.
//!
//! The lists are hints, rebuilt at mount. A block freed or reused behind their back (an
//! unlink, a truncate, a directory block taking a freed slot) keeps its place until someone
//! looks at it: `listed_key` is compared with the block's slot in the hash table before any
//! flush or eviction acts on it, and a stale block is just taken off its list.

const NIL: u32 = u32::MAX;

/// Which list a block is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    /// Newer in PM than on the SSD (or not on the SSD at all).
    Dirty = 0,
    /// Equal to its SSD copy: can be evicted without a write.
    Clean = 1,
}

const NONE: u8 = 2;

pub struct Lru {
    prev: Vec<u32>,
    next: Vec<u32>,
    on: Vec<u8>,
    key: Vec<u64>,
    /// Most recently used end, per list.
    head: [u32; 2],
    /// Least recently used end, per list.
    tail: [u32; 2],
    len: [u64; 2],
}

impl Lru {
    /// Empty lists over `blocks` PM blocks.
    pub fn new(blocks: u64) -> Lru {
        let n = blocks as usize;
        Lru {
            prev: vec![NIL; n],
            next: vec![NIL; n],
            on: vec![NONE; n],
            key: vec![0; n],
            head: [NIL; 2],
            tail: [NIL; 2],
            len: [0; 2],
        }
    }

    /// The list block `b` is on.
    pub fn list_of(&self, b: u64) -> Option<List> {
        match self.on[b as usize] {
            0 => Some(List::Dirty),
            1 => Some(List::Clean),
            _ => None,
        }
    }

    /// The key block `b` was listed under.
    pub fn listed_key(&self, b: u64) -> u64 {
        self.key[b as usize]
    }

    pub fn len(&self, l: List) -> u64 {
        self.len[l as usize]
    }

    /// The least recently used block of `l`.
    pub fn oldest(&self, l: List) -> Option<u64> {
        let t = self.tail[l as usize];
        (t != NIL).then_some(t as u64)
    }

    /// The next more recently used block after `b` on its list.
    pub fn newer(&self, b: u64) -> Option<u64> {
        let p = self.prev[b as usize];
        (p != NIL).then_some(p as u64)
    }

    /// Puts `b` (holding `key`) at the most recently used end of `l`, off whatever list it
    /// was on.
    pub fn touch(&mut self, l: List, b: u64, key: u64) {
        self.remove(b);
        let (i, li) = (b as usize, l as usize);
        self.key[i] = key;
        self.on[i] = l as u8;
        self.prev[i] = NIL;
        self.next[i] = self.head[li];
        if self.head[li] != NIL {
            self.prev[self.head[li] as usize] = b as u32;
        } else {
            self.tail[li] = b as u32;
        }
        self.head[li] = b as u32;
        self.len[li] += 1;
    }

    /// Takes `b` off its list (nothing if on none).
    pub fn remove(&mut self, b: u64) {
        let i = b as usize;
        let Some(l) = self.list_of(b) else {
            return;
        };
        let li = l as usize;
        let (p, n) = (self.prev[i], self.next[i]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            self.head[li] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        } else {
            self.tail[li] = p;
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
        self.on[i] = NONE;
        self.len[li] -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(l: &Lru, list: List) -> Vec<u64> {
        let mut v = Vec::new();
        let mut b = l.oldest(list);
        while let Some(x) = b {
            v.push(x);
            b = l.newer(x);
        }
        v
    }

    #[test]
    fn lists_keep_recency_order_and_move_between_lists() {
        let mut l = Lru::new(10);
        for b in [3, 1, 4, 5] {
            l.touch(List::Dirty, b, b + 100);
        }
        assert_eq!(order(&l, List::Dirty), vec![3, 1, 4, 5]);
        l.touch(List::Dirty, 1, 101);
        assert_eq!(order(&l, List::Dirty), vec![3, 4, 5, 1]);
        l.touch(List::Clean, 4, 104);
        assert_eq!(order(&l, List::Dirty), vec![3, 5, 1]);
        assert_eq!(order(&l, List::Clean), vec![4]);
        assert_eq!((l.len(List::Dirty), l.len(List::Clean)), (3, 1));
        l.remove(3);
        l.remove(3);
        l.remove(1);
        assert_eq!(order(&l, List::Dirty), vec![5]);
        assert_eq!(l.list_of(3), None);
        assert_eq!(l.list_of(4), Some(List::Clean));
        assert_eq!(l.listed_key(4), 104);
        l.remove(5);
        l.remove(4);
        assert_eq!((l.oldest(List::Dirty), l.oldest(List::Clean)), (None, None));
        assert_eq!((l.len(List::Dirty), l.len(List::Clean)), (0, 0));
    }
}
