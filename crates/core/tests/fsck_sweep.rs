//! Per-field damage sweep over the known image: every metadata field (superblock, its
//! replica, the state block, a journal lane header, every field of several inodes, the hash
//! slots of several mapped blocks, directory entry header words) is overwritten with zeros,
//! ones (0xff), its first, middle or last bit flipped, and random bytes. Each case must be
//! - detected: `fsck -n` exits 4; then `fsck -y` exits 1 and leaves an image that checks clean,
//!   mounts, reads back completely, and that a second repair leaves untouched; or
//! - recovered: `fsck -n` exits 0 with recovery notes (the image reads as not unmounted
//!   cleanly, as after a torn state-block write): mount recovers it and the tree reads back;
//!   `fsck -y` performs the recovery (exit 1) and leaves a clean image; or
//! - harmless: `fsck -n` exits 0 without notes, the image mounts and the whole tree reads
//!   back without an error, and `fsck -y` exits 0 without writing a byte.
//!
//! Nothing may panic in mount (read-write and read-only), the tree walk, fsck or repair.

use std::panic::{catch_unwind, AssertUnwindSafe};

use nvmfs::fsck::{check_pm, repair_pm, EXIT_CLEAN, EXIT_CORRECTED, EXIT_UNCORRECTED};
use nvmfs::layout::state::{MountState, STATE_MOUNTED};
use nvmfs::mapping::hashfs;
use nvmfs::media::Pm;
use nvmfs::testing::{arm_lane, entry_off, get_u64, known_image, read_tree, Known, LONG_NAME};
use nvmfs::{Fs, MountOptions};

struct Field {
    name: String,
    off: u64,
    len: usize,
}

fn field(v: &mut Vec<Field>, name: impl Into<String>, off: u64, len: usize) {
    v.push(Field {
        name: name.into(),
        off,
        len,
    });
}

const SUPERBLOCK: &[(&str, u64, usize)] = &[
    ("magic", 0, 8),
    ("version", 8, 4),
    ("block_size", 12, 4),
    ("compat", 16, 8),
    ("ro_compat", 24, 8),
    ("incompat", 32, 8),
    ("total_blocks", 40, 8),
    ("journal_start", 48, 8),
    ("journal_lanes", 56, 4),
    ("lane_blocks", 60, 4),
    ("itable_start", 64, 8),
    ("inode_count", 72, 8),
    ("hash_start", 80, 8),
    ("hash_blocks", 88, 8),
    ("data_start", 96, 8),
    ("data_blocks", 104, 8),
    ("root_ino", 112, 8),
    ("uuid", 120, 16),
    ("created_ns", 136, 8),
    ("inode_size", 144, 4),
    ("reserved", 148, 8),
    ("checksum", 4092, 4),
];

const INODE: &[(&str, u64, usize)] = &[
    ("mode", 0, 4),
    ("nlink", 4, 4),
    ("uid", 8, 4),
    ("gid", 12, 4),
    ("size", 16, 8),
    ("blocks", 24, 8),
    ("atime", 32, 8),
    ("mtime", 40, 8),
    ("ctime", 48, 8),
    ("generation", 56, 4),
    ("flags", 60, 4),
    ("falloc_end", 64, 8),
    ("parent", 72, 4),
    ("dir_entries", 76, 4),
    ("dir_units", 80, 4),
    ("reserved", 84, 4),
    ("inline", 88, 40),
];

