//! Shared support for the nvmfs fuzz targets: the base images (built once per process) and
//! the input format, a list of byte patches applied to a copy of a base image.
//!
//! Input layout: one flags byte, then records `[offset: u32 LE][len: u8][len % 64 + 1 bytes]`
//! (the last record may be short). At most `MAX_PATCHES` records are applied. Each target
//! maps `offset` into the region it fuzzes. The flags ask for checksums to be recomputed
//! after patching, so that the fuzzer can get past them and reach the code behind them:
//! - bit 0: primary superblock (block 0), bit 1: replica (block 1);
//! - bit 2: mount-state block (block 2);
//! - bit 3: every armed journal lane whose payload fits its lane.

use std::sync::OnceLock;

use nvmfs::journal;
use nvmfs::layout::state::{STATE_LEN, STATE_MOUNTED};
use nvmfs::layout::superblock::{Geometry, STATE_BLOCK};
use nvmfs::layout::BLOCK_SIZE;
use nvmfs::media::Pm;
use nvmfs::testing::{
    arm_lane, known_image_sized, read_tree, reseal_superblock, set_mount_state, slot_of, Tree,
};
use nvmfs::{Fs, MountOptions};

/// Size of the base images: 512 KiB (128 blocks), 32 inodes.
pub const IMAGE_BYTES: u64 = 512 << 10;
pub const IMAGE_INODES: u64 = 32;
pub const MAX_PATCHES: usize = 64;

pub const RESEAL_SB0: u8 = 1;
pub const RESEAL_SB1: u8 = 2;
pub const RESEAL_STATE: u8 = 4;
pub const RESEAL_LANES: u8 = 8;

/// A base image and what it holds.
pub struct Base {
    pub image: Vec<u8>,
    pub geo: Geometry,
    pub tree: Tree,
}

/// A parsed input.
pub struct Input<'a> {
    pub flags: u8,
    pub patches: Vec<(u32, &'a [u8])>,
}

pub fn parse(data: &[u8]) -> Input<'_> {
    let Some((&flags, mut rest)) = data.split_first() else {
        return Input {
            flags: 0,
            patches: Vec::new(),
        };
    };
    let mut patches = Vec::new();
    while rest.len() >= 5 && patches.len() < MAX_PATCHES {
        let off = u32::from_le_bytes(rest[..4].try_into().unwrap());
        let len = (rest[4] as usize % 64 + 1).min(rest.len() - 5);
        if len == 0 {
            break;
        }
        patches.push((off, &rest[5..5 + len]));
        rest = &rest[5 + len..];
    }
    Input { flags, patches }
}

/// Writes `bytes` at `off`, cut at the end of `img`.
pub fn put(img: &mut [u8], off: u64, bytes: &[u8]) {
    let Ok(off) = usize::try_from(off) else {
        return;
    };
    if off >= img.len() {
        return;
    }
    let n = bytes.len().min(img.len() - off);
    img[off..off + n].copy_from_slice(&bytes[..n]);
}

/// Applies the checksum fix-ups the flags ask for.
pub fn reseal(img: &mut [u8], geo: &Geometry, flags: u8) {
    if flags & RESEAL_SB0 != 0 {
        reseal_superblock(img, 0);
    }
    if flags & RESEAL_SB1 != 0 {
        reseal_superblock(img, 1);
    }
    if flags & RESEAL_STATE != 0 {
        let off = (STATE_BLOCK * BLOCK_SIZE) as usize;
        let crc = crc32c::crc32c(&img[off..off + STATE_LEN - 4]);
        img[off + STATE_LEN - 4..off + STATE_LEN].copy_from_slice(&crc.to_le_bytes());
    }
    if flags & RESEAL_LANES != 0 {
        reseal_lanes(img, geo);
    }
}

/// Recomputes the checksum of every armed lane record whose payload fits its lane (record
/// layout as written by `nvmfs::testing::arm_lane`).
pub fn reseal_lanes(img: &mut [u8], geo: &Geometry) {
    let lane_bytes = geo.lane_blocks as usize * BLOCK_SIZE as usize;
    for lane in 0..geo.journal_lanes {
        let off = geo.lane_off(lane) as usize;
        let head = &img[off..off + journal::HEADER_LEN];
        if u64::from_le_bytes(head[..8].try_into().unwrap()) != journal::ARMED {
            continue;
        }
        let plen = u32::from_le_bytes(head[20..24].try_into().unwrap()) as usize;
        if journal::HEADER_LEN + plen > lane_bytes {
            continue;
        }
        let p = off + journal::HEADER_LEN;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head[8..24]), &img[p..p + plen]);
        img[off + 24..off + 28].copy_from_slice(&crc.to_le_bytes());
    }
}

