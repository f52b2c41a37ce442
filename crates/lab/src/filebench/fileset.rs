//! Filebench filesets: the directory tree and file sizes of
//! `fileset_populate` / `fileset_populate_subdir` (filebench 1.5 fileset.c),
//! and the round-robin picking of `fileset_pick`.

use super::gamma;
use super::index_set::IndexSet;
use serde::{Deserialize, Serialize};

/// The most entries filebench allows in one fileset.
pub const ENTRIES_MAX: usize = 1 << 20;

/// How file sizes are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SizeDist {
    /// Gamma(1.5) with the given mean, truncated to an integer (filebench
    /// before 1.5 for every `size=`, and 1.5 for `size=` given as a mean).
    Gamma,
    /// Every file exactly the mean (filebench 1.5's plain `size=`).
    Exact,
}

/// The parameters of one `define fileset`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FilesetSpec {
    /// Directory name under the target root (e.g. `bigfileset`).
    pub name: String,
    /// Number of files (`entries`).
    pub entries: usize,
    /// Mean directory width (`dirwidth`).
    pub dir_width: f64,
    /// Gamma shape of depths and widths (`dirgamma` / 1000); 0 = plain means.
    pub dir_gamma: f64,
    /// Mean file size in bytes (`size`).
    pub mean_size_bytes: u64,
    pub size_dist: SizeDist,
    /// Gamma shape of sizes (`sizegamma` / 1000).
    pub size_gamma: f64,
    /// Percentage of files that exist, filled, before the run (`prealloc`).
    pub prealloc_percent: u32,
}

impl FilesetSpec {
    /// Checks the values a user can get wrong, with a message naming the field.
    pub fn validate(&self) -> Result<(), String> {
        let n = &self.name;
        if self.entries == 0 || self.entries > ENTRIES_MAX {
            return Err(format!(
                "fileset {n}: entries must be 1..={ENTRIES_MAX}, got {}",
                self.entries
            ));
        }
        if !(self.dir_width.is_finite() && self.dir_width >= 2.0) {
            return Err(format!(
                "fileset {n}: dirwidth must be at least 2, got {}",
                self.dir_width
            ));
        }
        for (what, v) in [("dirgamma", self.dir_gamma), ("sizegamma", self.size_gamma)] {
            if !(v.is_finite() && (v == 0.0 || (0.1..=10.0).contains(&v))) {
                return Err(format!("fileset {n}: {what} must be 0 or 0.1..10, got {v}"));
            }
        }
        if self.prealloc_percent > 100 {
            return Err(format!(
                "fileset {n}: prealloc must be a percentage, got {}",
                self.prealloc_percent
            ));
        }
        Ok(())
    }

    /// Filebench's mean depth: `ln(entries) / ln(dirwidth)`.
    pub fn mean_depth(&self) -> f64 {
        (self.entries as f64).ln() / self.dir_width.ln()
    }
}

/// One file of a fileset.
#[derive(Debug, Clone, PartialEq)]
pub struct FileEntry {
    /// Path relative to the target root, e.g. `bigfileset/00000001/00000007`.
    pub path: String,
    /// Size drawn when the tree was built; re-created files reuse it.
    pub size_bytes: u64,
    /// Subdirectory levels between the fileset root and the file.
    pub depth: u32,
    /// Exists, filled, before the run starts.
    pub prealloc: bool,
}

/// A populated fileset: directories (parents first) and files.
#[derive(Debug, Clone)]
pub struct Fileset {
    pub spec: FilesetSpec,
    /// Directory paths relative to the target root, parents before children;
    /// the first is the fileset root itself.
    pub dirs: Vec<String>,
    pub files: Vec<FileEntry>,
}

/// Shape of a built tree, for reports and tests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TreeStats {
    pub files: usize,
    pub dirs: usize,
    /// Directories that hold files.
    pub leaf_dirs: usize,
    /// Filebench's configured mean depth, ln(entries)/ln(dirwidth).
    pub mean_depth_configured: f64,
    /// Mean subdirectory levels of the files as built.
    pub mean_depth_actual: f64,
    pub max_files_per_dir: usize,
    pub mean_file_size_bytes: f64,
    pub total_bytes: u64,
    pub prealloc_files: usize,
    pub prealloc_bytes: u64,
}