fn fields(k: &Known) -> Vec<Field> {
    let g = &k.geo;
    let img = &k.image;
    let mut v = Vec::new();
    for &(name, off, len) in SUPERBLOCK {
        field(&mut v, format!("superblock.{name}"), off, len);
    }
    for &(name, off, len) in &[SUPERBLOCK[0], SUPERBLOCK[6], SUPERBLOCK[15], SUPERBLOCK[21]] {
        field(&mut v, format!("replica.{name}"), 4096 + off, len);
    }
    for (name, off, len) in [
        ("state", 0, 8),
        ("mount_count", 8, 8),
        ("last_mount_ns", 16, 8),
        ("last_unmount_ns", 24, 8),
        ("checksum", 32, 4),
    ] {
        field(&mut v, format!("state.{name}"), 2 * 4096 + off, len);
    }
    // The lane holding the last (committed, now idle) record, and a never used lane.
    let used = (0..g.journal_lanes)
        .find(|&l| get_u64(img, g.lane_off(l) + 8) != 0)
        .expect("a lane with a record");
    let unused = (0..g.journal_lanes)
        .find(|&l| get_u64(img, g.lane_off(l) + 8) == 0)
        .expect("an unused lane");
    for lane in [used, unused] {
        lane_fields(&mut v, k, lane, "idle");
    }
    // Every in-use inode (hard links share one).
    let mut inodes: Vec<(u32, String)> = vec![(1, "/".to_string())];
    for (path, node) in &k.tree {
        if !inodes.iter().any(|(i, _)| *i as u64 == node.ino) {
            inodes.push((node.ino as u32, path.clone()));
        }
    }
    for (ino, path) in &inodes {
        for &(name, off, len) in INODE {
            field(
                &mut v,
                format!("inode {ino} ({path}).{name}"),
                g.inode_off(*ino as u64) + off,
                len,
            );
        }
    }
    // The slot of every mapped block.
    for s in 0..g.data_blocks {
        if let Some((ino, lblk)) = hashfs::split_key(get_u64(img, g.slot_off(s))) {
            let path = &inodes.iter().find(|(i, _)| *i == ino).expect("owner").1;
            field(
                &mut v,
                format!("slot {s} ({path} block {lblk})"),
                g.slot_off(s),
                8,
            );
        }
    }
    // The header word of every directory entry (and the second unit of the long name).
    for path in k.tree.keys() {
        let (dir, name) = path.rsplit_once('/').expect("absolute");
        let d = if dir.is_empty() { 1 } else { k.ino(dir) };
        let off = entry_off(img, g, d, name.as_bytes()).expect("entry");
        field(&mut v, format!("entry {path}"), off, 8);
        if name == LONG_NAME {
            field(&mut v, format!("entry {path} (unit 2)"), off + 64, 8);
        }
    }
    v
}

const LANE_HEADER: &[(&str, u64, usize)] = &[
    ("state", 0, 8),
    ("seq", 8, 8),
    ("count", 16, 4),
    ("payload_len", 20, 4),
    ("crc", 24, 4),
    ("reserved", 28, 4),
];

fn lane_fields(v: &mut Vec<Field>, k: &Known, lane: u32, what: &str) {
    for &(name, off, len) in LANE_HEADER {
        field(
            v,
            format!("lane {lane} ({what}).{name}"),
            k.geo.lane_off(lane) + off,
            len,
        );
    }
    if what == "armed" {
        let e = k.geo.lane_off(lane) + 32;
        field(v, format!("lane {lane} ({what}).entry.off"), e, 8);
        field(v, format!("lane {lane} ({what}).entry.len"), e + 8, 4);
        field(v, format!("lane {lane} ({what}).entry.old"), e + 16, 16);
    }
}

/// The lane the armed base image uses.
const ARMED_LANE: u32 = 9;

/// The known image as a crash leaves it: marked mounted, with an armed record in
/// `ARMED_LANE` whose roll-back rewrites /a.txt's inode with the bytes it already holds.
fn armed_base(k: &Known) -> Vec<u8> {
    let mut img = k.image.clone();
    let st = MountState {
        state: STATE_MOUNTED,
        mount_count: 2,
        last_mount_ns: 3,
        last_unmount_ns: 2,
    }
    .encode();
    let off = 2 * 4096;
    img[off..off + st.len()].copy_from_slice(&st);
    let ino_off = k.inode_off("/a.txt");
    let old = img[ino_off as usize..ino_off as usize + 128].to_vec();
    arm_lane(&mut img, &k.geo, ARMED_LANE, &[(ino_off, old)], false);
    img
}

#[derive(Clone, Copy, Debug)]
enum Pattern {
    Zeros,
    Ones,
    FirstBit,
    MiddleBit,
    LastBit,
    Random,
}

