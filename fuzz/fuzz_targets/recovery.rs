//! Recovery: the base image left unclean with two armed, valid journal records (lanes 2 and
//! 9). Patches land only in the journal lanes and the hash table; flag bit 3 recomputes the
//! lane checksums so that damaged-but-valid records get rolled back. Mount (which runs
//! recovery); if it mounts, walk and read the whole tree and unmount, then check the result.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmfs::fsck::check_pm;
use nvmfs::layout::BLOCK_SIZE;
use nvmfs::media::Pm;
use nvmfs_fuzz::{mount, parse, put, reseal_lanes, unclean, walk_and_unmount, RESEAL_LANES};

fuzz_target!(|data: &[u8]| {
    let base = unclean();
    let geo = &base.geo;
    let input = parse(data);
    let mut img = base.image.clone();
    let j0 = geo.lane_off(0);
    let jlen = geo.journal_lanes as u64 * geo.lane_blocks as u64 * BLOCK_SIZE;
    let h0 = geo.hash_start * BLOCK_SIZE;
    let hlen = geo.hash_blocks * BLOCK_SIZE;
    for (off, bytes) in input.patches {
        let o = off as u64 % (jlen + hlen);
        let at = if o < jlen { j0 + o } else { h0 + (o - jlen) };
        put(&mut img, at, bytes);
    }
    if input.flags & RESEAL_LANES != 0 {
        reseal_lanes(&mut img, geo);
    }
    if let Some(fs) = mount(&img) {
        let _ = walk_and_unmount(fs);
    }
    // Not an invariant (a valid record may roll back arbitrary bytes), only coverage.
    let _ = check_pm(&Pm::from_bytes(&img));
});
