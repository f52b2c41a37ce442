//! The oracle: runs a workload on a traced in-memory image, then checks every crash image
//! of every fence: fsck must be clean, mount (with real recovery) must succeed, the tree must
//! equal the state after operation k-1 or after operation k (k in flight), and fsck of the
//! recovered image must be clean. Stores not durable when an operation returns are reported
//! too.

use std::collections::BTreeMap;
use std::sync::Arc;

use nvmfs::fsck::check_pm;
use nvmfs::media::Pm;
use nvmfs::{FileType, Fs, MappingKind, MountOptions};

use crate::ace::{self, Op};
use crate::trace::{crash_points, crash_points_with, Recorder, Tear};

/// Region size of a workload image.
pub const IMAGE_BYTES: u64 = 512 << 10;

/// What one workload's check found.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub fences: usize,
    pub images: usize,
    pub violations: Vec<String>,
}

/// What the oracle compares of one name: everything `stat` shows that GUARANTEES.md makes
/// crash-atomic (type, size, link count, blocks, inode number, permission bits, owner, device
/// number, atime, mtime, ctime) and the whole content (file bytes or symlink target).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub file_type: FileType,
    pub ino: u64,
    pub size: u64,
    pub nlink: u32,
    pub blocks: u64,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    /// File bytes or symlink target (empty for the other types).
    pub body: Vec<u8>,
}

impl Entry {
    /// One line for a violation message (the body by length and hash).
    pub fn show(&self) -> String {
        format!(
            "{:?} ino {} size {} nlink {} blocks {} mode {:o} uid {} gid {} rdev {:#x} \
             atime {} mtime {} ctime {} body {}B#{:016x}",
            self.file_type,
            self.ino,
            self.size,
            self.nlink,
            self.blocks,
            self.perm,
            self.uid,
            self.gid,
            self.rdev,
            self.atime,
            self.mtime,
            self.ctime,
            self.body.len(),
            hash(&self.body)
        )
    }
}

/// Path -> entry.
pub type Tree = BTreeMap<String, Entry>;

fn hash(b: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

/// The whole tree of `fs` (errors become a tree with an "!error" entry, never a panic).
pub fn tree(fs: &Fs) -> Tree {
    let mut t = Tree::new();
    let walked = walk(fs, "", &mut t);
    if fs.tier_info().is_some() {
        // On a tiered image st_blocks counts PM-resident blocks (GUARANTEES.md §8c): a cache
        // state that reads and evictions change, not part of what a crash must preserve.
        t.values_mut().for_each(|e| e.blocks = 0);
    }
    if let Err(e) = walked {
        t.insert(
            format!("!error: {e}"),
            Entry {
                file_type: FileType::File,
                ino: 0,
                size: 0,
                nlink: 0,
                blocks: 0,
                perm: 0,
                uid: 0,
                gid: 0,
                rdev: 0,
                atime: 0,
                mtime: 0,
                ctime: 0,
                body: Vec::new(),
            },
        );
    }
    t
}

fn walk(fs: &Fs, dir: &str, t: &mut Tree) -> std::io::Result<()> {
    for e in fs.read_dir(if dir.is_empty() { "/" } else { dir })? {
        let p = format!("{dir}/{}", String::from_utf8_lossy(&e.name));
        let md = fs.symlink_metadata(&p)?;
        let body = match md.file_type {
            FileType::File => fs.read_file(&p)?,
            FileType::Symlink => fs.read_link(&p)?.into_os_string().into_encoded_bytes(),
            _ => Vec::new(),
        };
        t.insert(
            p.clone(),
            Entry {
                file_type: md.file_type,
                ino: md.ino,
                size: md.size,
                nlink: md.nlink,
                blocks: md.blocks,
                perm: md.perm,
                uid: md.uid,
                gid: md.gid,
                rdev: md.rdev,
                atime: md.atime_ns,
                mtime: md.mtime_ns,
                ctime: md.ctime_ns,
                body,
            },
        );
        if md.file_type == FileType::Dir {
            walk(fs, &p, t)?;
        }
    }
    Ok(())
}

/// What GUARANTEES.md lets a crash leave of the one inode an operation changes outside the
/// journal (§3, §3a, §4). Everything else must be exactly the state before or after.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loose {
    /// The inode (under any of its names).
    pub ino: Option<u64>,
    /// mtime and ctime may each be the old or the new value (overwrite, extending write,
    /// extending truncate, direct-map sync: the times are stored after the data or size).
    pub times: bool,
    /// Written in place `[off, off + len)`: see [`torn_ok`]; the block count may be anything
    /// between the old and the new one (punch hole unmaps before its transaction).
    pub torn: Option<(u64, u64)>,
    /// The block count may be anything between the old and the new one (more than 200
    /// hole fills commit in several transactions, §3, §4).
    pub blocks: bool,
}

