//! Races between resolving a name and acting on it, and between dropping the last reference
//! and freeing. Each test makes the racing operation happen inside the window through a
//! `hook` point, so it fails every run when the window is open, not once in a while.
//!
//! The name races all rely on inode numbers being reused at once: the pools hand out the
//! number freed last first (`alloc.rs`), so a file created right after an unlink gets the
//! unlinked file's number (each test asserts that it did, so a changed allocator cannot make
//! them pass vacuously). The new file's generation is one more than the old one's.

use std::cell::Cell;
use std::io;
use std::rc::Rc;

use super::{FormatOptions, Fs, Metadata, OpenOptions};
use crate::hook::{self, Point};

const OLD: &[u8] = b"old file";
const NEW: &[u8] = b"new file";

fn fresh() -> Fs {
    Fs::format_in_memory(&FormatOptions {
        size_bytes: 16 << 20,
        inode_count: None,
        ..Default::default()
    })
    .unwrap()
}

/// An image with `d/f` holding `OLD`: (fs, d, f).
fn with_dir_file() -> (Fs, Metadata, Metadata) {
    let fs = fresh();
    fs.create_dir("d").unwrap();
    fs.write_file("d/f", OLD).unwrap();
    let d = fs.metadata("d").unwrap();
    let f = fs.metadata("d/f").unwrap();
    (fs, d, f)
}

/// Runs `f` once, on this thread, when a name resolves to `ino`. The returned flag says
/// whether it ran (a test whose race never happened proves nothing).
fn on_resolving(ino: u64, f: impl FnOnce() + 'static) -> Rc<Cell<bool>> {
    let ran = Rc::new(Cell::new(false));
    let r = ran.clone();
    let mut f = Some(f);
    hook::set(move |p| {
        if p == (Point::Resolved { ino: ino as u32 }) {
            if let Some(f) = f.take() {
                f();
                r.set(true);
            }
        }
    });
    ran
}

/// Ends the race: the hook must have run.
fn finish(ran: Rc<Cell<bool>>) {
    hook::clear();
    assert!(ran.get(), "the racing operation never ran");
}

/// Removes `d/f` and `d`, then creates `e/f` holding `NEW`, which reuse their numbers.
fn replace_dir(fs: &Fs, d: &Metadata, f: &Metadata) {
    fs.remove_file("d/f").unwrap();
    fs.remove_dir("d").unwrap();
    fs.create_dir("e").unwrap();
    fs.write_file("e/f", NEW).unwrap();
    let (e, ef) = (fs.metadata("e").unwrap(), fs.metadata("e/f").unwrap());
    assert_eq!(
        (e.ino, ef.ino),
        (d.ino, f.ino),
        "numbers not reused: test is vacuous"
    );
    assert_ne!(ef.generation, f.generation);
}

fn is_enoent<T>(r: &io::Result<T>) -> bool {
    matches!(r, Err(e) if e.raw_os_error() == Some(libc::ENOENT))
}

/// The new file `e/f` still holds `NEW` with the mode it was created with.
fn assert_new_untouched(fs: &Fs) {
    assert_eq!(fs.read_file("e/f").unwrap(), NEW);
    assert_eq!(
        fs.metadata("e/f").unwrap().perm,
        0o644,
        "chmod reached the new file"
    );
}

#[test]
fn chmod_through_a_replaced_directory_reaches_no_new_file() {
    let (fs, d, f) = with_dir_file();
    let fs2 = fs.clone();
    let ran = on_resolving(d.ino, move || replace_dir(&fs2, &d, &f));
    let r = fs.set_permissions("d/f", 0o600);
    finish(ran);
    assert_new_untouched(&fs);
    assert!(is_enoent(&r), "{r:?}");
}

#[test]
fn open_through_a_replaced_directory_reaches_no_new_file() {
    let (fs, d, f) = with_dir_file();
    let fs2 = fs.clone();
    let ran = on_resolving(d.ino, move || replace_dir(&fs2, &d, &f));
    let r = OpenOptions::new().read(true).open(&fs, "d/f");
    finish(ran);
    if let Ok(h) = &r {
        let mut buf = vec![0; 16];
        let n = h.read_at(&mut buf, 0).unwrap();
        assert_ne!(&buf[..n], NEW, "open by path reached the new file");
    }
    assert!(is_enoent(&r), "{:?}", r.map(|h| h.ino()));
}

#[test]
fn open_through_a_symlink_reaches_no_new_file() {
    let (fs, d, f) = with_dir_file();
    fs.symlink_path("d/f", "s").unwrap();
    let fs2 = fs.clone();
    let ran = on_resolving(d.ino, move || replace_dir(&fs2, &d, &f));
    let r = OpenOptions::new().read(true).open(&fs, "s");
    finish(ran);
    if let Ok(h) = &r {
        let mut buf = vec![0; 16];
        let n = h.read_at(&mut buf, 0).unwrap();
        assert_ne!(
            &buf[..n],
            NEW,
            "open through a symlink reached the new file"
        );
    }
    assert!(is_enoent(&r), "{:?}", r.map(|h| h.ino()));
}

