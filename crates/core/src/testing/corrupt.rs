//! A corpus of damaged images, built from the known image (`known_image`): at least one per
//! on-media structure and kind of damage, each with what fsck, mount and repair must do.
//!
//! For every case: `fsck -n` exits `check`; mount of the damaged image behaves as `mount`
//! (never a panic); `fsck -y` exits `repair`; when that is 1, a second check exits 0, the
//! repaired image mounts, every path of the known image outside `lost` reads back unchanged
//! and every path in `found` reappears (same type and contents) under `/lost+found`.

use super::{
    add_entry, arm_lane, entry_off, free_ino, free_slot, get_u64, inode, place_key, put_inode,
    put_u32, put_u64, reseal_superblock, slot_of, Known,
};
use crate::fsck::{EXIT_CLEAN, EXIT_CORRECTED, EXIT_UNCORRECTED};
use crate::layout::inode::{FileType, Inode};
use crate::layout::superblock::{ROOT_INO, STATE_BLOCK};
use crate::layout::BLOCK_SIZE;
use crate::mapping::hashfs::{self, RESERVED, TOMBSTONE};

/// What mounting the damaged image (read-write) does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MountExpect {
    /// Refused with `InvalidData` naming the damaged structure.
    Refuses,
    /// Mounts: the damage is not in what a mount reads and validates (operations touching it
    /// fail or see the inconsistency; fsck reports it).
    Mounts,
    /// Mounts using the superblock replica (`used_replica`).
    UsesReplica,
}

pub struct Case {
    pub name: &'static str,
    /// The damaged structure.
    pub structure: &'static str,
    /// The damage and the expected behaviour, in words.
    pub what: &'static str,
    /// Exit code of `fsck -n` on the damaged image.
    pub check: i32,
    /// Exit code of `fsck -y` on the damaged image.
    pub repair: i32,
    pub mount: MountExpect,
    /// Paths (with everything below them) the repair may lose, move or change.
    pub lost: &'static [&'static str],
    /// Paths of the known image whose node must reappear under /lost+found after repair.
    pub found: &'static [&'static str],
    pub damage: fn(&Known, &mut Vec<u8>),
}

const C: i32 = EXIT_CLEAN;
const FIXED: i32 = EXIT_CORRECTED;
const BAD: i32 = EXIT_UNCORRECTED;

fn sb_field_u64(img: &mut [u8], block: u64, field: u64, f: impl Fn(u64) -> u64) {
    let off = block * BLOCK_SIZE + field;
    let v = get_u64(img, off);
    put_u64(img, off, f(v));
    reseal_superblock(img, block);
}

fn edit_inode(k: &Known, img: &mut [u8], path: &str, f: impl FnOnce(&mut Inode)) {
    let ino = k.ino(path);
    let mut i = inode(img, &k.geo, ino);
    f(&mut i);
    put_inode(img, &k.geo, ino, &i);
}

fn root_entry(k: &Known, img: &[u8], name: &str) -> u64 {
    entry_off(img, &k.geo, ROOT_INO as u32, name.as_bytes())
        .unwrap_or_else(|| panic!("no entry {name}"))
}

/// Stores `v` in a free slot: keys where a lookup finds them, other values in the last one.
fn set_free_slot(k: &Known, img: &mut [u8], v: u64) {
    if hashfs::split_key(v).is_some() {
        place_key(img, &k.geo, v);
    } else {
        let s = free_slot(img, &k.geo);
        put_u64(img, k.geo.slot_off(s), v);
    }
}

