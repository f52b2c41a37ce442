//! Test support shared by the core tests and the CLI tests: a small image with known contents,
//! a reader that walks a mounted tree without trusting it, byte-level helpers to find and
//! damage on-media structures, and a corpus of damaged images (`corrupt`).
//!
//! Nothing here is used by the file system itself.

pub mod corrupt;

use std::collections::{BTreeMap, HashSet};

use crate::journal;
use crate::layout::dentry::{self, Header, UNITS_PER_BLOCK, UNIT_SIZE};
use crate::layout::inode::{FileType, Inode, INODE_SIZE};
use crate::layout::state::{MountState, STATE_CLEAN};
use crate::layout::superblock::{Geometry, Superblock, ROOT_INO as ROOT, STATE_BLOCK};
use crate::layout::BLOCK_SIZE;
use crate::mapping::hashfs::{self, FREE};
use crate::{FormatOptions, Fs};

/// Size of the known image (1 MiB: 256 blocks) and its inode count.
pub const KNOWN_BYTES: u64 = 1 << 20;
pub const KNOWN_INODES: u64 = 64;
/// Longest prefix of a file `read_tree` reads.
pub const READ_CAP: u64 = 1 << 20;

/// `len` pseudo-random bytes from `seed` (xorshift64): file contents that differ per seed and
/// per position, so a test notices data from the wrong place.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// One node of a tree read by `read_tree`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub ino: u64,
    pub file_type: FileType,
    pub size: u64,
    pub nlink: u32,
    /// Files: the first `READ_CAP` bytes; symlinks: the target; others: empty.
    pub data: Vec<u8>,
}

/// Path ("/a/b") -> node.
pub type Tree = BTreeMap<String, Node>;

/// A clean image with known contents, and what it holds.
pub struct Known {
    pub image: Vec<u8>,
    pub geo: Geometry,
    pub tree: Tree,
}

impl Known {
    /// The inode number of `path` (panics if absent).
    pub fn ino(&self, path: &str) -> u32 {
        self.tree
            .get(path)
            .unwrap_or_else(|| panic!("{path} not in the known image"))
            .ino as u32
    }

    /// Byte offset of the inode record of `path`.
    pub fn inode_off(&self, path: &str) -> u64 {
        self.geo.inode_off(self.ino(path) as u64)
    }
}

/// A name longer than one directory unit (56 bytes), so its entry takes two units.
pub const LONG_NAME: &str = "a-file-name-longer-than-fifty-six-bytes-so-it-needs-two-units.txt";
/// A symlink target longer than 40 bytes, stored in a data block.
pub const LONG_TARGET: &str = "./././././././././././././././dir1/sub/deep.txt";

/// Builds the known image: a few files (one spanning 10 blocks), nested directories, hard
/// links, short and long symlinks, a FIFO and a two-unit name. Returned clean, as after an
/// unmount.
pub fn known_image() -> Known {
    known_image_sized(KNOWN_BYTES, KNOWN_INODES)
}

/// [`known_image`] on an image of `size_bytes` with `inodes` inodes (the fuzz targets use a
/// smaller one, so that each input mutates a larger share of it).
pub fn known_image_sized(size_bytes: u64, inodes: u64) -> Known {
    known_image_with(size_bytes, inodes, crate::MappingKind::HashFs)
}

/// [`known_image_sized`] formatted with `mapping`.
pub fn known_image_with(size_bytes: u64, inodes: u64, mapping: crate::MappingKind) -> Known {
    let fs = Fs::format_in_memory(&FormatOptions {
        size_bytes,
        inode_count: Some(inodes),
        mapping,
        layout_score: None,
        tier: None,
    })
    .expect("format the known image");
    populate(&fs).expect("populate the known image");
    let (tree, errors) = read_tree(&fs);
    assert!(errors.is_empty(), "known image: {errors:?}");
    let mut image = fs.snapshot();
    drop(fs);
    // The snapshot was taken while mounted; mark it clean as an unmount does.
    set_mount_state(&mut image, STATE_CLEAN);
    let geo = Superblock::decode(&image[..BLOCK_SIZE as usize], 0)
        .expect("superblock")
        .geo;
    Known { image, geo, tree }
}

