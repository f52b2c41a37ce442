//! Power loss on an image that was itself recovered from a crash: recovery, more operations,
//! a clean unmount, a clean remount, more operations, with a crash checked at every fence of
//! all of it as one persistence history.
//!
//! A workload (seed S) runs a random sequence of ACE operations traced and picks one of its
//! crash images whose recovery has work to do (a lane to roll back, reserved or stray slots,
//! block counts, orphans). That image is then mounted (recovery) with the tracer on, 1-3 more
//! operations run, the file system is unmounted cleanly, the image is mounted again (a clean
//! mount), and 1-3 more operations run. The whole trace, from the first store of recovery to
//! the last operation, is replayed from the crash image as one history, so a store recovery
//! or an operation left in the CPU cache stays in flight across the unmount and the remount:
//! crash points inside the later operations (and the unmount, and the remount's first fence,
//! a power loss while unmounted) can drop it, and the image may then say "clean" while
//! missing it, which is what a clean unmount after recovery must not allow. Each crash image
//! gets the usual checks (fsck, mount, the tree before or after the step in flight, fsck,
//! crashes during recovery); recovery, the unmount and the remount must leave the tree as it
//! was. The memory the remount starts from is the crash image with every traced store applied,
//! checked against the live image before the unmount (a store the tracer missed is reported).

use std::sync::Arc;

use nvmfs::media::Pm;
use nvmfs::{Fs, MappingKind, MountOptions};

use crate::ace::{self, Op};
use crate::oracle::{self, Loose, Outcome, Tree};
use crate::trace::{crash_points, crash_points_with, Event, Recorder, Tear};

/// One step of the history after the crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Mount of the crash image: recovery.
    Recovery,
    Op(Op),
    /// Clean unmount.
    Unmount,
    /// Mount of the cleanly unmounted image.
    Remount,
}

/// A workload and the command that reruns it.
#[derive(Clone, Debug)]
pub struct Workload {
    pub id: String,
    pub seed: u64,
    pub mapping: MappingKind,
    pub tear: Tear,
}

/// `count` workloads, seeds `seed..seed + count`.
pub fn workloads(count: u64, seed: u64, mapping: MappingKind, tear: Tear) -> Vec<Workload> {
    (seed..seed + count)
        .map(|s| {
            let mut id = format!("--after-recovery 1 --seed {s}");
            if mapping != MappingKind::HashFs {
                id = format!("--mapping {mapping} {id}");
            }
            if let Tear::Words { samples } = tear {
                id = format!("--tear words --tear-samples {samples} {id}");
            }
            Workload {
                id,
                seed: s,
                mapping,
                tear,
            }
        })
        .collect()
}

/// What one workload found, and its history.
#[derive(Clone, Debug, Default)]
pub struct Checked {
    pub outcome: Outcome,
    /// The operations before the crash.
    pub first: Vec<Op>,
    /// The history after it.
    pub steps: Vec<Step>,
    /// Recovery of the picked crash image had work to do.
    pub repaired: bool,
    /// Crash images checked after the clean unmount (at the remount and later).
    pub images_after_unmount: usize,
}

/// Up to `n` seq-1 operations that each succeed and change the tree of `fs` now, drawn with
/// `rng`; each is run on `fs`.
fn draw(fs: &Fs, rng: &mut fastrand::Rng, n: usize, mut run: impl FnMut(&Op)) -> Vec<Op> {
    let ops = ace::seq1();
    let mut out = Vec::new();
    for _ in 0..n {
        let t = oracle::tree(fs);
        let found = (0..40).find_map(|_| {
            let op = ops[rng.usize(0..ops.len())].clone();
            // Tried on a copy first: a failing operation may change the image.
            let copy = Fs::mount_pm(
                Pm::from_bytes(&fs.snapshot()),
                &MountOptions::default(),
                None,
                None,
            )
            .ok()?;
            (op.run(&copy).is_ok() && oracle::tree(&copy) != t).then_some(op)
        });
        let Some(op) = found else { break };
        run(&op);
        out.push(op);
    }
    out
}

