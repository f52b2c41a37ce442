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
use crate::trace::{crash_points, Recorder};

/// Region size of a workload image.
pub const IMAGE_BYTES: u64 = 512 << 10;

/// What one workload's check found.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub fences: usize,
    pub images: usize,
    pub violations: Vec<String>,
}

/// Path -> (type, size, content hash, link count, blocks, inode number).
pub type Tree = BTreeMap<String, (FileType, u64, u64, u32, u64, u64)>;

fn hash(b: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

/// The whole tree of `fs` (errors become a tree with an "!error" entry, never a panic).
pub fn tree(fs: &Fs) -> Tree {
    let mut t = Tree::new();
    if let Err(e) = walk(fs, "", &mut t) {
        t.insert(format!("!error: {e}"), (FileType::File, 0, 0, 0, 0, 0));
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
            (
                md.file_type,
                md.size,
                hash(&body),
                md.nlink,
                md.blocks,
                md.ino,
            ),
        );
        if md.file_type == FileType::Dir {
            walk(fs, &p, t)?;
        }
    }
    Ok(())
}

/// Equal, except that the content and block count of the inode `torn` (under any of its
/// names) may differ: an in-place write may be torn and may have filled some of the holes it
/// covers.
fn same(a: &Tree, b: &Tree, torn: Option<u64>) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((pa, va), (pb, vb))| {
            pa == pb
                && (va == vb
                    || (Some(va.5) == torn && (va.0, va.1, va.3, va.5) == (vb.0, vb.1, vb.3, vb.5)))
        })
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
    let rec = Arc::new(Recorder::default());
    let mut pm = Pm::in_memory(image_bytes);
    pm.set_trace(Some(rec.clone()));
    let fs = match Fs::format_pm_with(pm, mapping).and_then(|fs| ace::populate(&fs).map(|_| fs)) {
        Ok(fs) => fs,
        Err(e) => {
            return Outcome {
                violations: vec![format!("setup failed: {e}")],
                ..Default::default()
            }
        }
    };
    let base = fs.snapshot();
    let mut states = vec![tree(&fs)];
    rec.start();
    for op in ops {
        rec.op_begin("op");
        let _ = op.run(&fs);
        rec.op_end();
        states.push(tree(&fs));
    }
    let events = rec.stop();
    let (points, lost) = crash_points(&base, &events);
    let mut out = Outcome {
        fences: points.len(),
        violations: lost,
        ..Default::default()
    };
    let mut seen = std::collections::HashSet::new();
    let mut recovery_checked = vec![false; ops.len()];
    for p in &points {
        let (before, after) = (&states[p.op], &states[p.op + 1]);
        let torn = ops[p.op]
            .torn_file()
            .and_then(|path| before.get(path))
            .map(|v| v.5);
        let mut i = 0;
        p.for_each_image(&mut seen, |img| {
            out.images += 1;
            let deep = depth == RecoveryDepth::Every || !recovery_checked[p.op];
            if let Some(v) =
                check_image(img, before, after, torn, deep, &mut recovery_checked[p.op])
            {
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

fn check_image(
    img: &[u8],
    before: &Tree,
    after: &Tree,
    torn: Option<u64>,
    deep: bool,
    recovery_checked: &mut bool,
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
    let mounted = Fs::mount_pm(pm, &MountOptions::default(), None, None);
    rec.op_end();
    let recovery_events = rec.stop();
    let fs = match mounted {
        Ok(fs) => fs,
        Err(e) => return Some(format!("mount failed: {e}")),
    };
    let t = tree(&fs);
    if !same(&t, before, torn) && !same(&t, after, torn) {
        let diff: Vec<String> = t
            .iter()
            .filter(|(k, v)| before.get(*k) != Some(v) && after.get(*k) != Some(v))
            .map(|(k, v)| format!("{k}={v:?}"))
            .chain(
                before
                    .keys()
                    .filter(|k| !t.contains_key(*k) && after.contains_key(*k))
                    .map(|k| format!("{k} missing")),
            )
            .take(6)
            .collect();
        return Some(format!(
            "state is neither before nor after: {}",
            diff.join(", ")
        ));
    }
    let r = check_pm(&Pm::from_bytes(&fs.snapshot()));
    if !r.is_clean() {
        return Some(format!("fsck after recovery: {:?}", r.problems));
    }
    if deep && repaired(fs.recovery_report()) {
        *recovery_checked = true;
        return check_recovery_crashes(img, &recovery_events, &t);
    }
    None
}

fn repaired(r: &nvmfs::RecoveryReport) -> bool {
    r.lanes_rolled_back + r.torn_lanes_cleared > 0
        || r.reserved_slots_cleared + r.stray_blocks_freed + r.block_counts_fixed + r.orphans_freed
            > 0
}

/// A power loss during recovery: every image it can leave must recover to `want`.
fn check_recovery_crashes(
    img: &[u8],
    events: &[crate::trace::Event],
    want: &Tree,
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
            err = match Fs::mount_pm(Pm::from_bytes(again), &MountOptions::default(), None, None) {
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