/// Builds the tree the way `fileset_populate_subdir` does.
struct Builder<'a> {
    spec: &'a FilesetSpec,
    rng: fastrand::Rng,
    mean_depth: f64,
    dirs: Vec<String>,
    files: Vec<FileEntry>,
}

impl Builder<'_> {
    fn gamma_or_mean(&mut self, mean: f64, shape: f64) -> f64 {
        if shape > 0.0 {
            gamma::sample(&mut self.rng, shape, mean / shape)
        } else {
            mean
        }
    }

    /// One directory node at `depth` (the root is 1). The root holds only
    /// subdirectories and keeps adding them until every file is placed; any
    /// other node is a leaf when `depth >= randepth` and then holds
    /// ceil(width) files, otherwise ceil(width) subdirectories.
    fn subdir(&mut self, path: String, is_root: bool, depth: u32) {
        self.dirs.push(path.clone());
        let dir_gamma = self.spec.dir_gamma;
        let randepth = (self.gamma_or_mean(self.mean_depth, dir_gamma) as u64).max(1);
        let mut width = self.gamma_or_mean(self.spec.dir_width, dir_gamma);
        if width == 0.0 {
            width = 1.0;
        }
        let is_leaf = !is_root && u64::from(depth) >= randepth;
        let mut i = 1u64;
        while (is_root || (i as f64) < width + 1.0) && self.files.len() < self.spec.entries {
            let child = format!("{path}/{i:08}");
            if is_leaf {
                self.file(child, depth);
            } else {
                self.subdir(child, false, depth + 1);
            }
            i += 1;
        }
    }

    fn file(&mut self, path: String, dir_depth: u32) {
        let mean = self.spec.mean_size_bytes as f64;
        let size = match self.spec.size_dist {
            SizeDist::Exact => self.spec.mean_size_bytes,
            SizeDist::Gamma => self.gamma_or_mean(mean, self.spec.size_gamma) as u64,
        };
        self.files.push(FileEntry {
            path,
            size_bytes: size,
            depth: dir_depth - 1,
            prealloc: false,
        });
    }
}

impl Fileset {
    /// Populates the fileset from `seed`; the same seed gives the same tree,
    /// sizes and preallocation choices on every target.
    pub fn build(spec: &FilesetSpec, seed: u64) -> Result<Fileset, String> {
        spec.validate()?;
        let mut b = Builder {
            spec,
            rng: fastrand::Rng::with_seed(seed),
            mean_depth: spec.mean_depth(),
            dirs: Vec::new(),
            files: Vec::with_capacity(spec.entries),
        };
        b.subdir(spec.name.clone(), true, 1);
        let mut files = b.files;
        // Each file exists at start with probability prealloc%.
        let p = f64::from(spec.prealloc_percent) / 100.0;
        for f in &mut files {
            f.prealloc = b.rng.f64() < p;
        }
        Ok(Fileset {
            spec: spec.clone(),
            dirs: b.dirs,
            files,
        })
    }

    pub fn stats(&self) -> TreeStats {
        let files = self.files.len();
        let mut per_dir = std::collections::HashMap::<&str, usize>::new();
        for f in &self.files {
            let parent = f.path.rsplit_once('/').map_or("", |(d, _)| d);
            *per_dir.entry(parent).or_default() += 1;
        }
        let total: u64 = self.files.iter().map(|f| f.size_bytes).sum();
        let pre: Vec<&FileEntry> = self.files.iter().filter(|f| f.prealloc).collect();
        let depth_sum: u64 = self.files.iter().map(|f| u64::from(f.depth)).sum();
        TreeStats {
            files,
            dirs: self.dirs.len(),
            leaf_dirs: per_dir.len(),
            mean_depth_configured: self.spec.mean_depth(),
            mean_depth_actual: depth_sum as f64 / files.max(1) as f64,
            max_files_per_dir: per_dir.values().copied().max().unwrap_or(0),
            mean_file_size_bytes: total as f64 / files.max(1) as f64,
            total_bytes: total,
            prealloc_files: pre.len(),
            prealloc_bytes: pre.iter().map(|f| f.size_bytes).sum(),
        }
    }
}

