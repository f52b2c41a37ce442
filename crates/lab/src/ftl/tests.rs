//! Hand-checked counts of both FTLs on small traces, the replayer, and a capture on a
//! kernel loop target.

use super::fast::FastFtl;
use super::page::PageFtl;
use super::replay::{self, replay};
use super::trace::{self, Header, Op, Record, TraceReader};
use super::{capture, CostModel, Counters, Ftl, FtlKind, Geometry};

fn geometry(pages_per_block: u32, physical: u32, logical: u32) -> Geometry {
    Geometry::new(pages_per_block, physical, logical).unwrap()
}

fn write_all(ftl: &mut dyn Ftl, lpns: impl IntoIterator<Item = u64>) {
    for lpn in lpns {
        ftl.write(lpn);
    }
    ftl.check();
}

#[test]
fn page_sequential_fill_and_rewrite_copy_nothing() {
    // 10 blocks of 4 pages, 8 logical blocks.
    let mut ftl = PageFtl::new(geometry(4, 10, 8)).unwrap();
    write_all(&mut ftl, 0..32);
    let c = ftl.counters();
    assert_eq!((c.host_page_writes, c.page_copies, c.erases), (32, 0, 0));
    // Rewriting: blocks 8 comes free; each of the other 7 new blocks needs one victim,
    // always a wholly rewritten old block: 7 erases, no copy.
    write_all(&mut ftl, 0..32);
    let c = ftl.counters();
    assert_eq!((c.host_page_writes, c.page_copies, c.erases), (64, 0, 7));
    assert_eq!(c.gc_victims, 7);
    assert_eq!(c.write_amplification(), 1.0);
}

#[test]
fn page_greedy_gc_matches_a_hand_computed_case() {
    // 4 blocks of 4 pages, 2 logical blocks (lpn 0..8).
    let mut ftl = PageFtl::new(geometry(4, 4, 2)).unwrap();
    write_all(&mut ftl, 0..8); // B0 = 0 1 2 3, B1 = 4 5 6 7; free B2 B3
    write_all(&mut ftl, [0, 4, 1, 5]); // B2 = 0 4 1 5; B0 keeps 2 3, B1 keeps 6 7
    assert_eq!(ftl.counters().erases, 0);
    // 2: B0 holds only 3 now. B2 is full and B3 is the reserve: greedy takes B0 (1 valid),
    // copies 3 to B3, erases B0; 2 goes after it in B3.
    write_all(&mut ftl, [2]);
    let c = ftl.counters();
    assert_eq!((c.page_copies, c.erases, c.gc_victims), (1, 1, 1));
    // 6, 7 fill B3 (3 2 6 7) and empty B1. Then 0: the victim is B1 with no valid page.
    write_all(&mut ftl, [6, 7, 0]);
    let c = ftl.counters();
    assert_eq!(
        (
            c.host_page_writes,
            c.page_copies,
            c.page_programs,
            c.erases,
            c.gc_victims
        ),
        (16, 1, 17, 2, 2)
    );
    assert_eq!(c.write_amplification(), 17.0 / 16.0);
}

#[test]
fn page_random_overwrite_on_a_full_device_amplifies_writes() {
    // 40 blocks of 8 pages, 32 logical: 20% spare.
    let g = geometry(8, 40, 32);
    let mut ftl = PageFtl::new(g).unwrap();
    write_all(&mut ftl, 0..g.logical_pages());
    let mut rng = fastrand::Rng::with_seed(4);
    for _ in 0..20 * g.logical_pages() {
        ftl.write(rng.u64(0..g.logical_pages()));
    }
    ftl.check();
    let c = ftl.counters();
    assert!(c.page_copies > 0);
    let wa = c.write_amplification();
    // Greedy on uniform random writes with 20% spare amplifies by about 2 (the fill's
    // 256 free writes dilute it a little).
    assert!(wa > 1.3 && wa < 3.5, "write amplification {wa}");
}

#[test]
fn page_trim_spares_the_copy() {
    let mut ftl = PageFtl::new(geometry(4, 4, 2)).unwrap();
    write_all(&mut ftl, 0..8);
    for lpn in 0..3 {
        ftl.trim(lpn);
    }
    // B0 holds only 3 now. 4 5 4 5 fill B2 (2 valid), B1 keeps 6 7; then 4 needs a
    // victim: B0 with 1 valid page (without the trims: B1, 2 copies).
    write_all(&mut ftl, [4, 5, 4, 5, 4]);
    let c = ftl.counters();
    assert_eq!(c.host_page_trims, 3);
    assert_eq!((c.page_copies, c.erases), (1, 1));
}