/// Runs `w` and checks every crash image of its history after the crash.
pub fn check(w: &Workload) -> Checked {
    let mut c = Checked::default();
    let mut rng = fastrand::Rng::with_seed(w.seed ^ 0x5eed_a11e);
    // 1. A random sequence, traced, and one of its crash images that recovery repairs.
    c.first = ace::random_on(w.seed, 8, w.mapping);
    let rec = Arc::new(Recorder::default());
    let mut pm = Pm::in_memory(oracle::IMAGE_BYTES);
    pm.set_trace(Some(rec.clone()));
    let fs = match Fs::format_pm_with(pm, w.mapping).and_then(|fs| ace::populate(&fs).map(|_| fs)) {
        Ok(fs) => fs,
        Err(e) => {
            c.outcome.violations.push(format!("setup failed: {e}"));
            return c;
        }
    };
    let base = fs.snapshot();
    rec.start();
    for op in &c.first {
        rec.op_begin("op");
        if let Err(e) = op.run(&fs) {
            c.outcome
                .violations
                .push(format!("first part: {op:?} failed: {e}"));
        }
        rec.op_end();
    }
    drop(fs);
    let (points, _) = crash_points(&base, &rec.stop());
    let mut repaired = Vec::new();
    let mut any = None;
    let mut seen = std::collections::HashSet::new();
    for p in &points {
        p.for_each_image(&mut seen, |img| {
            if repaired.len() >= 32 {
                return;
            }
            any.get_or_insert_with(|| img.to_vec());
            if let Ok(fs) = Fs::mount_pm(Pm::from_bytes(img), &MountOptions::default(), None, None)
            {
                if oracle::repaired(fs.recovery_report()) {
                    repaired.push(img.to_vec());
                }
            }
        });
    }
    c.repaired = !repaired.is_empty();
    let crash = if repaired.is_empty() {
        match any {
            Some(img) => img,
            None => {
                c.outcome
                    .violations
                    .push("the first part has no crash point".into());
                return c;
            }
        }
    } else {
        repaired.swap_remove(rng.usize(0..repaired.len()))
    };

    // 2. The history after the crash, traced as one.
    let rec = Arc::new(Recorder::default());
    let mut pm = Pm::from_bytes(&crash);
    pm.set_trace(Some(rec.clone()));
    rec.start();
    // Per step: the states before it, after each of its parts, and after it.
    let mut states: Vec<Vec<Tree>> = Vec::new();
    rec.op_begin("recovery");
    let mounted = Fs::mount_pm(pm, &MountOptions::default(), None, None);
    rec.op_end();
    let fs = match mounted {
        Ok(fs) => fs,
        Err(e) => {
            c.outcome
                .violations
                .push(format!("mount of the crash image failed: {e}"));
            return c;
        }
    };
    let mut cur = oracle::tree(&fs);
    states.push(vec![cur.clone(), cur.clone()]);
    c.steps.push(Step::Recovery);
    let mut run_ops = |fs: &Fs, c: &mut Checked, states: &mut Vec<Vec<Tree>>, cur: &mut Tree| {
        let n = rng.usize(1..=3);
        let mut rng2 = fastrand::Rng::with_seed(rng.u64(..));
        draw(fs, &mut rng2, n, |op| {
            let mut steps = vec![cur.clone()];
            rec.op_begin("op");
            let r = op.run_marked(fs, &mut || steps.push(oracle::tree(fs)));
            rec.op_end();
            *cur = oracle::tree(fs);
            if let Err(e) = r {
                c.outcome.violations.push(format!("{op:?} failed: {e}"));
            } else if steps[0] == *cur {
                c.outcome.violations.push(format!("{op:?} changed nothing"));
            }
            steps.push(cur.clone());
            states.push(steps);
            c.steps.push(Step::Op(op.clone()));
        });
    };
    run_ops(&fs, &mut c, &mut states, &mut cur);
    // The memory the remount sees: the crash image with every traced store applied; it
    // must equal the live image (or a store went untraced).
    let live = fs.snapshot();
    let mut mem = crash.clone();
    let apply = |mem: &mut Vec<u8>, events: &[Event]| {
        for e in events {
            if let Event::Store { off, data, .. } = e {
                mem[*off as usize..*off as usize + data.len()].copy_from_slice(data);
            }
        }
    };
    let so_far = rec.peek();
    apply(&mut mem, &so_far);
    if mem != live {
        c.outcome
            .violations
            .push("the traced stores do not rebuild the live image (an untraced store)".into());
        return c;
    }
    rec.op_begin("unmount");
    let r = fs.unmount();
    rec.op_end();
    if let Err(e) = r {
        c.outcome.violations.push(format!("unmount failed: {e}"));
        return c;
    }
    states.push(vec![cur.clone(), cur.clone()]);
    c.steps.push(Step::Unmount);
    let events = rec.peek();
    apply(&mut mem, &events[so_far.len()..]);
    let unmounted_at = events.len();
    let mut pm = Pm::from_bytes(&mem);
    pm.set_trace(Some(rec.clone()));
    rec.op_begin("remount");
    let mounted = Fs::mount_pm(pm, &MountOptions::default(), None, None);
    rec.op_end();
    let fs = match mounted {
        Ok(fs) => fs,
        Err(e) => {
            c.outcome.violations.push(format!("remount failed: {e}"));
            return c;
        }
    };
    if fs.recovery_report().unclean {
        c.outcome
            .violations
            .push("the image was not clean after the unmount".into());
    }
    if oracle::tree(&fs) != cur {
        c.outcome
            .violations
            .push("the remount shows another tree".into());
    }
    states.push(vec![cur.clone(), cur.clone()]);
    c.steps.push(Step::Remount);
    run_ops(&fs, &mut c, &mut states, &mut cur);
    drop(fs);
    let events = rec.stop();

    // 3. Every crash image of the whole history.
    let (points, lost) = crash_points_with(&crash, &events, w.tear);
    c.outcome.fences = points.len();
    c.outcome.violations.extend(lost);
    let looses: Vec<Vec<Loose>> = c
        .steps
        .iter()
        .zip(&states)
        .map(|(s, st)| match s {
            Step::Op(op) => (0..st.len() - 1).map(|k| op.loose(k, st)).collect(),
            _ => vec![Loose::default()],
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut recovery_checked = vec![false; c.steps.len()];
    for p in &points {
        let after_unmount = p.fence > unmounted_at;
        let mut i = 0;
        p.for_each_image(&mut seen, |img| {
            c.outcome.images += 1;
            c.images_after_unmount += usize::from(after_unmount);
            // Crashes during recovery: for the first image of each step that needs repair.
            let deep = !recovery_checked[p.op];
            if let Some(v) = oracle::check_image(
                img,
                &states[p.op],
                &looses[p.op],
                deep,
                &mut recovery_checked[p.op],
            ) {
                c.outcome.violations.push(format!(
                    "step {} ({:?}), fence {}, image {i}: {v}",
                    p.op, c.steps[p.op], p.fence
                ));
            }
            i += 1;
        });
    }
    c
}

/// Totals of a run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Summary {
    pub workloads: usize,
    /// Workloads whose picked crash image needed repair.
    pub repaired: usize,
    pub steps: usize,
    pub fences: usize,
    pub images: usize,
    pub images_after_unmount: usize,
    pub violations: Vec<String>,
}

/// Checks `list` on `threads` threads, calling `progress` after each workload.
pub fn run(list: &[Workload], threads: usize, progress: &(dyn Fn(usize) + Sync)) -> Summary {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let total = std::sync::Mutex::new(Summary {
        workloads: list.len(),
        ..Default::default()
    });
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(w) = list.get(i) else { break };
                let c = check(w);
                progress(i);
                let mut t = total.lock().unwrap();
                t.repaired += usize::from(c.repaired);
                t.steps += c.steps.len();
                t.fences += c.outcome.fences;
                t.images += c.outcome.images;
                t.images_after_unmount += c.images_after_unmount;
                t.violations.extend(
                    c.outcome
                        .violations
                        .iter()
                        .map(|v| format!("[nvmfs crashtest {}] {v}", w.id)),
                );
            });
        }
    });
    total.into_inner().unwrap()
}