const PATTERNS: [Pattern; 6] = [
    Pattern::Zeros,
    Pattern::Ones,
    Pattern::FirstBit,
    Pattern::MiddleBit,
    Pattern::LastBit,
    Pattern::Random,
];

fn damage(img: &mut [u8], f: &Field, p: Pattern, rng: &mut u64) {
    let b = &mut img[f.off as usize..f.off as usize + f.len];
    let bits = f.len * 8;
    let flip = |b: &mut [u8], bit: usize| b[bit / 8] ^= 1 << (bit % 8);
    match p {
        Pattern::Zeros => b.fill(0),
        Pattern::Ones => b.fill(0xff),
        Pattern::FirstBit => flip(b, 0),
        Pattern::MiddleBit => flip(b, bits / 2),
        Pattern::LastBit => flip(b, bits - 1),
        Pattern::Random => {
            for x in b.iter_mut() {
                *rng ^= *rng << 13;
                *rng ^= *rng >> 7;
                *rng ^= *rng << 17;
                *x = *rng as u8;
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The pattern left the field as it was.
    Unchanged,
    Detected,
    Recovered,
    /// Harmless and the tree reads back exactly as before.
    Harmless,
    /// Harmless, but a value the format cannot cross-check changed (times, owner, a size
    /// within the mapped blocks, ...): the tree reads back, differently.
    HarmlessValueChanged,
}

fn mount(img: &[u8], read_only: bool) -> std::io::Result<Fs> {
    Fs::mount_pm(
        Pm::from_bytes(img),
        &MountOptions {
            read_only,
            ..Default::default()
        },
        None,
        None,
    )
}

/// A repaired image must check clean, mount, read back and be left alone by a second repair.
fn verify_repaired(img: &[u8]) -> Result<(), String> {
    let c = check_pm(&Pm::from_bytes(img));
    if !c.is_clean() || !c.recovery.is_empty() {
        return Err(format!(
            "check after repair: {:?} {:?}",
            c.problems, c.recovery
        ));
    }
    let fs = mount(img, false).map_err(|e| format!("mount after repair: {e}"))?;
    let (_, errors) = read_tree(&fs);
    if !errors.is_empty() {
        return Err(format!("tree after repair: {errors:?}"));
    }
    drop(fs);
    let pm = Pm::from_bytes(img);
    let again = repair_pm(&pm);
    if again.exit_code() != EXIT_CLEAN || pm.snapshot() != img {
        return Err(format!("second repair not a no-op: {:?}", again.repairs));
    }
    Ok(())
}

fn classify(k: &Known, img: &[u8]) -> Result<Outcome, String> {
    let check = check_pm(&Pm::from_bytes(img));
    // Mount the damaged image both ways; walk whatever mounts.
    let mounted = match mount(img, false) {
        Ok(fs) => Ok(read_tree(&fs)),
        Err(e) => {
            if e.kind() != std::io::ErrorKind::InvalidData {
                return Err(format!("mount failed with {:?}: {e}", e.kind()));
            }
            Err(e)
        }
    };
    if let Ok(fs) = mount(img, true) {
        let _ = read_tree(&fs);
    }
    let pm = Pm::from_bytes(img);
    let rep = repair_pm(&pm);
    let repaired = pm.snapshot();
    match check.exit_code() {
        EXIT_UNCORRECTED => {
            if rep.exit_code() != EXIT_CORRECTED {
                return Err(format!(
                    "detected ({:?}) but repair exited {}: {:?} unrepairable {:?} after {:?}",
                    check.problems,
                    rep.exit_code(),
                    rep.repairs,
                    rep.unrepairable,
                    rep.after.problems
                ));
            }
            verify_repaired(&repaired).map_err(|e| {
                format!(
                    "detected ({:?}), repaired ({:?}): {e}",
                    check.problems, rep.repairs
                )
            })?;
            Ok(Outcome::Detected)
        }
        _ if !check.recovery.is_empty() => {
            let (_, errors) = mounted.map_err(|e| format!("recoverable but mount refused: {e}"))?;
            if !errors.is_empty() {
                return Err(format!("recovered by mount, tree read failed: {errors:?}"));
            }
            if rep.exit_code() != EXIT_CORRECTED {
                return Err(format!(
                    "recovery notes but repair exited {}",
                    rep.exit_code()
                ));
            }
            verify_repaired(&repaired)?;
            Ok(Outcome::Recovered)
        }
        _ => {
            let (tree, errors) =
                mounted.map_err(|e| format!("fsck clean but mount refused: {e}"))?;
            if !errors.is_empty() {
                return Err(format!("fsck clean but the tree does not read: {errors:?}"));
            }
            if rep.exit_code() != EXIT_CLEAN || repaired != img {
                return Err(format!("fsck clean but repair wrote: {:?}", rep.repairs));
            }
            Ok(if tree == k.tree {
                Outcome::Harmless
            } else {
                Outcome::HarmlessValueChanged
            })
        }
    }
}

#[test]
fn every_field_damage_is_detected_or_harmless() {
    let k = known_image();
    let mut armed_fields = Vec::new();
    lane_fields(&mut armed_fields, &k, ARMED_LANE, "armed");
    let bases = [
        ("clean", k.image.clone(), fields(&k)),
        ("after a crash", armed_base(&k), armed_fields),
    ];
    let nfields: usize = bases.iter().map(|b| b.2.len()).sum();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let mut failures = Vec::new();
    let mut cases = 0;
    let start = std::time::Instant::now();
    for (base_name, base, fields) in &bases {
        for f in fields {
            for p in PATTERNS {
                cases += 1;
                let mut img = base.clone();
                damage(&mut img, f, p, &mut rng);
                let outcome = if img == *base {
                    Ok(Outcome::Unchanged)
                } else {
                    catch_unwind(AssertUnwindSafe(|| classify(&k, &img))).unwrap_or_else(|e| {
                        let msg = e
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        Err(format!("PANIC: {msg}"))
                    })
                };
                match outcome {
                    Ok(o) => {
                        *counts.entry(format!("{o:?}")).or_default() += 1;
                        if std::env::var_os("SWEEP_VERBOSE").is_some() {
                            println!("[{base_name}] {:<48} {p:<10?} {o:?}", f.name);
                        }
                    }
                    Err(e) => failures.push(format!("[{base_name}] {} {p:?}: {e}", f.name)),
                }
            }
        }
    }
    println!(
        "{nfields} fields, {cases} cases in {:.1?}: {counts:?}, {} failures",
        start.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Several fields damaged at once (2 to 8, random fields and patterns, sometimes random
/// bytes anywhere in the inode table, hash table or directory blocks): nothing panics; the
/// check finds the damage or the image is harmless; a repair leaves a clean, mountable,
/// readable image whenever a superblock survives.
#[test]
fn random_multi_field_damage_is_repaired() {
    let k = known_image();
    let fields = fields(&k);
    let rounds: usize = std::env::var("SWEEP_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let spread: u64 = std::env::var("SWEEP_DAMAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let meta = k.geo.itable_start * 4096..k.geo.total_blocks * 4096;
    let mut failures = Vec::new();
    let mut detected = 0;
    for round in 0..rounds {
        let mut img = k.image.clone();
        let mut what = Vec::new();
        for _ in 0..2 + next() % spread {
            if next() % 4 == 0 {
                let off = meta.start + next() % (meta.end - meta.start);
                img[off as usize] = next() as u8;
                what.push(format!("byte {off:#x}"));
            } else {
                let f = &fields[(next() % fields.len() as u64) as usize];
                // Superblocks: damage at most the primary, so a repair is always possible.
                if f.name.starts_with("replica") {
                    continue;
                }
                let p = PATTERNS[(next() % PATTERNS.len() as u64) as usize];
                let mut seed = next() | 1;
                damage(&mut img, f, p, &mut seed);
                what.push(format!("{} {p:?}", f.name));
            }
        }
        let res = catch_unwind(AssertUnwindSafe(|| classify(&k, &img)));
        match res {
            Ok(Ok(o)) => detected += (o == Outcome::Detected) as usize,
            Ok(Err(e)) => failures.push(format!("round {round} {what:?}: {e}")),
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("round {round} {what:?}: PANIC {msg}"));
            }
        }
    }
    println!(
        "{rounds} rounds, {detected} detected, {} failures",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Damage that looks valid, so it reaches the semantic checks: slots set to keys of real
/// inodes, directory units set to well-formed headers naming real inodes, inode fields set to
/// small plausible values (link counts, parents, sizes, high-water marks, types). Same
/// requirements as above.
#[test]
fn plausible_damage_is_repaired() {
    use nvmfs::layout::dentry::Header;
    use nvmfs::FileType;
    let k = known_image();
    let g = &k.geo;
    let rounds: usize = std::env::var("SWEEP_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut rng = 0x0123_4567_89ab_cdefu64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n.max(1)
    };
    let inos: Vec<u32> = std::iter::once(1)
        .chain(k.tree.values().map(|n| n.ino as u32))
        .collect();
    let dirs: Vec<u32> = std::iter::once(1)
        .chain(
            k.tree
                .values()
                .filter(|n| n.file_type == FileType::Dir)
                .map(|n| n.ino as u32),
        )
        .collect();
    let types = [
        FileType::File,
        FileType::Dir,
        FileType::Symlink,
        FileType::Fifo,
        FileType::CharDevice,
        FileType::BlockDevice,
        FileType::Socket,
    ];
    let mut failures = Vec::new();
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for round in 0..rounds {
        let mut img = k.image.clone();
        let mut what = Vec::new();
        for _ in 0..1 + next(4) {
            let ino = inos[next(inos.len() as u64) as usize];
            match next(3) {
                0 => {
                    let s = next(g.data_blocks);
                    let key = hashfs::key(ino, next(12) as u32);
                    img[g.slot_off(s) as usize..][..8].copy_from_slice(&key.to_le_bytes());
                    what.push(format!("slot {s} = key({ino})"));
                }
                1 => {
                    let d = dirs[next(dirs.len() as u64) as usize];
                    let Some(s) = nvmfs::testing::slot_of(&img, g, d, 0) else {
                        continue;
                    };
                    let len = 1 + next(60) as usize;
                    let ft = types[next(7) as usize];
                    let h = Header::new(ino, len, ft);
                    let unit = next(64 - h.units as u64);
                    let off = g.data_off(s) + unit * 64;
                    img[off as usize..][..8].copy_from_slice(&h.encode().to_le_bytes());
                    for b in &mut img[off as usize + 8..off as usize + 8 + len.min(56)] {
                        *b = b'a' + next(3) as u8;
                    }
                    what.push(format!("dir {d} unit {unit} -> {ino} {ft:?} len {len}"));
                }
                _ => {
                    let off = g.inode_off(ino as u64) as usize;
                    let (name, at, v): (&str, usize, u64) = match next(6) {
                        0 => ("nlink", 4, next(4)),
                        1 => ("parent", 72, next(inos.len() as u64 + 2)),
                        2 => ("dir_units", 80, next(130)),
                        3 => ("size", 16, next(50_000)),
                        4 => ("dir_entries", 76, next(12)),
                        _ => (
                            "mode",
                            0,
                            types[next(7) as usize].mode_bits() as u64 | 0o644,
                        ),
                    };
                    let w = if name == "size" { 8 } else { 4 };
                    img[off + at..off + at + w].copy_from_slice(&v.to_le_bytes()[..w]);
                    what.push(format!("inode {ino}.{name} = {v}"));
                }
            }
        }
        match catch_unwind(AssertUnwindSafe(|| classify(&k, &img))) {
            Ok(Ok(o)) => *counts.entry(format!("{o:?}")).or_default() += 1,
            Ok(Err(e)) => failures.push(format!("round {round} {what:?}: {e}")),
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("round {round} {what:?}: PANIC {msg}"));
            }
        }
    }
    println!("{rounds} rounds: {counts:?}, {} failures", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