/// The byte-level rule of an in-place write that a crash cut short (GUARANTEES.md §3): `got`
/// (the file after recovery) against `old` and `new` (before and after the operation), file
/// offsets = media offsets modulo 4 KiB, so 8-byte words are aligned on file offsets:
/// inside `[off, off + len)` each aligned 8-byte word is wholly old or wholly new; outside it
/// every byte is unchanged; bytes past the old EOF count as zeros in `old`, so there they
/// must be new or zero.
pub fn torn_ok(got: &[u8], old: &[u8], new: &[u8], off: u64, len: u64) -> Result<(), String> {
    let byte = |v: &[u8], i: usize| v.get(i).copied().unwrap_or(0);
    let (lo, hi) = (off as usize, (off + len) as usize);
    for w in (0..got.len()).step_by(8) {
        let r = w..(w + 8).min(got.len());
        let is_old = r.clone().all(|i| got[i] == byte(old, i));
        if is_old {
            continue;
        }
        let inside = r.start < hi && r.end > lo;
        let is_new = r.clone().all(|i| got[i] == byte(new, i));
        if !inside {
            return Err(format!(
                "byte {w}: changed outside the written range {lo}..{hi}"
            ));
        }
        if !is_new {
            return Err(format!(
                "word at {w}: neither old nor new ({:02x?}; old {:02x?}, new {:02x?})",
                &got[r.clone()],
                r.clone().map(|i| byte(old, i)).collect::<Vec<_>>(),
                r.map(|i| byte(new, i)).collect::<Vec<_>>()
            ));
        }
    }
    Ok(())
}

/// `Ok` if `t` equals `x` (the state before or after), allowing `loose`'s exceptions for its
/// inode; otherwise the first difference.
pub fn matches(
    t: &Tree,
    x: &Tree,
    before: &Tree,
    after: &Tree,
    loose: &Loose,
) -> Result<(), String> {
    for k in x.keys() {
        if !t.contains_key(k) {
            return Err(format!("{k} missing"));
        }
    }
    for (k, e) in t {
        let Some(want) = x.get(k) else {
            return Err(format!("{k} extra: {}", e.show()));
        };
        if e == want {
            continue;
        }
        let mut e2 = e.clone();
        if Some(e.ino) == loose.ino {
            if let (Some(b), Some(a)) = (before.get(k), after.get(k)) {
                if loose.times {
                    if e.mtime == b.mtime || e.mtime == a.mtime {
                        e2.mtime = want.mtime;
                    }
                    if e.ctime == b.ctime || e.ctime == a.ctime {
                        e2.ctime = want.ctime;
                    }
                }
                if (loose.torn.is_some() || loose.blocks)
                    && (b.blocks.min(a.blocks)..=b.blocks.max(a.blocks)).contains(&e.blocks)
                {
                    e2.blocks = want.blocks;
                }
                if let Some((off, len)) = loose.torn {
                    match torn_ok(&e.body, &b.body, &a.body, off, len) {
                        Ok(()) if e.body.len() as u64 == want.size => e2.body = want.body.clone(),
                        Ok(()) => {}
                        Err(m) => return Err(format!("{k}: torn write: {m}")),
                    }
                }
            }
        }
        if &e2 != want {
            return Err(format!("{k} is {}, expected {}", e.show(), want.show()));
        }
    }
    Ok(())
}