#[test]
fn fast_sequential_fill_writes_in_place_and_rewrite_switches() {
    // 11 blocks of 4 pages, 8 logical: SW, 1 RW, 1 free.
    let mut ftl = FastFtl::new(geometry(4, 11, 8)).unwrap();
    assert_eq!(ftl.rw_blocks_max(), 1);
    write_all(&mut ftl, 0..32);
    assert_eq!(
        ftl.counters(),
        Counters {
            host_page_writes: 32,
            page_programs: 32,
            ..Counters::default()
        }
    );
    write_all(&mut ftl, 0..32);
    let c = ftl.counters();
    assert_eq!(
        (
            c.switch_merges,
            c.partial_merges,
            c.full_merges,
            c.page_copies,
            c.erases
        ),
        (8, 0, 0, 0, 8)
    );
}

#[test]
fn fast_switch_merge_on_a_sequential_block_rewrite() {
    let mut ftl = FastFtl::new(geometry(4, 5, 2)).unwrap();
    write_all(&mut ftl, 0..4);
    write_all(&mut ftl, 0..4);
    let c = ftl.counters();
    assert_eq!((c.switch_merges, c.erases, c.page_copies), (1, 1, 0));
    assert_eq!(c.host_page_writes, 8);
}

#[test]
fn fast_partial_merges() {
    // An offset-0 update of another block ends the SW block of 0..2: pages 2 and 3 are
    // copied into it from the data block, which is erased.
    let mut ftl = FastFtl::new(geometry(4, 5, 2)).unwrap();
    write_all(&mut ftl, 0..8);
    write_all(&mut ftl, [0, 1, 4]);
    let c = ftl.counters();
    assert_eq!(
        (
            c.partial_merges,
            c.switch_merges,
            c.full_merges,
            c.page_copies,
            c.erases
        ),
        (1, 0, 0, 2, 1)
    );
    // An update past the SW block's next offset (a gap) ends it with a partial merge that
    // writes the new page in its place: only page 2 is copied.
    let mut ftl = FastFtl::new(geometry(4, 5, 2)).unwrap();
    write_all(&mut ftl, 0..4);
    write_all(&mut ftl, [0, 1, 3]);
    let c = ftl.counters();
    assert_eq!((c.partial_merges, c.page_copies, c.erases), (1, 1, 1));
    assert_eq!(c.page_programs, 4 + 3 + 1);
}

#[test]
fn fast_full_merge_on_a_rewrite_inside_the_sequential_block() {
    // SW holds 0 1 2 of block 0; rewriting 1 rebuilds block 0 in a free block: 0 and 2
    // from SW, 3 from the data block, 1 from the host; data block and SW erased.
    let mut ftl = FastFtl::new(geometry(4, 5, 2)).unwrap();
    write_all(&mut ftl, 0..4);
    write_all(&mut ftl, [0, 1, 2, 1]);
    let c = ftl.counters();
    assert_eq!(
        (c.full_merges, c.partial_merges, c.page_copies, c.erases),
        (1, 0, 3, 2)
    );
    assert_eq!(c.page_programs, 4 + 4 + 3);
}

#[test]
fn fast_victim_of_the_sequential_blocks_owner_is_merged_through_it() {
    let mut ftl = FastFtl::new(geometry(4, 5, 2)).unwrap();
    write_all(&mut ftl, 0..8);
    // RW: 5 1 2; SW: 4 (block 1); RW: 3 (full).
    write_all(&mut ftl, [5, 1, 2, 4, 3]);
    assert_eq!(ftl.counters().erases, 0);
    // 2 needs RW space. The victim holds 5 (block 1, the SW block's) and 1 2 3 (block 0):
    // block 1 by a partial merge of its SW block (5 from the victim, 6 7 from the data
    // block: 3 copies, 1 erase), block 0 by a full merge (4 copies, 1 erase), then the
    // victim's erase.
    write_all(&mut ftl, [2]);
    let c = ftl.counters();
    assert_eq!(
        (c.partial_merges, c.full_merges, c.page_copies, c.erases),
        (1, 1, 7, 3)
    );
    assert_eq!(c.host_page_writes, 14);
}

#[test]
fn fast_full_merges_on_random_updates() {
    // 5 blocks of 4 pages, 2 logical: one RW block.
    let mut ftl = FastFtl::new(geometry(4, 5, 2)).unwrap();
    write_all(&mut ftl, 0..8);
    write_all(&mut ftl, [1, 5, 2, 6]); // the RW block is full
    assert_eq!(ftl.counters().erases, 0);
    // 3 needs RW space: the RW block is the victim. Both logical blocks it holds pages of
    // are rebuilt in a free block (4 copies each, the old data block erased), then the
    // victim is erased and takes 3.
    write_all(&mut ftl, [3]);
    let c = ftl.counters();
    assert_eq!(
        (
            c.full_merges,
            c.partial_merges,
            c.switch_merges,
            c.page_copies,
            c.erases
        ),
        (2, 0, 0, 8, 3)
    );
    assert_eq!(c.host_page_writes, 13);
}

