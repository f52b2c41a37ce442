//! The mutation check on a small scale (its own test binary: the switch is process-global).
//! Every flush and fence site of the journal's commit path must be caught by a few ACE
//! operations; the full check over all sites is `nvmfs crashtest --mutations`.

use nvmfs_crashtest::{mutation_check, workloads, Suite};

#[test]
fn every_journal_flush_and_fence_is_caught() {
    // creat (existing directory block), creat into an empty directory (a new block: fresh
    // writes), unlink.
    let wanted = ["--only 0", "--only 1", "--only 22"];
    let list: Vec<_> = workloads(&Suite::Seq1)
        .into_iter()
        .filter(|w| wanted.iter().any(|x| w.id.ends_with(x)))
        .collect();
    assert_eq!(list.len(), 3);
    let results = mutation_check(&list, &|_| {});
    // Commit-path sites: those above the recovery functions (roll_back, clear_lane), which
    // only run at mount.
    let src = include_str!("../../core/src/journal.rs");
    let recovery_line = src
        .lines()
        .position(|l| l.starts_with("pub fn roll_back"))
        .expect("roll_back") as u32
        + 1;
    let line_of = |site: &str| {
        site.rsplit(':')
            .next()
            .and_then(|l| l.parse::<u32>().ok())
            .unwrap_or(0)
    };
    let journal: Vec<_> = results
        .iter()
        .filter(|r| r.site.contains("journal.rs") && line_of(&r.site) < recovery_line)
        .collect();
    assert!(
        journal.len() >= 4,
        "journal commit sites found: {journal:?}"
    );
    for r in &journal {
        assert!(r.caught_by.is_some(), "not caught: {}", r.site);
    }
}