/// Runs `ops` and checks every crash image.
/// How much of recovery itself is crash-checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryDepth {
    /// Every crash image that needed repair also has its recovery crash-checked.
    Every,
    /// Only the first such image of each operation (random sequences: keeps 10,000 of them
    /// feasible while every crash image is still mounted and compared).
    FirstPerOperation,
}

pub fn check_workload(ops: &[Op]) -> Outcome {
    check_workload_with(ops, RecoveryDepth::Every)
}

pub fn check_workload_with(ops: &[Op], depth: RecoveryDepth) -> Outcome {
    check_workload_on(ops, depth, MappingKind::HashFs, IMAGE_BYTES)
}

/// Checks `ops` on an image of `image_bytes` formatted with `mapping`.
pub fn check_workload_on(
    ops: &[Op],
    depth: RecoveryDepth,
    mapping: MappingKind,
    image_bytes: u64,
) -> Outcome {
    check_workload_tear(ops, depth, mapping, image_bytes, Tear::Lines)
}

/// [`check_workload_on`] with the tracer's tearing model `tear`.
pub fn check_workload_tear(
    ops: &[Op],
    depth: RecoveryDepth,
    mapping: MappingKind,
    image_bytes: u64,
    tear: Tear,
) -> Outcome {
    check_workload_after(&[], ops, depth, mapping, image_bytes, tear)
}

/// As [`check_workload_tear`], with `setup` run on the populated image before recording:
/// the crash images are those of `ops` only.
pub fn check_workload_after(
    setup: &[Op],
    ops: &[Op],
    depth: RecoveryDepth,
    mapping: MappingKind,
    image_bytes: u64,
    tear: Tear,
) -> Outcome {
    let rec = Arc::new(Recorder::default());
    let mut pm = Pm::in_memory(image_bytes);
    pm.set_trace(Some(rec.clone()));
    let ready = Fs::format_pm_with(pm, mapping).and_then(|fs| {
        ace::populate(&fs)?;
        for op in setup {
            op.run(&fs)?;
        }
        Ok(fs)
    });
    let fs = match ready {
        Ok(fs) => fs,
        Err(e) => {
            return Outcome {
                violations: vec![format!("setup failed: {e}")],
                ..Default::default()
            }
        }
    };
    let (base, states, setup_violations) = record_ops(&fs, &rec, ops, &|_| Ok(()));
    let events = rec.stop();
    let (points, lost) = crash_points_with(&base, &events, tear);
    let plain = |pm: Pm| Fs::mount_pm(pm, &MountOptions::default(), None, None);
    check_points(
        ops,
        depth,
        &states,
        setup_violations,
        &points,
        lost,
        &|_| &plain,
    )
}

/// How a crash image is mounted: a plain image, or a tiered one on its SSD as of the crash.
pub type Mounter<'a> = &'a dyn Fn(Pm) -> std::io::Result<Fs>;