/// Which files exist, are busy or open, and the pick rotors. Guarded by one
/// mutex per fileset, like filebench's `fs_pick_lock`.
#[derive(Debug, Clone)]
pub struct PickState {
    exists: Vec<bool>,
    /// Picked and not yet released (a create or delete in progress).
    busy: Vec<bool>,
    open_count: Vec<u32>,
    /// The entries each kind of pick may take now (idle and suitable), kept in step with
    /// the three vectors above by `refresh`: a pick is then a few word reads, not a scan.
    idle_existing: IndexSet,
    idle_closed: IndexSet,
    idle_absent: IndexSet,
    exist_rotor: usize,
    absent_rotor: usize,
    exist_count: usize,
}

/// What a pick is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickKind {
    /// An existing file to open or stat.
    Existing,
    /// An existing file nobody has open, to delete.
    ExistingClosed,
    /// An absent file, to create.
    Absent,
}

impl PickState {
    pub fn new(fileset: &Fileset) -> Self {
        let exists: Vec<bool> = fileset.files.iter().map(|f| f.prealloc).collect();
        Self::with_exists(&exists)
    }

    /// Every entry idle and closed; entry i exists when `exists[i]`.
    pub fn with_exists(exists: &[bool]) -> Self {
        let n = exists.len();
        let mut p = PickState {
            exists: exists.to_vec(),
            busy: vec![false; n],
            open_count: vec![0; n],
            idle_existing: IndexSet::new(n),
            idle_closed: IndexSet::new(n),
            idle_absent: IndexSet::new(n),
            exist_rotor: 0,
            absent_rotor: 0,
            exist_count: exists.iter().filter(|e| **e).count(),
        };
        (0..n).for_each(|i| p.refresh(i));
        p
    }

    pub fn exist_count(&self) -> usize {
        self.exist_count
    }

    pub fn len(&self) -> usize {
        self.exists.len()
    }

    pub fn is_empty(&self) -> bool {
        self.exists.is_empty()
    }

    pub fn exists(&self, i: usize) -> bool {
        self.exists[i]
    }

    /// Round-robin pick: the lowest suitable index at or after the rotor,
    /// wrapping; the rotor moves past it. Existing-file picks share one
    /// rotor, creates use another. The entry comes back busy.
    pub fn pick(&mut self, kind: PickKind) -> Option<usize> {
        let (set, rotor) = match kind {
            PickKind::Absent => (&self.idle_absent, self.absent_rotor),
            PickKind::Existing => (&self.idle_existing, self.exist_rotor),
            PickKind::ExistingClosed => (&self.idle_closed, self.exist_rotor),
        };
        let found = set.first_from(rotor)?;
        debug_assert!(self.suits(found, kind));
        match kind {
            PickKind::Absent => self.absent_rotor = found + 1,
            _ => self.exist_rotor = found + 1,
        }
        self.busy[found] = true;
        self.refresh(found);
        Some(found)
    }

    /// Brings entry `i`'s bits in the idle sets in line with its state.
    fn refresh(&mut self, i: usize) {
        let idle = !self.busy[i];
        let exists = self.exists[i];
        self.idle_existing.set(i, idle && exists);
        self.idle_closed
            .set(i, idle && exists && self.open_count[i] == 0);
        self.idle_absent.set(i, idle && !exists);
    }

    fn suits(&self, i: usize, kind: PickKind) -> bool {
        !self.busy[i] && self.would_suit(i, kind)
    }

    /// Whether a failed pick only failed because suitable entries are busy
    /// for a moment (filebench then waits for an idle entry).
    pub fn only_busy(&self, kind: PickKind) -> bool {
        (0..self.exists.len()).any(|i| self.busy[i] && self.would_suit(i, kind))
    }

    fn would_suit(&self, i: usize, kind: PickKind) -> bool {
        match kind {
            PickKind::Existing => self.exists[i],
            PickKind::ExistingClosed => self.exists[i] && self.open_count[i] == 0,
            PickKind::Absent => !self.exists[i],
        }
    }

    /// Ends a pick: sets existence, adjusts the open count, clears busy.
    pub fn release(&mut self, i: usize, exists: bool, open_delta: i32) {
        if self.exists[i] != exists {
            self.exists[i] = exists;
            if exists {
                self.exist_count += 1;
            } else {
                self.exist_count -= 1;
            }
        }
        self.open_count[i] = self.open_count[i].saturating_add_signed(open_delta);
        self.busy[i] = false;
        self.refresh(i);
    }

    /// A close: one fewer open handle.
    pub fn closed(&mut self, i: usize) {
        self.open_count[i] = self.open_count[i].saturating_sub(1);
        self.refresh(i);
    }