fn build_clean() -> Base {
    let k = known_image_sized(IMAGE_BYTES, IMAGE_INODES);
    let report = nvmfs::fsck::check_pm(&Pm::from_bytes(&k.image));
    assert!(
        report.is_clean(),
        "base image not clean: {:?}",
        report.problems
    );
    Base {
        image: k.image,
        geo: k.geo,
        tree: k.tree,
    }
}

/// A copy of `base` with the input's patches and re-seals applied. Patch offsets: high bit
/// clear -> inside the metadata region (superblocks, state, journal, inode table, hash table),
/// high bit set -> anywhere in the image.
pub fn patched(base: &Base, input: &Input<'_>) -> Vec<u8> {
    let mut img = base.image.clone();
    let meta = base.geo.metadata_end();
    let len = img.len() as u64;
    for &(off, bytes) in &input.patches {
        let at = if off & 0x8000_0000 == 0 {
            off as u64 % meta
        } else {
            (off & 0x7fff_ffff) as u64 % len
        };
        put(&mut img, at, bytes);
    }
    reseal(&mut img, &base.geo, input.flags);
    img
}

/// The clean base image (as after an unmount).
pub fn clean() -> &'static Base {
    static B: OnceLock<Base> = OnceLock::new();
    B.get_or_init(build_clean)
}

/// The base image left unclean (state "mounted") with two armed, valid journal records whose
/// undo entries cover an inode record, a hash-table slot and a directory block.
pub fn unclean() -> &'static Base {
    static B: OnceLock<Base> = OnceLock::new();
    B.get_or_init(|| {
        let c = clean();
        let mut image = c.image.clone();
        let geo = c.geo.clone();
        set_mount_state(&mut image, STATE_MOUNTED);
        let a = c.tree["/a.txt"].ino;
        let big = c.tree["/big.bin"].ino as u32;
        let dir1 = c.tree["/dir1"].ino as u32;
        let ioff = geo.inode_off(a);
        let slot = slot_of(&image, &geo, big, 1).expect("big.bin block 1");
        let soff = geo.slot_off(slot);
        let dslot = slot_of(&image, &geo, dir1, 0).expect("dir1 block 0");
        let doff = geo.data_off(dslot);
        let old = |off: u64, n: usize| image[off as usize..off as usize + n].to_vec();
        let e1 = vec![(ioff, old(ioff, 64)), (soff, old(soff, 8))];
        let e2 = vec![(doff, old(doff, 128))];
        arm_lane(&mut image, &geo, 2, &e1, false);
        arm_lane(&mut image, &geo, 9, &e2, false);
        Base {
            image,
            geo,
            tree: c.tree.clone(),
        }
    })
}

/// Mounts `img` read-write; `None` if the mount refuses it.
pub fn mount(img: &[u8]) -> Option<Fs> {
    Fs::mount_pm(Pm::from_bytes(img), &MountOptions::default(), None, None).ok()
}

/// Walks and reads the whole tree of a mounted image, then unmounts it. Returns the errors
/// the walk met (damage the mount did not catch surfaces here as errors, never as a panic).
pub fn walk_and_unmount(fs: Fs) -> Vec<String> {
    let (_tree, errors) = read_tree(&fs);
    let _ = fs.statfs();
    let _ = fs.unmount();
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_images_mount_as_expected() {
        let c = clean();
        let fs = mount(&c.image).expect("clean image mounts");
        assert!(!fs.recovery_report().unclean);
        let (tree, errors) = read_tree(&fs);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(tree, c.tree);
        fs.unmount().unwrap();

        let u = unclean();
        let fs = mount(&u.image).expect("unclean image mounts");
        let r = fs.recovery_report().clone();
        assert!(r.unclean);
        assert_eq!(r.lanes_rolled_back, 2, "{r:?}");
        assert!(walk_and_unmount(fs).is_empty());

        // Torn after a patch, valid again after the re-seal.
        let mut img = u.image.clone();
        img[u.geo.lane_off(2) as usize + 8] ^= 1; // the sequence number
        assert_eq!(mount(&img).unwrap().recovery_report().torn_lanes_cleared, 1);
        reseal_lanes(&mut img, &u.geo);
        assert_eq!(mount(&img).unwrap().recovery_report().lanes_rolled_back, 2);
    }

    #[test]
    fn parse_records() {
        let i = parse(&[9, 1, 0, 0, 0x80, 1, 0xaa, 0xbb, 7, 0, 0, 0, 63, 1, 2]);
        assert_eq!(i.flags, 9);
        assert_eq!(
            i.patches,
            vec![(0x8000_0001, &[0xaa, 0xbb][..]), (7, &[1, 2][..])]
        );
    }
}
