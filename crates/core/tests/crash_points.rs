//! Crash points: every fence inside an operation is a moment power could fail. A tracer keeps
//! a shadow copy of the region with every store applied and captures it at each fence (the
//! "everything written so far reached media" image). Each captured image must mount (running
//! recovery), pass fsck, and hold exactly the tree from before or after the operation.
//! (The full crash-image generator with in-flight subsets is the persistence tracer's job.)

use std::collections::BTreeMap;
use std::sync::Arc;

use nvmfs::fsck::check_pm;
use nvmfs::media::Pm;
use nvmfs::testing::FenceShadow;
use nvmfs::{FileType, Fs, MountOptions, OpenOptions, RenameFlags};

/// Name -> (type, size, hash of content or link target, link count, blocks).
type Tree = BTreeMap<String, (FileType, u64, u64, u32, u64)>;

fn hash(b: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

fn tree(fs: &Fs) -> Tree {
    let mut t = Tree::new();
    walk(fs, "", &mut t);
    t
}

fn walk(fs: &Fs, dir: &str, t: &mut Tree) {
    let here = if dir.is_empty() { "/" } else { dir };
    for e in fs.read_dir(here).unwrap() {
        let p = format!("{dir}/{}", String::from_utf8(e.name).unwrap());
        let md = fs.symlink_metadata(&p).unwrap();
        let body = match md.file_type {
            FileType::File => fs.read_file(&p).unwrap(),
            FileType::Symlink => fs
                .read_link(&p)
                .unwrap()
                .into_os_string()
                .into_encoded_bytes(),
            _ => Vec::new(),
        };
        t.insert(
            p.clone(),
            (md.file_type, md.size, hash(&body), md.nlink, md.blocks),
        );
        if md.file_type == FileType::Dir {
            walk(fs, &p, t);
        }
    }
}

fn populate(fs: &Fs) {
    fs.create_dir_all("/A/C").unwrap();
    fs.create_dir("/B").unwrap();
    fs.write_file("/foo", &[1u8; 5000]).unwrap();
    fs.write_file("/A/bar", b"bar").unwrap();
    fs.write_file("/sparse", b"").unwrap();
    OpenOptions::new()
        .write(true)
        .open(fs, "/sparse")
        .unwrap()
        .write_all_at(b"end", 40_000)
        .unwrap();
    fs.symlink_path("foo", "/ln").unwrap();
}

/// (name, untraced setup, the one traced operation).
type Op = (&'static str, fn(&Fs), fn(&Fs));

fn none(_: &Fs) {}

fn ops() -> Vec<Op> {
    vec![
        ("creat", none, |fs| fs.write_file("/new", b"").unwrap()),
        ("mkdir", none, |fs| fs.create_dir("/A/C/D").unwrap()),
        ("append", none, |fs| {
            OpenOptions::new()
                .append(true)
                .open(fs, "/foo")
                .unwrap()
                .write_all_at(&[2; 9000], 0)
                .unwrap()
        }),
        ("write-hole", none, |fs| {
            OpenOptions::new()
                .write(true)
                .open(fs, "/sparse")
                .unwrap()
                .write_all_at(&[3; 4096], 8192)
                .unwrap()
        }),
        ("truncate-down", none, |fs| {
            OpenOptions::new()
                .write(true)
                .open(fs, "/foo")
                .unwrap()
                .set_len(100)
                .unwrap()
        }),
        ("truncate-up", none, |fs| {
            OpenOptions::new()
                .write(true)
                .open(fs, "/foo")
                .unwrap()
                .set_len(70_000)
                .unwrap()
        }),
        ("falloc-keep", none, |fs| {
            let f = OpenOptions::new().write(true).open(fs, "/foo").unwrap();
            f.allocate(libc::FALLOC_FL_KEEP_SIZE, 0, 64 * 1024).unwrap()
        }),
        ("unlink", none, |fs| fs.remove_file("/A/bar").unwrap()),
        ("rmdir", none, |fs| fs.remove_dir("/B").unwrap()),
        ("overwrite", none, |fs| {
            OpenOptions::new()
                .write(true)
                .open(fs, "/A/bar")
                .unwrap()
                .write_all_at(b"BAR", 0)
                .unwrap()
        }),
        ("link", none, |fs| {
            fs.hard_link("/foo", "/A/C/foo2").unwrap()
        }),
        ("symlink-long", none, |fs| {
            fs.symlink_path("x".repeat(300), "/A/long").unwrap()
        }),
        ("rename-file", none, |fs| {
            fs.rename_path("/foo", "/A/C/foo").unwrap()
        }),
        ("rename-replace", none, |fs| {
            fs.rename_path("/A/bar", "/foo").unwrap()
        }),
        ("rename-dir", none, |fs| {
            fs.rename_path("/A/C", "/B/C").unwrap()
        }),
        ("rename-exchange", none, |fs| {
            fs.rename(
                1,
                b"A",
                1,
                b"B",
                RenameFlags {
                    exchange: true,
                    noreplace: false,
                },
            )
            .unwrap()
        }),
        (
            "create-new-block",
            |fs| {
                // Fill the first directory block of /B so the next entry needs a second block.
                for i in 0..64 {
                    fs.write_file(format!("/B/f{i:02}"), b"x").unwrap();
                }
            },
            |fs| {
                drop(
                    OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(fs, "/B/next")
                        .unwrap(),
                )
            },
        ),
        (
            "unlink-in-second-block",
            |fs| {
                for i in 0..66 {
                    fs.write_file(format!("/B/f{i:02}"), b"x").unwrap();
                }
            },
            |fs| fs.remove_file("/B/f65").unwrap(),
        ),
    ]
}

#[test]
fn every_fence_of_every_operation_recovers_to_before_or_after() {
    let size = 4 << 20;
    let mut checked = 0;
    for (name, setup, op) in ops() {
        let shadow = Arc::new(FenceShadow::new(size));
        let mut pm = Pm::in_memory(size as u64);
        pm.set_trace(Some(shadow.clone()));
        let fs = Fs::format_pm(pm).unwrap();
        populate(&fs);
        setup(&fs);
        let before = tree(&fs);
        shadow.set_capture(true);
        op(&fs);
        shadow.set_capture(false);
        let after = tree(&fs);
        assert_ne!(before, after, "{name} changed nothing");
        let images = shadow.take_images();
        assert!(!images.is_empty(), "{name}: no fence");
        for (k, img) in images.iter().enumerate() {
            let r = check_pm(&Pm::from_bytes(img));
            assert!(
                r.is_clean(),
                "{name}, fence {k}: fsck before mount: {:?}",
                r.problems
            );
            let crashed = Fs::mount_pm(Pm::from_bytes(img), &MountOptions::default(), None, None)
                .unwrap_or_else(|e| panic!("{name}, fence {k}: mount failed: {e}"));
            let t = tree(&crashed);
            assert!(
                t == before || t == after,
                "{name}, fence {k}: state is neither before nor after\n{t:#?}"
            );
            let r = check_pm(&Pm::from_bytes(&crashed.snapshot()));
            assert!(
                r.is_clean(),
                "{name}, fence {k}: fsck after recovery: {:?}",
                r.problems
            );
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} crash images");
}