#[test]
fn hard_link_through_a_replaced_directory_links_no_new_file() {
    let (fs, d, f) = with_dir_file();
    let fs2 = fs.clone();
    let ran = on_resolving(d.ino, move || replace_dir(&fs2, &d, &f));
    let r = fs.hard_link("d/f", "g");
    finish(ran);
    assert!(is_enoent(&fs.metadata("g")), "link reached the new file");
    assert!(is_enoent(&r), "{r:?}");
    assert_eq!(fs.metadata("e/f").unwrap().nlink, 1);
}

#[test]
fn create_in_a_replaced_directory_lands_nowhere_else() {
    let (fs, d, f) = with_dir_file();
    let fs2 = fs.clone();
    let ran = on_resolving(d.ino, move || replace_dir(&fs2, &d, &f));
    let r = fs.write_file("d/x", b"x");
    finish(ran);
    assert!(
        is_enoent(&fs.metadata("e/x")),
        "create landed in the new directory"
    );
    assert!(is_enoent(&r), "{r:?}");
}

/// A file `f` holding `OLD` and a closure that replaces it by `g` holding `NEW`, which
/// reuses its number.
fn flat_replace(fs: &Fs) -> (Metadata, impl FnOnce() + 'static) {
    fs.write_file("f", OLD).unwrap();
    let f = fs.metadata("f").unwrap();
    let (fs, old) = (fs.clone(), f.clone());
    let replace = move || {
        fs.remove_file("f").unwrap();
        fs.write_file("g", NEW).unwrap();
        let g = fs.metadata("g").unwrap();
        assert_eq!(g.ino, old.ino, "not reused: test is vacuous");
    };
    (f, replace)
}

/// Unlink + create of a flat name between the lookup and the act.
#[test]
fn chmod_of_a_replaced_name_reaches_no_new_file() {
    let fs = fresh();
    let (f, replace) = flat_replace(&fs);
    let ran = on_resolving(f.ino, replace);
    let r = fs.set_permissions("f", 0o600);
    finish(ran);
    assert_eq!(
        fs.metadata("g").unwrap().perm,
        0o644,
        "chmod reached the new file"
    );
    assert!(is_enoent(&r), "{r:?}");
}

/// The inode API's lookup: name -> number, then the attributes of that number.
#[test]
fn lookup_of_a_replaced_name_returns_no_new_file() {
    let fs = fresh();
    let (f, replace) = flat_replace(&fs);
    let ran = on_resolving(f.ino, replace);
    let r = fs.lookup(super::ops::ROOT, b"f");
    finish(ran);
    if let Ok(m) = &r {
        assert_eq!(m.generation, f.generation, "lookup returned the new file");
    }
    assert!(is_enoent(&r), "{r:?}");
}

/// `release_ino` of the last reference to an unlinked inode, with `open_ino` of the same
/// number from another thread between dropping the reference and freeing: the opener must
/// either fail or keep a live inode, never hold a freed one.
#[test]
fn open_ino_racing_the_last_release_never_pins_a_freed_inode() {
    let fs = fresh();
    fs.write_file("f", OLD).unwrap();
    let ino = fs.metadata("f").unwrap().ino;
    fs.open_ino(ino).unwrap();
    fs.remove_file("f").unwrap();
    let (released_tx, released_rx) = std::sync::mpsc::channel();
    let (opened_tx, opened_rx) = std::sync::mpsc::channel::<()>();
    let opener = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            released_rx.recv().unwrap();
            let r = fs.open_ino(ino);
            let _ = opened_tx.send(());
            r
        })
    };
    let waited = Rc::new(Cell::new(false));
    let w = waited.clone();
    hook::set(move |p| {
        if p == (Point::Released { ino: ino as u32 }) {
            released_tx.send(()).unwrap();
            // Long enough for the opener to finish unless a lock makes it wait for us.
            let _ = opened_rx.recv_timeout(std::time::Duration::from_millis(300));
            w.set(true);
        }
    });
    fs.release_ino(ino).unwrap();
    hook::clear();
    assert!(waited.get(), "the hook point was not reached");
    match opener.join().unwrap() {
        Ok(()) => {
            let m = fs.getattr(ino);
            assert!(m.is_ok(), "open_ino holds a freed inode: {m:?}");
            fs.release_ino(ino).unwrap();
        }
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT)),
    }
}

