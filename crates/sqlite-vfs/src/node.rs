//! What the connections of this process share about one open file (one inode): its SQLite
//! lock state, its WAL shared memory and its direct maps. A node lives while some connection
//! has the file open; keying by inode makes two paths to one file (a hard link, a symlink
//! SQLite did not resolve) share their locks as they would with the unix VFS.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::fetch::Maps;
use crate::lock::FileLocks;
use crate::shm::ShmNode;

/// The shared state of one open file.
#[derive(Default)]
pub(crate) struct Node {
    pub locks: Mutex<FileLocks>,
    pub shm: Mutex<ShmNode>,
    pub maps: Mutex<Maps>,
}

/// The nodes of one mount, each with the number of open files that use it.
#[derive(Default)]
pub(crate) struct Nodes {
    table: Mutex<HashMap<u64, (Arc<Node>, usize)>>,
}

impl Nodes {
    /// The node of `ino`, created on the first open.
    pub fn acquire(&self, ino: u64) -> Arc<Node> {
        let mut t = self.table.lock();
        let e = t.entry(ino).or_default();
        e.1 += 1;
        e.0.clone()
    }

    /// One open file of `ino` closed; the last close drops the node (and with it the shared
    /// memory and the maps).
    pub fn release(&self, ino: u64) {
        let mut t = self.table.lock();
        if let Some(e) = t.get_mut(&ino) {
            e.1 -= 1;
            if e.1 == 0 {
                t.remove(&ino);
            }
        }
    }
}