/// Rewrites the mount-state block of `image` with `state` (clean or mounted), counters as
/// after one mount, and a valid checksum.
pub fn set_mount_state(image: &mut [u8], state: u64) {
    let st = MountState {
        state,
        mount_count: 1,
        last_mount_ns: 1,
        last_unmount_ns: 2,
    };
    let off = (STATE_BLOCK * BLOCK_SIZE) as usize;
    let enc = st.encode();
    image[off..off + enc.len()].copy_from_slice(&enc);
}

fn populate(fs: &Fs) -> std::io::Result<()> {
    fs.write_file("/a.txt", b"hello, nvmfs\n")?;
    let big: Vec<u8> = (0..40 * 1024u32)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    fs.write_file("/big.bin", &big)?;
    fs.create_dir_all("/dir1/sub")?;
    fs.create_dir("/dir2")?;
    fs.write_file("/dir1/nested.txt", b"nested file")?;
    let deep: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    fs.write_file("/dir1/sub/deep.txt", &deep)?;
    fs.write_file("/hard1", b"two names, one file")?;
    fs.hard_link("/hard1", "/dir1/hard2")?;
    fs.symlink_path("a.txt", "/short-link")?;
    fs.symlink_path(LONG_TARGET, "/long-link")?;
    fs.mknod(ROOT, b"fifo", libc::S_IFIFO | 0o644, 0, 0, 0)?;
    fs.write_file(format!("/{LONG_NAME}"), b"long name")?;
    Ok(())
}

/// Walks the whole tree from the root through the inode-level API, without trusting it:
/// every error is collected (not returned early), directories seen twice are not entered
/// again, files are read up to `READ_CAP` bytes.
pub fn read_tree(fs: &Fs) -> (Tree, Vec<String>) {
    let mut tree = Tree::new();
    let mut errors = Vec::new();
    let mut seen = HashSet::new();
    walk(fs, ROOT, "", &mut tree, &mut errors, &mut seen);
    (tree, errors)
}

fn walk(
    fs: &Fs,
    dir: u64,
    path: &str,
    tree: &mut Tree,
    errors: &mut Vec<String>,
    seen: &mut HashSet<u64>,
) {
    let shown = if path.is_empty() { "/" } else { path };
    if !seen.insert(dir) {
        errors.push(format!("{shown}: directory reached twice"));
        return;
    }
    let mut entries = Vec::new();
    if let Err(e) = fs.readdir(dir, 2, |e| {
        entries.push(e);
        entries.len() < 100_000
    }) {
        errors.push(format!("{shown}: readdir: {e}"));
        return;
    }
    for e in entries {
        let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
        let md = match fs.getattr(e.ino) {
            Ok(md) => md,
            Err(err) => {
                errors.push(format!("{p}: getattr: {err}"));
                continue;
            }
        };
        if md.file_type != e.file_type {
            errors.push(format!("{p}: entry type differs from the inode"));
        }
        let data = match md.file_type {
            FileType::File => read_capped(fs, e.ino, md.size).unwrap_or_else(|err| {
                errors.push(format!("{p}: read: {err}"));
                Vec::new()
            }),
            FileType::Symlink => fs.readlink(e.ino).unwrap_or_else(|err| {
                errors.push(format!("{p}: readlink: {err}"));
                Vec::new()
            }),
            _ => Vec::new(),
        };
        tree.insert(
            p.clone(),
            Node {
                ino: e.ino,
                file_type: md.file_type,
                size: md.size,
                nlink: md.nlink,
                data,
            },
        );
        if md.file_type == FileType::Dir {
            match fs.lookup_ino(e.ino, b"..") {
                Ok((up, _)) if up == dir => {}
                Ok((up, _)) => errors.push(format!("{p}: `..` is {up}, not {dir}")),
                Err(err) => errors.push(format!("{p}: lookup ..: {err}")),
            }
            walk(fs, e.ino, &p, tree, errors, seen);
        }
    }
}