#[test]
fn fast_rw_pool_size_is_checked_and_a_small_pool_merges_more() {
    let g = geometry(8, 40, 32);
    assert_eq!(FastFtl::new(g).unwrap().rw_blocks_max(), 6);
    assert!(FastFtl::with_rw_blocks(g, Some(0)).is_err());
    let err = FastFtl::with_rw_blocks(g, Some(7)).err().unwrap();
    assert!(err.contains("room for 1 to 6"), "{err}");
    let mut rng = fastrand::Rng::with_seed(3);
    let lpns: Vec<u64> = (0..g.logical_pages())
        .chain((0..4 * g.logical_pages()).map(|_| rng.u64(0..g.logical_pages())))
        .collect();
    let mut big = FastFtl::new(g).unwrap();
    let mut small = FastFtl::with_rw_blocks(g, Some(1)).unwrap();
    write_all(&mut big, lpns.iter().copied());
    write_all(&mut small, lpns.iter().copied());
    assert!(small.counters().full_merges > big.counters().full_merges);
}

#[test]
fn fast_random_writes_cost_more_than_page_mapping() {
    let g = geometry(8, 40, 32);
    let mut rng = fastrand::Rng::with_seed(7);
    let lpns: Vec<u64> = (0..g.logical_pages())
        .chain((0..10 * g.logical_pages()).map(|_| rng.u64(0..g.logical_pages())))
        .collect();
    let mut fast = FastFtl::new(g).unwrap();
    let mut page = PageFtl::new(g).unwrap();
    write_all(&mut fast, lpns.iter().copied());
    write_all(&mut page, lpns.iter().copied());
    let (f, p) = (fast.counters(), page.counters());
    assert!(f.full_merges > 0);
    let cost = CostModel::default();
    assert!(
        cost.erase_cost_us(&f) > cost.erase_cost_us(&p),
        "{f:?} vs {p:?}"
    );
}

/// Random mixes of sequential runs, random writes and trims on small devices: after every
/// step the FTL's invariants hold and it holds exactly the pages a model says are live.
#[test]
fn random_mixes_keep_every_live_page() {
    for seed in 0..24u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let ppb = [2, 4, 8][rng.usize(0..3)];
        let logical = rng.u32(2..10);
        let physical = logical + rng.u32(3..6);
        let g = geometry(ppb, physical, logical);
        for kind in FtlKind::ALL {
            let mut ftl = kind.build(g).unwrap();
            let mut live = vec![false; g.logical_pages() as usize];
            for step in 0..600 {
                let lpn = rng.u64(0..g.logical_pages());
                match rng.u32(0..10) {
                    0 => {
                        ftl.trim(lpn);
                        live[lpn as usize] = false;
                    }
                    1..=3 => {
                        // A sequential run from the start of a block, maybe cut short.
                        let start = lpn - lpn % u64::from(ppb);
                        let len = rng.u64(1..=u64::from(ppb));
                        for p in start..start + len {
                            ftl.write(p);
                            live[p as usize] = true;
                        }
                    }
                    _ => {
                        ftl.write(lpn);
                        live[lpn as usize] = true;
                    }
                }
                ftl.check();
                for (p, &l) in live.iter().enumerate() {
                    assert_eq!(
                        ftl.holds(p as u64),
                        l,
                        "{kind} seed {seed} step {step} lpn {p}"
                    );
                }
            }
        }
    }
}

#[test]
fn replay_maps_sectors_to_pages() {
    let text = "# nvmfs-trace 1\n# device_bytes 65536\n\
                0 W 0 8\n\
                1 W 4 8\n\
                2 R 0 64\n\
                3 D 0 12\n\
                4 F 0 0\n";
    let reader = TraceReader::new(text.as_bytes()).unwrap();
    let g = geometry(4, 8, 4);
    let mut ftl = PageFtl::new(g).unwrap();
    let stats = replay(reader, &mut ftl).unwrap();
    // Page 0, then pages 0 and 1 (unaligned); the discard covers page 0 only.
    let c = ftl.counters();
    assert_eq!((c.host_page_writes, c.host_page_trims), (3, 1));
    assert_eq!(stats.write_sectors, 16);
    assert_eq!(stats.unaligned_writes, 1);
    assert_eq!(
        (stats.read_sectors, stats.discard_sectors, stats.flushes),
        (64, 12, 1)
    );
    assert_eq!(stats.sector_end, 64);

    // 16 logical pages = 128 sectors; a write past them names its line.
    let text = "# nvmfs-trace 1\n0 W 0 8\n1 W 124 8\n";
    let mut ftl = PageFtl::new(g).unwrap();
    let err = replay(TraceReader::new(text.as_bytes()).unwrap(), &mut ftl).unwrap_err();
    assert_eq!(err.line, 3);
    assert!(err.message.contains("beyond"), "{err}");
}

