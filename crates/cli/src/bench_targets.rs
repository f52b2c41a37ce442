//! The targets of `nvmfs bench filebench`, `ycsb` and `tpcc` as named on the command line
//! (`nvmfs`, `tmpfs`, `dir:PATH`, a kernel variant of the study), resolved through the
//! study's catalogue, and made fresh for one run.

use std::io;
use std::path::{Path, PathBuf};

use nvmfs_lab::study::targets::{self, StudyTarget, TargetEntry};

/// A target as asked for on the command line.
pub enum Wanted {
    /// A fresh directory under this path (`tmpfs`: the shm dir).
    Dir { label: String, parent: PathBuf },
    /// nvmfs or a kernel variant, from the study's catalogue.
    Catalogue(TargetEntry),
}

impl Wanted {
    /// The name the user gave.
    pub fn label(&self) -> &str {
        match self {
            Wanted::Dir { label, .. } => label,
            Wanted::Catalogue(t) => &t.name,
        }
    }

    /// Why this target cannot run on this machine, if it cannot.
    pub fn unavailable(&self) -> Option<&str> {
        match self {
            Wanted::Dir { .. } => None,
            Wanted::Catalogue(t) => t.unavailable.as_deref(),
        }
    }

    /// Makes the target fresh: a directory target as a new subdirectory `scratch` of its
    /// parent, a catalogue target through `create` (which sizes the image or device).
    pub fn make(
        &self,
        scratch: &str,
        create: impl FnOnce(&TargetEntry) -> io::Result<StudyTarget>,
    ) -> io::Result<StudyTarget> {
        match self {
            Wanted::Dir { parent, .. } => StudyTarget::dir(parent, scratch),
            Wanted::Catalogue(t) => create(t),
        }
    }
}

/// Resolves the target names, in the order given (none: nvmfs and tmpfs), through the
/// study's discovery (which names unknown ones and says why unavailable ones cannot run).
pub fn resolve_targets(
    names: &[String],
    shm_dir: &Path,
    device_bytes: u64,
) -> Result<Vec<Wanted>, String> {
    let defaults = ["nvmfs".to_string(), "tmpfs".to_string()];
    let names = if names.is_empty() {
        &defaults[..]
    } else {
        names
    };
    let catalogue_names: Vec<String> = names
        .iter()
        .filter(|n| *n != "tmpfs" && !n.starts_with("dir:"))
        .cloned()
        .collect();
    let catalogue = if catalogue_names.is_empty() {
        Vec::new()
    } else {
        targets::discover(device_bytes, &catalogue_names).map_err(|e| e.to_string())?
    };
    names
        .iter()
        .map(|n| match n.strip_prefix("dir:") {
            Some("") => Err("dir: target needs a path, e.g. dir:/mnt/ext4".to_string()),
            Some(path) if !Path::new(path).is_dir() => Err(format!("{n}: not a directory")),
            Some(path) => Ok(Wanted::Dir {
                label: n.clone(),
                parent: PathBuf::from(path),
            }),
            None if n == "tmpfs" => Ok(Wanted::Dir {
                label: n.clone(),
                parent: shm_dir.to_path_buf(),
            }),
            None => catalogue
                .iter()
                .find(|t| targets::matches_name(&t.name, n))
                .cloned()
                .map(Wanted::Catalogue)
                .ok_or_else(|| format!("unknown target {n:?}")),
        })
        .collect()
}

/// Writes `report` as JSON to `json` when asked, then picks the exit status of a bench
/// command from its runs' `(status, has a result)`: 130 when interrupted, 1 when the file
/// cannot be written, a run failed or none could run, else 0.
pub fn finish_report(
    command: &str,
    json: Option<&PathBuf>,
    report: &impl serde::Serialize,
    interrupted: bool,
    runs: impl Iterator<Item = (bool, bool)> + Clone,
) -> u8 {
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(report).expect("serialisable");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!(
                "nvmfs bench {command}: cannot write {}: {e}",
                path.display()
            );
            return 1;
        }
        eprintln!("wrote {}", path.display());
    }
    if interrupted {
        return 130;
    }
    let failed = runs.clone().filter(|(failed, _)| *failed).count();
    if failed > 0 {
        eprintln!("nvmfs bench {command}: {failed} run(s) failed");
        return 1;
    }
    if !runs.into_iter().any(|(_, ran)| ran) {
        eprintln!("nvmfs bench {command}: no target could run");
        return 1;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_resolve_in_order_and_unknown_ones_are_named() {
        let shm = std::env::temp_dir();
        let names = ["tmpfs".to_string(), "nvmfs".to_string()];
        let w = resolve_targets(&names, &shm, 8 << 30).unwrap();
        assert_eq!(
            w.iter().map(Wanted::label).collect::<Vec<_>>(),
            ["tmpfs", "nvmfs"]
        );
        let err = resolve_targets(&["ext9".to_string()], &shm, 8 << 30)
            .err()
            .unwrap();
        assert!(err.contains("ext9"), "{err}");
        let err = resolve_targets(&["dir:/nonexistent/x".to_string()], &shm, 8 << 30)
            .err()
            .unwrap();
        assert!(err.contains("not a directory"), "{err}");
    }

    #[test]
    fn defaults_are_nvmfs_and_tmpfs_and_a_dir_target_is_always_available() {
        let shm = std::env::temp_dir();
        let w = resolve_targets(&[], &shm, 8 << 30).unwrap();
        assert_eq!(
            w.iter().map(Wanted::label).collect::<Vec<_>>(),
            ["nvmfs", "tmpfs"]
        );
        assert!(w[1].unavailable().is_none());
        let err = resolve_targets(&["dir:".to_string()], &shm, 8 << 30)
            .err()
            .unwrap();
        assert!(err.contains("needs a path"), "{err}");
    }
}