/// Runs `ops` on `fs` with `rec` recording: the image the recording starts from; for each
/// operation the state before it, after each of its steps (an operation made of several
/// file-system calls, see `Op::run_marked`), and after it; and the operations that failed or
/// did nothing. `prepare` runs after the first state is read and before the image is taken
/// (a tiered image evicts what that read cached in PM).
pub(crate) fn record_ops(
    fs: &Fs,
    rec: &Recorder,
    ops: &[Op],
    prepare: &dyn Fn(&Fs) -> std::io::Result<()>,
) -> (Vec<u8>, Vec<Vec<Tree>>, Vec<String>) {
    let mut states: Vec<Vec<Tree>> = Vec::new();
    let mut cur = tree(fs);
    let mut setup_violations = Vec::new();
    if let Err(e) = prepare(fs) {
        setup_violations.push(format!("preparing the image failed: {e}"));
    }
    let base = fs.snapshot();
    rec.start();
    for (k, op) in ops.iter().enumerate() {
        let mut steps = vec![cur];
        rec.op_begin("op");
        let r = op.run_marked(fs, &mut || steps.push(tree(fs)));
        rec.op_end();
        cur = tree(fs);
        // Every operation of a workload must do something: a failed or no-op operation
        // would leave its crash images trivially equal to the state before.
        match r {
            Err(e) => setup_violations.push(format!("operation {k} ({op:?}) failed: {e}")),
            // An operation expected to fail (ENOSPC) must leave everything as it was.
            Ok(()) if op.must_fail() => {
                if steps[0] != cur {
                    setup_violations.push(format!(
                        "operation {k} ({op:?}) failed but changed the tree"
                    ))
                }
            }
            Ok(()) if steps[0] == cur => {
                setup_violations.push(format!("operation {k} ({op:?}) changed nothing"))
            }
            Ok(()) => {}
        }
        steps.push(cur.clone());
        states.push(steps);
    }
    (base, states, setup_violations)
}

/// Checks every image of every crash point (`check_image`), mounting the images of point
/// `p` with `mount_for(p)`.
pub(crate) fn check_points<'m>(
    ops: &[Op],
    depth: RecoveryDepth,
    states: &[Vec<Tree>],
    setup_violations: Vec<String>,
    points: &[crate::trace::CrashPoint],
    lost: Vec<String>,
    mount_for: &dyn Fn(&crate::trace::CrashPoint) -> Mounter<'m>,
) -> Outcome {
    let mut out = Outcome {
        fences: points.len(),
        violations: setup_violations,
        ..Default::default()
    };
    out.violations.extend(lost);
    let mut seen = std::collections::HashSet::new();
    let mut recovery_checked = vec![false; ops.len()];
    for p in points {
        let steps = &states[p.op];
        let looses: Vec<Loose> = (0..steps.len() - 1)
            .map(|s| ops[p.op].loose(s, steps))
            .collect();
        let mut i = 0;
        let mount = mount_for(p);
        p.for_each_image(&mut seen, |img| {
            out.images += 1;
            let deep = depth == RecoveryDepth::Every || !recovery_checked[p.op];
            let checked = &mut recovery_checked[p.op];
            if let Some(v) = check_image_on(img, steps, &looses, deep, checked, mount) {
                out.violations.push(format!(
                    "operation {} ({:?}), fence {}, image {i}: {v}",
                    p.op, ops[p.op], p.fence
                ));
            }
            i += 1;
        });
    }
    out
}

/// The checks of one crash image: fsck clean, mounts with recovery, the tree matches the
/// state before or after one step of the operation (`steps[s]` -> `steps[s + 1]`, with
/// `looses[s]`'s exceptions; a single call has one step), fsck clean after recovery, and (if
/// `deep` and recovery repaired something) every crash during recovery recovers to the same
/// tree.
pub fn check_image(
    img: &[u8],
    steps: &[Tree],
    looses: &[Loose],
    deep: bool,
    recovery_checked: &mut bool,
) -> Option<String> {
    let plain = |pm: Pm| Fs::mount_pm(pm, &MountOptions::default(), None, None);
    check_image_on(img, steps, looses, deep, recovery_checked, &plain)
}

