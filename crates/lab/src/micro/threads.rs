//! `bench micro --threads N`: every workload again with N threads, once on disjoint files
//! and once on one shared file or directory, to see how a target scales.
//!
//! Each thread runs the ordinary one-thread workload code on a [`Session`] of its own whose
//! [`Lane`] says which thread it is. The lane decides the names:
//! - **disjoint**: every thread has its own data file, file set and directories (`data-t1`,
//!   `files-t1`, ...), each 1/N of the one-thread size, so the run moves the same amount of
//!   data as the one-thread run and fits the same image plus one more data file;
//! - **shared**: the threads use the one-thread run's data file and file set, and one shared
//!   directory (`create-shared`, `unlink-shared`) or file (`append-shared`) in which each
//!   thread takes 1/N of the names or bytes.
//!
//! The threads meet at a barrier after their setup ([`Limits::start`]), so their warm-ups and
//! measured phases overlap. Their measurements merge into one record whose ops/s is the sum
//! of the threads' rates.

use super::measure::{Limits, Measured};
use super::session::{Outcome, Session};
use super::{data, meta, WorkloadId};
use crate::targets::api::MicroFs;
use serde::{Deserialize, Serialize};
use std::io;
use std::ops::Range;
use std::sync::{Arc, Barrier};

/// What the threads of a `--threads` run have in common.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sharing {
    /// Each thread its own files and directories.
    Disjoint,
    /// One file or directory for all threads.
    Shared,
}

impl Sharing {
    pub const BOTH: [Sharing; 2] = [Sharing::Disjoint, Sharing::Shared];

    pub fn name(self) -> &'static str {
        match self {
            Sharing::Disjoint => "disjoint",
            Sharing::Shared => "shared",
        }
    }
}

/// Which thread of which run a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane {
    pub index: usize,
    pub count: usize,
    /// `None` for the one-thread run.
    pub sharing: Option<Sharing>,
}

impl Lane {
    /// The one-thread run.
    pub const SOLO: Lane = Lane {
        index: 0,
        count: 1,
        sharing: None,
    };

    pub fn is_shared(&self) -> bool {
        self.sharing == Some(Sharing::Shared)
    }

    /// The name of something the threads of a run share or not, as the run says: `base` in
    /// the one-thread run, `base-shared` in a shared run, `base-t<i>` in a disjoint one.
    pub fn scoped(&self, base: &str) -> String {
        match self.sharing {
            None => base.to_string(),
            Some(Sharing::Shared) => format!("{base}-shared"),
            Some(Sharing::Disjoint) => format!("{base}-t{}", self.index),
        }
    }

    /// This thread's part of `count` names or units of a shared run; all of them otherwise
    /// (a disjoint thread's set is its own).
    pub fn share(&self, count: usize) -> Range<usize> {
        if self.is_shared() {
            count * self.index / self.count..count * (self.index + 1) / self.count
        } else {
            0..count
        }
    }

    /// A random sequence's seed: the one-thread run's for thread 0, others shifted so no two
    /// threads walk in lockstep.
    pub fn seed(&self, base: u64) -> u64 {
        base + self.index as u64
    }
}

