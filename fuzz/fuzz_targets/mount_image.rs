//! Mount a patched copy of the clean base image; if it mounts, walk and read the whole tree,
//! then unmount. Patch offsets: high bit clear -> inside the metadata region (superblocks,
//! state, journal, inode table, hash table), high bit set -> anywhere in the image.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmfs_fuzz::{clean, mount, parse, put, reseal, walk_and_unmount};

fuzz_target!(|data: &[u8]| {
    let base = clean();
    let input = parse(data);
    let mut img = base.image.clone();
    let meta = base.geo.metadata_end();
    let len = img.len() as u64;
    for (off, bytes) in input.patches {
        let at = if off & 0x8000_0000 == 0 {
            off as u64 % meta
        } else {
            (off & 0x7fff_ffff) as u64 % len
        };
        put(&mut img, at, bytes);
    }
    reseal(&mut img, &base.geo, input.flags);
    if let Some(fs) = mount(&img) {
        let _ = walk_and_unmount(fs);
    }
});