fn read_capped(fs: &Fs, ino: u64, size: u64) -> std::io::Result<Vec<u8>> {
    let want = size.min(READ_CAP) as usize;
    let mut buf = vec![0u8; want];
    let mut done = 0;
    while done < want {
        let n = fs.read(ino, done as u64, &mut buf[done..])?;
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    Ok(buf)
}

// Byte-level access to an image held in memory.

pub fn get_u32(img: &[u8], off: u64) -> u32 {
    u32::from_le_bytes(img[off as usize..off as usize + 4].try_into().expect("4"))
}

pub fn get_u64(img: &[u8], off: u64) -> u64 {
    u64::from_le_bytes(img[off as usize..off as usize + 8].try_into().expect("8"))
}

pub fn put_u32(img: &mut [u8], off: u64, v: u32) {
    img[off as usize..off as usize + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(img: &mut [u8], off: u64, v: u64) {
    img[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes());
}

/// Decodes inode `ino`'s record (without validating it).
pub fn inode(img: &[u8], geo: &Geometry, ino: u32) -> Inode {
    let off = geo.inode_off(ino as u64) as usize;
    Inode::decode_raw(&img[off..off + INODE_SIZE as usize])
}

/// Writes inode `ino`'s record.
pub fn put_inode(img: &mut [u8], geo: &Geometry, ino: u32, i: &Inode) {
    let off = geo.inode_off(ino as u64) as usize;
    img[off..off + INODE_SIZE as usize].copy_from_slice(&i.encode());
}

/// The slot mapping (`ino`, `lblk`), found by scanning the table.
pub fn slot_of(img: &[u8], geo: &Geometry, ino: u32, lblk: u32) -> Option<u64> {
    let k = hashfs::key(ino, lblk);
    (0..geo.data_blocks).find(|&s| get_u64(img, geo.slot_off(s)) == k)
}

/// The last free slot of the table.
pub fn free_slot(img: &[u8], geo: &Geometry) -> u64 {
    (0..geo.data_blocks)
        .rev()
        .find(|&s| get_u64(img, geo.slot_off(s)) == FREE)
        .expect("a free slot")
}

/// Stores `key` in the first free slot probing from its hash home, where a lookup finds it
/// (after any existing copy of it: the probe chain to that copy holds no free slot).
pub fn place_key(img: &mut [u8], geo: &Geometry, key: u64) -> u64 {
    let table = hashfs::HashFs::new(geo, 0);
    let mut s = table.home(key);
    while get_u64(img, geo.slot_off(s)) != FREE {
        s = (s + 1) % geo.data_blocks;
    }
    put_u64(img, geo.slot_off(s), key);
    s
}

/// The lowest free inode number.
pub fn free_ino(img: &[u8], geo: &Geometry) -> u32 {
    (2..geo.inode_count as u32)
        .find(|&i| inode(img, geo, i).is_free())
        .expect("a free inode")
}

/// Byte offset of the header word of entry `name` in directory `dir`.
pub fn entry_off(img: &[u8], geo: &Geometry, dir: u32, name: &[u8]) -> Option<u64> {
    let d = inode(img, geo, dir);
    let mut buf = Vec::new();
    for lblk in 0..d.dir_units.div_ceil(UNITS_PER_BLOCK) {
        let base = geo.data_off(slot_of(img, geo, dir, lblk)?);
        let mut u = 0;
        while u < UNITS_PER_BLOCK {
            let off = base + u as u64 * UNIT_SIZE;
            match Header::decode(get_u64(img, off), u, off, geo.inode_count) {
                Ok(Some(h)) => {
                    let units = &img[off as usize..(off + h.units as u64 * UNIT_SIZE) as usize];
                    dentry::name_from_units(units, h.name_len as usize, &mut buf);
                    if buf == name {
                        return Some(off);
                    }
                    u += h.units as u32;
                }
                _ => u += 1,
            }
        }
    }
    None
}

/// Appends entry `name` -> `target` to directory `dir` at its high-water mark (which must
/// leave room in its last block), updating the directory's counts as an operation would.
pub fn add_entry(img: &mut [u8], geo: &Geometry, dir: u32, name: &[u8], target: u32, ft: FileType) {
    let mut d = inode(img, geo, dir);
    let h = Header::new(target, name.len(), ft);
    let unit = d.dir_units;
    assert!(
        !unit.is_multiple_of(UNITS_PER_BLOCK)
            && unit % UNITS_PER_BLOCK + h.units as u32 <= UNITS_PER_BLOCK,
        "no room in the last block"
    );
    let slot = slot_of(img, geo, dir, unit / UNITS_PER_BLOCK).expect("block mapped");
    let off = geo.data_off(slot) + (unit % UNITS_PER_BLOCK) as u64 * UNIT_SIZE;
    let mut units = Vec::new();
    dentry::encode_units(&h, name, &mut units);
    img[off as usize..off as usize + units.len()].copy_from_slice(&units);
    d.dir_units += h.units as u32;
    d.dir_entries += 1;
    if ft == FileType::Dir {
        d.nlink += 1;
    }
    put_inode(img, geo, dir, &d);
}

/// Recomputes the checksum of the superblock at `block` (0 or 1).
pub fn reseal_superblock(img: &mut [u8], block: u64) {
    let b = (block * BLOCK_SIZE) as usize;
    let crc = crc32c::crc32c(&img[b..b + 4092]);
    img[b + 4092..b + 4096].copy_from_slice(&crc.to_le_bytes());
}

/// Writes an armed journal record into lane `lane`: undo entries (offset, old bytes), with a
/// correct checksum unless `torn`.
pub fn arm_lane(img: &mut [u8], geo: &Geometry, lane: u32, entries: &[(u64, Vec<u8>)], torn: bool) {
    let mut payload = Vec::new();
    for (off, old) in entries {
        payload.extend_from_slice(&off.to_le_bytes());
        payload.extend_from_slice(&(old.len() as u32).to_le_bytes());
        payload.extend_from_slice(&[0; 4]);
        payload.extend_from_slice(old);
        payload.resize(payload.len().next_multiple_of(8), 0);
    }
    let mut head = [0u8; journal::HEADER_LEN];
    head[8..16].copy_from_slice(&99u64.to_le_bytes());
    head[16..20].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    head[20..24].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut crc = crc32c::crc32c_append(crc32c::crc32c(&head[8..24]), &payload);
    if torn {
        crc ^= 0x5a5a;
    }
    head[24..28].copy_from_slice(&crc.to_le_bytes());
    head[..8].copy_from_slice(&journal::ARMED.to_le_bytes());
    let off = geo.lane_off(lane) as usize;
    img[off..off + head.len()].copy_from_slice(&head);
    img[off + head.len()..off + head.len() + payload.len()].copy_from_slice(&payload);
}

/// A persistence tracer that keeps a copy of the region with every store
/// applied and, while capturing, snapshots it at every fence: the image a
/// power loss right after that fence leaves.
pub struct FenceShadow {
    bytes: std::sync::Mutex<Vec<u8>>,
    images: std::sync::Mutex<Vec<Vec<u8>>>,
    capture: std::sync::atomic::AtomicBool,
}

impl FenceShadow {
    /// A shadow of a zeroed region of `size` bytes, not capturing.
    pub fn new(size: usize) -> Self {
        FenceShadow {
            bytes: std::sync::Mutex::new(vec![0; size]),
            images: std::sync::Mutex::default(),
            capture: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Starts or stops taking a snapshot at each fence.
    pub fn set_capture(&self, on: bool) {
        self.capture.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The snapshots taken so far, in fence order; the list starts empty again.
    pub fn take_images(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.images.lock().unwrap())
    }
}

impl crate::media::trace::PersistTrace for FenceShadow {
    fn store(&self, off: u64, data: &[u8]) {
        self.bytes.lock().unwrap()[off as usize..off as usize + data.len()].copy_from_slice(data);
    }
    fn store_nt(&self, off: u64, data: &[u8]) {
        self.store(off, data);
    }
    fn flush(&self, _line: u64) {}
    fn fence(&self) {
        if self.capture.load(std::sync::atomic::Ordering::Relaxed) {
            let snap = self.bytes.lock().unwrap().clone();
            self.images.lock().unwrap().push(snap);
        }
    }
}