/// [`check_image`], mounting with `mount`.
pub fn check_image_on(
    img: &[u8],
    steps: &[Tree],
    looses: &[Loose],
    deep: bool,
    recovery_checked: &mut bool,
    mount: Mounter<'_>,
) -> Option<String> {
    let r = check_pm(&Pm::from_bytes(img));
    if !r.is_clean() {
        return Some(format!("fsck before mount: {:?}", r.problems));
    }
    // Recovery runs traced, so a crash during recovery can be checked too.
    let rec = Arc::new(Recorder::default());
    let mut pm = Pm::from_bytes(img);
    pm.set_trace(Some(rec.clone()));
    rec.start();
    rec.op_begin("recovery");
    let mounted = mount(pm);
    rec.op_end();
    let recovery_events = rec.stop();
    let fs = match mounted {
        Ok(fs) => fs,
        Err(e) => return Some(format!("mount failed: {e}")),
    };
    let t = tree(&fs);
    let mut why = Vec::new();
    let fits = steps.windows(2).zip(looses).any(|(w, loose)| {
        let (before, after) = (&w[0], &w[1]);
        match (
            matches(&t, before, before, after, loose),
            matches(&t, after, before, after, loose),
        ) {
            (Err(b), Err(a)) => {
                why.push((b, a));
                false
            }
            _ => true,
        }
    });
    if !fits {
        let (b, a) = (&why[0].0, &why[why.len() - 1].1);
        let via = if steps.len() > 2 {
            format!(" (nor any of its {} intermediate steps)", steps.len() - 2)
        } else {
            String::new()
        };
        return Some(format!(
            "state is neither before nor after{via}: against before: {b}; against after: {a}"
        ));
    }
    let r = check_pm(&Pm::from_bytes(&fs.snapshot()));
    if !r.is_clean() {
        return Some(format!("fsck after recovery: {:?}", r.problems));
    }
    if deep && repaired(fs.recovery_report()) {
        *recovery_checked = true;
        return check_recovery_crashes_on(img, &recovery_events, &t, mount);
    }
    None
}

pub(crate) fn repaired(r: &nvmfs::RecoveryReport) -> bool {
    r.lanes_rolled_back + r.torn_lanes_cleared > 0
        || r.reserved_slots_cleared + r.stray_blocks_freed + r.block_counts_fixed + r.orphans_freed
            > 0
        || r.tier_stale_entries + r.tier_duplicate_entries > 0
}

/// A power loss during recovery: every image it can leave must recover to `want`.
pub(crate) fn check_recovery_crashes(
    img: &[u8],
    events: &[crate::trace::Event],
    want: &Tree,
) -> Option<String> {
    let plain = |pm: Pm| Fs::mount_pm(pm, &MountOptions::default(), None, None);
    check_recovery_crashes_on(img, events, want, &plain)
}