/// Runs `w` with `n` threads sharing as `sharing` says; the merged outcome. `main` is the
/// target's one-thread session, which has run `w` already (its data file and file sets are
/// what shared threads use) and keeps the disjoint threads' own files from workload to
/// workload, as it keeps its own.
pub fn run<F>(
    main: &mut Session<'_, F>,
    w: WorkloadId,
    n: usize,
    sharing: Sharing,
) -> io::Result<Outcome>
where
    F: MicroFs + Sync,
    F::Name: Clone + Send + Sync,
{
    let params = main.params.for_threads(n, sharing);
    let states = match sharing {
        Sharing::Shared => vec![prepare_shared(main, w)?; n],
        Sharing::Disjoint => {
            let mut own = std::mem::take(&mut main.lanes);
            own.resize_with(n, Inherited::default);
            own
        }
    };
    let limits = Limits {
        start: Some(Arc::new(Barrier::new(n))),
        ..params.limits.clone()
    };
    let fs = main.fs;
    let ran: Vec<(io::Result<Outcome>, Inherited<F::Name>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = states
            .into_iter()
            .enumerate()
            .map(|(index, state)| {
                let lane = Lane {
                    index,
                    count: n,
                    sharing: Some(sharing),
                };
                let (params, limits) = (&params, limits.clone());
                scope.spawn(move || {
                    let mut quiet = |_: &str| {};
                    let mut s = Session::for_lane(fs, params, lane, limits, &mut quiet);
                    s.inherit(state);
                    let out = s.run_one(w);
                    (out, s.into_inherited())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a benchmark thread panicked"))
            .collect()
    });
    let (outcomes, states): (Vec<_>, Vec<_>) = ran.into_iter().unzip();
    if sharing == Sharing::Disjoint {
        main.lanes = states;
    }
    finish_shared(main, w, sharing)?;
    Ok(merge(outcomes.into_iter().collect::<io::Result<Vec<_>>>()?))
}

/// What a thread's session starts with and gives back: the data file and file sets it
/// uses (in a shared run the main session's, in a disjoint one its own from earlier
/// workloads).
#[derive(Clone)]
pub struct Inherited<N> {
    pub data_file: Option<N>,
    pub file_set: Option<Vec<N>>,
    pub deep_file_set: Option<Vec<N>>,
}

impl<N> Default for Inherited<N> {
    fn default() -> Self {
        Inherited {
            data_file: None,
            file_set: None,
            deep_file_set: None,
        }
    }
}

/// Makes what the threads of a shared run use together, before they start: the one-thread
/// run's data file and file sets (made already unless the workload list skipped them), the
/// shared directory of create and unlink, the shared file of append.
fn prepare_shared<F: MicroFs>(
    s: &mut Session<'_, F>,
    w: WorkloadId,
) -> io::Result<Inherited<F::Name>>
where
    F::Name: Clone,
{
    use WorkloadId::*;
    let lane = &SHARED_SETUP;
    match w {
        RandRead4k | Overwrite4k | SeqRead1m | SeqWrite1m | MmapLoad1k | MmapStore1k => {
            data::data_file(s)?;
        }
        Append4k => data::make_shared_append(s.fs, lane)?,
        Stat | StatDeep | OpenRead16k | OpenRead16kDeep => {
            meta::file_set(s, w.layout(s.params).expect("meta"))?;
        }
        Create16k | Create16kDeep => {
            meta::make_create_dirs(s.fs, s.params, lane, w.layout(s.params).expect("meta"))?
        }
        Unlink | UnlinkDeep => {
            meta::make_unlink_set(s.fs, s.params, lane, w.layout(s.params).expect("meta"))?;
        }
    }
    Ok(Inherited {
        data_file: s.data_file.clone(),
        file_set: s.file_set.clone(),
        deep_file_set: s.deep_file_set.clone(),
    })
}

/// The lane that names what a shared run's threads use together (`-shared` names).
const SHARED_SETUP: Lane = Lane {
    index: 0,
    count: 1,
    sharing: Some(Sharing::Shared),
};

/// Removes the shared file of append after a shared run (create's and unlink's directories
/// are left empty, like the one-thread run's).
fn finish_shared<F: MicroFs>(
    s: &mut Session<'_, F>,
    w: WorkloadId,
    sharing: Sharing,
) -> io::Result<()> {
    if sharing == Sharing::Shared && w == WorkloadId::Append4k {
        s.fs.unlink(&s.fs.name(&SHARED_SETUP.scoped("append")))?;
    }
    Ok(())
}

/// The threads' outcomes as one: merged measurement, each distinct note once, the longest
/// final msync.
fn merge(outcomes: Vec<Outcome>) -> Outcome {
    let mut notes: Vec<String> = Vec::new();
    let mut parts = Vec::with_capacity(outcomes.len());
    let mut final_sync = None;
    for o in outcomes {
        for n in o.notes {
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
        final_sync = final_sync.max(o.final_sync);
        parts.push(o.m);
    }
    Outcome {
        m: Measured::merge(&parts),
        notes,
        final_sync,
    }
}