/// A panic after an extending write published its new blocks and before it stored the size
/// that covers them must not leave them mapped: a clean unmount would then write an image
/// holding strays (they are swept only after a crash), and a later write of the same block
/// would claim a second slot for the same key.
#[test]
fn panic_mid_write_leaves_no_stray_block() {
    let fs = fresh();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&fs, "f")
        .unwrap();
    f.write_all_at(OLD, 0).unwrap();
    let free_before = fs.statfs().blocks_free;
    hook::set(|p| {
        if p == Point::Published {
            panic!("injected panic after publishing");
        }
    });
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.write_at(NEW, 3 * 4096)));
    hook::clear();
    assert!(r.is_err(), "the hook did not run");
    let inner = &fs.inner;
    assert_eq!(f.metadata().unwrap().size, OLD.len() as u64);
    assert_eq!(
        inner.map.lookup(&inner.pm, f.ino() as u32, 3),
        None,
        "stray left mapped"
    );
    assert_eq!(fs.statfs().blocks_free, free_before);
}

/// A formatted 16 MiB image file (unmounted) in a fresh directory.
fn image_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    Fs::format(
        &path,
        &FormatOptions {
            size_bytes: 16 << 20,
            inode_count: None,
            ..Default::default()
        },
    )
    .unwrap();
    (dir, path)
}

/// While `fsck -n` or `info` reads an unmounted image, a format (which truncates the file
/// first) must be refused: it takes the image's exclusive lock, which they now hold off.
#[test]
fn fsck_and_info_hold_off_a_format_while_they_read() {
    let (_dir, path) = image_file();
    type Reader = fn(&std::path::Path) -> bool;
    let readers: [(&str, Reader); 2] = [
        ("fsck -n", |p| {
            crate::fsck::check_image(p).unwrap().is_clean()
        }),
        ("info", |p| crate::info::inspect(p).unwrap().clean),
    ];
    for (name, read) in readers {
        let could_format = Rc::new(Cell::new(None));
        let (c, p) = (could_format.clone(), path.clone());
        hook::set(move |pt| {
            if pt == Point::ViewTaken {
                // Exactly what `Fs::format` does before it truncates.
                let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                c.set(Some(super::mount::lock_image(&f, &p, true).is_ok()));
            }
        });
        let clean = read(&path);
        hook::clear();
        assert_eq!(
            could_format.get(),
            Some(false),
            "{name}: a format could truncate the image"
        );
        assert!(clean, "{name}");
    }
}

/// While a read-write mount holds the image, `fsck -n` and `info` read a copy: the file
/// shrinking under them (a format after the mount ends) cannot fault them or change what
/// they read.
#[test]
fn fsck_and_info_of_a_mounted_image_survive_its_truncation() {
    let (_dir, path) = image_file();
    let fs = Fs::mount(&path, &Default::default()).unwrap();
    fs.write_file("f", OLD).unwrap();
    type Reader = fn(&std::path::Path) -> u64;
    let readers: [(&str, Reader); 2] = [
        ("fsck -n", |p| {
            crate::fsck::check_image(p).unwrap().inodes_in_use
        }),
        ("info", |p| crate::info::inspect(p).unwrap().inodes_used),
    ];
    for (name, read) in readers {
        let bytes = std::fs::read(&path).unwrap();
        let p = path.clone();
        hook::set(move |pt| {
            if pt == Point::ViewTaken {
                let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.set_len(0).unwrap();
            }
        });
        let inodes = read(&path);
        hook::clear();
        assert_eq!(inodes, 2, "{name}: root and f");
        std::fs::write(&path, &bytes).unwrap();
    }
    fs.unmount().unwrap();
}

/// A lookup in `a` holds `a`'s index and is about to search it while an unlink of `a/x` has
/// committed and waits for that index to apply its removal. That wait does not stop an
/// rmdir of the now empty `a` from another thread, nor a new `b` taking `a`'s number and
/// blocks, with an entry `x` where `a/x` was. The lookup must not return `b/x`. (Here `d`,
/// `d/f`, `e`, `e/f`.)
#[test]
fn lookup_in_a_directory_removed_under_it_reaches_no_new_file() {
    let (fs, d, f) = with_dir_file();
    let (fs2, d_ino) = (fs.clone(), d.ino);
    let unlinker = Rc::new(Cell::new(None));
    let u = unlinker.clone();
    let mut armed = true;
    hook::set(move |p| {
        if p != (Point::Looking { dir: d_ino as u32 }) || !std::mem::take(&mut armed) {
            return;
        }
        let fs3 = fs2.clone();
        u.set(Some(std::thread::spawn(move || fs3.remove_file("d/f"))));
        // The unlink's transaction is in once the link count is 0 (it then waits for us).
        while fs2.getattr(f.ino).is_ok_and(|m| m.nlink > 0) {
            std::thread::yield_now();
        }
        fs2.remove_dir("d").unwrap();
        fs2.create_dir("e").unwrap();
        fs2.write_file("e/f", NEW).unwrap();
        assert_eq!(
            fs2.metadata("e").unwrap().ino,
            d_ino,
            "not reused: test is vacuous"
        );
    });
    let r = fs.set_permissions("d/f", 0o600);
    hook::clear();
    let unlinker = unlinker.take().expect("the hook did not run");
    unlinker.join().unwrap().unwrap();
    assert_new_untouched(&fs);
    assert!(is_enoent(&r), "{r:?}");
}
