//! The damaged-image corpus (`nvmfs::testing::corrupt`), on image files: for every case fsck
//! check, mount, repair, a second check and a remount behave as the case states, nothing
//! panics, and every file the damage did not touch reads back unchanged after the repair.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use nvmfs::fsck::{check_image, repair_image, EXIT_CLEAN, EXIT_CORRECTED};
use nvmfs::testing::corrupt::{corpus, Case, MountExpect};
use nvmfs::testing::{known_image, read_tree, FenceShadow, Known};
use nvmfs::{Fs, MountOptions};

fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

fn under(path: &str, prefixes: &[&str]) -> bool {
    prefixes
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

/// Runs one case; returns the observed (check, mount, repair) summary or the failures.
fn run_case(known: &Known, case: &Case, dir: &Path) -> Result<String, Vec<String>> {
    let mut fails = Vec::new();
    let mut img = known.image.clone();
    (case.damage)(known, &mut img);
    let path: PathBuf = dir.join(case.name);
    std::fs::write(&path, &img).unwrap();

    let check = check_image(&path).unwrap();
    if check.exit_code() != case.check {
        fails.push(format!(
            "check exited {} (want {}): {:#?} {:?}",
            check.exit_code(),
            case.check,
            check.problems,
            check.recovery
        ));
    }

    // Mount a copy: a read-write mount writes the image.
    let copy = dir.join(format!("{}.mount", case.name));
    std::fs::write(&copy, &img).unwrap();
    let mount = match Fs::mount(&copy, &MountOptions::default()) {
        Ok(fs) => {
            let replica = fs.recovery_report().used_replica;
            let want = if replica {
                MountExpect::UsesReplica
            } else {
                MountExpect::Mounts
            };
            if want != case.mount {
                fails.push(format!("mount: {want:?}, want {:?}", case.mount));
            }
            // Walk whatever is there; errors are expected, panics are not.
            let _ = read_tree(&fs);
            let _ = fs.unmount();
            format!("{want:?}")
        }
        Err(e) => {
            if case.mount != MountExpect::Refuses {
                fails.push(format!("mount refused ({e}), want {:?}", case.mount));
            }
            let msg = e.to_string();
            if e.kind() != std::io::ErrorKind::InvalidData || !msg.contains("offset") {
                fails.push(format!(
                    "mount error does not name a structure and offset: {:?} {msg}",
                    e.kind()
                ));
            }
            format!("Refuses ({msg})")
        }
    };

    let rep = repair_image(&path).unwrap();
    if std::env::var_os("CORPUS_VERBOSE").is_some() {
        println!("== {}", case.name);
        for p in &check.problems {
            println!("   found    {:#x}: {}", p.offset, p.what);
        }
        for p in &rep.repairs {
            println!("   repaired {:#x}: {}", p.offset, p.what);
        }
        if let Some(u) = &rep.unrepairable {
            println!("   unrepairable: {u}");
        }
    }
    if rep.exit_code() != case.repair {
        fails.push(format!(
            "repair exited {} (want {}): {rep:#?}",
            rep.exit_code(),
            case.repair
        ));
    }
    if case.repair == EXIT_CORRECTED {
        let again = check_image(&path).unwrap();
        if !again.is_clean() || !again.recovery.is_empty() {
            fails.push(format!(
                "check after repair: {:#?} {:?}",
                again.problems, again.recovery
            ));
        }
        let noop = repair_image(&path).unwrap();
        if noop.exit_code() != EXIT_CLEAN || noop.modified() {
            fails.push(format!("second repair not a no-op: {noop:#?}"));
        }
        match Fs::mount(&path, &MountOptions::default()) {
            Ok(fs) => {
                if fs.recovery_report().used_replica {
                    fails.push("repaired image still needs the replica".into());
                }
                let (tree, errors) = read_tree(&fs);
                if !errors.is_empty() {
                    fails.push(format!("tree after repair: {errors:?}"));
                }
                for (p, want) in &known.tree {
                    if under(p, case.lost) {
                        continue;
                    }
                    match tree.get(p) {
                        Some(got)
                            if got.file_type == want.file_type
                                && got.size == want.size
                                && got.data == want.data => {}
                        Some(got) => fails.push(format!("{p} changed: {got:?}")),
                        None => fails.push(format!("{p} missing after repair")),
                    }
                }
                for p in case.found {
                    let want = &known.tree[*p];
                    let back = tree.iter().any(|(q, got)| {
                        q.starts_with("/lost+found/")
                            && got.file_type == want.file_type
                            && got.data == want.data
                    });
                    if !back {
                        fails.push(format!("{p} not reconnected under /lost+found"));
                    }
                }
                fs.unmount().unwrap();
            }
            Err(e) => fails.push(format!("mount after repair: {e}")),
        }
    } else if std::fs::read(&path).unwrap() != img {
        fails.push("a repair that failed changed the image".into());
    }
    let summary = format!(
        "{:<32} check {}  mount {:<14}  repair {}  ({} repairs)",
        case.name,
        check.exit_code(),
        mount.split(' ').next().unwrap_or(""),
        rep.exit_code(),
        rep.repairs.len()
    );
    if fails.is_empty() {
        Ok(summary)
    } else {
        Err(fails)
    }
}

#[test]
fn corpus_cases_behave_as_stated() {
    let known = known_image();
    let dir = scratch_dir();
    let mut failures = Vec::new();
    let cases = corpus();
    for case in &cases {
        match run_case(&known, case, dir.path()) {
            Ok(summary) => println!("{summary}"),
            Err(f) => failures.push(format!("{} ({}): {f:#?}", case.name, case.what)),
        }
    }
    assert!(cases.len() >= 30);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn repair_refuses_a_mounted_image() {
    let known = known_image();
    let dir = scratch_dir();
    let path = dir.path().join("mounted");
    let mut img = known.image.clone();
    img[BLOCK + 40] ^= 1; // replica damaged: something to repair
    std::fs::write(&path, &img).unwrap();
    let fs = Fs::mount(&path, &MountOptions::default()).unwrap();
    let e = repair_image(&path).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    assert!(e.to_string().contains("in use"), "{e}");
    fs.unmount().unwrap();
    let ro = Fs::mount(
        &path,
        &MountOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        repair_image(&path).is_err(),
        "read-only mount must block repair too"
    );
    drop(ro);
    assert_eq!(repair_image(&path).unwrap().exit_code(), EXIT_CORRECTED);
}

const BLOCK: usize = 4096;

/// A directory of 3000 files (47 blocks) loses its first block: the hole gets an empty block,
/// the 64 files named there are reconnected to /lost+found (which grows over two blocks),
/// the rest stay in place; the repair checks clean and every file reads back.
#[test]
fn many_files_reconnected_to_lost_found() {
    use nvmfs::fsck::{check_pm, repair_pm};
    use nvmfs::media::Pm;
    use nvmfs::testing::{put_u64, slot_of};
    let fs = Fs::format_in_memory(&nvmfs::FormatOptions {
        size_bytes: 32 << 20,
        inode_count: Some(4096),
        ..Default::default()
    })
    .unwrap();
    fs.create_dir("/many").unwrap();
    for i in 0..3000 {
        fs.write_file(format!("/many/f{i}"), format!("file {i}").as_bytes())
            .unwrap();
    }
    let many = fs.resolve("/many", false).unwrap().0 as u32;
    let mut img = fs.snapshot();
    drop(fs);
    let sb = nvmfs::layout::superblock::Superblock::decode(&img[..4096], 0).unwrap();
    let geo = sb.geo;
    let s = slot_of(&img, &geo, many, 0).unwrap();
    put_u64(&mut img, geo.slot_off(s), 1); // tombstone
    let before = check_pm(&Pm::from_bytes(&img));
    assert!(!before.is_clean());
    let pm = Pm::from_bytes(&img);
    let rep = repair_pm(&pm);
    assert_eq!(rep.exit_code(), EXIT_CORRECTED, "{:?}", rep.after.problems);
    let fs = Fs::mount_pm(pm, &MountOptions::default(), None, None).unwrap();
    let (tree, errors) = read_tree(&fs);
    assert!(errors.is_empty(), "{errors:?}");
    let lost: Vec<_> = tree
        .iter()
        .filter(|(p, _)| p.starts_with("/lost+found/#"))
        .collect();
    let kept = tree.keys().filter(|p| p.starts_with("/many/")).count();
    assert_eq!(
        lost.len() + kept,
        3000,
        "{} reconnected, {kept} kept",
        lost.len()
    );
    // Block 0 held the first 64 entries; it is replaced by an empty block and the other
    // blocks stay where they are.
    assert_eq!((lost.len(), kept), (64, 2936));
    for (_, n) in lost {
        assert!(n.data.starts_with(b"file "));
    }
}

/// Repairing an image a crash left (captured at every fence of a series of operations) does
/// what mount recovery does: exit 1, a clean image, and the same tree as a recovering mount,
/// with nothing sent to /lost+found.
#[test]
fn repair_of_crash_images_matches_mount_recovery() {
    use nvmfs::fsck::{check_pm, repair_pm};
    use nvmfs::media::Pm;
    use nvmfs::OpenOptions;

    let size = 4 << 20;
    let shadow = Arc::new(FenceShadow::new(size));
    let mut pm = Pm::in_memory(size as u64);
    pm.set_trace(Some(shadow.clone()));
    let fs = Fs::format_pm(pm).unwrap();
    fs.create_dir_all("/A/C").unwrap();
    fs.create_dir("/B").unwrap();
    fs.write_file("/foo", &[1u8; 5000]).unwrap();
    fs.write_file("/A/bar", b"bar").unwrap();
    shadow.set_capture(true);
    fs.write_file("/new", b"new file").unwrap();
    fs.create_dir("/A/C/D").unwrap();
    OpenOptions::new()
        .append(true)
        .open(&fs, "/foo")
        .unwrap()
        .write_all_at(&[2; 9000], 0)
        .unwrap();
    fs.hard_link("/foo", "/A/C/foo2").unwrap();
    fs.symlink_path("x".repeat(300), "/A/long").unwrap();
    fs.rename_path("/A/C", "/B/C").unwrap();
    fs.remove_file("/A/bar").unwrap();
    fs.remove_dir("/B/C/D").unwrap();
    {
        // Unlinked while open: an orphan in every image until the handle goes.
        let f = OpenOptions::new().read(true).open(&fs, "/new").unwrap();
        fs.remove_file("/new").unwrap();
        drop(f);
    }
    OpenOptions::new()
        .write(true)
        .open(&fs, "/foo")
        .unwrap()
        .set_len(100)
        .unwrap();
    shadow.set_capture(false);
    let images = shadow.take_images();
    assert!(images.len() > 30, "{} images", images.len());
    for (k, img) in images.iter().enumerate() {
        let recovered = Fs::mount_pm(Pm::from_bytes(img), &MountOptions::default(), None, None)
            .unwrap_or_else(|e| panic!("fence {k}: mount: {e}"));
        let (want, errors) = read_tree(&recovered);
        assert!(errors.is_empty(), "fence {k}: {errors:?}");
        let pm = Pm::from_bytes(img);
        let rep = repair_pm(&pm);
        assert_eq!(rep.exit_code(), EXIT_CORRECTED, "fence {k}: {rep:#?}");
        assert!(
            rep.before.is_clean(),
            "fence {k}: {:?}",
            rep.before.problems
        );
        let again = check_pm(&Pm::from_bytes(&pm.snapshot()));
        assert!(again.is_clean() && again.recovery.is_empty(), "fence {k}");
        let repaired = Fs::mount_pm(pm, &MountOptions::default(), None, None).unwrap();
        let (got, errors) = read_tree(&repaired);
        assert!(errors.is_empty(), "fence {k}: {errors:?}");
        assert_eq!(got, want, "fence {k}: repair and mount recovery differ");
    }
}

/// A repair interrupted at any fence leaves an image that another repair finishes: it ends
/// clean (exit 0 or 1), mounts and reads back.
#[test]
fn interrupted_repair_is_finished_by_another() {
    use nvmfs::fsck::{check_pm, repair_pm};
    use nvmfs::media::Pm;
    let known = known_image();
    let mut points = 0;
    for case in corpus().iter().filter(|c| c.repair == EXIT_CORRECTED) {
        let mut img = known.image.clone();
        (case.damage)(&known, &mut img);
        let shadow = Arc::new(FenceShadow::new(img.len()));
        let mut pm = Pm::in_memory(img.len() as u64);
        pm.set_trace(Some(shadow.clone()));
        pm.write(0, &img);
        shadow.set_capture(true);
        assert_eq!(repair_pm(&pm).exit_code(), EXIT_CORRECTED, "{}", case.name);
        let images = shadow.take_images();
        assert!(!images.is_empty(), "{}: no fence", case.name);
        for (k, cut) in images.iter().enumerate() {
            // Mounting the half-repaired image may be refused, never a panic.
            if let Ok(fs) = Fs::mount_pm(Pm::from_bytes(cut), &MountOptions::default(), None, None)
            {
                let _ = read_tree(&fs);
            }
            let pm = Pm::from_bytes(cut);
            let rep = repair_pm(&pm);
            assert!(
                rep.exit_code() <= EXIT_CORRECTED,
                "{} fence {k}: {:?}",
                case.name,
                rep.after.problems
            );
            let c = check_pm(&Pm::from_bytes(&pm.snapshot()));
            assert!(
                c.is_clean() && c.recovery.is_empty(),
                "{} fence {k}",
                case.name
            );
            let fs = Fs::mount_pm(pm, &MountOptions::default(), None, None).unwrap();
            let (_, errors) = read_tree(&fs);
            assert!(errors.is_empty(), "{} fence {k}: {errors:?}", case.name);
            points += 1;
        }
    }
    assert!(points > 100, "{points} interruption points");
}