#[test]
fn replay_file_sizes_the_nand_from_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seq.trace");
    // 4 MiB device, rewritten sequentially twice in 64 KiB requests.
    let records: Vec<Record> = (0..2u64)
        .flat_map(|pass| {
            (0..64u64).map(move |i| Record {
                time_ns: pass * 1000 + i,
                op: Op::Write,
                sector: i * 128,
                sectors: 128,
            })
        })
        .collect();
    let header = Header {
        device_bytes: Some(4 << 20),
        source: Some("test".into()),
    };
    trace::write_file(&path, &header, &records).unwrap();
    let (h, stats) = replay::summarize(&path).unwrap();
    let g = replay::default_geometry(&h, &stats, 0.25, 64).unwrap();
    // 16 logical blocks of 256 KiB need 22 blocks at 25% (21 * 0.75 = 15.75).
    assert_eq!((g.logical_blocks, g.physical_blocks), (16, 22));
    for kind in FtlKind::ALL {
        let r = replay::replay_file(&path, kind, &replay::Setup::new(g)).unwrap();
        assert_eq!(r.counters.host_page_writes, 2048, "{kind}");
        assert_eq!(r.counters.page_copies, 0, "{kind}");
        assert_eq!(r.trace.write_sectors, 2 * 8192);
        let m = replay::replay_records(&records, kind, &replay::Setup::new(g)).unwrap();
        assert_eq!((m.counters, m.trace), (r.counters, r.trace), "{kind}");
    }
    // 1 MiB asked, 1.5 MiB given (6 logical blocks, to keep 3 spare): record 25 is the
    // first write past it.
    let small = Geometry::covering(1 << 20, 0.25, 64).unwrap();
    assert_eq!(small.logical_bytes(), 3 << 19);
    let err =
        replay::replay_records(&records, FtlKind::Page, &replay::Setup::new(small)).unwrap_err();
    assert!(
        err.starts_with("record 25: Write of sectors 3072..3200 lies beyond"),
        "{err}"
    );
}

#[test]
fn capture_of_ext4_on_a_loop_device() {
    let _turn = crate::study::tests::provisioning_turn();
    let size = crate::kernel::MIN_DEVICE_BYTES;
    if let Some(reason) = capture::kernel_unavailable("ext4", size) {
        println!("skipped: {reason}");
        return;
    }
    let shm = std::path::Path::new("/dev/shm");
    let file_bytes = 4u64 << 20;
    let got = capture::capture_kernel("ext4", size, shm, |dir| {
        use std::io::Write;
        let mut f = std::fs::File::create(dir.join("data"))?;
        let block = vec![0x5au8; 4096];
        for _ in 0..file_bytes / 4096 {
            f.write_all(&block)?;
        }
        f.sync_all()
    })
    .unwrap();
    let written: u64 = got
        .records
        .iter()
        .filter(|r| r.op == Op::Write)
        .map(|r| u64::from(r.sectors))
        .sum();
    assert!(
        written * 512 >= file_bytes,
        "only {written} sectors written"
    );
    assert!(got
        .records
        .iter()
        .all(|r| (r.sector + u64::from(r.sectors)) * 512 <= size));
    assert_eq!(got.header.device_bytes, Some(size));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ext4.trace");
    trace::write_file(&path, &got.header, &got.records).unwrap();
    let (h, stats) = replay::summarize(&path).unwrap();
    let g = replay::default_geometry(&h, &stats, 0.10, 64).unwrap();
    let r = replay::replay_file(&path, FtlKind::Fast, &replay::Setup::new(g)).unwrap();
    assert!(r.counters.host_page_writes >= file_bytes / 4096);
    println!(
        "ext4: {} records, {written} sectors written, FAST {:?}",
        got.records.len(),
        r.counters
    );
}

#[test]
fn unknown_and_missing_kernel_targets_say_why() {
    let size = crate::kernel::MIN_DEVICE_BYTES;
    let reason = capture::kernel_unavailable("ext9", size).unwrap();
    assert!(reason.contains("unknown kernel target"), "{reason}");
    if !std::path::Path::new("/proc/filesystems").exists() {
        return;
    }
    let has_nilfs = std::fs::read_to_string("/proc/filesystems")
        .unwrap_or_default()
        .contains("nilfs2");
    if !has_nilfs {
        let reason = capture::kernel_unavailable("nilfs2", size).unwrap();
        assert!(reason.contains("unavailable"), "{reason}");
    }
}
