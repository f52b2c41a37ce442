//! Mount a patched copy of the clean base image; if it mounts, walk and read the whole tree,
//! then unmount. Patch offsets: high bit clear -> inside the metadata region (superblocks,
//! state, journal, inode table, hash table), high bit set -> anywhere in the image.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmfs_fuzz::{clean, mount, parse, patched, walk_and_unmount};

fuzz_target!(|data: &[u8]| {
    let img = patched(clean(), &parse(data));
    if let Some(fs) = mount(&img) {
        let _ = walk_and_unmount(fs);
    }
});