/// The corpus.
pub fn corpus() -> Vec<Case> {
    vec![
        Case {
            name: "sb-primary-lost",
            structure: "superblock",
            what: "primary superblock zeroed: check reports it (4), mount uses the replica, \
                   repair rewrites the primary from the replica (1)",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::UsesReplica,
            lost: &[],
            found: &[],
            damage: |_, img| img[..BLOCK_SIZE as usize].fill(0),
        },
        Case {
            name: "sb-primary-bad-magic",
            structure: "superblock",
            what: "primary magic damaged: as a lost primary",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::UsesReplica,
            lost: &[],
            found: &[],
            damage: |_, img| img[3] ^= 0x40,
        },
        Case {
            name: "sb-primary-bad-geometry",
            structure: "superblock",
            what: "primary data_blocks changed with a valid checksum: fails geometry \
                   validation, so as a lost primary",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::UsesReplica,
            lost: &[],
            found: &[],
            damage: |_, img| sb_field_u64(img, 0, 104, |v| v + 600),
        },
        Case {
            name: "sb-replica-damaged",
            structure: "superblock replica",
            what: "replica total_blocks bit flipped: check reports it, mount does not read \
                   it, repair rewrites it from the primary",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |_, img| img[BLOCK_SIZE as usize + 40] ^= 1,
        },
        Case {
            name: "sb-both-bad-magic",
            structure: "superblock",
            what: "magic damaged in both copies: not an nvmfs image any more; mount refuses, \
                   repair cannot rebuild the geometry (4, nothing written)",
            check: BAD,
            repair: BAD,
            mount: MountExpect::Refuses,
            lost: &[],
            found: &[],
            damage: |_, img| {
                img[0] = b'X';
                img[BLOCK_SIZE as usize] = b'X';
            },
        },
        Case {
            name: "sb-geometry-larger-than-image",
            structure: "superblock",
            what: "image truncated by 16 blocks: the geometry no longer fits; mount refuses, \
                   repair cannot fix it (4)",
            check: BAD,
            repair: BAD,
            mount: MountExpect::Refuses,
            lost: &[],
            found: &[],
            damage: |_, img| img.truncate(img.len() - 16 * BLOCK_SIZE as usize),
        },
        Case {
            name: "state-damaged",
            structure: "mount-state block",
            what: "state block checksum broken: indistinguishable from a torn write, so the \
                   image is treated as unclean: check is clean with a recovery note (0), \
                   mount recovers, repair recovers and rewrites the block clean (1)",
            check: C,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |_, img| img[(STATE_BLOCK * BLOCK_SIZE) as usize + 9] ^= 0x10,
        },
        Case {
            name: "journal-torn",
            structure: "journal lane",
            what: "armed record with a bad checksum on a clean image: check reports it, \
                   mount clears it, repair clears it",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| {
                let off = k.inode_off("/a.txt");
                arm_lane(img, &k.geo, 3, &[(off, vec![0xee; 16])], true);
            },
        },
        Case {
            name: "journal-outside-image",
            structure: "journal lane",
            what: "armed record (valid checksum) whose undo entry lies past the end of the \
                   image: mount refuses, repair clears it without applying it",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Refuses,
            lost: &[],
            found: &[],
            damage: |k, img| {
                let past = k.geo.total_blocks * BLOCK_SIZE + 4096;
                arm_lane(img, &k.geo, 5, &[(past, vec![1; 8])], false);
            },
        },
        Case {
            name: "inode-bad-type",
            structure: "inode",
            what: "file inode with an invalid type in its mode: mount refuses, repair clears \
                   the inode, its entry and its blocks",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Refuses,
            lost: &["/a.txt"],
            found: &[],
            damage: |k, img| edit_inode(k, img, "/a.txt", |i| i.mode = 0o170644),
        },
        Case {
            name: "inode-bad-size",
            structure: "inode",
            what: "file size past the 16 TiB limit: mount refuses, repair clears the file",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Refuses,
            lost: &["/big.bin"],
            found: &[],
            damage: |k, img| edit_inode(k, img, "/big.bin", |i| i.size = 1 << 50),
        },
        Case {
            name: "inode-dir-fields-on-file",
            structure: "inode",
            what: "directory fields set on a regular file: mount refuses, repair zeroes them \
                   and keeps the file",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Refuses,
            lost: &[],
            found: &[],
            damage: |k, img| edit_inode(k, img, "/dir1/nested.txt", |i| i.dir_units = 3),
        },
        Case {
            name: "root-not-a-directory",
            structure: "inode (root)",
            what: "root mode says regular file: mount refuses, repair makes it a directory \
                   again with all its entries",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Refuses,
            lost: &[],
            found: &[],
            damage: |k, img| {
                let mut i = inode(img, &k.geo, ROOT_INO as u32);
                i.mode = libc::S_IFREG | 0o755;
                put_inode(img, &k.geo, ROOT_INO as u32, &i);
            },
        },
        Case {
            name: "root-nlink-zero",
            structure: "inode (root)",
            what: "root link count 0: mount refuses, repair recomputes it",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Refuses,
            lost: &[],
            found: &[],
            damage: |k, img| {
                let off = k.geo.inode_off(ROOT_INO) + 4;
                put_u32(img, off, 0);
            },
        },
        Case {
            name: "map-inode-outside-table",
            structure: "HashFS entry",
            what: "a free slot holds a key whose inode number is past the inode table: mount \
                   ignores it on a clean image, repair makes it a tombstone",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| set_free_slot(k, img, hashfs::key(k.geo.inode_count as u32 + 7, 0)),
        },
        Case {
            name: "map-past-eof",
            structure: "HashFS entry",
            what: "a key mapping a block far past a file's end: repair frees it",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| set_free_slot(k, img, hashfs::key(k.ino("/a.txt"), 12)),
        },
        Case {
            name: "map-freed-inode",
            structure: "HashFS entry",
            what: "a key owned by a free inode: repair frees it",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| {
                let ino = free_ino(img, &k.geo);
                set_free_slot(k, img, hashfs::key(ino, 0))
            },
        },
        Case {
            name: "map-invalid-value",
            structure: "HashFS entry",
            what: "a slot value that is neither free, tombstone, reserved nor a key",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| set_free_slot(k, img, 7),
        },
        Case {
            name: "map-reserved-on-clean",
            structure: "HashFS entry",
            what: "a reserved slot on a cleanly unmounted image",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| set_free_slot(k, img, RESERVED),
        },
        Case {
            name: "block-owned-twice",
            structure: "HashFS entry",
            what: "a file block mapped by two slots (in HashFS a physical block has one \
                   owner, so a double owner is one key in two slots): repair keeps the copy \
                   lookups find",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| set_free_slot(k, img, hashfs::key(k.ino("/big.bin"), 3)),
        },
        Case {
            name: "block-count-wrong",
            structure: "inode",
            what: "a file's block count disagrees with its mappings: repair recomputes it",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| edit_inode(k, img, "/big.bin", |i| i.blocks = 3),
        },
        Case {
            name: "symlink-target-unmapped",
            structure: "HashFS entry",
            what: "the block holding a long symlink's target is unmapped: repair clears the \
                   symlink",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &["/long-link"],
            found: &[],
            damage: |k, img| {
                let s = slot_of(img, &k.geo, k.ino("/long-link"), 0).expect("mapped");
                put_u64(img, k.geo.slot_off(s), TOMBSTONE);
            },
        },
        Case {
            name: "dir-block-unmapped",
            structure: "HashFS entry (directory block)",
            what: "a directory's only block is unmapped: listing it fails with EIO; repair \
                   empties the directory and reconnects what it held to /lost+found",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &["/dir1"],
            found: &["/dir1/nested.txt", "/dir1/sub/deep.txt"],
            damage: |k, img| {
                let s = slot_of(img, &k.geo, k.ino("/dir1"), 0).expect("mapped");
                put_u64(img, k.geo.slot_off(s), TOMBSTONE);
            },
        },
        Case {
            name: "dirent-free-inode",
            structure: "directory entry",
            what: "an entry re-pointed at a free inode: repair removes it and reconnects the \
                   file it named (still linked) to /lost+found",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &["/a.txt"],
            found: &["/a.txt"],
            damage: |k, img| {
                let off = root_entry(k, img, "a.txt");
                let ino = free_ino(img, &k.geo);
                put_u32(img, off, ino);
            },
        },
        Case {
            name: "dirent-wrong-type",
            structure: "directory entry",
            what: "an entry's type differs from its inode's: repair sets the entry's type",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| {
                let off = root_entry(k, img, "a.txt");
                let w = get_u64(img, off) & !(0xf << 40) | 2 << 40;
                put_u64(img, off, w);
            },
        },
        Case {
            name: "dirent-bad-name",
            structure: "directory entry",
            what: "an entry name containing '/': repair removes the entry and reconnects the \
                   file to /lost+found",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &["/a.txt"],
            found: &["/a.txt"],
            damage: |k, img| {
                let off = root_entry(k, img, "a.txt");
                img[off as usize + 8 + 1] = b'/';
            },
        },
        Case {
            name: "dirent-duplicate-name",
            structure: "directory entry",
            what: "two entries with one name in a directory: repair removes the later one \
                   (the file keeps its other link)",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &["/hard1"],
            found: &[],
            damage: |k, img| {
                let off = root_entry(k, img, "hard1") as usize;
                img[off + 8..off + 13].copy_from_slice(b"a.txt");
            },
        },
        Case {
            name: "dir-detached",
            structure: "directory tree",
            what: "a directory's entry removed (counts adjusted): it is unreachable with \
                   links; repair reconnects it to /lost+found",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &["/dir2"],
            found: &["/dir2"],
            damage: |k, img| {
                let off = root_entry(k, img, "dir2");
                put_u64(img, off, 0);
                let root = ROOT_INO as u32;
                let mut r = inode(img, &k.geo, root);
                r.nlink -= 1;
                r.dir_entries -= 1;
                put_inode(img, &k.geo, root, &r);
            },
        },
        Case {
            name: "dir-cycle",
            structure: "directory tree",
            what: "dir1 unlinked from the root and linked into its own subdirectory (counts \
                   and `..` consistent): a detached cycle; mount works, repair breaks the \
                   cycle and reconnects it to /lost+found",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &["/dir1"],
            found: &["/dir1/nested.txt", "/dir1/sub/deep.txt"],
            damage: |k, img| {
                let root = ROOT_INO as u32;
                let (d1, sub) = (k.ino("/dir1"), k.ino("/dir1/sub"));
                let off = root_entry(k, img, "dir1");
                put_u64(img, off, 0);
                let mut r = inode(img, &k.geo, root);
                r.nlink -= 1;
                r.dir_entries -= 1;
                put_inode(img, &k.geo, root, &r);
                add_entry(img, &k.geo, sub, b"loop", d1, FileType::Dir);
                let mut i = inode(img, &k.geo, d1);
                i.parent = sub;
                put_inode(img, &k.geo, d1, &i);
            },
        },
        Case {
            name: "dir-listed-twice",
            structure: "directory tree",
            what: "a directory hard-linked into a second directory: repair removes the entry \
                   its `..` does not name",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| {
                let sub = k.ino("/dir1/sub");
                add_entry(img, &k.geo, sub, b"again", k.ino("/dir2"), FileType::Dir);
            },
        },
        Case {
            name: "wrong-link-count-file",
            structure: "inode",
            what: "a file's link count is 5 with one entry: repair sets it to 1",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| edit_inode(k, img, "/a.txt", |i| i.nlink = 5),
        },
        Case {
            name: "wrong-link-count-dir",
            structure: "inode",
            what: "a directory's link count ignores its subdirectory: repair recomputes it",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| edit_inode(k, img, "/dir1", |i| i.nlink = 2),
        },
        Case {
            name: "orphan-linked",
            structure: "inode",
            what: "an in-use file with a link count of 1 but no entry: repair reconnects it \
                   to /lost+found",
            check: BAD,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| {
                let ino = free_ino(img, &k.geo);
                let i = Inode {
                    mode: libc::S_IFREG | 0o600,
                    nlink: 1,
                    generation: 1,
                    ..Default::default()
                };
                put_inode(img, &k.geo, ino, &i);
            },
        },
        Case {
            name: "orphan-unlinked",
            structure: "inode",
            what: "an in-use file with no links and no entry on a clean image (a leaked \
                   open-unlinked file) holding a block: check is clean with a recovery note \
                   (0), mount frees it, repair frees it (1)",
            check: C,
            repair: FIXED,
            mount: MountExpect::Mounts,
            lost: &[],
            found: &[],
            damage: |k, img| {
                let ino = free_ino(img, &k.geo);
                let i = Inode {
                    mode: libc::S_IFREG | 0o600,
                    nlink: 0,
                    size: 4096,
                    blocks: 1,
                    generation: 1,
                    ..Default::default()
                };
                put_inode(img, &k.geo, ino, &i);
                set_free_slot(k, img, hashfs::key(ino, 0));
            },
        },
    ]
}