/// [`check_recovery_crashes`], mounting with `mount`.
pub(crate) fn check_recovery_crashes_on(
    img: &[u8],
    events: &[crate::trace::Event],
    want: &Tree,
    mount: Mounter<'_>,
) -> Option<String> {
    let (points, lost) = crash_points(img, events);
    if let Some(l) = lost.first() {
        return Some(format!("recovery: {l}"));
    }
    let mut seen = std::collections::HashSet::new();
    let mut err = None;
    for p in &points {
        p.for_each_image(&mut seen, |again| {
            if err.is_some() {
                return;
            }
            err = match mount(Pm::from_bytes(again)) {
                Err(e) => Some(format!(
                    "crash during recovery (fence {}): mount failed: {e}",
                    p.fence
                )),
                Ok(fs) if &tree(&fs) != want => Some(format!(
                    "crash during recovery (fence {}): different tree",
                    p.fence
                )),
                Ok(_) => None,
            };
        });
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmfs::layout::inode;
    use nvmfs::OpenOptions;

    /// The populated image, the state before, and `op`'s state and image after.
    fn run(op: &Op) -> (Tree, Tree, Vec<u8>) {
        let fs = Fs::format_pm_with(Pm::in_memory(IMAGE_BYTES), MappingKind::HashFs).unwrap();
        ace::populate(&fs).unwrap();
        let before = tree(&fs);
        op.run(&fs).unwrap();
        (before, tree(&fs), fs.snapshot())
    }

    fn check(img: &[u8], before: &Tree, after: &Tree, loose: &Loose) -> Option<String> {
        let steps = [before.clone(), after.clone()];
        check_image(img, &steps, std::slice::from_ref(loose), false, &mut false)
    }

    /// Patches `len` bytes at `field` of the record of `path`'s inode in `img`.
    fn patch(img: &[u8], t: &Tree, path: &str, field: usize, value: u64, len: usize) -> Vec<u8> {
        let fs = Fs::mount_pm(Pm::from_bytes(img), &MountOptions::default(), None, None).unwrap();
        let off = fs.superblock().geo.inode_off(t[path].ino) as usize + field;
        let mut img = img.to_vec();
        img[off..off + len].copy_from_slice(&value.to_le_bytes()[..len]);
        img
    }

    #[test]
    fn unchanged_images_pass() {
        for op in [
            Op::Chmod("/foo", 0o600),
            Op::Mknod("/B/null", libc::S_IFCHR | 0o666, libc::makedev(1, 3)),
        ] {
            let (before, after, img) = run(&op);
            assert_eq!(check(&img, &before, &after, &Loose::default()), None);
        }
    }

    #[test]
    fn every_compared_attribute_is_checked() {
        let (before, after, img) = run(&Op::Chmod("/foo", 0o600));
        let e = &after["/foo"];
        let fields: [(&str, usize, u64, usize); 7] = [
            ("mode", inode::O_MODE, (libc::S_IFREG | 0o601) as u64, 4),
            ("uid", inode::O_UID, e.uid as u64 + 1, 4),
            ("gid", inode::O_GID, e.gid as u64 + 1, 4),
            ("atime", inode::O_ATIME, e.atime as u64 + 1, 8),
            ("mtime", inode::O_MTIME, e.mtime as u64 + 1, 8),
            ("ctime", inode::O_CTIME, e.ctime as u64 + 1, 8),
            // The mode as before but the ctime as after: a half-applied setattr.
            ("ctime", inode::O_CTIME, before["/foo"].ctime as u64, 8),
        ];
        for (name, field, value, len) in fields {
            let bad = patch(&img, &after, "/foo", field, value, len);
            let v = check(&bad, &before, &after, &Loose::default());
            assert!(
                v.as_deref().is_some_and(|v| v.contains("neither")),
                "{name} not caught: {v:?}"
            );
        }
        // rdev of a device node.
        let (before, after, img) = run(&Op::Mknod(
            "/B/null",
            libc::S_IFCHR | 0o666,
            libc::makedev(1, 3),
        ));
        let bad = patch(&img, &after, "/B/null", inode::O_INLINE, 0x0105, 8);
        let v = check(&bad, &before, &after, &Loose::default());
        assert!(
            v.as_deref().is_some_and(|v| v.contains("rdev 0x105")),
            "{v:?}"
        );
    }

    #[test]
    fn times_may_lag_only_where_promised() {
        let op = Op::Append("/bar", 100);
        let (before, after, img) = run(&op);
        let loose = op.loose(0, std::slice::from_ref(&before));
        assert!(loose.times && loose.torn.is_none());
        let old = before["/bar"].mtime as u64;
        let lagging = patch(&img, &after, "/bar", inode::O_MTIME, old, 8);
        assert_eq!(check(&lagging, &before, &after, &loose), None);
        // Not for an operation made atomic by the journal.
        assert!(check(&lagging, &before, &after, &Loose::default()).is_some());
        // Nor a third value.
        let other = patch(&img, &after, "/bar", inode::O_MTIME, old + 1, 8);
        assert!(check(&other, &before, &after, &loose).is_some());
    }

    #[test]
    fn torn_words_rule() {
        let old: Vec<u8> = (0..64).collect();
        let new: Vec<u8> = (0..64)
            .map(|i| if (8..40).contains(&i) { 200 + i } else { i })
            .collect();
        let mut got = old.clone();
        got[16..24].copy_from_slice(&new[16..24]);
        assert_eq!(torn_ok(&got, &old, &new, 8, 32), Ok(()));
        assert_eq!(torn_ok(&new, &old, &new, 8, 32), Ok(()));
        assert_eq!(torn_ok(&old, &old, &new, 8, 32), Ok(()));
        // Half a word new.
        let mut half = old.clone();
        half[16..20].copy_from_slice(&new[16..20]);
        assert!(torn_ok(&half, &old, &new, 8, 32)
            .unwrap_err()
            .contains("word at 16"));
        // A byte outside the range changed.
        let mut outside = new.clone();
        outside[50] ^= 1;
        assert!(torn_ok(&outside, &old, &new, 8, 32)
            .unwrap_err()
            .contains("outside"));
        // Past the old EOF (old is 40 bytes): new or zero, nothing else.
        let short = &old[..40];
        let mut grown = new.clone();
        grown[40..48].fill(0);
        assert_eq!(torn_ok(&grown, short, &new, 8, 56), Ok(()));
        grown[44] = 7;
        assert!(torn_ok(&grown, short, &new, 8, 56).is_err());
    }

    #[test]
    fn torn_overwrite_is_checked_word_by_word() {
        let op = Op::Overwrite("/foo", 10, 100);
        let fs = Fs::format_pm_with(Pm::in_memory(IMAGE_BYTES), MappingKind::HashFs).unwrap();
        ace::populate(&fs).unwrap();
        let (before, base) = (tree(&fs), fs.snapshot());
        op.run(&fs).unwrap();
        let after = tree(&fs);
        let loose = op.loose(0, std::slice::from_ref(&before));
        let (old, new) = (&before["/foo"].body, &after["/foo"].body);
        // The state before with /foo's bytes [0, 128) taken from `pick` (0 old, 1 new,
        // 2 neither).
        let image_with = |pick: &dyn Fn(usize) -> u8| {
            let fs =
                Fs::mount_pm(Pm::from_bytes(&base), &MountOptions::default(), None, None).unwrap();
            let buf: Vec<u8> = (0..128)
                .map(|i| match pick(i) {
                    0 => old[i],
                    1 => new[i],
                    _ => old[i] ^ new[i] ^ 0x5a,
                })
                .collect();
            OpenOptions::new()
                .write(true)
                .open(&fs, "/foo")
                .unwrap()
                .write_all_at(&buf, 0)
                .unwrap();
            // The times as before (the write stamped its own).
            let (m, c) = (before["/foo"].mtime as u64, before["/foo"].ctime as u64);
            let img = patch(&fs.snapshot(), &before, "/foo", inode::O_MTIME, m, 8);
            patch(&img, &before, "/foo", inode::O_CTIME, c, 8)
        };
        // Whole words mixed: allowed.
        let ok = image_with(&|i| ((i / 8) % 2) as u8);
        assert_eq!(check(&ok, &before, &after, &loose), None);
        // Half of the word at 16 new: caught.
        let bad = image_with(&|i| u8::from((16..20).contains(&i)));
        let v = check(&bad, &before, &after, &loose);
        assert!(
            v.as_deref().is_some_and(|v| v.contains("word at 16")),
            "{v:?}"
        );
        // A word of neither: caught.
        let bad = image_with(&|i| if (40..48).contains(&i) { 2 } else { 1 });
        let v = check(&bad, &before, &after, &loose);
        assert!(
            v.as_deref().is_some_and(|v| v.contains("word at 40")),
            "{v:?}"
        );
        // A byte past the written range [10, 110) changed: caught.
        let bad = image_with(&|i| if i == 120 { 2 } else { u8::from(i < 110) });
        let v = check(&bad, &before, &after, &loose);
        assert!(v.as_deref().is_some_and(|v| v.contains("outside")), "{v:?}");
        // The same torn image is a violation for an operation promised atomic.
        assert!(check(&ok, &before, &after, &Loose::default()).is_some());
    }

    #[test]
    fn failed_and_no_op_operations_are_violations() {
        let o = check_workload(&[Op::Rmdir("/A")]);
        assert!(
            o.violations.iter().any(|v| v.contains("failed")),
            "{:?}",
            o.violations
        );
        // A punch past the mapped end does nothing.
        let o = check_workload(&[Op::Punch("/bar", 8192, 4096)]);
        assert!(
            o.violations.iter().any(|v| v.contains("changed nothing")),
            "{:?}",
            o.violations
        );
    }
}