    /// Why a pick of `kind` failed, for "stopped early" messages.
    pub fn why_none(&self, kind: PickKind) -> String {
        let n = self.exists.len();
        let busy = self.busy.iter().filter(|b| **b).count();
        match kind {
            PickKind::Absent => format!(
                "no absent file to create: {} of {n} files exist, {busy} busy",
                self.exist_count
            ),
            PickKind::Existing => format!(
                "no existing file to pick: {} of {n} files exist, {busy} busy",
                self.exist_count
            ),
            PickKind::ExistingClosed => format!(
                "no existing file that no thread has open: {} of {n} files exist, {busy} busy",
                self.exist_count
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(entries: usize, width: f64, prealloc: u32) -> FilesetSpec {
        FilesetSpec {
            name: "bigfileset".into(),
            entries,
            dir_width: width,
            dir_gamma: 1.5,
            mean_size_bytes: 128 * 1024,
            size_dist: SizeDist::Gamma,
            size_gamma: 1.5,
            prealloc_percent: prealloc,
        }
    }

    #[test]
    fn fileserver_tree_has_filebench_shape() {
        let fs = Fileset::build(&spec(10_000, 20.0, 80), 1).unwrap();
        let st = fs.stats();
        assert_eq!(st.files, 10_000);
        assert!((st.mean_depth_configured - 3.07).abs() < 0.01);
        // Leaf directories hold about dirwidth files (gamma-distributed widths
        // truncated by the file budget): mean files per leaf near 20.
        let per_leaf = st.files as f64 / st.leaf_dirs as f64;
        assert!(
            (12.0..28.0).contains(&per_leaf),
            "files per leaf {per_leaf}"
        );
        // Every file sits at least one level down. Each node draws its own
        // depth, so a path goes on while its draws exceed its level and the
        // deep subtrees (width^levels files) soak up most of the budget:
        // the files' actual mean depth is well above the configured 3.07.
        assert!(fs.files.iter().all(|f| f.depth >= 1));
        assert!(
            st.mean_depth_actual > st.mean_depth_configured,
            "depth {}",
            st.mean_depth_actual
        );
        // Gamma(1.5) sizes with mean 128 KiB.
        assert!((st.mean_file_size_bytes / 131_072.0 - 1.0).abs() < 0.05);
        // 80% preallocated.
        let frac = st.prealloc_files as f64 / st.files as f64;
        assert!((frac - 0.8).abs() < 0.02, "prealloc fraction {frac}");
        // Names are %08d from 1 within each parent; parents come first.
        assert_eq!(fs.dirs[0], "bigfileset");
        assert!(fs.dirs[1].starts_with("bigfileset/00000001"));
        for f in &fs.files {
            let (dir, name) = f.path.rsplit_once('/').unwrap();
            assert_eq!(name.len(), 8);
            assert!(fs.dirs.iter().any(|d| d == dir), "{dir} missing");
        }
    }

    #[test]
    fn very_wide_directories_put_every_file_in_one_flat_directory() {
        let fs = Fileset::build(&spec(5_000, 1_000_000.0, 80), 3).unwrap();
        let st = fs.stats();
        assert_eq!(st.leaf_dirs, 1);
        assert_eq!(st.max_files_per_dir, 5_000);
        assert!(fs.files[0].path.starts_with("bigfileset/00000001/"));
        assert!((st.mean_depth_configured - 0.617).abs() < 0.01);
    }

    #[test]
    fn exact_sizes_and_plain_means() {
        let mut s = spec(100, 10.0, 100);
        s.size_dist = SizeDist::Exact;
        s.mean_size_bytes = 16 * 1024;
        s.dir_gamma = 0.0;
        let fs = Fileset::build(&s, 9).unwrap();
        assert!(fs
            .files
            .iter()
            .all(|f| f.size_bytes == 16 * 1024 && f.prealloc));
        // dirgamma 0: depth int(ln 100 / ln 10) = 2, width exactly 10.
        assert!(fs.files.iter().all(|f| f.depth == 1));
        assert_eq!(fs.stats().max_files_per_dir, 10);
    }

    #[test]
    fn same_seed_same_tree() {
        let a = Fileset::build(&spec(2_000, 20.0, 80), 5).unwrap();
        let b = Fileset::build(&spec(2_000, 20.0, 80), 5).unwrap();
        assert_eq!(a.files, b.files);
        let c = Fileset::build(&spec(2_000, 20.0, 80), 6).unwrap();
        assert_ne!(a.files, c.files);
    }

    #[test]
    fn bad_specs_are_refused_with_the_field_named() {
        let e = Fileset::build(&spec(0, 20.0, 80), 1).unwrap_err();
        assert!(e.contains("entries"), "{e}");
        let e = Fileset::build(&spec(10, 1.0, 80), 1).unwrap_err();
        assert!(e.contains("dirwidth"), "{e}");
        let e = Fileset::build(&spec(10, 20.0, 101), 1).unwrap_err();
        assert!(e.contains("prealloc"), "{e}");
    }

    /// The pick as a scan of every entry from the rotor: what `pick` must return.
    fn scanned_pick(p: &PickState, kind: PickKind) -> Option<usize> {
        let n = p.len();
        let rotor = match kind {
            PickKind::Absent => p.absent_rotor,
            _ => p.exist_rotor,
        };
        (0..n).map(|k| (rotor + k) % n).find(|&i| p.suits(i, kind))
    }

    /// Random picks, releases and closes, as the engine's threads make them: every pick is
    /// the scan's answer.
    #[test]
    fn picks_match_a_scan_of_every_entry() {
        let mut rng = fastrand::Rng::with_seed(3);
        for n in [1, 5, 64, 130, 1000] {
            let exists: Vec<bool> = (0..n).map(|_| rng.u32(0..100) < 80).collect();
            let mut p = PickState::with_exists(&exists);
            let mut busy: Vec<(usize, PickKind)> = Vec::new();
            let mut open: Vec<usize> = Vec::new();
            for _ in 0..20_000 {
                match rng.u32(0..4) {
                    0 if !busy.is_empty() => {
                        let (i, kind) = busy.swap_remove(rng.usize(0..busy.len()));
                        match kind {
                            PickKind::Absent => p.release(i, true, 0),
                            PickKind::ExistingClosed => p.release(i, false, 0),
                            PickKind::Existing if rng.bool() => {
                                open.push(i);
                                p.release(i, true, 1)
                            }
                            PickKind::Existing => p.release(i, true, 0),
                        }
                    }
                    1 if !open.is_empty() => p.closed(open.swap_remove(rng.usize(0..open.len()))),
                    _ => {
                        let kind = [
                            PickKind::Existing,
                            PickKind::ExistingClosed,
                            PickKind::Absent,
                        ][rng.usize(0..3)];
                        let want = scanned_pick(&p, kind);
                        assert_eq!(p.pick(kind), want, "{n} entries, {kind:?}");
                        if let Some(i) = want {
                            busy.push((i, kind));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn picks_are_round_robin_and_skip_busy_and_open() {
        let mut p = PickState::with_exists(&[true, false, true, true, false]);
        let a = p.pick(PickKind::Existing).unwrap();
        p.release(a, true, 1); // opened
        let b = p.pick(PickKind::Existing).unwrap();
        p.release(b, true, 0);
        let c = p.pick(PickKind::Existing).unwrap();
        p.release(c, true, 0);
        let d = p.pick(PickKind::Existing).unwrap(); // wraps
        p.release(d, true, 0);
        assert_eq!((a, b, c, d), (0, 2, 3, 0));
        // Entry 0 is open: a delete skips it.
        let del = p.pick(PickKind::ExistingClosed).unwrap();
        assert_eq!(del, 2);
        // While 2 is busy (being deleted), existing picks skip it.
        assert_eq!(p.pick(PickKind::Existing), Some(3));
        p.release(3, true, 0);
        p.release(del, false, 0);
        assert_eq!(p.exist_count(), 2);
        // Creates rotate over absent entries with their own rotor.
        assert_eq!(p.pick(PickKind::Absent), Some(1));
        assert_eq!(p.pick(PickKind::Absent), Some(2));
        assert_eq!(p.pick(PickKind::Absent), Some(4));
        assert_eq!(p.pick(PickKind::Absent), None, "all absent ones busy");
        assert!(
            p.only_busy(PickKind::Absent),
            "a wait, not the end of the run"
        );
        assert!(p.why_none(PickKind::Absent).contains("3 busy"));
        p.release(1, true, 0);
        p.release(2, true, 0);
        p.release(4, true, 0);
        assert_eq!(p.pick(PickKind::Absent), None);
        assert!(!p.only_busy(PickKind::Absent), "nothing absent: stop early");
    }
}
